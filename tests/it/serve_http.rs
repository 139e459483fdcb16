//! `chatgate serve` over real loopback HTTP: servers started in-process on 127.0.0.1:0 with the
//! real fixture model, plus one run of the real binary (stdout port line, SIGTERM).
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use chatgate::endpoint::candle::CandleModel;
use chatgate::serve::{self, Fault, RunningServer, ServeOptions};
use futures_util::StreamExt;
use serde_json::{json, Value};

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tiny-chatml");

struct Srv {
    server: RunningServer,
    client: reqwest::Client,
    url: String,
}

async fn start_opts(opts: ServeOptions) -> Srv {
    let state = tokio::task::spawn_blocking(move || serve::load(&opts))
        .await
        .expect("load task")
        .expect("the model loads");
    let server = serve::start(state, "127.0.0.1:0")
        .await
        .expect("the server binds");
    let url = server.url();
    Srv {
        server,
        client: reqwest::Client::new(),
        url,
    }
}

async fn start(faults: &[Fault]) -> Srv {
    start_opts(ServeOptions {
        model: PathBuf::from(FIXTURE),
        faults: faults.to_vec(),
        ..ServeOptions::default()
    })
    .await
}

/// A parsed stream: the `data:` payloads in order (JSON, or the literal `[DONE]`).
struct Stream {
    status: u16,
    events: Vec<String>,
    /// Seconds from the request to each event.
    times: Vec<f64>,
}

impl Stream {
    fn chunks(&self) -> Vec<Value> {
        self.events
            .iter()
            .filter(|e| e.as_str() != "[DONE]")
            .map(|e| serde_json::from_str(e).expect("a JSON chunk"))
            .collect()
    }
    fn has_done(&self) -> bool {
        self.events.last().map(String::as_str) == Some("[DONE]")
    }
    /// The joined content deltas (chat) or texts (completions).
    fn text(&self) -> String {
        self.chunks()
            .iter()
            .filter_map(|c| {
                let ch = c["choices"].get(0)?;
                ch["delta"]["content"]
                    .as_str()
                    .or(ch["text"].as_str())
                    .map(str::to_string)
            })
            .collect()
    }
    fn token_ids(&self) -> Vec<u64> {
        self.chunks()
            .iter()
            .filter_map(|c| c["choices"].get(0)?["token_ids"].as_array().cloned())
            .flatten()
            .filter_map(|v| v.as_u64())
            .collect()
    }
    fn finish_reason(&self) -> Option<String> {
        self.chunks().iter().find_map(|c| {
            c["choices"]
                .get(0)?
                .get("finish_reason")?
                .as_str()
                .map(str::to_string)
        })
    }
    fn usage(&self) -> Option<Value> {
        self.chunks()
            .into_iter()
            .find(|c| c["usage"].is_object())
            .map(|c| c["usage"].clone())
    }
    /// Seconds to the first event that carries content.
    fn first_content_time(&self) -> Option<f64> {
        self.events.iter().zip(&self.times).find_map(|(e, t)| {
            let v: Value = serde_json::from_str(e).ok()?;
            let ch = v["choices"].get(0)?;
            let text = ch["delta"]["content"].as_str().or(ch["text"].as_str())?;
            (!text.is_empty()).then_some(*t)
        })
    }
}

impl Srv {
    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let resp = self
            .client
            .post(format!("{}{path}", self.url))
            .json(&body)
            .send()
            .await
            .expect("request");
        let status = resp.status().as_u16();
        let text = resp.text().await.expect("body");
        let v = serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
        (status, v)
    }
    async fn post_raw(&self, path: &str, body: &str) -> (u16, Value) {
        let resp = self
            .client
            .post(format!("{}{path}", self.url))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .expect("request");
        let status = resp.status().as_u16();
        let text = resp.text().await.expect("body");
        let v = serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
        (status, v)
    }
    async fn get(&self, path: &str) -> (u16, Value) {
        let resp = self
            .client
            .get(format!("{}{path}", self.url))
            .send()
            .await
            .expect("request");
        let status = resp.status().as_u16();
        (status, resp.json().await.expect("a JSON body"))
    }
    async fn stream(&self, path: &str, body: Value) -> Stream {
        let t0 = Instant::now();
        let resp = self
            .client
            .post(format!("{}{path}", self.url))
            .json(&body)
            .send()
            .await
            .expect("request");
        let status = resp.status().as_u16();
        let ct = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        assert!(ct.starts_with("text/event-stream"), "content-type {ct}");
        let mut body = resp.bytes_stream();
        let mut buf = String::new();
        let mut events = vec![];
        let mut times = vec![];
        while let Some(chunk) = body.next().await {
            buf.push_str(std::str::from_utf8(&chunk.expect("a body chunk")).expect("UTF-8"));
            while let Some(end) = buf.find("\n\n") {
                let frame: String = buf.drain(..end + 2).collect();
                for line in frame.lines() {
                    if let Some(data) = line.strip_prefix("data: ") {
                        events.push(data.to_string());
                        times.push(t0.elapsed().as_secs_f64());
                    }
                }
            }
        }
        assert!(buf.trim().is_empty(), "an unterminated event: {buf:?}");
        Stream {
            status,
            events,
            times,
        }
    }
}

fn user(text: &str) -> Value {
    json!([{"role": "user", "content": text}])
}

fn chat_body(text: &str, max_tokens: usize) -> Value {
    json!({"model": "tiny-chatml", "messages": user(text), "temperature": 0, "max_tokens": max_tokens})
}

fn with(mut body: Value, extra: Value) -> Value {
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            b.insert(k.clone(), v.clone());
        }
    }
    body
}

fn local_ids(messages: &Value, add_generation_prompt: bool) -> Vec<u32> {
    let model = CandleModel::load(Path::new(FIXTURE)).expect("the fixture loads");
    let msgs = messages.as_array().cloned().unwrap_or_default();
    model
        .render_chat(&msgs, None, add_generation_prompt)
        .expect("renders")
        .1
}

fn ids_of(v: &Value) -> Vec<u64> {
    v.as_array()
        .map(|a| a.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default()
}

fn assert_error(status: u16, body: &Value, want: u16) {
    assert_eq!(status, want, "{body}");
    let e = &body["error"];
    assert!(
        e["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{body}"
    );
    assert!(e["type"].is_string(), "{body}");
    assert!(
        e.get("param").is_some() && e.get("code").is_some(),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_and_models() {
    let s = start(&[]).await;
    let (st, v) = s.get("/health").await;
    assert_eq!((st, v), (200, json!({"status": "ok"})));
    let (st, v) = s.get("/v1/models").await;
    assert_eq!(st, 200);
    assert_eq!(v["object"], "list");
    let m = &v["data"][0];
    assert_eq!(m["id"], "tiny-chatml");
    assert_eq!(m["object"], "model");
    assert_eq!(m["owned_by"], "chatgate");
    let root = std::fs::canonicalize(FIXTURE).expect("fixture");
    assert_eq!(m["root"], root.display().to_string());
    s.server.stop().await.expect("stops");

    let named = start_opts(ServeOptions {
        model: PathBuf::from(FIXTURE),
        model_name: Some("my-chat".into()),
        ..ServeOptions::default()
    })
    .await;
    let (_, v) = named.get("/v1/models").await;
    assert_eq!(v["data"][0]["id"], "my-chat");
    let (st, v) = named.post("/v1/chat/completions", chat_body("hi", 2)).await;
    assert_error(st, &v, 404);
    let (st, v) = named
        .post(
            "/v1/chat/completions",
            with(chat_body("hi", 2), json!({"model": "my-chat"})),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["model"], "my-chat");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_stream_equals_non_stream() {
    let s = start(&[]).await;
    let body = with(
        chat_body("Tell me about the sea", 24),
        json!({"return_token_ids": true}),
    );
    let (st, full) = s.post("/v1/chat/completions", body.clone()).await;
    assert_eq!(st, 200, "{full}");
    assert!(full["id"]
        .as_str()
        .is_some_and(|i| i.starts_with("chatcmpl-")));
    assert_eq!(full["object"], "chat.completion");
    assert!(full["created"].as_u64().is_some());
    assert!(full["system_fingerprint"]
        .as_str()
        .is_some_and(|f| f.starts_with("fp_")));
    let choice = &full["choices"][0];
    assert_eq!(choice["message"]["role"], "assistant");
    let text = choice["message"]["content"].as_str().expect("content");
    let ids = ids_of(&choice["token_ids"]);
    let usage = &full["usage"];
    assert_eq!(usage["completion_tokens"].as_u64(), Some(ids.len() as u64));
    assert_eq!(
        usage["total_tokens"].as_u64(),
        Some(usage["prompt_tokens"].as_u64().unwrap() + ids.len() as u64)
    );

    let stream = s
        .stream(
            "/v1/chat/completions",
            with(
                body.clone(),
                json!({"stream": true, "stream_options": {"include_usage": true}}),
            ),
        )
        .await;
    assert_eq!(stream.status, 200);
    assert!(stream.has_done(), "{:?}", stream.events);
    let chunks = stream.chunks();
    let first = &chunks[0];
    assert_eq!(first["object"], "chat.completion.chunk");
    assert_eq!(
        first["choices"][0]["delta"],
        json!({"role": "assistant", "content": ""})
    );
    assert_eq!(stream.text(), text);
    assert_eq!(stream.token_ids(), ids);
    assert_eq!(
        stream.finish_reason().as_deref(),
        choice["finish_reason"].as_str()
    );
    // The usage chunk: last before [DONE], no choices, equal to the non-streamed usage.
    let last = chunks.last().expect("chunks");
    assert_eq!(last["choices"], json!([]));
    assert_eq!(&last["usage"], usage);
    assert_eq!(
        ids_of(&first["prompt_token_ids"]),
        ids_of(&full["prompt_token_ids"])
    );
    // Every chunk shares the id.
    assert!(chunks.iter().all(|c| c["id"] == first["id"]));

    // Without include_usage: no usage anywhere.
    let plain = s
        .stream(
            "/v1/chat/completions",
            with(body.clone(), json!({"stream": true})),
        )
        .await;
    assert!(plain.has_done());
    assert!(plain.usage().is_none());
    assert!(plain.chunks().iter().all(|c| c.get("usage").is_none()));
    assert_eq!(plain.text(), text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompt_tokens_equal_the_local_render() {
    let s = start(&[]).await;
    for messages in [
        user("Hello there"),
        json!([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2?"},
               {"role": "assistant", "content": "4"}, {"role": "user", "content": "And 3+3?"}]),
    ] {
        let local = local_ids(&messages, true);
        let (st, v) = s
            .post(
                "/v1/chat/completions",
                json!({"messages": messages, "temperature": 0, "max_tokens": 3, "return_token_ids": true}),
            )
            .await;
        assert_eq!(st, 200, "{v}");
        assert_eq!(
            v["usage"]["prompt_tokens"].as_u64(),
            Some(local.len() as u64)
        );
        let server_ids = ids_of(&v["prompt_token_ids"]);
        assert_eq!(
            server_ids,
            local.iter().map(|&i| i as u64).collect::<Vec<_>>()
        );
        let (_, t) = s
            .post(
                "/tokenize",
                json!({"messages": messages, "add_generation_prompt": true, "add_special_tokens": false}),
            )
            .await;
        assert_eq!(ids_of(&t["tokens"]), server_ids);
        assert_eq!(t["count"].as_u64(), Some(local.len() as u64));
        assert_eq!(t["max_model_len"], 512);
        assert_eq!(t["token_strs"], Value::Null);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_4xx_with_an_error_body() {
    let s = start(&[]).await;
    let (st, v) = s.post_raw("/v1/chat/completions", "{\"messages\": [").await;
    assert_error(st, &v, 400);
    let (st, v) = s
        .post(
            "/v1/chat/completions",
            with(chat_body("hi", 4), json!({"temperature": "hot"})),
        )
        .await;
    assert_error(st, &v, 400);
    assert_eq!(v["error"]["param"], "temperature");
    let (st, v) = s
        .post(
            "/v1/chat/completions",
            with(chat_body("hi", 4), json!({"model": "gpt-4o"})),
        )
        .await;
    assert_error(st, &v, 404);
    assert_eq!(v["error"]["code"], "model_not_found");
    let (st, v) = s
        .post(
            "/v1/chat/completions",
            with(chat_body("hi", 4), json!({"n": 2})),
        )
        .await;
    assert_error(st, &v, 400);
    let (st, v) = s.post("/v1/chat/completions", chat_body("hi", 600)).await;
    assert_error(st, &v, 400);
    assert_eq!(v["error"]["code"], "context_length_exceeded");
    let long = "word ".repeat(700);
    let (st, v) = s
        .post(
            "/v1/chat/completions",
            json!({"messages": user(&long), "temperature": 0}),
        )
        .await;
    assert_error(st, &v, 400);
    let (st, v) = s
        .post("/v1/chat/completions", json!({"model": "tiny-chatml"}))
        .await;
    assert_error(st, &v, 400);
    assert_eq!(v["error"]["param"], "messages");
    let (st, v) = s
        .post("/v1/chat/completions", json!({"messages": "hi"}))
        .await;
    assert_error(st, &v, 400);
    let (st, v) = s
        .post(
            "/v1/chat/completions",
            with(chat_body("hi", 4), json!({"stop": 3})),
        )
        .await;
    assert_error(st, &v, 400);
    let (st, v) = s
        .post(
            "/v1/chat/completions",
            with(chat_body("hi", 4), json!({"stop_token_ids": [100000]})),
        )
        .await;
    assert_error(st, &v, 400);
    let (st, v) = s.post("/v1/completions", json!({"max_tokens": 3})).await;
    assert_error(st, &v, 400);
    let (st, v) = s
        .post("/v1/completions", json!({"prompt": [1, 2, 99999]}))
        .await;
    assert_error(st, &v, 400);
    let (st, v) = s.post("/detokenize", json!({"tokens": [-1]})).await;
    assert_error(st, &v, 400);
    let (st, v) = s.get("/v1/nothing-here").await;
    assert_error(st, &v, 404);
    let (st, v) = s.get("/v1/chat/completions").await;
    assert_error(st, &v, 405);
    let (st, v) = s.post("/v1/models", json!({})).await;
    assert_error(st, &v, 405);
    // Unknown fields are ignored, like vLLM.
    let (st, v) = s
        .post(
            "/v1/chat/completions",
            with(chat_body("hi", 2), json!({"frobnicate": true})),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    // Any content type is read as JSON.
    let resp = s
        .client
        .post(format!("{}/v1/chat/completions", s.url))
        .header("content-type", "text/plain")
        .body(chat_body("hi", 2).to_string())
        .send()
        .await
        .expect("request");
    assert_eq!(resp.status().as_u16(), 200);
    // The server is still healthy after all that.
    assert_eq!(s.get("/health").await.0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_template_that_raises_is_a_400_with_its_message() {
    let dir = tempfile::tempdir().expect("tempdir");
    let copy = dir.path().join("raising");
    copy_dir(Path::new(FIXTURE), &copy);
    let cfg_path = copy.join("tokenizer_config.json");
    let mut cfg: Value =
        serde_json::from_str(&std::fs::read_to_string(&cfg_path).expect("read")).expect("json");
    let source = cfg["chat_template"]
        .as_str()
        .expect("a template")
        .to_string();
    cfg["chat_template"] = json!(format!(
        "{{% if messages[0]['role'] == 'system' %}}{{{{ raise_exception('System role not supported') }}}}{{% endif %}}{source}"
    ));
    std::fs::write(&cfg_path, cfg.to_string()).expect("write");
    let s = start_opts(ServeOptions {
        model: copy.clone(),
        ..ServeOptions::default()
    })
    .await;
    let (st, v) = s
        .post(
            "/v1/chat/completions",
            json!({"messages": [{"role": "system", "content": "x"}, {"role": "user", "content": "hi"}], "max_tokens": 2}),
        )
        .await;
    assert_error(st, &v, 400);
    assert!(
        v["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("System role not supported")),
        "{v}"
    );
    let (st, v) = s
        .post(
            "/v1/chat/completions",
            json!({"messages": user("hi"), "max_tokens": 2, "temperature": 0}),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["model"], "raising");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_concurrent_streams_complete_intact() {
    let s = start(&[]).await;
    let a = with(
        chat_body("First question about rivers", 48),
        json!({"return_token_ids": true, "ignore_eos": true}),
    );
    let b = with(
        chat_body("A different prompt, about mountains", 48),
        json!({"return_token_ids": true, "ignore_eos": true}),
    );
    let stream_opts = json!({"stream": true, "stream_options": {"include_usage": true}});
    let (sa, sb) = tokio::join!(
        s.stream("/v1/chat/completions", with(a.clone(), stream_opts.clone())),
        s.stream("/v1/chat/completions", with(b.clone(), stream_opts.clone())),
    );
    let (_, fa) = s.post("/v1/chat/completions", a).await;
    let (_, fb) = s.post("/v1/chat/completions", b).await;
    for (st, full) in [(&sa, &fa), (&sb, &fb)] {
        assert_eq!(st.status, 200);
        assert!(st.has_done());
        assert_eq!(
            st.text(),
            full["choices"][0]["message"]["content"].as_str().unwrap()
        );
        assert_eq!(st.token_ids(), ids_of(&full["choices"][0]["token_ids"]));
        assert_eq!(st.token_ids().len(), 48);
        assert_eq!(st.usage().as_ref(), Some(&full["usage"]));
    }
    assert_ne!(sa.token_ids(), sb.token_ids());

    // And a burst of non-streamed requests all queue and succeed.
    let bodies: Vec<Value> = (0..6).map(|i| chat_body(&format!("req {i}"), 4)).collect();
    let results = futures_util::future::join_all(
        bodies
            .iter()
            .map(|b| s.post("/v1/chat/completions", b.clone())),
    )
    .await;
    assert!(results.iter().all(|(st, _)| *st == 200));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokenize_and_detokenize_round_trip() {
    let s = start(&[]).await;
    let text = "Hello there, how are you today?";
    let (st, t) = s
        .post(
            "/tokenize",
            json!({"prompt": text, "add_special_tokens": true}),
        )
        .await;
    assert_eq!(st, 200, "{t}");
    let ids = ids_of(&t["tokens"]);
    assert_eq!(t["count"].as_u64(), Some(ids.len() as u64));
    assert_eq!(t["max_model_len"], 512);
    assert_eq!(t["token_strs"], Value::Null);
    let (st, d) = s.post("/detokenize", json!({"tokens": ids})).await;
    assert_eq!(st, 200, "{d}");
    assert_eq!(d["prompt"], text);
    let (_, t2) = s
        .post(
            "/tokenize",
            json!({"prompt": text, "return_token_strs": true}),
        )
        .await;
    assert_eq!(t2["token_strs"].as_array().map(Vec::len), Some(ids.len()));
    // Messages render with the chat template, special tokens included.
    let (_, tm) = s
        .post(
            "/tokenize",
            json!({"messages": user("Hi"), "add_generation_prompt": true}),
        )
        .await;
    let (_, dm) = s.post("/detokenize", json!({"tokens": tm["tokens"]})).await;
    assert_eq!(
        dm["prompt"],
        "<s><|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completions_plain_and_streamed() {
    let s = start(&[]).await;
    let body = json!({"model": "tiny-chatml", "prompt": "Once upon a time", "temperature": 0,
                      "max_tokens": 16, "return_token_ids": true, "logprobs": 2});
    let (st, full) = s.post("/v1/completions", body.clone()).await;
    assert_eq!(st, 200, "{full}");
    assert!(full["id"].as_str().is_some_and(|i| i.starts_with("cmpl-")));
    assert_eq!(full["object"], "text_completion");
    let choice = &full["choices"][0];
    let ids = ids_of(&choice["token_ids"]);
    assert_eq!(
        choice["logprobs"]["tokens"].as_array().map(Vec::len),
        Some(ids.len())
    );
    let (_, tok) = s
        .post("/tokenize", json!({"prompt": "Once upon a time"}))
        .await;
    assert_eq!(ids_of(&choice["prompt_token_ids"]), ids_of(&tok["tokens"]));
    assert_eq!(full["usage"]["prompt_tokens"], tok["count"]);
    let stream = s
        .stream(
            "/v1/completions",
            with(
                body,
                json!({"stream": true, "stream_options": {"include_usage": true}}),
            ),
        )
        .await;
    assert!(stream.has_done());
    assert_eq!(stream.text(), choice["text"].as_str().unwrap());
    assert_eq!(stream.token_ids(), ids);
    assert_eq!(stream.usage().as_ref(), Some(&full["usage"]));
    assert_eq!(stream.chunks()[0]["object"], "text_completion");
    // A prompt given as token ids.
    let (st, v) = s
        .post(
            "/v1/completions",
            json!({"prompt": ids_of(&tok["tokens"]), "temperature": 0, "max_tokens": 16}),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["choices"][0]["text"], choice["text"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_logprobs_and_stop() {
    let s = start(&[]).await;
    let (st, v) = s
        .post(
            "/v1/chat/completions",
            with(
                chat_body("Hello", 6),
                json!({"logprobs": true, "top_logprobs": 3}),
            ),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    let content = v["choices"][0]["logprobs"]["content"]
        .as_array()
        .expect("logprobs content");
    assert_eq!(
        content.len() as u64,
        v["usage"]["completion_tokens"].as_u64().unwrap()
    );
    assert!(content
        .iter()
        .all(|c| c["top_logprobs"].as_array().map(Vec::len) == Some(3)));
    // A stop token id ends the reply with that stop_reason; the stream agrees.
    let (_, base) = s
        .post(
            "/v1/chat/completions",
            with(chat_body("Hello", 8), json!({"return_token_ids": true})),
        )
        .await;
    let ids = ids_of(&base["choices"][0]["token_ids"]);
    let stop_id = ids[2];
    let body = with(
        chat_body("Hello", 8),
        json!({"stop_token_ids": [stop_id], "return_token_ids": true}),
    );
    let (_, stopped) = s.post("/v1/chat/completions", body.clone()).await;
    let c = &stopped["choices"][0];
    assert_eq!(c["finish_reason"], "stop");
    assert_eq!(c["stop_reason"], json!(stop_id));
    let first = ids.iter().position(|&i| i == stop_id).unwrap();
    assert_eq!(ids_of(&c["token_ids"]), ids[..=first].to_vec());
    let st = s
        .stream("/v1/chat/completions", with(body, json!({"stream": true})))
        .await;
    assert_eq!(st.text(), c["message"]["content"].as_str().unwrap());
    assert_eq!(st.finish_reason().as_deref(), Some("stop"));
    // A stop string cuts the reply before it, streamed and not, and is the stop_reason.
    let (_, long) = s
        .post(
            "/v1/chat/completions",
            with(chat_body("Hello", 24), json!({"ignore_eos": true})),
        )
        .await;
    let text = long["choices"][0]["message"]["content"].as_str().unwrap();
    let chars: Vec<char> = text.chars().collect();
    let stop: String = chars[chars.len() / 2..chars.len() / 2 + 2].iter().collect();
    let body = with(
        chat_body("Hello", 24),
        json!({"ignore_eos": true, "stop": [stop.clone()]}),
    );
    let (_, cut) = s.post("/v1/chat/completions", body.clone()).await;
    let c = &cut["choices"][0];
    let cut_text = c["message"]["content"].as_str().unwrap();
    assert_eq!(c["finish_reason"], "stop");
    assert_eq!(c["stop_reason"], json!(stop));
    assert!(!cut_text.contains(&stop) && text.starts_with(cut_text) && cut_text.len() < text.len());
    let st = s
        .stream("/v1/chat/completions", with(body, json!({"stream": true})))
        .await;
    assert_eq!(st.text(), cut_text);
    // top_logprobs without logprobs is refused.
    let (st, v) = s
        .post(
            "/v1/chat/completions",
            with(chat_body("Hello", 2), json!({"top_logprobs": 2})),
        )
        .await;
    assert_error(st, &v, 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_disconnects_cancels_its_generation() {
    // 400 tokens at 30 ms each would hold the model for 12 s.
    let s = start(&[Fault::SlowDecode]).await;
    let long = with(
        chat_body("Go on forever", 400),
        json!({"stream": true, "ignore_eos": true}),
    );
    let resp = s
        .client
        .post(format!("{}/v1/chat/completions", s.url))
        .json(&long)
        .send()
        .await
        .expect("request");
    let mut body = resp.bytes_stream();
    let mut seen = 0;
    while seen < 3 {
        match body.next().await {
            Some(Ok(_)) => seen += 1,
            _ => break,
        }
    }
    drop(body);
    let t0 = Instant::now();
    let (st, v) = s.post("/v1/chat/completions", chat_body("quick", 2)).await;
    assert_eq!(st, 200, "{v}");
    assert!(
        t0.elapsed() < Duration::from_secs(4),
        "the next request waited {:?}: the abandoned stream was not cancelled",
        t0.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_stop_in_process() {
    let s = start(&[]).await;
    let url = s.url.clone();
    s.server.stop().await.expect("stops cleanly");
    assert!(reqwest::get(format!("{url}/health")).await.is_err());
}

// ---------------------------------------------------------------------------------------
// Faults: each changes its one thing; a healthy server does not show it.
// ---------------------------------------------------------------------------------------

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read_dir") {
        let entry = entry.expect("entry");
        std::fs::copy(entry.path(), to.join(entry.file_name())).expect("copy");
    }
}

/// Negate the lm_head (or the embeddings) in a safetensors file: same shapes, other behaviour.
fn perturb_weights(file: &Path) {
    let mut bytes = std::fs::read(file).expect("read weights");
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: Value = serde_json::from_slice(&bytes[8..8 + n]).expect("header");
    let name = ["lm_head.weight", "model.embed_tokens.weight"]
        .into_iter()
        .find(|k| header.get(*k).is_some())
        .expect("a tensor to perturb");
    let t = &header[name];
    assert_eq!(t["dtype"], "F32");
    let start = 8 + n + t["data_offsets"][0].as_u64().unwrap() as usize;
    let end = 8 + n + t["data_offsets"][1].as_u64().unwrap() as usize;
    for chunk in bytes[start..end].chunks_exact_mut(4) {
        let f = f32::from_le_bytes(chunk.try_into().unwrap());
        chunk.copy_from_slice(&(-f).to_le_bytes());
    }
    std::fs::write(file, bytes).expect("write weights");
}

async fn greedy(s: &Srv, text: &str) -> Value {
    let (st, v) = s
        .post(
            "/v1/chat/completions",
            with(
                chat_body(text, 16),
                json!({"return_token_ids": true, "ignore_eos": true}),
            ),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_base_checkpoint() {
    let dir = tempfile::tempdir().expect("tempdir");
    let base = dir.path().join("perturbed");
    copy_dir(Path::new(FIXTURE), &base);
    perturb_weights(&base.join("model.safetensors"));
    let healthy = start(&[]).await;
    let faulty = start_opts(ServeOptions {
        model: PathBuf::from(FIXTURE),
        faults: vec![Fault::BaseCheckpoint],
        fault_model: Some(base.clone()),
        ..ServeOptions::default()
    })
    .await;
    // What the server says it serves is unchanged...
    assert_eq!(
        healthy.get("/v1/models").await.1["data"][0]["id"],
        faulty.get("/v1/models").await.1["data"][0]["id"]
    );
    assert_eq!(
        healthy.get("/v1/models").await.1["data"][0]["root"],
        faulty.get("/v1/models").await.1["data"][0]["root"]
    );
    let h = greedy(&healthy, "What is the capital of France?").await;
    let f = greedy(&faulty, "What is the capital of France?").await;
    assert_eq!(h["model"], f["model"]);
    assert_eq!(h["system_fingerprint"], f["system_fingerprint"]);
    assert_eq!(h["usage"]["prompt_tokens"], f["usage"]["prompt_tokens"]);
    // ...but the tokens come from another checkpoint.
    assert_ne!(h["choices"][0]["token_ids"], f["choices"][0]["token_ids"]);
    // A healthy server is deterministic at temperature 0.
    assert_eq!(
        greedy(&healthy, "What is the capital of France?").await["choices"][0]["token_ids"],
        h["choices"][0]["token_ids"]
    );

    // Without --fault-model: the sibling directory `tiny-base`.
    let served = dir.path().join("tiny-chatml");
    copy_dir(Path::new(FIXTURE), &served);
    copy_dir(&base, &dir.path().join("tiny-base"));
    let sibling = start_opts(ServeOptions {
        model: served,
        faults: vec![Fault::BaseCheckpoint],
        ..ServeOptions::default()
    })
    .await;
    let g = greedy(&sibling, "What is the capital of France?").await;
    assert_eq!(g["model"], "tiny-chatml");
    assert_eq!(g["choices"][0]["token_ids"], f["choices"][0]["token_ids"]);
    // --fault-model without the fault is refused.
    assert!(serve::load(&ServeOptions {
        model: PathBuf::from(FIXTURE),
        fault_model: Some(base.clone()),
        ..ServeOptions::default()
    })
    .is_err());
    // A missing fault model is an error at startup.
    let missing = serve::load(&ServeOptions {
        model: PathBuf::from(FIXTURE),
        faults: vec![Fault::BaseCheckpoint],
        fault_model: Some(dir.path().join("nope")),
        ..ServeOptions::default()
    });
    assert!(missing.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_double_bos() {
    let healthy = start(&[]).await;
    let faulty = start(&[Fault::DoubleBos]).await;
    let local = local_ids(&user("Hello"), true);
    let h = greedy(&healthy, "Hello").await;
    let f = greedy(&faulty, "Hello").await;
    let hp = ids_of(&h["prompt_token_ids"]);
    let fp = ids_of(&f["prompt_token_ids"]);
    assert_eq!(hp.len(), local.len());
    assert_eq!(
        h["usage"]["prompt_tokens"].as_u64(),
        Some(local.len() as u64)
    );
    assert_eq!(
        f["usage"]["prompt_tokens"].as_u64(),
        Some(local.len() as u64 + 1)
    );
    assert_eq!(&hp[..1], &[0]);
    assert_ne!(hp[1], 0);
    assert_eq!(&fp[..2], &[0, 0]);
    assert_eq!(&fp[1..], &hp[..]);
    let (_, t) = faulty
        .post(
            "/tokenize",
            json!({"messages": user("Hello"), "add_generation_prompt": true}),
        )
        .await;
    assert_eq!(ids_of(&t["tokens"]), fp);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_wrong_template() {
    let healthy = start(&[]).await;
    let faulty = start(&[Fault::WrongTemplate]).await;
    let local = local_ids(&user("Hello"), true);
    let h = greedy(&healthy, "Hello").await;
    let f = greedy(&faulty, "Hello").await;
    assert_eq!(
        ids_of(&h["prompt_token_ids"]),
        local.iter().map(|&i| i as u64).collect::<Vec<_>>()
    );
    assert_ne!(
        ids_of(&f["prompt_token_ids"]),
        ids_of(&h["prompt_token_ids"])
    );
    let (_, d) = faulty
        .post("/detokenize", json!({"tokens": f["prompt_token_ids"]}))
        .await;
    assert_eq!(d["prompt"], "<s>[INST] Hello [/INST]");
    // The llama-2 template raises on roles that do not alternate: a 400 with its message.
    let (st, v) = faulty
        .post(
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}], "max_tokens": 2}),
        )
        .await;
    assert_error(st, &v, 400);
    assert!(v["error"]["message"]
        .as_str()
        .is_some_and(|m| m.contains("Conversation roles must alternate")));
    let (st, _) = healthy
        .post(
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}], "max_tokens": 2}),
        )
        .await;
    assert_eq!(st, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_no_generation_prompt() {
    let healthy = start(&[]).await;
    let faulty = start(&[Fault::NoGenerationPrompt]).await;
    let with_gp = local_ids(&user("Hello"), true);
    let without = local_ids(&user("Hello"), false);
    assert!(without.len() < with_gp.len());
    let h = greedy(&healthy, "Hello").await;
    let f = greedy(&faulty, "Hello").await;
    let as64 = |v: &[u32]| v.iter().map(|&i| i as u64).collect::<Vec<_>>();
    assert_eq!(ids_of(&h["prompt_token_ids"]), as64(&with_gp));
    assert_eq!(ids_of(&f["prompt_token_ids"]), as64(&without));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_drop_eos_stop() {
    let healthy = start(&[]).await;
    let faulty = start(&[Fault::DropEosStop]).await;
    // Find a seed whose sampled reply ends on an eos id on the healthy server (the fixture is
    // deterministic, so this search is too).
    let body = |seed: u64| {
        json!({"messages": user("Say something short"), "temperature": 1.5, "seed": seed,
               "max_tokens": 200, "return_token_ids": true})
    };
    let mut found = None;
    for seed in 0..60 {
        let (_, v) = healthy.post("/v1/chat/completions", body(seed)).await;
        if v["choices"][0]["finish_reason"] == "stop" {
            found = Some((seed, v));
            break;
        }
    }
    let (seed, h) = found.expect("a seed whose reply stops on eos");
    let h_ids = ids_of(&h["choices"][0]["token_ids"]);
    assert!(h_ids.len() < 200);
    assert!([1u64, 3].contains(h_ids.last().unwrap()), "{h_ids:?}");
    assert_eq!(h["choices"][0]["stop_reason"], Value::Null);
    let (_, f) = faulty.post("/v1/chat/completions", body(seed)).await;
    assert_eq!(f["choices"][0]["finish_reason"], "length");
    assert_eq!(f["usage"]["completion_tokens"], 200);
    let f_ids = ids_of(&f["choices"][0]["token_ids"]);
    assert_eq!(&f_ids[..h_ids.len()], &h_ids[..]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_ignore_temperature() {
    let healthy = start(&[]).await;
    let faulty = start(&[Fault::IgnoreTemperature]).await;
    let body = with(
        chat_body("Describe a cat", 24),
        json!({"seed": 7, "return_token_ids": true, "ignore_eos": true}),
    );
    let (_, h1) = healthy.post("/v1/chat/completions", body.clone()).await;
    let (_, h2) = healthy
        .post(
            "/v1/chat/completions",
            with(body.clone(), json!({"seed": 8})),
        )
        .await;
    // temperature 0 is greedy on a healthy server: the seed does not matter.
    assert_eq!(h1["choices"][0]["token_ids"], h2["choices"][0]["token_ids"]);
    let (_, f1) = faulty.post("/v1/chat/completions", body.clone()).await;
    let (_, f2) = faulty
        .post(
            "/v1/chat/completions",
            with(body.clone(), json!({"seed": 8})),
        )
        .await;
    // The server samples with generation_config's temperature 0.7 instead.
    assert_ne!(f1["choices"][0]["token_ids"], h1["choices"][0]["token_ids"]);
    assert_ne!(f1["choices"][0]["token_ids"], f2["choices"][0]["token_ids"]);
    // Same seed, same draw: the fault is not noise.
    let (_, f3) = faulty.post("/v1/chat/completions", body).await;
    assert_eq!(f1["choices"][0]["token_ids"], f3["choices"][0]["token_ids"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_stream_drops_chunk() {
    let healthy = start(&[]).await;
    let faulty = start(&[Fault::StreamDropsChunk]).await;
    let body = with(
        chat_body("Tell me a story", 16),
        json!({"ignore_eos": true}),
    );
    let streamed = with(body.clone(), json!({"stream": true}));
    let (_, full) = healthy.post("/v1/chat/completions", body.clone()).await;
    let text = full["choices"][0]["message"]["content"].as_str().unwrap();
    let h = healthy
        .stream("/v1/chat/completions", streamed.clone())
        .await;
    assert_eq!(h.text(), text);
    let (_, ffull) = faulty.post("/v1/chat/completions", body).await;
    assert_eq!(ffull["choices"][0]["message"]["content"], text);
    let f = faulty.stream("/v1/chat/completions", streamed).await;
    assert!(f.has_done());
    assert_ne!(f.text(), text);
    assert!(f.text().len() < text.len());
    assert_eq!(f.chunks().len() + 1, h.chunks().len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_usage_lies() {
    let healthy = start(&[]).await;
    let faulty = start(&[Fault::UsageLies]).await;
    let local = local_ids(&user("Hello"), true).len() as u64;
    for (s, lies) in [(&healthy, false), (&faulty, true)] {
        let v = greedy(s, "Hello").await;
        let n = ids_of(&v["choices"][0]["token_ids"]).len() as u64;
        let u = &v["usage"];
        let (p, c) = if lies { (local - 1, n + 3) } else { (local, n) };
        assert_eq!(u["prompt_tokens"].as_u64(), Some(p), "{u}");
        assert_eq!(u["completion_tokens"].as_u64(), Some(c), "{u}");
        let st = s
            .stream(
                "/v1/chat/completions",
                with(
                    chat_body("Hello", 16),
                    json!({"ignore_eos": true, "stream": true, "stream_options": {"include_usage": true}}),
                ),
            )
            .await;
        assert_eq!(st.usage().as_ref(), Some(u));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_no_done() {
    let healthy = start(&[]).await;
    let faulty = start(&[Fault::NoDone]).await;
    let body = with(chat_body("Hello", 6), json!({"stream": true}));
    let h = healthy.stream("/v1/chat/completions", body.clone()).await;
    let f = faulty.stream("/v1/chat/completions", body).await;
    assert!(h.has_done());
    assert!(!f.has_done());
    assert!(!f.events.iter().any(|e| e == "[DONE]"));
    assert_eq!(f.text(), h.text());
    assert_eq!(f.finish_reason(), h.finish_reason());
    let c = faulty
        .stream(
            "/v1/completions",
            json!({"prompt": "Hi", "max_tokens": 3, "stream": true}),
        )
        .await;
    assert!(!c.has_done());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_slow_first_token() {
    let healthy = start(&[]).await;
    let faulty = start(&[Fault::SlowFirstToken]).await;
    let body = with(
        chat_body("Hello", 4),
        json!({"stream": true, "ignore_eos": true}),
    );
    // The best of a few runs, so a busy machine does not fail the healthy side.
    let mut best = f64::MAX;
    for _ in 0..5 {
        let h = healthy.stream("/v1/chat/completions", body.clone()).await;
        best = best.min(h.first_content_time().expect("content"));
    }
    assert!(best < 0.3, "a healthy first token took {best} s");
    let f = faulty.stream("/v1/chat/completions", body.clone()).await;
    let ttft = f.first_content_time().expect("content");
    assert!(ttft >= 0.3, "first token after {ttft} s");
    let h = healthy.stream("/v1/chat/completions", body).await;
    assert_eq!(f.text(), h.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_slow_decode() {
    let healthy = start(&[]).await;
    let faulty = start(&[Fault::SlowDecode]).await;
    let body = with(
        chat_body("Hello", 12),
        json!({"ignore_eos": true, "return_token_ids": true}),
    );
    let mut best = f64::MAX;
    for _ in 0..5 {
        let t0 = Instant::now();
        healthy.post("/v1/chat/completions", body.clone()).await;
        best = best.min(t0.elapsed().as_secs_f64());
    }
    assert!(best < 0.36, "a healthy 12-token reply took {best} s");
    let t0 = Instant::now();
    let (_, f) = faulty.post("/v1/chat/completions", body.clone()).await;
    assert!(t0.elapsed().as_secs_f64() >= 0.36);
    let (_, h) = healthy.post("/v1/chat/completions", body).await;
    assert_eq!(f["choices"][0]["token_ids"], h["choices"][0]["token_ids"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_nondeterministic() {
    let healthy = start(&[]).await;
    let faulty = start(&[Fault::Nondeterministic]).await;
    let body = with(
        chat_body("Count to ten", 12),
        json!({"ignore_eos": true, "return_token_ids": true}),
    );
    let mut h_seen = std::collections::BTreeSet::new();
    let mut f_seen = std::collections::BTreeSet::new();
    let mut h_ids = vec![];
    for _ in 0..8 {
        let (_, h) = healthy.post("/v1/chat/completions", body.clone()).await;
        h_ids = ids_of(&h["choices"][0]["token_ids"]);
        h_seen.insert(h_ids.clone());
        let (_, f) = faulty.post("/v1/chat/completions", body.clone()).await;
        let ids = ids_of(&f["choices"][0]["token_ids"]);
        assert_eq!(ids.len(), 12);
        assert_eq!(f["usage"]["completion_tokens"], 12);
        f_seen.insert(ids);
    }
    assert_eq!(h_seen.len(), 1);
    assert!(
        f_seen.len() >= 2,
        "8 repeats gave {} distinct replies",
        f_seen.len()
    );
    assert!(!f_seen.contains(&h_ids));
    // Streams are perturbed the same way and still complete.
    let st = faulty
        .stream("/v1/chat/completions", with(body, json!({"stream": true})))
        .await;
    assert!(st.has_done());
    assert_eq!(st.token_ids().len(), 12);
}

#[test]
fn help_documents_every_fault() {
    let out = std::process::Command::new(assert_cmd::cargo::cargo_bin("chatgate"))
        .args(["serve", "--help"])
        .output()
        .expect("runs");
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for f in Fault::ALL {
        assert!(help.contains(f.name()), "{} missing from --help", f.name());
    }
    let bad = std::process::Command::new(assert_cmd::cargo::cargo_bin("chatgate"))
        .args(["serve", "--model", FIXTURE, "--fault", "no-such-fault"])
        .output()
        .expect("runs");
    assert_eq!(bad.status.code(), Some(2));
    let missing = std::process::Command::new(assert_cmd::cargo::cargo_bin("chatgate"))
        .args(["serve", "--model", "/no/such/model", "--port", "0"])
        .output()
        .expect("runs");
    assert_eq!(missing.status.code(), Some(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_serves_and_stops_on_sigterm() {
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("chatgate"))
        .args([
            "serve",
            "--model",
            FIXTURE,
            "--port",
            "0",
            "--model-name",
            "bin-model",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawns");
    let stdout = child.stdout.take().expect("stdout");
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).map(|_| line)
    })
    .await
    .expect("reader")
    .expect("a line");
    let url = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_string();
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    let client = reqwest::Client::new();
    let models: Value = client
        .get(format!("{url}/v1/models"))
        .send()
        .await
        .expect("request")
        .json()
        .await
        .expect("json");
    assert_eq!(models["data"][0]["id"], "bin-model");
    let chat: Value = client
        .post(format!("{url}/v1/chat/completions"))
        .json(&json!({"model": "bin-model", "messages": user("Hi"), "max_tokens": 4, "temperature": 0}))
        .send()
        .await
        .expect("request")
        .json()
        .await
        .expect("json");
    assert_eq!(
        chat["usage"]["completion_tokens"].as_u64().map(|n| n <= 4),
        Some(true)
    );
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(killed.success());
    let status = tokio::task::spawn_blocking(move || {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(s) = child.try_wait().expect("wait") {
                return Some(s);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    })
    .await
    .expect("waiter")
    .expect("exits within 10 s of SIGTERM");
    assert!(status.success(), "exit status {status:?}");
}
