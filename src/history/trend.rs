//! What a history says: the runs, how each latency median moved from the first run shown to
//! the last, and for each check that ever failed the first run it failed in and whether it is
//! failing still (and since which run). Text for people, JSON for machines, both from here.
use std::collections::BTreeSet;

use serde::Serialize;
use serde_json::Value;

use super::record::{Record, METRICS};
use super::store::SuiteHistory;
use crate::verdict::Severity;

/// One suite's trend over the runs shown.
#[derive(Debug, Serialize)]
pub struct Trend {
    pub suite: String,
    pub file: String,
    /// Runs in the file before the ones shown (`--last`).
    pub skipped: usize,
    pub runs: Vec<Run>,
    pub latency: Vec<MetricTrend>,
    pub checks: Vec<CheckTrend>,
}

/// A run as trends show it; `run` counts from 1 in the file.
#[derive(Debug, Serialize)]
pub struct Run {
    pub run: usize,
    pub time: String,
    pub command: String,
    pub commit: Option<String>,
    pub target: String,
    pub verdict: String,
    pub exit_code: i32,
    pub first_broken: Option<String>,
    /// Metric → p50 in ms, for the metrics measured.
    pub p50: std::collections::BTreeMap<String, f64>,
    pub p90: std::collections::BTreeMap<String, f64>,
    pub p99: std::collections::BTreeMap<String, f64>,
}

#[derive(Debug, Serialize)]
pub struct MetricTrend {
    pub metric: String,
    /// Runs that measured it.
    pub runs: usize,
    pub first_p50: f64,
    pub last_p50: f64,
    /// (last − first) / first × 100; None when the first is 0.
    pub change_pct: Option<f64>,
}

/// A check that failed (an error) in at least one run shown.
#[derive(Debug, Serialize)]
pub struct CheckTrend {
    pub check: String,
    pub first_failed: RunRef,
    /// Its outcome in the last run that reported it.
    pub last_outcome: Severity,
    pub still_failing: bool,
    /// When still failing: the first run of the unbroken streak of failures that ends now
    /// (runs that did not report the check do not break it).
    pub failing_since: Option<RunRef>,
    /// How many runs shown it failed in.
    pub failed_runs: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct RunRef {
    pub run: usize,
    pub time: String,
    pub commit: Option<String>,
}

impl Trend {
    /// The trend of `h`'s last `last` runs (all when None).
    pub fn of(h: &SuiteHistory, last: Option<usize>) -> Trend {
        let skipped = last.map_or(0, |n| h.records.len().saturating_sub(n));
        let shown: Vec<(usize, &Record)> = h
            .records
            .iter()
            .enumerate()
            .skip(skipped)
            .map(|(i, r)| (i + 1, r))
            .collect();
        Trend {
            suite: h.suite.clone(),
            file: h.file.display().to_string(),
            skipped,
            runs: shown.iter().map(|(n, r)| run(*n, r)).collect(),
            latency: METRICS
                .iter()
                .filter_map(|m| metric_trend(m, &shown))
                .collect(),
            checks: check_trends(&shown),
        }
    }
}

fn run(n: usize, r: &Record) -> Run {
    let pick = |f: fn(&super::record::Percentiles) -> f64| {
        r.latency.iter().map(|(m, p)| (m.clone(), f(p))).collect()
    };
    Run {
        run: n,
        time: r.time.clone(),
        command: r.command.clone(),
        commit: r.commit.clone(),
        target: r.target.clone(),
        verdict: r.verdict.clone(),
        exit_code: r.exit_code,
        first_broken: r
            .first_broken
            .as_ref()
            .map(|f| format!("{} ({})", f.boundary, f.check)),
        p50: pick(|p| p.p50),
        p90: pick(|p| p.p90),
        p99: pick(|p| p.p99),
    }
}

fn metric_trend(metric: &str, shown: &[(usize, &Record)]) -> Option<MetricTrend> {
    let p50s: Vec<f64> = shown
        .iter()
        .filter_map(|(_, r)| r.latency.get(metric).map(|p| p.p50))
        .collect();
    let (first, last) = (*p50s.first()?, *p50s.last()?);
    Some(MetricTrend {
        metric: metric.to_string(),
        runs: p50s.len(),
        first_p50: first,
        last_p50: last,
        change_pct: (first > 0.0).then(|| (last - first) / first * 100.0),
    })
}

fn run_ref(n: usize, r: &Record) -> RunRef {
    RunRef {
        run: n,
        time: r.time.clone(),
        commit: r.commit.clone(),
    }
}

fn check_trends(shown: &[(usize, &Record)]) -> Vec<CheckTrend> {
    let failed: BTreeSet<&str> = shown
        .iter()
        .flat_map(|(_, r)| r.checks.iter())
        .filter(|(_, s)| **s == Severity::Error)
        .map(|(c, _)| c.as_str())
        .collect();
    failed
        .into_iter()
        .filter_map(|check| {
            // The runs that reported this check, oldest first.
            let seen: Vec<(usize, &Record, Severity)> = shown
                .iter()
                .filter_map(|(n, r)| r.checks.get(check).map(|s| (*n, *r, *s)))
                .collect();
            let (n, r, _) = seen.iter().find(|(_, _, s)| *s == Severity::Error)?;
            let last_outcome = seen.last()?.2;
            let still_failing = last_outcome == Severity::Error;
            let failing_since = still_failing
                .then(|| {
                    seen.iter()
                        .rev()
                        .take_while(|(_, _, s)| *s == Severity::Error)
                        .last()
                        .map(|(n, r, _)| run_ref(*n, r))
                })
                .flatten();
            Some(CheckTrend {
                check: check.to_string(),
                first_failed: run_ref(*n, r),
                last_outcome,
                still_failing,
                failing_since,
                failed_runs: seen
                    .iter()
                    .filter(|(_, _, s)| *s == Severity::Error)
                    .count(),
            })
        })
        .collect()
}

/// The trends as one JSON document.
pub fn json(trends: &[Trend]) -> Value {
    serde_json::json!({ "version": super::record::RECORD_VERSION, "suites": trends })
}

fn short(commit: &Option<String>) -> &str {
    commit.as_deref().map_or("-", |c| &c[..c.len().min(10)])
}

fn ms(v: Option<&f64>) -> String {
    v.map_or_else(|| "-".to_string(), |v| format!("{v:.2}"))
}

/// The trends for a terminal.
pub fn text(trends: &[Trend]) -> String {
    let mut out = String::new();
    for t in trends {
        out.push_str(&format!(
            "suite {} — {} run{} ({}){}\n",
            t.suite,
            t.runs.len(),
            if t.runs.len() == 1 { "" } else { "s" },
            t.file,
            if t.skipped > 0 {
                format!(", the {} before not shown", t.skipped)
            } else {
                String::new()
            }
        ));
        out.push_str(&format!(
            "  {:>4}  {:<20}  {:<5}  {:<10}  {:<11}  {:>10}  {:>10}  first broken\n",
            "run", "time (UTC)", "cmd", "commit", "verdict", "ttft p50", "e2el p50"
        ));
        for r in &t.runs {
            out.push_str(&format!(
                "  {:>4}  {:<20}  {:<5}  {:<10}  {:<11}  {:>10}  {:>10}  {}\n",
                r.run,
                r.time,
                r.command,
                short(&r.commit),
                r.verdict,
                ms(r.p50.get("ttft")),
                ms(r.p50.get("e2el")),
                r.first_broken.as_deref().unwrap_or("-")
            ));
        }
        if !t.latency.is_empty() {
            out.push_str("  latency p50, first run shown → last (ms):\n");
            for m in &t.latency {
                let change = m
                    .change_pct
                    .map_or_else(|| "-".to_string(), |c| format!("{c:+.1}%"));
                out.push_str(&format!(
                    "    {:<5} {:>10.2} → {:>10.2}  {:>8}  ({} runs)\n",
                    m.metric, m.first_p50, m.last_p50, change, m.runs
                ));
            }
        }
        if t.checks.is_empty() {
            out.push_str("  no check failed in the runs shown\n");
        } else {
            out.push_str("  checks that failed:\n");
            for c in &t.checks {
                let now = match &c.failing_since {
                    Some(s) => format!(
                        "still failing, since run {} ({}, {})",
                        s.run,
                        short(&s.commit),
                        s.time
                    ),
                    None => format!(
                        "not failing now ({} in the last run that ran it)",
                        word(c.last_outcome)
                    ),
                };
                out.push_str(&format!(
                    "    {:<34} first failed in run {} ({}, {}); {now}\n",
                    c.check,
                    c.first_failed.run,
                    short(&c.first_failed.commit),
                    c.first_failed.time
                ));
            }
        }
        out.push('\n');
    }
    out
}

pub(super) fn word(s: Severity) -> &'static str {
    match s {
        Severity::Pass => "pass",
        Severity::Info => "info",
        Severity::Warning => "warning",
        Severity::Error => "error",
    }
}
