//! gpt-oss's harmony format, read as vLLM 0.32's `parser/harmony.py` reads the messages
//! openai-harmony parses. The generation prompt ends `<|start|>assistant`, so a completion is
//! one or more messages, each a header (`<|channel|>NAME`, a recipient ` to=functions.NAME`, a
//! content type ` json` or `<|constrain|>json`) then `<|message|>` and a body ended by `<|end|>`,
//! `<|call|>` or `<|return|>`; the next message starts `<|start|>assistant`.
//! - a message to `functions.NAME` (or any bare name but `assistant` and the built-in tools)
//!   is a call; its body the arguments, JSON where it reads as JSON, else the text;
//! - the `analysis` channel is reasoning; `final`, and `commentary` with no recipient, content
//!   (several messages' texts joined with a line break);
//! - the completion ending inside a body completes that message (the token limit); ending
//!   inside a header is no message: vLLM returns its text as content.
use serde_json::Value;

use super::{Problem, RawArgs, RawCall, Reading};

const BUILTIN: [&str; 3] = ["browser", "python", "container"];

pub fn read(text: &str) -> Reading {
    let mut reading = Reading::default();
    let (mut reasoning, mut content, mut calls) = (Vec::new(), Vec::new(), Vec::new());
    let mut pos = 0;
    while pos < text.len() {
        let at = pos;
        let mut rest = &text[pos..];
        if let Some(r) = rest.strip_prefix("<|start|>") {
            let role_end = r.find(['<', ' ']).unwrap_or(r.len());
            rest = &r[role_end..];
        }
        let skipped = text.len() - pos - rest.len();
        let Some(header_end) = rest.find("<|message|>") else {
            if !rest.trim().is_empty() {
                reading.problems.push(Problem {
                    at,
                    why: format!(
                        "a message header with no `<|message|>` (cut off, or not harmony): {:?}",
                        truncate(rest)
                    ),
                });
                content.push(rest.to_string());
            }
            break;
        };
        let header = Header::read(&rest[..header_end]);
        let body_start = header_end + "<|message|>".len();
        let body = &rest[body_start..];
        let (end, stop) = ["<|end|>", "<|call|>", "<|return|>"]
            .iter()
            .filter_map(|s| body.find(s).map(|i| (i, s.len())))
            .min()
            .unwrap_or((body.len(), 0));
        let text_of = &body[..end];
        pos += skipped + body_start + end + stop;
        match header.segment() {
            Segment::Tool(name) => calls.push(RawCall {
                name,
                id: None,
                args: match &header.content_type {
                    Some(t) if !t.contains("json") => RawArgs::Json(Value::String(text_of.into())),
                    _ => RawArgs::Text(text_of.to_string()),
                },
                at,
                cut: stop == 0,
            }),
            Segment::Reasoning => reasoning.push(text_of.to_string()),
            Segment::Content => content.push(text_of.to_string()),
            Segment::Ignore => reading.notes.push(format!(
                "a message on channel {:?} to {:?} is neither content nor a function call: dropped",
                header.channel, header.recipient
            )),
        }
    }
    for raw in calls {
        let name = raw.name.clone();
        let arguments = match raw.args {
            RawArgs::Text(t) => serde_json::from_str::<Value>(&t).unwrap_or_else(|_| {
                reading.notes.push(format!(
                    "`{name}`'s arguments are not JSON: passed through as text, as vLLM does"
                ));
                Value::String(t)
            }),
            RawArgs::Json(v) => v,
            RawArgs::Pairs(_) => Value::Object(Default::default()),
        };
        if raw.cut {
            reading.notes.push(format!(
                "call `{name}` was cut off: its message completed at the end of the text"
            ));
        }
        reading.message.tool_calls.push(super::ReadCall {
            name,
            arguments,
            id: None,
        });
    }
    let join = |parts: Vec<String>| Some(parts.join("\n")).filter(|s| !s.is_empty());
    reading.message.reasoning_content = join(reasoning);
    reading.message.content = join(content);
    reading
}

struct Header {
    channel: Option<String>,
    recipient: Option<String>,
    content_type: Option<String>,
}

enum Segment {
    Tool(String),
    Reasoning,
    Content,
    Ignore,
}

impl Header {
    /// `[ to=R]<|channel|>C[ to=R][ <|constrain|>T| T]`.
    fn read(h: &str) -> Header {
        let spaced = h
            .replace("<|channel|>", " <|channel|>")
            .replace("<|constrain|>", " <|constrain|>");
        let mut out = Header {
            channel: None,
            recipient: None,
            content_type: None,
        };
        for word in spaced.split_whitespace() {
            if let Some(c) = word.strip_prefix("<|channel|>") {
                out.channel = Some(c.to_string());
            } else if let Some(r) = word.strip_prefix("to=") {
                out.recipient = Some(r.to_string());
            } else if let Some(t) = word.strip_prefix("<|constrain|>") {
                out.content_type = Some(t.to_string());
            } else if out.channel.is_some() && out.content_type.is_none() {
                out.content_type = Some(word.to_string());
            }
        }
        out
    }

    fn segment(&self) -> Segment {
        if let Some(r) = &self.recipient {
            if let Some(name) = r.strip_prefix("functions.") {
                return Segment::Tool(name.to_string());
            }
            let builtin = BUILTIN
                .iter()
                .any(|b| r == b || r.starts_with(&format!("{b}.")));
            if !builtin && r != "assistant" && !r.starts_with("<|") {
                return Segment::Tool(r.clone());
            }
        }
        match (self.channel.as_deref(), &self.recipient) {
            (Some("analysis"), _) => Segment::Reasoning,
            (Some("final"), _) | (Some("commentary"), None) => Segment::Content,
            _ => Segment::Ignore,
        }
    }
}

fn truncate(s: &str) -> String {
    s.chars().take(80).collect()
}
