//! `chatgate standin`: a tiny random-weight model that carries a real model's exact tokenizer,
//! templates, special tokens and generation config.
//!
//! The serving chain (tokenizer, template, special tokens, stop set, API) does not depend on the
//! weights, so a stand-in exercises every boundary but checkpoint quality on any CPU, in seconds:
//! for our own tests and for users' CI before a GPU deploy. It is written twice — a Hugging Face
//! directory (the source's tokenizer and template files copied byte for byte, a tiny config.json,
//! model.safetensors) and `model.gguf` with the same weights and the tokenizer metadata
//! llama.cpp's converter writes for the real model (`gguf.rs`, from
//! docs/research/hf-to-gguf.md) — so one stand-in runs in-process, on transformers stacks and on
//! llama.cpp.
mod gguf;
mod scripted;
mod weights;

mod build;
pub use build::*;
