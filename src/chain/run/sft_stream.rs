//! The SFT rows, streamed: every golden row (and every conversation of the suite) goes once
//! through the per-row checks of three boundaries — the tokenizer's re-encode, the template's
//! parity and generation prompt, the stop set's terminators and stop-inside-reply — in
//! parallel batches across all cores. Only a tally is kept: counts, the first few examples of
//! each outcome in file order, and small sets. Memory stays bounded by one batch, whatever the
//! file's size (100k-row SFT sets are ordinary).
use std::collections::BTreeSet;
use std::io::IsTerminal;

use rayon::prelude::*;

use crate::chain::generation::{self, GenerationTally};
use crate::chain::run::context::{Context, Conversation};
use crate::chain::run::golden::{parse_row, GoldenLines};
use crate::chain::run::rows::Examples;
use crate::chain::template::{self, TemplateTally};
use crate::chain::tokenizer::{self, ReencodeTally};
use crate::error::Result;

/// Rows parsed and checked together: large enough to keep every core busy, small enough that
/// a batch of long conversations stays a few MiB.
const BATCH_ROWS: usize = 1024;

/// What the per-row checks learned from all rows.
#[derive(Default)]
pub struct Tally {
    /// Rows seen (golden rows and the suite's conversations).
    pub rows: usize,
    /// Golden rows whose assistant_mask was all zeros or all ones: treated as absent.
    pub degenerate_masks: Examples<String>,
    /// The message shapes the rows use (system prompt, tool calls, ...).
    pub shapes_used: BTreeSet<&'static str>,
    pub reencode: ReencodeTally,
    pub template: TemplateTally,
    pub generation: GenerationTally,
}

impl Tally {
    /// Fold in the tally of the rows that follow this one's (order matters for "first").
    fn merge(mut self, later: Tally) -> Tally {
        self.rows += later.rows;
        self.degenerate_masks.merge(later.degenerate_masks);
        self.shapes_used.extend(later.shapes_used);
        self.reencode.merge(later.reencode);
        self.template.merge(later.template);
        self.generation.merge(later.generation);
        self
    }
}

/// Run every row through the per-row checks: the golden file streamed in parallel batches,
/// then the suite's own conversations. `progress` shows a bar on a terminal.
pub fn tally(ctx: &Context, progress: bool) -> Result<Tally> {
    let stops = generation::row_stops(ctx);
    let suffix = ctx.serving.as_ref().and_then(template::generation_suffix);
    let check = |conv: &Conversation| -> Result<Tally> {
        let mut t = Tally {
            rows: 1,
            ..Tally::default()
        };
        t.shapes_used
            .extend(crate::chain::template::shapes::used_by(&conv.messages));
        // Rendered once: the template's checks and the tokenizer's re-encode share it.
        let served = crate::chain::run::context::serve(ctx, conv)?;
        t.reencode = tokenizer::reencode_row(ctx, conv, &served)?;
        t.template = template::row(ctx, conv, &suffix, &served)?;
        t.generation = generation::row(ctx, stops.as_ref(), conv)?;
        Ok(t)
    };
    let mut total = Tally::default();
    if let Some(path) = ctx.sft.golden_path() {
        let mut lines = GoldenLines::open(path)?;
        let bar = Bar::new(progress, lines.len);
        let mut batch = Vec::with_capacity(BATCH_ROWS);
        loop {
            batch.clear();
            while batch.len() < BATCH_ROWS {
                match lines.next_line()? {
                    Some(l) => batch.push(l),
                    None => break,
                }
            }
            if batch.is_empty() {
                break;
            }
            let part = batch
                .par_iter()
                .map(|(line, text)| {
                    let (conv, degenerate) = parse_row(path, *line, text)?;
                    let mut t = check(&conv)?;
                    if degenerate {
                        t.degenerate_masks.push(conv.id);
                    }
                    Ok(t)
                })
                .try_reduce(Tally::default, |a, b| Ok(a.merge(b)))?;
            total = total.merge(part);
            bar.at(lines.read, total.rows);
        }
        bar.done();
    }
    for conv in &ctx.conversations[ctx.golden_sample..] {
        total = total.merge(check(conv)?);
    }
    Ok(total)
}

/// Bytes of the golden file read, with rows per second: on a terminal only.
struct Bar(Option<indicatif::ProgressBar>);

impl Bar {
    fn new(wanted: bool, len: u64) -> Bar {
        if !wanted || !std::io::stderr().is_terminal() {
            return Bar(None);
        }
        let bar = indicatif::ProgressBar::new(len);
        if let Ok(style) = indicatif::ProgressStyle::with_template(
            "{prefix:>14} [{bar:30}] {bytes}/{total_bytes} {msg}",
        ) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_prefix("SFT rows");
        Bar(Some(bar))
    }
    fn at(&self, bytes: u64, rows: usize) {
        if let Some(b) = &self.0 {
            b.set_position(bytes);
            let secs = b.elapsed().as_secs_f64().max(1e-3);
            b.set_message(format!("{rows} rows, {:.0} rows/s", rows as f64 / secs));
        }
    }
    fn done(&self) {
        if let Some(b) = &self.0 {
            b.finish_and_clear();
        }
    }
}
