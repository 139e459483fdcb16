//! Whether the client kept up while it measured. A load generator whose event loop runs late or
//! whose CPU is saturated times itself as much as the server: its figures must say so instead of
//! passing for the server's. In-process the model is the server, and what makes its figures
//! unreliable is other processes taking the cores it computes on: the watch counts them too.
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
/// The share of the machine's cores other processes may use while the in-process model is timed.
/// The model computes on every core, so neighbours using a quarter of them slow it by about a
/// third: past that, a slower run says more about the machine than about the model (a CI
/// runner's other job is the usual neighbour).
pub const MAX_NEIGHBOUR_SHARE: f64 = 0.25;

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
    /// CPU other processes used on this process's cores over the run, in cores (None where the
    /// kernel's counts cannot stand for them).
    #[serde(default)]
    pub neighbours_cores: Option<f64>,
}

impl ClientHealth {
    /// Why the latency figures are unreliable, when they are. `in_process`: the model runs in
    /// this process and times its own events on its own thread, and a busy CPU is its work, not
    /// a client's; what makes its figures unreliable is other processes on its cores.
    pub fn unreliable(&self, in_process: bool) -> Option<String> {
        if in_process {
            return self.neighbours_reason();
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
        (!why.is_empty()).then(|| {
            format!(
                "{}: its figures time the client as much as the server",
                why.join("; ")
            )
        })
    }

    /// Other processes took enough of the cores the in-process model computes on to slow it.
    fn neighbours_reason(&self) -> Option<String> {
        let used = self.neighbours_cores?;
        let limit = MAX_NEIGHBOUR_SHARE * self.cores as f64;
        (self.cores > 0 && used >= limit).then(|| {
            format!(
                "other processes used {used:.2} of the {} cores the in-process model computes on (limit {limit:.2}): its figures time the machine's other work as much as the model",
                self.cores
            )
        })
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
            neighbours_cores: match (a.neighbours_cores, b.neighbours_cores) {
                (Some(x), Some(y)) => Some(x.max(y)),
                (x, y) => x.or(y),
            },
        })
    }
}

/// Watches the event loop and the process's CPU while a run measures.
pub struct Watch {
    stop: Arc<AtomicBool>,
    ticker: tokio::task::JoinHandle<Vec<f64>>,
    started: Instant,
    cpu_at_start: Option<Duration>,
    busy_at_start: Option<Duration>,
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
            busy_at_start: cores_busy(),
        }
    }

    pub async fn finish(self) -> ClientHealth {
        let wall = self.started.elapsed().as_secs_f64();
        let own = match (self.cpu_at_start, process_cpu()) {
            (Some(a), Some(b)) if wall > 0.0 => Some(b.saturating_sub(a).as_secs_f64()),
            _ => None,
        };
        // Everything busy on these cores that was not this process: the neighbours.
        let neighbours = match (self.busy_at_start, cores_busy(), own) {
            (Some(a), Some(b), Some(own)) => {
                Some((b.saturating_sub(a).as_secs_f64() - own).max(0.0) / wall)
            }
            _ => None,
        };
        let cpu = own.map(|s| s / wall);
        self.stop.store(true, Ordering::Relaxed);
        let lags = self.ticker.await.unwrap_or_default();
        ClientHealth {
            loop_lag_p99_ms: percentile(&lags, 0.99).unwrap_or(0.0),
            loop_lag_max_ms: lags.iter().copied().fold(0.0, f64::max),
            cpu_cores: cpu,
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            neighbours_cores: neighbours,
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

/// CPU time every process spent on the cores this process may run on, from /proc/stat's
/// per-CPU lines (user, nice, system, irq, softirq, and steal: a hypervisor's other guests are
/// neighbours too). None without /proc, or where a CPU quota makes the cores this process may use
/// fewer than its affinity mask shows (a container given 2 of a host's 64 CPUs): the host's
/// counts would then be other tenants', not neighbours on these cores.
fn cores_busy() -> Option<Duration> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?;
    let allowed = cpu_list(list.trim())?;
    let usable = std::thread::available_parallelism().ok()?.get();
    if allowed.len() != usable {
        return None;
    }
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let jiffies = busy_jiffies(&stat, &allowed)?;
    // USER_HZ is 100 on every Linux ABI chatgate runs on.
    Some(Duration::from_millis(jiffies * 10))
}

/// A kernel CPU list ("0-3,6,8-9") as CPU numbers.
fn cpu_list(list: &str) -> Option<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in list.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => cpus.extend(a.parse::<usize>().ok()?..=b.parse::<usize>().ok()?),
            None => cpus.push(part.parse().ok()?),
        }
    }
    Some(cpus)
}

/// The busy jiffies of `cpus` in a /proc/stat text (the `cpuN` lines; the `cpu` total is not
/// one of them). None when a listed CPU has no line.
fn busy_jiffies(stat: &str, cpus: &[usize]) -> Option<u64> {
    // Columns after the name: user nice system idle iowait irq softirq steal (guest time is
    // already inside user).
    const BUSY: [usize; 6] = [0, 1, 2, 5, 6, 7];
    let mut total = 0;
    let mut seen = 0;
    for line in stat.lines() {
        let mut fields = line.split_whitespace();
        let Some(Ok(cpu)) = fields
            .next()
            .and_then(|name| name.strip_prefix("cpu"))
            .map(str::parse::<usize>)
        else {
            continue;
        };
        if !cpus.contains(&cpu) {
            continue;
        }
        let values: Vec<u64> = fields.map(|v| v.parse().unwrap_or(0)).collect();
        total += BUSY.iter().filter_map(|&i| values.get(i)).sum::<u64>();
        seen += 1;
    }
    (seen == cpus.len()).then_some(total)
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
            neighbours_cores: Some(0.1),
        };
        assert_eq!(fine.unreliable(false), None);
        assert_eq!(fine.unreliable(true), None);
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
        // In-process, other processes on the model's cores make its figures unreliable; a
        // remote client's figures are the server's, whatever else runs beside the client.
        let shared = ClientHealth {
            neighbours_cores: Some(0.8),
            ..fine.clone()
        };
        assert!(shared
            .unreliable(true)
            .unwrap()
            .contains("other processes used 0.80 of the 2 cores"));
        assert_eq!(shared.unreliable(false), None);
        let w = ClientHealth::worst([fine, late, busy, shared]).unwrap();
        assert_eq!(w.loop_lag_p99_ms, 12.0);
        assert_eq!(w.cpu_cores, Some(1.9));
        assert_eq!(w.neighbours_cores, Some(0.8));
    }

    #[test]
    fn proc_stat_counts_only_the_listed_cores_and_their_busy_columns() {
        assert_eq!(cpu_list("0-3,6,8-9"), Some(vec![0, 1, 2, 3, 6, 8, 9]));
        assert_eq!(cpu_list("x"), None);
        let stat = "cpu  900 9 90 9000 9 9 9 9 0 0\n\
                    cpu0 100 1 10 1000 1 1 1 1 0 0\n\
                    cpu1 200 2 20 2000 2 2 2 2 0 0\n\
                    cpu2 300 3 30 3000 3 3 3 3 0 0\n\
                    intr 12345\n";
        // user + nice + system + irq + softirq + steal; idle and iowait are not busy.
        assert_eq!(busy_jiffies(stat, &[0, 2]), Some(114 + 342));
        assert_eq!(busy_jiffies(stat, &[7]), None);
    }

    /// A spinning child process is a neighbour on this machine's cores. (Linux, with no CPU
    /// quota hiding the cores: where chatgate's CI runs.)
    #[cfg(target_os = "linux")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_spinning_child_process_is_a_neighbour() {
        assert!(cores_busy().is_some(), "/proc/stat's per-core counts");
        let watch = Watch::start();
        let mut child = std::process::Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .spawn()
            .unwrap();
        tokio::time::sleep(Duration::from_millis(1500)).await;
        child.kill().unwrap();
        child.wait().unwrap();
        let seen = watch.finish().await;
        let n = seen.neighbours_cores.unwrap();
        assert!(n >= 0.6, "{seen:?}");
        assert!(seen.unreliable(true).is_some(), "{seen:?}");
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
