//! The readers on the variants a family's models write beside the template's own shape (the
//! corpus in tests/corpus/replies covers each family's main shapes through the command).
use serde_json::json;

use super::*;

fn reader(format: CallFormat) -> Reader {
    Reader {
        format: Some(format),
        json: None,
        reasoning: None,
    }
}

#[test]
fn harmony_reads_the_recipient_wherever_the_header_puts_it() {
    // llama.cpp's tests/test-chat.cpp accepts all of these GPT-OSS headers.
    for text in [
        " to=functions.f<|channel|>commentary json<|message|>{\"a\": 1}<|call|>",
        "<|channel|>commentary to=functions.f<|message|>{\"a\": 1}<|call|>",
        " to=functions.f<|channel|>analysis <|constrain|>json<|message|>{\"a\": 1}",
        "<|channel|>analysis to=functions.f<|message|>{\"a\": 1}<|end|>",
    ] {
        let r = reader(CallFormat::Harmony).read(text, &[]);
        assert_eq!(r.message.tool_calls.len(), 1, "{text}");
        assert_eq!(r.message.tool_calls[0].name, "f");
        assert_eq!(r.message.tool_calls[0].arguments, json!({"a": 1}));
    }
    // A built-in tool is not a function call; its analysis is reasoning.
    let r = reader(CallFormat::Harmony).read(
        "<|start|>assistant to=container.exec<|channel|>commentary<|message|>ls<|call|>",
        &[],
    );
    assert!(r.message.tool_calls.is_empty());
}

#[test]
fn gemma4_keys_in_delimiters_quoted_strings_and_parentheses() {
    let r = reader(CallFormat::Gemma4).read(
        "<|tool_call>call:f{<|\"|>k<|\"|>:<|\"|>a,b:c<|\"|>,q:[\"x\",'y'],n:1.5e10}<tool_call|>\
         <|tool_call>:g(x:1)<tool_call|>",
        &[],
    );
    assert_eq!(
        r.message.tool_calls[0].arguments,
        json!({"k": "a,b:c", "q": ["x", "'y'"], "n": 1.5e10})
    );
    assert_eq!(r.message.tool_calls[1].name, "g");
    assert_eq!(r.message.tool_calls[1].arguments, json!({"x": 1}));
}

#[test]
fn a_kimi_header_without_its_index_is_no_call() {
    let r = reader(CallFormat::Kimi).read(
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.f<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>",
        &[],
    );
    assert!(r.message.tool_calls.is_empty());
    assert!(
        r.problems[0].why.contains("functions.NAME:N"),
        "{:?}",
        r.problems
    );
}

#[test]
fn a_deepseek_call_without_its_end_is_no_call_and_is_named() {
    let text = "Hi<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{\"a\": ";
    let r = reader(CallFormat::DeepSeekV31).read(text, &[]);
    assert!(r.message.tool_calls.is_empty());
    assert_eq!(r.message.content.as_deref(), Some("Hi"));
    let call_at = text.find("<｜tool▁call▁begin｜>").unwrap();
    assert_eq!(r.problems[0].at, call_at, "the byte where the call starts");
}

#[test]
fn formats_are_told_apart_by_their_markers_in_llama_cpp_order() {
    let of = CallFormat::of_source;
    assert_eq!(
        of("<tool_call>{{ name }}<arg_key>k</arg_key><arg_value>"),
        Some(CallFormat::Glm)
    );
    assert_eq!(
        of("<tool_call>\n<function=x>\n<parameter=y>"),
        Some(CallFormat::Qwen3Xml)
    );
    assert_eq!(
        of("<tool_call>\n{\"name\": …}"),
        None,
        "Hermes: read by probing"
    );
    assert_eq!(
        of("function<｜tool▁sep｜>{{ name }}\n```json\n"),
        Some(CallFormat::DeepSeekV3)
    );
    assert_eq!(
        of("[TOOL_CALLS]{{ name }}[ARGS]"),
        Some(CallFormat::MistralArgs)
    );
    assert_eq!(
        of("[TOOL_CALLS][{{ calls }}]"),
        None,
        "Nemo's array: read by probing"
    );
}
