//! Per-request latency metrics, computed from a `Record`'s timing exactly as docs/design/METRICS.md defines
//! them. Everything is in milliseconds (f64). A metric that a request cannot define (no output
//! events, N_out unknown or ≤ 1 for TPOT) is `None`, never 0, so it cannot drag a percentile.
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::exchange::{OutputKind, Record};

/// The metrics a run reports and a baseline may hold, with their report names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    Ttft,
    Ttfc,
    Tpot,
    Itl,
    Icl,
    E2el,
    Ntpot,
    /// t_1 − t_sched: TTFT measured from the planned send time (coordinated omission).
    TtftSched,
    /// t_send − t_sched: how long the client held the request back.
    Queue,
    /// t_end − t_send: stream-close latency.
    Close,
}

impl Metric {
    /// Every metric, in report order.
    pub const ALL: [Metric; 10] = [
        Metric::Ttft,
        Metric::Ttfc,
        Metric::Tpot,
        Metric::Itl,
        Metric::Icl,
        Metric::E2el,
        Metric::Ntpot,
        Metric::TtftSched,
        Metric::Queue,
        Metric::Close,
    ];

    /// The metrics a latency baseline records and the gate compares (docs/design/METRICS.md's gating set).
    pub const GATED: [Metric; 4] = [Metric::Ttft, Metric::Tpot, Metric::E2el, Metric::Itl];

    /// The lowercase name used in JSON, baselines and `LatencyRow.metric`.
    pub fn name(self) -> &'static str {
        match self {
            Metric::Ttft => "ttft",
            Metric::Ttfc => "ttfc",
            Metric::Tpot => "tpot",
            Metric::Itl => "itl",
            Metric::Icl => "icl",
            Metric::E2el => "e2el",
            Metric::Ntpot => "ntpot",
            Metric::TtftSched => "ttft_sched",
            Metric::Queue => "queue",
            Metric::Close => "close",
        }
    }
}

impl std::fmt::Display for Metric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Where the per-gap token counts of the ITL came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ItlBasis {
    /// Every event said how many tokens it carried (`OutputEvent.tokens`).
    Reported,
    /// Unknown per event: N_out was spread evenly over the events (an approximation).
    EvenlyDistributed,
    /// Neither per-event counts nor N_out: one token per event was assumed (ITL = ICL).
    OnePerEvent,
    /// Fewer than two output events: there are no gaps.
    NoGaps,
}

/// Where N_out came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NOutSource {
    /// `usage.completion_tokens` reported by the server.
    Usage,
    /// The sum of per-event token counts, every event having one (continuous usage stats,
    /// candle's one token per step).
    Events,
    /// The pinned tokenizer over the whole generated text: an estimate.
    Tokenizer,
    /// None of the above was available.
    Unknown,
}

/// The latencies of one request (docs/design/METRICS.md), in milliseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestMetrics {
    /// t_1 − t_send.
    pub ttft: Option<f64>,
    /// First content (non-reasoning, non-tool-call) event − t_send.
    pub ttfc: Option<f64>,
    /// t_K − t_send.
    pub e2el: Option<f64>,
    /// t_end − t_send (stream-close latency).
    pub close: f64,
    /// (E2EL − TTFT) / (N_out − 1), only when N_out > 1.
    pub tpot: Option<f64>,
    /// Gaps between output events (one sample per gap).
    pub icl: Vec<f64>,
    /// Token-weighted gaps: a gap covering m tokens is m samples of gap/m.
    pub itl: Vec<f64>,
    pub itl_basis: ItlBasis,
    /// E2EL / N_out.
    pub ntpot: Option<f64>,
    /// t_1 − t_sched.
    pub ttft_sched: Option<f64>,
    /// t_send − t_sched.
    pub queue: f64,
    /// t_headers − t_send (HTTP targets only).
    pub headers: Option<f64>,
    pub n_out: Option<usize>,
    pub n_out_source: NOutSource,
    /// True when N_out came from the tokenizer rather than the server.
    pub n_out_estimated: bool,
    /// `usage.prompt_tokens`, else the prompt ids the target reported.
    pub n_in: Option<usize>,
    /// K: events that carried output.
    pub events: usize,
    /// N_out / K (> 1 flags speculative decoding or server-side batching of chunks).
    pub tokens_per_event: Option<f64>,
    /// The client's own overhead for the whole request.
    pub client_overhead: f64,
    /// The client's own overhead per output event, in microseconds.
    pub client_overhead_us_per_event: Option<f64>,
}

/// Milliseconds between two instants; 0 when `later` is not later (never negative, never a panic).
pub fn ms_between(earlier: Instant, later: Instant) -> f64 {
    duration_ms(later.saturating_duration_since(earlier))
}

/// A duration in milliseconds.
pub fn duration_ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

impl RequestMetrics {
    /// Every metric of one request. `n_out_fallback` counts tokens in a text with the pinned
    /// tokenizer; it is called at most once, on the whole generated text (reasoning, content and
    /// tool-call arguments joined), and only when the server reported no token counts — docs/design/METRICS.md
    /// forbids counting chunk by chunk.
    pub fn from_record(
        rec: &Record,
        n_out_fallback: impl Fn(&str) -> Option<usize>,
    ) -> RequestMetrics {
        let t = &rec.timing;
        let first = t.events.first().map(|e| e.at);
        let last = t.events.last().map(|e| e.at);
        let first_content = t
            .events
            .iter()
            .find(|e| e.kind == OutputKind::Content)
            .map(|e| e.at);
        let (n_out, n_out_source) = n_out(rec, n_out_fallback);

        let ttft = first.map(|at| ms_between(t.t_send, at));
        let e2el = last.map(|at| ms_between(t.t_send, at));
        let tpot = match (ttft, e2el, n_out) {
            (Some(ttft), Some(e2el), Some(n)) if n > 1 => Some((e2el - ttft) / (n - 1) as f64),
            _ => None,
        };
        let ntpot = match (e2el, n_out) {
            (Some(e2el), Some(n)) if n > 0 => Some(e2el / n as f64),
            _ => None,
        };
        let icl = gaps_ms(rec);
        let (itl, itl_basis) = itl(rec, &icl, n_out);
        let k = t.events.len();
        let overhead = duration_ms(t.client_overhead);
        RequestMetrics {
            ttft,
            ttfc: first_content.map(|at| ms_between(t.t_send, at)),
            e2el,
            close: ms_between(t.t_send, t.t_end),
            tpot,
            icl,
            itl,
            itl_basis,
            ntpot,
            ttft_sched: first.map(|at| ms_between(t.t_sched, at)),
            queue: ms_between(t.t_sched, t.t_send),
            headers: t.t_headers.map(|at| ms_between(t.t_send, at)),
            n_out,
            n_out_source,
            n_out_estimated: n_out_source == NOutSource::Tokenizer,
            n_in: n_in(rec),
            events: k,
            tokens_per_event: n_out.filter(|_| k > 0).map(|n| n as f64 / k as f64),
            client_overhead: overhead,
            client_overhead_us_per_event: (k > 0).then(|| overhead * 1e3 / k as f64),
        }
    }

    /// The samples this request contributes to `metric` (ITL and ICL: one per gap; the others:
    /// at most one).
    pub fn samples(&self, metric: Metric) -> Vec<f64> {
        let one = |v: Option<f64>| v.into_iter().collect();
        match metric {
            Metric::Ttft => one(self.ttft),
            Metric::Ttfc => one(self.ttfc),
            Metric::Tpot => one(self.tpot),
            Metric::Itl => self.itl.clone(),
            Metric::Icl => self.icl.clone(),
            Metric::E2el => one(self.e2el),
            Metric::Ntpot => one(self.ntpot),
            Metric::TtftSched => one(self.ttft_sched),
            Metric::Queue => vec![self.queue],
            Metric::Close => vec![self.close],
        }
    }
}

/// N_out and where it came from: usage, then per-event counts when every event has one, then
/// the tokenizer on the whole text (estimated).
fn n_out(rec: &Record, fallback: impl Fn(&str) -> Option<usize>) -> (Option<usize>, NOutSource) {
    if let Some(n) = rec.usage.and_then(|u| u.completion_tokens) {
        return (Some(n as usize), NOutSource::Usage);
    }
    let events = &rec.timing.events;
    if !events.is_empty() && events.iter().all(|e| e.tokens.is_some()) {
        let n = events.iter().map(|e| e.tokens.unwrap_or(0) as usize).sum();
        return (Some(n), NOutSource::Events);
    }
    let text = generated_text(rec);
    if text.is_empty() {
        // Nothing was generated at all: zero tokens, counted, not estimated.
        return if events.is_empty() {
            (Some(0), NOutSource::Events)
        } else {
            (None, NOutSource::Unknown)
        };
    }
    match fallback(&text) {
        Some(n) => (Some(n), NOutSource::Tokenizer),
        None => (None, NOutSource::Unknown),
    }
}

/// Reasoning, content and tool-call names/arguments: everything the model generated, joined.
fn generated_text(rec: &Record) -> String {
    let mut text = String::with_capacity(rec.reasoning.len() + rec.text.len());
    text.push_str(&rec.reasoning);
    text.push_str(&rec.text);
    for call in &rec.tool_calls {
        let function = &call["function"];
        for key in ["name", "arguments"] {
            if let Some(s) = function[key].as_str() {
                text.push_str(s);
            }
        }
    }
    text
}

/// `usage.prompt_tokens`, else the length of the prompt ids the target reported.
fn n_in(rec: &Record) -> Option<usize> {
    rec.usage
        .and_then(|u| u.prompt_tokens)
        .map(|n| n as usize)
        .or_else(|| rec.prompt_ids.as_ref().map(Vec::len))
}

/// ICL: t_k − t_(k−1) for k = 2..K.
fn gaps_ms(rec: &Record) -> Vec<f64> {
    rec.timing
        .events
        .windows(2)
        .map(|w| ms_between(w[0].at, w[1].at))
        .collect()
}

/// Token-weighted ITL. The gap before event k covers that event's tokens m_k. With reported
/// counts, a gap whose event carried 0 tokens is carried over into the next event's gap (the
/// wait still happened before those tokens). Without them, N_out is spread evenly: every gap
/// covers N_out/K tokens, rounded to a whole number of samples (at least one).
fn itl(rec: &Record, icl: &[f64], n_out: Option<usize>) -> (Vec<f64>, ItlBasis) {
    let events = &rec.timing.events;
    if icl.is_empty() {
        return (Vec::new(), ItlBasis::NoGaps);
    }
    if events.iter().all(|e| e.tokens.is_some()) {
        let mut out = Vec::new();
        let mut pending = 0.0;
        for (gap, event) in icl.iter().zip(&events[1..]) {
            pending += gap;
            let m = event.tokens.unwrap_or(0) as usize;
            if m > 0 {
                out.extend(std::iter::repeat_n(pending / m as f64, m));
                pending = 0.0;
            }
        }
        return (out, ItlBasis::Reported);
    }
    match n_out.filter(|&n| n > 0) {
        Some(n) => {
            let per_event = n as f64 / events.len() as f64;
            let copies = (per_event.round() as usize).max(1);
            let out = icl
                .iter()
                .flat_map(|gap| std::iter::repeat_n(gap / per_event, copies))
                .collect();
            (out, ItlBasis::EvenlyDistributed)
        }
        None => (icl.to_vec(), ItlBasis::OnePerEvent),
    }
}
