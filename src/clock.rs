//! The clock a chat template reads, and the dates a suite pins.
//!
//! Templates that print today's date (`strftime_now`, Llama-3.2, SmolLM3, gpt-oss) or take it
//! as `date_string` (Llama-3.x) render a different prompt every day. Every stack reads the
//! *local* clock (transformers' and llama-cpp-python's `datetime.now()`, llama.cpp's
//! `std::localtime`), so two machines in other time zones disagree near midnight. chatgate
//! renders offline with the date a suite pins (`[model] template_date`), and reads "now" here
//! only where a stack would: `CHATGATE_NOW` moves this clock (tests, and reproducing a day).
use chrono::{Datelike, Duration, NaiveDate, NaiveDateTime, NaiveTime};

/// The environment variable that sets "now" for chatgate's own clock (naive local time,
/// `YYYY-MM-DD` or `YYYY-MM-DDTHH:MM[:SS]`).
pub const NOW_ENV: &str = "CHATGATE_NOW";

/// Local "now" as a template sees it: `CHATGATE_NOW` when set and valid, else the system clock.
pub fn now() -> NaiveDateTime {
    std::env::var(NOW_ENV)
        .ok()
        .and_then(|v| parse_pin(&v))
        .unwrap_or_else(|| chrono::Local::now().naive_local())
}

/// UTC "now" on the same clock (`CHATGATE_NOW` is taken as local time).
pub fn now_utc() -> NaiveDateTime {
    match std::env::var(NOW_ENV).ok().and_then(|v| parse_pin(&v)) {
        Some(local) => {
            let offset = chrono::Local::now().offset().local_minus_utc();
            local - Duration::seconds(i64::from(offset))
        }
        None => chrono::Utc::now().naive_utc(),
    }
}

/// A pinned date or time: `2026-11-25`, `2026-11-25T09:30` or `2026-11-25T09:30:00` (a date
/// alone is midnight).
pub fn parse_pin(s: &str) -> Option<NaiveDateTime> {
    let s = s.trim();
    if let Ok(d) = NaiveDate::parse_from_str(s, "%Y-%m-%d") {
        return Some(d.and_time(NaiveTime::MIN));
    }
    ["%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M:%S"]
        .iter()
        .find_map(|f| NaiveDateTime::parse_from_str(s, f).ok())
}

/// How a pin is written back (`template_date` in a suite): the date alone when it is midnight.
pub fn show_pin(t: &NaiveDateTime) -> String {
    if t.time() == NaiveTime::MIN {
        t.format("%Y-%m-%d").to_string()
    } else {
        t.format("%Y-%m-%dT%H:%M:%S").to_string()
    }
}

/// The days a server on another machine may be rendering right now: today by this machine's
/// local clock and by UTC, and the day on either side of each (time zones reach ±14 h), each
/// once, nearest first.
pub fn days_a_server_may_render() -> Vec<NaiveDate> {
    let mut days: Vec<NaiveDate> = Vec::new();
    let local = now().date();
    let utc = now_utc().date();
    for d in [local, utc] {
        if !days.contains(&d) {
            days.push(d);
        }
    }
    for base in [local, utc] {
        for d in [base.pred_opt(), base.succ_opt()].into_iter().flatten() {
            if !days.contains(&d) {
                days.push(d);
            }
        }
    }
    days
}

/// True when `day` is today both by the local clock and by UTC: a server on this machine or
/// one in another time zone renders that day now.
pub fn is_today_everywhere(day: NaiveDate) -> bool {
    now().date() == day && now_utc().date() == day
}

/// `d` with another date, the time of day kept.
pub fn on_day(t: &NaiveDateTime, day: NaiveDate) -> NaiveDateTime {
    day.and_time(t.time())
}

/// Days between two dates, for messages ("2 days before the pin").
pub fn days_between(a: NaiveDate, b: NaiveDate) -> i64 {
    i64::from(b.num_days_from_ce()) - i64::from(a.num_days_from_ce())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_parse_and_show_back() {
        let d = parse_pin("2026-11-25").unwrap();
        assert_eq!(show_pin(&d), "2026-11-25");
        let t = parse_pin("2026-11-25T23:59:30").unwrap();
        assert_eq!(show_pin(&t), "2026-11-25T23:59:30");
        assert_eq!(
            parse_pin("2026-11-25T07:05"),
            parse_pin("2026-11-25T07:05:00")
        );
        for bad in ["", "25 Nov 2026", "2026-13-01", "2026-11-25T25:00"] {
            assert_eq!(parse_pin(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn server_days_hold_today_and_its_neighbours() {
        let days = days_a_server_may_render();
        let today = now().date();
        assert_eq!(days[0], today);
        assert!(days.contains(&today.pred_opt().unwrap()));
        assert!(days.contains(&today.succ_opt().unwrap()));
        let mut unique = days.clone();
        unique.dedup();
        assert_eq!(unique.len(), days.len());
    }

    #[test]
    fn day_arithmetic() {
        let a = NaiveDate::from_ymd_opt(2026, 11, 24).unwrap();
        let b = NaiveDate::from_ymd_opt(2026, 12, 1).unwrap();
        assert_eq!(days_between(a, b), 7);
        let t = parse_pin("2026-11-24T09:30").unwrap();
        assert_eq!(show_pin(&on_day(&t, b)), "2026-12-01T09:30:00");
    }
}
