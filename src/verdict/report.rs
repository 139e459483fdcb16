//! The gate's whole result, as every renderer (terminal, JSON, JUnit, Markdown, HTML) sees it.
use serde::{Deserialize, Serialize};

use super::Findings;

/// What happened to one replayed prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PromptStatus {
    /// The reply matches its accepted snapshot under the prompt's comparator.
    Pass,
    /// The reply differs; a `.snap.new` waits for review.
    Changed,
    /// No accepted snapshot yet; a `.snap.new` waits for review.
    New,
    /// The target failed on this prompt.
    Error,
}

/// One replayed prompt's outcome.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PromptResult {
    pub id: String,
    pub status: PromptStatus,
    /// The comparator's name and parameter, e.g. `exact`, `similarity ≥ 0.9`.
    pub comparator: String,
    /// deterministic, batch-variant or sampled (when the server boundary classified it).
    pub determinism: Option<String>,
    /// One line: why it passed or failed (first divergent token, margin, …).
    pub detail: String,
    /// A unified diff of accepted vs new (no colour codes), when it changed.
    pub diff: Option<String>,
}

/// One latency metric: this run's distribution against the baseline's.
#[derive(Debug, Clone, Serialize)]
pub struct LatencyRow {
    /// `ttft`, `ttfc`, `tpot`, `itl`, `icl`, `e2el`, `ntpot`.
    pub metric: String,
    pub n: usize,
    pub p50: f64,
    pub p90: f64,
    pub p95: f64,
    pub p99: f64,
    pub mean: f64,
    /// Population standard deviation.
    pub std: f64,
    pub min: f64,
    pub max: f64,
    /// The baseline's median, when there is a baseline.
    pub baseline_p50: Option<f64>,
    /// `ok`, `regression`, `no baseline`, or the noise band that made a slowdown noise.
    pub verdict: String,
    /// All samples in ms (for CDF plots).
    pub samples: Vec<f64>,
    pub baseline_samples: Vec<f64>,
}

/// Run-level latency figures.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LatencyTotals {
    pub requests: usize,
    pub errors: usize,
    pub duration_s: f64,
    /// Σ N_out / D (tokens per second).
    pub output_throughput: f64,
    /// Requests meeting every SLO per second (None without SLOs).
    pub goodput: Option<f64>,
    /// Fraction of requests meeting every SLO (errors count as misses).
    pub slo_attainment: Option<f64>,
    /// Whether N_out was estimated by tokenizing text (the server reported no usage).
    pub n_out_estimated: bool,
    /// The client's own overhead per output event, in microseconds (median).
    pub client_overhead_us_per_event: f64,
    /// Why these figures time the client as much as the server (it fell behind), when it did.
    pub unreliable: Option<String>,
}

/// Where a run's wall time went: one stage of the gate (loading, the offline chain, the online
/// chain's probes, the replay, the latency measurement) and its seconds, in the order they ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhaseTime {
    pub phase: String,
    pub seconds: f64,
    /// Requests sent to the target in this phase (None in-process or where not counted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<u64>,
}

/// Everything `chatgate gate` found.
#[derive(Debug, Clone, Serialize)]
pub struct GateReport {
    pub suite: String,
    pub suite_file: String,
    /// The target as given (`candle:DIR` or a URL), never with credentials.
    pub target: String,
    pub findings: Findings,
    pub prompts: Vec<PromptResult>,
    pub latency: Vec<LatencyRow>,
    pub latency_totals: Option<LatencyTotals>,
    /// How each latency metric is defined (docs/design/METRICS.md), printed with the figures.
    pub definitions: Vec<(String, String)>,
    pub duration_s: f64,
    /// Where `duration_s` went, stage by stage.
    #[serde(default)]
    pub phases: Vec<PhaseTime>,
    /// 0 pass, 1 regression, 3 unreachable.
    pub exit_code: i32,
}

impl GateReport {
    pub fn passed(&self) -> bool {
        self.exit_code == 0
    }
}
