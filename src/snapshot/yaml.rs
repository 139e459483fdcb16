//! The small YAML subset of a snapshot header.
//!
//! insta's header is YAML, and `cargo insta accept` rewrites it with insta's own emitter (block
//! mappings, `- item` sequences, plain or double-quoted scalars, `[]`/`{}` for empty
//! collections). No YAML crate is in the dependency tree, and the header is a handful of
//! lines, so this module renders and reads exactly that subset: block mappings and sequences,
//! JSON-compatible double-quoted strings, JSON flow collections, single-quoted and plain
//! scalars. Anything else (anchors, literal blocks, multi-document) is reported with its line.
use serde_json::{Map, Number, Value};

/// A parse problem: the 0-based line within the parsed text, and what is wrong.
#[derive(Debug, Clone, PartialEq)]
pub struct YamlError {
    pub line: usize,
    pub message: String,
}

/// Render a mapping as block YAML (two-space indent), one `key: value` a line.
pub fn render_mapping(map: &Map<String, Value>, indent: usize, out: &mut String) {
    let pad = " ".repeat(indent);
    for (key, value) in map {
        let key = render_scalar_str(key);
        match value {
            Value::Object(m) if !m.is_empty() => {
                out.push_str(&format!("{pad}{key}:\n"));
                render_mapping(m, indent + 2, out);
            }
            Value::Array(items) if !items.is_empty() => {
                out.push_str(&format!("{pad}{key}:\n"));
                for item in items {
                    out.push_str(&format!("{pad}  - {}\n", render_flow(item)));
                }
            }
            other => out.push_str(&format!("{pad}{key}: {}\n", render_flow(other))),
        }
    }
}

/// A value on one line: scalars plain or JSON-quoted, collections as JSON flow (valid YAML).
pub fn render_flow(value: &Value) -> String {
    match value {
        Value::String(s) => render_scalar_str(s),
        other => other.to_string(),
    }
}

/// A string plain when YAML reads it back as the same string, else JSON double-quoted.
fn render_scalar_str(s: &str) -> String {
    if is_plain_safe(s) {
        s.to_string()
    } else {
        Value::String(s.to_string()).to_string()
    }
}

/// Conservative: letters, digits and a few punctuation marks, not a YAML keyword or number.
fn is_plain_safe(s: &str) -> bool {
    let first_ok = s
        .chars()
        .next()
        .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '/');
    first_ok
        && !s.ends_with(' ')
        && s.chars()
            .all(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '.' | '/' | ' ' | '+'))
        && !matches!(
            s.to_ascii_lowercase().as_str(),
            "yes" | "no" | "true" | "false" | "on" | "off" | "null" | "y" | "n"
        )
        && s.parse::<f64>().is_err()
        && !s.starts_with("0x")
}

/// One non-blank line: its indent, its text after the indent, and its 0-based line number.
#[derive(Debug, Clone)]
struct Line<'a> {
    indent: usize,
    text: &'a str,
    no: usize,
}

/// Parse block YAML into a JSON value (a mapping at the top level).
pub fn parse(text: &str) -> Result<Value, YamlError> {
    let mut lines: Vec<Line> = Vec::new();
    for (no, raw) in text.lines().enumerate() {
        let trimmed = raw.trim_end();
        if trimmed.trim_start().is_empty() || trimmed.trim_start().starts_with('#') {
            continue;
        }
        if raw.starts_with('\t') {
            return Err(err(no, "tabs are not allowed for indentation in YAML"));
        }
        let indent = trimmed.len() - trimmed.trim_start().len();
        lines.push(Line {
            indent,
            text: trimmed.trim_start(),
            no,
        });
    }
    if lines.is_empty() {
        return Ok(Value::Object(Map::new()));
    }
    let mut pos = 0;
    let indent = lines[0].indent;
    let value = parse_block(&mut lines, &mut pos, indent)?;
    if let Some(extra) = lines.get(pos) {
        return Err(err(extra.no, "unexpected indentation"));
    }
    Ok(value)
}

fn err(line: usize, message: impl Into<String>) -> YamlError {
    YamlError {
        line,
        message: message.into(),
    }
}

fn is_seq_item(text: &str) -> bool {
    text == "-" || text.starts_with("- ")
}

/// A mapping or a sequence whose lines sit at exactly `indent`.
fn parse_block(lines: &mut [Line], pos: &mut usize, indent: usize) -> Result<Value, YamlError> {
    if is_seq_item(lines[*pos].text) {
        parse_seq(lines, pos, indent)
    } else {
        parse_map(lines, pos, indent)
    }
}

fn parse_map(lines: &mut [Line], pos: &mut usize, indent: usize) -> Result<Value, YamlError> {
    let mut map = Map::new();
    while let Some(line) = lines.get(*pos).cloned() {
        if line.indent < indent || (line.indent == indent && is_seq_item(line.text)) {
            break;
        }
        if line.indent > indent {
            return Err(err(line.no, "unexpected indentation"));
        }
        let (key, rest) = split_key(line.text).ok_or_else(|| {
            err(
                line.no,
                format!("expected `key: value`, found {:?}", line.text),
            )
        })?;
        *pos += 1;
        let value = if rest.is_empty() {
            parse_child(lines, pos, indent)?
        } else {
            parse_scalar(rest).map_err(|m| err(line.no, m))?
        };
        if map.insert(key.clone(), value).is_some() {
            return Err(err(line.no, format!("key {key:?} appears twice")));
        }
    }
    Ok(Value::Object(map))
}

/// The value of `key:` with nothing after the colon: a deeper block, a sequence at the same
/// indent (YAML allows `key:\n- a`), or null.
fn parse_child(lines: &mut [Line], pos: &mut usize, indent: usize) -> Result<Value, YamlError> {
    match lines.get(*pos) {
        Some(next) if next.indent > indent => {
            let child = next.indent;
            parse_block(lines, pos, child)
        }
        Some(next) if next.indent == indent && is_seq_item(next.text) => {
            parse_seq(lines, pos, indent)
        }
        _ => Ok(Value::Null),
    }
}

fn parse_seq(lines: &mut [Line], pos: &mut usize, indent: usize) -> Result<Value, YamlError> {
    let mut items = Vec::new();
    while let Some(line) = lines.get(*pos).cloned() {
        if line.indent != indent || !is_seq_item(line.text) {
            if line.indent > indent {
                return Err(err(line.no, "unexpected indentation"));
            }
            break;
        }
        let rest = line.text[1..].trim_start();
        if rest.is_empty() {
            *pos += 1;
            items.push(parse_child(lines, pos, indent)?);
        } else if split_key(rest).is_some() || is_seq_item(rest) {
            // `- key: value` opens a mapping (or `- - x` a sequence) whose column is the
            // item's text: re-read this line as if it started there.
            let column = indent + (line.text.len() - rest.len());
            lines[*pos] = Line {
                indent: column,
                text: rest,
                no: line.no,
            };
            items.push(parse_block(lines, pos, column)?);
        } else {
            *pos += 1;
            items.push(parse_scalar(rest).map_err(|m| err(line.no, m))?);
        }
    }
    Ok(Value::Array(items))
}

/// `key: rest` or `key:` → (key, rest). Keys are plain or double-quoted.
fn split_key(text: &str) -> Option<(String, &str)> {
    if text.starts_with('"') {
        let mut stream = serde_json::Deserializer::from_str(text).into_iter::<String>();
        let key = stream.next()?.ok()?;
        let after = &text[stream.byte_offset()..];
        let rest = after.strip_prefix(':')?;
        if !(rest.is_empty() || rest.starts_with(' ')) {
            return None;
        }
        return Some((key, rest.trim()));
    }
    if text.starts_with(['[', '{', '\'']) {
        return None;
    }
    let (key, rest) = match text.find(": ") {
        Some(i) => (&text[..i], &text[i + 2..]),
        None => (text.strip_suffix(':')?, ""),
    };
    if key.is_empty() || key.contains(": ") {
        return None;
    }
    Some((key.trim_end().to_string(), rest.trim()))
}

/// One scalar or flow collection.
fn parse_scalar(text: &str) -> Result<Value, String> {
    let text = text.trim();
    match text {
        "" | "~" | "null" | "Null" | "NULL" => return Ok(Value::Null),
        "true" | "True" | "TRUE" => return Ok(Value::Bool(true)),
        "false" | "False" | "FALSE" => return Ok(Value::Bool(false)),
        _ => {}
    }
    if text.starts_with(['"', '[', '{']) {
        return serde_json::from_str(text)
            .map_err(|e| format!("cannot read {text:?} (only JSON-compatible quoting and flow collections are supported): {e}"));
    }
    if let Some(inner) = text.strip_prefix('\'') {
        let inner = inner
            .strip_suffix('\'')
            .ok_or_else(|| format!("unterminated single-quoted string {text:?}"))?;
        return Ok(Value::String(inner.replace("''", "'")));
    }
    if text.starts_with(['|', '>', '&', '*', '!']) {
        return Err(format!(
            "unsupported YAML construct {text:?} (block scalars, anchors and tags are not read)"
        ));
    }
    if let Ok(i) = text.parse::<i64>() {
        return Ok(Value::Number(i.into()));
    }
    if let Ok(u) = text.parse::<u64>() {
        return Ok(Value::Number(u.into()));
    }
    if let Some(n) = text.parse::<f64>().ok().and_then(Number::from_f64) {
        return Ok(Value::Number(n));
    }
    Ok(Value::String(text.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn round_trip(v: Value) {
        let mut out = String::new();
        render_mapping(v.as_object().unwrap(), 0, &mut out);
        assert_eq!(parse(&out).unwrap(), v, "rendered:\n{out}");
    }

    #[test]
    fn renders_and_reads_back_nested_values() {
        round_trip(json!({
            "suite": "example",
            "prompt": "capital-1",
            "target": "http://127.0.0.1:8000/v1",
            "weird": " leading space: and # hash",
            "quote": "say \"hi\"\n",
            "numbers": {"temperature": 0.0, "seed": 42, "neg": -1.5},
            "stop": ["\n", "User:", "true"],
            "empty_list": [],
            "empty_map": {},
            "none": null,
            "comparator": {"json-schema": {"type": "object", "required": ["a"], "properties": {"a": {"type": "string"}}}},
            "yes": "yes",
            "num_string": "12",
        }));
    }

    #[test]
    fn reads_insta_emitter_style() {
        // What insta's emitter writes after `cargo insta accept`.
        let text = "source: suites/x.toml\nexpression: capital\ninfo:\n  comparator:\n    similarity: 0.9\n  settings:\n    stop:\n      - \"\\n\"\n      - User\n    temperature: 0\n  list_of_maps:\n    - a: 1\n      b: two\n    - c: 3\n  same_indent_seq:\n  - x\n  - 'it''s'\n";
        let v = parse(text).unwrap();
        assert_eq!(v["source"], "suites/x.toml");
        assert_eq!(v["info"]["comparator"]["similarity"], 0.9);
        assert_eq!(v["info"]["settings"]["stop"], json!(["\n", "User"]));
        assert_eq!(v["info"]["settings"]["temperature"], 0);
        assert_eq!(
            v["info"]["list_of_maps"],
            json!([{"a": 1, "b": "two"}, {"c": 3}])
        );
        assert_eq!(v["info"]["same_indent_seq"], json!(["x", "it's"]));
    }

    #[test]
    fn names_the_line_of_a_problem() {
        let e = parse("source: a\n  bad: indent\n").unwrap_err();
        assert_eq!(e.line, 1);
        let e = parse("source: a\ninfo: |\n  block\n").unwrap_err();
        assert_eq!(e.line, 1);
        assert!(e.message.contains("block scalars"), "{}", e.message);
        let e = parse("a: 1\na: 2\n").unwrap_err();
        assert!(e.message.contains("twice"));
        let e = parse("just text\n").unwrap_err();
        assert!(e.message.contains("key: value"));
    }
}
