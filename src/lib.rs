//! chatgate: tests the chat-serving chain one boundary at a time
//! (checkpoint → tokenizer → chat template → generation config → server API → client).
pub mod artifacts;
pub mod chain;
pub mod cli;
pub mod clock;
pub mod error;
pub mod files;
pub mod gate;
pub mod init;
pub mod latency;
pub mod proxy;
pub mod replay;
pub mod report;
pub mod secrets;
pub mod serve;
pub mod snapshot;
pub mod stack;
pub mod standin;
pub mod suite;
pub mod target;
pub mod template;
