//! One suite's snapshot folder: accepted `<id>.snap` files and pending `<id>.snap.new` files.
//!
//! The one rule: an accepted snapshot is only ever replaced by an explicit accept, and then
//! only by a rename of the pending file over it, so at every instant `<id>.snap` is either the
//! old accepted file or the new one, never a half-written mix. Every write goes to a tempfile
//! in the same folder first (same filesystem, so the final rename is atomic); a crash leaves at
//! most a stray tempfile, which listings ignore (tempfile names start with `.`, which no prompt
//! id may).
use std::path::{Path, PathBuf};

use super::file::SnapshotFile;
use crate::error::{Error, Result};
use crate::files::valid_id;

const ACCEPTED: &str = ".snap";
const PENDING: &str = ".snap.new";

/// A snapshot file whose prompt is no longer in the suite.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Orphan {
    pub id: String,
    pub path: PathBuf,
    /// A `.snap.new` (else an accepted `.snap`).
    pub pending: bool,
}

/// The snapshot folder of one suite.
#[derive(Debug, Clone)]
pub struct Store {
    dir: PathBuf,
}

impl Store {
    /// Open (and create when missing) a snapshot folder.
    pub fn open(dir: &Path) -> Result<Store> {
        std::fs::create_dir_all(dir).map_err(|e| {
            Error::in_file(dir, format!("cannot create the snapshot folder: {e}"))
                .hint("check the permissions of the folder, or set [replay] snapshots in the suite")
        })?;
        Ok(Store {
            dir: dir.to_path_buf(),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `<dir>/<id>.snap`.
    pub fn accepted_path(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}{ACCEPTED}"))
    }

    /// `<dir>/<id>.snap.new`.
    pub fn pending_path(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}{PENDING}"))
    }

    /// The accepted snapshot of a prompt, if any.
    pub fn accepted(&self, id: &str) -> Result<Option<SnapshotFile>> {
        read_if_exists(&self.accepted_path(checked(id)?))
    }

    /// The pending snapshot of a prompt, if any.
    pub fn pending(&self, id: &str) -> Result<Option<SnapshotFile>> {
        read_if_exists(&self.pending_path(checked(id)?))
    }

    /// Write `<id>.snap.new` atomically (replacing an older pending file). Never touches
    /// `<id>.snap`. Returns the path written.
    pub fn write_pending(&self, id: &str, file: &SnapshotFile) -> Result<PathBuf> {
        let path = self.pending_path(checked(id)?);
        self.write_atomic(&path, file.render().as_bytes())?;
        Ok(path)
    }

    /// Accept a prompt's pending snapshot: drop `assertion_line` from its header, then rename
    /// `.snap.new` over `.snap`. Returns false when nothing was pending. A pending file that
    /// does not parse is refused (bad input), so a broken file never becomes the reference.
    pub fn accept(&self, id: &str) -> Result<bool> {
        let pending = self.pending_path(checked(id)?);
        let text = match read_optional(&pending)? {
            Some(t) => t,
            None => return Ok(false),
        };
        SnapshotFile::parse(&text, &pending)?;
        if let Some(stripped) = strip_assertion_line(&text) {
            self.write_atomic(&pending, stripped.as_bytes())?;
        }
        let accepted = self.accepted_path(id);
        std::fs::rename(&pending, &accepted).map_err(|e| {
            Error::in_file(
                &pending,
                format!("cannot rename to {}: {e}", accepted.display()),
            )
        })?;
        Ok(true)
    }

    /// Reject a prompt's pending snapshot (delete `.snap.new`). Returns false when nothing was
    /// pending. The accepted `.snap` is left as it is.
    pub fn reject(&self, id: &str) -> Result<bool> {
        remove_if_exists(&self.pending_path(checked(id)?))
    }

    /// A rerun matched the accepted snapshot again: a pending file left from an earlier
    /// mismatch is stale. Returns whether one was removed.
    pub fn remove_stale_pending(&self, id: &str) -> Result<bool> {
        self.reject(id)
    }

    /// Prompt ids with a pending snapshot, sorted.
    pub fn pending_ids(&self) -> Result<Vec<String>> {
        self.ids_with_suffix(PENDING)
    }

    /// Prompt ids with an accepted snapshot, sorted.
    pub fn accepted_ids(&self) -> Result<Vec<String>> {
        self.ids_with_suffix(ACCEPTED)
    }

    /// Accepted and pending snapshots of prompts not in `known_ids`, sorted by id (accepted first).
    pub fn orphans(&self, known_ids: &[String]) -> Result<Vec<Orphan>> {
        let mut out = Vec::new();
        for (pending, suffix) in [(false, ACCEPTED), (true, PENDING)] {
            for id in self.ids_with_suffix(suffix)? {
                if !known_ids.contains(&id) {
                    let path = self.dir.join(format!("{id}{suffix}"));
                    out.push(Orphan { id, path, pending });
                }
            }
        }
        out.sort_by(|a, b| (&a.id, a.pending).cmp(&(&b.id, b.pending)));
        Ok(out)
    }

    /// Delete orphaned files (what `--prune-orphans` does). Returns how many were removed.
    pub fn prune(&self, orphans: &[Orphan]) -> Result<usize> {
        let mut removed = 0;
        for o in orphans {
            if remove_if_exists(&o.path)? {
                removed += 1;
            }
        }
        Ok(removed)
    }

    fn ids_with_suffix(&self, suffix: &str) -> Result<Vec<String>> {
        let entries = std::fs::read_dir(&self.dir).map_err(|e| Error::io(&self.dir, e))?;
        let mut ids = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| Error::io(&self.dir, e))?;
            if !entry.file_type().is_ok_and(|t| t.is_file()) {
                continue;
            }
            let name = entry.file_name();
            let Some(id) = name.to_str().and_then(|n| n.strip_suffix(suffix)) else {
                continue;
            };
            // Tempfiles (`.chatgate-*.tmp`) and other strays are not prompt ids.
            if valid_id(id) {
                ids.push(id.to_string());
            }
        }
        ids.sort();
        Ok(ids)
    }

    /// Tempfile in the same folder, then a rename onto `path` (crate::files).
    fn write_atomic(&self, path: &Path, bytes: &[u8]) -> Result<()> {
        crate::files::write_atomic(path, bytes)
    }
}

/// Prompt ids become file names; refuse anything that could escape the folder.
fn checked(id: &str) -> Result<&str> {
    if valid_id(id) {
        Ok(id)
    } else {
        Err(Error::input(format!(
            "{id:?} is not a valid prompt id (1-100 letters, digits, '-', '_' or '.', not starting with '.')"
        )))
    }
}

fn read_optional(path: &Path) -> Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io(path, e)),
    }
}

fn read_if_exists(path: &Path) -> Result<Option<SnapshotFile>> {
    read_optional(path)?
        .map(|t| SnapshotFile::parse(&t, path))
        .transpose()
}

fn remove_if_exists(path: &Path) -> Result<bool> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(Error::in_file(path, format!("cannot delete: {e}"))),
    }
}

/// The file without its top-level `assertion_line:` header line (insta keeps it in pending
/// files only); `None` when it has none. Only the header is touched, byte for byte otherwise.
fn strip_assertion_line(text: &str) -> Option<String> {
    let mut out = String::with_capacity(text.len());
    let mut found = false;
    let mut separators = 0;
    for line in text.split_inclusive('\n') {
        if line.trim_end() == "---" {
            separators += 1;
        }
        if separators == 1 && line.starts_with("assertion_line:") {
            found = true;
            continue;
        }
        out.push_str(line);
    }
    found.then_some(out)
}
