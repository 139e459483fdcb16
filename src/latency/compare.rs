//! Noise-aware latency regression test (docs/design/METRICS.md, "Gating on latency without flaking").
//!
//! Three verdicts, from where the percentile-bootstrap confidence interval of the difference
//! median_new − median_base lies against the allowed excess, max(tolerance · median_base,
//! floor_ms) (the floor keeps a tiny model's sub-millisecond figures from flagging scheduler
//! jitter):
//! - PASS (`Ok`): the whole interval is within the allowance.
//! - REGRESSION: the whole interval is beyond it: slower by more than allowed, and surely so.
//! - INCONCLUSIVE: the interval straddles the allowance. Never a silent pass: the suite decides
//!   whether it fails the gate (`[latency] inconclusive`), and the verdict says how many more
//!   samples would decide it. The bootstrap is seeded, so the same samples always give the same
//!   verdict.
//!
//! Either side with fewer than 3 samples gives no verdict (`Status::Insufficient`), never a
//! regression. The noise band reported beside the verdict is the half-width of the baseline's
//! own bootstrap CI of its median, at the same confidence: how far the baseline median moves
//! from resampling alone. (The IQR would describe single-request spread, not the uncertainty of
//! the median that the test actually compares, so it is not used.)
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use super::stats::{percentile_sorted, sorted_finite};
use crate::error::{Error, Result};

/// Fewest samples per side for a verdict (docs/design/METRICS.md asks for R ≥ 3 repeats).
pub const MIN_SAMPLES: usize = 3;

/// How strict the comparison is.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CompareOptions {
    /// Relative tolerance: 1.0 means "twice as slow" before anything can be a regression.
    pub tolerance: f64,
    /// Absolute floor in ms on the excess.
    pub floor_ms: f64,
    /// Confidence of the bootstrap interval (0.95 → the 2.5th..97.5th percentiles).
    pub confidence: f64,
    /// Bootstrap resamples.
    pub resamples: usize,
    /// Seed of the bootstrap's generator.
    pub seed: u64,
}

impl Default for CompareOptions {
    /// The suite's defaults: tolerance 1.0, no floor, 95 %, 2000 resamples, a fixed seed.
    fn default() -> Self {
        CompareOptions {
            tolerance: 1.0,
            floor_ms: 0.0,
            confidence: 0.95,
            resamples: 2000,
            seed: 0x00c4_a79a_7e00,
        }
    }
}

impl CompareOptions {
    /// Reject settings that would make the test meaningless (for the CLI to call on suite values).
    pub fn validate(&self) -> Result<()> {
        let hint = "fix the [latency] section of the suite";
        if !(self.tolerance.is_finite() && self.tolerance >= 0.0) {
            return Err(Error::input(format!(
                "latency tolerance must be ≥ 0, got {}",
                self.tolerance
            ))
            .hint(hint));
        }
        if !(self.floor_ms.is_finite() && self.floor_ms >= 0.0) {
            return Err(Error::input(format!(
                "latency regression floor must be ≥ 0 ms, got {}",
                self.floor_ms
            ))
            .hint(hint));
        }
        if !(self.confidence > 0.0 && self.confidence < 1.0) {
            return Err(Error::input(format!(
                "latency confidence must be between 0 and 1 (e.g. 0.95), got {}",
                self.confidence
            ))
            .hint(hint));
        }
        if self.resamples < 100 {
            return Err(Error::input(format!(
                "latency bootstrap needs at least 100 resamples, got {}",
                self.resamples
            ))
            .hint(hint));
        }
        Ok(())
    }
}

/// What the comparison concluded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// PASS: the whole CI of the difference is within the allowed excess.
    Ok,
    /// The CI of the difference straddles the allowed excess: more samples would decide.
    Inconclusive,
    /// The whole CI of the difference is beyond the allowed excess.
    Regression,
    /// Fewer than 3 samples on a side: no verdict.
    Insufficient,
}

/// The outcome of comparing two samples of one metric (ms).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    pub status: Status,
    /// `status == Regression`.
    pub regression: bool,
    pub n_base: usize,
    pub n_new: usize,
    pub median_base: Option<f64>,
    pub median_new: Option<f64>,
    /// median_new / median_base (None when a side is empty or the base median is 0).
    pub ratio: Option<f64>,
    /// The excess median_new − median_base must exceed this (max(tolerance·base, floor)).
    pub threshold_ms: Option<f64>,
    /// Bootstrap CI of median_new − median_base (None without a verdict).
    pub ci_low: Option<f64>,
    pub ci_high: Option<f64>,
    /// Half-width of the baseline median's bootstrap CI (None without a verdict).
    pub noise_band: Option<f64>,
    /// One sentence for the report.
    pub reason: String,
    /// INCONCLUSIVE only: how many more samples per side would decide it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_decide: Option<String>,
}

impl Verdict {
    /// The report row's verdict.
    pub fn row_verdict(&self) -> crate::verdict::LatencyVerdict {
        use crate::verdict::LatencyVerdict as V;
        match self.status {
            Status::Ok => V::Ok,
            Status::Regression => V::Regression,
            Status::Inconclusive => V::Inconclusive {
                band_ms: self.noise_band.unwrap_or(0.0),
            },
            Status::Insufficient => V::InsufficientData,
        }
    }
}

/// Compare a baseline sample with a new one (both in ms; non-finite values are ignored).
pub fn compare(base: &[f64], new: &[f64], opts: &CompareOptions) -> Verdict {
    compare_stratified(&[base], &[new], opts)
}

/// Compare pooled samples made of strata (e.g. one per prompt): the medians are those of the
/// pooled samples, but the bootstrap resamples each stratum on its own, keeping its size. Pooling
/// prompts of very different lengths makes a multi-modal distribution whose plain-bootstrap
/// median jumps between modes; resampling within strata keeps the mix fixed, so the interval
/// reflects the noise within each prompt rather than the luck of the draw between them.
/// `base` and `new` are matched by position only for reading; strata may differ in number.
pub fn compare_stratified(base: &[&[f64]], new: &[&[f64]], opts: &CompareOptions) -> Verdict {
    let base: Vec<Vec<f64>> = base.iter().map(|s| sorted_finite(s)).collect();
    let new: Vec<Vec<f64>> = new.iter().map(|s| sorted_finite(s)).collect();
    let pooled = |strata: &[Vec<f64>]| sorted_finite(&strata.concat());
    let (base_all, new_all) = (pooled(&base), pooled(&new));
    let median_base = percentile_sorted(&base_all, 0.5);
    let median_new = percentile_sorted(&new_all, 0.5);
    let ratio = match (median_base, median_new) {
        (Some(b), Some(n)) if b > 0.0 => Some(n / b),
        _ => None,
    };
    let mut v = Verdict {
        status: Status::Insufficient,
        regression: false,
        n_base: base_all.len(),
        n_new: new_all.len(),
        median_base,
        median_new,
        ratio,
        threshold_ms: median_base.map(|b| threshold(b, opts)),
        ci_low: None,
        ci_high: None,
        noise_band: None,
        reason: insufficient_reason(base_all.len(), new_all.len()),
        to_decide: None,
    };
    let (Some(mb), Some(mn)) = (median_base, median_new) else {
        return v;
    };
    if base_all.len() < MIN_SAMPLES || new_all.len() < MIN_SAMPLES {
        return v;
    }
    let boot = bootstrap(&base, &new, opts);
    let excess = mn - mb;
    let limit = threshold(mb, opts);
    v.ci_low = Some(boot.ci_low);
    v.ci_high = Some(boot.ci_high);
    v.noise_band = Some(boot.noise_band);
    v.status = if boot.ci_high <= limit {
        Status::Ok
    } else if boot.ci_low > limit {
        Status::Regression
    } else {
        Status::Inconclusive
    };
    v.regression = v.status == Status::Regression;
    v.reason = reason(v.status, mb, mn, limit, &boot, opts.confidence);
    if v.status == Status::Inconclusive {
        v.to_decide = Some(to_decide(
            excess,
            limit,
            &boot,
            base_all.len().min(new_all.len()),
        ));
    }
    v
}

/// How many more samples per side would move the interval off the allowance: its half-width
/// on the side that crosses shrinks as 1/√n, so n must grow by (half-width / distance)².
fn to_decide(excess: f64, limit: f64, boot: &Bootstrap, n: usize) -> String {
    let (distance, half) = if excess > limit {
        (excess - limit, excess - boot.ci_low)
    } else {
        (limit - excess, boot.ci_high - excess)
    };
    if distance <= half * 0.05 || distance <= 1e-9 {
        return format!(
            "the median difference {excess:.2} ms sits on the allowed {limit:.2} ms: no number of \
             samples decides it; [latency] inconclusive says what it does to the gate"
        );
    }
    let needed = (n as f64 * (half / distance).powi(2)).ceil() as usize;
    format!(
        "about {} more samples per side ({n} → {needed}) would put the interval on one side of the allowed {limit:.2} ms",
        needed.saturating_sub(n).max(1)
    )
}

/// max(tolerance · median_base, floor).
fn threshold(median_base: f64, opts: &CompareOptions) -> f64 {
    (opts.tolerance * median_base).max(opts.floor_ms)
}

fn insufficient_reason(n_base: usize, n_new: usize) -> String {
    format!(
        "no verdict: {n_base} baseline and {n_new} new samples (at least {MIN_SAMPLES} each are needed)"
    )
}

fn reason(
    status: Status,
    mb: f64,
    mn: f64,
    limit: f64,
    boot: &Bootstrap,
    confidence: f64,
) -> String {
    let pct = if mb > 0.0 {
        format!(" ({:+.0} %)", (mn - mb) / mb * 100.0)
    } else {
        String::new()
    };
    let ci = format!(
        "{:.0} % CI of the difference [{:.2}, {:.2}] ms",
        confidence * 100.0,
        boot.ci_low,
        boot.ci_high
    );
    let head = format!("median {mb:.2} → {mn:.2} ms{pct}");
    let noise = format!("noise band ±{:.2} ms", boot.noise_band);
    match status {
        Status::Ok => format!("{head}: the {ci} is within the allowed {limit:.2} ms; {noise}"),
        Status::Inconclusive => {
            format!("{head}: the {ci} straddles the allowed {limit:.2} ms; {noise}")
        }
        Status::Regression => {
            format!("{head}: the {ci} is beyond the allowed {limit:.2} ms")
        }
        Status::Insufficient => head,
    }
}

/// Bootstrap results.
struct Bootstrap {
    ci_low: f64,
    ci_high: f64,
    noise_band: f64,
}

/// Percentile bootstrap: resample each side (stratum by stratum) with replacement, take both
/// medians, and read the CI of their difference (and of the baseline median alone, for the
/// noise band) from the (1 − c)/2 and (1 + c)/2 percentiles.
fn bootstrap(base: &[Vec<f64>], new: &[Vec<f64>], opts: &CompareOptions) -> Bootstrap {
    let mut rng = StdRng::seed_from_u64(opts.seed);
    let resamples = opts.resamples.max(1);
    let mut diffs = Vec::with_capacity(resamples);
    let mut base_medians = Vec::with_capacity(resamples);
    let mut scratch = Vec::new();
    for _ in 0..resamples {
        let mb = resampled_median(base, &mut rng, &mut scratch);
        let mn = resampled_median(new, &mut rng, &mut scratch);
        diffs.push(mn - mb);
        base_medians.push(mb);
    }
    diffs.sort_by(f64::total_cmp);
    base_medians.sort_by(f64::total_cmp);
    let confidence = opts.confidence.clamp(0.0, 1.0);
    let lo_p = (1.0 - confidence) / 2.0;
    let hi_p = 1.0 - lo_p;
    let q = |v: &[f64], p| percentile_sorted(v, p).unwrap_or(0.0);
    Bootstrap {
        ci_low: q(&diffs, lo_p),
        ci_high: q(&diffs, hi_p),
        noise_band: (q(&base_medians, hi_p) - q(&base_medians, lo_p)) / 2.0,
    }
}

/// The numpy-linear median of one resample with replacement of every stratum (same sizes;
/// the pooled sample is non-empty).
fn resampled_median(strata: &[Vec<f64>], rng: &mut StdRng, scratch: &mut Vec<f64>) -> f64 {
    scratch.clear();
    for x in strata.iter().filter(|x| !x.is_empty()) {
        scratch.extend((0..x.len()).map(|_| x[rng.random_range(0..x.len())]));
    }
    scratch.sort_unstable_by(f64::total_cmp);
    percentile_sorted(scratch, 0.5).unwrap_or(f64::NAN)
}
