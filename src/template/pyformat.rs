//! Python `str.format` (PEP 3101): auto/manual field numbering, keyword fields, `.attr` and
//! `[key]` accessors, `!s`/`!r`/`!a` conversions, nested fields in the spec, and the format-spec
//! mini-language for strings, ints and floats.
use minijinja::value::{Kwargs, Value, ValueKind};
use minijinja::{Error, ErrorKind};

use super::pyrepr::{float_repr, py_repr, py_str};
use super::tojson::py_type_name;

/// Widest field a spec may ask for.
const MAX_WIDTH: usize = 1_000_000;

fn value_error(msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidOperation, msg.into())
}

/// `fmt.format(*args, **kwargs)`.
pub fn py_format(fmt: &str, args: &[Value], kwargs: Option<&Kwargs>) -> Result<String, Error> {
    let mut auto: Option<usize> = None;
    let mut manual = false;
    format_inner(fmt, args, kwargs, &mut auto, &mut manual, 0)
}

fn format_inner(
    fmt: &str,
    args: &[Value],
    kwargs: Option<&Kwargs>,
    auto: &mut Option<usize>,
    manual: &mut bool,
    depth: usize,
) -> Result<String, Error> {
    if depth > 2 {
        return Err(value_error("Max string recursion exceeded"));
    }
    let chars: Vec<char> = fmt.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '}' {
            if chars.get(i + 1) == Some(&'}') {
                out.push('}');
                i += 2;
                continue;
            }
            return Err(value_error("Single '}' encountered in format string"));
        }
        if c != '{' {
            out.push(c);
            i += 1;
            continue;
        }
        if chars.get(i + 1) == Some(&'{') {
            out.push('{');
            i += 2;
            continue;
        }
        // a replacement field: find its matching '}'
        let start = i + 1;
        let mut j = start;
        let mut nesting = 1;
        let mut in_brackets = false;
        while j < chars.len() {
            match chars[j] {
                '[' if !in_brackets => in_brackets = true,
                ']' if in_brackets => in_brackets = false,
                '{' if !in_brackets => nesting += 1,
                '}' if !in_brackets => {
                    nesting -= 1;
                    if nesting == 0 {
                        break;
                    }
                }
                _ => {}
            }
            j += 1;
        }
        if j >= chars.len() {
            return Err(value_error("expected '}' before end of string"));
        }
        let field: String = chars[start..j].iter().collect();
        out.push_str(&render_field(&field, args, kwargs, auto, manual, depth)?);
        i = j + 1;
    }
    Ok(out)
}

fn render_field(
    field: &str,
    args: &[Value],
    kwargs: Option<&Kwargs>,
    auto: &mut Option<usize>,
    manual: &mut bool,
    depth: usize,
) -> Result<String, Error> {
    // split "name!conv:spec" (the name may contain [..] with any characters)
    let mut name_end = field.len();
    let mut in_brackets = false;
    for (idx, c) in field.char_indices() {
        match c {
            '[' => in_brackets = true,
            ']' => in_brackets = false,
            '!' | ':' if !in_brackets => {
                name_end = idx;
                break;
            }
            _ => {}
        }
    }
    let name = &field[..name_end];
    let rest = &field[name_end..];
    let (conversion, spec) = if let Some(r) = rest.strip_prefix('!') {
        let mut it = r.chars();
        let conv = it
            .next()
            .ok_or_else(|| value_error("end of string while looking for conversion specifier"))?;
        let after = it.as_str();
        let spec = match after.strip_prefix(':') {
            Some(s) => s,
            None if after.is_empty() => "",
            None => return Err(value_error("expected ':' after conversion specifier")),
        };
        (Some(conv), spec)
    } else {
        (None, rest.strip_prefix(':').unwrap_or(""))
    };

    // first part of the name: index, keyword or empty (automatic)
    let first_end = name.find(['.', '[']).unwrap_or(name.len());
    let (first, accessors) = name.split_at(first_end);
    let mut value = if first.is_empty() {
        if *manual {
            return Err(value_error(
                "cannot switch from manual field specification to automatic field numbering",
            ));
        }
        let idx = auto.map(|n| n + 1).unwrap_or(0);
        *auto = Some(idx);
        args.get(idx).cloned().ok_or_else(|| {
            value_error(format!(
                "Replacement index {idx} out of range for positional args tuple"
            ))
        })?
    } else if let Ok(idx) = first.parse::<usize>() {
        if auto.is_some() {
            return Err(value_error(
                "cannot switch from automatic field numbering to manual field specification",
            ));
        }
        *manual = true;
        args.get(idx).cloned().ok_or_else(|| {
            value_error(format!(
                "Replacement index {idx} out of range for positional args tuple"
            ))
        })?
    } else {
        kwargs
            .and_then(|k| k.peek::<Value>(first).ok())
            .ok_or_else(|| value_error(format!("KeyError: {}", py_repr(&Value::from(first)))))?
    };

    // accessors: .attr and [key]
    let acc: Vec<char> = accessors.chars().collect();
    let mut k = 0;
    while k < acc.len() {
        match acc[k] {
            '.' => {
                let end = acc[k + 1..]
                    .iter()
                    .position(|c| *c == '.' || *c == '[')
                    .map_or(acc.len(), |p| p + k + 1);
                let attr: String = acc[k + 1..end].iter().collect();
                if value.kind() == ValueKind::Map {
                    return Err(value_error(format!(
                        "'dict' object has no attribute '{attr}'"
                    )));
                }
                value = value.get_attr(&attr)?;
                if value.is_undefined() {
                    return Err(value_error(format!("object has no attribute '{attr}'")));
                }
                k = end;
            }
            '[' => {
                let end = acc[k + 1..]
                    .iter()
                    .position(|c| *c == ']')
                    .map(|p| p + k + 1)
                    .ok_or_else(|| value_error("Missing ']' in format string"))?;
                let key: String = acc[k + 1..end].iter().collect();
                let key_value = match key.parse::<i64>() {
                    Ok(n) if !key.starts_with(['-', '+']) => Value::from(n),
                    _ => Value::from(key.as_str()),
                };
                let item = value.get_item(&key_value)?;
                if item.is_undefined() {
                    return Err(value_error(format!("KeyError: {}", py_repr(&key_value))));
                }
                value = item;
                k = end + 1;
            }
            _ => {
                return Err(value_error(
                    "Only '.' or '[' may follow ']' in format field specifier",
                ))
            }
        }
    }

    let value = match conversion {
        None => value,
        Some('s') => Value::from(py_str(&value)),
        Some('r') => Value::from(py_repr(&value)),
        Some('a') => Value::from(ascii_of(&py_repr(&value))),
        Some(c) => return Err(value_error(format!("Unknown conversion specifier {c}"))),
    };
    // nested replacement fields in the spec
    let spec = if spec.contains('{') {
        format_inner(spec, args, kwargs, auto, manual, depth + 1)?
    } else {
        spec.to_string()
    };
    format_value(&value, &spec)
}

fn ascii_of(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        let cp = c as u32;
        if cp < 0x80 {
            out.push(c);
        } else if cp <= 0xff {
            out.push_str(&format!("\\x{cp:02x}"));
        } else if cp <= 0xffff {
            out.push_str(&format!("\\u{cp:04x}"));
        } else {
            out.push_str(&format!("\\U{cp:08x}"));
        }
    }
    out
}

#[derive(Default)]
struct Spec {
    fill: Option<char>,
    align: Option<char>,
    sign: Option<char>,
    alt: bool,
    zero: bool,
    width: Option<usize>,
    grouping: Option<char>,
    precision: Option<usize>,
    ty: Option<char>,
}

fn parse_spec(spec: &str) -> Result<Spec, Error> {
    let c: Vec<char> = spec.chars().collect();
    let mut s = Spec::default();
    let mut i = 0;
    let is_align = |ch: char| matches!(ch, '<' | '>' | '=' | '^');
    if c.len() >= 2 && is_align(c[1]) {
        s.fill = Some(c[0]);
        s.align = Some(c[1]);
        i = 2;
    } else if !c.is_empty() && is_align(c[0]) {
        s.align = Some(c[0]);
        i = 1;
    }
    if let Some(&ch) = c.get(i) {
        if matches!(ch, '+' | '-' | ' ') {
            s.sign = Some(ch);
            i += 1;
        }
    }
    if c.get(i) == Some(&'z') {
        i += 1;
    }
    if c.get(i) == Some(&'#') {
        s.alt = true;
        i += 1;
    }
    if c.get(i) == Some(&'0') {
        s.zero = true;
        i += 1;
    }
    let mut width = None;
    while let Some(d) = c.get(i).and_then(|ch| ch.to_digit(10)) {
        width = Some((width.unwrap_or(0usize) * 10 + d as usize).min(MAX_WIDTH + 1));
        i += 1;
    }
    if width.is_some_and(|w| w > MAX_WIDTH) {
        return Err(super::limits::limit_error("format width is too large"));
    }
    s.width = width;
    if let Some(&ch) = c.get(i) {
        if ch == ',' || ch == '_' {
            s.grouping = Some(ch);
            i += 1;
        }
    }
    if c.get(i) == Some(&'.') {
        i += 1;
        let mut p = None;
        while let Some(d) = c.get(i).and_then(|ch| ch.to_digit(10)) {
            p = Some((p.unwrap_or(0usize) * 10 + d as usize).min(10_000));
            i += 1;
        }
        s.precision = Some(p.ok_or_else(|| value_error("Format specifier missing precision"))?);
    }
    if i < c.len() {
        s.ty = Some(c[i]);
        i += 1;
    }
    if i < c.len() {
        return Err(value_error("Invalid format specifier"));
    }
    Ok(s)
}

fn group_digits(digits: &str, sep: char, every: usize) -> String {
    let n = digits.len();
    let mut out = String::with_capacity(n + n / every);
    for (idx, ch) in digits.chars().enumerate() {
        if idx > 0 && (n - idx) % every == 0 {
            out.push(sep);
        }
        out.push(ch);
    }
    out
}

fn pad(sign_and_prefix: &str, body: &str, spec: &Spec, default_align: char) -> String {
    let zero_pad = spec.zero && spec.align.is_none();
    let fill = spec.fill.unwrap_or(if zero_pad { '0' } else { ' ' });
    let align = spec
        .align
        .unwrap_or(if zero_pad { '=' } else { default_align });
    let len = sign_and_prefix.chars().count() + body.chars().count();
    let width = spec.width.unwrap_or(0);
    if len >= width {
        return format!("{sign_and_prefix}{body}");
    }
    let n = width - len;
    let f = |k: usize| fill.to_string().repeat(k);
    match align {
        '<' => format!("{sign_and_prefix}{body}{}", f(n)),
        '^' => format!("{}{sign_and_prefix}{body}{}", f(n / 2), f(n - n / 2)),
        '=' => format!("{sign_and_prefix}{}{body}", f(n)),
        _ => format!("{}{sign_and_prefix}{body}", f(n)),
    }
}

fn sign_str(negative: bool, spec: &Spec) -> &'static str {
    match (negative, spec.sign) {
        (true, _) => "-",
        (false, Some('+')) => "+",
        (false, Some(' ')) => " ",
        _ => "",
    }
}

/// Python `format(value, spec)`.
pub fn format_value(value: &Value, spec: &str) -> Result<String, Error> {
    let kind = value.kind();
    let is_bool = kind == ValueKind::Bool;
    if spec.is_empty() {
        return Ok(py_str(value));
    }
    let s = parse_spec(spec)?;
    if kind == ValueKind::String {
        if s.sign.is_some() {
            return Err(value_error("Sign not allowed in string format specifier"));
        }
        if s.alt {
            return Err(value_error(
                "Alternate form (#) not allowed in string format specifier",
            ));
        }
        if s.align == Some('=') {
            return Err(value_error(
                "'=' alignment not allowed in string format specifier",
            ));
        }
        if !matches!(s.ty, None | Some('s')) {
            return Err(value_error(format!(
                "Unknown format code '{}' for object of type 'str'",
                s.ty.unwrap_or(' ')
            )));
        }
        let text = py_str(value);
        let text: String = match s.precision {
            Some(p) => text.chars().take(p).collect(),
            None => text,
        };
        return Ok(pad("", &text, &s, '<'));
    }
    if kind == ValueKind::Number || is_bool {
        let float_types = matches!(s.ty, Some('e' | 'E' | 'f' | 'F' | 'g' | 'G' | '%'));
        if (value.is_integer() || is_bool) && !float_types {
            if s.precision.is_some() {
                return Err(value_error(
                    "Precision not allowed in integer format specifier",
                ));
            }
            let n: i128 = if is_bool {
                i128::from(value.is_true())
            } else {
                i128::try_from(value.clone()).unwrap_or(0)
            };
            let mag = n.unsigned_abs();
            let (prefix, digits) = match s.ty {
                None | Some('d') | Some('n') => ("", mag.to_string()),
                Some('b') => ("0b", format!("{mag:b}")),
                Some('o') => ("0o", format!("{mag:o}")),
                Some('x') => ("0x", format!("{mag:x}")),
                Some('X') => ("0X", format!("{mag:X}")),
                Some('c') => {
                    let ch = u32::try_from(n)
                        .ok()
                        .and_then(char::from_u32)
                        .ok_or_else(|| value_error("%c arg not in range(0x110000)"))?;
                    return Ok(pad("", &ch.to_string(), &s, '<'));
                }
                Some(t) => {
                    return Err(value_error(format!(
                        "Unknown format code '{t}' for object of type 'int'"
                    )))
                }
            };
            let digits = match s.grouping {
                Some(g) => group_digits(
                    &digits,
                    g,
                    if matches!(s.ty, Some('b' | 'o' | 'x' | 'X')) {
                        4
                    } else {
                        3
                    },
                ),
                None => digits,
            };
            let prefix = if s.alt { prefix } else { "" };
            let head = format!("{}{prefix}", sign_str(n < 0, &s));
            return Ok(pad(&head, &digits, &s, '>'));
        }
        let x = if is_bool {
            f64::from(u8::from(value.is_true()))
        } else {
            f64::try_from(value.clone()).unwrap_or(f64::NAN)
        };
        return Ok(format_float(x, &s));
    }
    Err(value_error(format!(
        "unsupported format string passed to {}.__format__",
        py_type_name(value)
    )))
}

fn exp_str(x: f64, prec: usize) -> String {
    let s = format!("{:.*e}", prec, x);
    let (m, e) = s.split_once('e').unwrap_or((&s, "0"));
    let e: i32 = e.parse().unwrap_or(0);
    format!(
        "{m}e{}{:02}",
        if e < 0 { '-' } else { '+' },
        e.unsigned_abs()
    )
}

fn decimal_exponent(x: f64, prec: usize) -> i32 {
    if x == 0.0 {
        return 0;
    }
    exp_str(x, prec)
        .split_once('e')
        .and_then(|(_, e)| e.parse().ok())
        .unwrap_or(0)
}

fn strip_zeros(s: &str) -> String {
    let (m, e) = match s.find('e') {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, ""),
    };
    let m = if m.contains('.') {
        m.trim_end_matches('0').trim_end_matches('.')
    } else {
        m
    };
    format!("{m}{e}")
}

fn format_float(x: f64, s: &Spec) -> String {
    let negative = x.is_sign_negative() && !x.is_nan();
    let ax = x.abs();
    let upper = matches!(s.ty, Some('E' | 'F' | 'G'));
    let mut body = if !x.is_finite() {
        if x.is_nan() { "nan" } else { "inf" }.to_string()
    } else {
        match s.ty {
            Some('f' | 'F') => format!("{ax:.*}", s.precision.unwrap_or(6)),
            Some('e' | 'E') => exp_str(ax, s.precision.unwrap_or(6)),
            Some('%') => format!("{:.*}%", s.precision.unwrap_or(6), ax * 100.0),
            Some('g' | 'G') | Some('n') => {
                let p = s.precision.unwrap_or(6).max(1);
                let e = decimal_exponent(ax, p - 1);
                let out = if e < -4 || e >= p as i32 {
                    exp_str(ax, p - 1)
                } else {
                    format!("{ax:.*}", (p as i32 - 1 - e).max(0) as usize)
                };
                if s.alt {
                    out
                } else {
                    strip_zeros(&out)
                }
            }
            _ => match s.precision {
                // no type: repr, or 'g'-like with at least one digit after the point
                None => float_repr(ax),
                Some(p) => {
                    let p = p.max(1);
                    let e = decimal_exponent(ax, p - 1);
                    if e < -4 || e >= p as i32 {
                        strip_zeros(&exp_str(ax, p - 1))
                    } else {
                        let out =
                            strip_zeros(&format!("{ax:.*}", (p as i32 - 1 - e).max(0) as usize));
                        if out.contains('.') {
                            out
                        } else {
                            format!("{out}.0")
                        }
                    }
                }
            },
        }
    };
    if let Some(g) = s.grouping {
        let (int_part, rest) = match body.find(['.', 'e', '%']) {
            Some(i) => body.split_at(i),
            None => (body.as_str(), ""),
        };
        if int_part.chars().all(|c| c.is_ascii_digit()) {
            body = format!("{}{rest}", group_digits(int_part, g, 3));
        }
    }
    if upper {
        body = body.to_uppercase();
    }
    pad(sign_str(negative, s), &body, s, '>')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(fmt: &str, args: &[Value]) -> String {
        py_format(fmt, args, None).unwrap_or_else(|e| format!("ERR {e}"))
    }

    #[test]
    fn format_like_python() {
        assert_eq!(f("{:,}", &[Value::from(1234567)]), "1,234,567");
        assert_eq!(f("{:08.3f}", &[Value::from(3.25159)]), "0003.252");
        assert_eq!(f("{!r}", &[Value::from("x")]), "'x'");
        assert_eq!(f("{:^7}|", &[Value::from("ab")]), "  ab   |");
        assert_eq!(
            f("{0}-{1}-{0}", &[Value::from("x"), Value::from("y")]),
            "x-y-x"
        );
        assert_eq!(f("{} {}", &[Value::from(1.5), Value::from(())]), "1.5 None");
        assert_eq!(
            f("{:>5}|{:.2f}", &[Value::from("a"), Value::from(3.25159)]),
            "    a|3.25"
        );
        assert_eq!(
            f(
                "{:+d}|{:#x}|{:05}|{:<4d}|",
                &[
                    Value::from(5),
                    Value::from(255),
                    Value::from(-42),
                    Value::from(7)
                ]
            ),
            "+5|0xff|-0042|7   |"
        );
        assert_eq!(
            f(
                "{:.3}|{:.3}|{}",
                &[Value::from(1.0), Value::from(1234.5), Value::from(1e20)]
            ),
            "1.0|1.23e+03|1e+20"
        );
        assert_eq!(
            f(
                "{:e}|{:g}|{:%}",
                &[
                    Value::from(12345.678),
                    Value::from(0.00001),
                    Value::from(0.25)
                ]
            ),
            "1.234568e+04|1e-05|25.000000%"
        );
        assert_eq!(
            f("{{}} {:*>{}}", &[Value::from("a"), Value::from(3)]),
            "{} **a"
        );
        assert_eq!(f("{:>5}", &[Value::from(true)]), "    1");
        assert!(f("{} {}", &[Value::from(1)]).starts_with("ERR"));
        assert!(f("{:d}", &[Value::from("s")]).starts_with("ERR"));
    }
}
