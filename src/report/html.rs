//! The HTML report of a gate run: one self-contained file (inline CSS and SVG, no scripts, no
//! external resources) that a CI system can keep as an artifact and anyone can open offline.
//!
//! It says what the Markdown summary says, in the same order — verdict, first broken boundary,
//! downstream symptoms, boundaries, problems with evidence, replay, latency, definitions — and
//! adds what Markdown cannot show: the chain as a strip of coloured links, and an empirical CDF
//! of every latency metric (this run against the baseline), because a shifted median alone
//! hides whether the whole distribution moved or only its tail. Every user string is
//! HTML-escaped.
use std::fmt::Write as _;

use crate::verdict::{Boundary, Finding, Findings, Severity};

use super::summary::{
    clip, failure_reasons, fmt_ms, html_escape as esc, is_regression, prompt_symptom, prompt_tally,
    row_ms, severity_counts, status_word, totals_lines, truncate_diff, verdict, BOUNDARIES,
    MAX_VALUE_CHARS,
};
use crate::verdict::{GateReport, LatencyRow, LatencyTotals, PromptResult, PromptStatus};

/// An HTML file has no size limit, but a runaway diff should not make it unopenable.
const MAX_DIFF_LINES: usize = 2000;
const MAX_DIFF_BYTES: usize = 256 * 1024;
/// Above this many samples a CDF is drawn through evenly spaced quantiles (the shape is the
/// same; the file stays small).
const MAX_PLOT_POINTS: usize = 1000;
/// All diffs together stay below this, so a run where every reply changed still opens.
const MAX_TOTAL_DIFF_BYTES: usize = 8 * 1024 * 1024;
/// Diffs are expanded when there are at most this many.
const OPEN_DIFFS: usize = 5;

/// Render the whole report as one HTML document.
pub fn render(report: &GateReport) -> String {
    let (_, word) = verdict(report);
    let title = format!("{word} — chatgate gate — {}", report.suite);
    let mut out = String::with_capacity(64 * 1024);
    out.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    out.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n");
    out.push_str(&format!("<title>{}</title>\n", esc(&title)));
    out.push_str(&format!("<style>{CSS}</style>\n</head>\n<body>\n<main>\n"));
    header(&mut out, report, word);
    chain_strip(&mut out, report);
    boundary_table(&mut out, &report.findings);
    problems(&mut out, &report.findings, Severity::Error, "Errors");
    problems(&mut out, &report.findings, Severity::Warning, "Warnings");
    replay(&mut out, &report.prompts);
    latency(&mut out, &report.latency, report.latency_totals.as_ref());
    definitions(&mut out, &report.definitions);
    out.push_str("</main>\n</body>\n</html>\n");
    out
}

/// Verdict banner, run facts, first broken boundary and its downstream symptoms.
/// Badges are words on colour rather than emoji, which not every machine has a font for.
fn header(out: &mut String, report: &GateReport, word: &str) {
    let class = if report.passed() { "pass" } else { "fail" };
    out.push_str(&format!(
        "<header class=\"verdict {class}\">\n<h1><span class=\"badge {class}\">{word}</span> chatgate gate — {}</h1>\n",
        esc(&report.suite)
    ));
    out.push_str(&format!(
        "<p class=\"meta\">Suite <code>{}</code> · target <code>{}</code> · {:.1} s · exit code {}</p>\n",
        esc(&report.suite_file),
        esc(&report.target),
        report.duration_s,
        report.exit_code
    ));
    match report.findings.first_broken() {
        Some(f) => first_broken(out, report, f),
        None => {
            let reasons = failure_reasons(report);
            if reasons.is_empty() {
                out.push_str("<p class=\"lead\">No boundary is broken.</p>\n");
            } else {
                out.push_str(&format!(
                    "<p class=\"lead\">No boundary check failed; the gate failed on: {}.</p>\n",
                    esc(&reasons.join(", "))
                ));
            }
        }
    }
    out.push_str("</header>\n");
}

fn first_broken(out: &mut String, report: &GateReport, f: &Finding) {
    out.push_str(&format!(
        "<p class=\"lead\">First broken boundary: <strong>{}</strong> (<code>{}</code>) — {}</p>\n",
        f.boundary.name(),
        esc(f.check.id),
        esc(&clip(&f.message, MAX_VALUE_CHARS))
    ));
    let mut items: Vec<String> = report
        .findings
        .downstream()
        .into_iter()
        .map(|d| {
            format!(
                "<li><strong>{}</strong> (<code>{}</code>) — {}</li>",
                d.boundary.name(),
                esc(d.check.id),
                esc(&clip(&d.message, MAX_VALUE_CHARS))
            )
        })
        .collect();
    if let Some(s) = prompt_symptom(report) {
        items.push(format!("<li><strong>replay</strong> — {}</li>", esc(&s)));
    }
    if !items.is_empty() {
        out.push_str("<p>Downstream symptoms it may explain:</p>\n<ul class=\"symptoms\">\n");
        for i in items {
            out.push_str(&i);
            out.push('\n');
        }
        out.push_str("</ul>\n");
    }
}

/// The chain as a strip of links, coloured by their worst finding; the first broken one is
/// outlined. Boundaries that did not run are grey; replayed prompts count for the replay link.
fn chain_strip(out: &mut String, report: &GateReport) {
    let findings = &report.findings;
    let first = findings.first_broken().map(|f| f.boundary);
    out.push_str("<nav class=\"chain\" aria-label=\"serving chain\">\n");
    for (i, b) in BOUNDARIES.iter().enumerate() {
        if i > 0 {
            out.push_str("<span class=\"arrow\">→</span>");
        }
        let [mut pass, info, mut warn, mut err] = severity_counts(findings, *b);
        if *b == Boundary::Replay {
            for p in &report.prompts {
                match p.status {
                    PromptStatus::Pass => pass += 1,
                    PromptStatus::New => warn += 1,
                    PromptStatus::Changed | PromptStatus::Error => err += 1,
                }
            }
        }
        let state = if err > 0 {
            "error"
        } else if warn > 0 {
            "warning"
        } else if pass + info > 0 {
            "ok"
        } else {
            "idle"
        };
        let mark = if first == Some(*b) { " first" } else { "" };
        out.push_str(&format!(
            "<span class=\"link {state}{mark}\">{}</span>",
            b.name()
        ));
    }
    out.push_str("\n</nav>\n");
}

fn boundary_table(out: &mut String, findings: &Findings) {
    let rows: Vec<(Boundary, [usize; 4])> = BOUNDARIES
        .iter()
        .map(|&b| (b, severity_counts(findings, b)))
        .filter(|(_, c)| c.iter().sum::<usize>() > 0)
        .collect();
    if rows.is_empty() {
        return;
    }
    out.push_str("<section>\n<h2>Boundaries</h2>\n<table>\n<thead><tr><th>boundary</th><th class=\"num\">pass</th><th class=\"num\">info</th><th class=\"num\">warning</th><th class=\"num\">error</th></tr></thead>\n<tbody>\n");
    for (b, [pass, info, warn, err]) in rows {
        let cls = if err > 0 {
            "error"
        } else if warn > 0 {
            "warning"
        } else {
            "ok"
        };
        out.push_str(&format!(
            "<tr class=\"{cls}\"><td>{}</td><td class=\"num\">{pass}</td><td class=\"num\">{info}</td><td class=\"num\">{warn}</td><td class=\"num\">{err}</td></tr>\n",
            b.name()
        ));
    }
    out.push_str("</tbody>\n</table>\n</section>\n");
}

/// Every finding of one severity as a card with its evidence.
fn problems(out: &mut String, findings: &Findings, severity: Severity, title: &str) {
    let list: Vec<&Finding> = findings
        .0
        .iter()
        .filter(|f| f.severity == severity)
        .collect();
    if list.is_empty() {
        return;
    }
    let cls = if severity == Severity::Error {
        "error"
    } else {
        "warning"
    };
    out.push_str(&format!("<section>\n<h2>{title}</h2>\n"));
    for f in list {
        out.push_str(&format!(
            "<div class=\"finding {cls}\">\n<div class=\"head\"><span class=\"boundary\">{}</span> <code>{}</code></div>\n<p>{}</p>\n",
            f.boundary.name(),
            esc(f.check.id),
            esc(&clip(&f.message, MAX_VALUE_CHARS))
        ));
        if !f.evidence.is_empty() {
            out.push_str("<dl>\n");
            for (k, v) in &f.evidence {
                out.push_str(&format!(
                    "<dt>{}</dt><dd><pre>{}</pre></dd>\n",
                    esc(k),
                    esc(&clip(v, MAX_VALUE_CHARS))
                ));
            }
            out.push_str("</dl>\n");
        }
        out.push_str("</div>\n");
    }
    out.push_str("</section>\n");
}

fn replay(out: &mut String, prompts: &[PromptResult]) {
    if prompts.is_empty() {
        return;
    }
    out.push_str(&format!(
        "<section>\n<h2>Replay — {}</h2>\n<table class=\"wide\">\n<thead><tr><th>prompt</th><th>status</th><th>comparator</th><th>determinism</th><th>detail</th></tr></thead>\n<tbody>\n",
        esc(&prompt_tally(prompts))
    ));
    for p in prompts {
        let cls = match p.status {
            PromptStatus::Pass => "ok",
            PromptStatus::New => "warning",
            PromptStatus::Changed | PromptStatus::Error => "error",
        };
        out.push_str(&format!(
            "<tr class=\"{cls}\"><td><code>{}</code></td><td><span class=\"badge {cls}\">{}</span></td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
            esc(&p.id),
            status_word(p.status),
            esc(&p.comparator),
            esc(p.determinism.as_deref().unwrap_or("—")),
            esc(&clip(&p.detail, MAX_VALUE_CHARS))
        ));
    }
    out.push_str("</tbody>\n</table>\n");
    let diffs: Vec<(&str, &str)> = prompts
        .iter()
        .filter_map(|p| Some((p.id.as_str(), p.diff.as_deref().filter(|d| !d.is_empty())?)))
        .collect();
    // A few diffs are the story of the run: show them; many would bury the tables.
    let open = diffs.len() <= OPEN_DIFFS;
    let mut room = MAX_TOTAL_DIFF_BYTES;
    for (id, diff) in diffs {
        room = room.saturating_sub(diff_block(out, id, diff, open, room));
    }
    out.push_str("</section>\n");
}

/// A collapsed diff, each line coloured by its unified-diff prefix.
/// Returns the bytes of diff text shown, out of the `room` left.
fn diff_block(out: &mut String, id: &str, diff: &str, open: bool, room: usize) -> usize {
    let cut = truncate_diff(diff, MAX_DIFF_LINES, MAX_DIFF_BYTES.min(room));
    let open = if open { " open" } else { "" };
    out.push_str(&format!(
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
        out.push_str(&format!("<span class=\"{cls}\">{}</span>", esc(l)));
    }
    out.push_str("</pre>\n");
    if let Some(note) = cut.note() {
        out.push_str(&format!("<p class=\"note\">{}</p>\n", esc(&note)));
    }
    out.push_str("</details>\n");
    cut.text.len()
}

fn latency(out: &mut String, rows: &[LatencyRow], totals: Option<&LatencyTotals>) {
    if rows.is_empty() && totals.is_none() {
        return;
    }
    out.push_str("<section>\n<h2>Latency</h2>\n");
    if !rows.is_empty() {
        latency_table(out, rows);
    }
    if let Some(t) = totals {
        out.push_str("<dl class=\"totals\">\n");
        for (k, v) in totals_lines(t) {
            out.push_str(&format!("<dt>{}</dt><dd>{}</dd>\n", esc(k), esc(&v)));
        }
        out.push_str("</dl>\n");
    }
    let plotted: Vec<&LatencyRow> = rows.iter().filter(|r| r.samples.len() >= 2).collect();
    if !plotted.is_empty() {
        out.push_str("<div class=\"plots\">\n");
        for r in plotted {
            out.push_str("<figure>");
            out.push_str(&cdf_svg(r));
            out.push_str("</figure>\n");
        }
        out.push_str("</div>\n");
    }
    out.push_str("</section>\n");
}

fn latency_table(out: &mut String, rows: &[LatencyRow]) {
    out.push_str("<table>\n<thead><tr><th>metric</th><th class=\"num\">n</th><th class=\"num\">p50 (ms)</th><th class=\"num\">p90 (ms)</th><th class=\"num\">p99 (ms)</th><th class=\"num\">baseline p50 (ms)</th><th>verdict</th></tr></thead>\n<tbody>\n");
    for r in rows {
        let cls = if is_regression(r) {
            "error"
        } else if r.verdict.is_ok() {
            "ok"
        } else {
            "idle"
        };
        out.push_str(&format!(
            "<tr class=\"{cls}\"><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td><span class=\"badge {cls}\">{}</span></td></tr>\n",
            esc(&r.metric.to_uppercase()),
            r.n,
            row_ms(r, r.p50),
            row_ms(r, r.p90),
            row_ms(r, r.p99),
            r.baseline_p50.map(fmt_ms).unwrap_or_else(|| "—".into()),
            esc(&r.verdict.to_string())
        ));
    }
    out.push_str("</tbody>\n</table>\n");
}

fn definitions(out: &mut String, defs: &[(String, String)]) {
    if defs.is_empty() {
        return;
    }
    out.push_str("<details class=\"defs\">\n<summary>Metric definitions</summary>\n<table>\n<thead><tr><th>metric</th><th>definition</th></tr></thead>\n<tbody>\n");
    for (name, def) in defs {
        out.push_str(&format!(
            "<tr><td>{}</td><td>{}</td></tr>\n",
            esc(name),
            esc(def)
        ));
    }
    out.push_str("</tbody>\n</table>\n</details>\n");
}

// ---------------------------------------------------------------------------------------------
// CDF plots

/// Plot geometry (SVG user units).
const W: f64 = 520.0;
const H: f64 = 300.0;
const LEFT: f64 = 48.0;
const RIGHT: f64 = 16.0;
/// Room above the plot: the title and legend row, then one row per marker label, so no text
/// ever sits on a curve.
const TOP: f64 = 54.0;
const BOTTOM: f64 = 44.0;

/// Maps data to SVG coordinates over a tick-aligned x range.
struct Axes {
    lo: f64,
    hi: f64,
    step: f64,
}

impl Axes {
    /// Covers every finite sample of both sets, widened to whole ticks.
    fn new(a: &[f64], b: &[f64]) -> Axes {
        let finite = a.iter().chain(b).copied().filter(|v| v.is_finite());
        let (mut lo, mut hi) = finite.fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), v| {
            (l.min(v), h.max(v))
        });
        if !lo.is_finite() {
            (lo, hi) = (0.0, 1.0);
        }
        if hi - lo < 1e-9 {
            let pad = (lo.abs() * 0.05).max(0.5);
            (lo, hi) = (lo - pad, hi + pad);
        }
        let step = nice_step((hi - lo) / 5.0);
        Axes {
            lo: (lo / step).floor() * step,
            hi: (hi / step).ceil() * step,
            step,
        }
    }
    fn x(&self, v: f64) -> f64 {
        LEFT + (v - self.lo) / (self.hi - self.lo) * (W - LEFT - RIGHT)
    }
    fn y(&self, f: f64) -> f64 {
        H - BOTTOM - f * (H - TOP - BOTTOM)
    }
    fn ticks(&self) -> Vec<f64> {
        let n = ((self.hi - self.lo) / self.step).round() as usize;
        (0..=n).map(|i| self.lo + i as f64 * self.step).collect()
    }
}

/// 1, 2 or 5 times a power of ten, at least `raw`.
fn nice_step(raw: f64) -> f64 {
    let raw = if raw.is_finite() && raw > 0.0 {
        raw
    } else {
        1.0
    };
    let mag = 10f64.powf(raw.log10().floor());
    let f = raw / mag;
    let nice = if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * mag
}

/// A tick label with as many decimals as the step needs.
fn tick_label(v: f64, step: f64) -> String {
    let decimals = (-step.log10().floor()).max(0.0) as usize;
    format!("{v:.decimals$}")
}

/// The empirical CDF of this run's samples against the baseline's, with p50/p99 markers.
pub fn cdf_svg(r: &LatencyRow) -> String {
    let axes = Axes::new(&r.samples, &r.baseline_samples);
    let name = r.metric.to_uppercase();
    let mut s = String::with_capacity(16 * 1024);
    let _ = write!(
        s,
        "<svg class=\"cdf\" viewBox=\"0 0 {W} {H}\" width=\"{W}\" height=\"{H}\" role=\"img\" aria-label=\"{} empirical CDF\">\n<title>{} — empirical CDF, this run vs baseline</title>\n",
        esc(&name),
        esc(&name)
    );
    grid(&mut s, &axes);
    if r.baseline_samples.len() >= 2 {
        let _ = writeln!(
            s,
            "<path class=\"base\" d=\"{}\"/>",
            step_path(&r.baseline_samples, &axes)
        );
    }
    let _ = writeln!(
        s,
        "<path class=\"run\" d=\"{}\"/>",
        step_path(&r.samples, &axes)
    );
    marker(&mut s, &axes, r.p50, "p50", 0);
    marker(&mut s, &axes, r.p99, "p99", 1);
    legend(&mut s, r);
    let _ = writeln!(
        s,
        "<text class=\"title\" x=\"{LEFT}\" y=\"16\">{}</text>",
        esc(&name)
    );
    s.push_str("</svg>");
    s
}

/// Gridlines, ticks and axis labels.
fn grid(s: &mut String, axes: &Axes) {
    let (x0, x1) = (LEFT, W - RIGHT);
    let (y0, y1) = (axes.y(0.0), axes.y(1.0));
    for f in [0.0, 0.25, 0.5, 0.75, 1.0] {
        let y = axes.y(f);
        let _ = writeln!(
            s,
            "<line class=\"grid\" x1=\"{x0}\" y1=\"{y:.1}\" x2=\"{x1}\" y2=\"{y:.1}\"/><text class=\"tick\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{f}</text>",
            x0 - 6.0,
            y + 4.0
        );
    }
    for t in axes.ticks() {
        let x = axes.x(t);
        let _ = writeln!(
            s,
            "<line class=\"grid\" x1=\"{x:.1}\" y1=\"{y0:.1}\" x2=\"{x:.1}\" y2=\"{y1:.1}\"/><text class=\"tick\" x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            y0 + 16.0,
            tick_label(t, axes.step)
        );
    }
    let _ = writeln!(
        s,
        "<line class=\"axis\" x1=\"{x0}\" y1=\"{y0:.1}\" x2=\"{x1}\" y2=\"{y0:.1}\"/><line class=\"axis\" x1=\"{x0}\" y1=\"{y0:.1}\" x2=\"{x0}\" y2=\"{y1:.1}\"/>"
    );
    let _ = writeln!(
        s,
        "<text class=\"label\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">latency (ms)</text>",
        (x0 + x1) / 2.0,
        H - 6.0
    );
}

/// The empirical CDF as a step line: flat between samples, a jump of 1/n at each.
fn step_path(samples: &[f64], axes: &Axes) -> String {
    let mut sorted: Vec<f64> = samples.iter().copied().filter(|v| v.is_finite()).collect();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    if n == 0 {
        return String::new();
    }
    let mut d = format!("M{:.1} {:.1}", axes.x(axes.lo), axes.y(0.0));
    for i in plot_indices(n) {
        let _ = write!(
            d,
            "H{:.1}V{:.1}",
            axes.x(sorted[i]),
            axes.y((i + 1) as f64 / n as f64)
        );
    }
    let _ = write!(d, "H{:.1}", axes.x(axes.hi));
    d
}

/// Which sorted samples to draw: all of them, or evenly spaced ranks ending at the maximum.
fn plot_indices(n: usize) -> Vec<usize> {
    if n <= MAX_PLOT_POINTS {
        return (0..n).collect();
    }
    let m = MAX_PLOT_POINTS;
    let mut idx: Vec<usize> = (0..m).map(|k| k * (n - 1) / (m - 1)).collect();
    idx.dedup();
    idx
}

/// A dashed vertical line at one of this run's percentiles, labelled with its value.
fn marker(s: &mut String, axes: &Axes, v: f64, label: &str, row: usize) {
    if !v.is_finite() || v < axes.lo || v > axes.hi {
        return;
    }
    let x = axes.x(v);
    let (y0, y1) = (axes.y(0.0), axes.y(1.0));
    let ty = y1 - 20.0 + 13.0 * row as f64;
    // Labels near the right edge read leftwards so they stay inside the plot.
    let (anchor, tx) = if x > W - RIGHT - 90.0 {
        ("end", x - 4.0)
    } else {
        ("start", x + 4.0)
    };
    let _ = writeln!(
        s,
        "<line class=\"marker\" x1=\"{x:.1}\" y1=\"{y0:.1}\" x2=\"{x:.1}\" y2=\"{y1:.1}\"/><text class=\"mark\" x=\"{tx:.1}\" y=\"{ty:.1}\" text-anchor=\"{anchor}\">{label} {} ms</text>",
        fmt_ms(v)
    );
}

/// Which line is which, in the title row (inside the plot it would cover a curve).
fn legend(s: &mut String, r: &LatencyRow) {
    let y = 16.0;
    let mut x = LEFT + 70.0;
    let mut entry = |class: &str, text: String| {
        let _ = writeln!(
            s,
            "<line class=\"{class}\" x1=\"{x}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\"/><text class=\"legend\" x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            y - 4.0,
            x + 22.0,
            y - 4.0,
            x + 28.0,
            y,
            esc(&text)
        );
        // Roughly 6 units per character at 11px, plus the sample line and a gap.
        x += 28.0 + 6.0 * text.chars().count() as f64 + 18.0;
    };
    entry("run", format!("this run (n={})", r.samples.len()));
    if r.baseline_samples.len() >= 2 {
        entry("base", format!("baseline (n={})", r.baseline_samples.len()));
    } else {
        entry("none", "no baseline samples".to_string());
    }
}

const CSS: &str = r#"
:root { --fg:#1f2328; --muted:#59636e; --bg:#ffffff; --panel:#f6f8fa; --border:#d1d9e0;
  --ok:#1a7f37; --ok-bg:#dafbe1; --warn:#9a6700; --warn-bg:#fff8c5; --err:#cf222e; --err-bg:#ffebe9;
  --run:#0969da; --base:#bc4c00; }
@media (prefers-color-scheme: dark) {
  :root { --fg:#e6edf3; --muted:#9198a1; --bg:#0d1117; --panel:#151b23; --border:#3d444d;
    --ok:#3fb950; --ok-bg:#12261e; --warn:#d29922; --warn-bg:#272115; --err:#f85149; --err-bg:#2d1214;
    --run:#4493f8; --base:#f0883e; }
}
* { box-sizing: border-box; }
body { margin:0; background:var(--bg); color:var(--fg);
  font:14px/1.5 -apple-system, BlinkMacSystemFont, "Segoe UI", Helvetica, Arial, sans-serif; }
main { max-width:1120px; margin:0 auto; padding:24px; }
h1 { font-size:22px; margin:0 0 6px; } h2 { font-size:18px; margin:28px 0 10px;
  border-bottom:1px solid var(--border); padding-bottom:4px; }
code, pre { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size:12.5px; }
code { background:var(--panel); padding:1px 4px; border-radius:4px; overflow-wrap:anywhere; }
pre { margin:0; white-space:pre-wrap; overflow-wrap:anywhere; }
.verdict { border:1px solid var(--border); border-left-width:6px; border-radius:6px; padding:14px 18px; }
.verdict.pass { border-left-color:var(--ok); } .verdict.fail { border-left-color:var(--err); }
.meta { color:var(--muted); margin:0 0 8px; } .lead { font-size:15px; margin:8px 0; }
.symptoms { margin:4px 0; }
.chain { display:flex; flex-wrap:wrap; align-items:center; gap:6px; margin:18px 0 6px; }
.chain .link { padding:3px 10px; border-radius:12px; border:1px solid var(--border); font-size:13px; }
.chain .arrow { color:var(--muted); }
.link.ok { background:var(--ok-bg); color:var(--ok); } .link.warning { background:var(--warn-bg); color:var(--warn); }
.link.error { background:var(--err-bg); color:var(--err); } .link.idle { color:var(--muted); border-style:dashed; }
.link.first { border:2px solid var(--err); font-weight:600; }
table { border-collapse:collapse; margin:8px 0; } table.wide { width:100%; }
.badge { display:inline-block; padding:0 8px; border-radius:10px; font-size:12px; font-weight:600; white-space:nowrap; }
.badge.pass, .badge.ok { background:var(--ok-bg); color:var(--ok); } .badge.fail, .badge.error { background:var(--err-bg); color:var(--err); }
.badge.warning { background:var(--warn-bg); color:var(--warn); } .badge.idle { background:var(--panel); color:var(--muted); }
h1 .badge { font-size:16px; padding:2px 10px; vertical-align:2px; }
th, td { border:1px solid var(--border); padding:4px 8px; text-align:left; vertical-align:top; }
th { background:var(--panel); } td.num, th.num { text-align:right; font-variant-numeric:tabular-nums; }
tr.error td:first-child { border-left:4px solid var(--err); } tr.warning td:first-child { border-left:4px solid var(--warn); }
tr.ok td:first-child { border-left:4px solid var(--ok); } tr.idle td:first-child { border-left:4px solid var(--border); }
.finding { border:1px solid var(--border); border-left-width:4px; border-radius:6px; padding:8px 12px; margin:10px 0; }
.finding.error { border-left-color:var(--err); } .finding.warning { border-left-color:var(--warn); }
.finding .head { font-weight:600; } .finding p { margin:4px 0; }
.boundary { text-transform:uppercase; font-size:11px; letter-spacing:.05em; color:var(--muted); margin-right:4px; }
dl { display:grid; grid-template-columns:max-content 1fr; gap:2px 12px; margin:6px 0 0; }
dt { color:var(--muted); } dd { margin:0; min-width:0; }
dd pre { background:var(--panel); padding:2px 6px; border-radius:4px; }
details { margin:8px 0; } summary { cursor:pointer; }
pre.diff { background:var(--panel); border:1px solid var(--border); border-radius:6px; padding:8px; margin-top:6px; }
.diff .add { color:var(--ok); background:var(--ok-bg); display:block; } .diff .del { color:var(--err); background:var(--err-bg); display:block; }
.diff .hunk { color:var(--run); display:block; } .diff .file { color:var(--muted); display:block; } .diff .ctx { display:block; }
.note { color:var(--muted); font-style:italic; }
.plots { display:flex; flex-wrap:wrap; gap:12px; } figure { margin:0; border:1px solid var(--border); border-radius:6px; padding:4px; flex:1 1 440px; max-width:540px; }
svg.cdf { width:100%; height:auto; font-family:inherit; }
svg .grid { stroke:var(--border); stroke-width:1; } svg .axis { stroke:var(--muted); stroke-width:1; }
svg .tick, svg .legend, svg .label { fill:var(--muted); font-size:11px; } svg .title { fill:var(--fg); font-size:13px; font-weight:600; }
svg .run { fill:none; stroke:var(--run); stroke-width:2; } svg .base { fill:none; stroke:var(--base); stroke-width:2; stroke-dasharray:6 4; }
svg .none { stroke:none; }
svg .marker { stroke:var(--run); stroke-width:1; stroke-dasharray:2 3; } svg .mark { fill:var(--run); font-size:11px; }
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_steps_are_one_two_five() {
        assert_eq!(nice_step(0.7), 1.0);
        assert_eq!(nice_step(1.5), 2.0);
        assert_eq!(nice_step(30.0), 50.0);
        assert_eq!(nice_step(0.03), 0.05);
    }

    #[test]
    fn axes_cover_the_samples_on_whole_ticks() {
        let a = Axes::new(&[12.0, 47.0], &[8.0]);
        assert!(a.lo <= 8.0 && a.hi >= 47.0);
        assert_eq!(a.ticks().first(), Some(&a.lo));
        assert_eq!(a.ticks().last(), Some(&a.hi));
        let flat = Axes::new(&[5.0, 5.0], &[]);
        assert!(flat.lo < 5.0 && flat.hi > 5.0);
    }

    #[test]
    fn step_path_climbs_to_one_at_the_maximum() {
        let a = Axes::new(&[1.0, 2.0, 3.0, 4.0], &[]);
        let d = step_path(&[4.0, 1.0, 3.0, 2.0], &a);
        // Four jumps, the last to F = 1 (the top of the plot area).
        assert_eq!(d.matches('V').count(), 4);
        assert!(d.contains(&format!("V{:.1}", a.y(1.0))));
    }

    #[test]
    fn many_samples_are_drawn_through_quantiles_ending_at_the_max() {
        let idx = plot_indices(10_000);
        assert!(idx.len() <= MAX_PLOT_POINTS);
        assert_eq!(idx.first(), Some(&0));
        assert_eq!(idx.last(), Some(&9_999));
    }
}
