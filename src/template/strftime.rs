//! `strftime_now(format)`: Python's `datetime.now().strftime(format)` on Linux.
//!
//! The time is LOCAL and naive (so `%z` and `%Z` print nothing), `%f` is microseconds, and every
//! other directive follows glibc's `strftime` in the C locale, including the `-`, `_`, `0`, `^`
//! and `#` flags and field widths. Unknown directives are copied through unchanged.
use chrono::{Datelike, NaiveDateTime, TimeZone, Timelike};

const DAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];
const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

/// Widest field a directive may ask for (guards against `%999999999d`).
const MAX_FIELD_WIDTH: usize = 1024;

/// `datetime.now().strftime(fmt)` with the local clock.
pub fn strftime_now(fmt: &str) -> String {
    py_strftime(&chrono::Local::now().naive_local(), fmt)
}

fn abbrev(s: &str) -> &str {
    &s[..3]
}

enum Field {
    Num(i64, usize, char),
    Text(String),
}

fn hour12(h: u32) -> i64 {
    match h % 12 {
        0 => 12,
        x => i64::from(x),
    }
}

fn field(dt: &NaiveDateTime, conv: char) -> Option<Field> {
    let wday = dt.weekday().num_days_from_sunday() as usize;
    let month0 = dt.month0() as usize;
    let yday0 = i64::from(dt.ordinal0());
    Some(match conv {
        'a' => Field::Text(abbrev(DAYS[wday]).to_string()),
        'A' => Field::Text(DAYS[wday].to_string()),
        'b' | 'h' => Field::Text(abbrev(MONTHS[month0]).to_string()),
        'B' => Field::Text(MONTHS[month0].to_string()),
        'c' => Field::Text(py_strftime(dt, "%a %b %e %H:%M:%S %Y")),
        'C' => Field::Num(i64::from(dt.year()).div_euclid(100), 2, '0'),
        'd' => Field::Num(i64::from(dt.day()), 2, '0'),
        'D' | 'x' => Field::Text(py_strftime(dt, "%m/%d/%y")),
        'e' => Field::Num(i64::from(dt.day()), 2, ' '),
        'F' => Field::Text(py_strftime(dt, "%Y-%m-%d")),
        'g' => Field::Num(i64::from(dt.iso_week().year()).rem_euclid(100), 2, '0'),
        'G' => Field::Num(i64::from(dt.iso_week().year()), 1, '0'),
        'H' => Field::Num(i64::from(dt.hour()), 2, '0'),
        'I' => Field::Num(hour12(dt.hour()), 2, '0'),
        'j' => Field::Num(yday0 + 1, 3, '0'),
        'k' => Field::Num(i64::from(dt.hour()), 2, ' '),
        'l' => Field::Num(hour12(dt.hour()), 2, ' '),
        'm' => Field::Num(month0 as i64 + 1, 2, '0'),
        'M' => Field::Num(i64::from(dt.minute()), 2, '0'),
        'n' => Field::Text("\n".to_string()),
        'p' => Field::Text(if dt.hour() < 12 { "AM" } else { "PM" }.to_string()),
        'P' => Field::Text(if dt.hour() < 12 { "am" } else { "pm" }.to_string()),
        'r' => Field::Text(py_strftime(dt, "%I:%M:%S %p")),
        'R' => Field::Text(py_strftime(dt, "%H:%M")),
        's' => {
            let ts = chrono::Local
                .from_local_datetime(dt)
                .earliest()
                .map(|t| t.timestamp())
                .unwrap_or_else(|| dt.and_utc().timestamp());
            Field::Num(ts, 1, '0')
        }
        'S' => Field::Num(i64::from(dt.second().min(60)), 2, '0'),
        't' => Field::Text("\t".to_string()),
        'T' | 'X' => Field::Text(py_strftime(dt, "%H:%M:%S")),
        'u' => Field::Num(i64::from(dt.weekday().number_from_monday()), 1, '0'),
        'U' => Field::Num((yday0 + 7 - wday as i64) / 7, 2, '0'),
        'V' => Field::Num(i64::from(dt.iso_week().week()), 2, '0'),
        'w' => Field::Num(wday as i64, 1, '0'),
        'W' => Field::Num((yday0 + 7 - ((wday as i64 + 6) % 7)) / 7, 2, '0'),
        'y' => Field::Num(i64::from(dt.year()).rem_euclid(100), 2, '0'),
        'Y' => Field::Num(i64::from(dt.year()), 1, '0'),
        '%' => Field::Text("%".to_string()),
        _ => return None,
    })
}

fn pad(s: &str, width: usize, c: char, out: &mut String) {
    let len = s.chars().count();
    if len < width {
        out.extend(std::iter::repeat_n(c, width - len));
    }
    out.push_str(s);
}

/// Python `naive_datetime.strftime(fmt)` (CPython on glibc).
pub fn py_strftime(dt: &NaiveDateTime, fmt: &str) -> String {
    let chars: Vec<char> = fmt.chars().collect();
    let mut out = String::with_capacity(fmt.len() * 2);
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c != '%' || i + 1 >= chars.len() {
            out.push(c);
            i += 1;
            continue;
        }
        // CPython handles %f, %z and %Z itself before calling the C library.
        match chars[i + 1] {
            'f' => {
                out.push_str(&format!("{:06}", dt.nanosecond().min(999_999_999) / 1000));
                i += 2;
                continue;
            }
            'z' | 'Z' => {
                i += 2;
                continue;
            }
            _ => {}
        }
        // glibc: %[flag][width][E|O]conversion
        let start = i;
        let mut j = i + 1;
        let mut flag = None;
        while j < chars.len() && matches!(chars[j], '-' | '_' | '0' | '^' | '#') {
            flag = Some(chars[j]);
            j += 1;
        }
        let mut width: Option<usize> = None;
        while j < chars.len() && chars[j].is_ascii_digit() {
            let d = chars[j] as usize - '0' as usize;
            width = Some((width.unwrap_or(0) * 10 + d).min(MAX_FIELD_WIDTH));
            j += 1;
        }
        if j < chars.len() && matches!(chars[j], 'E' | 'O') {
            j += 1;
        }
        let Some(&conv) = chars.get(j) else {
            out.extend(&chars[start..]);
            break;
        };
        match field(dt, conv) {
            None => {
                out.extend(&chars[start..=j]);
            }
            Some(Field::Num(n, default_width, default_pad)) => {
                let digits = n.to_string();
                let (w, padc) = match flag {
                    Some('-') => (width.unwrap_or(0), ' '),
                    Some('_') => (width.unwrap_or(default_width), ' '),
                    Some('0') => (width.unwrap_or(default_width), '0'),
                    _ => (
                        width.unwrap_or(default_width),
                        if width.is_some() { '0' } else { default_pad },
                    ),
                };
                pad(&digits, w, padc, &mut out);
            }
            Some(Field::Text(text)) => {
                let text = match flag {
                    Some('^') => text.to_uppercase(),
                    Some('#') if matches!(conv, 'p') => text.to_lowercase(),
                    Some('#') if matches!(conv, 'a' | 'A' | 'b' | 'B' | 'h') => text.to_uppercase(),
                    _ => text,
                };
                let padc = if flag == Some('0') { '0' } else { ' ' };
                pad(&text, width.unwrap_or(0), padc, &mut out);
            }
        }
        i = j + 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dt() -> NaiveDateTime {
        chrono::NaiveDate::from_ymd_opt(2026, 3, 5)
            .and_then(|d| d.and_hms_micro_opt(7, 8, 9, 123_456))
            .expect("valid date")
    }

    #[test]
    fn matches_cpython_glibc() {
        // Expected values printed by CPython 3.11 on glibc for datetime(2026,3,5,7,8,9,123456).
        let cases = [
            ("%Q", "%Q"),
            ("%", "%"),
            ("abc%", "abc%"),
            ("%-d", "5"),
            ("%_d", " 5"),
            ("%5d", "00005"),
            ("%^a", "THU"),
            ("%#p", "am"),
            ("%Ey", "26"),
            ("%Od", "05"),
            ("%e", " 5"),
            ("%k", " 7"),
            ("%l", " 7"),
            ("%C", "20"),
            ("%G-%V-%u", "2026-10-4"),
            ("%c", "Thu Mar  5 07:08:09 2026"),
            ("%x", "03/05/26"),
            ("%X", "07:08:09"),
            ("%D", "03/05/26"),
            ("%r", "07:08:09 AM"),
            ("%P", "am"),
            ("%-j", "64"),
            ("%10A", "  Thursday"),
            ("%-5d", "    5"),
            ("%05e", "00005"),
            ("%z|%Z", "|"),
            ("%f", "123456"),
            ("%%f", "%f"),
            ("%U %W %w", "09 09 4"),
            ("%h", "Mar"),
            ("%n%t", "\n\t"),
            ("%d %b %Y", "05 Mar 2026"),
            (
                "%B %m %H %M %S %A %a %y %j %p",
                "March 03 07 08 09 Thursday Thu 26 064 AM",
            ),
        ];
        for (fmt, want) in cases {
            assert_eq!(py_strftime(&dt(), fmt), want, "format {fmt:?}");
        }
    }

    #[test]
    fn now_agrees_with_chrono() {
        for fmt in ["%d %b %Y", "%Y-%m-%d", "%B %d, %Y", "%A", "%H"] {
            let before = chrono::Local::now().format(fmt).to_string();
            let got = strftime_now(fmt);
            let after = chrono::Local::now().format(fmt).to_string();
            assert!(
                got == before || got == after,
                "{fmt}: {got} vs {before}/{after}"
            );
        }
    }
}
