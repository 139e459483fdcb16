//! Writing a model directory: HF files (config, safetensors, tokenizer files,
//! generation config) and a GGUF v3 F32 file with the same weights for llama.cpp.

use crate::model::Cfg;
use crate::tok;
use anyhow::{ensure, Context, Result};
use candle_core::Tensor;
use safetensors::tensor::{Dtype, TensorView};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::Path;

pub struct Flavor {
    pub name: &'static str,
    /// eos id and string (chat: <|im_end|> = 2, base: <|endoftext|> = 0)
    pub eos_id: u32,
    pub eos: &'static str,
    /// generation_config eos_token_id list
    pub gen_eos: Vec<u32>,
}

pub fn write_json(path: &Path, v: &Value) -> Result<()> {
    let mut s = serde_json::to_string_pretty(v)?;
    s.push('\n');
    std::fs::write(path, s).with_context(|| format!("writing {}", path.display()))
}

fn f32_bytes(t: &Tensor) -> Result<Vec<u8>> {
    let v: Vec<f32> = t.flatten_all()?.to_vec1()?;
    Ok(v.iter().flat_map(|x| x.to_le_bytes()).collect())
}

/// model.safetensors with HF names, F32, metadata {"format": "pt"}.
pub fn write_safetensors(path: &Path, tensors: &BTreeMap<String, Tensor>) -> Result<()> {
    let mut bufs: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
    for (k, t) in tensors {
        bufs.push((k.clone(), t.dims().to_vec(), f32_bytes(t)?));
    }
    let views: Vec<(String, TensorView)> = bufs
        .iter()
        .map(|(k, shape, b)| Ok((k.clone(), TensorView::new(Dtype::F32, shape.clone(), b)?)))
        .collect::<Result<_>>()?;
    let meta: HashMap<String, String> = [("format".to_string(), "pt".to_string())].into();
    safetensors::serialize_to_file(views, Some(meta), path)?;
    Ok(())
}

/// llama.cpp's convert_hf_to_gguf.py `permute`: HF rotate-half rows -> interleaved rows.
/// w: (n_head * head_dim, n_in) -> reshape (n_head, 2, head_dim/2, n_in), swap axes 1,2.
pub fn permute_qk(w: &Tensor, n_head: usize) -> Result<Tensor> {
    let (out, inp) = w.dims2()?;
    let hd = out / n_head;
    Ok(w.reshape((n_head, 2, hd / 2, inp))?
        .transpose(1, 2)?
        .contiguous()?
        .reshape((out, inp))?)
}

// ---- GGUF v3 writer (little endian, alignment 32) ----

enum GV {
    U32(u32),
    F32(f32),
    Bool(bool),
    Str(String),
    StrArr(Vec<String>),
    I32Arr(Vec<i32>),
}

const GGUF_T_U32: u32 = 4;
const GGUF_T_I32: u32 = 5;
const GGUF_T_F32: u32 = 6;
const GGUF_T_BOOL: u32 = 7;
const GGUF_T_STRING: u32 = 8;
const GGUF_T_ARRAY: u32 = 9;
const GGML_TYPE_F32: u32 = 0;
const ALIGN: usize = 32;

fn put_str(b: &mut Vec<u8>, s: &str) {
    b.extend((s.len() as u64).to_le_bytes());
    b.extend(s.as_bytes());
}

fn put_kv(b: &mut Vec<u8>, key: &str, v: &GV) {
    put_str(b, key);
    match v {
        GV::U32(x) => {
            b.extend(GGUF_T_U32.to_le_bytes());
            b.extend(x.to_le_bytes());
        }
        GV::F32(x) => {
            b.extend(GGUF_T_F32.to_le_bytes());
            b.extend(x.to_le_bytes());
        }
        GV::Bool(x) => {
            b.extend(GGUF_T_BOOL.to_le_bytes());
            b.push(*x as u8);
        }
        GV::Str(s) => {
            b.extend(GGUF_T_STRING.to_le_bytes());
            put_str(b, s);
        }
        GV::StrArr(xs) => {
            b.extend(GGUF_T_ARRAY.to_le_bytes());
            b.extend(GGUF_T_STRING.to_le_bytes());
            b.extend((xs.len() as u64).to_le_bytes());
            for s in xs {
                put_str(b, s);
            }
        }
        GV::I32Arr(xs) => {
            b.extend(GGUF_T_ARRAY.to_le_bytes());
            b.extend(GGUF_T_I32.to_le_bytes());
            b.extend((xs.len() as u64).to_le_bytes());
            for x in xs {
                b.extend(x.to_le_bytes());
            }
        }
    }
}

fn pad_to(b: &mut Vec<u8>, align: usize) {
    while b.len() % align != 0 {
        b.push(0);
    }
}

/// model.gguf: GGUF v3, all tensors F32, llama.cpp tensor names, Q/K permuted.
pub fn write_gguf(
    path: &Path,
    cfg: &Cfg,
    tensors: &BTreeMap<String, Tensor>,
    tokenizer_json: &str,
    flavor: &Flavor,
) -> Result<()> {
    let (tokens, merges) = tok::vocab_and_merges(tokenizer_json)?;
    ensure!(
        tokens.len() == cfg.vocab,
        "tokenizer has {} tokens, model {}",
        tokens.len(),
        cfg.vocab
    );
    let token_type: Vec<i32> = (0..tokens.len())
        .map(|i| if i < tok::SPECIALS.len() { 3 } else { 1 })
        .collect();

    let md: Vec<(&str, GV)> = vec![
        ("general.architecture", GV::Str("llama".into())),
        ("general.name", GV::Str(flavor.name.into())),
        ("general.file_type", GV::U32(0)), // ALL_F32
        ("general.alignment", GV::U32(ALIGN as u32)),
        ("llama.vocab_size", GV::U32(cfg.vocab as u32)),
        ("llama.context_length", GV::U32(cfg.max_pos as u32)),
        ("llama.embedding_length", GV::U32(cfg.hidden as u32)),
        ("llama.block_count", GV::U32(cfg.layers as u32)),
        ("llama.feed_forward_length", GV::U32(cfg.inter as u32)),
        ("llama.attention.head_count", GV::U32(cfg.heads as u32)),
        (
            "llama.attention.head_count_kv",
            GV::U32(cfg.kv_heads as u32),
        ),
        (
            "llama.attention.layer_norm_rms_epsilon",
            GV::F32(cfg.eps as f32),
        ),
        ("llama.rope.dimension_count", GV::U32(cfg.head_dim() as u32)),
        ("llama.rope.freq_base", GV::F32(cfg.theta as f32)),
        ("tokenizer.ggml.model", GV::Str("gpt2".into())),
        // The tokenizer uses ByteLevel's default regex = GPT-2's split regex.
        ("tokenizer.ggml.pre", GV::Str("gpt-2".into())),
        ("tokenizer.ggml.tokens", GV::StrArr(tokens)),
        ("tokenizer.ggml.token_type", GV::I32Arr(token_type)),
        ("tokenizer.ggml.merges", GV::StrArr(merges)),
        ("tokenizer.ggml.bos_token_id", GV::U32(tok::ENDOFTEXT_ID)),
        ("tokenizer.ggml.eos_token_id", GV::U32(flavor.eos_id)),
        (
            "tokenizer.ggml.padding_token_id",
            GV::U32(tok::ENDOFTEXT_ID),
        ),
        ("tokenizer.ggml.add_bos_token", GV::Bool(false)),
        ("tokenizer.ggml.add_eos_token", GV::Bool(false)),
        // Plain Qwen2-style ChatML (no {% generation %}: llama.cpp/jinja2 servers do not
        // know that tag). Renders identically to the tokenizer_config.json template.
        (
            "tokenizer.chat_template",
            GV::Str(tok::CHATML_TEMPLATE.into()),
        ),
    ];

    // HF name -> llama.cpp name (+ Q/K permutation).
    let mut out: Vec<(String, Tensor)> = Vec::new();
    out.push((
        "token_embd.weight".into(),
        tensors["model.embed_tokens.weight"].clone(),
    ));
    for l in 0..cfg.layers {
        let hf = |s: &str| tensors[&format!("model.layers.{l}.{s}.weight")].clone();
        out.push((format!("blk.{l}.attn_norm.weight"), hf("input_layernorm")));
        out.push((
            format!("blk.{l}.attn_q.weight"),
            permute_qk(&hf("self_attn.q_proj"), cfg.heads)?,
        ));
        out.push((
            format!("blk.{l}.attn_k.weight"),
            permute_qk(&hf("self_attn.k_proj"), cfg.kv_heads)?,
        ));
        out.push((format!("blk.{l}.attn_v.weight"), hf("self_attn.v_proj")));
        out.push((
            format!("blk.{l}.attn_output.weight"),
            hf("self_attn.o_proj"),
        ));
        out.push((
            format!("blk.{l}.ffn_norm.weight"),
            hf("post_attention_layernorm"),
        ));
        out.push((format!("blk.{l}.ffn_gate.weight"), hf("mlp.gate_proj")));
        out.push((format!("blk.{l}.ffn_up.weight"), hf("mlp.up_proj")));
        out.push((format!("blk.{l}.ffn_down.weight"), hf("mlp.down_proj")));
    }
    out.push((
        "output_norm.weight".into(),
        tensors["model.norm.weight"].clone(),
    ));
    out.push(("output.weight".into(), tensors["lm_head.weight"].clone()));
    ensure!(out.len() == tensors.len(), "tensor count mismatch");

    let mut b: Vec<u8> = Vec::new();
    b.extend(b"GGUF");
    b.extend(3u32.to_le_bytes());
    b.extend((out.len() as u64).to_le_bytes());
    b.extend((md.len() as u64).to_le_bytes());
    for (k, v) in &md {
        put_kv(&mut b, k, v);
    }
    let mut datas = Vec::new();
    let mut offset = 0usize;
    for (name, t) in &out {
        put_str(&mut b, name);
        let dims = t.dims();
        b.extend((dims.len() as u32).to_le_bytes());
        for d in dims.iter().rev() {
            // GGUF lists ne[0] (the contiguous dim) first
            b.extend((*d as u64).to_le_bytes());
        }
        b.extend(GGML_TYPE_F32.to_le_bytes());
        b.extend((offset as u64).to_le_bytes());
        let data = f32_bytes(t)?;
        offset += data.len().div_ceil(ALIGN) * ALIGN;
        datas.push(data);
    }
    pad_to(&mut b, ALIGN);
    for d in datas {
        b.extend(&d);
        pad_to(&mut b, ALIGN);
    }
    let mut f = std::fs::File::create(path)?;
    f.write_all(&b)?;
    Ok(())
}

/// Write a complete HF-layout model directory (+ model.gguf).
pub fn write_model_dir(
    dir: &Path,
    cfg: &Cfg,
    tensors: &BTreeMap<String, Tensor>,
    tokenizer_json: &str,
    flavor: &Flavor,
) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    write_json(
        &dir.join("config.json"),
        &cfg.hf_config(tok::ENDOFTEXT_ID, flavor.eos_id, tok::ENDOFTEXT_ID),
    )?;
    write_safetensors(&dir.join("model.safetensors"), tensors)?;
    std::fs::write(dir.join("tokenizer.json"), tokenizer_json)?;
    write_json(
        &dir.join("tokenizer_config.json"),
        &tok::tokenizer_config(flavor.eos, cfg.max_pos),
    )?;
    write_json(
        &dir.join("special_tokens_map.json"),
        &tok::special_tokens_map(flavor.eos),
    )?;
    // The chat model ships sampling defaults, as released chat models do (Qwen2.5: 0.7/0.8):
    // servers that apply them silently over a request (vllm#15241) are a real fault class.
    // The base model ships only ids (transformers' defaults then mean greedy decoding).
    let mut gen = json!({
        "bos_token_id": tok::ENDOFTEXT_ID,
        "eos_token_id": flavor.gen_eos,
        "pad_token_id": tok::ENDOFTEXT_ID
    });
    if flavor.name == "tiny-chat" {
        gen["do_sample"] = json!(true);
        gen["temperature"] = json!(0.7);
        gen["top_p"] = json!(0.9);
    }
    write_json(&dir.join("generation_config.json"), &gen)?;
    write_gguf(
        &dir.join("model.gguf"),
        cfg,
        tensors,
        tokenizer_json,
        flavor,
    )?;
    Ok(())
}
