//! The judges of the chain, one folder per boundary, in chain order:
//! checkpoint → tokenizer → chat template → generation config → server API → client, then the
//! replay and latency stages. Each boundary's folder holds its offline checks (`mod.rs`) and
//! what it sees of a running server (`online.rs`, or the folder itself for the server).
//!
//! `run/` is what every boundary reads (the suite's context, the probe pass against a server,
//! the policy) and the two drivers that call the boundaries in order (`run::offline`,
//! `run::online`). Imports point down the chain: `run`'s shared modules below every boundary, a
//! boundary may read an earlier boundary (the template's framing, for the server's parsers),
//! and only the drivers name them all (`tests/it/architecture.rs` keeps it so).
pub mod run;

pub mod checkpoint;
pub mod tokenizer;
pub mod template;
pub mod generation;
pub mod server;
pub mod client;
pub mod replay;
pub mod latency;
