//! `chatgate merge`: the parts of a sharded run (gate or load bench) into one report.
use std::path::PathBuf;

use clap::Args;

use super::gate::ReportArgs;
use crate::error::Result;

#[derive(Args)]
pub struct MergeArgs {
    /// The part files of shards 1..N of one run.
    #[arg(required = true, value_name = "PART")]
    pub parts: Vec<PathBuf>,
    /// The suite file, when not at the path the parts name (the shards' working folder).
    #[arg(long, value_name = "SUITE")]
    pub suite: Option<PathBuf>,
    #[command(flatten)]
    pub reports: ReportArgs,
    #[command(flatten)]
    pub history: super::history::HistoryFlags,
}

/// A gate's parts merge into the report an unsharded run gives; a load bench's into its figures.
pub fn run(a: MergeArgs) -> Result<i32> {
    if let Some(first) = a.parts.first() {
        if crate::gate::merge::part_format(first)? == crate::gate::merge::BENCH_PART_FORMAT {
            return super::bench::merge(&a.parts, a.suite.as_deref(), &a.reports, &a.history);
        }
    }
    let report = crate::gate::merge::merge(&a.parts, a.suite.as_deref())?;
    let suite = a
        .suite
        .clone()
        .unwrap_or_else(|| PathBuf::from(&report.suite_file));
    super::gate::emit(&a.reports.wanted()?, &report, &suite)?;
    super::history::append_gate(&a.history, &report, &suite)?;
    Ok(report.exit_code.code())
}
