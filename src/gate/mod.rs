//! `chatgate gate`: the offline chain, the online chain, the replay against reviewed snapshots
//! and the latency check, folded into one report ordered by boundary.
//!
//! The order matters: the online checks classify each prompt's determinism before the replay
//! gates on exact text, and every finding lands in one list so the first broken boundary (and
//! the downstream symptoms it explains) can be named.
pub mod capacity;
pub mod dates;
pub mod fingerprint;
pub mod latency;
pub mod merge;
pub mod progress;
pub mod replay;
pub mod shard;

mod run;
pub use run::{
    load_reference, probe_settings, run, run_bounded, GateOptions, LoadedReference, PromptSet,
    REFERENCE_WAYS_OUT,
};
