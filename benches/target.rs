//! Greedy decoding throughput of the candle target (prefill + incremental decoding through
//! `CandleModel::generate`, detokenization included):
//! - the fixture (tests/fixtures/tiny-chatml, 2 layers × 64 wide), 64 tokens;
//! - a ~60M-parameter random-init Llama (hidden 512, 8 layers, 8 heads, intermediate 1536,
//!   vocab 32000) built in memory from a `VarMap`, 32 tokens.
//!
//!     CANDLE_NUM_THREADS=1 RAYON_NUM_THREADS=1 cargo bench --bench target
//!
//! candle sizes its thread pools from CANDLE_NUM_THREADS (element-wise ops, quantized matmul)
//! and RAYON_NUM_THREADS (F32 gemm) as the caller sets them; the values are printed.
use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

use candle_core::{DType, Device};
use candle_nn::{VarBuilder, VarMap};
use candle_transformers::models::llama;
use chatgate::artifacts::ModelDir;
use chatgate::endpoint::candle::CandleModel;
use chatgate::endpoint::GenerateRequest;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use serde_json::json;

fn fixture() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-chatml")
}

fn request(model: &CandleModel, tokens: usize) -> GenerateRequest {
    let (_, ids) = model
        .render_chat(
            &[json!({"role": "user", "content": "What is 2+2?"})],
            None,
            true,
        )
        .expect("render");
    GenerateRequest {
        prompt_ids: ids,
        max_tokens: tokens,
        ignore_eos: true,
        ..Default::default()
    }
}

fn random_llama() -> CandleModel {
    let config = llama::Config {
        hidden_size: 512,
        intermediate_size: 1536,
        vocab_size: 32000,
        num_hidden_layers: 8,
        num_attention_heads: 8,
        num_key_value_heads: 8,
        use_flash_attn: false,
        rms_norm_eps: 1e-5,
        rope_theta: 10_000.0,
        bos_token_id: None,
        eos_token_id: None,
        rope_scaling: None,
        max_position_embeddings: 1024,
        tie_word_embeddings: false,
    };
    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu);
    // The fixture's tokenizer: ids past its 512 tokens decode to nothing, which is fine here.
    let dir = ModelDir::open(&fixture()).expect("fixture dir");
    let model = CandleModel::from_llama_varbuilder(dir, config, vb).expect("random llama");
    let params: usize = varmap
        .all_vars()
        .iter()
        .map(|v| v.as_tensor().elem_count())
        .sum();
    println!("random llama: {:.1}M parameters", params as f64 / 1e6);
    model
}

/// Tokens per second over a few plain runs, printed next to criterion's figures.
fn report(name: &str, model: &mut CandleModel, req: &GenerateRequest) {
    let runs = 5;
    let start = Instant::now();
    let mut tokens = 0;
    for _ in 0..runs {
        tokens += model
            .generate(req, &mut |_| true)
            .expect("generate")
            .ids
            .len();
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{name}: {tokens} tokens in {:.1} ms = {:.0} tok/s (prompt {} tokens, prefill included)",
        secs * 1e3,
        tokens as f64 / secs,
        req.prompt_ids.len()
    );
}

fn bench(c: &mut Criterion) {
    let env = |k: &str| std::env::var(k).unwrap_or_else(|_| "(unset)".into());
    println!(
        "CANDLE_NUM_THREADS={} RAYON_NUM_THREADS={} (candle gemm threads: {})",
        env("CANDLE_NUM_THREADS"),
        env("RAYON_NUM_THREADS"),
        candle_core::utils::get_num_threads()
    );

    let mut tiny = CandleModel::load(&fixture()).expect("fixture");
    let tiny_req = request(&tiny, 64);
    report("tiny-chatml greedy 64", &mut tiny, &tiny_req);
    let mut big = random_llama();
    let big_req = request(&big, 32);
    report("random llama 60M greedy 32", &mut big, &big_req);

    let mut g = c.benchmark_group("greedy_decode");
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(5));
    g.throughput(Throughput::Elements(64));
    g.bench_function("tiny-chatml/64", |b| {
        b.iter(|| black_box(tiny.generate(&tiny_req, &mut |_| true).expect("generate")))
    });
    g.throughput(Throughput::Elements(32));
    g.bench_function("random-llama-60m/32", |b| {
        b.iter(|| black_box(big.generate(&big_req, &mut |_| true).expect("generate")))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
