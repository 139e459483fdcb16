//! Weight hashing throughput, measured in the same run against the system's `sha256sum` on the
//! same file (the aim: at least 80% of its throughput).
//!
//!     cargo bench --bench hashing
use std::hint::black_box;
use std::io::Write;
use std::process::Command;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};

const SIZE: usize = 256 << 20;

fn bench(c: &mut Criterion) {
    let mut file = tempfile::NamedTempFile::new().expect("temp file");
    // Incompressible-looking bytes; content does not change sha256's speed, but keep it honest.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let chunk: Vec<u8> = (0..1 << 20)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    for _ in 0..SIZE / chunk.len() {
        file.write_all(&chunk).expect("write");
    }
    file.flush().expect("flush");
    let path = file.path().to_path_buf();
    // Warm the page cache so both contenders read from memory.
    chatgate::artifacts::sha256_file(&path).expect("hash");

    let mut g = c.benchmark_group("sha256-256MiB");
    g.throughput(Throughput::Bytes(SIZE as u64));
    g.sample_size(10);
    g.bench_function("chatgate::sha256_file", |b| {
        b.iter(|| black_box(chatgate::artifacts::sha256_file(&path).expect("hash")))
    });
    if Command::new("sha256sum").arg("--version").output().is_ok() {
        g.bench_function("system sha256sum", |b| {
            b.iter(|| {
                let out = Command::new("sha256sum")
                    .arg(&path)
                    .output()
                    .expect("sha256sum");
                assert!(out.status.success());
                black_box(out.stdout)
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
