//! Percentiles and summaries with one definition (docs/design/METRICS.md): linear interpolation between
//! closest ranks, numpy's default (`method="linear"`, Hyndman & Fan type 7), and the population
//! standard deviation (ddof = 0, as vLLM). Stating one method matters: GuideLLM's empirical CDF
//! and llmperf's sample std give different figures on the same data.
use serde::{Deserialize, Serialize};

/// The p-quantile (p in [0, 1], clamped) of an ascending-sorted slice: h = (n − 1)·p,
/// Q = x[⌊h⌋] + (h − ⌊h⌋)·(x[⌈h⌉] − x[⌊h⌋]). `None` for an empty slice.
pub fn percentile_sorted(sorted: &[f64], p: f64) -> Option<f64> {
    let n = sorted.len();
    if n == 0 {
        return None;
    }
    let p = if p.is_nan() { 0.5 } else { p.clamp(0.0, 1.0) };
    let h = (n - 1) as f64 * p;
    let lo = h.floor() as usize;
    let hi = (h.ceil() as usize).min(n - 1);
    Some(sorted[lo] + (h - lo as f64) * (sorted[hi] - sorted[lo]))
}

/// The p-quantile of unsorted samples (non-finite values are ignored).
pub fn percentile(samples: &[f64], p: f64) -> Option<f64> {
    percentile_sorted(&sorted_finite(samples), p)
}

/// The median (numpy-linear, so the mean of the two middle values for an even count).
pub fn median(samples: &[f64]) -> Option<f64> {
    percentile(samples, 0.5)
}

/// The finite samples, ascending.
pub fn sorted_finite(samples: &[f64]) -> Vec<f64> {
    let mut v: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    v
}

/// The distribution of one metric as every report prints it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub n: usize,
    pub mean: f64,
    /// Population standard deviation (ddof = 0).
    pub std: f64,
    pub min: f64,
    pub max: f64,
    pub p50: f64,
    pub p90: f64,
    pub p95: f64,
    pub p99: f64,
}

impl Summary {
    /// Summarise samples; non-finite values are dropped first. `None` when nothing is left.
    pub fn from_samples(samples: &[f64]) -> Option<Summary> {
        let x = sorted_finite(samples);
        let n = x.len();
        let q = |p| percentile_sorted(&x, p);
        let mean = x.iter().sum::<f64>() / n as f64;
        let var = x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n as f64;
        Some(Summary {
            n,
            mean,
            std: var.sqrt(),
            min: *x.first()?,
            max: *x.last()?,
            p50: q(0.5)?,
            p90: q(0.9)?,
            p95: q(0.95)?,
            p99: q(0.99)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn percentile_matches_numpy_linear() {
        // numpy.percentile([1, 2, 3, 4], [50, 90, 95, 99, 0, 100]):
        // h = 3·0.5 = 1.5 → 2 + 0.5·(3 − 2) = 2.5
        // h = 3·0.9 = 2.7 → 3 + 0.7·(4 − 3) = 3.7
        // h = 3·0.95 = 2.85 → 3.85; h = 3·0.99 = 2.97 → 3.97
        let x = [4.0, 1.0, 3.0, 2.0];
        assert!(close(percentile(&x, 0.5).unwrap(), 2.5));
        assert!(close(percentile(&x, 0.9).unwrap(), 3.7));
        assert!(close(percentile(&x, 0.95).unwrap(), 3.85));
        assert!(close(percentile(&x, 0.99).unwrap(), 3.97));
        assert!(close(percentile(&x, 0.0).unwrap(), 1.0));
        assert!(close(percentile(&x, 1.0).unwrap(), 4.0));
    }

    #[test]
    fn percentile_of_uneven_values() {
        // numpy.percentile([10, 20, 40, 80, 160], 90): h = 4·0.9 = 3.6 → 80 + 0.6·80 = 128
        // numpy.percentile(..., 30): h = 1.2 → 20 + 0.2·20 = 24
        let x = [160.0, 10.0, 80.0, 20.0, 40.0];
        assert!(close(percentile(&x, 0.9).unwrap(), 128.0));
        assert!(close(percentile(&x, 0.3).unwrap(), 24.0));
        assert!(close(median(&x).unwrap(), 40.0));
    }

    #[test]
    fn single_sample_and_empty() {
        assert_eq!(percentile(&[7.0], 0.99), Some(7.0));
        assert_eq!(percentile(&[], 0.5), None);
        assert!(Summary::from_samples(&[]).is_none());
        assert!(Summary::from_samples(&[f64::NAN]).is_none());
    }

    #[test]
    fn summary_uses_population_std() {
        // x = [2, 4, 4, 4, 5, 5, 7, 9]: mean 5, Σ(x − 5)² = 9+1+1+1+0+0+4+16 = 32,
        // population var 32/8 = 4 → std 2 (numpy.std default); the sample std would be 2.138.
        // p50: h = 7·0.5 = 3.5 → 4 + 0.5·(5 − 4) = 4.5; p90: h = 6.3 → 7 + 0.3·2 = 7.6
        // p95: h = 6.65 → 7 + 0.65·2 = 8.3; p99: h = 6.93 → 7 + 0.93·2 = 8.86
        let s = Summary::from_samples(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]).unwrap();
        assert_eq!(s.n, 8);
        assert!(close(s.mean, 5.0));
        assert!(close(s.std, 2.0));
        assert!(close(s.min, 2.0) && close(s.max, 9.0));
        assert!(close(s.p50, 4.5));
        assert!(close(s.p90, 7.6));
        assert!(close(s.p95, 8.3));
        assert!(close(s.p99, 8.86));
    }

    #[test]
    fn non_finite_samples_are_dropped() {
        let s = Summary::from_samples(&[1.0, f64::INFINITY, 3.0, f64::NAN]).unwrap();
        assert_eq!(s.n, 2);
        assert!(close(s.p50, 2.0));
    }
}
