//! Replay: stable prompts go to a target and come back as records, compared with reviewed
//! snapshots.
pub mod prompts;

pub use prompts::{Prompt, PromptSettings};
