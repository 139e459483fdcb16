//! How a healthy server reads a reply's text: the template's think block split off as
//! reasoning, and its tool-call framing read into calls when the request offers tools (vLLM's
//! rule: tools offered and `tool_choice` not "none"). `chatgate serve` and the in-process
//! target read replies with the same parsers, so a suite's snapshots accepted in-process equal
//! what `chatgate serve` on the same files answers, byte for byte.
use serde_json::Value;

use crate::artifacts::ModelDir;
use crate::template::framing::{Call, Reasoning, Splitter};

/// The reply parsers a model's own chat template implies.
#[derive(Debug, Clone, Default)]
pub struct ReplyParsers {
    /// Think tags (harmony's channels are tokens, not text: not parsed).
    pub reasoning: Option<Reasoning>,
    /// The tool-call framing, when a parser can read it (the name inside the call's JSON).
    pub calls: Option<Call>,
}

/// A reply's text as the parsers read it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReadReply {
    pub reasoning: String,
    pub content: String,
    /// The calls, in the API's shape without an id (`{"type", "function": {"name", "arguments"}}`).
    pub calls: Vec<crate::template::calls::ToolCall>,
}

impl ReplyParsers {
    /// The parsers of `dir`'s serving template (none when it has no template or it does not
    /// compile).
    pub fn of(dir: &ModelDir) -> ReplyParsers {
        let Some(template) = dir
            .templates
            .select(false)
            .and_then(|source| crate::template::ChatTemplate::new(&source.text).ok())
        else {
            return ReplyParsers::default();
        };
        let f = crate::template::framing::derive(&template, &dir.special_tokens());
        ReplyParsers {
            reasoning: f.reasoning.filter(|r| !r.harmony()),
            calls: f.tools.call.filter(|c| c.parseable()),
        }
    }

    /// Whether a chat request with these fields runs the tool-call parser.
    pub fn parses_tools(tools: Option<&[Value]>, tool_choice: Option<&Value>) -> bool {
        tools.is_some_and(|t| !t.is_empty()) && tool_choice.and_then(Value::as_str) != Some("none")
    }

    /// Read a whole reply (non-streamed).
    pub fn read(&self, text: &str, parse_tools: bool) -> ReadReply {
        let (reasoning, content) = match self.reasoning.as_ref().and_then(Splitter::new) {
            Some(s) => s.split(text),
            None => (String::new(), text.to_string()),
        };
        let mut out = ReadReply {
            reasoning,
            content,
            calls: Vec::new(),
        };
        let parsed = self
            .calls
            .as_ref()
            .filter(|_| parse_tools)
            .and_then(|c| c.parse(&out.content));
        if let Some(p) = parsed.filter(|p| !p.calls.is_empty()) {
            // vLLM's hermes parser: the text before the first call is the content.
            out.content = p.content.trim().to_string();
            out.calls = p.calls;
        }
        out
    }
}
