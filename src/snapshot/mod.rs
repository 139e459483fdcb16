//! Reviewed replay snapshots: insta-compatible `.snap` files under `snapshots/<suite>/`, pending
//! changes as `.snap.new` beside them (never over the accepted file), comparators, diffs.
//!
//! # File format
//!
//! ```text
//! ---
//! source: suites/example.toml
//! expression: capital
//! info:
//!   suite: example
//!   prompt: capital
//!   target: "http://127.0.0.1:8000"
//!   model: tiny-chat
//!   settings:
//!     temperature: 0.0
//!     seed: 0
//!     max_tokens: 48
//!     stop: []
//!   comparator: exact
//! ---
//! text:
//!   "The capital of France is Paris.\n"
//!   "\n"
//!   "Anything else?  "
//! finish_reason: "stop"
//! token_ids: [791, 6864, 315, 9822, 374, 12366, 13]
//! logprobs:
//!   "The" -0.004 [" The", -5.812]
//!   " capital" -0.120 [" answer", -2.180]
//! ```
//!
//! The header is insta's: cargo-insta recognises the file by its `---\nsource:` prefix, `info`
//! is insta's free-form field, `assertion_line` may appear in pending files only.
//!
//! **Why the text is JSON strings, one per line.** insta compares bodies after `trim_end` and
//! CRLF→LF, and `cargo insta accept` rewrites the body that way. A reply's trailing spaces,
//! trailing newlines, `\r` or a `---` line would not survive a raw body. Each line of the text
//! (with its `\n`) is therefore one JSON string, indented under `text:`; a one-line text sits on
//! the `text:` line itself. Concatenating the strings gives the text back byte for byte, every
//! body line ends in a visible character, and a line diff of two bodies is still a line diff of
//! the two texts. Reasoning is encoded the same way; tool calls are one JSON object a line
//! without their volatile `id`.
//!
//! **Logprobs come last**, one line per generated token (`"token" logprob [alternatives]`),
//! rounded to 3 decimals and limited to the first N tokens: enough for a later token diff to
//! report the margin of the accepted run, and out of the way of the reviewed text above. An
//! impossible token's `-inf` is written `null`.
//!
//! Volatile fields (response ids, tool-call ids, timestamps, system fingerprints, latencies)
//! never enter a body, so an unchanged reply renders to unchanged bytes.
mod compare;
mod diff;
mod divergence;
mod file;
mod schema;
mod store;
pub(crate) mod yaml;

pub use compare::Comparison;
pub use diff::{diff_text, render_diff};
pub use divergence::{DivergenceClass, Margin, TokenDivergence, NUMERIC_DRIFT_MARGIN};
pub use file::{
    round_logprob, SnapshotBody, SnapshotFile, SnapshotHeader, SnapshotInfo, SnapshotLogprob,
    SnapshotSettings, LOGPROB_DECIMALS,
};
pub use schema::validate as validate_json_schema;
pub use store::{Orphan, Store};
