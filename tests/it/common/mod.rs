//! Helpers the integration tests share.
pub mod browser;
pub mod cli;
pub mod clock;
pub mod families;
pub mod gate_workspace;
pub mod gguf_writer;
pub mod llama_server;
pub mod report_json;
pub mod skip;
pub mod server;
pub mod server_metrics;
pub mod transformers_serve;
pub mod vllm;
