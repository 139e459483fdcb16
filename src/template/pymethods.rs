//! Python methods on template values (`'a b'.split()`, `d.items()`, ...), with CPython semantics.
//!
//! Installed as minijinja's unknown-method callback. String methods are implemented here in
//! full (Python whitespace set, code-point indices, `maxsplit`, tuple prefixes, ...);
//! `str.format` and the dict accessors come from minijinja-contrib's pycompat. Mutating methods
//! fail like jinja2's sandbox does.
//!
//! One idea, many instances: a function per Python method (as ripgrep keeps one definition per
//! flag in one file), which is why this file is long.
use minijinja::value::{Kwargs, Value, ValueKind};
use minijinja::{Error, ErrorKind, State};

use super::pyrepr::is_printable;
use super::tojson::{py_type_name, split_kwargs};
use super::values::{PyDict, PyList};

/// Largest string a padding method may build (same bound minijinja puts on `'x' * n`).
const MAX_PADDED_LEN: usize = 10_000_000;

fn err(msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidOperation, msg.into())
}

/// Python's `str.isspace()` for one character.
pub fn is_py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Python line boundaries for `str.splitlines()`.
fn is_line_break(c: char) -> bool {
    matches!(
        c,
        '\n' | '\r'
            | '\u{b}'
            | '\u{c}'
            | '\u{1c}'
            | '\u{1d}'
            | '\u{1e}'
            | '\u{85}'
            | '\u{2028}'
            | '\u{2029}'
    )
}

/// Python `str.strip(chars)` family. `chars == None` strips Python whitespace.
pub fn py_strip<'a>(s: &'a str, chars: Option<&str>, left: bool, right: bool) -> &'a str {
    let matcher = |c: char| match chars {
        Some(set) => set.contains(c),
        None => is_py_space(c),
    };
    let mut out = s;
    if left {
        out = out.trim_start_matches(matcher);
    }
    if right {
        out = out.trim_end_matches(matcher);
    }
    out
}

/// Binds positional and keyword arguments to parameter names, like a Python signature.
fn bind(
    method: &str,
    args: &[Value],
    names: &[&str],
    required: usize,
) -> Result<Vec<Option<Value>>, Error> {
    let (positional, kwargs) = split_kwargs(args)?;
    if positional.len() > names.len() {
        return Err(err(format!(
            "{method}() takes at most {} arguments ({} given)",
            names.len(),
            positional.len()
        )));
    }
    let mut slots: Vec<Option<Value>> = vec![None; names.len()];
    for (i, v) in positional.iter().enumerate() {
        slots[i] = Some(v.clone());
    }
    if let Some(kwargs) = kwargs {
        bind_kwargs(method, &kwargs, names, &mut slots)?;
    }
    if let Some(missing) = slots.iter().take(required).position(|s| s.is_none()) {
        return Err(err(format!(
            "{method}() missing required argument '{}'",
            names[missing]
        )));
    }
    Ok(slots)
}

fn bind_kwargs(
    method: &str,
    kwargs: &Kwargs,
    names: &[&str],
    slots: &mut [Option<Value>],
) -> Result<(), Error> {
    for name in kwargs.args() {
        match names.iter().position(|n| *n == name) {
            Some(i) if slots[i].is_none() => slots[i] = Some(kwargs.peek::<Value>(name)?),
            Some(_) => {
                return Err(err(format!(
                    "{method}() got multiple values for argument '{name}'"
                )))
            }
            None => {
                return Err(err(format!(
                    "{method}() got an unexpected keyword argument '{name}'"
                )))
            }
        }
    }
    Ok(())
}

/// A string argument (`None` allowed when `allow_none`).
fn opt_str<'a>(
    method: &str,
    v: &'a Option<Value>,
    allow_none: bool,
) -> Result<Option<&'a str>, Error> {
    match v {
        None => Ok(None),
        Some(v) if allow_none && v.is_none() => Ok(None),
        Some(v) => match v.as_str() {
            Some(s) if v.kind() == ValueKind::String => Ok(Some(s)),
            _ => Err(err(format!(
                "{method}() argument must be str, not {}",
                py_type_name(v)
            ))),
        },
    }
}

fn req_str<'a>(method: &str, v: &'a Option<Value>) -> Result<&'a str, Error> {
    opt_str(method, v, false)?.ok_or_else(|| err(format!("{method}() missing required argument")))
}

/// An integer argument (`None` allowed → `None`).
fn opt_int(method: &str, v: &Option<Value>) -> Result<Option<i64>, Error> {
    match v {
        None => Ok(None),
        Some(v) if v.is_none() => Ok(None),
        Some(v) if v.kind() == ValueKind::Bool => Ok(Some(i64::from(v.is_true()))),
        Some(v) if v.is_integer() => i64::try_from(v.clone()).map(Some).map_err(|_| {
            err(format!(
                "{method}(): Python int too large to convert to C ssize_t"
            ))
        }),
        Some(v) => Err(err(format!(
            "'{}' object cannot be interpreted as an integer",
            py_type_name(v)
        ))),
    }
}

fn no_args(method: &str, args: &[Value]) -> Result<(), Error> {
    if args.is_empty() {
        Ok(())
    } else {
        Err(err(format!(
            "{method}() takes no arguments ({} given)",
            args.len()
        )))
    }
}

/// Python slice-index normalisation (`s[start:end]` bounds) over `len` code points.
fn slice_bounds(len: usize, start: Option<i64>, end: Option<i64>) -> (i64, i64) {
    let len = len as i64;
    let norm = |i: i64| if i < 0 { (i + len).max(0) } else { i };
    let start = start.map(norm).unwrap_or(0);
    let end = end.map(norm).unwrap_or(len).min(len);
    (start, end)
}

fn chars_of(s: &str) -> Vec<char> {
    s.chars().collect()
}

fn find_in(hay: &[char], needle: &[char], start: i64, end: i64, reverse: bool) -> i64 {
    if end - start < needle.len() as i64 || start > hay.len() as i64 {
        return -1;
    }
    let (start, end) = (start as usize, end as usize);
    let window = &hay[start..end];
    if needle.is_empty() {
        return if reverse { end as i64 } else { start as i64 };
    }
    let positions = 0..=(window.len() - needle.len());
    let hit = if reverse {
        positions
            .rev()
            .find(|&i| window[i..i + needle.len()] == *needle)
    } else {
        positions
            .clone()
            .find(|&i| window[i..i + needle.len()] == *needle)
    };
    hit.map(|i| (i + start) as i64).unwrap_or(-1)
}

fn check_width(width: i64) -> Result<usize, Error> {
    if width > MAX_PADDED_LEN as i64 {
        return Err(super::limits::limit_error(
            "a string method built a string over 10,000,000 characters",
        ));
    }
    Ok(width.max(0) as usize)
}

fn fill_char(method: &str, v: &Option<Value>) -> Result<char, Error> {
    match opt_str(method, v, false)? {
        None => Ok(' '),
        Some(s) => {
            let mut it = s.chars();
            match (it.next(), it.next()) {
                (Some(c), None) => Ok(c),
                _ => Err(err("The fill character must be exactly one character long")),
            }
        }
    }
}

/// Python `str.center` / `str.ljust` / `str.rjust`.
pub fn py_pad(method: &str, s: &str, width: i64, fill: char) -> Result<String, Error> {
    let width = check_width(width)?;
    let len = s.chars().count();
    if len >= width {
        return Ok(s.to_string());
    }
    let marg = width - len;
    let left = match method {
        "center" => marg / 2 + (marg & width & 1),
        "ljust" => 0,
        _ => marg,
    };
    let fill = fill.to_string();
    Ok(format!(
        "{}{s}{}",
        fill.repeat(left),
        fill.repeat(marg - left)
    ))
}

fn upper_str(c: char) -> String {
    c.to_uppercase().collect()
}

fn lower_str(c: char) -> String {
    c.to_lowercase().collect()
}

fn is_cased(c: char) -> bool {
    c.is_lowercase() || c.is_uppercase()
}

/// Python `str.title()`.
pub fn py_title(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut prev_cased = false;
    for c in s.chars() {
        if prev_cased {
            out.push_str(&lower_str(c));
        } else {
            out.push_str(&upper_str(c));
        }
        prev_cased = is_cased(c);
    }
    out
}

/// Python `str.capitalize()` (3.8+: first character title-cased, the rest lower-cased).
pub fn py_capitalize(s: &str) -> String {
    let mut chars = s.chars();
    match chars.next() {
        None => String::new(),
        Some(first) => {
            let mut out = upper_str(first);
            for c in chars {
                out.push_str(&lower_str(c));
            }
            out
        }
    }
}

/// Python `str.split(sep, maxsplit)`.
pub fn py_split(s: &str, sep: Option<&str>, maxsplit: i64) -> Result<Vec<String>, Error> {
    let mut out = Vec::new();
    match sep {
        Some("") => return Err(err("empty separator")),
        Some(sep) => {
            let mut rest = s;
            let mut splits = 0;
            while maxsplit < 0 || splits < maxsplit {
                match rest.find(sep) {
                    Some(idx) => {
                        out.push(rest[..idx].to_string());
                        rest = &rest[idx + sep.len()..];
                        splits += 1;
                    }
                    None => break,
                }
            }
            out.push(rest.to_string());
        }
        None => {
            let mut rest = s.trim_start_matches(is_py_space);
            let mut splits = 0;
            while !rest.is_empty() {
                if maxsplit >= 0 && splits >= maxsplit {
                    out.push(rest.to_string());
                    break;
                }
                match rest.find(is_py_space) {
                    Some(idx) => {
                        out.push(rest[..idx].to_string());
                        rest = rest[idx..].trim_start_matches(is_py_space);
                        splits += 1;
                    }
                    None => {
                        out.push(rest.to_string());
                        break;
                    }
                }
            }
        }
    }
    Ok(out)
}

/// Python `str.rsplit(sep, maxsplit)`.
pub fn py_rsplit(s: &str, sep: Option<&str>, maxsplit: i64) -> Result<Vec<String>, Error> {
    let mut out = Vec::new();
    match sep {
        Some("") => return Err(err("empty separator")),
        Some(sep) => {
            let mut rest = s;
            let mut splits = 0;
            while maxsplit < 0 || splits < maxsplit {
                match rest.rfind(sep) {
                    Some(idx) => {
                        out.push(rest[idx + sep.len()..].to_string());
                        rest = &rest[..idx];
                        splits += 1;
                    }
                    None => break,
                }
            }
            out.push(rest.to_string());
        }
        None => {
            let mut rest = s.trim_end_matches(is_py_space);
            let mut splits = 0;
            while !rest.is_empty() {
                if maxsplit >= 0 && splits >= maxsplit {
                    out.push(rest.to_string());
                    break;
                }
                match rest.rfind(is_py_space) {
                    Some(idx) => {
                        let c_len = rest[idx..].chars().next().map(char::len_utf8).unwrap_or(1);
                        out.push(rest[idx + c_len..].to_string());
                        rest = rest[..idx].trim_end_matches(is_py_space);
                        splits += 1;
                    }
                    None => {
                        out.push(rest.to_string());
                        break;
                    }
                }
            }
        }
    }
    out.reverse();
    Ok(out)
}

/// Python `str.splitlines(keepends)`.
pub fn py_splitlines(s: &str, keepends: bool) -> Vec<String> {
    let mut out = Vec::new();
    let mut line_start = 0;
    let mut iter = s.char_indices().peekable();
    while let Some((idx, c)) = iter.next() {
        if is_line_break(c) {
            let mut end = idx + c.len_utf8();
            if c == '\r' {
                if let Some(&(_, '\n')) = iter.peek() {
                    iter.next();
                    end += 1;
                }
            }
            out.push(
                if keepends {
                    &s[line_start..end]
                } else {
                    &s[line_start..idx]
                }
                .to_string(),
            );
            line_start = end;
        }
    }
    if line_start < s.len() {
        out.push(s[line_start..].to_string());
    }
    out
}

fn str_list(items: Vec<String>) -> Value {
    Value::from_object(PyList(items.into_iter().map(Value::from).collect()))
}

fn prefix_matches(
    method: &str,
    s: &str,
    arg: &Value,
    start: Option<i64>,
    end: Option<i64>,
    suffix: bool,
) -> Result<bool, Error> {
    let chars = chars_of(s);
    let (start, end) = slice_bounds(chars.len(), start, end);
    let check = |p: &str| -> bool {
        let p: Vec<char> = p.chars().collect();
        if start > chars.len() as i64 || end - start < p.len() as i64 {
            return false;
        }
        let (start, end) = (start as usize, end as usize);
        if suffix {
            chars[end - p.len()..end] == *p
        } else {
            chars[start..start + p.len()] == *p
        }
    };
    if arg.kind() == ValueKind::String {
        return Ok(check(arg.as_str().unwrap_or_default()));
    }
    if arg.is_tuple() {
        for item in arg.try_iter()? {
            match item.as_str() {
                Some(p) if item.kind() == ValueKind::String => {
                    if check(p) {
                        return Ok(true);
                    }
                }
                _ => {
                    return Err(err(format!(
                        "tuple for {method} must only contain str, not {}",
                        py_type_name(&item)
                    )))
                }
            }
        }
        return Ok(false);
    }
    Err(err(format!(
        "{method} first arg must be str or a tuple of str, not {}",
        py_type_name(arg)
    )))
}

fn tuple3(a: &str, b: &str, c: &str) -> Value {
    Value::from(minijinja::value::Tuple::from([
        Value::from(a),
        Value::from(b),
        Value::from(c),
    ]))
}

fn string_method(s: &str, method: &str, args: &[Value]) -> Result<Value, Error> {
    let b = |names: &[&str], required: usize| bind(method, args, names, required);
    Ok(match method {
        "strip" | "lstrip" | "rstrip" => {
            let a = b(&["chars"], 0)?;
            let chars = opt_str(method, &a[0], true)?;
            Value::from(py_strip(s, chars, method != "rstrip", method != "lstrip"))
        }
        "split" | "rsplit" => {
            let a = b(&["sep", "maxsplit"], 0)?;
            let sep = opt_str(method, &a[0], true)?;
            let maxsplit = opt_int(method, &a[1])?.unwrap_or(-1);
            str_list(if method == "split" {
                py_split(s, sep, maxsplit)?
            } else {
                py_rsplit(s, sep, maxsplit)?
            })
        }
        "splitlines" => {
            let a = b(&["keepends"], 0)?;
            let keepends = a[0].as_ref().map(|v| v.is_true()).unwrap_or(false);
            str_list(py_splitlines(s, keepends))
        }
        "startswith" | "endswith" => {
            let a = b(&["prefix", "start", "end"], 1)?;
            let start = opt_int(method, &a[1])?;
            let end = opt_int(method, &a[2])?;
            let arg = a[0].clone().unwrap_or_default();
            Value::from(prefix_matches(
                method,
                s,
                &arg,
                start,
                end,
                method == "endswith",
            )?)
        }
        "replace" => {
            let a = b(&["old", "new", "count"], 2)?;
            let old = req_str(method, &a[0])?;
            let new = req_str(method, &a[1])?;
            let count = opt_int(method, &a[2])?.unwrap_or(-1);
            let estimate = if old.is_empty() {
                s.chars().count() + 1
            } else {
                s.matches(old).count()
            };
            if new.len().saturating_mul(estimate) > MAX_PADDED_LEN {
                return Err(super::limits::limit_error(
                    "str.replace built a string over 10,000,000 bytes",
                ));
            }
            Value::from(if count < 0 {
                s.replace(old, new)
            } else {
                s.replacen(old, new, count as usize)
            })
        }
        "lower" => {
            no_args(method, args)?;
            Value::from(s.to_lowercase())
        }
        "upper" => {
            no_args(method, args)?;
            Value::from(s.to_uppercase())
        }
        "casefold" => {
            no_args(method, args)?;
            Value::from(s.to_lowercase())
        }
        "swapcase" => {
            no_args(method, args)?;
            Value::from(
                s.chars()
                    .map(|c| {
                        if c.is_uppercase() {
                            lower_str(c)
                        } else if c.is_lowercase() {
                            upper_str(c)
                        } else {
                            c.to_string()
                        }
                    })
                    .collect::<String>(),
            )
        }
        "title" => {
            no_args(method, args)?;
            Value::from(py_title(s))
        }
        "capitalize" => {
            no_args(method, args)?;
            Value::from(py_capitalize(s))
        }
        "find" | "rfind" | "index" | "rindex" | "count" => {
            let a = b(&["sub", "start", "end"], 1)?;
            let sub = req_str(method, &a[0])?;
            let hay = chars_of(s);
            let needle = chars_of(sub);
            let (start, end) =
                slice_bounds(hay.len(), opt_int(method, &a[1])?, opt_int(method, &a[2])?);
            if method == "count" {
                if end - start < needle.len() as i64 || start > hay.len() as i64 {
                    return Ok(Value::from(0));
                }
                if needle.is_empty() {
                    return Ok(Value::from(end - start + 1));
                }
                let window = &hay[start as usize..end as usize];
                let (mut i, mut n) = (0usize, 0i64);
                while i + needle.len() <= window.len() {
                    if window[i..i + needle.len()] == *needle {
                        n += 1;
                        i += needle.len();
                    } else {
                        i += 1;
                    }
                }
                return Ok(Value::from(n));
            }
            let pos = find_in(&hay, &needle, start, end, method.starts_with('r'));
            if pos < 0 && method.ends_with("index") {
                return Err(err("substring not found"));
            }
            Value::from(pos)
        }
        "join" => {
            let a = b(&["iterable"], 1)?;
            let iterable = a[0].clone().unwrap_or_default();
            let mut out = String::new();
            for (idx, item) in iterable.try_iter()?.enumerate() {
                match item.as_str() {
                    Some(piece) if item.kind() == ValueKind::String => {
                        if idx > 0 {
                            out.push_str(s);
                        }
                        out.push_str(piece);
                    }
                    _ => {
                        return Err(err(format!(
                            "sequence item {idx}: expected str instance, {} found",
                            py_type_name(&item)
                        )))
                    }
                }
            }
            Value::from(out)
        }
        "partition" | "rpartition" => {
            let a = b(&["sep"], 1)?;
            let sep = req_str(method, &a[0])?;
            if sep.is_empty() {
                return Err(err("empty separator"));
            }
            let found = if method == "partition" {
                s.find(sep)
            } else {
                s.rfind(sep)
            };
            match found {
                Some(idx) => tuple3(&s[..idx], sep, &s[idx + sep.len()..]),
                None if method == "partition" => tuple3(s, "", ""),
                None => tuple3("", "", s),
            }
        }
        "removeprefix" => {
            let a = b(&["prefix"], 1)?;
            let p = req_str(method, &a[0])?;
            Value::from(s.strip_prefix(p).unwrap_or(s))
        }
        "removesuffix" => {
            let a = b(&["suffix"], 1)?;
            let p = req_str(method, &a[0])?;
            Value::from(s.strip_suffix(p).unwrap_or(s))
        }
        "zfill" => {
            let a = b(&["width"], 1)?;
            let width = check_width(opt_int(method, &a[0])?.unwrap_or(0))?;
            let len = s.chars().count();
            if len >= width {
                Value::from(s)
            } else {
                let zeros = "0".repeat(width - len);
                match s.chars().next() {
                    Some(sign @ ('+' | '-')) => Value::from(format!("{sign}{zeros}{}", &s[1..])),
                    _ => Value::from(format!("{zeros}{s}")),
                }
            }
        }
        "center" | "ljust" | "rjust" => {
            let a = b(&["width", "fillchar"], 1)?;
            let width = opt_int(method, &a[0])?.unwrap_or(0);
            let fill = fill_char(method, &a[1])?;
            Value::from(py_pad(method, s, width, fill)?)
        }
        "expandtabs" => {
            let a = b(&["tabsize"], 0)?;
            let tabsize = opt_int(method, &a[0])?.unwrap_or(8).max(0) as usize;
            let mut out = String::new();
            let mut col = 0usize;
            for c in s.chars() {
                match c {
                    '\t' => {
                        if tabsize > 0 {
                            let n = tabsize - col % tabsize;
                            check_width((out.len() + n) as i64)?;
                            out.extend(std::iter::repeat_n(' ', n));
                            col += n;
                        }
                    }
                    '\n' | '\r' => {
                        out.push(c);
                        col = 0;
                    }
                    c => {
                        out.push(c);
                        col += 1;
                    }
                }
            }
            Value::from(out)
        }
        "isspace" | "isdigit" | "isdecimal" | "isnumeric" | "isalpha" | "isalnum"
        | "isprintable" | "isidentifier" | "isascii" | "islower" | "isupper" | "istitle" => {
            no_args(method, args)?;
            Value::from(str_predicate(method, s))
        }
        "format" => {
            let (positional, kwargs) = split_kwargs(args)?;
            Value::from(super::pyformat::py_format(s, positional, kwargs.as_ref())?)
        }
        "encode" | "maketrans" | "translate" | "format_map" => {
            return Err(Error::new(
                ErrorKind::UnknownMethod,
                format!("str.{method}() is not supported in chat templates"),
            ))
        }
        _ => return Err(Error::from(ErrorKind::UnknownMethod)),
    })
}

fn str_predicate(method: &str, s: &str) -> bool {
    let nonempty = !s.is_empty();
    match method {
        "isspace" => nonempty && s.chars().all(is_py_space),
        "isdigit" | "isdecimal" => {
            nonempty
                && s.chars()
                    .all(|c| c.is_ascii_digit() || (!c.is_ascii() && c.is_numeric()))
        }
        "isnumeric" => nonempty && s.chars().all(char::is_numeric),
        "isalpha" => nonempty && s.chars().all(char::is_alphabetic),
        "isalnum" => nonempty && s.chars().all(char::is_alphanumeric),
        "isprintable" => s.chars().all(is_printable),
        "isascii" => s.is_ascii(),
        "isidentifier" => {
            let mut chars = s.chars();
            match chars.next() {
                Some(c) if c == '_' || c.is_alphabetic() => {
                    chars.all(|c| c == '_' || c.is_alphanumeric())
                }
                _ => false,
            }
        }
        "islower" => s.chars().any(char::is_lowercase) && !s.chars().any(char::is_uppercase),
        "isupper" => s.chars().any(char::is_uppercase) && !s.chars().any(char::is_lowercase),
        "istitle" => {
            let (mut cased, mut prev_cased) = (false, false);
            for c in s.chars() {
                if c.is_uppercase() {
                    if prev_cased {
                        return false;
                    }
                    prev_cased = true;
                    cased = true;
                } else if c.is_lowercase() {
                    if !prev_cased {
                        return false;
                    }
                    prev_cased = true;
                    cased = true;
                } else {
                    prev_cased = false;
                }
            }
            cased
        }
        _ => false,
    }
}

const DICT_MUTATORS: &[&str] = &[
    "clear",
    "pop",
    "popitem",
    "setdefault",
    "update",
    "__setitem__",
    "__delitem__",
];
const LIST_MUTATORS: &[&str] = &[
    "append",
    "clear",
    "extend",
    "insert",
    "pop",
    "remove",
    "reverse",
    "sort",
    "__setitem__",
    "__delitem__",
];

fn unsafe_attr(method: &str, kind: &str) -> Error {
    Error::new(
        ErrorKind::InvalidOperation,
        format!("access to attribute '{method}' of '{kind}' object is unsafe."),
    )
}

/// The unknown-method callback installed on the environment.
pub fn unknown_method_callback(
    state: &mut State,
    value: &Value,
    method: &str,
    args: &[Value],
) -> Result<Value, Error> {
    match value.kind() {
        ValueKind::String => {
            let s = value.as_str().unwrap_or_default().to_string();
            string_method(&s, method, args)
        }
        ValueKind::Map => {
            if DICT_MUTATORS.contains(&method) {
                return Err(unsafe_attr(method, "dict"));
            }
            match method {
                "copy" => {
                    no_args(method, args)?;
                    let obj = value.as_object();
                    let pairs = obj.and_then(|o| o.try_iter_pairs()).into_iter().flatten();
                    Ok(Value::from_object(PyDict(pairs.collect())))
                }
                "get" => {
                    let a = bind(method, args, &["key", "default"], 1)?;
                    let key = a[0].clone().unwrap_or_default();
                    let found = value.as_object().and_then(|o| o.get_value(&key));
                    Ok(found.unwrap_or_else(|| a[1].clone().unwrap_or_else(|| Value::from(()))))
                }
                _ => {
                    minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args)
                }
            }
        }
        ValueKind::Seq => {
            if LIST_MUTATORS.contains(&method) {
                return Err(unsafe_attr(
                    method,
                    if value.is_tuple() { "tuple" } else { "list" },
                ));
            }
            match method {
                "index" => {
                    let a = bind(method, args, &["value", "start", "end"], 1)?;
                    let needle = a[0].clone().unwrap_or_default();
                    let items: Vec<Value> = value.try_iter()?.collect();
                    let (start, end) = slice_bounds(
                        items.len(),
                        opt_int(method, &a[1])?,
                        opt_int(method, &a[2])?,
                    );
                    for i in start.max(0)..end {
                        if items[i as usize] == needle {
                            return Ok(Value::from(i));
                        }
                    }
                    Err(err(format!(
                        "{} is not in list",
                        super::pyrepr::py_repr(&needle)
                    )))
                }
                "copy" => {
                    no_args(method, args)?;
                    Ok(Value::from_object(PyList(value.try_iter()?.collect())))
                }
                _ => {
                    minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args)
                }
            }
        }
        _ => Err(Error::from(ErrorKind::UnknownMethod)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_like_python() {
        assert_eq!(
            py_split("  a b  c  ", None, -1).unwrap(),
            vec!["a", "b", "c"]
        );
        assert_eq!(
            py_split("  a b  c  ", None, 1).unwrap(),
            vec!["a", "b  c  "]
        );
        assert_eq!(
            py_rsplit("  a b  c  ", None, 1).unwrap(),
            vec!["  a b", "c"]
        );
        assert_eq!(
            py_split("a,b,,c", Some(","), -1).unwrap(),
            vec!["a", "b", "", "c"]
        );
        assert_eq!(py_rsplit("a/b/c", Some("/"), 1).unwrap(), vec!["a/b", "c"]);
        assert_eq!(py_split("", None, -1).unwrap(), Vec::<String>::new());
        assert_eq!(py_split("", Some(","), -1).unwrap(), vec![""]);
        assert_eq!(
            py_split("a\u{1c}b\u{85}c", None, -1).unwrap(),
            vec!["a", "b", "c"]
        );
        assert!(py_split("x", Some(""), -1).is_err());
    }

    #[test]
    fn splitlines_like_python() {
        assert_eq!(
            py_splitlines("a\u{b}b\nc\r\nd", false),
            vec!["a", "b", "c", "d"]
        );
        assert_eq!(py_splitlines("a\n\nb\n", false), vec!["a", "", "b"]);
        assert_eq!(py_splitlines("a\r\nb\r", true), vec!["a\r\n", "b\r"]);
        assert_eq!(py_splitlines("", false), Vec::<String>::new());
    }

    #[test]
    fn strip_like_python() {
        assert_eq!(py_strip("\u{1c}A\u{1f} \u{85}", None, true, true), "A");
        assert_eq!(py_strip("xxaxx", Some("x"), true, false), "axx");
        assert_eq!(py_strip("xxaxy", Some("xy"), false, true), "xxa");
    }

    #[test]
    fn title_and_capitalize() {
        assert_eq!(py_title("they're bill's 1st"), "They'Re Bill'S 1St");
        assert_eq!(py_capitalize("hELLO wORLD"), "Hello world");
    }
}
