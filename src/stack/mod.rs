//! Serving-stack profiles: how each real stack turns a chat into the ids the model is fed,
//! and which of the model's files it reads to do so.
//!
//! | stack | tokenizer | template | BOS | stops on |
//! |---|---|---|---|---|
//! | `transformers` (vLLM, SGLang, `transformers serve`, TRL) | tokenizer.json as transformers 5 rebuilds it ([`transformers`]) | HF template files | only what the template writes (`add_special_tokens=False`) | generation_config.json eos (HF generate); vLLM adds the tokenizer eos |
//! | `tokenizers` (TGI, mistral.rs) | tokenizer.json as it is | HF template files | only what the template writes | generation_config.json eos ∪ tokenizer eos |
//! | `llama.cpp` (llama-server) | the GGUF's `tokenizer.ggml.*` | the GGUF's `tokenizer.chat_template` | strips a template BOS text, then adds BOS if `add_bos_token` | GGUF eos/eot (end-of-generation) ids |
//! | `llama-cpp-python` | the GGUF's `tokenizer.ggml.*` | the GGUF's `tokenizer.chat_template` | only what the template writes (`add_bos=False`) | GGUF eos id and the eos text |
//!
//! Sources: transformers 5.23 (docs/research/transformers-tokenization.md); llama.cpp
//! `common/chat.cpp` (`common_chat_template_direct_apply`: "if (inputs.add_bos &&
//! string_starts_with(result, tmpl.bos_token())) result = result.substr(...)", then the server
//! tokenizes with add_special and parse_special); llama-cpp-python 0.3.36
//! `llama_chat_format.py` (`Jinja2ChatFormatter` returns `added_special=True`, and
//! `chat_formatter_to_chat_completion_handler` tokenizes with `add_bos=not added_special`).
pub use crate::artifacts::llama_cpp_vocab;
pub mod forcing;
pub mod profile;
pub mod transformers;
mod transformers_map;

mod feed;
pub use feed::{feed, gguf_stop_ids, start_only_prefix, trim_added_specials, Feed, Stack};
