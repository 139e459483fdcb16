//! The streaming client's own cost, which sits inside every latency it measures:
//! - SSE parsing throughput (bytes/s and events/s) over a recorded-style stream of 2,000 chat
//!   chunks, fed as one buffer and as 64-byte and 1-byte reads;
//! - `HttpTarget::chat` against a loopback server that streams 500 pre-built chunks as fast as
//!   it can: wall time per request (elements = events), and the `client_overhead` the target
//!   reports for itself (the measured time is the summed overhead, so criterion's time per
//!   iteration is the overhead per request).
//!
//!     cargo bench --bench sse
use std::hint::black_box;
use std::time::Duration;

use chatgate::endpoint::openai::{HttpOptions, HttpTarget};
use chatgate::endpoint::sse::SseParser;
use chatgate::exchange::ChatRequest;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A stream shaped like vLLM's: role chunk, `n` content chunks, finish, usage, `[DONE]`.
fn recorded_stream(n: usize) -> Vec<u8> {
    let words = [
        "The", " answer", " is", " 7", ".", " Ünï", "cøde", " 😀", " and", " more",
    ];
    let chunk = |delta: serde_json::Value, finish: serde_json::Value| {
        json!({"id": "chatcmpl-9f2c1e0b7a", "object": "chat.completion.chunk",
            "created": 1_760_000_000, "model": "tiny-chat", "system_fingerprint": "fp_3a1b2c",
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
            "usage": null})
    };
    let mut s = String::new();
    let mut push = |v: serde_json::Value| s.push_str(&format!("data: {v}\n\n"));
    push(chunk(
        json!({"role": "assistant", "content": ""}),
        json!(null),
    ));
    for i in 0..n {
        push(chunk(
            json!({"content": words[i % words.len()]}),
            json!(null),
        ));
    }
    push(chunk(json!({}), json!("stop")));
    push(
        json!({"id": "chatcmpl-9f2c1e0b7a", "object": "chat.completion.chunk",
        "choices": [], "usage": {"prompt_tokens": 20, "completion_tokens": n, "total_tokens": n + 20}}),
    );
    s.push_str("data: [DONE]\n\n");
    s.into_bytes()
}

fn parse_in(bytes: &[u8], read: usize) -> usize {
    let mut p = SseParser::new();
    let mut out = Vec::new();
    let mut n = 0;
    for piece in bytes.chunks(read) {
        p.push_into(piece, &mut out);
        n += out.len();
        out.clear();
    }
    p.finish();
    n
}

fn bench_parse(c: &mut Criterion) {
    let stream = recorded_stream(2000);
    let events = parse_in(&stream, stream.len()) as u64;
    let mut g = c.benchmark_group("sse_parse");
    g.sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    for (name, read) in [
        ("one_buffer", stream.len()),
        ("reads_64", 64),
        ("reads_1", 1),
    ] {
        g.throughput(Throughput::Bytes(stream.len() as u64));
        g.bench_function(format!("bytes/{name}"), |b| {
            b.iter(|| parse_in(black_box(&stream), read))
        });
        g.throughput(Throughput::Elements(events));
        g.bench_function(format!("events/{name}"), |b| {
            b.iter(|| parse_in(black_box(&stream), read))
        });
    }
    g.finish();
}

/// A keep-alive loopback server answering every request with `body` as an SSE stream.
async fn stream_server(body: Vec<u8>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    let mut response = head.into_bytes();
    response.extend_from_slice(&body);
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let response = response.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut tmp = [0u8; 8192];
                loop {
                    // One request: its head, then its Content-Length body.
                    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                        match sock.read(&mut tmp).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&tmp[..n]),
                        }
                        continue;
                    };
                    let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                    let len: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse().ok())
                        .unwrap_or(0);
                    while buf.len() < end + 4 + len {
                        match sock.read(&mut tmp).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&tmp[..n]),
                        }
                    }
                    buf.drain(..end + 4 + len);
                    if sock.write_all(&response).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    url
}

fn bench_client(c: &mut Criterion) {
    const CHUNKS: usize = 500;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let url = rt.block_on(stream_server(recorded_stream(CHUNKS)));
    let target = HttpTarget::new(HttpOptions {
        base_url: url,
        model: "tiny-chat".into(),
        ..HttpOptions::default()
    })
    .expect("target");
    let req = ChatRequest {
        messages: vec![json!({"role": "user", "content": "hi"})],
        stream: true,
        ..ChatRequest::default()
    };
    let mut g = c.benchmark_group("http_stream_client");
    g.sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .throughput(Throughput::Elements(CHUNKS as u64));
    g.bench_function("chat_wall", |b| {
        b.iter(|| {
            let rec = rt.block_on(target.chat(&req)).expect("a stream");
            black_box(rec.timing.events.len())
        })
    });
    g.bench_function("chat_client_overhead", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let rec = target.chat(&req).await.expect("a stream");
                    total += rec.timing.client_overhead;
                }
                total
            })
        })
    });
    g.finish();
}

criterion_group!(benches, bench_parse, bench_client);
criterion_main!(benches);
