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
    /// The dtype the weights are written in (config.json's `torch_dtype`: F32, or BF16 for a
    /// real-shape stand-in).
    pub dtype: DType,
}

impl Shape {
    pub fn from_config(c: &Value) -> Shape {
        let n = |k: &str| c[k].as_u64().unwrap_or(0) as usize;
        Shape {
            model_type: c["model_type"].as_str().unwrap_or("llama").to_string(),
            vocab: n("vocab_size"),
            hidden: n("hidden_size"),
            intermediate: n("intermediate_size"),
            layers: n("num_hidden_layers"),
            heads: n("num_attention_heads"),
            kv_heads: n("num_key_value_heads"),
            head_dim: n("head_dim"),
            tie_word_embeddings: c["tie_word_embeddings"].as_bool().unwrap_or(false),
            dtype: match c["torch_dtype"].as_str() {
                Some("bfloat16") => DType::BF16,
                _ => DType::F32,
            },
        }
    }

    /// Qwen2 has biases on q, k and v.
    pub fn qkv_bias(&self) -> bool {
        self.model_type == "qwen2"
    }

    /// The output head is the embedding matrix: Gemma-2's always, and any config that says so
    /// (a real-shape stand-in keeps the real config's `tie_word_embeddings`).
    pub fn tied(&self) -> bool {
        self.model_type == "gemma2" || self.tie_word_embeddings
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
    let terminator = turn_terminator(&o.out)?;
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
        let ending = replies_ending(&o.out, term_id)?;
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

fn c(e: candle_core::Error) -> Error {
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

fn filled(n: usize, v: f32) -> Result<Tensor> {
    Tensor::full(v, n, &Device::Cpu).map_err(c)
}

/// Everything but the output head.
fn body(s: &Shape, rng: &mut rand::rngs::StdRng) -> Result<HashMap<String, Tensor>> {
    let mut t = HashMap::new();
    let h = s.hidden;
    // Attention as strong as the embedding, so the context moves the next word; the MLP weaker.
    let attn = 1.0 / (h as f32).sqrt();
    let mlp = 0.5 / (h as f32).sqrt();
    let gemma = s.model_type == "gemma2";
    t.insert(
        "model.embed_tokens.weight".to_string(),
        random(rng, &[s.vocab, h], 1.0)?,
    );
    for l in 0..s.layers {
        let p = format!("model.layers.{l}");
        let q = s.heads * s.head_dim;
        let kv = s.kv_heads * s.head_dim;
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
        } else {
            t.insert(format!("{p}.input_layernorm.weight"), ones(h)?);
            t.insert(format!("{p}.post_attention_layernorm.weight"), ones(h)?);
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
        t.insert(format!("{p}.self_attn.q_proj.weight"), wq);
        t.insert(format!("{p}.self_attn.k_proj.weight"), wk);
        t.insert(format!("{p}.self_attn.v_proj.weight"), wv);
        if s.model_type == "qwen3" {
            t.insert(format!("{p}.self_attn.q_norm.weight"), ones(s.head_dim)?);
            t.insert(format!("{p}.self_attn.k_norm.weight"), ones(s.head_dim)?);
        }
        t.insert(format!("{p}.mlp.gate_proj.weight"), gate);
        t.insert(format!("{p}.mlp.up_proj.weight"), up);
    }
    let norm = if gemma { filled(h, 0.0)? } else { ones(h)? };
    t.insert("model.norm.weight".to_string(), norm);
    // Consume one draw so a later change of the head's size does not shift the body.
    let _: u32 = rng.random();
    Ok(t)
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

fn save(out: &std::path::Path, tensors: &HashMap<String, Tensor>, dtype: DType) -> Result<()> {
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

/// The first special token the template writes after an assistant message's content.
fn turn_terminator(dir: &std::path::Path) -> Result<Option<(u32, String)>> {
    let m = CandleModel::load(dir)?;
    let marker = "standinmarker";
    let chat = [
        json!({"role": "user", "content": "Hi"}),
        json!({"role": "assistant", "content": marker}),
    ];
    let Ok((text, _)) = m.render_chat(&chat, None, false) else {
        return Ok(None);
    };
    let Some(at) = text.find(marker) else {
        return Ok(None);
    };
    let after = &text[at + marker.len()..];
    let ids = m.encode(after)?;
    let added = m.tokenizer().get_added_tokens_decoder();
    Ok(ids.into_iter().find_map(|id| {
        added
            .get(&id)
            .filter(|t| t.special)
            .map(|t| (id, t.content.clone()))
    }))
}

/// How many greedy replies to `PROMPTS` end with `term` within `REPLY_TOKENS`, after at least
/// one word.
fn replies_ending(dir: &std::path::Path, term: u32) -> Result<usize> {
    let mut m = CandleModel::load(dir)?;
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

/// Weights whose greedy reply to any prompt is `reply`, then the turn terminator: a stand-in
/// that emits a family's real framing (a `<tool_call>` block, a think block) where random
/// weights never would.
///
/// Every layer's output projections are zero, so the residual stream carries the last token's
/// embedding to the head unchanged: the model is a bigram table. `reply` is spelt with token
/// ids used once each (the search picks other spellings of repeated text), so each id names
/// its successor. Every embedding is `u + r`, with `u` shared and the `r`s orthonormal for the
/// reply's ids; the head scores the reply's first id on `u` (any token leads into the reply)
/// and each next id on its predecessor's `r`, twice as high (inside the reply, the reply goes
/// on).
pub fn scripted(
    o: &Options,
    shape: &Shape,
    tokenizer: &tokenizers::Tokenizer,
    reply: &str,
) -> Result<Picked> {
    if shape.tied() {
        return Err(Error::input(format!(
            "a scripted reply needs an output head apart from the embedding; {} ties them",
            shape.model_type
        )));
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(o.seed);
    let mut tensors = body(shape, &mut rng)?;
    for (name, t) in tensors.iter_mut() {
        let output = name.ends_with("o_proj.weight") || name.ends_with("down_proj.weight");
        if output {
            *t = t.zeros_like().map_err(c)?;
        }
    }
    let zero_head =
        Tensor::zeros((shape.vocab, shape.hidden), DType::F32, &Device::Cpu).map_err(c)?;
    tensors.insert("lm_head.weight".into(), zero_head);
    save(&o.out, &tensors, shape.dtype)?;
    let (term_id, term_text) = turn_terminator(&o.out)?.ok_or_else(|| {
        Error::input("a scripted reply ends with the template's turn terminator, and the template writes none after an assistant turn")
    })?;
    let starts = prompt_ends(&o.out)?;
    let mut avoid: std::collections::HashSet<u32> = starts.iter().copied().collect();
    avoid.insert(term_id);
    let mut ids = spell(tokenizer, reply, shape.vocab, &avoid).ok_or_else(|| {
        Error::input(format!(
            "{reply:?} cannot be spelt with token ids used once each (and none a prompt ends on)"
        ))
    })?;
    ids.push(term_id);
    if shape.hidden < ids.len() + 2 {
        return Err(Error::input(format!(
            "a scripted reply of {} tokens needs a hidden width over {}; got {}",
            ids.len(),
            ids.len() + 1,
            shape.hidden
        )));
    }
    let (embed, head) = bigram(&mut rng, shape, &ids)?;
    tensors.insert("model.embed_tokens.weight".into(), embed);
    tensors.insert("lm_head.weight".into(), head);
    save(&o.out, &tensors, shape.dtype)?;
    Ok(Picked {
        tensors,
        terminator: Some((term_id, term_text.clone())),
        ending: (1, 1),
        notes: vec![format!(
            "scripted: every greedy reply is {reply:?} then {term_text:?} ({} tokens)",
            ids.len()
        )],
    })
}

/// `text` as token ids, each used once and none in `avoid`; None when no spelling exists.
///
/// The tokenizer's own encoding first: it is what a real model of the family emits, and what
/// servers' parsers expect — vLLM's streaming reasoning and tool parsers find `</think>` and
/// `<tool_call>` by their token ids, so a marker spelt with ordinary tokens (`.</`, `think`,
/// `>`) would test the stand-in, not the server. Where that encoding repeats an id, the text is
/// cut at the tokenizer's added tokens (each kept whole, as its one id) and the parts between
/// are spelt longest pieces first.
fn spell(
    tokenizer: &tokenizers::Tokenizer,
    text: &str,
    vocab: usize,
    avoid: &std::collections::HashSet<u32>,
) -> Option<Vec<u32>> {
    if let Ok(enc) = tokenizer.encode(text, false) {
        let ids = enc.get_ids();
        let unique: std::collections::HashSet<u32> = ids.iter().copied().collect();
        if unique.len() == ids.len()
            && ids
                .iter()
                .all(|i| !avoid.contains(i) && (*i as usize) < vocab)
        {
            return Some(ids.to_vec());
        }
    }
    let added: Vec<(String, u32)> = tokenizer
        .get_added_tokens_decoder()
        .into_iter()
        .filter(|(id, t)| (*id as usize) < vocab && !t.content.is_empty())
        .map(|(id, t)| (t.content, id))
        .collect();
    let mut pieces: HashMap<String, Vec<u32>> = HashMap::new();
    for id in 0..vocab as u32 {
        if avoid.contains(&id) || added.iter().any(|(_, a)| *a == id) {
            continue;
        }
        if let Ok(t) = tokenizer.decode(&[id], false) {
            if !t.is_empty() && !t.contains('\u{FFFD}') && text.contains(t.as_str()) {
                pieces.entry(t).or_default().push(id);
            }
        }
    }
    let mut by_len: Vec<(&String, &Vec<u32>)> = pieces.iter().collect();
    by_len.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.0.cmp(b.0)));
    let mut used = std::collections::HashSet::new();
    let mut out = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        // The next added token in the text (the longest at the earliest place).
        let next = added
            .iter()
            .filter_map(|(t, id)| rest.find(t.as_str()).map(|at| (at, t.len(), *id)))
            .min_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        let (plain, marker) = match next {
            Some((at, len, id)) => (&rest[..at], Some((len, id, at))),
            None => (rest, None),
        };
        if !spell_from(plain, &by_len, &mut used, &mut out, &mut 0) {
            return None;
        }
        let Some((len, id, at)) = marker else { break };
        if avoid.contains(&id) || !used.insert(id) {
            return None;
        }
        out.push(id);
        rest = &rest[at + len..];
    }
    Some(out)
}

/// Depth-first: the longest unused piece `rest` starts with, then the rest of it.
fn spell_from(
    rest: &str,
    pieces: &[(&String, &Vec<u32>)],
    used: &mut std::collections::HashSet<u32>,
    out: &mut Vec<u32>,
    tries: &mut usize,
) -> bool {
    if rest.is_empty() {
        return true;
    }
    *tries += 1;
    if *tries > 100_000 {
        return false;
    }
    for (piece, ids) in pieces {
        if !rest.starts_with(piece.as_str()) {
            continue;
        }
        let Some(&id) = ids.iter().find(|id| !used.contains(id)) else {
            continue;
        };
        used.insert(id);
        out.push(id);
        if spell_from(&rest[piece.len()..], pieces, used, out, tries) {
            return true;
        }
        out.pop();
        used.remove(&id);
    }
    false
}

/// The last token of the prompts a request can render (with and without tools): they lead into
/// the reply, so the reply cannot use them.
fn prompt_ends(dir: &std::path::Path) -> Result<Vec<u32>> {
    let m = CandleModel::load(dir)?;
    let tools = json!([{"type": "function", "function": {"name": "f", "description": "d",
        "parameters": {"type": "object", "properties": {}}}}]);
    let chat = [json!({"role": "user", "content": "Hi"})];
    let mut ends = Vec::new();
    for t in [None, Some(&tools)] {
        if let Ok((_, ids)) = m.render_chat(&chat, t, true) {
            ends.extend(ids.last().copied());
        }
    }
    Ok(ends)
}

/// The embedding and head of a bigram model reading `chain` (see [`scripted`]).
fn bigram(rng: &mut rand::rngs::StdRng, shape: &Shape, chain: &[u32]) -> Result<(Tensor, Tensor)> {
    let (v, h) = (shape.vocab, shape.hidden);
    let normal = Normal::new(0f32, 1.0).map_err(|e| Error::input(e.to_string()))?;
    // An orthonormal basis: u, then one r per chain id (Gram-Schmidt on random vectors).
    let mut basis: Vec<Vec<f32>> = Vec::new();
    while basis.len() < chain.len() + 1 {
        let mut x: Vec<f32> = (0..h).map(|_| normal.sample(rng)).collect();
        for b in &basis {
            let d = dot(&x, b);
            x.iter_mut().zip(b).for_each(|(xi, bi)| *xi -= d * bi);
        }
        let n = dot(&x, &x).sqrt();
        if n > 1e-3 {
            basis.push(x.into_iter().map(|xi| xi / n).collect());
        }
    }
    let u = &basis[0];
    let mut r_of: HashMap<u32, &Vec<f32>> = HashMap::new();
    for (i, &id) in chain.iter().enumerate() {
        r_of.insert(id, &basis[i + 1]);
    }
    let mut embed = vec![0f32; v * h];
    for t in 0..v {
        let row = &mut embed[t * h..(t + 1) * h];
        let r: Vec<f32> = match r_of.get(&(t as u32)) {
            Some(r) => r.to_vec(),
            None => {
                // Any other token: a random direction clear of u and of every chain r.
                let mut x: Vec<f32> = (0..h).map(|_| normal.sample(rng)).collect();
                for b in &basis {
                    let d = dot(&x, b);
                    x.iter_mut().zip(b).for_each(|(xi, bi)| *xi -= d * bi);
                }
                let n = dot(&x, &x).sqrt().max(1e-6);
                x.into_iter().map(|xi| xi / n).collect()
            }
        };
        for j in 0..h {
            row[j] = u[j] + r[j];
        }
    }
    let mut head = vec![0f32; v * h];
    let mut set = |id: u32, dir: &[f32], scale: f32| {
        let row = &mut head[id as usize * h..(id as usize + 1) * h];
        for j in 0..h {
            row[j] = dir[j] * scale;
        }
    };
    set(chain[0], u, 4.0);
    for pair in chain.windows(2) {
        set(pair[1], r_of[&pair[0]], 8.0);
    }
    let embed = Tensor::from_vec(embed, (v, h), &Device::Cpu).map_err(c)?;
    let head = Tensor::from_vec(head, (v, h), &Device::Cpu).map_err(c)?;
    Ok((embed, head))
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}
