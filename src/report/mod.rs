//! Renderers for findings: a terminal report (colour only on a TTY) and JSON for machines.
//! Both lead with the verdict and the first broken boundary.
use crate::verdict::Outcome;
use crate::verdict::{GateReport, LatencyRow, PromptStatus};
use std::io::IsTerminal;

use serde_json::{json, Value};

use crate::verdict::{Findings, Severity};

pub mod capacity;
pub mod checks_doc;
pub mod html;
pub mod junit;
pub mod markdown;
pub mod plots;
pub mod sarif;
pub mod summary;
pub mod view;

/// Every format a gate's report is written in. A new format is one file in `report/` and one
/// arm here; `chatgate gate`/`merge` take it as `--format FORMAT` (stdout) and
/// `--report FORMAT=FILE`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Human-readable, by boundary (colour only on a terminal).
    #[default]
    Text,
    /// The whole report as one JSON document.
    Json,
    /// JUnit XML, a test suite per boundary (CI test tabs).
    Junit,
    /// A Markdown summary under GitHub's 1 MiB limit ($GITHUB_STEP_SUMMARY, PR comments).
    Markdown,
    /// One self-contained HTML file with the chain strip and latency CDF plots.
    Html,
    /// SARIF 2.1.0: one result per error and warning finding (code-scanning dashboards).
    Sarif,
}

/// What some formats need beyond the report: colour for the terminal, where SARIF results point.
pub struct Context<'a> {
    pub colour: bool,
    pub sarif: &'a sarif::Locations,
}

impl Format {
    /// The name `--format`/`--report` take.
    pub fn name(self) -> &'static str {
        match self {
            Format::Text => "text",
            Format::Json => "json",
            Format::Junit => "junit",
            Format::Markdown => "markdown",
            Format::Html => "html",
            Format::Sarif => "sarif",
        }
    }

    /// The format named `name`.
    pub fn named(name: &str) -> Option<Format> {
        use clap::ValueEnum;
        Format::value_variants()
            .iter()
            .copied()
            .find(|f| f.name() == name)
    }

    /// The report in this format (not yet redacted: the writer redacts every output).
    pub fn render(self, r: &GateReport, ctx: &Context) -> crate::error::Result<String> {
        Ok(match self {
            Format::Text => gate_terminal(r, ctx.colour),
            Format::Json => serde_json::to_string_pretty(&gate_json(r)).unwrap_or_default() + "\n",
            Format::Junit => junit::render(r)?,
            Format::Markdown => markdown::render(r),
            Format::Html => html::render(r),
            Format::Sarif => {
                serde_json::to_string_pretty(&sarif::render(r, ctx.sarif)).unwrap_or_default()
                    + "\n"
            }
        })
    }
}

/// Colour when stdout is a terminal and NO_COLOR is unset (https://no-color.org).
pub fn use_colour() -> bool {
    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none()
}

struct Paint(bool);

impl Paint {
    fn on(&self, code: &str, s: &str) -> String {
        if self.0 {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_string()
        }
    }
}

fn mark(sev: Severity, p: &Paint) -> String {
    match sev {
        Severity::Pass => p.on("32", "  ok "),
        Severity::Info => p.on("36", "info "),
        Severity::Warning => p.on("33", "warn "),
        Severity::Error => p.on("1;31", "FAIL "),
    }
}

/// The human report: findings grouped by boundary in chain order, evidence under each problem.
pub fn terminal(title: &str, findings: &Findings, colour: bool) -> String {
    let p = Paint(colour);
    let mut out = format!("{title}\n");
    let mut current = None;
    for f in &findings.0 {
        if current != Some(f.boundary) {
            current = Some(f.boundary);
            out.push_str(&format!("\n{}\n", p.on("1", f.boundary.name())));
        }
        out.push_str(&format!(
            "  {} {:<34} {}\n",
            mark(f.severity, &p),
            f.check.id,
            f.message
        ));
        if f.severity != Severity::Pass {
            for (k, v) in &f.evidence {
                out.push_str(&format!("        {}: {}\n", p.on("2", k), v));
            }
        }
    }
    out.push('\n');
    out.push_str(&verdict_line(findings, &p));
    out.push('\n');
    out
}

fn verdict_line(findings: &Findings, p: &Paint) -> String {
    let count = |s| findings.0.iter().filter(|f| f.severity == s).count();
    let tally = format!(
        "{} ok, {} info, {} warnings, {} errors",
        count(Severity::Pass),
        count(Severity::Info),
        count(Severity::Warning),
        count(Severity::Error)
    );
    match findings.first_broken() {
        None => format!("{} ({tally})", p.on("1;32", "PASS")),
        Some(f) => format!(
            "{} — first broken boundary: {} ({}) ({tally})",
            p.on("1;31", "FAIL"),
            f.boundary.name(),
            f.check.id
        ),
    }
}

/// The machine report.
pub fn json(subject: Value, findings: &Findings) -> Value {
    json!({
        "subject": subject,
        "verdict": if findings.has_errors() { "fail" } else { "pass" },
        "first_broken": findings.first_broken().map(|f| json!({"boundary": f.boundary, "check": f.check, "message": f.message})),
        "findings": findings.0,
    })
}

/// The gate's human report: findings by boundary, then the replay and latency sections, then
/// the verdict naming the first broken boundary and the downstream symptoms it may explain.
pub fn gate_terminal(r: &GateReport, colour: bool) -> String {
    let p = Paint(colour);
    let title = format!("chatgate gate {} — target {}", r.suite_file, r.target);
    let mut out = terminal(&title, &r.findings, colour);
    // `terminal` ends with its verdict line; the gate's verdict comes last, after the details.
    if let Some(cut) = out.trim_end().rfind('\n') {
        out.truncate(cut + 1);
    }
    if !r.prompts.is_empty() {
        out.push_str(&format!("\n{}\n", p.on("1", "replay")));
        for pr in &r.prompts {
            let mark = match pr.status {
                PromptStatus::Pass => p.on("32", "  ok "),
                PromptStatus::Changed => p.on("1;31", "DIFF "),
                PromptStatus::New => p.on("33", " NEW "),
                PromptStatus::Error => p.on("1;31", " ERR "),
            };
            let class = pr
                .determinism
                .as_deref()
                .map(|d| format!(" [{d}]"))
                .unwrap_or_default();
            out.push_str(&format!(
                "  {mark} {:<20} {:<24} {}{class}\n",
                pr.id, pr.comparator, pr.detail
            ));
            if let Some(diff) = &pr.diff {
                for line in diff.lines() {
                    let painted = match line.chars().next() {
                        Some('+') => p.on("32", line),
                        Some('-') => p.on("31", line),
                        _ => line.to_string(),
                    };
                    out.push_str(&format!("        {painted}\n"));
                }
            }
        }
    }
    if !r.latency.is_empty() {
        out.push_str(&format!("\n{}", p.on("1", "latency")));
        let table = latency_table(&r.latency);
        for line in table.lines() {
            let line = if line.contains("regression") {
                p.on("1;31", line)
            } else {
                line.to_string()
            };
            out.push_str(&format!("{line}\n"));
        }
        if let Some(t) = &r.latency_totals {
            out.push_str(&format!(
                "  {} requests, {} errors, {:.1} s; output {:.1} tok/s{}{}; client overhead {:.1} µs/event\n",
                t.requests,
                t.errors,
                t.duration_s,
                t.output_throughput,
                t.goodput.map(|g| format!(", goodput {g:.2} req/s")).unwrap_or_default(),
                t.slo_attainment.map(|a| format!(", SLO attainment {:.0}%", a * 100.0)).unwrap_or_default(),
                t.client_overhead_us_per_event
            ));
            if let Some(why) = &t.unreliable {
                out.push_str(&p.on("33", &format!("  UNRELIABLE: {why}\n")));
            }
        }
    }
    out.push('\n');
    for line in time_lines(&r.phases) {
        out.push_str(&line);
        out.push('\n');
    }
    out.push_str(&gate_verdict(r, &p));
    out.push('\n');
    out
}

/// Where a run's time went, as the report prints it (also what the tests log for every gate
/// they run): the stages on one line, then each stage's slow steps ([`step_lines`]).
pub fn time_lines(phases: &[crate::verdict::PhaseTime]) -> Vec<String> {
    if phases.is_empty() {
        return Vec::new();
    }
    let parts: Vec<String> = phases.iter().map(phase_part).collect();
    let mut lines = vec![format!("time: {}", parts.join(", "))];
    lines.extend(step_lines(phases));
    lines
}

/// A stage's steps, one line per stage that has them, slowest first (the ones that took a
/// second or more): `  online chain: probe pass 40.1 s (28 requests), server.long-prompt 20.2 s (1 requests)`.
fn step_lines(phases: &[crate::verdict::PhaseTime]) -> Vec<String> {
    phases
        .iter()
        .filter_map(|p| {
            let mut steps: Vec<&crate::verdict::PhaseTime> =
                p.steps.iter().filter(|s| s.seconds >= 1.0).collect();
            if steps.is_empty() {
                return None;
            }
            steps.sort_by(|a, b| b.seconds.total_cmp(&a.seconds));
            let parts: Vec<String> = steps.into_iter().map(phase_part).collect();
            let name = p.phase.split(':').next().unwrap_or(&p.phase);
            Some(format!("  {name}: {}", parts.join(", ")))
        })
        .collect()
}

fn phase_part(p: &crate::verdict::PhaseTime) -> String {
    let name = p.phase.split(':').next().unwrap_or(&p.phase);
    match p.requests {
        Some(n) if n > 0 => format!("{name} {:.1} s ({n} requests)", p.seconds),
        _ => format!("{name} {:.1} s", p.seconds),
    }
}

fn gate_verdict(r: &GateReport, p: &Paint) -> String {
    let took = format!("{:.1} s", r.duration_s);
    if r.exit_code == Outcome::Unreachable {
        return format!(
            "{} — the target could not be reached or timed out ({took})",
            p.on("1;31", "UNREACHABLE")
        );
    }
    let mut line = verdict_line(&r.findings, p);
    line.push_str(&format!(" in {took}"));
    let downstream = r.findings.downstream();
    if !downstream.is_empty() {
        let mut checks: Vec<&str> = downstream.iter().map(|f| f.check.id).collect();
        checks.dedup();
        line.push_str(&format!(
            "\n  downstream symptoms it may explain: {}",
            checks.join(", ")
        ));
    }
    line
}

/// The gate's machine report: the whole `GateReport`, plus the verdict fields `check` has.
pub fn gate_json(r: &GateReport) -> Value {
    let mut v = serde_json::to_value(r).unwrap_or(Value::Null);
    if let Value::Object(m) = &mut v {
        m.insert(
            "verdict".into(),
            json!(match r.exit_code {
                Outcome::Pass => "pass",
                Outcome::Unreachable => "unreachable",
                _ => "fail",
            }),
        );
        m.insert(
            "first_broken".into(),
            json!(r
                .findings
                .first_broken()
                .map(|f| json!({"boundary": f.boundary, "check": f.check, "message": f.message}))),
        );
        m.insert(
            "downstream".into(),
            json!(r
                .findings
                .downstream()
                .iter()
                .map(|f| f.check.id)
                .collect::<Vec<_>>()),
        );
    }
    v
}

/// The latency rows as a fixed-width table (ms), with the percentile method in its title.
pub fn latency_table(rows: &[LatencyRow]) -> String {
    let mut out =
        String::from("  (ms; p50/p90/p99 numpy-linear; base p50 = the baseline's median)\n");
    out.push_str(&format!(
        "  {:<10} {:>5} {:>9} {:>9} {:>9} {:>9}  {}\n",
        "metric", "n", "p50", "p90", "p99", "base p50", "verdict"
    ));
    for l in rows {
        let base = l
            .baseline_p50
            .map(|b| format!("{b:.2}"))
            .unwrap_or_else(|| "-".into());
        out.push_str(&format!(
            "  {:<10} {:>5} {:>9.2} {:>9.2} {:>9.2} {:>9}  {}\n",
            l.metric, l.n, l.p50, l.p90, l.p99, base, l.verdict
        ));
    }
    out
}
