//! Whether the client kept up while it measured. A load generator whose event loop runs late or
//! whose CPU is saturated times itself as much as the server: its figures must say so instead of
//! passing for the server's.
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::stats::percentile;

/// How often the watch asks the event loop for a timer: its lateness is the loop's lag.
const TICK: Duration = Duration::from_millis(5);
/// Event-loop lag (p99) above which timestamps are the client's delay as much as the server's.
pub const MAX_LOOP_LAG_MS: f64 = 5.0;
/// The share of the machine's cores the client may use before it counts as saturated.
pub const MAX_CPU_SHARE: f64 = 0.9;

/// What the watch saw during a measured run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ClientHealth {
    /// How late the event loop ran a 5 ms timer: p99 and worst, ms.
    pub loop_lag_p99_ms: f64,
    pub loop_lag_max_ms: f64,
    /// CPU the process used over the run, in cores (None where it cannot be read).
    pub cpu_cores: Option<f64>,
    /// The machine's cores.
    pub cores: usize,
}

impl ClientHealth {
    /// Why the latency figures are unreliable, when they are. `in_process`: the model runs in
    /// this process and times its own events on its own thread, and a busy CPU is its work, not
    /// a client's: nothing here applies.
    pub fn unreliable(&self, in_process: bool) -> Option<String> {
        if in_process {
            return None;
        }
        let mut why = Vec::new();
        if self.loop_lag_p99_ms > MAX_LOOP_LAG_MS {
            why.push(format!(
                "the client's event loop ran {:.1} ms late (p99; worst {:.1} ms, limit {MAX_LOOP_LAG_MS} ms)",
                self.loop_lag_p99_ms, self.loop_lag_max_ms
            ));
        }
        if let Some(used) = self.cpu_cores {
            if self.cores > 0 && used >= MAX_CPU_SHARE * self.cores as f64 {
                why.push(format!(
                    "the client used {used:.2} of {} cores (saturated)",
                    self.cores
                ));
            }
        }
        (!why.is_empty()).then(|| why.join("; "))
    }

    /// The worst of several shards' (any shard behind makes the merged figures unreliable).
    pub fn worst(all: impl IntoIterator<Item = ClientHealth>) -> Option<ClientHealth> {
        all.into_iter().reduce(|a, b| ClientHealth {
            loop_lag_p99_ms: a.loop_lag_p99_ms.max(b.loop_lag_p99_ms),
            loop_lag_max_ms: a.loop_lag_max_ms.max(b.loop_lag_max_ms),
            cpu_cores: match (a.cpu_cores, b.cpu_cores) {
                (Some(x), Some(y)) if x / a.cores.max(1) as f64 >= y / b.cores.max(1) as f64 => {
                    Some(x)
                }
                (_, Some(y)) => Some(y),
                (x, None) => x,
            },
            cores: a.cores.max(b.cores),
        })
    }
}

/// Watches the event loop and the process's CPU while a run measures.
pub struct Watch {
    stop: Arc<AtomicBool>,
    ticker: tokio::task::JoinHandle<Vec<f64>>,
    started: Instant,
    cpu_at_start: Option<Duration>,
}

impl Watch {
    /// Start watching (on the current tokio runtime).
    pub fn start() -> Watch {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let ticker = tokio::spawn(async move {
            let mut lags = Vec::new();
            while !flag.load(Ordering::Relaxed) {
                let asked = Instant::now() + TICK;
                tokio::time::sleep_until(asked.into()).await;
                lags.push(
                    Instant::now()
                        .saturating_duration_since(asked)
                        .as_secs_f64()
                        * 1e3,
                );
            }
            lags
        });
        Watch {
            stop,
            ticker,
            started: Instant::now(),
            cpu_at_start: process_cpu(),
        }
    }

    pub async fn finish(self) -> ClientHealth {
        let wall = self.started.elapsed().as_secs_f64();
        let cpu = match (self.cpu_at_start, process_cpu()) {
            (Some(a), Some(b)) if wall > 0.0 => Some(b.saturating_sub(a).as_secs_f64() / wall),
            _ => None,
        };
        self.stop.store(true, Ordering::Relaxed);
        let lags = self.ticker.await.unwrap_or_default();
        ClientHealth {
            loop_lag_p99_ms: percentile(&lags, 0.99).unwrap_or(0.0),
            loop_lag_max_ms: lags.iter().copied().fold(0.0, f64::max),
            cpu_cores: cpu,
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        }
    }
}

/// User + system CPU time of this process so far (Linux: /proc/self/stat; None elsewhere).
fn process_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may hold spaces, inside parentheses).
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let (utime, stime): (u64, u64) = (fields.get(11)?.parse().ok()?, fields.get(12)?.parse().ok()?);
    // USER_HZ is 100 on every Linux ABI chatgate runs on.
    Some(Duration::from_millis((utime + stime) * 10))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_late_loop_or_a_saturated_client_makes_the_figures_unreliable() {
        let fine = ClientHealth {
            loop_lag_p99_ms: 0.4,
            loop_lag_max_ms: 2.0,
            cpu_cores: Some(0.3),
            cores: 2,
        };
        assert_eq!(fine.unreliable(false), None);
        let late = ClientHealth {
            loop_lag_p99_ms: 12.0,
            ..fine.clone()
        };
        assert!(late.unreliable(false).unwrap().contains("event loop"));
        let busy = ClientHealth {
            cpu_cores: Some(1.9),
            ..fine.clone()
        };
        assert!(busy.unreliable(false).unwrap().contains("saturated"));
        // In-process, the CPU is the model's and the events are timed on its own thread.
        assert_eq!(busy.unreliable(true), None);
        assert_eq!(late.unreliable(true), None);
        let w = ClientHealth::worst([fine, late, busy]).unwrap();
        assert_eq!(w.loop_lag_p99_ms, 12.0);
        assert_eq!(w.cpu_cores, Some(1.9));
    }

    /// A client whose event loop is blocked (here: the test's own thread sleeps between
    /// awaits on a single-threaded runtime) is seen late by the watch.
    #[tokio::test(flavor = "current_thread")]
    async fn a_blocked_event_loop_is_seen() {
        let watch = Watch::start();
        tokio::time::sleep(Duration::from_millis(20)).await;
        for _ in 0..6 {
            std::thread::sleep(Duration::from_millis(30));
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let seen = watch.finish().await;
        assert!(seen.loop_lag_max_ms >= 20.0, "{seen:?}");
        assert!(
            seen.unreliable(false)
                .is_some_and(|w| w.contains("event loop")),
            "{seen:?}"
        );
    }

    #[test]
    fn this_process_cpu_time_is_read() {
        assert!(process_cpu().is_some());
    }
}
