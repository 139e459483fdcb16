//! `chatgate review`, `chatgate accept`, `chatgate reject`: the snapshot workflow.
use std::path::PathBuf;

use clap::Args;

use crate::error::{Error, Result};

/// Walk through pending snapshots interactively.
#[derive(Args)]
pub struct ReviewArgs {
    /// The suite manifest (TOML).
    pub suite: PathBuf,
}

/// Accept pending snapshots (all of the suite's, or the named prompts').
#[derive(Args)]
pub struct AcceptArgs {
    /// The suite manifest (TOML).
    pub suite: PathBuf,
    /// Only these prompt ids (repeatable).
    #[arg(long = "prompt", value_name = "ID")]
    pub prompts: Vec<String>,
}

/// Reject (delete) pending snapshots (all of the suite's, or the named prompts').
#[derive(Args)]
pub struct RejectArgs {
    /// The suite manifest (TOML).
    pub suite: PathBuf,
    /// Only these prompt ids (repeatable).
    #[arg(long = "prompt", value_name = "ID")]
    pub prompts: Vec<String>,
}

pub fn run_review(_a: ReviewArgs) -> Result<i32> {
    Err(Error::input("review is not built yet"))
}
pub fn run_accept(_a: AcceptArgs) -> Result<i32> {
    Err(Error::input("accept is not built yet"))
}
pub fn run_reject(_a: RejectArgs) -> Result<i32> {
    Err(Error::input("reject is not built yet"))
}
