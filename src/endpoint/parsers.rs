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
use crate::template::framing::{partial_suffix, Part, Reasoning, Splitter};
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
            notes: reading.notes,
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

/// What a streamed reply's text releases, piece by piece.
#[derive(Debug, Clone, PartialEq)]
pub enum Piece {
    Reasoning(String),
    Content(String),
}

/// The parsers of one streamed reply, fed its text as it is generated: reasoning and content
/// go out as soon as they are known to be such; from a call's opening marker on, the text is
/// held and read whole when the reply ends (each call's name, then its arguments).
pub struct StreamReader {
    reasoning: Option<Splitter>,
    tools: Option<ToolParser>,
    /// The text from the call marker on (all of it for a bare JSON call).
    held: String,
    in_call: bool,
}

impl StreamReader {
    pub fn new(reasoning: Option<Splitter>, tools: Option<ToolParser>) -> StreamReader {
        StreamReader {
            reasoning,
            tools,
            held: String::new(),
            in_call: false,
        }
    }

    /// The pieces `text` releases.
    pub fn push(&mut self, text: &str) -> Vec<Piece> {
        let parts = match self.reasoning.as_mut() {
            Some(s) => s.push(text),
            None => vec![Part::Content(text.to_string())],
        };
        self.through_tools(parts)
    }

    /// The reply ended: the pieces still held, and the tool parser with the text it held from
    /// the call marker on (None when the request runs no tool parser).
    pub fn finish(&mut self) -> (Vec<Piece>, Option<(ToolParser, String)>) {
        let parts = self
            .reasoning
            .as_mut()
            .map(Splitter::finish)
            .unwrap_or_default();
        let pieces = self.through_tools(parts);
        let held = std::mem::take(&mut self.held);
        (pieces, self.tools.take().map(|t| (t, held)))
    }

    fn through_tools(&mut self, parts: Vec<Part>) -> Vec<Piece> {
        let mut out = Vec::new();
        for part in parts {
            match part {
                Part::Reasoning(r) => out.push(Piece::Reasoning(r)),
                Part::Content(c) => {
                    let released = self.content(&c);
                    if !released.is_empty() {
                        out.push(Piece::Content(released));
                    }
                }
            }
        }
        out
    }

    /// The content `text` releases: all of it before the call marker (less what may be its
    /// start), nothing after.
    fn content(&mut self, text: &str) -> String {
        let Some(tools) = &self.tools else {
            return text.to_string();
        };
        self.held.push_str(text);
        if self.in_call {
            return String::new();
        }
        let marker = tools.marker();
        if marker.is_empty() {
            // A bare JSON call: the reply is a call or not, known at its end.
            return String::new();
        }
        match self.held.find(marker) {
            Some(at) => {
                self.in_call = true;
                let before: String = self.held.drain(..at).collect();
                before.trim_end().to_string()
            }
            None => {
                let keep = partial_suffix(&self.held, marker);
                self.held.drain(..self.held.len() - keep).collect()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// Every recorded completion of tests/corpus/replies (but harmony's, whose channels are
    /// tokens `serve` never sees as text) streamed in pieces — a character at a time, split
    /// before every `<` and `[` (where special tokens start), and in random groups — reads to
    /// the message the whole reply reads to: the same reasoning, the same calls, the same
    /// content but for the whitespace at its ends (sent before the call is seen, as vLLM
    /// streams it; the whole reply strips it).
    #[test]
    fn a_stream_reads_to_the_whole_reply_however_it_is_split() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus");
        let cases: Value = serde_json::from_str(
            &std::fs::read_to_string(root.join("replies/cases.json")).expect("cases"),
        )
        .expect("json");
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut checked = 0;
        for case in cases["cases"].as_array().expect("cases") {
            let name = case["name"].as_str().unwrap_or_default();
            let source = std::fs::read_to_string(
                root.join("templates")
                    .join(case["template"].as_str().expect("template")),
            )
            .expect("template");
            let template = crate::template::ChatTemplate::new(&source).expect("compiles");
            let reader = Reader::of(
                &template,
                &crate::template::SpecialTokens::default(),
                &Map::new(),
            );
            let parsers = ReplyParsers {
                reasoning: reader.reasoning.clone().filter(|r| !r.harmony()),
                calls: ToolParser::new(reader.without_reasoning()),
            };
            if parsers.calls.is_none() {
                continue;
            }
            let tools: Vec<Value> = case["tools"].as_array().cloned().unwrap_or_default();
            let parsers = parsers.offering(&tools);
            let text = case["text"].as_str().expect("text");
            let whole = parsers.read(text, true);
            let chars: Vec<String> = text.chars().map(String::from).collect();
            let mut at_markers = Vec::new();
            let mut piece = String::new();
            for c in text.chars() {
                if (c == '<' || c == '[') && !piece.is_empty() {
                    at_markers.push(std::mem::take(&mut piece));
                }
                piece.push(c);
            }
            at_markers.push(piece);
            let mut groups = Vec::new();
            let mut rest = text;
            while !rest.is_empty() {
                let mut n = rng.random_range(1..=8).min(rest.len());
                while !rest.is_char_boundary(n) {
                    n += 1;
                }
                groups.push(rest[..n].to_string());
                rest = &rest[n..];
            }
            for (how, pieces) in [
                ("per char", chars),
                ("at markers", at_markers),
                ("random groups", groups),
            ] {
                let streamed = stream(&parsers, &pieces);
                assert_eq!(
                    streamed.reasoning, whole.reasoning,
                    "{name} ({how}): reasoning"
                );
                assert_eq!(streamed.calls, whole.calls, "{name} ({how}): calls");
                assert_eq!(
                    streamed.content.trim(),
                    whole.content.trim(),
                    "{name} ({how}): content"
                );
            }
            checked += 1;
        }
        assert!(checked >= 20, "only {checked} cases streamed");
    }

    fn stream(parsers: &ReplyParsers, pieces: &[String]) -> ReadReply {
        let mut r = StreamReader::new(
            parsers.reasoning.as_ref().and_then(Splitter::new),
            parsers.calls.clone(),
        );
        let mut out = ReadReply::default();
        let take = |pieces: Vec<Piece>, out: &mut ReadReply| {
            for p in pieces {
                match p {
                    Piece::Reasoning(t) => out.reasoning.push_str(&t),
                    Piece::Content(t) => out.content.push_str(&t),
                }
            }
        };
        for p in pieces {
            take(r.push(p), &mut out);
        }
        let (rest, tools) = r.finish();
        take(rest, &mut out);
        if let Some((parser, held)) = tools {
            let parsed = parser.parse(&held);
            if parsed.calls.is_empty() {
                out.content.push_str(&held);
            } else {
                out.content.push_str(&parsed.content);
                out.calls = parsed.calls;
            }
        }
        out
    }
}
