//! The load generator's ceiling: how fast and how wide chatgate's open loop goes on this machine
//! while it still keeps its schedule. The server is a fast Rust known-timing streaming server in
//! a child process of this bench (the same process group; each process then holds its own half
//! of the sockets): it holds its first chunk back ~10 ms and says in that chunk how long it held
//! it by its own clock, so measured TTFT − that time is the client's (and loopback's) error. The client is chatgate's own: `HttpTarget::chat`
//! (the gate's HTTP client and SSE parser) driven by `latency::open_loop`.
//!
//! Two ramps, each step a seeded Poisson schedule:
//! - **rate**: short streams (TTFT 10 ms, then 4 chunks 2 ms apart) at 500 … 8,000 req/s;
//! - **width**: long streams (TTFT 10 ms, then a chunk every 250 ms for H s) at 1,000 req/s, so
//!   about 1,000 × H streams are open at once (1k, 5k, 10k).
//!
//! Each step prints the requested and achieved send rate, the most streams open at once, the
//! send drift (actual − scheduled) p50/p99, the TTFT error p50/p99, errors, and whether it
//! **holds**: drift p99 < 5 ms and TTFT error p50 < 1 ms (issue 13's bar). The criterion part
//! times one short step. Run: `cargo bench --bench ceiling` (about 2 minutes).
use std::convert::Infallible;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::response::sse::{Event, Sse};
use axum::routing::post;
use axum::{Json, Router};
use chatgate::endpoint::openai::{HttpOptions, HttpTarget};
use chatgate::exchange::ChatRequest;
use chatgate::latency::{open_loop, Arrival, RequestMetrics, RunSummary, Schedule, Summary};
use criterion::{criterion_group, Criterion, SamplingMode};
use futures_util::StreamExt;
use serde_json::{json, Value};

/// The server's known time to the first chunk.
const TTFT: Duration = Duration::from_millis(10);
/// Child-process mode: serve on a free loopback port and print it.
const SERVER_ENV: &str = "CHATGATE_CEILING_SERVER";

/// The reply's shape comes with the request: `max_tokens` content chunks after the first, sent
/// `gap_ms` apart.
async fn handler(
    Json(body): Json<Value>,
) -> Sse<impl futures_util::Stream<Item = Result<Event, Infallible>>> {
    let (n, gap_ms) = (
        body["max_tokens"].as_u64().unwrap_or(4),
        body["gap_ms"].as_u64().unwrap_or(2),
    );
    // The server's own timing: how long it really held the first chunk back (a tokio timer
    // overshoots by up to a tick), sent as the first chunk's text.
    let received = Instant::now();
    tokio::time::sleep(TTFT).await;
    let held_us = received.elapsed().as_micros();
    let gap = Duration::from_millis(gap_ms);
    let first = Ok(Event::default().data(format!(
        r#"{{"choices":[{{"index":0,"delta":{{"content":"{held_us}us "}}}}]}}"#
    )));
    let body = futures_util::stream::once(async { first })
        .chain(futures_util::stream::unfold(1, move |i| async move {
            if i > n {
                return None;
            }
            tokio::time::sleep(gap).await;
            Some((chunk(i), i + 1))
        }))
        .chain(futures_util::stream::iter([
            Ok(Event::default().data(format!(
                r#"{{"choices":[],"usage":{{"prompt_tokens":5,"completion_tokens":{}}}}}"#,
                n + 1
            ))),
            Ok(Event::default().data("[DONE]")),
        ]));
    Sse::new(body)
}

/// Content chunk i.
fn chunk(i: u64) -> Result<Event, Infallible> {
    Ok(Event::default().data(format!(
        r#"{{"choices":[{{"index":0,"delta":{{"content":"tok{i} "}}}}]}}"#
    )))
}

/// The child process: serve until killed.
fn serve() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("server runtime");
    rt.block_on(async {
        let app = Router::new().route("/v1/chat/completions", post(handler));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        println!("{}", listener.local_addr().expect("addr"));
        let _ = axum::serve(listener, app).await;
    });
}

/// Start the server child; its base URL.
fn spawn_server() -> (Child, String) {
    let mut child = Command::new(std::env::current_exe().expect("this bench"))
        .env(SERVER_ENV, "1")
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn the server");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("the server's address");
    (child, format!("http://{}", line.trim()))
}

/// One step's figures.
struct Step {
    requested: f64,
    achieved: f64,
    open_peak: usize,
    drift: Option<Summary>,
    ttft_error: Option<Summary>,
    errors: usize,
}

impl Step {
    fn holds(&self) -> bool {
        self.errors == 0
            && self.drift.is_some_and(|d| d.p99 < 5.0)
            && self.ttft_error.is_some_and(|t| t.p50 < 1.0)
    }
}

async fn step(base: &str, rate: f64, seconds: f64, chunks: u64, gap_ms: u64) -> Step {
    let n = (rate * seconds).round() as usize;
    let schedule = Schedule::generate(n, rate, Arrival::Poisson, 7).expect("a valid schedule");
    let target = HttpTarget::new(HttpOptions {
        base_url: base.to_string(),
        model: "ceiling".into(),
        ..HttpOptions::default()
    })
    .expect("the client");
    let mut req = ChatRequest {
        messages: vec![json!({"role": "user", "content": "hi"})],
        max_tokens: Some(chunks as u32),
        stream: true,
        ..ChatRequest::default()
    };
    req.extra.insert("gap_ms".into(), json!(gap_ms));
    let open = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let outcomes = open_loop(&schedule, 0, 0, |_, _| {
        let (target, req, open, peak) = (target.clone(), req.clone(), open.clone(), peak.clone());
        async move {
            let now = open.fetch_add(1, Ordering::Relaxed) + 1;
            peak.fetch_max(now, Ordering::Relaxed);
            let r = target.chat(&req).await;
            open.fetch_sub(1, Ordering::Relaxed);
            r
        }
    })
    .await;
    let summary = RunSummary::from(&outcomes, None, |_| None);
    let sends: Vec<Instant> = outcomes
        .iter()
        .filter_map(|o| o.result.as_ref().ok().map(|r| r.timing.t_send))
        .collect();
    let span = match (sends.iter().min(), sends.iter().max()) {
        (Some(a), Some(b)) => (*b - *a).as_secs_f64(),
        _ => 0.0,
    };
    // TTFT minus the time the server itself held the first chunk back (its first chunk says
    // how long): what the client, the loopback and HTTP add.
    let ttft_error: Vec<f64> = outcomes
        .iter()
        .filter_map(|o| o.result.as_ref().ok())
        .filter_map(|r| {
            let held_ms = r.text.split("us ").next()?.parse::<f64>().ok()? / 1e3;
            Some(RequestMetrics::from_record(r, |_| None).ttft? - held_ms)
        })
        .collect();
    Step {
        requested: rate,
        achieved: if span > 0.0 {
            (sends.len().saturating_sub(1)) as f64 / span
        } else {
            0.0
        },
        open_peak: peak.load(Ordering::Relaxed),
        drift: summary.drift,
        ttft_error: Summary::from_samples(&ttft_error),
        errors: summary.errors,
    }
}

fn print(label: &str, s: &Step) {
    let f =
        |x: Option<Summary>| x.map_or("-".into(), |x| format!("{:>7.3} / {:>8.3}", x.p50, x.p99));
    println!(
        "  {label:<28} {:>7.0} {:>9.1} {:>7} {}  {}  {:>6}  {}",
        s.requested,
        s.achieved,
        s.open_peak,
        f(s.drift),
        f(s.ttft_error),
        s.errors,
        if s.holds() { "holds" } else { "BEHIND" }
    );
}

fn report(rt: &tokio::runtime::Runtime, base: &str) {
    println!("ceiling: chatgate's HTTP client + open loop vs a known-timing server (first chunk held {} ms, by its own clock), child process, loopback", TTFT.as_millis());
    println!(
        "  {:<28} {:>7} {:>9} {:>7} {:>18}  {:>18}  {:>6}",
        "step", "req/s", "achieved", "open", "drift p50/p99 ms", "TTFT err p50/p99", "errors"
    );
    for rate in [500.0, 1000.0, 2000.0, 4000.0, 6000.0, 8000.0] {
        let s = rt.block_on(step(base, rate, 3.0, 4, 2));
        print("rate, short streams", &s);
    }
    for hold_s in [1u64, 5, 10] {
        let chunks = hold_s * 4;
        let s = rt.block_on(step(base, 1000.0, hold_s as f64 + 3.0, chunks, 250));
        print(&format!("width, {hold_s} s streams"), &s);
    }
}

fn bench_ceiling(c: &mut Criterion) {
    let (mut child, base) = spawn_server();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("client runtime");
    report(&rt, &base);
    let mut g = c.benchmark_group("ceiling");
    g.sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(10));
    g.bench_function("open_loop_1000rps_500req_short_streams", |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                std::hint::black_box(rt.block_on(step(&base, 1000.0, 0.5, 4, 2)));
            }
            start.elapsed()
        })
    });
    g.finish();
    let _ = child.kill();
    let _ = child.wait();
}

criterion_group!(benches, bench_ceiling);

fn main() {
    if std::env::var_os(SERVER_ENV).is_some() {
        serve();
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
