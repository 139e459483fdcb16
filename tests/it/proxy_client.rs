//! The client boundary over real loopback HTTP: our real server (the trained tiny-chat model)
//! behind `chatgate proxy` started in-process, real requests through it, the recording read
//! back, hostile SSE reassembled by this file's own spec-correct reader, the contract diff on
//! suites whose recordings were made through the proxy, and the real binary.
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::time::Duration;

use chatgate::chain;
use chatgate::proxy::{self, HostileSse, ProxyOptions, RunningProxy};
use chatgate::serve::{self, RunningServer, ServeOptions};
use chatgate::verdict::Severity;
use futures_util::StreamExt;
use serde_json::{json, Value};

const MODEL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/models/tiny-chat");
const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tiny-chatml");

fn one_thread() {
    std::env::set_var("CANDLE_NUM_THREADS", "1");
    std::env::set_var("RAYON_NUM_THREADS", "1");
}

async fn start_server() -> RunningServer {
    one_thread();
    let opts = ServeOptions {
        model: PathBuf::from(MODEL),
        ..ServeOptions::default()
    };
    let state = tokio::task::spawn_blocking(move || serve::load(&opts))
        .await
        .expect("load task")
        .expect("the model loads");
    serve::start(state, "127.0.0.1:0")
        .await
        .expect("the server binds")
}

async fn start_proxy(
    upstream: &str,
    record: Option<&Path>,
    hostile: Option<usize>,
) -> RunningProxy {
    proxy::start(
        &ProxyOptions {
            upstream: upstream.to_string(),
            record: record.map(Path::to_path_buf),
            hostile: hostile.map(|n| HostileSse {
                chunk_bytes: Some(n),
                ..HostileSse::default()
            }),
        },
        "127.0.0.1:0",
    )
    .await
    .expect("the proxy binds")
}

fn chat(stream: bool) -> Value {
    json!({
        "model": "tiny-chat",
        "messages": [{"role": "user", "content": "What is the capital of France?"}],
        "temperature": 0,
        "max_tokens": 12,
        "stream": stream,
    })
}

fn read_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .expect("the recording exists")
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is JSON"))
        .collect()
}

/// A minimal spec-correct SSE reader, deliberately independent of the shared
/// `chatgate::endpoint::sse` reader the proxy itself uses (so a bug there cannot hide here): the
/// whole body at once,
/// CRLF/CR/LF line endings, comments skipped, one optional space after `data:`, data lines
/// joined with `\n`, blank lines dispatch only when there is data.
fn reassemble(body: &[u8]) -> Vec<String> {
    let text = String::from_utf8(body.to_vec()).expect("the whole body is UTF-8");
    let text = text.replace("\r\n", "\n").replace('\r', "\n");
    let mut events = Vec::new();
    let mut data: Option<String> = None;
    for line in text.split('\n') {
        if line.is_empty() {
            events.extend(data.take());
            continue;
        }
        if let Some(v) = line.strip_prefix("data:") {
            let v = v.strip_prefix(' ').unwrap_or(v);
            data = Some(match data.take() {
                Some(d) => format!("{d}\n{v}"),
                None => v.to_string(),
            });
        }
    }
    events
}

/// The body of a streamed POST as the reads the client got.
async fn stream_reads(url: &str, body: &Value) -> (u16, Vec<Vec<u8>>) {
    let resp = reqwest::Client::new()
        .post(url)
        .json(body)
        .send()
        .await
        .expect("request");
    let status = resp.status().as_u16();
    let mut reads = Vec::new();
    let mut s = resp.bytes_stream();
    while let Some(chunk) = s.next().await {
        reads.push(chunk.expect("a body chunk").to_vec());
    }
    (status, reads)
}

/// The joined content deltas of streamed chat payloads.
fn text_of(payloads: &[String]) -> String {
    payloads
        .iter()
        .filter(|p| p.as_str() != "[DONE]")
        .filter_map(|p| {
            let v: Value = serde_json::from_str(p).expect("a JSON chunk");
            v["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_string)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_forwards_and_records_plain_and_streamed_exchanges() {
    let server = start_server().await;
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("client.jsonl");
    let px = start_proxy(&server.url(), Some(&rec), None).await;
    let client = reqwest::Client::new();

    let mut with_key = chat(false);
    with_key["api_key"] = json!("sk-body-789");
    let plain: Value = client
        .post(format!(
            "{}/v1/chat/completions?trace=1&api_key=sk-query-000",
            px.url()
        ))
        .bearer_auth("sk-secret-123")
        .header("x-api-key", "k-456")
        .header("x-auth", "xa-321")
        .header("x-request-source", "tests")
        .json(&with_key)
        .send()
        .await
        .expect("request")
        .json()
        .await
        .expect("JSON");
    let direct: Value = client
        .post(format!("{}/v1/chat/completions", server.url()))
        .json(&chat(false))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        plain["choices"][0]["message"]["content"],
        direct["choices"][0]["message"]["content"]
    );

    let (status, reads) =
        stream_reads(&format!("{}/v1/chat/completions", px.url()), &chat(true)).await;
    assert_eq!(status, 200);
    let proxied = reassemble(&reads.concat());
    let (_, direct_reads) = stream_reads(
        &format!("{}/v1/chat/completions", server.url()),
        &chat(true),
    )
    .await;
    let direct_payloads = reassemble(&direct_reads.concat());
    assert!(!text_of(&proxied).is_empty());
    assert_eq!(text_of(&proxied), text_of(&direct_payloads));
    assert_eq!(proxied.last().map(String::as_str), Some("[DONE]"));

    let models = client
        .get(format!("{}/v1/models", px.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(models.status(), 200);
    // The exchange is recorded before its body ends: read the body, then the recording.
    let _ = models.text().await.unwrap();

    let lines = read_lines(&rec);
    assert_eq!(lines.len(), 3, "{lines:#?}");
    let first = &lines[0];
    assert!(chrono::DateTime::parse_from_rfc3339(first["ts"].as_str().unwrap()).is_ok());
    assert_eq!(first["method"], "POST");
    assert_eq!(first["path"], "/v1/chat/completions");
    // Secrets never reach the recording: headers by allow-list (an unknown header such as
    // x-auth, or x-request-source, keeps only its name), credential-named query parameters and
    // JSON body fields.
    assert_eq!(first["query"], "trace=1&api_key=<redacted>");
    assert_eq!(first["request_headers"]["authorization"], "<redacted>");
    assert_eq!(first["request_headers"]["x-api-key"], "<redacted>");
    assert_eq!(first["request_headers"]["x-auth"], "<redacted>");
    assert_eq!(first["request_headers"]["x-request-source"], "<redacted>");
    assert_eq!(first["request_headers"]["content-type"], "application/json");
    assert_eq!(first["request_body"]["api_key"], "<redacted>");
    let whole = std::fs::read_to_string(&rec).unwrap();
    for secret in [
        "sk-secret-123",
        "k-456",
        "xa-321",
        "sk-body-789",
        "sk-query-000",
    ] {
        assert!(!whole.contains(secret), "{secret} reached the recording");
    }
    assert!(!first.to_string().contains("sk-secret-123"));
    // Everything else of the body is recorded as sent (max_tokens is not a credential).
    let mut expected_body = chat(false);
    expected_body["api_key"] = json!("<redacted>");
    assert_eq!(first["request_body"], expected_body);
    assert_eq!(first["status"], 200);
    assert_eq!(first["stream"], false);
    assert_eq!(first["response_body"], plain);
    let t = &first["timings"];
    assert!(t["headers_ms"].as_f64().unwrap() <= t["end_ms"].as_f64().unwrap());

    let streamed = &lines[1];
    assert_eq!(streamed["stream"], true);
    assert!(streamed["content_type"]
        .as_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let payloads = streamed["response_body"]
        .as_array()
        .expect("a payload list");
    assert_eq!(payloads.len(), proxied.len());
    assert_eq!(payloads.last(), Some(&json!("[DONE]")));
    for (recorded, seen) in payloads.iter().zip(&proxied) {
        if seen != "[DONE]" {
            assert_eq!(recorded, &serde_json::from_str::<Value>(seen).unwrap());
        }
    }
    assert_eq!(lines[2]["method"], "GET");
    assert_eq!(lines[2]["response_body"]["data"][0]["id"], "tiny-chat");

    px.stop().await.unwrap();
    server.stop().await.unwrap();
}

/// A hand-written upstream with fixed payloads (multi-byte characters, a multi-line payload):
/// the thing under test is the proxy's framing, so the payloads must be known exactly.
async fn fixed_sse_upstream(payloads: Vec<&'static str>) -> (String, tokio::task::JoinHandle<()>) {
    use axum::response::IntoResponse;
    let body: String = payloads
        .iter()
        .map(|p| {
            p.split('\n')
                .map(|l| format!("data: {l}\n"))
                .collect::<String>()
                + "\n"
        })
        .collect();
    let app = axum::Router::new().fallback(move || {
        let body = body.clone();
        async move { ([("content-type", "text/event-stream")], body).into_response() }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (url, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_sse_splits_everything_yet_payloads_reassemble_exactly() {
    let payloads = vec![
        r#"{"choices":[{"delta":{"content":"héllo"}}]}"#,
        r#"{"choices":[{"delta":{"content":" 日本語 🎉"}}]}"#,
        " leading space\nand a second line",
        r#"{"choices":[{"delta":{"content":"ü"}}]}"#,
        "[DONE]",
    ];
    let (upstream, task) = fixed_sse_upstream(payloads.clone()).await;
    for chunk in [1usize, 3] {
        let px = start_proxy(&upstream, None, Some(chunk)).await;
        let (status, reads) =
            stream_reads(&format!("{}/v1/chat/completions", px.url()), &chat(true)).await;
        assert_eq!(status, 200);
        let all = reads.concat();
        assert!(
            reads.iter().all(|r| r.len() <= chunk),
            "a read longer than {chunk} bytes"
        );
        assert!(
            reads.iter().any(|r| std::str::from_utf8(r).is_err()),
            "no read split a multi-byte character (chunk {chunk})"
        );
        let text = String::from_utf8_lossy(&all);
        assert!(text.contains(": keep-alive"), "{text}");
        assert!(text.contains("\r\n") && text.contains("\r\r"), "{text:?}");
        assert!(text.contains("data:{"), "no bare `data:` line: {text:?}");
        assert!(text.contains("id: "), "{text:?}");
        let got = reassemble(&all);
        assert_eq!(got, payloads, "chunk {chunk}");
        px.stop().await.unwrap();
    }
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_sse_over_the_real_server_keeps_the_text_and_the_recording() {
    let server = start_server().await;
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("hostile.jsonl");
    let px = start_proxy(&server.url(), Some(&rec), Some(1)).await;
    let (_, reads) = stream_reads(&format!("{}/v1/chat/completions", px.url()), &chat(true)).await;
    assert!(reads.iter().all(|r| r.len() == 1));
    let hostile = reassemble(&reads.concat());
    let (_, direct) = stream_reads(
        &format!("{}/v1/chat/completions", server.url()),
        &chat(true),
    )
    .await;
    let direct = reassemble(&direct.concat());
    assert_eq!(text_of(&hostile), text_of(&direct));
    assert_eq!(hostile.len(), direct.len());
    // The recording holds the upstream's payloads, which the client got byte for byte.
    let line = &read_lines(&rec)[0];
    let recorded: Vec<Value> = line["response_body"].as_array().unwrap().clone();
    let seen: Vec<Value> = hostile
        .iter()
        .map(|p| serde_json::from_str(p).unwrap_or_else(|_| json!(p)))
        .collect();
    assert_eq!(recorded, seen);
    // A plain (non-streamed) response is not re-framed.
    let plain = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", px.url()))
        .json(&chat(false))
        .send()
        .await
        .unwrap();
    assert_eq!(plain.status(), 200);
    let v: Value = plain
        .json()
        .await
        .expect("plain JSON passes through unchanged");
    assert!(v["choices"][0]["message"]["content"].is_string());
    px.stop().await.unwrap();
    server.stop().await.unwrap();
}

/// A port nothing listens on.
async fn closed_port_url() -> String {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    drop(l);
    url
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_upstream_is_a_502_naming_it_and_is_recorded() {
    let upstream = closed_port_url().await;
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("r.jsonl");
    let px = start_proxy(&upstream, Some(&rec), None).await;
    let resp = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", px.url()))
        .json(&chat(false))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 502);
    let v: Value = resp.json().await.unwrap();
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(msg.contains(&upstream), "{msg}");
    assert_eq!(v["error"]["code"], "upstream_unreachable");
    let line = &read_lines(&rec)[0];
    assert_eq!(line["status"], 502);
    assert!(line["error"].as_str().unwrap().contains(&upstream));
    px.stop().await.unwrap();
}

/// A suite over the fixture model whose `[client]` contract points at `recording`.
fn write_suite(dir: &Path, recording: &Path) -> PathBuf {
    let suite = dir.join("suite.toml");
    let text = format!(
        r#"
[model]
dir = {fixture:?}

[target]
url = "http://127.0.0.1:1"
model = "tiny-chat"

[client]
recording = {rec:?}
params = {{ temperature = 0.2 }}
required = ["max_tokens"]
forbidden = ["logit_bias"]
"#,
        fixture = FIXTURE,
        rec = recording.file_name().unwrap().to_str().unwrap(),
    );
    std::fs::write(&suite, text).unwrap();
    suite
}

fn client_findings(suite: &Path) -> Vec<chatgate::verdict::Finding> {
    let suite = chatgate::suite::Suite::load(suite).expect("the suite loads");
    let ctx = chatgate::chain::run::context::Context::load(suite).expect("the context loads");
    chain::client::check(&ctx).expect("the recording reads")
}

async fn send_all(px: &RunningProxy, reqs: &[(&str, Value)]) {
    let client = reqwest::Client::new();
    for (path, body) in reqs {
        let resp = client
            .post(format!("{}{path}", px.url()))
            .json(body)
            .send()
            .await
            .unwrap();
        let _ = resp.bytes().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_contract_diff_names_each_violation_of_a_recorded_client() {
    let server = start_server().await;
    let dir = tempfile::tempdir().unwrap();
    let user = json!([{"role": "user", "content": "Hi"}]);

    let bad_rec = dir.path().join("bad.jsonl");
    let px = start_proxy(&server.url(), Some(&bad_rec), None).await;
    send_all(
        &px,
        &[
            // wrong model (the server rejects it too), temperature differs
            (
                "/v1/chat/completions",
                json!({"model": "gpt-4o", "messages": user, "temperature": 0.7, "max_tokens": 4}),
            ),
            // missing max_tokens, and temperature missing
            (
                "/v1/chat/completions",
                json!({"model": "tiny-chat", "messages": user}),
            ),
            // wrong endpoint
            (
                "/v1/completions",
                json!({"model": "tiny-chat", "prompt": "Hi", "temperature": 0.2, "max_tokens": 4}),
            ),
        ],
    )
    .await;
    px.stop().await.unwrap();
    let fs = client_findings(&write_suite(dir.path(), &bad_rec));
    let get = |id: &str| {
        fs.iter()
            .find(|f| f.check.id == id)
            .unwrap_or_else(|| panic!("no {id} finding in {fs:#?}"))
    };
    let model = get("client.model");
    assert_eq!(model.severity, Severity::Error);
    assert!(model.evidence["request 1 (line 1)"].contains("gpt-4o"));
    assert_eq!(model.evidence.len(), 1);
    let params = get("client.params");
    assert_eq!(params.severity, Severity::Error);
    assert!(params.evidence["request 1 (line 1)"].contains("temperature = 0.7 (contract: 0.2)"));
    assert!(params.evidence["request 2 (line 2)"].contains("temperature missing"));
    assert!(!params.evidence.contains_key("request 3 (line 3)"));
    let required = get("client.required");
    assert_eq!(required.severity, Severity::Error);
    assert_eq!(
        required.evidence["request 2 (line 2)"],
        "missing max_tokens"
    );
    assert_eq!(required.evidence.len(), 1);
    let endpoint = get("client.endpoint");
    assert_eq!(endpoint.severity, Severity::Error);
    assert!(endpoint.evidence["request 3 (line 3)"].contains("/v1/completions"));
    assert_eq!(get("client.forbidden").severity, Severity::Pass);
    assert_eq!(get("client.message-shape").severity, Severity::Pass);
    let errors = get("client.errors");
    assert_eq!(errors.severity, Severity::Warning);
    assert!(errors.evidence["request 1 (line 1)"].contains("404"));

    let good_rec = dir.path().join("good.jsonl");
    let px = start_proxy(&server.url(), Some(&good_rec), None).await;
    let good = json!({"model": "tiny-chat", "messages": user, "temperature": 0.2, "max_tokens": 4});
    let mut streamed = good.clone();
    streamed["stream"] = json!(true);
    send_all(
        &px,
        &[
            ("/v1/chat/completions", good),
            ("/v1/chat/completions", streamed),
        ],
    )
    .await;
    px.stop().await.unwrap();
    let fs = client_findings(&write_suite(dir.path(), &good_rec));
    assert!(fs.len() >= 6, "{fs:#?}");
    assert!(fs.iter().all(|f| f.severity == Severity::Pass), "{fs:#?}");
    server.stop().await.unwrap();
}

#[test]
fn a_malformed_recording_is_bad_input_naming_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("broken.jsonl");
    std::fs::write(&rec, "\n{\"not\": \"an exchange\"}\n").unwrap();
    let suite = chatgate::suite::Suite::load(&write_suite(dir.path(), &rec)).unwrap();
    let ctx = chatgate::chain::run::context::Context::load(suite).unwrap();
    let err = chain::client::check(&ctx).unwrap_err();
    assert_eq!(err.exit_code(), 2);
    let msg = err.to_string();
    assert!(
        msg.contains("broken.jsonl") && msg.contains("line 2"),
        "{msg}"
    );
}

#[test]
fn an_empty_recording_warns_and_no_client_section_is_silent() {
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("empty.jsonl");
    std::fs::write(&rec, "").unwrap();
    let fs = client_findings(&write_suite(dir.path(), &rec));
    assert_eq!(fs.len(), 1);
    assert_eq!(
        (fs[0].check.id, fs[0].severity),
        ("client.recording", Severity::Warning)
    );

    let plain = dir.path().join("plain.toml");
    std::fs::write(&plain, format!("[model]\ndir = {FIXTURE:?}\n")).unwrap();
    assert!(client_findings(&plain).is_empty());
}

#[test]
fn proxy_help_teaches_the_flags_and_the_recording() {
    assert_cmd::Command::cargo_bin("chatgate")
        .unwrap()
        .args(["proxy", "--help"])
        .assert()
        .success()
        .stdout(predicates::str::contains("--upstream"))
        .stdout(predicates::str::contains("--record"))
        .stdout(predicates::str::contains("--hostile-sse"))
        .stdout(predicates::str::contains("--chunk-bytes"))
        .stdout(predicates::str::contains("<redacted>"))
        .stdout(predicates::str::contains("[client]"));
}

#[test]
fn proxy_cli_rejects_a_bad_upstream_with_exit_2() {
    assert_cmd::Command::cargo_bin("chatgate")
        .unwrap()
        .args([
            "proxy",
            "--upstream",
            "not a url",
            "--listen",
            "127.0.0.1:0",
        ])
        .assert()
        .code(2)
        .stderr(predicates::str::contains("--upstream"));
}

/// The real binary: the `listening on` line, a 502 through it, then SIGTERM stops it with 0.
#[test]
fn the_binary_listens_forwards_and_stops_on_sigterm() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let upstream = rt.block_on(closed_port_url());
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("chatgate"))
        .args(["proxy", "--upstream", &upstream, "--listen", "127.0.0.1:0"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("the binary starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .expect("a stdout line");
    let url = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_string();
    let status = rt.block_on(async {
        reqwest::Client::new()
            .get(format!("{url}/v1/models"))
            .send()
            .await
            .unwrap()
            .status()
    });
    assert_eq!(status, 502);
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(killed.success());
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let code = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s.code();
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("the proxy did not stop within 10 s of SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(code, Some(0));
}

/// A client that walks away mid-stream: the proxy stops reading the upstream and still records
/// the exchange, saying what happened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_leaving_mid_stream_is_recorded_as_such() {
    let many: Vec<&'static str> =
        std::iter::repeat_n(r#"{"choices":[{"delta":{"content":"x"}}]}"#, 2000)
            .chain(["[DONE]"])
            .collect();
    let (upstream, task) = fixed_sse_upstream(many).await;
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("left.jsonl");
    let px = start_proxy(&upstream, Some(&rec), Some(1)).await;
    let resp = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", px.url()))
        .json(&chat(true))
        .send()
        .await
        .unwrap();
    let mut s = resp.bytes_stream();
    let first = s.next().await.expect("a first read").unwrap();
    assert_eq!(first.len(), 1);
    drop(s);
    // Graceful stop waits for the exchange to finish, so the line is there afterwards.
    px.stop().await.unwrap();
    let line = &read_lines(&rec)[0];
    assert!(
        line["error"]
            .as_str()
            .unwrap_or("")
            .contains("disconnected"),
        "{line}"
    );
    let payloads = line["response_body"].as_array().unwrap();
    assert!(
        payloads.len() < 2001,
        "the whole stream was recorded as delivered"
    );
    task.abort();
}

/// An upstream that never sends headers and a client that gives up: the exchange is still in
/// the recording, saying what happened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exchange_the_client_abandons_is_recorded() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream = format!("http://{}", listener.local_addr().unwrap());
    let hold = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((sock, _)) = listener.accept().await {
            held.push(sock); // read nothing, answer nothing
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("r.jsonl");
    let px = start_proxy(&upstream, Some(&rec), None).await;
    let r = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", px.url()))
        .timeout(std::time::Duration::from_millis(500))
        .json(&chat(false))
        .send()
        .await;
    assert!(r.is_err(), "the client gave up");
    // The proxy notices the closed connection and drops the handler.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let line = loop {
        if let Some(l) = std::fs::read_to_string(&rec)
            .ok()
            .and_then(|t| t.lines().next().map(str::to_string))
        {
            break l;
        }
        assert!(std::time::Instant::now() < deadline, "nothing recorded");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    let v: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["path"], "/v1/chat/completions");
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("gave up before the upstream"),
        "{v}"
    );
    px.stop().await.unwrap();
    hold.abort();
}

// ---- chatgate client-probe: the real binary, real clients written the way apps write them ----

/// A client whose SSE reader is the naive one many apps hand-roll: it splits the body on
/// `\n\n` and keeps lines that start with `data: ` (stdlib only, so it runs anywhere).
const NAIVE_CLIENT: &str = r#"
import json, os, sys, urllib.request
body = json.dumps({"model": "tiny-chat", "temperature": 0, "max_tokens": 12, "stream": True,
                   "messages": [{"role": "user", "content": "What is the capital of France?"}]})
req = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions", body.encode(),
                             {"content-type": "application/json"})
raw = urllib.request.urlopen(req, timeout=30).read().decode("utf-8")
text = ""
for block in raw.split("\n\n"):
    for line in block.split("\n"):
        if line.startswith("data: ") and line != "data: [DONE]":
            delta = json.loads(line[6:])["choices"][0]["delta"]
            text += delta.get("content") or ""
print(text)
"#;

async fn client_probe(args: &[&str]) -> (Option<i32>, String, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_chatgate"))
        .arg("client-probe")
        .args(args)
        .output()
        .await
        .expect("chatgate client-probe runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The naive reader reads the plain stream and the framings it happens to survive, and the
/// probe names each one it does not — by exit status or by silently different text — with the
/// rule it gets wrong.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_probe_names_the_variants_a_naive_reader_cannot_read() {
    let server = start_server().await;
    let url = server.url();
    let variants = "bytes-1,utf8-split,keep-alive,crlf,no-space,ids";
    let (code, stdout, stderr) = client_probe(&[
        "--upstream",
        &url,
        "--variants",
        variants,
        "--format",
        "json",
        "--",
        "python3",
        "-c",
        NAIVE_CLIENT,
    ])
    .await;
    assert_eq!(code, Some(1), "{stdout}\n{stderr}");
    let report: Value = serde_json::from_str(&stdout).expect("json");
    assert_eq!(report["plain"]["exit"], 0);
    assert!(!report["plain"]["stdout"]
        .as_str()
        .unwrap()
        .trim()
        .is_empty());
    let verdict = |name: &str| {
        let run = report["runs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["label"] == name)
            .unwrap_or_else(|| panic!("{name} ran"));
        (run["exit"].clone(), run["output_differs"] == true)
    };
    // Whole-body reads and comment blocks are within its reach.
    for ok in ["bytes-1", "utf8-split", "keep-alive", "ids"] {
        assert_eq!(verdict(ok), (json!(0), false), "{ok}");
    }
    // CRLF: no `\n\n` in the body, one block, `data: {...}\r` lines: json.loads fails.
    assert_ne!(verdict("crlf").0, json!(0));
    // `data:{...}` is skipped: exit 0 with no text — caught because the text differs.
    assert_eq!(verdict("no-space"), (json!(0), true));
    assert!(report["combined"]["exit"] != 0 || report["combined"]["output_differs"] == true);
    assert!(
        report["culprit"].is_null(),
        "no combination of passing variants breaks it"
    );

    let (code, text, _) = client_probe(&[
        "--upstream",
        &url,
        "--variants",
        "crlf,no-space",
        "--",
        "python3",
        "-c",
        NAIVE_CLIENT,
    ])
    .await;
    assert_eq!(code, Some(1));
    assert!(text.contains("crlf ") && text.contains("BREAKS"), "{text}");
    assert!(
        text.contains("printed something else than on the plain stream"),
        "{text}"
    );
    assert!(
        text.contains("rule: end-of-line = ( cr lf / cr / lf )"),
        "{text}"
    );
    assert!(text.contains("reported: miruamel/xuan#194"), "{text}");
    server.stop().await.unwrap();
}

/// A client whose output changes from run to run (it prints a random number, as clients that
/// print response ids or times do) is judged by its exit status only, and the report says so:
/// no variant is blamed for text the client itself varies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_probe_judges_an_unstable_client_by_its_exit_status() {
    let server = start_server().await;
    let client = format!("{NAIVE_CLIENT}\nimport random\nprint(random.random())\n");
    let (code, text, err) = client_probe(&[
        "--upstream",
        &server.url(),
        "--variants",
        "ids,keep-alive,no-space",
        "--",
        "python3",
        "-c",
        &client,
    ])
    .await;
    assert_eq!(code, Some(0), "{text}{err}");
    assert!(
        text.contains("note: a second plain run printed something else"),
        "{text}"
    );
    assert!(text.contains("the client read every variant"), "{text}");
    server.stop().await.unwrap();
}

/// A client that leaves a process behind holding its output open does not hang the probe:
/// the client's whole process group goes when its run ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_probe_does_not_wait_for_what_a_client_leaves_behind() {
    let server = start_server().await;
    let client = format!("import subprocess\nsubprocess.Popen(['sleep', '120'])\n{NAIVE_CLIENT}");
    let t = std::time::Instant::now();
    let (code, text, err) = client_probe(&[
        "--upstream",
        &server.url(),
        "--variants",
        "ids",
        "--",
        "python3",
        "-c",
        &client,
    ])
    .await;
    assert_eq!(code, Some(0), "{text}{err}");
    assert!(t.elapsed() < Duration::from_secs(60), "{:?}", t.elapsed());
    server.stop().await.unwrap();
}

/// What the probe cannot attribute to a variant is bad input (exit 2) or an unreachable
/// server (exit 3), each said plainly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_probe_refuses_what_it_cannot_judge() {
    let server = start_server().await;
    let url = server.url();
    // A client that fails without hostile framing.
    let (code, _, err) = client_probe(&[
        "--upstream",
        &url,
        "--",
        "sh",
        "-c",
        "echo boom >&2; exit 4",
    ])
    .await;
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("fails on the plain stream") && err.contains("exit 4") && err.contains("boom"),
        "{err}"
    );
    // A client that never calls the proxy (it does not read OPENAI_BASE_URL).
    let (code, _, err) = client_probe(&["--upstream", &url, "--", "true"]).await;
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("made no request") && err.contains("OPENAI_BASE_URL"),
        "{err}"
    );
    // A client that never streams.
    let plain_only = NAIVE_CLIENT.replace("\"stream\": True", "\"stream\": False");
    let (code, _, err) =
        client_probe(&["--upstream", &url, "--", "python3", "-c", &plain_only]).await;
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("none streamed"), "{err}");
    // A command that does not exist.
    let (code, _, err) = client_probe(&["--upstream", &url, "--", "/nonexistent/client"]).await;
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("cannot start the client command"), "{err}");
    // A client that hangs is killed at the timeout (plain run: bad input, said so).
    let (code, _, err) =
        client_probe(&["--upstream", &url, "--timeout", "1", "--", "sleep", "30"]).await;
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("did not finish in time"), "{err}");
    // An unknown variant.
    let (code, _, err) =
        client_probe(&["--upstream", &url, "--variants", "ids,chunky", "--", "true"]).await;
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("unknown SSE variant \"chunky\""), "{err}");
    server.stop().await.unwrap();
    // Nothing listens: the client's request comes back 502 from the proxy, the probe says so.
    let closed = closed_port_url().await;
    let (code, _, err) =
        client_probe(&["--upstream", &closed, "--", "python3", "-c", NAIVE_CLIENT]).await;
    assert_eq!(code, Some(3), "{err}");
    assert!(
        err.contains("could not reach") && err.contains(&closed),
        "{err}"
    );
}

/// `chatgate proxy --hostile-sse ids,keep-alive` applies exactly the named variants (and says
/// so); a bare `--hostile-sse` applies all of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_applies_the_named_variants_only() {
    use tokio::io::AsyncBufReadExt;
    let server = start_server().await;
    for (flag, banner) in [
        (
            vec!["--hostile-sse", "ids,keep-alive"],
            "hostile SSE: keep-alive + ids",
        ),
        (vec!["--hostile-sse"], "hostile SSE: all variants"),
    ] {
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_chatgate"))
            .args([
                "proxy",
                "--upstream",
                &server.url(),
                "--listen",
                "127.0.0.1:0",
            ])
            .args(&flag)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("the binary starts");
        let mut out = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let line = out.next_line().await.unwrap().expect("a stdout line");
        let url = line
            .strip_prefix("listening on ")
            .expect("the URL")
            .to_string();
        let mut err = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
        let said = err.next_line().await.unwrap().expect("a stderr line");
        assert!(said.contains(banner), "{said}");
        let (_, reads) = stream_reads(&format!("{url}/v1/chat/completions"), &chat(true)).await;
        let text = String::from_utf8(reads.concat()).unwrap();
        if flag.len() == 2 {
            assert!(
                text.contains("\n\n: keep-alive\n\nid: 1\ndata: {"),
                "{text:?}"
            );
            assert!(!text.contains('\r') && !text.contains("data:{"), "{text:?}");
            assert!(
                !text.starts_with('\u{feff}') && !text.contains("retry:"),
                "{text:?}"
            );
        } else {
            assert!(
                text.starts_with('\u{feff}') && text.contains("retry: 3000"),
                "{text:?}"
            );
            assert!(text.contains('\r') && text.contains("data:{"), "{text:?}");
        }
        assert!(!text_of(&reassemble(&reads.concat())).is_empty());
        child.kill().await.unwrap();
    }
    server.stop().await.unwrap();
}
