//! Python `str()` and `repr()` of template values, as jinja2 prints them.
//!
//! jinja2 turns every printed value into text with Python's `str()`: `None`, `True`, floats in
//! their shortest round-trip `repr` (`1e-05`, `2.0`, `1e+16`), and containers as their `repr`
//! (`{'a': 'x', 'q': "it's"}`, `['a', 1, None, True]`, `('a', 1)`).
use std::fmt::Write as _;

use minijinja::value::{ObjectRepr, Value, ValueKind};

use super::pyprintable::NON_PRINTABLE;

/// Nesting depth beyond which containers print as `...` (Python would print `[...]` only for
/// cycles, which JSON inputs cannot have; this only guards against pathological depth).
const MAX_DEPTH: usize = 200;

/// Python `repr(float)` (identical to `str(float)` in Python 3).
pub fn float_repr(f: f64) -> String {
    if f.is_nan() {
        return "nan".to_string();
    }
    if f.is_infinite() {
        return if f > 0.0 { "inf" } else { "-inf" }.to_string();
    }
    // Rust's `{:e}` prints the shortest digits that round-trip, like Python's repr.
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (neg, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => (true, m),
        None => (false, mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let mut out = String::with_capacity(digits.len() + 8);
    if neg {
        out.push('-');
    }
    if !(-4..16).contains(&exp) {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        out.push('e');
        out.push(if exp < 0 { '-' } else { '+' });
        let _ = write!(out, "{:02}", exp.unsigned_abs());
    } else if exp >= 0 {
        let int_len = exp as usize + 1;
        if digits.len() <= int_len {
            out.push_str(&digits);
            out.extend(std::iter::repeat_n('0', int_len - digits.len()));
            out.push_str(".0");
        } else {
            out.push_str(&digits[..int_len]);
            out.push('.');
            out.push_str(&digits[int_len..]);
        }
    } else {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', (-exp - 1) as usize));
        out.push_str(&digits);
    }
    out
}

/// Whether CPython's `str.isprintable()` accepts this single character.
pub fn is_printable(c: char) -> bool {
    let cp = c as u32;
    if cp < 0x80 {
        return (0x20..0x7f).contains(&cp);
    }
    NON_PRINTABLE
        .binary_search_by(|&(lo, hi)| {
            if hi < cp {
                std::cmp::Ordering::Less
            } else if lo > cp {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        })
        .is_err()
}

/// Python `repr(str)`.
pub fn repr_str_into(s: &str, out: &mut String) {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if is_printable(c) => out.push(c),
            c => {
                let cp = c as u32;
                if cp <= 0xff {
                    let _ = write!(out, "\\x{cp:02x}");
                } else if cp <= 0xffff {
                    let _ = write!(out, "\\u{cp:04x}");
                } else {
                    let _ = write!(out, "\\U{cp:08x}");
                }
            }
        }
    }
    out.push(quote);
}

fn is_float(v: &Value) -> bool {
    v.is_number() && !v.is_integer()
}

/// Python `str()` of a number or other scalar; `None` for strings and containers.
fn scalar_str(v: &Value) -> Option<String> {
    match v.kind() {
        ValueKind::Undefined => Some(String::new()),
        ValueKind::None => Some("None".to_string()),
        ValueKind::Bool => Some(if v.is_true() { "True" } else { "False" }.to_string()),
        ValueKind::Number => {
            if is_float(v) {
                Some(float_repr(f64::try_from(v.clone()).unwrap_or(f64::NAN)))
            } else {
                Some(v.to_string())
            }
        }
        _ => None,
    }
}

/// Python `str(value)` appended to `out`.
pub fn py_str_into(v: &Value, out: &mut String) {
    if let Some(s) = v.as_str() {
        out.push_str(s);
        return;
    }
    match scalar_str(v) {
        Some(s) => out.push_str(&s),
        None => py_repr_into(v, out, 0),
    }
}

/// Python `str(value)`.
pub fn py_str(v: &Value) -> String {
    let mut out = String::new();
    py_str_into(v, &mut out);
    out
}

/// Python `repr(value)`.
pub fn py_repr(v: &Value) -> String {
    let mut out = String::new();
    py_repr_into(v, &mut out, 0);
    out
}

/// Python `repr(value)` appended to `out`.
pub fn py_repr_into(v: &Value, out: &mut String, depth: usize) {
    if let Some(s) = v.as_str() {
        if v.kind() == ValueKind::String {
            repr_str_into(s, out);
            return;
        }
    }
    if v.is_undefined() {
        // repr() of jinja2's Undefined
        out.push_str("Undefined");
        return;
    }
    if let Some(s) = scalar_str(v) {
        out.push_str(&s);
        return;
    }
    if depth > MAX_DEPTH {
        out.push_str("...");
        return;
    }
    match v.kind() {
        ValueKind::Bytes => {
            let _ = write!(out, "{v}");
        }
        ValueKind::Map => {
            out.push('{');
            if let Some(obj) = v.as_object() {
                if let Some(iter) = obj.try_iter_pairs() {
                    for (idx, (key, value)) in iter.enumerate() {
                        if idx > 0 {
                            out.push_str(", ");
                        }
                        py_repr_into(&key, out, depth + 1);
                        out.push_str(": ");
                        py_repr_into(&value, out, depth + 1);
                    }
                }
            }
            out.push('}');
        }
        ValueKind::Seq | ValueKind::Iterable => {
            let tuple = v.is_tuple();
            let known_len = v
                .as_object()
                .map(|o| matches!(o.repr(), ObjectRepr::Seq) || o.enumerator_len().is_some())
                .unwrap_or(false);
            if !known_len {
                let _ = write!(out, "{v}");
                return;
            }
            out.push(if tuple { '(' } else { '[' });
            let mut count = 0usize;
            if let Ok(iter) = v.try_iter() {
                for (idx, item) in iter.enumerate() {
                    if idx > 0 {
                        out.push_str(", ");
                    }
                    py_repr_into(&item, out, depth + 1);
                    count += 1;
                }
            }
            if tuple && count == 1 {
                out.push(',');
            }
            out.push(if tuple { ')' } else { ']' });
        }
        _ => {
            let _ = write!(out, "{v}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repr_str(s: &str) -> String {
        let mut out = String::new();
        repr_str_into(s, &mut out);
        out
    }

    #[test]
    fn floats_like_python() {
        let cases: &[(f64, &str)] = &[
            (1e20, "1e+20"),
            (2.0, "2.0"),
            (1e-5, "1e-05"),
            (1.5e-5, "1.5e-05"),
            (1e-7, "1e-07"),
            (0.0001, "0.0001"),
            (100.0, "100.0"),
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (123456789012345680.0, "1.2345678901234568e+17"),
            (0.1, "0.1"),
            (-0.0, "-0.0"),
            (0.0, "0.0"),
            (2.5e-10, "2.5e-10"),
            (1e21, "1e+21"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (5e-324, "5e-324"),
            (-12.5, "-12.5"),
            (f64::NAN, "nan"),
            (f64::INFINITY, "inf"),
            (f64::NEG_INFINITY, "-inf"),
            (1.0 / 3.0, "0.3333333333333333"),
            (9999999999999998.0, "9999999999999998.0"),
        ];
        for (f, want) in cases {
            assert_eq!(float_repr(*f), *want, "{f}");
        }
    }

    #[test]
    fn strings_like_python() {
        assert_eq!(repr_str("it's"), "\"it's\"");
        assert_eq!(repr_str("a\"b'c"), "'a\"b\\'c'");
        assert_eq!(repr_str("tab\tnl\n\u{7f}\u{1}"), "'tab\\tnl\\n\\x7f\\x01'");
        assert_eq!(
            repr_str("caf\u{e9} \u{a0}\u{200b}\u{1F916}"),
            "'caf\u{e9} \\xa0\\u200b\u{1F916}'"
        );
        assert_eq!(repr_str("\u{e000}\u{10fffd}"), "'\\ue000\\U0010fffd'");
    }

    #[test]
    fn containers_like_python() {
        let v = super::super::values::from_json(
            &serde_json::json!({"a": "x", "q": "it's", "l": [1, 2.0, null, true]}),
        );
        assert_eq!(
            py_str(&v),
            "{'a': 'x', 'q': \"it's\", 'l': [1, 2.0, None, True]}"
        );
        let t = Value::from(minijinja::value::Tuple::from([Value::from("a")]));
        assert_eq!(py_str(&t), "('a',)");
    }
}
