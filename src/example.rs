//! `chatgate example DIR`: the repository's smoke suite, its tiny trained chat model, its lock and
//! its reviewed snapshots, carried inside the binary. Whoever installed chatgate from a wheel,
//! crates.io or a release archive has no clone; this writes one working project to try the gate on
//! (and is what CI runs from a freshly installed wheel).
//!
//! The files are the repository's own, byte for byte, at the same relative paths, so the suite's
//! paths (`../models/tiny-chat`, `../snapshots/smoke`) hold and its lock matches the weights.
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::files::write_atomic;

/// One embedded file: its path under the example's root, and its bytes.
pub struct File {
    pub path: &'static str,
    pub bytes: &'static [u8],
}

macro_rules! embed {
    ($($path:literal),* $(,)?) => {
        &[$(File { path: $path, bytes: include_bytes!(concat!("../", $path)) }),*]
    };
}

/// Everything `chatgate gate suites/smoke.toml` reads (Cargo.toml `include` keeps these in the
/// published crate; `tests/it/example_project.rs` proves the list is complete by running it).
pub const FILES: &[File] = embed![
    "suites/smoke.toml",
    "suites/smoke.lock.json",
    "suites/smoke.prompts.jsonl",
    "models/tiny-chat/config.json",
    "models/tiny-chat/generation_config.json",
    "models/tiny-chat/model.gguf",
    "models/tiny-chat/model.safetensors",
    "models/tiny-chat/sft.jsonl",
    "models/tiny-chat/special_tokens_map.json",
    "models/tiny-chat/tokenizer.json",
    "models/tiny-chat/tokenizer_config.json",
    "snapshots/smoke/add.snap",
    "snapshots/smoke/capital.snap",
    "snapshots/smoke/count.snap",
    "snapshots/smoke/greet-alice.snap",
    "snapshots/smoke/hello.snap",
    "snapshots/smoke/moo.snap",
    "snapshots/smoke/multi-turn.snap",
    "snapshots/smoke/opposite.snap",
    "snapshots/smoke/sampled-seeded.snap",
    "snapshots/smoke/sky.snap",
    "snapshots/smoke/stop-string.snap",
    "snapshots/smoke/system-prompt.snap",
    "snapshots/smoke/latency/candle.json",
    "snapshots/smoke/latency/http.json",
];

/// Write the example project under `dir` (created if missing). Nothing is written when any of
/// its files already exists: a user's own file of the same name is never replaced.
pub fn write(dir: &Path) -> Result<Vec<PathBuf>> {
    let targets: Vec<PathBuf> = FILES.iter().map(|f| dir.join(f.path)).collect();
    let existing: Vec<&PathBuf> = targets.iter().filter(|p| p.exists()).collect();
    if !existing.is_empty() {
        return Err(Error::in_file(
            existing[0],
            format!(
                "already exists ({} of the example's {} files are there); nothing was written",
                existing.len(),
                FILES.len()
            ),
        )
        .hint("choose an empty or new directory: chatgate example DIR"));
    }
    for (file, target) in FILES.iter().zip(&targets) {
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| Error::in_file(parent, format!("cannot create the directory: {e}")))?;
        }
        write_atomic(target, file.bytes)?;
    }
    Ok(targets)
}
