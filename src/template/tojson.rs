//! transformers' `tojson` filter: exactly Python's
//! `json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)`.
//!
//! Python separators (`", "`/`": "`, or `","`/`": "` once `indent` is set), insertion order, raw
//! non-ASCII unless `ensure_ascii`, lowercase `\uXXXX` escapes, Python float repr and no HTML
//! escaping. The result is a plain string, not markup: transformers' filter returns
//! `json.dumps(...)`, a `str`, so `'…'|safe + x|tojson` escapes it as markupsafe does.
use std::fmt::Write as _;

use minijinja::value::{Kwargs, Value, ValueKind};
use minijinja::{Error, ErrorKind};

use super::pyrepr::{float_repr, py_repr};

/// Options of `json.dumps` that transformers exposes.
#[derive(Debug, Clone, Default)]
pub struct JsonOptions {
    pub ensure_ascii: bool,
    /// `None`: single line. `Some(s)`: newline plus `s` repeated per level.
    pub indent: Option<String>,
    pub item_separator: String,
    pub key_separator: String,
    pub sort_keys: bool,
}

impl JsonOptions {
    /// The defaults of `json.dumps` for the given indent.
    pub fn new(ensure_ascii: bool, indent: Option<String>, sort_keys: bool) -> JsonOptions {
        let item_separator = if indent.is_some() { "," } else { ", " }.to_string();
        JsonOptions {
            ensure_ascii,
            indent,
            item_separator,
            key_separator: ": ".to_string(),
            sort_keys,
        }
    }
}

fn type_error(msg: String) -> Error {
    Error::new(ErrorKind::InvalidOperation, msg)
}

/// Python's name for the type of a template value, for error messages.
pub fn py_type_name(v: &Value) -> &'static str {
    match v.kind() {
        ValueKind::Undefined => "Undefined",
        ValueKind::None => "NoneType",
        ValueKind::Bool => "bool",
        ValueKind::Number => {
            if v.is_integer() {
                "int"
            } else {
                "float"
            }
        }
        ValueKind::String => "str",
        ValueKind::Bytes => "bytes",
        ValueKind::Seq => {
            if v.is_tuple() {
                "tuple"
            } else {
                "list"
            }
        }
        ValueKind::Map => "dict",
        ValueKind::Iterable => "generator",
        _ => "object",
    }
}

/// The filter entry point: `tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)`.
/// Positional arguments follow that order, as in the Python function.
pub fn tojson_filter(value: &Value, args: &[Value]) -> Result<Value, Error> {
    let (positional, kwargs) = split_kwargs(args)?;
    const NAMES: [&str; 4] = ["ensure_ascii", "indent", "separators", "sort_keys"];
    if positional.len() > NAMES.len() {
        return Err(type_error(format!(
            "tojson() takes from 1 to 5 positional arguments but {} were given",
            positional.len() + 1
        )));
    }
    let mut slots: [Option<Value>; 4] = Default::default();
    for (i, v) in positional.iter().enumerate() {
        slots[i] = Some(v.clone());
    }
    if let Some(kwargs) = &kwargs {
        for name in kwargs.args() {
            match NAMES.iter().position(|n| *n == name) {
                Some(i) => {
                    if slots[i].is_some() {
                        return Err(type_error(format!(
                            "tojson() got multiple values for argument '{name}'"
                        )));
                    }
                    slots[i] = Some(kwargs.peek::<Value>(name)?);
                }
                None => {
                    return Err(type_error(format!(
                        "tojson() got an unexpected keyword argument '{name}'"
                    )));
                }
            }
        }
    }
    let [ensure_ascii, indent, separators, sort_keys] = slots;
    let ensure_ascii = ensure_ascii.map(|v| v.is_true()).unwrap_or(false);
    let sort_keys = sort_keys.map(|v| v.is_true()).unwrap_or(false);
    let indent = match indent {
        None => None,
        Some(v) if v.is_none() || v.is_undefined() => None,
        Some(v) if v.kind() == ValueKind::String => {
            Some(v.as_str().unwrap_or_default().to_string())
        }
        Some(v) if v.kind() == ValueKind::Bool => Some(" ".repeat(usize::from(v.is_true()))),
        Some(v) if v.is_integer() => {
            let n = i64::try_from(v.clone()).unwrap_or(0);
            if n > 10_000 {
                return Err(type_error("tojson indent is too large".to_string()));
            }
            Some(" ".repeat(n.max(0) as usize))
        }
        Some(v) => {
            return Err(type_error(format!(
                "can't multiply sequence by non-int of type '{}'",
                py_type_name(&v)
            )))
        }
    };
    let mut opts = JsonOptions::new(ensure_ascii, indent, sort_keys);
    if let Some(seps) = separators {
        if !(seps.is_none() || seps.is_undefined()) {
            let items: Vec<Value> = match seps.kind() {
                ValueKind::Seq | ValueKind::Iterable | ValueKind::String => {
                    seps.try_iter()?.collect()
                }
                _ => {
                    return Err(type_error(format!(
                        "cannot unpack non-iterable {} object",
                        py_type_name(&seps)
                    )))
                }
            };
            if items.len() != 2 {
                return Err(type_error(format!(
                    "separators must be a pair of strings (expected 2, got {})",
                    items.len()
                )));
            }
            match (items[0].as_str(), items[1].as_str()) {
                (Some(a), Some(b)) => {
                    opts.item_separator = a.to_string();
                    opts.key_separator = b.to_string();
                }
                _ => return Err(type_error("json separators must be strings".to_string())),
            }
        }
    }
    let mut out = String::new();
    dumps_into(value, &opts, &mut out, 0)?;
    // `json.dumps` returns a plain `str`, not `Markup`: `'x'|safe + y|tojson` escapes it.
    Ok(Value::from(out))
}

/// Splits trailing keyword arguments off an argument list.
pub fn split_kwargs(args: &[Value]) -> Result<(&[Value], Option<Kwargs>), Error> {
    match args.last() {
        Some(last) if last.is_kwargs() => {
            let kwargs = Kwargs::try_from(last.clone())?;
            Ok((&args[..args.len() - 1], Some(kwargs)))
        }
        _ => Ok((args, None)),
    }
}

/// `json.dumps(value)` with the given options.
#[cfg(test)]
pub fn dumps(value: &Value, opts: &JsonOptions) -> Result<String, Error> {
    let mut out = String::new();
    dumps_into(value, opts, &mut out, 0)?;
    Ok(out)
}

const MAX_DEPTH: usize = 500;

fn newline_indent(opts: &JsonOptions, level: usize, out: &mut String) {
    if let Some(ind) = &opts.indent {
        out.push('\n');
        for _ in 0..level {
            out.push_str(ind);
        }
    }
}

fn dumps_into(v: &Value, opts: &JsonOptions, out: &mut String, level: usize) -> Result<(), Error> {
    if level > MAX_DEPTH {
        return Err(type_error(
            "maximum recursion depth exceeded while encoding a JSON object".into(),
        ));
    }
    match v.kind() {
        ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number => {
            if v.is_integer() {
                let _ = write!(out, "{v}");
            } else {
                let f = f64::try_from(v.clone()).unwrap_or(f64::NAN);
                if f.is_nan() {
                    out.push_str("NaN");
                } else if f.is_infinite() {
                    out.push_str(if f > 0.0 { "Infinity" } else { "-Infinity" });
                } else {
                    out.push_str(&float_repr(f));
                }
            }
        }
        ValueKind::String => encode_str(v.as_str().unwrap_or_default(), opts.ensure_ascii, out),
        ValueKind::Seq => {
            let items: Vec<Value> = v.try_iter()?.collect();
            if items.is_empty() {
                out.push_str("[]");
                return Ok(());
            }
            out.push('[');
            newline_indent(opts, level + 1, out);
            for (idx, item) in items.iter().enumerate() {
                if idx > 0 {
                    out.push_str(&opts.item_separator);
                    newline_indent(opts, level + 1, out);
                }
                dumps_into(item, opts, out, level + 1)?;
            }
            newline_indent(opts, level, out);
            out.push(']');
        }
        ValueKind::Map => {
            let mut pairs: Vec<(Value, Value)> =
                match v.as_object().and_then(|o| o.try_iter_pairs()) {
                    Some(iter) => iter.collect(),
                    None => Vec::new(),
                };
            if pairs.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            if opts.sort_keys {
                sort_pairs(&mut pairs)?;
            }
            out.push('{');
            newline_indent(opts, level + 1, out);
            for (idx, (key, value)) in pairs.iter().enumerate() {
                if idx > 0 {
                    out.push_str(&opts.item_separator);
                    newline_indent(opts, level + 1, out);
                }
                let key = key_str(key)?;
                encode_str(&key, opts.ensure_ascii, out);
                out.push_str(&opts.key_separator);
                dumps_into(value, opts, out, level + 1)?;
            }
            newline_indent(opts, level, out);
            out.push('}');
        }
        _ => {
            return Err(type_error(format!(
                "Object of type {} is not JSON serializable",
                py_type_name(v)
            )))
        }
    }
    Ok(())
}

/// `sorted(dct.items())` for the key types JSON allows.
fn sort_pairs(pairs: &mut [(Value, Value)]) -> Result<(), Error> {
    let all_str = pairs.iter().all(|(k, _)| k.kind() == ValueKind::String);
    let all_num = pairs
        .iter()
        .all(|(k, _)| matches!(k.kind(), ValueKind::Number | ValueKind::Bool));
    if all_str {
        pairs.sort_by(|a, b| a.0.as_str().cmp(&b.0.as_str()));
        Ok(())
    } else if all_num {
        pairs.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap_or(std::cmp::Ordering::Equal));
        Ok(())
    } else {
        Err(type_error(
            "'<' not supported between instances of mixed key types".into(),
        ))
    }
}

/// How `json.dumps` turns a dict key into a string.
fn key_str(key: &Value) -> Result<String, Error> {
    match key.kind() {
        ValueKind::String => Ok(key.as_str().unwrap_or_default().to_string()),
        ValueKind::Bool => Ok(if key.is_true() { "true" } else { "false" }.to_string()),
        ValueKind::None => Ok("null".to_string()),
        ValueKind::Number => {
            if key.is_integer() {
                Ok(key.to_string())
            } else {
                let f = f64::try_from(key.clone()).unwrap_or(f64::NAN);
                Ok(if f.is_nan() {
                    "NaN".to_string()
                } else if f.is_infinite() {
                    if f > 0.0 { "Infinity" } else { "-Infinity" }.to_string()
                } else {
                    float_repr(f)
                })
            }
        }
        _ => Err(type_error(format!(
            "keys must be str, int, float, bool or None, not {} ({})",
            py_type_name(key),
            py_repr(key)
        ))),
    }
}

/// Python's `encode_basestring` / `encode_basestring_ascii`.
pub fn encode_str(s: &str, ensure_ascii: bool, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if ensure_ascii && !(' '..='~').contains(&c) => {
                let cp = c as u32;
                if cp > 0xffff {
                    let v = cp - 0x10000;
                    let hi = 0xd800 | ((v >> 10) & 0x3ff);
                    let lo = 0xdc00 | (v & 0x3ff);
                    let _ = write!(out, "\\u{hi:04x}\\u{lo:04x}");
                } else {
                    let _ = write!(out, "\\u{cp:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn dump(v: serde_json::Value, opts: JsonOptions) -> String {
        dumps(&super::super::values::from_json(&v), &opts).unwrap()
    }

    #[test]
    fn python_defaults() {
        let v = json!({"b": 1, "a": "<it's & ok>", "c": "é", "f": [1e-5, 100.0, 1e16, 0.5], "n": null, "t": true});
        assert_eq!(
            dump(v, JsonOptions::new(false, None, false)),
            r#"{"b": 1, "a": "<it's & ok>", "c": "é", "f": [1e-05, 100.0, 1e+16, 0.5], "n": null, "t": true}"#
        );
    }

    #[test]
    fn ensure_ascii_surrogates_and_controls() {
        let v = json!(["é🤖\u{1}\u{7f}\u{2028}", "\"\\\n\t\u{8}\u{c}"]);
        assert_eq!(
            dump(v.clone(), JsonOptions::new(true, None, false)),
            r#"["\u00e9\ud83e\udd16\u0001\u007f\u2028", "\"\\\n\t\b\f"]"#
        );
        assert_eq!(
            dump(v, JsonOptions::new(false, None, false)),
            "[\"é🤖\\u0001\u{7f}\u{2028}\", \"\\\"\\\\\\n\\t\\b\\f\"]"
        );
    }

    #[test]
    fn indent_and_sort() {
        let v = json!({"z": {"y": [], "x": {}}, "a": [1, {"k": 2, "b": 3}]});
        assert_eq!(
            dump(v.clone(), JsonOptions::new(false, Some("  ".into()), true)),
            "{\n  \"a\": [\n    1,\n    {\n      \"b\": 3,\n      \"k\": 2\n    }\n  ],\n  \"z\": {\n    \"x\": {},\n    \"y\": []\n  }\n}"
        );
        let mut o = JsonOptions::new(false, None, false);
        o.item_separator = ",".into();
        o.key_separator = ":".into();
        assert_eq!(dump(v, o), r#"{"z":{"y":[],"x":{}},"a":[1,{"k":2,"b":3}]}"#);
    }
}
