//! Renderers for findings: a terminal report (colour only on a TTY) and JSON for machines.
//! Both lead with the verdict and the first broken boundary.
use std::io::IsTerminal;

use serde_json::{json, Value};

use crate::chain::{Findings, Severity};

pub mod gate;
pub mod html;
pub mod junit;
pub mod markdown;

pub use gate::{GateReport, LatencyRow, LatencyTotals, PromptResult, PromptStatus};
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
            f.check,
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
            f.check
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
