//! config.json read into each architecture's candle config (one table: every key a model
//! family names, with the defaults transformers uses), and the shapes candle would run wrong.
use super::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Arch {
    Llama,
    Mistral,
    Qwen2,
    Qwen3,
    Phi3,
    Gemma2,
    /// Gemma 3 text (`gemma3_text`), run by this crate's own decoder (`gemma3.rs`).
    Gemma3,
}

/// The hyper-parameters of config.json, checked.
#[derive(Debug, Clone)]
pub(super) struct Hyper {
    pub(super) arch: Arch,
    pub(super) vocab: usize,
    pub(super) hidden: usize,
    pub(super) intermediate: usize,
    pub(super) layers: usize,
    pub(super) heads: usize,
    pub(super) kv_heads: usize,
    pub(super) head_dim: usize,
    pub(super) max_positions: usize,
    pub(super) rms_norm_eps: f64,
    pub(super) rope_theta: f64,
    pub(super) rope_scaling: Option<llama::Llama3RopeConfig>,
    pub(super) tie_word_embeddings: bool,
    pub(super) hidden_act: candle_nn::Activation,
    /// The sliding window when one is in force (the context is capped to it).
    pub(super) sliding_window: Option<usize>,
    pub(super) max_window_layers: usize,
    pub(super) attention_bias: bool,
    /// Phi-3: the share of each head that is rotated (Phi-4-mini: 0.75).
    pub(super) partial_rotary_factor: Option<f64>,
    /// Gemma-2: tanh caps on attention scores and on the output logits.
    pub(super) attn_logit_softcapping: Option<f64>,
    pub(super) final_logit_softcapping: Option<f64>,
}

pub(super) struct Fields<'a> {
    pub(super) raw: &'a Value,
    pub(super) path: &'a Path,
}

impl Fields<'_> {
    pub(super) fn err(&self, key: &str, what: &str) -> Error {
        Error::in_file(self.path, format!("{key}: {what}"))
    }
    pub(super) fn uint(&self, key: &str) -> Result<Option<usize>> {
        match self.raw.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v
                .as_u64()
                .and_then(|n| usize::try_from(n).ok())
                .map(Some)
                .ok_or_else(|| self.err(key, &format!("expected a non-negative integer, got {v}"))),
        }
    }
    pub(super) fn positive(&self, key: &str) -> Result<usize> {
        match self.uint(key)? {
            Some(n) if n > 0 => Ok(n),
            Some(_) => Err(self.err(key, "must be greater than 0")),
            None => Err(self.err(key, "is missing")),
        }
    }
    pub(super) fn float(&self, key: &str) -> Result<Option<f64>> {
        match self.raw.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v
                .as_f64()
                .map(Some)
                .ok_or_else(|| self.err(key, &format!("expected a number, got {v}"))),
        }
    }
    pub(super) fn boolean(&self, key: &str) -> Result<Option<bool>> {
        match self.raw.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(self.err(key, &format!("expected true or false, got {v}"))),
        }
    }
}

impl Hyper {
    pub(super) fn read(config: &ModelConfig, arch: Arch) -> Result<Hyper> {
        let f = Fields {
            raw: &config.raw,
            path: &config.path,
        };
        let vocab = f.positive("vocab_size")?;
        let hidden = f.positive("hidden_size")?;
        let intermediate = f.positive("intermediate_size")?;
        let layers = f.positive("num_hidden_layers")?;
        let heads = f.positive("num_attention_heads")?;
        let kv_heads = match f.uint("num_key_value_heads")? {
            Some(0) => return Err(f.err("num_key_value_heads", "must be greater than 0")),
            Some(n) => n,
            None => heads,
        };
        if heads % kv_heads != 0 {
            return Err(f.err(
                "num_key_value_heads",
                &format!("{kv_heads} does not divide num_attention_heads {heads}"),
            ));
        }
        let default_head_dim = hidden / heads;
        let head_dim = match f.uint("head_dim")? {
            Some(d)
                if matches!(arch, Arch::Mistral | Arch::Qwen3 | Arch::Gemma2 | Arch::Gemma3)
                    && d > 0 =>
            {
                d
            }
            Some(d) if d != default_head_dim => {
                return Err(f.err(
                    "head_dim",
                    &format!("{d} differs from hidden_size / num_attention_heads = {default_head_dim}, which candle's {arch:?} requires"),
                ))
            }
            // Gemma3TextConfig's default.
            None if arch == Arch::Gemma3 => 256,
            _ => default_head_dim,
        };
        if !matches!(
            arch,
            Arch::Mistral | Arch::Qwen3 | Arch::Gemma2 | Arch::Gemma3
        ) && hidden % heads != 0
        {
            return Err(f.err(
                "hidden_size",
                &format!("{hidden} is not a multiple of num_attention_heads {heads}"),
            ));
        }
        if head_dim == 0 || head_dim % 2 != 0 {
            return Err(f.err("head_dim", &format!("{head_dim} must be even and positive")));
        }
        let max_positions = match f.uint("max_position_embeddings")? {
            Some(0) => return Err(f.err("max_position_embeddings", "must be greater than 0")),
            // candle precomputes rotary tables for every position: a value this large (1e9 in
            // a hostile file) would ask for terabytes and abort. The in-process model runs
            // short prompts, so its context is capped instead.
            Some(n) => n.min(MAX_IN_PROCESS_POSITIONS),
            None if arch == Arch::Llama => 2048,
            None => return Err(f.err("max_position_embeddings", "is missing")),
        };
        let rms_norm_eps = f.float("rms_norm_eps")?.unwrap_or(1e-6);
        // transformers 5 moved rope_theta / rope_scaling into rope_parameters.
        let rope_params = config.raw.get("rope_parameters").filter(|v| v.is_object());
        let rope_theta = match f.float("rope_theta")? {
            Some(t) => t,
            None => rope_params
                .and_then(|p| p.get("rope_theta"))
                .and_then(Value::as_f64)
                .unwrap_or(10_000.0),
        };
        let scaling = config
            .raw
            .get("rope_scaling")
            .filter(|v| !v.is_null())
            .or(rope_params);
        let rope_scaling = match scaling {
            // Gemma 3 rotates its two kinds of layer differently: gemma3_shape reads both.
            _ if arch == Arch::Gemma3 => None,
            None => None,
            Some(s) => {
                let kind = s
                    .get("rope_type")
                    .or_else(|| s.get("type"))
                    .and_then(Value::as_str)
                    .unwrap_or("default");
                match kind {
                    "default" => None,
                    "llama3" if arch == Arch::Llama => {
                        let num = |k: &str| {
                            s.get(k).and_then(Value::as_f64).ok_or_else(|| {
                                f.err("rope_scaling", &format!("llama3 scaling needs {k}"))
                            })
                        };
                        Some(llama::Llama3RopeConfig {
                            factor: num("factor")? as f32,
                            low_freq_factor: num("low_freq_factor")? as f32,
                            high_freq_factor: num("high_freq_factor")? as f32,
                            original_max_position_embeddings: num(
                                "original_max_position_embeddings",
                            )?
                                as usize,
                            rope_type: llama::Llama3RopeType::Llama3,
                        })
                    }
                    other => {
                        return Err(f.err(
                            "rope_scaling",
                            &format!("rope type \"{other}\" is not supported by candle's {arch:?}"),
                        ))
                    }
                }
            }
        };
        // Gemma2Config and Gemma3TextConfig tie by default; the others do not.
        let tie_word_embeddings = f
            .boolean("tie_word_embeddings")?
            .unwrap_or(matches!(arch, Arch::Gemma2 | Arch::Gemma3));
        if arch == Arch::Gemma2 && !tie_word_embeddings {
            return Err(f.err(
                "tie_word_embeddings",
                "candle's Gemma-2 ties the output head to the embeddings",
            ));
        }
        // Gemma reads `hidden_activation` (its configs carry both).
        let gemma = matches!(arch, Arch::Gemma2 | Arch::Gemma3);
        let act_key = match arch {
            _ if gemma && config.raw.get("hidden_activation").is_some() => "hidden_activation",
            _ => "hidden_act",
        };
        let hidden_act = match config.raw.get(act_key).and_then(Value::as_str) {
            None if gemma => candle_nn::Activation::GeluPytorchTanh,
            None => candle_nn::Activation::Silu,
            Some(a) => serde_json::from_value(Value::String(a.to_string()))
                .map_err(|_| f.err(act_key, &format!("\"{a}\" is not supported")))?,
        };
        if arch == Arch::Llama {
            if hidden_act != candle_nn::Activation::Silu {
                return Err(f.err("hidden_act", "candle's Llama runs silu only"));
            }
            for key in ["attention_bias", "mlp_bias"] {
                if f.boolean(key)? == Some(true) {
                    return Err(f.err(key, "biases are not supported by candle's Llama"));
                }
            }
        }
        let sliding_window = match arch {
            // Gemma 3's window is applied layer by layer (gemma3_shape), not as a context cap.
            Arch::Llama | Arch::Gemma3 => None,
            Arch::Mistral | Arch::Phi3 | Arch::Gemma2 => f.uint("sliding_window")?,
            Arch::Qwen2 | Arch::Qwen3 => {
                if f.boolean("use_sliding_window")?.unwrap_or(false) {
                    f.uint("sliding_window")?
                } else {
                    None
                }
            }
        };
        let max_window_layers = f.uint("max_window_layers")?.unwrap_or(layers);
        let attention_bias = f.boolean("attention_bias")?.unwrap_or(false);
        if arch == Arch::Phi3 && attention_bias {
            return Err(f.err(
                "attention_bias",
                "biases are not supported by candle's Phi-3",
            ));
        }
        if arch == Arch::Gemma2 {
            // candle scales attention by 1/sqrt(head_dim); transformers by this scalar.
            if let Some(q) = f.uint("query_pre_attn_scalar")? {
                if q != head_dim {
                    return Err(f.err(
                        "query_pre_attn_scalar",
                        &format!("{q} differs from head_dim {head_dim}; candle's Gemma-2 scales attention by head_dim"),
                    ));
                }
            }
        }
        let softcap = |k: &str| -> Result<Option<f64>> {
            Ok(f.float(k)?.filter(|&c| c > 0.0 && arch == Arch::Gemma2))
        };
        let attn_logit_softcapping = softcap("attn_logit_softcapping")?;
        let final_logit_softcapping = softcap("final_logit_softcapping")?;
        let partial_rotary_factor = f.float("partial_rotary_factor")?;
        if let Some(p) = partial_rotary_factor {
            let rotated = (head_dim as f64 * p) as usize;
            if arch != Arch::Phi3 || !(p > 0.0 && p <= 1.0) || rotated % 2 != 0 {
                return Err(f.err(
                    "partial_rotary_factor",
                    &format!("{p} is not supported by candle's {arch:?} (head_dim {head_dim})"),
                ));
            }
        }
        Ok(Hyper {
            arch,
            vocab,
            hidden,
            intermediate,
            layers,
            heads,
            kv_heads,
            head_dim,
            max_positions,
            rms_norm_eps,
            rope_theta,
            rope_scaling,
            tie_word_embeddings,
            hidden_act,
            sliding_window: sliding_window.filter(|&w| w > 0),
            max_window_layers,
            attention_bias,
            partial_rotary_factor,
            attn_logit_softcapping,
            final_logit_softcapping,
        })
    }

    /// The context served exactly: candle applies sliding windows only inside one prefill,
    /// so the context stops at the window.
    pub(super) fn context_length(&self) -> usize {
        match self.sliding_window {
            Some(w) => self.max_positions.min(w),
            None => self.max_positions,
        }
    }

    pub(super) fn llama_config(&self, tied: bool) -> llama::Config {
        llama::Config {
            hidden_size: self.hidden,
            intermediate_size: self.intermediate,
            vocab_size: self.vocab,
            num_hidden_layers: self.layers,
            num_attention_heads: self.heads,
            num_key_value_heads: self.kv_heads,
            use_flash_attn: false,
            rms_norm_eps: self.rms_norm_eps,
            rope_theta: self.rope_theta as f32,
            bos_token_id: None,
            eos_token_id: None,
            rope_scaling: self.rope_scaling.clone(),
            max_position_embeddings: self.max_positions,
            tie_word_embeddings: tied,
        }
    }

    pub(super) fn mistral_config(&self) -> mistral::Config {
        mistral::Config {
            vocab_size: self.vocab,
            hidden_size: self.hidden,
            intermediate_size: self.intermediate,
            num_hidden_layers: self.layers,
            num_attention_heads: self.heads,
            head_dim: Some(self.head_dim),
            num_key_value_heads: self.kv_heads,
            hidden_act: self.hidden_act,
            max_position_embeddings: self.max_positions,
            rms_norm_eps: self.rms_norm_eps,
            rope_theta: self.rope_theta,
            // The context is capped to the window, so the window never masks anything.
            sliding_window: None,
            use_flash_attn: false,
        }
    }

    pub(super) fn qwen2_config(&self) -> qwen2::Config {
        qwen2::Config {
            vocab_size: self.vocab,
            hidden_size: self.hidden,
            intermediate_size: self.intermediate,
            num_hidden_layers: self.layers,
            num_attention_heads: self.heads,
            num_key_value_heads: self.kv_heads,
            max_position_embeddings: self.max_positions,
            // Never reached: the context is at most the window (or there is none).
            sliding_window: self.max_positions,
            max_window_layers: self.max_window_layers,
            tie_word_embeddings: self.tie_word_embeddings,
            rope_theta: self.rope_theta,
            rms_norm_eps: self.rms_norm_eps,
            use_sliding_window: false,
            hidden_act: self.hidden_act,
        }
    }

    pub(super) fn qwen3_config(&self) -> qwen3::Config {
        qwen3::Config {
            vocab_size: self.vocab,
            hidden_size: self.hidden,
            intermediate_size: self.intermediate,
            num_hidden_layers: self.layers,
            num_attention_heads: self.heads,
            head_dim: self.head_dim,
            attention_bias: self.attention_bias,
            num_key_value_heads: self.kv_heads,
            max_position_embeddings: self.max_positions,
            // Never reached: the context is at most the window (or there is none).
            sliding_window: None,
            max_window_layers: self.max_window_layers,
            tie_word_embeddings: self.tie_word_embeddings,
            rope_theta: self.rope_theta,
            rms_norm_eps: self.rms_norm_eps,
            use_sliding_window: false,
            hidden_act: self.hidden_act,
        }
    }

    pub(super) fn phi3_config(&self, tied: bool) -> phi3::Config {
        phi3::Config {
            vocab_size: self.vocab,
            hidden_act: self.hidden_act,
            hidden_size: self.hidden,
            intermediate_size: self.intermediate,
            num_hidden_layers: self.layers,
            num_attention_heads: self.heads,
            num_key_value_heads: self.kv_heads,
            rms_norm_eps: self.rms_norm_eps,
            rope_theta: self.rope_theta,
            bos_token_id: None,
            eos_token_id: None,
            // The in-process context is capped to the positions trained without scaling.
            rope_scaling: None,
            max_position_embeddings: self.max_positions,
            original_max_position_embeddings: None,
            partial_rotary_factor: self.partial_rotary_factor,
            tie_word_embeddings: tied,
        }
    }

    pub(super) fn gemma2_config(&self) -> gemma2::Config {
        gemma2::Config {
            attention_bias: self.attention_bias,
            head_dim: self.head_dim,
            hidden_activation: self.hidden_act,
            hidden_size: self.hidden,
            intermediate_size: self.intermediate,
            num_attention_heads: self.heads,
            num_hidden_layers: self.layers,
            num_key_value_heads: self.kv_heads,
            rms_norm_eps: self.rms_norm_eps,
            rope_theta: self.rope_theta,
            vocab_size: self.vocab,
            final_logit_softcapping: self.final_logit_softcapping,
            attn_logit_softcapping: self.attn_logit_softcapping,
            query_pre_attn_scalar: self.head_dim,
            // The context is capped to the window, so the window never masks anything.
            sliding_window: None,
            max_position_embeddings: self.context_length(),
        }
    }

    /// (name, shape) of every tensor the architecture loads; lm_head last.
    pub(super) fn expected(&self) -> Vec<(String, Vec<usize>)> {
        let (h, i) = (self.hidden, self.intermediate);
        let q = self.heads * self.head_dim;
        let kv = self.kv_heads * self.head_dim;
        let mut out = vec![
            ("model.embed_tokens.weight".to_string(), vec![self.vocab, h]),
            ("model.norm.weight".to_string(), vec![h]),
        ];
        for l in 0..self.layers {
            let p = format!("model.layers.{l}");
            let mut add = |n: &str, s: Vec<usize>| out.push((format!("{p}.{n}"), s));
            add("input_layernorm.weight", vec![h]);
            add("post_attention_layernorm.weight", vec![h]);
            if self.arch == Arch::Phi3 {
                // Phi-3 fuses q, k, v into one projection, and gate and up into another.
                add("self_attn.qkv_proj.weight", vec![q + 2 * kv, h]);
                add("self_attn.o_proj.weight", vec![h, q]);
                add("mlp.gate_up_proj.weight", vec![2 * i, h]);
                add("mlp.down_proj.weight", vec![h, i]);
                continue;
            }
            add("self_attn.q_proj.weight", vec![q, h]);
            add("self_attn.k_proj.weight", vec![kv, h]);
            add("self_attn.v_proj.weight", vec![kv, h]);
            add("self_attn.o_proj.weight", vec![h, q]);
            if self.arch == Arch::Qwen2 || self.attention_bias {
                add("self_attn.q_proj.bias", vec![q]);
                add("self_attn.k_proj.bias", vec![kv]);
                add("self_attn.v_proj.bias", vec![kv]);
            }
            if matches!(self.arch, Arch::Qwen3 | Arch::Gemma3) {
                add("self_attn.q_norm.weight", vec![self.head_dim]);
                add("self_attn.k_norm.weight", vec![self.head_dim]);
            }
            if matches!(self.arch, Arch::Gemma2 | Arch::Gemma3) {
                add("pre_feedforward_layernorm.weight", vec![h]);
                add("post_feedforward_layernorm.weight", vec![h]);
            }
            add("mlp.gate_proj.weight", vec![i, h]);
            add("mlp.up_proj.weight", vec![i, h]);
            add("mlp.down_proj.weight", vec![h, i]);
        }
        // Gemma-2's head is the embedding (tie_word_embeddings is checked in `read`).
        if self.arch != Arch::Gemma2 {
            out.push(("lm_head.weight".to_string(), vec![self.vocab, h]));
        }
        out
    }
}

/// Gemma 3's own keys (`Gemma3TextConfig`, transformers 4 and 5), read into the decoder's
/// [`gemma3::Shape`]: which layers slide (`layer_types`, else every `sliding_window_pattern`-th
/// is global), the two rotary bases (transformers 5's `rope_parameters` by layer kind, else
/// `rope_theta` and `rope_local_base_freq`) and the global layers' linear scaling, the query
/// scale `query_pre_attn_scalar`. A key whose value the decoder would run wrong (soft-capping,
/// which Gemma 3 ships without) is refused by name.
pub(super) fn gemma3_shape(config: &ModelConfig, h: &Hyper) -> Result<super::gemma3::Shape> {
    let f = Fields {
        raw: &config.raw,
        path: &config.path,
    };
    if f.boolean("use_bidirectional_attention")? == Some(true) {
        return Err(f.err(
            "use_bidirectional_attention",
            "a bidirectional Gemma 3 (EmbeddingGemma) is an encoder, not a chat model",
        ));
    }
    if h.hidden_act != candle_nn::Activation::GeluPytorchTanh {
        return Err(f.err(
            "hidden_activation",
            "Gemma 3 gates its MLP with gelu_pytorch_tanh; the in-process decoder runs that only",
        ));
    }
    for key in ["attn_logit_softcapping", "final_logit_softcapping"] {
        if f.float(key)?.is_some_and(|c| c > 0.0) {
            return Err(f.err(
                key,
                "the in-process Gemma 3 does not soft-cap (Gemma 3 ships without it)",
            ));
        }
    }
    let window = f.uint("sliding_window")?.unwrap_or(4096);
    let windows = match config.raw.get("layer_types").filter(|v| !v.is_null()) {
        Some(Value::Array(kinds)) if kinds.len() == h.layers => kinds
            .iter()
            .map(|k| match k.as_str() {
                Some("sliding_attention") => Ok(Some(window)),
                Some("full_attention") => Ok(None),
                _ => Err(f.err("layer_types", &format!("unknown layer type {k}"))),
            })
            .collect::<Result<Vec<_>>>()?,
        Some(other) => {
            return Err(f.err(
                "layer_types",
                &format!(
                    "expected one of sliding_attention / full_attention for each of the {} layers, got {other}",
                    h.layers
                ),
            ))
        }
        None => {
            let every = f.uint("sliding_window_pattern")?.unwrap_or(6).max(1);
            (0..h.layers)
                .map(|i| ((i + 1) % every != 0).then_some(window))
                .collect()
        }
    };
    let by_kind = |kind: &str| {
        config
            .raw
            .get("rope_parameters")
            .and_then(|p| p.get(kind))
            .filter(|v| v.is_object())
    };
    let theta = |p: Option<&Value>, flat: &str, default: f64| -> Result<f64> {
        match p.and_then(|p| p.get("rope_theta")).and_then(Value::as_f64) {
            Some(t) => Ok(t),
            None => Ok(f.float(flat)?.unwrap_or(default)),
        }
    };
    let global = by_kind("full_attention");
    let local = by_kind("sliding_attention");
    let scaling = global.or_else(|| config.raw.get("rope_scaling").filter(|v| !v.is_null()));
    let global_scale = match scaling {
        None => 1.0,
        Some(s) => match s
            .get("rope_type")
            .or_else(|| s.get("type"))
            .and_then(Value::as_str)
            .unwrap_or("default")
        {
            "default" => 1.0,
            "linear" => s.get("factor").and_then(Value::as_f64).unwrap_or(1.0),
            other => {
                return Err(f.err(
                    "rope_scaling",
                    &format!("rope type \"{other}\" is not supported by the in-process Gemma 3 (default or linear)"),
                ))
            }
        },
    };
    if let Some(t) = local
        .and_then(|l| l.get("rope_type"))
        .and_then(Value::as_str)
    {
        if t != "default" {
            return Err(f.err(
                "rope_parameters",
                &format!("sliding_attention rope type \"{t}\" is not supported by the in-process Gemma 3 (default)"),
            ));
        }
    }
    let query_scalar = f.float("query_pre_attn_scalar")?.unwrap_or(256.0);
    if query_scalar <= 0.0 {
        return Err(f.err("query_pre_attn_scalar", "must be greater than 0"));
    }
    Ok(super::gemma3::Shape {
        heads: h.heads,
        kv_heads: h.kv_heads,
        embd: h.hidden,
        blocks: h.layers,
        head_dim: h.head_dim,
        windows,
        eps: h.rms_norm_eps,
        global_base: theta(global, "rope_theta", 1_000_000.0)? as f32,
        local_base: theta(local, "rope_local_base_freq", 10_000.0)? as f32,
        global_scale: global_scale as f32,
        attn_scale: 1.0 / query_scalar.sqrt(),
    })
}

/// Shapes candle's Llama would otherwise panic or fail on deep inside.
pub(super) fn check_llama_shapes(cfg: &llama::Config) -> std::result::Result<(), String> {
    if cfg.num_attention_heads == 0
        || cfg.num_key_value_heads == 0
        || cfg.hidden_size % cfg.num_attention_heads != 0
        || cfg.num_attention_heads % cfg.num_key_value_heads != 0
        || (cfg.hidden_size / cfg.num_attention_heads) % 2 != 0
        || cfg.vocab_size == 0
        || cfg.max_position_embeddings == 0
    {
        return Err(format!(
            "inconsistent Llama shape: hidden_size {}, num_attention_heads {}, num_key_value_heads {}, vocab_size {}, max_position_embeddings {}",
            cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.vocab_size, cfg.max_position_embeddings
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Gemma 3 270M's config.json keys (transformers 4's spelling), with `edit` applied.
    fn gemma3(edit: impl FnOnce(&mut Value)) -> Result<super::super::gemma3::Shape> {
        let mut raw = json!({
            "model_type": "gemma3_text", "vocab_size": 262144, "hidden_size": 640,
            "intermediate_size": 2048, "num_hidden_layers": 18, "num_attention_heads": 4,
            "num_key_value_heads": 1, "head_dim": 256, "max_position_embeddings": 32768,
            "query_pre_attn_scalar": 256, "sliding_window": 512, "rope_theta": 1000000.0,
            "rope_local_base_freq": 10000.0, "rms_norm_eps": 1e-6,
        });
        edit(&mut raw);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        std::fs::write(&path, raw.to_string()).unwrap();
        let config = crate::artifacts::read_model_config(&path)?;
        let h = Hyper::read(&config, Arch::Gemma3)?;
        gemma3_shape(&config, &h)
    }

    #[test]
    fn gemma3_reads_both_transformers_spellings_alike() {
        let v4 = gemma3(|_| {}).unwrap();
        // Five layers in six slide (sliding_window_pattern's default 6).
        let sliding: Vec<bool> = v4.windows.iter().map(Option::is_some).collect();
        assert_eq!(sliding.iter().filter(|s| !**s).count(), 3);
        assert!(!sliding[5] && !sliding[11] && !sliding[17] && sliding[0]);
        assert_eq!(v4.windows[0], Some(512));
        assert_eq!((v4.global_base, v4.local_base), (1_000_000.0, 10_000.0));
        assert_eq!(v4.attn_scale, 1.0 / 16.0);
        assert_eq!((v4.head_dim, v4.global_scale), (256, 1.0));
        // transformers 5 writes layer_types and rope_parameters by layer kind.
        let v5 = gemma3(|c| {
            let o = c.as_object_mut().unwrap();
            o.remove("rope_theta");
            o.remove("rope_local_base_freq");
            let kinds: Vec<&str> = (0..18)
                .map(|i| match (i + 1) % 6 {
                    0 => "full_attention",
                    _ => "sliding_attention",
                })
                .collect();
            o.insert("layer_types".into(), json!(kinds));
            o.insert(
                "rope_parameters".into(),
                json!({"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                       "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0}}),
            );
        })
        .unwrap();
        assert_eq!(v5.windows, v4.windows);
        assert_eq!(
            (v5.global_base, v5.local_base),
            (v4.global_base, v4.local_base)
        );
        assert_eq!(v5.global_scale, 8.0);
        // The 27B's query scale is hidden / heads, not head_dim.
        let big = gemma3(|c| c["query_pre_attn_scalar"] = json!(168)).unwrap();
        assert_eq!(big.attn_scale, 1.0 / 168f64.sqrt());
    }

    #[test]
    fn gemma3_keys_the_decoder_would_run_wrong_are_refused_by_name() {
        for (key, value, says) in [
            (
                "attn_logit_softcapping",
                json!(50.0),
                "attn_logit_softcapping",
            ),
            ("use_bidirectional_attention", json!(true), "EmbeddingGemma"),
            (
                "rope_scaling",
                json!({"rope_type": "yarn", "factor": 4.0}),
                "yarn",
            ),
            ("hidden_activation", json!("silu"), "gelu_pytorch_tanh"),
            ("layer_types", json!(["sliding_attention"]), "18 layers"),
        ] {
            let err = gemma3(|c| c[key] = value.clone()).unwrap_err().to_string();
            assert!(
                err.contains(says) && err.contains("config.json"),
                "{key}: {err}"
            );
        }
    }
}
