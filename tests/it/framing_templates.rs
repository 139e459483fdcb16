//! What each real template says about reasoning and tool calls (chain/framing.rs), derived by
//! rendering, checked against the template sources (tests/corpus/templates; the expected
//! framings below were read off each template's own text, the line that writes a call or a
//! think block, not off chatgate's output).
use std::path::Path;

use chatgate::template::framing::{derive, Framing};
use chatgate::template::{ChatTemplate, SpecialTokens};
use serde_json::json;

fn framing(file: &str, bos: Option<&str>, eos: Option<&str>) -> Framing {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus/templates")
        .join(file);
    let source = std::fs::read_to_string(&path).expect("template");
    let template = ChatTemplate::new(&source).expect("compiles");
    let special = SpecialTokens {
        bos_token: bos.map(str::to_string),
        eos_token: eos.map(str::to_string),
        ..SpecialTokens::default()
    };
    derive(&template, &special)
}

/// Qwen3: Hermes-style `<tool_call>` JSON with `arguments`, parallel calls; `<think>` written
/// around a turn's `reasoning_content`; `enable_thinking=false` closes an empty think block in
/// the generation prompt.
#[test]
fn qwen3_thinks_in_tags_and_calls_hermes_style() {
    let f = framing("Qwen-Qwen3.jinja", None, Some("<|im_end|>"));
    assert!(f.tools.offered);
    let call = f.tools.call.expect("a call");
    assert_eq!(call.open, "<tool_call>\n");
    assert_eq!(call.close, "\n</tool_call>");
    assert_eq!(call.arguments_key.as_deref(), Some("arguments"));
    assert!(call.parallel);
    assert_eq!(call.parser.and_then(|p| p.vllm), Some("hermes"));
    let r = f.reasoning.expect("reasoning");
    assert_eq!((r.open.as_str(), r.close.as_str()), ("<think>", "</think>"));
    assert!(!r.prompt_opens);
    assert_eq!(
        r.switches,
        vec![("enable_thinking".to_string(), json!(false))]
    );
    assert_eq!(
        r.parser.vllm,
        Some("qwen3"),
        "the parser that reads enable_thinking"
    );
}

/// DeepSeek-R1-Distill: the generation prompt opens `<think>\n`; the template never prints
/// `tools` (a server told to offer tools gives this model none). It writes a call only for an
/// assistant message whose `content` is None — a key transformers 5's `apply_chat_template`
/// drops before rendering (`{k: v for k, v in msg.items() if v is not None}`), so under v5
/// semantics no call renders (the plain-reply branch then fails on the missing content) and
/// the framing is named from the markers in its source.
#[test]
fn deepseek_r1_distill_opens_its_think_block_and_offers_no_tools() {
    let f = framing(
        "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
        Some("<｜begin▁of▁sentence｜>"),
        Some("<｜end▁of▁sentence｜>"),
    );
    assert!(!f.tools.offered);
    assert_eq!(f.tools.call, None);
    let (marker, parser) = f.tools.named.expect("DeepSeek's call markers");
    assert_eq!(marker, "<｜tool▁calls▁begin｜>");
    assert_eq!(parser.vllm, Some("deepseek_v3"));
    let r = f.reasoning.expect("reasoning");
    assert_eq!((r.open.as_str(), r.close.as_str()), ("<think>", "</think>"));
    assert!(r.prompt_opens);
    assert!(r.switches.is_empty());
}

/// Llama 3.1: a bare JSON object with `parameters`, one call per turn (the template raises on
/// two); no reasoning.
#[test]
fn llama31_calls_are_bare_json_with_parameters_one_at_a_time() {
    let f = framing(
        "meta-llama-Llama-3.1-8B-Instruct.jinja",
        Some("<|begin_of_text|>"),
        Some("<|eot_id|>"),
    );
    assert!(f.tools.offered);
    let call = f.tools.call.expect("a call");
    assert_eq!(call.open, "");
    assert_eq!(call.close, "");
    assert_eq!(call.arguments_key.as_deref(), Some("parameters"));
    assert!(!call.parallel);
    assert_eq!(call.parser.and_then(|p| p.vllm), Some("llama3_json"));
    assert_eq!(f.reasoning, None);
}

/// Mistral Nemo: `[TOOL_CALLS]` and a JSON array of calls with `arguments`, closed by the
/// array's `]` before `</s>`.
#[test]
fn mistral_nemo_calls_after_its_tool_calls_token() {
    let f = framing(
        "mistralai-Mistral-Nemo-Instruct-2407.jinja",
        Some("<s>"),
        Some("</s>"),
    );
    assert!(f.tools.offered);
    let call = f.tools.call.expect("a call");
    assert_eq!(call.open, "[TOOL_CALLS][");
    assert_eq!(call.close, "]");
    assert_eq!(call.arguments_key.as_deref(), Some("arguments"));
    assert!(call.parallel);
    assert_eq!(call.parser.and_then(|p| p.vllm), Some("mistral"));
    assert_eq!(f.reasoning, None);
}

/// gpt-oss (harmony): reasoning on the analysis channel, `reasoning_effort` in the system
/// message, a call addressed `to=functions.NAME` and ended by `<|call|>`, one call per turn
/// (the template writes only `tool_calls[0]`).
#[test]
fn gpt_oss_reasons_on_the_analysis_channel_and_calls_to_functions() {
    let f = framing("openai-gpt-oss-20b.jinja", None, Some("<|return|>"));
    assert!(f.tools.offered);
    let call = f.tools.call.expect("a call");
    assert!(call.open.contains("to=functions."), "{call:?}");
    assert!(call.close.ends_with("<|call|>"), "{call:?}");
    assert_eq!(call.arguments_key, None);
    assert!(!call.parallel);
    assert_eq!(call.parser.and_then(|p| p.vllm), Some("openai"));
    let r = f.reasoning.expect("reasoning");
    assert_eq!(r.open, "<|channel|>analysis<|message|>");
    assert_eq!(r.close, "<|end|>");
    assert!(!r.prompt_opens);
    assert_eq!(
        r.switches,
        vec![("reasoning_effort".to_string(), json!("low"))]
    );
}

/// Hermes 2 Pro and Qwen2.5: the same `<tool_call>` framing (Hermes writes `arguments` before
/// `name`); neither reasons.
#[test]
fn hermes_and_qwen25_share_the_tool_call_tags() {
    for (file, bos, eos) in [
        (
            "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja",
            Some("<|begin_of_text|>"),
            Some("<|im_end|>"),
        ),
        ("Qwen-Qwen2.5-7B-Instruct.jinja", None, Some("<|im_end|>")),
    ] {
        let f = framing(file, bos, eos);
        assert!(f.tools.offered, "{file}");
        let call = f.tools.call.expect(file);
        assert_eq!(call.open, "<tool_call>\n", "{file}");
        assert_eq!(call.close, "\n</tool_call>", "{file}");
        assert_eq!(call.arguments_key.as_deref(), Some("arguments"), "{file}");
        assert_eq!(call.parser.and_then(|p| p.vllm), Some("hermes"), "{file}");
        assert_eq!(f.reasoning, None, "{file}");
    }
}

/// Templates with no tools and no reasoning say so, rather than guess.
#[test]
fn gemma2_has_neither() {
    let f = framing("google-gemma-2-2b-it.jinja", Some("<bos>"), Some("<eos>"));
    assert!(!f.tools.offered);
    assert_eq!(f.tools.call, None);
    assert_eq!(f.reasoning, None);
}

/// The offline chain reports both framings on a stand-in that carries the Qwen3 template (the
/// Qwen2.5 tokenizer, which has the same `<think>`/`<tool_call>` pieces as added tokens): the
/// parsers a server needs, named by vLLM's and llama.cpp's flags.
#[test]
fn check_names_the_parsers_a_qwen3_server_needs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let report = init_and_check("Qwen-Qwen3.jinja", dir.path(), |rows| rows.to_string());
    let finding = |check: &str| crate::common::report_json::finding(&report, check).clone();
    let tools = finding("template.tool-framing");
    assert_eq!(tools["severity"], "info");
    assert!(tools["message"].as_str().unwrap().contains("<tool_call>"));
    assert_eq!(tools["evidence"]["vLLM"], "--tool-call-parser hermes");
    // init wrote a prompt that offers a tool (and one that invites reasoning): the gate's
    // first suite judges the server's parsers.
    assert!(tools["evidence"].get("tools probe").is_none(), "{tools}");
    let prompts = std::fs::read_to_string(dir.path().join("suite.prompts.jsonl")).unwrap();
    assert!(prompts.contains("\"id\":\"tool-call\""), "{prompts}");
    assert!(prompts.contains("\"id\":\"reasoning\""), "{prompts}");
    let reasoning = finding("template.reasoning-framing");
    // The template's `enable_thinking` switch: vLLM's qwen3 parser reads it from the request,
    // deepseek_r1 does not (vLLM 0.32, docs/research/vllm-parsers.md).
    assert_eq!(reasoning["evidence"]["vLLM"], "--reasoning-parser qwen3");
    assert_eq!(
        reasoning["evidence"]["chat_template_kwargs"],
        "enable_thinking=false"
    );
}

/// A template whose calls are tags around each argument (Qwen3-Coder's XML) is named by its
/// framing and vLLM's parser for it; init writes a tools probe for it, and a suite without
/// one is told that no server parser is judged.
#[test]
fn check_names_an_xml_call_framing_and_a_missing_tools_probe() {
    let dir = tempfile::tempdir().expect("tempdir");
    let report = init_and_check("Qwen3-Coder.jinja", dir.path(), |rows| {
        assert!(
            rows.contains("\"tools\""),
            "init writes a tools probe: {rows}"
        );
        rows.lines()
            .filter(|l| !l.contains("\"tools\""))
            .map(|l| format!("{l}\n"))
            .collect()
    });
    let tools = crate::common::report_json::finding(&report, "template.tool-framing").clone();
    assert!(
        tools["message"].as_str().unwrap().contains("Qwen3Xml"),
        "{tools}"
    );
    assert_eq!(tools["evidence"]["vLLM"], "--tool-call-parser qwen3_coder");
    assert!(
        tools["evidence"]["tools probe"]
            .as_str()
            .unwrap()
            .starts_with("none"),
        "{tools}"
    );
}

/// `init` a suite for a Qwen2.5 stand-in carrying `template` (tests/corpus/templates), change
/// its replay prompts with `edit`, and `check` it: the JSON report.
fn init_and_check(
    template: &'static str,
    dir: &Path,
    edit: impl Fn(&str) -> String,
) -> serde_json::Value {
    use crate::common::cli::chatgate_in;
    use crate::common::families::Family;
    let family = Family {
        template: Some(template),
        ..Family::corpus("a corpus template on Qwen2.5", "Qwen2.5-0.5B-Instruct")
    };
    let (model, _) = family.standin();
    let (code, out, err) = chatgate_in(
        &["init", "suite.toml", "--model", model.to_str().unwrap()],
        dir,
    );
    assert_eq!(code, 0, "init: {out}{err}");
    let prompts = dir.join("suite.prompts.jsonl");
    let rows = std::fs::read_to_string(&prompts).unwrap();
    std::fs::write(&prompts, edit(&rows)).unwrap();
    let (_, out, err) = chatgate_in(&["check", "suite.toml", "--format", "json"], dir);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}{err}"))
}

/// `template.prefix-stability` on an agent's conversation through real templates: the finding
/// for `file` (tokens counted as whitespace-separated words: the cost figure only).
fn prefix_stability(file: &str, eos: &str) -> chatgate::verdict::Finding {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus/templates")
        .join(file);
    let template =
        ChatTemplate::new(&std::fs::read_to_string(&path).expect("template")).expect("compiles");
    let special = SpecialTokens {
        eos_token: Some(eos.to_string()),
        ..SpecialTokens::default()
    };
    let count = |t: &str| t.split_whitespace().count();
    chatgate::chain::template::history::judge(&template, &special, None, &count)
        .unwrap_or_else(|| panic!("{file}: renders no agent conversation"))
}

/// Qwen2.5 keeps history as written: every turn's prompt begins with the one before. Qwen3
/// renders a turn's `<think>` block only after the newest user message (its template's
/// `last_query_index`): within the agent's tool loop the prefix holds, and a new question
/// drops the earlier reasoning — said, with what a prefix cache can still reuse.
/// DeepSeek-R1-Distill's generation prompt opens `<think>\n` and its history writes a reply
/// without it (`content.split('</think>')[-1]`): the model's own tokens are not its history.
#[test]
fn prefix_stability_names_the_templates_that_rewrite_history() {
    use chatgate::verdict::Severity;
    let f = prefix_stability("Qwen-Qwen2.5-7B-Instruct.jinja", "<|im_end|>");
    assert_eq!(f.severity, Severity::Pass, "{}", f.message);
    let f = prefix_stability("Qwen-Qwen3.jinja", "<|im_end|>");
    assert_eq!(f.severity, Severity::Info, "{}", f.message);
    assert!(
        f.message.starts_with("the prompt after a new user message rewrites the turns before it: it drops the reasoning of earlier turns"),
        "{}",
        f.message
    );
    assert!(f
        .evidence
        .get("cost")
        .is_some_and(|c| c.contains("reuses at most")));
    let f = prefix_stability(
        "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
        "<｜end▁of▁sentence｜>",
    );
    assert_eq!(f.severity, Severity::Warning, "{}", f.message);
    assert!(
        f.message
            .contains("does not continue the generation prompt")
            && f.message.contains("<think>"),
        "{}",
        f.message
    );
}
