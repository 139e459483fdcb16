//! A history on disk: one `<suite>.jsonl` per suite in a folder the user keeps (a CI cache, a
//! branch). Runs only ever append, and never read what is there: two CI jobs appending at once,
//! or a job killed mid-run, cannot lose or rewrite an earlier record.
use std::io::Write;
use std::path::{Path, PathBuf};

use super::record::{Record, RECORD_VERSION};
use crate::error::{Error, Result};

/// A history file larger than this is refused (years of runs are a few MB).
pub const MAX_FILE_BYTES: u64 = 64 << 20;
/// A record longer than this is not one chatgate wrote.
pub const MAX_LINE_BYTES: usize = 1 << 20;

/// The file a suite's records go to.
pub fn file_of(dir: &Path, suite: &str) -> PathBuf {
    dir.join(format!("{suite}.jsonl"))
}

/// Append one record as one line, with one write(2) on a file opened O_APPEND: concurrent
/// appenders interleave whole lines, and nothing already there is touched.
pub fn append(dir: &Path, record: &Record) -> Result<PathBuf> {
    if !crate::files::valid_id(&record.suite) {
        return Err(Error::input(format!(
            "the suite name {:?} cannot name a history file",
            record.suite
        )));
    }
    let path = file_of(dir, &record.suite);
    std::fs::create_dir_all(dir).map_err(|e| history_write_error(dir, e))?;
    let mut line = serde_json::to_string(record)
        .map_err(|e| Error::in_file(&path, format!("cannot encode the record: {e}")))?;
    line.push('\n');
    // The record is built from redacted pieces; this is the last guard before it is kept.
    crate::secrets::check_not_in(&path, line.as_bytes())?;
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|e| history_write_error(&path, e))?;
    let written = file
        .write(line.as_bytes())
        .map_err(|e| history_write_error(&path, e))?;
    if written != line.len() {
        return Err(Error::in_file(
            &path,
            format!(
                "the record was only partly appended ({written} of {} bytes): the disk may be full",
                line.len()
            ),
        )
        .hint("remove the partial last line, free space, and run again"));
    }
    Ok(path)
}

fn history_write_error(path: &Path, e: std::io::Error) -> Error {
    Error::in_file(path, format!("cannot append to the history: {e}"))
        .hint("--history DIR must be a folder this user can create and write")
}

/// One suite's records, in the order they were appended.
pub struct SuiteHistory {
    pub suite: String,
    pub file: PathBuf,
    pub records: Vec<Record>,
}

/// The histories in `dir`: every `*.jsonl`, or only `suite`'s. Files by name.
pub fn read_dir(dir: &Path, suite: Option<&str>) -> Result<Vec<SuiteHistory>> {
    if !dir.is_dir() {
        return Err(Error::in_file(dir, "is not a folder of history files")
            .hint("pass the folder given to --history"));
    }
    let files = match suite {
        Some(name) => {
            let path = file_of(dir, name);
            if !path.is_file() {
                return Err(Error::in_file(&path, "no history of this suite")
                    .hint(format!("runs with --history {} write it", dir.display())));
            }
            vec![path]
        }
        None => {
            let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
                .map_err(|e| Error::io(dir, e))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "jsonl"))
                .collect();
            files.sort();
            files
        }
    };
    files.iter().map(|f| read_file(f)).collect()
}

/// One history file, bounded: a file over 64 MiB, a line over 1 MiB, a line that is not a
/// record or a record of an unknown version is an error naming file:line.
pub fn read_file(path: &Path) -> Result<SuiteHistory> {
    let bytes = crate::files::read_bounded(path, MAX_FILE_BYTES)?;
    let suite = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut records = Vec::new();
    for (i, line) in bytes.split(|b| *b == b'\n').enumerate() {
        let at = format!("{}:{}", path.display(), i + 1);
        if line.len() > MAX_LINE_BYTES {
            return Err(Error::input(format!(
                "{at}: the line is longer than {} MiB: not a history record",
                MAX_LINE_BYTES >> 20
            )));
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        records.push(parse_line(line, &at)?);
    }
    Ok(SuiteHistory {
        suite,
        file: path.to_path_buf(),
        records,
    })
}

fn parse_line(line: &[u8], at: &str) -> Result<Record> {
    let bad = |why: String| {
        Error::input(format!("{at}: {why}")).hint(
            "each line is one record chatgate appended; remove or fix the damaged line (a run killed mid-write can leave a partial one)",
        )
    };
    let value: serde_json::Value =
        serde_json::from_slice(line).map_err(|e| bad(format!("not a JSON record: {e}")))?;
    match value.get("version").and_then(serde_json::Value::as_u64) {
        Some(v) if v == u64::from(RECORD_VERSION) => {}
        Some(v) => {
            return Err(bad(format!(
                "a version {v} record; this chatgate reads version {RECORD_VERSION}"
            )))
        }
        None => return Err(bad("a record without a \"version\"".into())),
    }
    serde_json::from_value(value).map_err(|e| bad(format!("not a history record: {e}")))
}
