//! What a latency baseline means on another machine.
//!
//! For a remote server the client machine barely matters: the figures are the server's. For
//! the in-process candle target the machine *is* the server, so a baseline recorded on a faster
//! laptop makes every CI runner look like a regression. A short fixed CPU workload, timed on the
//! machine that records the baseline and again on the machine that compares with it, gives the
//! ratio of their speeds; the in-process verdict compares with the baseline scaled by it.
use std::sync::OnceLock;
use std::time::Instant;

/// Side of the square f32 matrices multiplied: the tiny models' layers are of this order.
const N: usize = 96;
/// Multiplications per timing, and timings kept (the fastest one: least disturbed).
const ROUNDS: usize = 24;
const TIMINGS: usize = 7;

/// Milliseconds this machine takes for the calibration workload (measured once per process,
/// ~10-40 ms in all).
pub fn calibration_ms() -> f64 {
    static MS: OnceLock<f64> = OnceLock::new();
    *MS.get_or_init(|| {
        (0..TIMINGS)
            .map(|_| time_workload())
            .fold(f64::INFINITY, f64::min)
    })
}

/// A naive single-threaded matmul chain: memory-light, FMA-bound, deterministic.
fn time_workload() -> f64 {
    let a: Vec<f32> = (0..N * N)
        .map(|i| ((i * 7919) % 1000) as f32 / 1000.0)
        .collect();
    let mut b: Vec<f32> = (0..N * N)
        .map(|i| ((i * 104_729) % 1000) as f32 / 1000.0)
        .collect();
    let mut c = vec![0f32; N * N];
    let start = Instant::now();
    for _ in 0..ROUNDS {
        for i in 0..N {
            for k in 0..N {
                let aik = a[i * N + k];
                for j in 0..N {
                    c[i * N + j] += aik * b[k * N + j];
                }
            }
        }
        // Keep values bounded and every round dependent on the last.
        let norm = c.iter().fold(0f32, |m, x| m.max(x.abs())).max(1.0);
        for (bv, cv) in b.iter_mut().zip(&mut c) {
            *bv = *cv / norm;
            *cv = 0.0;
        }
    }
    std::hint::black_box(&b);
    start.elapsed().as_secs_f64() * 1e3
}

/// Whether a speed ratio is within the calibration's timing noise (±20 %): the same speed.
pub fn same_speed(ratio: f64) -> bool {
    (0.8..=1.25).contains(&ratio)
}

/// The CPU's model name (Linux `/proc/cpuinfo`), when the OS says.
pub fn cpu_model() -> Option<String> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    info.lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_workload_is_short_and_stable() {
        let ms = calibration_ms();
        assert!(ms > 0.0 && ms < 2_000.0, "{ms} ms");
        // The fastest of several timings varies little between two measurements.
        let again = (0..TIMINGS)
            .map(|_| time_workload())
            .fold(f64::INFINITY, f64::min);
        assert!(again / ms < 3.0 && ms / again < 3.0, "{ms} vs {again}");
    }
}
