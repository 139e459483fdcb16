//! The load generator, generic over what one request is (`f(i, t_sched) -> Future<Record>`), so
//! the same code drives the in-process candle target, an HTTP server, or a test double.
//!
//! - Closed loop: at most `concurrency` requests in flight; the next starts when one ends. For
//!   smoke tests and snapshot replays.
//! - Open loop: request i is started at its scheduled instant whether or not earlier ones have
//!   finished (`tokio::time::sleep_until`, then `tokio::spawn`). Each record's `t_sched` is the
//!   planned instant, so a client that falls behind (coordinated omission) shows up as drift
//!   (actual send − scheduled) and in `ttft_sched`, instead of silently hiding server latency.
//!
//! Warm-up requests run first, one at a time, before the measured run's clock starts (so they
//! do not disturb its schedule); warm-up j calls `f(j % n, now)` and its result is dropped.
use std::future::Future;
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

use super::metrics::{Metric, RequestMetrics};
use super::sample::{Sample, WallClock};
use super::schedule::Schedule;
use super::stats::Summary;
use crate::exchange::Record;
use crate::suite::MetricMs;
use crate::verdict::LatencyTotals;

/// Service-level objectives in ms (TTFT, TPOT, E2EL); a request meets them when it is within
/// every limit that is set.
pub type Slo = MetricMs;

pub use super::sample::Outcome;

/// Run `warmup` unmeasured requests one after another, then `n` measured ones with at most
/// `concurrency` (≥ 1) in flight. Outcomes come back in index order.
pub async fn closed_loop<F, Fut, E>(
    n: usize,
    concurrency: usize,
    warmup: usize,
    f: F,
) -> Vec<Outcome<E>>
where
    F: Fn(usize, Instant) -> Fut,
    Fut: Future<Output = Result<Record, E>> + Send + 'static,
    E: Send + 'static,
{
    run_warmup(n, warmup, &f).await;
    let slots = Arc::new(Semaphore::new(concurrency.max(1)));
    let mut handles = Vec::with_capacity(n);
    for i in 0..n {
        let Ok(permit) = slots.clone().acquire_owned().await else {
            break;
        };
        let t_sched = Instant::now();
        handles.push(spawn_request(i, t_sched, f(i, t_sched), Some(permit)));
    }
    collect(handles).await
}

/// Run `warmup` unmeasured requests one after another, then start request i at
/// `start + schedule.offsets[i]` without waiting for earlier ones. `max_in_flight` caps the
/// requests outstanding at once (0: no cap); when the cap holds a request back, its lateness is
/// measured, not hidden. Outcomes come back in index order.
pub async fn open_loop<F, Fut, E>(
    schedule: &Schedule,
    warmup: usize,
    max_in_flight: usize,
    f: F,
) -> Vec<Outcome<E>>
where
    F: Fn(usize, Instant) -> Fut,
    Fut: Future<Output = Result<Record, E>> + Send + 'static,
    E: Send + 'static,
{
    open_loop_at(schedule, warmup, max_in_flight, None, f)
        .await
        .0
}

/// When an open loop's measured schedule began, by the wall clock (Unix ms).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Started {
    /// The start asked for (`--start-at`), if any.
    pub requested_unix_ms: Option<f64>,
    /// When request 0's offset was counted from.
    pub actual_unix_ms: f64,
}

impl Started {
    /// actual − requested (ms): how late this generator began by its own clock.
    pub fn offset_ms(&self) -> Option<f64> {
        self.requested_unix_ms.map(|r| self.actual_unix_ms - r)
    }
}

fn unix_ms(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64() * 1e3)
        .unwrap_or(0.0)
}

/// As [`open_loop`], with the measured schedule started at `start_at` by the wall clock (after
/// the warm-up), so generators on several machines start together; one already past it starts
/// at once, and its lateness is in the returned [`Started`].
pub async fn open_loop_at<F, Fut, E>(
    schedule: &Schedule,
    warmup: usize,
    max_in_flight: usize,
    start_at: Option<SystemTime>,
    f: F,
) -> (Vec<Outcome<E>>, Started)
where
    F: Fn(usize, Instant) -> Fut,
    Fut: Future<Output = Result<Record, E>> + Send + 'static,
    E: Send + 'static,
{
    run_warmup(schedule.len(), warmup, &f).await;
    let cap = match max_in_flight {
        0 => Semaphore::MAX_PERMITS,
        m => m,
    };
    let slots = Arc::new(Semaphore::new(cap));
    // The wall clock is read once, paired with the monotonic clock: the wait is monotonic.
    let (now_wall, now) = (SystemTime::now(), Instant::now());
    let start = match start_at.and_then(|t| t.duration_since(now_wall).ok()) {
        Some(wait) => now + wait,
        None => now,
    };
    wait_until(start).await;
    let started = Started {
        requested_unix_ms: start_at.map(unix_ms),
        actual_unix_ms: unix_ms(now_wall) + (Instant::now().max(start) - now).as_secs_f64() * 1e3,
    };
    let mut handles = Vec::with_capacity(schedule.len());
    for (i, offset) in schedule.offsets.iter().enumerate() {
        let t_sched = start + *offset;
        wait_until(t_sched).await;
        let Ok(permit) = slots.clone().acquire_owned().await else {
            break;
        };
        handles.push(spawn_request(i, t_sched, f(i, t_sched), Some(permit)));
    }
    (collect(handles).await, started)
}

/// How early the timer is asked to wake the open loop: tokio's timer wheel has millisecond
/// slots and rounds a deadline up to the next one, so `sleep_until` alone sends ~1 ms late on
/// average (the 1.4 ms p50 lateness measured at 200/s, docs/benchmarks.md).
const TIMER_SLACK: std::time::Duration = std::time::Duration::from_micros(1500);

/// Sleep until shortly before `t`, then spin until `t` has come: on time to a few
/// microseconds. The spin holds this worker thread for at most the slack; the requests in
/// flight run on the others meanwhile. (Yielding to the runtime instead was tried: a yielded
/// task waits for its own worker, so one request's slow first call on that worker held the
/// schedule up to 150 ms.)
async fn wait_until(t: Instant) {
    if let Some(early) = t.checked_sub(TIMER_SLACK) {
        if early > Instant::now() {
            tokio::time::sleep_until(early.into()).await;
        }
    }
    while Instant::now() < t {
        std::hint::spin_loop();
    }
}

/// Warm-up: `warmup` requests in turn, results dropped. None when there is nothing to measure.
async fn run_warmup<F, Fut, E>(n: usize, warmup: usize, f: &F)
where
    F: Fn(usize, Instant) -> Fut,
    Fut: Future<Output = Result<Record, E>>,
{
    if n == 0 {
        return;
    }
    for j in 0..warmup {
        let _ = f(j % n, Instant::now()).await;
    }
}

type Handle<E> = JoinHandle<Outcome<E>>;

/// Spawn one request; its permit (if any) is released when it ends.
fn spawn_request<Fut, E>(
    index: usize,
    t_sched: Instant,
    fut: Fut,
    permit: Option<tokio::sync::OwnedSemaphorePermit>,
) -> Handle<E>
where
    Fut: Future<Output = Result<Record, E>> + Send + 'static,
    E: Send + 'static,
{
    let t_dispatch = Instant::now();
    tokio::spawn(async move {
        let result = fut.await.map(|mut rec| {
            rec.timing.t_sched = t_sched;
            rec
        });
        drop(permit);
        Outcome {
            index,
            t_sched,
            t_dispatch,
            result,
        }
    })
}

/// Await every request in index order. A request that panicked re-raises its panic here (a bug
/// in `f`, not a request failure); one cancelled by runtime shutdown is left out.
async fn collect<E>(handles: Vec<Handle<E>>) -> Vec<Outcome<E>> {
    let mut out = Vec::with_capacity(handles.len());
    for h in handles {
        match h.await {
            Ok(o) => out.push(o),
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_) => {}
        }
    }
    out
}

/// A whole run's figures (docs/design/METRICS.md): distributions per metric, throughput over
/// D = last t_end − first t_send, goodput against SLOs, and the schedule drift.
#[derive(Debug, Clone, Serialize)]
pub struct RunSummary {
    /// Measured requests that returned a record.
    pub requests: usize,
    pub errors: usize,
    /// D in seconds (0 without a successful request).
    pub duration_s: f64,
    /// Σ N_out / D, output tokens per second (requests with unknown N_out add nothing).
    pub throughput: f64,
    /// Completed requests / D.
    pub request_rate: f64,
    /// Requests meeting every SLO / D (None without SLOs).
    pub goodput: Option<f64>,
    /// Requests meeting every SLO / (requests + errors) (None without SLOs).
    pub slo_attainment: Option<f64>,
    pub n_out_total: usize,
    /// Some request's N_out was estimated with the tokenizer.
    pub n_out_estimated: bool,
    /// Requests whose N_out is unknown (no usage, no tokenizer).
    pub n_out_unknown: usize,
    /// Per metric, the pooled distribution (metrics no request defines are absent).
    pub metrics: IndexMap<Metric, Summary>,
    /// Actual send − scheduled, ms.
    pub drift: Option<Summary>,
    /// Set when the p99 drift exceeds max(10 ms, 10 % of the median E2EL): the client could not
    /// keep to the schedule, so from-send latencies understate what users would see.
    pub drift_warning: Option<String>,
    /// The client's own overhead per output event, µs.
    pub client_overhead_us_per_event: Option<Summary>,
}

impl RunSummary {
    /// Summarise a run. `n_out_fallback` is the pinned tokenizer's count of a whole text, used
    /// only for records without usage (see `RequestMetrics::from_record`).
    pub fn from<E: std::fmt::Display>(
        outcomes: &[Outcome<E>],
        slo: Option<&Slo>,
        n_out_fallback: impl Fn(&str) -> Option<usize>,
    ) -> RunSummary {
        let clock = WallClock::now();
        let samples: Vec<Sample> = outcomes
            .iter()
            .map(|o| Sample::measured(o, o.index, &n_out_fallback, |_| false, &clock))
            .collect();
        RunSummary::from_samples(&samples, slo)
    }

    /// Summarise measured requests, of one run or of several shards of it: every figure is a
    /// function of the samples, so merged shards give the figures of the whole run.
    pub fn from_samples(samples: &[Sample], slo: Option<&Slo>) -> RunSummary {
        let per_request: Vec<&RequestMetrics> =
            samples.iter().filter_map(|s| s.metrics.as_ref()).collect();
        let errors = samples.len() - per_request.len();
        let duration_s = run_duration_s(samples);
        let per_s = |count: f64| {
            if duration_s > 0.0 {
                count / duration_s
            } else {
                0.0
            }
        };
        let n_out_total: usize = per_request.iter().filter_map(|m| m.n_out).sum();
        let slo = slo.filter(|s| s.ttft.is_some() || s.tpot.is_some() || s.e2el.is_some());
        let met = slo.map(|s| per_request.iter().filter(|m| meets_slo(m, s)).count());
        let metrics = summaries(&per_request);
        let drift = Summary::from_samples(&samples.iter().map(|s| s.drift_ms).collect::<Vec<_>>());
        RunSummary {
            requests: per_request.len(),
            errors,
            duration_s,
            throughput: per_s(n_out_total as f64),
            request_rate: per_s(per_request.len() as f64),
            goodput: met.map(|m| per_s(m as f64)),
            slo_attainment: met
                .filter(|_| !samples.is_empty())
                .map(|m| m as f64 / samples.len() as f64),
            n_out_total,
            n_out_estimated: per_request.iter().any(|m| m.n_out_estimated),
            n_out_unknown: per_request.iter().filter(|m| m.n_out.is_none()).count(),
            drift_warning: drift_warning(drift.as_ref(), metrics.get(&Metric::E2el)),
            metrics,
            drift,
            client_overhead_us_per_event: Summary::from_samples(
                &per_request
                    .iter()
                    .filter_map(|m| m.client_overhead_us_per_event)
                    .collect::<Vec<_>>(),
            ),
        }
    }

    /// The run-level figures as the gate report carries them.
    pub fn totals(&self) -> LatencyTotals {
        LatencyTotals {
            requests: self.requests,
            errors: self.errors,
            duration_s: self.duration_s,
            output_throughput: self.throughput,
            goodput: self.goodput,
            slo_attainment: self.slo_attainment,
            n_out_estimated: self.n_out_estimated,
            client_overhead_us_per_event: self.client_overhead_us_per_event.map_or(0.0, |s| s.p50),
            unreliable: self.drift_warning.clone(),
        }
    }
}

/// D = last t_end − first t_send of the successful requests, in seconds.
fn run_duration_s(samples: &[Sample]) -> f64 {
    let ok = || samples.iter().filter(|s| s.metrics.is_some());
    let first = ok().map(|s| s.t_send_ms).reduce(f64::min);
    let last = ok().map(|s| s.t_end_ms).reduce(f64::max);
    match (first, last) {
        (Some(a), Some(b)) => (b - a).max(0.0) / 1e3,
        _ => 0.0,
    }
}

/// Whether a request is within every set limit. TPOT counts as 0 when undefined (N_out ≤ 1),
/// as vLLM's goodput does; a missing TTFT or E2EL (no output at all) misses its limit.
pub fn meets_slo(m: &RequestMetrics, slo: &Slo) -> bool {
    let within = |limit: Option<f64>, value: Option<f64>| match limit {
        None => true,
        Some(l) => value.is_some_and(|v| v <= l),
    };
    within(slo.ttft, m.ttft)
        && within(slo.tpot, Some(m.tpot.unwrap_or(0.0)))
        && within(slo.e2el, m.e2el)
}

/// Pooled distributions of every metric some request defines.
fn summaries(per_request: &[&RequestMetrics]) -> IndexMap<Metric, Summary> {
    Metric::ALL
        .iter()
        .filter_map(|&metric| {
            let samples: Vec<f64> = per_request.iter().flat_map(|m| m.samples(metric)).collect();
            Summary::from_samples(&samples).map(|s| (metric, s))
        })
        .collect()
}

fn drift_warning(drift: Option<&Summary>, e2el: Option<&Summary>) -> Option<String> {
    let drift = drift?;
    let limit = e2el.map_or(0.0, |e| e.p50 * 0.1).max(10.0);
    (drift.p99 > limit).then(|| {
        format!(
            "the client fell behind its schedule: p99 send drift {:.1} ms (limit {limit:.1} ms); \
             latencies from t_send understate what users saw — see ttft_sched, or lower the rate",
            drift.p99
        )
    })
}
