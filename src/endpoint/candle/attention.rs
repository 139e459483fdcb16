//! Attention's shared parts for the quantized decoders chatgate runs itself (`gemma3`,
//! `llama_family`): rotary tables and the causal (optionally sliding) mask.
use candle_core::{DType, Device, Result, Tensor};
use candle_transformers::utils::repeat_kv;

/// One rotary table: cos and sin of `position × inv_freq`, `[ctx, dims / 2]`, and which pairs
/// it rotates. A head wider than `dims` is rotated in its first `dims` elements only and the
/// rest passes through (Phi-4-mini's `partial_rotary_factor`, llama.cpp's `n_rot` below the
/// head size).
pub(super) struct Rope {
    cos: Tensor,
    sin: Tensor,
    pairs: Pairs,
}

/// Which elements a rotary table rotates together: NEOX pairs element i with i + dims/2 (Qwen,
/// Gemma, Phi-3: llama.cpp's `LLAMA_ROPE_TYPE_NEOX`), NORM pairs 2i with 2i + 1 (Llama,
/// Mistral: how llama.cpp's converter lays out their Q and K rows).
#[derive(Clone, Copy)]
pub(super) enum Pairs {
    Neox,
    Interleaved,
}

/// The `n`th pair's angle per position, unscaled: base^(−2n/dims).
fn theta(base: f32, dims: usize, n: usize) -> f32 {
    1.0 / base.powf((2 * n) as f32 / dims as f32)
}

/// The `n`th pair's frequency factor, where the file has them (Llama 3's
/// `rope_freqs.weight`, Phi-3's `rope_factors_short.weight`): its frequency is divided by it.
fn factor_of(factors: Option<&[f32]>, n: usize) -> f32 {
    factors.and_then(|f| f.get(n)).copied().unwrap_or(1.0)
}

/// YaRN (`rope.scaling.type = yarn`) as llama.cpp applies it: to every position, not only
/// past the original context (transformers' static YaRN does the same; vLLM too). Each pair's
/// frequency is kept (extrapolated), divided by `factor` (interpolated), or blended between the
/// two across the correction dims ggml derives from `BETA_FAST` and `BETA_SLOW` and the
/// original context (`ggml_rope_yarn_corr_dims`, `rope_yarn`). llama.cpp keeps its defaults for
/// β (32 and 1) and the blend (ext_factor 1) whatever a llama, qwen or mistral3 file says
/// (tried: a llama file with `yarn_ext_factor` 0 is still blended), and so does this.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Yarn {
    /// `rope.scaling.factor` (ggml's 1 / freq_scale).
    pub factor: f32,
    /// `rope.scaling.original_context_length`, else `context_length`.
    pub original_ctx: usize,
    /// transformers' `mscale_all_dim`, where llama.cpp reads it (`rope.scaling.
    /// yarn_log_multiplier` of a mistral3 file; 0: none).
    pub mscale_all_dim: f32,
}

/// ggml's YaRN correction bounds: pairs turning more than `BETA_FAST` times over the original
/// context keep their frequency, fewer than `BETA_SLOW` are interpolated.
const BETA_FAST: f32 = 32.0;
const BETA_SLOW: f32 = 1.0;

/// transformers' (and llama-context's) `get_mscale`: 1 + 0.1·m·ln(scale) above 1, else 1.
fn get_mscale(scale: f32, m: f32) -> f32 {
    match scale <= 1.0 {
        true => 1.0,
        false => 0.1 * m * scale.ln() + 1.0,
    }
}

/// How a file stretches its rotation (`rope.scaling.type`): not at all, linearly (positions
/// divided by the factor), or by YaRN.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Scaling {
    None,
    Linear(f32),
    Yarn(Yarn),
}

impl Yarn {
    /// ggml's `ggml_rope_yarn_corr_dims`, in pair indices: the pairs below `low` turn more than
    /// `BETA_FAST` times over the original context (kept), those above `high` fewer than
    /// `BETA_SLOW` times (interpolated).
    fn corr_dims(&self, dims: usize, base: f32) -> (f32, f32) {
        let dim = |rotations: f32| {
            dims as f32 * (self.original_ctx as f32 / (rotations * 2.0 * std::f32::consts::PI)).ln()
                / (2.0 * base.ln())
        };
        let low = dim(BETA_FAST).floor().max(0.0);
        let high = dim(BETA_SLOW).ceil().min(dims as f32 - 1.0);
        (low, high)
    }

    /// The magnitude cos and sin get, as llama-context computes it (transformers'
    /// `attention_factor`): get_mscale(factor, 1) / get_mscale(factor, mscale_all_dim) where the
    /// file gives the latter, else get_mscale(factor, 1) = 1 + 0.1 ln(factor) (ggml multiplies
    /// that in itself; llama-context divides it out and puts this in). Measured against
    /// llama-cpp-python 0.3.36: a mistral3 file with 0.1 logs "setting new yarn_attn_factor =
    /// 1.2428".
    pub(super) fn magnitude(&self) -> f32 {
        match self.mscale_all_dim != 0.0 {
            true => get_mscale(self.factor, 1.0) / get_mscale(self.factor, self.mscale_all_dim),
            false => get_mscale(self.factor, 1.0),
        }
    }
}

impl Rope {
    /// `dims` rotated elements a head, base `base`, positions divided by `scale`, each frequency
    /// divided by its factor in `factors` where the file has them (Llama 3's
    /// `rope_freqs.weight`, Phi-3's `rope_factors_short.weight`).
    pub(super) fn new(
        pairs: Pairs,
        dims: usize,
        base: f32,
        scale: f32,
        factors: Option<&[f32]>,
        ctx: usize,
    ) -> Result<Rope> {
        let inv = (0..dims / 2)
            .map(|n| theta(base, dims, n) / factor_of(factors, n) / scale)
            .collect();
        Rope::from_inv_freq(pairs, inv, ctx)
    }

    /// The rotation YaRN gives (see [`Yarn`]), cos and sin not yet scaled: the magnitude is
    /// the caller's ([`Yarn::magnitude`]), as llama.cpp's graphs differ in it.
    pub(super) fn yarn(
        pairs: Pairs,
        dims: usize,
        base: f32,
        yarn: &Yarn,
        factors: Option<&[f32]>,
        ctx: usize,
    ) -> Result<Rope> {
        let (low, high) = yarn.corr_dims(dims, base);
        let inv = (0..dims / 2)
            .map(|n| {
                let extrapolated = theta(base, dims, n) / factor_of(factors, n);
                let interpolated = extrapolated / yarn.factor;
                // ggml's `rope_yarn_ramp`: 1 below `low` (kept), 0 above `high` (interpolated).
                let y = (n as f32 - low) / (high - low).max(0.001);
                let mix = 1.0 - y.clamp(0.0, 1.0);
                interpolated * (1.0 - mix) + extrapolated * mix
            })
            .collect();
        Rope::from_inv_freq(pairs, inv, ctx)
    }

    fn from_inv_freq(pairs: Pairs, inv: Vec<f32>, ctx: usize) -> Result<Rope> {
        let n = inv.len();
        let inv = Tensor::from_vec(inv, (1, n), &Device::Cpu)?;
        let pos = Tensor::arange(0u32, ctx as u32, &Device::Cpu)?
            .to_dtype(DType::F32)?
            .reshape((ctx, 1))?;
        let freqs = pos.matmul(&inv)?;
        Ok(Rope {
            cos: freqs.cos()?,
            sin: freqs.sin()?,
            pairs,
        })
    }

    /// The same rotation with cos and sin multiplied by `factor`: ggml's `attn_factor`
    /// (`rope.scaling.attn_factor`, LongRoPE's √(1 + ln s / ln n₀)), which transformers applies
    /// as the rotary embedding's `attention_scaling`.
    pub(super) fn scaled(self, factor: f32) -> Result<Rope> {
        if factor == 1.0 {
            return Ok(self);
        }
        Ok(Rope {
            cos: (self.cos * factor as f64)?,
            sin: (self.sin * factor as f64)?,
            pairs: self.pairs,
        })
    }

    /// `x`: `[batch, heads, seq, head_dim]` at positions `pos..pos + seq`.
    pub(super) fn apply(&self, x: &Tensor, pos: usize) -> Result<Tensor> {
        let seq = x.dim(2)?;
        let cos = self.cos.narrow(0, pos, seq)?;
        let sin = self.sin.narrow(0, pos, seq)?;
        let rotate = |x: &Tensor| match self.pairs {
            Pairs::Interleaved => candle_nn::rotary_emb::rope_i(&x.contiguous()?, &cos, &sin),
            Pairs::Neox => candle_nn::rotary_emb::rope(&x.contiguous()?, &cos, &sin),
        };
        let (head, dims) = (x.dim(3)?, 2 * self.cos.dim(1)?);
        if dims == head {
            return rotate(x);
        }
        let rotated = rotate(&x.narrow(3, 0, dims)?)?;
        Tensor::cat(&[rotated, x.narrow(3, dims, head - dims)?], 3)
    }
}

/// Refuses positions past the rotary tables (`ctx`) before any work.
pub(super) fn check_positions(pos: usize, seq: usize, ctx: usize) -> Result<()> {
    if pos + seq > ctx {
        candle_core::bail!("positions up to {} exceed the context {ctx}", pos + seq);
    }
    Ok(())
}

/// Softmax attention of `q` (`[batch, heads, seq, head_dim]`) over `k` and `v` (`[batch,
/// kv_heads, kv_len, head_dim]`, each key head shared by `heads / kv_heads` query heads),
/// scores times `scale` plus `mask`; `[batch, seq, heads × head_dim]`.
pub(super) fn attend(
    q: &Tensor,
    k: Tensor,
    v: Tensor,
    scale: f64,
    mask: Option<Tensor>,
) -> Result<Tensor> {
    let (b, heads, seq, hd) = q.dims4()?;
    let groups = heads / k.dim(1)?;
    let k = repeat_kv(k, groups)?.contiguous()?;
    let v = repeat_kv(v, groups)?.contiguous()?;
    let mut w = (q.matmul(&k.t()?)? * scale)?;
    if let Some(mask) = mask {
        w = w.broadcast_add(&mask)?;
    }
    let w = candle_nn::ops::softmax_last_dim(&w)?;
    w.matmul(&v)?.transpose(1, 2)?.reshape((b, seq, heads * hd))
}

/// The additive mask for queries at `pos..pos + seq` over keys at `first..first + kv_len`: 0
/// where the query may look (causal, and within `window` on a sliding layer), -∞ elsewhere;
/// None when nothing is masked (one query that sees every key kept).
pub(super) fn attention_mask(
    pos: usize,
    seq: usize,
    first: usize,
    kv_len: usize,
    window: Option<usize>,
) -> Result<Option<Tensor>> {
    let visible = |q: usize, k: usize| k <= q && window.is_none_or(|w| q - k < w);
    let all = (0..seq).all(|i| (0..kv_len).all(|j| visible(pos + i, first + j)));
    if all {
        return Ok(None);
    }
    let mut m = Vec::with_capacity(seq * kv_len);
    for i in 0..seq {
        for j in 0..kv_len {
            m.push(if visible(pos + i, first + j) {
                0f32
            } else {
                f32::NEG_INFINITY
            });
        }
    }
    Tensor::from_vec(m, (1, 1, seq, kv_len), &Device::Cpu).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn visible(m: &Option<Tensor>, seq: usize, kv: usize) -> Vec<Vec<bool>> {
        match m {
            None => vec![vec![true; kv]; seq],
            Some(t) => t
                .reshape((seq, kv))
                .unwrap()
                .to_vec2::<f32>()
                .unwrap()
                .into_iter()
                .map(|row| row.into_iter().map(|v| v == 0.0).collect())
                .collect(),
        }
    }

    #[test]
    fn a_partial_rotation_turns_the_first_dims_of_a_head_and_passes_the_rest() {
        let head: Vec<f32> = (0..8).map(|i| i as f32 + 1.0).collect();
        let x = Tensor::from_vec(head.clone(), (1, 1, 1, 8), &Device::Cpu).unwrap();
        let rope = Rope::new(Pairs::Neox, 4, 10_000.0, 1.0, None, 4).unwrap();
        let whole = |r: &Rope, t: &Tensor| {
            r.apply(t, 3)
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1::<f32>()
                .unwrap()
        };
        let out = whole(&rope, &x);
        let alone = whole(&rope, &x.narrow(3, 0, 4).unwrap());
        assert_eq!(&out[..4], &alone[..]);
        assert_ne!(&out[..4], &head[..4], "position 3 turns the first four");
        assert_eq!(&out[4..], &head[4..]);
        // The attention factor scales what is rotated, not what passes through.
        let scaled = Rope::new(Pairs::Neox, 4, 10_000.0, 1.0, None, 4)
            .unwrap()
            .scaled(2.0)
            .unwrap();
        let doubled = whole(&scaled, &x);
        for i in 0..4 {
            assert!((doubled[i] - 2.0 * out[i]).abs() < 1e-5, "{i}");
        }
        assert_eq!(&doubled[4..], &head[4..]);
    }

    fn table(r: &Rope) -> Vec<f32> {
        r.cos.flatten_all().unwrap().to_vec1::<f32>().unwrap()
    }

    #[test]
    fn yarn_keeps_the_fast_pairs_divides_the_slow_ones_and_blends_between() {
        let yarn = Yarn {
            factor: 8.0,
            original_ctx: 4096,
            mscale_all_dim: 0.0,
        };
        // ggml_rope_yarn_corr_dims for 16-wide heads at base 10,000: ⌊2.62⌋ and ⌈5.63⌉.
        assert_eq!(yarn.corr_dims(16, 10_000.0), (2.0, 6.0));
        let ctx = 64;
        let plain = Rope::new(Pairs::Neox, 16, 10_000.0, 1.0, None, ctx).unwrap();
        let linear = Rope::new(Pairs::Neox, 16, 10_000.0, 8.0, None, ctx).unwrap();
        let ours = Rope::yarn(Pairs::Neox, 16, 10_000.0, &yarn, None, ctx).unwrap();
        let (p, l, y) = (table(&plain), table(&linear), table(&ours));
        let at = |t: &[f32], pos: usize, pair: usize| t[pos * 8 + pair];
        for pos in [1, 17, 63] {
            for pair in 0..=2 {
                assert_eq!(at(&y, pos, pair), at(&p, pos, pair), "kept: {pos} {pair}");
            }
            for pair in 6..8 {
                assert_eq!(
                    at(&y, pos, pair),
                    at(&l, pos, pair),
                    "divided: {pos} {pair}"
                );
            }
        }
        // Pair 4 is half way along the ramp: its angle lies between the two.
        let angle = |t: &[f32]| at(t, 63, 4).acos();
        assert!(angle(&l) < angle(&y) && angle(&y) < angle(&p));
        assert!((yarn.magnitude() - (1.0 + 0.1 * 8f32.ln())).abs() < 1e-6);
        // Ministral 3's mscale_all_dim 1 cancels it; llama.cpp's log line for 0.1 at 16.
        let ministral = |m: f32| {
            Yarn {
                factor: 16.0,
                mscale_all_dim: m,
                ..yarn
            }
            .magnitude()
        };
        assert_eq!(ministral(1.0), 1.0);
        assert!((ministral(0.1) - 1.2428).abs() < 1e-4);
    }

    #[test]
    fn a_prompt_is_causal_and_a_sliding_layer_sees_window_positions_including_its_own() {
        let m = attention_mask(0, 4, 0, 4, Some(2)).unwrap();
        assert_eq!(
            visible(&m, 4, 4),
            vec![
                vec![true, false, false, false],
                vec![true, true, false, false],
                vec![false, true, true, false],
                vec![false, false, true, true],
            ]
        );
        let global = attention_mask(0, 3, 0, 3, None).unwrap();
        assert_eq!(visible(&global, 3, 3)[2], vec![true, true, true]);
        assert_eq!(visible(&global, 3, 3)[0], vec![true, false, false]);
    }

    #[test]
    fn a_decoded_token_sees_its_whole_trimmed_cache() {
        // Window 4: the cache keeps 3 positions (5, 6, 7); token 8 sees them and itself.
        assert!(attention_mask(8, 1, 5, 4, Some(4)).unwrap().is_none());
        // An untrimmed cache of positions 0..=8 is masked down to the window.
        let m = attention_mask(8, 1, 0, 9, Some(4)).unwrap();
        let row = &visible(&m, 1, 9)[0];
        assert_eq!(row.iter().filter(|v| **v).count(), 4);
        assert!(row[5..].iter().all(|v| *v));
    }
}
