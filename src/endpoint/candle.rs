//! The candle target: a checkpoint run in-process on the CPU with candle 0.11.
//!
//! Architectures: Hugging Face Llama, Mistral, Qwen2, Qwen3, Phi-3 and Gemma-2 directories
//! (safetensors, sharded too; weights of any float dtype are converted to F32) through
//! candle-transformers' `llama`, `mistral`, `qwen2`, `qwen3`, `phi3` and `gemma2` modules, and
//! GGUF files (F32, F16, Q8_0, and candle's other quantizations) of the llama, qwen2, qwen3,
//! phi3, smollm3, granite, olmo2, mistral3 and glm4 architectures through this crate's own quantized decoder (`candle/llama_family.rs`:
//! candle's cannot reach its int8 tiles on most small models, and its `quantized_phi3` has a
//! fixed rotary base, rotates whole heads and ignores LongRoPE; a mixture-of-experts llama file
//! goes through candle's `quantized_llama`), and of gemma3 through this crate's own quantized
//! Gemma 3 (`candle/gemma3.rs`: candle's departs from the model). candle has no quantized
//! Gemma-2, so a gemma2 GGUF is dequantized into the same `gemma2` module (its norms back from
//! llama.cpp's `1 + w` to the checkpoint's `w`).
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
//! decoders also discard their caches whenever they are called at position 0).
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Instant;

use candle_core::quantized::gguf_file;
use candle_core::safetensors::MmapedSafetensors;
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::{gemma2, llama, mistral, phi3, quantized_llama, qwen2, qwen3};
use serde_json::Value;
use tokenizers::Tokenizer;

use super::{FinishReason, GenerateRequest, Generation, TokenStep};
use crate::artifacts::{ModelConfig, ModelDir, WeightFormat};
use crate::error::{Error, Result};
use crate::template::{ChatTemplate, RenderRequest, TemplateError};

/// The GGUF `general.architecture`s the candle target runs.
pub const GGUF_ARCHITECTURES: &[&str] = &[
    "llama", "qwen2", "qwen3", "qwen3moe", "phi3", "smollm3", "granite", "olmo2", "mistral3",
    "glm4", "lfm2", "gemma2", "gemma3",
];
/// The config.json `model_type`s the candle target runs.
pub const HF_MODEL_TYPES: &[&str] = &[
    "llama",
    "mistral",
    "qwen2",
    "qwen3",
    "phi3",
    "gemma2",
    "gemma3_text",
];

/// The ggml tensor types candle 0.11.1 reads (`GgmlDType::from_u32`): F32, F16, Q4_0, Q4_1,
/// Q5_0, Q5_1, Q8_0, Q8_1, the K-quants and BF16. Not the i-quants (IQ4_XS, IQ3_M, … of
/// imatrix quantizations), the ternary TQ types, the repacked Q4_0_4_4 family or MXFP4
/// (gpt-oss): a file with any of those cannot be opened at all.
const GGUF_TENSOR_TYPES: &[u32] = &[0, 1, 2, 3, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 30];

/// Whether the candle target can run this GGUF, from its header: Err says why not (its
/// architecture, or the tensor types candle cannot read, and what it runs).
pub fn runs_gguf(info: &crate::artifacts::GgufInfo) -> std::result::Result<(), String> {
    let arch = info.architecture().unwrap_or_default();
    if !GGUF_ARCHITECTURES.contains(&arch) {
        return Err(format!(
            "general.architecture is \"{arch}\"; the candle target runs {} GGUF files",
            GGUF_ARCHITECTURES.join(", ")
        ));
    }
    let mut unread: std::collections::BTreeMap<&str, usize> = Default::default();
    for t in &info.tensors {
        if !GGUF_TENSOR_TYPES.contains(&t.ggml_type) {
            *unread.entry(t.type_name.as_str()).or_default() += 1;
        }
    }
    if unread.is_empty() {
        return Ok(());
    }
    let named: Vec<String> = unread
        .iter()
        .map(|(name, n)| format!("{n} {name}"))
        .collect();
    Err(format!(
        "{} of its {} tensors are in types candle cannot read ({}); the candle target reads F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and the K-quants (Q2_K to Q6_K)",
        unread.values().sum::<usize>(),
        info.tensors.len(),
        named.join(", ")
    ))
}

/// Whether the candle target can run `dir`'s weights, read from its headers without loading
/// them: Err says why not (its architecture or its GGUF's tensor types, and what it runs).
pub fn runs(dir: &ModelDir) -> std::result::Result<(), String> {
    // As `CandleModel::load` picks: safetensors first, else the GGUF.
    let safetensors = dir
        .weights
        .iter()
        .any(|w| w.format == WeightFormat::Safetensors)
        || dir.shard_index.is_some();
    if let Some(info) = dir.gguf.as_ref().filter(|_| !safetensors) {
        return runs_gguf(info);
    }
    let model_type = dir
        .config
        .as_ref()
        .and_then(|c| c.model_type.as_deref())
        .unwrap_or("llama");
    if HF_MODEL_TYPES.contains(&model_type) {
        Ok(())
    } else {
        Err(format!(
            "model_type \"{model_type}\"; the candle target runs {} checkpoints",
            HF_MODEL_TYPES.join(", ")
        ))
    }
}

mod attention;
pub mod detok;
mod gemma3;
mod gguf;
mod hyper;
mod int8_tiles;
mod llama_family;
pub mod memory;
mod net;
mod safetensors;
pub mod sampling;

use hyper::*;
use net::*;

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
        memory::ensure_fits(
            path,
            "this checkpoint",
            "free memory, or load a quantized GGUF of it (Q8_0 and below stay quantized in memory)",
        )?;
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
        let _reuse = crate::allocator::KeepFreedPages::new();
        self.net.reset();
        let mut logits = self.net.prefill(prompt).map_err(fail)?;
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
        let _reuse = crate::allocator::KeepFreedPages::new();
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
        let _reuse = crate::allocator::KeepFreedPages::new();
        self.net.reset();
        let mut out = Vec::with_capacity(continuation.len() + 1);
        out.push(self.net.prefill(prompt).map_err(fail)?);
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
