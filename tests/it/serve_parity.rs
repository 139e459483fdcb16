//! A served reply equals the in-process one: the same stand-in, answered by the in-process
//! candle target (a suite's default target and local reference) and by `chatgate serve` over
//! real loopback HTTP (read by the gate's own client), must give the same snapshot body — text,
//! reasoning, tool calls, finish reason — for every tokenizer family in tests/corpus and every
//! request shape a suite sends: greedy and sampled, multi-turn, stop strings (matched early,
//! matched later, never matched), a stop token id, streamed and not. A replay whose snapshots
//! were accepted in-process then passes on a healthy `chatgate serve` (issue 47: a leading space
//! was dropped from every served reply of a template with think tags).
use std::path::Path;
use std::time::Duration;

use chatgate::endpoint::local::CandleTarget;
use chatgate::endpoint::openai::{HttpOptions, HttpTarget};
use chatgate::exchange::{ChatRequest, Record};
use chatgate::serve::{self, ServeOptions};
use chatgate::snapshot::SnapshotBody;
use serde_json::{json, Map, Value};

use crate::common::families::Family;

/// Every tokenizer family of tests/corpus/models; the ones without a chat template get one
/// (a template other than the tokenizer's own is still that tokenizer's family), and the
/// reasoning shapes: a template whose prompt opens the think block (DeepSeek-R1's, on the
/// Llama-3.2 tokenizer) and Qwen3's, scripted to think and then call a tool, or to answer
/// with no block at all, its first token a space.
fn families() -> Vec<(Family, Option<&'static str>)> {
    let with = |model, template| Family {
        template: Some(template),
        ..Family::corpus(model, model)
    };
    vec![
        (with("DeepSeek-V3", "Qwen-Qwen2.5-7B-Instruct.jinja"), None),
        (crate::common::families::LLAMA32, None),
        (Family::corpus("Mistral", "Mistral-7B-Instruct-v0.3"), None),
        (Family::corpus("Phi-3", "Phi-3-mini-4k-instruct"), None),
        (Family::corpus("Qwen2.5", "Qwen2.5-0.5B-Instruct"), None),
        (Family::corpus("Qwen3", "Qwen3"), None),
        (
            with("SmolLM2-135M-Instruct", "Qwen-Qwen2.5-7B-Instruct.jinja"),
            None,
        ),
        (
            Family::corpus("TinyLlama", "TinyLlama-1.1B-Chat-v1.0"),
            None,
        ),
        (crate::common::families::GEMMA2, None),
        (
            // Its gpt2 config is no architecture stand-ins are built for: qwen3's, on its
            // own byte-level BPE.
            Family {
                arch: Some("qwen3"),
                ..with("gpt2-xl", "Qwen-Qwen2.5-7B-Instruct.jinja")
            },
            None,
        ),
        (
            Family {
                name: "DeepSeek-R1's template (the prompt opens <think>) on Llama-3.2",
                template: Some("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja"),
                ..crate::common::families::LLAMA32
            },
            None,
        ),
        (crate::tool_calls::qwen3(), Some(THINK_AND_CALL)),
        (crate::tool_calls::qwen3(), Some(SPACE_FIRST)),
    ]
}

/// A reply that thinks, then calls a tool.
const THINK_AND_CALL: &str = "<think>\nSunny, I think.\n</think>\n\n<tool_call>{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}</tool_call>";
/// A reply with no think block whose first token carries a space, on a template with think
/// tags: the space is the model's, and no server drops it.
const SPACE_FIRST: &str = " Sunny in Paris.";

fn user(text: &str) -> Vec<Value> {
    vec![json!({"role": "user", "content": text})]
}

fn request(messages: Vec<Value>, stop: &[&str], extra: Value) -> ChatRequest {
    ChatRequest {
        messages,
        max_tokens: Some(24),
        temperature: Some(0.0),
        seed: Some(0),
        stop: stop.iter().map(|s| s.to_string()).collect(),
        extra: match extra {
            Value::Object(m) => m,
            _ => Map::new(),
        },
        ..ChatRequest::default()
    }
}

fn tools() -> Vec<Value> {
    vec![json!({"type": "function", "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    }})]
}

/// Tools offered, with room for a whole call.
fn called() -> ChatRequest {
    ChatRequest {
        tools: Some(tools()),
        max_tokens: Some(64),
        ..request(user("What is the weather in Paris?"), &[], json!({}))
    }
}

/// The request shapes, the stop strings and stop token taken from the greedy reply itself so
/// they match where intended: at its first token, halfway, never.
fn shapes(greedy: &Record, target: &CandleTarget) -> Vec<(String, ChatRequest)> {
    let hello = || user("Hi! Who are you?");
    let ids = greedy.token_ids.clone().unwrap_or_default();
    let piece = |i: usize| {
        ids.get(i)
            .map(|&id| target.decode_token(id))
            .unwrap_or_default()
    };
    let first = piece(0).trim().to_string();
    let middle = piece(ids.len() / 2).trim().to_string();
    let mut out = vec![
        ("greedy".to_string(), request(hello(), &[], json!({}))),
        (
            "a stop string never matched".into(),
            request(hello(), &["\u{1}never"], json!({})),
        ),
        (
            "multi-turn".into(),
            request(
                vec![
                    json!({"role": "user", "content": "Name a colour."}),
                    json!({"role": "assistant", "content": "Blue."}),
                    json!({"role": "user", "content": "Another one?"}),
                ],
                &["five"],
                json!({}),
            ),
        ),
        (
            "sampled with a seed".into(),
            ChatRequest {
                temperature: Some(0.8),
                seed: Some(7),
                ..request(user("Write a short poem about rain."), &[], json!({}))
            },
        ),
        ("tools offered".into(), called()),
    ];
    if !first.is_empty() {
        out.push((
            format!("a stop string at the first token ({first:?})"),
            request(hello(), &[first.as_str()], json!({})),
        ));
    }
    if !middle.is_empty() {
        out.push((
            format!("a stop string halfway ({middle:?})"),
            request(hello(), &[middle.as_str(), "\u{1}never"], json!({})),
        ));
    }
    if let Some(&id) = ids.get(ids.len() / 2) {
        out.push((
            format!("a stop token id ({id})"),
            request(hello(), &[], json!({"stop_token_ids": [id]})),
        ));
    }
    out
}

fn body(r: &Record) -> SnapshotBody {
    SnapshotBody {
        token_ids: None,
        ..SnapshotBody::from_record(r, 0)
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// One family: every shape in-process, then served plain and streamed; the differences.
async fn differences(model: &Path) -> (Vec<String>, usize) {
    let local = CandleTarget::load(model).expect("the stand-in loads in-process");
    let opts = ServeOptions {
        model: model.to_path_buf(),
        model_name: Some("standin".into()),
        ..ServeOptions::default()
    };
    let state = tokio::task::spawn_blocking(move || serve::load(&opts))
        .await
        .unwrap()
        .expect("chatgate serve loads the stand-in");
    let server = serve::start(state, "127.0.0.1:0").await.unwrap();
    let http = HttpTarget::new(HttpOptions {
        base_url: server.url(),
        model: "standin".into(),
        read_timeout: Duration::from_secs(60),
        ..HttpOptions::default()
    })
    .unwrap();
    let greedy = local
        .chat(&request(user("Hi! Who are you?"), &[], json!({})))
        .await
        .expect("the in-process reply");
    let mut diffs = Vec::new();
    let mut compared = 0;
    for (shape, req) in shapes(&greedy, &local) {
        let want = body(&local.chat(&req).await.expect("in-process"));
        for stream in [false, true] {
            let got = http
                .chat(&ChatRequest {
                    stream,
                    ..req.clone()
                })
                .await
                .unwrap_or_else(|e| panic!("{shape}: chatgate serve: {e:?}"));
            compared += 1;
            let got = body(&got);
            if got != want {
                diffs.push(format!(
                    "{shape}, {}: in-process {want:?}\n    served {got:?}",
                    if stream { "streamed" } else { "plain" }
                ));
            }
        }
    }
    server.stop().await.expect("the server stops");
    (diffs, compared)
}

/// What a scripted stand-in's reply must read as: (reasoning, content, calls).
fn read_as(script: &str) -> (&'static str, &'static str, usize) {
    match script {
        THINK_AND_CALL => ("\nSunny, I think.\n", "", 1),
        SPACE_FIRST => ("", " Sunny in Paris.", 0),
        other => panic!("no reading written for {other:?}"),
    }
}

#[test]
fn served_replies_equal_in_process_replies_for_every_corpus_tokenizer() {
    let mut failures = Vec::new();
    let mut scripted = 0;
    for (family, script) in families() {
        let model = match script {
            Some(reply) => family.scripted(reply).0,
            None => family.standin().0,
        };
        let (diffs, compared) = rt().block_on(differences(&model));
        assert!(
            compared >= 10,
            "{}: {compared} requests compared",
            family.name
        );
        if let Some(script) = script {
            // The scripted reply, read in-process as a server reads it: the think block split
            // off, the call parsed, and a reply with no block kept byte for byte.
            let local = CandleTarget::load(&model).unwrap();
            let r = rt().block_on(local.chat(&called())).unwrap();
            let (reasoning, content, calls) = read_as(script);
            assert_eq!(
                (r.reasoning.as_str(), r.text.as_str(), r.tool_calls.len()),
                (reasoning, content, calls),
                "{}: {script:?}",
                family.name
            );
            scripted += 1;
        }
        failures.extend(diffs.into_iter().map(|d| format!("{}: {d}", family.name)));
    }
    assert_eq!(scripted, 2);
    assert!(
        failures.is_empty(),
        "served replies differ from in-process ones:\n{}",
        failures.join("\n")
    );
}
