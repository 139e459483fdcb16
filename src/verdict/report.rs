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

/// What one latency metric's comparison with its baseline says. Written in reports (and JSON)
/// as its label: `ok`, `regression`, `inconclusive (±x ms)`, `insufficient data`, `no baseline`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LatencyVerdict {
    /// Within tolerance of the baseline, or faster.
    Ok,
    /// The bootstrap interval of the difference is wholly beyond the allowed excess.
    Regression,
    /// The interval straddles the allowed excess; the baseline's noise band (ms) beside it.
    Inconclusive { band_ms: f64 },
    /// Too few samples on a side to judge.
    InsufficientData,
    /// Nothing to compare with yet.
    NoBaseline,
}

impl LatencyVerdict {
    pub fn is_regression(self) -> bool {
        self == LatencyVerdict::Regression
    }
    pub fn is_ok(self) -> bool {
        self == LatencyVerdict::Ok
    }
}

impl std::fmt::Display for LatencyVerdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LatencyVerdict::Ok => f.write_str("ok"),
            LatencyVerdict::Regression => f.write_str("regression"),
            LatencyVerdict::Inconclusive { band_ms } => {
                write!(f, "inconclusive (±{band_ms:.2} ms)")
            }
            LatencyVerdict::InsufficientData => f.write_str("insufficient data"),
            LatencyVerdict::NoBaseline => f.write_str("no baseline"),
        }
    }
}

impl std::str::FromStr for LatencyVerdict {
    type Err = String;
    /// The label back (a report read back, a test's expectation).
    fn from_str(s: &str) -> Result<LatencyVerdict, String> {
        Ok(match s.trim() {
            "ok" => LatencyVerdict::Ok,
            "regression" => LatencyVerdict::Regression,
            "insufficient data" => LatencyVerdict::InsufficientData,
            "no baseline" => LatencyVerdict::NoBaseline,
            other => {
                let band = other
                    .strip_prefix("inconclusive (±")
                    .and_then(|r| r.strip_suffix(" ms)"))
                    .and_then(|n| n.parse().ok())
                    .ok_or_else(|| format!("not a latency verdict: {other:?}"))?;
                LatencyVerdict::Inconclusive { band_ms: band }
            }
        })
    }
}

impl Serialize for LatencyVerdict {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// How a run ended, as the CLI's exit code contract says (docs/ci/index.md); written as the
/// number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Outcome {
    /// 0: the gate passed.
    Pass,
    /// 1: a regression (an error finding, a changed snapshot, a latency regression).
    Regression,
    /// 2: bad input (the message names the file).
    BadInput,
    /// 3: the target could not be reached or timed out.
    Unreachable,
}

impl Outcome {
    /// The process exit code.
    pub fn code(self) -> i32 {
        match self {
            Outcome::Pass => 0,
            Outcome::Regression => 1,
            Outcome::BadInput => 2,
            Outcome::Unreachable => 3,
        }
    }
    /// The outcome of an exit code (an unknown one is a regression: it failed).
    pub fn from_code(code: i32) -> Outcome {
        match code {
            0 => Outcome::Pass,
            2 => Outcome::BadInput,
            3 => Outcome::Unreachable,
            _ => Outcome::Regression,
        }
    }
}

impl std::fmt::Display for Outcome {
    /// The exit code, as reports print it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.code())
    }
}

impl Serialize for Outcome {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_i32(self.code())
    }
}

impl<'de> Deserialize<'de> for Outcome {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Outcome, D::Error> {
        Ok(Outcome::from_code(i32::deserialize(d)?))
    }
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
    /// Against the baseline: ok, regression, noise, insufficient data, no baseline.
    pub verdict: LatencyVerdict,
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
    /// Where this stage's time went, step by step (the online chain: its probe pass, then each
    /// check that sends requests of its own), so a slow server shows which check it slows.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<PhaseTime>,
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
    /// Pass, regression or unreachable (written as 0, 1, 3).
    pub exit_code: Outcome,
}

impl GateReport {
    pub fn passed(&self) -> bool {
        self.exit_code == Outcome::Pass
    }
}
