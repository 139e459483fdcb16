//! Capacity under the SLOs (docs/design/METRICS.md "Capacity"): the highest open-loop request
//! rate at which the stated share of requests meets every SLO, found by a seeded search and
//! reported as an interval, with the knee of the latency-vs-load curve and where the server
//! saturated.
//!
//! The search is monotonic, as aiperf's `monotonic_sla` planner and perf_analyzer's binary
//! search are: double the rate while steps pass (halve it while they fail), then bisect the
//! bracket geometrically until its ends are within `resolution` of each other, then run both
//! ends again (`repeats`) with new seeds. A rate whose runs disagree lies inside the interval,
//! never at its edge: the interval's low end is the highest rate that, with every rate tested
//! below it, passed every run; its high end the lowest rate that, with every rate above it,
//! failed every run. The whole search stays within a time budget; when the budget ends it first,
//! the interval is as wide as the steps so far make it, and says so.
//!
//! Pure: the step runner is a closure, so the CLI drives a real target and the unit tests a
//! model of a queue.
use std::future::Future;
use std::time::Instant;

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

use super::stats::Summary;

/// How the search runs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SearchOptions {
    /// The first rate tried (requests/s).
    pub start: f64,
    /// Bounds of the rates tried.
    pub min_rate: f64,
    pub max_rate: f64,
    /// Stop bisecting when high/low − 1 is at most this.
    pub resolution: f64,
    /// Runs of each end of the final bracket (the first counts).
    pub repeats: usize,
    /// Wall-clock budget of the whole search.
    pub budget_s: f64,
    /// The share of requests that must meet every SLO for a step to pass.
    pub attainment: f64,
    /// Measured requests per step (for the budget's estimate of a step's length).
    pub requests: usize,
    pub seed: u64,
}

/// One step's measurement, as the runner returns it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Measured {
    pub requests: usize,
    pub errors: usize,
    /// Requests meeting every SLO / (requests + errors).
    pub attainment: f64,
    /// Completed requests / D.
    pub achieved_rate: f64,
    /// Why the server is judged saturated in this step (its queue grew through it).
    pub saturated: Option<String>,
    /// TTFT, TPOT, ITL, E2EL distributions (ms).
    pub latency: IndexMap<String, Summary>,
    /// Each metric's quantiles at 0, 5, …, 100 % (ms): its CDF, for the report's pictures.
    pub cdf: IndexMap<String, Vec<f64>>,
    /// Actual send − scheduled (ms): the open loop under the step.
    pub send_late_ms: Option<Summary>,
    pub duration_s: f64,
    /// The server's own figures over the step, when it exposes `/metrics`.
    pub server: Option<super::server_view::StepView>,
    /// What the step's figures say beyond pass or fail: the server's queue explains its
    /// latency, client and server counts disagree.
    pub notes: Vec<String>,
    /// Why the target could not be reached, when no request reached it.
    pub unreachable: Option<String>,
}

/// One step of the search: a rate, run once with one seed.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Step {
    pub rate: f64,
    /// 0 for a rate's first run, 1.. for the repeats at the bracket's ends.
    pub repeat: usize,
    pub seed: u64,
    /// Seconds from the search's start to this step's start.
    pub at_s: f64,
    pub passed: bool,
    /// Why it failed (empty when it passed).
    pub why: String,
    #[serde(flatten)]
    pub measured: Measured,
}

/// The search's answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Capacity {
    /// The highest rate that (with every rate below it) passed every run; None when even the
    /// lowest rate tried failed.
    pub low: Option<f64>,
    /// The lowest rate that (with every rate above it) failed every run; None when no rate up
    /// to `max_rate` failed.
    pub high: Option<f64>,
    /// The rate where latency starts to climb (the knee of latency vs rate), when ≥ 3 rates ran.
    pub knee: Option<f64>,
    /// The lowest rate at which the server's queue grew through the step.
    pub saturated_at: Option<f64>,
    /// Why the search stopped: `converged`, `budget`, `max_rate`, `min_rate`, `unreachable`.
    pub stopped: String,
    pub elapsed_s: f64,
    pub options: SearchOptions,
    pub steps: Vec<Step>,
}

impl Capacity {
    /// "between 48.1 and 50.6 requests/s", "at least 800", "below 0.5".
    pub fn describe(&self) -> String {
        match (self.low, self.high) {
            (Some(l), Some(h)) => format!("between {l:.2} and {h:.2} requests/s"),
            (Some(l), None) if self.steps.iter().any(|s| !s.passed) => format!(
                "at least {l:.2} requests/s (every rate above it passed at least once: its runs \
                 disagreed, so no upper bound; more --requests per step steady them)"
            ),
            (Some(l), None) => {
                format!("at least {l:.2} requests/s (no rate up to the maximum failed)")
            }
            (None, Some(h)) => format!("below {h:.2} requests/s (the lowest rate tried failed)"),
            (None, None) => "unknown (no step ran)".into(),
        }
    }
}

/// Run the search: `run(rate, seed)` measures one step.
pub async fn search<F, Fut>(opts: SearchOptions, mut run: F) -> Capacity
where
    F: FnMut(f64, u64) -> Fut,
    Fut: Future<Output = Measured>,
{
    let started = Instant::now();
    let mut s = Searcher {
        opts: opts.clone(),
        started,
        steps: Vec::new(),
        longest_overrun: 0.0,
    };
    let stopped = s.drive(&mut run).await;
    // A step the target answered nothing in says nothing about its capacity.
    let answered: Vec<Step> = s
        .steps
        .iter()
        .filter(|st| st.measured.unreachable.is_none())
        .cloned()
        .collect();
    let (low, high) = interval(&answered);
    Capacity {
        low,
        high,
        knee: knee(&s.steps),
        saturated_at: s
            .steps
            .iter()
            .filter(|st| st.measured.saturated.is_some())
            .map(|st| st.rate)
            .reduce(f64::min),
        stopped: stopped.into(),
        elapsed_s: started.elapsed().as_secs_f64(),
        options: opts,
        steps: s.steps,
    }
}

/// How many times an end of the bracket steps outwards when its repeats disagree.
const MAX_WIDENINGS: usize = 4;

struct Searcher {
    opts: SearchOptions,
    started: Instant,
    steps: Vec<Step>,
    /// The most a step ran past its schedule's span (s): the budget's margin for the next.
    longest_overrun: f64,
}

impl Searcher {
    async fn drive<F, Fut>(&mut self, run: &mut F) -> &'static str
    where
        F: FnMut(f64, u64) -> Fut,
        Fut: Future<Output = Measured>,
    {
        let o = self.opts.clone();
        // Bracket: double while passing, halve while failing.
        let mut rate = o.start.clamp(o.min_rate, o.max_rate);
        let Some(first) = self.step(run, rate, 0).await else {
            return self.halted();
        };
        let (mut low, mut high) = if first {
            (rate, None)
        } else {
            (0.0, Some(rate))
        };
        if first {
            loop {
                if rate >= o.max_rate {
                    return self.confirm(run, Some(rate), None, "max_rate").await;
                }
                rate = (rate * 2.0).min(o.max_rate);
                match self.step(run, rate, 0).await {
                    None => return self.halted(),
                    Some(true) => low = rate,
                    Some(false) => {
                        high = Some(rate);
                        break;
                    }
                }
            }
        } else {
            loop {
                if rate <= o.min_rate {
                    return self.confirm(run, None, high, "min_rate").await;
                }
                rate = (rate / 2.0).max(o.min_rate);
                match self.step(run, rate, 0).await {
                    None => return self.halted(),
                    Some(true) => {
                        low = rate;
                        break;
                    }
                    Some(false) => high = Some(rate),
                }
            }
        }
        let mut hi = high.unwrap_or(o.max_rate);
        while hi / low - 1.0 > o.resolution {
            let mid = (low * hi).sqrt();
            match self.step(run, mid, 0).await {
                None => return self.halted(),
                Some(true) => low = mid,
                Some(false) => hi = mid,
            }
        }
        self.confirm(run, Some(low), Some(hi), "converged").await
    }

    /// The repeats at the bracket's ends.
    async fn confirm<F, Fut>(
        &mut self,
        run: &mut F,
        low: Option<f64>,
        high: Option<f64>,
        why: &'static str,
    ) -> &'static str
    where
        F: FnMut(f64, u64) -> Fut,
        Fut: Future<Output = Measured>,
    {
        for repeat in 1..self.opts.repeats.max(1) {
            for rate in [low, high].into_iter().flatten() {
                if self.step(run, rate, repeat).await.is_none() {
                    return self.halted();
                }
            }
        }
        // An end whose repeats disagreed is inside the interval, not its edge: step outwards
        // (by the resolution) until a rate agrees with itself, a few times at most.
        let factor = 1.0 + self.opts.resolution.max(0.01);
        for (mut rate, passed, outwards) in [(high, false, factor), (low, true, 1.0 / factor)]
            .into_iter()
            .filter_map(|(r, p, f)| r.map(|r| (r, p, f)))
        {
            for _ in 0..MAX_WIDENINGS {
                if self.agrees(rate, passed) {
                    break;
                }
                rate = (rate * outwards).clamp(self.opts.min_rate, self.opts.max_rate);
                for repeat in 0..self.opts.repeats.max(1) {
                    if self.step(run, rate, repeat).await.is_none() {
                        return self.halted();
                    }
                }
            }
        }
        why
    }

    /// Whether every run at `rate` passed (or every run failed).
    fn agrees(&self, rate: f64, passed: bool) -> bool {
        self.steps
            .iter()
            .filter(|s| s.rate == rate)
            .all(|s| s.passed == passed)
    }

    /// Why the search cannot go on: the target did not answer its last step (no rate will
    /// change that), or the next step would not fit the budget.
    fn halted(&self) -> &'static str {
        match self.steps.last() {
            Some(s) if s.measured.unreachable.is_some() => "unreachable",
            _ => "budget",
        }
    }

    /// Run one step if the budget allows it and the target answered the last one:
    /// Some(passed), or None when the search must stop.
    async fn step<F, Fut>(&mut self, run: &mut F, rate: f64, repeat: usize) -> Option<bool>
    where
        F: FnMut(f64, u64) -> Fut,
        Fut: Future<Output = Measured>,
    {
        if self.halted() == "unreachable" {
            return None;
        }
        let o = &self.opts;
        let span = o.requests as f64 / rate;
        let at_s = self.started.elapsed().as_secs_f64();
        if at_s + span + self.longest_overrun > o.budget_s {
            return None;
        }
        let seed = o.seed.wrapping_add(self.steps.len() as u64);
        let measured = run(rate, seed).await;
        self.longest_overrun = self
            .longest_overrun
            .max(measured.duration_s - span)
            .max(0.0);
        let why = failure(&measured, o.attainment);
        let passed = why.is_empty();
        self.steps.push(Step {
            rate,
            repeat,
            seed,
            at_s,
            passed,
            why,
            measured,
        });
        Some(passed)
    }
}

/// Why a step fails (empty when it passes): too few requests met the SLOs, or the server's
/// queue grew through it (saturation fails a step even under loose SLOs).
fn failure(m: &Measured, attainment: f64) -> String {
    let mut why = Vec::new();
    if m.requests + m.errors == 0 {
        why.push("no request completed".to_string());
    } else if m.attainment + 1e-9 < attainment {
        why.push(format!(
            "{:.1} % of requests met the SLOs, below the {:.1} % required",
            m.attainment * 100.0,
            attainment * 100.0
        ));
    }
    if let Some(s) = &m.saturated {
        why.push(format!("saturated: {s}"));
    }
    why.join("; ")
}

/// The capacity interval from every step (see the module's doc).
pub fn interval(steps: &[Step]) -> (Option<f64>, Option<f64>) {
    let mut rates: Vec<f64> = steps.iter().map(|s| s.rate).collect();
    rates.sort_by(f64::total_cmp);
    rates.dedup();
    let all = |r: f64, passed: bool| {
        steps
            .iter()
            .filter(|s| s.rate == r)
            .all(|s| s.passed == passed)
    };
    let low = rates.iter().take_while(|&&r| all(r, true)).last().copied();
    let high = rates
        .iter()
        .rev()
        .take_while(|&&r| all(r, false))
        .last()
        .copied();
    (low, high)
}

/// The knee of latency vs rate (Kneedle on the normalised curve of each rate's median E2EL
/// p90): the rate where the curve sits farthest below the chord from the lowest rate to the
/// highest, i.e. where latency stops being flat. None with fewer than 3 rates or a flat curve.
pub fn knee(steps: &[Step]) -> Option<f64> {
    let curve = curve(steps, "e2el", |s| s.p90);
    if curve.len() < 3 {
        return None;
    }
    let (x0, x1) = (curve[0].0, curve[curve.len() - 1].0);
    let ys = curve.iter().map(|p| p.1);
    let (y0, y1) = (
        ys.clone().fold(f64::INFINITY, f64::min),
        ys.fold(f64::NEG_INFINITY, f64::max),
    );
    if x1 <= x0 || y1 <= y0 {
        return None;
    }
    curve
        .iter()
        .map(|&(x, y)| (x, (x - x0) / (x1 - x0) - (y - y0) / (y1 - y0)))
        .filter(|p| p.1 > 0.0)
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|p| p.0)
}

/// Latency vs rate: for each rate tried (ascending), the median over its runs of `pick` of
/// `metric`'s distribution.
pub fn curve(steps: &[Step], metric: &str, pick: impl Fn(&Summary) -> f64) -> Vec<(f64, f64)> {
    let mut rates: Vec<f64> = steps.iter().map(|s| s.rate).collect();
    rates.sort_by(f64::total_cmp);
    rates.dedup();
    rates
        .into_iter()
        .filter_map(|r| {
            let ys: Vec<f64> = steps
                .iter()
                .filter(|s| s.rate == r)
                .filter_map(|s| s.measured.latency.get(metric).map(&pick))
                .collect();
            super::stats::median(&ys).map(|y| (r, y))
        })
        .collect()
}

/// The CDF points a step keeps of one metric: its quantiles at 0, 5, …, 100 %.
pub fn cdf(samples: &[f64]) -> Vec<f64> {
    let sorted = super::stats::sorted_finite(samples);
    if sorted.is_empty() {
        return Vec::new();
    }
    (0..=20)
        .filter_map(|i| super::stats::percentile_sorted(&sorted, i as f64 / 20.0))
        .collect()
}

/// Whether the server's queue grew through a step: the median E2EL of the step's last quarter
/// of requests (in send order) is more than twice its first quarter's and above it by more
/// than 10 ms (GuideLLM's over-saturation test reads the same slope from TTFT and
/// concurrency). `e2el` is in send order.
pub fn saturation(e2el: &[f64]) -> Option<String> {
    let q = e2el.len() / 4;
    if q < 3 {
        return None;
    }
    let first = super::stats::median(&e2el[..q])?;
    let last = super::stats::median(&e2el[e2el.len() - q..])?;
    (last > 2.0 * first && last - first > 10.0).then(|| {
        format!(
            "median E2EL of the last quarter {last:.1} ms against {first:.1} ms in the first: \
             requests queued faster than the server finished them"
        )
    })
}

/// What a saved capacity search is (the first key of its JSON).
pub const CAPACITY_FORMAT: &str = "chatgate-capacity/1";

/// A saved search: what ran, against what, and what it found.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Saved {
    pub format: String,
    pub chatgate: String,
    pub mode: String,
    pub target: String,
    pub suite: String,
    pub slo: crate::suite::MetricMs,
    pub attainment: f64,
    pub arrival: super::Arrival,
    pub capacity: Capacity,
    /// The comparison with --baseline, when there was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<CapacityVerdict>,
}

/// A capacity comparison's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Decision {
    Pass,
    Regression,
    Inconclusive,
}

impl std::fmt::Display for Decision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Decision::Pass => "PASS",
            Decision::Regression => "REGRESSION",
            Decision::Inconclusive => "INCONCLUSIVE",
        })
    }
}

/// A new capacity against a saved one: the ratio new/base is known to lie between
/// new.low/base.high and new.high/base.low; a regression is a drop beyond `max_drop`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CapacityVerdict {
    pub decision: Decision,
    pub base: (Option<f64>, Option<f64>),
    pub new: (Option<f64>, Option<f64>),
    /// The bounds of new/base the intervals allow.
    pub ratio_low: Option<f64>,
    pub ratio_high: Option<f64>,
    /// The allowed drop (0.1: a capacity 10 % lower still passes).
    pub max_drop: f64,
    pub reason: String,
    /// INCONCLUSIVE only: what would decide it.
    pub to_decide: Option<String>,
}

/// Compare a new capacity interval with a saved one.
pub fn compare(base: &Capacity, new: &Capacity, max_drop: f64) -> CapacityVerdict {
    let floor = 1.0 - max_drop;
    // Least favourable ratio: the new interval's low end over the base's high end.
    let ratio_low = match (new.low, base.high) {
        (Some(n), Some(b)) => Some(n / b),
        (Some(_), None) | (None, _) => None,
    };
    // Most favourable: new high over base low (no new high: it never failed, unbounded).
    let ratio_high = match (new.high, base.low) {
        (Some(n), Some(b)) => Some(n / b),
        (None, Some(_)) => Some(f64::INFINITY),
        (_, None) => None,
    };
    let pct = |r: f64| format!("{:+.1} %", (r - 1.0) * 100.0);
    let (decision, reason) = match (ratio_low, ratio_high) {
        (_, Some(h)) if h < floor => (
            Decision::Regression,
            format!(
                "capacity fell from {} to {}: even the most favourable reading ({}) is a drop beyond the {:.0} % allowed",
                base.describe(),
                new.describe(),
                pct(h),
                max_drop * 100.0
            ),
        ),
        (Some(l), _) if l >= floor => (
            Decision::Pass,
            format!(
                "capacity {} against {}: even the least favourable reading ({}) is within the {:.0} % allowed",
                new.describe(),
                base.describe(),
                pct(l),
                max_drop * 100.0
            ),
        ),
        _ => (
            Decision::Inconclusive,
            format!(
                "capacity {} against {}: the change lies between {} and {}, which straddles the {:.0} % drop allowed",
                new.describe(),
                base.describe(),
                ratio_low.map_or("unknown".into(), pct),
                ratio_high.map_or("unknown".into(), |h| if h.is_finite() { pct(h) } else { "no upper bound".into() }),
                max_drop * 100.0
            ),
        ),
    };
    let to_decide = (decision == Decision::Inconclusive).then(|| to_decide(base, new, floor));
    CapacityVerdict {
        decision,
        base: (base.low, base.high),
        new: (new.low, new.high),
        ratio_low,
        ratio_high,
        max_drop,
        reason,
        to_decide,
    }
}

/// How to decide an INCONCLUSIVE comparison: the resolution both searches need so their
/// intervals fall on one side of the allowed drop, and the bisection steps (runs) that takes.
fn to_decide(base: &Capacity, new: &Capacity, floor: f64) -> String {
    let mid = |c: &Capacity| match (c.low, c.high) {
        (Some(l), Some(h)) => Some((l * h).sqrt()),
        _ => None,
    };
    let (Some(b), Some(n)) = (mid(base), mid(new)) else {
        return "an interval is open-ended: raise --max-rate (or lower --rate) so both searches find a failing and a passing rate".into();
    };
    // With both intervals of relative width w around their midpoints, the ratio's interval is
    // about (n/b)·(1 ± w); it clears the floor when w < |n/b − floor| / (n/b).
    let ratio = n / b;
    let margin = (ratio - floor).abs() / ratio;
    if margin < 0.002 {
        return format!(
            "the capacity ratio {ratio:.3} sits on the allowed floor {floor:.3}: no search can decide it; \
             the suite decides what INCONCLUSIVE does ([latency] inconclusive)"
        );
    }
    let width = |c: &Capacity| match (c.low, c.high) {
        (Some(l), Some(h)) if l > 0.0 => h / l - 1.0,
        _ => f64::INFINITY,
    };
    let now = width(base).max(width(new)).max(margin);
    let halvings = (now / margin).log2().ceil().max(1.0) as usize;
    let runs = halvings * 2 + 2 * new.options.repeats.max(1);
    format!(
        "rerun both searches with --resolution {:.3} or finer: about {halvings} more bisection steps each, \
         {runs} more runs of {} requests",
        margin * 0.9,
        new.options.requests
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A D/D/1 queue with service time `s` seconds, run with `n` constant arrivals at `rate`:
    /// request k waits max(0, k·(s − 1/rate)) and meets the SLO when s + wait ≤ `slo` seconds.
    fn queue(s: f64, slo: f64, n: usize) -> impl FnMut(f64, u64) -> std::future::Ready<Measured> {
        move |rate: f64, _seed: u64| {
            let e2el: Vec<f64> = (0..n)
                .map(|k| (s + (k as f64 * (s - 1.0 / rate)).max(0.0)) * 1e3)
                .collect();
            let met = e2el.iter().filter(|&&e| e <= slo * 1e3).count();
            let mut latency = IndexMap::new();
            latency.insert("e2el".into(), Summary::from_samples(&e2el).unwrap());
            std::future::ready(Measured {
                requests: n,
                attainment: met as f64 / n as f64,
                saturated: saturation(&e2el),
                latency,
                duration_s: n as f64 / rate,
                ..Measured::default()
            })
        }
    }

    fn opts() -> SearchOptions {
        SearchOptions {
            start: 1.0,
            min_rate: 0.01,
            max_rate: 10_000.0,
            resolution: 0.05,
            repeats: 2,
            budget_s: 1e9,
            attainment: 0.9,
            requests: 100,
            seed: 7,
        }
    }

    fn run(o: SearchOptions, s: f64) -> Capacity {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(search(o, queue(s, 3.0 * s, 100)))
    }

    #[test]
    fn the_interval_contains_the_queue_capacity() {
        // Service 20 ms: 50 requests/s keeps up; just above it the queue grows, and requests
        // miss a 60 ms SLO once k·(s − 1/λ) > 40 ms.
        let c = run(opts(), 0.020);
        let (l, h) = (c.low.unwrap(), c.high.unwrap());
        assert!(
            l <= 51.2 && h >= 50.0 && h / l - 1.0 <= 0.05 + 1e-9,
            "{c:?}"
        );
        assert_eq!(c.stopped, "converged");
        // Both ends ran twice.
        assert_eq!(c.steps.iter().filter(|s| s.repeat == 1).count(), 2);
        assert!(c.knee.is_some_and(|k| k <= h), "{:?}", c.knee);
        assert!(
            c.saturated_at.is_some_and(|r| r >= l),
            "{:?}",
            c.saturated_at
        );
    }

    #[test]
    fn a_slower_server_regresses_and_a_coarse_search_is_inconclusive() {
        let base = run(opts(), 0.020);
        let slow = run(opts(), 0.040);
        let v = compare(&base, &slow, 0.1);
        assert_eq!(v.decision, Decision::Regression, "{}", v.reason);
        assert_eq!(compare(&base, &base, 0.1).decision, Decision::Pass);
        let coarse = SearchOptions {
            resolution: 0.5,
            ..opts()
        };
        let (b, n) = (run(coarse.clone(), 0.020), run(coarse, 0.021));
        let v = compare(&b, &n, 0.1);
        assert_eq!(v.decision, Decision::Inconclusive, "{}", v.reason);
        assert!(
            v.to_decide.as_deref().unwrap().contains("--resolution"),
            "{v:?}"
        );
    }

    #[test]
    fn disagreeing_repeats_widen_the_interval() {
        let mk = |rate: f64, passed: bool| Step {
            rate,
            repeat: 0,
            seed: 0,
            at_s: 0.0,
            passed,
            why: String::new(),
            measured: Measured::default(),
        };
        let steps = [
            mk(10.0, true),
            mk(20.0, true),
            mk(20.0, false),
            mk(40.0, false),
            mk(30.0, true),
        ];
        // 20 passed once and failed once; 30 passed, above it only failures.
        assert_eq!(interval(&steps), (Some(10.0), Some(40.0)));
    }

    #[test]
    fn the_budget_stops_the_search() {
        let o = SearchOptions {
            budget_s: 0.0,
            ..opts()
        };
        let c = run(o, 0.020);
        assert_eq!((c.stopped.as_str(), c.steps.len()), ("budget", 0));
        assert_eq!(c.describe(), "unknown (no step ran)");
    }

    #[test]
    fn a_server_that_never_fails_is_at_least_the_maximum() {
        let o = SearchOptions {
            max_rate: 8.0,
            ..opts()
        };
        let c = run(o, 0.001);
        assert_eq!(
            (c.low, c.high, c.stopped.as_str()),
            (Some(8.0), None, "max_rate")
        );
        assert!(c.describe().contains("no rate up to the maximum failed"));
        // Steps that failed, each above a pass at a higher rate (noisy Poisson steps): no upper
        // bound, and the description says the runs disagreed rather than that nothing failed.
        let mut noisy = c.clone();
        noisy.steps[0].passed = false;
        noisy.high = None;
        let d = noisy.describe();
        assert!(d.contains("disagreed") && !d.contains("no rate"), "{d}");
    }
}
