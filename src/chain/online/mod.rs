//! The online boundaries: what a running server shows about each link of the chain.
//!
//! One pass of probe requests is gathered first (`gather`), then every boundary's checks read
//! it: the checkpoint (what the server says it serves; a behavioural fingerprint against a
//! local reference run), the template (the server's own prompt ids and counts against the local
//! render), the generation config (stops and sampling as the server applies them), and the
//! server API itself (schemas, SSE framing, usage, stream parity, determinism, limits, errors).
//!
//! Each check blames the boundary where the cause lives, not where the symptom shows, and
//! stands down when an earlier boundary already explains what it sees (a fingerprint is only
//! taken on a prompt the server is known to have built the same way).
pub mod checkpoint;
pub mod drift;
pub mod fields;
pub mod generation;
pub mod reasoning;
pub mod responses;
pub mod server;
pub mod template;
pub mod tokenizer;
pub mod tool_calls;

mod probes;
pub use probes::*;
