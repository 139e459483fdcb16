//! `chatgate gate`: the pre-deploy gate — offline chain, online chain, replay, latency — and
//! its reports for CI.
use std::path::PathBuf;

use clap::Args;

use super::history::HistoryFlags;
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
    #[command(flatten)]
    pub progress: super::ProgressFlag,
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
    /// Stop once the first broken boundary is known for certain: the checks that could only
    /// fail at a later boundary send nothing, and the replay and the latency stage are not run.
    /// The exit code and the first broken boundary are the whole run's; the report lists what
    /// was left out. A red build sooner (not with --update or --shard).
    #[arg(long, conflicts_with_all = ["update", "shard"])]
    pub fail_fast: bool,
    #[command(flatten)]
    pub history: HistoryFlags,
}

/// Where a gate's report goes (the gate's and the merge's).
#[derive(Args)]
pub struct ReportArgs {
    /// The report on stdout: text (by boundary), json, junit, markdown, html or sarif.
    #[arg(long, value_enum, default_value_t, value_name = "FORMAT")]
    pub format: report::Format,
    /// The report in FORMAT, to FILE (repeatable: one run, every format CI wants), or on stdout
    /// without `=FILE` (as --format): `--report junit=gate.xml --report markdown="$GITHUB_STEP_SUMMARY"`.
    #[arg(long = "report", value_name = "FORMAT[=FILE]", value_parser = parse_report)]
    pub reports: Vec<(report::Format, Option<PathBuf>)>,
    /// Also write a JUnit XML report here (for CI test tabs); the same as --report junit=FILE.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Also write a Markdown summary here (fits $GITHUB_STEP_SUMMARY and a PR comment); the same
    /// as --report markdown=FILE.
    #[arg(long, value_name = "FILE")]
    pub markdown: Option<PathBuf>,
    /// Also write a self-contained HTML report with latency CDF plots here; the same as
    /// --report html=FILE.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Also write SARIF 2.1.0 here (code-scanning dashboards); the same as --report sarif=FILE.
    #[arg(long, value_name = "FILE")]
    pub sarif: Option<PathBuf>,
}

/// `FORMAT` or `FORMAT=FILE`.
fn parse_report(s: &str) -> std::result::Result<(report::Format, Option<PathBuf>), String> {
    let (name, file) = match s.split_once('=') {
        Some((n, f)) if !f.is_empty() => (n, Some(PathBuf::from(f))),
        Some((n, _)) => {
            return Err(format!(
                "--report {n}= names no file (write --report {n} for stdout)"
            ))
        }
        None => (s, None),
    };
    let format = report::Format::named(name).ok_or_else(|| {
        use clap::ValueEnum;
        let names: Vec<&str> = report::Format::value_variants()
            .iter()
            .map(|f| f.name())
            .collect();
        format!(
            "unknown report format {name:?} (the formats: {})",
            names.join(", ")
        )
    })?;
    Ok((format, file))
}

impl ReportArgs {
    /// Every report asked for: (format, file) with None for stdout — exactly one on stdout.
    pub fn wanted(&self) -> Result<Vec<(report::Format, Option<PathBuf>)>> {
        let legacy = [
            (report::Format::Junit, &self.junit),
            (report::Format::Markdown, &self.markdown),
            (report::Format::Html, &self.html),
            (report::Format::Sarif, &self.sarif),
        ];
        let mut out: Vec<(report::Format, Option<PathBuf>)> = legacy
            .into_iter()
            .filter_map(|(f, p)| p.clone().map(|p| (f, Some(p))))
            .collect();
        out.extend(self.reports.iter().cloned());
        let stdout: Vec<report::Format> = out
            .iter()
            .filter(|(_, p)| p.is_none())
            .map(|(f, _)| *f)
            .collect();
        match stdout.as_slice() {
            [] => out.push((self.format, None)),
            [one] if self.format == report::Format::Text || self.format == *one => {}
            _ => {
                return Err(crate::error::Error::input(format!(
                    "one report goes to stdout, and {} were asked for there ({})",
                    stdout.len() + usize::from(self.format != report::Format::Text),
                    stdout
                        .iter()
                        .map(|f| f.name())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
                .hint("give the others a file: --report FORMAT=FILE"))
            }
        }
        Ok(out)
    }

    /// The format printed on stdout.
    pub fn stdout(&self) -> report::Format {
        self.reports
            .iter()
            .find(|(_, p)| p.is_none())
            .map_or(self.format, |(f, _)| *f)
    }
}

pub fn run(a: GateArgs) -> Result<i32> {
    if a.shard.is_some() && a.history.history.is_some() {
        // A shard's share is not a run: its record would show a partial verdict and latency.
        return Err(crate::error::Error::input(
            "--history records a whole run; a shard's share is recorded when the parts are merged",
        )
        .hint("drop --history here and pass it to `chatgate merge PART... --history DIR`"));
    }
    let wanted = a.reports.wanted()?;
    let opts = GateOptions {
        suite: a.suite.clone(),
        target: a.target.clone(),
        update: a.update,
        progress: a
            .progress
            .wanted(a.reports.stdout() == report::Format::Text),
        deadline_s: a.deadline,
        shard: a.shard,
        part: a.part.clone(),
        stack: a.stack,
        fail_fast: a.fail_fast,
    };
    let report = super::runtime()?.block_on(gate::run_bounded(&opts))?;
    emit(&wanted, &report, &a.suite)?;
    // After the report: a record that cannot be kept is an error of its own (exit 2), printed
    // after the verdict it would have recorded.
    super::history::append_gate(&a.history, &report, &a.suite)?;
    Ok(report.exit_code.code())
}

/// Every report asked for: files written atomically, one on stdout; each redacted.
pub(super) fn emit(
    wanted: &[(report::Format, Option<PathBuf>)],
    report: &GateReport,
    suite: &std::path::Path,
) -> Result<()> {
    let locations = sarif_locations(suite);
    let ctx = report::Context {
        colour: report::use_colour(),
        sarif: &locations,
    };
    // Files first: the stdout report is the last thing a person reads.
    for (format, path) in wanted {
        if let Some(path) = path {
            let ctx = report::Context {
                colour: false,
                ..ctx
            };
            write(path, &format.render(report, &ctx)?)?;
        }
    }
    for (format, _) in wanted.iter().filter(|(_, p)| p.is_none()) {
        print!("{}", redact(&format.render(report, &ctx)?));
    }
    Ok(())
}

use super::output::{redact, write};

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
