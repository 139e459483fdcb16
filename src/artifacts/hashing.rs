//! Content hashes of weight files: streamed sha256 (sha2 picks SHA-NI at run time when the
//! CPU has it), with reading and hashing overlapped on large files.
use std::fs::File;
use std::io::{ErrorKind, Read};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;

use sha2::{Digest, Sha256};

use super::{FileHash, WeightFile, WeightsIdentity};
use crate::error::{Error, Result};

/// Read size. Large reads keep syscall overhead negligible next to hashing.
const CHUNK: usize = 2 << 20;
/// Files at least this large are read on a second thread while the first one hashes.
const PIPELINE_MIN: u64 = 8 << 20;
/// Buffers in flight between the reader and the hasher.
const BUFFERS: usize = 3;

/// Values this process derived from files, by a sha256 of what they were derived from: the few
/// most recent, for work a run repeats on the same files (a gate opens its model folder several
/// times). Keyed by content, a file rewritten in place is derived again.
pub struct ByContent<T>(std::sync::Mutex<Vec<(String, T)>>);

impl<T: Clone> ByContent<T> {
    /// How many are kept: a process works on one or two models.
    const KEPT: usize = 4;

    pub const fn new() -> Self {
        ByContent(std::sync::Mutex::new(Vec::new()))
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, Vec<(String, T)>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A copy of what was kept under `sha256`.
    pub fn get(&self, sha256: &str) -> Option<T> {
        let entries = self.entries();
        entries
            .iter()
            .find(|(k, _)| k == sha256)
            .map(|(_, v)| v.clone())
    }

    /// Keep a copy of `value` under `sha256`, forgetting the oldest when full.
    pub fn keep(&self, sha256: &str, value: &T) {
        let mut entries = self.entries();
        if entries.iter().any(|(k, _)| k == sha256) {
            return;
        }
        if entries.len() >= Self::KEPT {
            drop(entries.remove(0));
        }
        entries.push((sha256.to_string(), value.clone()));
    }
}

impl<T: Clone> Default for ByContent<T> {
    fn default() -> Self {
        Self::new()
    }
}

/// Lowercase hex sha256 of bytes in memory.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Fill `buf` as far as the file allows; returns the byte count (0 at end of file).
fn fill(file: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Streamed sha256 of a file, as lowercase hex (what `sha256sum` prints).
pub fn sha256_file(path: &Path) -> Result<String> {
    sha256_file_from(path, 0)
}

/// Streamed sha256 of a file's bytes from `offset` to the end.
pub fn sha256_file_from(path: &Path, offset: u64) -> Result<String> {
    use std::io::{Seek, SeekFrom};
    let mut file = File::open(path).map_err(|e| Error::io(path, e))?;
    let len = file
        .metadata()
        .map_err(|e| Error::io(path, e))?
        .len()
        .saturating_sub(offset);
    file.seek(SeekFrom::Start(offset))
        .map_err(|e| Error::io(path, e))?;
    let digest = if len >= PIPELINE_MIN {
        hash_pipelined(file).map_err(|e| Error::io(path, e))?
    } else {
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; CHUNK.min(len as usize + 1).max(4096)];
        loop {
            let n = fill(&mut file, &mut buf).map_err(|e| Error::io(path, e))?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
        }
        hasher.finalize()
    };
    Ok(hex::encode(digest))
}

/// One thread reads into a small ring of buffers while this one hashes.
fn hash_pipelined(mut file: File) -> std::io::Result<sha2::digest::Output<Sha256>> {
    let (full_tx, full_rx) = mpsc::sync_channel::<std::io::Result<(Vec<u8>, usize)>>(BUFFERS);
    let (free_tx, free_rx) = mpsc::sync_channel::<Vec<u8>>(BUFFERS);
    for _ in 0..BUFFERS {
        // The channel has room for BUFFERS items and its receiver is alive: this cannot fail.
        let _ = free_tx.send(vec![0u8; CHUNK]);
    }
    std::thread::scope(|s| {
        s.spawn(move || {
            while let Ok(mut buf) = free_rx.recv() {
                match fill(&mut file, &mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        if full_tx.send(Ok((buf, n))).is_err() {
                            break;
                        }
                    }
                    Err(e) => {
                        let _ = full_tx.send(Err(e));
                        break;
                    }
                }
            }
            // Dropping full_tx ends the hasher's loop.
        });
        let mut hasher = Sha256::new();
        while let Ok(item) = full_rx.recv() {
            let (buf, n) = item?;
            hasher.update(&buf[..n]);
            // After end of file the reader is gone and the buffer is not needed; keep
            // draining the buffers already read.
            let _ = free_tx.send(buf);
        }
        Ok(hasher.finalize())
    })
}

/// sha256 over the lines "name\tsize\tsha256\n" of `files`, sorted by name.
pub fn total_hash(files: &[FileHash]) -> String {
    let mut sorted: Vec<&FileHash> = files.iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    let mut hasher = Sha256::new();
    for f in sorted {
        hasher.update(format!("{}\t{}\t{}\n", f.name, f.size, f.sha256).as_bytes());
    }
    hex::encode(hasher.finalize())
}

/// Hash every weight file (several at once when the machine has the cores): a GGUF's tensor
/// data only, unless `whole_files` (the identity old locks hold).
pub fn hash_files(weights: &[WeightFile], whole_files: bool) -> Result<WeightsIdentity> {
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(weights.len())
        .max(1);
    let next = AtomicUsize::new(0);
    let mut results: Vec<Option<Result<FileHash>>> = (0..weights.len()).map(|_| None).collect();
    let work = |out: &mut Vec<(usize, Result<FileHash>)>| loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        let Some(w) = weights.get(i) else { break };
        let r = (|| {
            let len = std::fs::metadata(&w.path)
                .map_err(|e| Error::io(&w.path, e))?
                .len();
            let offset = w.data_offset.filter(|_| !whole_files);
            let from = offset.unwrap_or(0).min(len);
            Ok(FileHash {
                name: w.name.clone(),
                size: len - from,
                sha256: sha256_file_from(&w.path, from)?,
                scope: offset.map(|_| "tensor-data".to_string()),
                metadata: None,
            })
        })();
        out.push((i, r));
    };
    if threads <= 1 {
        let mut out = Vec::new();
        work(&mut out);
        for (i, r) in out {
            results[i] = Some(r);
        }
    } else {
        let outs: Vec<Vec<(usize, Result<FileHash>)>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|_| {
                    s.spawn(|| {
                        let mut out = Vec::new();
                        work(&mut out);
                        out
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_default())
                .collect()
        });
        for (i, r) in outs.into_iter().flatten() {
            results[i] = Some(r);
        }
    }
    let mut files = Vec::with_capacity(weights.len());
    for (i, r) in results.into_iter().enumerate() {
        match r {
            Some(r) => files.push(r?),
            None => {
                return Err(
                    Error::in_file(&weights[i].path, "hashing this file did not finish")
                        .hint("run the command again"),
                )
            }
        }
    }
    files.sort_by(|a, b| a.name.cmp(&b.name));
    let total = total_hash(&files);
    Ok(WeightsIdentity { files, total })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn by_content_gives_back_what_was_kept_and_forgets_the_oldest_when_full() {
        let kept: ByContent<u32> = ByContent::new();
        assert_eq!(kept.get("a"), None);
        kept.keep("a", &1);
        kept.keep("a", &99); // the first value under a key stays
        assert_eq!(kept.get("a"), Some(1));
        for (i, k) in ["b", "c", "d", "e"].into_iter().enumerate() {
            kept.keep(k, &(i as u32 + 2));
        }
        assert_eq!(kept.get("a"), None, "the oldest of five went");
        assert_eq!(kept.get("b"), Some(2));
        assert_eq!(kept.get("e"), Some(5));
    }
}
