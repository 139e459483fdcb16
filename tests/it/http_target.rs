//! The HTTP target over real loopback HTTP: against our own `chatgate serve` (the real fixture
//! model) for the happy paths, and against small hand-written servers that misbehave on
//! purpose (byte-by-byte streams, keep-alives, no `[DONE]`, dropped connections, silence,
//! garbage, 500s) for everything a real server can get wrong.
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chatgate::endpoint::candle::CandleModel;
use chatgate::endpoint::openai::{CallError, HttpOptions, HttpTarget};
use chatgate::exchange::{ChatRequest, OutputKind, Record};
use chatgate::serve::{self, RunningServer, ServeOptions};
use serde_json::{json, Map, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn tiny_chat() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("models/tiny-chat")
}

fn one_thread() {
    // Two cores are shared by several test processes: keep candle to one thread.
    std::env::set_var("CANDLE_NUM_THREADS", "1");
    std::env::set_var("RAYON_NUM_THREADS", "1");
}

async fn start_tiny_chat() -> RunningServer {
    one_thread();
    let opts = ServeOptions {
        model: tiny_chat(),
        ..ServeOptions::default()
    };
    let state = tokio::task::spawn_blocking(move || serve::load(&opts))
        .await
        .expect("load task")
        .expect("tiny-chat loads");
    serve::start(state, "127.0.0.1:0")
        .await
        .expect("the server binds")
}

fn options(url: &str) -> HttpOptions {
    HttpOptions {
        base_url: url.to_string(),
        model: "tiny-chat".into(),
        connect_timeout: Duration::from_secs(5),
        read_timeout: Duration::from_secs(30),
        total_timeout: Duration::from_secs(60),
        ..HttpOptions::default()
    }
}

fn target(url: &str) -> HttpTarget {
    HttpTarget::new(options(url)).expect("a valid target")
}

fn question() -> Vec<Value> {
    vec![json!({"role": "user", "content": "What is 3+4?"})]
}

fn greedy(stream: bool) -> ChatRequest {
    let mut extra = Map::new();
    extra.insert("return_token_ids".into(), json!(true));
    ChatRequest {
        messages: question(),
        max_tokens: Some(32),
        temperature: Some(0.0),
        top_logprobs: Some(2),
        stream,
        extra,
        ..ChatRequest::default()
    }
}

fn check_timing(rec: &Record) {
    let t = &rec.timing;
    let headers = t.t_headers.expect("headers were timed");
    assert!(t.t_send <= headers && headers <= t.t_end);
    for pair in t.events.windows(2) {
        assert!(pair[0].at <= pair[1].at, "events out of order");
    }
    for e in &t.events {
        assert!(headers <= e.at && e.at <= t.t_end);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_plain_and_streamed_agree_on_our_server() {
    let server = start_tiny_chat().await;
    // A trailing /v1/ is accepted.
    let t = target(&format!("{}/v1/", server.url()));

    let plain = t.chat(&greedy(false)).await.expect("plain chat");
    assert_eq!(plain.text, "3+4 is 7.");
    assert_eq!(plain.finish_reason.as_deref(), Some("stop"));
    assert_eq!(plain.model.as_deref(), Some("tiny-chat"));
    assert!(plain.system_fingerprint.is_some());
    let ids = plain.token_ids.clone().expect("return_token_ids gives ids");
    let usage = plain.usage.expect("usage");
    assert_eq!(usage.completion_tokens, Some(ids.len() as u64));
    let lps = plain.logprobs.clone().expect("logprobs were asked for");
    assert_eq!(lps.len(), ids.len());
    assert!(lps.iter().all(|l| l.logprob <= 0.0 && l.top.len() == 2));
    assert!(plain.stream.is_none());
    assert_eq!(plain.timing.events.len(), 1, "a plain reply is one event");
    assert_eq!(plain.timing.events[0].tokens, Some(ids.len() as u32));
    check_timing(&plain);

    // The prompt ids the server reports are the ones the model renders locally.
    let model = tokio::task::spawn_blocking(|| CandleModel::load(&tiny_chat()))
        .await
        .expect("load task")
        .expect("tiny-chat loads");
    let (_, local_ids) = model.render_chat(&question(), None, true).expect("render");
    assert_eq!(plain.prompt_ids.as_deref(), Some(local_ids.as_slice()));
    assert_eq!(usage.prompt_tokens, Some(local_ids.len() as u64));

    let streamed = t.chat(&greedy(true)).await.expect("streamed chat");
    assert_eq!(streamed.text, plain.text);
    assert_eq!(streamed.finish_reason, plain.finish_reason);
    assert_eq!(streamed.token_ids, plain.token_ids);
    assert_eq!(streamed.usage, plain.usage);
    assert_eq!(streamed.prompt_ids, plain.prompt_ids);
    let slps = streamed.logprobs.clone().expect("streamed logprobs");
    assert_eq!(
        slps.iter().map(|l| &l.token).collect::<Vec<_>>(),
        lps.iter().map(|l| &l.token).collect::<Vec<_>>()
    );
    let trace = streamed.stream.clone().expect("a stream trace");
    assert!(trace.done && !trace.after_done && trace.usage_chunk);
    assert!(trace.malformed.is_empty());
    assert!(trace
        .content_type
        .as_deref()
        .is_some_and(|c| c.starts_with("text/event-stream")));
    // One output event per chunk that carried content; the role and usage chunks are not.
    let content_chunks = trace
        .chunks
        .iter()
        .filter(|c| {
            c["choices"][0]["delta"]["content"]
                .as_str()
                .is_some_and(|s| !s.is_empty())
        })
        .count();
    assert!(content_chunks >= 2);
    assert_eq!(streamed.timing.events.len(), content_chunks);
    assert!(streamed
        .timing
        .events
        .iter()
        .all(|e| e.kind == OutputKind::Content && e.tokens.is_some_and(|n| n >= 1)));
    check_timing(&streamed);
    assert!(streamed.timing.client_overhead > Duration::ZERO);
    server.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completion_ids_and_tokenization_match_the_local_model() {
    let server = start_tiny_chat().await;
    let t = target(&server.url());
    let model = tokio::task::spawn_blocking(|| CandleModel::load(&tiny_chat()))
        .await
        .expect("load task")
        .expect("tiny-chat loads");
    let (_, prompt_ids) = model.render_chat(&question(), None, true).expect("render");

    let rec = t
        .completion_ids(&prompt_ids, 32, Some(3))
        .await
        .expect("completion over ids");
    assert_eq!(
        rec.text, "3+4 is 7.",
        "the raw-ids path bypasses no template"
    );
    let lps = rec.logprobs.expect("completions logprobs");
    assert!(!lps.is_empty());
    for l in &lps {
        assert!(!l.top.is_empty() && l.top.len() <= 4);
        // Sorted, most likely first.
        assert!(l.top.windows(2).all(|w| w[0].logprob >= w[1].logprob));
    }
    assert_eq!(
        rec.usage.and_then(|u| u.prompt_tokens),
        Some(prompt_ids.len() as u64)
    );

    let caps = t.introspect().await;
    assert!(caps.reachable && caps.health && caps.vllm_tokenize);
    assert!(!caps.llamacpp_tokenize && !caps.tgi_chat_tokenize && !caps.extras_tokenize);
    assert!(caps.props.is_none() && caps.info.is_none());
    assert_eq!(caps.models.expect("models")["data"][0]["id"], "tiny-chat");

    let served = t
        .tokenize_chat(&question(), None, true)
        .await
        .expect("tokenize_chat");
    assert_eq!(served, Some(prompt_ids.clone()));
    let without_prompt = t
        .tokenize_chat(&question(), None, false)
        .await
        .expect("tokenize_chat")
        .expect("ids");
    assert!(without_prompt.len() < prompt_ids.len());
    let text_ids = t
        .tokenize_text("What is 3+4?", false)
        .await
        .expect("tokenize_text");
    assert_eq!(
        text_ids,
        Some(model.encode("What is 3+4?").expect("encode"))
    );

    // Raw probes return any status without failing.
    let r = t.get("/no/such/route").await.expect("an HTTP answer");
    assert_eq!(r.status, 404);
    let r = t
        .post_bytes(
            "/v1/chat/completions",
            b"{not json".to_vec(),
            "application/json",
        )
        .await
        .expect("an HTTP answer");
    assert_eq!(r.status, 400);
    assert!(r.json.is_some_and(|v| v["error"].is_object()));
    server.stop().await.expect("clean stop");
}

// ---------------------------------------------------------------------------------------
// Hand-written servers that misbehave on purpose.

/// What a scripted server does after reading a request.
#[derive(Clone)]
enum Step {
    /// Raw bytes, as they are.
    Raw(Vec<u8>),
    /// One HTTP chunk per byte, flushed one by one.
    Bytewise(Vec<u8>),
    /// One HTTP chunk.
    Chunk(Vec<u8>),
    /// The chunked body's terminator.
    End,
    /// Hold the connection open and say nothing.
    Hang,
    /// The same chunk again and again, until the client hangs up.
    Endless(Vec<u8>),
}

const SSE_HEAD: &str =
    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";

fn json_response(status: &str, body: &Value) -> Step {
    let b = body.to_string();
    Step::Raw(
        format!(
            "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{b}",
            b.len()
        )
        .into_bytes(),
    )
}

/// A server answering every request with `steps`; returns its URL and the request heads seen.
async fn scripted(steps: Vec<Step>) -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            let steps = steps.clone();
            let log = log.clone();
            tokio::spawn(async move {
                let _ = answer(sock, &steps, &log).await;
            });
        }
    });
    (url, seen)
}

async fn answer(
    mut sock: TcpStream,
    steps: &[Step],
    log: &Mutex<Vec<String>>,
) -> std::io::Result<()> {
    sock.set_nodelay(true)?;
    let head = read_request(&mut sock).await?;
    log.lock().expect("log").push(head);
    for step in steps {
        match step {
            Step::Raw(b) => sock.write_all(b).await?,
            Step::Chunk(b) => write_chunk(&mut sock, b).await?,
            Step::Bytewise(b) => {
                for byte in b {
                    write_chunk(&mut sock, std::slice::from_ref(byte)).await?;
                    tokio::time::sleep(Duration::from_micros(200)).await;
                }
            }
            Step::End => sock.write_all(b"0\r\n\r\n").await?,
            Step::Hang => tokio::time::sleep(Duration::from_secs(3600)).await,
            Step::Endless(b) => loop {
                write_chunk(&mut sock, b).await?;
            },
        }
        sock.flush().await?;
    }
    Ok(())
}

async fn write_chunk(sock: &mut TcpStream, b: &[u8]) -> std::io::Result<()> {
    sock.write_all(format!("{:x}\r\n", b.len()).as_bytes())
        .await?;
    sock.write_all(b).await?;
    sock.write_all(b"\r\n").await
}

/// Read the request head and its Content-Length body; returns the head.
async fn read_request(sock: &mut TcpStream) -> std::io::Result<String> {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 4096];
    let head_end = loop {
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p + 4;
        }
        let n = sock.read(&mut tmp).await?;
        if n == 0 {
            return Ok(String::from_utf8_lossy(&buf).into_owned());
        }
        buf.extend_from_slice(&tmp[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let len = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    while buf.len() < head_end + len {
        let n = sock.read(&mut tmp).await?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&tmp[..n]);
    }
    Ok(head)
}

fn sse(v: &Value) -> String {
    format!("data: {v}\n\n")
}

fn delta(d: Value) -> Value {
    json!({"id": "x", "object": "chat.completion.chunk", "model": "m",
        "choices": [{"index": 0, "delta": d, "finish_reason": null}]})
}

fn finish(reason: &str) -> Value {
    json!({"id": "x", "object": "chat.completion.chunk", "model": "m",
        "choices": [{"index": 0, "delta": {}, "finish_reason": reason}]})
}

fn streamed_hi() -> ChatRequest {
    ChatRequest {
        messages: vec![json!({"role": "user", "content": "hi"})],
        stream: true,
        ..ChatRequest::default()
    }
}

#[tokio::test]
async fn byte_by_byte_stream_with_keepalives_split_utf8_and_usage_chunk() {
    let mut body = String::new();
    body.push_str(": keep-alive\n\n");
    body.push_str(&sse(&delta(json!({"role": "assistant", "content": ""}))));
    body.push_str(&sse(&delta(json!({"content": "Hi 😀"}))));
    body.push_str(":\r\n\r\n");
    body.push_str(&sse(&delta(json!({"content": " ünïcode"}))));
    body.push_str(&sse(&finish("stop")));
    body.push_str(": ping\n\n");
    body.push_str(&sse(&json!({"id": "x", "choices": [],
        "usage": {"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9}})));
    body.push_str("data: [DONE]\n\n");
    let (url, _) = scripted(vec![
        Step::Raw(SSE_HEAD.into()),
        Step::Bytewise(body.into_bytes()),
        Step::End,
    ])
    .await;
    let rec = target(&url).chat(&streamed_hi()).await.expect("a stream");
    assert_eq!(rec.text, "Hi 😀 ünïcode");
    let trace = rec.stream.clone().expect("trace");
    assert_eq!(trace.comments, 3);
    assert!(trace.done && trace.usage_chunk && !trace.after_done);
    assert!(trace.malformed.is_empty());
    assert_eq!(trace.chunks.len(), 5);
    assert_eq!(
        rec.timing.events.len(),
        2,
        "role, finish and usage chunks are not output"
    );
    assert!(rec.timing.events.iter().all(|e| e.tokens.is_none()));
    assert_eq!(rec.usage.and_then(|u| u.total_tokens), Some(9));
    assert_eq!(rec.finish_reason.as_deref(), Some("stop"));
    assert_eq!(rec.model.as_deref(), Some("m"));
    check_timing(&rec);
}

#[tokio::test]
async fn missing_done_is_not_an_error_and_usage_on_last_chunk_counts() {
    let mut last = finish("length");
    last["usage"] = json!({"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5});
    let body = format!(
        "{}{}{}",
        sse(&delta(json!({"content": "a"}))),
        sse(&delta(json!({"content": "b"}))),
        sse(&last)
    );
    let (url, _) = scripted(vec![
        Step::Raw(SSE_HEAD.into()),
        Step::Chunk(body.into()),
        Step::End,
    ])
    .await;
    let rec = target(&url).chat(&streamed_hi()).await.expect("a stream");
    assert_eq!(rec.text, "ab");
    let trace = rec.stream.expect("trace");
    assert!(!trace.done && !trace.usage_chunk);
    assert_eq!(rec.usage.and_then(|u| u.completion_tokens), Some(2));
    assert_eq!(rec.finish_reason.as_deref(), Some("length"));
}

#[tokio::test]
async fn reasoning_and_tool_call_deltas_are_assembled() {
    let chunks = [
        delta(json!({"role": "assistant", "reasoning_content": "think "})),
        delta(json!({"reasoning_content": "hard"})),
        delta(
            json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": ""}}]}),
        ),
        delta(json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"city\":"}}]})),
        delta(
            json!({"tool_calls": [{"index": 1, "id": "call_2", "type": "function",
            "function": {"name": "now", "arguments": "{}"}}]}),
        ),
        delta(json!({"tool_calls": [{"index": 0, "function": {"arguments": "\"Oslo\"}"}}]})),
        finish("tool_calls"),
    ];
    let mut body: String = chunks.iter().map(sse).collect();
    body.push_str("data: [DONE]\n\n");
    let (url, _) = scripted(vec![
        Step::Raw(SSE_HEAD.into()),
        Step::Chunk(body.into()),
        Step::End,
    ])
    .await;
    let rec = target(&url).chat(&streamed_hi()).await.expect("a stream");
    assert_eq!(rec.reasoning, "think hard");
    assert_eq!(rec.text, "");
    assert_eq!(
        rec.tool_calls,
        vec![
            json!({"id": "call_1", "type": "function",
                "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"}}),
            json!({"id": "call_2", "type": "function",
                "function": {"name": "now", "arguments": "{}"}}),
        ]
    );
    let kinds: Vec<OutputKind> = rec.timing.events.iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        [
            OutputKind::Reasoning,
            OutputKind::Reasoning,
            OutputKind::ToolCall,
            OutputKind::ToolCall,
            OutputKind::ToolCall,
            OutputKind::ToolCall
        ]
    );
    assert_eq!(rec.finish_reason.as_deref(), Some("tool_calls"));
}

#[tokio::test]
async fn plain_reply_with_reasoning_tool_calls_and_llamacpp_logprob_ids() {
    let reply = json!({
        "model": "m", "system_fingerprint": "fp",
        "choices": [{"index": 0, "finish_reason": "tool_calls",
            "message": {"role": "assistant", "content": null, "reasoning": "r",
                "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
            "logprobs": {"content": [
                {"id": 11, "token": "a", "logprob": -0.5, "top_logprobs": [{"id": 11, "token": "a", "logprob": -0.5}]},
                {"token": "token_id:12", "logprob": -1.0, "top_logprobs": [{"token": "token_id:12", "logprob": -1.0}]}
            ]}}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}
    });
    let (url, _) = scripted(vec![json_response("200 OK", &reply)]).await;
    let req = ChatRequest {
        messages: vec![json!({"role": "user", "content": "hi"})],
        ..ChatRequest::default()
    };
    let rec = target(&url).chat(&req).await.expect("a reply");
    assert_eq!(rec.reasoning, "r");
    assert_eq!(rec.tool_calls.len(), 1);
    assert_eq!(rec.token_ids, Some(vec![11, 12]));
    let lps = rec.logprobs.expect("logprobs");
    assert_eq!(lps[1].top[0].id, Some(12));
    assert_eq!(rec.system_fingerprint.as_deref(), Some("fp"));
    assert_eq!(rec.timing.events.len(), 1);
    assert_eq!(rec.timing.events[0].kind, OutputKind::Reasoning);
}

#[tokio::test]
async fn connection_dropped_mid_stream_is_interrupted_with_the_partial_text() {
    let body = format!(
        "{}{}",
        sse(&delta(json!({"content": "Hel"}))),
        "data: {\"choices\": [{\"delta\": {\"content\": \"lo"
    );
    // A chunked body that never gets its terminator: the socket just closes.
    let (url, _) = scripted(vec![Step::Raw(SSE_HEAD.into()), Step::Chunk(body.into())]).await;
    let err = target(&url)
        .chat(&streamed_hi())
        .await
        .expect_err("a dropped stream is an error");
    match &err {
        CallError::Interrupted { partial, .. } => {
            assert_eq!(partial.text, "Hel");
            assert_eq!(partial.timing.events.len(), 1);
            let trace = partial.stream.as_ref().expect("trace");
            assert!(!trace.done);
            assert!(
                trace
                    .malformed
                    .iter()
                    .any(|m| m.contains("incomplete event")),
                "the cut event is recorded: {:?}",
                trace.malformed
            );
        }
        other => panic!("expected Interrupted, got {other:?}"),
    }
    assert!(!err.unreachable());
    assert!(err.to_string().contains("dropped"), "{err}");
}

#[tokio::test]
async fn a_silent_server_times_out_on_read() {
    let (url, _) = scripted(vec![Step::Hang]).await;
    let t = HttpTarget::new(HttpOptions {
        read_timeout: Duration::from_millis(300),
        total_timeout: Duration::from_secs(20),
        ..options(&url)
    })
    .expect("target");
    let err = t
        .chat(&streamed_hi())
        .await
        .expect_err("silence is an error");
    assert!(
        matches!(err, CallError::Timeout { phase: "read", .. }),
        "{err:?}"
    );
    assert!(err.unreachable());
    assert_eq!(err.to_error().exit_code(), 3);
}

#[tokio::test]
async fn a_stream_that_stalls_hits_the_total_timeout() {
    let (url, _) = scripted(vec![
        Step::Raw(SSE_HEAD.into()),
        Step::Chunk(sse(&delta(json!({"content": "a"}))).into()),
        Step::Hang,
    ])
    .await;
    let t = HttpTarget::new(HttpOptions {
        read_timeout: Duration::from_secs(30),
        total_timeout: Duration::from_millis(500),
        ..options(&url)
    })
    .expect("target");
    let err = t
        .chat(&streamed_hi())
        .await
        .expect_err("a stall is an error");
    assert!(
        matches!(err, CallError::Timeout { phase: "total", .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn nothing_listening_is_a_connect_error() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    drop(listener);
    let err = target(&format!("http://{addr}"))
        .chat(&streamed_hi())
        .await
        .expect_err("nobody is there");
    assert!(matches!(err, CallError::Connect { .. }), "{err:?}");
    assert!(err.unreachable());
    assert!(err.to_string().contains(&addr.to_string()), "{err}");
    // Introspection of a dead server finds nothing, without failing.
    let caps = target(&format!("http://{addr}")).introspect().await;
    assert!(!caps.reachable && !caps.vllm_tokenize);
}

#[tokio::test]
async fn garbage_instead_of_sse_is_recorded_not_fatal() {
    let mut body = b"data: this is not json\n\n\xFF\xFE\x00garbage\r\rdata: {\"choices\": [{\"delta\": {\"content\": \"ok\"}}]}\n\n".to_vec();
    body.extend_from_slice(b"data: [DONE]\n\ndata: {\"late\": true}\n\n");
    let (url, _) = scripted(vec![
        Step::Raw(SSE_HEAD.into()),
        Step::Chunk(body),
        Step::End,
    ])
    .await;
    let rec = target(&url)
        .chat(&streamed_hi())
        .await
        .expect("garbage is evidence");
    let trace = rec.stream.expect("trace");
    assert_eq!(trace.malformed, ["this is not json"]);
    assert_eq!(rec.text, "ok");
    assert!(trace.done && trace.after_done);
}

#[tokio::test]
async fn http_500_is_a_status_error() {
    let (url, _) = scripted(vec![json_response(
        "500 Internal Server Error",
        &json!({"error": {"message": "boom"}}),
    )])
    .await;
    let err = target(&url)
        .chat(&streamed_hi())
        .await
        .expect_err("500 is an error");
    match &err {
        CallError::Status { status, body, url } => {
            assert_eq!(*status, 500);
            assert!(body.contains("boom"));
            assert!(url.ends_with("/v1/chat/completions"));
        }
        other => panic!("expected Status, got {other:?}"),
    }
    assert!(!err.unreachable());
}

#[tokio::test]
async fn plain_reply_that_is_not_json_is_a_protocol_error() {
    let (url, _) = scripted(vec![Step::Raw(
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 5\r\n\r\nhello"
            .to_vec(),
    )])
    .await;
    let req = ChatRequest {
        messages: question(),
        ..ChatRequest::default()
    };
    let err = target(&url).chat(&req).await.expect_err("not JSON");
    assert!(matches!(err, CallError::Protocol { .. }), "{err:?}");
}

#[tokio::test]
async fn api_key_is_sent_as_bearer_and_never_shown() {
    const VAR: &str = "CHATGATE_TEST_HTTP_TARGET_KEY";
    const KEY: &str = "sk-test-secret-1234567890";
    std::env::set_var(VAR, KEY);
    let (url, seen) = scripted(vec![json_response(
        "401 Unauthorized",
        &json!({"error": {"message": "bad key"}}),
    )])
    .await;
    let t = HttpTarget::new(HttpOptions {
        api_key_env: Some(VAR.into()),
        ..options(&url)
    })
    .expect("target");
    let err = t.chat(&streamed_hi()).await.expect_err("401");
    let heads = seen.lock().expect("log").clone();
    assert_eq!(heads.len(), 1);
    let auth = heads[0]
        .lines()
        .find_map(|l| l.strip_prefix("authorization: "))
        .expect("an authorization header");
    assert_eq!(auth, format!("Bearer {KEY}"));
    for shown in [
        format!("{t:?}"),
        err.to_string(),
        format!("{err:?}"),
        err.to_error().to_string(),
    ] {
        assert!(!shown.contains(KEY), "the key leaked: {shown}");
    }
    assert!(format!("{t:?}").contains(VAR));

    // Named but unset: a bad-input error naming the variable.
    let missing = "CHATGATE_TEST_HTTP_TARGET_UNSET_KEY";
    std::env::remove_var(missing);
    let e = HttpTarget::new(HttpOptions {
        api_key_env: Some(missing.into()),
        ..options(&url)
    })
    .expect_err("an unset key variable");
    assert_eq!(e.exit_code(), 2);
    assert!(e.to_string().contains(missing), "{e}");
}

#[tokio::test]
async fn request_body_carries_options_extra_body_and_request_extra() {
    // A server that answers with the request body it got, as the message content.
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move {
        if let Ok((mut sock, _)) = listener.accept().await {
            let mut buf = Vec::new();
            let mut tmp = [0u8; 4096];
            loop {
                let n = sock.read(&mut tmp).await.unwrap_or(0);
                if n == 0 {
                    break;
                }
                buf.extend_from_slice(&tmp[..n]);
                let text = String::from_utf8_lossy(&buf).into_owned();
                if let Some((_, body)) = text.split_once("\r\n\r\n") {
                    if serde_json::from_str::<Value>(body).is_ok() {
                        let reply =
                            json!({"choices": [{"message": {"content": body}}]}).to_string();
                        let resp = format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{reply}", reply.len());
                        let _ = sock.write_all(resp.as_bytes()).await;
                        break;
                    }
                }
            }
        }
    });
    let mut extra_body = Map::new();
    extra_body.insert("repeat_penalty".into(), json!(1.0));
    extra_body.insert("top_k".into(), json!(1));
    let t = HttpTarget::new(HttpOptions {
        extra_body,
        ..options(&url)
    })
    .expect("target");
    let mut extra = Map::new();
    extra.insert("top_k".into(), json!(5));
    let req = ChatRequest {
        messages: question(),
        max_tokens: Some(7),
        seed: Some(3),
        stop: vec!["\n".into()],
        top_logprobs: Some(0),
        extra,
        ..ChatRequest::default()
    };
    let rec = t.chat(&req).await.expect("echo");
    let sent: Value = serde_json::from_str(&rec.text).expect("the echoed body");
    assert_eq!(sent["model"], "tiny-chat");
    assert_eq!(sent["max_tokens"], 7);
    assert_eq!(sent["seed"], 3);
    assert_eq!(sent["stop"], json!(["\n"]));
    assert_eq!(sent["logprobs"], true);
    assert_eq!(sent["top_logprobs"], 0);
    assert_eq!(sent["stream"], false);
    assert!(sent.get("stream_options").is_none());
    assert!(
        sent.get("temperature").is_none(),
        "unset fields are not sent"
    );
    assert_eq!(sent["repeat_penalty"], 1.0);
    assert_eq!(sent["top_k"], 5, "the request's extra wins over extra_body");
}

#[test]
fn base_urls_are_validated() {
    for bad in ["", "localhost:8000", "ftp://h/v1", "http://"] {
        let e = HttpTarget::new(options(bad)).expect_err(bad);
        assert_eq!(e.exit_code(), 2, "{bad}");
    }
    for good in [
        "http://h:1",
        "http://h:1/",
        "http://h:1/v1",
        "https://h:1/v1/",
    ] {
        let t = HttpTarget::new(options(good)).expect(good);
        assert!(t.base_url().starts_with("http"), "{good}");
        assert!(!t.base_url().ends_with('/') && !t.base_url().ends_with("/v1"));
    }
    let t = HttpTarget::new(options("http://user:pw@h:1/v1")).expect("userinfo");
    assert!(!format!("{t:?}").contains("pw"));
}

/// A server that never stops sending: the client stops at its size limits, with a protocol
/// error that says which limit, long before any timeout.
#[tokio::test]
async fn endless_bodies_streams_and_lines_stop_at_the_size_limits() {
    let limited = |url: &str| {
        HttpTarget::new(HttpOptions {
            max_body_bytes: 1 << 20,
            max_stream_bytes: 2 << 20,
            max_line_bytes: 1 << 20,
            max_in_flight_bytes: 64 << 20,
            ..options(url)
        })
        .expect("target")
    };
    let event = sse(&delta(json!({"content": "x".repeat(1000)})));
    let cases: Vec<(Vec<Step>, bool, &str)> = vec![
        (
            vec![Step::Raw(SSE_HEAD.into()), Step::Endless(event.into_bytes())],
            true,
            "the stream exceeded 2 MiB",
        ),
        (
            vec![
                Step::Raw(SSE_HEAD.into()),
                Step::Chunk(b"data: ".to_vec()),
                Step::Endless(vec![b'y'; 64 << 10]),
            ],
            true,
            "the SSE line exceeded 1 MiB",
        ),
        (
            vec![
                Step::Raw(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
                        .to_vec(),
                ),
                Step::Chunk(b"{\"choices\": [{\"message\": {\"content\": \"".to_vec()),
                Step::Endless(vec![b'z'; 64 << 10]),
            ],
            false,
            "the reply body exceeded 1 MiB",
        ),
    ];
    for (steps, stream, want) in cases {
        let (url, _) = scripted(steps).await;
        let t0 = std::time::Instant::now();
        let mut req = streamed_hi();
        req.stream = stream;
        let err = limited(&url).chat(&req).await.expect_err("over the limit");
        assert!(
            matches!(&err, CallError::Protocol { detail, .. } if detail.contains(want)),
            "{want}: {err:?}"
        );
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "{want}: {:?}",
            t0.elapsed()
        );
    }
}

/// Many endless streams at once: each is under its own limit, but together they stop at the
/// in-flight limit, so an open-loop bench's memory is bounded however many streams are open.
#[tokio::test]
async fn endless_streams_in_flight_together_stop_at_the_shared_limit() {
    let event = sse(&delta(json!({"content": "x".repeat(1000)})));
    let (url, _) = scripted(vec![
        Step::Raw(SSE_HEAD.into()),
        Step::Endless(event.into_bytes()),
    ])
    .await;
    let t = HttpTarget::new(HttpOptions {
        max_stream_bytes: 64 << 20,
        max_in_flight_bytes: 8 << 20,
        ..options(&url)
    })
    .expect("target");
    let req = streamed_hi();
    let calls = (0..8).map(|_| t.chat(&req));
    let results = futures_util::future::join_all(calls).await;
    let stopped = results
        .iter()
        .filter(|r| {
            matches!(r, Err(CallError::Protocol { detail, .. })
                if detail.contains("the replies in flight together exceeded 8 MiB"))
        })
        .count();
    assert!(stopped >= 1, "{results:?}");
    // Every stream ended at one limit or the other; none read its own 64 MiB.
    assert!(results.iter().all(|r| r.is_err()), "{results:?}");
}

/// A server that turns every request away with 503 and a long Retry-After: chatgate does not
/// wait or retry, says what the server said, and stops sending after three in a row.
#[tokio::test]
async fn overloaded_answers_open_the_breaker_and_show_retry_after() {
    let body = json!({"error": {"message": "overloaded"}}).to_string();
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 3600\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let (url, seen) = scripted(vec![Step::Raw(head.into_bytes())]).await;
    let t = target(&url);
    let t0 = std::time::Instant::now();
    let mut errors = Vec::new();
    for _ in 0..5 {
        errors.push(t.chat(&greedy(false)).await.expect_err("503"));
    }
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    assert!(
        matches!(&errors[0], CallError::Status { status: 503, body, .. }
            if body.contains("Retry-After: 3600") && body.contains("overloaded")),
        "{:?}",
        errors[0]
    );
    assert_eq!(seen.lock().expect("log").len(), 3, "three sent, then none");
    let why = t.breaker_open().expect("the breaker opened");
    assert!(why.contains("turned away as overloaded"), "{why}");
    assert!(errors[4].unreachable(), "{:?}", errors[4]);
}

/// A non-streamed "Hi." reply.
fn hi_reply() -> Value {
    json!({"id": "x", "object": "chat.completion", "model": "tiny-chat",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi."}, "finish_reason": "stop"}]})
}

/// A server on a free port that answers its first connection with [`hi_reply`] at once, and
/// every later one with `later`'s steps, after `delay` when given: its URL.
async fn answers_first_then(later: fn() -> Vec<Step>, delay: Option<Duration>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move {
        let mut n = 0;
        while let Ok((sock, _)) = listener.accept().await {
            n += 1;
            let first = n == 1;
            tokio::spawn(async move {
                let steps = match first {
                    true => vec![json_response("200 OK", &hi_reply())],
                    false => {
                        if let Some(d) = delay {
                            tokio::time::sleep(d).await;
                        }
                        later()
                    }
                };
                let log = Arc::new(Mutex::new(Vec::new()));
                let _ = answer(sock, &steps, &log).await;
            });
        }
    });
    url
}

/// A server that answered, then falls silent: three replies in a row past its own pace open
/// the breaker, and the breaker says the server slowed down (a latency failure, exit 1), not
/// that it is gone (exit 3): it was answering a moment ago. A server that never answered is
/// unreachable (`a_silent_server_times_out_on_read`).
#[tokio::test]
async fn a_server_that_answered_then_stalls_opens_the_breaker_as_slow() {
    let url = answers_first_then(|| vec![Step::Hang], None).await;
    let t = HttpTarget::new(HttpOptions {
        read_timeout: Duration::from_millis(300),
        total_timeout: Duration::from_secs(20),
        ..options(&url)
    })
    .expect("target");
    t.chat(&greedy(false)).await.expect("the first reply");
    assert!(t.breaker_open().is_none());
    for _ in 0..3 {
        let e = t.chat(&greedy(false)).await.expect_err("silence");
        assert!(matches!(e, CallError::Slow { .. }), "{e:?}");
    }
    let why = t.breaker_open().expect("the breaker opened");
    assert!(why.contains("longer than the server's own pace"), "{why}");
    assert!(t.breaker_slow());
}

/// A request known to take far longer than the probes (the long prompt: a 4k-token prefill
/// took 20–35 s on llama-cpp-python where a probe took 1–9) waits the suite's total timeout
/// through a patient client, where the probes' pace would have given up; it does not set the
/// pace for the others.
#[tokio::test]
async fn a_patient_request_waits_past_the_pace_up_to_the_total_timeout() {
    // The first reply at once; every later one after 1.2 s (a long prefill).
    let url = answers_first_then(
        || vec![json_response("200 OK", &hi_reply())],
        Some(Duration::from_millis(1200)),
    )
    .await;
    // (The wait for the headers is connect + read: a loopback connect is instant.)
    let t = HttpTarget::new(HttpOptions {
        read_timeout: Duration::from_millis(300),
        connect_timeout: Duration::from_millis(100),
        total_timeout: Duration::from_secs(20),
        ..options(&url)
    })
    .expect("target");
    t.chat(&greedy(false)).await.expect("the first reply");
    let e = t.chat(&greedy(false)).await.expect_err("past the pace");
    assert!(matches!(e, CallError::Slow { .. }), "{e:?}");
    t.patient()
        .chat(&greedy(false))
        .await
        .expect("a patient request waits");
    // Its 1.2 s did not become the pace: an ordinary request still gives up at 0.3 s.
    let e = t.chat(&greedy(false)).await.expect_err("past the pace");
    assert!(e.to_string().contains("no reply within 0.3 s"), "{e}");
}

/// Invalid UTF-8 in a stream fails the request, as it does in a plain JSON body: U+FFFD is not
/// passed off as the model's text.
#[tokio::test]
async fn a_stream_with_invalid_utf8_is_a_protocol_error() {
    let mut bad =
        b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"caf\xc3 \xff\"}}]}\n\n"
            .to_vec();
    bad.extend_from_slice(b"data: [DONE]\n\n");
    let (url, _) = scripted(vec![
        Step::Raw(SSE_HEAD.into()),
        Step::Chunk(bad),
        Step::End,
    ])
    .await;
    let err = target(&url)
        .chat(&streamed_hi())
        .await
        .expect_err("bad UTF-8");
    assert!(
        matches!(&err, CallError::Protocol { detail, .. } if detail.contains("not valid UTF-8")),
        "{err:?}"
    );
    // Valid UTF-8, U+FFFD included (what vLLM sends for an incomplete character), is fine.
    let good = sse(&delta(json!({"content": "caf\u{fffd}"}))) + "data: [DONE]\n\n";
    let (url, _) = scripted(vec![
        Step::Raw(SSE_HEAD.into()),
        Step::Chunk(good.into_bytes()),
        Step::End,
    ])
    .await;
    let rec = target(&url)
        .chat(&streamed_hi())
        .await
        .expect("valid UTF-8");
    assert_eq!(rec.text, "caf\u{fffd}");
}

/// A server that echoes the key into its reply: the reply is refused at the client, so the key
/// reaches no snapshot, report or bench output.
#[tokio::test]
async fn a_reply_echoing_the_api_key_is_refused() {
    const VAR: &str = "CHATGATE_TEST_ECHO_KEY";
    const KEY: &str = "sk-test-echo-0987654321";
    std::env::set_var(VAR, KEY);
    let reply = json!({"choices": [{"index": 0, "message": {"role": "assistant",
        "content": format!("you sent Bearer {KEY}")}, "finish_reason": "stop"}]});
    let (url, _) = scripted(vec![json_response("200 OK", &reply)]).await;
    let t = HttpTarget::new(HttpOptions {
        api_key_env: Some(VAR.into()),
        ..options(&url)
    })
    .expect("target");
    let err = t.chat(&greedy(false)).await.expect_err("echoed key");
    assert!(
        matches!(&err, CallError::Protocol { detail, .. } if detail.contains("contains the API key")),
        "{err:?}"
    );
    assert!(!format!("{err:?}").contains(KEY));
}

/// A real server that answers one request at a time (llama-cpp-python: two locks in its
/// `server/app.py`), on real weights (SmolLM2-135M Q4_1, scripts/models/install-real-weights.sh):
/// three requests at once, with a read timeout one reply fits in and the queue of three does
/// not. The client learns the pace from the first reply (sent alone) and waits for the queue:
/// every request is answered, none is taken as unreachable (issue 43: the gate said exit 3 on
/// a healthy llama-cpp-python).
#[test]
fn a_server_that_answers_one_at_a_time_is_waited_for_at_its_pace() {
    use crate::common::llama_server;
    let (Some(py), Some(real)) = (
        llama_server::python(),
        crate::fingerprint_real::real_models(),
    ) else {
        return;
    };
    let model = real.join("smollm2-135m-instruct-q4_1.gguf");
    let server = llama_server::start(&py, &model, "smol", &[]);
    let request = ChatRequest {
        messages: vec![json!({"role": "user", "content": "Count from one to fifty, in words."})],
        max_tokens: Some(48),
        temperature: Some(0.0),
        top_logprobs: Some(5),
        ..ChatRequest::default()
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let warm = HttpTarget::new(HttpOptions {
            model: "smol".into(),
            ..options(&server.url)
        })
        .expect("target");
        warm.chat(&request).await.expect("a warm-up reply");
        // The slower of two replies: under CI's load (two tests at a time on two cores) one
        // reply took 3.6 s and the next, sent alone, more than 5.4.
        let mut one = Duration::ZERO;
        for _ in 0..2 {
            let alone = std::time::Instant::now();
            warm.chat(&request).await.expect("one reply");
            one = one.max(alone.elapsed());
        }
        // A read timeout one reply fits in twice over; the third of three queued waits about
        // 3 × one. (The wait for the headers is connect + read: a loopback connect is instant.)
        let t = HttpTarget::new(HttpOptions {
            model: "smol".into(),
            read_timeout: one * 2,
            connect_timeout: Duration::from_millis(100),
            ..options(&server.url)
        })
        .expect("target");
        let replies = futures_util::future::join_all((0..3).map(|_| t.chat(&request))).await;
        for r in &replies {
            r.as_ref()
                .unwrap_or_else(|e| panic!("a queued request failed (one reply: {one:?}): {e}"));
        }
        assert!(t.breaker_open().is_none());
    });
}
