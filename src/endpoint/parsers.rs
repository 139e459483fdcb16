//! How a healthy server reads a reply's text: the template's think block split off as
//! reasoning, and its tool calls read in the format the template writes them
//! (template/reply: every format chatgate reads, arguments typed by the request's tool schemas
//! as the family's vLLM parser types them) when the request offers tools (vLLM's rule: tools
//! offered and `tool_choice` not "none"). `chatgate serve` and the in-process target read
//! replies with the same parsers, so a suite's snapshots accepted in-process equal what
//! `chatgate serve` on the same files answers, byte for byte.
use serde_json::{Map, Value};

use crate::artifacts::ModelDir;
use crate::template::calls::{Parsed, ToolCall};
use crate::template::framing::{Reasoning, Splitter};
use crate::template::reply::{CallFormat, Reader};

/// The reply parsers a model's own chat template implies.
#[derive(Debug, Clone, Default)]
pub struct ReplyParsers {
    /// Think tags (harmony's channels are tokens, not text: not parsed).
    pub reasoning: Option<Reasoning>,
    /// The tool-call parser, when the template writes calls in a format chatgate reads.
    pub calls: Option<ToolParser>,
}

/// A server's tool-call parser: the reader of the template's call format, bound to the tools
/// one request offers (their schemas type the arguments).
#[derive(Debug, Clone)]
pub struct ToolParser {
    reader: Reader,
    tools: Vec<Value>,
}

impl ToolParser {
    /// The parser for a template's reader; None where it reads no calls, or reads them only
    /// with harmony's channel tokens (which a decoded reply no longer carries).
    pub fn new(reader: Reader) -> Option<ToolParser> {
        let format = reader.format?;
        (format != CallFormat::Harmony).then_some(ToolParser {
            reader,
            tools: Vec::new(),
        })
    }

    /// The parser for a request that offers `tools`.
    pub fn offering(&self, tools: &[Value]) -> ToolParser {
        ToolParser {
            reader: self.reader.clone(),
            tools: tools.to_vec(),
        }
    }

    /// The marker a call opens with ("" for a bare JSON call).
    pub fn marker(&self) -> &str {
        self.reader.marker()
    }

    /// The marker a call ends with ("" where the format has none).
    pub fn closer(&self) -> &str {
        self.reader.closer()
    }

    /// The call format, as vLLM's `--tool-call-parser` names it.
    pub fn format(&self) -> Option<CallFormat> {
        self.reader.format
    }

    /// The calls in `text` (its reasoning already split off), and the text that is not a call.
    pub fn parse(&self, text: &str) -> Parsed {
        let reading = self.reader.read_calls(text, &self.tools);
        Parsed {
            calls: reading
                .message
                .tool_calls
                .into_iter()
                .map(|c| ToolCall {
                    name: c.name,
                    arguments: c.arguments,
                })
                .collect(),
            content: reading.message.content.unwrap_or_default(),
            broken: reading.problems.into_iter().map(|p| p.why).collect(),
        }
    }
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
        let reader = Reader::of(&template, &dir.special_tokens(), &Map::new());
        ReplyParsers {
            reasoning: reader.reasoning.clone().filter(|r| !r.harmony()),
            calls: ToolParser::new(reader.without_reasoning()),
        }
    }

    /// Whether a chat request with these fields runs the tool-call parser.
    pub fn parses_tools(tools: Option<&[Value]>, tool_choice: Option<&Value>) -> bool {
        tools.is_some_and(|t| !t.is_empty()) && tool_choice.and_then(Value::as_str) != Some("none")
    }

    /// These parsers for a request that offers `tools`.
    pub fn offering(&self, tools: &[Value]) -> ReplyParsers {
        ReplyParsers {
            reasoning: self.reasoning.clone(),
            calls: self.calls.as_ref().map(|c| c.offering(tools)),
        }
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
            .map(|c| c.parse(&out.content));
        if let Some(p) = parsed.filter(|p| !p.calls.is_empty()) {
            out.content = p.content;
            out.calls = p.calls;
        }
        out
    }
}
