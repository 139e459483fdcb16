//! Replay: stable prompts go to a target and come back as records, compared with reviewed
//! snapshots.
pub mod prompts;
pub mod record;

pub use prompts::{Prompt, PromptSettings};
pub use record::{
    ChatRequest, OutputEvent, OutputKind, Record, StreamTrace, Timing, TokenLogprob, TopLogprob,
    Usage,
};
