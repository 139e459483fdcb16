//! `strftime_now(format)`: Python's `datetime.now().strftime(format)` on Linux, and the way
//! back: the dates a text written with a format may carry ([`dates_in`]).
//!
//! The time is LOCAL and naive (so `%z` and `%Z` print nothing), `%f` is microseconds, and every
//! other directive follows glibc's `strftime` in the C locale, including the `-`, `_`, `0`, `^`
//! and `#` flags and field widths. Unknown directives are copied through unchanged.
use chrono::{Datelike, NaiveDate, NaiveDateTime, NaiveTime, TimeZone, Timelike};

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

/// `datetime.now().strftime(fmt)`, with `now` the local clock a render reads.
pub fn strftime_now(fmt: &str, now: &NaiveDateTime) -> String {
    py_strftime(now, fmt)
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

/// The fields a date written with a format shows, as far as the format has them.
#[derive(Debug, Default, Clone, Copy)]
struct Seen {
    year: Option<i32>,
    /// `%y`: the year within its century.
    year2: Option<i32>,
    month: Option<u32>,
    day: Option<u32>,
    yday: Option<u32>,
    hour: Option<u32>,
    hour12: Option<u32>,
    pm: Option<bool>,
    minute: Option<u32>,
    second: Option<u32>,
}

/// The directives a format expands to (glibc's composite ones spelled out), as regex pieces
/// with what each captures. None when the format uses a directive that cannot be read back.
fn pattern(fmt: &str, names: &mut Vec<char>) -> Option<String> {
    let chars: Vec<char> = fmt.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c != '%' || i + 1 >= chars.len() {
            out.push_str(&regex::escape(&c.to_string()));
            i += 1;
            continue;
        }
        let mut j = i + 1;
        while j < chars.len()
            && (matches!(chars[j], '-' | '_' | '0' | '^' | '#' | 'E' | 'O')
                || chars[j].is_ascii_digit())
        {
            j += 1;
        }
        let conv = *chars.get(j)?;
        let names_of = |list: &[&str], short: bool| -> String {
            let alts: Vec<String> = list
                .iter()
                .map(|n| regex::escape(if short { abbrev(n) } else { n }))
                .collect();
            format!("((?i:{}))", alts.join("|"))
        };
        let piece = match conv {
            'd' | 'e' | 'm' | 'H' | 'k' | 'I' | 'l' | 'M' | 'S' | 'y' | 'j' => {
                names.push(conv);
                r"\s*(\d{1,3})".to_string()
            }
            'Y' => {
                names.push('Y');
                r"(\d{1,5})".to_string()
            }
            'b' | 'h' => {
                names.push('b');
                names_of(&MONTHS, true)
            }
            'B' => {
                names.push('B');
                names_of(&MONTHS, false)
            }
            'a' => names_of(&DAYS, true).replacen('(', "(?:", 1),
            'A' => names_of(&DAYS, false).replacen('(', "(?:", 1),
            'p' | 'P' => {
                names.push('p');
                "((?i:AM|PM))".to_string()
            }
            'c' => pattern("%a %b %e %H:%M:%S %Y", names)?,
            'D' | 'x' => pattern("%m/%d/%y", names)?,
            'F' => pattern("%Y-%m-%d", names)?,
            'r' => pattern("%I:%M:%S %p", names)?,
            'R' => pattern("%H:%M", names)?,
            'T' | 'X' => pattern("%H:%M:%S", names)?,
            'f' => r"\d{6}".to_string(),
            'z' | 'Z' => String::new(),
            'n' => "\n".to_string(),
            't' => "\t".to_string(),
            '%' => "%".to_string(),
            // Week numbers, weekdays as numbers, ISO years, epoch seconds: a date cannot be
            // read back from them alone, and templates do not print them.
            _ => return None,
        };
        out.push_str(&piece);
        i = j + 1;
    }
    Some(out)
}

fn month_named(name: &str) -> Option<u32> {
    let lower = name.to_lowercase();
    MONTHS
        .iter()
        .position(|m| m.to_lowercase() == lower || abbrev(m).to_lowercase() == lower)
        .map(|i| i as u32 + 1)
}

impl Seen {
    /// A datetime with these fields, the missing ones taken from `default` (None when they do
    /// not make a date).
    fn resolve(&self, default: &NaiveDateTime) -> Option<NaiveDateTime> {
        let year = self
            .year
            // Python's %y: 69-99 are 1969-1999, 0-68 are 2000-2068.
            .or(self
                .year2
                .map(|y| if y >= 69 { 1900 + y } else { 2000 + y }))
            .unwrap_or(default.year());
        let date = match (self.month, self.day, self.yday) {
            (Some(m), Some(d), _) => NaiveDate::from_ymd_opt(year, m, d)?,
            (None, None, Some(j)) => NaiveDate::from_yo_opt(year, j)?,
            (None, Some(d), _) => NaiveDate::from_ymd_opt(year, default.month(), d)?,
            (Some(m), None, _) => NaiveDate::from_ymd_opt(year, m, 1)?,
            (None, None, None) if self.year.is_some() || self.year2.is_some() => {
                NaiveDate::from_ymd_opt(year, default.month(), default.day())?
            }
            (None, None, None) => default.date(),
        };
        let hour = match (self.hour, self.hour12, self.pm) {
            (Some(h), _, _) => h,
            (None, Some(h), Some(pm)) => h % 12 + if pm { 12 } else { 0 },
            (None, Some(h), None) => h % 12,
            _ => default.hour(),
        };
        let time = NaiveTime::from_hms_opt(
            hour,
            self.minute.unwrap_or(default.minute()),
            self.second.unwrap_or(default.second()),
        )?;
        Some(date.and_time(time))
    }
}

/// The datetimes `text` may have been written with `fmt` at (`strftime_now(fmt)` in a
/// template): every place the format's shape matches, read back, the fields the format does
/// not show taken from `default`. Nearest-first order is the text's; the caller re-renders
/// with each to confirm. Empty when the format cannot be read back.
pub fn dates_in(fmt: &str, text: &str, default: &NaiveDateTime) -> Vec<NaiveDateTime> {
    let mut names = Vec::new();
    let Some(pat) = pattern(fmt, &mut names) else {
        return Vec::new();
    };
    if names.is_empty() {
        return Vec::new();
    }
    let Ok(re) = regex::Regex::new(&pat) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for caps in re.captures_iter(text) {
        let mut seen = Seen::default();
        for (k, name) in names.iter().enumerate() {
            let Some(m) = caps.get(k + 1) else { continue };
            let v = m.as_str().trim();
            let num = || v.parse::<u32>().ok();
            match name {
                'd' | 'e' => seen.day = num(),
                'm' => seen.month = num(),
                'H' | 'k' => seen.hour = num(),
                'I' | 'l' => seen.hour12 = num(),
                'M' => seen.minute = num(),
                'S' => seen.second = num(),
                'y' => seen.year2 = num().map(|y| y as i32),
                'j' => seen.yday = num(),
                'Y' => seen.year = v.parse().ok(),
                'b' | 'B' => seen.month = month_named(v),
                'p' => seen.pm = Some(v.eq_ignore_ascii_case("pm")),
                _ => {}
            }
        }
        if let Some(t) = seen.resolve(default) {
            if !out.contains(&t) {
                out.push(t);
            }
        }
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
    fn dates_are_read_back_from_what_a_format_wrote() {
        let default = dt();
        let at = |y, m, d, h, mi, s| {
            NaiveDate::from_ymd_opt(y, m, d)
                .unwrap()
                .and_hms_opt(h, mi, s)
                .unwrap()
        };
        let written = at(2024, 11, 24, 23, 59, 30);
        for fmt in [
            "%d %b %Y",
            "%d %B %Y",
            "%Y-%m-%d",
            "%B %-d, %Y",
            "%A, %d %B %Y",
            "%m/%d/%y",
            "%F %T",
            "%c",
            "%-d %b %Y %I:%M %p",
            "%e %h %Y",
        ] {
            let text = format!(
                "Cutting Knowledge Date: December 2023\nToday Date: {}\n\n",
                py_strftime(&written, fmt)
            );
            let found = dates_in(fmt, &text, &default);
            // The fields the format shows are read back; the others come from the default.
            let back: Vec<String> = found.iter().map(|t| py_strftime(t, fmt)).collect();
            assert!(
                back.contains(&py_strftime(&written, fmt)),
                "{fmt}: {text:?} gave {found:?}"
            );
        }
        assert_eq!(
            dates_in(
                "%d %b %Y",
                "Today Date: 05 Mar 2026 and 31 Feb 2026",
                &default
            ),
            vec![at(2026, 3, 5, 7, 8, 9)],
            "an impossible date is not a candidate"
        );
        assert!(dates_in("%U", "week 09", &default).is_empty());
        assert!(dates_in("no directive", "no directive", &default).is_empty());
    }

    #[test]
    fn now_agrees_with_chrono() {
        for fmt in ["%d %b %Y", "%Y-%m-%d", "%B %d, %Y", "%A", "%H"] {
            let before = chrono::Local::now().format(fmt).to_string();
            let got = strftime_now(fmt, &chrono::Local::now().naive_local());
            let after = chrono::Local::now().format(fmt).to_string();
            assert!(
                got == before || got == after,
                "{fmt}: {got} vs {before}/{after}"
            );
        }
    }
}
