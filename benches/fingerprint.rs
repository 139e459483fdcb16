//! The cost of the checkpoint fingerprint's reference, by model size and reference kind: what
//! `gate` pays per probe with a local `[reference]` (one teacher-forced pass over the prompt and
//! the server's 16 fingerprint tokens, `cached_logits`), and what loading the reference holds.
//!
//! Always the trained fixture (models/tiny-chat); real shapes when given, generated (GBs, not
//! committed) by `scripts/experiments/real_shape.py`:
//!
//!     ~/.cache/chatgate/venv-transformers-serve/bin/python scripts/experiments/real_shape.py \
//!         --shape qwen2.5-0.5b --out /tmp/qwen-shape
//!     CHATGATE_BENCH_SHAPES=/tmp/qwen-shape cargo bench --bench fingerprint
//!
//! (`CHATGATE_BENCH_KINDS=float` or `q8_0` measures one kind; scripts/experiments/
//! fingerprint-at-scale.sh runs each in a process of its own for its peak memory.)
//!
//! Each model is measured as a float reference (its safetensors, held as F32 by candle) and as a
//! Q8_0 GGUF of the same weights (converted by chatgate's own HF→GGUF writer, then quantized
//! with llama.cpp's Q8_0 block layout). Load time, resident memory after loading and the memory
//! estimate the gate refuses by are printed beside criterion's figures. A recorded reference
//! (`lock --fingerprint`) loads nothing: its cost is the gate's JSON read (docs/benchmarks.md).
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::Instant;

use candle_core::quantized::GgmlDType;
use chatgate::endpoint::candle::{memory, CandleModel};
use criterion::{criterion_group, criterion_main, Criterion};
use serde_json::json;

/// Tokens of a reply the fingerprint scores (chain/online/checkpoint.rs FINGERPRINT_TOKENS).
const FINGERPRINT_TOKENS: usize = 16;

/// The reference kinds measured: both, or the one `CHATGATE_BENCH_KINDS` names (`float`,
/// `q8_0`), so that each kind's peak memory can be read off a process of its own
/// (scripts/experiments/fingerprint-at-scale.sh).
fn kinds() -> Vec<&'static str> {
    let wanted = std::env::var("CHATGATE_BENCH_KINDS").unwrap_or_default();
    ["float", "q8_0"]
        .into_iter()
        .filter(|k| wanted.is_empty() || wanted.split(',').any(|w| w == *k))
        .collect()
}

fn shapes() -> Vec<PathBuf> {
    let mut dirs = vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("models/tiny-chat")];
    if let Ok(v) = std::env::var("CHATGATE_BENCH_SHAPES") {
        dirs.extend(v.split(':').filter(|s| !s.is_empty()).map(PathBuf::from));
    }
    dirs
}

/// One of this process's memory figures now, from /proc (Linux); 0 elsewhere.
fn status_bytes(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(field))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// Resident memory: the process's own (anonymous) pages. Pages of a mapped weights file
/// (`RssFile`) count in the process's RSS too, but they are the page cache's, clean, and
/// reclaimed under pressure: the estimate the gate refuses by is about the anonymous part.
fn rss_bytes() -> u64 {
    status_bytes("RssAnon:")
}

/// A Q8_0 GGUF of `dir`'s weights: `dir/model-q8_0.gguf` when a run before made it (so that a
/// measured run does not pay the conversion), else made in `out` — from `dir`'s own model.gguf
/// if it ships one, else from the HF files linked there, which chatgate's converter writes as an
/// F32 model.gguf; then the matrices are quantized to Q8_0. Kept beside `dir` when it is not
/// the repository's fixture.
fn q8_0_of(dir: &Path, out: &Path) -> PathBuf {
    let kept = dir.join("model-q8_0.gguf");
    if kept.is_file() {
        return kept;
    }
    std::fs::create_dir_all(out).expect("mkdir");
    for e in std::fs::read_dir(dir).expect("read dir") {
        let p = e.expect("entry").path();
        let name = p.file_name().expect("name").to_owned();
        let is_gguf = p.extension().is_some_and(|x| x == "gguf");
        if p.is_file() && !is_gguf && !out.join(&name).exists() {
            std::os::unix::fs::symlink(&p, out.join(&name)).expect("link");
        }
    }
    // A model that ships its own GGUF (the fixture's tokenizer is one llama.cpp's converter
    // does not know) is quantized from it.
    let shipped = dir.join("model.gguf");
    let f32_gguf = if shipped.is_file() {
        shipped
    } else {
        chatgate::standin::rewrite_gguf(out).expect("convert to GGUF");
        out.join("model.gguf")
    };
    let in_repo = dir.starts_with(env!("CARGO_MANIFEST_DIR"));
    let q8 = if in_repo {
        out.join("model-q8_0.gguf")
    } else {
        kept
    };
    chatgate::standin::requantize_gguf(&f32_gguf, &q8, GgmlDType::Q8_0).expect("quantize");
    if f32_gguf.starts_with(out) {
        std::fs::remove_file(&f32_gguf).expect("remove the F32 GGUF");
    }
    q8
}

/// A prompt and the model's own 16 greedy tokens: what the gate scores per probe.
fn probe(model: &mut CandleModel) -> (Vec<u32>, Vec<u32>) {
    let (_, prompt) = model
        .render_chat(
            &[json!({"role": "user", "content": "Name three colours of the sea at dawn."})],
            None,
            true,
        )
        .expect("render");
    let reply = model
        .generate(
            &chatgate::endpoint::GenerateRequest {
                prompt_ids: prompt.clone(),
                max_tokens: FINGERPRINT_TOKENS,
                ignore_eos: true,
                ..Default::default()
            },
            &mut |_| true,
        )
        .expect("generate");
    (prompt, reply.ids)
}

fn bench(c: &mut Criterion) {
    let scratch = tempfile::tempdir().expect("tmp");
    let mut group = c.benchmark_group("fingerprint");
    group.sample_size(10);
    for (i, dir) in shapes().into_iter().enumerate() {
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        for kind in kinds() {
            let path = match kind {
                "float" => dir.clone(),
                _ => q8_0_of(&dir, &scratch.path().join(i.to_string())),
            };
            let estimate = memory::estimate(&path).expect("an estimate");
            let before = rss_bytes();
            let started = Instant::now();
            let mut model = CandleModel::load(&path).expect("the reference loads");
            println!(
                "{name} {kind}: {} parameters held as {}; loaded in {:.1} s, resident +{} anonymous, {} of mapped files (estimate {})",
                estimate.parameters,
                estimate.held_as,
                started.elapsed().as_secs_f64(),
                memory::show(rss_bytes().saturating_sub(before)),
                memory::show(status_bytes("RssFile:")),
                memory::show(estimate.bytes),
            );
            let (prompt, reply) = probe(&mut model);
            group.bench_function(
                format!("{name}/{kind}/score {FINGERPRINT_TOKENS} tokens"),
                |b| {
                    b.iter(|| {
                        black_box(
                            model
                                .cached_logits(black_box(&prompt), black_box(&reply))
                                .expect("scores"),
                        )
                    })
                },
            );
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
