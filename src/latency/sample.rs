//! One measured request as plain data: its metrics or its error, its send drift, and when it
//! was sent and ended on the wall clock. A run's figures are computed from these alone
//! ([`super::RunSummary::from_samples`]), so the samples of shards run apart — in other
//! processes, on other machines — merge into the figures a single run gives.
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::metrics::{ms_between, RequestMetrics};
use crate::exchange::Record;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// The request's index in the whole (unsharded) run: which prompt and repeat it was.
    pub index: usize,
    /// The request's latencies; None when it failed.
    pub metrics: Option<RequestMetrics>,
    /// Why it failed.
    pub error: Option<String>,
    /// It failed without the target answering (refused, timed out, turned away, closed empty).
    #[serde(default)]
    pub unreachable: bool,
    /// Actual send − scheduled, ms.
    pub drift_ms: f64,
    /// Sent and ended, in ms since the Unix epoch (ended: the stream closed or the error came).
    pub t_send_ms: f64,
    pub t_end_ms: f64,
}

/// The wall clock at one monotonic instant: monotonic times become comparable across
/// processes (to the precision of the machines' clock sync).
#[derive(Debug, Clone, Copy)]
pub struct WallClock {
    at: Instant,
    unix_ms: f64,
}

impl WallClock {
    pub fn now() -> WallClock {
        let unix_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64() * 1e3);
        WallClock {
            at: Instant::now(),
            unix_ms,
        }
    }

    /// `t` in ms since the Unix epoch.
    pub fn ms(&self, t: Instant) -> f64 {
        if t >= self.at {
            self.unix_ms + ms_between(self.at, t)
        } else {
            self.unix_ms - ms_between(t, self.at)
        }
    }
}

impl Sample {
    /// A measured request. `index` is its place in the whole run; `count` the pinned
    /// tokenizer's count of a whole text (N_out when the target reports no usage);
    /// `reached_nothing` whether an error means the target was not reached at all.
    pub fn measured<E: std::fmt::Display>(
        o: &Outcome<E>,
        index: usize,
        count: &impl Fn(&str) -> Option<usize>,
        reached_nothing: impl Fn(&E) -> bool,
        clock: &WallClock,
    ) -> Sample {
        let (sent, ended) = match &o.result {
            Ok(r) => (r.timing.t_send, r.timing.t_end),
            Err(_) => (o.t_dispatch, o.t_dispatch),
        };
        Sample {
            index,
            metrics: o
                .result
                .as_ref()
                .ok()
                .map(|r| RequestMetrics::from_record(r, count)),
            error: o.result.as_ref().err().map(|e| e.to_string()),
            unreachable: o.result.as_ref().err().is_some_and(reached_nothing),
            drift_ms: o.drift_ms(),
            t_send_ms: clock.ms(sent),
            t_end_ms: clock.ms(ended),
        }
    }
}
/// One measured request.
#[derive(Debug)]
pub struct Outcome<E> {
    /// The request's index (0..n), as passed to `f`.
    pub index: usize,
    /// When it was planned to start (open loop: the schedule; closed loop: when a slot freed).
    pub t_sched: Instant,
    /// When the generator actually called `f` and spawned the request.
    pub t_dispatch: Instant,
    /// The record (its `timing.t_sched` is set to `t_sched`) or the request's error.
    pub result: Result<Record, E>,
}

impl<E> Outcome<E> {
    /// Actual send − scheduled, in ms: `timing.t_send` for a record, the dispatch for an error.
    pub fn drift_ms(&self) -> f64 {
        let sent = match &self.result {
            Ok(rec) => rec.timing.t_send,
            Err(_) => self.t_dispatch,
        };
        ms_between(self.t_sched, sent)
    }
}
