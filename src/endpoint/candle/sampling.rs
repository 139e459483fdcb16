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
pub fn logsumexp(logits: &[f32]) -> Result<f32> {
    let mut max = f32::NEG_INFINITY;
    for &l in logits {
        if l.is_nan() {
            return Err(Error::input(
                "the model produced NaN logits (the weights are probably corrupt)",
            ));
        }
        if l > max {
            max = l;
        }
    }
    if max == f32::NEG_INFINITY {
        return Ok(f32::NEG_INFINITY);
    }
    if max == f32::INFINITY {
        return Ok(f32::INFINITY);
    }
    let sum: f64 = logits.iter().map(|&l| ((l - max) as f64).exp()).sum();
    Ok(max + sum.ln() as f32)
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
pub fn top_logprobs(logits: &[f32], lse: f32, n: usize, scratch: &mut Vec<u32>) -> Vec<(u32, f32)> {
    let n = n.min(logits.len());
    if n == 0 {
        return Vec::new();
    }
    scratch.clear();
    scratch.extend(0..logits.len() as u32);
    if n < scratch.len() {
        scratch.select_nth_unstable_by(n - 1, |&a, &b| desc(logits, a, b));
        scratch.truncate(n);
    }
    scratch.sort_unstable_by(|&a, &b| desc(logits, a, b));
    scratch
        .iter()
        .map(|&i| (i, logits[i as usize] - lse))
        .collect()
}

/// Index of the largest logit (the first one on ties; NaN never wins).
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0usize;
    let mut best_v = f32::NEG_INFINITY;
    let mut found = false;
    for (i, &v) in logits.iter().enumerate() {
        if !found || v > best_v {
            if v.is_nan() {
                continue;
            }
            best = i;
            best_v = v;
            found = true;
        }
    }
    best as u32
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
            .map(|&i| ((logits[i as usize] - max) as f64).exp()),
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

    #[test]
    fn nan_logits_are_an_error() {
        assert!(logsumexp(&[0.0, f32::NAN]).is_err());
    }
}
