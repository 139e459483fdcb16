//! Render + tokenize throughput (conversations per second) on a real template and tokenizer:
//! Qwen2.5-0.5B-Instruct's, over the corpus conversations.
//!
//!     cargo bench --bench render
use std::hint::black_box;
use std::path::Path;

use chatgate::artifacts::ModelDir;
use chatgate::template::{ChatTemplate, RenderRequest};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use serde_json::Value;

fn bench(c: &mut Criterion) {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus");
    let model = ModelDir::open(&corpus.join("models/Qwen2.5-0.5B-Instruct")).expect("corpus model");
    let source = model
        .templates
        .select(false)
        .expect("template")
        .text
        .clone();
    let template = ChatTemplate::new(&source).expect("compiles");
    let tok = &model.tokenizer.as_ref().expect("tokenizer").tokenizer;
    let convs: Vec<Value> = serde_json::from_str(
        &std::fs::read_to_string(corpus.join("goldens/conversations.json")).expect("read"),
    )
    .expect("json");
    let requests: Vec<RenderRequest> = convs
        .iter()
        .map(|c| RenderRequest {
            messages: c["messages"].as_array().cloned().unwrap_or_default(),
            tools: c.get("tools").cloned(),
            add_generation_prompt: true,
            special_tokens: model.special_tokens(),
            ..Default::default()
        })
        .collect();

    let mut g = c.benchmark_group("qwen2.5");
    g.throughput(Throughput::Elements(requests.len() as u64));
    g.bench_function("render", |b| {
        b.iter(|| {
            for r in &requests {
                black_box(template.render(r).expect("render"));
            }
        })
    });
    g.bench_function("render+tokenize", |b| {
        b.iter(|| {
            for r in &requests {
                let text = template.render(r).expect("render").text;
                black_box(tok.encode(text.as_str(), false).expect("encode"));
            }
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
