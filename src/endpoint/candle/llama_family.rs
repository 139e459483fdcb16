//! Llama, Qwen2 and Qwen3 from a GGUF (dense, text), quantized, as llama.cpp runs them.
//!
//! candle-transformers has these (`quantized_llama`, `quantized_qwen2`, `quantized_qwen3`) and
//! they agree with llama.cpp, but they multiply through candle's `QMatMul` and nothing can pad
//! their inputs: the int8 tiles (`int8_tiles`) need rows a multiple of 256 long, and small
//! models' are not (SmolLM2's 576, Qwen2.5-0.5B's 896). Through them SmolLM2-135M Q4_0 ran at
//! 0.32× llama.cpp's tokens per second and 0.15× its prefill. Here every matrix is an
//! `int8_tiles::Linear`.
//!
//! The graph is llama.cpp's `llm_build_llama` / `llm_build_qwen2` / `llm_build_qwen3`
//! (src/models/): RMS norm, Q/K/V projections (Qwen2 adds their biases; Qwen3 RMS-normalizes
//! each head of Q and K before the rotation), rotary embeddings (NORM pairs for Llama, NEOX for
//! Qwen; `rope.freq_base`, linear `rope.scaling.factor`, Llama 3's `rope_freqs.weight` frequency
//! factors), attention scaled by 1/√head_dim over the cached keys, the output projection and a
//! residual; RMS norm, SiLU-gated MLP and a residual; a final norm and the output head (the
//! token embedding when the file has no `output.weight`). Mixture-of-experts files (a
//! `ffn_gate_inp` router) stay with candle's `quantized_llama`.
use candle_core::quantized::{gguf_file, QTensor};
use candle_core::{Device, Module, Result, Tensor};
use candle_transformers::quantized_nn::RmsNorm;

use super::attention::{attend, attention_mask, check_positions, Pairs, Rope};
use super::int8_tiles::{Linear, MAX_TILED_BYTES};

struct Layer {
    attn_norm: RmsNorm,
    q: Linear,
    k: Linear,
    v: Linear,
    /// Qwen2's Q, K and V biases.
    bias: Option<[Tensor; 3]>,
    /// Qwen3's per-head norms of Q and K.
    qk_norm: Option<[RmsNorm; 2]>,
    o: Linear,
    ffn_norm: RmsNorm,
    gate: Linear,
    up: Linear,
    down: Linear,
    cache: Option<(Tensor, Tensor)>,
}

/// A dense llama-family GGUF's weights and per-request cache.
pub struct LlamaFamily {
    embeddings: Tensor,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    layers: Vec<Layer>,
    rope: Rope,
    norm: RmsNorm,
    output: Linear,
    ctx: usize,
}

/// The shape `gguf.rs` read and checked from the header.
pub struct Shape {
    pub heads: usize,
    pub kv_heads: usize,
    pub blocks: usize,
    pub head_dim: usize,
    pub ctx: usize,
}

impl LlamaFamily {
    /// Whether candle's `quantized_llama` must run `ct` instead (a mixture of experts).
    pub fn is_mixture_of_experts(ct: &gguf_file::Content) -> bool {
        ct.tensor_infos.contains_key("blk.0.ffn_gate_inp.weight")
    }

    /// Loads the weights of `ct` (architecture `arch`: llama, qwen2 or qwen3).
    pub fn from_gguf<R: std::io::Seek + std::io::Read>(
        ct: &gguf_file::Content,
        reader: &mut R,
        arch: &str,
        shape: Shape,
    ) -> Result<LlamaFamily> {
        let cpu = &Device::Cpu;
        let md = |k: &str| ct.metadata.get(&format!("{arch}.{k}"));
        let float = |k: &str| md(k).and_then(|v| v.to_f32().ok());
        let eps = float("attention.layer_norm_rms_epsilon").unwrap_or(1e-6) as f64;
        let base = float("rope.freq_base").unwrap_or(10_000.0);
        let scale = match md("rope.scaling.type").and_then(|v| v.to_string().ok()) {
            Some(t) if t == "linear" => float("rope.scaling.factor").unwrap_or(1.0),
            _ => 1.0,
        };
        let has = |name: &str| ct.tensor_infos.contains_key(name);
        let tensor = |r: &mut R, name: &str| ct.tensor(r, name, cpu);
        let norm = |r: &mut R, name: &str| RmsNorm::from_qtensor(tensor(r, name)?, eps);
        let vector = |r: &mut R, name: &str| tensor(r, name)?.dequantize(cpu);
        let factors = match has("rope_freqs.weight") {
            true => Some(vector(reader, "rope_freqs.weight")?.to_vec1::<f32>()?),
            false => None,
        };
        let pairs = match arch {
            "llama" => Pairs::Interleaved,
            _ => Pairs::Neox,
        };
        let rope = Rope::new(
            pairs,
            shape.head_dim,
            base,
            scale,
            factors.as_deref(),
            shape.ctx,
        )?;
        let mut budget = MAX_TILED_BYTES;
        let mut linear = |t: QTensor| Linear::new(t, &mut budget);
        let mut layers = Vec::with_capacity(shape.blocks);
        for i in 0..shape.blocks {
            let name = |t: &str| format!("blk.{i}.{t}.weight");
            let bias_name = |t: &str| format!("blk.{i}.{t}.bias");
            let bias = match has(&bias_name("attn_q")) {
                true => Some([
                    vector(reader, &bias_name("attn_q"))?,
                    vector(reader, &bias_name("attn_k"))?,
                    vector(reader, &bias_name("attn_v"))?,
                ]),
                false => None,
            };
            let qk_norm = match has(&name("attn_q_norm")) {
                true => Some([
                    norm(reader, &name("attn_q_norm"))?,
                    norm(reader, &name("attn_k_norm"))?,
                ]),
                false => None,
            };
            layers.push(Layer {
                attn_norm: norm(reader, &name("attn_norm"))?,
                q: linear(tensor(reader, &name("attn_q"))?)?,
                k: linear(tensor(reader, &name("attn_k"))?)?,
                v: linear(tensor(reader, &name("attn_v"))?)?,
                bias,
                qk_norm,
                o: linear(tensor(reader, &name("attn_output"))?)?,
                ffn_norm: norm(reader, &name("ffn_norm"))?,
                gate: linear(tensor(reader, &name("ffn_gate"))?)?,
                up: linear(tensor(reader, &name("ffn_up"))?)?,
                down: linear(tensor(reader, &name("ffn_down"))?)?,
                cache: None,
            });
        }
        let embeddings = tensor(reader, "token_embd.weight")?;
        let output = match has("output.weight") {
            true => tensor(reader, "output.weight")?,
            false => tensor(reader, "token_embd.weight")?,
        };
        Ok(LlamaFamily {
            // F32, as llama.cpp's get_rows gives them: F16 would round Q8_0's scale × integer.
            embeddings: embeddings.dequantize(cpu)?,
            heads: shape.heads,
            kv_heads: shape.kv_heads,
            head_dim: shape.head_dim,
            layers,
            rope,
            norm: norm(reader, "output_norm.weight")?,
            output: linear(output)?,
            ctx: shape.ctx,
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
            .unsqueeze(0)?;
        for i in 0..self.layers.len() {
            let h = self.layers[i].attn_norm.forward(&x)?;
            let x1 = (self.attention(i, &h, pos)? + &x)?;
            let layer = &self.layers[i];
            let h = layer.ffn_norm.forward(&x1)?;
            let h = (candle_nn::ops::silu(&layer.gate.forward(&h)?)? * layer.up.forward(&h)?)?;
            x = (layer.down.forward(&h)? + x1)?;
        }
        let last = x.narrow(1, seq - 1, 1)?;
        self.output.forward(&self.norm.forward(&last)?)
    }

    fn attention(&mut self, i: usize, x: &Tensor, pos: usize) -> Result<Tensor> {
        let (b, seq, _) = x.dims3()?;
        let (heads, kv_heads, hd) = (self.heads, self.kv_heads, self.head_dim);
        let layer = &self.layers[i];
        let (mut q, mut k, mut v) = (
            layer.q.forward(x)?,
            layer.k.forward(x)?,
            layer.v.forward(x)?,
        );
        if let Some([bq, bk, bv]) = &layer.bias {
            (q, k, v) = (
                q.broadcast_add(bq)?,
                k.broadcast_add(bk)?,
                v.broadcast_add(bv)?,
            );
        }
        let mut q = q.reshape((b, seq, heads, hd))?;
        let mut k = k.reshape((b, seq, kv_heads, hd))?;
        if let Some([q_norm, k_norm]) = &layer.qk_norm {
            (q, k) = (q_norm.forward(&q)?, k_norm.forward(&k)?);
        }
        let q = self.rope.apply(&q.transpose(1, 2)?, pos)?;
        let k = self.rope.apply(&k.transpose(1, 2)?, pos)?;
        let v = v
            .reshape((b, seq, kv_heads, hd))?
            .transpose(1, 2)?
            .contiguous()?;
        let (k, v) = match &layer.cache {
            Some((ck, cv)) => (Tensor::cat(&[ck, &k], 2)?, Tensor::cat(&[cv, &v], 2)?),
            None => (k, v),
        };
        let kv_len = k.dim(2)?;
        let mask = attention_mask(pos, seq, pos + seq - kv_len, kv_len, None)?;
        self.layers[i].cache = Some((k.clone(), v.clone()));
        // candle's `t / x` is `t * (1 / x)`: the same scores as dividing.
        let out = attend(&q, k, v, 1.0 / (hd as f64).sqrt(), mask)?;
        self.layers[i].o.forward(&out)
    }
}
