//! What one request to a target returns: the reply (text, ids, logprobs, finish reason, usage)
//! and when each piece of it arrived. Every target — in-process candle or an OpenAI-compatible
//! server over HTTP — produces the same `Record`, so snapshots, online checks and latency
//! metrics never care which one ran.
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// One chat request, in OpenAI terms. `None` fields are not sent (the server's default applies).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChatRequest {
    pub messages: Vec<Value>,
    pub tools: Option<Vec<Value>>,
    pub max_tokens: Option<u32>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub seed: Option<u64>,
    pub stop: Vec<String>,
    /// Ask for log-probabilities with this many alternatives per token (0: chosen token only).
    pub top_logprobs: Option<u8>,
    /// Stream with SSE (and ask for `stream_options.include_usage`).
    pub stream: bool,
    /// Extra body fields (server-specific: `repeat_penalty`, `return_token_ids`, …). They are
    /// merged last, so they may also override the fields above.
    pub extra: Map<String, Value>,
}

/// Token counts as the server reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub prompt_tokens: Option<u64>,
    pub completion_tokens: Option<u64>,
    pub total_tokens: Option<u64>,
}

/// One alternative in a top-logprobs list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopLogprob {
    /// The token id, when the target reports it (candle, llama.cpp, vLLM `token_id:N` strings).
    pub id: Option<u32>,
    pub token: String,
    pub logprob: f32,
}

/// The log-probability of one generated token and its top alternatives.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenLogprob {
    pub id: Option<u32>,
    pub token: String,
    pub logprob: f32,
    pub top: Vec<TopLogprob>,
    /// The entry also stands for tokens generated before it that the server reported no entry
    /// of: llama-server holds back a token that ends inside a UTF-8 character and reports only
    /// the token that completes it, with the text (`bytes`) of all of them. From such an entry
    /// on, entries are no longer tokens one for one.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub merged: bool,
}

/// What an output event carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputKind {
    Content,
    Reasoning,
    ToolCall,
}

/// An event that carried generated output (docs/design/METRICS.md: not the role-only chunk, not empty
/// chunks, not the usage-only chunk).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OutputEvent {
    pub at: Instant,
    pub kind: OutputKind,
    /// Tokens this event carried, when known (candle: 1 per step; a server with continuous
    /// usage stats or token ids per chunk). `None` means unknown, not zero.
    pub tokens: Option<u32>,
}

/// The clock of one request (monotonic). docs/design/METRICS.md defines every latency from these.
#[derive(Debug, Clone, PartialEq)]
pub struct Timing {
    /// When the load generator planned to send it (equals `t_send` in a closed loop without queueing).
    pub t_sched: Instant,
    /// Just before the request bytes were written.
    pub t_send: Instant,
    /// Response headers received (None for in-process targets).
    pub t_headers: Option<Instant>,
    /// Events that carried output, in arrival order.
    pub events: Vec<OutputEvent>,
    /// `[DONE]`, the stream closing, or the whole body read.
    pub t_end: Instant,
    /// Time the client itself spent between reading bytes and recording each event, summed
    /// (the client's own overhead, reported beside the latencies it could distort).
    pub client_overhead: Duration,
}

impl Timing {
    /// A timing that starts now (tests, and targets that fill it in as they go).
    pub fn starting_now() -> Timing {
        let now = Instant::now();
        Timing {
            t_sched: now,
            t_send: now,
            t_headers: None,
            events: Vec::new(),
            t_end: now,
            client_overhead: Duration::ZERO,
        }
    }
}

/// How a streamed response was framed, for the server boundary's conformance checks.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StreamTrace {
    /// Every `data:` payload that parsed as JSON, in order.
    pub chunks: Vec<Value>,
    /// `data:` payloads that were not JSON (and not `[DONE]`), verbatim (truncated).
    pub malformed: Vec<String>,
    /// `data: [DONE]` arrived.
    pub done: bool,
    /// Bytes or events after `[DONE]`.
    pub after_done: bool,
    /// SSE comment lines (`: keep-alive`) seen.
    pub comments: usize,
    /// A chunk carried only `usage` (`choices: []`), as `stream_options.include_usage` asks.
    pub usage_chunk: bool,
    /// The `Content-Type` response header.
    pub content_type: Option<String>,
}

/// One reply from a target.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// The assistant text (content deltas joined).
    pub text: String,
    /// `reasoning_content` (or `reasoning`) joined.
    pub reasoning: String,
    /// The field the reasoning came in: `reasoning_content` or `reasoning` (vLLM renamed the
    /// first to the second in 2026; a client reading the other gets nothing).
    pub reasoning_field: Option<&'static str>,
    /// Tool calls, assembled from their deltas: `{"id", "type", "function": {"name", "arguments"}}`.
    pub tool_calls: Vec<Value>,
    /// Generated token ids, when the target reports them (candle; vLLM `return_token_ids`;
    /// llama.cpp logprobs ids). Includes a stop token id that ended the reply.
    pub token_ids: Option<Vec<u32>>,
    /// The prompt's ids as the target fed them to the model, when it reports them.
    pub prompt_ids: Option<Vec<u32>>,
    /// Per generated token, when logprobs were asked for and returned.
    pub logprobs: Option<Vec<TokenLogprob>>,
    pub finish_reason: Option<String>,
    pub usage: Option<Usage>,
    /// The response's `model` field.
    pub model: Option<String>,
    pub system_fingerprint: Option<String>,
    pub timing: Timing,
    /// Streamed responses only.
    pub stream: Option<StreamTrace>,
}

impl Record {
    /// The logprob entries when each stands for exactly one generated token (see
    /// `TokenLogprob::merged`): only then are their ids the reply's ids and their count its
    /// token count.
    pub fn per_token_logprobs(&self) -> Option<&[TokenLogprob]> {
        self.logprobs
            .as_deref()
            .filter(|l| !l.iter().any(|l| l.merged))
    }

    /// An empty record with a timing that starts now.
    pub fn new() -> Record {
        Record {
            text: String::new(),
            reasoning: String::new(),
            reasoning_field: None,
            tool_calls: Vec::new(),
            token_ids: None,
            prompt_ids: None,
            logprobs: None,
            finish_reason: None,
            usage: None,
            model: None,
            system_fingerprint: None,
            timing: Timing::starting_now(),
            stream: None,
        }
    }
}

impl Default for Record {
    fn default() -> Self {
        Record::new()
    }
}

/// Why one entry of a request's token-id list (`stop_token_ids`) is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BadTokenId {
    /// Not a non-negative integer.
    NotAnId(String),
    /// An id the vocabulary does not have.
    OutOfVocabulary(String),
}

/// A request's token id, checked against the vocabulary (`vocab` 0: unknown, not checked).
/// `chatgate serve` answers a bad one with a 400; the in-process target refuses it the same
/// way, so the two never disagree on what a request means.
pub fn token_id(key: &str, v: &Value, vocab: usize) -> Result<u32, BadTokenId> {
    match v.as_u64().and_then(|i| u32::try_from(i).ok()) {
        Some(i) if (i as usize) < vocab || vocab == 0 => Ok(i),
        Some(i) => Err(BadTokenId::OutOfVocabulary(format!(
            "token id {i} in '{key}' is out of vocabulary (vocab size {vocab})"
        ))),
        None => {
            let found: String = v.to_string().chars().take(40).collect();
            Err(BadTokenId::NotAnId(format!(
                "'{key}' must hold non-negative integer token ids, found {found}"
            )))
        }
    }
}
