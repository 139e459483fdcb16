//! How faithfully the open-loop load generator keeps to its schedule, and what it adds to the
//! latencies it measures. A loopback axum server sleeps a known 20 ms, then streams a few SSE
//! chunks; a plain reqwest client drives it at 50 req/s (Poisson, seeded, 100 requests).
//! Printed: requested vs achieved send rate, send timing error (actual − scheduled, p50/p99),
//! and measured TTFT minus the known sleep (p50/p99): the client + loopback overhead.
//! The criterion benches then time a shorter run, schedule generation, and the bootstrap.
use std::convert::Infallible;
use std::hint::black_box;
use std::time::{Duration, Instant};

use axum::response::sse::{Event, Sse};
use axum::routing::post;
use axum::Router;
use chatgate::exchange::{OutputEvent, OutputKind, Record, Usage};
use chatgate::latency::{
    compare, open_loop, Arrival, CompareOptions, Outcome, RequestMetrics, RunSummary, Schedule,
    Summary,
};
use criterion::{criterion_group, criterion_main, Criterion, SamplingMode};
use futures_util::StreamExt;

/// The server's known service time before the first chunk.
const SLEEP: Duration = Duration::from_millis(20);
/// Content chunks per reply.
const CHUNKS: usize = 4;

/// Sleep, then stream `CHUNKS` content deltas, a usage chunk and `[DONE]`.
async fn handler() -> Sse<impl futures_util::Stream<Item = Result<Event, Infallible>>> {
    tokio::time::sleep(SLEEP).await;
    let mut events: Vec<Result<Event, Infallible>> = (0..CHUNKS)
        .map(|i| {
            Ok(Event::default().data(format!(
                r#"{{"choices":[{{"index":0,"delta":{{"content":"tok{i} "}}}}]}}"#
            )))
        })
        .collect();
    events.push(Ok(Event::default().data(format!(
        r#"{{"choices":[],"usage":{{"prompt_tokens":5,"completion_tokens":{CHUNKS}}}}}"#
    ))));
    events.push(Ok(Event::default().data("[DONE]")));
    Sse::new(futures_util::stream::iter(events))
}

/// Start the server on a free loopback port; returns its chat URL.
async fn start_server() -> String {
    let app = Router::new().route("/v1/chat/completions", post(handler));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("local addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    format!("http://{addr}/v1/chat/completions")
}

/// One streamed request, timed as METRICS.md says (events are chunks carrying content).
async fn request(client: reqwest::Client, url: String, t_sched: Instant) -> Result<Record, String> {
    let mut rec = Record::new();
    rec.timing.t_sched = t_sched;
    let body = serde_json::json!({"model": "bench", "stream": true,
        "messages": [{"role": "user", "content": "hi"}]});
    rec.timing.t_send = Instant::now();
    let resp = client
        .post(&url)
        .json(&body)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    rec.timing.t_headers = Some(Instant::now());
    let mut stream = resp.bytes_stream();
    let mut overhead = Duration::ZERO;
    while let Some(chunk) = stream.next().await {
        let at = Instant::now();
        let chunk = chunk.map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&chunk);
        for data in text.lines().filter_map(|l| l.strip_prefix("data: ")) {
            if data.contains("\"content\"") {
                rec.timing.events.push(OutputEvent {
                    at,
                    kind: OutputKind::Content,
                    tokens: None,
                });
            } else if data.contains("\"usage\"") {
                rec.usage = Some(Usage {
                    prompt_tokens: Some(5),
                    completion_tokens: Some(CHUNKS as u64),
                    total_tokens: None,
                });
            }
        }
        overhead += at.elapsed();
    }
    rec.timing.t_end = Instant::now();
    rec.timing.client_overhead = overhead;
    Ok(rec)
}

/// Run `n` Poisson arrivals at `rate` against the server.
async fn run(url: &str, client: &reqwest::Client, n: usize, rate: f64) -> Vec<Outcome<String>> {
    let schedule = Schedule::generate(n, rate, Arrival::Poisson, 7).expect("valid schedule");
    open_loop(&schedule, 3, 0, |_, t_sched| {
        request(client.clone(), url.to_string(), t_sched)
    })
    .await
}

fn fmt(s: Option<Summary>) -> String {
    s.map_or("-".into(), |s| {
        format!("p50 {:.3} ms  p99 {:.3} ms", s.p50, s.p99)
    })
}

/// The fidelity report: one 100-request run at 50 req/s.
fn report(rt: &tokio::runtime::Runtime, url: &str, client: &reqwest::Client) {
    let (n, rate) = (100, 50.0);
    let outcomes = rt.block_on(run(url, client, n, rate));
    let schedule = Schedule::generate(n, rate, Arrival::Poisson, 7).expect("valid schedule");
    let planned = (n - 1) as f64 / schedule.span().as_secs_f64();
    let summary = RunSummary::from(&outcomes, None, |_| None);
    let sends: Vec<Instant> = outcomes
        .iter()
        .filter_map(|o| o.result.as_ref().ok().map(|r| r.timing.t_send))
        .collect();
    let span = sends
        .iter()
        .max()
        .zip(sends.iter().min())
        .map_or(0.0, |(a, b)| (*a - *b).as_secs_f64());
    let achieved = if span > 0.0 {
        (sends.len() - 1) as f64 / span
    } else {
        0.0
    };
    let over_sleep: Vec<f64> = outcomes
        .iter()
        .filter_map(|o| o.result.as_ref().ok())
        .filter_map(|r| RequestMetrics::from_record(r, |_| None).ttft)
        .map(|t| t - SLEEP.as_secs_f64() * 1e3)
        .collect();
    println!(
        "loadgen/open_loop_poisson: {n} requests, {} errors",
        summary.errors
    );
    println!(
        "  requested rate   {rate:.1} req/s (λ; this seed's 100 arrivals: {planned:.1} req/s)"
    );
    println!("  achieved rate    {achieved:.1} req/s (sends of this run)");
    println!("  send − scheduled {}", fmt(summary.drift));
    println!(
        "  TTFT − 20 ms     {}",
        fmt(Summary::from_samples(&over_sleep))
    );
    println!(
        "  client overhead  {} µs/event (p50)",
        summary
            .client_overhead_us_per_event
            .map_or("-".into(), |s| format!("{:.2}", s.p50))
    );
    if let Some(w) = &summary.drift_warning {
        println!("  warning: {w}");
    }
}

fn bench_loadgen(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let url = rt.block_on(start_server());
    let client = reqwest::Client::new();
    report(&rt, &url, &client);

    let mut g = c.benchmark_group("loadgen");
    g.sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5));
    // 20 requests at 50 req/s: the run takes the schedule's span plus one request.
    g.bench_function("open_loop_poisson_50rps_20req", |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                black_box(rt.block_on(run(&url, &client, 20, 50.0)));
            }
            start.elapsed()
        })
    });
    g.finish();

    let mut g = c.benchmark_group("latency");
    g.sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    g.bench_function("schedule_poisson_10k", |b| {
        b.iter(|| Schedule::generate(black_box(10_000), 50.0, Arrival::Poisson, 1))
    });
    let base: Vec<f64> = (0..50).map(|i| 100.0 + (i % 7) as f64).collect();
    let new: Vec<f64> = (0..50).map(|i| 104.0 + (i % 5) as f64).collect();
    g.bench_function("compare_bootstrap_2000x50", |b| {
        b.iter(|| {
            compare(
                black_box(&base),
                black_box(&new),
                &CompareOptions::default(),
            )
        })
    });
    g.finish();
}

criterion_group!(benches, bench_loadgen);
criterion_main!(benches);
