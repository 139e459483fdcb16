//! The latency stage's judge: the measured samples against the stored baseline (noise-aware,
//! calibrated for a machine of another speed), the SLOs and the errors, as findings at the
//! server boundary (`server.latency-*`, `server.slo`), and the report's rows and totals. The
//! gate measures (`gate::latency`); a sharded run's merge judges every shard's samples here
//! exactly as one run judges its own.
use std::path::PathBuf;

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

use crate::endpoint::openai::CallError;
use crate::latency::client::ClientHealth;
use crate::latency::{
    compare_baseline, latency_row, scenario_samples, Baseline, CompareOptions, Environment, Metric,
    RequestMetrics, RunSummary, Sample, Scenarios, Status,
};
use crate::suite::LatencySection;
use crate::verdict::checks::{self, Check};
use crate::verdict::{Finding, LatencyRow, LatencyTotals, Severity};

/// The metrics a closed-loop run reports (sends are never held back, so the schedule-relative
/// ones add nothing).
const SMOKE_ROWS: [Metric; 7] = [
    Metric::Ttft,
    Metric::Ttfc,
    Metric::Tpot,
    Metric::Itl,
    Metric::Icl,
    Metric::E2el,
    Metric::Ntpot,
];

pub struct Measured {
    pub findings: Vec<Finding>,
    pub rows: Vec<LatencyRow>,
    pub totals: LatencyTotals,
    /// No request got an answer (refused, timed out, closed): why, for exit 3.
    pub unreachable: Option<String>,
}

/// What the latency stage measured, as plain data: a shard writes it into its part, and the
/// merge judges the union exactly as one run judges its own ([`judge`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LatencyData {
    /// The measured requests (this shard's, or all of them).
    pub samples: Vec<Sample>,
    /// The replayed prompt ids in order: request i replays `prompts[i % len]`.
    pub prompts: Vec<String>,
    /// Requests in the whole run (every shard's): prompts × repeats.
    pub planned: usize,
    /// The baseline's label and file, and the baseline as it was read (None: there is none).
    pub label: String,
    pub baseline_path: PathBuf,
    pub baseline: Option<Baseline>,
    /// Where this was measured (with its calibration), for the machine-speed comparison.
    pub environment: Environment,
    /// The in-process target: the machine is the server, so a machine change is calibrated.
    pub in_process: bool,
    /// The `[replay] max_tokens` the baseline records.
    pub max_tokens: Option<u32>,
    /// Whether the client kept up while it measured (the worst shard's, merged).
    #[serde(default)]
    pub client: Option<ClientHealth>,
}

/// Why a run reached nothing: every request failed without the server answering (refused,
/// timed out, turned away with 429/503, or the connection closed with nothing received). Another
/// status or a malformed answer is a server that answered: a regression, not an unreachable
/// target.
pub fn unreachable_reason(samples: &[Sample]) -> Option<String> {
    if samples
        .iter()
        .any(|s| s.metrics.is_some() || !s.unreachable)
    {
        return None;
    }
    let first = samples.first()?.error.clone().unwrap_or_default();
    Some(format!(
        "no request of {} got an answer: {first}",
        samples.len()
    ))
}

/// Whether an error means the target was not reached at all.
pub fn reached_nothing(e: &CallError) -> bool {
    match e {
        CallError::Interrupted { partial, .. } => partial.text.is_empty(),
        e => e.unreachable() || e.overloaded(),
    }
}

/// Rows, verdicts against the baseline, SLOs and errors, from the samples alone.
pub fn judge(data: &LatencyData, section: &LatencySection, update: bool) -> Measured {
    let summary = RunSummary::from_samples(&data.samples, section.slo.as_ref());
    let measured = metrics_of(&data.samples);
    let scenarios = scenarios(data);
    let recorded = &data.baseline;
    let here = &data.environment;
    let machine = recorded
        .as_ref()
        .and_then(|b| MachineChange::of(b, here, data.in_process));
    // The in-process verdict compares with the baseline as it would read on this machine.
    let baseline = match (recorded, &machine) {
        (Some(b), Some(m)) if m.calibrated => Some(b.scaled(m.ratio)),
        _ => recorded.clone(),
    };
    let opts = |m: Metric| CompareOptions::for_metric(Some(section), m);
    let verdicts = baseline
        .as_ref()
        .map(|b| compare_baseline(b, &scenarios, opts, false))
        .unwrap_or_default();

    let mut findings = Vec::new();
    let base_pooled = |m: Metric| -> Option<Vec<f64>> {
        baseline.as_ref().map(|b| {
            b.scenarios
                .values()
                .flat_map(|s| s.get(&m).cloned().unwrap_or_default())
                .collect()
        })
    };
    let mut rows = Vec::new();
    for m in SMOKE_ROWS {
        let verdict = verdicts
            .iter()
            .find(|v| v.metric == m && v.scenario.is_none())
            .map(|v| &v.verdict);
        let run = samples(&measured, m);
        let base = base_pooled(m);
        if let Some(row) = latency_row(m, &run, base.as_deref(), verdict) {
            rows.push(row);
        }
    }
    let path = &data.baseline_path;
    // A client that fell behind timed itself: its figures are not judged as the server's.
    let behind: Vec<String> = [
        summary.drift_warning.clone(),
        data.client
            .as_ref()
            .and_then(|c| c.unreliable(data.in_process)),
    ]
    .into_iter()
    .flatten()
    .collect();
    let unreliable = (!behind.is_empty()).then(|| behind.join("; "));
    findings.push(client_finding(data.client.as_ref(), unreliable.as_deref()));
    for v in verdicts.iter().filter(|v| v.scenario.is_none()) {
        let id = check_id(v.metric);
        let (severity, phrase) = match v.verdict.status {
            Status::Regression if unreliable.is_some() => (
                Severity::Warning,
                "looks regressed, not judged: the figures are unreliable (server.latency-client)",
            ),
            Status::Regression => (Severity::Error, "regressed"),
            Status::Inconclusive => (
                match section.inconclusive.unwrap_or_default() {
                    crate::suite::Inconclusive::Warn => Severity::Warning,
                    crate::suite::Inconclusive::Fail => Severity::Error,
                },
                "is INCONCLUSIVE",
            ),
            Status::Ok => (Severity::Pass, "is within tolerance of the baseline"),
            Status::Insufficient => (Severity::Info, "cannot be judged"),
        };
        let metric = v.metric.name().to_uppercase();
        let decide = v
            .verdict
            .to_decide
            .as_ref()
            .map(|d| format!("; to decide: {d}"))
            .unwrap_or_default();
        let f = Finding::new(
            id,
            severity,
            format!("{metric} {phrase}: {}{decide}", v.verdict.reason),
        );
        findings.push(f.with("baseline", path.display()));
    }
    findings.extend(baseline_status(
        path,
        recorded.as_ref(),
        here,
        &data.label,
        update,
    ));
    if let (Some(raw), Some(m), false) = (recorded, &machine, update) {
        findings.push(m.finding(raw, &measured));
    }
    findings.extend(slo(section, &summary));
    if summary.errors > 0 {
        findings.push(Finding::new(
            checks::SERVER_LATENCY_ERRORS,
            Severity::Error,
            format!(
                "{} of {} latency requests failed",
                summary.errors,
                data.samples.len()
            ),
        ));
    }
    let mut totals = summary.totals();
    totals.unreliable = unreliable;
    Measured {
        findings,
        rows,
        totals,
        unreachable: unreachable_reason(&data.samples),
    }
}

/// `server.latency-client`: whether the client kept up (event loop, CPU, send drift).
fn client_finding(client: Option<&ClientHealth>, unreliable: Option<&str>) -> Finding {
    let mut f = match unreliable {
        Some(why) => Finding::new(
            checks::SERVER_LATENCY_CLIENT,
            Severity::Warning,
            format!("the latency figures are unreliable: {why}"),
        )
        .with("fix", "measure from a less loaded machine (in-process: nothing else running on it), lower the concurrency, or split the run across runners (--shard K/N)"),
        None => Finding::pass(checks::SERVER_LATENCY_CLIENT, "the client kept up while it measured"),
    };
    if let Some(c) = client {
        f = f.with(
            "event-loop lag",
            format!(
                "p99 {:.2} ms, worst {:.2} ms",
                c.loop_lag_p99_ms, c.loop_lag_max_ms
            ),
        );
        if let Some(cpu) = c.cpu_cores {
            f = f.with("client CPU", format!("{cpu:.2} of {} cores", c.cores));
        }
        if let Some(n) = c.neighbours_cores {
            f = f.with("other processes", format!("{n:.2} of {} cores", c.cores));
        }
    }
    f
}

/// `server.latency-ttft`, … — the latency of the server (or in-process model) under test.
fn check_id(m: Metric) -> &'static Check {
    match m {
        Metric::Ttft => checks::SERVER_LATENCY_TTFT,
        Metric::Tpot => checks::SERVER_LATENCY_TPOT,
        Metric::E2el => checks::SERVER_LATENCY_E2EL,
        Metric::Itl => checks::SERVER_LATENCY_ITL,
        _ => checks::SERVER_LATENCY,
    }
}

fn baseline_status(
    path: &std::path::Path,
    baseline: Option<&Baseline>,
    here: &Environment,
    label: &str,
    update: bool,
) -> Option<Finding> {
    match (baseline, update) {
        (_, true) => Some(
            Finding::new(
                checks::SERVER_LATENCY_BASELINE,
                Severity::Info,
                "this run was recorded as the new latency baseline (--update)",
            )
            .with("file", path.display()),
        ),
        (None, false) => Some(
            Finding::new(
                checks::SERVER_LATENCY_BASELINE,
                Severity::Info,
                format!("no latency baseline {label:?} yet: nothing to compare with"),
            )
            .with(
                "hint",
                "record one with chatgate gate SUITE --update (on a quiet machine)",
            ),
        ),
        (Some(b), false) => {
            let mut here = here.clone();
            here.model.clone_from(&b.environment.model);
            let diffs = b.environment.differences(&here);
            (!diffs.is_empty()).then(|| {
                Finding::new(
                    checks::SERVER_LATENCY_BASELINE,
                    Severity::Info,
                    "the baseline was measured on another environment: compare with care",
                )
                .with("differences", diffs.join("; "))
            })
        }
    }
}

/// The baseline was recorded on a machine of another speed (the calibration workload's time
/// differs by more than the timing noise).
struct MachineChange {
    /// How much slower this machine is (> 1) or faster (< 1).
    ratio: f64,
    /// The in-process target: the machine is the server, so the verdict is calibrated. For a
    /// remote server the client machine barely matters and the verdict stays raw.
    calibrated: bool,
}

impl MachineChange {
    fn of(b: &Baseline, here: &Environment, in_process: bool) -> Option<MachineChange> {
        let ratio = b.environment.speed_ratio(here)?;
        (!crate::latency::calibrate::same_speed(ratio)).then_some(MachineChange {
            ratio,
            calibrated: in_process,
        })
    }

    /// Raw and calibrated medians side by side, and which one the verdict used.
    fn finding(&self, raw: &Baseline, measured: &[(usize, RequestMetrics)]) -> Finding {
        let speed = if self.ratio > 1.0 {
            format!("{:.2}x slower", self.ratio)
        } else {
            format!("{:.2}x faster", 1.0 / self.ratio)
        };
        let used = if self.calibrated {
            "the in-process model runs on this machine, so the verdict uses the calibrated baseline"
        } else {
            "the target is a remote server, whose latency barely depends on this client machine, so the verdict uses the raw baseline"
        };
        let mut f = Finding::new(
            checks::SERVER_LATENCY_BASELINE,
            Severity::Info,
            format!(
                "this machine is {speed} than the baseline's on the calibration workload; {used}"
            ),
        );
        for m in [Metric::Ttft, Metric::Tpot, Metric::E2el] {
            let base: Vec<f64> = raw
                .scenarios
                .values()
                .flat_map(|s| s.get(&m).cloned().unwrap_or_default())
                .collect();
            let (Some(b), Some(n)) = (
                crate::latency::stats::median(&base),
                crate::latency::stats::median(&samples(measured, m)),
            ) else {
                continue;
            };
            let pct = |base: f64| (n / base - 1.0) * 100.0;
            f = f.with(
                &format!("{} median", m.name()),
                format!(
                    "raw {b:.2} → {n:.2} ms ({:+.0} %); calibrated {:.2} → {n:.2} ms ({:+.0} %)",
                    pct(b),
                    b * self.ratio,
                    pct(b * self.ratio)
                ),
            );
        }
        f
    }
}

fn slo(section: &LatencySection, summary: &RunSummary) -> Option<Finding> {
    let (min, have) = (section.min_slo_attainment?, summary.slo_attainment?);
    let msg = format!(
        "{:.0}% of requests meet the SLOs (at least {:.0}% required)",
        have * 100.0,
        min * 100.0
    );
    Some(if have + 1e-9 < min {
        Finding::new(checks::SERVER_SLO, Severity::Error, msg)
    } else {
        Finding::pass(checks::SERVER_SLO, msg)
    })
}

/// Each successful request's metrics with its index in the whole run, in index order (the
/// order one unsharded run measures them in, which the seeded comparison depends on).
pub fn metrics_of(samples: &[Sample]) -> Vec<(usize, RequestMetrics)> {
    let mut out: Vec<(usize, RequestMetrics)> = samples
        .iter()
        .filter_map(|s| s.metrics.clone().map(|m| (s.index, m)))
        .collect();
    out.sort_by_key(|(i, _)| *i);
    out
}

/// Per prompt id, the gated metrics' samples of its measured requests.
pub fn scenarios(data: &LatencyData) -> Scenarios {
    let measured = metrics_of(&data.samples);
    let mut per: IndexMap<String, Vec<&RequestMetrics>> = IndexMap::new();
    for (i, m) in &measured {
        per.entry(data.prompts[i % data.prompts.len()].clone())
            .or_default()
            .push(m);
    }
    per.into_iter()
        .map(|(id, ms)| (id, scenario_samples(ms)))
        .collect()
}

/// One metric's samples over every measured request.
pub fn samples(measured: &[(usize, RequestMetrics)], m: Metric) -> Vec<f64> {
    measured.iter().flat_map(|(_, r)| r.samples(m)).collect()
}
