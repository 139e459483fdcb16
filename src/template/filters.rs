//! jinja2's filters and tests where minijinja's differ from them: each one as Python and
//! jinja2 define it (`|length`, `|int`, `|float`, `|items`, `|replace`, `|format`, `|join`,
//! `|trim`, `|indent`, `|round`, `|title`, `|truncate`, `is sequence`, …).
use std::sync::Arc;

use indexmap::IndexMap;
use minijinja::value::{Object, ObjectRepr, Rest, Value, ValueKind, ValueOrKwargs};
use minijinja::Error;

use super::limits::*;
use super::pymethods::{py_capitalize, py_pad, py_splitlines, py_strip};
use super::pyops;
use super::pyrepr::py_str;
use super::tojson::{py_type_name, split_kwargs};
use super::values::PyDict;

/// The `{% generation %}` filter: records the span, returns the body unchanged.
pub(super) fn generation_filter(value: Value) -> Value {
    let len = value.as_str().map(|s| s.chars().count()).unwrap_or(0);
    with_state(|st| st.spans.push((st.chars_out, st.chars_out + len)));
    value
}

/// jinja2 `|length` / `|count`: `len(value)`, 0 for undefined.
/// Python's recursion limit is 1000 frames; pformat uses several per level.
pub(super) const PPRINT_MAX_DEPTH: usize = 300;

/// How deeply lists and maps nest in `v`, counted up to `cap`.
pub(super) fn nesting_depth(v: &Value, cap: usize) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(v.clone(), 0usize)];
    while let Some((v, d)) = stack.pop() {
        deepest = deepest.max(d);
        if deepest >= cap {
            return deepest;
        }
        if matches!(v.kind(), ValueKind::Seq | ValueKind::Map) {
            if let Ok(items) = v.try_iter() {
                for item in items {
                    let child = if v.kind() == ValueKind::Map {
                        v.get_item(&item).unwrap_or_default()
                    } else {
                        item
                    };
                    stack.push((child, d + 1));
                }
            }
        }
    }
    deepest
}

/// A filter's result as a jinja2 generator: iterable, always true, not sized, not JSON
/// (`range` stays sized: only these results are generators).
#[derive(Debug)]
pub struct Generator(Vec<Value>);

impl Object for Generator {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Iterable
    }
    fn enumerate(self: &Arc<Self>) -> minijinja::value::Enumerator {
        minijinja::value::Enumerator::Values(self.0.clone())
    }
    fn enumerator_len(self: &Arc<Self>) -> Option<usize> {
        // Known for loop.length (jinja2 materialises the iterator for it); `length` refuses.
        Some(self.0.len())
    }
    fn is_true(self: &Arc<Self>) -> bool {
        true
    }
}

pub(super) fn generator(items: Vec<Value>) -> Value {
    Value::from_object(Generator(items))
}

pub fn is_generator(v: &Value) -> bool {
    v.downcast_object_ref::<Generator>().is_some()
}

pub(super) fn length_filter(value: &Value) -> Result<Value, Error> {
    if value.is_undefined() {
        return Ok(Value::from(0));
    }
    if is_generator(value) {
        return Err(err("object of type 'generator' has no len()"));
    }
    minijinja::filters::length(value).map(Value::from)
}

/// Python `int(s, base)` for strings (whitespace, sign, underscores, base prefixes).
pub(super) fn parse_py_int(s: &str, base: u32) -> Option<i128> {
    let t = py_strip(s, None, true, true);
    let (neg, t) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let lower = t.to_ascii_lowercase();
    let (base, digits) = match base {
        0 => match lower.get(..2) {
            Some("0x") => (16, &t[2..]),
            Some("0o") => (8, &t[2..]),
            Some("0b") => (2, &t[2..]),
            _ => {
                if t.len() > 1 && t.starts_with('0') && t.chars().any(|c| c != '0' && c != '_') {
                    return None;
                }
                (10, t)
            }
        },
        16 if lower.starts_with("0x") => (16, &t[2..]),
        8 if lower.starts_with("0o") => (8, &t[2..]),
        2 if lower.starts_with("0b") => (2, &t[2..]),
        b => (b, t),
    };
    if !(2..=36).contains(&base)
        || digits.is_empty()
        || digits.starts_with('_')
        || digits.ends_with('_')
        || digits.contains("__")
    {
        return None;
    }
    let v = i128::from_str_radix(&digits.replace('_', ""), base).ok()?;
    Some(if neg { -v } else { v })
}

/// Python `float(s)` for strings.
pub(super) fn parse_py_float(s: &str) -> Option<f64> {
    let t = py_strip(s, None, true, true);
    let lower = t.to_ascii_lowercase();
    let body = lower.trim_start_matches(['+', '-']);
    if matches!(body, "inf" | "infinity" | "nan") {
        return lower.parse::<f64>().ok();
    }
    if t.starts_with('_')
        || t.ends_with('_')
        || t.contains("__")
        || !t
            .chars()
            .all(|c| c.is_ascii_digit() || "+-.eE_".contains(c))
    {
        return None;
    }
    t.replace('_', "").parse::<f64>().ok()
}

/// jinja2 `|int(default=0, base=10)`.
pub(super) fn int_filter(value: &Value, default: Option<Value>, base: Option<i64>) -> Value {
    let default = default.unwrap_or_else(|| Value::from(0));
    let base = base.unwrap_or(10);
    match value.kind() {
        ValueKind::String => {
            let s = value.as_str().unwrap_or_default();
            if let Some(v) = u32::try_from(base).ok().and_then(|b| parse_py_int(s, b)) {
                return Value::from(v);
            }
            match parse_py_float(s) {
                Some(f) if f.is_finite() => Value::from(f.trunc() as i128),
                _ => default,
            }
        }
        ValueKind::Bool => Value::from(i64::from(value.is_true())),
        ValueKind::Number if value.is_integer() => value.clone(),
        ValueKind::Number => match f64::try_from(value.clone()) {
            Ok(f) if f.is_finite() => Value::from(f.trunc() as i128),
            _ => default,
        },
        _ => default,
    }
}

/// jinja2 `|float(default=0.0)`.
pub(super) fn float_filter(value: &Value, default: Option<Value>) -> Value {
    let default = default.unwrap_or_else(|| Value::from(0.0));
    match value.kind() {
        ValueKind::String => parse_py_float(value.as_str().unwrap_or_default())
            .map(Value::from)
            .unwrap_or(default),
        ValueKind::Bool => Value::from(if value.is_true() { 1.0 } else { 0.0 }),
        ValueKind::Number => f64::try_from(value.clone())
            .map(Value::from)
            .unwrap_or(default),
        _ => default,
    }
}

/// jinja2 `|items`: pairs of a mapping; nothing for undefined.
pub(super) fn items_filter(value: &Value) -> Result<Value, Error> {
    if value.is_undefined() {
        return Ok(Value::from(Vec::<Value>::new()));
    }
    if value.kind() != ValueKind::Map {
        return Err(err("Can only get item pairs from a mapping."));
    }
    minijinja::filters::items(value)
}

/// jinja2 `|replace(old, new, count=None)`: `str(s).replace(old, new, count)`.
pub(super) fn replace_filter(
    value: &Value,
    old: Value,
    new: Value,
    count: Option<Value>,
) -> Result<Value, Error> {
    let s = py_str(value);
    let (old, new) = (py_str(&old), py_str(&new));
    let count = match count {
        None => -1,
        Some(c) if c.is_none() => -1,
        Some(c) => i64::try_from(c).map_err(|_| err("replace count must be an integer"))?,
    };
    let estimate = if old.is_empty() {
        s.chars().count() + 1
    } else {
        s.matches(old.as_str()).count()
    };
    if new.len().saturating_mul(estimate) > 100_000_000 {
        return Err(limit_error(
            "|replace built a string over 100,000,000 bytes",
        ));
    }
    Ok(Value::from(if count < 0 {
        s.replace(&old, &new)
    } else {
        s.replacen(&old, &new, count as usize)
    }))
}

pub(super) fn not_iterable(value: &Value) -> Result<(), Error> {
    if value.is_none() {
        return Err(err("'NoneType' object is not iterable"));
    }
    Ok(())
}

/// jinja2 `|format(*args, **kwargs)`: `str(value) % (kwargs or args)`.
pub(super) fn format_filter(value: &Value, args: Rest<ValueOrKwargs>) -> Result<Value, Error> {
    let args = args.into_values();
    let (positional, kwargs) = split_kwargs(&args)?;
    let operand = match kwargs {
        Some(kw) if !positional.is_empty() => {
            let _ = kw;
            return Err(err(
                "can't handle positional and keyword arguments at the same time",
            ));
        }
        Some(kw) => {
            let mut map: IndexMap<Value, Value> = IndexMap::new();
            for name in kw.args() {
                map.insert(Value::from(name), kw.peek::<Value>(name)?);
            }
            Value::from_object(PyDict(map))
        }
        None => Value::from(minijinja::value::Tuple::from(positional.to_vec())),
    };
    pyops::py_mod(&Value::from(py_str(value)), &operand)
}

/// jinja2 `|string`: Python `str()`.
pub(super) fn string_filter(value: &Value) -> Value {
    if value.kind() == ValueKind::String {
        return value.clone();
    }
    Value::from(py_str(value))
}

/// jinja2's `make_attrgetter`: dotted path, integer parts index.
pub(super) fn get_path(item: &Value, path: &Value) -> Result<Value, Error> {
    if let Some(p) = path.as_str() {
        let mut cur = item.clone();
        for part in p.split('.') {
            cur = match part.parse::<i64>() {
                Ok(i) => cur.get_item(&Value::from(i))?,
                Err(_) => cur.get_attr(part)?,
            };
        }
        Ok(cur)
    } else {
        item.get_item(path)
    }
}

/// jinja2 `|join(d='', attribute=None)`: `str(d).join(map(str, value))`.
pub(super) fn join_filter(value: &Value, args: Rest<ValueOrKwargs>) -> Result<Value, Error> {
    let args = args.into_values();
    let (positional, kwargs) = split_kwargs(&args)?;
    let mut sep = positional.first().cloned();
    let mut attribute = positional.get(1).cloned();
    if let Some(kw) = &kwargs {
        for name in kw.args() {
            match name {
                "d" => sep = Some(kw.peek::<Value>(name)?),
                "attribute" => attribute = Some(kw.peek::<Value>(name)?),
                _ => {
                    return Err(err(format!(
                        "join() got an unexpected keyword argument '{name}'"
                    )))
                }
            }
        }
    }
    let sep = sep.map(|s| py_str(&s)).unwrap_or_default();
    if value.is_undefined() {
        return Ok(Value::from(""));
    }
    not_iterable(value)?;
    let mut out = String::new();
    for (idx, item) in value.try_iter()?.enumerate() {
        if idx > 0 {
            out.push_str(&sep);
        }
        let item = match &attribute {
            Some(attr) if !attr.is_none() => get_path(&item, attr)?,
            _ => item,
        };
        out.push_str(&py_str(&item));
    }
    Ok(Value::from(out))
}

/// jinja2 `|trim(chars=None)`: Python `str.strip`.
pub(super) fn trim_filter(value: &Value, chars: Option<Value>) -> Value {
    let s = py_str(value);
    let chars = chars
        .filter(|c| !c.is_none() && !c.is_undefined())
        .map(|c| py_str(&c));
    Value::from(py_strip(&s, chars.as_deref(), true, true))
}

/// jinja2 `|indent(width=4, first=False, blank=False)`.
pub(super) fn indent_filter(value: &Value, args: Rest<ValueOrKwargs>) -> Result<Value, Error> {
    let args = args.into_values();
    let (positional, kwargs) = split_kwargs(&args)?;
    let mut slots: [Option<Value>; 3] = [
        positional.first().cloned(),
        positional.get(1).cloned(),
        positional.get(2).cloned(),
    ];
    if let Some(kw) = &kwargs {
        for name in kw.args() {
            let idx = match name {
                "width" => 0,
                "first" => 1,
                "blank" => 2,
                _ => {
                    return Err(err(format!(
                        "do_indent() got an unexpected keyword argument '{name}'"
                    )))
                }
            };
            slots[idx] = Some(kw.peek::<Value>(name)?);
        }
    }
    let Some(s) = value.as_str().filter(|_| value.kind() == ValueKind::String) else {
        return Err(err(format!(
            "unsupported operand type(s) for +=: '{}' and 'str'",
            py_type_name(value)
        )));
    };
    let indention = match &slots[0] {
        None => "    ".to_string(),
        Some(w) if w.kind() == ValueKind::String => py_str(w),
        Some(w) => {
            let n = i64::try_from(w.clone())
                .map_err(|_| err("indent width must be an integer or a string"))?;
            if n > 10_000 {
                return Err(err("indent width is too large"));
            }
            " ".repeat(n.max(0) as usize)
        }
    };
    let first = slots[1].as_ref().is_some_and(Value::is_true);
    let blank = slots[2].as_ref().is_some_and(Value::is_true);
    let s = format!("{s}\n");
    let lines = py_splitlines(&s, false);
    let mut rv = String::new();
    if blank {
        rv = lines.join(&format!("\n{indention}"));
    } else {
        let mut iter = lines.into_iter();
        rv.push_str(&iter.next().unwrap_or_default());
        let rest: Vec<String> = iter
            .map(|line| {
                if line.is_empty() {
                    line
                } else {
                    format!("{indention}{line}")
                }
            })
            .collect();
        if !rest.is_empty() {
            rv.push('\n');
            rv.push_str(&rest.join("\n"));
        }
    }
    if first {
        rv = format!("{indention}{rv}");
    }
    Ok(if value.is_safe() {
        Value::from_safe_string(rv)
    } else {
        Value::from(rv)
    })
}

pub(super) fn escape_filter(value: &Value) -> Value {
    if value.is_safe() {
        return value.clone();
    }
    Value::from_safe_string(crate::escape::markupsafe(&py_str(value)))
}

pub(super) fn forceescape_filter(value: &Value) -> Value {
    Value::from_safe_string(crate::escape::markupsafe(&py_str(value)))
}

/// Python's `round(x, n)` for floats: correctly rounded, ties to even.
pub(super) fn py_round(x: f64, digits: i64) -> f64 {
    if !x.is_finite() {
        return x;
    }
    if digits >= 0 {
        let digits = digits.min(330) as usize;
        format!("{x:.digits$}").parse().unwrap_or(x)
    } else {
        let p = 10f64.powi((-digits).min(330) as i32);
        let q = x / p;
        let r = q.round();
        let r = if (q - q.trunc()).abs() == 0.5 {
            2.0 * (q / 2.0).round()
        } else {
            r
        };
        r * p
    }
}

/// jinja2 `|round(precision=0, method='common')`.
pub(super) fn round_filter(value: &Value, args: Rest<ValueOrKwargs>) -> Result<Value, Error> {
    let args = args.into_values();
    let (positional, kwargs) = split_kwargs(&args)?;
    let mut precision = positional.first().cloned();
    let mut method = positional.get(1).cloned();
    if let Some(kw) = &kwargs {
        for name in kw.args() {
            match name {
                "precision" => precision = Some(kw.peek::<Value>(name)?),
                "method" => method = Some(kw.peek::<Value>(name)?),
                _ => {
                    return Err(err(format!(
                        "do_round() got an unexpected keyword argument '{name}'"
                    )))
                }
            }
        }
    }
    let precision = match precision {
        None => 0,
        Some(p) => i64::try_from(p).map_err(|_| err("round precision must be an integer"))?,
    };
    let method = method
        .map(|m| py_str(&m))
        .unwrap_or_else(|| "common".to_string());
    if !value.is_number() && value.kind() != ValueKind::Bool {
        return Err(err(format!(
            "type {} doesn't define __round__ method",
            py_type_name(value)
        )));
    }
    let x = f64::try_from(value.clone()).unwrap_or(0.0);
    match method.as_str() {
        "common" => {
            if value.is_integer() || value.kind() == ValueKind::Bool {
                if precision >= 0 {
                    return Ok(value.clone());
                }
                return Ok(Value::from(py_round(x, precision) as i64));
            }
            Ok(Value::from(py_round(x, precision)))
        }
        "ceil" | "floor" => {
            let p = 10f64.powi(precision.clamp(-330, 330) as i32);
            let y = if method == "ceil" {
                (x * p).ceil()
            } else {
                (x * p).floor()
            };
            Ok(Value::from(y / p))
        }
        _ => Err(err("method must be common, ceil or floor")),
    }
}

/// jinja2 `|center(width=80)`.
pub(super) fn center_filter(value: &Value, width: Option<i64>) -> Result<Value, Error> {
    py_pad("center", &py_str(value), width.unwrap_or(80), ' ').map(Value::from)
}

/// jinja2 `|capitalize`.
pub(super) fn capitalize_filter(value: &Value) -> Value {
    Value::from(py_capitalize(&py_str(value)))
}

/// jinja2 `|title`: split on runs of `-`, whitespace and opening brackets.
pub(super) fn title_filter(value: &Value) -> Value {
    let s = py_str(value);
    let is_sep = |c: char| {
        c == '-'
            || c == '('
            || c == '{'
            || c == '['
            || c == '<'
            || c.is_whitespace()
            || ('\u{1c}'..='\u{1f}').contains(&c)
    };
    let mut out = String::with_capacity(s.len());
    let mut at_word_start = true;
    for c in s.chars() {
        if is_sep(c) {
            out.push(c);
            at_word_start = true;
        } else if at_word_start {
            out.extend(c.to_uppercase());
            at_word_start = false;
        } else {
            out.extend(c.to_lowercase());
        }
    }
    Value::from(out)
}

/// jinja2 `|wordcount`: `len(re.findall(r"\w+", s))`.
pub(super) fn wordcount_filter(value: &Value) -> usize {
    let s = py_str(value);
    let mut count = 0;
    let mut in_word = false;
    for c in s.chars() {
        let w = c.is_alphanumeric() || c == '_';
        if w && !in_word {
            count += 1;
        }
        in_word = w;
    }
    count
}

/// jinja2 `|truncate(length=255, killwords=False, end='...', leeway=5)`.
pub(super) fn truncate_filter(value: &Value, args: Rest<ValueOrKwargs>) -> Result<Value, Error> {
    let args = args.into_values();
    let (positional, kwargs) = split_kwargs(&args)?;
    let mut slots: [Option<Value>; 4] = Default::default();
    for (i, v) in positional.iter().take(4).enumerate() {
        slots[i] = Some(v.clone());
    }
    if let Some(kw) = &kwargs {
        for name in kw.args() {
            let idx = match name {
                "length" => 0,
                "killwords" => 1,
                "end" => 2,
                "leeway" => 3,
                _ => {
                    return Err(err(format!(
                        "do_truncate() got an unexpected keyword argument '{name}'"
                    )))
                }
            };
            slots[idx] = Some(kw.peek::<Value>(name)?);
        }
    }
    let int = |v: &Option<Value>, d: i64| -> Result<i64, Error> {
        match v {
            None => Ok(d),
            Some(v) => {
                i64::try_from(v.clone()).map_err(|_| err("truncate arguments must be integers"))
            }
        }
    };
    let length = int(&slots[0], 255)?;
    let killwords = slots[1].as_ref().is_some_and(Value::is_true);
    let end = slots[2]
        .as_ref()
        .map(py_str)
        .unwrap_or_else(|| "...".to_string());
    let leeway = int(&slots[3], 5)?;
    let end_len = end.chars().count() as i64;
    if length < end_len {
        return Err(err(format!("expected length >= {end_len}, got {length}")));
    }
    if leeway < 0 {
        return Err(err(format!("expected leeway >= 0, got {leeway}")));
    }
    let s = py_str(value);
    let chars: Vec<char> = s.chars().collect();
    if chars.len() as i64 <= length + leeway {
        return Ok(Value::from(s));
    }
    let head: String = chars[..(length - end_len) as usize].iter().collect();
    if killwords {
        return Ok(Value::from(format!("{head}{end}")));
    }
    let cut = head
        .rsplit_once(' ')
        .map(|(a, _)| a.to_string())
        .unwrap_or(head);
    Ok(Value::from(format!("{cut}{end}")))
}

/// jinja2 `is sequence`: `len(value)` and `value.__getitem__` exist.
pub(super) fn is_sequence(value: &Value) -> bool {
    matches!(
        value.kind(),
        ValueKind::String
            | ValueKind::Seq
            | ValueKind::Map
            | ValueKind::Bytes
            | ValueKind::Undefined
    )
}

/// jinja2 `is iterable`.
pub(super) fn is_iterable(value: &Value) -> bool {
    matches!(
        value.kind(),
        ValueKind::String
            | ValueKind::Seq
            | ValueKind::Map
            | ValueKind::Bytes
            | ValueKind::Iterable
            | ValueKind::Undefined
    )
}

/// jinja2 `is number`: `isinstance(value, numbers.Number)` (booleans included).
pub(super) fn is_number(value: &Value) -> bool {
    value.is_number() || value.kind() == ValueKind::Bool
}

/// jinja2 `is integer`: ints but not booleans.
pub(super) fn is_integer(value: &Value) -> bool {
    value.is_integer() && value.kind() == ValueKind::Number
}
