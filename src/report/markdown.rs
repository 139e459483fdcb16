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
use crate::verdict::{Boundary, Finding, Findings, Severity};

use super::summary::*;
pub use super::summary::{html_escape, md_code, md_text};
use crate::verdict::{GateReport, LatencyRow, LatencyTotals, PromptResult};

/// GitHub refuses a step summary larger than this (bytes).
pub const GITHUB_SUMMARY_LIMIT: usize = 1024 * 1024;
/// The most of one diff that is shown (lines), so one runaway reply cannot drown the others.
pub const MAX_DIFF_LINES: usize = 400;
/// The most of one diff that is shown (bytes).
pub const MAX_DIFF_BYTES: usize = 32 * 1024;
/// Room kept free under the limit for the truncation notes themselves.
const SAFETY_MARGIN: usize = 16 * 1024;

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
                    md_code(first.check.id, false),
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
                md_code(f.check.id, false),
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
                    md_text(&r.verdict.to_string())
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
