//! The passes over the whole vocabulary that every generated or scored token pays, beside the
//! way they were written before 2026-12-07 and candle's own log-softmax, in the same run:
//! - log-sum-exp (a token's logprob; every position the reference scores);
//! - the top 5 logprobs (what `gate` asks a server for, and what the reference reports);
//! - greedy argmax;
//! - one sampled draw at temperature 1 with no top-k or top-p (a seeded sampled probe).
//!
//!     cargo bench --bench vocabulary
//!
//! On a tiny body (a stand-in, a small real model) these passes were a quarter of a token's
//! cost: the vocabulary is 151,665 (Qwen2.5) to 262,144 (Gemma 3) wide whatever the model's size.
use std::hint::black_box;

use candle_core::{Device, Tensor};
use chatgate::endpoint::candle::sampling::{self, Rng, Sampler};
use chatgate::endpoint::SamplingParams;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

/// Logits shaped like a model's over `n` tokens: a long tail and a few far above it.
fn logits(n: usize) -> Vec<f32> {
    let mut rng = Rng::new(11);
    (0..n)
        .map(|_| {
            let u = rng.next_f64();
            (if u > 0.9995 {
                12.0 + u * 4.0
            } else {
                u * 10.0 - 6.0
            }) as f32
        })
        .collect()
}

/// Log-sum-exp as it was: libm's f64 `exp` per value after the maximum.
fn logsumexp_f64(l: &[f32]) -> f32 {
    let max = l.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = l.iter().map(|&v| f64::from(v - max).exp()).sum();
    max + sum.ln() as f32
}

/// The top `n` as it was: an index array of the whole vocabulary, a selection, a sort.
fn top_by_selection(l: &[f32], n: usize, idx: &mut Vec<u32>) -> usize {
    let desc = |a: &u32, b: &u32| l[*b as usize].total_cmp(&l[*a as usize]).then(a.cmp(b));
    idx.clear();
    idx.extend(0..l.len() as u32);
    idx.select_nth_unstable_by(n - 1, desc);
    idx.truncate(n);
    idx.sort_unstable_by(desc);
    idx.len()
}

/// A draw as it was: every token's mass in f64 (libm's `exp`), their sum, then a walk.
fn draw_token_by_token(l: &[f32], probs: &mut Vec<f64>, rng: &mut Rng) -> usize {
    let max = l.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    probs.clear();
    probs.extend(l.iter().map(|&v| f64::from(v - max).exp()));
    let total: f64 = probs.iter().sum();
    let target = rng.next_f64() * total;
    let mut acc = 0.0;
    probs
        .iter()
        .position(|&p| {
            acc += p;
            target < acc
        })
        .unwrap_or(l.len() - 1)
}

fn bench(c: &mut Criterion) {
    for (name, n) in [("151k", 151_665usize), ("262k", 262_144)] {
        let l = logits(n);
        let mut group = c.benchmark_group(format!("vocabulary/{name}"));
        group.throughput(Throughput::Elements(n as u64));
        group.bench_function("logsumexp", |b| {
            b.iter(|| sampling::logsumexp(black_box(&l)).expect("no NaN"))
        });
        group.bench_function("logsumexp, f64 libm exp (before)", |b| {
            b.iter(|| logsumexp_f64(black_box(&l)))
        });
        let tensor = Tensor::new(l.as_slice(), &Device::Cpu).expect("tensor");
        group.bench_function("candle_nn log_softmax", |b| {
            b.iter(|| candle_nn::ops::log_softmax(black_box(&tensor), 0).expect("log_softmax"))
        });
        let lse = sampling::logsumexp(&l).expect("no NaN");
        let mut scratch = Vec::new();
        group.bench_function("top 5 logprobs", |b| {
            b.iter(|| sampling::top_logprobs(black_box(&l), lse, 5, &mut scratch))
        });
        group.bench_function("top 5, selection over every id (before)", |b| {
            b.iter(|| top_by_selection(black_box(&l), 5, &mut scratch))
        });
        group.bench_function("argmax", |b| b.iter(|| sampling::argmax(black_box(&l))));
        let params = SamplingParams {
            temperature: 1.0,
            top_p: 1.0,
            top_k: None,
            repetition_penalty: 1.0,
            seed: 7,
        };
        let mut sampler = Sampler::new(&params, n, &[]).expect("sampler");
        group.bench_function("sampled draw, temperature 1", |b| {
            b.iter(|| sampler.pick(black_box(&l)))
        });
        let mut rng = Rng::new(7);
        let mut probs = Vec::new();
        group.bench_function("sampled draw, a token at a time (before)", |b| {
            b.iter(|| draw_token_by_token(black_box(&l), &mut probs, &mut rng))
        });
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
