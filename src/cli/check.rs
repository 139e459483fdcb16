//! `chatgate check` and `chatgate lock`.
use serde_json::json;

use super::{CheckArgs, Format, LockArgs};
use crate::artifacts::ModelDir;
use crate::chain::{self, lock::Lock, Context};
use crate::error::Result;
use crate::report;
use crate::suite::Suite;

pub fn run_check(a: CheckArgs) -> Result<i32> {
    let suite = Suite::load(&a.suite)?;
    let ctx = Context::load(suite)?;
    let findings = chain::run_offline(&ctx, true)?;
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
    let template = chain::serving_template(&suite, &model)?;
    let new = Lock::of(&model, template.as_ref())?;
    let path = &suite.lock_path;
    match Lock::read(path)? {
        Some(old) if old == new => {
            println!("{}: up to date", path.display());
            return Ok(0);
        }
        Some(old) => {
            let changes = chain::lock::diff(&old, &new);
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
        chain::lock::short(&new.weights.total),
        new.weights.files.len()
    );
    Ok(0)
}
