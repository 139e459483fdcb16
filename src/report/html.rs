//! The HTML report of a gate run: one self-contained file (inline CSS and SVG, no scripts, no
//! external resources) that a CI system can keep as an artifact and anyone can open offline.
//!
//! It writes the [`View`]'s sections — what the Markdown summary says, in the same order — and
//! adds what Markdown cannot show: the chain as a strip of coloured links, and an empirical CDF
//! of every latency metric against the baseline (`plots.rs`). Badges are words on colour rather
//! than emoji, which not every machine has a font for. Every user string is HTML-escaped.
use crate::escape::html as esc;
use crate::verdict::{Finding, GateReport, LatencyRow};

use super::plots::cdf_svg;
use super::summary::{clip, CutDiff, MAX_VALUE_CHARS};
use super::view::{render as walk, Cell, ColKind, DiffLimits, Markup, Table, Tone, View};

/// An HTML file has no size limit, but a runaway diff should not make it unopenable.
const MAX_DIFF_LINES: usize = 2000;
const MAX_DIFF_BYTES: usize = 256 * 1024;
/// All diffs together stay below this, so a run where every reply changed still opens.
const MAX_TOTAL_DIFF_BYTES: usize = 8 * 1024 * 1024;

/// The page's style sheet (light and dark), inlined.
const CSS: &str = include_str!("html.css");

/// Render the whole report as one HTML document.
pub fn render(report: &GateReport) -> String {
    let mut html = Html {
        out: String::with_capacity(64 * 1024),
        evidence_open: false,
    };
    walk(&View::of(report), &mut html);
    html.out
}

struct Html {
    out: String,
    /// Whether the finding being written has opened its evidence list.
    evidence_open: bool,
}

impl Html {
    fn push(&mut self, s: &str) {
        self.out.push_str(s);
    }
}

impl Markup for Html {
    fn begin(&mut self, view: &View) {
        let title = format!("{} — chatgate gate — {}", view.word, view.report.suite);
        self.push("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
        self.push("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n");
        self.push(&format!("<title>{}</title>\n", esc(&title)));
        self.push(&format!(
            "<style>\n{CSS}</style>\n</head>\n<body>\n<main>\n"
        ));
    }

    fn header(&mut self, view: &View) {
        let r = view.report;
        let class = if r.passed() { "pass" } else { "fail" };
        self.push(&format!(
            "<header class=\"verdict {class}\">\n<h1><span class=\"badge {class}\">{}</span> chatgate gate — {}</h1>\n",
            view.word,
            esc(&r.suite)
        ));
        self.push(&format!(
            "<p class=\"meta\">Suite <code>{}</code> · target <code>{}</code> · {:.1} s · exit code {}</p>\n",
            esc(&r.suite_file),
            esc(&r.target),
            r.duration_s,
            r.exit_code
        ));
        match &view.first {
            Some(f) => {
                self.push(&format!(
                    "<p class=\"lead\">First broken boundary: <strong>{}</strong> (<code>{}</code>) — {}</p>\n",
                    f.boundary,
                    esc(f.check.unwrap_or_default()),
                    esc(&f.message)
                ));
                if !view.symptoms.is_empty() {
                    self.push(
                        "<p>Downstream symptoms it may explain:</p>\n<ul class=\"symptoms\">\n",
                    );
                    for s in &view.symptoms {
                        let check = s
                            .check
                            .map(|c| format!(" (<code>{}</code>)", esc(c)))
                            .unwrap_or_default();
                        self.push(&format!(
                            "<li><strong>{}</strong>{check} — {}</li>\n",
                            s.boundary,
                            esc(&s.message)
                        ));
                    }
                    self.push("</ul>\n");
                }
            }
            None if view.reasons.is_empty() => {
                self.push("<p class=\"lead\">No boundary is broken.</p>\n")
            }
            None => self.push(&format!(
                "<p class=\"lead\">No boundary check failed; the gate failed on: {}.</p>\n",
                esc(&view.reasons.join(", "))
            )),
        }
        self.push("</header>\n");
    }

    /// The chain as a strip of links, coloured by their worst finding; the first broken one is
    /// outlined. Boundaries that did not run are grey.
    fn chain(&mut self, view: &View) {
        self.push("<nav class=\"chain\" aria-label=\"serving chain\">\n");
        for (i, (b, tone, first)) in view.chain.iter().enumerate() {
            if i > 0 {
                self.push("<span class=\"arrow\">→</span>");
            }
            let mark = if *first { " first" } else { "" };
            self.push(&format!(
                "<span class=\"link {}{mark}\">{}</span>",
                tone.class(),
                b.name()
            ));
        }
        self.push("\n</nav>\n");
    }

    fn section(&mut self, title: &str) {
        self.push(&format!("<section>\n<h2>{}</h2>\n", esc(title)));
    }

    fn end_section(&mut self) {
        self.push("</section>\n");
    }

    fn table(&mut self, t: &Table) {
        self.push(if t.wide {
            "<table class=\"wide\">\n<thead><tr>"
        } else {
            "<table>\n<thead><tr>"
        });
        for c in t.cols.iter().filter(|c| c.kind != ColKind::Mark) {
            match c.kind {
                ColKind::Num => self.push(&format!("<th class=\"num\">{}</th>", esc(c.name))),
                _ => self.push(&format!("<th>{}</th>", esc(c.name))),
            }
        }
        self.push("</tr></thead>\n<tbody>\n");
        for (tone, cells) in &t.rows {
            match tone {
                Some(tone) => self.push(&format!("<tr class=\"{}\">", tone.class())),
                None => self.push("<tr>"),
            }
            for c in cells {
                match c {
                    Cell::Text(s) => self.push(&format!("<td>{}</td>", esc(s))),
                    Cell::Code(s) => self.push(&format!("<td><code>{}</code></td>", esc(s))),
                    Cell::Num(s) => self.push(&format!("<td class=\"num\">{}</td>", esc(s))),
                    Cell::Status(tone, _, word) => self.push(&format!(
                        "<td><span class=\"badge {}\">{}</span></td>",
                        tone.class(),
                        esc(word)
                    )),
                    Cell::Mark(_) => {}
                }
            }
            self.push("</tr>\n");
        }
        self.push("</tbody>\n</table>\n");
    }

    /// A finding as a card; its evidence in a definition list.
    fn finding(&mut self, f: &Finding, tone: Tone) {
        self.push(&format!(
            "<div class=\"finding {}\">\n<div class=\"head\"><span class=\"boundary\">{}</span> <code>{}</code></div>\n<p>{}</p>\n",
            tone.class(),
            f.boundary.name(),
            esc(f.check.id),
            esc(&clip(&f.message, MAX_VALUE_CHARS))
        ));
        self.evidence_open = false;
    }

    fn evidence(&mut self, key: &str, value: &str) {
        if !self.evidence_open {
            self.push("<dl>\n");
            self.evidence_open = true;
        }
        self.push(&format!(
            "<dt>{}</dt><dd><pre>{}</pre></dd>\n",
            esc(key),
            esc(value)
        ));
    }

    fn end_finding(&mut self) {
        if self.evidence_open {
            self.push("</dl>\n");
        }
        self.push("</div>\n");
    }

    fn diff_limits(&self) -> DiffLimits {
        DiffLimits {
            lines: MAX_DIFF_LINES,
            bytes: MAX_DIFF_BYTES,
            total: MAX_TOTAL_DIFF_BYTES,
        }
    }

    /// A diff, each line coloured by its unified-diff prefix.
    fn diff(&mut self, id: &str, cut: &CutDiff, open: bool) {
        let open = if open { " open" } else { "" };
        self.push(&format!(
            "<details{open}>\n<summary>diff of <code>{}</code> (accepted → new)</summary>\n<pre class=\"diff\">",
            esc(id)
        ));
        for l in cut.text.lines() {
            let cls = if l.starts_with("+++") || l.starts_with("---") {
                "file"
            } else if l.starts_with("@@") {
                "hunk"
            } else if l.starts_with('+') {
                "add"
            } else if l.starts_with('-') {
                "del"
            } else {
                "ctx"
            };
            // Block spans break the lines; a newline as well would double-space them.
            self.push(&format!("<span class=\"{cls}\">{}</span>", esc(l)));
        }
        self.push("</pre>\n");
        if let Some(note) = cut.note() {
            self.push(&format!("<p class=\"note\">{}</p>\n", esc(&note)));
        }
        self.push("</details>\n");
    }

    fn totals(&mut self, lines: &[(&'static str, String)]) {
        self.push("<dl class=\"totals\">\n");
        for (k, v) in lines {
            self.push(&format!("<dt>{}</dt><dd>{}</dd>\n", esc(k), esc(v)));
        }
        self.push("</dl>\n");
    }

    /// An empirical CDF per metric with samples, this run against the baseline.
    fn plots(&mut self, rows: &[&LatencyRow]) {
        self.push("<div class=\"plots\">\n");
        for r in rows {
            self.push(&format!("<figure>{}</figure>\n", cdf_svg(r)));
        }
        self.push("</div>\n");
    }

    fn details(&mut self, summary: &str, class: &str) {
        self.push(&format!(
            "<details class=\"{}\">\n<summary>{}</summary>\n",
            esc(class),
            esc(summary)
        ));
    }

    fn end_details(&mut self) {
        self.push("</details>\n");
    }

    fn end(&mut self) {
        self.push("</main>\n</body>\n</html>\n");
    }
}
