//! Random weights shaped so a stand-in talks like a chat model: greedy replies are printable
//! words, and some of them end with the template's turn terminator.
//!
//! Plain random init makes a tiny model repeat one arbitrary token (often a control token or a
//! byte) forever: useless for snapshots and for the stop-set checks. So the output head can only
//! emit a few hundred lowercase word tokens and the turn terminator (every other row is zero),
//! attention is strong enough that the context changes the next word, and the terminator's row
//! is scaled by a factor searched at build time until some — not all — of a fixed set of greedy
//! replies end on it. Everything is drawn from one seeded generator: the same seed gives the
//! same bytes.
use std::collections::HashMap;

use candle_core::{DType, Device, Tensor};
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Normal};
use serde_json::{json, Value};

use super::Options;
use crate::endpoint::candle::CandleModel;
use crate::endpoint::GenerateRequest;
use crate::error::{Error, Result};

/// The dimensions of the stand-in (config.json's).
#[derive(Debug, Clone)]
pub struct Shape {
    pub model_type: String,
    pub vocab: usize,
    pub hidden: usize,
    pub intermediate: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub tie_word_embeddings: bool,
    /// Rotary embeddings' base (config.json's `rope_theta`, 10000 when absent).
    pub rope_theta: f64,
    /// Positions the model takes (`max_position_embeddings`).
    pub context: usize,
    /// The dtype the weights are written in (config.json's `torch_dtype`: F32, or BF16 for a
    /// real-shape stand-in).
    pub dtype: DType,
    /// LFM2's blocks that convolve instead of attending (config.json's `layer_types`, or
    /// those not in `full_attn_idxs`), and how many positions the convolution reads
    /// (`conv_L_cache`).
    pub convolves: Vec<bool>,
    pub conv_taps: usize,
}

impl Shape {
    pub fn from_config(c: &Value) -> Shape {
        let n = |k: &str| c[k].as_u64().unwrap_or(0) as usize;
        Shape {
            model_type: c["model_type"].as_str().unwrap_or("llama").to_string(),
            vocab: n("vocab_size"),
            hidden: n("hidden_size"),
            intermediate: lfm2_mlp_width(c).unwrap_or(n("intermediate_size")),
            layers: n("num_hidden_layers"),
            heads: n("num_attention_heads"),
            kv_heads: n("num_key_value_heads"),
            head_dim: n("head_dim"),
            tie_word_embeddings: c["tie_word_embeddings"].as_bool().unwrap_or(false),
            rope_theta: c["rope_theta"].as_f64().unwrap_or(10_000.0),
            context: c["max_position_embeddings"]
                .as_u64()
                .map_or(2048, |v| v as usize)
                .max(2),
            dtype: match c["torch_dtype"].as_str() {
                Some("bfloat16") => DType::BF16,
                _ => DType::F32,
            },
            convolves: lfm2_convolving_blocks(c, n("num_hidden_layers")),
            conv_taps: n("conv_L_cache").max(1),
        }
    }

    /// Whether block `l` convolves (LFM2).
    pub fn convolves(&self, l: usize) -> bool {
        self.convolves.get(l).copied().unwrap_or(false)
    }

    /// Gemma-2 and Gemma 3: norms that multiply by 1 + w, and a tied head.
    pub fn gemma(&self) -> bool {
        matches!(self.model_type.as_str(), "gemma2" | "gemma3_text")
    }

    /// Qwen2 and GLM-4 have biases on q, k and v.
    pub fn qkv_bias(&self) -> bool {
        matches!(self.model_type.as_str(), "qwen2" | "glm4")
    }

    /// The output head is the embedding matrix: Gemma-2's always, and any config that says so
    /// (a real-shape stand-in keeps the real config's `tie_word_embeddings`).
    pub fn tied(&self) -> bool {
        self.gemma() || self.tie_word_embeddings
    }
}

/// The width of LFM2's MLP as transformers builds it (`Lfm2MLP`) and llama.cpp's converter
/// writes it (`LFM2Model._add_feed_forward_length`): with `block_auto_adjust_ff_dim` (the
/// default), two thirds of `block_ff_dim` (else `intermediate_size`), times
/// `block_ffn_dim_multiplier`, rounded up to `block_multiple_of`. None for other architectures.
/// (Without a multiplier transformers leaves the two thirds unrounded where the converter
/// rounds them: the weights' own width is what the stand-in writes, in both files.)
fn lfm2_mlp_width(c: &Value) -> Option<usize> {
    if c["model_type"] != "lfm2" {
        return None;
    }
    let written = c["block_ff_dim"]
        .as_u64()
        .or_else(|| c["intermediate_size"].as_u64())? as usize;
    if !c["block_auto_adjust_ff_dim"].as_bool().unwrap_or(true) {
        return Some(written);
    }
    let mut ff = 2 * written / 3;
    if let Some(m) = c["block_ffn_dim_multiplier"].as_f64() {
        ff = (m * ff as f64) as usize;
        let of = c["block_multiple_of"].as_u64().unwrap_or(256).max(1) as usize;
        ff = ff.div_ceil(of) * of;
    }
    Some(ff)
}

/// Which of LFM2's blocks convolve: `layer_types` ("conv"), else every block not in
/// `full_attn_idxs` (older configs; transformers derives the types from it). None convolve in
/// other architectures.
pub(super) fn lfm2_convolving_blocks(c: &Value, layers: usize) -> Vec<bool> {
    if let Some(types) = c["layer_types"].as_array() {
        return types.iter().map(|t| t == "conv").collect();
    }
    match c["full_attn_idxs"].as_array() {
        Some(attends) if c["model_type"] == "lfm2" => (0..layers)
            .map(|i| !attends.iter().any(|a| a.as_u64() == Some(i as u64)))
            .collect(),
        _ => Vec::new(),
    }
}

/// The weights written, and what the search found.
pub struct Picked {
    /// HF names → tensors (f32), as in model.safetensors.
    pub tensors: HashMap<String, Tensor>,
    pub terminator: Option<(u32, String)>,
    /// (replies that ended with the terminator, replies tried).
    pub ending: (usize, usize),
    pub notes: Vec<String>,
}

/// Prompts the search replies to; also a fair first smoke test of any stand-in.
const PROMPTS: &[&str] = &[
    "Hi!",
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Count from one to five.",
    "Explain recursion in one sentence.",
    "Name three colours.",
    "Say something kind.",
    "What day comes after Monday?",
];
/// The spread of a real-shape stand-in's logits, in nats: what a trained model's look like
/// (with std 1 per weight, a 576-wide model's logits spread ~24 nats and every alternative sits
/// at -100: any rounding of the weights then moves logprobs by nats, which no checkpoint shows).
const HEAD_LOGIT_STD: f32 = 4.0;
/// Tokens a reply may have before the search counts it as not ending.
const REPLY_TOKENS: usize = 24;
/// Scales of the terminator's output row tried, smallest first.
const SCALES: &[f32] = &[0.8, 1.0, 1.2, 1.4, 1.7, 2.0, 2.5, 3.0, 4.0];

pub fn build(o: &Options, shape: &Shape, tokenizer: &tokenizers::Tokenizer) -> Result<Picked> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(o.seed);
    let words = word_tokens(tokenizer, shape.vocab, shape.tied());
    if words.len() < 16 {
        return Err(Error::input(format!(
            "the tokenizer has only {} plain lowercase word tokens; a stand-in needs at least 16 to write text with",
            words.len()
        )));
    }
    let mut tensors = body(shape, &mut rng)?;
    // A real-shape model gets a trained model's logit scale: a few nats across the vocabulary
    // (the final norm makes the hidden state ~1 per dimension, so std/√hidden per weight). The
    // tiny stand-ins keep 1.0, which makes their few words stand out of a small vocabulary.
    let head_std = if o.real_shape {
        HEAD_LOGIT_STD / (shape.hidden as f32).sqrt()
    } else {
        1.0
    };
    let head = random(&mut rng, &[shape.vocab, shape.hidden], head_std)?;
    // A tied head (Gemma-2) is also the input embedding: the rows of tokens it must not emit
    // stay small but not zero, so prompts made of them still carry information.
    let (head_name, floor) = if shape.tied() {
        ("model.embed_tokens.weight", 0.02f32)
    } else {
        ("lm_head.weight", 0.0)
    };
    let mut mask = vec![floor; shape.vocab];
    for &w in &words {
        mask[w as usize] = 1.0;
    }
    let masked = head
        .broadcast_mul(&Tensor::from_vec(mask.clone(), (shape.vocab, 1), &Device::Cpu).map_err(c)?)
        .map_err(c)?;

    // Write once without a terminator to find it (it needs the tokenizer and template).
    tensors.insert(head_name.into(), masked.clone());
    save(&o.out, &tensors, shape.dtype)?;
    let terminator = turn_terminator(&o.out, tokenizer)?;
    if o.real_shape {
        // At a real size every reply of the search costs seconds a token on a CPU; a model of
        // the real one's cost need not end its replies (they end at max_tokens).
        return Ok(Picked {
            tensors,
            terminator,
            ending: (0, 0),
            notes: vec!["the terminator's row is left as drawn at a real shape (no search): replies end at max_tokens".into()],
        });
    }
    let Some((term_id, term_text)) = terminator.clone() else {
        return Ok(Picked {
            tensors,
            terminator: None,
            ending: (0, 0),
            notes: vec![
                "no turn terminator found in the template: replies end at max_tokens".into(),
            ],
        });
    };
    let row = head.get(term_id as usize).map_err(c)?;
    let mut best: Option<(f32, usize)> = None;
    for &s in SCALES {
        let t = with_row(&masked, term_id as usize, &(&row * s as f64).map_err(c)?)?;
        tensors.insert(head_name.into(), t);
        save(&o.out, &tensors, shape.dtype)?;
        let ending = replies_ending(&o.out, shape, term_id)?;
        let target = PROMPTS.len() / 2;
        let better = best.is_none_or(|(_, e)| ending.abs_diff(target) < e.abs_diff(target));
        if better {
            best = Some((s, ending));
        }
        if ending >= 2 && ending <= PROMPTS.len() - 2 {
            break;
        }
    }
    let (scale, ending) = best.unwrap_or((1.0, 0));
    let t = with_row(
        &masked,
        term_id as usize,
        &(&row * scale as f64).map_err(c)?,
    )?;
    tensors.insert(head_name.into(), t);
    save(&o.out, &tensors, shape.dtype)?;
    let mut notes = vec![format!(
        "{ending} of {} greedy replies to the built-in prompts end with {term_text:?} within {REPLY_TOKENS} tokens (terminator row scaled ×{scale})",
        PROMPTS.len()
    )];
    if ending == 0 {
        notes.push("no reply ends with the terminator: try another --seed".into());
    }
    Ok(Picked {
        tensors,
        terminator,
        ending: (ending, PROMPTS.len()),
        notes,
    })
}

pub(super) fn c(e: candle_core::Error) -> Error {
    Error::input(format!("building the stand-in's weights: {e}"))
}

fn random(rng: &mut rand::rngs::StdRng, dims: &[usize], std: f32) -> Result<Tensor> {
    let n: usize = dims.iter().product();
    let normal = Normal::new(0f32, std).map_err(|e| Error::input(e.to_string()))?;
    let v: Vec<f32> = (0..n).map(|_| normal.sample(rng)).collect();
    Tensor::from_vec(v, dims, &Device::Cpu).map_err(c)
}

fn ones(n: usize) -> Result<Tensor> {
    Tensor::ones(n, DType::F32, &Device::Cpu).map_err(c)
}

/// Norm weights near 1 and each its own (1 + 0.3 sin(i + phase)): drawn from no generator, so
/// the random weights of every architecture stay those of one seed.
fn near_one(n: usize, phase: f32) -> Result<Tensor> {
    let w: Vec<f32> = (0..n)
        .map(|i| 1.0 + 0.3 * (i as f32 + phase).sin())
        .collect();
    Tensor::from_vec(w, n, &Device::Cpu).map_err(c)
}

fn filled(n: usize, v: f32) -> Result<Tensor> {
    Tensor::full(v, n, &Device::Cpu).map_err(c)
}

/// Everything but the output head.
pub(super) fn body(s: &Shape, rng: &mut rand::rngs::StdRng) -> Result<HashMap<String, Tensor>> {
    let mut t = HashMap::new();
    let h = s.hidden;
    // Attention as strong as the embedding, so the context moves the next word; the MLP weaker.
    let attn = 1.0 / (h as f32).sqrt();
    let mlp = 0.5 / (h as f32).sqrt();
    let gemma = s.gemma();
    t.insert(
        "model.embed_tokens.weight".to_string(),
        random(rng, &[s.vocab, h], 1.0)?,
    );
    for l in 0..s.layers {
        let p = format!("model.layers.{l}");
        let q = s.heads * s.head_dim;
        let kv = s.kv_heads * s.head_dim;
        if s.model_type == "lfm2" {
            t.extend(lfm2_block(s, rng, &p, l)?);
            continue;
        }
        if gemma {
            // Gemma's RMSNorm multiplies by 1 + w. The tied head scores every token by its
            // likeness to the last hidden state, which starts as the input token's own
            // embedding (times sqrt(hidden)): unless the attention and MLP outputs (normed
            // again before the residual add) outweigh it, each token predicts itself forever.
            // So they are scaled to 4× and 2× the embedding's size: the context picks the
            // next word.
            let root = (h as f64).sqrt();
            t.insert(format!("{p}.input_layernorm.weight"), filled(h, 0.0)?);
            t.insert(
                format!("{p}.pre_feedforward_layernorm.weight"),
                filled(h, 0.0)?,
            );
            t.insert(
                format!("{p}.post_attention_layernorm.weight"),
                filled(h, (4.0 * root - 1.0) as f32)?,
            );
            t.insert(
                format!("{p}.post_feedforward_layernorm.weight"),
                filled(h, (2.0 * root - 1.0) as f32)?,
            );
        } else if s.model_type == "olmo2" {
            // OLMo-2 norms what attention and the MLP return, not what they read. Weights near
            // 1, each its own, so a norm read at another place moves the logits.
            t.insert(
                format!("{p}.post_attention_layernorm.weight"),
                near_one(h, 1.0)?,
            );
            t.insert(
                format!("{p}.post_feedforward_layernorm.weight"),
                near_one(h, 2.0)?,
            );
        } else {
            t.insert(format!("{p}.input_layernorm.weight"), ones(h)?);
            t.insert(format!("{p}.post_attention_layernorm.weight"), ones(h)?);
            if s.model_type == "glm4" {
                // GLM-4 norms both again before the residual add.
                t.insert(
                    format!("{p}.post_self_attn_layernorm.weight"),
                    near_one(h, 1.0)?,
                );
                t.insert(format!("{p}.post_mlp_layernorm.weight"), near_one(h, 2.0)?);
            }
        }
        // Drawn in the same order for every architecture (q, k, v, o, biases, gate, up,
        // down), so the architectures of one seed share their numbers; Phi-3 fuses them.
        let wq = random(rng, &[q, h], attn * 2.0)?;
        let wk = random(rng, &[kv, h], attn * 2.0)?;
        let wv = random(rng, &[kv, h], attn)?;
        let wo = random(rng, &[h, q], attn)?;
        if s.qkv_bias() {
            t.insert(
                format!("{p}.self_attn.q_proj.bias"),
                random(rng, &[q], 0.02)?,
            );
            t.insert(
                format!("{p}.self_attn.k_proj.bias"),
                random(rng, &[kv], 0.02)?,
            );
            t.insert(
                format!("{p}.self_attn.v_proj.bias"),
                random(rng, &[kv], 0.02)?,
            );
        }
        let gate = random(rng, &[s.intermediate, h], mlp)?;
        let up = random(rng, &[s.intermediate, h], mlp)?;
        let down = random(rng, &[h, s.intermediate], mlp)?;
        t.insert(format!("{p}.self_attn.o_proj.weight"), wo);
        t.insert(format!("{p}.mlp.down_proj.weight"), down);
        if s.model_type == "phi3" {
            let qkv = Tensor::cat(&[&wq, &wk, &wv], 0).map_err(c)?;
            t.insert(format!("{p}.self_attn.qkv_proj.weight"), qkv);
            // gate first: Phi3MLP chunks gate_up_proj's output into (gate, up).
            let gate_up = Tensor::cat(&[&gate, &up], 0).map_err(c)?;
            t.insert(format!("{p}.mlp.gate_up_proj.weight"), gate_up);
            continue;
        }
        if s.model_type == "olmo2" {
            // OLMo-2 norms Q and K across all heads at once (as wide as the projections).
            qk_norms(&mut t, &p, "norm", near_one(q, 3.0)?, near_one(kv, 4.0)?);
        }
        t.insert(format!("{p}.self_attn.q_proj.weight"), wq);
        t.insert(format!("{p}.self_attn.k_proj.weight"), wk);
        t.insert(format!("{p}.self_attn.v_proj.weight"), wv);
        if s.model_type == "qwen3" {
            qk_norms(&mut t, &p, "norm", ones(s.head_dim)?, ones(s.head_dim)?);
        }
        if s.model_type == "gemma3_text" {
            // Gemma 3's per-head norms, 1 + 0.
            let zero = filled(s.head_dim, 0.0)?;
            qk_norms(&mut t, &p, "norm", zero.clone(), zero);
        }
        if s.model_type == "glm4" {
            // Glm4MLP, as Phi-3's: gate_up_proj's output is (gate, up).
            let gate_up = Tensor::cat(&[&gate, &up], 0).map_err(c)?;
            t.insert(format!("{p}.mlp.gate_up_proj.weight"), gate_up);
            continue;
        }
        t.insert(format!("{p}.mlp.gate_proj.weight"), gate);
        t.insert(format!("{p}.mlp.up_proj.weight"), up);
    }
    let norm = if gemma { filled(h, 0.0)? } else { ones(h)? };
    // (LFM2 names its last norm after the embedding it mirrors.)
    let last = if s.model_type == "lfm2" {
        "model.embedding_norm.weight"
    } else {
        "model.norm.weight"
    };
    t.insert(last.to_string(), norm);
    // Consume one draw so a later change of the head's size does not shift the body.
    let _: u32 = rng.random();
    Ok(t)
}

/// One LFM2 block: its operator (attention with per-head Q and K norms, or the gated short
/// convolution: `in_proj` gives B, C and x, the output is C · conv(B · x)), then the MLP
/// (`w1` the gate, `w3` the up, `w2` the down projection). The attention and MLP weights are drawn
/// as every architecture draws them; a convolving block draws its own after them.
fn lfm2_block(
    s: &Shape,
    rng: &mut rand::rngs::StdRng,
    p: &str,
    l: usize,
) -> Result<HashMap<String, Tensor>> {
    let mut t = HashMap::new();
    let h = s.hidden;
    let (q, kv) = (s.heads * s.head_dim, s.kv_heads * s.head_dim);
    let attn = 1.0 / (h as f32).sqrt();
    let mlp = 0.5 / (h as f32).sqrt();
    t.insert(format!("{p}.operator_norm.weight"), ones(h)?);
    t.insert(format!("{p}.ffn_norm.weight"), near_one(h, 1.0)?);
    let wq = random(rng, &[q, h], attn * 2.0)?;
    let wk = random(rng, &[kv, h], attn * 2.0)?;
    let wv = random(rng, &[kv, h], attn)?;
    let wo = random(rng, &[h, q], attn)?;
    t.insert(
        format!("{p}.feed_forward.w1.weight"),
        random(rng, &[s.intermediate, h], mlp)?,
    );
    t.insert(
        format!("{p}.feed_forward.w3.weight"),
        random(rng, &[s.intermediate, h], mlp)?,
    );
    t.insert(
        format!("{p}.feed_forward.w2.weight"),
        random(rng, &[h, s.intermediate], mlp)?,
    );
    if s.convolves(l) {
        // B, C and x drawn as Q and K are; `conv_L_cache` taps a channel.
        let in_proj = random(rng, &[3 * h, h], attn * 2.0)?;
        let taps = random(rng, &[h, 1, s.conv_taps], 0.6)?;
        t.insert(format!("{p}.conv.in_proj.weight"), in_proj);
        t.insert(format!("{p}.conv.conv.weight"), taps);
        t.insert(format!("{p}.conv.out_proj.weight"), wo);
        return Ok(t);
    }
    t.insert(format!("{p}.self_attn.q_proj.weight"), wq);
    t.insert(format!("{p}.self_attn.k_proj.weight"), wk);
    t.insert(format!("{p}.self_attn.v_proj.weight"), wv);
    t.insert(format!("{p}.self_attn.out_proj.weight"), wo);
    let (qn, kn) = (near_one(s.head_dim, 2.0)?, near_one(s.head_dim, 3.0)?);
    qk_norms(&mut t, p, "layernorm", qn, kn);
    Ok(t)
}

/// Q and K norm weights, `{p}.self_attn.q_{name}.weight` and `k_{name}` (`norm` in Qwen3,
/// Gemma 3 and OLMo-2, `layernorm` in LFM2).
fn qk_norms(t: &mut HashMap<String, Tensor>, p: &str, name: &str, q: Tensor, k: Tensor) {
    t.insert(format!("{p}.self_attn.q_{name}.weight"), q);
    t.insert(format!("{p}.self_attn.k_{name}.weight"), k);
}

/// `m` with row `i` replaced.
fn with_row(m: &Tensor, i: usize, row: &Tensor) -> Result<Tensor> {
    let (rows, _) = m.dims2().map_err(c)?;
    let mut parts = Vec::new();
    if i > 0 {
        parts.push(m.narrow(0, 0, i).map_err(c)?);
    }
    parts.push(row.unsqueeze(0).map_err(c)?);
    if i + 1 < rows {
        parts.push(m.narrow(0, i + 1, rows - i - 1).map_err(c)?);
    }
    Tensor::cat(&parts, 0).map_err(c)
}

pub(super) fn save(
    out: &std::path::Path,
    tensors: &HashMap<String, Tensor>,
    dtype: DType,
) -> Result<()> {
    let path = out.join("model.safetensors");
    // candle writes the file in place; a temporary name and a rename keep it whole.
    let tmp = out.join(".chatgate-standin-weights.tmp");
    let cast;
    let tensors = if dtype == DType::F32 {
        tensors
    } else {
        cast = tensors
            .iter()
            .map(|(k, t)| Ok((k.clone(), t.to_dtype(dtype).map_err(c)?)))
            .collect::<Result<HashMap<String, Tensor>>>()?;
        &cast
    };
    candle_core::safetensors::save(tensors, &tmp)
        .map_err(|e| Error::in_file(&path, format!("cannot write: {e}")))?;
    std::fs::rename(&tmp, &path).map_err(|e| Error::io(&path, e))
}

/// Ids whose text is one plain lowercase word of 2–8 letters, with or without a leading space
/// (not special or added tokens): the 600 the stand-in writes with, the lowest ids first. A
/// tied head (Gemma-2) takes whole words (a leading space) first: Gemma's lowest ids are word
/// fragments, which glue into one long non-word. (The untied stand-ins keep the lowest ids,
/// whose replies the family matrix was reviewed with.)
fn word_tokens(tokenizer: &tokenizers::Tokenizer, vocab: usize, tied: bool) -> Vec<u32> {
    let added: std::collections::HashSet<u32> = tokenizer
        .get_added_tokens_decoder()
        .keys()
        .copied()
        .collect();
    // (a fragment ranked after every whole word, id)
    let mut ids: Vec<(bool, u32)> = tokenizer
        .get_vocab(false)
        .values()
        .copied()
        .filter(|&id| (id as usize) < vocab && !added.contains(&id))
        .filter_map(|id| {
            let t = tokenizer.decode(&[id], false).ok()?;
            let spaced = t.strip_prefix(' ');
            let w = spaced.unwrap_or(&t);
            let word = (2..=8).contains(&w.len()) && w.bytes().all(|b| b.is_ascii_lowercase());
            word.then_some((tied && spaced.is_none(), id))
        })
        .collect();
    ids.sort_unstable();
    ids.truncate(600);
    let mut ids: Vec<u32> = ids.into_iter().map(|(_, id)| id).collect();
    ids.sort_unstable();
    ids
}

/// The first special token the template writes after an assistant message's content. Read
/// from the folder's template and tokenizer alone (no weights are loaded: the search needs it
/// before the weights are final, and a real-shape stand-in is large).
pub(super) fn turn_terminator(
    dir: &std::path::Path,
    tokenizer: &tokenizers::Tokenizer,
) -> Result<Option<(u32, String)>> {
    use crate::template::{ChatTemplate, RenderRequest};
    let model = crate::artifacts::ModelDir::open(dir)?;
    let Some(source) = model.templates.select(false) else {
        return Ok(None);
    };
    let Ok(template) = ChatTemplate::new(&source.text) else {
        return Ok(None);
    };
    let marker = "standinmarker";
    let chat = vec![
        json!({"role": "user", "content": "Hi"}),
        json!({"role": "assistant", "content": marker}),
    ];
    let Ok(rendered) = template.render(&RenderRequest {
        messages: chat,
        special_tokens: model.special_tokens(),
        ..Default::default()
    }) else {
        return Ok(None);
    };
    let Some(at) = rendered.text.find(marker) else {
        return Ok(None);
    };
    let after = &rendered.text[at + marker.len()..];
    let ids = tokenizer
        .encode(after, false)
        .map_err(|e| Error::input(format!("cannot tokenize the template's turn end: {e}")))?;
    let added = tokenizer.get_added_tokens_decoder();
    Ok(ids.get_ids().iter().find_map(|id| {
        added
            .get(id)
            .filter(|t| t.special)
            .map(|t| (*id, t.content.clone()))
    }))
}

/// The stand-in in `dir` as candle runs it: the HF folder, or — for an architecture candle runs
/// from GGUF only — model.gguf, written again from the folder's weights as they are now.
pub(super) fn runnable(dir: &std::path::Path, shape: &Shape) -> Result<CandleModel> {
    use crate::endpoint::candle::HF_MODEL_TYPES;
    if HF_MODEL_TYPES.contains(&shape.model_type.as_str()) {
        return CandleModel::load(dir);
    }
    super::rewrite_gguf(dir)?;
    CandleModel::load(&dir.join("model.gguf"))
}

/// How many greedy replies to `PROMPTS` end with `term` within `REPLY_TOKENS`, after at least
/// one word.
fn replies_ending(dir: &std::path::Path, shape: &Shape, term: u32) -> Result<usize> {
    let mut m = runnable(dir, shape)?;
    let mut n = 0;
    for p in PROMPTS {
        let (_, ids) = m.render_chat(&[json!({"role": "user", "content": p})], None, true)?;
        let req = GenerateRequest {
            prompt_ids: ids,
            max_tokens: REPLY_TOKENS,
            stop_token_ids: vec![term],
            ignore_eos: true,
            ..Default::default()
        };
        let g = m.generate(&req, &mut |_| true)?;
        if g.ids.len() > 1 && g.ids.last() == Some(&term) {
            n += 1;
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lfm2MLP's rule, worked by hand: 6656 → 2·6656/3 = 4437 → ×1.0 → up to 18·256 = 4608.
    #[test]
    fn an_lfm2_mlp_is_as_wide_as_transformers_builds_it() {
        let c = |extra: Value| {
            let mut c = json!({"model_type": "lfm2", "block_ff_dim": 6656, "intermediate_size": 6656,
                "block_ffn_dim_multiplier": 1.0, "block_multiple_of": 256});
            c.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            c
        };
        assert_eq!(lfm2_mlp_width(&c(json!({}))), Some(4608));
        let off = c(json!({"block_auto_adjust_ff_dim": false}));
        assert_eq!(lfm2_mlp_width(&off), Some(6656));
        // Without a multiplier the two thirds are not rounded.
        let bare = c(json!({"block_ffn_dim_multiplier": null}));
        assert_eq!(lfm2_mlp_width(&bare), Some(4437));
        let llama = json!({"model_type": "llama", "intermediate_size": 6656});
        assert_eq!(lfm2_mlp_width(&llama), None);
    }

    /// `layer_types` first; an older config's `full_attn_idxs` otherwise.
    #[test]
    fn lfm2_blocks_convolve_as_the_config_lays_them_out() {
        let types =
            json!({"model_type": "lfm2", "layer_types": ["conv", "full_attention", "conv"]});
        assert_eq!(lfm2_convolving_blocks(&types, 3), vec![true, false, true]);
        let idxs = json!({"model_type": "lfm2", "full_attn_idxs": [1, 3]});
        assert_eq!(
            lfm2_convolving_blocks(&idxs, 4),
            vec![true, false, true, false]
        );
        let llama = json!({"model_type": "llama", "full_attn_idxs": [1]});
        assert!(lfm2_convolving_blocks(&llama, 2).is_empty());
    }
}
