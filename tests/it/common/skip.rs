//! A test that cannot run here (a real third-party server is not installed) says so in the
//! normal output — one `SKIPPED` line per skip, written past libtest's capture, and a count when
//! the test binary exits — so `ok` never hides a test that did not run. In CI (`CI` set) a skip
//! is a failure: .ci/run installs everything the tests need, so a skip there means an install
//! step broke.
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Once;

static SKIPPED: AtomicUsize = AtomicUsize::new(0);
static COUNT_AT_EXIT: Once = Once::new();

/// Record that the calling test skips (part of) its work, and why. Panics in CI.
pub fn skip(reason: &str) {
    let test = std::thread::current()
        .name()
        .unwrap_or("a test")
        .to_string();
    assert!(
        std::env::var_os("CI").is_none(),
        "{test}: {reason} — in CI a skipped test is a failure"
    );
    SKIPPED.fetch_add(1, Ordering::SeqCst);
    COUNT_AT_EXIT.call_once(|| {
        // SAFETY: `count_at_exit` is a plain extern "C" fn that only reads an atomic and writes
        // to stderr; atexit runs it once when the test binary exits.
        unsafe { libc::atexit(count_at_exit) };
    });
    // io::stderr() directly: libtest captures `eprintln!` of passing tests.
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {reason}");
}

extern "C" fn count_at_exit() {
    let n = SKIPPED.load(Ordering::SeqCst);
    let _ = writeln!(
        std::io::stderr(),
        "\n{n} test(s) skipped work they could not do here (see the SKIPPED lines above)"
    );
}
