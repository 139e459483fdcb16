//! The candle target: a checkpoint run in-process on the CPU with candle 0.11.
//!
//! Architectures: Hugging Face Llama, Mistral, Qwen2, Qwen3, Phi-3 and Gemma-2 directories
//! (safetensors, sharded too; weights of any float dtype are converted to F32) through
//! candle-transformers' `llama`, `mistral`, `qwen2`, `qwen3`, `phi3` and `gemma2` modules, and
//! GGUF files (F32, F16, Q8_0, and candle's other quantizations) of the llama, qwen2 and qwen3
//! architectures through `quantized_llama`, `quantized_qwen2` and `quantized_qwen3`. candle has
//! no quantized Gemma-2, so a gemma2 GGUF is dequantized into the same `gemma2` module (its
//! norms back from llama.cpp's `1 + w` to the checkpoint's `w`). (candle's `quantized_phi3`
//! has no way to empty its KV cache between requests, so a phi3 GGUF runs on llama.cpp only.)
//!
//! Threads: candle sizes its CPU pools from the environment when they are first used —
//! `CANDLE_NUM_THREADS` for the element-wise and quantized-matmul pool and `RAYON_NUM_THREADS`
//! for the F32 gemm (each falls back to the physical core count; `CANDLE_NUM_THREADS` falls
//! back to `RAYON_NUM_THREADS`). Tiny models decode fastest single-threaded
//! (`CANDLE_NUM_THREADS=1 RAYON_NUM_THREADS=1`), which also keeps timings steady on a busy
//! machine. This library never changes those settings; the caller's environment decides.
//!
//! Per request the KV cache starts empty: a fresh `llama::Cache` (cloned from a pristine one,
//! which only shares the rope tables), `clear_kv_cache()` for the other models (the quantized
//! llama also discards its cache whenever it is called with `index_pos == 0`).
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Instant;

use candle_core::quantized::gguf_file;
use candle_core::safetensors::MmapedSafetensors;
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::{
    gemma2, llama, mistral, phi3, quantized_llama, quantized_qwen2, quantized_qwen3, qwen2, qwen3,
};
use serde_json::Value;
use tokenizers::Tokenizer;

use super::{FinishReason, GenerateRequest, Generation, TokenStep};
use crate::artifacts::{ModelConfig, ModelDir, WeightFormat};
use crate::error::{Error, Result};
use crate::template::{ChatTemplate, RenderRequest, TemplateError};

#[path = "detok.rs"]
pub mod detok;
#[path = "sampling.rs"]
pub mod sampling;

use detok::{Detokenizer, StopOutcome, StopText};
use sampling::Sampler;

/// The most positions the in-process model precomputes rotary tables for (HF checkpoints):
/// 1M positions, a few hundred MB at most for the small models candle runs here.
const MAX_IN_PROCESS_POSITIONS: usize = 1 << 20;

/// candle's quantized llama precomputes rope tables for this many positions.
const GGUF_MAX_POSITIONS: usize = quantized_llama::MAX_SEQ_LEN;

/// A checkpoint loaded on the CPU with its tokenizer and chat template.
pub struct CandleModel {
    model: ModelDir,
    tokenizer: Tokenizer,
    net: Net,
    /// The weights the model was loaded from (a directory's shards are named by their folder).
    weights_path: PathBuf,
    architecture: String,
    vocab_size: usize,
    context_length: usize,
    eos_ids: Vec<u32>,
    /// Compiled chat templates: [without tools, with tools].
    templates: [OnceLock<std::result::Result<ChatTemplate, TemplateError>>; 2],
    /// Reused for top-logprob selection.
    scratch: Vec<u32>,
    /// The clock the chat template reads (a suite's `[model] template_date`); None: now.
    template_now: Option<chrono::NaiveDateTime>,
}

/// The network and its per-request state.
enum Net {
    Llama {
        model: llama::Llama,
        /// A cache with nothing in it; cloned per request (the rope tables are shared).
        fresh: llama::Cache,
        live: Option<llama::Cache>,
    },
    Mistral(mistral::Model),
    Qwen2(qwen2::ModelForCausalLM),
    Qwen3(qwen3::ModelForCausalLM),
    Phi3(phi3::Model),
    Gemma2(gemma2::Model),
    Gguf(quantized_llama::ModelWeights),
    GgufQwen2(quantized_qwen2::ModelWeights),
    GgufQwen3(quantized_qwen3::ModelWeights),
}

impl Net {
    /// Forget every cached key/value: the next forward starts a new sequence.
    fn reset(&mut self) {
        match self {
            Net::Llama { fresh, live, .. } => *live = Some(fresh.clone()),
            Net::Mistral(m) => m.clear_kv_cache(),
            Net::Qwen2(m) => m.clear_kv_cache(),
            Net::Qwen3(m) => m.clear_kv_cache(),
            Net::Phi3(m) => m.clear_kv_cache(),
            Net::Gemma2(m) => m.clear_kv_cache(),
            Net::Gguf(m) => m.clear_kv_cache(),
            Net::GgufQwen2(m) => m.clear_kv_cache(),
            Net::GgufQwen3(m) => m.clear_kv_cache(),
        }
    }

    /// Feed `ids` at positions `pos..`, extending the cache; logits of the last position.
    fn forward(&mut self, ids: &[u32], pos: usize) -> candle_core::Result<Vec<f32>> {
        let input = Tensor::new(ids, &Device::Cpu)?.unsqueeze(0)?;
        let logits = match self {
            Net::Llama { model, fresh, live } => {
                let cache = live.get_or_insert_with(|| fresh.clone());
                model.forward(&input, pos, cache)?
            }
            Net::Mistral(m) => m.forward(&input, pos)?,
            Net::Qwen2(m) => m.forward(&input, pos)?,
            Net::Qwen3(m) => m.forward(&input, pos)?,
            Net::Phi3(m) => m.forward(&input, pos)?,
            Net::Gemma2(m) => m.forward(&input, pos)?,
            Net::Gguf(m) => m.forward(&input, pos)?,
            Net::GgufQwen2(m) => m.forward(&input, pos)?,
            Net::GgufQwen3(m) => m.forward(&input, pos)?,
        };
        logits.flatten_all()?.to_dtype(DType::F32)?.to_vec1::<f32>()
    }

    /// A full forward over `ids` that neither reads nor keeps a cache.
    fn forward_uncached(&mut self, ids: &[u32]) -> candle_core::Result<Vec<f32>> {
        match self {
            Net::Llama { model, fresh, .. } => {
                let input = Tensor::new(ids, &Device::Cpu)?.unsqueeze(0)?;
                let mut cache = fresh.clone();
                cache.use_kv_cache = false;
                model
                    .forward(&input, 0, &mut cache)?
                    .flatten_all()?
                    .to_dtype(DType::F32)?
                    .to_vec1::<f32>()
            }
            _ => {
                self.reset();
                let out = self.forward(ids, 0);
                self.reset();
                out
            }
        }
    }
}

/// candle's error text without the backtrace it appends when RUST_BACKTRACE is set.
fn candle_msg(e: &candle_core::Error) -> String {
    use candle_core::Error as E;
    match e {
        E::WithBacktrace { inner, .. } | E::WithPath { inner, .. } => candle_msg(inner),
        E::Context { inner, context } => format!("{context}: {}", candle_msg(inner)),
        other => other.to_string().replace('\n', "; "),
    }
}

/// `llama::Llama::load` unwraps each layer's load: a missing or mis-shaped layer tensor would
/// panic inside candle. The safetensors path checks every tensor first; this turns anything
/// left (e.g. a caller's own `VarBuilder`) into an error.
fn load_llama(vb: VarBuilder, cfg: &llama::Config) -> std::result::Result<llama::Llama, String> {
    let loaded =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| llama::Llama::load(vb, cfg)));
    match loaded {
        Ok(Ok(model)) => Ok(model),
        Ok(Err(e)) => Err(candle_msg(&e)),
        Err(panic) => Err(panic
            .downcast_ref::<String>()
            .map(|s| {
                let first = s.lines().next().unwrap_or_default();
                let unwrapped = "called `Result::unwrap()` on an `Err` value: ";
                first.strip_prefix(unwrapped).unwrap_or(first).to_string()
            })
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "a layer failed to load".to_string())),
    }
}

fn is_ext(path: &Path, ext: &str) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case(ext))
}

impl CandleModel {
    /// Load a Hugging Face model directory (config.json + safetensors, sharded too; Llama, and
    /// the configs that share its layout: Mistral, Qwen2) or a GGUF file (F32, F16, Q8_0).
    ///
    /// A directory with safetensors loads them; a directory with no safetensors and exactly
    /// one `.gguf` loads that GGUF (with the directory's tokenizer files when present).
    pub fn load(path: &Path) -> Result<CandleModel> {
        let meta = std::fs::metadata(path).map_err(|e| {
            Error::io(path, e).hint("give a Hugging Face model directory or a .gguf file")
        })?;
        if meta.is_file() {
            if !is_ext(path, "gguf") {
                return Err(Error::in_file(path, "is a file but not a .gguf model")
                    .hint("give the model directory (config.json + safetensors) or a .gguf file"));
            }
            let dir = ModelDir::open(path)?;
            return Self::from_gguf(path, dir);
        }
        let dir = ModelDir::open(path)?;
        let has_safetensors = dir
            .weights
            .iter()
            .any(|w| w.format == WeightFormat::Safetensors)
            || dir.shard_index.is_some();
        if has_safetensors {
            return Self::from_safetensors(dir);
        }
        let ggufs: Vec<PathBuf> = dir
            .weights
            .iter()
            .filter(|w| w.format == WeightFormat::Gguf)
            .map(|w| w.path.clone())
            .collect();
        match ggufs.as_slice() {
            [one] => {
                let one = one.clone();
                Self::from_gguf(&one, dir)
            }
            [] => Err(Error::in_file(path, "holds no weights (*.safetensors or *.gguf)")
                .hint("point at a directory with config.json and model.safetensors, or at a .gguf file")),
            many => Err(Error::in_file(
                path,
                format!("holds {} .gguf files and no safetensors; which one to load is ambiguous", many.len()),
            )
            .hint("give the path of one .gguf file")),
        }
    }

    /// Load GGUF weights with the tokenizer, chat templates, special tokens and generation
    /// config of a Hugging Face directory (for a GGUF that carries only weights).
    pub fn load_with_tokenizer_dir(gguf: &Path, dir: &Path) -> Result<CandleModel> {
        if !is_ext(gguf, "gguf") {
            return Err(Error::in_file(gguf, "is not a .gguf file"));
        }
        let dir = ModelDir::open(dir)?;
        Self::from_gguf(gguf, dir)
    }

    /// A Llama built from any `VarBuilder` (e.g. random weights from a `VarMap` for
    /// benchmarks), with the tokenizer and templates of `dir`.
    pub fn from_llama_varbuilder(
        dir: ModelDir,
        config: llama::Config,
        vb: VarBuilder,
    ) -> Result<CandleModel> {
        let root = dir.root.clone();
        check_llama_shapes(&config).map_err(|p| Error::in_file(&root, p))?;
        let model = load_llama(vb, &config)
            .map_err(|e| Error::in_file(&root, format!("cannot build the Llama: {e}")))?;
        let fresh = llama::Cache::new(true, DType::F32, &config, &Device::Cpu)
            .map_err(|e| Error::in_file(&root, candle_msg(&e)))?;
        let net = Net::Llama {
            model,
            fresh,
            live: None,
        };
        let ctx = config.max_position_embeddings;
        Self::assemble(dir, net, root, "llama", config.vocab_size, ctx, Vec::new())
    }

    pub fn model_dir(&self) -> &ModelDir {
        &self.model
    }
    /// The tokenizer the model encodes and decodes with.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }
    /// The weight file (GGUF) or model directory (safetensors) that was loaded.
    pub fn weights_path(&self) -> &Path {
        &self.weights_path
    }
    /// config.json's model_type ("llama", "mistral", "qwen2", "qwen3", "phi3"), or "gguf-" and
    /// the GGUF's architecture.
    pub fn architecture(&self) -> &str {
        &self.architecture
    }
    /// Rows of the embedding matrix (ids at or above it are rejected).
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }
    /// The ids the model stops on by default: generation_config eos ∪ tokenizer eos.
    pub fn eos_ids(&self) -> Vec<u32> {
        self.eos_ids.clone()
    }
    /// Context length (max_position_embeddings / llama.context_length).
    pub fn context_length(&self) -> usize {
        self.context_length
    }

    /// Pin the clock the chat template reads (templates that print the date).
    pub fn set_template_now(&mut self, now: Option<chrono::NaiveDateTime>) {
        self.template_now = now;
    }

    /// Render a chat with the model's template (transformers semantics) and tokenize it with
    /// add_special_tokens=false: (text, ids).
    pub fn render_chat(
        &self,
        messages: &[serde_json::Value],
        tools: Option<&serde_json::Value>,
        add_generation_prompt: bool,
    ) -> Result<(String, Vec<u32>)> {
        self.render_chat_with(
            messages,
            tools,
            add_generation_prompt,
            &serde_json::Map::new(),
        )
    }

    /// As [`CandleModel::render_chat`], with `chat_template_kwargs` (only the variables the
    /// template reads are passed, as vLLM does).
    pub fn render_chat_with(
        &self,
        messages: &[serde_json::Value],
        tools: Option<&serde_json::Value>,
        add_generation_prompt: bool,
        template_kwargs: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<(String, Vec<u32>)> {
        let with_tools = tools.is_some();
        let source = self.model.templates.select(with_tools).ok_or_else(|| {
            Error::in_file(&self.model.root, "ships no chat template").hint(
                "add chat_template.jinja (or tokenizer_config.json#chat_template) to the model directory",
            )
        })?;
        let slot = usize::from(with_tools);
        let template = self.templates[slot]
            .get_or_init(|| ChatTemplate::new(&source.text))
            .as_ref()
            .map_err(|e| Error::in_file(&self.model.root, format!("{}: {e}", source.origin)))?;
        let rendered = template
            .render(&RenderRequest {
                messages: messages.to_vec(),
                tools: tools.cloned(),
                add_generation_prompt,
                special_tokens: self.model.special_tokens(),
                now: self.template_now,
                extra: template.read_variables(template_kwargs),
                ..Default::default()
            })
            .map_err(|e| Error::in_file(&self.model.root, format!("{}: {e}", source.origin)))?;
        let ids = self.encode(&rendered.text)?;
        Ok((rendered.text, ids))
    }

    /// Tokenize text without adding special tokens.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let enc = self
            .tokenizer
            .encode(text, false)
            .map_err(|e| Error::input(format!("cannot tokenize: {e}")))?;
        Ok(enc.get_ids().to_vec())
    }

    /// Decode ids to text, skipping special tokens.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.tokenizer
            .decode(ids, true)
            .map_err(|e| Error::input(format!("cannot decode token ids: {e}")))
    }

    /// Generate with a KV cache. `on_step` sees every token as it is produced; returning false
    /// cancels the generation (finish_reason is then whatever ended it: Length).
    pub fn generate(
        &mut self,
        req: &GenerateRequest,
        on_step: &mut dyn FnMut(&TokenStep) -> bool,
    ) -> Result<Generation> {
        let prompt = &req.prompt_ids;
        self.check_ids(prompt)?;
        if prompt.len() > self.context_length {
            return Err(Error::input(format!(
                "the prompt has {} tokens; the model's context is {}",
                prompt.len(),
                self.context_length
            )));
        }
        let mut stop_ids: BTreeSet<u32> = req.stop_token_ids.iter().copied().collect();
        if !req.ignore_eos {
            stop_ids.extend(self.eos_ids.iter().copied());
        }
        let mut sampler = Sampler::new(&req.sampling, self.vocab_size, prompt)?;
        let mut detok = Detokenizer::new(&self.tokenizer, prompt, true)?;
        let mut stops = StopText::new(&req.stop_strings);
        let weights = &self.weights_path;
        let fail = |e: candle_core::Error| {
            Error::in_file(weights, format!("forward pass failed: {}", candle_msg(&e)))
        };

        let mut ids: Vec<u32> = Vec::with_capacity(req.max_tokens.min(4096));
        let mut steps: Vec<TokenStep> = Vec::with_capacity(req.max_tokens.min(4096));
        let mut text = String::new();
        let mut finish = FinishReason::Length;
        let mut pos = prompt.len();
        if req.max_tokens == 0 || pos >= self.context_length {
            return Ok(Generation {
                prompt_tokens: prompt.len(),
                ids,
                text,
                steps,
                finish_reason: finish,
            });
        }
        self.net.reset();
        let mut logits = self.net.forward(prompt, 0).map_err(fail)?;
        loop {
            let lse = sampling::logsumexp(&logits)?;
            let id = sampler.pick(&logits);
            sampler.observe(id);
            let logprob = logits
                .get(id as usize)
                .map_or(f32::NEG_INFINITY, |l| l - lse);
            let top_logprobs = match req.top_logprobs {
                Some(n) => sampling::top_logprobs(&logits, lse, n, &mut self.scratch),
                None => Vec::new(),
            };
            ids.push(id);
            // This token leaves no room for another one.
            let out_of_room = ids.len() >= req.max_tokens || pos + 1 >= self.context_length;
            let mut done = true;
            let step_text = if stop_ids.contains(&id) {
                finish = FinishReason::Stop;
                stops.flush()
            } else {
                let piece = detok.push(id)?;
                match stops.push(&piece) {
                    StopOutcome::Stopped(before) => {
                        finish = FinishReason::Stop;
                        before
                    }
                    StopOutcome::Emit(mut t) => {
                        if out_of_room {
                            t.push_str(&stops.flush());
                        } else {
                            done = false;
                        }
                        t
                    }
                }
            };
            let step = TokenStep {
                id,
                text: step_text,
                logprob,
                top_logprobs,
                at: Instant::now(),
            };
            text.push_str(&step.text);
            let go_on = on_step(&step);
            steps.push(step);
            if done || !go_on {
                break;
            }
            logits = self.net.forward(&[id], pos).map_err(fail)?;
            pos += 1;
        }
        Ok(Generation {
            prompt_tokens: prompt.len(),
            ids,
            text,
            steps,
            finish_reason: finish,
        })
    }

    /// Logits of the last position from a full forward pass over `ids` without a cache (for
    /// checking the cache).
    pub fn last_logits_uncached(&mut self, ids: &[u32]) -> Result<Vec<f32>> {
        self.check_ids(ids)?;
        if ids.len() > self.context_length {
            return Err(Error::input(format!(
                "{} ids exceed the model's context of {}",
                ids.len(),
                self.context_length
            )));
        }
        let weights = &self.weights_path;
        self.net.forward_uncached(ids).map_err(|e| {
            Error::in_file(weights, format!("forward pass failed: {}", candle_msg(&e)))
        })
    }

    /// The logits `generate` sees: after prefilling `prompt`, then after each token of
    /// `continuation` fed one at a time through the KV cache (`continuation.len() + 1` vectors).
    pub fn cached_logits(&mut self, prompt: &[u32], continuation: &[u32]) -> Result<Vec<Vec<f32>>> {
        self.check_ids(prompt)?;
        if !continuation.is_empty() {
            self.check_ids(continuation)?;
        }
        let total = prompt.len() + continuation.len();
        if total > self.context_length {
            return Err(Error::input(format!(
                "{total} ids exceed the model's context of {}",
                self.context_length
            )));
        }
        let weights = &self.weights_path;
        let fail = |e: candle_core::Error| {
            Error::in_file(weights, format!("forward pass failed: {}", candle_msg(&e)))
        };
        self.net.reset();
        let mut out = Vec::with_capacity(continuation.len() + 1);
        out.push(self.net.forward(prompt, 0).map_err(fail)?);
        for (k, &id) in continuation.iter().enumerate() {
            out.push(self.net.forward(&[id], prompt.len() + k).map_err(fail)?);
        }
        Ok(out)
    }

    fn check_ids(&self, ids: &[u32]) -> Result<()> {
        if ids.is_empty() {
            return Err(Error::input("the prompt has no tokens"));
        }
        if let Some(bad) = ids.iter().find(|&&id| id as usize >= self.vocab_size) {
            return Err(Error::input(format!(
                "token id {bad} is outside the model's vocabulary of {}",
                self.vocab_size
            )));
        }
        Ok(())
    }

    /// The parts every loader ends with: tokenizer, eos ids, a smoke forward.
    fn assemble(
        model: ModelDir,
        net: Net,
        weights_path: PathBuf,
        architecture: &str,
        vocab_size: usize,
        context_length: usize,
        weight_eos: Vec<u32>,
    ) -> Result<CandleModel> {
        // The in-process model (and `chatgate serve` over it) stands in for a transformers
        // stack: it tokenizes as transformers 5 does, as the SFT data was tokenized.
        let feed = crate::stack::feed(crate::stack::Stack::Transformers, &model, false)?;
        let tokenizer = match (feed, &model.tokenizer) {
            (Some(f), _) => f.tokenizer,
            (None, Some(t)) => t.tokenizer.clone(),
            (None, None) => {
                let mut e = Error::in_file(
                    &model.root,
                    "has no tokenizer (tokenizer.json, or tokenizer metadata in the GGUF)",
                );
                if !model.notes.is_empty() {
                    e = e.hint(model.notes.join("; "));
                }
                return Err(e);
            }
        };
        if context_length == 0 {
            // A context of 0 would fail every request with "ids exceed the model's context of
            // 0"; say which file is wrong, once, at load.
            return Err(Error::in_file(
                &weights_path,
                "declares a context length of 0 (max_position_embeddings / llama.context_length)",
            )
            .hint("set the model's context length to the positions it was trained on"));
        }
        let eos_ids = default_eos_ids(&model, &tokenizer, &weight_eos);
        let mut m = CandleModel {
            model,
            tokenizer,
            net,
            weights_path,
            architecture: architecture.to_string(),
            vocab_size,
            context_length,
            eos_ids,
            templates: [OnceLock::new(), OnceLock::new()],
            scratch: Vec::new(),
            template_now: None,
        };
        // One token through the network now, so a malformed checkpoint fails at load.
        let logits = m.last_logits_uncached(&[0])?;
        if logits.len() != vocab_size {
            return Err(Error::in_file(
                &m.weights_path,
                format!(
                    "the network returns {} logits for a vocabulary of {vocab_size}",
                    logits.len()
                ),
            ));
        }
        m.net.reset();
        Ok(m)
    }

    fn from_safetensors(dir: ModelDir) -> Result<CandleModel> {
        let root = dir.root.clone();
        let config = dir.config.clone().ok_or_else(|| {
            Error::in_file(&root, "has safetensors weights but no config.json")
                .hint("a Hugging Face checkpoint needs its config.json next to the weights")
        })?;
        let model_type = config.model_type.clone().ok_or_else(|| {
            Error::in_file(&config.path, "has no model_type")
                .hint("set model_type (llama, mistral, qwen2, qwen3, phi3 or gemma2)")
        })?;
        let arch = match model_type.as_str() {
            "llama" => Arch::Llama,
            "mistral" => Arch::Mistral,
            "qwen2" => Arch::Qwen2,
            "qwen3" => Arch::Qwen3,
            "phi3" => Arch::Phi3,
            "gemma2" => Arch::Gemma2,
            other => {
                return Err(Error::in_file(
                    &config.path,
                    format!("model_type \"{other}\" is not supported by the candle target"),
                )
                .hint("the candle target runs llama, mistral, qwen2, qwen3, phi3 and gemma2 checkpoints, and llama, qwen2, qwen3 and gemma2 GGUF files; use a server target for this model"))
            }
        };
        let files = shard_files(&dir)?;
        let shape = Hyper::read(&config, arch)?;
        let st = {
            // SAFETY: the files are mapped read-only; as with every mmap, changing them on disk
            // while the model is loaded is undefined behaviour (candle's own loaders do this).
            let mapped = unsafe { MmapedSafetensors::multi(&files) };
            mapped.map_err(|e| {
                let at = if files.len() == 1 {
                    files[0].clone()
                } else {
                    root.clone()
                };
                Error::in_file(
                    at,
                    format!("cannot read the safetensors weights: {}", candle_msg(&e)),
                )
            })?
        };
        let tied = check_tensors(&st, &shape, &dir)?;
        let vb = VarBuilder::from_backend(Box::new(st), DType::F32, Device::Cpu);
        let built = |e: candle_core::Error| {
            Error::in_file(
                &root,
                format!("cannot build the {model_type} model: {}", candle_msg(&e)),
            )
        };
        let net = match arch {
            Arch::Llama => {
                let cfg = shape.llama_config(tied);
                check_llama_shapes(&cfg).map_err(|p| Error::in_file(&config.path, p))?;
                let model = load_llama(vb, &cfg).map_err(|e| {
                    Error::in_file(&root, format!("cannot build the {model_type} model: {e}"))
                })?;
                let fresh =
                    llama::Cache::new(true, DType::F32, &cfg, &Device::Cpu).map_err(built)?;
                Net::Llama {
                    model,
                    fresh,
                    live: None,
                }
            }
            Arch::Mistral => {
                Net::Mistral(mistral::Model::new(&shape.mistral_config(), vb).map_err(built)?)
            }
            Arch::Qwen2 => {
                Net::Qwen2(qwen2::ModelForCausalLM::new(&shape.qwen2_config(), vb).map_err(built)?)
            }
            Arch::Qwen3 => {
                Net::Qwen3(qwen3::ModelForCausalLM::new(&shape.qwen3_config(), vb).map_err(built)?)
            }
            Arch::Phi3 => Net::Phi3(phi3::Model::new(&shape.phi3_config(tied), vb).map_err(built)?),
            Arch::Gemma2 => {
                Net::Gemma2(gemma2::Model::new(false, &shape.gemma2_config(), vb).map_err(built)?)
            }
        };
        let ctx = shape.context_length();
        Self::assemble(dir, net, root, &model_type, shape.vocab, ctx, Vec::new())
    }

    fn from_gguf(path: &Path, dir: ModelDir) -> Result<CandleModel> {
        let mut file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
        let ct = gguf_file::Content::read(&mut file).map_err(|e| {
            Error::in_file(path, format!("cannot read the GGUF: {}", candle_msg(&e)))
        })?;
        let md_str = |k: &str| ct.metadata.get(k).and_then(|v| v.to_string().ok()).cloned();
        let md_uint = |k: &str| ct.metadata.get(k).and_then(gguf_uint);
        let arch = md_str("general.architecture").unwrap_or_default();
        if !matches!(arch.as_str(), "llama" | "qwen2" | "qwen3" | "gemma2") {
            return Err(Error::in_file(
                path,
                format!("general.architecture is \"{arch}\"; the candle target runs llama, qwen2, qwen3 and gemma2 GGUF files"),
            )
            .hint("use a server target (llama.cpp) for this file"));
        }
        let key = |k: &str| format!("{arch}.{k}");
        let need = |k: &str| {
            md_uint(&key(k)).filter(|&v| v > 0).ok_or_else(|| {
                Error::in_file(
                    path,
                    format!("metadata {} is missing or not a positive integer", key(k)),
                )
            })
        };
        let heads = need("attention.head_count")?;
        let kv_heads = need("attention.head_count_kv")?;
        let embd = need("embedding_length")?;
        let blocks = need("block_count")?;
        // Each block has its own tensors: a count beyond the tensor table is a corrupt header
        // (0xffffffff would make candle allocate billions of layers and abort).
        if blocks > ct.tensor_infos.len() as u64 {
            return Err(Error::in_file(
                path,
                format!(
                    "{} is {blocks} but the file has only {} tensors",
                    key("block_count"),
                    ct.tensor_infos.len()
                ),
            ));
        }
        // Qwen3 and Gemma-2 heads may be wider than embedding_length / head_count
        // (key_length says).
        let own_head_dim = matches!(arch.as_str(), "qwen3" | "gemma2");
        let head_dim = if own_head_dim {
            need("attention.key_length")?
        } else {
            embd / heads
        };
        let rope_dim = md_uint(&key("rope.dimension_count")).unwrap_or(head_dim);
        if heads % kv_heads != 0
            || (!own_head_dim && embd % heads != 0)
            || rope_dim % 2 != 0
            || head_dim % 2 != 0
            || rope_dim != head_dim
        {
            return Err(Error::in_file(
                path,
                format!("inconsistent {arch} metadata: head_count {heads}, head_count_kv {kv_heads}, embedding_length {embd}, head size {head_dim}, rope.dimension_count {rope_dim}"),
            ));
        }
        let vocab = match ct.tensor_infos.get("token_embd.weight") {
            Some(info) => match info.shape.dims() {
                [v, e] if *e as u64 == embd => *v,
                dims => {
                    return Err(Error::in_file(
                        path,
                        format!("token_embd.weight has shape {dims:?}; expected [vocab, {embd}]"),
                    ))
                }
            },
            None => return Err(Error::in_file(path, "has no token_embd.weight tensor")),
        };
        let ctx = match arch.as_str() {
            // quantized_llama precomputes a fixed table; the others size theirs from the file.
            "llama" => md_uint(&key("context_length"))
                .map_or(GGUF_MAX_POSITIONS, |c| (c as usize).min(GGUF_MAX_POSITIONS)),
            _ => {
                let c = need("context_length")? as usize;
                if c > MAX_IN_PROCESS_POSITIONS {
                    return Err(Error::in_file(
                        path,
                        format!("{} is {c}; the in-process model precomputes rotary tables for at most {MAX_IN_PROCESS_POSITIONS} positions", key("context_length")),
                    )
                    .hint("use a server target (llama.cpp) for this file"));
                }
                c
            }
        };
        // candle's Gemma-2 applies its sliding window to every layer (transformers: every
        // other one): the context stops at the window, where both agree.
        let ctx = match md_uint(&key("attention.sliding_window")) {
            Some(w) if arch == "gemma2" && w > 0 => ctx.min(w as usize),
            _ => ctx,
        };
        let weight_eos: Vec<u32> = [
            "tokenizer.ggml.eos_token_id",
            "tokenizer.ggml.eot_token_id",
            "tokenizer.ggml.eom_token_id",
        ]
        .iter()
        .filter_map(|k| md_uint(k))
        .filter_map(|v| u32::try_from(v).ok())
        .collect();
        let cannot = |e: candle_core::Error| {
            Error::in_file(
                path,
                format!("cannot load the GGUF weights: {}", candle_msg(&e)),
            )
        };
        let net = match arch.as_str() {
            "gemma2" => {
                let dims = GgufDims {
                    heads,
                    kv_heads,
                    embd,
                    blocks,
                    head_dim,
                    vocab,
                    ctx,
                };
                let cfg = gemma2_gguf_config(&ct, path, &dims)?;
                Net::Gemma2(gemma2_from_gguf(&ct, &mut file, path, &cfg)?)
            }
            "qwen2" => Net::GgufQwen2(
                quantized_qwen2::ModelWeights::from_gguf(ct, &mut file, &Device::Cpu)
                    .map_err(cannot)?,
            ),
            "qwen3" => Net::GgufQwen3(
                quantized_qwen3::ModelWeights::from_gguf(ct, &mut file, &Device::Cpu)
                    .map_err(cannot)?,
            ),
            _ => Net::Gguf(
                quantized_llama::ModelWeights::from_gguf(ct, &mut file, &Device::Cpu)
                    .map_err(cannot)?,
            ),
        };
        Self::assemble(
            dir,
            net,
            path.to_path_buf(),
            &format!("gguf-{arch}"),
            vocab,
            ctx,
            weight_eos,
        )
    }
}

/// The dimensions `from_gguf` read and checked.
struct GgufDims {
    heads: u64,
    kv_heads: u64,
    embd: u64,
    blocks: u64,
    head_dim: u64,
    vocab: usize,
    ctx: usize,
}

/// candle's `gemma2::Config` from llama.cpp's gemma2 keys (`Gemma2Model.set_gguf_parameters`).
fn gemma2_gguf_config(
    ct: &gguf_file::Content,
    path: &Path,
    d: &GgufDims,
) -> Result<gemma2::Config> {
    let float = |k: &str| {
        ct.metadata
            .get(&format!("gemma2.{k}"))
            .and_then(|v| {
                v.to_f32()
                    .ok()
                    .or_else(|| v.to_f64().ok().map(|f| f as f32))
            })
            .map(f64::from)
    };
    let ffn = ct
        .metadata
        .get("gemma2.feed_forward_length")
        .and_then(gguf_uint)
        .filter(|&v| v > 0)
        .ok_or_else(|| {
            Error::in_file(
                path,
                "metadata gemma2.feed_forward_length is missing or not a positive integer",
            )
        })?;
    Ok(gemma2::Config {
        attention_bias: false,
        head_dim: d.head_dim as usize,
        hidden_activation: candle_nn::Activation::GeluPytorchTanh,
        hidden_size: d.embd as usize,
        intermediate_size: ffn as usize,
        num_attention_heads: d.heads as usize,
        num_hidden_layers: d.blocks as usize,
        num_key_value_heads: d.kv_heads as usize,
        rms_norm_eps: float("attention.layer_norm_rms_epsilon").unwrap_or(1e-6),
        rope_theta: float("rope.freq_base").unwrap_or(10_000.0),
        vocab_size: d.vocab,
        final_logit_softcapping: float("final_logit_softcapping").filter(|&c| c > 0.0),
        attn_logit_softcapping: float("attn_logit_softcapping").filter(|&c| c > 0.0),
        // llama.cpp scales queries by 1/sqrt(key_length) (but for the 27B), as candle does.
        query_pre_attn_scalar: d.head_dim as usize,
        // The context is capped to the window, so the window never masks anything.
        sliding_window: None,
        max_position_embeddings: d.ctx,
    })
}

/// A gemma2 GGUF's tensor → the checkpoint's name, and whether it is a norm (stored by
/// llama.cpp's converter as `1 + w`).
fn gemma2_hf_name(gguf: &str) -> Option<(String, bool)> {
    match gguf {
        "token_embd.weight" => return Some(("model.embed_tokens.weight".into(), false)),
        "output_norm.weight" => return Some(("model.norm.weight".into(), true)),
        _ => {}
    }
    let rest = gguf.strip_prefix("blk.")?;
    let (layer, tensor) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let hf = match tensor {
        "attn_norm.weight" => "input_layernorm.weight",
        "post_attention_norm.weight" => "post_attention_layernorm.weight",
        "ffn_norm.weight" => "pre_feedforward_layernorm.weight",
        "post_ffw_norm.weight" => "post_feedforward_layernorm.weight",
        "attn_q.weight" => "self_attn.q_proj.weight",
        "attn_k.weight" => "self_attn.k_proj.weight",
        "attn_v.weight" => "self_attn.v_proj.weight",
        "attn_output.weight" => "self_attn.o_proj.weight",
        "ffn_gate.weight" => "mlp.gate_proj.weight",
        "ffn_up.weight" => "mlp.up_proj.weight",
        "ffn_down.weight" => "mlp.down_proj.weight",
        _ => return None,
    };
    Some((
        format!("model.layers.{layer}.{hf}"),
        hf.ends_with("layernorm.weight"),
    ))
}

/// candle has no quantized Gemma-2: every tensor is dequantized to F32 under its checkpoint
/// name (norms back to `w`) and the safetensors model is built from them. llama.cpp ties the
/// output to the embeddings; a GGUF with its own `output.weight` would be run wrong, so it is
/// refused.
fn gemma2_from_gguf(
    ct: &gguf_file::Content,
    file: &mut std::fs::File,
    path: &Path,
    cfg: &gemma2::Config,
) -> Result<gemma2::Model> {
    let cannot = |e: candle_core::Error| {
        Error::in_file(
            path,
            format!("cannot load the GGUF weights: {}", candle_msg(&e)),
        )
    };
    if ct.tensor_infos.contains_key("output.weight") {
        return Err(Error::in_file(
            path,
            "has an output.weight tensor; candle's Gemma-2 ties the output head to token_embd",
        )
        .hint("use a server target (llama.cpp) for this file"));
    }
    let mut tensors = std::collections::HashMap::new();
    for name in ct.tensor_infos.keys() {
        let Some((hf, norm)) = gemma2_hf_name(name) else {
            continue;
        };
        let q = ct.tensor(file, name, &Device::Cpu).map_err(cannot)?;
        let mut t = q.dequantize(&Device::Cpu).map_err(cannot)?;
        if norm {
            t = (t - 1.0).map_err(cannot)?;
        }
        tensors.insert(hf, t);
    }
    let vb = VarBuilder::from_tensors(tensors, DType::F32, &Device::Cpu);
    gemma2::Model::new(false, cfg, vb).map_err(cannot)
}

fn gguf_uint(v: &gguf_file::Value) -> Option<u64> {
    use gguf_file::Value as V;
    match v {
        V::U8(x) => Some(*x as u64),
        V::U16(x) => Some(*x as u64),
        V::U32(x) => Some(*x as u64),
        V::U64(x) => Some(*x),
        V::I8(x) => u64::try_from(*x).ok(),
        V::I16(x) => u64::try_from(*x).ok(),
        V::I32(x) => u64::try_from(*x).ok(),
        V::I64(x) => u64::try_from(*x).ok(),
        _ => None,
    }
}

/// generation_config eos (config.json's when there is no generation_config) ∪ the tokenizer's
/// eos token ∪ the GGUF's end-of-generation ids, in that order, without repeats.
fn default_eos_ids(model: &ModelDir, tokenizer: &Tokenizer, weight_eos: &[u32]) -> Vec<u32> {
    let mut out: Vec<u32> = Vec::new();
    let mut add = |id: u32| {
        if !out.contains(&id) {
            out.push(id);
        }
    };
    match &model.generation_config {
        Some(g) if !g.eos_token_ids.is_empty() => g.eos_token_ids.iter().for_each(|&i| add(i)),
        _ => {
            if let Some(c) = &model.config {
                c.eos_token_ids.iter().for_each(|&i| add(i));
            }
        }
    }
    if let Some(id) = model
        .special_tokens()
        .eos_token
        .and_then(|t| tokenizer.token_to_id(&t))
    {
        add(id);
    }
    weight_eos.iter().for_each(|&i| add(i));
    out
}

/// The safetensors files that hold the weights: the index's shards, else every top-level file.
fn shard_files(dir: &ModelDir) -> Result<Vec<PathBuf>> {
    if let Some(index) = &dir.shard_index {
        if !index.missing_shards.is_empty() {
            return Err(Error::in_file(
                &index.path,
                format!(
                    "names shards that are not on disk: {}",
                    index.missing_shards.join(", ")
                ),
            ));
        }
        let names: BTreeSet<&String> = index.weight_map.values().collect();
        if names.is_empty() {
            return Err(Error::in_file(&index.path, "has an empty weight_map"));
        }
        return Ok(names.into_iter().map(|n| dir.root.join(n)).collect());
    }
    let files: Vec<PathBuf> = dir
        .weights
        .iter()
        .filter(|w| w.format == WeightFormat::Safetensors)
        .map(|w| w.path.clone())
        .collect();
    if files.is_empty() {
        return Err(Error::in_file(&dir.root, "holds no .safetensors files"));
    }
    Ok(files)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Arch {
    Llama,
    Mistral,
    Qwen2,
    Qwen3,
    Phi3,
    Gemma2,
}

/// The hyper-parameters of config.json, checked.
#[derive(Debug, Clone)]
struct Hyper {
    arch: Arch,
    vocab: usize,
    hidden: usize,
    intermediate: usize,
    layers: usize,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    max_positions: usize,
    rms_norm_eps: f64,
    rope_theta: f64,
    rope_scaling: Option<llama::Llama3RopeConfig>,
    tie_word_embeddings: bool,
    hidden_act: candle_nn::Activation,
    /// The sliding window when one is in force (the context is capped to it).
    sliding_window: Option<usize>,
    max_window_layers: usize,
    attention_bias: bool,
    /// Phi-3: the share of each head that is rotated (Phi-4-mini: 0.75).
    partial_rotary_factor: Option<f64>,
    /// Gemma-2: tanh caps on attention scores and on the output logits.
    attn_logit_softcapping: Option<f64>,
    final_logit_softcapping: Option<f64>,
}

struct Fields<'a> {
    raw: &'a Value,
    path: &'a Path,
}

impl Fields<'_> {
    fn err(&self, key: &str, what: &str) -> Error {
        Error::in_file(self.path, format!("{key}: {what}"))
    }
    fn uint(&self, key: &str) -> Result<Option<usize>> {
        match self.raw.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v
                .as_u64()
                .and_then(|n| usize::try_from(n).ok())
                .map(Some)
                .ok_or_else(|| self.err(key, &format!("expected a non-negative integer, got {v}"))),
        }
    }
    fn positive(&self, key: &str) -> Result<usize> {
        match self.uint(key)? {
            Some(n) if n > 0 => Ok(n),
            Some(_) => Err(self.err(key, "must be greater than 0")),
            None => Err(self.err(key, "is missing")),
        }
    }
    fn float(&self, key: &str) -> Result<Option<f64>> {
        match self.raw.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v
                .as_f64()
                .map(Some)
                .ok_or_else(|| self.err(key, &format!("expected a number, got {v}"))),
        }
    }
    fn boolean(&self, key: &str) -> Result<Option<bool>> {
        match self.raw.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(self.err(key, &format!("expected true or false, got {v}"))),
        }
    }
}

impl Hyper {
    fn read(config: &ModelConfig, arch: Arch) -> Result<Hyper> {
        let f = Fields {
            raw: &config.raw,
            path: &config.path,
        };
        let vocab = f.positive("vocab_size")?;
        let hidden = f.positive("hidden_size")?;
        let intermediate = f.positive("intermediate_size")?;
        let layers = f.positive("num_hidden_layers")?;
        let heads = f.positive("num_attention_heads")?;
        let kv_heads = match f.uint("num_key_value_heads")? {
            Some(0) => return Err(f.err("num_key_value_heads", "must be greater than 0")),
            Some(n) => n,
            None => heads,
        };
        if heads % kv_heads != 0 {
            return Err(f.err(
                "num_key_value_heads",
                &format!("{kv_heads} does not divide num_attention_heads {heads}"),
            ));
        }
        let default_head_dim = hidden / heads;
        let head_dim = match f.uint("head_dim")? {
            Some(d) if matches!(arch, Arch::Mistral | Arch::Qwen3 | Arch::Gemma2) && d > 0 => d,
            Some(d) if d != default_head_dim => {
                return Err(f.err(
                    "head_dim",
                    &format!("{d} differs from hidden_size / num_attention_heads = {default_head_dim}, which candle's {arch:?} requires"),
                ))
            }
            _ => default_head_dim,
        };
        if !matches!(arch, Arch::Mistral | Arch::Qwen3 | Arch::Gemma2) && hidden % heads != 0 {
            return Err(f.err(
                "hidden_size",
                &format!("{hidden} is not a multiple of num_attention_heads {heads}"),
            ));
        }
        if head_dim == 0 || head_dim % 2 != 0 {
            return Err(f.err("head_dim", &format!("{head_dim} must be even and positive")));
        }
        let max_positions = match f.uint("max_position_embeddings")? {
            Some(0) => return Err(f.err("max_position_embeddings", "must be greater than 0")),
            // candle precomputes rotary tables for every position: a value this large (1e9 in
            // a hostile file) would ask for terabytes and abort. The in-process model runs
            // short prompts, so its context is capped instead.
            Some(n) => n.min(MAX_IN_PROCESS_POSITIONS),
            None if arch == Arch::Llama => 2048,
            None => return Err(f.err("max_position_embeddings", "is missing")),
        };
        let rms_norm_eps = f.float("rms_norm_eps")?.unwrap_or(1e-6);
        // transformers 5 moved rope_theta / rope_scaling into rope_parameters.
        let rope_params = config.raw.get("rope_parameters").filter(|v| v.is_object());
        let rope_theta = match f.float("rope_theta")? {
            Some(t) => t,
            None => rope_params
                .and_then(|p| p.get("rope_theta"))
                .and_then(Value::as_f64)
                .unwrap_or(10_000.0),
        };
        let scaling = config
            .raw
            .get("rope_scaling")
            .filter(|v| !v.is_null())
            .or(rope_params);
        let rope_scaling = match scaling {
            None => None,
            Some(s) => {
                let kind = s
                    .get("rope_type")
                    .or_else(|| s.get("type"))
                    .and_then(Value::as_str)
                    .unwrap_or("default");
                match kind {
                    "default" => None,
                    "llama3" if arch == Arch::Llama => {
                        let num = |k: &str| {
                            s.get(k).and_then(Value::as_f64).ok_or_else(|| {
                                f.err("rope_scaling", &format!("llama3 scaling needs {k}"))
                            })
                        };
                        Some(llama::Llama3RopeConfig {
                            factor: num("factor")? as f32,
                            low_freq_factor: num("low_freq_factor")? as f32,
                            high_freq_factor: num("high_freq_factor")? as f32,
                            original_max_position_embeddings: num(
                                "original_max_position_embeddings",
                            )?
                                as usize,
                            rope_type: llama::Llama3RopeType::Llama3,
                        })
                    }
                    other => {
                        return Err(f.err(
                            "rope_scaling",
                            &format!("rope type \"{other}\" is not supported by candle's {arch:?}"),
                        ))
                    }
                }
            }
        };
        // Gemma2Config ties by default; the others do not.
        let tie_word_embeddings = f
            .boolean("tie_word_embeddings")?
            .unwrap_or(arch == Arch::Gemma2);
        if arch == Arch::Gemma2 && !tie_word_embeddings {
            return Err(f.err(
                "tie_word_embeddings",
                "candle's Gemma-2 ties the output head to the embeddings",
            ));
        }
        // Gemma2 reads `hidden_activation` (its configs carry both).
        let act_key = match arch {
            Arch::Gemma2 if config.raw.get("hidden_activation").is_some() => "hidden_activation",
            _ => "hidden_act",
        };
        let hidden_act = match config.raw.get(act_key).and_then(Value::as_str) {
            None if arch == Arch::Gemma2 => candle_nn::Activation::GeluPytorchTanh,
            None => candle_nn::Activation::Silu,
            Some(a) => serde_json::from_value(Value::String(a.to_string()))
                .map_err(|_| f.err(act_key, &format!("\"{a}\" is not supported")))?,
        };
        if arch == Arch::Llama {
            if hidden_act != candle_nn::Activation::Silu {
                return Err(f.err("hidden_act", "candle's Llama runs silu only"));
            }
            for key in ["attention_bias", "mlp_bias"] {
                if f.boolean(key)? == Some(true) {
                    return Err(f.err(key, "biases are not supported by candle's Llama"));
                }
            }
        }
        let sliding_window = match arch {
            Arch::Llama => None,
            Arch::Mistral | Arch::Phi3 | Arch::Gemma2 => f.uint("sliding_window")?,
            Arch::Qwen2 | Arch::Qwen3 => {
                if f.boolean("use_sliding_window")?.unwrap_or(false) {
                    f.uint("sliding_window")?
                } else {
                    None
                }
            }
        };
        let max_window_layers = f.uint("max_window_layers")?.unwrap_or(layers);
        let attention_bias = f.boolean("attention_bias")?.unwrap_or(false);
        if arch == Arch::Phi3 && attention_bias {
            return Err(f.err(
                "attention_bias",
                "biases are not supported by candle's Phi-3",
            ));
        }
        if arch == Arch::Gemma2 {
            // candle scales attention by 1/sqrt(head_dim); transformers by this scalar.
            if let Some(q) = f.uint("query_pre_attn_scalar")? {
                if q != head_dim {
                    return Err(f.err(
                        "query_pre_attn_scalar",
                        &format!("{q} differs from head_dim {head_dim}; candle's Gemma-2 scales attention by head_dim"),
                    ));
                }
            }
        }
        let softcap = |k: &str| -> Result<Option<f64>> {
            Ok(f.float(k)?.filter(|&c| c > 0.0 && arch == Arch::Gemma2))
        };
        let attn_logit_softcapping = softcap("attn_logit_softcapping")?;
        let final_logit_softcapping = softcap("final_logit_softcapping")?;
        let partial_rotary_factor = f.float("partial_rotary_factor")?;
        if let Some(p) = partial_rotary_factor {
            let rotated = (head_dim as f64 * p) as usize;
            if arch != Arch::Phi3 || !(p > 0.0 && p <= 1.0) || rotated % 2 != 0 {
                return Err(f.err(
                    "partial_rotary_factor",
                    &format!("{p} is not supported by candle's {arch:?} (head_dim {head_dim})"),
                ));
            }
        }
        Ok(Hyper {
            arch,
            vocab,
            hidden,
            intermediate,
            layers,
            heads,
            kv_heads,
            head_dim,
            max_positions,
            rms_norm_eps,
            rope_theta,
            rope_scaling,
            tie_word_embeddings,
            hidden_act,
            sliding_window: sliding_window.filter(|&w| w > 0),
            max_window_layers,
            attention_bias,
            partial_rotary_factor,
            attn_logit_softcapping,
            final_logit_softcapping,
        })
    }

    /// The context served exactly: candle applies sliding windows only inside one prefill,
    /// so the context stops at the window.
    fn context_length(&self) -> usize {
        match self.sliding_window {
            Some(w) => self.max_positions.min(w),
            None => self.max_positions,
        }
    }

    fn llama_config(&self, tied: bool) -> llama::Config {
        llama::Config {
            hidden_size: self.hidden,
            intermediate_size: self.intermediate,
            vocab_size: self.vocab,
            num_hidden_layers: self.layers,
            num_attention_heads: self.heads,
            num_key_value_heads: self.kv_heads,
            use_flash_attn: false,
            rms_norm_eps: self.rms_norm_eps,
            rope_theta: self.rope_theta as f32,
            bos_token_id: None,
            eos_token_id: None,
            rope_scaling: self.rope_scaling.clone(),
            max_position_embeddings: self.max_positions,
            tie_word_embeddings: tied,
        }
    }

    fn mistral_config(&self) -> mistral::Config {
        mistral::Config {
            vocab_size: self.vocab,
            hidden_size: self.hidden,
            intermediate_size: self.intermediate,
            num_hidden_layers: self.layers,
            num_attention_heads: self.heads,
            head_dim: Some(self.head_dim),
            num_key_value_heads: self.kv_heads,
            hidden_act: self.hidden_act,
            max_position_embeddings: self.max_positions,
            rms_norm_eps: self.rms_norm_eps,
            rope_theta: self.rope_theta,
            // The context is capped to the window, so the window never masks anything.
            sliding_window: None,
            use_flash_attn: false,
        }
    }

    fn qwen2_config(&self) -> qwen2::Config {
        qwen2::Config {
            vocab_size: self.vocab,
            hidden_size: self.hidden,
            intermediate_size: self.intermediate,
            num_hidden_layers: self.layers,
            num_attention_heads: self.heads,
            num_key_value_heads: self.kv_heads,
            max_position_embeddings: self.max_positions,
            // Never reached: the context is at most the window (or there is none).
            sliding_window: self.max_positions,
            max_window_layers: self.max_window_layers,
            tie_word_embeddings: self.tie_word_embeddings,
            rope_theta: self.rope_theta,
            rms_norm_eps: self.rms_norm_eps,
            use_sliding_window: false,
            hidden_act: self.hidden_act,
        }
    }

    fn qwen3_config(&self) -> qwen3::Config {
        qwen3::Config {
            vocab_size: self.vocab,
            hidden_size: self.hidden,
            intermediate_size: self.intermediate,
            num_hidden_layers: self.layers,
            num_attention_heads: self.heads,
            head_dim: self.head_dim,
            attention_bias: self.attention_bias,
            num_key_value_heads: self.kv_heads,
            max_position_embeddings: self.max_positions,
            // Never reached: the context is at most the window (or there is none).
            sliding_window: None,
            max_window_layers: self.max_window_layers,
            tie_word_embeddings: self.tie_word_embeddings,
            rope_theta: self.rope_theta,
            rms_norm_eps: self.rms_norm_eps,
            use_sliding_window: false,
            hidden_act: self.hidden_act,
        }
    }

    fn phi3_config(&self, tied: bool) -> phi3::Config {
        phi3::Config {
            vocab_size: self.vocab,
            hidden_act: self.hidden_act,
            hidden_size: self.hidden,
            intermediate_size: self.intermediate,
            num_hidden_layers: self.layers,
            num_attention_heads: self.heads,
            num_key_value_heads: self.kv_heads,
            rms_norm_eps: self.rms_norm_eps,
            rope_theta: self.rope_theta,
            bos_token_id: None,
            eos_token_id: None,
            // The in-process context is capped to the positions trained without scaling.
            rope_scaling: None,
            max_position_embeddings: self.max_positions,
            original_max_position_embeddings: None,
            partial_rotary_factor: self.partial_rotary_factor,
            tie_word_embeddings: tied,
        }
    }

    fn gemma2_config(&self) -> gemma2::Config {
        gemma2::Config {
            attention_bias: self.attention_bias,
            head_dim: self.head_dim,
            hidden_activation: self.hidden_act,
            hidden_size: self.hidden,
            intermediate_size: self.intermediate,
            num_attention_heads: self.heads,
            num_hidden_layers: self.layers,
            num_key_value_heads: self.kv_heads,
            rms_norm_eps: self.rms_norm_eps,
            rope_theta: self.rope_theta,
            vocab_size: self.vocab,
            final_logit_softcapping: self.final_logit_softcapping,
            attn_logit_softcapping: self.attn_logit_softcapping,
            query_pre_attn_scalar: self.head_dim,
            // The context is capped to the window, so the window never masks anything.
            sliding_window: None,
            max_position_embeddings: self.context_length(),
        }
    }

    /// (name, shape) of every tensor the architecture loads; lm_head last.
    fn expected(&self) -> Vec<(String, Vec<usize>)> {
        let (h, i) = (self.hidden, self.intermediate);
        let q = self.heads * self.head_dim;
        let kv = self.kv_heads * self.head_dim;
        let mut out = vec![
            ("model.embed_tokens.weight".to_string(), vec![self.vocab, h]),
            ("model.norm.weight".to_string(), vec![h]),
        ];
        for l in 0..self.layers {
            let p = format!("model.layers.{l}");
            let mut add = |n: &str, s: Vec<usize>| out.push((format!("{p}.{n}"), s));
            add("input_layernorm.weight", vec![h]);
            add("post_attention_layernorm.weight", vec![h]);
            if self.arch == Arch::Phi3 {
                // Phi-3 fuses q, k, v into one projection, and gate and up into another.
                add("self_attn.qkv_proj.weight", vec![q + 2 * kv, h]);
                add("self_attn.o_proj.weight", vec![h, q]);
                add("mlp.gate_up_proj.weight", vec![2 * i, h]);
                add("mlp.down_proj.weight", vec![h, i]);
                continue;
            }
            add("self_attn.q_proj.weight", vec![q, h]);
            add("self_attn.k_proj.weight", vec![kv, h]);
            add("self_attn.v_proj.weight", vec![kv, h]);
            add("self_attn.o_proj.weight", vec![h, q]);
            if self.arch == Arch::Qwen2 || self.attention_bias {
                add("self_attn.q_proj.bias", vec![q]);
                add("self_attn.k_proj.bias", vec![kv]);
                add("self_attn.v_proj.bias", vec![kv]);
            }
            if self.arch == Arch::Qwen3 {
                add("self_attn.q_norm.weight", vec![self.head_dim]);
                add("self_attn.k_norm.weight", vec![self.head_dim]);
            }
            if self.arch == Arch::Gemma2 {
                add("pre_feedforward_layernorm.weight", vec![h]);
                add("post_feedforward_layernorm.weight", vec![h]);
            }
            add("mlp.gate_proj.weight", vec![i, h]);
            add("mlp.up_proj.weight", vec![i, h]);
            add("mlp.down_proj.weight", vec![h, i]);
        }
        // Gemma-2's head is the embedding (tie_word_embeddings is checked in `read`).
        if self.arch != Arch::Gemma2 {
            out.push(("lm_head.weight".to_string(), vec![self.vocab, h]));
        }
        out
    }
}

/// Shapes candle's Llama would otherwise panic or fail on deep inside.
fn check_llama_shapes(cfg: &llama::Config) -> std::result::Result<(), String> {
    if cfg.num_attention_heads == 0
        || cfg.num_key_value_heads == 0
        || cfg.hidden_size % cfg.num_attention_heads != 0
        || cfg.num_attention_heads % cfg.num_key_value_heads != 0
        || (cfg.hidden_size / cfg.num_attention_heads) % 2 != 0
        || cfg.vocab_size == 0
        || cfg.max_position_embeddings == 0
    {
        return Err(format!(
            "inconsistent Llama shape: hidden_size {}, num_attention_heads {}, num_key_value_heads {}, vocab_size {}, max_position_embeddings {}",
            cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.vocab_size, cfg.max_position_embeddings
        ));
    }
    Ok(())
}

/// Every tensor present with the shape config.json implies and a float dtype; returns whether
/// the lm_head is tied to the embeddings (no lm_head.weight in the files).
fn check_tensors(st: &MmapedSafetensors, hyper: &Hyper, dir: &ModelDir) -> Result<bool> {
    let file_of = |name: &str| -> PathBuf {
        if let Some(index) = &dir.shard_index {
            if let Some(f) = index.weight_map.get(name) {
                return dir.root.join(f);
            }
            return index.path.clone();
        }
        let files: Vec<&PathBuf> = dir
            .weights
            .iter()
            .filter(|w| w.format == WeightFormat::Safetensors)
            .map(|w| &w.path)
            .collect();
        match files.as_slice() {
            [one] => (*one).clone(),
            _ => dir.root.clone(),
        }
    };
    let mut tied = hyper.tie_word_embeddings;
    for (name, shape) in hyper.expected() {
        let view = match st.get(&name) {
            Ok(v) => v,
            Err(_) if name == "lm_head.weight" => {
                if hyper.tie_word_embeddings && hyper.arch != Arch::Mistral {
                    tied = true;
                    continue;
                }
                let why = if hyper.arch == Arch::Mistral {
                    "candle's Mistral has no tied embeddings"
                } else {
                    "config.json does not set tie_word_embeddings"
                };
                return Err(Error::in_file(
                    file_of(&name),
                    format!("lm_head.weight is missing ({why})"),
                ));
            }
            Err(_) => return Err(Error::in_file(
                file_of(&name),
                format!("tensor {name} is missing"),
            )
            .hint(
                "the weights do not match config.json (wrong checkpoint, or an unsupported layout)",
            )),
        };
        if view.shape() != shape.as_slice() {
            return Err(Error::in_file(
                file_of(&name),
                format!(
                    "tensor {name} has shape {:?}; config.json implies {:?}",
                    view.shape(),
                    shape
                ),
            ));
        }
        let dtype = format!("{:?}", view.dtype());
        if !matches!(dtype.as_str(), "F32" | "F16" | "BF16" | "F64") {
            return Err(Error::in_file(
                file_of(&name),
                format!("tensor {name} has dtype {dtype}; the candle target loads float weights (F32, F16, BF16)"),
            ));
        }
    }
    Ok(tied)
}
