//! What every boundary reads, and the drivers that run the boundaries in chain order.
//!
//! Below the boundaries: the suite's context (`context`: the model's files, the serving and SFT
//! pipelines, the conversations), the probe pass against a server (`probes`), the lock and the
//! recorded reference, the SFT rows' tallies, token and date helpers, the suite's policy, where `--fail-fast` stops
//! (`fail_fast`). Above them: `offline` (the offline chain, `chatgate check`), `online` (the online chain
//! against a server) and `sft_stream` (the per-row pass over the SFT file).
pub mod context;
pub mod dates;
pub mod golden;
pub mod diff;
pub mod fail_fast;
pub mod lock;
pub mod policy;
pub mod probe;
pub mod probes;
pub mod recording;
pub mod rows;
pub mod tokens;

pub mod offline;
pub mod online;
pub mod sft_stream;
