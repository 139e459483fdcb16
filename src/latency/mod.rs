//! Latency as docs/design/METRICS.md defines it: per-request metrics from a `Record`'s timing,
//! numpy-linear percentiles, load schedules and generators, and noise-aware comparison with a
//! baseline. Pure library code: the CLI (`chatgate gate` / `chatgate bench`) wires it up.
pub mod baseline;
pub mod calibrate;
pub mod capacity;
pub mod client;
pub mod compare;
pub mod load;
pub mod metrics;
pub mod sample;
pub mod schedule;
pub mod server_view;
pub mod stats;

pub use baseline::{
    compare_baseline, scenario_samples, Baseline, Environment, MetricVerdict, ScenarioSamples,
    Scenarios, Settings, BASELINE_VERSION,
};
pub use compare::{compare, compare_stratified, CompareOptions, Status, Verdict, MIN_SAMPLES};
pub use load::{
    closed_loop, meets_slo, open_loop, open_loop_at, Outcome, RunSummary, Slo, Started,
};
pub use metrics::{ItlBasis, Metric, NOutSource, RequestMetrics};
pub use sample::{Sample, WallClock};
pub use schedule::{Arrival, Schedule};
pub use stats::{percentile, percentile_sorted, Summary};

use crate::suite::LatencySection;
use crate::verdict::LatencyRow;

/// docs/design/METRICS.md's table, name → definition, verbatim: every report prints the definitions it
/// used, so a figure is never read with another tool's meaning of the same name.
pub fn definitions() -> Vec<(String, String)> {
    [
        ("TTFT", "t_1 − t_send"),
        ("TTFC", "first *content* (non-reasoning) event − t_send"),
        (
            "E2EL",
            "t_K − t_send (stream-close time reported separately as t_end − t_send)",
        ),
        ("TPOT", "(E2EL − TTFT) / (N_out − 1), only when N_out > 1"),
        (
            "ICL",
            "the gaps t_k − t_(k−1) between output events (a distribution over all events)",
        ),
        (
            "ITL",
            "token-weighted gaps: a gap covering m tokens counts as m samples of gap/m",
        ),
        (
            "NTPOT",
            "E2EL / N_out (normalised latency; never call it TPOT)",
        ),
        (
            "throughput",
            "Σ N_out / D, with D = last t_end − first t_send of the run",
        ),
        (
            "goodput",
            "requests meeting every SLO (TTFT, TPOT, E2EL limits) / D; errors count as misses",
        ),
    ]
    .into_iter()
    .map(|(n, d)| (n.to_string(), d.to_string()))
    .collect()
}

/// The percentile method, as reports state it.
pub const PERCENTILE_METHOD: &str = "linear interpolation between closest ranks (numpy default): \
     h = (n − 1)·p, Q = x[⌊h⌋] + (h − ⌊h⌋)·(x[⌈h⌉] − x[⌊h⌋]); std is the population std";

impl CompareOptions {
    /// The options for one metric from the suite's `[latency]` section, with its defaults:
    /// tolerance 1.0, confidence 0.95, 2000 resamples, floors ttft 50 / tpot 10 / e2el 100 ms
    /// (ITL uses the TPOT floor, TTFC and TTFT_sched the TTFT floor, NTPOT the TPOT floor).
    pub fn for_metric(section: Option<&LatencySection>, metric: Metric) -> CompareOptions {
        let d = CompareOptions::default();
        let floors = section
            .and_then(|s| s.min_regression_ms)
            .unwrap_or_default();
        let ttft = floors.ttft.unwrap_or(50.0);
        let tpot = floors.tpot.unwrap_or(10.0);
        let e2el = floors.e2el.unwrap_or(100.0);
        let floor_ms = match metric {
            Metric::Ttft | Metric::Ttfc | Metric::TtftSched | Metric::Queue => ttft,
            Metric::Tpot | Metric::Itl | Metric::Icl | Metric::Ntpot => tpot,
            Metric::E2el | Metric::Close => e2el,
        };
        CompareOptions {
            tolerance: section.and_then(|s| s.tolerance).unwrap_or(d.tolerance),
            floor_ms,
            confidence: section.and_then(|s| s.confidence).unwrap_or(d.confidence),
            resamples: section.and_then(|s| s.bootstrap).unwrap_or(d.resamples),
            seed: d.seed,
        }
    }
}

/// A report row for one metric: this run's samples, the baseline's (if any) and the verdict
/// (if compared). `None` when the run has no sample of the metric.
pub fn latency_row(
    metric: Metric,
    samples: &[f64],
    baseline: Option<&[f64]>,
    verdict: Option<&Verdict>,
) -> Option<LatencyRow> {
    let s = Summary::from_samples(samples)?;
    let label = verdict.map_or(
        crate::verdict::LatencyVerdict::NoBaseline,
        Verdict::row_verdict,
    );
    Some(LatencyRow {
        metric: metric.name().to_string(),
        n: s.n,
        p50: s.p50,
        p90: s.p90,
        p95: s.p95,
        p99: s.p99,
        mean: s.mean,
        std: s.std,
        min: s.min,
        max: s.max,
        baseline_p50: baseline.and_then(stats::median),
        verdict: label,
        samples: samples.to_vec(),
        baseline_samples: baseline.map(<[f64]>::to_vec).unwrap_or_default(),
    })
}
