//! A reference *server*: a known-good deployment of the checkpoint (`[reference] url`) that
//! teacher-forces a continuation over HTTP, so a gate on a small runner fingerprints a 70B
//! server against the checkpoint's own behaviour without holding any weights.
//!
//! Teacher forcing needs two things of a stack: exact prompt ids in, and the log-probability of
//! given tokens (with the alternatives) out. Each stack offers them differently, and some not at
//! all (read in their sources; docs/research/reference-at-scale.md):
//! - vLLM: `/v1/completions` with a token-id `prompt` and `prompt_logprobs: k` — every position,
//!   the forced token and the top k, keyed by id. One request per probe.
//! - SGLang: native `/generate` with `input_ids`, `return_logprob`, `logprob_start_len` and
//!   `top_logprobs_num`. One request per probe.
//! - TGI: `/generate` takes text only; `decoder_input_details` returns each prefill token's id and
//!   logprob (only when the launcher has `--enable-prefill-logprobs`), no alternatives. The ids
//!   TGI's own tokenization gives must be the prompt's: they are checked, never assumed.
//! - llama.cpp's llama-server: no prompt logprobs; one request per forced token with the prefix
//!   as token ids and `n_probs` (its prompt cache makes each a one-token step). The forced
//!   token's logprob is known only when it is among the top `n_probs`.
//! - llama-cpp-python's HTTP server takes text prompts only, and `transformers serve` returns no
//!   logprobs: neither can be a reference server, and the gate says so (exit 2) instead of
//!   comparing less.
use std::fmt;

use serde_json::{json, Value};

use super::openai::{CallError, HttpOptions, HttpTarget};
use super::Scored;
use crate::error::{Error, Result};
use crate::exchange::{Record, TokenLogprob, TopLogprob};
pub use crate::stack::forcing::{cannot_force, ForcingStack};
use crate::suite::ReferenceSection;

/// Alternatives asked for at each forced position (vLLM's default `--max-logprobs` is 20).
pub const FORCED_TOP: usize = 5;
/// llama-server reports the forced token only when it is among the top `n_probs`: ask wide.
const LLAMA_SERVER_N_PROBS: usize = 20;

/// What `[reference]` says about a reference server.
#[derive(Debug, Clone)]
pub struct ServerSpec {
    pub url: String,
    /// The stack, when the suite names it; else detected from the server's routes.
    pub stack: Option<ForcingStack>,
    /// The `model` field (default: the first id `/v1/models` lists).
    pub model: Option<String>,
    pub api_key_env: Option<String>,
    /// The quantization the reference serves (None: float weights): its tolerance.
    pub quantization: Option<String>,
}

impl ServerSpec {
    /// The reference server `[reference] url` names, if any.
    pub fn from_section(r: &ReferenceSection) -> Option<ServerSpec> {
        let url = r.url.as_ref()?;
        Some(ServerSpec {
            url: url.trim_end_matches('/').to_string(),
            stack: r.stack.as_deref().and_then(ForcingStack::parse),
            model: r.served_model.clone(),
            api_key_env: r.api_key_env.clone(),
            quantization: r.quantization.clone(),
        })
    }
}

/// What a reference server can do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Capability {
    /// It teacher-forces: the fingerprint scores the server's own tokens on it.
    Forcing(ForcingStack),
    /// It only answers chats (llama-cpp-python, `transformers serve`, an unknown server): its
    /// temperature-0 reply, with the top alternatives where it reports them, is compared as a
    /// recording would be — weaker evidence, and the finding says so.
    GreedyOnly { stack: String },
}

/// A connected reference server.
#[derive(Clone)]
pub struct ReferenceServer {
    http: HttpTarget,
    capability: Capability,
    model: String,
    /// What the server says it runs (`system_fingerprint`, `/version`, `/info`, `/props`).
    identity: String,
    quantization: Option<String>,
}

impl fmt::Debug for ReferenceServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReferenceServer")
            .field("url", &self.http.base_url())
            .field("capability", &self.capability)
            .field("model", &self.model)
            .finish()
    }
}

impl ReferenceServer {
    /// Connect, find the stack and the model name, and refuse a stack that cannot
    /// teacher-force (exit 2) or a server that cannot be reached (exit 3).
    pub async fn connect(spec: &ServerSpec) -> Result<ReferenceServer> {
        let opts = HttpOptions {
            base_url: spec.url.clone(),
            model: spec.model.clone().unwrap_or_default(),
            api_key_env: spec.api_key_env.clone(),
            ..HttpOptions::default()
        };
        let http = HttpTarget::new(opts)?;
        let caps = http.introspect().await;
        if !caps.reachable {
            return Err(Error::unreachable(format!(
                "the reference server {} does not answer",
                http.base_url()
            ))
            .hint("start the reference deployment, or record the reference where it runs: `chatgate lock SUITE.toml --fingerprint` (the gate then needs neither weights nor the server)"));
        }
        let detected = match spec.stack {
            Some(s) => Capability::Forcing(s),
            None => detect(&caps),
        };
        let model = match &spec.model {
            Some(m) => m.clone(),
            None => first_model(&caps).ok_or_else(|| {
                Error::input(format!(
                    "the reference server {} lists no model at /v1/models",
                    http.base_url()
                ))
                .hint("name it with [reference] served_model = \"…\"")
            })?,
        };
        let http = http.with_model(&model);
        let capability = match detected {
            // An OpenAI server that says nothing of its stack may still be vLLM behind a proxy:
            // one two-token prompt with prompt_logprobs tells.
            Capability::GreedyOnly { stack }
                if stack == UNKNOWN && answers_prompt_logprobs(&http, &model).await =>
            {
                Capability::Forcing(ForcingStack::Vllm)
            }
            c => c,
        };
        let identity = match &capability {
            Capability::Forcing(s) => identity(&caps, *s),
            Capability::GreedyOnly { .. } => String::new(),
        };
        Ok(ReferenceServer {
            http,
            capability,
            model,
            identity,
            quantization: spec.quantization.clone(),
        })
    }

    pub fn capability(&self) -> &Capability {
        &self.capability
    }

    /// Whether it teacher-forces (else: greedy replies only).
    pub fn forces(&self) -> bool {
        matches!(self.capability, Capability::Forcing(_))
    }

    pub fn url(&self) -> &str {
        self.http.base_url()
    }

    pub fn model(&self) -> &str {
        &self.model
    }

    pub fn quantization(&self) -> Option<&str> {
        self.quantization.as_deref()
    }

    /// "vLLM at http://…, model M (vllm-0.32.0-…)".
    pub fn describe(&self) -> String {
        let how = match &self.capability {
            Capability::Forcing(s) => s.name().to_string(),
            Capability::GreedyOnly { stack } => format!("{stack} (greedy replies only)"),
        };
        let mut s = format!("{how} at {}, model {:?}", self.http.base_url(), self.model);
        if !self.identity.is_empty() {
            s.push_str(&format!(" ({})", self.identity));
        }
        s
    }

    /// The server's ids for a text without special tokens: the suite's tokenizer must be the
    /// reference's, or forced ids mean other tokens there.
    pub async fn tokenize(&self, text: &str) -> std::result::Result<Option<Vec<u32>>, CallError> {
        match self.capability {
            Capability::Forcing(ForcingStack::Tgi) => Ok(None),
            _ => self.http.tokenize_text(text, false).await,
        }
    }

    /// Teacher forcing: the reference's logprob of each `continuation` token after `prompt`,
    /// with its top alternatives and its own most likely token at each position.
    pub async fn score(
        &self,
        prompt: &[u32],
        continuation: &[u32],
        texts: &dyn Fn(&[u32]) -> Option<String>,
    ) -> std::result::Result<Vec<Scored>, CallError> {
        if continuation.is_empty() {
            return Ok(Vec::new());
        }
        let Capability::Forcing(stack) = &self.capability else {
            return Err(self.protocol("/", "this reference server cannot teacher-force"));
        };
        match stack {
            ForcingStack::Vllm => self.score_vllm(prompt, continuation).await,
            ForcingStack::Sglang => self.score_sglang(prompt, continuation).await,
            ForcingStack::Tgi => self.score_tgi(prompt, continuation, texts).await,
            ForcingStack::LlamaServer => self.score_llama_server(prompt, continuation).await,
        }
    }

    /// The reference's greedy reply to `prompt` (a recording's probe, a probe's reference
    /// reply): its ids, and each position's logprob and top alternatives by id.
    pub async fn greedy(
        &self,
        prompt: &[u32],
        max_tokens: u32,
        texts: &dyn Fn(&[u32]) -> Option<String>,
    ) -> std::result::Result<Record, CallError> {
        let Capability::Forcing(stack) = &self.capability else {
            return Err(self.protocol("/", "this reference server cannot be sent prompt ids"));
        };
        let (ids, finish) = match stack {
            ForcingStack::Vllm => self.generate_vllm(prompt, max_tokens).await?,
            ForcingStack::Sglang => self.generate_sglang(prompt, max_tokens).await?,
            ForcingStack::Tgi => self.generate_tgi(prompt, max_tokens, texts).await?,
            ForcingStack::LlamaServer => self.generate_llama_server(prompt, max_tokens).await?,
        };
        // The top alternatives by id, teacher-forced over the reply: one shape for every stack.
        let scored = self.score(prompt, &ids, texts).await?;
        let token = |id: u32| texts(&[id]).unwrap_or_else(|| format!("id {id}"));
        let logprobs = ids
            .iter()
            .zip(&scored)
            .map(|(&id, s)| TokenLogprob {
                id: Some(id),
                token: token(id),
                logprob: s.logprob.unwrap_or(f32::NEG_INFINITY),
                top: s
                    .top
                    .iter()
                    .map(|&(t, lp)| TopLogprob {
                        id: Some(t),
                        token: token(t),
                        logprob: lp,
                    })
                    .collect(),
                merged: false,
            })
            .collect();
        Ok(Record {
            text: texts(&ids).unwrap_or_default(),
            token_ids: Some(ids),
            prompt_ids: Some(prompt.to_vec()),
            logprobs: Some(logprobs),
            finish_reason: Some(finish),
            ..Record::default()
        })
    }

    /// The reference's temperature-0 reply to a chat, with logprobs where it reports them: what
    /// a greedy-only reference gives.
    pub async fn chat(
        &self,
        req: &crate::exchange::ChatRequest,
    ) -> std::result::Result<Record, CallError> {
        self.http.chat(req).await
    }

    async fn post(&self, path: &str, body: &Value) -> std::result::Result<Value, CallError> {
        self.http.post_ok_json(path, body).await
    }

    fn protocol(&self, path: &str, detail: impl Into<String>) -> CallError {
        self.http.protocol_error(path, &detail.into())
    }

    // ---- vLLM ---------------------------------------------------------------------------------

    async fn score_vllm(
        &self,
        prompt: &[u32],
        continuation: &[u32],
    ) -> std::result::Result<Vec<Scored>, CallError> {
        let ids: Vec<u32> = prompt.iter().chain(continuation).copied().collect();
        // max_tokens 1: vLLM runs `echo`/prompt-only requests with one generated token anyway.
        let body = json!({
            "model": self.model, "prompt": ids, "max_tokens": 1, "temperature": 0,
            "prompt_logprobs": FORCED_TOP,
        });
        let path = "/v1/completions";
        let v = self.post(path, &body).await?;
        vllm_scores(&v, prompt.len(), continuation).map_err(|why| self.protocol(path, why))
    }

    async fn generate_vllm(
        &self,
        prompt: &[u32],
        max_tokens: u32,
    ) -> std::result::Result<(Vec<u32>, String), CallError> {
        let body = json!({
            "model": self.model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
            "return_token_ids": true,
        });
        let path = "/v1/completions";
        let v = self.post(path, &body).await?;
        let ch = &v["choices"][0];
        let ids = id_list(&ch["token_ids"]).ok_or_else(|| {
            self.protocol(path, "no choices[0].token_ids in the reply (vLLM returns them with return_token_ids since 0.10.2)")
        })?;
        Ok((ids, finish(ch)))
    }

    // ---- SGLang -------------------------------------------------------------------------------

    async fn score_sglang(
        &self,
        prompt: &[u32],
        continuation: &[u32],
    ) -> std::result::Result<Vec<Scored>, CallError> {
        let ids: Vec<u32> = prompt.iter().chain(continuation).copied().collect();
        let body = json!({
            "input_ids": ids,
            "sampling_params": {"max_new_tokens": 1, "temperature": 0},
            "return_logprob": true,
            // SGLang's first input entry has no logprob (it stands for the position before):
            // start one token early, so every forced token has its own entry.
            "logprob_start_len": prompt.len().saturating_sub(1),
            "top_logprobs_num": FORCED_TOP,
        });
        let path = "/generate";
        let v = self.post(path, &body).await?;
        sglang_scores(&v, continuation).map_err(|why| self.protocol(path, why))
    }

    async fn generate_sglang(
        &self,
        prompt: &[u32],
        max_tokens: u32,
    ) -> std::result::Result<(Vec<u32>, String), CallError> {
        let body = json!({
            "input_ids": prompt,
            "sampling_params": {"max_new_tokens": max_tokens, "temperature": 0},
            "return_logprob": true,
        });
        let path = "/generate";
        let v = self.post(path, &body).await?;
        let meta = &v["meta_info"];
        let ids = id_list(&v["output_ids"])
            .or_else(|| {
                meta["output_token_logprobs"]
                    .as_array()
                    .map(|a| a.iter().filter_map(sglang_triple).map(|(_, i)| i).collect())
            })
            .ok_or_else(|| {
                self.protocol(
                    path,
                    "neither output_ids nor meta_info.output_token_logprobs in the reply",
                )
            })?;
        let finish = match meta["finish_reason"]["type"].as_str() {
            Some("length") => "length",
            _ => "stop",
        };
        Ok((ids, finish.to_string()))
    }

    // ---- TGI ----------------------------------------------------------------------------------

    async fn score_tgi(
        &self,
        prompt: &[u32],
        continuation: &[u32],
        texts: &dyn Fn(&[u32]) -> Option<String>,
    ) -> std::result::Result<Vec<Scored>, CallError> {
        let ids: Vec<u32> = prompt.iter().chain(continuation).copied().collect();
        let path = "/generate";
        let text = texts(&ids)
            .ok_or_else(|| self.protocol(path, "the forced ids do not decode to text"))?;
        // No temperature: TGI refuses 0, and without sampling parameters it is greedy.
        let body = json!({
            "inputs": text,
            "parameters": {"max_new_tokens": 1, "details": true, "decoder_input_details": true},
        });
        let v = self.post(path, &body).await?;
        tgi_scores(&v, &ids, continuation).map_err(|why| self.protocol(path, why))
    }

    async fn generate_tgi(
        &self,
        prompt: &[u32],
        max_tokens: u32,
        texts: &dyn Fn(&[u32]) -> Option<String>,
    ) -> std::result::Result<(Vec<u32>, String), CallError> {
        let path = "/generate";
        let text =
            texts(prompt).ok_or_else(|| self.protocol(path, "the prompt ids do not decode"))?;
        let body = json!({
            "inputs": text,
            "parameters": {"max_new_tokens": max_tokens.max(1), "details": true},
        });
        let v = self.post(path, &body).await?;
        let tokens = v["details"]["tokens"]
            .as_array()
            .ok_or_else(|| self.protocol(path, "no details.tokens in the reply"))?;
        let ids = tokens.iter().filter_map(|t| as_u32(&t["id"])).collect();
        let finish = match v["details"]["finish_reason"].as_str() {
            Some("length") => "length",
            _ => "stop",
        };
        Ok((ids, finish.to_string()))
    }

    // ---- llama-server -------------------------------------------------------------------------

    async fn score_llama_server(
        &self,
        prompt: &[u32],
        continuation: &[u32],
    ) -> std::result::Result<Vec<Scored>, CallError> {
        let mut out = Vec::with_capacity(continuation.len());
        let mut prefix = prompt.to_vec();
        for &id in continuation {
            let at = self.llama_server_step(&prefix).await?;
            let logprob = at.iter().find(|(t, _)| *t == id).map(|&(_, lp)| lp);
            out.push(scored(id, logprob, at));
            prefix.push(id);
        }
        Ok(out)
    }

    /// One step: the top `n_probs` of the raw distribution after `prefix`.
    async fn llama_server_step(
        &self,
        prefix: &[u32],
    ) -> std::result::Result<Vec<(u32, f32)>, CallError> {
        let body = json!({
            "prompt": prefix, "n_predict": 1, "n_probs": LLAMA_SERVER_N_PROBS,
            "temperature": 0, "cache_prompt": true, "post_sampling_probs": false,
        });
        let path = "/completion";
        let v = self.post(path, &body).await?;
        llama_server_top(&v).map_err(|why| self.protocol(path, why))
    }

    async fn generate_llama_server(
        &self,
        prompt: &[u32],
        max_tokens: u32,
    ) -> std::result::Result<(Vec<u32>, String), CallError> {
        let body = json!({
            "prompt": prompt, "n_predict": max_tokens, "temperature": 0, "n_probs": 1,
            "cache_prompt": true, "return_tokens": true,
        });
        let path = "/completion";
        let v = self.post(path, &body).await?;
        let ids = id_list(&v["tokens"])
            .filter(|t| !t.is_empty())
            .or_else(|| {
                v["completion_probabilities"]
                    .as_array()
                    .map(|a| a.iter().filter_map(|p| as_u32(&p["id"])).collect())
            })
            .ok_or_else(|| {
                self.protocol(
                    path,
                    "neither tokens nor completion_probabilities in the reply",
                )
            })?;
        let finish = match v["stop_type"].as_str() {
            Some("limit") => "length",
            _ => "stop",
        };
        Ok((ids, finish.to_string()))
    }
}

/// What a reference server's routes say it can do.
fn detect(caps: &super::openai::Introspection) -> Capability {
    use crate::stack::Stack;
    let owned_by = caps
        .models
        .as_ref()
        .and_then(|m| m["data"][0]["owned_by"].as_str())
        .unwrap_or_default()
        .to_ascii_lowercase();
    let greedy = |stack: &str| Capability::GreedyOnly {
        stack: stack.to_string(),
    };
    match caps.stack().map(|(s, _)| s) {
        Some(Stack::LlamaCppPython) => greedy("llama-cpp-python"),
        Some(Stack::LlamaCpp) => Capability::Forcing(ForcingStack::LlamaServer),
        Some(Stack::Tokenizers) => Capability::Forcing(ForcingStack::Tgi),
        _ if owned_by == "vllm" => Capability::Forcing(ForcingStack::Vllm),
        _ if owned_by == "sglang" => Capability::Forcing(ForcingStack::Sglang),
        Some(Stack::Vllm) => Capability::Forcing(ForcingStack::Vllm),
        _ if owned_by.contains("transformers") || owned_by == "huggingface" => {
            greedy("transformers serve")
        }
        _ => greedy(UNKNOWN),
    }
}

/// A server whose routes name no stack.
const UNKNOWN: &str = "an OpenAI-compatible server of unknown stack";

/// Whether the server answers vLLM's `prompt_logprobs` on a token-id prompt.
async fn answers_prompt_logprobs(http: &HttpTarget, model: &str) -> bool {
    let body = json!({"model": model, "prompt": [0, 1], "max_tokens": 1, "temperature": 0,
        "prompt_logprobs": 1});
    http.post_ok_json("/v1/completions", &body)
        .await
        .is_ok_and(|v| v["choices"][0]["prompt_logprobs"].is_array())
}

fn first_model(caps: &super::openai::Introspection) -> Option<String> {
    caps.models
        .as_ref()?
        .get("data")?
        .get(0)?
        .get("id")?
        .as_str()
        .map(str::to_string)
}

/// What the server says it runs, for the report and the recording.
fn identity(caps: &super::openai::Introspection, stack: ForcingStack) -> String {
    match stack {
        ForcingStack::Tgi => caps
            .info
            .as_ref()
            .map(|i| {
                format!(
                    "{} {}",
                    i["model_id"].as_str().unwrap_or("?"),
                    i["version"].as_str().unwrap_or("")
                )
            })
            .unwrap_or_default(),
        ForcingStack::LlamaServer => caps
            .props
            .as_ref()
            .and_then(|p| p["build_info"].as_str().map(str::to_string))
            .unwrap_or_default(),
        _ => String::new(),
    }
    .trim()
    .to_string()
}

/// vLLM's `choices[0].prompt_logprobs` over prompt + continuation: the continuation's positions.
fn vllm_scores(
    v: &Value,
    prompt_len: usize,
    continuation: &[u32],
) -> std::result::Result<Vec<Scored>, String> {
    let per_position = v["choices"][0]["prompt_logprobs"]
        .as_array()
        .ok_or("no choices[0].prompt_logprobs in the reply")?;
    let want = prompt_len + continuation.len();
    if per_position.len() != want {
        return Err(format!(
            "prompt_logprobs has {} positions for a prompt of {want} tokens",
            per_position.len()
        ));
    }
    continuation
        .iter()
        .zip(&per_position[prompt_len..])
        .map(|(&id, at)| {
            vllm_position(id, at)
                .ok_or_else(|| format!("prompt_logprobs has no entry for the forced token {id}"))
        })
        .collect()
}

/// SGLang's `meta_info.input_token_logprobs` / `input_top_logprobs` (one entry per input
/// position from `logprob_start_len` on, `[logprob, id, text]`): the continuation's, the last
/// `continuation.len()` of them.
fn sglang_scores(v: &Value, continuation: &[u32]) -> std::result::Result<Vec<Scored>, String> {
    let meta = &v["meta_info"];
    let chosen = meta["input_token_logprobs"]
        .as_array()
        .ok_or("no meta_info.input_token_logprobs in the reply")?;
    let tops = meta["input_top_logprobs"]
        .as_array()
        .ok_or("no meta_info.input_top_logprobs in the reply (top_logprobs_num must be above 0)")?;
    let want = continuation.len();
    if chosen.len() < want || tops.len() < want {
        return Err(format!(
            "{} input logprobs for {want} forced tokens",
            chosen.len().min(tops.len())
        ));
    }
    let (chosen, tops) = (&chosen[chosen.len() - want..], &tops[tops.len() - want..]);
    continuation
        .iter()
        .zip(chosen.iter().zip(tops))
        .map(|(&id, (c, top))| {
            let (lp, got) = sglang_triple(c)
                .ok_or("an input_token_logprobs entry is not [logprob, id, text]")?;
            if got != id {
                return Err(format!(
                    "input_token_logprobs names id {got} where the forced id is {id}"
                ));
            }
            let top: Vec<(u32, f32)> = top
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(sglang_triple)
                        .map(|(l, i)| (i, l))
                        .collect()
                })
                .unwrap_or_default();
            Ok(scored(id, Some(lp), top))
        })
        .collect()
}

/// TGI's `details.prefill` (`{id, text, logprob}` per prompt token, the first logprob null; an
/// empty list when the launcher lacks `--enable-prefill-logprobs`): the continuation's
/// logprobs, once its ids are confirmed to be what TGI's own tokenization of the text gave.
fn tgi_scores(
    v: &Value,
    ids: &[u32],
    continuation: &[u32],
) -> std::result::Result<Vec<Scored>, String> {
    let prefill = v["details"]["prefill"]
        .as_array()
        .ok_or("no details.prefill in the reply")?;
    if prefill.is_empty() {
        return Err("details.prefill is empty: TGI returns prefill logprobs only when launched with --enable-prefill-logprobs".into());
    }
    let got: Vec<u32> = prefill.iter().filter_map(|p| as_u32(&p["id"])).collect();
    // TGI adds the tokenizer's special tokens itself (a BOS): the forced ids must be the tail
    // of its prefill.
    if !got.ends_with(ids) {
        return Err("TGI tokenized the forced text into other ids than the prompt's: a text-only API cannot be forced onto these ids".into());
    }
    let tail = &prefill[prefill.len() - continuation.len()..];
    Ok(continuation
        .iter()
        .zip(tail)
        .map(|(&id, p)| Scored {
            id,
            logprob: p["logprob"].as_f64().map(|x| x as f32),
            argmax: None,
            top: Vec::new(),
        })
        .collect())
}

/// llama-server's `completion_probabilities[0].top_logprobs` (`post_sampling_probs: false`: the
/// raw distribution), as (id, logprob).
fn llama_server_top(v: &Value) -> std::result::Result<Vec<(u32, f32)>, String> {
    let top = v["completion_probabilities"][0]["top_logprobs"]
        .as_array()
        .ok_or("no completion_probabilities[0].top_logprobs in the reply (n_probs above 0, post_sampling_probs false)")?;
    Ok(top
        .iter()
        .filter_map(|t| Some((as_u32(&t["id"])?, t["logprob"].as_f64()? as f32)))
        .collect())
}

/// One vLLM `prompt_logprobs` position: `{"<id>": {"logprob", "rank", "decoded_token"}, …}`,
/// the forced token always present, beside the top k by rank.
fn vllm_position(id: u32, at: &Value) -> Option<Scored> {
    let map = at.as_object()?;
    let mut entries: Vec<(u32, f32, u64)> = map
        .iter()
        .filter_map(|(k, v)| {
            Some((
                k.parse().ok()?,
                v["logprob"].as_f64()? as f32,
                v["rank"].as_u64().unwrap_or(u64::MAX),
            ))
        })
        .collect();
    let logprob = entries.iter().find(|e| e.0 == id).map(|e| e.1)?;
    entries.sort_by_key(|e| e.2);
    // The forced token is listed beside the top k even when its rank is past k.
    let top = entries
        .iter()
        .filter(|e| e.2 as usize <= FORCED_TOP)
        .map(|e| (e.0, e.1))
        .collect();
    Some(scored(id, Some(logprob), top))
}

/// `[logprob, id, text]` (SGLang's tuples; the first position's logprob is null).
fn sglang_triple(v: &Value) -> Option<(f32, u32)> {
    let a = v.as_array()?;
    Some((a.first()?.as_f64()? as f32, as_u32(a.get(1)?)?))
}

/// A forced position from the top alternatives: the argmax is the most likely of them.
fn scored(id: u32, logprob: Option<f32>, mut top: Vec<(u32, f32)>) -> Scored {
    top.sort_by(|a, b| b.1.total_cmp(&a.1));
    let argmax = top.first().copied();
    top.truncate(FORCED_TOP);
    Scored {
        id,
        logprob,
        argmax,
        top,
    }
}

fn finish(choice: &Value) -> String {
    choice["finish_reason"]
        .as_str()
        .unwrap_or("stop")
        .to_string()
}

fn as_u32(v: &Value) -> Option<u32> {
    v.as_u64().and_then(|n| u32::try_from(n).ok())
}

fn id_list(v: &Value) -> Option<Vec<u32>> {
    v.as_array()?.iter().map(as_u32).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reply of tests/fixtures/reference-servers (its README says which are real replies and
    /// which are shapes built from a stack's source).
    fn fixture(path: &str) -> Value {
        let dir = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/reference-servers/"
        );
        let text = std::fs::read_to_string(format!("{dir}{path}")).expect("fixture");
        serde_json::from_str(&text).expect("json")
    }

    #[test]
    fn a_vllm_position_keeps_the_forced_token_and_the_top_k_by_rank() {
        let at = json!({"5": {"logprob": -6.2, "rank": 198, "decoded_token": "#"},
            "47": {"logprob": -5.8, "rank": 1, "decoded_token": "M"},
            "258": {"logprob": -5.82, "rank": 2, "decoded_token": ""}});
        let s = vllm_position(5, &at).unwrap();
        assert_eq!(s.logprob, Some(-6.2));
        assert_eq!(s.argmax, Some((47, -5.8)));
        assert_eq!(s.top, vec![(47, -5.8), (258, -5.82)]);
        assert!(
            vllm_position(6, &at).is_none(),
            "a missing forced token is not guessed"
        );
    }

    #[test]
    fn vllm_prompt_logprobs_score_the_forced_tail() {
        // Real vLLM 0.32.0: prompt [1, 5, 9, 30, 31, 40] then the forced [296, 98].
        let v = fixture("vllm-0.32.0/prompt-logprobs.json");
        let s = vllm_scores(&v, 6, &[296, 98]).expect("scores");
        assert_eq!(s.len(), 2);
        for (k, at) in s.iter().enumerate() {
            assert_eq!(at.id, [296, 98][k]);
            let lp = at.logprob.expect("the forced token's logprob");
            assert!(lp < 0.0 && lp.is_finite(), "{at:?}");
            assert_eq!(at.top.len(), 5, "top 5 by rank: {at:?}");
            let (argmax, best) = at.argmax.expect("argmax");
            assert_eq!((argmax, best), at.top[0]);
            assert!(
                best >= lp,
                "the argmax is at least as likely as the forced token"
            );
        }
        // A prefix cache that skipped positions (fewer entries than ids) is refused, not
        // misaligned.
        assert!(vllm_scores(&v, 7, &[296, 98]).is_err());
        assert!(vllm_scores(&v, 6, &[296, 99]).is_err(), "another forced id");
    }

    #[test]
    fn sglang_input_logprobs_give_each_forced_token_and_its_top_k() {
        // Built from SGLang 0.5.23's source: input [1, 450, 4996, 17354, 1701], k = 2, the first
        // entry's logprob null.
        let v = fixture("sglang/sglang-generate.json");
        let s = sglang_scores(&v, &[17354, 1701]).expect("scores");
        assert_eq!(s[0].logprob, Some(-1.6484375));
        assert_eq!(s[1].logprob, Some(-0.063_476_56));
        assert!(s.iter().all(|x| x.top.len() == 2 && x.argmax.is_some()));
        assert!(sglang_scores(&v, &[17354, 1702]).is_err(), "ids must agree");
        // The first position has no logprob: forcing from it cannot be read.
        assert!(sglang_scores(&v, &[1, 450, 4996, 17354, 1701]).is_err());
    }

    #[test]
    fn tgi_prefill_gives_logprobs_only_and_its_ids_are_checked() {
        // Built from TGI's source (db931fc): prefill of "<s> The quick brown fox".
        let v = fixture("tgi/tgi-generate.json");
        // TGI added the BOS itself: the forced ids are the tail of its prefill.
        let s = tgi_scores(&v, &[450, 4996, 17354, 1701], &[17354, 1701]).expect("scores");
        assert_eq!(s[0].logprob, Some(-1.6484375));
        assert!(
            s.iter().all(|x| x.argmax.is_none() && x.top.is_empty()),
            "no alternatives at prompt positions"
        );
        let other = tgi_scores(&v, &[450, 4996, 17355, 1701], &[17355, 1701]).unwrap_err();
        assert!(other.contains("other ids"), "{other}");
        let off = tgi_scores(
            &fixture("tgi/tgi-generate-no-prefill-flag.json"),
            &[450],
            &[450],
        )
        .unwrap_err();
        assert!(off.contains("--enable-prefill-logprobs"), "{off}");
    }

    #[test]
    fn llama_server_gives_the_top_n_of_one_step() {
        // Built from llama.cpp's source (0c1e57098): one step, n_probs 2.
        let top = llama_server_top(&fixture("llama-server/llama-server-completion.json")).unwrap();
        assert_eq!(top, vec![(432, -0.45605472), (12500, -2.046875)]);
        let s = scored(12500, Some(-2.046875), top.clone());
        assert_eq!(s.argmax, Some((432, -0.45605472)));
        // A forced token outside the top n has no logprob: the fingerprint says so, never 0.
        let outside = scored(7, top.iter().find(|t| t.0 == 7).map(|t| t.1), top);
        assert_eq!(outside.logprob, None);
    }
}
