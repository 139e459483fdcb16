//! The blocking side of the server: one model behind a mutex, prompt construction (chat
//! template, tokenizer) and generation, with the faults applied where each one lives.
//!
//! A request runs as one job on a blocking thread: it takes the lock (concurrent requests
//! queue here), builds the prompt ids, validates them against the context, then generates and
//! sends every step through a channel. A closed channel (the client went away) cancels the
//! generation at the next token.
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::mpsc::UnboundedSender;

use super::errors::ApiError;
use super::faults::{
    Fault, Faults, Rng, DEGRADES_AFTER, DEGRADES_KEEPS, NONDETERMINISTIC_WINDOW, SLOW_DECODE_MS,
    SLOW_FIRST_TOKEN_MS,
};
use crate::endpoint::candle::CandleModel;
use crate::endpoint::{FinishReason, GenerateRequest, Generation, SamplingParams, TokenStep};
use crate::error::Result;
use crate::template::{ChatTemplate, RenderRequest, SpecialTokens};

/// The llama-2 chat template (meta-llama/Llama-2-7b-chat-hf) used by `--fault wrong-template`.
pub const LLAMA2_TEMPLATE: &str = "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}";

/// Temperatures below this are greedy (vLLM's `_SAMPLING_EPS`, as the candle sampler uses).
const GREEDY_EPS: f64 = 1e-5;

/// What a request asks the model to continue.
#[derive(Debug, Clone)]
pub enum Prompt {
    /// Rendered with the chat template, then tokenized.
    Chat {
        messages: Vec<Value>,
        tools: Option<Value>,
        add_generation_prompt: bool,
        /// Tokenize the rendered text with the tokenizer's special tokens added (vLLM's
        /// `add_special_tokens`, default false for chats).
        add_special_tokens: bool,
        /// `chat_template_kwargs`: more variables for the template (`date_string`,
        /// `enable_thinking`, …), as vLLM passes them.
        template_kwargs: serde_json::Map<String, Value>,
    },
    Text {
        text: String,
        add_special_tokens: bool,
    },
    Ids(Vec<u32>),
}

/// The generation a request asks for, before the context check.
#[derive(Debug, Clone)]
pub struct GenParams {
    /// None: the remaining context.
    pub max_tokens: Option<usize>,
    pub sampling: SamplingParams,
    pub stop: Vec<String>,
    pub stop_token_ids: Vec<u32>,
    pub top_logprobs: Option<usize>,
    pub ignore_eos: bool,
}

pub struct Job {
    pub prompt: Prompt,
    pub params: GenParams,
    /// Send every step (streams); otherwise only the final generation.
    pub want_steps: bool,
}

/// What a job is measured and paced by, besides the model.
pub struct JobContext {
    pub metrics: std::sync::Arc<super::metrics::ServerMetrics>,
    /// `--service-ms`: the least time a request holds the model (a known per-request cost).
    pub service_time: Option<Duration>,
    /// When the request arrived (before it queued for the model).
    pub arrived: std::time::Instant,
}

/// The prompt as the model will see it, sent before the first token.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub prompt_ids: Vec<u32>,
    pub max_tokens: usize,
    /// Ids that end a reply (their text is not part of the reply).
    pub stop_ids: Vec<u32>,
    /// The model's eos ids (a stop on one of them has stop_reason null).
    pub eos_ids: Vec<u32>,
}

#[derive(Debug)]
pub enum Msg {
    Prepared(Prepared),
    Rejected(ApiError),
    Step(TokenStep),
    Done(Generation),
    Failed(ApiError),
}

/// The served model, the fault model and what the faults need.
pub struct Engine {
    model: CandleModel,
    /// `base-checkpoint`: the model that really generates.
    base: Option<CandleModel>,
    faults: Faults,
    wrong_template: Option<ChatTemplate>,
    special: SpecialTokens,
    /// `double-bos`: the id prepended to every prompt.
    bos_id: u32,
    context_length: usize,
    vocab_size: usize,
}

impl Engine {
    pub fn load(model: &Path, faults: &Faults, fault_model: Option<&Path>) -> Result<Engine> {
        let served = CandleModel::load(model)?;
        let base = if faults.has(Fault::BaseCheckpoint) {
            let dir = match fault_model {
                Some(d) => d.to_path_buf(),
                None => default_fault_model(model),
            };
            let m = CandleModel::load(&dir).map_err(|e| {
                e.hint("--fault base-checkpoint generates with --fault-model DIR (default: a sibling directory named tiny-base)")
            })?;
            Some(m)
        } else {
            None
        };
        let wrong_template = if faults.has(Fault::WrongTemplate) {
            Some(ChatTemplate::new(LLAMA2_TEMPLATE).map_err(|e| {
                crate::error::Error::input(format!("the llama-2 fault template: {e}"))
            })?)
        } else {
            None
        };
        let special = served.model_dir().special_tokens();
        let bos_id = bos_id(&served, &special);
        let context_length = served.context_length();
        let vocab_size = vocab_size(&served);
        Ok(Engine {
            model: served,
            base,
            faults: faults.clone(),
            wrong_template,
            special,
            bos_id,
            context_length,
            vocab_size,
        })
    }

    pub fn model(&self) -> &CandleModel {
        &self.model
    }
    pub fn context_length(&self) -> usize {
        self.context_length
    }
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }
    pub fn bos_id(&self) -> u32 {
        self.bos_id
    }

    /// The tokenizer the model runs with (transformers 5 semantics, like vLLM).
    fn tokenizer(&self) -> Result<&tokenizers::Tokenizer, ApiError> {
        Ok(self.model.tokenizer())
    }

    /// The prompt's ids as this server feeds them to the model (faults included).
    pub fn prompt_ids(&self, prompt: &Prompt) -> Result<Vec<u32>, ApiError> {
        let mut ids = match prompt {
            Prompt::Chat {
                messages,
                tools,
                add_generation_prompt,
                add_special_tokens,
                template_kwargs,
            } => {
                let agp = *add_generation_prompt && !self.faults.has(Fault::NoGenerationPrompt);
                let rewritten;
                let messages = if self.faults.rewrites_history() {
                    rewritten = rewrite_history(messages, &self.faults);
                    &rewritten
                } else {
                    messages
                };
                let (text, ids) = match &self.wrong_template {
                    Some(t) => {
                        self.render_with(t, messages, tools.as_ref(), agp, template_kwargs)?
                    }
                    None => self
                        .model
                        .render_chat_with(messages, tools.as_ref(), agp, template_kwargs)
                        .map_err(|e| template_error(&e))?,
                };
                if *add_special_tokens {
                    self.encode(&text, true)?
                } else {
                    ids
                }
            }
            Prompt::Text {
                text,
                add_special_tokens,
            } => self.encode(text, *add_special_tokens)?,
            Prompt::Ids(ids) => {
                if let Some(bad) = ids.iter().find(|&&i| i as usize >= self.vocab_size) {
                    return Err(ApiError::invalid(
                        "prompt",
                        format!(
                            "token id {bad} is out of vocabulary (vocab size {})",
                            self.vocab_size
                        ),
                    ));
                }
                ids.clone()
            }
        };
        if self.faults.has(Fault::DoubleBos) {
            ids.insert(0, self.bos_id);
        }
        Ok(ids)
    }

    fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>, ApiError> {
        let enc = self
            .tokenizer()?
            .encode(text, add_special_tokens)
            .map_err(|e| ApiError::invalid("prompt", format!("cannot tokenize: {e}")))?;
        Ok(enc.get_ids().to_vec())
    }

    /// Render with `template` (the `wrong-template` fault) and tokenize without special tokens.
    fn render_with(
        &self,
        template: &ChatTemplate,
        messages: &[Value],
        tools: Option<&Value>,
        add_generation_prompt: bool,
        template_kwargs: &serde_json::Map<String, Value>,
    ) -> Result<(String, Vec<u32>), ApiError> {
        // The llama-2 template concatenates bos_token; a model without one renders it as "".
        let mut special = self.special.clone();
        special.bos_token.get_or_insert_with(String::new);
        special.eos_token.get_or_insert_with(String::new);
        let rendered = template
            .render(&RenderRequest {
                messages: messages.to_vec(),
                tools: tools.cloned(),
                add_generation_prompt,
                special_tokens: special,
                extra: template.read_variables(template_kwargs),
                ..RenderRequest::default()
            })
            .map_err(|e| ApiError::bad_request(e.to_string()).code("template_error"))?;
        let ids = self.encode(&rendered.text, false)?;
        Ok((rendered.text, ids))
    }

    /// The model that generates (the fault model under `base-checkpoint`).
    fn generator(&mut self) -> &mut CandleModel {
        match self.base.as_mut() {
            Some(b) => b,
            None => &mut self.model,
        }
    }

    /// The request the model runs: the job's parameters with the generation faults applied.
    fn generate_request(
        &self,
        prompt_ids: Vec<u32>,
        max_tokens: usize,
        p: &GenParams,
    ) -> GenerateRequest {
        let mut sampling = p.sampling.clone();
        if self.faults.has(Fault::IgnoreTemperature) {
            if let Some(gc) = &self.model.model_dir().generation_config {
                if let Some(t) = gc.temperature {
                    sampling.temperature = t;
                }
                if let Some(tp) = gc.top_p {
                    sampling.top_p = tp;
                }
                if let Some(k) = gc.top_k {
                    sampling.top_k = if k > 0 { Some(k as usize) } else { None };
                }
            }
        }
        GenerateRequest {
            prompt_ids,
            max_tokens,
            sampling,
            stop_token_ids: p.stop_token_ids.clone(),
            stop_strings: p.stop.clone(),
            top_logprobs: p.top_logprobs.filter(|&n| n > 0),
            ignore_eos: p.ignore_eos || self.faults.has(Fault::DropEosStop),
        }
    }

    /// Generate, with `base-checkpoint` and `nondeterministic` applied.
    fn generate(
        &mut self,
        req: &GenerateRequest,
        on_step: &mut dyn FnMut(&TokenStep) -> bool,
    ) -> Result<Generation, ApiError> {
        let nondeterministic =
            self.faults.has(Fault::Nondeterministic) && req.sampling.temperature < GREEDY_EPS;
        let degrades = self.faults.has(Fault::LongReplyDegrades) && req.max_tokens > DEGRADES_AFTER;
        let result = if nondeterministic {
            // The served model's tokenizer spells the perturbed token (the generator may be
            // the base model). It is cloned on this fault's path only: a 256k vocabulary's
            // tokenizer takes ~0.3 s to clone, which every request once paid.
            let tokenizer = self.tokenizer().ok().cloned();
            generate_perturbed(self.generator(), tokenizer.as_ref(), req, on_step)
        } else if degrades {
            generate_forgetting(self.generator(), req, on_step)
        } else {
            self.generator().generate(req, on_step)
        };
        result.map_err(|e| ApiError::internal(format!("generation failed: {}", e.problem)))
    }
}

/// `--fault-model`'s default: a directory named `tiny-base` beside the served one.
pub fn default_fault_model(model: &Path) -> std::path::PathBuf {
    let abs = std::fs::canonicalize(model).unwrap_or_else(|_| model.to_path_buf());
    match abs.parent() {
        Some(parent) => parent.join("tiny-base"),
        None => std::path::PathBuf::from("tiny-base"),
    }
}

fn template_error(e: &crate::error::Error) -> ApiError {
    ApiError::bad_request(e.problem.clone()).code("template_error")
}

/// The tokenizer's bos id; else `<|endoftext|>`; else 0.
fn bos_id(model: &CandleModel, special: &SpecialTokens) -> u32 {
    let dir = model.model_dir();
    let tok = dir.tokenizer.as_ref().map(|t| &t.tokenizer);
    if let (Some(t), Some(bos)) = (tok, special.bos_token.as_deref()) {
        if let Some(id) = t.token_to_id(bos) {
            return id;
        }
    }
    if let Some(id) = dir
        .config
        .as_ref()
        .and_then(|c| c.bos_token_ids.first().copied())
    {
        return id;
    }
    if let Some(id) = dir.generation_config.as_ref().and_then(|g| g.bos_token_id) {
        return id;
    }
    tok.and_then(|t| t.token_to_id("<|endoftext|>"))
        .unwrap_or(0)
}

/// The number of embedding rows: config.json's vocab_size, else the tokenizer's.
fn vocab_size(model: &CandleModel) -> usize {
    let dir = model.model_dir();
    if let Some(n) = dir.config.as_ref().and_then(|c| c.vocab_size) {
        return n as usize;
    }
    dir.tokenizer.as_ref().map(|t| t.vocab_size).unwrap_or(0)
}

/// `nondeterministic`: run greedily up to a random step k, take the 2nd-best token there, then
/// continue greedily from it.
fn generate_perturbed(
    model: &mut CandleModel,
    tokenizer: Option<&tokenizers::Tokenizer>,
    req: &GenerateRequest,
    on_step: &mut dyn FnMut(&TokenStep) -> bool,
) -> Result<Generation> {
    let mut rng = Rng::from_time();
    let k = rng.below(req.max_tokens.min(NONDETERMINISTIC_WINDOW));
    let mut g1 = if k > 0 {
        let mut r1 = req.clone();
        r1.max_tokens = k;
        model.generate(&r1, on_step)?
    } else {
        Generation {
            prompt_tokens: req.prompt_ids.len(),
            ids: vec![],
            text: String::new(),
            steps: vec![],
            finish_reason: FinishReason::Length,
        }
    };
    // Stopped (or cancelled) before step k: nothing to perturb.
    if g1.finish_reason == FinishReason::Stop || g1.ids.len() < k {
        return Ok(g1);
    }
    let mut context = req.prompt_ids.clone();
    context.extend_from_slice(&g1.ids);
    let logits = model.last_logits_uncached(&context)?;
    let (second, logprob, top) = second_best(&logits, req.top_logprobs.unwrap_or(0));
    let text = tokenizer
        .and_then(|t| t.decode(&[second], false).ok())
        .unwrap_or_default();
    let mut stop_ids = req.stop_token_ids.clone();
    if !req.ignore_eos {
        stop_ids.extend(model.eos_ids());
    }
    let is_stop = stop_ids.contains(&second);
    let step = TokenStep {
        id: second,
        text: if is_stop { String::new() } else { text },
        logprob,
        top_logprobs: top,
        at: Instant::now(),
    };
    let keep_going = on_step(&step);
    g1.ids.push(second);
    g1.text.push_str(&step.text);
    g1.steps.push(step);
    if is_stop {
        g1.finish_reason = FinishReason::Stop;
        return Ok(g1);
    }
    g1.finish_reason = FinishReason::Length;
    if !keep_going || g1.ids.len() >= req.max_tokens {
        return Ok(g1);
    }
    context.push(second);
    continue_from(model, g1, req, context, on_step)
}

/// The rest of `req`'s reply after `done`, generated over `context`, appended to `done`.
fn continue_from(
    model: &mut CandleModel,
    mut done: Generation,
    req: &GenerateRequest,
    context: Vec<u32>,
    on_step: &mut dyn FnMut(&TokenStep) -> bool,
) -> Result<Generation> {
    let mut rest = req.clone();
    rest.prompt_ids = context;
    rest.max_tokens = req.max_tokens - done.ids.len();
    let more = model.generate(&rest, on_step)?;
    done.ids.extend(more.ids);
    done.text.push_str(&more.text);
    done.steps.extend(more.steps);
    done.finish_reason = more.finish_reason;
    done.prompt_tokens = req.prompt_ids.len();
    Ok(done)
}

/// `long-reply-degrades`: the first `DEGRADES_AFTER` tokens as the model writes them, the rest
/// over only the last `DEGRADES_KEEPS` positions, as a KV cache that lost the others would.
fn generate_forgetting(
    model: &mut CandleModel,
    req: &GenerateRequest,
    on_step: &mut dyn FnMut(&TokenStep) -> bool,
) -> Result<Generation> {
    let mut first = req.clone();
    first.max_tokens = DEGRADES_AFTER;
    let g1 = model.generate(&first, on_step)?;
    if g1.finish_reason == FinishReason::Stop || g1.ids.len() < DEGRADES_AFTER {
        return Ok(g1);
    }
    let mut context = req.prompt_ids.clone();
    context.extend_from_slice(&g1.ids);
    let kept = context.split_off(context.len() - DEGRADES_KEEPS);
    continue_from(model, g1, req, kept, on_step)
}

/// The 2nd most likely id, its log-probability, and the top `n` alternatives.
fn second_best(logits: &[f32], n: usize) -> (u32, f32, Vec<(u32, f32)>) {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let lse = max + logits.iter().map(|&l| (l - max).exp()).sum::<f32>().ln();
    let mut order: Vec<usize> = (0..logits.len()).collect();
    order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
    let pick = order.get(1).or(order.first()).copied().unwrap_or(0);
    let top = order
        .iter()
        .take(n)
        .map(|&i| (i as u32, logits[i] - lse))
        .collect();
    (
        pick as u32,
        logits.get(pick).map(|l| l - lse).unwrap_or(0.0),
        top,
    )
}

/// Run one job on the calling (blocking) thread.
pub fn run_job(engine: &Mutex<Engine>, job: Job, tx: UnboundedSender<Msg>, cx: JobContext) {
    let mut flight = cx.metrics.arrive();
    // The client may have gone away while the job waited for the lock.
    if tx.is_closed() {
        return;
    }
    let mut guard = match engine.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    };
    if tx.is_closed() {
        return;
    }
    let held = std::time::Instant::now();
    flight.start(held - cx.arrived);
    let engine = &mut *guard;
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        run_locked(
            engine,
            job,
            &tx,
            &Pace {
                cx: &cx,
                flight: &flight,
                held,
            },
        )
    }));
    if outcome.is_err() {
        let _ = tx.send(Msg::Failed(ApiError::internal(
            "the model panicked while generating",
        )));
    }
}

/// A running job's clock and counters.
struct Pace<'a> {
    cx: &'a JobContext,
    flight: &'a super::metrics::InFlight<'a>,
    /// When the job took the model's lock.
    held: std::time::Instant,
}

impl Pace<'_> {
    /// Hold the model until `--service-ms` has passed since the lock was taken.
    fn hold(&self) {
        if let Some(s) = self.cx.service_time {
            let left = s.saturating_sub(self.held.elapsed());
            if !left.is_zero() {
                std::thread::sleep(left);
            }
        }
    }

    fn finish(&self, g: &Generation, aborted: bool) {
        use super::metrics::Finished;
        let finished = match (aborted, g.finish_reason) {
            (true, _) => Finished::Abort,
            (false, FinishReason::Stop) => Finished::Stop,
            (false, _) => Finished::Length,
        };
        self.flight.finish(
            finished,
            g.prompt_tokens,
            g.ids.len(),
            self.cx.arrived.elapsed(),
        );
    }
}

fn run_locked(engine: &mut Engine, job: Job, tx: &UnboundedSender<Msg>, pace: &Pace) {
    let mut prompt_ids = match engine.prompt_ids(&job.prompt) {
        Ok(ids) => ids,
        Err(e) => {
            let _ = tx.send(Msg::Rejected(e));
            return;
        }
    };
    let ctx = engine.context_length;
    if engine.faults.has(Fault::PromptTruncated) {
        // The last half-context's ids only, counted as the prompt (ollama#17889).
        let keep = ctx / 2;
        prompt_ids.drain(..prompt_ids.len().saturating_sub(keep));
    }
    let max_tokens = match check_context(prompt_ids.len(), job.params.max_tokens, ctx) {
        Ok(m) => m,
        Err(e) => {
            let _ = tx.send(Msg::Rejected(e));
            return;
        }
    };
    let req = engine.generate_request(prompt_ids.clone(), max_tokens, &job.params);
    let eos_ids = engine.generator().eos_ids();
    let mut stop_ids = req.stop_token_ids.clone();
    if !req.ignore_eos {
        stop_ids.extend(eos_ids.iter().copied());
    }
    let prepared = Prepared {
        prompt_ids,
        max_tokens,
        stop_ids,
        eos_ids,
    };
    if tx.send(Msg::Prepared(prepared)).is_err() {
        return;
    }
    if engine.faults.has(Fault::SlowFirstToken) {
        std::thread::sleep(Duration::from_millis(SLOW_FIRST_TOKEN_MS));
    }
    let slow_decode = engine.faults.has(Fault::SlowDecode);
    let want_steps = job.want_steps;
    // Under --service-ms the reply is released whole when the service time is up, so the
    // request's cost is exactly max(service time, generation) and its first token comes then.
    let paced = pace.cx.service_time.is_some();
    let mut held_back = Vec::new();
    let mut first = true;
    let mut on_step = |step: &TokenStep| -> bool {
        if slow_decode {
            std::thread::sleep(Duration::from_millis(SLOW_DECODE_MS));
        }
        if paced {
            held_back.push(step.clone());
            return !tx.is_closed();
        }
        if std::mem::take(&mut first) {
            pace.flight.first_token(pace.cx.arrived.elapsed());
        }
        if want_steps {
            tx.send(Msg::Step(step.clone())).is_ok()
        } else {
            !tx.is_closed()
        }
    };
    let msg = match engine.generate(&req, &mut on_step) {
        Ok(g) => {
            if paced {
                pace.hold();
                pace.flight.first_token(pace.cx.arrived.elapsed());
                for step in held_back.drain(..).filter(|_| want_steps) {
                    let _ = tx.send(Msg::Step(step));
                }
            }
            pace.finish(&g, tx.is_closed());
            Msg::Done(g)
        }
        Err(e) => Msg::Failed(e),
    };
    let _ = tx.send(msg);
}

/// max_tokens against the context: the default is what remains; overflow is the client's error.
pub fn check_context(
    prompt_len: usize,
    max_tokens: Option<usize>,
    context: usize,
) -> Result<usize, ApiError> {
    let overflow = |requested: usize| {
        ApiError::bad_request(format!(
            "This model's maximum context length is {context} tokens. However, you requested \
             {} tokens ({prompt_len} in the messages, {requested} in the completion). Please \
             reduce the length of the messages or completion.",
            prompt_len + requested
        ))
        .param("messages")
        .code("context_length_exceeded")
    };
    match max_tokens {
        Some(m) if prompt_len + m > context => Err(overflow(m)),
        Some(m) => Ok(m),
        None if prompt_len >= context => Err(overflow(1)),
        None => Ok(context - prompt_len),
    }
}

/// The history as the history faults change it: the assistant turns' reasoning taken out
/// (`history-reasoning-dropped`), their calls' arguments emptied (`history-rewritten`).
fn rewrite_history(messages: &[Value], faults: &Faults) -> Vec<Value> {
    messages
        .iter()
        .map(|m| {
            let mut m = m.clone();
            if let Some(obj) = m
                .as_object_mut()
                .filter(|o| o.get("role") == Some(&Value::from("assistant")))
            {
                if faults.has(Fault::HistoryReasoningDropped) {
                    obj.remove("reasoning_content");
                    obj.remove("reasoning");
                }
                if faults.has(Fault::HistoryRewritten) {
                    empty_call_arguments(obj);
                }
            }
            m
        })
        .collect()
}

/// `history-rewritten`: every call of an assistant turn keeps its name and loses its
/// arguments, as a server that cannot read them back renders `{}`.
fn empty_call_arguments(turn: &mut serde_json::Map<String, Value>) {
    let Some(Value::Array(calls)) = turn.get_mut("tool_calls") else {
        return;
    };
    for call in calls {
        if let Some(f) = call.get_mut("function").and_then(Value::as_object_mut) {
            f.insert("arguments".into(), Value::from("{}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_check() {
        assert_eq!(check_context(10, None, 512), Ok(502));
        assert_eq!(check_context(10, Some(5), 512), Ok(5));
        assert!(check_context(10, Some(503), 512).is_err());
        assert!(check_context(512, None, 512).is_err());
        let e = check_context(500, Some(100), 512).err().map(|e| e.code);
        assert_eq!(e, Some(Some("context_length_exceeded")));
    }

    #[test]
    fn second_best_picks_the_runner_up() {
        let (id, lp, top) = second_best(&[0.0, 3.0, 1.0, 2.0], 2);
        assert_eq!(id, 3);
        assert!(lp < 0.0);
        assert_eq!(top.iter().map(|t| t.0).collect::<Vec<_>>(), vec![1, 3]);
    }

    #[test]
    fn llama2_template_compiles() {
        assert!(ChatTemplate::new(LLAMA2_TEMPLATE).is_ok());
    }
}
