//! `chatgate bench --mode capacity` against a target: the search of `latency::capacity`, each
//! step an open-loop run of the suite's prompts at the step's rate (`gate::latency::load`), with
//! the server's `/metrics` scraped before the step, every half second through it, and after it.
use std::time::{Duration, Instant};

use indexmap::IndexMap;

use crate::endpoint::spec::Target;
use crate::latency::capacity::{self, Capacity, Measured, SearchOptions};
use crate::latency::server_view::{self, Reading, StepView};
use crate::latency::{Arrival, Metric, Schedule};
use crate::replay::prompts::Prompt;
use crate::suite::{MetricMs, Suite};

/// How often the server's gauges are read during a step.
const SCRAPE_EVERY: Duration = Duration::from_millis(500);

/// Everything a capacity search runs with.
pub struct CapacityRun<'a> {
    pub suite: &'a Suite,
    pub target: &'a Target,
    pub prompts: &'a [Prompt],
    pub slo: MetricMs,
    pub arrival: Arrival,
    pub warmup: usize,
    pub max_in_flight: usize,
    pub search: SearchOptions,
    /// Print a line per step on stderr.
    pub log: bool,
}

/// The metrics a step keeps (distribution and CDF), by report name.
const KEPT: [(Metric, &str); 4] = [
    (Metric::Ttft, "ttft"),
    (Metric::Tpot, "tpot"),
    (Metric::Itl, "itl"),
    (Metric::E2el, "e2el"),
];

/// Warm the target up, then search.
pub async fn run(r: &CapacityRun<'_>) -> Capacity {
    if r.warmup > 0 {
        // Unmeasured requests, before the first step's scrape, so the server's counts over each
        // step are the step's own.
        if let Ok(one) = Schedule::generate(1, 1.0, Arrival::Constant, 0) {
            let _ = super::latency::load(
                r.suite,
                r.target,
                r.prompts,
                &one,
                None,
                r.warmup - 1,
                0,
                None,
                None,
            )
            .await;
        }
    }
    let scrapes = has_metrics(r.target).await;
    capacity::search(r.search.clone(), |rate, seed| step(r, rate, seed, scrapes)).await
}

/// Whether the target answers `GET /metrics` with something chatgate reads.
async fn has_metrics(target: &Target) -> bool {
    scrape(target, Instant::now())
        .await
        .is_some_and(|r| r.stack.is_some())
}

/// One scrape, or None when the target has no readable `/metrics`.
async fn scrape(target: &Target, since: Instant) -> Option<Reading> {
    let Target::Http(http) = target else {
        return None;
    };
    let resp = http.get("/metrics").await.ok()?;
    if resp.status != 200 || resp.body.len() > server_view::MAX_SCRAPE_BYTES {
        return None;
    }
    let text = String::from_utf8_lossy(&resp.body);
    Some(server_view::read(&text, since.elapsed().as_secs_f64()))
}

/// One step: `search.requests` requests at `rate` on the schedule `seed` draws.
async fn step(r: &CapacityRun<'_>, rate: f64, seed: u64, scrapes: bool) -> Measured {
    let started = Instant::now();
    let Ok(schedule) = Schedule::generate(r.search.requests, rate, r.arrival, seed) else {
        return Measured::default();
    };
    let mut readings = Vec::new();
    if scrapes {
        readings.extend(scrape(r.target, started).await);
    }
    let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
    let during = async {
        let mut seen = Vec::new();
        if !scrapes {
            return seen;
        }
        let mut tick = tokio::time::interval(SCRAPE_EVERY);
        tick.tick().await;
        loop {
            tokio::select! {
                _ = &mut stopped => return seen,
                _ = tick.tick() => seen.extend(scrape(r.target, started).await),
            }
        }
    };
    let load = async {
        let run = super::latency::load(
            r.suite,
            r.target,
            r.prompts,
            &schedule,
            None,
            0,
            r.max_in_flight,
            Some(&r.slo),
            None,
        )
        .await;
        let _ = stop.send(());
        run
    };
    let (run, seen) = tokio::join!(load, during);
    readings.extend(seen);
    if scrapes {
        readings.extend(scrape(r.target, started).await);
    }
    let mut m = measured(&run, started.elapsed().as_secs_f64());
    m.server = StepView::from(readings);
    if let Some(view) = &m.server {
        let exact = !run.summary.n_out_estimated && run.summary.n_out_unknown == 0;
        if run.summary.errors == 0 {
            m.notes.extend(
                view.disagreements(
                    run.summary.requests,
                    exact.then_some(run.summary.n_out_total),
                )
                .into_iter()
                .map(|d| format!("client and server disagree: {d}")),
            );
        }
        if let Some(ttft) = m.latency.get("ttft") {
            m.notes.extend(view.queue_explains(ttft.p50));
        }
    }
    if r.log {
        eprintln!("{}", step_line(rate, seed, &m, &r.search));
    }
    m
}

/// The step's figures from its load run.
fn measured(run: &super::latency::LoadRun, duration_s: f64) -> Measured {
    let s = &run.summary;
    let per_request: Vec<_> = run
        .samples
        .iter()
        .filter_map(|x| x.metrics.as_ref())
        .collect();
    let mut latency = IndexMap::new();
    let mut cdf = IndexMap::new();
    for (metric, name) in KEPT {
        if let Some(summary) = s.metrics.get(&metric) {
            latency.insert(name.to_string(), *summary);
        }
        let all: Vec<f64> = per_request.iter().flat_map(|m| m.samples(metric)).collect();
        if !all.is_empty() {
            cdf.insert(name.to_string(), capacity::cdf(&all));
        }
    }
    // E2EL in send order (samples are in index order, and the schedule is in time order).
    let e2el: Vec<f64> = per_request.iter().filter_map(|m| m.e2el).collect();
    Measured {
        requests: s.requests,
        errors: s.errors,
        attainment: s.slo_attainment.unwrap_or(0.0),
        achieved_rate: s.request_rate,
        saturated: capacity::saturation(&e2el),
        latency,
        cdf,
        send_late_ms: s.drift,
        duration_s,
        server: None,
        notes: Vec::new(),
        unreachable: run.unreachable.clone(),
    }
}

/// "capacity step 40.00/s (seed 3): 100 ok, 0 errors, 97.0 % met the SLOs, TTFT p50 21.3 ms"
fn step_line(rate: f64, seed: u64, m: &Measured, o: &SearchOptions) -> String {
    let met = m.attainment * 100.0;
    let verdict = if m.requests + m.errors > 0
        && m.attainment + 1e-9 >= o.attainment
        && m.saturated.is_none()
    {
        "pass"
    } else {
        "fail"
    };
    let ttft = m
        .latency
        .get("ttft")
        .map(|t| format!(", TTFT p50 {:.1} ms p90 {:.1} ms", t.p50, t.p90))
        .unwrap_or_default();
    format!(
        "capacity step {rate:.2}/s (seed {seed}): {verdict}: {} ok, {} errors, {met:.1} % met the SLOs{ttft}",
        m.requests, m.errors
    )
}
