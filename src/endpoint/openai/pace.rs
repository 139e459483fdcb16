//! The server's pace, learnt from its own replies, so that a server that is slow but answering
//! is waited for rather than taken as unreachable.
//!
//! Why: llama-cpp-python answers one request at a time (two locks in its `server/app.py`) and,
//! with logprobs on a 262k vocabulary, takes about half a second a token; the gate sends probes
//! two at a time, so the second waits for the first. A read timeout sized for one reply then
//! fires on a healthy server, and the gate said "unreachable" (exit 3). So:
//! - while the first request is out, the others wait for it: the first reply is timed alone,
//!   not behind a queue (a first request that fails lets the others go at once, so a dead
//!   server costs one timeout, not one per request);
//! - after that, a reply may take as long as the slowest reply so far times the requests in
//!   flight (on a server that answers one at a time each waits for the others), three times
//!   over — a shared machine's load changes under the gate, and a healthy server's reply
//!   took 1.6× its slowest before under the test suite's own load — never less than the
//!   suite's `read_timeout_s`, never more than its `total_timeout_s`;
//! - a request that outlasts even that, on a server that has answered before, is reported as
//!   slow (the server's pace, with the figures), not as unreachable.
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use super::CallError;

/// How many times its slowest reply (per request in flight) a server may take before a reply
/// is slower than its pace.
const MARGIN: u64 = 3;

#[derive(Debug, Default)]
pub(super) struct Pace {
    /// The longest a successful generation request took, in milliseconds.
    slowest_ms: AtomicU64,
    /// Generation requests answered.
    answered: AtomicUsize,
    /// Generation requests in flight.
    in_flight: AtomicUsize,
    /// Held by the first request while it is out.
    first: tokio::sync::Mutex<()>,
    /// The first request has ended, answered or not.
    first_done: std::sync::atomic::AtomicBool,
}

/// A request in flight; counted until dropped.
pub(super) struct Flight<'a>(&'a AtomicUsize);

impl Drop for Flight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Pace {
    /// Waits while another request is timing the server's first reply; the guard (held for
    /// the request, and [`Pace::first_ended`] when it ends) when this one is the first.
    pub(super) async fn until_known(&self) -> Option<tokio::sync::MutexGuard<'_, ()>> {
        if self.first_done.load(Ordering::SeqCst) {
            return None;
        }
        let guard = self.first.lock().await;
        (!self.first_done.load(Ordering::SeqCst)).then_some(guard)
    }

    /// The first request ended, answered or not: the others no longer wait for it.
    pub(super) fn first_ended(&self) {
        self.first_done.store(true, Ordering::SeqCst);
    }

    fn known(&self) -> bool {
        self.answered.load(Ordering::SeqCst) > 0
    }

    pub(super) fn depart(&self) -> Flight<'_> {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        Flight(&self.in_flight)
    }

    pub(super) fn answered(&self, took: Duration) {
        self.slowest_ms
            .fetch_max(took.as_millis() as u64, Ordering::SeqCst);
        self.answered.fetch_add(1, Ordering::SeqCst);
    }

    /// How long to wait for the next bytes of a reply: the suite's read timeout, or what the
    /// server's pace says a reply may take with this many requests in flight, if longer.
    pub(super) fn read_wait(&self, configured: Duration, ceiling: Duration) -> Duration {
        if !self.known() {
            return configured;
        }
        let queue = self.in_flight.load(Ordering::SeqCst).max(1) as u64;
        let paced = Duration::from_millis(self.slowest_ms.load(Ordering::SeqCst) * queue * MARGIN);
        configured.max(paced.min(ceiling))
    }

    /// A read timeout on a server that has answered before is its pace, not its absence.
    pub(super) fn explain(&self, e: CallError) -> CallError {
        match e {
            CallError::Timeout {
                url,
                phase: "read",
                after,
            } if self.known() => CallError::Slow {
                url,
                detail: format!(
                    "no reply within {:.1} s, though the server answered {} request(s) before, the slowest in {:.1} s, with {} in flight now: it is slower than its own pace (overloaded, or serving one request at a time); raise [target] read_timeout_s or lower [server] concurrency",
                    after.as_secs_f64(),
                    self.answered.load(Ordering::SeqCst),
                    self.slowest_ms.load(Ordering::SeqCst) as f64 / 1000.0,
                    self.in_flight.load(Ordering::SeqCst) + 1,
                ),
            },
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_grows_with_the_slowest_reply_and_the_queue_within_the_limits() {
        let p = Pace::default();
        let (read, total) = (Duration::from_secs(30), Duration::from_secs(120));
        assert_eq!(p.read_wait(read, total), read, "unknown pace: the suite's");
        p.answered(Duration::from_secs(24));
        let _a = p.depart();
        let _b = p.depart();
        // One in flight behind a 24 s reply: 24 × 1 × 3, within the total.
        drop(_b);
        assert_eq!(p.read_wait(read, total), Duration::from_secs(72));
        let _b = p.depart();
        // Two: 144 s, past the total timeout.
        assert_eq!(
            p.read_wait(read, total),
            total,
            "never past the total timeout"
        );
        drop((_a, _b));
        assert_eq!(p.read_wait(read, total), Duration::from_secs(72));
        p.answered(Duration::from_millis(10));
        assert_eq!(
            p.read_wait(read, total),
            Duration::from_secs(72),
            "the slowest counts"
        );
    }

    #[test]
    fn a_timeout_after_replies_is_slow_not_unreachable() {
        let p = Pace::default();
        let timeout = || CallError::Timeout {
            url: "u".into(),
            phase: "read",
            after: Duration::from_secs(3),
        };
        assert!(
            p.explain(timeout()).unreachable(),
            "never answered: unreachable"
        );
        p.answered(Duration::from_secs(2));
        let e = p.explain(timeout());
        assert!(!e.unreachable(), "{e}");
        assert!(e.to_string().contains("slowest in 2.0 s"), "{e}");
    }
}
