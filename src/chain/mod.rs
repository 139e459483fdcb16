//! The offline chain: one module per boundary, run in chain order
//! (checkpoint → tokenizer → chat template → generation config).
pub mod checkpoint;
pub mod client;
pub mod client_fields;
pub mod client_sse;
pub mod dates;
pub mod framing;
pub mod diff;
pub mod generation;
pub mod gguf;
pub mod harmony;
pub mod lock;
pub mod online;
pub mod policy;
pub mod probe;
pub mod recording;
pub mod rows;
pub mod sft_stream;
pub mod shapes;
pub mod template;
pub mod tokenizer;
pub mod tokens;
pub use crate::verdict::{Boundary, Finding, Findings, Severity};

mod context;
pub use context::*;
