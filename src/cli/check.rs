//! `chatgate check` and `chatgate lock`.
use serde_json::json;

use super::{CheckArgs, Format, LockArgs};
use crate::artifacts::ModelDir;
use crate::chain::run::context::Context;
use crate::chain::run::lock::Lock;
use crate::chain::run::recording::{self, Recording};
use crate::error::Result;
use crate::report;
use crate::suite::Suite;

pub fn run_check(a: CheckArgs) -> Result<i32> {
    let mut suite = Suite::load(&a.suite)?;
    if let Some(stack) = a.stack {
        suite.file.target.get_or_insert_with(Default::default).stack = Some(stack);
    }
    let ctx = Context::load(suite)?;
    let progress = a.progress.wanted(a.format == Format::Text);
    let findings = crate::chain::run::offline::run_offline(&ctx, progress)?;
    match a.format {
        Format::Json => {
            let subject = json!({"suite": ctx.suite.name, "suite_file": ctx.suite.path, "model_dir": ctx.model.root});
            println!(
                "{}",
                serde_json::to_string_pretty(&report::json(subject, &findings)).unwrap_or_default()
            );
        }
        Format::Text => {
            let title = format!(
                "chatgate check {} — model {}",
                ctx.suite.path.display(),
                ctx.model.root.display()
            );
            print!(
                "{}",
                report::terminal(&title, &findings, report::use_colour())
            );
        }
    }
    Ok(if findings.has_errors() { 1 } else { 0 })
}

pub fn run_lock(a: LockArgs) -> Result<i32> {
    let suite = Suite::load(&a.suite)?;
    let model = ModelDir::open(&suite.model_dir)?;
    let template = crate::chain::run::context::serving_template(&suite, &model)?;
    let new = Lock::of(&model, template.as_ref())?;
    let path = &suite.lock_path;
    match Lock::read(path)? {
        Some(old) if old == new => {
            println!("{}: up to date", path.display());
            if a.fingerprint {
                return record_fingerprint(&suite, &new, a.update);
            }
            return Ok(0);
        }
        Some(old) => {
            let changes = crate::chain::run::lock::diff(&old, &new);
            println!(
                "{}: the suite now serves something else than the lock says:",
                path.display()
            );
            for c in &changes {
                println!("  {c}");
            }
            if !a.update {
                eprintln!("chatgate: the lock was NOT changed; rerun with --update to accept the new identity");
                return Ok(1);
            }
        }
        None => {}
    }
    new.write(path)?;
    println!(
        "{}: written (weights {}, {} file(s))",
        path.display(),
        crate::chain::run::lock::short(&new.weights.total),
        new.weights.files.len()
    );
    if a.fingerprint {
        return record_fingerprint(&suite, &new, a.update);
    }
    Ok(0)
}

/// `lock --fingerprint`: record the reference beside the lock; a recording that differs is
/// replaced only with --update.
fn record_fingerprint(suite: &Suite, lock: &Lock, update: bool) -> Result<i32> {
    let path = recording::path_for(&suite.lock_path);
    let new = super::runtime()?.block_on(crate::gate::fingerprint::record(suite, lock))?;
    let old = std::fs::read_to_string(&path)
        .ok()
        .and_then(|t| serde_json::from_str::<Recording>(&t).ok());
    if let Some(old) = &old {
        if old.same_reference(&new) {
            println!("{}: up to date", path.display());
            return Ok(0);
        }
        if !update {
            println!(
                "{}: the reference now answers otherwise than the recording ({})",
                path.display(),
                match old.bound_to(lock) {
                    Ok(()) => "same lock; other replies or settings".to_string(),
                    Err(why) => why,
                }
            );
            eprintln!("chatgate: the recording was NOT changed; rerun with --update to accept the new one");
            return Ok(1);
        }
    }
    new.write(&path)?;
    let tokens: usize = new.probes.iter().map(|p| p.token_ids.len()).sum();
    println!(
        "{}: recorded {} probe(s), {tokens} reply tokens with their top-{} logprobs, by {} ({})",
        path.display(),
        new.probes.len(),
        new.settings.top_logprobs,
        new.computed_by.engine,
        new.computed_by.dtype
    );
    Ok(0)
}
