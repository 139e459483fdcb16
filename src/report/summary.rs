//! The report's shared vocabulary: the verdict and its reasons, severity and prompt tallies,
//! latency figures in words, clipping (escaping is `crate::escape`). Every renderer (Markdown, HTML, JUnit,
//! the terminal) reads a gate run through these, so they say the same thing the same way.
use crate::verdict::Outcome;
use crate::verdict::{
    Boundary, Findings, GateReport, LatencyRow, LatencyTotals, PromptResult, PromptStatus, Severity,
};

/// Evidence values and one-line details longer than this (chars) are cut with an ellipsis.
pub(crate) const MAX_VALUE_CHARS: usize = 2000;

/// Every boundary of the chain, in chain order.
pub(crate) const BOUNDARIES: [Boundary; 7] = [
    Boundary::Checkpoint,
    Boundary::Tokenizer,
    Boundary::Template,
    Boundary::GenerationConfig,
    Boundary::Server,
    Boundary::Client,
    Boundary::Replay,
];

/// A diff cut to size, and how much was left out.
pub struct CutDiff {
    pub text: String,
    pub shown_lines: usize,
    pub total_lines: usize,
}

impl CutDiff {
    /// The note to print under a truncated diff, if it was truncated.
    pub fn note(&self) -> Option<String> {
        if self.shown_lines >= self.total_lines {
            return None;
        }
        Some(format!(
            "diff truncated: showing {} of {} lines; the whole reply is in the prompt's .snap.new (see `chatgate review`)",
            self.shown_lines, self.total_lines
        ))
    }
}

/// Keep whole lines of `diff` while both caps allow.
pub(crate) fn truncate_diff(diff: &str, max_lines: usize, max_bytes: usize) -> CutDiff {
    let total_lines = diff.lines().count();
    let mut text = String::new();
    let mut shown_lines = 0;
    for l in diff.lines().take(max_lines) {
        if text.len() + l.len() + 1 > max_bytes {
            break;
        }
        text.push_str(l);
        text.push('\n');
        shown_lines += 1;
    }
    CutDiff {
        text,
        shown_lines,
        total_lines,
    }
}

/// The verdict's icon and word, from the exit code (3 means the target was never reached).
pub(crate) fn verdict(report: &GateReport) -> (&'static str, &'static str) {
    match report.exit_code {
        Outcome::Pass => ("✅", "PASS"),
        Outcome::Unreachable => ("❌", "UNREACHABLE"),
        _ => ("❌", "FAIL"),
    }
}

/// Failing prompts as one downstream symptom, when no replay finding already says so.
pub(crate) fn prompt_symptom(report: &GateReport) -> Option<String> {
    let replay_error = report
        .findings
        .0
        .iter()
        .any(|f| f.boundary == Boundary::Replay && f.severity == Severity::Error);
    let failing: Vec<&str> = report
        .prompts
        .iter()
        .filter(|p| matches!(p.status, PromptStatus::Changed | PromptStatus::Error))
        .map(|p| p.id.as_str())
        .collect();
    if replay_error || failing.is_empty() {
        return None;
    }
    Some(format!(
        "{} replayed prompt(s) changed or failed: {}",
        failing.len(),
        clip(&failing.join(", "), 300)
    ))
}

/// Why a run without a boundary error still failed (changed prompts, latency regressions).
pub(crate) fn failure_reasons(report: &GateReport) -> Vec<String> {
    let mut reasons = Vec::new();
    let count = |s: PromptStatus| report.prompts.iter().filter(|p| p.status == s).count();
    for (status, label) in [
        (PromptStatus::Changed, "changed prompt(s)"),
        (PromptStatus::New, "new prompt(s) awaiting review"),
        (PromptStatus::Error, "prompt(s) the target failed on"),
    ] {
        let n = count(status);
        if n > 0 && report.exit_code != Outcome::Pass {
            reasons.push(format!("{n} {label}"));
        }
    }
    let regressions: Vec<String> = report
        .latency
        .iter()
        .filter(|r| is_regression(r))
        .map(|r| r.metric.to_uppercase())
        .collect();
    if !regressions.is_empty() {
        reasons.push(format!("latency regression in {}", regressions.join(", ")));
    }
    if reasons.is_empty() && report.exit_code == Outcome::Unreachable {
        reasons.push("the target was unreachable".into());
    }
    reasons
}

/// Findings of each severity at one boundary: `[pass, info, warning, error]`.
pub(crate) fn severity_counts(findings: &Findings, b: Boundary) -> [usize; 4] {
    let mut c = [0; 4];
    for f in findings.0.iter().filter(|f| f.boundary == b) {
        let i = match f.severity {
            Severity::Pass => 0,
            Severity::Info => 1,
            Severity::Warning => 2,
            Severity::Error => 3,
        };
        c[i] += 1;
    }
    c
}

/// "3 prompts: 1 pass, 1 changed, 1 new".
pub(crate) fn prompt_tally(prompts: &[PromptResult]) -> String {
    let parts: Vec<String> = [
        PromptStatus::Pass,
        PromptStatus::Changed,
        PromptStatus::New,
        PromptStatus::Error,
    ]
    .iter()
    .map(|&s| (s, prompts.iter().filter(|p| p.status == s).count()))
    .filter(|(_, n)| *n > 0)
    .map(|(s, n)| format!("{n} {}", status_word(s)))
    .collect();
    let noun = if prompts.len() == 1 {
        "prompt"
    } else {
        "prompts"
    };
    format!("{} {noun}: {}", prompts.len(), parts.join(", "))
}

pub(crate) fn status_word(s: PromptStatus) -> &'static str {
    match s {
        PromptStatus::Pass => "pass",
        PromptStatus::Changed => "changed",
        PromptStatus::New => "new",
        PromptStatus::Error => "error",
    }
}

pub(crate) fn status_icon(s: PromptStatus) -> &'static str {
    match s {
        PromptStatus::Pass => "✅",
        PromptStatus::Changed => "❌",
        PromptStatus::New => "🆕",
        PromptStatus::Error => "💥",
    }
}

/// A latency verdict fails the gate only as a regression (ok, no baseline, noise do not).
pub(crate) fn is_regression(r: &LatencyRow) -> bool {
    r.verdict.is_regression()
}

pub(crate) fn latency_icon(r: &LatencyRow) -> &'static str {
    if is_regression(r) {
        "❌"
    } else if r.verdict.is_ok() {
        "✅"
    } else {
        "➖"
    }
}

/// The run totals as (label, value) pairs, in reading order.
pub(crate) fn totals_lines(t: &LatencyTotals) -> Vec<(&'static str, String)> {
    let est = if t.n_out_estimated {
        " (N_out estimated by tokenizing the text: the server reported no usage)"
    } else {
        ""
    };
    vec![
        (
            "requests",
            format!(
                "{} ({} errors) in {:.2} s",
                t.requests, t.errors, t.duration_s
            ),
        ),
        (
            "output throughput",
            format!("{:.1} tokens/s{est}", t.output_throughput),
        ),
        (
            "goodput",
            t.goodput
                .map(|g| format!("{g:.2} requests/s meeting every SLO"))
                .unwrap_or_else(|| "— (no SLOs set)".into()),
        ),
        (
            "SLO attainment",
            t.slo_attainment
                .map(|a| format!("{:.1} %", a * 100.0))
                .unwrap_or_else(|| "— (no SLOs set)".into()),
        ),
        (
            "client overhead",
            format!(
                "{:.1} µs per output event (median)",
                t.client_overhead_us_per_event
            ),
        ),
        (
            "client kept up",
            match &t.unreliable {
                None => "yes".into(),
                Some(why) => format!("NO — these figures are unreliable: {why}"),
            },
        ),
    ]
}

/// A statistic of a latency row, or a dash when the row has no samples (its zeros mean nothing).
pub(crate) fn row_ms(r: &LatencyRow, v: f64) -> String {
    if r.n == 0 {
        "—".into()
    } else {
        fmt_ms(v)
    }
}

/// Milliseconds with precision that suits their size.
pub(crate) fn fmt_ms(v: f64) -> String {
    let a = v.abs();
    if !v.is_finite() {
        "—".into()
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// Cut `s` to at most `max` chars, marking the cut with an ellipsis.
pub(crate) fn clip(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        None => s.to_string(),
        Some((i, _)) => format!("{}… ({} more chars)", &s[..i], s[i..].chars().count()),
    }
}

/// The largest char boundary at or below `i`.
pub(crate) fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    if i >= s.len() {
        return s.len();
    }
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_is_cut_at_whole_lines_with_a_note() {
        let diff: String = (0..10).map(|i| format!("+line {i}\n")).collect();
        let cut = truncate_diff(&diff, 3, usize::MAX);
        assert_eq!(cut.text, "+line 0\n+line 1\n+line 2\n");
        assert!(cut.note().unwrap().contains("3 of 10 lines"));
        let whole = truncate_diff(&diff, 100, usize::MAX);
        assert!(whole.note().is_none());
        let by_bytes = truncate_diff(&diff, 100, 17);
        assert_eq!(by_bytes.shown_lines, 2);
    }

    #[test]
    fn clip_marks_the_cut() {
        assert_eq!(clip("héllo", 10), "héllo");
        assert_eq!(clip("héllo", 2), "hé… (3 more chars)");
    }
}
