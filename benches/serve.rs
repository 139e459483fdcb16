//! Per-request overhead of `chatgate serve`: a non-streamed chat request for max_tokens 1 over
//! loopback HTTP, against an in-process `generate()` of the same prompt ids. The difference is
//! what the server adds: HTTP, JSON, validation, the template render, the queue and the
//! blocking-thread hop. Measured on the tiny fixture and on a stand-in that carries Gemma-2's
//! real 256k-token tokenizer: work that grows with the vocabulary (until 2026-12-01, a copy of
//! the whole tokenizer on every request, ~0.3 s at 256k) shows only on the second.
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use chatgate::endpoint::candle::CandleModel;
use chatgate::endpoint::{GenerateRequest, SamplingParams};
use chatgate::serve::{self, ServeOptions};
use criterion::{criterion_group, criterion_main, Criterion};
use serde_json::json;

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tiny-chatml");
const GEMMA2_TOKENIZER: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/corpus/models/gemma-2-2b-it"
);
const GEMMA2_TEMPLATE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/corpus/templates/google-gemma-2-2b-it.jinja"
);

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn bench_serve(c: &mut Criterion) {
    bench_model(c, "serve_overhead", Path::new(FIXTURE));
    // A stand-in on Gemma-2's real tokenizer (tests/corpus), built where the bench runs.
    let scratch = tempfile::tempdir().expect("tempdir");
    let out = scratch.path().join("gemma2-vocab");
    chatgate::standin::build(&chatgate::standin::Options {
        from: PathBuf::from(GEMMA2_TOKENIZER),
        out: out.clone(),
        seed: 0,
        layers: 2,
        hidden: 64,
        head_dim: 16,
        force: false,
        reply: None,
        real_shape: false,
    })
    .expect("the 256k-vocabulary stand-in builds");
    std::fs::copy(GEMMA2_TEMPLATE, out.join("chat_template.jinja")).expect("Gemma-2's template");
    bench_model(c, "serve_overhead_256k_vocabulary", &out);
}

/// The in-process and over-HTTP cost of a one-token chat reply from the model in `dir`.
fn bench_model(c: &mut Criterion, group_name: &str, dir: &Path) {
    let messages = json!([{"role": "user", "content": "What is the capital of France?"}]);
    let served = chatgate::endpoint::spec::default_model_name(dir);
    let body = json!({"model": served, "messages": messages, "temperature": 0, "max_tokens": 1});

    // In-process: the same prompt ids, one token.
    let mut model = CandleModel::load(dir).expect("the model loads");
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
        model: dir.to_path_buf(),
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

    let mut group = c.benchmark_group(group_name);
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
        "{group_name}: median in-process generate {ma:.0} µs, HTTP chat {mh:.0} µs, \
         per-request overhead {:.0} µs ({:.1}x)",
        mh - ma,
        mh / ma
    );
    let _ = rt.block_on(server.stop());
}

criterion_group!(benches, bench_serve);
criterion_main!(benches);
