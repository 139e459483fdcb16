//! `chatgate history DIR`: the trend of the records `--history DIR` appended; and the
//! `--history`/`--commit` flags gate, merge and bench share, with the append they make.
use std::path::{Path, PathBuf};

use clap::Args;

use super::Format;
use crate::error::{Error, Result};
use crate::history::{self, store, trend, Record, RunFacts};
use crate::suite::Suite;
use crate::verdict::Finding;
use crate::verdict::{GateReport, LatencyRow};

#[derive(Args)]
pub struct HistoryArgs {
    /// The folder runs appended to with --history DIR (one <suite>.jsonl per suite).
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// Only this suite's history (DIR/NAME.jsonl).
    #[arg(long, value_name = "NAME")]
    pub suite: Option<String>,
    /// Only the last N runs of each suite (first failures and trends are within them).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub last: Option<u64>,
    /// Also write the trend as a self-contained HTML page (latency charts, checks table) here.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

/// Where a run appends its record (gate, merge, bench).
#[derive(Args, Default)]
pub struct HistoryFlags {
    /// Append one record of this run (verdict, each check's outcome, latency percentiles,
    /// identities, commit) to DIR/<suite>.jsonl, creating DIR; `chatgate history DIR` shows the
    /// trend. A record that cannot be appended is an error (exit 2) after the report.
    #[arg(long, value_name = "DIR")]
    pub history: Option<PathBuf>,
    /// The commit this run tests, for the history (default: $GITHUB_SHA, else
    /// `git rev-parse HEAD` in the suite file's folder).
    #[arg(long, value_name = "SHA", requires = "history", value_parser = history::valid_commit)]
    pub commit: Option<String>,
}

pub fn run(a: HistoryArgs) -> Result<i32> {
    let histories = store::read_dir(&a.dir, a.suite.as_deref())?;
    let last = a.last.map(|n| usize::try_from(n).unwrap_or(usize::MAX));
    let trends: Vec<trend::Trend> = histories
        .iter()
        .map(|h| trend::Trend::of(h, last))
        .collect();
    if let Some(p) = &a.html {
        super::output::write(p, &history::page::render(&trends))?;
    }
    match a.format {
        Format::Json => println!(
            "{}",
            super::output::redact(
                &serde_json::to_string_pretty(&trend::json(&trends)).unwrap_or_default()
            )
        ),
        Format::Text => {
            if trends.is_empty() {
                println!("no history files (*.jsonl) in {}", a.dir.display());
            }
            print!("{}", super::output::redact(&trend::text(&trends)));
        }
    }
    Ok(0)
}

/// The run a record describes.
pub(super) struct Ran<'a> {
    pub command: &'a str,
    pub suite_file: &'a Path,
    pub target: &'a str,
    pub exit_code: i32,
    pub findings: &'a [Finding],
    pub latency: &'a [LatencyRow],
}

/// Append the record of a run when --history asks for one; a failure names the file (exit 2).
pub(super) fn append(flags: &HistoryFlags, ran: Ran) -> Result<()> {
    let Some(dir) = &flags.history else {
        return Ok(());
    };
    let suite = Suite::load(ran.suite_file)?;
    let record = Record::new(
        RunFacts {
            command: ran.command,
            suite: &suite.name,
            suite_sha256: Some(crate::gate::merge::suite_sha256(&suite)?),
            target: ran.target,
            exit_code: ran.exit_code,
            findings: ran.findings,
            latency: ran.latency,
            identities: history::identities(&suite, ran.target, ran.findings),
            commit: history::commit(flags.commit.as_deref(), &suite.path),
        },
        chrono::Utc::now(),
    );
    store::append(dir, &record).map_err(|e| {
        let what = format!("the run's history record was not kept: {}", e.problem);
        Error { problem: what, ..e }
    })?;
    Ok(())
}

/// A gate's (or a merged gate's) record.
pub(super) fn append_gate(
    flags: &HistoryFlags,
    report: &GateReport,
    suite_file: &Path,
) -> Result<()> {
    append(
        flags,
        Ran {
            command: "gate",
            suite_file,
            target: &report.target,
            exit_code: report.exit_code.code(),
            findings: &report.findings.0,
            latency: &report.latency,
        },
    )
}
