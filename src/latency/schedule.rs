//! Arrival schedules for open-loop load (docs/design/METRICS.md "Load shapes"): when each request is meant
//! to be sent, independent of how long earlier ones take. Inter-arrival gaps are constant (1/λ),
//! exponential (a Poisson process, Exp(λ)) or gamma (shape k, scale 1/(λk): the same mean rate,
//! burstier for k < 1). The schedule is seeded and serialisable so it is saved with the results
//! and a run can be repeated with the very same arrivals.
use std::time::Duration;

use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_distr::{Distribution, Exp, Gamma};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The distribution of inter-arrival gaps.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Arrival {
    /// Δ = 1/λ.
    Constant,
    /// Δ ~ Exp(λ).
    Poisson,
    /// Δ ~ Γ(shape, 1/(λ·shape)).
    Gamma { shape: f64 },
}

/// Planned send offsets from the start of the measured run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Schedule {
    /// Offset of each request from the run's start; the first is 0, non-decreasing.
    pub offsets: Vec<Duration>,
    pub seed: u64,
    /// λ, requests per second.
    pub rate: f64,
    pub arrival: Arrival,
}

impl Schedule {
    /// `n` arrivals at mean rate `rate_per_s`. The first request goes at offset 0; each next one
    /// a drawn gap later. The same arguments always give the same offsets.
    pub fn generate(n: usize, rate_per_s: f64, arrival: Arrival, seed: u64) -> Result<Schedule> {
        if !(rate_per_s.is_finite() && rate_per_s > 0.0) {
            return Err(Error::input(format!(
                "request rate must be a positive number of requests per second, got {rate_per_s}"
            ))
            .hint("pass e.g. --rate 10"));
        }
        let gaps = gaps(n.saturating_sub(1), rate_per_s, arrival, seed)?;
        let mut offsets = Vec::with_capacity(n);
        let mut at = Duration::ZERO;
        if n > 0 {
            offsets.push(at);
        }
        for gap in gaps {
            at += gap;
            offsets.push(at);
        }
        Ok(Schedule {
            offsets,
            seed,
            rate: rate_per_s,
            arrival,
        })
    }

    /// Requests in the schedule.
    pub fn len(&self) -> usize {
        self.offsets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.offsets.is_empty()
    }

    /// The offset of the last arrival (the schedule's span).
    pub fn span(&self) -> Duration {
        self.offsets.last().copied().unwrap_or(Duration::ZERO)
    }
}

/// `count` seeded inter-arrival gaps.
fn gaps(count: usize, rate: f64, arrival: Arrival, seed: u64) -> Result<Vec<Duration>> {
    let mut rng = StdRng::seed_from_u64(seed);
    let secs: Vec<f64> = match arrival {
        Arrival::Constant => vec![1.0 / rate; count],
        Arrival::Poisson => {
            let exp = Exp::new(rate).map_err(|e| Error::input(format!("Poisson arrivals: {e}")))?;
            (0..count).map(|_| exp.sample(&mut rng)).collect()
        }
        Arrival::Gamma { shape } => {
            if !(shape.is_finite() && shape > 0.0) {
                return Err(Error::input(format!(
                    "gamma arrival shape must be positive, got {shape}"
                ))
                .hint("shape 1 is Poisson; below 1 is burstier, above 1 more regular"));
            }
            let gamma = Gamma::new(shape, 1.0 / (rate * shape))
                .map_err(|e| Error::input(format!("gamma arrivals: {e}")))?;
            (0..count).map(|_| gamma.sample(&mut rng)).collect()
        }
    };
    Ok(secs
        .into_iter()
        .map(|s| Duration::try_from_secs_f64(s).unwrap_or(Duration::ZERO))
        .collect())
}
