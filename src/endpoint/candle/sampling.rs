//! Token selection with OpenAI/vLLM semantics, and log-probabilities of the raw distribution.
//!
//! Order of operations (vLLM's sampler, HF's warpers in the same order):
//! 1. repetition penalty over the distinct prompt + generated tokens: a positive logit is
//!    divided by the penalty, a negative one multiplied (`torch.where(l > 0, l / p, l * p)`);
//! 2. greedy (argmax, first index on ties) when `temperature < 1e-5` (vLLM's `_SAMPLING_EPS`;
//!    0 is the documented way to ask for it);
//! 3. otherwise logits / temperature, then top-k (every token whose logit is at least the k-th
//!    largest survives, as vLLM's `logits < kth_value` mask keeps ties), then top-p over the
//!    probabilities of the survivors sorted descending (a token is kept while the mass of the
//!    tokens before it is `< top_p`, which is exactly HF/vLLM's "drop where the ascending
//!    cumulative sum `<= 1 - top_p`"; the most likely token is always kept), then one draw from
//!    the renormalized survivors.
//!
//! The draw uses a seeded xoshiro256** generator, so the same seed and request give the same
//! tokens on every machine; it does not reproduce vLLM's (GPU, torch) random stream.
use crate::error::{Error, Result};

use crate::endpoint::SamplingParams;

/// vLLM treats temperatures below this as greedy.
pub const GREEDY_EPS: f64 = 1e-5;

/// A small, fast, seedable PRNG (xoshiro256**, seeded through splitmix64).
#[derive(Debug, Clone)]
pub struct Rng {
    s: [u64; 4],
}

impl Rng {
    pub fn new(seed: u64) -> Self {
        let mut x = seed;
        let mut next = || {
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        Rng {
            s: [next(), next(), next(), next()],
        }
    }

    pub fn next_u64(&mut self) -> u64 {
        let result = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// Uniform in [0, 1) with 53 random bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// `log(sum(exp(logits)))`, computed stably; an error when a logit is NaN.
///
/// It runs once per generated or scored token over the whole vocabulary (262k on Gemma 3), so it
/// is written for the vector units: one pass for the maximum and NaN, one for the sum of
/// `exp(l - max)` in sixteen f32 lanes with [`exp_nonpositive`], each block of 256 values added
/// into an f64 total. With libm's f64 `exp` per value it took 1.5 ms a token on a 151k
/// vocabulary, 15 % of `chatgate serve`'s time on a stand-in (docs/benchmarks.md).
pub fn logsumexp(logits: &[f32]) -> Result<f32> {
    let (max, nan) = max_and_nan(logits);
    if nan {
        return Err(Error::input(
            "the model produced NaN logits (the weights are probably corrupt)",
        ));
    }
    if max == f32::NEG_INFINITY {
        return Ok(f32::NEG_INFINITY);
    }
    if max == f32::INFINITY {
        return Ok(f32::INFINITY);
    }
    Ok(max + sum_exp_below(logits, max).ln() as f32)
}

/// Lanes of the vectorised passes: sixteen f32 fill an AVX-512 register or two AVX2 ones.
const LANES: usize = 16;
/// Values summed in f32 before the block's sum is added to the f64 total: each lane adds 16
/// values, so the f32 rounding stays near 1e-6 of the sum.
const BLOCK: usize = 256;

/// Runs `$body` compiled for AVX2 where the CPU has it, else for baseline x86-64 (SSE2, four
/// lanes): chatgate's binaries are built for the baseline, and the vocabulary-wide passes run
/// 2.4× faster with eight-lane registers (docs/benchmarks.md). Both compile the same loop, with
/// no fused multiply-add, so they give the same bits.
macro_rules! vectorised {
    ($(#[$doc:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),*) $(-> $ret:ty)? $body:block) => {
        $(#[$doc])*
        $vis fn $name($($arg: $ty),*) $(-> $ret)? {
            #[inline(always)]
            fn portable($($arg: $ty),*) $(-> $ret)? $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx2")]
                fn avx2($($arg: $ty),*) $(-> $ret)? {
                    portable($($arg),*)
                }
                if std::arch::is_x86_feature_detected!("avx2") {
                    // SAFETY: the CPU has AVX2, checked just above.
                    return unsafe { avx2($($arg),*) };
                }
            }
            portable($($arg),*)
        }
    };
}

vectorised! {
/// The largest value (NaN ignored) and whether any value is NaN.
fn max_and_nan(values: &[f32]) -> (f32, bool) {
    let mut max = [f32::NEG_INFINITY; LANES];
    let mut nan = [false; LANES];
    let chunks = values.chunks_exact(LANES);
    let rest = chunks.remainder();
    for chunk in chunks {
        for i in 0..LANES {
            let v = chunk[i];
            nan[i] |= v.is_nan();
            max[i] = if v > max[i] { v } else { max[i] };
        }
    }
    let mut m = max.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut any_nan = nan.iter().any(|&n| n);
    for &v in rest {
        any_nan |= v.is_nan();
        if v > m {
            m = v;
        }
    }
    (m, any_nan)
}
}

vectorised! {
/// `sum(exp(l - max))` over `values`, every value at most `max` (not NaN, `max` finite).
fn sum_exp_below(values: &[f32], max: f32) -> f64 {
    let mut total = 0.0f64;
    for block in values.chunks(BLOCK) {
        let mut acc = [0.0f32; LANES];
        let chunks = block.chunks_exact(LANES);
        let rest = chunks.remainder();
        for chunk in chunks {
            for i in 0..LANES {
                acc[i] += exp_nonpositive(chunk[i] - max);
            }
        }
        let mut sum: f32 = acc.iter().sum();
        for &v in rest {
            sum += exp_nonpositive(v - max);
        }
        total += f64::from(sum);
    }
    total
}
}

/// `exp(x)` for `x <= 0` (−∞ included) to within 2 ulp of f32, without a branch, so a loop
/// over it vectorises (libm's `expf` is a call per value). Cephes' `expf`: `x = n·ln 2 + r`
/// with `|r| <= ln 2 / 2`, a degree-6 polynomial for `exp(r)`, and `2^n` put in the exponent
/// bits; below `ln(f32::MIN_POSITIVE)` the result is 0 (a subnormal at most, which a sum of
/// probabilities cannot see).
#[inline(always)]
pub(crate) fn exp_nonpositive(x: f32) -> f32 {
    const LOWEST: f32 = -87.336_55; // ln(f32::MIN_POSITIVE)
    const LOG2_E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // Adding 1.5·2²³ rounds to the nearest integer in the low mantissa bits (`round` is a
    // libm call on baseline x86-64, and would stop the loop from vectorising).
    const ROUNDER: f32 = 12_582_912.0;
    let under = x < LOWEST;
    let x = if under { LOWEST } else { x };
    let t = x * LOG2_E + ROUNDER;
    let n = t - ROUNDER;
    let r = x - n * LN2_HI - n * LN2_LO;
    let p = 1.987_569_1e-4f32;
    let p = p * r + 1.398_199_9e-3;
    let p = p * r + 8.333_452e-3;
    let p = p * r + 4.166_579_6e-2;
    let p = p * r + 1.666_666_5e-1;
    let p = p * r + 0.5;
    let e = p * r * r + r + 1.0;
    // n is in [-126, 0]: 2^n is a normal f32.
    let scale = f32::from_bits(((n as i32 + 127) as u32) << 23);
    if under {
        0.0
    } else {
        e * scale
    }
}

vectorised! {
/// `cap · tanh(x / cap)` in place: Gemma-2's final soft-cap of its logits. candle's `tanh` is
/// libm's per value, three passes with the divide and the multiply: 30 % of `chatgate serve`'s
/// time on a Gemma-2 stand-in (256k logits a token). Here `tanh(y) = (1 − e) / (1 + e)` with
/// `e = exp(−2|y|)` ([`exp_nonpositive`]) and y's sign: within 1e-7 of tanh's absolute value,
/// so within ~3e-6 of a logit at Gemma-2's cap of 30. NaN stays NaN (and is refused by
/// [`logsumexp`]).
pub(crate) fn soft_cap(values: &mut [f32], cap: f32) {
    let inv = 1.0 / cap;
    for v in values.iter_mut() {
        let y = *v * inv;
        let e = exp_nonpositive(-2.0 * y.abs());
        *v = cap * ((1.0 - e) / (1.0 + e)).copysign(y);
    }
}
}

/// The whole log-softmax of `logits` (the raw model distribution as log-probabilities).
pub fn log_softmax(logits: &[f32]) -> Result<Vec<f32>> {
    let lse = logsumexp(logits)?;
    Ok(logits.iter().map(|&l| l - lse).collect())
}

/// Descending by value, ascending by index on ties (a total, deterministic order).
fn desc(values: &[f32], a: u32, b: u32) -> std::cmp::Ordering {
    values[b as usize]
        .total_cmp(&values[a as usize])
        .then(a.cmp(&b))
}

/// The `n` largest logits as (id, logprob), most likely first; `lse` is `logsumexp(logits)`.
/// `scratch` is reused between calls to avoid an allocation per token.
///
/// One pass that keeps the best `n` in order: a value enters only when it beats the `n`-th best
/// so far, which after the first few thousand values almost none does, so the pass is a compare
/// per value. (Selecting over an index array of the whole vocabulary cost 1–2 ms a token on a
/// 151k vocabulary.) Ties go to the lower id, as before.
pub fn top_logprobs(logits: &[f32], lse: f32, n: usize, scratch: &mut Vec<u32>) -> Vec<(u32, f32)> {
    let n = n.min(logits.len());
    if n == 0 {
        return Vec::new();
    }
    scratch.clear();
    if n > KEPT_IN_ORDER {
        scratch.extend(0..logits.len() as u32);
        if n < scratch.len() {
            scratch.select_nth_unstable_by(n - 1, |&a, &b| desc(logits, a, b));
            scratch.truncate(n);
        }
        scratch.sort_unstable_by(|&a, &b| desc(logits, a, b));
    } else {
        keep_best_in_order(logits, n, scratch);
    }
    scratch
        .iter()
        .map(|&i| (i, logits[i as usize] - lse))
        .collect()
}

/// Past this many, inserting in order costs more than selecting over the whole vocabulary
/// (OpenAI's API allows 20).
const KEPT_IN_ORDER: usize = 64;

/// `scratch` = the ids of the `n` best values, best first.
fn keep_best_in_order(logits: &[f32], n: usize, scratch: &mut Vec<u32>) {
    for (i, &v) in logits.iter().enumerate() {
        if scratch.len() == n {
            let worst = logits[scratch[n - 1] as usize];
            // Ids rise, so an equal value loses to the one already kept.
            if v.total_cmp(&worst) != std::cmp::Ordering::Greater {
                continue;
            }
            scratch.pop();
        }
        let id = i as u32;
        let at = scratch.partition_point(|&k| desc(logits, k, id) == std::cmp::Ordering::Less);
        scratch.insert(at, id);
    }
}

/// Index of the largest logit (the first one on ties; NaN never wins; 0 when every logit is
/// NaN): the maximum in one vectorised pass, then the first place it stands.
pub fn argmax(logits: &[f32]) -> u32 {
    let (max, _) = max_and_nan(logits);
    logits.iter().position(|&v| v == max).unwrap_or(0) as u32
}

/// Apply the vLLM/HF repetition penalty in place to the tokens marked in `seen`.
pub fn apply_repetition_penalty(logits: &mut [f32], seen_ids: &[u32], penalty: f32) {
    if penalty == 1.0 {
        return;
    }
    for &id in seen_ids {
        if let Some(l) = logits.get_mut(id as usize) {
            *l = if *l > 0.0 { *l / penalty } else { *l * penalty };
        }
    }
}

/// One request's sampler: its parameters, its random stream, the tokens the repetition
/// penalty covers, and buffers reused from token to token.
pub struct Sampler {
    params: SamplingParams,
    rng: Rng,
    /// Distinct prompt + generated ids (only tracked when the penalty is on).
    seen: Vec<bool>,
    seen_ids: Vec<u32>,
    work: Vec<f32>,
    idx: Vec<u32>,
    probs: Vec<f64>,
}

impl Sampler {
    pub fn new(params: &SamplingParams, vocab: usize, prompt: &[u32]) -> Result<Sampler> {
        if !params.temperature.is_finite() || params.temperature < 0.0 {
            return Err(Error::input(format!(
                "temperature must be a finite number >= 0, got {}",
                params.temperature
            )));
        }
        if !(params.top_p > 0.0 && params.top_p <= 1.0) {
            return Err(Error::input(format!(
                "top_p must be in (0, 1], got {}",
                params.top_p
            )));
        }
        if !(params.repetition_penalty.is_finite() && params.repetition_penalty > 0.0) {
            return Err(Error::input(format!(
                "repetition_penalty must be > 0, got {}",
                params.repetition_penalty
            )));
        }
        let mut s = Sampler {
            params: params.clone(),
            rng: Rng::new(params.seed),
            seen: Vec::new(),
            seen_ids: Vec::new(),
            work: Vec::with_capacity(vocab),
            idx: Vec::with_capacity(vocab),
            probs: Vec::with_capacity(vocab),
        };
        if params.repetition_penalty != 1.0 {
            s.seen = vec![false; vocab];
            for &id in prompt {
                s.observe(id);
            }
        }
        Ok(s)
    }

    pub fn is_greedy(&self) -> bool {
        self.params.temperature < GREEDY_EPS
    }

    /// Record a generated token (for the repetition penalty).
    pub fn observe(&mut self, id: u32) {
        if let Some(flag) = self.seen.get_mut(id as usize) {
            if !*flag {
                *flag = true;
                self.seen_ids.push(id);
            }
        }
    }

    /// Choose the next token from the raw logits (which are not modified).
    pub fn pick(&mut self, logits: &[f32]) -> u32 {
        let penalized = self.params.repetition_penalty != 1.0;
        if self.is_greedy() {
            if !penalized {
                return argmax(logits);
            }
            self.work.clear();
            self.work.extend_from_slice(logits);
            apply_repetition_penalty(
                &mut self.work,
                &self.seen_ids,
                self.params.repetition_penalty,
            );
            return argmax(&self.work);
        }
        self.work.clear();
        self.work.extend_from_slice(logits);
        if penalized {
            apply_repetition_penalty(
                &mut self.work,
                &self.seen_ids,
                self.params.repetition_penalty,
            );
        }
        let inv_t = (1.0 / self.params.temperature) as f32;
        for l in self.work.iter_mut() {
            *l = if l.is_nan() {
                f32::NEG_INFINITY
            } else {
                *l * inv_t
            };
        }
        let unfiltered = self
            .params
            .top_k
            .is_none_or(|k| k == 0 || k >= self.work.len())
            && self.params.top_p >= 1.0;
        if unfiltered {
            return sample_whole(&self.work, &mut self.probs, &mut self.rng);
        }
        sample_filtered(
            &self.work,
            self.params.top_k,
            self.params.top_p,
            &mut self.idx,
            &mut self.probs,
            &mut self.rng,
        )
    }
}

/// One draw from the whole distribution (no top-k, no top-p), `logits` already penalized and
/// temperature-scaled: the mass of each block of [`BLOCK`] tokens in one vectorised pass, the
/// block the draw lands in, then the token inside it. The same draw as walking every token's
/// mass in order (up to the f32 rounding of the block sums), at a tenth of the cost: that walk
/// took 2.4 ms a token on a 151k vocabulary, more than the model's forward pass on a stand-in.
fn sample_whole(logits: &[f32], blocks: &mut Vec<f64>, rng: &mut Rng) -> u32 {
    let (max, _) = max_and_nan(logits);
    if max.is_infinite() {
        return argmax(logits);
    }
    blocks.clear();
    blocks.extend(logits.chunks(BLOCK).map(|b| sum_exp_below(b, max)));
    let total: f64 = blocks.iter().sum();
    let mut target = rng.next_f64() * total;
    for (b, &mass) in blocks.iter().enumerate() {
        if target >= mass {
            target -= mass;
            continue;
        }
        let start = b * BLOCK;
        let block = &logits[start..(start + BLOCK).min(logits.len())];
        let mut acc = 0.0f64;
        for (i, &l) in block.iter().enumerate() {
            acc += f64::from(exp_nonpositive(l - max));
            if target < acc {
                return (start + i) as u32;
            }
        }
        // Rounding left `target` past the block's own sum: its last token with mass.
        return last_with_mass(block, max).map_or(start as u32, |i| (start + i) as u32);
    }
    // Rounding left `target` past the total: the last token with mass.
    last_with_mass(logits, max).map_or(0, |i| i as u32)
}

fn last_with_mass(logits: &[f32], max: f32) -> Option<usize> {
    logits.iter().rposition(|&l| exp_nonpositive(l - max) > 0.0)
}

/// top-k, then top-p, then one draw; `logits` are already penalized and temperature-scaled.
fn sample_filtered(
    logits: &[f32],
    top_k: Option<usize>,
    top_p: f64,
    idx: &mut Vec<u32>,
    probs: &mut Vec<f64>,
    rng: &mut Rng,
) -> u32 {
    let vocab = logits.len();
    idx.clear();
    idx.extend(0..vocab as u32);
    let mut sorted = false;
    if let Some(k) = top_k.filter(|&k| k > 0 && k < vocab) {
        // The k-th largest value; every token at least as large survives (ties included).
        idx.select_nth_unstable_by(k - 1, |&a, &b| desc(logits, a, b));
        let kth = logits[idx[k - 1] as usize];
        idx.retain(|&i| logits[i as usize] >= kth);
    }
    if top_p < 1.0 {
        idx.sort_unstable_by(|&a, &b| desc(logits, a, b));
        sorted = true;
    }
    // Softmax over the survivors.
    let max = idx
        .iter()
        .map(|&i| logits[i as usize])
        .fold(f32::NEG_INFINITY, f32::max);
    if max == f32::NEG_INFINITY || idx.is_empty() {
        return argmax(logits);
    }
    probs.clear();
    probs.extend(
        idx.iter()
            .map(|&i| f64::from(exp_nonpositive(logits[i as usize] - max))),
    );
    let total: f64 = probs.iter().sum();
    let mut keep = probs.len();
    if top_p < 1.0 && sorted {
        // Keep rank r while the mass before it is < top_p.
        let mut before = 0.0f64;
        keep = 0;
        for &p in probs.iter() {
            if keep > 0 && before >= top_p * total {
                break;
            }
            before += p;
            keep += 1;
        }
    }
    let kept_total: f64 = probs[..keep].iter().sum();
    let target = rng.next_f64() * kept_total;
    let mut acc = 0.0f64;
    for (r, &p) in probs[..keep].iter().enumerate() {
        acc += p;
        if target < acc {
            return idx[r];
        }
    }
    // Rounding left `target` past the last sum: the last kept token with mass.
    probs[..keep]
        .iter()
        .rposition(|&p| p > 0.0)
        .map_or(idx[0], |r| idx[r])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(temperature: f64, top_p: f64, top_k: Option<usize>) -> SamplingParams {
        SamplingParams {
            temperature,
            top_p,
            top_k,
            repetition_penalty: 1.0,
            seed: 7,
        }
    }

    #[test]
    fn top_k_one_is_greedy() {
        let logits = [0.1f32, 3.0, 2.9, -1.0];
        let mut s = Sampler::new(&params(1.0, 1.0, Some(1)), 4, &[]).unwrap();
        for _ in 0..50 {
            assert_eq!(s.pick(&logits), 1);
        }
    }

    #[test]
    fn top_p_keeps_the_token_that_crosses_the_threshold() {
        // probs ~ [0.5, 0.3, 0.2]: top_p 0.6 keeps {0, 1}; top_p 0.45 keeps {0} only.
        let logits = [0.5f64.ln() as f32, 0.3f64.ln() as f32, 0.2f64.ln() as f32];
        let mut s = Sampler::new(&params(1.0, 0.6, None), 3, &[]).unwrap();
        let mut seen = [0usize; 3];
        for _ in 0..2000 {
            seen[s.pick(&logits) as usize] += 1;
        }
        assert!(seen[0] > 0 && seen[1] > 0 && seen[2] == 0, "{seen:?}");
        let mut s = Sampler::new(&params(1.0, 0.45, None), 3, &[]).unwrap();
        for _ in 0..200 {
            assert_eq!(s.pick(&logits), 0);
        }
    }

    #[test]
    fn sampling_follows_the_distribution() {
        let logits = [0.7f64.ln() as f32, 0.2f64.ln() as f32, 0.1f64.ln() as f32];
        let mut s = Sampler::new(&params(1.0, 1.0, None), 3, &[]).unwrap();
        let mut seen = [0usize; 3];
        let n = 20000;
        for _ in 0..n {
            seen[s.pick(&logits) as usize] += 1;
        }
        let f: Vec<f64> = seen.iter().map(|&c| c as f64 / n as f64).collect();
        assert!(
            (f[0] - 0.7).abs() < 0.02 && (f[1] - 0.2).abs() < 0.02,
            "{f:?}"
        );
    }

    #[test]
    fn repetition_penalty_divides_positive_and_multiplies_negative() {
        let mut l = [2.0f32, -2.0, 1.0];
        apply_repetition_penalty(&mut l, &[0, 1], 2.0);
        assert_eq!(l, [1.0, -4.0, 1.0]);
    }

    #[test]
    fn top_logprobs_sorted_and_ties_by_index() {
        let logits = [1.0f32, 3.0, 3.0, 0.0];
        let lse = logsumexp(&logits).unwrap();
        let mut scratch = Vec::new();
        let top = top_logprobs(&logits, lse, 3, &mut scratch);
        assert_eq!(top.iter().map(|t| t.0).collect::<Vec<_>>(), vec![1, 2, 0]);
        let total: f32 = log_softmax(&logits).unwrap().iter().map(|l| l.exp()).sum();
        assert!((total - 1.0).abs() < 1e-6);
    }

    /// Logits shaped like a model's: a few large values and a long tail, with repeats (ties).
    fn vocabulary_logits(n: usize, seed: u64) -> Vec<f32> {
        let mut rng = Rng::new(seed);
        (0..n)
            .map(|_| ((rng.next_f64() * 40.0 - 30.0) as f32 * 8.0).round() / 8.0)
            .collect()
    }

    #[test]
    fn exp_nonpositive_is_within_two_ulp_of_libm() {
        let mut x = -87.0f32;
        while x <= 0.0 {
            let want = f64::from(x).exp();
            let got = f64::from(exp_nonpositive(x));
            let ulp = f64::from(f32::EPSILON) * want;
            assert!(
                (got - want).abs() <= 2.0 * ulp,
                "exp({x}) = {got}, libm {want}"
            );
            x += 0.0137;
        }
        assert_eq!(exp_nonpositive(0.0), 1.0);
        assert_eq!(exp_nonpositive(-100.0), 0.0);
        assert_eq!(exp_nonpositive(f32::NEG_INFINITY), 0.0);
    }

    #[test]
    fn logsumexp_matches_the_f64_sum_on_a_vocabulary() {
        for (n, seed) in [(151_665, 1), (262_144, 2), (17, 3), (1, 4)] {
            let l = vocabulary_logits(n, seed);
            let max = l.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let want = f64::from(max)
                + l.iter()
                    .map(|&v| f64::from(v - max).exp())
                    .sum::<f64>()
                    .ln();
            let got = f64::from(logsumexp(&l).unwrap());
            assert!((got - want).abs() < 1e-5, "n {n}: {got} against {want}");
        }
        assert_eq!(
            logsumexp(&[f32::NEG_INFINITY; 3]).unwrap(),
            f32::NEG_INFINITY
        );
        assert_eq!(logsumexp(&[0.0, f32::INFINITY]).unwrap(), f32::INFINITY);
    }

    #[test]
    fn top_logprobs_in_one_pass_equals_a_full_sort() {
        let mut scratch = Vec::new();
        for (n, seed) in [(151_665, 5), (300, 6), (8, 7)] {
            let l = vocabulary_logits(n, seed);
            let lse = logsumexp(&l).unwrap();
            let mut all: Vec<u32> = (0..n as u32).collect();
            all.sort_by(|&a, &b| desc(&l, a, b));
            for k in [1, 5, 20, 64, 65, 200] {
                let want: Vec<(u32, f32)> = all
                    .iter()
                    .take(k)
                    .map(|&i| (i, l[i as usize] - lse))
                    .collect();
                assert_eq!(top_logprobs(&l, lse, k, &mut scratch), want, "n {n}, k {k}");
            }
        }
    }

    #[test]
    fn a_draw_by_blocks_is_the_draw_token_by_token() {
        let l = vocabulary_logits(50_000, 8);
        let (mut a, mut b) = (Rng::new(9), Rng::new(9));
        let (mut idx, mut probs) = (Vec::new(), Vec::new());
        let mut blocks = Vec::new();
        let mut distinct = std::collections::BTreeSet::new();
        for _ in 0..500 {
            let by_blocks = sample_whole(&l, &mut blocks, &mut a);
            let by_tokens = sample_filtered(&l, None, 1.0, &mut idx, &mut probs, &mut b);
            assert_eq!(by_blocks, by_tokens);
            distinct.insert(by_blocks);
        }
        // A real spread of draws, not one token every time.
        assert!(distinct.len() > 100, "{}", distinct.len());
    }

    #[test]
    fn soft_cap_is_cap_times_tanh() {
        let mut x: Vec<f32> = (-4000..=4000).map(|i| i as f32 * 0.025).collect();
        x.extend([1e-6, -1e-6, 0.0, 500.0, f32::INFINITY, f32::NEG_INFINITY]);
        let want: Vec<f64> = x
            .iter()
            .map(|&v| 30.0 * (f64::from(v) / 30.0).tanh())
            .collect();
        soft_cap(&mut x, 30.0);
        for (got, want) in x.iter().zip(&want) {
            assert!(
                (f64::from(*got) - want).abs() < 4e-6,
                "{got} against {want}"
            );
        }
        let mut nan = [f32::NAN];
        soft_cap(&mut nan, 30.0);
        assert!(nan[0].is_nan());
    }

    #[test]
    fn nan_logits_are_an_error() {
        assert!(logsumexp(&[0.0, f32::NAN]).is_err());
    }
}
