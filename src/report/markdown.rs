//! The Markdown report of a gate run, written for `$GITHUB_STEP_SUMMARY` and PR comments: the
//! [`View`]'s sections in GitHub-flavoured Markdown.
//!
//! It leads with the verdict and the first broken boundary, because the person reading a CI
//! summary wants to know *where* the chain broke before anything else. All user text (messages,
//! evidence, prompt ids, diffs) is escaped, and the whole document is kept under GitHub's 1 MiB
//! step-summary limit by truncating diffs, then (as a last resort) the tail.
use crate::escape::{html as html_escape, md_code, md_fence_for as fence_for, md_text};
use crate::verdict::{Finding, GateReport};

use super::summary::{clip, floor_char_boundary, CutDiff, MAX_VALUE_CHARS};
use super::view::{render as walk, Cell, ColKind, DiffLimits, Markup, Table, Tone, View};

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
    let view = View::of(report);
    // Render once without diffs to learn how much room the diffs may take, then for real.
    let mut skeleton = Markdown::new(0);
    walk(&view, &mut skeleton);
    let room = GITHUB_SUMMARY_LIMIT.saturating_sub(skeleton.out.len() + SAFETY_MARGIN);
    let mut md = Markdown::new(room);
    walk(&view, &mut md);
    cap_document(md.out)
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

/// Writes the document; `diff_room` is how many bytes all diffs together may use.
struct Markdown {
    out: String,
    diff_room: usize,
}

impl Markdown {
    fn new(diff_room: usize) -> Self {
        Markdown {
            out: String::new(),
            diff_room,
        }
    }

    fn line(&mut self, s: &str) {
        self.out.push_str(s);
        self.out.push('\n');
    }

    /// A blank line before a block, unless there is one already.
    fn blank(&mut self) {
        if !self.out.is_empty() && !self.out.ends_with("\n\n") {
            self.out.push('\n');
        }
    }
}

/// A row's (or a status's) tone as an icon, for a markup that cannot colour.
fn icon(tone: Tone) -> &'static str {
    match tone {
        Tone::Error => "❌",
        Tone::Warning => "⚠️",
        _ => "✅",
    }
}

impl Markup for Markdown {
    fn header(&mut self, view: &View) {
        let r = view.report;
        self.line(&format!(
            "## {} chatgate gate: {} — {}",
            view.icon,
            view.word,
            md_text(&r.suite)
        ));
        self.line("");
        self.line(&format!(
            "Suite {} · target {} · {:.1} s · exit code {}",
            md_code(&r.suite_file, false),
            md_code(&r.target, false),
            r.duration_s,
            r.exit_code
        ));
        self.line("");
        let Some(first) = &view.first else {
            if view.reasons.is_empty() {
                self.line("No boundary is broken.");
            } else {
                self.line(&format!(
                    "No boundary check failed; the gate failed on: {}.",
                    md_text(&view.reasons.join(", "))
                ));
            }
            return;
        };
        self.line(&format!(
            "First broken boundary: **{}** ({}) — {}",
            first.boundary,
            md_code(first.check.unwrap_or_default(), false),
            md_text(&first.message)
        ));
        if !view.symptoms.is_empty() {
            self.line("");
            self.line("Downstream symptoms it may explain:");
            self.line("");
            for s in &view.symptoms {
                let check = s
                    .check
                    .map(|c| format!(" ({})", md_code(c, false)))
                    .unwrap_or_default();
                self.line(&format!(
                    "- **{}**{check} — {}",
                    s.boundary,
                    md_text(&s.message)
                ));
            }
        }
    }

    fn section(&mut self, title: &str) {
        self.blank();
        self.line(&format!("### {title}"));
        self.line("");
    }

    fn table(&mut self, t: &Table) {
        self.blank();
        let head: Vec<&str> = t.cols.iter().map(|c| c.name).collect();
        self.line(&format!("| {} |", head.join(" | ")));
        let align: Vec<&str> = t
            .cols
            .iter()
            .map(|c| {
                if c.kind == ColKind::Num {
                    "---:"
                } else {
                    "---"
                }
            })
            .collect();
        self.line(&format!("|{}|", align.join("|")));
        for (_, cells) in &t.rows {
            let cells: Vec<String> = cells
                .iter()
                .map(|c| match c {
                    Cell::Text(s) => md_text(s),
                    Cell::Code(s) => md_code(s, true),
                    Cell::Num(s) => s.clone(),
                    Cell::Status(_, icon, word) => format!("{icon} {}", md_text(word)),
                    Cell::Mark(tone) => icon(*tone).to_string(),
                })
                .collect();
            self.line(&format!("| {} |", cells.join(" | ")));
        }
        self.line("");
    }

    fn finding(&mut self, f: &Finding, tone: Tone) {
        self.line(&format!(
            "- {} **{}** {} — {}",
            icon(tone),
            f.boundary.name(),
            md_code(f.check.id, false),
            md_text(&clip(&f.message, MAX_VALUE_CHARS))
        ));
    }

    /// One evidence item, nested under its finding: a code span, or a fenced block when it
    /// spans several lines.
    fn evidence(&mut self, key: &str, value: &str) {
        if !value.contains('\n') {
            self.line(&format!("  - {}: {}", md_text(key), md_code(value, false)));
            return;
        }
        self.line(&format!("  - {}:", md_text(key)));
        self.line("");
        let fence = fence_for(value);
        self.line(&format!("    {fence}text"));
        for l in value.lines() {
            self.line(&format!("    {l}"));
        }
        self.line(&format!("    {fence}"));
        self.line("");
    }

    fn diff_limits(&self) -> DiffLimits {
        DiffLimits {
            lines: MAX_DIFF_LINES,
            bytes: MAX_DIFF_BYTES,
            total: self.diff_room,
        }
    }

    /// A `<details>` block with the diff in a ```diff fence (Markdown does not open it).
    fn diff(&mut self, id: &str, cut: &CutDiff, _open: bool) {
        self.blank();
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
    }

    fn totals(&mut self, lines: &[(&'static str, String)]) {
        self.blank();
        for (k, v) in lines {
            self.line(&format!("- **{k}**: {}", md_text(v)));
        }
    }

    fn details(&mut self, summary: &str, _class: &str) {
        self.blank();
        self.line("<details>");
        self.line(&format!("<summary>{}</summary>", html_escape(summary)));
    }

    fn end_details(&mut self) {
        self.line("</details>");
    }
}
