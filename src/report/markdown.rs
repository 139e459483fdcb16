//! The Markdown report of a gate run, written for `$GITHUB_STEP_SUMMARY` and PR comments.
//!
//! It leads with the verdict and the first broken boundary, because the person reading a CI
//! summary wants to know *where* the chain broke before anything else; later errors are listed as
//! downstream symptoms the first break may explain. All user text (messages, evidence, prompt
//! ids, diffs) is escaped for GitHub-flavoured Markdown, and the whole document is kept under
//! GitHub's 1 MiB step-summary limit by truncating diffs, then (as a last resort) the tail.
//!
//! The small helpers marked `pub(crate)` are shared with the HTML renderer so both say the same
//! thing in the same words.
use crate::chain::{Boundary, Finding, Findings, Severity};

use super::gate::{GateReport, LatencyRow, LatencyTotals, PromptResult, PromptStatus};

/// GitHub refuses a step summary larger than this (bytes).
pub const GITHUB_SUMMARY_LIMIT: usize = 1024 * 1024;
/// The most of one diff that is shown (lines), so one runaway reply cannot drown the others.
pub const MAX_DIFF_LINES: usize = 400;
/// The most of one diff that is shown (bytes).
pub const MAX_DIFF_BYTES: usize = 32 * 1024;
/// Evidence values and one-line details longer than this (chars) are cut with an ellipsis.
pub(crate) const MAX_VALUE_CHARS: usize = 2000;
/// Room kept free under the limit for the truncation notes themselves.
const SAFETY_MARGIN: usize = 16 * 1024;

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

/// Render the Markdown summary of a gate run (always below [`GITHUB_SUMMARY_LIMIT`]).
pub fn render(report: &GateReport) -> String {
    // Render once without diffs to learn how much room the diffs may take, then for real.
    let skeleton = Renderer::new(0).document(report);
    let room = GITHUB_SUMMARY_LIMIT.saturating_sub(skeleton.len() + SAFETY_MARGIN);
    let out = Renderer::new(room).document(report);
    cap_document(out)
}

/// Last resort when even the diff-less document is too large (thousands of prompts): cut at a
/// line boundary and say so.
fn cap_document(out: String) -> String {
    if out.len() <= GITHUB_SUMMARY_LIMIT {
        return out;
    }
    let mut cut = floor_char_boundary(&out, GITHUB_SUMMARY_LIMIT - SAFETY_MARGIN);
    if let Some(nl) = out[..cut].rfind('\n') {
        cut = nl + 1;
    }
    let mut out = out[..cut].to_string();
    out.push_str(
        "\n\n> **Report truncated** to stay under GitHub's 1 MiB summary limit; \
         run `chatgate gate --format json` for the whole report.\n",
    );
    out
}

/// Writes the document; `diff_room` is how many bytes all diffs together may still use.
struct Renderer {
    out: String,
    diff_room: usize,
}

impl Renderer {
    fn new(diff_room: usize) -> Self {
        Renderer {
            out: String::new(),
            diff_room,
        }
    }

    fn line(&mut self, s: &str) {
        self.out.push_str(s);
        self.out.push('\n');
    }

    fn document(mut self, report: &GateReport) -> String {
        self.header(report);
        self.boundary_table(&report.findings);
        self.problems(&report.findings, Severity::Error, "Errors");
        self.problems(&report.findings, Severity::Warning, "Warnings");
        self.replay(&report.prompts);
        self.latency(&report.latency, report.latency_totals.as_ref());
        self.definitions(&report.definitions);
        self.out
    }

    /// Verdict heading, run facts, the first broken boundary and its downstream symptoms.
    fn header(&mut self, report: &GateReport) {
        let (icon, word) = verdict(report);
        self.line(&format!(
            "## {icon} chatgate gate: {word} — {}",
            md_text(&report.suite)
        ));
        self.line("");
        self.line(&format!(
            "Suite {} · target {} · {:.1} s · exit code {}",
            md_code(&report.suite_file, false),
            md_code(&report.target, false),
            report.duration_s,
            report.exit_code
        ));
        self.line("");
        match report.findings.first_broken() {
            Some(first) => {
                self.line(&format!(
                    "First broken boundary: **{}** ({}) — {}",
                    first.boundary.name(),
                    md_code(first.check, false),
                    md_text(&clip(&first.message, MAX_VALUE_CHARS))
                ));
                self.line("");
                let symptoms = downstream_lines(report);
                if !symptoms.is_empty() {
                    self.line("Downstream symptoms it may explain:");
                    self.line("");
                    for s in symptoms {
                        self.line(&format!("- {s}"));
                    }
                    self.line("");
                }
            }
            None => {
                let reasons = failure_reasons(report);
                if reasons.is_empty() {
                    self.line("No boundary is broken.");
                } else {
                    self.line(&format!(
                        "No boundary check failed; the gate failed on: {}.",
                        md_text(&reasons.join(", "))
                    ));
                }
                self.line("");
            }
        }
    }

    /// One row per boundary that ran, with counts per severity.
    fn boundary_table(&mut self, findings: &Findings) {
        let rows: Vec<(Boundary, [usize; 4])> = BOUNDARIES
            .iter()
            .map(|&b| (b, severity_counts(findings, b)))
            .filter(|(_, c)| c.iter().sum::<usize>() > 0)
            .collect();
        if rows.is_empty() {
            return;
        }
        self.line("### Boundaries");
        self.line("");
        self.line("| boundary | | pass | info | warning | error |");
        self.line("|---|---|---:|---:|---:|---:|");
        for (b, [pass, info, warn, err]) in rows {
            let icon = if err > 0 {
                "❌"
            } else if warn > 0 {
                "⚠️"
            } else {
                "✅"
            };
            self.line(&format!(
                "| {} | {icon} | {pass} | {info} | {warn} | {err} |",
                b.name()
            ));
        }
        self.line("");
    }

    /// Details of every finding of one severity, with its evidence.
    fn problems(&mut self, findings: &Findings, severity: Severity, title: &str) {
        let list: Vec<&Finding> = findings
            .0
            .iter()
            .filter(|f| f.severity == severity)
            .collect();
        if list.is_empty() {
            return;
        }
        let icon = if severity == Severity::Error {
            "❌"
        } else {
            "⚠️"
        };
        self.line(&format!("### {title}"));
        self.line("");
        for f in list {
            self.line(&format!(
                "- {icon} **{}** {} — {}",
                f.boundary.name(),
                md_code(f.check, false),
                md_text(&clip(&f.message, MAX_VALUE_CHARS))
            ));
            for (k, v) in &f.evidence {
                self.evidence(k, v);
            }
        }
        self.line("");
    }

    /// One evidence item, nested under its finding: a code span, or a fenced block when it
    /// spans several lines.
    fn evidence(&mut self, key: &str, value: &str) {
        let value = clip(value, MAX_VALUE_CHARS);
        if !value.contains('\n') {
            self.line(&format!("  - {}: {}", md_text(key), md_code(&value, false)));
            return;
        }
        self.line(&format!("  - {}:", md_text(key)));
        self.line("");
        let fence = fence_for(&value);
        self.line(&format!("    {fence}text"));
        for l in value.lines() {
            self.line(&format!("    {l}"));
        }
        self.line(&format!("    {fence}"));
        self.line("");
    }

    /// The replay table, then one collapsed diff per changed prompt.
    fn replay(&mut self, prompts: &[PromptResult]) {
        if prompts.is_empty() {
            return;
        }
        self.line(&format!("### Replay — {}", prompt_tally(prompts)));
        self.line("");
        self.line("| prompt | status | comparator | determinism | detail |");
        self.line("|---|---|---|---|---|");
        for p in prompts {
            self.line(&format!(
                "| {} | {} {} | {} | {} | {} |",
                md_code(&p.id, true),
                status_icon(p.status),
                status_word(p.status),
                md_text(&p.comparator),
                md_text(p.determinism.as_deref().unwrap_or("—")),
                md_text(&clip(&p.detail, MAX_VALUE_CHARS))
            ));
        }
        self.line("");
        for p in prompts {
            if let Some(diff) = p.diff.as_deref().filter(|d| !d.is_empty()) {
                self.diff_block(&p.id, diff);
            }
        }
    }

    /// A `<details>` block with the diff in a ```diff fence, cut to the per-diff caps and to
    /// what is left of the document's room.
    fn diff_block(&mut self, id: &str, diff: &str) {
        let cut = truncate_diff(diff, MAX_DIFF_LINES, MAX_DIFF_BYTES.min(self.diff_room));
        self.diff_room = self.diff_room.saturating_sub(cut.text.len());
        self.line("<details>");
        self.line(&format!(
            "<summary>diff of <code>{}</code> (accepted → new)</summary>",
            html_escape(id)
        ));
        self.line("");
        if !cut.text.is_empty() {
            let fence = fence_for(&cut.text);
            self.line(&format!("{fence}diff"));
            self.out.push_str(&cut.text);
            if !cut.text.ends_with('\n') {
                self.out.push('\n');
            }
            self.line(&fence);
            self.line("");
        }
        if let Some(note) = cut.note() {
            self.line(&format!("*{}*", md_text(&note)));
            self.line("");
        }
        self.line("</details>");
        self.line("");
    }

    /// The latency table and the run totals.
    fn latency(&mut self, rows: &[LatencyRow], totals: Option<&LatencyTotals>) {
        if rows.is_empty() && totals.is_none() {
            return;
        }
        self.line("### Latency");
        self.line("");
        if !rows.is_empty() {
            self.line(
                "| metric | n | p50 (ms) | p90 (ms) | p99 (ms) | baseline p50 (ms) | verdict |",
            );
            self.line("|---|---:|---:|---:|---:|---:|---|");
            for r in rows {
                self.line(&format!(
                    "| {} | {} | {} | {} | {} | {} | {} {} |",
                    md_text(&r.metric.to_uppercase()),
                    r.n,
                    row_ms(r, r.p50),
                    row_ms(r, r.p90),
                    row_ms(r, r.p99),
                    r.baseline_p50.map(fmt_ms).unwrap_or_else(|| "—".into()),
                    latency_icon(r),
                    md_text(&r.verdict)
                ));
            }
            self.line("");
        }
        if let Some(t) = totals {
            for (k, v) in totals_lines(t) {
                self.line(&format!("- **{k}**: {}", md_text(&v)));
            }
            self.line("");
        }
    }

    /// The metric definitions, collapsed: needed to read the figures, not to triage.
    fn definitions(&mut self, defs: &[(String, String)]) {
        if defs.is_empty() {
            return;
        }
        self.line("<details>");
        self.line("<summary>Metric definitions</summary>");
        self.line("");
        self.line("| metric | definition |");
        self.line("|---|---|");
        for (name, def) in defs {
            self.line(&format!("| {} | {} |", md_text(name), md_text(def)));
        }
        self.line("");
        self.line("</details>");
    }
}

/// A diff cut to size, and how much was left out.
pub(crate) struct CutDiff {
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
        0 => ("✅", "PASS"),
        3 => ("❌", "UNREACHABLE"),
        _ => ("❌", "FAIL"),
    }
}

/// The downstream symptoms of the first broken boundary, as Markdown list items.
fn downstream_lines(report: &GateReport) -> Vec<String> {
    let mut lines: Vec<String> = report
        .findings
        .downstream()
        .into_iter()
        .map(|f| {
            format!(
                "**{}** ({}) — {}",
                f.boundary.name(),
                md_code(f.check, false),
                md_text(&clip(&f.message, MAX_VALUE_CHARS))
            )
        })
        .collect();
    if let Some(s) = prompt_symptom(report) {
        lines.push(format!("**replay** — {}", md_text(&s)));
    }
    lines
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
        if n > 0 && report.exit_code != 0 {
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
    if reasons.is_empty() && report.exit_code == 3 {
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

/// A latency verdict is a regression when it says so; anything else (ok, no baseline, a noise
/// band) does not fail the gate.
pub(crate) fn is_regression(r: &LatencyRow) -> bool {
    r.verdict
        .trim()
        .to_ascii_lowercase()
        .starts_with("regression")
}

pub(crate) fn latency_icon(r: &LatencyRow) -> &'static str {
    if is_regression(r) {
        "❌"
    } else if r.verdict.trim() == "ok" {
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
fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    if i >= s.len() {
        return s.len();
    }
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// Escape user text for inline Markdown (paragraphs, list items and table cells alike): HTML is
/// neutralised with entities, Markdown punctuation with backslashes, pipes so a table keeps
/// its columns, and newlines become `<br>` so a cell stays one row.
pub fn md_text(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\n' => out.push_str("<br>"),
            '\r' => {}
            '\\' | '`' | '*' | '_' | '[' | ']' | '|' | '~' | '#' | '!' | '$' => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out
}

/// A code span holding `s` literally: the fence is one backtick longer than the longest run
/// inside. In a table cell pipes are still escaped (GitHub splits cells before parsing spans);
/// newlines become spaces, as a code span would show them anyway.
pub fn md_code(s: &str, in_table: bool) -> String {
    let mut body: String = s.replace(['\r', '\n'], " ");
    if in_table {
        body = body.replace('|', "\\|");
    }
    if body.trim().is_empty() {
        return "*(empty)*".into();
    }
    let fence = "`".repeat(longest_run(&body, '`') + 1);
    let pad = if body.starts_with('`') || body.ends_with('`') {
        " "
    } else {
        ""
    };
    format!("{fence}{pad}{body}{pad}{fence}")
}

/// A code fence longer than any backtick run in `text`, so the text cannot close it.
fn fence_for(text: &str) -> String {
    "`".repeat((longest_run(text, '`') + 1).max(3))
}

fn longest_run(s: &str, ch: char) -> usize {
    let (mut best, mut cur) = (0, 0);
    for c in s.chars() {
        if c == ch {
            cur += 1;
            best = best.max(cur);
        } else {
            cur = 0;
        }
    }
    best
}

/// Escape text for HTML element content and attribute values.
pub fn html_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_span_outgrows_backticks_inside() {
        assert_eq!(md_code("a`b", false), "``a`b``");
        assert_eq!(md_code("`x`", false), "`` `x` ``");
        assert_eq!(md_code("a|b", true), "`a\\|b`");
        assert_eq!(md_code("a|b", false), "`a|b`");
    }

    #[test]
    fn text_escapes_html_pipes_and_emphasis() {
        assert_eq!(
            md_text("<b>*x*</b> | y_z\nnext"),
            "&lt;b&gt;\\*x\\*&lt;/b&gt; \\| y\\_z<br>next"
        );
    }

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
