//! Loading a GGUF: llama-family files (llama, qwen2, qwen3, qwen3moe, phi3, smollm3, granite,
//! olmo2, mistral3, glm4, lfm2) through this crate's own quantized decoder (`llama_family.rs` says why not candle's;
//! it runs a mixture of experts too, but for the old layout, one tensor per expert, which goes
//! through candle's `quantized_llama`), Gemma-2 dequantized into candle's
//! own model (candle has no quantized Gemma-2), Gemma-3 through this crate's own quantized model
//! (`gemma3.rs` says why not candle's).
use super::*;
use candle_core::quantized::GgmlDType;

use super::attention::{Scaling, Yarn};
use super::llama_family::{self, LlamaFamily};

impl CandleModel {
    pub(super) fn from_gguf(path: &Path, dir: ModelDir) -> Result<CandleModel> {
        // Read from the header first: candle cannot even open a file with a tensor type it
        // does not know ("unknown dtype for tensor 23").
        if let Some(Err(why)) = dir.gguf.as_ref().map(runs_gguf) {
            return Err(Error::in_file(path, why).hint("use a server target (llama.cpp) for this file, or a reference that runs elsewhere: [reference] url (a deployment that teacher-forces: vLLM, SGLang, TGI, llama-server) or `chatgate lock --fingerprint` where the file runs"));
        }
        let mut file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
        let ct = gguf_file::Content::read(&mut file).map_err(|e| {
            Error::in_file(path, format!("cannot read the GGUF: {}", candle_msg(&e)))
        })?;
        let md_str = |k: &str| ct.metadata.get(k).and_then(|v| v.to_string().ok()).cloned();
        let md_uint = |k: &str| ct.metadata.get(k).and_then(gguf_uint);
        let md_f32 = |k: &str| ct.metadata.get(k).and_then(|v| v.to_f32().ok());
        let arch = md_str("general.architecture").unwrap_or_default();
        if !GGUF_ARCHITECTURES.contains(&arch.as_str()) {
            return Err(Error::in_file(
                path,
                format!(
                    "general.architecture is \"{arch}\"; the candle target runs {} GGUF files",
                    GGUF_ARCHITECTURES.join(", ")
                ),
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
        // LFM2 writes a key/value head count per block, 0 for a block that convolves.
        let (kv_heads, convolves) = match per_block_kv_heads(&ct, &arch) {
            Some(counts) => {
                let (kv, convolves) = lfm2_blocks(&counts, &key("attention.head_count_kv"))
                    .map_err(|why| Error::in_file(path, why))?;
                if arch != "lfm2" && convolves.contains(&true) {
                    return Err(Error::in_file(
                        path,
                        format!("{} is 0 for some blocks: the in-process {arch} model has no blocks without attention", key("attention.head_count_kv")),
                    )
                    .hint("use a server target (llama.cpp) for this file"));
                }
                (kv, convolves)
            }
            None => (need("attention.head_count_kv")?, Vec::new()),
        };
        let conv_taps = match convolves.is_empty() {
            true => 0,
            false => need("shortconv.l_cache")? as usize,
        };
        let embd = need("embedding_length")?;
        let blocks = need("block_count")?;
        if !convolves.is_empty() && convolves.len() as u64 != blocks {
            return Err(Error::in_file(
                path,
                format!(
                    "{} has {} values for {blocks} blocks",
                    key("attention.head_count_kv"),
                    convolves.len()
                ),
            ));
        }
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
        // A head may be wider or narrower than embedding_length / head_count (Qwen3, Gemma,
        // Mistral Nemo's 128 of 160, Ministral 3's 128 of 96): `attention.key_length` says, in
        // any architecture, as llama.cpp reads it; Qwen3 and Gemma files always write it.
        let must_say = matches!(arch.as_str(), "qwen3" | "qwen3moe" | "gemma2" | "gemma3");
        let own_head_dim = must_say || md_uint(&key("attention.key_length")).is_some_and(|k| k > 0);
        let head_dim = if own_head_dim {
            need("attention.key_length")?
        } else {
            embd / heads
        };
        let rope_dim = md_uint(&key("rope.dimension_count")).unwrap_or(head_dim);
        // Phi-4-mini rotates 3/4 of each head, GLM-4 half; the other decoders rotate it whole.
        let partial_rotary = matches!(arch.as_str(), "phi3" | "glm4");
        if heads % kv_heads != 0
            || (!own_head_dim && embd % heads != 0)
            || rope_dim % 2 != 0
            || head_dim % 2 != 0
            || rope_dim == 0
            || rope_dim > head_dim
            || (rope_dim != head_dim && !partial_rotary)
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
        // candle's quantized_llama (a mixture of experts in the old layout only) precomputes a
        // fixed table; the decoders here size theirs from the file.
        let old_moe = arch == "llama" && LlamaFamily::has_experts_one_by_one(&ct);
        let ctx = match arch.as_str() {
            "llama" if old_moe => md_uint(&key("context_length"))
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
        // OLMo-3 is an olmo2 file whose layers slide, three in four, with their own rotation.
        if arch == "olmo2" && md_uint(&key("attention.sliding_window")).is_some_and(|w| w > 0) {
            return Err(Error::in_file(
                path,
                "an olmo2 file with attention.sliding_window (OLMo-3): the in-process model does not run sliding-window OLMo layers",
            )
            .hint("use a server target (llama.cpp) for this file"));
        }
        // llama.cpp runs an lfm2 file with a window as its sliding-window variant (`iswa`).
        if arch == "lfm2" && md_uint(&key("attention.sliding_window")).is_some_and(|w| w > 0) {
            return Err(Error::in_file(
                path,
                "an lfm2 file with attention.sliding_window: the in-process model does not run sliding-window LFM2 layers",
            )
            .hint("use a server target (llama.cpp) for this file"));
        }
        // GLM-4.1V and GLM-4.5V (glm4 with `rope.dimension_sections`) rotate by sections of
        // position ids (M-RoPE), for images as much as text.
        let sections = ct
            .metadata
            .get(&key("rope.dimension_sections"))
            .and_then(|v| v.to_vec().ok())
            .is_some_and(|v| v.iter().any(|s| gguf_uint(s).is_some_and(|n| n > 0)));
        if sections {
            return Err(Error::in_file(
                path,
                format!("{} is set (M-RoPE, a vision-language GLM): the in-process model rotates text positions only", key("rope.dimension_sections")),
            )
            .hint("use a server target (llama.cpp) for this file"));
        }
        // candle's Gemma-2 applies its sliding window to every layer (transformers: every
        // other one): the context stops at the window, where both agree.
        let ctx = match md_uint(&key("attention.sliding_window")) {
            Some(w) if arch == "gemma2" && w > 0 => ctx.min(w as usize),
            _ => ctx,
        };
        // LongRoPE (Phi-3 128k, Phi-4-mini) rotates by other factors past the original context,
        // and the stacks disagree on when to switch (llama.cpp by its configured context,
        // transformers and vLLM by the sequence's length): they agree on a sequence that fits
        // the original context, with the short factors, so the context stops there.
        let original_ctx = md_uint(&key("rope.scaling.original_context_length"))
            .filter(|&c| c > 0)
            .map_or(ctx, |c| c as usize);
        let ctx = match ct.tensor_infos.contains_key("rope_factors_long.weight") {
            true => ctx.min(original_ctx),
            false => ctx,
        };
        let scaling = rope_scaling(&ct, &arch, old_moe).map_err(|why| {
            Error::in_file(path, why).hint("use a server target (llama.cpp) for this file")
        })?;
        // Mistral 3 (Llama 4's attention temperature) scales each query by
        // 1 + s·ln(⌊(pos + offset) / L⌋ + 1), which is 1 below L: the original context in
        // llama-cpp-python 0.3.36 ("invalid n_ctx_orig_yarn for attention temperature
        // scaling"), `attention.temperature_length` in other llama.cpp builds. The context
        // stops before the smaller, where every stack agrees the scale is 1.
        let ctx = match md_f32(&key("attention.temperature_scale")).filter(|&s| s != 0.0) {
            Some(_) => {
                let length = md_uint(&key("attention.temperature_length"))
                    .filter(|&l| l > 1)
                    .map_or(original_ctx, |l| (l as usize).min(original_ctx));
                ctx.min(length.saturating_sub(1).max(1))
            }
            None => ctx,
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
        // Matrices candle can only multiply in scalar code become F32 first (see `widen`) for
        // candle's own model; ours take them as Q8_0 integers and block offsets (`int8_tiles.rs`).
        let quantized_llama = arch == "llama" && LlamaFamily::has_experts_one_by_one(&ct);
        let (ct, mut file): (gguf_file::Content, Box<dyn ReadSeek>) = match quantized_llama {
            false => (ct, Box::new(file)),
            true => match widen(&ct, &mut file).map_err(cannot)? {
                Some((widened, bytes)) => (widened, Box::new(std::io::Cursor::new(bytes))),
                None => (ct, Box::new(file)),
            },
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
                Net::gemma2(&cfg, |cfg| gemma2_from_gguf(&ct, &mut file, path, cfg))?
            }
            "gemma3" => Net::Gemma3(Box::new(
                gemma3::Gemma3::from_gguf(&ct, &mut file, ctx).map_err(cannot)?,
            )),
            "llama" if LlamaFamily::has_experts_one_by_one(&ct) => Net::Gguf(
                quantized_llama::ModelWeights::from_gguf(ct, &mut file, &Device::Cpu)
                    .map_err(cannot)?,
            ),
            _ => {
                let shape = llama_family::Shape {
                    heads: heads as usize,
                    kv_heads: kv_heads as usize,
                    blocks: blocks as usize,
                    head_dim: head_dim as usize,
                    rope_dims: rope_dim as usize,
                    ctx,
                    original_ctx,
                    scaling,
                    convolves,
                    conv_taps,
                };
                Net::GgufLlamaFamily(Box::new(
                    LlamaFamily::from_gguf(&ct, &mut file, &arch, shape).map_err(cannot)?,
                ))
            }
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

/// A reader candle's GGUF loaders can read tensors from: the file, or its widened copy.
trait ReadSeek: std::io::Read + std::io::Seek {}
impl<T: std::io::Read + std::io::Seek> ReadSeek for T {}

/// Quantizations candle 0.11.1 multiplies without SIMD on x86-64 (its AVX2 dot products cover
/// Q4_0, Q8_0 and the K-quants): a Q4_1 SmolLM2-135M decoded at 0.11× llama.cpp's speed and
/// took 3.2 s to its first token where llama.cpp takes 0.16 (docs/benchmarks.md). For candle's
/// own `quantized_llama` they are widened to F32 (candle's gemm). chatgate's decoders hold them
/// as Q8_0 integers plus a block offset instead (`int8_tiles.rs`): widened, decode read 4 bytes
/// a weight and ran at 0.43× llama.cpp's on SmolLM2-135M Q4_1.
const SCALAR_ONLY: [GgmlDType; 2] = [GgmlDType::Q4_1, GgmlDType::Q5_1];

/// The quantizations `widen` turns to F32 here. (Where the CPU has no int8 tiles, Q4_0 and Q8_0
/// matrices get an F32 copy beside them instead, for prefill: `int8_tiles.rs`.)
pub(super) fn widened_here(dtype: GgmlDType) -> bool {
    SCALAR_ONLY.contains(&dtype)
}

/// [`widened_here`] for a type as a GGUF names it ("Q4_0"), for the memory estimate.
pub(super) fn widened_here_named(name: &str) -> bool {
    let dtype = match name {
        "Q4_1" => GgmlDType::Q4_1,
        "Q5_1" => GgmlDType::Q5_1,
        _ => return false,
    };
    widened_here(dtype)
}

/// At most this many bytes of such matrices are widened (4 bytes a weight, held twice while
/// loading); beyond it they stay quantized: slow, but in the memory the file's size suggests.
pub(super) const MAX_WIDENED_BYTES: u64 = 2 << 30;

/// The GGUF's tensors with every matrix [`widened_here`] dequantized to F32, as a GGUF in memory
/// (its content and tensor bytes) that candle's loaders read like the file; None when there is
/// nothing to widen or it would take more than `MAX_WIDENED_BYTES`. The numbers are the same
/// weights; what changes is that the activations are no longer rounded to 8 bits on their way
/// into those matrices, as they are in a quantized dot product (llama.cpp's included).
fn widen<R: std::io::Read + std::io::Seek>(
    ct: &gguf_file::Content,
    file: &mut R,
) -> candle_core::Result<Option<(gguf_file::Content, Vec<u8>)>> {
    let widened: u64 = ct
        .tensor_infos
        .values()
        .filter(|i| widened_here(i.ggml_dtype))
        .map(|i| i.shape.elem_count() as u64 * 4)
        .sum();
    if widened == 0 || widened > MAX_WIDENED_BYTES {
        return Ok(None);
    }
    let mut names: Vec<&String> = ct.tensor_infos.keys().collect();
    names.sort_by_key(|n| ct.tensor_infos[*n].offset);
    let mut bytes = Vec::new();
    let mut infos = std::collections::HashMap::new();
    for name in names {
        let info = &ct.tensor_infos[name];
        let tensor = ct.tensor(file, name, &Device::Cpu)?;
        let offset = bytes.len() as u64;
        let dtype = if widened_here(info.ggml_dtype) {
            let values = tensor
                .dequantize(&Device::Cpu)?
                .flatten_all()?
                .to_vec1::<f32>()?;
            bytes.extend(values.iter().flat_map(|v| v.to_le_bytes()));
            GgmlDType::F32
        } else {
            bytes.extend_from_slice(&tensor.data()?);
            info.ggml_dtype
        };
        infos.insert(
            name.clone(),
            gguf_file::TensorInfo {
                ggml_dtype: dtype,
                shape: info.shape.clone(),
                offset,
            },
        );
    }
    let content = gguf_file::Content {
        magic: ct.magic,
        metadata: ct.metadata.clone(),
        tensor_infos: infos,
        tensor_data_offset: 0,
    };
    Ok(Some((content, bytes)))
}

/// The dimensions `from_gguf` read and checked.
pub(super) struct GgufDims {
    heads: u64,
    kv_heads: u64,
    embd: u64,
    blocks: u64,
    head_dim: u64,
    vocab: usize,
    ctx: usize,
}

/// candle's `gemma2::Config` from llama.cpp's gemma2 keys (`Gemma2Model.set_gguf_parameters`).
pub(super) fn gemma2_gguf_config(
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
pub(super) fn gemma2_hf_name(gguf: &str) -> Option<(String, bool)> {
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
pub(super) fn gemma2_from_gguf<R: std::io::Read + std::io::Seek>(
    ct: &gguf_file::Content,
    file: &mut R,
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

pub(super) fn gguf_uint(v: &gguf_file::Value) -> Option<u64> {
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

/// The per-block key/value head counts of an architecture that writes them as an array (LFM2),
/// None for one count for every block.
fn per_block_kv_heads(ct: &gguf_file::Content, arch: &str) -> Option<Vec<Option<u64>>> {
    let v = ct
        .metadata
        .get(&format!("{arch}.attention.head_count_kv"))?
        .to_vec()
        .ok()?;
    Some(v.iter().map(gguf_uint).collect())
}

/// LFM2's blocks from its per-block key/value head counts: the count the attending blocks
/// share, and which blocks convolve (count 0: llama.cpp's `is_recurrent`).
fn lfm2_blocks(counts: &[Option<u64>], key: &str) -> std::result::Result<(u64, Vec<bool>), String> {
    let counts: Vec<u64> = counts
        .iter()
        .map(|c| c.ok_or_else(|| format!("{key} holds a value that is not an integer")))
        .collect::<std::result::Result<_, _>>()?;
    let mut attending = counts.iter().copied().filter(|&c| c > 0);
    let Some(kv_heads) = attending.next() else {
        return Err(format!("{key} is 0 for every block: no block attends"));
    };
    if attending.any(|c| c != kv_heads) {
        return Err(format!(
            "{key} is {counts:?}: the in-process model runs blocks that share one key/value head count"
        ));
    }
    Ok((kv_heads, counts.iter().map(|&c| c == 0).collect()))
}

/// How `ct` stretches its rotation, read as llama.cpp reads it: `rope.scaling.type` (linear when
/// absent, as llama.cpp defaults it) and `rope.scaling.factor` (or the older
/// `rope.scale_linear`); `longrope` is linear in llama.cpp too (its factors are tensors). Err
/// names a kind the in-process model would run wrong: YaRN where the decoder is not this
/// crate's (Gemma 2 and 3, candle's quantized_llama for the old expert layout), or a kind
/// llama.cpp does not name.
fn rope_scaling(
    ct: &gguf_file::Content,
    arch: &str,
    old_moe: bool,
) -> std::result::Result<Scaling, String> {
    let key = |k: &str| format!("{arch}.{k}");
    let md = |k: &str| ct.metadata.get(&key(k));
    let float = |k: &str| md(k).and_then(|v| v.to_f32().ok());
    let uint = |k: &str| md(k).and_then(gguf_uint).filter(|&v| v > 0);
    let kind = md("rope.scaling.type")
        .and_then(|v| v.to_string().ok())
        .map_or("linear", String::as_str);
    let factor = float("rope.scaling.factor")
        .or_else(|| float("rope.scale_linear"))
        .filter(|&f| f > 0.0 && f != 1.0);
    match kind {
        "none" => Ok(Scaling::None),
        "linear" | "longrope" => Ok(factor.map_or(Scaling::None, Scaling::Linear)),
        "yarn" if old_moe || arch == "gemma2" || arch == "gemma3" => Err(format!(
            "{} is \"yarn\": the in-process {arch} model does not rotate by YaRN",
            key("rope.scaling.type")
        )),
        "yarn" => {
            let Some(factor) = factor else {
                return Ok(Scaling::None);
            };
            let original_ctx = uint("rope.scaling.original_context_length")
                .or_else(|| uint("context_length"))
                .ok_or_else(|| {
                    format!(
                        "{} is \"yarn\" and the file has neither {} nor {}",
                        key("rope.scaling.type"),
                        key("rope.scaling.original_context_length"),
                        key("context_length")
                    )
                })?;
            // llama.cpp reads `rope.scaling.yarn_beta_fast`, `_beta_slow`, `_ext_factor` and
            // `_attn_factor` for Grok-style architectures only (see `Yarn`).
            Ok(Scaling::Yarn(Yarn {
                factor,
                original_ctx: original_ctx as usize,
                // Read for mistral3 as written (llama.cpp divides DeepSeek's by 0.1, not this).
                mscale_all_dim: match arch {
                    "mistral3" => float("rope.scaling.yarn_log_multiplier").unwrap_or(0.0),
                    _ => 0.0,
                },
            }))
        }
        other => Err(format!(
            "{} is \"{other}\"; llama.cpp and the in-process model know none, linear, yarn and longrope",
            key("rope.scaling.type")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::lfm2_blocks;

    const KEY: &str = "lfm2.attention.head_count_kv";

    #[test]
    fn lfm2_blocks_convolve_where_the_head_count_is_zero() {
        let counts = [Some(0), Some(0), Some(8), Some(0), Some(8)];
        let (kv, convolves) = lfm2_blocks(&counts, KEY).unwrap();
        assert_eq!(kv, 8);
        assert_eq!(convolves, [true, true, false, true, false]);
    }

    #[test]
    fn lfm2_head_counts_the_in_process_model_cannot_run_are_refused_by_name() {
        let none = lfm2_blocks(&[Some(0), Some(0)], KEY).unwrap_err();
        assert!(
            none.contains(KEY) && none.contains("no block attends"),
            "{none}"
        );
        let mixed = lfm2_blocks(&[Some(8), Some(0), Some(4)], KEY).unwrap_err();
        assert!(
            mixed.contains("[8, 0, 4]") && mixed.contains("share one"),
            "{mixed}"
        );
        let odd = lfm2_blocks(&[Some(8), None], KEY).unwrap_err();
        assert!(odd.contains("not an integer"), "{odd}");
    }
}
