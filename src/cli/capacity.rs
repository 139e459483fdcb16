//! `chatgate bench --mode capacity`: the flags, the saved search (a baseline for the next run),
//! the comparison's three verdicts and the report (text, JSON, HTML).
use std::path::{Path, PathBuf};

use clap::Args;

use super::bench::BenchArgs;
use super::Format;
use crate::endpoint::spec::{Target, TargetSpec};
use crate::error::{Error, Result};
use crate::gate::capacity::CapacityRun;
use crate::latency::capacity::{
    self, CapacityVerdict, Decision, Saved, SearchOptions, CAPACITY_FORMAT,
};
use crate::latency::Arrival;
use crate::replay::prompts::Prompt;
use crate::suite::{Inconclusive, LatencySection, MetricMs, Suite};
use crate::verdict::{checks, Finding, Severity};

/// The share of a step's requests that must meet the SLOs without [latency] min_slo_attainment.
pub const DEFAULT_ATTAINMENT: f64 = 0.9;
/// The capacity drop allowed without [latency] capacity_drop.
pub const DEFAULT_CAPACITY_DROP: f64 = 0.1;
/// A saved search larger than this is not one.
const MAX_SAVED_BYTES: u64 = 64 << 20;

#[derive(Args, Default)]
pub struct CapacityArgs {
    /// capacity: the highest rate tried, requests/s [default: 1000].
    #[arg(long, value_name = "RATE")]
    pub max_rate: Option<f64>,
    /// capacity: bisect until the bracket's ends are within this share of each other [default: 0.05].
    #[arg(long, value_name = "SHARE")]
    pub resolution: Option<f64>,
    /// capacity: runs of each end of the final bracket, each with its own seed [default: 2].
    #[arg(long, value_name = "N")]
    pub repeats: Option<usize>,
    /// capacity: the whole search's time budget, seconds [default: 600]; a step that would not
    /// fit is not started, and the interval says how far the search got.
    #[arg(long, value_name = "SECONDS")]
    pub budget: Option<f64>,
    /// capacity: a search saved with --save to compare with (PASS, REGRESSION, INCONCLUSIVE).
    #[arg(long, value_name = "FILE")]
    pub baseline: Option<PathBuf>,
    /// capacity: write a self-contained HTML report here (latency vs rate, CDFs per step, the
    /// server's metrics over time).
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
}

impl CapacityArgs {
    pub fn given(&self) -> bool {
        self.max_rate.is_some()
            || self.resolution.is_some()
            || self.repeats.is_some()
            || self.budget.is_some()
            || self.baseline.is_some()
            || self.html.is_some()
    }
}

/// The flags that shape the search: absurd values are bad input, not a search that never ends.
pub fn validate(a: &BenchArgs) -> Result<()> {
    let bad = |msg: String| Err(Error::input(msg).hint("see chatgate bench --help"));
    let c = &a.capacity;
    let max_rate = c.max_rate.unwrap_or(1000.0);
    if !(max_rate.is_finite() && (0.01..=1_000_000.0).contains(&max_rate) && max_rate >= a.rate) {
        return bad(format!(
            "--max-rate must be between --rate ({}) and 1000000 requests per second, got {max_rate}",
            a.rate
        ));
    }
    if let Some(r) = c
        .resolution
        .filter(|r| !(r.is_finite() && (0.001..=10.0).contains(r)))
    {
        return bad(format!(
            "--resolution must be between 0.001 and 10, got {r}"
        ));
    }
    if let Some(r) = c.repeats.filter(|r| !(1..=100).contains(r)) {
        return bad(format!("--repeats must be between 1 and 100, got {r}"));
    }
    if let Some(b) = c
        .budget
        .filter(|b| !(b.is_finite() && (1.0..=604_800.0).contains(b)))
    {
        return bad(format!(
            "--budget must be between 1 and 604800 seconds, got {b}"
        ));
    }
    if a.shard.is_some() {
        return bad(
            "--shard splits one open-loop schedule; a capacity search runs many, one after another"
                .into(),
        );
    }
    if let (Some(save), Some(base)) = (&a.save, &c.baseline) {
        if same_file(save, base) && !a.update {
            return Err(Error::input(format!(
                "--save {} would replace the baseline this run compares with",
                save.display()
            ))
            .hint("save elsewhere, or add --update to accept this search as the new baseline"));
        }
    }
    Ok(())
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}

impl Saved {
    fn load(path: &Path) -> Result<Saved> {
        let bytes = crate::files::read_bounded(path, MAX_SAVED_BYTES)?;
        let doc: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| {
            Error::in_file(path, format!("is not JSON: {e}"))
                .hint("pass a file `chatgate bench --mode capacity --save FILE` wrote")
        })?;
        if doc.get("format").and_then(|f| f.as_str()) != Some(CAPACITY_FORMAT) {
            return Err(Error::in_file(
                path,
                format!(
                    "is not a saved capacity search (its \"format\" is not {CAPACITY_FORMAT:?})"
                ),
            )
            .hint("pass a file `chatgate bench --mode capacity --save FILE` wrote"));
        }
        serde_json::from_value(doc).map_err(|e| {
            Error::in_file(path, format!("is a damaged capacity search: {e}"))
                .hint("run the search again with --save FILE")
        })
    }
}

/// Search, report, compare; the exit code.
#[allow(clippy::too_many_arguments)]
pub async fn run(
    a: &BenchArgs,
    suite: &Suite,
    spec: &TargetSpec,
    target: &Target,
    prompts: &[Prompt],
    section: &LatencySection,
    arrival: Arrival,
) -> Result<i32> {
    let Some(slo) = section
        .slo
        .filter(|s| s.ttft.is_some() || s.tpot.is_some() || s.e2el.is_some())
    else {
        return Err(Error::in_file(
            &suite.path,
            "bench --mode capacity searches for the highest load meeting the SLOs, and the suite states none",
        )
        .hint("add [latency.slo] ttft = 500 (and/or tpot, e2el, in ms) and [latency] min_slo_attainment = 0.9"));
    };
    // Read the baseline first: a bad file is bad input before minutes of load, not after.
    let baseline = a
        .capacity
        .baseline
        .as_deref()
        .map(Saved::load)
        .transpose()?;
    let c = &a.capacity;
    let attainment = section.min_slo_attainment.unwrap_or(DEFAULT_ATTAINMENT);
    let search = SearchOptions {
        start: a.rate,
        min_rate: (a.rate / 1024.0).max(0.01),
        max_rate: c.max_rate.unwrap_or(1000.0),
        resolution: c.resolution.unwrap_or(0.05),
        repeats: c.repeats.unwrap_or(2),
        budget_s: c.budget.unwrap_or(600.0),
        attainment,
        requests: a.requests,
        seed: a.seed,
    };
    let found = crate::gate::capacity::run(&CapacityRun {
        suite,
        target,
        prompts,
        slo,
        arrival,
        warmup: a.warmup,
        max_in_flight: a.max_in_flight,
        search,
        log: a.format == Format::Text,
    })
    .await;
    let max_drop = section.capacity_drop.unwrap_or(DEFAULT_CAPACITY_DROP);
    let verdict = baseline
        .as_ref()
        .map(|b| capacity::compare(&b.capacity, &found, max_drop));
    let saved = Saved {
        format: CAPACITY_FORMAT.into(),
        chatgate: env!("CARGO_PKG_VERSION").into(),
        mode: "capacity".into(),
        target: spec.display(),
        suite: suite.name.clone(),
        slo,
        attainment,
        arrival,
        capacity: found,
        verdict,
    };
    let text = serde_json::to_string_pretty(&saved).unwrap_or_default();
    if let Some(p) = &a.save {
        super::output::write(p, &text)?;
    }
    if let Some(p) = &c.html {
        super::output::write(p, &crate::report::capacity::render(&saved))?;
    }
    match a.format {
        Format::Json => println!("{}", crate::secrets::redact(&text)),
        Format::Text => println!("{}", crate::secrets::redact(&summary(&saved))),
    }
    let policy = section.inconclusive.unwrap_or_default();
    let code = exit_code(&saved, policy);
    let findings: Vec<Finding> = saved.verdict.iter().map(|v| finding(v, policy)).collect();
    super::bench::record(a, &spec.display(), code, &findings, &[])?;
    Ok(code)
}

/// The comparison as the history records it (`server.capacity`).
fn finding(v: &CapacityVerdict, policy: Inconclusive) -> Finding {
    let severity = match (v.decision, policy) {
        (Decision::Pass, _) => Severity::Pass,
        (Decision::Regression, _) | (Decision::Inconclusive, Inconclusive::Fail) => Severity::Error,
        (Decision::Inconclusive, Inconclusive::Warn) => Severity::Warning,
    };
    let decide = v
        .to_decide
        .as_ref()
        .map(|d| format!("; to decide: {d}"))
        .unwrap_or_default();
    Finding::new(
        checks::SERVER_CAPACITY,
        severity,
        format!("{}: {}{decide}", v.decision, v.reason),
    )
}

/// 3 when no step reached the target, 1 on a REGRESSION (or an INCONCLUSIVE the suite fails),
/// else 0.
fn exit_code(s: &Saved, inconclusive: Inconclusive) -> i32 {
    let steps = &s.capacity.steps;
    if !steps.is_empty() && steps.iter().all(|st| st.measured.unreachable.is_some()) {
        if let Some(why) = &steps[0].measured.unreachable {
            eprintln!("server.reachable error: {}", crate::secrets::redact(why));
        }
        return 3;
    }
    match s.verdict.as_ref().map(|v| v.decision) {
        Some(Decision::Regression) => 1,
        Some(Decision::Inconclusive) if inconclusive == Inconclusive::Fail => 1,
        _ => 0,
    }
}

/// The text report: a line per step, the interval, the knee, the comparison.
pub fn summary(s: &Saved) -> String {
    let c = &s.capacity;
    let mut out = String::new();
    out.push_str(&format!(
        "{:>9} {:>4} {:>5} {:>4} {:>6} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8}  verdict\n",
        "rate/s",
        "run",
        "ok",
        "err",
        "met %",
        "TTFT p50",
        "TTFT p90",
        "E2EL p90",
        "achieved",
        "late p50",
        "waiting"
    ));
    let mut steps: Vec<&capacity::Step> = c.steps.iter().collect();
    steps.sort_by(|a, b| a.rate.total_cmp(&b.rate).then(a.repeat.cmp(&b.repeat)));
    let ms = |st: &capacity::Step, m: &str, p: fn(&crate::latency::Summary) -> f64| {
        st.measured
            .latency
            .get(m)
            .map_or("-".to_string(), |s| format!("{:.1}", p(s)))
    };
    for st in steps {
        let m = &st.measured;
        out.push_str(&format!(
            "{:>9.2} {:>4} {:>5} {:>4} {:>6.1} {:>9} {:>9} {:>9} {:>9.2} {:>8} {:>8}  {}\n",
            st.rate,
            st.repeat + 1,
            m.requests,
            m.errors,
            m.attainment * 100.0,
            ms(st, "ttft", |s| s.p50),
            ms(st, "ttft", |s| s.p90),
            ms(st, "e2el", |s| s.p90),
            m.achieved_rate,
            m.send_late_ms
                .map_or("-".into(), |d| format!("{:.2}", d.p50)),
            m.server
                .as_ref()
                .and_then(|v| v.waiting_max)
                .map_or("-".into(), |w| format!("{w:.0}")),
            if st.passed {
                "pass".to_string()
            } else {
                format!("fail: {}", st.why)
            }
        ));
        for n in &m.notes {
            out.push_str(&format!("{:>9} note: {n}\n", ""));
        }
    }
    if c.stopped == "unreachable" {
        out.push_str("capacity: unknown: the target answered no request of the last step (stopped: unreachable)\n");
        return out;
    }
    out.push_str(&format!(
        "capacity: {} at {:.0} % SLO attainment ({}; {} steps, {:.1} s, stopped: {})\n",
        c.describe(),
        s.attainment * 100.0,
        slo_text(&s.slo),
        c.steps.len(),
        c.elapsed_s,
        c.stopped
    ));
    if let Some(k) = c.knee {
        out.push_str(&format!("knee of latency vs rate: {k:.2} requests/s\n"));
    }
    if let Some(r) = c.saturated_at {
        out.push_str(&format!(
            "saturated from {r:.2} requests/s (latency climbed through the step)\n"
        ));
    }
    if c.stopped == "budget" {
        out.push_str("warning: the time budget ended the search; the interval is as wide as the steps so far make it (raise --budget)\n");
    }
    if let Some(v) = &s.verdict {
        out.push_str(&format!("server.capacity {}: {}\n", v.decision, v.reason));
        if let Some(d) = &v.to_decide {
            out.push_str(&format!("to decide: {d}\n"));
        }
    }
    out
}

fn slo_text(slo: &MetricMs) -> String {
    [("TTFT", slo.ttft), ("TPOT", slo.tpot), ("E2EL", slo.e2el)]
        .into_iter()
        .filter_map(|(n, v)| v.map(|v| format!("{n} ≤ {v} ms")))
        .collect::<Vec<_>>()
        .join(", ")
}
