//! Per-request overhead of `chatgate serve`: a non-streamed chat request for max_tokens 1 over
//! loopback HTTP, against an in-process `generate()` of the same prompt ids. The difference is
//! what the server adds: HTTP, JSON, validation, the template render, the queue and the
//! blocking-thread hop.
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use chatgate::endpoint::candle::CandleModel;
use chatgate::endpoint::{GenerateRequest, SamplingParams};
use chatgate::serve::{self, ServeOptions};
use criterion::{criterion_group, criterion_main, Criterion};
use serde_json::json;

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tiny-chatml");

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn bench_serve(c: &mut Criterion) {
    let messages = json!([{"role": "user", "content": "What is the capital of France?"}]);
    let body =
        json!({"model": "tiny-chatml", "messages": messages, "temperature": 0, "max_tokens": 1});

    // In-process: the same prompt ids, one token.
    let mut model = CandleModel::load(Path::new(FIXTURE)).expect("the fixture loads");
    let msgs = messages.as_array().cloned().unwrap_or_default();
    let (_, ids) = model.render_chat(&msgs, None, true).expect("renders");
    let req = GenerateRequest {
        prompt_ids: ids,
        max_tokens: 1,
        sampling: SamplingParams::default(),
        ..GenerateRequest::default()
    };
    let mut in_process = || {
        model
            .generate(&req, &mut |_| true)
            .expect("generates")
            .ids
            .len()
    };

    // Over HTTP: a server on a runtime of its own, a keep-alive client.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let state = serve::load(&ServeOptions {
        model: PathBuf::from(FIXTURE),
        ..ServeOptions::default()
    })
    .expect("the server state loads");
    let server = rt
        .block_on(serve::start(state, "127.0.0.1:0"))
        .expect("binds");
    let url = format!("{}/v1/chat/completions", server.url());
    let client = reqwest::Client::new();
    let over_http = || {
        rt.block_on(async {
            let resp = client.post(&url).json(&body).send().await.expect("request");
            assert!(resp.status().is_success());
            resp.bytes().await.expect("body").len()
        })
    };

    let mut group = c.benchmark_group("serve_overhead");
    group.measurement_time(Duration::from_secs(8));
    group.bench_function("in_process_generate_max_tokens_1", |b| {
        b.iter(&mut in_process)
    });
    group.bench_function("http_chat_max_tokens_1", |b| b.iter(over_http));
    group.finish();

    // The difference, measured interleaved so both see the same machine load.
    let (mut a, mut h) = (vec![], vec![]);
    for _ in 0..200 {
        let t = Instant::now();
        in_process();
        a.push(t.elapsed().as_secs_f64() * 1e6);
        let t = Instant::now();
        over_http();
        h.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let (ma, mh) = (median(a), median(h));
    println!(
        "serve_overhead: median in-process generate {ma:.0} µs, HTTP chat {mh:.0} µs, \
         per-request overhead {:.0} µs ({:.1}x)",
        mh - ma,
        mh / ma
    );
    let _ = rt.block_on(server.stop());
}

criterion_group!(benches, bench_serve);
criterion_main!(benches);
