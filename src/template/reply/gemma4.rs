//! Gemma 4: `<|tool_call>call:NAME{key:value,…}<tool_call|>`. Strings are written between
//! `<|"|>` delimiters (no escapes: a string ends at the next delimiter), objects and arrays in
//! braces and brackets with bare keys, and every other value bare (`42`, `true`, `null`), as
//! the official template's `format_argument` writes them.
//!
//! A bare value is typed as the format writes it (`42` a number, `true` a boolean), the way
//! llama.cpp and vLLM before 0.24 read it. vLLM 0.24 to 0.32's engine parser returns bare values
//! as strings and relies on the schema to retype them (vllm#47906, open): where the schema is
//! silent it returns `"42"`, which is a server bug this reading does not copy.
use serde_json::{Map, Value};

use super::xml::{push_call, push_content};
use super::{RawArgs, Scan};

const OPEN: &str = "<|tool_call>";
const DELIM: &str = "<|\"|>";

pub fn scan(text: &str) -> Scan {
    let mut scan = Scan::default();
    let mut pos = 0;
    while let Some(rel) = text[pos..].find(OPEN) {
        let at = pos + rel;
        push_content(&mut scan, &text[pos..at]);
        let head = at + OPEN.len();
        let Some(brace_rel) = text[head..].find(['{', '(']) else {
            scan.broken.push((
                at,
                "a `<|tool_call>` with no `{` opening its arguments".into(),
            ));
            pos = text.len();
            break;
        };
        let name = text[head..head + brace_rel].trim();
        let name = name.strip_prefix("call").unwrap_or(name);
        let name = name.strip_prefix(':').unwrap_or(name).trim().to_string();
        let args_start = head + brace_rel + 1;
        let (end, closed) = matching(text, args_start, text.as_bytes()[head + brace_rel]);
        let args = object(&text[args_start..end]);
        push_call(&mut scan, name, None, RawArgs::Pairs(args), at, !closed);
        pos = if closed { end + 1 } else { text.len() };
        for close in ["<tool_call|>", "<turn|>"] {
            if text[pos..].starts_with(close) {
                pos += close.len();
                break;
            }
        }
    }
    push_content(&mut scan, &text[pos..]);
    scan
}

/// Where the bracket opened just before `from` closes (skipping strings), and whether it does.
fn matching(text: &str, from: usize, open: u8) -> (usize, bool) {
    let close = match open {
        b'(' => b')',
        b'[' => b']',
        _ => b'}',
    };
    let mut depth = 1;
    let mut i = from;
    let bytes = text.as_bytes();
    while i < bytes.len() {
        if text[i..].starts_with(DELIM) {
            i += DELIM.len();
            i = text[i..]
                .find(DELIM)
                .map_or(bytes.len(), |r| i + r + DELIM.len());
            continue;
        }
        if bytes[i] == open {
            depth += 1;
        } else if bytes[i] == close {
            depth -= 1;
            if depth == 0 {
                return (i, true);
            }
        }
        i += 1;
    }
    (bytes.len(), false)
}

/// `key:value,…` (the inside of braces).
fn object(s: &str) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < s.len() {
        i = past_separators(s, i);
        if i >= s.len() {
            break;
        }
        let Some(colon) = key_end(&s[i..]) else { break };
        let key = s[i..i + colon].trim();
        let key = key
            .strip_prefix(DELIM)
            .and_then(|k| k.strip_suffix(DELIM))
            .unwrap_or(key)
            .to_string();
        i += colon + 1;
        let (value, used) = value(&s[i..]);
        out.push((key, value));
        i += used;
    }
    out
}

/// The `:` ending a key (a key in delimiters may hold one).
fn key_end(s: &str) -> Option<usize> {
    if let Some(rest) = s.strip_prefix(DELIM) {
        let close = rest.find(DELIM)? + 2 * DELIM.len();
        return s[close..].find(':').map(|c| close + c);
    }
    s.find(':')
}

/// One value at the start of `s` and the bytes it used.
fn value(s: &str) -> (Value, usize) {
    let lead = s.len() - s.trim_start_matches([' ', '\n', '\t']).len();
    let t = &s[lead..];
    if let Some(rest) = t.strip_prefix(DELIM) {
        return match rest.find(DELIM) {
            Some(end) => (
                Value::String(rest[..end].to_string()),
                lead + DELIM.len() * 2 + end,
            ),
            None => (Value::String(rest.to_string()), s.len()),
        };
    }
    match t.as_bytes().first() {
        Some(&b) if b == b'{' || b == b'[' => {
            let (end, closed) = matching(t, 1, b);
            let inner = &t[1..end];
            let v = if b == b'{' {
                Value::Object(object(inner).into_iter().collect::<Map<_, _>>())
            } else {
                Value::Array(array(inner))
            };
            (v, lead + if closed { end + 1 } else { t.len() })
        }
        _ => {
            let end = t.find([',', '}', ']']).unwrap_or(t.len());
            (bare(t[..end].trim()), lead + end)
        }
    }
}

/// Where the next entry starts: past the commas and blanks between entries.
fn past_separators(s: &str, i: usize) -> usize {
    s.len() - s[i..].trim_start_matches([' ', ',', '\n', '\t']).len()
}

fn array(s: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < s.len() {
        i = past_separators(s, i);
        if i >= s.len() {
            break;
        }
        let (v, used) = value(&s[i..]);
        out.push(v);
        i += used.max(1);
    }
    out
}

/// A bare value as the format writes it: `true`, `false`, `null`, a number, else text.
fn bare(raw: &str) -> Value {
    match raw {
        "true" => Value::Bool(true),
        "false" => Value::Bool(false),
        "null" | "None" => Value::Null,
        // A number, or a string the model quoted JSON's way instead of with the delimiter.
        _ => match serde_json::from_str::<Value>(raw) {
            Ok(v @ (Value::Number(_) | Value::String(_))) => v,
            _ => Value::String(raw.to_string()),
        },
    }
}
