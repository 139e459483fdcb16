//! The replay's judges: the verdict over the replayed prompts' comparisons with their reviewed
//! snapshots (`replay.snapshots`), the replies set aside for their date (`replay.date`), and
//! snapshots no prompt owns (`replay.orphans`). The gate's replay stage sends the prompts and
//! compares each reply (`gate::replay`); a sharded run's merge judges every shard's results here
//! too.
use crate::error::Result;
use crate::snapshot::Store;
use crate::verdict::{checks, Finding, PromptResult, PromptStatus, Severity};

/// How a prompt result says its comparison was set aside for the date.
pub const DATE_ASIDE: &str = "date set aside: ";

/// The prompts whose replies were not judged because the prompt's date differs from the
/// snapshot's, named once (info: a day passing is not a regression, but nothing was checked).
pub fn dated_finding(results: &[PromptResult], what: &str, hint: Option<&str>) -> Option<Finding> {
    let aside: Vec<&PromptResult> = results
        .iter()
        .filter(|r| r.detail.starts_with(DATE_ASIDE))
        .collect();
    let first = aside.first()?;
    let mut f = Finding::new(
        checks::REPLAY_DATE,
        Severity::Info,
        format!(
            "{} of {} replies differ from snapshots made on another day and were not judged: the template prints the date ({})",
            aside.len(),
            results.len(),
            what
        ),
    )
    .with("first", format!("{}: {}", first.id, &first.detail[DATE_ASIDE.len()..]));
    if let Some(h) = hint {
        f = f.with("hint", h);
    }
    Some(f)
}

/// `chosen` is how many prompts the suite replays: fewer results mean the run stopped early.
/// The replay verdict over prompt results (one run's, or every shard's merged).
pub fn snapshot_findings(results: &[PromptResult], chosen: usize) -> Vec<Finding> {
    let mut out = Vec::new();
    let bad: Vec<&PromptResult> = results
        .iter()
        .filter(|r| r.status != PromptStatus::Pass)
        .collect();
    if bad.is_empty() {
        out.push(Finding::pass(
            checks::REPLAY_SNAPSHOTS,
            format!("{} prompt(s) match their accepted snapshots", results.len()),
        ));
    } else {
        let errors = bad
            .iter()
            .filter(|r| r.status == PromptStatus::Error)
            .count();
        let message = if results.len() < chosen {
            format!(
                "the replay stopped after {} of {chosen} prompt(s) (the target stopped answering): {} of them failed; {} not replayed",
                results.len(),
                bad.len(),
                chosen - results.len()
            )
        } else if errors == bad.len() {
            format!("{errors} of {chosen} prompt(s) got no reply")
        } else {
            format!("{} of {chosen} prompt(s) differ from their accepted snapshots (pending .snap.new files wait for review: chatgate review)", bad.len())
        };
        let mut f = Finding::new(checks::REPLAY_SNAPSHOTS, Severity::Error, message);
        for r in bad.iter().take(8) {
            f = f.with("prompt", format!("{} [{:?}] {}", r.id, r.status, r.detail));
        }
        out.push(f);
    }
    out
}

/// Snapshots that belong to no prompt of the suite.
pub fn orphans(store: &Store, known: &[String]) -> Result<Option<Finding>> {
    let orphans = store.orphans(known)?;
    if orphans.is_empty() {
        return Ok(None);
    }
    Ok(Some(
        Finding::new(
            checks::REPLAY_ORPHANS,
            Severity::Warning,
            format!(
                "{} snapshot(s) belong to no prompt of the suite",
                orphans.len()
            ),
        )
        .with(
            "files",
            orphans
                .iter()
                .map(|o| o.path.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
        )
        .with(
            "hint",
            "remove them with chatgate accept --prune-orphans, or restore the prompts",
        ),
    ))
}
