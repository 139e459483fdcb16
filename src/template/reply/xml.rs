//! The families whose calls are tags around key-value pairs, read as vLLM 0.32's grammars read
//! them (`parser/qwen3.py`, `glm47_moe.py`, `minimax_m2.py`, `deepseek_v32.py`):
//! - a marker is never escaped: a closing tag written inside a value ends the value or the call
//!   there, as it does in vLLM;
//! - a call the completion ends inside is still a call, with the parameters that closed before
//!   the cut (the unterminated last one is dropped);
//! - values are the text between the tags (Qwen3 trims one line break each side; GLM,
//!   MiniMax and DSML keep it verbatim), typed later by the schema.
use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;

use super::{RawArgs, RawCall, Scan};

static QWEN3_PARAM: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?s)<\s*parameter\s*=\s*([^>]*)>(.*?)(?:<\s*/\s*parameter\s*>|(<\s*parameter\s*=))",
    )
    .expect("a valid pattern")
});
static GLM_PAIR: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?s)<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>")
        .expect("a valid pattern")
});
static MINIMAX_PARAM: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r#"(?s)<parameter\s+name\s*=\s*(?:"([^"]*)"|'([^']*)'|([^>\s]*))\s*>(.*?)</parameter>"#,
    )
    .expect("a valid pattern")
});
static DSML_PARAM: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r#"(?s)<｜DSML｜parameter\s+name="([^"]*)"(?:\s+string="([^"]*)")?\s*>(.*?)</｜DSML｜parameter>"#,
    )
    .expect("a valid pattern")
});
static INVOKE_NAME: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"^\s*=?\s*(?:"([^"]*)"|'([^']*)'|([^>\s"']*))\s*>"#).expect("a valid pattern")
});

/// Qwen3-Coder / Qwen3.5: `<tool_call>\n<function=NAME>\n<parameter=K>\nV\n</parameter>\n
/// </function>\n</tool_call>`; a `<function=` without its `<tool_call>` opens a call too.
pub fn qwen3(text: &str) -> Scan {
    let mut scan = Scan::default();
    let mut pos = 0;
    loop {
        let Some(rel) = next_qwen3_call(&text[pos..]) else {
            push_content(&mut scan, &text[pos..]);
            break;
        };
        let at = pos + rel;
        push_content(&mut scan, &text[pos..at]);
        let mut cursor = at;
        if text[cursor..].starts_with("<tool_call>") {
            cursor += "<tool_call>".len();
            let body = &text[cursor..];
            let func = body.find("<function=");
            let end = body.find("</tool_call>");
            match (func, end) {
                (Some(f), None) => cursor += f,
                (Some(f), Some(e)) if f < e => cursor += f,
                (_, Some(e)) => {
                    // An empty block: no call (vLLM drops a call without a name).
                    pos = cursor + e + "</tool_call>".len();
                    continue;
                }
                (None, None) => {
                    scan.broken.push((
                        at,
                        "`<tool_call>` with no `<function=NAME>` before the end".into(),
                    ));
                    break;
                }
            }
        }
        cursor += "<function=".len();
        let Some(gt) = text[cursor..].find('>') else {
            // Cut off inside the name: vLLM's engine still returns the call, named by what
            // was written, with no arguments (as GLM's cut name is read).
            let name = text[cursor..].trim().to_string();
            push_call(&mut scan, name, None, RawArgs::Pairs(Vec::new()), at, true);
            break;
        };
        let name = text[cursor..cursor + gt].trim().to_string();
        cursor += gt + 1;
        let (body, cut, after) = until(text, cursor, "</function>");
        let mut pairs = Vec::new();
        let mut from = 0;
        while let Some(c) = QWEN3_PARAM.captures_at(body, from) {
            let whole = c.get(0).expect("a match");
            let value = c.get(2).map_or("", |m| m.as_str());
            pairs.push((
                c[1].trim().to_string(),
                Value::String(trim_one_newline(value)),
            ));
            // A parameter closed by the next one's opening: that opening starts the next match.
            from = c.get(3).map_or(whole.end(), |m| m.start());
        }
        push_call(&mut scan, name, None, RawArgs::Pairs(pairs), at, cut);
        pos = after;
        if !cut {
            // Between `</function>` and `</tool_call>` vLLM's grammar is in no state that
            // keeps text: a value's stray remainder there is dropped, not content.
            let close = text[pos..].find("</tool_call>");
            let next = next_qwen3_call(&text[pos..]);
            if let Some(c) = close.filter(|c| next.is_none_or(|n| *c < n)) {
                pos += c + "</tool_call>".len();
            }
        }
    }
    scan
}

/// Where the next call opens: at `<tool_call>`, or a `<function=` written without it.
fn next_qwen3_call(text: &str) -> Option<usize> {
    [text.find("<tool_call>"), text.find("<function=")]
        .into_iter()
        .flatten()
        .min()
}

/// GLM-4.5 to 4.7: `<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value></tool_call>`,
/// with or without line breaks between the parts.
pub fn glm(text: &str) -> Scan {
    blocks(
        text,
        "<tool_call>",
        "</tool_call>",
        |body, at, cut, scan| {
            let name_end = body.find("<arg_key>").unwrap_or(body.len());
            let name = body[..name_end].trim().to_string();
            let pairs = GLM_PAIR
                .captures_iter(body)
                .map(|c| (c[1].trim().to_string(), Value::String(c[2].to_string())))
                .collect();
            if name.is_empty() {
                scan.broken
                    .push((at, "a `<tool_call>` with no function name".into()));
                return;
            }
            push_call(scan, name, None, RawArgs::Pairs(pairs), at, cut);
        },
    )
}

/// MiniMax-M2: `<minimax:tool_call>` holding one `<invoke name="NAME">…</invoke>` per call.
pub fn minimax(text: &str) -> Scan {
    invokes(
        text,
        Invoke {
            open: "<minimax:tool_call>",
            close: "</minimax:tool_call>",
            invoke: "<invoke name",
            invoke_end: "</invoke>",
            params: &MINIMAX_PARAM,
        },
    )
}

/// DeepSeek-V3.2 (`function_calls`) and V4 (`tool_calls`) DSML: `<｜DSML｜invoke name="NAME">`
/// with `<｜DSML｜parameter name="K" string="true|false">V</｜DSML｜parameter>`.
pub fn dsml(text: &str) -> Scan {
    let open = if text.contains("<｜DSML｜tool_calls>") {
        "<｜DSML｜tool_calls>"
    } else {
        "<｜DSML｜function_calls>"
    };
    let close = if open.contains("tool_calls") {
        "</｜DSML｜tool_calls>"
    } else {
        "</｜DSML｜function_calls>"
    };
    invokes(
        text,
        Invoke {
            open,
            close,
            invoke: "<｜DSML｜invoke name",
            invoke_end: "</｜DSML｜invoke>",
            params: &DSML_PARAM,
        },
    )
}

struct Invoke<'a> {
    open: &'a str,
    close: &'a str,
    invoke: &'a str,
    invoke_end: &'a str,
    params: &'a Regex,
}

fn invokes(text: &str, f: Invoke) -> Scan {
    let dsml = f.invoke.contains("DSML");
    blocks(text, f.open, f.close, |section, at, cut, scan| {
        let mut pos = 0;
        while let Some(rel) = section[pos..].find(f.invoke) {
            let start = pos + rel + f.invoke.len();
            let Some(name) = INVOKE_NAME.captures(&section[start..]) else {
                scan.broken
                    .push((at + pos + rel, "an invoke whose name does not read".into()));
                break;
            };
            let header = name.get(0).expect("a match").end();
            let name_text = (1..=3).find_map(|i| name.get(i)).map_or("", |m| m.as_str());
            let (body, call_cut, after) = until(section, start + header, f.invoke_end);
            let pairs = f
                .params
                .captures_iter(body)
                .map(|c| {
                    if dsml {
                        dsml_pair(&c)
                    } else {
                        let key = (1..=3).find_map(|i| c.get(i)).map_or("", |m| m.as_str());
                        (key.to_string(), Value::String(c[4].to_string()))
                    }
                })
                .collect();
            let args = if dsml { unwrap_wrapper(pairs) } else { pairs };
            push_call(
                scan,
                name_text.to_string(),
                None,
                RawArgs::Pairs(args),
                at + pos + rel,
                cut && call_cut,
            );
            pos = after;
        }
    })
}

/// `string="true"`: the text verbatim; else JSON where it reads (a missing attribute too).
fn dsml_pair(c: &regex::Captures) -> (String, Value) {
    let raw = &c[3];
    let value = match c.get(2).map(|m| m.as_str()) {
        Some("true") => Value::String(raw.to_string()),
        _ => serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_string())),
    };
    (c[1].to_string(), value)
}

/// DeepSeek V3.2/V4 models sometimes wrap all arguments in one `arguments` or `input` object:
/// vLLM unwraps it (`deepseek_v4.py` `_unwrap_wrapper_args`).
fn unwrap_wrapper(pairs: Vec<(String, Value)>) -> Vec<(String, Value)> {
    match pairs.as_slice() {
        [(k, Value::Object(inner))] if k == "arguments" || k == "input" => {
            inner.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
        }
        _ => pairs,
    }
}

/// Each `open … close` block, the text outside them as content; a block the text ends inside
/// is read as far as it goes, marked cut.
fn blocks(
    text: &str,
    open: &str,
    close: &str,
    mut read: impl FnMut(&str, usize, bool, &mut Scan),
) -> Scan {
    let mut scan = Scan::default();
    let mut pos = 0;
    while let Some(rel) = text[pos..].find(open) {
        let at = pos + rel;
        push_content(&mut scan, &text[pos..at]);
        let (body, cut, after) = until(text, at + open.len(), close);
        read(body, at, cut, &mut scan);
        pos = after;
    }
    push_content(&mut scan, &text[pos..]);
    scan
}

/// The text from `from` up to `end` (exclusive), whether it ran out first, and where reading
/// goes on.
pub(super) fn until<'a>(text: &'a str, from: usize, end: &str) -> (&'a str, bool, usize) {
    match text[from..].find(end) {
        Some(rel) => (&text[from..from + rel], false, from + rel + end.len()),
        None => (&text[from..], true, text.len()),
    }
}

/// Text outside calls: content before the first call; after one it is dropped, as every
/// reference parser drops it.
pub(super) fn push_content(scan: &mut Scan, text: &str) {
    if scan.calls.is_empty() && scan.broken.is_empty() {
        scan.before.push_str(text);
    }
}

pub(super) fn push_call(
    scan: &mut Scan,
    name: String,
    id: Option<String>,
    args: RawArgs,
    at: usize,
    cut: bool,
) {
    if name.is_empty() {
        scan.broken
            .push((at, "a call with an empty function name".into()));
        return;
    }
    scan.calls.push(RawCall {
        name,
        id,
        args,
        at,
        cut,
    });
}

fn trim_one_newline(v: &str) -> String {
    let v = v.strip_prefix('\n').unwrap_or(v);
    v.strip_suffix('\n').unwrap_or(v).to_string()
}
