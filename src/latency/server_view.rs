//! The server's own view of a load step, from its Prometheus `/metrics` (docs/research/
//! server-metrics.md): how many requests ran and waited, its queue time, KV-cache use,
//! preemptions, prefix-cache hits, and its request and token counts, read under the names each
//! stack uses (vLLM `vllm:`, SGLang `sglang:`, llama.cpp `llamacpp:`, TGI `tgi_`). Parsed with a
//! maintained text-format parser that accepts the colon in those names; a name a stack does not
//! expose stays unknown (None), never 0.
use serde::{Deserialize, Serialize};

/// One scrape, reduced to the figures chatgate reads (summed over label sets: engines, ranks).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Reading {
    /// Seconds since the step started.
    pub at_s: f64,
    /// Which stack's names were found: `vllm`, `sglang`, `llamacpp`, `tgi` (None: none).
    pub stack: Option<String>,
    pub running: Option<f64>,
    pub waiting: Option<f64>,
    /// KV-cache use, a fraction.
    pub kv_cache: Option<f64>,
    /// Counters (cumulative since the server started).
    pub preemptions: Option<f64>,
    pub prefix_queries: Option<f64>,
    pub prefix_hits: Option<f64>,
    pub prompt_tokens: Option<f64>,
    pub generation_tokens: Option<f64>,
    pub requests: Option<f64>,
    /// The queue-time histogram's sum (s) and count.
    pub queue_sum: Option<f64>,
    pub queue_count: Option<f64>,
}

/// Names per figure, per stack, in the order tried. A counter's exposed name (with `_total`).
struct Names {
    stack: &'static str,
    running: &'static str,
    waiting: &'static str,
    kv_cache: &'static str,
    preemptions: &'static str,
    prefix_queries: &'static str,
    prefix_hits: &'static str,
    prompt_tokens: &'static str,
    generation_tokens: &'static str,
    requests: &'static str,
    queue: &'static str,
}

const STACKS: [Names; 4] = [
    Names {
        stack: "vllm",
        running: "vllm:num_requests_running",
        waiting: "vllm:num_requests_waiting",
        kv_cache: "vllm:kv_cache_usage_perc",
        preemptions: "vllm:num_preemptions_total",
        prefix_queries: "vllm:prefix_cache_queries_total",
        prefix_hits: "vllm:prefix_cache_hits_total",
        prompt_tokens: "vllm:prompt_tokens_total",
        generation_tokens: "vllm:generation_tokens_total",
        requests: "vllm:request_success_total",
        queue: "vllm:request_queue_time_seconds",
    },
    Names {
        stack: "sglang",
        running: "sglang:num_running_reqs",
        waiting: "sglang:num_queue_reqs",
        kv_cache: "sglang:token_usage",
        preemptions: "sglang:num_retracted_requests_total",
        prefix_queries: "",
        prefix_hits: "",
        prompt_tokens: "sglang:prompt_tokens_total",
        generation_tokens: "sglang:generation_tokens_total",
        requests: "sglang:num_requests_total",
        queue: "sglang:queue_time_seconds",
    },
    Names {
        stack: "llamacpp",
        running: "llamacpp:requests_processing",
        waiting: "llamacpp:requests_deferred",
        kv_cache: "",
        preemptions: "",
        prefix_queries: "",
        prefix_hits: "",
        // Prompt tokens it processed, cached ones excluded: not the client's prompt count.
        prompt_tokens: "",
        generation_tokens: "llamacpp:tokens_predicted_total",
        requests: "",
        queue: "",
    },
    Names {
        stack: "tgi",
        running: "tgi_batch_current_size",
        waiting: "tgi_queue_size",
        kv_cache: "",
        preemptions: "",
        prefix_queries: "",
        prefix_hits: "",
        prompt_tokens: "",
        generation_tokens: "",
        requests: "tgi_request_success",
        queue: "tgi_request_queue_duration",
    },
];

/// The largest scrape read (a vLLM scrape is tens of KB; a server that streams without end is
/// cut here).
pub const MAX_SCRAPE_BYTES: usize = 4 << 20;

/// Read one scrape. Lines the parser rejects are skipped (a family with no samples, an odd
/// extension), not the whole scrape.
pub fn read(text: &str, at_s: f64) -> Reading {
    let (metrics, _errors) = prom_text_format_parser::parse_scrape(text);
    // (name as the sample line has it, value kind, value), flattened.
    let mut samples: Vec<(String, prom_text_format_parser::ValueType, f64)> = Vec::new();
    for m in &metrics {
        for s in &m.samples {
            let Ok(v) = s.value.value.parse::<f64>() else {
                continue;
            };
            samples.push((m.name.clone(), s.value.value_type, v));
        }
    }
    let sum = |name: &str, kind: prom_text_format_parser::ValueType| -> Option<f64> {
        if name.is_empty() {
            return None;
        }
        let mut found = samples
            .iter()
            .filter(|(n, k, v)| {
                *k == kind && v.is_finite() && (n == name || n.strip_suffix("_total") == Some(name))
            })
            .map(|s| s.2)
            .peekable();
        found.peek()?;
        Some(found.sum())
    };
    use prom_text_format_parser::ValueType::{Count, Sample, Sum};
    let Some(names) = STACKS
        .iter()
        .find(|n| sum(n.running, Sample).is_some() || sum(n.generation_tokens, Sample).is_some())
    else {
        return Reading {
            at_s,
            ..Reading::default()
        };
    };
    // A histogram's buckets carry the sample kind too: only `_sum`/`_count` are read.
    let counter =
        |name: &str| sum(name, Sample).or_else(|| sum(name.trim_end_matches("_total"), Sample));
    Reading {
        at_s,
        stack: Some(names.stack.to_string()),
        running: sum(names.running, Sample),
        waiting: sum(names.waiting, Sample),
        kv_cache: sum(names.kv_cache, Sample),
        preemptions: counter(names.preemptions),
        prefix_queries: counter(names.prefix_queries),
        prefix_hits: counter(names.prefix_hits),
        prompt_tokens: counter(names.prompt_tokens),
        generation_tokens: counter(names.generation_tokens),
        requests: counter(names.requests),
        queue_sum: sum(names.queue, Sum),
        queue_count: sum(names.queue, Count),
    }
}

/// What the server saw during one step: its gauges' peaks over the scrapes, its counters'
/// growth from the scrape before to the scrape after.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct StepView {
    pub stack: Option<String>,
    pub running_max: Option<f64>,
    pub waiting_max: Option<f64>,
    pub kv_cache_max: Option<f64>,
    pub preemptions: Option<f64>,
    /// Prefix-cache hits / queries over the step.
    pub prefix_hit_rate: Option<f64>,
    pub prompt_tokens: Option<f64>,
    pub generation_tokens: Option<f64>,
    pub requests: Option<f64>,
    /// Mean time a request spent in the server's queue (ms).
    pub queue_ms_mean: Option<f64>,
    /// Every scrape of the step (for the report's picture of the server over time).
    pub timeline: Vec<Reading>,
}

impl StepView {
    /// `readings` in time order: the first before the step's first request, the last after
    /// its last reply.
    pub fn from(readings: Vec<Reading>) -> Option<StepView> {
        let (first, last) = (readings.first()?, readings.last()?);
        last.stack.as_ref()?;
        let delta = |f: fn(&Reading) -> Option<f64>| match (f(first), f(last)) {
            (Some(a), Some(b)) => Some((b - a).max(0.0)),
            _ => None,
        };
        let peak = |f: fn(&Reading) -> Option<f64>| readings.iter().filter_map(f).reduce(f64::max);
        let queue_count = delta(|r| r.queue_count);
        let prefix_queries = delta(|r| r.prefix_queries);
        Some(StepView {
            stack: last.stack.clone(),
            running_max: peak(|r| r.running),
            waiting_max: peak(|r| r.waiting),
            kv_cache_max: peak(|r| r.kv_cache),
            preemptions: delta(|r| r.preemptions),
            prefix_hit_rate: delta(|r| r.prefix_hits)
                .zip(prefix_queries)
                .filter(|(_, q)| *q > 0.0)
                .map(|(h, q)| h / q),
            prompt_tokens: delta(|r| r.prompt_tokens),
            generation_tokens: delta(|r| r.generation_tokens),
            requests: delta(|r| r.requests),
            queue_ms_mean: delta(|r| r.queue_sum)
                .zip(queue_count)
                .filter(|(_, n)| *n > 0.0)
                .map(|(s, n)| s / n * 1e3),
            timeline: readings,
        })
    }

    /// Where the client's counts and the server's disagree over the step: its requests, and
    /// its output tokens where both sides counted them. Empty when they agree (or either
    /// side did not count).
    pub fn disagreements(
        &self,
        client_requests: usize,
        client_tokens: Option<usize>,
    ) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(r) = self.requests {
            if (r - client_requests as f64).abs() > 0.5 {
                out.push(format!(
                    "the server finished {r:.0} requests, the client {client_requests}"
                ));
            }
        }
        if let (Some(s), Some(c)) = (self.generation_tokens, client_tokens) {
            if (s - c as f64).abs() > 0.5 {
                out.push(format!(
                    "the server generated {s:.0} tokens, the client counted {c} (usage)"
                ));
            }
        }
        out
    }

    /// Whether the server's queue explains a step's latency: requests waited in its queue for
    /// a large share (≥ 50 %) of the median TTFT.
    pub fn queue_explains(&self, ttft_p50_ms: f64) -> Option<String> {
        let q = self.queue_ms_mean?;
        (ttft_p50_ms > 0.0 && q >= 0.5 * ttft_p50_ms).then(|| {
            format!(
                "the server's queue explains it: requests waited {q:.1} ms on average in its queue \
                 (median TTFT {ttft_p50_ms:.1} ms){}",
                self.waiting_max
                    .filter(|w| *w >= 1.0)
                    .map(|w| format!(", up to {w:.0} waiting at a scrape"))
                    .unwrap_or_default()
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llama_server_names_and_a_family_without_samples() {
        let text = "# HELP llamacpp:requests_processing Number of requests processing.\n\
# TYPE llamacpp:requests_processing gauge\n\
llamacpp:requests_processing 2\n\
# HELP llamacpp:requests_deferred Number of requests deferred.\n\
# TYPE llamacpp:requests_deferred gauge\n\
llamacpp:requests_deferred 5\n\
# HELP llamacpp:tokens_predicted_total Number of generation tokens processed.\n\
# TYPE llamacpp:tokens_predicted_total counter\n\
llamacpp:tokens_predicted_total 120\n\
# HELP llamacpp:n_busy_slots_per_decode Average number of busy slots per llama_decode() call\n\
# TYPE llamacpp:n_busy_slots_per_decode gauge\n\
llamacpp:n_busy_slots_per_decode nan\n\
# HELP empty_family nothing here\n\
# TYPE empty_family gauge\n";
        let r = read(text, 1.0);
        assert_eq!(r.stack.as_deref(), Some("llamacpp"));
        assert_eq!(
            (r.running, r.waiting, r.generation_tokens),
            (Some(2.0), Some(5.0), Some(120.0))
        );
        assert_eq!((r.kv_cache, r.requests), (None, None));
    }

    #[test]
    fn nothing_recognised_is_unknown_not_zero() {
        let r = read("# TYPE up gauge\nup 1\n", 0.0);
        assert_eq!(r.stack, None);
        assert!(StepView::from(vec![r.clone(), r]).is_none());
    }
}
