//! Llama, Qwen2, Qwen3, Phi-3, SmolLM3, Granite, OLMo-2, Mistral 3, GLM-4 and LFM2 from a GGUF
//! (text), quantized, as llama.cpp runs them.
//!
//! candle-transformers has these (`quantized_llama`, `quantized_qwen2`, `quantized_qwen3`) and
//! they agree with llama.cpp, but they multiply through candle's `QMatMul` and nothing can pad
//! their inputs: the int8 tiles (`int8_tiles`) need rows a multiple of 256 long, and small
//! models' are not (SmolLM2's 576, Qwen2.5-0.5B's 896). Through them SmolLM2-135M Q4_0 ran at
//! 0.32× llama.cpp's tokens per second and 0.15× its prefill. Here every matrix is an
//! `int8_tiles::Linear`.
//!
//! The graph is llama.cpp's `llm_build_llama` / `_qwen2` / `_qwen3` / `_phi3` / `_smollm3` /
//! `_granite` / `_olmo2` (src/models/): RMS
//! norm, Q/K/V projections (Qwen2 adds their biases; Qwen3 RMS-normalizes each head of Q and K
//! before the rotation; Phi-3 fuses the three into one `attn_qkv` matrix), rotary embeddings
//! (NORM pairs for Llama, NEOX for Qwen and Phi-3; `rope.freq_base`, linear
//! `rope.scaling.factor`, frequency factors, the first `rope.dimension_count` elements of a head
//! only), attention scaled by 1/√head_dim over the cached keys, the output projection and a
//! residual; RMS norm, SiLU-gated MLP (Phi-3's gate and up fused in one `ffn_up`, gate first)
//! and a residual; a final norm and the output head (the token embedding when the file has no
//! `output.weight`). A mixture of experts (Mixtral's `llama` files, Qwen3-MoE's `qwen3moe`: a
//! `ffn_gate_inp` router and each block's experts in 3-D `ffn_*_exps` tensors) replaces the MLP
//! as llama.cpp's `build_moe_ffn` computes it for both: softmax over the router's logits, the
//! `expert_used_count` most likely experts, their weights renormalized to sum to 1, the
//! weighted sum of their SiLU MLPs. (candle's `quantized_qwen3_moe` multiplies experts with
//! `indexed_moe_forward`, which panics off CUDA; files with a tensor per expert, the old
//! layout, stay with candle's `quantized_llama`.)
//!
//! Frequency factors are llama.cpp's `get_rope_factors`: Llama 3's `rope_freqs.weight`, else
//! LongRoPE's (Phi-3 128k, Phi-4-mini) `rope_factors_long` when the context is longer than
//! `rope.scaling.original_context_length` and `rope_factors_short` otherwise, with cos and sin
//! times `rope.scaling.attn_factor`. `gguf.rs` keeps such a file's context to the original
//! length, so the short factors apply: what transformers and vLLM use for a sequence that fits
//! it, and llama.cpp at any context up to it (llama-cpp-python's default 512, llama-server's
//! 4096). Phi-3's sliding window is off, as llama.cpp has it.
//!
//! SmolLM3 is Llama with every fourth layer unrotated (NoPE: llama.cpp's fixed
//! `n_no_rope_layer_step = 4`). Granite is Llama with four multipliers from its config, each
//! a GGUF key: the embeddings times `embedding_scale`, each block's attention and MLP output
//! times `residual_scale` before its residual, attention scores times `attention.scale` instead
//! of 1/√head_dim, and the logits divided by `logit_scale`; `rope.scaling.finetuned = false`
//! turns its rotation off. OLMo-2 has no norms before attention and the MLP: it norms their
//! outputs (`post_attention_norm`, `post_ffw_norm`) before each residual, and norms Q and K
//! across all heads (its `attn_q_norm` is as wide as the projection) before the NEOX rotation.
//! OLMo-3's sliding-window layers (an `olmo2` file with `attention.sliding_window`) are not run
//! here (`gguf.rs` refuses the file).
//!
//! GLM-4 (GLM-4-0414, GLM-Z1: `glm4`, llama.cpp's `src/models/glm4.cpp`) norms both before and
//! after attention and the MLP (`post_attention_norm`, `post_ffw_norm`), has Q, K and V biases,
//! Phi-3's fused gate and up (`ffn_up`, gate first), and rotates the first
//! `rope.dimension_count` elements of each head (half) in NORM pairs. The vision GLMs' M-RoPE
//! (`rope.dimension_sections`) is refused in `gguf.rs`.
//!
//! LFM2 (Liquid's LFM2 and LFM2.5 text models: `lfm2`, llama.cpp's `src/models/lfm2.cpp`)
//! replaces attention in some blocks (those whose `attention.head_count_kv` entry is 0) by a
//! gated short convolution over the last `shortconv.l_cache` tokens (`ShortConv`), whose
//! state is carried from one forward to the next as a KV cache is; its attending blocks norm
//! each head of Q and K and rotate NEOX pairs, and its last norm is `token_embd_norm`.
//! candle-transformers' `quantized_lfm2` is not used: it never resets its convolution state
//! between requests and drops the state in a chunked prefill.
//!
//! YaRN (`rope.scaling.type = yarn`: Qwen3 and Qwen2.5 files converted with their long-context
//! config, Mistral 3) rotates every position by blended frequencies (`attention::Yarn`) with
//! cos and sin times llama-context's magnitude (`Yarn::magnitude`: 1 + 0.1 ln(factor), or for
//! Mistral 3 the ratio its `mscale_all_dim` gives, 1 for Ministral 3). Mistral 3 (Ministral 3,
//! Devstral 2, Magistral's text model: `mistral3`) is Llama's graph with YaRN and NORM pairs;
//! its Llama-4 query temperature is 1 within the original context, where `gguf.rs` stops the
//! context.
use candle_core::quantized::{gguf_file, QStorage, QTensor};
use candle_core::{DType, Device, Module, Result, Tensor};
use candle_transformers::quantized_nn::RmsNorm;

use super::attention::{attend, attention_mask, check_positions, Pairs, Rope, Scaling};
use super::int8_tiles::{Linear, MAX_TILED_BYTES};

/// SmolLM3 leaves layer i unrotated when (i + 1) is a multiple of this (llama.cpp's
/// `n_no_rope_layer_step`, fixed for the architecture; transformers' `no_rope_layers`).
const SMOLLM3_NOPE_EVERY: usize = 4;

struct Layer {
    /// None for OLMo-2, which norms the outputs instead (`post_norms`).
    attn_norm: Option<RmsNorm>,
    mixer: Mixer,
    ffn_norm: Option<RmsNorm>,
    /// OLMo-2's norms of the attention's and the MLP's outputs, before each residual.
    post_norms: Option<[RmsNorm; 2]>,
    ffn: Ffn,
}

/// What mixes a block's positions: attention, or (LFM2's other blocks) a gated short
/// convolution.
enum Mixer {
    Attention(Box<Attention>),
    ShortConv(ShortConv),
}

/// A block's attention: its projections and the keys and values cached so far.
struct Attention {
    qkv: Qkv,
    /// Qwen2's Q, K and V biases.
    bias: Option<[Tensor; 3]>,
    qk_norm: Option<QkNorm>,
    o: Linear,
    cache: Option<(Tensor, Tensor)>,
}

/// LFM2's gated short convolution (llama.cpp's `build_shortconv_block`): `in_proj` gives B, C
/// and x side by side; B⊙x runs through a causal depthwise convolution of `taps.len()` tokens
/// (the last tap on the current token), C gates its output, and `out_proj` maps it back. The
/// state is the last `taps.len() − 1` rows of B⊙x seen, zeros before the first token.
struct ShortConv {
    in_proj: Linear,
    /// Tap j of every channel (`shortconv.conv.weight`'s column j), oldest token first.
    taps: Vec<Tensor>,
    out_proj: Linear,
    state: Option<Tensor>,
}

/// A block's MLP: one, or a mixture of experts.
enum Ffn {
    Dense(Mlp),
    /// llama.cpp's `build_moe_ffn` as its llama (Mixtral) and qwen3moe graphs call it: the
    /// router's softmax over `ffn_gate_inp`, the `used` most likely experts per token, their
    /// weights renormalized to sum to 1 (`norm_w`), the weighted sum of their SiLU MLPs.
    Experts {
        router: Linear,
        experts: Vec<Mlp>,
        used: usize,
    },
}

/// SiLU(gate(x)) × up(x), then down.
struct Mlp {
    /// None when `up` gives the gate and the up projection side by side (Phi-3's `ffn_up`).
    gate: Option<Linear>,
    up: Linear,
    down: Linear,
}

/// RMS norms of Q and K before the rotation: of each head (Qwen3), or of the whole projection
/// (OLMo-2's `attn_q_norm` is as wide as all the heads).
struct QkNorm {
    q: RmsNorm,
    k: RmsNorm,
    whole: bool,
}

/// The Q, K and V projections: three matrices, or one whose rows are Q's, then K's, then V's.
enum Qkv {
    Split([Linear; 3]),
    Fused(Linear),
}

impl Qkv {
    fn forward(&self, x: &Tensor, q_width: usize, kv_width: usize) -> Result<[Tensor; 3]> {
        match self {
            Qkv::Split([q, k, v]) => Ok([q.forward(x)?, k.forward(x)?, v.forward(x)?]),
            Qkv::Fused(qkv) => {
                let all = qkv.forward(x)?;
                Ok([
                    all.narrow(2, 0, q_width)?,
                    all.narrow(2, q_width, kv_width)?,
                    all.narrow(2, q_width + kv_width, kv_width)?,
                ])
            }
        }
    }
}

/// A dense llama-family GGUF's weights and per-request cache.
pub struct LlamaFamily {
    embeddings: Tensor,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    layers: Vec<Layer>,
    rope: Rope,
    /// Whether layer `i` is rotated: all but SmolLM3's every fourth, none for a Granite
    /// without `rope.scaling.finetuned`.
    rotated: Vec<bool>,
    scales: Scales,
    norm: RmsNorm,
    output: Linear,
    ctx: usize,
}

/// Granite's multipliers (1 and None elsewhere).
struct Scales {
    embedding: f64,
    residual: Option<f64>,
    /// Replaces 1/√head_dim.
    attention: Option<f64>,
    /// The logits are divided by it.
    logit: f64,
}

/// The shape `gguf.rs` read and checked from the header.
pub struct Shape {
    pub heads: usize,
    pub kv_heads: usize,
    pub blocks: usize,
    pub head_dim: usize,
    /// Elements of a head the rotation turns (`rope.dimension_count`).
    pub rope_dims: usize,
    pub ctx: usize,
    /// The context the rotation was trained for (`rope.scaling.original_context_length`, else
    /// `context_length`): LongRoPE's long factors apply beyond it.
    pub original_ctx: usize,
    /// How the rotation is stretched (`rope.scaling.*`, read by `gguf.rs`).
    pub scaling: Scaling,
    /// LFM2's blocks that convolve instead of attending (`attention.head_count_kv` 0 for the
    /// block), and the tokens each convolution spans (`shortconv.l_cache`); empty elsewhere.
    pub convolves: Vec<bool>,
    pub conv_taps: usize,
}

impl LlamaFamily {
    /// Whether candle's `quantized_llama` must run `ct` instead: a mixture of experts in the
    /// old layout, a tensor per expert (`ffn_gate.0.weight`, ...), which this decoder does not
    /// read (it reads today's, the experts of a block in one 3-D `ffn_gate_exps`).
    pub fn has_experts_one_by_one(ct: &gguf_file::Content) -> bool {
        ct.tensor_infos.contains_key("blk.0.ffn_gate_inp.weight")
            && !ct.tensor_infos.contains_key("blk.0.ffn_gate_exps.weight")
    }

    /// Loads the weights of `ct` (architecture `arch`: llama, qwen2, qwen3, qwen3moe, phi3,
    /// smollm3, granite or olmo2).
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
        let has = |name: &str| ct.tensor_infos.contains_key(name);
        let tensor = |r: &mut R, name: &str| ct.tensor(r, name, cpu);
        let norm = |r: &mut R, name: &str| RmsNorm::from_qtensor(tensor(r, name)?, eps);
        let maybe_norm = |r: &mut R, name: &str| match has(name) {
            true => norm(r, name).map(Some),
            false => Ok(None),
        };
        let vector = |r: &mut R, name: &str| tensor(r, name)?.dequantize(cpu);
        let long = shape.ctx > shape.original_ctx;
        let factors = [
            ("rope_freqs.weight", true),
            ("rope_factors_long.weight", long),
            ("rope_factors_short.weight", !long),
        ]
        .into_iter()
        .find(|(name, applies)| *applies && has(name));
        let factors = match factors {
            Some((name, _)) => Some(vector(reader, name)?.to_vec1::<f32>()?),
            None => None,
        };
        // llama.cpp loads them as `n_rot / 2` values and refuses another length.
        if let Some(f) = factors.as_ref().filter(|f| f.len() != shape.rope_dims / 2) {
            candle_core::bail!(
                "the rotary frequency factors have {} values; rope.dimension_count {} needs {}",
                f.len(),
                shape.rope_dims,
                shape.rope_dims / 2
            );
        }
        // llama.cpp's `llama_model_rope_type`; its converter permutes these Q and K rows to match.
        let pairs = match arch {
            "llama" | "smollm3" | "granite" | "mistral3" | "glm4" => Pairs::Interleaved,
            // qwen2, qwen3, phi3, olmo2
            _ => Pairs::Neox,
        };
        let (dims, factors, ctx) = (shape.rope_dims, factors.as_deref(), shape.ctx);
        let attn_factor = float("rope.scaling.attn_factor").unwrap_or(1.0);
        let rope = match shape.scaling {
            Scaling::None => {
                Rope::new(pairs, dims, base, 1.0, factors, ctx)?.scaled(attn_factor)?
            }
            Scaling::Linear(s) => {
                Rope::new(pairs, dims, base, s, factors, ctx)?.scaled(attn_factor)?
            }
            Scaling::Yarn(y) => Rope::yarn(pairs, dims, base, &y, factors, ctx)?
                .scaled(y.magnitude() * attn_factor)?,
        };
        let rotates = match arch {
            "granite" => md("rope.scaling.finetuned").and_then(|v| v.to_bool().ok()) != Some(false),
            _ => true,
        };
        let rotated = (0..shape.blocks)
            .map(|i| rotates && !(arch == "smollm3" && (i + 1) % SMOLLM3_NOPE_EVERY == 0))
            .collect();
        let scales = match arch {
            "granite" => Scales {
                embedding: float("embedding_scale").unwrap_or(1.0) as f64,
                residual: float("residual_scale").map(f64::from),
                attention: float("attention.scale")
                    .filter(|&s| s != 0.0)
                    .map(f64::from),
                logit: float("logit_scale").filter(|&s| s != 0.0).unwrap_or(1.0) as f64,
            },
            // Mistral 3's graph takes `attention.scale` too, where the file has one.
            _ => Scales {
                embedding: 1.0,
                residual: None,
                attention: (arch == "mistral3")
                    .then(|| float("attention.scale"))
                    .flatten()
                    .filter(|&s| s != 0.0)
                    .map(f64::from),
                logit: 1.0,
            },
        };
        let mut budget = MAX_TILED_BYTES;
        let mut linear = |t: QTensor| Linear::new(t, &mut budget);
        let mut layers = Vec::with_capacity(shape.blocks);
        for i in 0..shape.blocks {
            let name = |t: &str| format!("blk.{i}.{t}.weight");
            let bias_name = |t: &str| format!("blk.{i}.{t}.bias");
            let post_norms = match has(&name("post_attention_norm")) {
                true => Some([
                    norm(reader, &name("post_attention_norm"))?,
                    norm(reader, &name("post_ffw_norm"))?,
                ]),
                false => None,
            };
            let mixer = match shape.convolves.get(i).copied().unwrap_or(false) {
                true => Mixer::ShortConv(ShortConv {
                    in_proj: linear(tensor(reader, &name("shortconv.in_proj"))?)?,
                    taps: conv_taps(
                        vector(reader, &name("shortconv.conv"))?,
                        shape.conv_taps,
                        &name("shortconv.conv"),
                    )?,
                    out_proj: linear(tensor(reader, &name("shortconv.out_proj"))?)?,
                    state: None,
                }),
                false => {
                    let bias = match has(&bias_name("attn_q")) {
                        true => Some([
                            vector(reader, &bias_name("attn_q"))?,
                            vector(reader, &bias_name("attn_k"))?,
                            vector(reader, &bias_name("attn_v"))?,
                        ]),
                        false => None,
                    };
                    let qk_norm = match ct.tensor_infos.get(&name("attn_q_norm")) {
                        Some(info) => Some(QkNorm {
                            whole: info.shape.elem_count() != shape.head_dim,
                            q: norm(reader, &name("attn_q_norm"))?,
                            k: norm(reader, &name("attn_k_norm"))?,
                        }),
                        None => None,
                    };
                    let qkv = match ct.tensor_infos.get(&name("attn_qkv")) {
                        Some(info) => {
                            let rows = (shape.heads + 2 * shape.kv_heads) * shape.head_dim;
                            if info.shape.dims().first() != Some(&rows) {
                                candle_core::bail!(
                                    "{} has shape {:?}; {} heads and {} key/value heads of {} need {rows} rows",
                                    name("attn_qkv"),
                                    info.shape.dims(),
                                    shape.heads,
                                    shape.kv_heads,
                                    shape.head_dim
                                );
                            }
                            Qkv::Fused(linear(tensor(reader, &name("attn_qkv"))?)?)
                        }
                        None => Qkv::Split([
                            linear(tensor(reader, &name("attn_q"))?)?,
                            linear(tensor(reader, &name("attn_k"))?)?,
                            linear(tensor(reader, &name("attn_v"))?)?,
                        ]),
                    };
                    Mixer::Attention(Box::new(Attention {
                        qkv,
                        bias,
                        qk_norm,
                        o: linear(tensor(reader, &name("attn_output"))?)?,
                        cache: None,
                    }))
                }
            };
            let ffn = match has(&name("ffn_gate_inp")) {
                true => {
                    let used = md("expert_used_count")
                        .and_then(|v| v.to_u32().ok())
                        .map(|n| n as usize);
                    let mut split = |t: &str| -> Result<Vec<Linear>> {
                        experts(tensor(reader, &name(t))?)?
                            .into_iter()
                            .map(&mut linear)
                            .collect()
                    };
                    let (gates, ups, downs) = (
                        split("ffn_gate_exps")?,
                        split("ffn_up_exps")?,
                        split("ffn_down_exps")?,
                    );
                    let n = gates.len();
                    if ups.len() != n || downs.len() != n {
                        candle_core::bail!(
                            "block {i} has {n} gate, {} up and {} down experts",
                            ups.len(),
                            downs.len()
                        );
                    }
                    let used = match used {
                        Some(u) if (1..=n).contains(&u) => u,
                        Some(u) => {
                            candle_core::bail!("expert_used_count is {u}; the file has {n} experts")
                        }
                        None => candle_core::bail!("metadata {arch}.expert_used_count is missing"),
                    };
                    let experts = gates
                        .into_iter()
                        .zip(ups)
                        .zip(downs)
                        .map(|((gate, up), down)| Mlp {
                            gate: Some(gate),
                            up,
                            down,
                        })
                        .collect();
                    Ffn::Experts {
                        router: linear(tensor(reader, &name("ffn_gate_inp"))?)?,
                        experts,
                        used,
                    }
                }
                false => Ffn::Dense(Mlp {
                    gate: match has(&name("ffn_gate")) {
                        true => Some(linear(tensor(reader, &name("ffn_gate"))?)?),
                        false => None,
                    },
                    up: linear(tensor(reader, &name("ffn_up"))?)?,
                    down: linear(tensor(reader, &name("ffn_down"))?)?,
                }),
            };
            layers.push(Layer {
                attn_norm: maybe_norm(reader, &name("attn_norm"))?,
                mixer,
                ffn_norm: maybe_norm(reader, &name("ffn_norm"))?,
                post_norms,
                ffn,
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
            rotated,
            scales,
            // LFM2's final norm is `token_embd_norm` in llama.cpp's converter (its name for
            // HF's `embedding_norm`, applied last), `output_norm` in later files.
            norm: match has("output_norm.weight") {
                true => norm(reader, "output_norm.weight")?,
                false => norm(reader, "token_embd_norm.weight")?,
            },
            output: linear(output)?,
            ctx: shape.ctx,
        })
    }

    /// Forget every cached key and value.
    pub fn clear_kv_cache(&mut self) {
        for layer in &mut self.layers {
            match &mut layer.mixer {
                Mixer::Attention(a) => a.cache = None,
                Mixer::ShortConv(c) => c.state = None,
            }
        }
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
        if self.scales.embedding != 1.0 {
            x = (x * self.scales.embedding)?;
        }
        let residual_scale = self.scales.residual;
        let residual = |t: Tensor| match residual_scale {
            Some(r) => t * r,
            None => Ok(t),
        };
        for i in 0..self.layers.len() {
            let h = normed(&self.layers[i].attn_norm, &x)?;
            let a = match &mut self.layers[i].mixer {
                Mixer::Attention(attention) => {
                    let heads = Heads {
                        heads: self.heads,
                        kv_heads: self.kv_heads,
                        head_dim: self.head_dim,
                        rope: self.rotated[i].then_some(&self.rope),
                        // Granite's and Mistral 3's own scale, else 1/√head_dim.
                        scale: self
                            .scales
                            .attention
                            .unwrap_or(1.0 / (self.head_dim as f64).sqrt()),
                    };
                    attention.forward(&h, pos, &heads)?
                }
                Mixer::ShortConv(conv) => conv.forward(&h)?,
            };
            let layer = &self.layers[i];
            let a = normed(&layer.post_norms.as_ref().map(|[n, _]| n), &a)?;
            let x1 = (residual(a)? + &x)?;
            let h = normed(&layer.ffn_norm, &x1)?;
            let m = layer.ffn.forward(&h)?;
            let m = normed(&layer.post_norms.as_ref().map(|[_, n]| n), &m)?;
            x = (residual(m)? + x1)?;
        }
        let last = x.narrow(1, seq - 1, 1)?;
        let logits = self.output.forward(&self.norm.forward(&last)?)?;
        match self.scales.logit {
            1.0 => Ok(logits),
            s => logits / s,
        }
    }
}

/// What a block's attention needs of the model: its head layout, the rotation (None for a
/// block left unrotated) and the scores' scale.
struct Heads<'a> {
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    rope: Option<&'a Rope>,
    scale: f64,
}

impl Attention {
    /// Attention of `x` (`[1, seq, embd]`) at positions `pos..` over the cached keys and values,
    /// extending the cache.
    fn forward(&mut self, x: &Tensor, pos: usize, h: &Heads) -> Result<Tensor> {
        let (b, seq, _) = x.dims3()?;
        let (heads, kv_heads, hd) = (h.heads, h.kv_heads, h.head_dim);
        let [mut q, mut k, mut v] = self.qkv.forward(x, heads * hd, kv_heads * hd)?;
        if let Some([bq, bk, bv]) = &self.bias {
            (q, k, v) = (
                q.broadcast_add(bq)?,
                k.broadcast_add(bk)?,
                v.broadcast_add(bv)?,
            );
        }
        if let Some(n) = self.qk_norm.as_ref().filter(|n| n.whole) {
            (q, k) = (n.q.forward(&q)?, n.k.forward(&k)?);
        }
        let mut q = q.reshape((b, seq, heads, hd))?;
        let mut k = k.reshape((b, seq, kv_heads, hd))?;
        if let Some(n) = self.qk_norm.as_ref().filter(|n| !n.whole) {
            (q, k) = (n.q.forward(&q)?, n.k.forward(&k)?);
        }
        let (q, k) = (q.transpose(1, 2)?, k.transpose(1, 2)?);
        let (q, k) = match h.rope {
            Some(rope) => (rope.apply(&q, pos)?, rope.apply(&k, pos)?),
            None => (q.contiguous()?, k.contiguous()?),
        };
        let v = v
            .reshape((b, seq, kv_heads, hd))?
            .transpose(1, 2)?
            .contiguous()?;
        let (k, v) = match &self.cache {
            Some((ck, cv)) => (Tensor::cat(&[ck, &k], 2)?, Tensor::cat(&[cv, &v], 2)?),
            None => (k, v),
        };
        let kv_len = k.dim(2)?;
        let mask = attention_mask(pos, seq, pos + seq - kv_len, kv_len, None)?;
        self.cache = Some((k.clone(), v.clone()));
        // candle's `t / x` is `t * (1 / x)`: the same scores as dividing.
        let out = attend(&q, k, v, h.scale, mask)?;
        self.o.forward(&out)
    }
}

impl ShortConv {
    /// The convolution over `x` (`[1, seq, embd]`), carrying its state on.
    fn forward(&mut self, x: &Tensor) -> Result<Tensor> {
        let (b, seq, embd) = x.dims3()?;
        let bcx = self.in_proj.forward(x)?;
        let (gate_in, gate_out) = (bcx.narrow(2, 0, embd)?, bcx.narrow(2, embd, embd)?);
        let bx = (gate_in * bcx.narrow(2, 2 * embd, embd)?)?;
        let kept = self.taps.len() - 1;
        let state = match self.state.take() {
            Some(s) => s,
            None => Tensor::zeros((b, kept, embd), bx.dtype(), bx.device())?,
        };
        // [state, B⊙x]: output t sums tap j times row t + j, the last tap on token t itself.
        let padded = Tensor::cat(&[&state, &bx], 1)?;
        let mut out = padded.narrow(1, 0, seq)?.broadcast_mul(&self.taps[0])?;
        for (j, tap) in self.taps.iter().enumerate().skip(1) {
            out = (out + padded.narrow(1, j, seq)?.broadcast_mul(tap)?)?;
        }
        self.state = Some(padded.narrow(1, seq, kept)?.contiguous()?);
        self.out_proj.forward(&(gate_out * out)?)
    }
}

impl Mlp {
    /// down(SiLU(gate(x)) × up(x)); with Phi-3's fused `ffn_up`, the gate is its first half.
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let gated = match &self.gate {
            Some(gate) => (candle_nn::ops::silu(&gate.forward(x)?)? * self.up.forward(x)?)?,
            None => {
                let both = self.up.forward(x)?;
                let half = both.dim(2)? / 2;
                (candle_nn::ops::silu(&both.narrow(2, 0, half)?)? * both.narrow(2, half, half)?)?
            }
        };
        self.down.forward(&gated)
    }
}

impl Ffn {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let (router, experts, used) = match self {
            Ffn::Dense(mlp) => return mlp.forward(x),
            Ffn::Experts {
                router,
                experts,
                used,
            } => (router, experts, *used),
        };
        let (b, seq, embd) = x.dims3()?;
        let tokens = x.reshape((b * seq, embd))?;
        let probs = candle_nn::ops::softmax_last_dim(&router.forward(x)?)?
            .reshape((b * seq, experts.len()))?
            .to_vec2::<f32>()?;
        // Each expert's tokens and their weights.
        let mut routed = vec![(Vec::<u32>::new(), Vec::<f32>::new()); experts.len()];
        for (row, p) in probs.iter().enumerate() {
            let mut order: Vec<usize> = (0..p.len()).collect();
            // Highest first; ties to the lower index, as ggml's argsort keeps them.
            order.sort_by(|&i, &j| p[j].total_cmp(&p[i]).then(i.cmp(&j)));
            let top = &order[..used];
            let sum: f32 = top.iter().map(|&e| p[e]).sum();
            for &e in top {
                routed[e].0.push(row as u32);
                routed[e].1.push(p[e] / sum);
            }
        }
        let mut out = Tensor::zeros((b * seq, embd), DType::F32, &Device::Cpu)?;
        for (mlp, (rows, weights)) in experts.iter().zip(routed) {
            if rows.is_empty() {
                continue;
            }
            let n = rows.len();
            let rows = Tensor::from_vec(rows, n, &Device::Cpu)?;
            let weights = Tensor::from_vec(weights, (n, 1), &Device::Cpu)?;
            let y = mlp.forward(&tokens.index_select(&rows, 0)?.unsqueeze(0)?)?;
            let y = y.squeeze(0)?.broadcast_mul(&weights)?;
            out = out.index_add(&rows, &y, 0)?;
        }
        out.reshape((b, seq, embd))
    }
}

/// A block's experts stored as one 3-D tensor (`[experts, rows, k]`, each expert's rows
/// contiguous), one matrix each.
fn experts(t: QTensor) -> Result<Vec<QTensor>> {
    let (n, rows, k) = t.shape().dims3()?;
    let dtype = t.dtype();
    let data = t.data()?;
    if n == 0 || data.len() % n != 0 {
        candle_core::bail!("{n} experts do not split {} bytes evenly", data.len());
    }
    let per = data.len() / n;
    data.chunks(per)
        .map(|bytes| {
            let storage =
                QStorage::from_data(std::borrow::Cow::Borrowed(bytes), &Device::Cpu, dtype)?;
            QTensor::new(storage, (rows, k))
        })
        .collect()
}

/// `x` through `norm` where the layer has one.
fn normed<N: std::borrow::Borrow<RmsNorm>>(norm: &Option<N>, x: &Tensor) -> Result<Tensor> {
    match norm {
        Some(n) => n.borrow().forward(x),
        None => Ok(x.clone()),
    }
}

/// LFM2's convolution weight (`[embd, taps]`, llama.cpp's `{taps, embd}`) as one `[embd]`
/// vector per tap, oldest token first.
fn conv_taps(weight: Tensor, taps: usize, name: &str) -> Result<Vec<Tensor>> {
    let dims = weight.dims().to_vec();
    let weight = match dims.as_slice() {
        [_, t] if *t == taps && taps >= 2 => weight,
        // Some converters keep HF's `[embd, 1, taps]`.
        [_, 1, t] if *t == taps && taps >= 2 => weight.squeeze(1)?,
        _ => candle_core::bail!(
            "{name} has shape {dims:?}; a convolution over shortconv.l_cache = {taps} tokens needs [embedding, {taps}]"
        ),
    };
    (0..taps)
        .map(|j| weight.narrow(1, j, 1)?.squeeze(1)?.contiguous())
        .collect()
}
