//! Boundary 1, the checkpoint: are these the weights we trained?
pub mod drift;
pub mod gguf;
pub mod long_reply;
pub mod online;
use crate::chain::run::context::Context;
use crate::chain::run::lock::short;
use crate::error::Result;
use crate::verdict::checks;
use crate::verdict::{Finding, Severity};

pub fn check(ctx: &Context) -> Result<Vec<Finding>> {
    let mut out = vec![presence(ctx)];
    out.extend(shards(ctx));
    out.push(weights_vs_lock(ctx)?);
    Ok(out)
}

/// No weights here, and a recorded reference bound to the lock: the served weights are checked
/// by their behaviour against the recording (chain/recording.rs), not by hash.
fn weightless_with_recording(ctx: &Context) -> bool {
    ctx.model.weights.is_empty() && ctx.recording.is_some()
}

const BEHAVIOURALLY: &str = "no weight files here: the served weights are checked by their behaviour against the recorded reference (checkpoint.fingerprint), not by hash";

fn presence(ctx: &Context) -> Finding {
    let n = ctx.model.weights.len();
    if weightless_with_recording(ctx) {
        return Finding::new(
            checks::CHECKPOINT_WEIGHTS_PRESENT,
            Severity::Info,
            BEHAVIOURALLY,
        )
        .with("dir", ctx.model.root.display());
    }
    if n == 0 {
        return Finding::new(
            checks::CHECKPOINT_WEIGHTS_PRESENT,
            Severity::Warning,
            "no weight files (*.safetensors, *.gguf) in the model directory",
        )
        .with("dir", ctx.model.root.display());
    }
    let params: u64 = ctx.model.weights.iter().map(|w| w.parameters).sum();
    Finding::pass(
        checks::CHECKPOINT_WEIGHTS_PRESENT,
        format!("{n} weight file(s), {params} parameters"),
    )
}

fn shards(ctx: &Context) -> Option<Finding> {
    let index = ctx.model.shard_index.as_ref()?;
    if weightless_with_recording(ctx) {
        return None;
    }
    Some(if index.missing_shards.is_empty() {
        Finding::pass(
            checks::CHECKPOINT_SHARDS,
            "every shard named in the index is present",
        )
    } else {
        Finding::new(
            checks::CHECKPOINT_SHARDS,
            Severity::Error,
            "the shard index names files that are not in the directory",
        )
        .with("index", index.path.display())
        .with("missing", index.missing_shards.join(", "))
    })
}

fn weights_vs_lock(ctx: &Context) -> Result<Finding> {
    let Some(lock) = &ctx.lock else {
        return Ok(Finding::new(
            checks::CHECKPOINT_WEIGHTS_HASH,
            Severity::Warning,
            "no lock file: the weights' identity is not pinned",
        )
        .with("lock", ctx.suite.lock_path.display())
        .with(
            "to pin",
            format!("chatgate lock {}", ctx.suite.path.display()),
        ));
    };
    if weightless_with_recording(ctx) {
        return Ok(Finding::new(
            checks::CHECKPOINT_WEIGHTS_HASH,
            Severity::Info,
            BEHAVIOURALLY,
        )
        .with("locked", short(&lock.weights.total)));
    }
    // Locks made before GGUF tensor data and metadata were hashed apart hold whole-file
    // hashes: compare like with like, and say how to move on.
    let whole_file_lock = lock.hashes_whole_gguf_files();
    let now = if whole_file_lock {
        ctx.model.hash_weights_whole_files()?
    } else {
        ctx.model.hash_weights()?
    };
    let relock = format!("chatgate lock --update {}", ctx.suite.path.display());
    if now.total == lock.weights.total {
        let mut f = Finding::pass(
            checks::CHECKPOINT_WEIGHTS_HASH,
            format!("weights match the lock ({})", short(&now.total)),
        );
        if whole_file_lock {
            f = f.with("note", format!("this lock hashes whole GGUF files; `{relock}` pins the tensor data apart from the metadata, so a metadata edit is blamed on its own boundary"));
        }
        return Ok(f);
    }
    let mut f = Finding::new(
        checks::CHECKPOINT_WEIGHTS_HASH,
        Severity::Error,
        "the weights are not the ones in the lock: another checkpoint is being served",
    )
    .with("locked", short(&lock.weights.total))
    .with("found", short(&now.total));
    if whole_file_lock {
        f = f.with("note", format!("this lock hashes whole GGUF files, so a metadata-only edit changes it too; after review, `{relock}` pins tensor data and metadata apart"));
    }
    for line in crate::chain::run::lock::diff(
        &lock.weights_only(),
        &crate::chain::run::lock::Lock {
            weights: now,
            ..lock.weights_only()
        },
    ) {
        f = f.with("changed", line);
    }
    Ok(f)
}
