//! Building a stand-in: the source's files copied, the config shrunk, the weights made, the GGUF written.
#[allow(unused_imports)]
use super::*;
use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};

use crate::error::{Error, Result};

/// What `chatgate standin` was asked for.
#[derive(Debug, Clone)]
pub struct Options {
    pub from: PathBuf,
    pub out: PathBuf,
    pub seed: u64,
    pub layers: usize,
    pub hidden: usize,
    /// The width of one attention head (heads = hidden / head_dim).
    pub head_dim: usize,
    /// Replace the files a stand-in consists of in an `out` that already holds some.
    pub force: bool,
    /// A scripted stand-in: every greedy reply is this text, then the turn terminator
    /// (`scripted::scripted`), instead of words from random weights.
    pub reply: Option<String>,
    /// Keep the source's exact dimensions (its own config.json) and write bf16 weights, as the
    /// real checkpoint ships: a model of the real one's size and cost, not its behaviour
    /// (`layers`, `hidden` and `head_dim` are then the source's).
    pub real_shape: bool,
}

/// What was written, for the report.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Built {
    pub out: PathBuf,
    /// config.json's `model_type` (the source's, or inferred when it has no config.json).
    pub model_type: String,
    /// `general.architecture` of model.gguf, when one was written.
    pub gguf_architecture: Option<String>,
    /// `tokenizer.ggml.model` / `tokenizer.ggml.pre` of model.gguf.
    pub gguf_tokenizer: Option<(String, String)>,
    pub vocab_size: usize,
    pub layers: usize,
    pub hidden: usize,
    /// The token that ends an assistant turn in the template, which some greedy replies end on.
    pub turn_terminator: Option<(u32, String)>,
    /// Of the built-in prompts, how many greedy replies ended with the terminator.
    pub replies_ending: (usize, usize),
    pub files: Vec<String>,
    pub notes: Vec<String>,
}

/// Files copied from the source byte for byte when present: everything that decides how text
/// becomes ids and ids become a prompt.
pub(super) const COPIED: &[&str] = &[
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "chat_template.json",
    "generation_config.json",
    "added_tokens.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
];

/// The architectures a stand-in can have: llama.cpp loads them and candle runs them in-process
/// (the last five from their GGUF only: chatgate runs SmolLM3, Granite, OLMo-2, GLM-4 and LFM2
/// through its own GGUF decoder, so `standin` searches their replies on the GGUF it writes).
pub(super) const ARCHITECTURES: &[(&str, &str)] = &[
    ("llama", "LlamaForCausalLM"),
    ("mistral", "MistralForCausalLM"),
    ("qwen2", "Qwen2ForCausalLM"),
    ("qwen3", "Qwen3ForCausalLM"),
    ("phi3", "Phi3ForCausalLM"),
    ("gemma2", "Gemma2ForCausalLM"),
    ("gemma3_text", "Gemma3ForCausalLM"),
    ("smollm3", "SmolLM3ForCausalLM"),
    ("granite", "GraniteForCausalLM"),
    ("olmo2", "Olmo2ForCausalLM"),
    ("glm4", "Glm4ForCausalLM"),
    ("lfm2", "Lfm2ForCausalLM"),
];

/// Largest source file read (tokenizer.json of 256k-token vocabularies is ~20 MB).
pub(super) const MAX_SOURCE_BYTES: u64 = 128 << 20;

pub fn build(o: &Options) -> Result<Built> {
    validate(o)?;
    let from = &o.from;
    let tokenizer_path = from.join("tokenizer.json");
    let tokenizer =
        crate::artifacts::tokenizer_files::read_tokenizer_json(&tokenizer_path)?.tokenizer;
    let source_config = read_json_opt(&from.join("config.json"))?;
    let tokenizer_config = read_json_opt(&from.join("tokenizer_config.json"))?;
    let mut notes = Vec::new();
    let model_type = model_type(
        from,
        source_config.as_ref(),
        tokenizer_config.as_ref(),
        &mut notes,
    )?;
    let vocab = vocab_size(&tokenizer, source_config.as_ref());
    let config = if o.real_shape {
        real_config(from, source_config.as_ref(), &mut notes)?
    } else {
        tiny_config(
            o,
            &model_type,
            vocab,
            source_config.as_ref(),
            &tokenizer,
            tokenizer_config.as_ref(),
        )
    };

    prepare_out(o)?;
    let mut files = Vec::new();
    for name in COPIED {
        let src = from.join(name);
        if src.is_file() {
            let bytes = read_bounded(&src)?;
            crate::files::write_atomic(&o.out.join(name), &bytes)?;
            files.push(name.to_string());
        }
    }
    let text = serde_json::to_string_pretty(&config).unwrap_or_default() + "\n";
    crate::files::write_atomic(&o.out.join("config.json"), text.as_bytes())?;
    files.push("config.json".into());

    let shape = weights::Shape::from_config(&config);
    let picked = match &o.reply {
        Some(reply) => scripted::scripted(o, &shape, &tokenizer, reply)?,
        None => weights::build(o, &shape, &tokenizer)?,
    };
    files.push("model.safetensors".into());
    if o.real_shape {
        notes.extend(picked.notes);
        notes.push("model.gguf not written at a real shape (an F32 GGUF is 4 bytes a parameter): convert the safetensors when one is needed".into());
        return Ok(Built {
            out: o.out.clone(),
            model_type,
            gguf_architecture: None,
            gguf_tokenizer: None,
            vocab_size: vocab,
            layers: shape.layers,
            hidden: shape.hidden,
            turn_terminator: picked.terminator,
            replies_ending: picked.ending,
            files,
            notes,
        });
    }
    let written = gguf::write(
        &o.out,
        &source_name(&o.from),
        &config,
        &tokenizer_path,
        tokenizer_config.as_ref(),
        &picked.tensors,
        &shape,
    );
    let (gguf_architecture, gguf_tokenizer) = match written {
        Ok(w) => {
            files.push("model.gguf".into());
            notes.extend(w.notes);
            (Some(w.architecture), Some((w.model, w.pre)))
        }
        Err(why) => {
            notes.push(format!("model.gguf not written: {why}"));
            (None, None)
        }
    };
    notes.extend(picked.notes);
    Ok(Built {
        out: o.out.clone(),
        model_type,
        gguf_architecture,
        gguf_tokenizer,
        vocab_size: vocab,
        layers: o.layers,
        hidden: o.hidden,
        turn_terminator: picked.terminator,
        replies_ending: picked.ending,
        files,
        notes,
    })
}

/// Rewrite `dir/model.gguf` from the HF files in `dir` as they are now: the same weights
/// (model.safetensors), with the tokenizer, template and special tokens the folder holds. For a
/// stand-in whose tokenizer or template was edited after it was built — the served copies the
/// fault matrix breaks — so the GGUF carries exactly the same edit. Returns the converter notes.
pub fn rewrite_gguf(dir: &Path) -> Result<Vec<String>> {
    let config = read_json_opt(&dir.join("config.json"))?
        .ok_or_else(|| Error::in_file(dir, "has no config.json"))?;
    let tokenizer_config = read_json_opt(&dir.join("tokenizer_config.json"))?;
    let weights = dir.join("model.safetensors");
    let tensors = candle_core::safetensors::load(&weights, &candle_core::Device::Cpu)
        .map_err(|e| Error::in_file(&weights, format!("cannot read the weights: {e}")))?;
    let shape = weights::Shape::from_config(&config);
    // The rewritten file keeps the name the stand-in was built with.
    let name = crate::artifacts::read_gguf(&dir.join("model.gguf"))
        .ok()
        .and_then(|i| i.get_str("general.name").map(str::to_string))
        .unwrap_or_else(|| source_name(dir));
    gguf::write(
        dir,
        &name,
        &config,
        &dir.join("tokenizer.json"),
        tokenizer_config.as_ref(),
        &tensors,
        &shape,
    )
    .map(|w| w.notes)
    .map_err(|why| Error::in_file(dir.join("model.gguf"), format!("not written: {why}")))
}

/// A GGUF file read whole: its metadata and its tensors as stored, sorted by name. What the
/// rewrites of a file share: [`requantize_gguf`] here, the relabelled architectures of
/// tests/it/decoder_parity.rs.
pub struct GgufParts {
    pub metadata: Vec<(String, candle_core::quantized::gguf_file::Value)>,
    pub tensors: Vec<(String, candle_core::quantized::QTensor)>,
}

impl GgufParts {
    /// Read `src` whole.
    pub fn read(src: &Path) -> Result<GgufParts> {
        use candle_core::quantized::gguf_file;
        let cpu = candle_core::Device::Cpu;
        let unreadable =
            |e: candle_core::Error| Error::in_file(src, format!("cannot read the GGUF: {e}"));
        let mut f = std::fs::File::open(src).map_err(|e| Error::in_file(src, e.to_string()))?;
        let content = gguf_file::Content::read(&mut f).map_err(unreadable)?;
        let mut names: Vec<&String> = content.tensor_infos.keys().collect();
        names.sort();
        let mut tensors = Vec::new();
        for name in names {
            let t = content.tensor(&mut f, name, &cpu).map_err(unreadable)?;
            tensors.push((name.clone(), t));
        }
        let metadata = content
            .metadata
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        Ok(GgufParts { metadata, tensors })
    }

    /// Write them to `dst` (atomically: a reader never sees half a file).
    pub fn write(&self, dst: &Path) -> Result<()> {
        use candle_core::quantized::{gguf_file, QTensor};
        let meta: Vec<(&str, &gguf_file::Value)> =
            self.metadata.iter().map(|(k, v)| (k.as_str(), v)).collect();
        let refs: Vec<(&str, &QTensor)> =
            self.tensors.iter().map(|(k, t)| (k.as_str(), t)).collect();
        let mut bytes = Vec::new();
        gguf_file::write(&mut std::io::Cursor::new(&mut bytes), &meta, &refs)
            .map_err(|e| Error::in_file(dst, format!("not written: {e}")))?;
        crate::files::write_atomic(dst, &bytes)
    }
}

/// `src`'s tensors quantized to `dtype`, written to `dst` with all of `src`'s metadata: the
/// matrices whose rows fill whole blocks of `dtype` (llama.cpp's block layouts, as
/// `llama-quantize` writes them), while norms, biases and anything else stay F32. For the
/// quantized references the checkpoint boundary is measured with (tests and benches): the same
/// weights at another kind, made here rather than downloaded.
pub fn requantize_gguf(
    src: &Path,
    dst: &Path,
    dtype: candle_core::quantized::GgmlDType,
) -> Result<()> {
    use candle_core::quantized::{GgmlDType, QTensor};
    let cpu = candle_core::Device::Cpu;
    let mut parts = GgufParts::read(src)?;
    for (name, q) in parts.tensors.iter_mut() {
        let t = q
            .dequantize(&cpu)
            .map_err(|e| Error::in_file(src, format!("cannot read {name}: {e}")))?;
        let row = t.dims().last().copied().unwrap_or(0);
        let fits = t.rank() == 2 && row % dtype.block_size() == 0;
        let to = if fits { dtype } else { GgmlDType::F32 };
        *q = QTensor::quantize(&t, to).map_err(|e| {
            Error::in_file(src, format!("cannot quantize {name} to {dtype:?}: {e}"))
        })?;
    }
    parts.write(dst)
}

pub(super) fn validate(o: &Options) -> Result<()> {
    if o.real_shape {
        if o.reply.is_some() {
            return Err(Error::input(
                "--reply writes a tiny scripted model; --real-shape keeps the real dimensions: pick one",
            ));
        }
        return validate_source(o);
    }
    if !(1..=8).contains(&o.layers) {
        return Err(Error::input(format!(
            "--layers must be 1..=8, got {}",
            o.layers
        )));
    }
    if !(16..=512).contains(&o.hidden) || o.hidden % 16 != 0 {
        return Err(Error::input(format!(
            "--hidden must be a multiple of 16 in 16..=512, got {}",
            o.hidden
        )));
    }
    if ![16, 32, 64].contains(&o.head_dim) || o.hidden % o.head_dim != 0 {
        return Err(Error::input(format!(
            "--head-dim must be 16, 32 or 64 and divide --hidden ({}), got {}",
            o.hidden, o.head_dim
        )));
    }
    validate_source(o)
}

/// The source folder holds what a stand-in copies.
fn validate_source(o: &Options) -> Result<()> {
    if !o.from.is_dir() {
        return Err(Error::in_file(&o.from, "is not a model directory").hint(
            "pass the folder that holds the real model's tokenizer.json (and config.json, tokenizer_config.json, ...)",
        ));
    }
    if !o.from.join("tokenizer.json").is_file() {
        return Err(Error::in_file(&o.from, "has no tokenizer.json").hint(
            "a stand-in copies the real tokenizer; save it with `AutoTokenizer.from_pretrained(...).save_pretrained(DIR)`",
        ));
    }
    Ok(())
}

/// `out` is created; one that holds files is only written into with `--force`, and never when
/// it is the source.
pub(super) fn prepare_out(o: &Options) -> Result<()> {
    if let (Ok(a), Ok(b)) = (o.from.canonicalize(), o.out.canonicalize()) {
        if a == b {
            return Err(Error::in_file(&o.out, "is the source directory")
                .hint("write the stand-in to another folder"));
        }
    }
    if o.out.is_dir() {
        let busy = std::fs::read_dir(&o.out)
            .map_err(|e| Error::io(&o.out, e))?
            .next()
            .is_some();
        if busy && !o.force {
            return Err(
                Error::in_file(&o.out, "already exists and is not empty").hint(
                    "choose an empty folder, or pass --force to replace the stand-in's files in it",
                ),
            );
        }
    } else if o.out.exists() {
        return Err(Error::in_file(&o.out, "exists and is not a folder"));
    }
    std::fs::create_dir_all(&o.out).map_err(|e| Error::io(&o.out, e))
}

pub(super) fn read_bounded(path: &Path) -> Result<Vec<u8>> {
    let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
    if meta.len() > MAX_SOURCE_BYTES {
        return Err(Error::in_file(
            path,
            format!(
                "is {} MiB; a stand-in reads at most {} MiB per file",
                meta.len() >> 20,
                MAX_SOURCE_BYTES >> 20
            ),
        ));
    }
    std::fs::read(path).map_err(|e| Error::io(path, e))
}

pub(super) fn read_json_opt(path: &Path) -> Result<Option<Value>> {
    if !path.is_file() {
        return Ok(None);
    }
    let bytes = read_bounded(path)?;
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| Error::in_file(path, format!("is not valid JSON: {e}")))
}

/// The source's `model_type` when a stand-in can have it; without config.json, the one the
/// tokenizer implies (Qwen2Tokenizer → qwen2, else llama: transformers then picks the same
/// tokenizer class it picks for the source, which has no config.json either).
pub(super) fn model_type(
    from: &Path,
    config: Option<&Value>,
    tokenizer_config: Option<&Value>,
    notes: &mut Vec<String>,
) -> Result<String> {
    let supported = || {
        ARCHITECTURES
            .iter()
            .map(|(m, _)| *m)
            .collect::<Vec<_>>()
            .join(", ")
    };
    if let Some(c) = config {
        let mt = c["model_type"].as_str().unwrap_or_default();
        if ARCHITECTURES.iter().any(|(m, _)| *m == mt) {
            return Ok(mt.to_string());
        }
        if let Some(sub) = substitute(from, c, tokenizer_config)? {
            notes.push(format!(
                "model_type {mt:?} is not an architecture stand-ins are built in (candle and llama.cpp must both run it): the stand-in is {sub:?}, for which transformers picks the same tokenizer class as for {mt:?}"
            ));
            return Ok(sub);
        }
        return Err(Error::in_file(
            from.join("config.json"),
            format!("model_type {mt:?}: stand-ins are built for {} so far", supported()),
        )
        .hint("a stand-in keeps the source's model_type because transformers picks the tokenizer class by it"));
    }
    let class = tokenizer_config
        .and_then(|t| t["tokenizer_class"].as_str())
        .unwrap_or_default();
    let mt = if class.starts_with("Qwen2") {
        "qwen2"
    } else {
        "llama"
    };
    notes.push(format!(
        "the source has no config.json: model_type {mt:?} inferred from tokenizer_class {class:?}"
    ));
    Ok(mt.to_string())
}

/// The source folder's name (`general.name`, as the converter writes it when nothing else
/// names the model).
pub(super) fn source_name(from: &Path) -> String {
    std::fs::canonicalize(from)
        .ok()
        .as_deref()
        .unwrap_or(from)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "chatgate stand-in".into())
}

/// A supported architecture to stand in for an unsupported one (gemma2, smollm3, ...), when
/// transformers resolves the same tokenizer class with it: the tokenizer is what the serving
/// chain sees, so the stand-in still tests the source's chain.
pub(super) fn substitute(
    from: &Path,
    config: &Value,
    tokenizer_config: Option<&Value>,
) -> Result<Option<String>> {
    use crate::stack::transformers::{resolve_class, Files};
    let tj: Value = read_json_opt(&from.join("tokenizer.json"))?.unwrap_or_default();
    let stm = read_json_opt(&from.join("special_tokens_map.json"))?;
    let class = |c: &Value| {
        resolve_class(&Files {
            tokenizer_json: &tj,
            tokenizer_config,
            config: Some(c),
            special_tokens_map: stm.as_ref(),
        })
        .ok()
    };
    let Some(original) = class(config) else {
        return Ok(None);
    };
    // Another Gemma (gemma3 with its vision tower, gemma4, ...) tries the Gemmas first, its
    // own generation's before the other: the same family's chat markup and embedding scale,
    // whatever tokenizer class it names.
    let source_type = config["model_type"].as_str().unwrap_or_default();
    let mut order: Vec<&str> = ARCHITECTURES.iter().map(|(m, _)| *m).collect();
    if source_type.starts_with("gemma") {
        let generation = source_type.get(..6).unwrap_or(source_type);
        order.sort_by_key(|m| (!m.starts_with("gemma"), !m.starts_with(generation)));
    }
    for mt in order {
        let mut c = config.clone();
        c["model_type"] = Value::String(mt.to_string());
        if class(&c).as_deref() == Some(original.as_str()) {
            return Ok(Some(mt.to_string()));
        }
    }
    Ok(None)
}

/// config.json's vocab_size when it covers every token id, else the tokenizer's size.
pub(super) fn vocab_size(tokenizer: &tokenizers::Tokenizer, config: Option<&Value>) -> usize {
    let ids = tokenizer
        .get_vocab(true)
        .values()
        .copied()
        .max()
        .map_or(0, |m| m as usize + 1);
    let declared = config
        .and_then(|c| c["vocab_size"].as_u64())
        .map_or(0, |v| v as usize);
    ids.max(declared)
}

/// A named special token's id: tokenizer_config's `*_token` (string or `{content}`), looked up
/// in the tokenizer.
pub(super) fn named_id(
    tokenizer: &tokenizers::Tokenizer,
    tokenizer_config: Option<&Value>,
    key: &str,
) -> Option<u32> {
    let v = &tokenizer_config?[key];
    let text = v.as_str().or_else(|| v["content"].as_str())?;
    tokenizer.token_to_id(text)
}

/// The real config.json, as the source ships it, with bf16 weights: the stand-in has the real
/// model's tensors, one for one.
fn real_config(from: &Path, source: Option<&Value>, notes: &mut Vec<String>) -> Result<Value> {
    let Some(src) = source else {
        return Err(Error::in_file(from, "has no config.json: --real-shape keeps the real model's dimensions, which only its config.json gives")
            .hint("copy the real model's config.json beside its tokenizer files"));
    };
    let mut c = src.clone();
    let arch = c["model_type"].as_str().unwrap_or_default().to_string();
    if !ARCHITECTURES.iter().any(|(m, _)| *m == arch) {
        return Err(Error::in_file(
            from.join("config.json"),
            format!(
                "model_type {arch:?} is not one a stand-in can build ({})",
                ARCHITECTURES
                    .iter()
                    .map(|(m, _)| *m)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    let n = |c: &Value, k: &str| c[k].as_u64().unwrap_or(0);
    for key in [
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "vocab_size",
    ] {
        if n(&c, key) == 0 {
            return Err(Error::in_file(
                from.join("config.json"),
                format!("has no {key}"),
            ));
        }
    }
    if n(&c, "num_key_value_heads") == 0 {
        c["num_key_value_heads"] = c["num_attention_heads"].clone();
    }
    if n(&c, "head_dim") == 0 {
        c["head_dim"] = json!(n(&c, "hidden_size") / n(&c, "num_attention_heads"));
    }
    c["torch_dtype"] = json!("bfloat16");
    notes.push(format!(
        "the real shape: {} layers × {} wide, {} heads of {}, vocabulary {} (bf16 random weights)",
        n(&c, "num_hidden_layers"),
        n(&c, "hidden_size"),
        n(&c, "num_attention_heads"),
        c["head_dim"],
        n(&c, "vocab_size")
    ));
    Ok(c)
}

/// The tiny config.json: the source's identity (model_type, token ids, rope and norm settings)
/// with small dimensions.
pub(super) fn tiny_config(
    o: &Options,
    model_type: &str,
    vocab: usize,
    source: Option<&Value>,
    tokenizer: &tokenizers::Tokenizer,
    tokenizer_config: Option<&Value>,
) -> Value {
    let src = source.cloned().unwrap_or_else(|| json!({}));
    let heads = (o.hidden / o.head_dim).max(1);
    let gqa = match (
        src["num_attention_heads"].as_u64(),
        src["num_key_value_heads"].as_u64(),
    ) {
        (Some(h), Some(kv)) => kv < h,
        _ => false,
    };
    let kv_heads = if gqa && heads % 2 == 0 {
        heads / 2
    } else {
        heads
    };
    let arch = ARCHITECTURES
        .iter()
        .find(|(m, _)| *m == model_type)
        .map_or("LlamaForCausalLM", |(_, a)| a);
    let max_pos = src["max_position_embeddings"]
        .as_u64()
        .unwrap_or(2048)
        .clamp(256, 4096);
    let mut c = Map::new();
    c.insert("architectures".into(), json!([arch]));
    c.insert("model_type".into(), json!(model_type));
    c.insert("vocab_size".into(), json!(vocab));
    c.insert("hidden_size".into(), json!(o.hidden));
    c.insert("intermediate_size".into(), json!(o.hidden * 2));
    c.insert("num_hidden_layers".into(), json!(o.layers));
    c.insert("num_attention_heads".into(), json!(heads));
    c.insert("num_key_value_heads".into(), json!(kv_heads));
    c.insert("head_dim".into(), json!(o.hidden / heads));
    c.insert("max_position_embeddings".into(), json!(max_pos));
    if model_type == "gemma3_text" {
        gemma3_keys(&mut c, &src, o.hidden / heads, max_pos);
    } else if model_type == "gemma2" {
        // Gemma2Config: GELU (tanh), scores and logits capped by tanh, queries scaled by
        // query_pre_attn_scalar — set to head_dim, the scale llama.cpp and candle apply for
        // every Gemma-2 but the 27B — a sliding window on every other layer, and the output
        // head tied to the embeddings (llama.cpp and candle tie it whatever config says).
        let head_dim = o.hidden / heads;
        c.insert("hidden_act".into(), json!("gelu_pytorch_tanh"));
        c.insert("hidden_activation".into(), json!("gelu_pytorch_tanh"));
        c.insert("query_pre_attn_scalar".into(), json!(head_dim));
        for (key, default) in [
            ("attn_logit_softcapping", 50.0),
            ("final_logit_softcapping", 30.0),
        ] {
            let v = src[key].as_f64().filter(|v| *v > 0.0).unwrap_or(default);
            c.insert(key.into(), json!(v));
        }
        let window = src["sliding_window"].as_u64().unwrap_or(4096).min(max_pos);
        c.insert("sliding_window".into(), json!(window));
        c.insert("attention_bias".into(), json!(false));
    } else {
        c.insert("hidden_act".into(), json!("silu"));
    }
    c.insert(
        "rms_norm_eps".into(),
        src.get("rms_norm_eps").cloned().unwrap_or(json!(1e-5)),
    );
    c.insert(
        "rope_theta".into(),
        src.get("rope_theta")
            .or_else(|| src.pointer("/rope_parameters/rope_theta"))
            .cloned()
            .unwrap_or(json!(10000.0)),
    );
    c.insert(
        "tie_word_embeddings".into(),
        json!(model_type.starts_with("gemma") || model_type == "lfm2"),
    );
    c.insert("torch_dtype".into(), json!("float32"));
    c.insert("initializer_range".into(), json!(0.02));
    c.insert("attention_dropout".into(), json!(0.0));
    if model_type == "mistral" {
        c.insert("sliding_window".into(), Value::Null);
    }
    if model_type == "qwen2" || model_type == "qwen3" {
        c.insert("use_sliding_window".into(), json!(false));
    }
    if model_type == "qwen3" || model_type == "phi3" {
        c.insert("attention_bias".into(), json!(false));
    }
    family_keys(&mut c, model_type, &src, o.layers, o.hidden / heads);
    if model_type == "phi3" {
        // Phi3Config (and llama.cpp's converter) read the pre-scaling context; a stand-in's
        // rope is unscaled, so both are the context it has.
        c.insert("original_max_position_embeddings".into(), json!(max_pos));
        c.insert("rope_scaling".into(), Value::Null);
        if let Some(p) = src.get("partial_rotary_factor").filter(|v| v.is_number()) {
            c.insert("partial_rotary_factor".into(), p.clone());
        }
    }
    for (key, named) in [
        ("bos_token_id", "bos_token"),
        ("eos_token_id", "eos_token"),
        ("pad_token_id", "pad_token"),
    ] {
        match src.get(key) {
            Some(v) if !v.is_null() => {
                c.insert(key.into(), v.clone());
            }
            _ => {
                if let Some(id) = named_id(tokenizer, tokenizer_config, named) {
                    c.insert(key.into(), json!(id));
                }
            }
        }
    }
    c.insert(
        "chatgate_standin".into(),
        json!({
            "source": o.from.file_name().map(|n| n.to_string_lossy().into_owned()),
            "seed": o.seed,
            "note": "random weights: every boundary but checkpoint quality (chatgate standin)",
        }),
    );
    Value::Object(c)
}

/// Gemma3TextConfig's own keys for a tiny stand-in, as every stack reads them alike: GELU
/// (tanh), queries scaled by `query_pre_attn_scalar` = head_dim (every Gemma 3 but the 27B),
/// per-head Q and K norms (in the weights), no soft-capping, the source's sliding window (512
/// for the 270M; within the context), five layers in six sliding — llama.cpp fixes that
/// pattern and the sliding layers' rotary base of 10,000 for `gemma3` files, so the stand-in
/// keeps both — and the global layers' base from the source (1,000,000).
fn gemma3_keys(c: &mut Map<String, Value>, src: &Value, head_dim: usize, max_pos: u64) {
    c.insert("architectures".into(), json!(["Gemma3ForCausalLM"]));
    c.insert("hidden_activation".into(), json!("gelu_pytorch_tanh"));
    c.insert("query_pre_attn_scalar".into(), json!(head_dim));
    c.insert("attn_logit_softcapping".into(), Value::Null);
    c.insert("final_logit_softcapping".into(), Value::Null);
    c.insert("attention_bias".into(), json!(false));
    let window = src["sliding_window"].as_u64().unwrap_or(512).min(max_pos);
    c.insert("sliding_window".into(), json!(window));
    c.insert("sliding_window_pattern".into(), json!(6));
    let global = src
        .pointer("/rope_parameters/full_attention/rope_theta")
        .or_else(|| src.get("rope_theta"))
        .and_then(Value::as_f64)
        .unwrap_or(1_000_000.0);
    c.insert("rope_theta".into(), json!(global));
    c.insert("rope_local_base_freq".into(), json!(10_000.0));
    c.insert("rms_norm_eps".into(), json!(1e-6));
}

/// The keys that make SmolLM3, Granite, OLMo-2, GLM-4 and LFM2 what they are, as their transformers
/// configs name them and llama.cpp's converters read them; the source's values where it has
/// them, else each family's released ones.
fn family_keys(
    c: &mut Map<String, Value>,
    model_type: &str,
    src: &Value,
    layers: usize,
    head_dim: usize,
) {
    let same = src["model_type"] == model_type;
    let kept = |key: &str, default: Value| {
        src.get(key)
            .filter(|v| same && !v.is_null())
            .cloned()
            .unwrap_or(default)
    };
    match model_type {
        // SmolLM3Config: every fourth layer attends without rotation. llama.cpp fixes that
        // step for `smollm3` files (`n_no_rope_layer_step = 4`), so the stand-in writes it
        // whatever the source says, as the list transformers reads (1: rotated).
        "smollm3" => {
            let list: Vec<u8> = (0..layers).map(|i| u8::from((i + 1) % 4 != 0)).collect();
            c.insert("no_rope_layers".into(), json!(list));
            c.insert("no_rope_layer_interval".into(), json!(4));
            c.insert("use_sliding_window".into(), json!(false));
            c.insert("attention_bias".into(), json!(false));
            c.insert("mlp_bias".into(), json!(false));
        }
        // GraniteConfig's four multipliers (Granite 3.x's where the source has none; the
        // attention's is 1/head_dim there, not 1/sqrt(head_dim)). The converter ignores
        // head_dim for Granite: the heads are hidden / num_attention_heads wide, as here.
        "granite" => {
            c.insert(
                "embedding_multiplier".into(),
                kept("embedding_multiplier", json!(12.0)),
            );
            c.insert(
                "residual_multiplier".into(),
                kept("residual_multiplier", json!(0.22)),
            );
            let attention = json!(1.0 / head_dim as f64);
            c.insert(
                "attention_multiplier".into(),
                kept("attention_multiplier", attention),
            );
            c.insert("logits_scaling".into(), kept("logits_scaling", json!(8.0)));
            c.insert("attention_bias".into(), json!(false));
            c.insert("mlp_bias".into(), json!(false));
        }
        "olmo2" => {
            c.insert("attention_bias".into(), json!(false));
        }
        // Lfm2Config: blocks that convolve (a gated short convolution over the last three
        // positions) between blocks that attend, as the source lays them out (else every
        // other block from the first), the MLP as wide as written (no auto-adjusting), the
        // head tied, and `norm_eps` for every norm.
        "lfm2" => {
            let source_layers = src["num_hidden_layers"].as_u64().unwrap_or(0) as usize;
            let source = if same {
                weights::lfm2_convolving_blocks(src, source_layers)
            } else {
                Vec::new()
            };
            let types: Vec<&str> = (0..layers)
                .map(|i| {
                    if source.get(i).copied().unwrap_or(i % 2 == 0) {
                        "conv"
                    } else {
                        "full_attention"
                    }
                })
                .collect();
            c.insert("layer_types".into(), json!(types));
            c.insert("conv_L_cache".into(), kept("conv_L_cache", json!(3)));
            c.insert("conv_bias".into(), json!(false));
            c.insert("block_auto_adjust_ff_dim".into(), json!(false));
            c.insert("block_ffn_dim_multiplier".into(), json!(1.0));
            c.insert("block_multiple_of".into(), json!(256));
            let eps = c.get("rms_norm_eps").cloned().unwrap_or(json!(1e-5));
            c.insert("norm_eps".into(), kept("norm_eps", eps));
        }
        // Glm4Config: half of each head rotated, biases on Q, K and V.
        "glm4" => {
            let rotated = kept("partial_rotary_factor", json!(0.5));
            c.insert("partial_rotary_factor".into(), rotated);
            c.insert("attention_bias".into(), json!(true));
        }
        _ => {}
    }
}
