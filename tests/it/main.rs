//! The integration tests, one binary: linking candle, tokenizers, tokio and axum once instead of
//! once per file took a cold `cargo test --release` from ~22 min to the figure in docs/development.md.
//! Each file is a module named after what it tests.
mod common;

mod architecture;
mod artifacts_gguf_vocab;
mod artifacts_models;
mod catch_matrix;
mod check_faults;
mod client_matrix;
mod example_project;
mod cli_errors;
mod family_matrix;
mod framing_templates;
mod fingerprint_quantized;
mod fingerprint_recorded;
mod gate_e2e;
mod help_pages;
mod generation_harmony;
mod history;
mod http_target;
mod init_suite;
mod inspect_cli;
mod latency_lib;
mod models_tiny;
mod parser_fuzz;
mod proxy_client;
mod real_servers;
mod reasoning_split;
mod render_contract;
mod report_formats;
mod serve_http;
mod sft_scale;
mod shard_merge;
mod signals;
mod snapshot_workflow;
mod sse_reader;
mod stack_profiles;
mod standin;
mod target_architectures;
mod target_candle;
mod template_behaviour;
mod template_goldens;
mod tool_calls;
mod template_reference;
mod template_second_day;
