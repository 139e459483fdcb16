//! `chatgate gate`: the pre-deploy gate — offline chain, online chain, replay, latency — and
//! its reports for CI.
use std::path::PathBuf;

use clap::Args;

use super::history::HistoryFlags;
use super::ReportFormat;
use crate::error::Result;
use crate::gate::shard::Shard;
use crate::gate::{self, GateOptions};
use crate::report;
use crate::verdict::GateReport;

#[derive(Args)]
pub struct GateArgs {
    /// The suite manifest (TOML); see suites/smoke.toml and suites/example.toml.
    pub suite: PathBuf,
    /// What to test: `candle:DIR` (in-process) or an OpenAI-compatible server's base URL.
    /// Default: the suite's [target] url, else the suite's model in-process.
    #[arg(long, value_name = "URL|candle:DIR")]
    pub target: Option<String>,
    /// The serving stack the chain predicts (overrides the suite's [target] stack): what
    /// tokenizer, template, BOS handling and stop set the server feeds the model.
    #[arg(long, value_enum, value_name = "STACK")]
    pub stack: Option<crate::stack::Stack>,
    /// Accept this run: write its replies as the snapshots and its latency as the baseline
    /// (the explicit accept; without it nothing accepted is ever overwritten).
    #[arg(long)]
    pub update: bool,
    #[command(flatten)]
    pub reports: ReportArgs,
    /// No progress bar (it is only ever shown on a terminal).
    #[arg(long)]
    pub no_progress: bool,
    /// Stop the whole run after this many seconds and exit 3 (default: the suite's
    /// [target] deadline_s; each request also has its own timeouts).
    #[arg(long, value_name = "SECONDS")]
    pub deadline: Option<f64>,
    /// Run shard K of N: replay prompts and latency requests are dealt round-robin, the offline
    /// and online chains run in shard 1. Needs --part; `chatgate merge` joins the parts.
    #[arg(long, value_name = "K/N", requires = "part")]
    pub shard: Option<Shard>,
    /// Write this shard's part (findings, prompt results, raw latency samples) here.
    #[arg(long, value_name = "FILE", requires = "shard")]
    pub part: Option<PathBuf>,
    #[command(flatten)]
    pub history: HistoryFlags,
}

/// Where a gate's report goes (the gate's and the merge's).
#[derive(Args)]
pub struct ReportArgs {
    #[arg(long, value_enum, default_value_t)]
    pub format: ReportFormat,
    /// Also write a JUnit XML report here (for CI test tabs).
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Also write a Markdown summary here (fits $GITHUB_STEP_SUMMARY and a PR comment).
    #[arg(long, value_name = "FILE")]
    pub markdown: Option<PathBuf>,
    /// Also write a self-contained HTML report with latency CDF plots here.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Also write SARIF 2.1.0 here (code-scanning dashboards), as `--format sarif` prints it.
    #[arg(long, value_name = "FILE")]
    pub sarif: Option<PathBuf>,
}

pub fn run(a: GateArgs) -> Result<i32> {
    if a.shard.is_some() && a.history.history.is_some() {
        // A shard's share is not a run: its record would show a partial verdict and latency.
        return Err(crate::error::Error::input(
            "--history records a whole run; a shard's share is recorded when the parts are merged",
        )
        .hint("drop --history here and pass it to `chatgate merge PART... --history DIR`"));
    }
    let opts = GateOptions {
        suite: a.suite.clone(),
        target: a.target.clone(),
        update: a.update,
        progress: !a.no_progress && a.reports.format == ReportFormat::Text,
        deadline_s: a.deadline,
        shard: a.shard,
        part: a.part.clone(),
        stack: a.stack,
    };
    let report = super::runtime()?.block_on(gate::run_bounded(&opts))?;
    emit(&a.reports, &report, &a.suite)?;
    // After the report: a record that cannot be kept is an error of its own (exit 2), printed
    // after the verdict it would have recorded.
    super::history::append_gate(&a.history, &report, &a.suite)?;
    Ok(report.exit_code.code())
}

/// The report on stdout in the chosen format, and the files asked for.
pub(super) fn emit(to: &ReportArgs, report: &GateReport, suite: &std::path::Path) -> Result<()> {
    if let Some(p) = &to.junit {
        write(p, &report::junit::render(report)?)?;
    }
    if let Some(p) = &to.markdown {
        write(p, &report::markdown::render(report))?;
    }
    if let Some(p) = &to.html {
        write(p, &report::html::render(report))?;
    }
    if let Some(p) = &to.sarif {
        write(p, &sarif_text(report, suite))?;
    }
    match to.format {
        ReportFormat::Json => println!(
            "{}",
            redact(&serde_json::to_string_pretty(&report::gate_json(report)).unwrap_or_default())
        ),
        ReportFormat::Sarif => println!("{}", sarif_text(report, suite)),
        ReportFormat::Text => print!(
            "{}",
            redact(&report::gate_terminal(report, report::use_colour()))
        ),
    }
    Ok(())
}

use super::output::{redact, write};

/// The SARIF document, keys redacted like every other output.
fn sarif_text(report: &GateReport, suite: &std::path::Path) -> String {
    let doc = report::sarif::render(report, &sarif_locations(suite));
    redact(&serde_json::to_string_pretty(&doc).unwrap_or_default()).into_owned()
}

/// Where SARIF results point: the suite file and its snapshot folder, relative to the current
/// directory (code scanning resolves them from the repository root the job runs in).
fn sarif_locations(suite: &std::path::Path) -> report::sarif::Locations {
    let snapshots = crate::suite::Suite::load(suite)
        .ok()
        .map(|s| report::sarif::relative_uri(&s.snapshot_dir));
    report::sarif::Locations {
        suite: report::sarif::relative_uri(suite),
        snapshots,
    }
}
