//! `server.tool-call-parse` on a tool-calling family: a scripted stand-in of Qwen3 (the
//! Qwen2.5 tokenizer, whose `<tool_call>` is an added token as in Qwen3; Qwen3's template; the
//! qwen3 architecture) whose every greedy reply is a Hermes-style `<tool_call>` block —
//! `chatgate standin --reply`: real weights that write the family's real framing. The healthy
//! `chatgate serve` parses the call as vLLM's hermes parser does, plain and streamed, and
//! passes; `transformers serve`, whose qwen response parser reads `<tool_call>`, passes too;
//! llama-cpp-python with its default chat format (no tool-call parser: the way users run it)
//! returns the call as text and is caught. `chatgate serve`'s tool faults are catch-matrix rows
//! (tests/it/catch_matrix.rs `tool_call_faults`).
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::common::families::Family;
use crate::reasoning_split::{finding, gate, init, Serve};

/// What the stand-in writes, its `<tool_call>` tags the tokenizer's added tokens (spelt with
/// token ids used once each). Real Qwen writes a newline inside the tags and spaces in the
/// JSON; a bigram stand-in cannot: the newline token is the one every prompt ends on (it must
/// lead into the reply, not on inside it), and `": "` has too few spellings for three keys. The
/// parsers read the call either way (vLLM's hermes regex, transformers' `\s*<tool_call>`).
pub(crate) const CALL: &str =
    "<tool_call>{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}</tool_call>";

/// The Qwen3 stand-in that always calls `get_weather` (built once, cached).
pub(crate) fn standin() -> PathBuf {
    let family = Family {
        template: Some("Qwen-Qwen3.jinja"),
        arch: Some("qwen3"),
        ..Family::corpus(
            "Qwen3: the Qwen2.5 tokenizer, Qwen3's template",
            "Qwen2.5-0.5B-Instruct",
        )
    };
    family.scripted(CALL).0
}

/// A suite `init` wrote for `model` at `url`, whose first probe offers `get_weather`.
pub(crate) fn suite_with_tools(dir: &Path, model: &Path, url: &str, stack: Option<&str>) {
    init(dir, model, url, stack);
    let path = dir.join("suite.prompts.jsonl");
    let rows = std::fs::read_to_string(&path).expect("prompts");
    let tool = json!({
        "id": "weather-tool",
        "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
        "tools": [{"type": "function", "function": {
            "name": "get_weather",
            "description": "The current weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        }}],
    });
    std::fs::write(&path, format!("{tool}\n{rows}")).expect("prompts");
}

/// The stand-in's greedy reply is the call, to any prompt, and ends on the turn terminator:
/// the framing is the model's, byte for byte (read back through the real server without a
/// tool parser, which returns it as text).
#[test]
fn the_scripted_standin_writes_the_call() {
    let model = standin();
    let server = Serve::start(&model, &["tool-calls-as-text"]);
    let url = format!("{}/v1/chat/completions", server.url);
    let reply: Value = tokio::runtime::Runtime::new()
        .expect("runtime")
        .block_on(async {
            reqwest::Client::new()
                .post(url)
                .json(&json!({
                    "model": "model",
                    "messages": [{"role": "user", "content": "Hi"}],
                    "temperature": 0,
                    "max_tokens": 64,
                }))
                .send()
                .await?
                .json()
                .await
        })
        .expect("a reply");
    let choice = &reply["choices"][0];
    assert_eq!(choice["message"]["content"], CALL, "{reply}");
    assert_eq!(choice["finish_reason"], "stop", "{reply}");
}

/// The healthy `chatgate serve` parses the call the model wrote: `tool_calls` with JSON
/// arguments, plain and streamed, `content` null, finish_reason `tool_calls`; the gate passes.
#[test]
fn chatgate_serve_parses_the_call_the_model_wrote() {
    let model = standin();
    let server = Serve::start(&model, &[]);
    let dir = tempfile::tempdir().expect("tempdir");
    suite_with_tools(dir.path(), &model, &server.url, None);
    let (code, report) = gate(dir.path(), &server.url, true);
    let f = finding(&report, "server.tool-call-parse");
    assert_eq!(f["severity"], "pass", "{f}");
    assert!(
        f["evidence"]["replies"]
            .as_str()
            .unwrap()
            .contains(": 2 with their calls parsed"),
        "{f}"
    );
    assert_eq!(code, 0, "healthy: {}", report["first_broken"]);
}

/// `transformers serve` picks its response parser by `model_type` (qwen3: `<tool_call>` JSON
/// into `tool_calls`): the call comes back parsed, whole and streamed.
#[test]
fn transformers_serve_parses_the_call() {
    let Some(exe) = crate::common::transformers_serve::executable() else {
        return;
    };
    let model = standin();
    let server = crate::common::transformers_serve::TransformersServe::start(&exe, &model);
    let dir = tempfile::tempdir().expect("tempdir");
    suite_with_tools(dir.path(), &model, &server.url, Some("transformers"));
    let (_, report) = gate(dir.path(), &server.url, true);
    let f = finding(&report, "server.tool-call-parse");
    assert_eq!(f["severity"], "pass", "{f}\n{}", server.log_text());
    // Both the whole reply and the stream carry the call.
    assert!(
        f["evidence"]["replies"]
            .as_str()
            .unwrap()
            .contains(": 2 with their calls parsed"),
        "{f}"
    );
}

/// A reply the bigram table cannot write (one id needed twice with two successors) is refused
/// with the reason and exit 2.
#[test]
fn a_reply_a_standin_cannot_script_is_refused() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let family = Family::corpus("Qwen2.5", "Qwen2.5-0.5B-Instruct");
    let from = family.source(tmp.path());
    let out = tmp.path().join("out");
    let reply = "a".repeat(2000);
    let (code, stdout, stderr) = crate::common::cli::chatgate_in(
        &[
            "standin",
            "--from",
            from.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--reply",
            &reply,
        ],
        tmp.path(),
    );
    assert_eq!(code, 2, "{stdout}{stderr}");
    assert!(
        stderr.contains("cannot be spelt with token ids used once each"),
        "{stderr}"
    );
}
