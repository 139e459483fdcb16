//! `chatgate parse-reply` on completions as each family's models write them
//! (tests/corpus/replies/cases.json), read with the family's real chat template
//! (tests/corpus/templates): the message must equal the one the case's source gives — vLLM
//! 0.32.0's own parser code run on the text, llama.cpp's test suite, or the format's spec.
use std::path::Path;

use serde_json::{json, Value};

use crate::common::cli::chatgate_in;

const REPO: &str = env!("CARGO_MANIFEST_DIR");

fn cases() -> Vec<Value> {
    let path = Path::new(REPO).join("tests/corpus/replies/cases.json");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    doc["cases"].as_array().unwrap().clone()
}

/// `parse-reply --format json` on one case: (exit code, output, stderr).
fn parse(case: &Value, dir: &Path) -> (i32, Value, String) {
    std::fs::write(dir.join("reply.txt"), case["text"].as_str().unwrap()).unwrap();
    std::fs::write(dir.join("tools.json"), case["tools"].to_string()).unwrap();
    let template = Path::new(REPO)
        .join("tests/corpus/templates")
        .join(case["template"].as_str().unwrap());
    let template = template.to_str().unwrap();
    let kwargs = case.get("kwargs").map(Value::to_string);
    let mut args = vec![
        "parse-reply",
        "--template",
        template,
        "--text",
        "reply.txt",
        "--tools",
        "tools.json",
        "--format",
        "json",
    ];
    if let Some(k) = &kwargs {
        args.extend(["--template-kwargs", k.as_str()]);
    }
    let (code, out, err) = chatgate_in(&args, dir);
    let out = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}\n{err}"));
    (code, out, err)
}

#[test]
fn every_family_reads_to_the_reference_message() {
    let dir = tempfile::tempdir().unwrap();
    let mut wrong = Vec::new();
    for case in cases() {
        let (code, got, err) = parse(&case, dir.path());
        let want = &case["expect"];
        let calls: Vec<Value> = got["tool_calls"]
            .as_array()
            .unwrap()
            .iter()
            .zip(
                want["tool_calls"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .chain(std::iter::repeat(&Value::Null)),
            )
            .map(|(c, w)| {
                // Ids are compared where the model writes one (Kimi's header).
                let mut c = c.clone();
                if w.get("id").is_none() {
                    c.as_object_mut().unwrap().remove("id");
                }
                c
            })
            .collect();
        let got_message = json!({
            "content": got["content"],
            "reasoning_content": got["reasoning_content"],
            "tool_calls": calls,
        });
        // A case whose call the reference parser cannot read exits 1 (`exit` in the case).
        let want_code = case.get("exit").and_then(Value::as_i64).unwrap_or(0) as i32;
        if code != want_code || &got_message != want {
            wrong.push(format!(
                "{} (exit {code}; {err})\n  want {want}\n  got  {got_message}\n  read {}",
                case["name"], got["framing"]["read"]
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_framing_is_named_after_the_template_not_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let want = [
        ("Qwen3-Coder.jinja", "qwen3_coder"),
        ("GLM-4.6.jinja", "glm45"),
        ("Kimi-K2-Thinking.jinja", "kimi_k2"),
        ("MiniMax-M2.jinja", "minimax_m2"),
        ("deepseek-ai-DeepSeek-V3.1.jinja", "deepseek_v31"),
        ("deepseek-ai-DeepSeek-V3.2.jinja", "deepseek_v32"),
        ("google-gemma-4-31B-it.jinja", "gemma4"),
        ("mistralai-Ministral-3-14B-Reasoning-2512.jinja", "mistral"),
        ("openai-gpt-oss-20b.jinja", "openai"),
        (
            "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja",
            "hermes",
        ),
    ];
    for (template, parser) in want {
        let case = json!({"template": template, "text": "Hello.", "tools": []});
        let (code, got, _) = parse(&case, dir.path());
        assert_eq!(
            got["framing"]["vllm_tool_call_parser"], parser,
            "{template}: {got}"
        );
        // Text with no harmony header is not harmony: returned as content (vLLM's recovery
        // when openai-harmony fails), and named.
        assert_eq!(code, i32::from(parser == "openai"), "{template}: {got}");
        assert_eq!(
            got["content"].is_null(),
            parser != "openai" && got["reasoning_content"].is_string()
        );
        // Plain text is content whatever the framing; reasoning where the generation prompt
        // opened a think block (MiniMax-M2's); harmony's text is a channel's body.
        let opened = got["framing"]["read"]
            .to_string()
            .contains("the generation prompt opens it");
        match (parser, opened) {
            ("openai", _) => assert_eq!(got["content"], "Hello."),
            (_, true) => assert_eq!(got["reasoning_content"], "Hello.", "{template}"),
            (_, false) => assert_eq!(got["content"], "Hello.", "{template}"),
        }
    }
}

#[test]
fn an_unreadable_call_exits_1_with_where_and_why_and_bad_input_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    // A Hermes call cut inside its JSON: vLLM's hermes parser returns the text as content.
    let case = json!({
        "template": "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja",
        "text": "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"city\": \"Par",
        "tools": [],
    });
    let (code, got, err) = parse(&case, dir.path());
    assert_eq!(code, 1, "{got}");
    assert_eq!(got["content"], case["text"]);
    assert_eq!(got["tool_calls"], json!([]));
    assert_eq!(got["problems"][0]["at"], 0);
    assert!(
        err.contains("reply.txt: byte 0: a call the parser cannot read"),
        "{err}"
    );

    // A DeepSeek-V3.1 call whose arguments are not JSON: passed through, named.
    let case = json!({
        "template": "deepseek-ai-DeepSeek-V3.1.jinja",
        "text": "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{city: Paris}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        "tools": [],
    });
    let (code, got, err) = parse(&case, dir.path());
    assert_eq!(code, 1, "{got}");
    assert_eq!(got["tool_calls"][0]["arguments"], "{city: Paris}");
    assert!(err.contains("`get_time`'s arguments are not JSON"), "{err}");

    // Tools that are not a list: bad input, the file named.
    std::fs::write(dir.path().join("tools.json"), "{\"name\": \"f\"}").unwrap();
    std::fs::write(dir.path().join("reply.txt"), "hi").unwrap();
    let template = format!("{REPO}/tests/corpus/templates/Qwen3-Coder.jinja");
    let (code, _, err) = chatgate_in(
        &[
            "parse-reply",
            "--template",
            &template,
            "--text",
            "reply.txt",
            "--tools",
            "tools.json",
        ],
        dir.path(),
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("tools.json") && err.contains("no \"tools\" list"),
        "{err}"
    );
}

#[test]
fn schema_silence_and_a_cut_call_are_said() {
    let dir = tempfile::tempdir().unwrap();
    let case = json!({
        "template": "Qwen3-Coder.jinja",
        "text": "<tool_call>\n<function=f>\n<parameter=i>\n1\n</parameter>\n<parameter=z>\n2\n</parameter>\n<parameter=s>\nhello wor",
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
            "properties": {"i": {"type": "integer"}, "s": {"type": "string"}}}}}],
    });
    let (code, got, _) = parse(&case, dir.path());
    assert_eq!(code, 0, "{got}");
    assert_eq!(got["tool_calls"][0]["arguments"], json!({"i": 1, "z": "2"}));
    let notes = got["notes"].to_string();
    assert!(notes.contains("silent on z"), "{notes}");
    assert!(notes.contains("cut off"), "{notes}");
}

/// `--model` takes a GGUF file as it takes a directory: the template is the file's own
/// (`model.gguf#tokenizer.chat_template`, named beside the file, not inside it).
#[test]
fn a_gguf_file_is_read_with_the_template_it_carries() {
    let model = crate::tool_calls::standin();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("reply.txt"), crate::tool_calls::CALL).unwrap();
    let gguf = model.join("model.gguf");
    let args = [
        "parse-reply",
        "--model",
        gguf.to_str().unwrap(),
        "--text",
        "reply.txt",
        "--format",
        "json",
    ];
    let (code, out, err) = chatgate_in(&args, dir.path());
    assert_eq!(code, 0, "{out}\n{err}");
    let got: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(got["tool_calls"][0]["name"], "get_weather", "{got}");
    assert_eq!(
        got["framing"]["template"],
        format!("{}#tokenizer.chat_template", gguf.display()),
        "{got}"
    );
}

/// The JSON framings' expected messages are vLLM's own: its parser classes, run on each case's
/// text by scripts/fixtures/vllm_read_replies.py, return them (and still differ where a case
/// says vLLM's reading is a bug the gate flags).
#[test]
fn the_json_cases_are_what_vllm_returns() {
    let Some(python) = crate::common::vllm::python() else {
        return;
    };
    let out = std::process::Command::new(python)
        .arg(Path::new(REPO).join("scripts/fixtures/vllm_read_replies.py"))
        .env("HF_HUB_OFFLINE", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("0 case(s) differ"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Every JSON framing is covered.
    let parsers: std::collections::BTreeSet<String> = cases()
        .iter()
        .filter_map(|c| c["vllm_parser"].as_str().map(String::from))
        .collect();
    assert_eq!(
        parsers.into_iter().collect::<Vec<_>>(),
        ["hermes", "llama3_json", "mistral"]
    );
}
