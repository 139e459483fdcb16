//! A small trainable Llama written with candle ops that all have backward passes
//! (candle-transformers' Llama is inference-only). Parameter names are the Hugging Face
//! ones, so the weights save straight into a `LlamaForCausalLM` safetensors file.
//! RoPE uses HF's rotate-half layout, like candle-transformers' `llama` module.

use crate::data::Rng;
use anyhow::Result;
use candle_core::{DType, Device, Tensor, Var, D};
use serde_json::{json, Value};
use std::collections::BTreeMap;

#[derive(Clone, Debug)]
pub struct Cfg {
    pub vocab: usize,
    pub hidden: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub inter: usize,
    pub max_pos: usize,
    pub eps: f64,
    pub theta: f64,
}

impl Cfg {
    pub fn head_dim(&self) -> usize {
        self.hidden / self.heads
    }

    /// HF config.json for LlamaForCausalLM.
    pub fn hf_config(&self, bos: u32, eos: u32, pad: u32) -> Value {
        json!({
            "architectures": ["LlamaForCausalLM"],
            "attention_bias": false,
            "attention_dropout": 0.0,
            "bos_token_id": bos,
            "eos_token_id": eos,
            "head_dim": self.head_dim(),
            "hidden_act": "silu",
            "hidden_size": self.hidden,
            "initializer_range": 0.02,
            "intermediate_size": self.inter,
            "max_position_embeddings": self.max_pos,
            "mlp_bias": false,
            "model_type": "llama",
            "num_attention_heads": self.heads,
            "num_hidden_layers": self.layers,
            "num_key_value_heads": self.kv_heads,
            "pad_token_id": pad,
            "pretraining_tp": 1,
            "rms_norm_eps": self.eps,
            "rope_scaling": null,
            "rope_theta": self.theta,
            "tie_word_embeddings": false,
            "torch_dtype": "float32",
            "use_cache": true,
            "vocab_size": self.vocab
        })
    }
}

pub struct Model {
    pub cfg: Cfg,
    /// HF tensor name -> trainable variable (BTreeMap: deterministic order).
    pub params: BTreeMap<String, Var>,
    cos: Tensor,
    sin: Tensor,
}

fn normal_var(rng: &mut Rng, shape: (usize, usize), std: f64, dev: &Device) -> Result<Var> {
    let n = shape.0 * shape.1;
    let data: Vec<f32> = (0..n).map(|_| (rng.normal() * std) as f32).collect();
    Ok(Var::from_tensor(&Tensor::from_vec(data, shape, dev)?)?)
}

impl Model {
    /// Deterministic init from our own RNG (candle's CPU RNG cannot be seeded):
    /// N(0, 0.02) for matrices, output projections scaled by 1/sqrt(2*layers), norms = 1.
    pub fn new(cfg: Cfg, rng: &mut Rng, dev: &Device) -> Result<Self> {
        let (h, i, v) = (cfg.hidden, cfg.inter, cfg.vocab);
        let q = cfg.heads * cfg.head_dim();
        let kv = cfg.kv_heads * cfg.head_dim();
        let std = 0.02;
        let out_std = std / (2.0 * cfg.layers as f64).sqrt();
        let mut p = BTreeMap::new();
        let ones =
            |n: usize| -> Result<Var> { Ok(Var::from_tensor(&Tensor::ones(n, DType::F32, dev)?)?) };
        p.insert(
            "model.embed_tokens.weight".to_string(),
            normal_var(rng, (v, h), std, dev)?,
        );
        for l in 0..cfg.layers {
            let pre = format!("model.layers.{l}");
            p.insert(
                format!("{pre}.self_attn.q_proj.weight"),
                normal_var(rng, (q, h), std, dev)?,
            );
            p.insert(
                format!("{pre}.self_attn.k_proj.weight"),
                normal_var(rng, (kv, h), std, dev)?,
            );
            p.insert(
                format!("{pre}.self_attn.v_proj.weight"),
                normal_var(rng, (kv, h), std, dev)?,
            );
            p.insert(
                format!("{pre}.self_attn.o_proj.weight"),
                normal_var(rng, (h, q), out_std, dev)?,
            );
            p.insert(
                format!("{pre}.mlp.gate_proj.weight"),
                normal_var(rng, (i, h), std, dev)?,
            );
            p.insert(
                format!("{pre}.mlp.up_proj.weight"),
                normal_var(rng, (i, h), std, dev)?,
            );
            p.insert(
                format!("{pre}.mlp.down_proj.weight"),
                normal_var(rng, (h, i), out_std, dev)?,
            );
            p.insert(format!("{pre}.input_layernorm.weight"), ones(h)?);
            p.insert(format!("{pre}.post_attention_layernorm.weight"), ones(h)?);
        }
        p.insert("model.norm.weight".to_string(), ones(h)?);
        p.insert(
            "lm_head.weight".to_string(),
            normal_var(rng, (v, h), std, dev)?,
        );

        // RoPE tables in HF layout: (max_pos, head_dim) = cat([f, f]).
        let hd = cfg.head_dim();
        let inv: Vec<f32> = (0..hd)
            .step_by(2)
            .map(|k| 1.0 / (cfg.theta as f32).powf(k as f32 / hd as f32))
            .collect();
        let mut ang = Vec::with_capacity(cfg.max_pos * hd);
        for pos in 0..cfg.max_pos {
            for _half in 0..2 {
                for f in &inv {
                    ang.push(pos as f32 * f);
                }
            }
        }
        let ang = Tensor::from_vec(ang, (cfg.max_pos, hd), dev)?;
        Ok(Self {
            cos: ang.cos()?,
            sin: ang.sin()?,
            cfg,
            params: p,
        })
    }

    pub fn vars(&self) -> Vec<Var> {
        self.params.values().cloned().collect()
    }

    fn w(&self, name: &str) -> &Tensor {
        self.params[name].as_tensor()
    }

    /// Plain tensors (detached copies) keyed by HF name.
    pub fn tensors(&self) -> Result<BTreeMap<String, Tensor>> {
        let mut m = BTreeMap::new();
        for (k, v) in &self.params {
            m.insert(k.clone(), v.as_tensor().detach().copy()?);
        }
        Ok(m)
    }

    fn rms(&self, x: &Tensor, w: &Tensor) -> Result<Tensor> {
        let ms = x.sqr()?.mean_keepdim(D::Minus1)?;
        let inv = (ms + self.cfg.eps)?.sqrt()?.recip()?;
        Ok(x.broadcast_mul(&inv)?.broadcast_mul(w)?)
    }

    /// x: (N, in), w: (out, in) -> (N, out)
    fn linear(x: &Tensor, w: &Tensor) -> Result<Tensor> {
        Ok(x.matmul(&w.t()?)?)
    }

    /// (B, H, T, D) rotate-half RoPE.
    fn rope(&self, x: &Tensor, t: usize) -> Result<Tensor> {
        let hd = self.cfg.head_dim();
        let cos = self.cos.narrow(0, 0, t)?;
        let sin = self.sin.narrow(0, 0, t)?;
        let x1 = x.narrow(D::Minus1, 0, hd / 2)?;
        let x2 = x.narrow(D::Minus1, hd / 2, hd / 2)?;
        let rot = Tensor::cat(&[&x2.neg()?, &x1], D::Minus1)?;
        Ok((x.broadcast_mul(&cos)? + rot.broadcast_mul(&sin)?)?)
    }

    /// ids: (B, T) u32 -> logits (B, T, V).
    pub fn forward(&self, ids: &Tensor) -> Result<Tensor> {
        let (b, t) = ids.dims2()?;
        let c = &self.cfg;
        let (nh, nkv, hd) = (c.heads, c.kv_heads, c.head_dim());
        let dev = ids.device();
        let mut x = self
            .w("model.embed_tokens.weight")
            .index_select(&ids.flatten_all()?, 0)?; // (B*T, H)
        let mask: Vec<f32> = (0..t)
            .flat_map(|i| (0..t).map(move |j| if j > i { -1e9 } else { 0.0 }))
            .collect();
        let mask = Tensor::from_vec(mask, (t, t), dev)?;
        let scale = 1.0 / (hd as f64).sqrt();
        for l in 0..c.layers {
            let pre = format!("model.layers.{l}");
            let hn = self.rms(&x, self.w(&format!("{pre}.input_layernorm.weight")))?;
            let q = Self::linear(&hn, self.w(&format!("{pre}.self_attn.q_proj.weight")))?;
            let k = Self::linear(&hn, self.w(&format!("{pre}.self_attn.k_proj.weight")))?;
            let v = Self::linear(&hn, self.w(&format!("{pre}.self_attn.v_proj.weight")))?;
            let q = q.reshape((b, t, nh, hd))?.transpose(1, 2)?.contiguous()?;
            let k = k.reshape((b, t, nkv, hd))?.transpose(1, 2)?.contiguous()?;
            let v = v.reshape((b, t, nkv, hd))?.transpose(1, 2)?.contiguous()?;
            let q = self.rope(&q, t)?;
            let k = self.rope(&k, t)?;
            let (k, v) = if nh != nkv {
                let rep = nh / nkv;
                let k = Tensor::cat(&vec![&k; rep], 2)?.reshape((b, nkv * rep, t, hd))?;
                let v = Tensor::cat(&vec![&v; rep], 2)?.reshape((b, nkv * rep, t, hd))?;
                (k, v)
            } else {
                (k, v)
            };
            let att = (q.matmul(&k.t()?.contiguous()?)? * scale)?.broadcast_add(&mask)?;
            let att = candle_nn::ops::softmax(&att, D::Minus1)?;
            let y = att.matmul(&v)?; // (B, H, T, D)
            let y = y.transpose(1, 2)?.contiguous()?.reshape((b * t, nh * hd))?;
            let y = Self::linear(&y, self.w(&format!("{pre}.self_attn.o_proj.weight")))?;
            x = (x + y)?;
            let hn = self.rms(
                &x,
                self.w(&format!("{pre}.post_attention_layernorm.weight")),
            )?;
            let g = Self::linear(&hn, self.w(&format!("{pre}.mlp.gate_proj.weight")))?;
            let u = Self::linear(&hn, self.w(&format!("{pre}.mlp.up_proj.weight")))?;
            let m = Self::linear(
                &(g.silu()? * u)?,
                self.w(&format!("{pre}.mlp.down_proj.weight")),
            )?;
            x = (x + m)?;
        }
        let x = self.rms(&x, self.w("model.norm.weight"))?;
        let logits = Self::linear(&x, self.w("lm_head.weight"))?;
        Ok(logits.reshape((b, t, c.vocab))?)
    }
}
