//! The golden SFT rows on disk: read line by line within bounds, a row a conversation with its
//! ids (`[sft] golden`), and the first few kept in memory for the checks that need
//! conversations rather than a tally.
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::chain::run::context::Conversation;
use crate::error::{Error, Result};
use crate::suite::GoldenRow;

/// A golden row longer than this is not an SFT row (a runaway file, a missing newline).
const MAX_LINE_BYTES: u64 = 64 << 20;
/// Golden rows kept in memory for the checks that need conversations rather than a tally
/// (message shapes, the GGUF template diff, the online probes).
pub const SAMPLE_ROWS: usize = 256;

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
pub fn parse_row(path: &Path, line: usize, text: &str) -> Result<(Conversation, bool)> {
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
pub struct GoldenLines {
    path: PathBuf,
    reader: BufReader<File>,
    line: usize,
    /// Bytes read so far and the file's size, for the progress bar.
    pub read: u64,
    pub len: u64,
}

impl GoldenLines {
    pub fn open(path: &Path) -> Result<GoldenLines> {
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

    pub fn next_line(&mut self) -> Result<Option<(usize, String)>> {
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
