//! Targets: what replays run against. `candle` runs a checkpoint in-process on the CPU — the
//! embedded default, the reference a server is compared with, and the engine of `chatgate serve`.
//!
//! `candle` is the checkpoint in-process; `local` it as an endpoint; `openai` an
//! OpenAI-compatible server over HTTP (`sse` its stream reader); `spec` chooses one; `reference`
//! is a reference server that teacher-forces a continuation over HTTP.
pub mod candle;
pub mod local;
pub mod openai;
pub mod parsers;
pub mod reference;
pub mod spec;
pub mod sse;

use std::time::Instant;

use serde::Serialize;

/// Sampling as the OpenAI/vLLM request fields define it.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingParams {
    /// 0 means greedy (argmax).
    pub temperature: f64,
    /// Nucleus sampling; 1.0 disables it.
    pub top_p: f64,
    /// Keep the k most likely tokens; None disables it.
    pub top_k: Option<usize>,
    /// vLLM/HF multiplicative repetition penalty over prompt and generated tokens; 1.0 disables it.
    pub repetition_penalty: f32,
    /// Seed of the sampler; the same seed and request give the same tokens.
    pub seed: u64,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 0.0,
            top_p: 1.0,
            top_k: None,
            repetition_penalty: 1.0,
            seed: 0,
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct GenerateRequest {
    pub prompt_ids: Vec<u32>,
    pub max_tokens: usize,
    pub sampling: SamplingParams,
    /// Stop when one of these is generated (the model's eos ids are added unless `ignore_eos`).
    pub stop_token_ids: Vec<u32>,
    /// Stop when the text contains one of these; the text is cut before it.
    pub stop_strings: Vec<String>,
    /// Return this many top alternatives (with log-probabilities) per step.
    pub top_logprobs: Option<usize>,
    /// Do not stop on the model's eos ids.
    pub ignore_eos: bool,
}

/// One generated token.
#[derive(Debug, Clone, Serialize)]
pub struct TokenStep {
    pub id: u32,
    /// The text this token completes: always whole UTF-8 characters; empty while a multi-byte
    /// character is still incomplete, then the whole character at once.
    pub text: String,
    /// log-probability of `id` under the raw model distribution.
    pub logprob: f32,
    /// The top alternatives (id, log-probability), most likely first, when requested.
    pub top_logprobs: Vec<(u32, f32)>,
    /// When the token was produced (monotonic clock).
    #[serde(skip)]
    pub at: Instant,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// A stop token id or stop string ended the reply.
    Stop,
    /// max_tokens (or the context) ran out.
    Length,
}

#[derive(Debug, Clone, Serialize)]
pub struct Generation {
    pub prompt_tokens: usize,
    /// Generated ids, including a stop token id that ended the reply.
    pub ids: Vec<u32>,
    /// Generated text: without a stop token's text, cut before a matched stop string.
    pub text: String,
    pub steps: Vec<TokenStep>,
    pub finish_reason: FinishReason,
}

/// One token of a continuation, teacher-forced through a reference (in-process or a server).
#[derive(Debug, Clone, PartialEq)]
pub struct Scored {
    pub id: u32,
    /// The reference's logprob of `id` here. None: the reference reports only its top
    /// alternatives at this position (llama-server) and `id` is not among them.
    pub logprob: Option<f32>,
    /// The reference's own most likely token here and its logprob. None: the reference reports
    /// no alternatives (TGI's prefill).
    pub argmax: Option<(u32, f32)>,
    /// The reference's most likely tokens here, most likely first: the fingerprint compares the
    /// whole head of the distribution, not only the chosen token (near-certain tokens carry no
    /// signal).
    pub top: Vec<(u32, f32)>,
}
