//! chatgate: tests the chat-serving chain one boundary at a time
//! (checkpoint → tokenizer → chat template → generation config → server API → client).
//!
//! The modules, bottom up: each names only modules listed above it (docs/architecture.md;
//! `tests/it/architecture.rs` keeps it so).

// The ground.
/// Errors with a file, a problem and a hint, and the exit codes they map to.
pub mod error;
/// "Now" for chat templates that print the date; the day a suite pins.
pub mod clock;
/// API keys from the environment, and keeping them out of every output.
pub mod secrets;
/// The contracts: findings, check ids, the gate's report.
pub mod verdict;
/// Escaping user text for HTML and Markdown (and markupsafe's escape, for templates).
pub mod escape;
/// A chat request and the record of its reply (text, ids, logprobs, timing).
pub mod exchange;
/// Atomic writes, bounded reads, names that become file names.
pub mod files;
/// When the allocator returns freed memory: at once, except while the in-process model runs.
pub mod allocator;
/// transformers-exact chat template rendering on minijinja.
pub mod template;

// The links at rest.
/// What a checkpoint ships: config, weights, tokenizer files, templates, GGUF metadata.
pub mod artifacts;
/// What each serving stack feeds the model (tokenizer, template, special tokens, stop rules).
pub mod stack;
/// The suite manifest.
pub mod suite;
/// Replayed prompts.
pub mod replay;

// The model under test, and what stands in for it or beside it.
/// The endpoints under test: the in-process candle model and an OpenAI-compatible server.
pub mod endpoint;
/// `chatgate serve`: an OpenAI-compatible server over a local checkpoint, with faults.
pub mod serve;
/// Tiny random-weight stand-ins of real models.
pub mod standin;
/// The client boundary: a recording, hostile-SSE proxy.
pub mod proxy;

// What the judges measure with.
/// Insta-format snapshots, their comparison and review.
pub mod snapshot;
/// Latency metrics, baselines and load generation.
pub mod latency;

// The judges.
/// One folder per boundary of the chain (offline and online checks), what every boundary reads,
/// and the drivers that run them in chain order.
pub mod chain;

// Renderers, drivers and the face.
/// Terminal, JSON, JUnit, Markdown and HTML reports.
pub mod report;
/// Results over time: one record per run appended to a history, and its trend (text, JSON, HTML).
pub mod history;
/// `chatgate init`: a working suite for a model.
pub mod init;
/// `chatgate example`: the smoke suite and its tiny model, carried in the binary.
pub mod example;
/// `chatgate gate`: the stages, sharding and merge.
pub mod gate;
/// One file per subcommand.
pub mod cli;
