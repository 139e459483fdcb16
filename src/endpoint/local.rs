//! The in-process candle target (`candle:DIR`): the same `Record` an HTTP server would give,
//! produced by the local model — the embedded default of `chatgate gate`, and the *reference*
//! the server's checkpoint fingerprint is compared with.
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::Value;

use super::candle::CandleModel;
use super::parsers::ReplyParsers;
use super::{FinishReason, GenerateRequest, SamplingParams, Scored};
use crate::error::{Error, Result};
use crate::exchange::{
    ChatRequest, OutputEvent, OutputKind, Record, TokenLogprob, TopLogprob, Usage,
};

/// A candle model shared by the tasks of one run; generation runs on a blocking thread.
#[derive(Clone)]
pub struct CandleTarget {
    path: PathBuf,
    model: Arc<Mutex<CandleModel>>,
    /// The weights' dominant quantized GGUF type (None: float weights), read from the headers
    /// at load: what a reference's comparison bounds follow.
    quantization: Option<String>,
    /// How a healthy server over these files reads a reply (think tags, tool calls): the
    /// in-process reply is read the same way, so it equals `chatgate serve`'s.
    parsers: Arc<ReplyParsers>,
}

impl CandleTarget {
    /// Load a model directory or .gguf file (blocking: call before the runtime gets busy).
    pub fn load(path: &Path) -> Result<CandleTarget> {
        let model = CandleModel::load(path)?;
        let parsers = Arc::new(ReplyParsers::of(model.model_dir()));
        Ok(CandleTarget {
            path: path.to_path_buf(),
            parsers,
            model: Arc::new(Mutex::new(model)),
            quantization: super::candle::memory::estimate(path).and_then(|e| e.quantization),
        })
    }

    pub fn quantization(&self) -> Option<&str> {
        self.quantization.as_deref()
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Pin the clock the model's chat template reads (a suite's `[model] template_date`), so
    /// in-process replies do not change with the day.
    pub fn with_template_now(self, now: Option<chrono::NaiveDateTime>) -> CandleTarget {
        self.set_template_now(now);
        self
    }

    /// As [`CandleTarget::with_template_now`], on a shared target.
    pub fn set_template_now(&self, now: Option<chrono::NaiveDateTime>) {
        if let Ok(mut m) = self.model.lock() {
            m.set_template_now(now);
        }
    }

    /// Run `f` with the model on a blocking thread.
    async fn with_model<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut CandleModel) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let model = self.model.clone();
        tokio::task::spawn_blocking(move || {
            let mut m = model
                .lock()
                .map_err(|_| Error::input("the candle model panicked in an earlier request"))?;
            f(&mut m)
        })
        .await
        .map_err(|e| Error::input(format!("the candle generation task failed: {e}")))?
    }

    /// Render the chat with the model's own template, then generate: what a healthy server
    /// over this checkpoint answers.
    pub async fn chat(&self, req: &ChatRequest) -> Result<Record> {
        let req = req.clone();
        let parsers = self.parsers.clone();
        self.with_model(move |m| chat_blocking(m, &req, &parsers))
            .await
    }

    /// The prompt ids the model's own template gives for `messages` (add_generation_prompt).
    pub async fn prompt_ids(&self, messages: Vec<Value>, tools: Option<Value>) -> Result<Vec<u32>> {
        self.with_model(move |m| Ok(m.render_chat(&messages, tools.as_ref(), true)?.1))
            .await
    }

    /// Teacher forcing: the reference's log-probability of each of `continuation`'s tokens
    /// after `prompt`, and the reference's own argmax at each step.
    pub async fn score(&self, prompt: Vec<u32>, continuation: Vec<u32>) -> Result<Vec<Scored>> {
        self.with_model(move |m| {
            let logits = m.cached_logits(&prompt, &continuation)?;
            let mut scratch = Vec::new();
            continuation
                .iter()
                .zip(&logits)
                .map(|(&id, l)| {
                    let lse = super::candle::sampling::logsumexp(l)?;
                    let argmax = super::candle::sampling::argmax(l);
                    Ok(Scored {
                        id,
                        logprob: Some(l.get(id as usize).map_or(f32::NEG_INFINITY, |x| x - lse)),
                        argmax: Some((
                            argmax,
                            l.get(argmax as usize)
                                .map_or(f32::NEG_INFINITY, |x| x - lse),
                        )),
                        top: super::candle::sampling::top_logprobs(
                            l,
                            lse,
                            SCORED_TOP,
                            &mut scratch,
                        ),
                    })
                })
                .collect()
        })
        .await
    }

    /// The architecture candle runs ("llama", "qwen2", ...).
    pub fn architecture(&self) -> String {
        self.model
            .lock()
            .map(|m| m.architecture().to_string())
            .unwrap_or_default()
    }

    pub fn decode_token(&self, id: u32) -> String {
        self.model
            .lock()
            .ok()
            .and_then(|m| m.tokenizer().decode(&[id], false).ok())
            .unwrap_or_default()
    }
}

/// The request's `stop_token_ids`, each an id of the vocabulary: a bad one is refused, as
/// `chatgate serve` refuses it with a 400, not dropped.
fn stop_token_ids(req: &ChatRequest, vocab: usize) -> Result<Vec<u32>> {
    let key = "stop_token_ids";
    match req.extra.get(key) {
        None => Ok(Vec::new()),
        Some(Value::Array(ids)) => ids
            .iter()
            .map(|v| {
                crate::exchange::token_id(key, v, vocab).map_err(|e| match e {
                    crate::exchange::BadTokenId::NotAnId(why)
                    | crate::exchange::BadTokenId::OutOfVocabulary(why) => Error::input(why),
                })
            })
            .collect(),
        Some(other) => Err(Error::input(format!(
            "'{key}' must be a list of token ids, not {other}"
        ))),
    }
}

/// Alternatives scored per position: as many as the probes ask a server for (`top_logprobs`).
pub const SCORED_TOP: usize = 5;

fn chat_blocking(m: &mut CandleModel, req: &ChatRequest, parsers: &ReplyParsers) -> Result<Record> {
    let tools = req.tools.clone().map(Value::Array);
    let (_, prompt_ids) = m.render_chat(&req.messages, tools.as_ref(), true)?;
    let room = m.context_length().saturating_sub(prompt_ids.len());
    let max_tokens = req.max_tokens.map_or(room, |n| (n as usize).min(room));
    let repetition_penalty = ["repetition_penalty", "repeat_penalty"]
        .iter()
        .find_map(|k| req.extra.get(*k).and_then(Value::as_f64))
        .unwrap_or(1.0) as f32;
    let gen = GenerateRequest {
        prompt_ids: prompt_ids.clone(),
        max_tokens,
        sampling: SamplingParams {
            temperature: req.temperature.unwrap_or(1.0),
            top_p: req.top_p.unwrap_or(1.0),
            top_k: None,
            repetition_penalty,
            seed: req.seed.unwrap_or(0),
        },
        // vLLM's request field; `chatgate serve` takes it too, with the same checks.
        stop_token_ids: stop_token_ids(req, m.vocab_size())?,
        stop_strings: req.stop.clone(),
        top_logprobs: req.top_logprobs.map(usize::from),
        ignore_eos: false,
    };
    let mut rec = Record::new();
    rec.timing.t_sched = Instant::now();
    rec.timing.t_send = rec.timing.t_sched;
    let mut pending_tokens = 0u32;
    let mut events = Vec::new();
    let g = m.generate(&gen, &mut |step| {
        // A token that completes no character yet is not an output event: its count rides on
        // the next event that carries text (as a server's chunk would).
        pending_tokens += 1;
        if !step.text.is_empty() {
            events.push(OutputEvent {
                at: step.at,
                kind: OutputKind::Content,
                tokens: Some(pending_tokens),
            });
            pending_tokens = 0;
        }
        true
    })?;
    rec.timing.t_end = Instant::now();
    rec.timing.events = events;
    let tok = m.tokenizer();
    let piece = |id: u32| tok.decode(&[id], false).unwrap_or_default();
    if req.top_logprobs.is_some() {
        rec.logprobs = Some(
            g.steps
                .iter()
                .map(|s| TokenLogprob {
                    merged: false,
                    id: Some(s.id),
                    token: piece(s.id),
                    logprob: s.logprob,
                    top: s
                        .top_logprobs
                        .iter()
                        .map(|&(id, lp)| TopLogprob {
                            id: Some(id),
                            token: piece(id),
                            logprob: lp,
                        })
                        .collect(),
                })
                .collect(),
        );
    }
    let parse_tools =
        ReplyParsers::parses_tools(req.tools.as_deref(), req.extra.get("tool_choice"));
    let read = parsers
        .offering(req.tools.as_deref().unwrap_or_default())
        .read(&g.text, parse_tools);
    rec.text = read.content;
    if !read.reasoning.is_empty() {
        rec.reasoning = read.reasoning;
        rec.reasoning_field = Some("reasoning_content");
    }
    let called = !read.calls.is_empty();
    rec.tool_calls = read
        .calls
        .iter()
        .enumerate()
        .map(|(i, c)| c.to_openai(&format!("call_{i}")))
        .collect();
    rec.finish_reason = Some(
        match g.finish_reason {
            _ if called => "tool_calls",
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
        }
        .to_string(),
    );
    rec.usage = Some(Usage {
        prompt_tokens: Some(prompt_ids.len() as u64),
        completion_tokens: Some(g.ids.len() as u64),
        total_tokens: Some((prompt_ids.len() + g.ids.len()) as u64),
    });
    rec.token_ids = Some(g.ids);
    rec.prompt_ids = Some(prompt_ids);
    Ok(rec)
}
