//! `chatgate proxy`: record what a real client sends, or serve it hostile-but-legal SSE.
use std::path::PathBuf;

use clap::Args;

use crate::error::{Error, Result};

#[derive(Args)]
pub struct ProxyArgs {
    /// The server to forward to (base URL).
    #[arg(long, value_name = "URL")]
    pub upstream: String,
    /// Where to listen.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8001")]
    pub listen: String,
    /// Append every exchange (client request, server response) to this JSONL file.
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
}

pub fn run(_a: ProxyArgs) -> Result<i32> {
    Err(Error::input("proxy is not built yet"))
}
