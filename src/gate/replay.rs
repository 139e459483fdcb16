//! The replay stage: every prompt goes to the target once (not streamed), its reply is compared
//! with the accepted snapshot under the prompt's comparator, and a change becomes a pending
//! `.snap.new` beside the accepted file — never over it. `--update` is the explicit accept.
use std::collections::BTreeMap;

use crate::chain::run::probes::Determinism;
use crate::endpoint::spec::{Target, TargetSpec};
use crate::error::Result;
use crate::replay::Prompt;
use crate::snapshot::{self, SnapshotBody, SnapshotFile, SnapshotHeader, Store};
use crate::suite::Suite;
use crate::verdict::{checks, Finding, Severity};
use crate::verdict::{PromptResult, PromptStatus};

use crate::chain::replay as judge;

use super::progress::Progress;
use super::shard::Shard;

/// Top logprobs kept per token in a snapshot (enough to tell drift from a change).
const SNAPSHOT_LOGPROB_TOKENS: usize = 64;

pub struct Replayed {
    pub findings: Vec<Finding>,
    pub prompts: Vec<PromptResult>,
    /// The target stopped answering: the report ends here with exit 3.
    pub unreachable: bool,
}

#[allow(clippy::too_many_arguments)]
pub async fn run(
    suite: &Suite,
    spec: &TargetSpec,
    target: &Target,
    set: &super::PromptSet,
    determinism: &BTreeMap<String, Determinism>,
    dates: &super::dates::DatePlan,
    update: bool,
    shard: Option<Shard>,
    progress: &Progress,
) -> Result<Replayed> {
    let all_ids = &set.all_ids;
    // A shard replays its own prompts; the merge judges them all together.
    let prompts: Vec<&Prompt> = set
        .chosen
        .iter()
        .enumerate()
        .filter(|(i, _)| shard.is_none_or(|s| s.owns(*i)))
        .map(|(_, p)| p)
        .collect();
    let store = Store::open(&suite.snapshot_dir)?;
    let identity = model_identity(suite);
    let source = suite.path.display().to_string();
    let target_label = spec.display();
    progress.stage("replay", prompts.len() as u64);
    let mut out = Replayed {
        findings: Vec::new(),
        prompts: Vec::new(),
        unreachable: false,
    };
    let mut refused_tools: Vec<String> = Vec::new();
    for &prompt in &prompts {
        progress.step(&prompt.id);
        let class = determinism.get(&prompt.id).map(|d| d.name().to_string());
        let file_for = |rec: &crate::exchange::Record| {
            let mut header = SnapshotHeader::for_prompt(
                &source,
                &suite.name,
                prompt,
                Some(&target_label),
                Some(&identity),
            );
            header.info.template_date = dates.record();
            SnapshotFile {
                header,
                body: body_of(prompt, rec),
            }
        };
        let unchanged = |rec: &crate::exchange::Record| unchanged(&store, prompt, &file_for(rec));
        let rec = match reply(target, prompt, update, unchanged).await {
            Ok(r) => r,
            Err(e) if refuses_tools(suite, prompt, &e) => {
                // A server started without a tool-call parser refuses every request that
                // offers tools (vLLM without --enable-auto-tool-choice): server.tool-call-parse
                // judges that, as a warning unless the client relies on tool calls. Replaying
                // the prompt would only say it again as a failed prompt.
                refused_tools.push(prompt.id.clone());
                continue;
            }
            Err(e) => {
                out.unreachable |= e.unreachable();
                out.prompts.push(PromptResult {
                    id: prompt.id.clone(),
                    status: PromptStatus::Error,
                    comparator: prompt.compare.describe(),
                    determinism: class,
                    detail: e.to_string(),
                    diff: None,
                });
                if out.unreachable {
                    break;
                }
                continue;
            }
        };
        let file = file_for(&rec);
        out.prompts
            .push(compare_one(&store, prompt, file, class, update, dates)?);
    }
    out.findings = judge::snapshot_findings(&out.prompts, prompts.len());
    if !refused_tools.is_empty() {
        out.findings.push(Finding::new(
            checks::REPLAY_SNAPSHOTS,
            Severity::Info,
            format!(
                "not replayed: {} (the server refuses requests that offer tools; judged at server.tool-call-parse)",
                refused_tools.join(", ")
            ),
        ));
    }
    out.findings.extend(judge::dated_finding(
        &out.prompts,
        &dates.what,
        dates.hint.as_deref(),
    ));
    // Orphans are a property of the whole folder: shard 1 reports them, once.
    if shard.is_none_or(|s| s.runs_chain()) {
        out.findings.extend(judge::orphans(&store, all_ids)?);
    }
    Ok(out)
}

/// The prompt's reply. A server is first asked without logprobs when only the text is judged
/// and nothing is being accepted: logprobs cost real time on some stacks (llama-cpp-python sorts
/// the whole vocabulary in Python for each token), and a reply that matches its snapshot needs
/// none. One that does not is asked again with them, so the pending snapshot a person reviews
/// and the report's divergence analysis carry them as always.
/// A prompt that offers tools, refused with a 4xx by a server without a tool-call parser, in
/// a suite whose client does not rely on tool calls.
fn refuses_tools(suite: &Suite, prompt: &Prompt, e: &crate::endpoint::openai::CallError) -> bool {
    use crate::endpoint::openai::CallError;
    prompt.tools.as_ref().is_some_and(|t| !t.is_empty())
        && matches!(e, CallError::Status { status, .. } if (400..500).contains(status))
        && !suite.client_relies_on("tool_calls")
}

async fn reply(
    target: &Target,
    prompt: &Prompt,
    update: bool,
    unchanged: impl Fn(&crate::exchange::Record) -> bool,
) -> std::result::Result<crate::exchange::Record, crate::endpoint::openai::CallError> {
    let lazy = !update && target.http().is_some() && !prompt.compare.reads_ids();
    if !lazy {
        return target.chat(&prompt.request()).await;
    }
    let rec = target.chat(&prompt.request_text()).await?;
    if unchanged(&rec) {
        return Ok(rec);
    }
    target.chat(&prompt.request()).await
}

/// Whether `new` passes against the accepted snapshot, for the same question: nothing to write
/// and nothing to explain.
fn unchanged(store: &Store, prompt: &Prompt, new: &SnapshotFile) -> bool {
    let Ok(Some(accepted)) = store.accepted(&prompt.id) else {
        return false;
    };
    prompt.compare.compare(&accepted.body, &new.body).pass
        && QuestionChange::of(&accepted, new) == QuestionChange::Same
}

/// The snapshot body of a reply. After a stop string cuts a reply, which generated ids a server
/// still reports is its own choice (candle keeps the ids that formed the stop string, llama.cpp
/// drops them): such a prompt is compared on its text, not its ids.
fn body_of(prompt: &Prompt, rec: &crate::exchange::Record) -> SnapshotBody {
    let mut body = SnapshotBody::from_record(rec, SNAPSHOT_LOGPROB_TOKENS);
    if !prompt.settings.stop.is_empty() {
        body.token_ids = None;
    }
    body
}

fn compare_one(
    store: &Store,
    prompt: &Prompt,
    new: SnapshotFile,
    determinism: Option<String>,
    update: bool,
    dates: &super::dates::DatePlan,
) -> Result<PromptResult> {
    let comparator = prompt.compare.describe();
    let result = |status, detail: String, diff| PromptResult {
        id: prompt.id.clone(),
        status,
        comparator: comparator.clone(),
        determinism: determinism.clone(),
        detail,
        diff,
    };
    // A server that echoes the API key must not get it into a file someone accepts.
    if crate::secrets::contains(&new.render()) {
        return Ok(result(
            PromptStatus::Error,
            "the reply contains the API key (the server echoed it): no snapshot written".into(),
            None,
        ));
    }
    let Some(accepted) = store.accepted(&prompt.id)? else {
        if update {
            accept_now(store, &prompt.id, &new)?;
            return Ok(result(
                PromptStatus::Pass,
                "new snapshot accepted (--update)".into(),
                None,
            ));
        }
        store.write_pending(&prompt.id, &new)?;
        return Ok(result(
            PromptStatus::New,
            "no accepted snapshot yet: review the pending .snap.new".into(),
            None,
        ));
    };
    let cmp = prompt.compare.compare(&accepted.body, &new.body);
    let question = QuestionChange::of(&accepted, &new);
    if cmp.pass && question == QuestionChange::Same {
        store.remove_stale_pending(&prompt.id)?;
        return Ok(result(PromptStatus::Pass, cmp.detail, None));
    }
    // The prompt carries another day than the snapshot's: a changed reply is not judged (a
    // day passing is not a regression), and nothing waits for review.
    if !update && question == QuestionChange::Same {
        if let Some(why) = dates.aside(accepted.header.info.template_date.as_deref()) {
            store.remove_stale_pending(&prompt.id)?;
            return Ok(result(
                PromptStatus::Pass,
                format!(
                    "{}{why}; the reply differs and is not judged ({})",
                    judge::DATE_ASIDE,
                    cmp.detail
                ),
                None,
            ));
        }
    }
    if cmp.pass && question == QuestionChange::NotRecorded {
        if update {
            // Record the prompt in the accepted file; the reviewed reply stays as it was.
            let recorded = SnapshotFile {
                header: new.header.clone(),
                body: accepted.body.clone(),
            };
            accept_now(store, &prompt.id, &recorded)?;
            return Ok(result(
                PromptStatus::Pass,
                format!("{} (prompt recorded in the snapshot: --update)", cmp.detail),
                None,
            ));
        }
        store.remove_stale_pending(&prompt.id)?;
        return Ok(result(
            PromptStatus::Pass,
            format!(
                "{} (the snapshot predates prompt recording: `chatgate gate --update` records it)",
                cmp.detail
            ),
            None,
        ));
    }
    let mut diff = String::new();
    let mut detail = cmp.detail.clone();
    if let QuestionChange::Changed { accepted: a, now } = &question {
        detail = format!(
            "the prompt changed since the snapshot was accepted; the reply {}: {}",
            if cmp.pass {
                "still passes"
            } else {
                "differs too"
            },
            cmp.detail
        );
        diff.push_str("prompt:\n");
        diff.push_str(&snapshot::diff_text(a, now));
        diff.push_str("reply:\n");
    }
    diff.push_str(&snapshot::diff_text(
        &accepted.body.render_reviewable(),
        &new.body.render_reviewable(),
    ));
    if update {
        accept_now(store, &prompt.id, &new)?;
        return Ok(result(
            PromptStatus::Pass,
            format!("changed and accepted (--update): {detail}"),
            Some(diff),
        ));
    }
    store.write_pending(&prompt.id, &new)?;
    Ok(result(PromptStatus::Changed, detail, Some(diff)))
}

/// Whether a snapshot answers the prompt the suite asks now.
#[derive(Debug, PartialEq)]
enum QuestionChange {
    Same,
    /// Written before snapshots recorded their prompt: nothing to compare.
    NotRecorded,
    Changed {
        accepted: String,
        now: String,
    },
}

impl QuestionChange {
    fn of(accepted: &SnapshotFile, new: &SnapshotFile) -> QuestionChange {
        match (accepted.header.info.question(), new.header.info.question()) {
            (None, _) => QuestionChange::NotRecorded,
            (Some(a), Some(n)) if a == n => QuestionChange::Same,
            (Some(accepted), now) => QuestionChange::Changed {
                accepted,
                now: now.unwrap_or_default(),
            },
        }
    }
}

/// `--update`: the same path a review takes — a pending file, then an atomic rename over the
/// accepted one — so an interrupted update never leaves a half-written snapshot.
fn accept_now(store: &Store, id: &str, file: &SnapshotFile) -> Result<()> {
    store.write_pending(id, file)?;
    store.accept(id)?;
    Ok(())
}

/// The checkpoint identity for snapshot headers: the model name, and the locked weights'
/// hash when there is a lock (`tiny-chat@d634ad7dace0`).
fn model_identity(suite: &Suite) -> String {
    let name = crate::endpoint::spec::model_name(suite);
    match crate::chain::run::lock::Lock::read(&suite.lock_path) {
        Ok(Some(l)) => format!(
            "{name}@{}",
            crate::chain::run::lock::short(&l.weights.total)
        ),
        _ => name,
    }
}
