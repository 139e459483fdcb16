//! Python semantics for the operators whose minijinja behaviour differs from jinja2's:
//! `+` (markupsafe `Markup` escaping, strict types), `%` (printf-style string formatting),
//! `~` (Python `str()` of each side) and `for … in` (iterating `None` fails).
//!
//! The template source is rewritten so that these operators call the functions below (see
//! `rewrite.rs`).
use std::fmt::Write as _;

use minijinja::value::{Tuple, Value, ValueKind};
use minijinja::{Error, ErrorKind};

use super::pyrepr::{py_repr, py_str};
use super::tojson::py_type_name;
use super::values::PyList;

/// Largest string or list an operator may build (minijinja's own bound for `'x' * n`).
const MAX_LEN: usize = 100_000_000;
/// Largest list `+` may build.
const MAX_ITEMS: usize = 1_000_000;

pub const ADD_FN: &str = "__py_add";
pub const MOD_FN: &str = "__py_mod";
pub const CONCAT_FN: &str = "__py_concat";
pub const ITER_FN: &str = "__py_iter";
pub const MUL_FN: &str = "__py_mul";

fn type_error(msg: String) -> Error {
    Error::new(ErrorKind::InvalidOperation, msg)
}

fn undefined_error() -> Error {
    Error::new(
        ErrorKind::UndefinedError,
        "undefined value used in an operation",
    )
}

fn check_len(len: usize) -> Result<(), Error> {
    let max = super::limits::max_string_len().min(MAX_LEN);
    if len > max {
        Err(super::limits::limit_error(&format!(
            "an operator built a string over {max} bytes"
        )))
    } else {
        Ok(())
    }
}

/// Python `str(v)` without copying strings.
fn str_of(v: &Value) -> std::borrow::Cow<'_, str> {
    match v.as_str() {
        Some(s) if v.kind() == ValueKind::String => std::borrow::Cow::Borrowed(s),
        _ => std::borrow::Cow::Owned(py_str(v)),
    }
}

fn is_str(v: &Value) -> bool {
    v.kind() == ValueKind::String
}

fn is_num(v: &Value) -> bool {
    matches!(v.kind(), ValueKind::Number | ValueKind::Bool)
}

fn is_float(v: &Value) -> bool {
    v.kind() == ValueKind::Number && !v.is_integer()
}

fn as_i128(v: &Value) -> Option<i128> {
    if v.kind() == ValueKind::Bool {
        return Some(i128::from(v.is_true()));
    }
    i128::try_from(v.clone()).ok()
}

fn as_f64(v: &Value) -> f64 {
    if v.kind() == ValueKind::Bool {
        return if v.is_true() { 1.0 } else { 0.0 };
    }
    f64::try_from(v.clone()).unwrap_or(f64::NAN)
}

/// markupsafe's `escape()`: safe strings pass through.
fn escape_text(v: &Value) -> String {
    let s = py_str(v);
    if v.is_safe() {
        return s;
    }
    crate::escape::markupsafe(&s)
}

/// Python `a + b` (with markupsafe's `Markup.__add__`/`__radd__`).
pub fn py_add(a: &Value, b: &Value) -> Result<Value, Error> {
    if a.is_undefined() || b.is_undefined() {
        return Err(undefined_error());
    }
    if is_str(a) && is_str(b) {
        let (sa, sb) = (
            a.as_str().unwrap_or_default(),
            b.as_str().unwrap_or_default(),
        );
        check_len(sa.len() + sb.len())?;
        if a.is_safe() || b.is_safe() {
            return Ok(Value::from_safe_string(format!(
                "{}{}",
                escape_text(a),
                escape_text(b)
            )));
        }
        return Ok(Value::from(format!("{sa}{sb}")));
    }
    if is_num(a) && is_num(b) {
        if is_float(a) || is_float(b) {
            return Ok(Value::from(as_f64(a) + as_f64(b)));
        }
        return match (as_i128(a), as_i128(b)) {
            (Some(x), Some(y)) => x
                .checked_add(y)
                .map(Value::from)
                .ok_or_else(|| type_error("integer overflow in +".into())),
            _ => Ok(Value::from(as_f64(a) + as_f64(b))),
        };
    }
    if a.kind() == ValueKind::Seq && b.kind() == ValueKind::Seq && a.is_tuple() == b.is_tuple() {
        let len = a.len().unwrap_or(0) + b.len().unwrap_or(0);
        if len > MAX_ITEMS {
            return Err(super::limits::limit_error(
                "an operator built a list over 1,000,000 items",
            ));
        }
        let items: Vec<Value> = a.try_iter()?.chain(b.try_iter()?).collect();
        return Ok(if a.is_tuple() {
            Value::from(Tuple::from(items))
        } else {
            Value::from_object(PyList(items))
        });
    }
    if is_str(a) {
        return Err(type_error(format!(
            "can only concatenate str (not \"{}\") to str",
            py_type_name(b)
        )));
    }
    if a.kind() == ValueKind::Seq && b.kind() == ValueKind::Seq {
        return Err(type_error(format!(
            "can only concatenate {} (not \"{}\") to {}",
            py_type_name(a),
            py_type_name(b),
            py_type_name(a)
        )));
    }
    Err(type_error(format!(
        "unsupported operand type(s) for +: '{}' and '{}'",
        py_type_name(a),
        py_type_name(b)
    )))
}

/// Python `a * b`: numbers, or repetition of a string / list / tuple by an int.
pub fn py_mul(a: &Value, b: &Value) -> Result<Value, Error> {
    if a.is_undefined() || b.is_undefined() {
        return Err(undefined_error());
    }
    if is_num(a) && is_num(b) {
        if is_float(a) || is_float(b) {
            return Ok(Value::from(as_f64(a) * as_f64(b)));
        }
        return match (as_i128(a), as_i128(b)) {
            (Some(x), Some(y)) => x
                .checked_mul(y)
                .map(Value::from)
                .ok_or_else(|| type_error("integer overflow in *".into())),
            _ => Ok(Value::from(as_f64(a) * as_f64(b))),
        };
    }
    let (seq, n) = match (is_num(a) && !is_float(a), is_num(b) && !is_float(b)) {
        (_, true) => (a, b),
        (true, _) => (b, a),
        _ => {
            return Err(type_error(format!(
                "can't multiply sequence by non-int of type '{}'",
                py_type_name(if is_num(a) { a } else { b })
            )))
        }
    };
    let n = as_i128(n).unwrap_or(0).max(0) as usize;
    if is_str(seq) {
        let s = seq.as_str().unwrap_or_default();
        check_len(s.len().saturating_mul(n))?;
        let out = s.repeat(n);
        return Ok(if seq.is_safe() {
            Value::from_safe_string(out)
        } else {
            Value::from(out)
        });
    }
    if seq.kind() == ValueKind::Seq {
        let items: Vec<Value> = seq.try_iter()?.collect();
        if items.len().saturating_mul(n) > MAX_ITEMS {
            return Err(super::limits::limit_error(
                "an operator built a list over 1,000,000 items",
            ));
        }
        let mut out = Vec::with_capacity(items.len() * n);
        for _ in 0..n {
            out.extend(items.iter().cloned());
        }
        return Ok(if seq.is_tuple() {
            Value::from(Tuple::from(out))
        } else {
            Value::from_object(PyList(out))
        });
    }
    Err(type_error(format!(
        "unsupported operand type(s) for *: '{}' and '{}'",
        py_type_name(a),
        py_type_name(b)
    )))
}

/// jinja2's `~`: `str(a) + str(b)` (undefined prints as nothing).
pub fn py_concat(a: &Value, b: &Value) -> Result<Value, Error> {
    let (sa, sb) = (str_of(a), str_of(b));
    check_len(sa.len() + sb.len())?;
    let mut out = String::with_capacity(sa.len() + sb.len());
    out.push_str(&sa);
    out.push_str(&sb);
    Ok(Value::from(out))
}

/// `for x in value`: Python refuses to iterate `None` and numbers.
pub fn py_iter(v: &Value) -> Result<Value, Error> {
    match v.kind() {
        ValueKind::None | ValueKind::Bool | ValueKind::Number => Err(type_error(format!(
            "'{}' object is not iterable",
            py_type_name(v)
        ))),
        _ => Ok(v.clone()),
    }
}

/// Python `a % b`: printf-style formatting for strings, floored modulo for numbers.
pub fn py_mod(a: &Value, b: &Value) -> Result<Value, Error> {
    if a.is_undefined() || b.is_undefined() {
        return Err(undefined_error());
    }
    if is_str(a) {
        let out = percent_format(a.as_str().unwrap_or_default(), b, a.is_safe())?;
        return Ok(if a.is_safe() {
            Value::from_safe_string(out)
        } else {
            Value::from(out)
        });
    }
    if is_num(a) && is_num(b) {
        if is_float(a) || is_float(b) {
            let (x, y) = (as_f64(a), as_f64(b));
            if y == 0.0 {
                return Err(type_error("float modulo".into()));
            }
            let mut m = x % y;
            if m != 0.0 {
                if (y < 0.0) != (m < 0.0) {
                    m += y;
                }
            } else {
                m = 0.0f64.copysign(y);
            }
            return Ok(Value::from(m));
        }
        let (x, y) = (as_i128(a).unwrap_or(0), as_i128(b).unwrap_or(0));
        if y == 0 {
            return Err(type_error("integer division or modulo by zero".into()));
        }
        let mut r = x % y;
        if r != 0 && ((r < 0) != (y < 0)) {
            r += y;
        }
        return Ok(Value::from(r));
    }
    Err(type_error(format!(
        "unsupported operand type(s) for %: '{}' and '{}'",
        py_type_name(a),
        py_type_name(b)
    )))
}

struct Spec {
    left: bool,
    plus: bool,
    space: bool,
    alt: bool,
    zero: bool,
    width: Option<usize>,
    precision: Option<usize>,
}

fn pad(body: String, spec: &Spec, numeric: bool) -> String {
    let width = spec.width.unwrap_or(0);
    let len = body.chars().count();
    if len >= width {
        return body;
    }
    let fill = width - len;
    if spec.left {
        format!("{body}{}", " ".repeat(fill))
    } else if spec.zero && numeric {
        // zeros go after the sign / prefix
        let sign_len = usize::from(body.starts_with(['-', '+', ' ']));
        let (sign, rest) = body.split_at(sign_len);
        let (prefix, digits) =
            if rest.starts_with("0x") || rest.starts_with("0X") || rest.starts_with("0o") {
                rest.split_at(2)
            } else {
                ("", rest)
            };
        format!("{sign}{prefix}{}{digits}", "0".repeat(fill))
    } else {
        format!("{}{body}", " ".repeat(fill))
    }
}

fn sign_prefix(negative: bool, spec: &Spec) -> &'static str {
    if negative {
        "-"
    } else if spec.plus {
        "+"
    } else if spec.space {
        " "
    } else {
        ""
    }
}

/// C/Python `%e` with the exponent printed with at least two digits.
fn fmt_exp(x: f64, prec: usize, upper: bool) -> String {
    let s = format!("{:.*e}", prec, x);
    let (mant, exp) = s.split_once('e').unwrap_or((&s, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let out = format!(
        "{mant}e{}{:02}",
        if exp < 0 { '-' } else { '+' },
        exp.unsigned_abs()
    );
    if upper {
        out.to_uppercase()
    } else {
        out
    }
}

fn strip_trailing_zeros(s: &str) -> String {
    let (mant, exp) = match s.find(['e', 'E']) {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, ""),
    };
    let mant = if mant.contains('.') {
        mant.trim_end_matches('0').trim_end_matches('.')
    } else {
        mant
    };
    format!("{mant}{exp}")
}

fn fmt_float(x: f64, conv: char, spec: &Spec) -> String {
    let upper = conv.is_ascii_uppercase();
    let body = if x.is_nan() {
        "nan".to_string()
    } else if x.is_infinite() {
        "inf".to_string()
    } else {
        let ax = x.abs();
        let prec = spec.precision.unwrap_or(6);
        match conv.to_ascii_lowercase() {
            'f' => format!("{ax:.prec$}"),
            'e' => fmt_exp(ax, prec, false),
            _ => {
                let p = prec.max(1);
                let exp = if ax == 0.0 {
                    0
                } else {
                    let e = fmt_exp(ax, p - 1, false);
                    e.split_once('e')
                        .and_then(|(_, x)| x.parse::<i32>().ok())
                        .unwrap_or(0)
                };
                let s = if exp < -4 || exp >= p as i32 {
                    fmt_exp(ax, p - 1, false)
                } else {
                    let decimals = (p as i32 - 1 - exp).max(0) as usize;
                    format!("{ax:.decimals$}")
                };
                if spec.alt {
                    s
                } else {
                    strip_trailing_zeros(&s)
                }
            }
        }
    };
    let body = if upper { body.to_uppercase() } else { body };
    let negative = x.is_sign_negative() && !x.is_nan();
    format!("{}{body}", sign_prefix(negative, spec))
}

fn fmt_int(v: i128, conv: char, spec: &Spec) -> String {
    let mag = v.unsigned_abs();
    let mut digits = match conv {
        'x' => format!("{mag:x}"),
        'X' => format!("{mag:X}"),
        'o' => format!("{mag:o}"),
        _ => mag.to_string(),
    };
    if let Some(p) = spec.precision {
        if digits.len() < p {
            digits = format!("{}{digits}", "0".repeat(p - digits.len()));
        }
    }
    let prefix = match (spec.alt, conv) {
        (true, 'x') => "0x",
        (true, 'X') => "0X",
        (true, 'o') => "0o",
        _ => "",
    };
    format!("{}{prefix}{digits}", sign_prefix(v < 0, spec))
}

/// Python `fmt % args` (printf-style). With `escape`, arguments are escaped as markupsafe does.
pub fn percent_format(fmt: &str, args: &Value, escape: bool) -> Result<String, Error> {
    let (positional, mapping): (Vec<Value>, Option<&Value>) = if args.is_tuple() {
        (args.try_iter()?.collect(), None)
    } else if args.kind() == ValueKind::Map {
        (vec![args.clone()], Some(args))
    } else {
        (vec![args.clone()], None)
    };
    let chars: Vec<char> = fmt.chars().collect();
    let mut out = String::with_capacity(fmt.len() + 16);
    let mut next_arg = 0usize;
    let mut used_mapping = false;
    let mut i = 0;
    let take = |next_arg: &mut usize| -> Result<Value, Error> {
        let v = positional
            .get(*next_arg)
            .cloned()
            .ok_or_else(|| type_error("not enough arguments for format string".into()))?;
        *next_arg += 1;
        Ok(v)
    };
    while i < chars.len() {
        let c = chars[i];
        if c != '%' {
            out.push(c);
            i += 1;
            continue;
        }
        let start = i;
        i += 1;
        let mut key_value = None;
        if chars.get(i) == Some(&'(') {
            let mut depth = 1;
            let key_start = i + 1;
            i += 1;
            while i < chars.len() && depth > 0 {
                match chars[i] {
                    '(' => depth += 1,
                    ')' => depth -= 1,
                    _ => {}
                }
                i += 1;
            }
            if depth > 0 {
                return Err(type_error("incomplete format key".into()));
            }
            let key: String = chars[key_start..i - 1].iter().collect();
            let map = mapping.ok_or_else(|| type_error("format requires a mapping".into()))?;
            used_mapping = true;
            let v = map.get_item_opt_py(&key).ok_or_else(|| {
                Error::new(
                    ErrorKind::InvalidOperation,
                    format!("KeyError: {}", py_repr(&Value::from(key))),
                )
            })?;
            key_value = Some(v);
        }
        let mut spec = Spec {
            left: false,
            plus: false,
            space: false,
            alt: false,
            zero: false,
            width: None,
            precision: None,
        };
        while let Some(&f) = chars.get(i) {
            match f {
                '-' => spec.left = true,
                '+' => spec.plus = true,
                ' ' => spec.space = true,
                '#' => spec.alt = true,
                '0' => spec.zero = true,
                _ => break,
            }
            i += 1;
        }
        if chars.get(i) == Some(&'*') {
            let w = take(&mut next_arg)?;
            let w = as_i128(&w).ok_or_else(|| type_error("* wants int".into()))?;
            if w < 0 {
                spec.left = true;
            }
            spec.width = Some(w.unsigned_abs().min(MAX_LEN as u128) as usize);
            i += 1;
        } else {
            let mut w = None;
            while let Some(d) = chars.get(i).and_then(|c| c.to_digit(10)) {
                w = Some((w.unwrap_or(0usize) * 10 + d as usize).min(MAX_LEN));
                i += 1;
            }
            spec.width = w;
        }
        if chars.get(i) == Some(&'.') {
            i += 1;
            if chars.get(i) == Some(&'*') {
                let p = take(&mut next_arg)?;
                spec.precision = Some(as_i128(&p).unwrap_or(0).clamp(0, 10_000) as usize);
                i += 1;
            } else {
                let mut p = 0usize;
                while let Some(d) = chars.get(i).and_then(|c| c.to_digit(10)) {
                    p = (p * 10 + d as usize).min(10_000);
                    i += 1;
                }
                spec.precision = Some(p);
            }
        }
        while matches!(chars.get(i), Some('h' | 'l' | 'L')) {
            i += 1;
        }
        let Some(&conv) = chars.get(i) else {
            return Err(type_error("incomplete format".into()));
        };
        i += 1;
        if conv == '%' {
            out.push('%');
            continue;
        }
        let arg = match key_value.take() {
            Some(v) => v,
            None => take(&mut next_arg)?,
        };
        let piece = match conv {
            's' | 'r' | 'a' => {
                let mut s = match conv {
                    's' if escape => escape_text(&arg),
                    's' => py_str(&arg),
                    _ => {
                        let r = py_repr(&arg);
                        let r = if conv == 'a' { ascii_escape(&r) } else { r };
                        if escape {
                            escape_text(&Value::from(r))
                        } else {
                            r
                        }
                    }
                };
                if let Some(p) = spec.precision {
                    s = s.chars().take(p).collect();
                }
                pad(s, &spec, false)
            }
            'd' | 'i' | 'u' => {
                if !is_num(&arg) {
                    return Err(type_error(format!(
                        "%{conv} format: a real number is required, not {}",
                        py_type_name(&arg)
                    )));
                }
                let v = if is_float(&arg) {
                    let f = as_f64(&arg);
                    if !f.is_finite() {
                        return Err(type_error(
                            "cannot convert float infinity or NaN to integer".into(),
                        ));
                    }
                    f.trunc() as i128
                } else {
                    as_i128(&arg).unwrap_or(0)
                };
                pad(fmt_int(v, 'd', &spec), &spec, true)
            }
            'x' | 'X' | 'o' => {
                if !is_num(&arg) || is_float(&arg) {
                    return Err(type_error(format!(
                        "%{conv} format: an integer is required, not {}",
                        py_type_name(&arg)
                    )));
                }
                pad(
                    fmt_int(as_i128(&arg).unwrap_or(0), conv, &spec),
                    &spec,
                    true,
                )
            }
            'e' | 'E' | 'f' | 'F' | 'g' | 'G' => {
                if !is_num(&arg) {
                    return Err(type_error(format!(
                        "must be real number, not {}",
                        py_type_name(&arg)
                    )));
                }
                pad(fmt_float(as_f64(&arg), conv, &spec), &spec, true)
            }
            'c' => {
                let ch = if is_str(&arg) {
                    let s = arg.as_str().unwrap_or_default();
                    let mut it = s.chars();
                    match (it.next(), it.next()) {
                        (Some(c), None) => c,
                        _ => return Err(type_error("%c requires int or char".into())),
                    }
                } else {
                    as_i128(&arg)
                        .and_then(|n| u32::try_from(n).ok())
                        .and_then(char::from_u32)
                        .ok_or_else(|| type_error("%c arg not in range(0x110000)".into()))?
                };
                pad(ch.to_string(), &spec, false)
            }
            other => {
                return Err(type_error(format!(
                    "unsupported format character '{other}' (0x{:x}) at index {start}",
                    other as u32
                )))
            }
        };
        check_len(out.len() + piece.len())?;
        out.push_str(&piece);
    }
    if next_arg < positional.len() && mapping.is_none() && !used_mapping {
        return Err(type_error(
            "not all arguments converted during string formatting".into(),
        ));
    }
    Ok(out)
}

/// Python `ascii()` on top of `repr()`.
fn ascii_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        let cp = c as u32;
        if cp < 0x80 {
            out.push(c);
        } else if cp <= 0xff {
            let _ = write!(out, "\\x{cp:02x}");
        } else if cp <= 0xffff {
            let _ = write!(out, "\\u{cp:04x}");
        } else {
            let _ = write!(out, "\\U{cp:08x}");
        }
    }
    out
}

trait GetItemPy {
    fn get_item_opt_py(&self, key: &str) -> Option<Value>;
}

impl GetItemPy for Value {
    fn get_item_opt_py(&self, key: &str) -> Option<Value> {
        self.as_object()
            .and_then(|o| o.get_value(&Value::from(key)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fmt(f: &str, args: Value) -> String {
        percent_format(f, &args, false).unwrap_or_else(|e| format!("ERR {e}"))
    }

    fn tup(items: Vec<Value>) -> Value {
        Value::from(Tuple::from(items))
    }

    #[test]
    fn printf_like_python() {
        assert_eq!(
            fmt("%s-%d", tup(vec![Value::from("a"), Value::from(3)])),
            "a-3"
        );
        assert_eq!(fmt("%.2f", Value::from(3.25159)), "3.25");
        assert_eq!(
            fmt("%5s|%-5s|", tup(vec![Value::from("ab"), Value::from("c")])),
            "   ab|c    |"
        );
        assert_eq!(
            fmt(
                "%05d|%+d|% d",
                tup(vec![Value::from(-42), Value::from(5), Value::from(7)])
            ),
            "-0042|+5| 7"
        );
        assert_eq!(
            fmt(
                "%x %X %#x %o",
                tup(vec![
                    Value::from(255),
                    Value::from(255),
                    Value::from(255),
                    Value::from(8)
                ])
            ),
            "ff FF 0xff 10"
        );
        assert_eq!(
            fmt(
                "%e|%E|%g|%g|%g|%G",
                tup(vec![
                    Value::from(12345.678),
                    Value::from(0.000123),
                    Value::from(0.0001),
                    Value::from(1e-5),
                    Value::from(123456789.0),
                    Value::from(1e20)
                ])
            ),
            "1.234568e+04|1.230000E-04|0.0001|1e-05|1.23457e+08|1E+20"
        );
        assert_eq!(
            fmt("%s %r", tup(vec![Value::from(1.0), Value::from("x")])),
            "1.0 'x'"
        );
        assert_eq!(fmt("100%%", tup(vec![])), "100%");
        assert_eq!(fmt("%d", Value::from(3.9)), "3");
        assert!(fmt("%s %s", Value::from("a")).starts_with("ERR"));
        assert!(fmt("%s", tup(vec![Value::from(1), Value::from(2)])).starts_with("ERR"));
        assert_eq!(
            fmt(
                "%.3s|%c|%c",
                tup(vec![
                    Value::from("abcdef"),
                    Value::from(65),
                    Value::from("z")
                ])
            ),
            "abc|A|z"
        );
    }

    #[test]
    fn add_and_mod_like_python() {
        let safe = Value::from_safe_string("<b>".into());
        assert_eq!(
            py_add(&safe, &Value::from("<i>")).unwrap().as_str(),
            Some("<b>&lt;i&gt;")
        );
        assert_eq!(
            py_add(&Value::from("'"), &safe).unwrap().as_str(),
            Some("&#39;<b>")
        );
        assert!(py_add(&Value::from("a"), &Value::from(1)).is_err());
        assert_eq!(
            py_add(&Value::from(true), &Value::from(2)).unwrap(),
            Value::from(3)
        );
        assert_eq!(
            py_mod(&Value::from(-7), &Value::from(3)).unwrap(),
            Value::from(2)
        );
        assert_eq!(
            py_mod(&Value::from(7.5), &Value::from(-2)).unwrap(),
            Value::from(-0.5)
        );
        assert!(py_iter(&Value::from(())).is_err());
    }
}
