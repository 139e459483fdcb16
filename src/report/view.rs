//! The gate report as sections, built once, and the one trait every document markup renders
//! them through (hyperfine's `MarkupExporter`: one view, a trait per markup).
//!
//! [`View`] decides *what* a reader sees and in which order — the verdict, the first broken
//! boundary and the downstream symptoms it may explain, the boundaries, the problems with their
//! evidence, the replay and its diffs, the latency figures, the metric definitions — from the
//! report alone. [`Markup`] says *how* one markup writes each piece (Markdown for the step
//! summary, HTML for the artifact); [`render`] walks the view in order. A new document format is
//! one `impl Markup`.
use crate::verdict::{
    Boundary, Finding, GateReport, LatencyRow, LatencyTotals, PromptResult, PromptStatus, Severity,
};

use super::summary::{
    clip, failure_reasons, fmt_ms, is_regression, latency_icon, prompt_symptom, prompt_tally,
    row_ms, severity_counts, status_icon, status_word, totals_lines, truncate_diff, verdict,
    CutDiff, BOUNDARIES, MAX_VALUE_CHARS,
};

/// How a row, a badge or a link of the chain reads at a glance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tone {
    Ok,
    Warning,
    Error,
    /// Nothing ran, or nothing to judge (no baseline).
    Idle,
}

impl Tone {
    /// The CSS class of the tone.
    pub fn class(self) -> &'static str {
        match self {
            Tone::Ok => "ok",
            Tone::Warning => "warning",
            Tone::Error => "error",
            Tone::Idle => "idle",
        }
    }
}

/// A finding the reader is pointed at: the first broken boundary, or a downstream symptom.
pub struct Pointer {
    /// The boundary's name (`template`; `replay` for failing prompts without a finding).
    pub boundary: &'static str,
    /// Its check id, when it is a finding.
    pub check: Option<&'static str>,
    pub message: String,
}

/// One boundary's tally of findings by severity (only boundaries that ran).
pub struct BoundaryRow {
    pub boundary: Boundary,
    pub pass: usize,
    pub info: usize,
    pub warning: usize,
    pub error: usize,
}

impl BoundaryRow {
    pub fn tone(&self) -> Tone {
        if self.error > 0 {
            Tone::Error
        } else if self.warning > 0 {
            Tone::Warning
        } else {
            Tone::Ok
        }
    }
}

/// Everything a document shows, in reading order.
pub struct View<'a> {
    pub report: &'a GateReport,
    /// `PASS`, `FAIL` or `UNREACHABLE`, and its icon.
    pub word: &'static str,
    pub icon: &'static str,
    /// The first broken boundary, and what it may explain downstream.
    pub first: Option<Pointer>,
    pub symptoms: Vec<Pointer>,
    /// Why a run with no broken boundary failed (changed prompts, latency regressions).
    pub reasons: Vec<String>,
    /// Each link of the chain and its tone (the HTML strip), the first broken one marked.
    pub chain: Vec<(Boundary, Tone, bool)>,
    pub boundaries: Vec<BoundaryRow>,
    pub errors: Vec<&'a Finding>,
    pub warnings: Vec<&'a Finding>,
    pub prompts: &'a [PromptResult],
    pub latency: &'a [LatencyRow],
    pub totals: Option<&'a LatencyTotals>,
    pub definitions: &'a [(String, String)],
}

impl<'a> View<'a> {
    pub fn of(report: &'a GateReport) -> View<'a> {
        let (icon, word) = verdict(report);
        let findings = &report.findings;
        let pointer = |f: &Finding| Pointer {
            boundary: f.boundary.name(),
            check: Some(f.check.id),
            message: clip(&f.message, MAX_VALUE_CHARS),
        };
        let first = findings.first_broken().map(pointer);
        let mut symptoms: Vec<Pointer> = findings.downstream().into_iter().map(pointer).collect();
        if first.is_some() {
            if let Some(s) = prompt_symptom(report) {
                symptoms.push(Pointer {
                    boundary: "replay",
                    check: None,
                    message: s,
                });
            }
        } else {
            symptoms.clear();
        }
        let of = |s: Severity| findings.0.iter().filter(|f| f.severity == s).collect();
        View {
            report,
            word,
            icon,
            first,
            symptoms,
            reasons: failure_reasons(report),
            chain: chain(report),
            boundaries: BOUNDARIES
                .iter()
                .map(|&b| {
                    let [pass, info, warning, error] = severity_counts(findings, b);
                    BoundaryRow {
                        boundary: b,
                        pass,
                        info,
                        warning,
                        error,
                    }
                })
                .filter(|r| r.pass + r.info + r.warning + r.error > 0)
                .collect(),
            errors: of(Severity::Error),
            warnings: of(Severity::Warning),
            prompts: &report.prompts,
            latency: &report.latency,
            totals: report.latency_totals.as_ref(),
            definitions: &report.definitions,
        }
    }

    /// The replay section's heading: `3 prompts: 1 pass, 1 changed, 1 error`.
    pub fn prompt_tally(&self) -> String {
        prompt_tally(self.prompts)
    }
}

/// The chain's links, coloured by their worst finding (replayed prompts count for the replay
/// link); the first broken one marked.
fn chain(report: &GateReport) -> Vec<(Boundary, Tone, bool)> {
    let first = report.findings.first_broken().map(|f| f.boundary);
    BOUNDARIES
        .iter()
        .map(|&b| {
            let [mut pass, info, mut warn, mut err] = severity_counts(&report.findings, b);
            if b == Boundary::Replay {
                for p in &report.prompts {
                    match p.status {
                        PromptStatus::Pass => pass += 1,
                        PromptStatus::New => warn += 1,
                        PromptStatus::Changed | PromptStatus::Error => err += 1,
                    }
                }
            }
            let tone = if err > 0 {
                Tone::Error
            } else if warn > 0 {
                Tone::Warning
            } else if pass + info > 0 {
                Tone::Ok
            } else {
                Tone::Idle
            };
            (b, tone, first == Some(b))
        })
        .collect()
}

/// A prompt's status as a tone.
pub fn prompt_tone(status: PromptStatus) -> Tone {
    match status {
        PromptStatus::Pass => Tone::Ok,
        PromptStatus::New => Tone::Warning,
        PromptStatus::Changed | PromptStatus::Error => Tone::Error,
    }
}

/// A latency verdict as a tone.
pub fn latency_tone(r: &LatencyRow) -> Tone {
    if is_regression(r) {
        Tone::Error
    } else if r.verdict.is_ok() {
        Tone::Ok
    } else {
        Tone::Idle
    }
}

/// A table's column: its heading and what its cells hold.
pub struct Col {
    pub name: &'static str,
    pub kind: ColKind,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum ColKind {
    Text,
    /// Right-aligned figures.
    Num,
    /// A status: a badge (HTML), an icon and a word (Markdown).
    Status,
    /// The row's tone alone: an icon where a markup cannot colour the row (Markdown); HTML
    /// colours the row and leaves the column out.
    Mark,
}

pub enum Cell {
    /// User text, escaped by the markup.
    Text(String),
    /// An identifier (a prompt id), shown as code.
    Code(String),
    Num(String),
    /// A status word, its tone, and the icon Markdown shows before it.
    Status(Tone, &'static str, String),
    Mark(Tone),
}

pub struct Table {
    pub cols: Vec<Col>,
    /// Each row's tone (colours the row where the markup can) and cells.
    pub rows: Vec<(Option<Tone>, Vec<Cell>)>,
    /// A table that wants the page's whole width (long details).
    pub wide: bool,
}

fn cols(spec: &[(&'static str, ColKind)]) -> Vec<Col> {
    spec.iter()
        .map(|&(name, kind)| Col { name, kind })
        .collect()
}

impl View<'_> {
    pub fn boundary_table(&self) -> Table {
        use ColKind::*;
        Table {
            cols: cols(&[
                ("boundary", Text),
                ("", Mark),
                ("pass", Num),
                ("info", Num),
                ("warning", Num),
                ("error", Num),
            ]),
            rows: self
                .boundaries
                .iter()
                .map(|r| {
                    let n = |v: usize| Cell::Num(v.to_string());
                    let cells = vec![
                        Cell::Text(r.boundary.name().into()),
                        Cell::Mark(r.tone()),
                        n(r.pass),
                        n(r.info),
                        n(r.warning),
                        n(r.error),
                    ];
                    (Some(r.tone()), cells)
                })
                .collect(),
            wide: false,
        }
    }

    pub fn replay_table(&self) -> Table {
        use ColKind::*;
        Table {
            cols: cols(&[
                ("prompt", Text),
                ("status", Status),
                ("comparator", Text),
                ("determinism", Text),
                ("detail", Text),
            ]),
            rows: self
                .prompts
                .iter()
                .map(|p| {
                    let tone = prompt_tone(p.status);
                    let cells = vec![
                        Cell::Code(p.id.clone()),
                        Cell::Status(tone, status_icon(p.status), status_word(p.status).into()),
                        Cell::Text(p.comparator.clone()),
                        Cell::Text(p.determinism.clone().unwrap_or_else(|| "—".into())),
                        Cell::Text(clip(&p.detail, MAX_VALUE_CHARS)),
                    ];
                    (Some(tone), cells)
                })
                .collect(),
            wide: true,
        }
    }

    pub fn latency_table(&self) -> Table {
        use ColKind::*;
        Table {
            cols: cols(&[
                ("metric", Text),
                ("n", Num),
                ("p50 (ms)", Num),
                ("p90 (ms)", Num),
                ("p99 (ms)", Num),
                ("baseline p50 (ms)", Num),
                ("verdict", Status),
            ]),
            rows: self
                .latency
                .iter()
                .map(|r| {
                    let tone = latency_tone(r);
                    let cells = vec![
                        Cell::Text(r.metric.to_uppercase()),
                        Cell::Num(r.n.to_string()),
                        Cell::Num(row_ms(r, r.p50)),
                        Cell::Num(row_ms(r, r.p90)),
                        Cell::Num(row_ms(r, r.p99)),
                        Cell::Num(r.baseline_p50.map(fmt_ms).unwrap_or_else(|| "—".into())),
                        Cell::Status(tone, latency_icon(r), r.verdict.to_string()),
                    ];
                    (Some(tone), cells)
                })
                .collect(),
            wide: false,
        }
    }

    /// Where the run's time went: each stage, and under it its steps (the online chain's probe
    /// pass and the checks that send requests), with the requests each sent.
    pub fn time_table(&self) -> Table {
        use ColKind::*;
        let row = |name: String, t: &crate::verdict::PhaseTime| {
            let requests = t.requests.map_or_else(|| "—".into(), |n| n.to_string());
            let cells = vec![
                Cell::Text(name),
                Cell::Num(format!("{:.1}", t.seconds)),
                Cell::Num(requests),
            ];
            (None, cells)
        };
        let mut rows = Vec::new();
        for p in &self.report.phases {
            rows.push(row(p.phase.clone(), p));
            for s in &p.steps {
                rows.push(row(format!("· {}", s.phase), s));
            }
        }
        Table {
            cols: cols(&[("stage", Text), ("seconds", Num), ("requests", Num)]),
            rows,
            wide: false,
        }
    }

    pub fn definitions_table(&self) -> Table {
        Table {
            cols: cols(&[("metric", ColKind::Text), ("definition", ColKind::Text)]),
            rows: self
                .definitions
                .iter()
                .map(|(n, d)| (None, vec![Cell::Text(n.clone()), Cell::Text(d.clone())]))
                .collect(),
            wide: false,
        }
    }
}

/// A diff cut to a markup's caps: at most this many lines and bytes each, and all diffs of a
/// document together at most `total` bytes.
pub struct DiffLimits {
    pub lines: usize,
    pub bytes: usize,
    pub total: usize,
}

/// How one markup writes each piece of the view. The order, the filtering, the tables' rows and
/// every word that two markups share live in [`render`] and [`View`]; an implementation only
/// writes.
pub trait Markup {
    /// Before anything: a document's head.
    fn begin(&mut self, _view: &View) {}
    /// The verdict, the run's facts, the first broken boundary and its symptoms (or why a run
    /// with no broken boundary failed).
    fn header(&mut self, view: &View);
    /// The chain as a strip of links (markups that can colour them).
    fn chain(&mut self, _view: &View) {}
    fn section(&mut self, title: &str);
    fn end_section(&mut self) {}
    fn table(&mut self, table: &Table);
    /// A finding of the errors or warnings section; its evidence follows, then
    /// [`Markup::end_finding`].
    fn finding(&mut self, f: &Finding, tone: Tone);
    fn evidence(&mut self, key: &str, value: &str);
    fn end_finding(&mut self) {}
    fn diff_limits(&self) -> DiffLimits;
    /// One changed prompt's diff, already cut to the limits.
    fn diff(&mut self, id: &str, cut: &CutDiff, open: bool);
    fn totals(&mut self, lines: &[(&'static str, String)]);
    /// Plots of the latency figures (markups that can draw).
    fn plots(&mut self, _rows: &[&LatencyRow]) {}
    /// A collapsed part (the metric definitions), its table inside.
    fn details(&mut self, summary: &str, class: &str);
    fn end_details(&mut self);
    /// After everything: a document's foot.
    fn end(&mut self) {}
}

/// Diffs are shown expanded when a run has at most this many (a few diffs are the story of the
/// run; many would bury the tables).
pub const OPEN_DIFFS: usize = 5;

/// Write the view through `m`, section by section, in reading order.
pub fn render<M: Markup>(view: &View, m: &mut M) {
    m.begin(view);
    m.header(view);
    m.chain(view);
    if !view.boundaries.is_empty() {
        m.section("Boundaries");
        m.table(&view.boundary_table());
        m.end_section();
    }
    for (title, tone, list) in [
        ("Errors", Tone::Error, &view.errors),
        ("Warnings", Tone::Warning, &view.warnings),
    ] {
        if list.is_empty() {
            continue;
        }
        m.section(title);
        for f in list.iter() {
            m.finding(f, tone);
            for (k, v) in &f.evidence {
                m.evidence(k, &clip(v, MAX_VALUE_CHARS));
            }
            m.end_finding();
        }
        m.end_section();
    }
    if !view.prompts.is_empty() {
        m.section(&format!("Replay — {}", view.prompt_tally()));
        m.table(&view.replay_table());
        let diffs: Vec<(&str, &str)> = view
            .prompts
            .iter()
            .filter_map(|p| Some((p.id.as_str(), p.diff.as_deref().filter(|d| !d.is_empty())?)))
            .collect();
        let open = diffs.len() <= OPEN_DIFFS;
        let limits = m.diff_limits();
        let mut room = limits.total;
        for (id, diff) in diffs {
            let cut = truncate_diff(diff, limits.lines, limits.bytes.min(room));
            room = room.saturating_sub(cut.text.len());
            m.diff(id, &cut, open);
        }
        m.end_section();
    }
    if !view.latency.is_empty() || view.totals.is_some() {
        m.section("Latency");
        if !view.latency.is_empty() {
            m.table(&view.latency_table());
        }
        if let Some(t) = view.totals {
            m.totals(&totals_lines(t));
        }
        let plotted: Vec<&LatencyRow> = view
            .latency
            .iter()
            .filter(|r| r.samples.len() >= 2)
            .collect();
        if !plotted.is_empty() {
            m.plots(&plotted);
        }
        m.end_section();
    }
    if !view.report.phases.is_empty() {
        m.details("Where the time went", "time");
        m.table(&view.time_table());
        m.end_details();
    }
    if !view.definitions.is_empty() {
        m.details("Metric definitions", "defs");
        m.table(&view.definitions_table());
        m.end_details();
    }
    m.end();
}
