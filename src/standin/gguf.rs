//! model.gguf of a stand-in: the same weights in llama.cpp's layout, and the tokenizer metadata
//! llama.cpp's converter (`convert_hf_to_gguf.py` + gguf-py `SpecialVocab`) writes for the real
//! model. Every rule here is cited in docs/research/hf-to-gguf.md.
use std::collections::{HashMap, HashSet};
use std::path::Path;

use candle_core::quantized::{gguf_file, GgmlDType, QTensor};
use candle_core::Tensor;
use serde_json::Value;

use super::weights::Shape;

/// What model.gguf holds, for the report.
pub struct Written {
    pub architecture: String,
    pub model: String,
    pub pre: String,
    pub notes: Vec<String>,
}

type Meta = Vec<(String, gguf_file::Value)>;
type Tensors = Vec<(String, QTensor)>;

const NORMAL: i32 = 1;
const CONTROL: i32 = 3;
const USER_DEFINED: i32 = 4;
const UNUSED: i32 = 5;
const BYTE: i32 = 6;

/// `name` is `general.name`: the source folder's name, as the converter writes when nothing
/// else names the model (llama.cpp keys Phi-3's whitespace rule on it).
#[allow(clippy::too_many_arguments)]
pub fn write(
    out: &Path,
    name: &str,
    config: &Value,
    tokenizer_path: &Path,
    tokenizer_config: Option<&Value>,
    tensors: &HashMap<String, Tensor>,
    shape: &Shape,
) -> Result<Written, String> {
    let tj: Value = std::fs::read(tokenizer_path)
        .map_err(|e| e.to_string())
        .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))?;
    // The converter's classes: Mistral is written as llama; the others keep theirs.
    let architecture = match shape.model_type.as_str() {
        "gemma3_text" => "gemma3",
        t @ ("qwen2" | "qwen3" | "phi3" | "gemma2" | "smollm3" | "granite" | "olmo2" | "glm4"
        | "lfm2") => t,
        _ => "llama",
    };
    let mut notes = Vec::new();
    // The converter refuses a tokenizer with ids beyond the embedding (llama.cpp would not
    // load one either): a GGUF never silently drops tokens.
    let top = max_token_id(&tj);
    if top.is_some_and(|t| t as usize >= shape.vocab) {
        return Err(format!(
            "the tokenizer has ids up to {}, the embedding only {} rows",
            top.unwrap_or_default(),
            shape.vocab
        ));
    }
    let mut meta = hparams(architecture, name, config, shape);
    // LlamaModel (and SmolLM3Model and GraniteModel, which are LlamaModels), Phi3MiniModel and
    // Gemma2Model write a SentencePiece vocabulary; Qwen's, OLMo-2's, GLM-4's and LFM2's
    // are BPE.
    let sentencepiece = matches!(
        architecture,
        "llama" | "smollm3" | "granite" | "phi3" | "gemma2" | "gemma3"
    ) && is_sentencepiece_bpe(&tj);
    let (model, pre) = if sentencepiece {
        meta.extend(spm_vocab(&tj, tokenizer_config, shape.vocab, &mut notes)?);
        ("llama".to_string(), "default".to_string())
    } else {
        let pre = pre_tokenizer(tokenizer_path, tokenizer_config)?;
        meta.extend(gpt2_vocab(&tj, tokenizer_config, shape.vocab, &pre)?);
        ("gpt2".to_string(), pre)
    };
    meta.extend(special_vocab(&tj, tokenizer_config, config));
    if architecture == "glm4" {
        glm4_special_tokens(&tj, &mut meta);
    }
    meta.extend(chat_template(out, tokenizer_config));
    let mut qt = gguf_tensors(tensors, shape, architecture).map_err(|e| e.to_string())?;
    if architecture == "phi3" {
        if let Some((attn_factor, factors)) = long_rope(config, shape)? {
            meta.push((
                "phi3.rope.scaling.attn_factor".into(),
                gguf_file::Value::F32(attn_factor),
            ));
            qt.extend(factors);
        }
    }
    let meta_refs: Vec<(&str, &gguf_file::Value)> =
        meta.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let tensor_refs: Vec<(&str, &QTensor)> = qt.iter().map(|(k, t)| (k.as_str(), t)).collect();
    let tmp = out.join(".chatgate-standin-gguf.tmp");
    let mut f = std::fs::File::create(&tmp).map_err(|e| e.to_string())?;
    gguf_file::write(&mut f, &meta_refs, &tensor_refs).map_err(|e| e.to_string())?;
    drop(f);
    std::fs::rename(&tmp, out.join("model.gguf")).map_err(|e| e.to_string())?;
    Ok(Written {
        architecture: architecture.to_string(),
        model,
        pre,
        notes,
    })
}

fn hparams(arch: &str, name: &str, config: &Value, s: &Shape) -> Meta {
    use gguf_file::Value as V;
    let f = |k: &str, d: f64| config[k].as_f64().unwrap_or(d) as f32;
    // (LFM2's config names its norms' epsilon `norm_eps`; the converter writes it as this key.)
    let rms_eps = config["rms_norm_eps"]
        .as_f64()
        .or_else(|| config["norm_eps"].as_f64())
        .unwrap_or(1e-5) as f32;
    let ctx = config["max_position_embeddings"].as_u64().unwrap_or(2048) as u32;
    let k = |name: &str| format!("{arch}.{name}");
    let mut m: Meta = vec![
        ("general.architecture".into(), V::String(arch.into())),
        ("general.type".into(), V::String("model".into())),
        ("general.name".into(), V::String(name.into())),
        ("general.file_type".into(), V::U32(0)),
        ("general.quantization_version".into(), V::U32(2)),
        (k("context_length"), V::U32(ctx)),
        (k("embedding_length"), V::U32(s.hidden as u32)),
        (k("block_count"), V::U32(s.layers as u32)),
        (k("feed_forward_length"), V::U32(s.intermediate as u32)),
        (k("attention.head_count"), V::U32(s.heads as u32)),
        (k("attention.head_count_kv"), V::U32(s.kv_heads as u32)),
        (k("attention.layer_norm_rms_epsilon"), V::F32(rms_eps)),
    ];
    // Gemma2Model writes no rope base (llama.cpp's default, 10000, is Gemma-2's).
    if arch != "gemma2" {
        m.push((k("rope.freq_base"), V::F32(f("rope_theta", 10000.0))));
    }
    match arch {
        // LlamaModel.set_gguf_parameters (SmolLM3Model's too).
        "llama" | "smollm3" => {
            m.push((k("rope.dimension_count"), V::U32(s.head_dim as u32)));
            m.push((k("attention.key_length"), V::U32(s.head_dim as u32)));
            m.push((k("attention.value_length"), V::U32(s.head_dim as u32)));
            m.push((k("vocab_size"), V::U32(s.vocab as u32)));
        }
        // GraniteModel.set_gguf_parameters: LlamaModel's with head_dim dropped (no key or value
        // length), and the multipliers renamed to scales.
        "granite" => {
            m.push((k("rope.dimension_count"), V::U32(s.head_dim as u32)));
            m.push((k("vocab_size"), V::U32(s.vocab as u32)));
            for (key, name) in [
                ("attention_multiplier", "attention.scale"),
                ("embedding_multiplier", "embedding_scale"),
                ("residual_multiplier", "residual_scale"),
                ("logits_scaling", "logit_scale"),
            ] {
                // Written only when set and non-zero, as the converter does.
                if let Some(v) = config[key].as_f64().filter(|v| *v != 0.0) {
                    m.push((k(name), V::F32(v as f32)));
                }
            }
        }
        // Glm4Model.set_gguf_parameters: the rotated part of each head.
        "glm4" => {
            m.push((k("attention.key_length"), V::U32(s.head_dim as u32)));
            m.push((k("attention.value_length"), V::U32(s.head_dim as u32)));
            let rotated = config["partial_rotary_factor"].as_f64().unwrap_or(0.5);
            let dims = (s.head_dim as f64 * rotated) as u32;
            m.push((k("rope.dimension_count"), V::U32(dims)));
        }
        // LFM2Model.set_gguf_parameters: KV heads per block (0 where it convolves), the
        // convolution's taps, the vocabulary's size.
        "lfm2" => {
            let per_block = (0..s.layers)
                .map(|l| V::U32(if s.convolves(l) { 0 } else { s.kv_heads as u32 }))
                .collect();
            m.retain(|(key, _)| *key != k("attention.head_count_kv"));
            m.push((k("attention.head_count_kv"), V::Array(per_block)));
            m.push((k("shortconv.l_cache"), V::U32(s.conv_taps as u32)));
            m.push((k("vocab_size"), V::U32(s.vocab as u32)));
            m.push((k("attention.key_length"), V::U32(s.head_dim as u32)));
            m.push((k("attention.value_length"), V::U32(s.head_dim as u32)));
        }
        // TextModel writes key/value_length whenever config.json has head_dim.
        "qwen3" | "olmo2" => {
            m.push((k("attention.key_length"), V::U32(s.head_dim as u32)));
            m.push((k("attention.value_length"), V::U32(s.head_dim as u32)));
        }
        // Phi3MiniModel.set_gguf_parameters.
        "phi3" => {
            let rot = config["partial_rotary_factor"].as_f64().unwrap_or(1.0);
            let rope_dims = (rot * s.hidden as f64) as usize / s.heads;
            let orig = config["original_max_position_embeddings"]
                .as_u64()
                .unwrap_or(ctx as u64) as u32;
            m.push((k("rope.dimension_count"), V::U32(rope_dims as u32)));
            m.push((k("rope.scaling.original_context_length"), V::U32(orig)));
            let window = config["sliding_window"].as_u64().unwrap_or(0) as u32;
            m.push((k("attention.sliding_window"), V::U32(window)));
        }
        // Gemma2Model.set_gguf_parameters.
        "gemma2" => {
            m.push((k("attention.key_length"), V::U32(s.head_dim as u32)));
            m.push((k("attention.value_length"), V::U32(s.head_dim as u32)));
            for key in ["attn_logit_softcapping", "final_logit_softcapping"] {
                m.push((k(key), V::F32(f(key, 0.0))));
            }
            let window = config["sliding_window"].as_u64().unwrap_or(0) as u32;
            m.push((k("attention.sliding_window"), V::U32(window)));
        }
        // Gemma3Model.set_gguf_parameters (no soft-capping: the stand-in has none).
        "gemma3" => {
            m.push((k("attention.key_length"), V::U32(s.head_dim as u32)));
            m.push((k("attention.value_length"), V::U32(s.head_dim as u32)));
            let window = config["sliding_window"].as_u64().unwrap_or(0) as u32;
            m.push((k("attention.sliding_window"), V::U32(window)));
        }
        _ => {}
    }
    m
}

/// Phi3MiniModel.generate_extra_tensors: a LongRoPE config's `rope.scaling.attn_factor`
/// (√(1 + ln s / ln n₀), s the context over the original n₀) and its long and short frequency
/// factors as F32 tensors; None without `long_factor`.
fn long_rope(config: &Value, s: &Shape) -> Result<Option<(f32, Tensors)>, String> {
    let scaling = config
        .get("rope_scaling")
        .filter(|v| v.is_object())
        .or_else(|| config.get("rope_parameters"));
    let factors = |k: &str| -> Option<Vec<f32>> {
        let list = scaling?.get(k)?.as_array()?;
        list.iter().map(|v| v.as_f64().map(|f| f as f32)).collect()
    };
    let Some(long) = factors("long_factor").filter(|l| !l.is_empty()) else {
        return Ok(None);
    };
    let short =
        factors("short_factor").ok_or("rope_scaling has long_factor but no short_factor")?;
    let kind = scaling
        .and_then(|v| v.get("rope_type").or_else(|| v.get("type")))
        .and_then(Value::as_str)
        .unwrap_or_default();
    if !matches!(kind, "longrope" | "su") {
        return Err(format!(
            "rope_scaling type \"{kind}\" with long/short factors is not LongRoPE"
        ));
    }
    let rot = config["partial_rotary_factor"].as_f64().unwrap_or(1.0);
    let half = (rot * s.hidden as f64) as usize / s.heads / 2;
    if long.len() != half || short.len() != half {
        return Err(format!(
            "rope_scaling's long and short factors must have {half} values each (they have {} and {})",
            long.len(),
            short.len()
        ));
    }
    let ctx = config["max_position_embeddings"].as_f64().unwrap_or(0.0);
    let orig = config["original_max_position_embeddings"]
        .as_f64()
        .unwrap_or(ctx);
    if orig <= 1.0 || ctx <= 1.0 {
        return Err(format!(
            "LongRoPE needs max_position_embeddings and original_max_position_embeddings above 1 (they are {ctx} and {orig})"
        ));
    }
    let scale = ctx / orig;
    let attn_factor = if scale > 1.0 {
        (1.0 + scale.ln() / orig.ln()).sqrt() as f32
    } else {
        1.0
    };
    let tensor = |v: Vec<f32>| -> Result<QTensor, String> {
        let t = Tensor::from_vec(v, half, &candle_core::Device::Cpu).map_err(|e| e.to_string())?;
        QTensor::quantize(&t, GgmlDType::F32).map_err(|e| e.to_string())
    };
    Ok(Some((
        attn_factor,
        vec![
            ("rope_factors_long.weight".into(), tensor(long)?),
            ("rope_factors_short.weight".into(), tensor(short)?),
        ],
    )))
}

/// `LlamaHfVocab`'s condition: a SentencePiece-style BPE (byte fallback, a Sequence decoder).
fn is_sentencepiece_bpe(tj: &Value) -> bool {
    tj["model"]["type"] == "BPE"
        && tj["model"]["byte_fallback"] == true
        && tj["decoder"]["type"] == "Sequence"
}

/// `get_vocab_base_pre`: the converter's name for the tokenizer's pre-tokenizer (the ids of its
/// check text, hashed, looked up in its whole table: [`crate::artifacts::llama_cpp_pre`]).
fn pre_tokenizer(
    tokenizer_path: &Path,
    tokenizer_config: Option<&Value>,
) -> Result<String, String> {
    let tok = tokenizers::Tokenizer::from_file(tokenizer_path).map_err(|e| e.to_string())?;
    crate::artifacts::llama_cpp_pre::identify(&tok, tokenizer_config)
}

/// `does_token_look_special`.
fn looks_special(t: &str) -> bool {
    matches!(t, "<pad>" | "<mask>" | "<2mass>" | "[@BOS@]")
        || (t.starts_with("<|") && t.ends_with("|>"))
        || (t.starts_with("<\u{ff5c}") && t.ends_with("\u{ff5c}>"))
        || (t.starts_with("<unused") && t.ends_with('>'))
}

/// Added tokens: id → (content, special), tokenizer_config's `added_tokens_decoder` flags
/// over tokenizer.json's.
fn added(tj: &Value, tc: Option<&Value>) -> HashMap<u32, (String, bool)> {
    let mut out = HashMap::new();
    for t in tj["added_tokens"].as_array().into_iter().flatten() {
        if let (Some(id), Some(c)) = (t["id"].as_u64(), t["content"].as_str()) {
            out.insert(
                id as u32,
                (c.to_string(), t["special"].as_bool().unwrap_or(false)),
            );
        }
    }
    // The converter reads the vocabulary as a dict from text to id: a text is one token. An
    // entry of tokenizer_config.json naming a text tokenizer.json already has under another id
    // (a tokenizer.json swapped under another model's configs) is not a second token.
    let base = base_vocab(tj);
    let mut known: HashMap<String, u32> = base.iter().map(|(i, t)| (t.clone(), *i)).collect();
    known.extend(out.iter().map(|(i, (t, _))| (t.clone(), *i)));
    if let Some(dec) = tc.and_then(|t| t["added_tokens_decoder"].as_object()) {
        for (id, t) in dec {
            if let (Ok(id), Some(c)) = (id.parse::<u32>(), t["content"].as_str()) {
                if known.get(c).is_some_and(|&k| k != id) {
                    continue;
                }
                out.insert(id, (c.to_string(), t["special"].as_bool().unwrap_or(false)));
            }
        }
    }
    out
}

fn max_token_id(tj: &Value) -> Option<u32> {
    let added = tj["added_tokens"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["id"].as_u64());
    tj["model"]["vocab"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(_, id)| id.as_u64())
        .chain(added)
        .max()
        .map(|m| m as u32)
}

fn base_vocab(tj: &Value) -> HashMap<u32, String> {
    tj["model"]["vocab"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(t, id)| id.as_u64().map(|id| (id as u32, t.clone())))
        .collect()
}

fn strings(v: Vec<String>) -> gguf_file::Value {
    gguf_file::Value::Array(v.into_iter().map(gguf_file::Value::String).collect())
}

fn ints(v: Vec<i32>) -> gguf_file::Value {
    gguf_file::Value::Array(v.into_iter().map(gguf_file::Value::I32).collect())
}

/// `_set_vocab_gpt2`: tokens padded to vocab_size with `[PAD{i}]`, types, merges, pre.
fn gpt2_vocab(tj: &Value, tc: Option<&Value>, vocab: usize, pre: &str) -> Result<Meta, String> {
    use gguf_file::Value as V;
    let base = base_vocab(tj);
    let added = added(tj, tc);
    let mut tokens = Vec::with_capacity(vocab);
    let mut types = Vec::with_capacity(vocab);
    for i in 0..vocab as u32 {
        if let Some((content, special)) = added.get(&i) {
            if *special || looks_special(content) {
                tokens.push(content.clone());
                types.push(CONTROL);
            } else {
                tokens.push(content.replace('\u{2581}', " "));
                types.push(USER_DEFINED);
            }
        } else if let Some(t) = base.get(&i) {
            tokens.push(t.clone());
            types.push(NORMAL);
        } else {
            tokens.push(format!("[PAD{i}]"));
            types.push(UNUSED);
        }
    }
    let merges: Vec<String> = tj["model"]["merges"]
        .as_array()
        .ok_or("tokenizer.json has no merges (llama.cpp needs them for a gpt2 vocabulary)")?
        .iter()
        .map(|m| match m {
            Value::String(s) => Ok(s.clone()),
            Value::Array(p) if p.len() == 2 => {
                let part = |v: &Value| v.as_str().unwrap_or_default().replace(' ', "\u{120}");
                Ok(format!("{} {}", part(&p[0]), part(&p[1])))
            }
            other => Err(format!("unknown merges format: {other}")),
        })
        .collect::<Result<_, _>>()?;
    Ok(vec![
        ("tokenizer.ggml.model".into(), V::String("gpt2".into())),
        ("tokenizer.ggml.pre".into(), V::String(pre.into())),
        ("tokenizer.ggml.tokens".into(), strings(tokens)),
        ("tokenizer.ggml.token_type".into(), ints(types)),
        ("tokenizer.ggml.merges".into(), strings(merges)),
    ])
}

/// A SentencePiece vocabulary as the converter writes it from the real model's tokenizer.model
/// (which the published Llama-2/Mistral/Phi-3 repositories ship): pieces with `▁`, `<0xNN>`
/// as BYTE, added tokens CONTROL (special or special-looking) or USER_DEFINED with score -1000,
/// and scores whose order is the merge order. The scores are rebuilt from tokenizer.json's merge
/// ranks (a token made by merge r scores -r), which orders merges exactly as the original
/// scores do; the tokenizer.json-only converter path would write -1000 for every token, which
/// no published GGUF has.
fn spm_vocab(
    tj: &Value,
    tc: Option<&Value>,
    vocab: usize,
    notes: &mut Vec<String>,
) -> Result<Meta, String> {
    use gguf_file::Value as V;
    let base = base_vocab(tj);
    let added = added(tj, tc);
    let mut rank: HashMap<String, usize> = HashMap::new();
    for (r, m) in tj["model"]["merges"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let (a, b) = match m {
            Value::String(s) => match s.split_once(' ') {
                Some((a, b)) => (a.to_string(), b.to_string()),
                None => continue,
            },
            Value::Array(p) if p.len() == 2 => (
                p[0].as_str().unwrap_or_default().to_string(),
                p[1].as_str().unwrap_or_default().to_string(),
            ),
            _ => continue,
        };
        rank.entry(a + &b).or_insert(r);
    }
    let is_byte = |t: &str| {
        t.len() == 6
            && t.starts_with("<0x")
            && t.ends_with('>')
            && t[3..5].chars().all(|c| c.is_ascii_hexdigit())
    };
    let mut tokens = Vec::with_capacity(vocab);
    let mut types = Vec::with_capacity(vocab);
    let mut scores = Vec::with_capacity(vocab);
    let mut seen = HashSet::new();
    for i in 0..vocab as u32 {
        let (t, ty, score) = if let Some((content, special)) = added.get(&i) {
            if *special || looks_special(content) {
                (content.clone(), CONTROL, -1000.0)
            } else {
                (content.replace('\u{2581}', " "), USER_DEFINED, -1000.0)
            }
        } else if let Some(t) = base.get(&i) {
            if is_byte(t) {
                (t.clone(), BYTE, 0.0)
            } else {
                let s = rank.get(t).map_or(0.0, |&r| -(r as f32));
                (t.clone(), NORMAL, s)
            }
        } else {
            (format!("[PAD{i}]"), UNUSED, -1000.0)
        };
        // llama.cpp refuses a vocabulary with a duplicate token.
        if !seen.insert(t.clone()) {
            return Err(format!("token {t:?} appears twice in the vocabulary"));
        }
        tokens.push(t);
        types.push(ty);
        scores.push(score);
    }
    notes.push("SentencePiece scores rebuilt from tokenizer.json's merge ranks (as tokenizer.model orders them)".into());
    let mut m: Meta = vec![
        ("tokenizer.ggml.model".into(), V::String("llama".into())),
        ("tokenizer.ggml.pre".into(), V::String("default".into())),
        ("tokenizer.ggml.tokens".into(), strings(tokens)),
        (
            "tokenizer.ggml.scores".into(),
            V::Array(scores.into_iter().map(V::F32).collect()),
        ),
        ("tokenizer.ggml.token_type".into(), ints(types)),
    ];
    match tc.and_then(|t| t["add_prefix_space"].as_bool()) {
        Some(b) => m.push(("tokenizer.ggml.add_space_prefix".into(), V::Bool(b))),
        // llama.cpp prefixes a space to SentencePiece text unless told not to. A tokenizer with
        // no dummy prefix (Gemma's: no `Prepend` normalizer, no prepending Metaspace) gets
        // `false`, which is what the converter's Gemma classes write for it.
        None if !prepends_space(tj) => {
            m.push(("tokenizer.ggml.add_space_prefix".into(), V::Bool(false)))
        }
        None => {}
    }
    Ok(m)
}

/// Whether tokenizer.json adds SentencePiece's dummy `▁` prefix: a `Prepend` normalizer
/// (Llama-2, TinyLlama, Phi-3) or a Metaspace pre-tokenizer that prepends (Mistral v0.3).
fn prepends_space(tj: &Value) -> bool {
    let text = format!("{}{}", tj["normalizer"], tj["pre_tokenizer"]);
    text.contains("\"Prepend\"")
        || (text.contains("\"Metaspace\"")
            && !text.contains("\"prepend_scheme\":\"never\"")
            && !text.contains("\"add_prefix_space\":false"))
}

/// A special token's text in tokenizer_config.json (a string or `{content}`).
fn token_text(v: &Value) -> Option<&str> {
    v.as_str().or_else(|| v["content"].as_str())
}

/// `SpecialVocab`: add_bos/add_eos from tokenizer.json's post-processor, overridden by
/// tokenizer_config's booleans; ids from tokenizer_config's tokens (looked up among
/// tokenizer.json's added tokens), then config.json's `*_token_id` for the rest.
fn special_vocab(tj: &Value, tc: Option<&Value>, config: &Value) -> Meta {
    use gguf_file::Value as V;
    let mut m = Meta::new();
    let named = |typ: &str| {
        tc.and_then(|t| token_text(&t[format!("{typ}_token")]))
            .map(str::to_string)
    };
    let (mut add_bos, mut add_eos) =
        post_processor_adds(&tj["post_processor"], named("bos"), named("eos"));
    if let Some(t) = tc {
        if let Some(b) = t["add_bos_token"].as_bool() {
            add_bos = Some(b);
        }
        if let Some(b) = t["add_eos_token"].as_bool() {
            add_eos = Some(b);
        }
    }
    let added_ids: HashMap<&str, u64> = tj["added_tokens"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| Some((t["content"].as_str()?, t["id"].as_u64()?)))
        .collect();
    for (typ, key) in [
        ("bos", "tokenizer.ggml.bos_token_id"),
        ("eos", "tokenizer.ggml.eos_token_id"),
        ("unk", "tokenizer.ggml.unknown_token_id"),
        ("sep", "tokenizer.ggml.seperator_token_id"),
        ("pad", "tokenizer.ggml.padding_token_id"),
    ] {
        let from_tc = named(typ).and_then(|t| added_ids.get(t.as_str()).copied());
        let id = from_tc.or_else(|| config[format!("{typ}_token_id")].as_u64());
        if let Some(id) = id {
            m.push((key.into(), V::U32(id as u32)));
        }
    }
    if let Some(b) = add_bos {
        m.push(("tokenizer.ggml.add_bos_token".into(), V::Bool(b)));
    }
    if let Some(b) = add_eos {
        m.push(("tokenizer.ggml.add_eos_token".into(), V::Bool(b)));
    }
    m
}

/// Glm4Model.set_vocab: `<|endoftext|>` is the BOS, EOS and unknown token and `<|user|>` ends a
/// turn (EOT), each set only where the generic special tokens left it unset (gguf-py's
/// `_set_special_token` keeps a type already set). A vocabulary without them (a stand-in on
/// another family's tokenizer) keeps the generic ones.
fn glm4_special_tokens(tj: &Value, meta: &mut Meta) {
    use gguf_file::Value as V;
    let id_of = |content: &str| {
        tj["added_tokens"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|t| t["content"] == content)
            .and_then(|t| t["id"].as_u64())
    };
    for (key, content) in [
        ("tokenizer.ggml.eos_token_id", "<|endoftext|>"),
        ("tokenizer.ggml.eot_token_id", "<|user|>"),
        ("tokenizer.ggml.unknown_token_id", "<|endoftext|>"),
        ("tokenizer.ggml.bos_token_id", "<|endoftext|>"),
    ] {
        if meta.iter().any(|(k, _)| k == key) {
            continue;
        }
        if let Some(id) = id_of(content) {
            meta.push((key.into(), V::U32(id as u32)));
        }
    }
}

/// (add_bos, add_eos) a `TemplateProcessing` post-processor implies (also inside `Sequence`).
fn post_processor_adds(
    pp: &Value,
    bos: Option<String>,
    eos: Option<String>,
) -> (Option<bool>, Option<bool>) {
    match pp["type"].as_str() {
        Some("Sequence") => {
            for p in pp["processors"].as_array().into_iter().flatten() {
                let r = post_processor_adds(p, bos.clone(), eos.clone());
                if r != (None, None) {
                    return r;
                }
            }
            (None, None)
        }
        Some("TemplateProcessing") => {
            let single = pp["single"].as_array().cloned().unwrap_or_default();
            let special = |v: &Value| v["SpecialToken"]["id"].as_str().map(str::to_string);
            let add_bos = if single.len() > 1 {
                single.first().and_then(special).map(|x| Some(x) == bos)
            } else {
                Some(false)
            };
            let add_eos = if single.len() > 1 {
                single.last().and_then(special).map(|y| Some(y) == eos)
            } else {
                Some(false)
            };
            (add_bos.or(Some(false)), add_eos.or(Some(false)))
        }
        Some("RobertaProcessing") => (Some(true), Some(true)),
        _ => (None, None),
    }
}

/// `tokenizer.chat_template`: tokenizer_config's `chat_template` (even null) wins, then
/// chat_template.jinja, then chat_template.json; nothing without a tokenizer_config.json.
fn chat_template(out: &Path, tc: Option<&Value>) -> Meta {
    use gguf_file::Value as V;
    let Some(tc) = tc else {
        return vec![];
    };
    let text = match tc.get("chat_template") {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Array(named)) => {
            let mut m = Meta::new();
            let mut names = Vec::new();
            for t in named {
                let (Some(name), Some(tpl)) = (t["name"].as_str(), t["template"].as_str()) else {
                    continue;
                };
                if name == "default" {
                    m.push(("tokenizer.chat_template".into(), V::String(tpl.into())));
                } else {
                    let clean: String = name
                        .chars()
                        .map(|c| {
                            if c.is_ascii_alphanumeric() || c == '_' {
                                c
                            } else {
                                '_'
                            }
                        })
                        .collect();
                    m.push((
                        format!("tokenizer.chat_template.{clean}"),
                        V::String(tpl.into()),
                    ));
                    names.push(clean);
                }
            }
            if !names.is_empty() {
                m.push(("tokenizer.chat_templates".into(), strings(names)));
            }
            return m;
        }
        Some(_) => None,
        None => std::fs::read_to_string(out.join("chat_template.jinja"))
            .ok()
            .or_else(|| {
                std::fs::read(out.join("chat_template.json"))
                    .ok()
                    .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
                    .and_then(|v| v["chat_template"].as_str().map(str::to_string))
            }),
    };
    text.map(|t| vec![("tokenizer.chat_template".into(), V::String(t))])
        .unwrap_or_default()
}

/// HF q_proj/k_proj rows → llama.cpp's interleaved rope layout (the converter's `permute`,
/// llama only: the others use NeoX rope, as transformers does).
fn permute_qk(w: &Tensor, heads: usize) -> candle_core::Result<Tensor> {
    let (out, inp) = w.dims2()?;
    w.reshape((heads, 2, out / heads / 2, inp))?
        .transpose(1, 2)?
        .contiguous()?
        .reshape((out, inp))
}

fn gguf_tensors(
    t: &HashMap<String, Tensor>,
    s: &Shape,
    architecture: &str,
) -> candle_core::Result<Vec<(String, QTensor)>> {
    // LlamaModel.permute (SmolLM3Model and GraniteModel inherit it): HF's rotate-half pairs
    // to ggml's adjacent ones. OLMo-2 rotates NEOX pairs in llama.cpp too, and GLM-4 already
    // pairs adjacent values in transformers.
    let permute = matches!(architecture, "llama" | "smollm3" | "granite");
    let gemma = matches!(architecture, "gemma2" | "gemma3");
    let post_norms = gemma || architecture == "olmo2";
    let mut names: Vec<(String, String)> = vec![
        (
            "model.embed_tokens.weight".into(),
            "token_embd.weight".into(),
        ),
        ("model.norm.weight".into(), "output_norm.weight".into()),
        ("lm_head.weight".into(), "output.weight".into()),
        // LFM2's last norm.
        (
            "model.embedding_norm.weight".into(),
            "token_embd_norm.weight".into(),
        ),
    ];
    for l in 0..s.layers {
        // Gemma-2 and OLMo-2 norm the attention output (post_attention_norm), with their own
        // MLP norms; llama's post_attention_layernorm (and GLM-4's) is the pre-MLP norm.
        let post_attention = if post_norms {
            "post_attention_norm.weight"
        } else {
            "ffn_norm.weight"
        };
        let mut pairs = vec![
            ("input_layernorm.weight", "attn_norm.weight"),
            ("post_attention_layernorm.weight", post_attention),
            ("pre_feedforward_layernorm.weight", "ffn_norm.weight"),
            ("post_feedforward_layernorm.weight", "post_ffw_norm.weight"),
            ("self_attn.q_proj.weight", "attn_q.weight"),
            ("self_attn.k_proj.weight", "attn_k.weight"),
            ("self_attn.v_proj.weight", "attn_v.weight"),
            ("self_attn.o_proj.weight", "attn_output.weight"),
            ("mlp.gate_proj.weight", "ffn_gate.weight"),
            ("mlp.up_proj.weight", "ffn_up.weight"),
            ("mlp.down_proj.weight", "ffn_down.weight"),
            // Qwen3's per-head norms; Phi-3's fused projections (llama.cpp keeps them fused).
            ("self_attn.q_norm.weight", "attn_q_norm.weight"),
            ("self_attn.k_norm.weight", "attn_k_norm.weight"),
            ("self_attn.qkv_proj.weight", "attn_qkv.weight"),
            ("mlp.gate_up_proj.weight", "ffn_up.weight"),
            // GLM-4's norms after attention and the MLP.
            (
                "post_self_attn_layernorm.weight",
                "post_attention_norm.weight",
            ),
            ("post_mlp_layernorm.weight", "post_ffw_norm.weight"),
            // LFM2: its blocks' operator (attention or convolution) and MLP.
            ("operator_norm.weight", "attn_norm.weight"),
            ("ffn_norm.weight", "ffn_norm.weight"),
            ("self_attn.out_proj.weight", "attn_output.weight"),
            ("self_attn.q_layernorm.weight", "attn_q_norm.weight"),
            ("self_attn.k_layernorm.weight", "attn_k_norm.weight"),
            ("conv.in_proj.weight", "shortconv.in_proj.weight"),
            ("conv.conv.weight", "shortconv.conv.weight"),
            ("conv.out_proj.weight", "shortconv.out_proj.weight"),
            ("feed_forward.w1.weight", "ffn_gate.weight"),
            ("feed_forward.w3.weight", "ffn_up.weight"),
            ("feed_forward.w2.weight", "ffn_down.weight"),
        ];
        if s.qkv_bias() {
            pairs.extend([
                ("self_attn.q_proj.bias", "attn_q.bias"),
                ("self_attn.k_proj.bias", "attn_k.bias"),
                ("self_attn.v_proj.bias", "attn_v.bias"),
            ]);
        }
        for (a, b) in pairs {
            names.push((format!("model.layers.{l}.{a}"), format!("blk.{l}.{b}")));
        }
    }
    let mut out = Vec::new();
    for (hf, gg) in names {
        let Some(mut w) = t.get(&hf).cloned() else {
            continue;
        };
        if permute && gg.ends_with("attn_q.weight") {
            w = permute_qk(&w, s.heads)?;
        } else if permute && gg.ends_with("attn_k.weight") {
            w = permute_qk(&w, s.kv_heads)?;
        } else if gg.ends_with("shortconv.conv.weight") {
            // LFM2Model.modify_tensors: the convolution as a matrix (channels × taps).
            w = w.squeeze(1)?;
        } else if gemma && gg.ends_with("norm.weight") {
            // Gemma2Model/Gemma3Model.modify_tensors: llama.cpp multiplies by the weight
            // itself (every norm, Gemma 3's per-head Q and K norms too).
            w = (w + 1.0)?;
        }
        out.push((gg, QTensor::quantize(&w, GgmlDType::F32)?));
    }
    Ok(out)
}
