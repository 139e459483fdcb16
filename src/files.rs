//! Writing files users keep (snapshots, locks, baselines, reports): atomically, and with the
//! permissions a plain `create` would give them.
//!
//! A temporary file beside the target, then a rename: a crash or a kill leaves either the old
//! file or the new one, never half of one. Temporary files are named `.chatgate-*.tmp` so a
//! stray one (SIGKILL between create and rename) is recognisable and never read as a snapshot.
//! SIGINT and SIGTERM do not leave one: `clean_up_on_signals` removes the files being written
//! before the process exits.
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use crate::error::{Error, Result};

/// Write `bytes` to `path` atomically. An existing file keeps its mode; a new one gets
/// `0666 & !umask`, as `File::create` would (tempfiles are 0600 by default, which turned
/// accepted snapshots and reports private).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    // A file that would hold the API key (a server echoed it into a reply) is not written.
    crate::secrets::check_not_in(path, bytes)?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let fail = |e: std::io::Error| Error::write(path, e);
    let mut builder = tempfile::Builder::new();
    builder.prefix(".chatgate-").suffix(".tmp");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        // The mode passed to open(2); the kernel applies the umask to it.
        builder.permissions(std::fs::Permissions::from_mode(0o666));
    }
    let (mut tmp, _registered) = {
        let mut pending = pending();
        let tmp = builder.tempfile_in(dir).map_err(fail)?;
        let path = tmp.path().to_path_buf();
        pending.push(path.clone());
        (tmp, Registered(path))
    };
    if let Ok(meta) = std::fs::metadata(path) {
        tmp.as_file()
            .set_permissions(meta.permissions())
            .map_err(fail)?;
    }
    tmp.write_all(bytes).map_err(fail)?;
    tmp.as_file().sync_all().map_err(fail)?;
    pause_for_tests();
    // Under the lock: a signal either comes before the rename (the temporary file is removed)
    // or after it (the file is whole).
    let _pending = pending();
    tmp.persist(path).map_err(|e| fail(e.error))?;
    Ok(())
}

/// Temporary files being written now, removed by the signal handler.
static PENDING: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

fn pending() -> MutexGuard<'static, Vec<PathBuf>> {
    PENDING.lock().unwrap_or_else(|e| e.into_inner())
}

/// Takes a temporary file off the pending list when its write ends, however it ends.
struct Registered(PathBuf);

impl Drop for Registered {
    fn drop(&mut self) {
        pending().retain(|p| p != &self.0);
    }
}

/// `CHATGATE_TEST_WRITE_PAUSE_MS`: a pause between writing a temporary file and renaming it,
/// so the tests can signal the process mid-write. Not for users.
fn pause_for_tests() {
    if let Some(ms) = std::env::var("CHATGATE_TEST_WRITE_PAUSE_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        std::thread::sleep(std::time::Duration::from_millis(ms.min(60_000)));
    }
}

/// Child process groups to kill on the way out (`chatgate client-probe`'s client runs).
static GROUPS: Mutex<Vec<i32>> = Mutex::new(Vec::new());

fn groups() -> MutexGuard<'static, Vec<i32>> {
    GROUPS.lock().unwrap_or_else(|e| e.into_inner())
}

/// A child's process group, killed (SIGKILL) when this is dropped, and by the signal handler
/// of [`clean_up_on_signals`] if chatgate is interrupted first.
pub struct ProcessGroup(i32);

impl ProcessGroup {
    pub fn track(pgid: i32) -> ProcessGroup {
        groups().push(pgid);
        ProcessGroup(pgid)
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        kill_group(self.0);
        groups().retain(|g| *g != self.0);
    }
}

fn kill_group(pgid: i32) {
    #[cfg(unix)]
    // SAFETY: kill(2) on a process group chatgate created for a child; a group that is gone
    // already is an ESRCH, ignored.
    unsafe {
        libc::kill(-pgid, libc::SIGKILL);
    }
}

/// On SIGINT or SIGTERM (and SIGHUP), remove the temporary files being written and exit with
/// 128 + the signal's number, as a shell reports a killed command. For the commands that run to
/// completion; `serve` and `proxy` shut down gracefully on their own.
pub fn clean_up_on_signals() {
    #[cfg(unix)]
    {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP]) else {
            return;
        };
        std::thread::spawn(move || {
            if let Some(sig) = signals.forever().next() {
                let pending = pending();
                for p in pending.iter() {
                    let _ = std::fs::remove_file(p);
                }
                for g in groups().iter() {
                    kill_group(*g);
                }
                std::process::exit(128 + sig);
            }
        });
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn new_files_follow_the_umask_and_existing_ones_keep_their_mode() {
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("plain");
        std::fs::write(&plain, b"x").unwrap();
        let ours = dir.path().join("ours");
        write_atomic(&ours, b"y").unwrap();
        assert_eq!(mode(&ours), mode(&plain), "same mode as File::create");
        assert_eq!(std::fs::read(&ours).unwrap(), b"y");

        std::fs::set_permissions(&ours, std::fs::Permissions::from_mode(0o640)).unwrap();
        write_atomic(&ours, b"z").unwrap();
        assert_eq!(mode(&ours), 0o640, "an existing file keeps its mode");
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left.len(), 2, "no temporary file left: {left:?}");
    }

    #[test]
    fn a_write_error_says_write_and_names_the_file() {
        let e = write_atomic(Path::new("/nonexistent-dir/x.snap"), b"x").unwrap_err();
        let s = e.to_string();
        assert!(
            s.contains("/nonexistent-dir/x.snap") && s.contains("cannot write"),
            "{s}"
        );
    }
}

/// Read a whole file of at most `max` bytes; a larger one is refused by name instead of being
/// read into memory.
pub fn read_bounded(path: &Path, max: u64) -> Result<Vec<u8>> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut bytes = Vec::new();
    file.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io(path, e))?;
    if bytes.len() as u64 > max {
        return Err(Error::in_file(
            path,
            format!("is larger than {} MiB: refused", max >> 20),
        ));
    }
    Ok(bytes)
}
/// A name that becomes a file or folder name (prompt ids, suite and baseline names): portable,
/// and never a path that leaves its folder.
pub fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 100
        && !id.starts_with('.')
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}
