//! Moving a clock a day ahead without waiting for it: chatgate's own (`CHATGATE_NOW`), and a
//! real third-party server's (libfaketime, from Debian's `faketime` package, which .ci/run
//! installs: its `LD_PRELOAD` library shifts every clock call of the process it is loaded in).
#![allow(dead_code)]
use std::path::PathBuf;

use chrono::{Duration, NaiveDateTime};

/// Now, and the same moment tomorrow — by local time (every stack reads the local clock).
pub fn today_and_tomorrow() -> (NaiveDateTime, NaiveDateTime) {
    let now = chrono::Local::now().naive_local();
    (now, now + Duration::days(1))
}

/// `CHATGATE_NOW`'s value for `t`.
pub fn chatgate_now(t: &NaiveDateTime) -> String {
    t.format("%Y-%m-%dT%H:%M:%S").to_string()
}

/// The environment that moves a server process's clock by `days`; None (said as a skip, a
/// failure in CI) when libfaketime is not installed.
pub fn faketime_env(days: i64) -> Option<Vec<(String, String)>> {
    let lib = std::env::var_os("CHATGATE_FAKETIME_LIB")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"));
    if !lib.is_file() {
        super::skip::skip(&format!(
            "libfaketime is not at {} (apt-get install faketime; CHATGATE_FAKETIME_LIB names another; .ci/run installs it)",
            lib.display()
        ));
        return None;
    }
    Some(vec![
        ("LD_PRELOAD".into(), lib.display().to_string()),
        ("FAKETIME".into(), format!("{days:+}d")),
        // Do not cache the offset file lookups; the offset is fixed anyway.
        ("FAKETIME_NO_CACHE".into(), "1".into()),
    ])
}
