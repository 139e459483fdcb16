//! Gemma 3 (text), as llama.cpp runs a GGUF of it, quantized, and as transformers runs a
//! `gemma3_text` checkpoint: one decoder, built from either (`Weights`; `HfWeights` renames
//! transformers' tensors to llama.cpp's and stores each norm as `1 + w`, as its converter does).
//!
//! candle-transformers 0.11.1 has a `quantized_gemma3`, but it is not Gemma 3 as trained or as
//! llama.cpp serves it, so a gate against a real server would call healthy weights broken:
//! - its MLP gates with SiLU; Gemma 3 (transformers' `gelu_pytorch_tanh`, llama.cpp's
//!   `LLM_FFN_GELU`) gates with GELU, tanh approximation. On google/gemma-3-270m (Q4_K_M) the
//!   first token's logprob came out -0.68 where llama.cpp gives -1.72;
//! - its sliding-window layers see every cached position while decoding (the window is only in
//!   the prompt's mask), so past `sliding_window` tokens every fifth of six layers drifts;
//! - it precomputes rotary tables for 131,072 positions in every layer: 3.5 GB resident for the
//!   270M model. Here there are two tables (local and global), sized to the context.
//!
//! Its matrices go through `int8_tiles`: llama.cpp's Q4_K_M of a model whose width is not a
//! multiple of 256 (the 270M's 640) stores Q, K, gate and up as Q5_0, for which candle has only
//! a scalar dot product (decoding was three times slower than llama.cpp's), and its Q8_0 and
//! Q4_0 matrices of that width never reached candle's int8 tiles.
//!
//! The rest follows llama.cpp's `llm_build_gemma3` (src/models/gemma3.cpp): embeddings scaled by
//! √n_embd, per-head RMS norms on Q and K, NEOX rotary (local base `rope.freq_base_swa` or
//! 10,000 on the sliding layers, `rope.freq_base` with linear `rope.scaling.factor` on the global
//! ones), attention scaled by 1/√head_dim (1/√(n_embd/n_head) for the 62-layer 27B, as llama.cpp
//! sets `f_attention_scale`), norms after attention and after the MLP, no soft-capping. A layer
//! is global when `(layer + 1) % 6 == 0` (`attention.sliding_window_pattern` where the file has
//! one), and a sliding layer lets position i see j when `i - j < sliding_window`
//! (`is_masked_swa`, standard type).
use candle_core::quantized::{gguf_file, QTensor};
use candle_core::{DType, Device, Module, Result, Tensor};
use candle_transformers::quantized_nn::RmsNorm;

use super::attention::{attend, attention_mask, check_positions, Pairs, Rope};
use super::int8_tiles::{Linear, MAX_TILED_BYTES};

/// Every sixth layer attends globally (Gemma 3's `sliding_window_pattern`).
const DEFAULT_GLOBAL_EVERY: usize = 6;
/// The sliding layers' rotary base when the file does not say (Gemma 3's `rope_local_base_freq`).
const DEFAULT_LOCAL_ROPE_BASE: f32 = 10_000.0;

struct Layer {
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    q_norm: RmsNorm,
    k_norm: RmsNorm,
    attn_norm: RmsNorm,
    post_attn_norm: RmsNorm,
    ffn_norm: RmsNorm,
    post_ffn_norm: RmsNorm,
    gate: Linear,
    up: Linear,
    down: Linear,
    /// `Some(window)` on a sliding layer.
    window: Option<usize>,
    /// Keys and values of the positions this layer may still look at, and the first one's
    /// position.
    cache: Option<(Tensor, Tensor, usize)>,
}

/// A Gemma 3 GGUF's weights and per-request cache.
pub struct Gemma3 {
    embeddings: Tensor,
    embd: usize,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    attn_scale: f64,
    layers: Vec<Layer>,
    local: Rope,
    global: Rope,
    norm: RmsNorm,
    output: Linear,
    ctx: usize,
}

/// What decides Gemma 3's shapes and arithmetic, read from a GGUF's `gemma3.*` metadata or a
/// checkpoint's config.json (`Gemma3TextConfig`).
#[derive(Debug, Clone)]
pub struct Shape {
    pub heads: usize,
    pub kv_heads: usize,
    pub embd: usize,
    pub blocks: usize,
    pub head_dim: usize,
    /// `Some(window)` for each sliding layer, `None` for a global one.
    pub windows: Vec<Option<usize>>,
    pub eps: f64,
    pub global_base: f32,
    pub local_base: f32,
    /// Positions divided by this on the global layers (linear `rope_scaling`).
    pub global_scale: f32,
    pub attn_scale: f64,
}

/// Where the weights come from: the tensor of each llama.cpp name (`blk.0.attn_q.weight`), a
/// norm's already as llama.cpp stores it (Gemma's `1 + weight`).
pub trait Weights {
    fn get(&mut self, name: &str) -> Result<QTensor>;
    fn has(&self, name: &str) -> bool;
    /// The embedding table, looked up row by row (F16 where the source is quantized).
    fn embeddings(&mut self) -> Result<Tensor>;
}

struct GgufWeights<'a, R> {
    ct: &'a gguf_file::Content,
    reader: &'a mut R,
}

impl<R: std::io::Seek + std::io::Read> Weights for GgufWeights<'_, R> {
    fn get(&mut self, name: &str) -> Result<QTensor> {
        self.ct.tensor(self.reader, name, &Device::Cpu)
    }
    fn has(&self, name: &str) -> bool {
        self.ct.tensor_infos.contains_key(name)
    }
    fn embeddings(&mut self) -> Result<Tensor> {
        // F16: half the memory of F32 (the 262k × 640 table of the 270M model is 335 MB),
        // widened row by row when looked up.
        self.get("token_embd.weight")?.dequantize_f16(&Device::Cpu)
    }
}

impl Shape {
    /// From a GGUF's metadata, as llama.cpp's `llm_build_gemma3` reads it.
    pub fn from_gguf(ct: &gguf_file::Content) -> Result<Shape> {
        let md = |k: &str| ct.metadata.get(&format!("gemma3.{k}"));
        let uint = |k: &str| -> Result<usize> {
            match md(k) {
                Some(v) => Ok(v.to_u32()? as usize),
                None => candle_core::bail!("metadata gemma3.{k} is missing"),
            }
        };
        let float = |k: &str| md(k).and_then(|v| v.to_f32().ok());
        let heads = uint("attention.head_count")?;
        let embd = uint("embedding_length")?;
        let blocks = uint("block_count")?;
        let head_dim = uint("attention.key_length")?;
        let window = uint("attention.sliding_window")?;
        let global_every = uint("attention.sliding_window_pattern").unwrap_or(DEFAULT_GLOBAL_EVERY);
        let global_scale = match md("rope.scaling.type").and_then(|v| v.to_string().ok()) {
            Some(t) if t == "linear" => float("rope.scaling.factor").unwrap_or(1.0),
            _ => 1.0,
        };
        let attn_scale = if blocks == 62 {
            1.0 / ((embd / heads) as f64).sqrt()
        } else {
            1.0 / (head_dim as f64).sqrt()
        };
        Ok(Shape {
            heads,
            kv_heads: uint("attention.head_count_kv")?,
            embd,
            blocks,
            head_dim,
            windows: (0..blocks)
                .map(|i| ((i + 1) % global_every.max(1) != 0).then_some(window))
                .collect(),
            eps: float("attention.layer_norm_rms_epsilon").unwrap_or(1e-6) as f64,
            global_base: float("rope.freq_base").unwrap_or(1_000_000.0),
            local_base: float("rope.freq_base_swa")
                .or_else(|| float("rope.local_freq_base"))
                .unwrap_or(DEFAULT_LOCAL_ROPE_BASE),
            global_scale,
            attn_scale,
        })
    }
}

impl Gemma3 {
    /// Loads the weights of `ct`, rotary tables for `ctx` positions.
    pub fn from_gguf<R: std::io::Seek + std::io::Read>(
        ct: &gguf_file::Content,
        reader: &mut R,
        ctx: usize,
    ) -> Result<Gemma3> {
        Self::build(&Shape::from_gguf(ct)?, &mut GgufWeights { ct, reader }, ctx)
    }

    /// The model of `shape` from `weights`, rotary tables for `ctx` positions.
    pub fn build(shape: &Shape, weights: &mut dyn Weights, ctx: usize) -> Result<Gemma3> {
        let eps = shape.eps;
        // `weights` is passed to each call, not captured: both read from it.
        let norm = |w: &mut dyn Weights, name: &str| RmsNorm::from_qtensor(w.get(name)?, eps);
        let mut budget = MAX_TILED_BYTES;
        let mut matmul = |w: &mut dyn Weights, name: &str| Linear::new(w.get(name)?, &mut budget);
        let mut layers = Vec::with_capacity(shape.blocks);
        for i in 0..shape.blocks {
            let name = |t: &str| format!("blk.{i}.{t}.weight");
            layers.push(Layer {
                q: matmul(weights, &name("attn_q"))?,
                k: matmul(weights, &name("attn_k"))?,
                v: matmul(weights, &name("attn_v"))?,
                o: matmul(weights, &name("attn_output"))?,
                q_norm: norm(weights, &name("attn_q_norm"))?,
                k_norm: norm(weights, &name("attn_k_norm"))?,
                attn_norm: norm(weights, &name("attn_norm"))?,
                post_attn_norm: norm(weights, &name("post_attention_norm"))?,
                ffn_norm: norm(weights, &name("ffn_norm"))?,
                post_ffn_norm: norm(weights, &name("post_ffw_norm"))?,
                gate: matmul(weights, &name("ffn_gate"))?,
                up: matmul(weights, &name("ffn_up"))?,
                down: matmul(weights, &name("ffn_down"))?,
                window: shape.windows.get(i).copied().flatten(),
                cache: None,
            });
        }
        let head = match weights.has("output.weight") {
            true => "output.weight",
            false => "token_embd.weight",
        };
        let output = matmul(weights, head)?;
        let hd = shape.head_dim;
        Ok(Gemma3 {
            embeddings: weights.embeddings()?,
            embd: shape.embd,
            heads: shape.heads,
            kv_heads: shape.kv_heads,
            head_dim: hd,
            attn_scale: shape.attn_scale,
            layers,
            local: Rope::new(Pairs::Neox, hd, shape.local_base, 1.0, None, ctx)?,
            global: Rope::new(
                Pairs::Neox,
                hd,
                shape.global_base,
                shape.global_scale,
                None,
                ctx,
            )?,
            norm: norm(weights, "output_norm.weight")?,
            output,
            ctx,
        })
    }

    /// Forget every cached key and value.
    pub fn clear_kv_cache(&mut self) {
        self.layers.iter_mut().for_each(|l| l.cache = None);
    }

    /// Feeds `ids` (`[1, seq]`) at positions `pos..`, extending the cache; the last position's
    /// logits. Position 0 starts a new sequence.
    pub fn forward(&mut self, ids: &Tensor, pos: usize) -> Result<Tensor> {
        let seq = ids.dim(1)?;
        check_positions(pos, seq, self.ctx)?;
        if pos == 0 {
            self.clear_kv_cache();
        }
        let mut x = self
            .embeddings
            .embedding(&ids.flatten_all()?)?
            .to_dtype(DType::F32)?
            .unsqueeze(0)?;
        x = (x * (self.embd as f64).sqrt())?;
        for i in 0..self.layers.len() {
            let h = self.layers[i].attn_norm.forward(&x)?;
            let h = self.attention(i, &h, pos)?;
            let h = self.layers[i].post_attn_norm.forward(&h)?;
            let x1 = (h + &x)?;
            let layer = &self.layers[i];
            let h = layer.ffn_norm.forward(&x1)?;
            let h = (layer.gate.forward(&h)?.gelu()? * layer.up.forward(&h)?)?;
            let h = layer.post_ffn_norm.forward(&layer.down.forward(&h)?)?;
            x = (h + x1)?;
        }
        let last = x.narrow(1, seq - 1, 1)?;
        self.output.forward(&self.norm.forward(&last)?)
    }

    fn attention(&mut self, i: usize, x: &Tensor, pos: usize) -> Result<Tensor> {
        let (b, seq, _) = x.dims3()?;
        let (heads, kv_heads, hd) = (self.heads, self.kv_heads, self.head_dim);
        let layer = &self.layers[i];
        let rope = match layer.window {
            Some(_) => &self.local,
            None => &self.global,
        };
        let split = |t: Tensor, n: usize| t.reshape((b, seq, n, hd))?.transpose(1, 2);
        let q = layer
            .q_norm
            .forward(&split(layer.q.forward(x)?, heads)?.contiguous()?)?;
        let k = layer
            .k_norm
            .forward(&split(layer.k.forward(x)?, kv_heads)?.contiguous()?)?;
        let v = split(layer.v.forward(x)?, kv_heads)?;
        let q = rope.apply(&q, pos)?;
        let k = rope.apply(&k, pos)?;
        let (k, v, first) = match &layer.cache {
            Some((ck, cv, first)) => (
                Tensor::cat(&[ck, &k], 2)?,
                Tensor::cat(&[cv, &v.contiguous()?], 2)?,
                *first,
            ),
            None => (k, v.contiguous()?, pos),
        };
        let kv_len = k.dim(2)?;
        let mask = attention_mask(pos, seq, first, kv_len, layer.window)?;
        let window = layer.window;
        // A sliding layer keeps the last `window - 1` positions: with the next token's own,
        // that is all it may see.
        let keep = window.map_or(kv_len, |w| kv_len.min(w.saturating_sub(1)));
        self.layers[i].cache = Some((
            k.narrow(2, kv_len - keep, keep)?,
            v.narrow(2, kv_len - keep, keep)?,
            first + kv_len - keep,
        ));
        let out = attend(&q, k, v, self.attn_scale, mask)?;
        self.layers[i].o.forward(&out)
    }
}

/// A Gemma 3 text checkpoint's tensors (`Gemma3ForCausalLM`, transformers' names), given to
/// [`Gemma3::build`] under llama.cpp's names as float matrices: its converter's renaming, and
/// its `+ 1` on every norm (transformers' `Gemma3RMSNorm` multiplies by `1 + weight`; llama.cpp
/// stores the sum).
pub struct HfWeights<'a> {
    pub vb: candle_nn::VarBuilder<'a>,
}

/// llama.cpp's name of a Gemma 3 tensor → transformers', and whether it is a norm.
fn hf_name(gguf: &str) -> (String, bool) {
    let fixed = match gguf {
        "token_embd.weight" => Some(("model.embed_tokens.weight", false)),
        "output.weight" => Some(("lm_head.weight", false)),
        "output_norm.weight" => Some(("model.norm.weight", true)),
        _ => None,
    };
    if let Some((n, norm)) = fixed {
        return (n.to_string(), norm);
    }
    let rest = gguf.strip_prefix("blk.").unwrap_or(gguf);
    let (layer, part) = rest.split_once('.').unwrap_or((rest, ""));
    let (hf, norm) = match part.trim_end_matches(".weight") {
        "attn_q" => ("self_attn.q_proj", false),
        "attn_k" => ("self_attn.k_proj", false),
        "attn_v" => ("self_attn.v_proj", false),
        "attn_output" => ("self_attn.o_proj", false),
        "attn_q_norm" => ("self_attn.q_norm", true),
        "attn_k_norm" => ("self_attn.k_norm", true),
        "attn_norm" => ("input_layernorm", true),
        "post_attention_norm" => ("post_attention_layernorm", true),
        "ffn_norm" => ("pre_feedforward_layernorm", true),
        "post_ffw_norm" => ("post_feedforward_layernorm", true),
        "ffn_gate" => ("mlp.gate_proj", false),
        "ffn_up" => ("mlp.up_proj", false),
        "ffn_down" => ("mlp.down_proj", false),
        other => (other, false),
    };
    (format!("model.layers.{layer}.{hf}.weight"), norm)
}

impl HfWeights<'_> {
    fn float(&self, gguf: &str) -> Result<(Tensor, bool)> {
        let (name, norm) = hf_name(gguf);
        let t = self.vb.get_unchecked_dtype(&name, DType::F32)?;
        Ok((t, norm))
    }
}

impl Weights for HfWeights<'_> {
    fn get(&mut self, name: &str) -> Result<QTensor> {
        let (t, norm) = self.float(name)?;
        let t = if norm { (t + 1.0)? } else { t };
        QTensor::quantize(&t, candle_core::quantized::GgmlDType::F32)
    }
    fn has(&self, name: &str) -> bool {
        self.vb.contains_tensor(&hf_name(name).0)
    }
    fn embeddings(&mut self) -> Result<Tensor> {
        Ok(self.float("token_embd.weight")?.0)
    }
}
