//! `chatgate review`, `chatgate accept`, `chatgate reject`: the snapshot workflow.
//!
//! `gate` only ever writes pending `.snap.new` files; these commands are the explicit step that
//! turns a pending reply into the reviewed reference (or throws it away). `accept`/`reject` are
//! non-interactive for scripts and CI; `review` walks a human through each pending snapshot
//! with a diff against the accepted one. The review loop is a function over any `BufRead` /
//! `Write` so it is tested with scripted input, not only on a real terminal.
use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;

use clap::Args;

use crate::error::{Error, Result};
use crate::replay::Prompt;
use crate::snapshot::{render_diff, Orphan, SnapshotFile, Store};
use crate::suite::Suite;

/// Walk through pending snapshots interactively.
#[derive(Args)]
pub struct ReviewArgs {
    /// The suite manifest (TOML).
    pub suite: PathBuf,
    /// Only these prompt ids (repeatable).
    #[arg(long = "prompt", value_name = "ID")]
    pub prompts: Vec<String>,
}

/// Accept pending snapshots (all of the suite's, or the named prompts').
#[derive(Args)]
pub struct AcceptArgs {
    /// The suite manifest (TOML).
    pub suite: PathBuf,
    /// Only these prompt ids (repeatable).
    #[arg(long = "prompt", value_name = "ID")]
    pub prompts: Vec<String>,
    /// Delete snapshots (accepted or pending) of prompts no longer in the suite.
    #[arg(long)]
    pub prune_orphans: bool,
}

/// Reject (delete) pending snapshots (all of the suite's, or the named prompts').
#[derive(Args)]
pub struct RejectArgs {
    /// The suite manifest (TOML).
    pub suite: PathBuf,
    /// Only these prompt ids (repeatable).
    #[arg(long = "prompt", value_name = "ID")]
    pub prompts: Vec<String>,
    /// Delete snapshots (accepted or pending) of prompts no longer in the suite.
    #[arg(long)]
    pub prune_orphans: bool,
}

/// A suite's prompts and its snapshot folder.
pub struct SuiteSnapshots {
    pub suite: Suite,
    pub prompts: Vec<Prompt>,
    pub store: Store,
}

impl SuiteSnapshots {
    /// Load the suite and its replay prompts; a suite without `[replay]` has no snapshots.
    pub fn open(path: &std::path::Path) -> Result<SuiteSnapshots> {
        let suite = Suite::load(path)?;
        let (Some(prompts_path), Some(replay)) = (&suite.replay_prompts, &suite.file.replay) else {
            return Err(Error::in_file(
                path,
                "the suite has no [replay] section, so it has no snapshots",
            )
            .hint("add [replay] with `prompts = \"prompts.jsonl\"` (see suites/example.toml)"));
        };
        let prompts = crate::replay::prompts::load(prompts_path, replay)?;
        let store = Store::open(&suite.snapshot_dir)?;
        Ok(SuiteSnapshots {
            suite,
            prompts,
            store,
        })
    }

    fn known_ids(&self) -> Vec<String> {
        self.prompts.iter().map(|p| p.id.clone()).collect()
    }

    /// The pending ids to act on: the named ones (each must be a prompt with something
    /// pending, else bad input and nothing is changed), or every pending id of a known
    /// prompt, in suite order.
    pub fn select_pending(&self, named: &[String]) -> Result<Vec<String>> {
        let pending = self.store.pending_ids()?;
        if named.is_empty() {
            return Ok(self
                .prompts
                .iter()
                .filter(|p| pending.contains(&p.id))
                .map(|p| p.id.clone())
                .collect());
        }
        let known = self.known_ids();
        for id in named {
            if !known.contains(id) {
                return Err(Error::in_file(
                    &self.suite.path,
                    format!("prompt {id:?} is not in the suite's prompts"),
                )
                .hint("list the prompt ids in the [replay] prompts file"));
            }
            if !pending.contains(id) {
                return Err(Error::input(format!(
                    "prompt {id:?} has no pending snapshot ({} does not exist)",
                    self.store.pending_path(id).display()
                ))
                .hint("run `chatgate gate` first; it writes .snap.new files for changed replies"));
            }
        }
        Ok(named.to_vec())
    }
}

pub fn run_review(a: ReviewArgs) -> Result<i32> {
    if !std::io::stdin().is_terminal() {
        return Err(Error::input("review is interactive, but stdin is not a terminal").hint(
            "use `chatgate accept SUITE [--prompt ID]` or `chatgate reject SUITE [--prompt ID]` in scripts and CI",
        ));
    }
    let s = SuiteSnapshots::open(&a.suite)?;
    let ids = s.select_pending(&a.prompts)?;
    let mut out = std::io::stdout();
    let summary = review_with(
        &s,
        &ids,
        &mut Keys(console::Term::stdout()),
        &mut out,
        crate::report::use_colour(),
    )?;
    let _ = writeln!(out, "{}", summary.describe());
    report_orphans(&s, false, &mut out)?;
    Ok(0)
}

pub fn run_accept(a: AcceptArgs) -> Result<i32> {
    let s = SuiteSnapshots::open(&a.suite)?;
    let mut out = std::io::stdout();
    accept_or_reject(&s, &a.prompts, true, a.prune_orphans, &mut out)?;
    Ok(0)
}

pub fn run_reject(a: RejectArgs) -> Result<i32> {
    let s = SuiteSnapshots::open(&a.suite)?;
    let mut out = std::io::stdout();
    accept_or_reject(&s, &a.prompts, false, a.prune_orphans, &mut out)?;
    Ok(0)
}

/// The non-interactive commands: act on every selected pending snapshot, then report orphans.
pub fn accept_or_reject(
    s: &SuiteSnapshots,
    named: &[String],
    accept: bool,
    prune: bool,
    out: &mut dyn Write,
) -> Result<Vec<String>> {
    let ids = s.select_pending(named)?;
    let verb = if accept { "accepted" } else { "rejected" };
    for id in &ids {
        if accept {
            s.store.accept(id)?;
        } else {
            s.store.reject(id)?;
        }
        let _ = writeln!(out, "{verb} {id}");
    }
    if ids.is_empty() {
        let _ = writeln!(out, "no pending snapshots in {}", s.store.dir().display());
    } else {
        let _ = writeln!(out, "{verb} {} snapshot(s)", ids.len());
    }
    report_orphans(s, prune, out)?;
    Ok(ids)
}

/// List (or with `prune`, delete) snapshots of prompts that left the suite.
fn report_orphans(s: &SuiteSnapshots, prune: bool, out: &mut dyn Write) -> Result<Vec<Orphan>> {
    let orphans = s.store.orphans(&s.known_ids())?;
    if orphans.is_empty() {
        return Ok(orphans);
    }
    if prune {
        let n = s.store.prune(&orphans)?;
        let _ = writeln!(out, "pruned {n} orphaned snapshot file(s):");
    } else {
        let _ = writeln!(
            out,
            "{} orphaned snapshot file(s) (their prompts are no longer in the suite):",
            orphans.len()
        );
    }
    for o in &orphans {
        let _ = writeln!(out, "  {}", o.path.display());
    }
    if !prune {
        let _ = writeln!(
            out,
            "  delete them with `chatgate accept --prune-orphans` (or reject)"
        );
    }
    Ok(orphans)
}

/// What a review session did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ReviewSummary {
    pub accepted: Vec<String>,
    pub rejected: Vec<String>,
    pub skipped: Vec<String>,
    /// The reviewer quit (or input ended) before the last snapshot.
    pub quit: bool,
}

impl ReviewSummary {
    pub fn describe(&self) -> String {
        format!(
            "review: {} accepted, {} rejected, {} skipped{}",
            self.accepted.len(),
            self.rejected.len(),
            self.skipped.len(),
            if self.quit { " (quit early)" } else { "" }
        )
    }
}

enum Choice {
    Accept,
    Reject,
    Skip,
    Quit,
}

/// Where review answers come from: one key at a time on a terminal, lines elsewhere.
pub trait Answers {
    /// The next answer; `None` at end of input.
    fn next_answer(&mut self) -> std::io::Result<Option<String>>;
    /// Whether the answer still needs echoing (a key read raw is not shown by the terminal).
    fn echo(&self) -> bool;
}

/// Answers typed as lines (`a⏎`): pipes and tests.
pub struct Lines<R>(pub R);

impl<R: BufRead> Answers for Lines<R> {
    fn next_answer(&mut self) -> std::io::Result<Option<String>> {
        let mut line = String::new();
        Ok((self.0.read_line(&mut line)? > 0).then_some(line))
    }
    fn echo(&self) -> bool {
        false
    }
}

/// Single keys on a terminal: `a` accepts at once, no Enter. Esc and Ctrl-C quit.
struct Keys(console::Term);

impl Answers for Keys {
    fn next_answer(&mut self) -> std::io::Result<Option<String>> {
        use console::Key;
        Ok(match self.0.read_key()? {
            Key::Char(c) => Some(c.to_string()),
            Key::Escape | Key::CtrlC => Some("q".into()),
            _ => Some(String::new()),
        })
    }
    fn echo(&self) -> bool {
        true
    }
}

/// The interactive loop over lines of input (see [`review_with`]).
pub fn review<R: BufRead, W: Write>(
    s: &SuiteSnapshots,
    ids: &[String],
    input: R,
    out: &mut W,
    colour: bool,
) -> Result<ReviewSummary> {
    review_with(s, ids, &mut Lines(input), out, colour)
}

/// The interactive loop: for each pending id show the header and the diff, then ask.
/// End of input counts as quit, so a closed stdin never accepts anything.
pub fn review_with<A: Answers, W: Write>(
    s: &SuiteSnapshots,
    ids: &[String],
    input: &mut A,
    out: &mut W,
    colour: bool,
) -> Result<ReviewSummary> {
    let mut summary = ReviewSummary::default();
    if ids.is_empty() {
        let _ = writeln!(out, "no pending snapshots in {}", s.store.dir().display());
        return Ok(summary);
    }
    for (i, id) in ids.iter().enumerate() {
        let Some(pending) = s.store.pending(id)? else {
            continue;
        };
        let accepted = s.store.accepted(id)?;
        let prompt = s.prompts.iter().find(|p| &p.id == id);
        let item = Item {
            position: format!("[{}/{}] {id}", i + 1, ids.len()),
            prompt,
            accepted: accepted.as_ref(),
            pending: &pending,
        };
        show(out, &item, colour);
        match ask(input, out)? {
            Choice::Accept => {
                s.store.accept(id)?;
                let _ = writeln!(out, "accepted {id}\n");
                summary.accepted.push(id.clone());
            }
            Choice::Reject => {
                s.store.reject(id)?;
                let _ = writeln!(out, "rejected {id}\n");
                summary.rejected.push(id.clone());
            }
            Choice::Skip => {
                let _ = writeln!(out, "skipped {id}\n");
                summary.skipped.push(id.clone());
            }
            Choice::Quit => {
                summary.quit = true;
                break;
            }
        }
    }
    Ok(summary)
}

/// One pending snapshot as the review shows it.
struct Item<'a> {
    /// `[2/5] prompt-id`
    position: String,
    prompt: Option<&'a Prompt>,
    accepted: Option<&'a SnapshotFile>,
    pending: &'a SnapshotFile,
}

/// Header info, the comparator's verdict and the diff against the accepted snapshot.
fn show<W: Write>(out: &mut W, item: &Item, colour: bool) {
    let Item {
        position,
        prompt,
        accepted,
        pending,
    } = item;
    let bold = |s: &str| {
        if colour {
            format!("\x1b[1m{s}\x1b[0m")
        } else {
            s.to_string()
        }
    };
    let info = &pending.header.info;
    let _ = writeln!(out, "{}", bold(position));
    if let Some(asked) = prompt.and_then(last_message) {
        let _ = writeln!(out, "  asked:      {asked}");
    }
    if let Some(target) = &info.target {
        let _ = writeln!(out, "  target:     {target}");
    }
    if let Some(model) = &info.model {
        let _ = writeln!(out, "  model:      {model}");
    }
    let st = &info.settings;
    let _ = writeln!(
        out,
        "  settings:   temperature {} seed {} max_tokens {} stop {}",
        st.temperature.map_or("-".into(), |t| t.to_string()),
        st.seed.map_or("-".into(), |t| t.to_string()),
        st.max_tokens.map_or("-".into(), |t| t.to_string()),
        serde_json::Value::from(st.stop.clone())
    );
    let comparator = prompt
        .map(|p| p.compare.clone())
        .unwrap_or_else(|| info.comparator.clone());
    match accepted {
        None => {
            let _ = writeln!(out, "  comparator: {}", comparator.describe());
            let _ = writeln!(out, "{}", bold("new snapshot (nothing accepted yet):"));
            for line in pending.body.render_reviewable().lines() {
                let _ = writeln!(
                    out,
                    "{}",
                    if colour {
                        format!("\x1b[32m+{line}\x1b[0m")
                    } else {
                        format!("+{line}")
                    }
                );
            }
        }
        Some(acc) => {
            let c = comparator.compare(&acc.body, &pending.body);
            let verdict = if c.pass { "passes" } else { "fails" };
            let _ = writeln!(
                out,
                "  comparator: {} {verdict}: {}",
                comparator.describe(),
                c.detail
            );
            if let Some(d) = &c.divergence {
                let _ = writeln!(out, "  divergence: {}", d.describe());
            }
            let diff = render_diff(
                &acc.body.render_reviewable(),
                &pending.body.render_reviewable(),
                colour,
            );
            if diff.is_empty() {
                let _ = writeln!(
                    out,
                    "(text, finish reason and token ids are unchanged; only the logprobs differ)"
                );
            } else {
                let _ = write!(out, "{diff}");
            }
        }
    }
}

/// The last message's content on one line (JSON-escaped, shortened): what the reply answers.
fn last_message(prompt: &Prompt) -> Option<String> {
    let content = prompt.messages.last()?.get("content")?;
    let text = match content {
        serde_json::Value::String(s) => serde_json::Value::String(s.clone()).to_string(),
        other => other.to_string(),
    };
    Some(if text.chars().count() > 100 {
        format!("{}…", text.chars().take(99).collect::<String>())
    } else {
        text
    })
}

fn ask<A: Answers, W: Write>(input: &mut A, out: &mut W) -> Result<Choice> {
    loop {
        let _ = write!(out, "accept [a], reject [r], skip [s], quit [q]? ");
        let _ = out.flush();
        let answer = input
            .next_answer()
            .map_err(|e| Error::input(format!("cannot read the answer from the terminal: {e}")))?;
        let Some(line) = answer else {
            let _ = writeln!(out);
            return Ok(Choice::Quit);
        };
        if input.echo() {
            let _ = writeln!(out, "{}", line.trim());
        }
        match line.trim().to_ascii_lowercase().as_str() {
            "a" | "accept" => return Ok(Choice::Accept),
            "r" | "reject" => return Ok(Choice::Reject),
            "s" | "skip" => return Ok(Choice::Skip),
            "q" | "quit" => return Ok(Choice::Quit),
            other => {
                let _ = writeln!(out, "{other:?}: please answer a, r, s or q");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{SnapshotBody, SnapshotHeader};

    /// A suite with three prompts in a tempdir; the model dir is never opened by these commands.
    fn suite() -> (tempfile::TempDir, SuiteSnapshots) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("s.toml"),
            "name = \"s\"\n[model]\ndir = \"model\"\n[replay]\nprompts = \"p.jsonl\"\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("p.jsonl"),
            "{\"id\": \"a\", \"prompt\": \"A?\"}\n{\"id\": \"b\", \"prompt\": \"B?\"}\n{\"id\": \"c\", \"prompt\": \"C?\"}\n",
        )
        .unwrap();
        let s = SuiteSnapshots::open(&dir.path().join("s.toml")).unwrap();
        (dir, s)
    }

    fn snap(s: &SuiteSnapshots, id: &str, text: &str) -> SnapshotFile {
        let prompt = s.prompts.iter().find(|p| p.id == id).unwrap();
        SnapshotFile {
            header: SnapshotHeader::for_prompt("s.toml", "s", prompt, Some("candle:model"), None),
            body: SnapshotBody {
                text: text.into(),
                finish_reason: Some("stop".into()),
                ..Default::default()
            },
        }
    }

    #[test]
    fn scripted_review_accepts_rejects_skips_and_quits() {
        let (_dir, s) = suite();
        s.store.write_pending("a", &snap(&s, "a", "new a")).unwrap();
        std::fs::write(
            s.store.accepted_path("b"),
            snap(&s, "b", "old b\n").render(),
        )
        .unwrap();
        s.store
            .write_pending("b", &snap(&s, "b", "new b\n"))
            .unwrap();
        s.store.write_pending("c", &snap(&s, "c", "new c")).unwrap();
        let ids = s.select_pending(&[]).unwrap();
        assert_eq!(ids, ["a", "b", "c"]);
        let mut out = Vec::new();
        let input = "x\na\nr\nq\n".as_bytes();
        let summary = review(&s, &ids, input, &mut out, false).unwrap();
        let out = String::from_utf8(out).unwrap();
        assert_eq!(summary.accepted, ["a"]);
        assert_eq!(summary.rejected, ["b"]);
        assert!(summary.quit && summary.skipped.is_empty());
        assert!(
            out.contains("[1/3] a\n") && out.contains("new snapshot"),
            "{out}"
        );
        assert!(out.contains("\"x\": please answer"), "{out}");
        assert!(
            out.contains("exact fails: text differs")
                && out.contains("-text: \"old b\\n\"\n+text: \"new b\\n\""),
            "{out}"
        );
        assert!(out.contains("target:     candle:model"), "{out}");
        assert!(out.contains("asked:      \"B?\""), "{out}");
        assert_eq!(s.store.accepted("a").unwrap().unwrap().body.text, "new a");
        assert_eq!(
            s.store.accepted("b").unwrap().unwrap().body.text,
            "old b\n",
            "reject keeps the accepted file"
        );
        assert!(s.store.pending("b").unwrap().is_none());
        assert!(
            s.store.pending("c").unwrap().is_some(),
            "quit leaves the rest pending"
        );
    }

    #[test]
    fn end_of_input_is_quit_and_accepts_nothing() {
        let (_dir, s) = suite();
        s.store.write_pending("a", &snap(&s, "a", "x")).unwrap();
        let mut out = Vec::new();
        let summary = review(&s, &["a".to_string()], "".as_bytes(), &mut out, true).unwrap();
        assert!(summary.quit && summary.accepted.is_empty());
        assert!(s.store.accepted("a").unwrap().is_none());
        assert!(String::from_utf8(out).unwrap().contains("\x1b[32m+text"));
    }

    #[test]
    fn naming_an_id_with_nothing_pending_is_bad_input_and_changes_nothing() {
        let (_dir, s) = suite();
        s.store.write_pending("a", &snap(&s, "a", "x")).unwrap();
        let mut out = Vec::new();
        let e = accept_or_reject(&s, &["a".into(), "b".into()], true, false, &mut out).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(
            e.to_string().contains("\"b\" has no pending snapshot"),
            "{e}"
        );
        assert!(
            s.store.pending("a").unwrap().is_some(),
            "nothing accepted when one id is wrong"
        );
        let e = accept_or_reject(&s, &["zz".into()], false, false, &mut out).unwrap_err();
        assert!(e.to_string().contains("not in the suite"), "{e}");
    }
}
