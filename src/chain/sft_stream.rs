//! The SFT rows, streamed: every golden row (and every conversation of the suite) goes once
//! through the per-row checks of three boundaries — the tokenizer's re-encode, the template's
//! parity and generation prompt, the stop set's terminators and stop-inside-reply — in
//! parallel batches across all cores. Only a tally is kept: counts, the first few examples of
//! each outcome in file order, and small sets. Memory stays bounded by one batch, whatever the
//! file's size (100k-row SFT sets are ordinary).
use std::collections::BTreeSet;
use std::fs::File;
use std::io::{BufRead, BufReader, IsTerminal, Read};
use std::path::{Path, PathBuf};

use rayon::prelude::*;
use serde_json::Value;

use super::generation::{self, GenerationTally};
use super::rows::Examples;
use super::template::{self, TemplateTally};
use super::tokenizer::{self, ReencodeTally};
use super::{Context, Conversation};
use crate::error::{Error, Result};
use crate::suite::GoldenRow;

/// Rows parsed and checked together: large enough to keep every core busy, small enough that
/// a batch of long conversations stays a few MiB.
const BATCH_ROWS: usize = 1024;
/// A golden row longer than this is not an SFT row (a runaway file, a missing newline).
const MAX_LINE_BYTES: u64 = 64 << 20;
/// Golden rows kept in memory for the checks that need conversations rather than a tally
/// (message shapes, the GGUF template diff, the online probes).
pub const SAMPLE_ROWS: usize = 256;

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
        t.shapes_used.extend(super::shapes::used_by(&conv.messages));
        // Rendered once: the template's checks and the tokenizer's re-encode share it.
        let served = template::serve(ctx, conv)?;
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

/// The first `n` golden rows, for the checks that read conversations whole; an empty file is
/// bad input.
pub fn sample(path: &Path, n: usize) -> Result<Vec<(Conversation, bool)>> {
    let mut lines = GoldenLines::open(path)?;
    let mut out = Vec::new();
    while out.len() < n {
        let Some((line, text)) = lines.next_line()? else {
            break;
        };
        out.push(parse_row(path, line, &text)?);
    }
    if out.is_empty() {
        return Err(Error::in_file(path, "the golden SFT file has no rows"));
    }
    Ok(out)
}

/// One golden row as a conversation, and whether its mask was degenerate (all zeros or all
/// ones, what `return_assistant_tokens_mask=True` gives on a template without
/// `{% generation %}`): such a mask is dropped.
fn parse_row(path: &Path, line: usize, text: &str) -> Result<(Conversation, bool)> {
    let row: GoldenRow = serde_json::from_str(text).map_err(|e| {
        Error::in_file(path, format!("line {line}: not a golden SFT row: {e}"))
            .hint("each line is {\"messages\": [...], \"input_ids\": [...], \"assistant_mask\": [...]} (mask optional)")
    })?;
    if let Some(mask) = &row.assistant_mask {
        if mask.len() != row.input_ids.len() {
            return Err(Error::in_file(
                path,
                format!(
                    "line {line}: assistant_mask has {} entries but input_ids has {}",
                    mask.len(),
                    row.input_ids.len()
                ),
            ));
        }
    }
    let has_assistant = row
        .messages
        .iter()
        .any(|m| m.get("role").and_then(Value::as_str) == Some("assistant"));
    let mut mask = row.assistant_mask;
    let degenerate = mask.as_ref().is_some_and(|m| {
        let all_zero = m.iter().all(|&b| b == 0);
        let all_one = !m.is_empty() && m.iter().all(|&b| b != 0);
        (all_zero && has_assistant) || all_one
    });
    if degenerate {
        mask = None;
    }
    Ok((
        Conversation {
            id: row.id.unwrap_or_else(|| format!("golden#{line}")),
            messages: row.messages,
            tools: row.tools,
            golden: Some((row.input_ids, mask)),
        },
        degenerate,
    ))
}

/// The non-blank lines of a JSONL file, each bounded in size, with their 1-based numbers.
struct GoldenLines {
    path: PathBuf,
    reader: BufReader<File>,
    line: usize,
    /// Bytes read so far and the file's size, for the progress bar.
    read: u64,
    len: u64,
}

impl GoldenLines {
    fn open(path: &Path) -> Result<GoldenLines> {
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        let len = file.metadata().map(|m| m.len()).unwrap_or(0);
        Ok(GoldenLines {
            path: path.to_path_buf(),
            reader: BufReader::with_capacity(1 << 20, file),
            line: 0,
            read: 0,
            len,
        })
    }

    fn next_line(&mut self) -> Result<Option<(usize, String)>> {
        let mut buf = Vec::new();
        loop {
            buf.clear();
            let n = (&mut self.reader)
                .take(MAX_LINE_BYTES + 1)
                .read_until(b'\n', &mut buf)
                .map_err(|e| Error::io(&self.path, e))?;
            if n == 0 {
                return Ok(None);
            }
            self.line += 1;
            self.read += n as u64;
            if n as u64 > MAX_LINE_BYTES {
                return Err(Error::in_file(
                    &self.path,
                    format!(
                        "line {} is longer than {} MiB: not an SFT row",
                        self.line,
                        MAX_LINE_BYTES >> 20
                    ),
                )
                .hint("each golden row is one JSON object on one line"));
            }
            let text = String::from_utf8(std::mem::take(&mut buf)).map_err(|_| {
                Error::in_file(&self.path, format!("line {}: not UTF-8 text", self.line))
            })?;
            if !text.trim().is_empty() {
                return Ok(Some((self.line, text)));
            }
        }
    }
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
