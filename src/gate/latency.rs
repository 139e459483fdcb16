//! The latency stage: the replay prompts, streamed, in a closed loop (concurrency c, R repeats,
//! warm-up first), measured as METRICS.md defines it and compared with the baseline stored for
//! this kind of target under `snapshots/<suite>/latency/`. `--update` records a new baseline.
use std::time::Instant;

use indexmap::IndexMap;

use crate::chain::{Boundary::Server, Finding, Severity};
use crate::error::Result;
use crate::latency::{
    closed_loop, compare_baseline, latency_row, scenario_samples, Baseline, CompareOptions,
    Environment, Metric, RequestMetrics, RunSummary, Scenarios, Settings, Status,
};
use crate::replay::{Prompt, Record};
use crate::report::{LatencyRow, LatencyTotals};
use crate::suite::{LatencySection, Suite};
use crate::target::openai::CallError;
use crate::target::spec::{Target, TargetSpec};

use super::progress::Progress;

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

/// The metrics an open-loop run reports: also TTFT from the scheduled send and the queueing
/// before the send (coordinated omission).
const LOAD_ROWS: [Metric; 9] = [
    Metric::Ttft,
    Metric::TtftSched,
    Metric::Ttfc,
    Metric::Tpot,
    Metric::Itl,
    Metric::Icl,
    Metric::E2el,
    Metric::Ntpot,
    Metric::Queue,
];

pub struct Measured {
    pub findings: Vec<Finding>,
    pub rows: Vec<LatencyRow>,
    pub totals: LatencyTotals,
}

pub async fn run(
    suite: &Suite,
    spec: &TargetSpec,
    target: &Target,
    prompts: &[Prompt],
    section: &LatencySection,
    update: bool,
    progress: &Progress,
) -> Result<Measured> {
    let repeats = section.repeats.unwrap_or(3).max(1);
    let n = prompts.len() * repeats;
    progress.stage("latency", n as u64);
    let outcomes = closed_loop(
        n,
        section.concurrency.unwrap_or(1),
        section.warmup.unwrap_or(1),
        |i, _t: Instant| timed_request(target, prompts, i),
    )
    .await;
    for _ in &outcomes {
        progress.step("");
    }
    let count = n_out_counter(suite);
    let summary = RunSummary::from(&outcomes, section.slo.as_ref(), &count);
    let measured = per_request(&outcomes, &count);
    let scenarios = scenarios(prompts, &measured);

    let label = section
        .baseline
        .clone()
        .unwrap_or_else(|| spec.label().to_string());
    let path = Baseline::path(&suite.snapshot_dir, &label);
    let baseline = Baseline::read(&path)?;
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
    for v in verdicts.iter().filter(|v| v.scenario.is_none()) {
        let id = check_id(v.metric);
        let (severity, phrase) = match v.verdict.status {
            Status::Regression => (Severity::Error, "regressed"),
            Status::Noise => (Severity::Info, "is slower, within the measured noise"),
            Status::Ok => (Severity::Pass, "is within tolerance of the baseline"),
            Status::Insufficient => (Severity::Info, "cannot be judged"),
        };
        let metric = v.metric.name().to_uppercase();
        let f = Finding::new(
            Server,
            id,
            severity,
            format!("{metric} {phrase}: {}", v.verdict.reason),
        );
        findings.push(f.with("baseline", path.display()));
    }
    findings.extend(baseline_status(
        &path,
        baseline.as_ref(),
        spec,
        &label,
        update,
    ));
    findings.extend(slo(section, &summary));
    if summary.errors > 0 {
        findings.push(Finding::new(
            Server,
            "server.latency-errors",
            Severity::Error,
            format!(
                "{} of {} latency requests failed",
                summary.errors,
                outcomes.len()
            ),
        ));
    }
    if update {
        let env = Environment::current(spec.label(), Some(crate::target::spec::model_name(suite)));
        let settings = Settings {
            repeats,
            concurrency: section.concurrency.unwrap_or(1),
            warmup: section.warmup.unwrap_or(1),
            max_tokens: suite.file.replay.as_ref().and_then(|r| r.max_tokens),
        };
        Baseline::new(env, settings, scenarios).write(&path)?;
    }
    Ok(Measured {
        findings,
        rows,
        totals: summary.totals(),
    })
}

/// Request i of a latency run: the prompts in turn, streamed (so every event is timed), without
/// logprobs (they are not what is measured and they make servers slower).
fn timed_request(
    target: &Target,
    prompts: &[Prompt],
    i: usize,
) -> impl std::future::Future<Output = Result<Record, CallError>> + Send + 'static {
    let target = target.clone();
    let mut req = prompts[i % prompts.len()].request();
    req.stream = true;
    req.top_logprobs = None;
    async move { target.chat(&req).await }
}

/// `server.latency-ttft`, … — the latency of the server (or in-process model) under test.
fn check_id(m: Metric) -> &'static str {
    match m {
        Metric::Ttft => "server.latency-ttft",
        Metric::Tpot => "server.latency-tpot",
        Metric::E2el => "server.latency-e2el",
        Metric::Itl => "server.latency-itl",
        _ => "server.latency",
    }
}

fn baseline_status(
    path: &std::path::Path,
    baseline: Option<&Baseline>,
    spec: &TargetSpec,
    label: &str,
    update: bool,
) -> Option<Finding> {
    match (baseline, update) {
        (_, true) => Some(
            Finding::new(
                Server,
                "server.latency-baseline",
                Severity::Info,
                "this run was recorded as the new latency baseline (--update)",
            )
            .with("file", path.display()),
        ),
        (None, false) => Some(
            Finding::new(
                Server,
                "server.latency-baseline",
                Severity::Info,
                format!("no latency baseline {label:?} yet: nothing to compare with"),
            )
            .with(
                "hint",
                "record one with chatgate gate SUITE --update (on a quiet machine)",
            ),
        ),
        (Some(b), false) => {
            let here = Environment::current(spec.label(), b.environment.model.clone());
            let diffs = b.environment.differences(&here);
            (!diffs.is_empty()).then(|| {
                Finding::new(
                    Server,
                    "server.latency-baseline",
                    Severity::Info,
                    "the baseline was measured on another environment: compare with care",
                )
                .with("differences", diffs.join("; "))
            })
        }
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
        Finding::new(Server, "server.slo", Severity::Error, msg)
    } else {
        Finding::pass(Server, "server.slo", msg)
    })
}

/// An open-loop load run (`chatgate bench --mode load`): request i goes at its scheduled
/// instant whatever the earlier ones are doing, cycling through the prompts, streamed.
pub async fn load(
    suite: &Suite,
    target: &Target,
    prompts: &[Prompt],
    schedule: &crate::latency::Schedule,
    warmup: usize,
    max_in_flight: usize,
    slo: Option<&crate::suite::MetricMs>,
) -> (RunSummary, Vec<LatencyRow>) {
    let outcomes = crate::latency::open_loop(schedule, warmup, max_in_flight, |i, _t: Instant| {
        timed_request(target, prompts, i)
    })
    .await;
    let count = n_out_counter(suite);
    let summary = RunSummary::from(&outcomes, slo, &count);
    let measured = per_request(&outcomes, &count);
    let rows = LOAD_ROWS
        .into_iter()
        .filter_map(|m| latency_row(m, &samples(&measured, m), None, None))
        .collect();
    (summary, rows)
}

/// Each measured request's metrics, computed once, with its request index.
fn per_request(
    outcomes: &[crate::latency::Outcome<CallError>],
    count: &impl Fn(&str) -> Option<usize>,
) -> Vec<(usize, RequestMetrics)> {
    outcomes
        .iter()
        .filter_map(|o| {
            o.result
                .as_ref()
                .ok()
                .map(|r: &Record| (o.index, RequestMetrics::from_record(r, count)))
        })
        .collect()
}

/// Per prompt id, the gated metrics' samples of its measured requests.
fn scenarios(prompts: &[Prompt], measured: &[(usize, RequestMetrics)]) -> Scenarios {
    let mut per: IndexMap<String, Vec<&RequestMetrics>> = IndexMap::new();
    for (i, m) in measured {
        per.entry(prompts[i % prompts.len()].id.clone())
            .or_default()
            .push(m);
    }
    per.into_iter()
        .map(|(id, ms)| (id, scenario_samples(ms)))
        .collect()
}

/// One metric's samples over every measured request.
fn samples(measured: &[(usize, RequestMetrics)], m: Metric) -> Vec<f64> {
    measured.iter().flat_map(|(_, r)| r.samples(m)).collect()
}

/// The pinned tokenizer's count of a whole reply: N_out when a server reports no usage
/// (METRICS.md: estimated, never counted per chunk).
fn n_out_counter(suite: &Suite) -> impl Fn(&str) -> Option<usize> {
    let tokenizer = crate::artifacts::ModelDir::open(&suite.model_dir)
        .ok()
        .and_then(|d| d.tokenizer)
        .map(|t| t.tokenizer);
    move |text: &str| {
        tokenizer
            .as_ref()
            .and_then(|t| t.encode(text, false).ok())
            .map(|e| e.len())
    }
}
