//! The families that write a call as a name between special tokens and its arguments as JSON:
//! Kimi-K2 (`parser/kimi_k2.py`), DeepSeek-V3.1 and V3/R1 (`tool_parsers/deepseekv31_tool_parser.py`,
//! `deepseekv3_tool_parser.py`) and Mistral's v11+ tokenizers (`parser/mistral.py`).
use super::xml::{push_call, push_content, until};
use super::{RawArgs, Scan};
use crate::template::calls::json_at;

/// `<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:0<|tool_call_argument_begin|>
/// {…}<|tool_call_end|>…<|tool_calls_section_end|>`: the header is the call's id, the name is
/// its part before `:N` less `functions.`; a header without `:N` is no call. Text after the
/// section is not content (vLLM stays in its tool state).
pub fn kimi(text: &str) -> Scan {
    const SECTION: &str = "<|tool_calls_section_begin|>";
    const CALL: &str = "<|tool_call_begin|>";
    const ARGS: &str = "<|tool_call_argument_begin|>";
    const END: &str = "<|tool_call_end|>";
    let mut scan = Scan::default();
    let Some(section_at) = text.find(SECTION) else {
        push_content(&mut scan, text);
        return scan;
    };
    push_content(&mut scan, &text[..section_at]);
    let (section, section_cut, _) = until(
        text,
        section_at + SECTION.len(),
        "<|tool_calls_section_end|>",
    );
    let base = section_at + SECTION.len();
    let mut pos = 0;
    while let Some(rel) = section[pos..].find(CALL) {
        let at = pos + rel;
        let (call, cut, after) = until(section, at + CALL.len(), END);
        pos = after;
        let Some((header, args)) = call.split_once(ARGS) else {
            scan.broken.push((
                base + at,
                "a call with no `<|tool_call_argument_begin|>`".into(),
            ));
            continue;
        };
        let id = header.trim();
        let Some((qualified, index)) = id.rsplit_once(':') else {
            scan.broken.push((
                base + at,
                format!("the call's header {id:?} is not `functions.NAME:N`"),
            ));
            continue;
        };
        if index.is_empty() || !index.chars().all(|c| c.is_ascii_digit()) {
            scan.broken.push((
                base + at,
                format!("the call's header {id:?} is not `functions.NAME:N`"),
            ));
            continue;
        }
        let name = qualified.strip_prefix("functions.").unwrap_or(qualified);
        let args = match args.trim() {
            "" => "{}".to_string(),
            a => a.to_string(),
        };
        push_call(
            &mut scan,
            name.to_string(),
            Some(id.to_string()),
            RawArgs::Text(args),
            base + at,
            cut && section_cut,
        );
    }
    scan
}

/// DeepSeek-V3.1: `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{…}<｜tool▁call▁end｜>
/// …<｜tool▁calls▁end｜>`. The classic parser returns the arguments' text as the model wrote it
/// and only calls that closed; content is the text before the section.
pub fn deepseek_v31(text: &str) -> Scan {
    deepseek(text, |call| {
        call.split_once("<｜tool▁sep｜>")
            .map(|(n, a)| (n.to_string(), a.to_string()))
    })
}

/// DeepSeek-V3 / R1: `<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{…}\n```<｜tool▁call▁end｜>`.
pub fn deepseek_v3(text: &str) -> Scan {
    deepseek(text, |call| {
        let (_, rest) = call.split_once("<｜tool▁sep｜>")?;
        let (name, rest) = rest.split_once("\n```json\n")?;
        let args = rest.strip_suffix("\n```").unwrap_or(rest);
        Some((name.to_string(), args.to_string()))
    })
}

fn deepseek(text: &str, split: impl Fn(&str) -> Option<(String, String)>) -> Scan {
    const CALL: &str = "<｜tool▁call▁begin｜>";
    const END: &str = "<｜tool▁call▁end｜>";
    let mut scan = Scan::default();
    let start = text
        .find("<｜tool▁calls▁begin｜>")
        .or_else(|| text.find(CALL));
    let Some(start) = start else {
        push_content(&mut scan, text);
        return scan;
    };
    scan.before = text[..start].to_string();
    let mut pos = start;
    while let Some(rel) = text[pos..].find(CALL) {
        let at = pos + rel;
        let (call, cut, after) = until(text, at + CALL.len(), END);
        pos = after;
        if cut {
            scan.broken.push((
                at,
                "a call with no `<｜tool▁call▁end｜>` (cut off): DeepSeek's parser returns no call for it"
                    .into(),
            ));
            break;
        }
        match split(call) {
            Some((name, args)) => push_call(&mut scan, name, None, RawArgs::Text(args), at, false),
            None => scan
                .broken
                .push((at, format!("a call that does not read: {call:?}"))),
        }
    }
    scan
}

/// Mistral v11+: `[TOOL_CALLS]NAME[ARGS]{…}`, a call per `[TOOL_CALLS]` (Small 3.2 writes
/// `[CALL_ID]id` before `[ARGS]`). The arguments are the first whole JSON value after `[ARGS]`
/// (vLLM's `raw_decode`: text after it is dropped).
pub fn mistral(text: &str) -> Scan {
    const CALLS: &str = "[TOOL_CALLS]";
    let mut scan = Scan::default();
    let mut pos = 0;
    while let Some(rel) = text[pos..].find(CALLS) {
        let at = pos + rel;
        push_content(&mut scan, &text[pos..at]);
        let body_start = at + CALLS.len();
        let next = text[body_start..]
            .find(CALLS)
            .map_or(text.len(), |r| body_start + r);
        let body = &text[body_start..next];
        pos = next;
        let (head, args) = match body.find("[ARGS]") {
            Some(a) => (&body[..a], &body[a + "[ARGS]".len()..]),
            None => match body.find('{') {
                Some(b) => (&body[..b], &body[b..]),
                None => {
                    scan.broken
                        .push((at, format!("`[TOOL_CALLS]` with no arguments: {body:?}")));
                    continue;
                }
            },
        };
        let (name, id) = match head.split_once("[CALL_ID]") {
            Some((n, id)) => (n.trim(), Some(id.trim().to_string())),
            None => (head.trim(), None),
        };
        let args = match json_at(args.trim_start()) {
            Some((v, _)) => RawArgs::Json(v),
            None => RawArgs::Text(args.to_string()),
        };
        let cut = next == text.len() && matches!(args, RawArgs::Text(_));
        push_call(&mut scan, name.to_string(), id, args, at, cut);
    }
    push_content(&mut scan, &text[pos..]);
    scan
}
