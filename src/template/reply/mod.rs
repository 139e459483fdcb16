//! A completion read the way a correct server reads it: the reasoning split off, the tool calls
//! in the framing the template writes, their arguments typed by the tool's schema. This is what
//! `chatgate parse-reply` prints and what a server's `message` must equal.
//!
//! The call format is derived from the template, never from the model's name: the markers the
//! template writes a call with, checked in the order llama.cpp's `common/chat.cpp` checks a
//! template's source (a family's markers can contain another's: GLM's and Qwen3-Coder's calls
//! open with Hermes's `<tool_call>`). The JSON-in-text framings (Hermes, Mistral's array,
//! Llama 3.x's bare JSON) keep the probe-derived reader of `calls.rs`.
//!
//! Each family's rules are its reference parser's, from vLLM 0.32.0's source (the version
//! chatgate pins; docs/reasoning-and-tools.md has the table): the engine families type their
//! arguments by the schema (`schema.rs`); the classic parsers (Hermes, Llama 3.x,
//! DeepSeek-V3/V3.1, harmony) return the model's JSON as it is. For every family content is the
//! text before the first call: vLLM's non-streamed parse defers text that follows a call and
//! never returns it (`parser/engine/parser_engine.py`, `_events_to_delta`), DeepSeek-V3.2's
//! grammar drops it by design ("a tool call ends the turn"), the classic parsers slice before
//! the first call.
use serde::Serialize;
use serde_json::{Map, Value};

use super::framing::{Call, Framing, Reasoning, Splitter};
use super::{ChatTemplate, SpecialTokens};

mod gemma4;
mod harmony;
pub mod schema;
mod tagged;
mod xml;

/// How a template writes a tool call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CallFormat {
    /// A JSON object with the name inside: `<tool_call>{…}</tool_call>`, `[TOOL_CALLS][…]`,
    /// a bare Llama 3.x object.
    Json,
    /// Qwen3-Coder / Qwen3.5: `<tool_call><function=NAME><parameter=K>V</parameter>…`.
    Qwen3Xml,
    /// GLM-4.5 to 4.7: `<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>…`.
    Glm,
    /// MiniMax-M2: `<minimax:tool_call><invoke name="NAME"><parameter name="K">V</parameter>…`.
    MiniMaxM2,
    /// DeepSeek-V3.2 / V4 DSML: `<｜DSML｜invoke name="NAME"><｜DSML｜parameter name="K" string="true">…`.
    DeepSeekDsml,
    /// Kimi-K2: `<|tool_call_begin|>functions.NAME:0<|tool_call_argument_begin|>{…}<|tool_call_end|>`.
    Kimi,
    /// DeepSeek-V3.1: `<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{…}<｜tool▁call▁end｜>`.
    DeepSeekV31,
    /// DeepSeek-V3 / R1: `<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{…}\n```…`.
    DeepSeekV3,
    /// Mistral tokenizers v11+: `[TOOL_CALLS]NAME[ARGS]{…}` (Small 3.2: `[CALL_ID]id` before `[ARGS]`).
    MistralArgs,
    /// Gemma 4: `<|tool_call>call:NAME{k:<|"|>v<|"|>,n:1}<tool_call|>`.
    Gemma4,
    /// gpt-oss harmony: a message `to=functions.NAME` on the commentary channel.
    Harmony,
}

/// What each family's reference parser does around the call itself.
struct Rules {
    /// `--tool-call-parser` in vLLM.
    vllm: &'static str,
    /// Arguments typed by the schema (vLLM's engine parsers); else the model's JSON as it is.
    typed: bool,
    /// Content stripped of surrounding whitespace when calls were made.
    strip_content: bool,
    /// Calls to a tool the request does not offer are dropped.
    validate_names: bool,
}

impl CallFormat {
    fn rules(self) -> Rules {
        use CallFormat::*;
        let engine = |vllm, strip_content, validate_names| Rules {
            vllm,
            typed: true,
            strip_content,
            validate_names,
        };
        // The classic parsers keep the text before the first call as it is; vLLM's chat serving
        // drops it when it is only whitespace.
        let classic = |vllm| Rules {
            vllm,
            typed: false,
            strip_content: false,
            validate_names: false,
        };
        match self {
            Json => classic("hermes"),
            Qwen3Xml => engine("qwen3_coder", true, false),
            Glm => engine("glm45", true, true),
            MiniMaxM2 => engine("minimax_m2", true, true),
            DeepSeekDsml => engine("deepseek_v32", false, false),
            Kimi => engine("kimi_k2", false, false),
            DeepSeekV31 => classic("deepseek_v31"),
            DeepSeekV3 => classic("deepseek_v3"),
            MistralArgs => engine("mistral", true, false),
            Gemma4 => engine("gemma4", true, false),
            Harmony => classic("openai"),
        }
    }

    /// The format a template's source writes calls in, by the markers it writes them with;
    /// None: no known markers (the JSON framings are found by probing, `framing.rs`).
    pub fn of_source(source: &str) -> Option<CallFormat> {
        let has = |m: &str| source.contains(m);
        let format = if has("<|channel|>") {
            CallFormat::Harmony
        } else if has("<|tool_calls_section_begin|>") && has("<|tool_call_begin|>") {
            CallFormat::Kimi
        } else if has("<minimax:tool_call>") || (has("<invoke name=") && has("]~b]")) {
            CallFormat::MiniMaxM2
        } else if has("DSML") && (has("function_calls") || has("tool_calls")) {
            CallFormat::DeepSeekDsml
        } else if has("<|tool_call>") {
            CallFormat::Gemma4
        } else if has("<function=") && has("<parameter=") {
            CallFormat::Qwen3Xml
        } else if has("<arg_key>") && has("<arg_value>") {
            CallFormat::Glm
        } else if has("<｜tool▁sep｜>") {
            // V3/R1 write the call's type and a fenced JSON block; V3.1 the name and bare JSON.
            if has("```json") {
                CallFormat::DeepSeekV3
            } else {
                CallFormat::DeepSeekV31
            }
        } else if has("[TOOL_CALLS]") && has("[ARGS]") {
            CallFormat::MistralArgs
        } else {
            return None;
        };
        Some(format)
    }

    /// The format's name as vLLM's `--tool-call-parser` spells it.
    pub fn vllm_parser(self) -> &'static str {
        self.rules().vllm
    }

    /// The marker a call opens with (where reasoning that runs into a call ends).
    fn opener(self) -> &'static str {
        use CallFormat::*;
        match self {
            Json => "",
            Qwen3Xml | Glm => "<tool_call>",
            MiniMaxM2 => "<minimax:tool_call>",
            DeepSeekDsml => "<｜DSML｜",
            Kimi => "<|tool_calls_section_begin|>",
            DeepSeekV31 | DeepSeekV3 => "<｜tool▁calls▁begin｜>",
            MistralArgs => "[TOOL_CALLS]",
            Gemma4 => "<|tool_call>",
            Harmony => "<|start|>",
        }
    }
}

/// A call as a reader found it, before its arguments are converted and typed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RawCall {
    pub name: String,
    /// The id the model wrote (Kimi's `functions.NAME:0`, Mistral's `[CALL_ID]`).
    pub id: Option<String>,
    pub args: RawArgs,
    /// Where the call starts in the text the reader was given (bytes).
    pub at: usize,
    /// The text ended inside the call (the token limit cut it).
    pub cut: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum RawArgs {
    /// Key-value pairs (XML formats: values are strings; Gemma 4 and DSML type some).
    Pairs(Vec<(String, Value)>),
    /// The arguments as the model wrote them, meant to be JSON.
    Text(String),
    /// Already a JSON value (a JSON framing).
    Json(Value),
}

/// What a reader found in the text after reasoning.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Scan {
    /// Text before the first call: the content (text after a call is no reference parser's
    /// content, so it is not kept).
    pub before: String,
    pub calls: Vec<RawCall>,
    /// Opened calls that cannot be read: (where, why).
    pub broken: Vec<(usize, String)>,
    /// What the parser did silently (the JSON parsers' quirks, `calls.rs`).
    pub notes: Vec<String>,
}

/// The message a correct server returns for the completion.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Message {
    pub content: Option<String>,
    pub reasoning_content: Option<String>,
    pub tool_calls: Vec<ReadCall>,
}

/// One call of the message.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReadCall {
    pub name: String,
    /// A JSON object; the model's text (a string) where the family's parser passes text it
    /// cannot read as JSON through as it is.
    pub arguments: Value,
    /// The id the model wrote, where the format has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
}

/// A completion read, with what a reader should know about how.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Reading {
    pub message: Message,
    /// How it was read, and where the schema was silent.
    pub notes: Vec<String>,
    /// What could not be read: where (a byte offset in the completion) and why.
    pub problems: Vec<Problem>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Problem {
    pub at: usize,
    pub why: String,
}

/// The reading rules a template implies, under one request's `chat_template_kwargs`.
#[derive(Debug, Clone)]
pub struct Reader {
    pub format: Option<CallFormat>,
    json: Option<Call>,
    pub reasoning: Option<Reasoning>,
}

impl Reader {
    /// The reader for `template` when a request passes `kwargs`.
    pub fn of(
        template: &ChatTemplate,
        special: &SpecialTokens,
        kwargs: &Map<String, Value>,
    ) -> Self {
        let framing = super::framing::derive_with(template, special, kwargs);
        Reader::from_framing(framing, CallFormat::of_source(template.source()))
    }

    fn from_framing(framing: Framing, format: Option<CallFormat>) -> Reader {
        let json = framing.tools.call.filter(|c| c.parseable());
        let format = format.or(json.as_ref().map(|_| CallFormat::Json));
        Reader {
            format,
            json,
            reasoning: framing.reasoning,
        }
    }

    /// This reader with no reasoning parser (a server's tool-call parser reads the text its
    /// reasoning parser left).
    pub fn without_reasoning(mut self) -> Reader {
        self.reasoning = None;
        self
    }

    /// One line each on the call and reasoning framing read with.
    pub fn describe(&self) -> Vec<String> {
        let calls = match (self.format, &self.json) {
            (Some(CallFormat::Json), Some(c)) => format!(
                "calls: JSON with the name inside{} (vLLM --tool-call-parser {})",
                match c.marker() {
                    "" => " (bare, no marker)".to_string(),
                    m => format!(" after {m}"),
                },
                c.parser.and_then(|p| p.vllm).unwrap_or("hermes")
            ),
            (Some(f), _) => format!("calls: {f:?} (vLLM --tool-call-parser {})", f.vllm_parser()),
            (None, _) => "calls: the template writes none a parser reads".to_string(),
        };
        let reasoning = match &self.reasoning {
            Some(r) if r.harmony() => "reasoning: harmony's analysis channel".to_string(),
            Some(r) => format!(
                "reasoning: {} … {}{}",
                r.open,
                r.close,
                if r.prompt_opens {
                    " (the generation prompt opens it: the completion starts inside)"
                } else {
                    ""
                }
            ),
            None => "reasoning: none in the template".to_string(),
        };
        vec![calls, reasoning]
    }

    /// Read a completion (special tokens spelled out) for a request offering `tools`.
    pub fn read(&self, text: &str, tools: &[Value]) -> Reading {
        if self.format == Some(CallFormat::Harmony) {
            return harmony::read(text);
        }
        let (reasoning, rest) = self.split_reasoning(text);
        let base = text.len() - rest.len().min(text.len());
        let base = if text.ends_with(&rest) { base } else { 0 };
        let mut out = self.read_calls_at(&rest, base, tools);
        out.message.reasoning_content = reasoning.filter(|r| !r.is_empty());
        out
    }

    /// Read the calls of a text whose reasoning is already split off (a server's tool-call
    /// parser, after its reasoning parser); harmony's calls are read with its channels.
    pub fn read_calls(&self, text: &str, tools: &[Value]) -> Reading {
        if self.format == Some(CallFormat::Harmony) {
            let mut out = harmony::read(text);
            out.message.reasoning_content = None;
            return out;
        }
        self.read_calls_at(text, 0, tools)
    }

    /// The marker a call opens with ("" for a bare JSON call): a streaming parser holds the
    /// text from it on.
    pub fn marker(&self) -> &str {
        match (self.format, &self.json) {
            (Some(CallFormat::Json), Some(c)) => c.marker(),
            (Some(f), _) => f.opener(),
            (None, _) => "",
        }
    }

    /// The marker that ends a call (a value holding it is where a parser that scans for the
    /// marker without reading the value ends the call early: ollama#18659).
    pub fn closer(&self) -> &str {
        use CallFormat::*;
        match (self.format, &self.json) {
            (Some(Json), Some(c)) => c.close.trim(),
            (Some(Qwen3Xml | Glm), _) => "</tool_call>",
            (Some(MiniMaxM2), _) => "</minimax:tool_call>",
            (Some(DeepSeekDsml), _) => "</｜DSML｜invoke>",
            (Some(Kimi), _) => "<|tool_call_end|>",
            (Some(DeepSeekV31 | DeepSeekV3), _) => "<｜tool▁call▁end｜>",
            (Some(Gemma4), _) => "<tool_call|>",
            (Some(Harmony), _) => "<|call|>",
            (Some(MistralArgs), _) | (Some(Json), None) | (None, _) => "",
        }
    }

    fn read_calls_at(&self, rest: &str, base: usize, tools: &[Value]) -> Reading {
        let scan = match self.format {
            None => Scan {
                before: rest.to_string(),
                ..Scan::default()
            },
            Some(CallFormat::Json) => self.scan_json(rest),
            Some(f) => scan(f, rest),
        };
        let mut out = Reading {
            notes: scan.notes,
            ..Reading::default()
        };
        for (at, why) in &scan.broken {
            out.problems.push(Problem {
                at: base + at,
                why: why.clone(),
            });
        }
        let rules = self.format.map(CallFormat::rules);
        let called = !scan.calls.is_empty();
        for raw in scan.calls {
            if let Some(call) = finish_call(raw, tools, self.format, base, &mut out) {
                out.message.tool_calls.push(call);
            }
        }
        let mut content = scan.before;
        if called && rules.as_ref().is_none_or(|r| r.strip_content) {
            content = content.trim().to_string();
        } else if called && content.trim().is_empty() {
            content.clear();
        }
        out.message.content = (!content.is_empty()).then_some(content);
        out
    }

    /// (reasoning, the rest): the think block split off as the family's reasoning parser does.
    fn split_reasoning(&self, text: &str) -> (Option<String>, String) {
        let Some(splitter) = self.reasoning.as_ref().and_then(Splitter::new) else {
            return (None, text.to_string());
        };
        let r = self
            .reasoning
            .as_ref()
            .expect("a splitter has its reasoning");
        // A model may write the open tag the prompt already opened: it is not reasoning.
        let trimmed = text.trim_start();
        let text = match r.prompt_opens {
            true => trimmed.strip_prefix(r.open.as_str()).unwrap_or(text),
            false => text,
        };
        let closed = text.contains(r.close.as_str());
        let (mut reasoning, mut rest) = splitter.split(text);
        // A call opened inside reasoning that never closed ends it (vLLM's engine grammars).
        let opener = self.format.map(CallFormat::opener).unwrap_or("");
        if !closed && !opener.is_empty() && rest.is_empty() {
            if let Some(at) = reasoning.find(opener) {
                rest = reasoning[at..].to_string();
                reasoning.truncate(at);
            }
        }
        if r.open.starts_with("<|channel>") {
            // Gemma 4: vLLM drops the channel name's line break before the thought.
            reasoning = reasoning
                .strip_prefix('\n')
                .unwrap_or(&reasoning)
                .to_string();
        }
        if r.parser.vllm != Some("qwen3") {
            // vLLM's reasoning parsers strip the reasoning's trailing whitespace, but Qwen3's.
            reasoning.truncate(reasoning.trim_end().len());
        }
        (Some(reasoning), rest)
    }

    fn scan_json(&self, text: &str) -> Scan {
        let Some(parsed) = self.json.as_ref().and_then(|c| c.parse(text)) else {
            return Scan {
                before: text.to_string(),
                ..Scan::default()
            };
        };
        let at = self
            .json
            .as_ref()
            .map(|c| c.marker())
            .filter(|m| !m.is_empty())
            .and_then(|m| text.find(m))
            .unwrap_or(0);
        Scan {
            // vLLM's JSON parsers fail whole: a call that does not read leaves no calls, and
            // the content they return then (`calls.rs`).
            before: parsed.content,
            calls: parsed
                .calls
                .into_iter()
                .map(|c| RawCall {
                    name: c.name,
                    id: None,
                    args: RawArgs::Json(c.arguments),
                    at,
                    cut: false,
                })
                .collect(),
            broken: parsed
                .broken
                .into_iter()
                .map(|b| (at, format!("a call the parser cannot read: {b}")))
                .collect(),
            notes: parsed.notes,
        }
    }
}

fn scan(format: CallFormat, text: &str) -> Scan {
    use CallFormat::*;
    match format {
        Qwen3Xml => xml::qwen3(text),
        Glm => xml::glm(text),
        MiniMaxM2 => xml::minimax(text),
        DeepSeekDsml => xml::dsml(text),
        Kimi => tagged::kimi(text),
        DeepSeekV31 => tagged::deepseek_v31(text),
        DeepSeekV3 => tagged::deepseek_v3(text),
        MistralArgs => tagged::mistral(text),
        Gemma4 => gemma4::scan(text),
        Json | Harmony => unreachable!("read by their own readers"),
    }
}

/// The call as the message carries it: arguments converted, typed by the schema where the
/// family types them; None where the family's parser drops it (a name the request does not
/// offer, for GLM and MiniMax).
fn finish_call(
    raw: RawCall,
    tools: &[Value],
    format: Option<CallFormat>,
    base: usize,
    out: &mut Reading,
) -> Option<ReadCall> {
    let rules = format.map(CallFormat::rules);
    let offered = tools.iter().any(|t| {
        t.get("function")
            .unwrap_or(t)
            .get("name")
            .and_then(Value::as_str)
            == Some(&raw.name)
    });
    if rules.as_ref().is_some_and(|r| r.validate_names) && !tools.is_empty() && !offered {
        out.notes.push(format!(
            "call `{}` dropped: the request offers no such tool (vLLM's {} parser drops it)",
            raw.name,
            rules.as_ref().map_or("", |r| r.vllm)
        ));
        return None;
    }
    if raw.cut {
        out.notes.push(format!(
            "call `{}` was cut off (the completion ends inside it): its arguments are those \
             complete before the cut, as the reference parser returns them",
            raw.name
        ));
    }
    let mut arguments = match raw.args {
        RawArgs::Pairs(pairs) => Value::Object(pairs.into_iter().collect()),
        RawArgs::Json(v) => v,
        RawArgs::Text(t) => match serde_json::from_str::<Value>(t.trim()) {
            Ok(v) => v,
            Err(e) => {
                out.problems.push(Problem {
                    at: base + raw.at,
                    why: format!("`{}`'s arguments are not JSON ({e}): {t:?}", raw.name),
                });
                Value::String(t)
            }
        },
    };
    if rules.as_ref().is_some_and(|r| r.typed) {
        if let Value::Object(map) = &mut arguments {
            match schema::properties(tools, &raw.name) {
                Some(props) => {
                    let silent = schema::type_arguments(map, props);
                    if !silent.is_empty() {
                        out.notes.push(format!(
                            "`{}`: the schema is silent on {}: kept as the model wrote them",
                            raw.name,
                            silent.join(", ")
                        ));
                    }
                }
                None if !map.is_empty() => out.notes.push(format!(
                    "`{}`: no schema for its arguments (the request {}): values kept as the \
                     format gives them",
                    raw.name,
                    if offered {
                        "gives no properties"
                    } else {
                        "does not offer it"
                    }
                )),
                None => {}
            }
        }
    }
    Some(ReadCall {
        name: raw.name,
        arguments,
        id: raw.id,
    })
}

#[cfg(test)]
mod tests;
