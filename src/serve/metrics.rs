//! `GET /metrics`: the server's own view in the Prometheus text format, under the names vLLM
//! 0.32 uses (`vllm/v1/metrics/loggers.py`; docs/research/server-metrics.md), so a dashboard,
//! a `histogram_quantile` query or chatgate's own scrape written for vLLM reads this server
//! unchanged. Only what this server really knows is exposed: it has a queue (requests waiting
//! for the model's lock), one running request at a time, token counts, and per-request times;
//! it has no KV cache, prefix cache or preemption, so those names are absent (a reader must
//! treat absent as unknown, never as 0).
use std::fmt::Write;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// vLLM's default TTFT buckets (s).
const TTFT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];
/// vLLM's default request-latency buckets (s): e2e and queue time.
const REQUEST_BUCKETS: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
];

/// Why a request ended, as `vllm:request_success_total{finished_reason}` labels it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finished {
    Stop,
    Length,
    Abort,
}

const FINISHED: [(Finished, &str); 3] = [
    (Finished::Stop, "stop"),
    (Finished::Length, "length"),
    (Finished::Abort, "abort"),
];

/// A cumulative histogram with fixed upper bounds.
struct Histogram {
    bounds: &'static [f64],
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            counts: vec![0; bounds.len()],
            sum: 0.0,
            count: 0,
        }
    }
    fn observe(&mut self, v: f64) {
        for (b, c) in self.bounds.iter().zip(self.counts.iter_mut()) {
            if v <= *b {
                *c += 1;
            }
        }
        self.sum += v;
        self.count += 1;
    }
}

/// The server's counters, gauges and histograms.
pub struct ServerMetrics {
    running: AtomicI64,
    waiting: AtomicI64,
    prompt_tokens: AtomicU64,
    generation_tokens: AtomicU64,
    finished: [AtomicU64; 3],
    histograms: Mutex<[Histogram; 3]>,
}

/// Indices into `histograms`.
const TTFT: usize = 0;
const E2E: usize = 1;
const QUEUE: usize = 2;

impl Default for ServerMetrics {
    fn default() -> Self {
        ServerMetrics {
            running: AtomicI64::new(0),
            waiting: AtomicI64::new(0),
            prompt_tokens: AtomicU64::new(0),
            generation_tokens: AtomicU64::new(0),
            finished: Default::default(),
            histograms: Mutex::new([
                Histogram::new(TTFT_BUCKETS),
                Histogram::new(REQUEST_BUCKETS),
                Histogram::new(REQUEST_BUCKETS),
            ]),
        }
    }
}

/// One request's passage through the queue and the model, counted as it goes; dropping it
/// leaves the gauges as they were before it arrived.
pub struct InFlight<'a> {
    m: &'a ServerMetrics,
    running: bool,
}

impl ServerMetrics {
    /// A request arrived and waits for the model.
    pub fn arrive(&self) -> InFlight<'_> {
        self.waiting.fetch_add(1, Ordering::Relaxed);
        InFlight {
            m: self,
            running: false,
        }
    }

    fn observe(&self, which: usize, d: Duration) {
        if let Ok(mut h) = self.histograms.lock() {
            h[which].observe(d.as_secs_f64());
        }
    }

    /// The text exposition (format 0.0.4) with `model_name` and `engine="0"` labels.
    pub fn render(&self, model: &str) -> String {
        let labels = format!(
            "model_name=\"{}\",engine=\"0\"",
            model.replace('\\', "\\\\").replace('"', "\\\"")
        );
        let mut out = String::new();
        for (name, help, v) in [
            (
                "vllm:num_requests_running",
                "Number of requests in model execution batches.",
                &self.running,
            ),
            (
                "vllm:num_requests_waiting",
                "Number of requests waiting to be processed.",
                &self.waiting,
            ),
        ] {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} gauge\n{name}{{{labels}}} {}",
                v.load(Ordering::Relaxed).max(0)
            );
        }
        for (name, help, v) in [
            (
                "vllm:prompt_tokens_total",
                "Number of prefill tokens processed.",
                &self.prompt_tokens,
            ),
            (
                "vllm:generation_tokens_total",
                "Number of generation tokens processed.",
                &self.generation_tokens,
            ),
        ] {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name}{{{labels}}} {}",
                v.load(Ordering::Relaxed)
            );
        }
        let _ = writeln!(
            out,
            "# HELP vllm:request_success_total Count of successfully processed requests.\n# TYPE vllm:request_success_total counter"
        );
        for ((_, label), n) in FINISHED.iter().zip(&self.finished) {
            let _ = writeln!(
                out,
                "vllm:request_success_total{{{labels},finished_reason=\"{label}\"}} {}",
                n.load(Ordering::Relaxed)
            );
        }
        if let Ok(h) = self.histograms.lock() {
            for (which, name, help) in [
                (
                    TTFT,
                    "vllm:time_to_first_token_seconds",
                    "Histogram of time to first token in seconds.",
                ),
                (
                    E2E,
                    "vllm:e2e_request_latency_seconds",
                    "Histogram of e2e request latency in seconds.",
                ),
                (
                    QUEUE,
                    "vllm:request_queue_time_seconds",
                    "Histogram of time spent in WAITING phase for request.",
                ),
            ] {
                histogram(&mut out, name, help, &labels, &h[which]);
            }
        }
        out
    }
}

fn histogram(out: &mut String, name: &str, help: &str, labels: &str, h: &Histogram) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
    for (b, c) in h.bounds.iter().zip(&h.counts) {
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{b:?}\"}} {c}");
    }
    let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {}", h.count);
    let _ = writeln!(out, "{name}_sum{{{labels}}} {:?}", h.sum);
    let _ = writeln!(out, "{name}_count{{{labels}}} {}", h.count);
}

impl InFlight<'_> {
    /// The model's lock is taken: the request leaves the queue after `queued`.
    pub fn start(&mut self, queued: Duration) {
        if !self.running {
            self.m.waiting.fetch_sub(1, Ordering::Relaxed);
            self.m.running.fetch_add(1, Ordering::Relaxed);
            self.running = true;
            self.m.observe(QUEUE, queued);
        }
    }

    /// The first token came `ttft` after the request arrived.
    pub fn first_token(&self, ttft: Duration) {
        self.m.observe(TTFT, ttft);
    }

    /// The request ended after `e2e` with these counts.
    pub fn finish(&self, finished: Finished, prompt: usize, generated: usize, e2e: Duration) {
        let m = self.m;
        m.prompt_tokens.fetch_add(prompt as u64, Ordering::Relaxed);
        m.generation_tokens
            .fetch_add(generated as u64, Ordering::Relaxed);
        if let Some(i) = FINISHED.iter().position(|(f, _)| *f == finished) {
            m.finished[i].fetch_add(1, Ordering::Relaxed);
        }
        if finished != Finished::Abort {
            m.observe(E2E, e2e);
        }
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        let gauge = if self.running {
            &self.m.running
        } else {
            &self.m.waiting
        };
        gauge.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_moves_from_waiting_to_running_to_counted() {
        let m = ServerMetrics::default();
        let mut r = m.arrive();
        assert!(m
            .render("x")
            .contains("vllm:num_requests_waiting{model_name=\"x\",engine=\"0\"} 1"));
        r.start(Duration::from_millis(40));
        r.first_token(Duration::from_millis(60));
        r.finish(Finished::Length, 7, 3, Duration::from_millis(900));
        let text = m.render("x");
        assert!(
            text.contains("vllm:num_requests_running{model_name=\"x\",engine=\"0\"} 1"),
            "{text}"
        );
        drop(r);
        let text = m.render("x");
        for line in [
            "vllm:num_requests_running{model_name=\"x\",engine=\"0\"} 0",
            "vllm:num_requests_waiting{model_name=\"x\",engine=\"0\"} 0",
            "vllm:prompt_tokens_total{model_name=\"x\",engine=\"0\"} 7",
            "vllm:generation_tokens_total{model_name=\"x\",engine=\"0\"} 3",
            "vllm:request_success_total{model_name=\"x\",engine=\"0\",finished_reason=\"length\"} 1",
            "vllm:request_success_total{model_name=\"x\",engine=\"0\",finished_reason=\"stop\"} 0",
            "vllm:time_to_first_token_seconds_bucket{model_name=\"x\",engine=\"0\",le=\"0.06\"} 1",
            "vllm:time_to_first_token_seconds_bucket{model_name=\"x\",engine=\"0\",le=\"0.04\"} 0",
            "vllm:e2e_request_latency_seconds_bucket{model_name=\"x\",engine=\"0\",le=\"0.8\"} 0",
            "vllm:e2e_request_latency_seconds_bucket{model_name=\"x\",engine=\"0\",le=\"1.0\"} 1",
            "vllm:request_queue_time_seconds_count{model_name=\"x\",engine=\"0\"} 1",
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
    }
}
