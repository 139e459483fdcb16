//! What the model's format says about reasoning and tool calls, read from its chat template.
//!
//! A server's reasoning parser (vLLM `--reasoning-parser`, llama-server `--reasoning-format`)
//! and tool-call parser (vLLM `--tool-call-parser`, llama-server `--jinja`) must read the text
//! the model was trained to emit. That text is the template's own: the way it writes a call and
//! a reasoning block into history is what the model saw in training. So the framing is derived
//! by rendering probes through the template, not looked up by model name:
//! - **tools offered**: a `tools` list reaches the prompt (a template that ignores it, like
//!   DeepSeek-R1-Distill's, gives the model no tools whatever the server is told: the template
//!   layer, not the parser);
//! - **the call**: an assistant turn holding one call (`get_weather`, `{"city": "Paris"}`), the
//!   text around its JSON (`<tool_call>` … `</tool_call>`, `[TOOL_CALLS]`, bare JSON with
//!   `parameters`, DeepSeek's `<｜tool▁calls▁begin｜>`, harmony's `to=functions.NAME`), the
//!   key the arguments sit under, and whether two calls in one turn render (parallel calls);
//! - **reasoning**: think tags (`<think>`/`</think>` written around a turn's
//!   `reasoning_content`, or named by the template), harmony's analysis channel, whether the
//!   generation prompt leaves a think block open (the reply then starts inside reasoning and
//!   only `</think>` marks its end), and the `chat_template_kwargs` that switch it.
//!
//! The parser names are the stacks' own, from their sources: vLLM
//! `vllm/entrypoints/openai/tool_parsers/` (hermes, mistral, llama3_json, deepseek_v3, openai)
//! and `vllm/reasoning/` (deepseek_r1, qwen3, gpt-oss harmony); llama.cpp `common/chat.cpp`
//! (Hermes 2 Pro, Mistral Nemo, Llama 3.x, DeepSeek R1, Functionary v3.1, GPT-OSS).
use serde::Serialize;
use serde_json::{json, Value};

use super::calls::json_at;
use super::{ChatTemplate, RenderRequest, SpecialTokens};

/// What the template says the model emits around reasoning and tool calls.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Framing {
    pub reasoning: Option<Reasoning>,
    pub tools: Tools,
}

/// How the model frames its reasoning.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Reasoning {
    /// The text that opens and closes a reasoning block (`<think>` / `</think>`; harmony:
    /// `<|channel|>analysis<|message|>` / `<|end|>`).
    pub open: String,
    pub close: String,
    /// The generation prompt ends inside an open reasoning block: the reply starts with
    /// reasoning and carries no open tag, only the close.
    pub prompt_opens: bool,
    /// `chat_template_kwargs` that change the prompt (`enable_thinking`, `reasoning_effort`),
    /// each with the first value tried that changed it.
    pub switches: Vec<(String, Value)>,
    /// The reasoning parser that reads this framing, by each stack's name for it.
    pub parser: Parser,
}

/// How the model frames tool calls.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Tools {
    /// A request's `tools` reach the prompt.
    pub offered: bool,
    /// How the template writes one call into history: None when it writes none.
    pub call: Option<Call>,
    /// A known call marker the template's source names, with its parser, where no call renders
    /// (DeepSeek-R1-Distill's template writes calls only for `content: null`, a key transformers
    /// 5 drops before rendering).
    pub named: Option<(&'static str, Parser)>,
}

/// One call as the template writes it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Call {
    /// The text before the call's JSON ("" for a bare JSON call) and after it, up to the end of
    /// the turn.
    pub open: String,
    pub close: String,
    /// The key the arguments sit under when the call is a JSON object with the function's name
    /// (`arguments`, `parameters`); None when the name is outside the JSON (DeepSeek, harmony).
    pub arguments_key: Option<String>,
    /// Two calls in one turn render, both of them.
    pub parallel: bool,
    /// The assistant turn with one call, as the template writes it.
    pub rendered: String,
    /// The tool-call parser that reads this framing, by each stack's name for it.
    pub parser: Option<Parser>,
}

/// A parser by the names the stacks give it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Parser {
    /// vLLM's `--tool-call-parser` / `--reasoning-parser` value (None: vLLM has none).
    pub vllm: Option<&'static str>,
    /// llama.cpp: the chat format (common/chat.cpp) `--jinja` picks from the template for tool
    /// calls; the `--reasoning-format` for reasoning.
    pub llama_cpp: Option<&'static str>,
}

/// The marker in a call's framing that names the parser family reading it.
struct KnownCall {
    marker: &'static str,
    parser: Parser,
}

/// Tool-call framings the stacks parse (sources in the module header). A call with no marker
/// and an `arguments_key` of `parameters` is Llama 3.x's bare JSON.
const KNOWN_CALLS: [KnownCall; 5] = [
    KnownCall {
        marker: "<tool_call>",
        parser: Parser {
            vllm: Some("hermes"),
            llama_cpp: Some("Hermes 2 Pro"),
        },
    },
    KnownCall {
        marker: "[TOOL_CALLS]",
        parser: Parser {
            vllm: Some("mistral"),
            llama_cpp: Some("Mistral Nemo"),
        },
    },
    KnownCall {
        marker: "<｜tool▁calls▁begin｜>",
        parser: Parser {
            vllm: Some("deepseek_v3"),
            llama_cpp: Some("DeepSeek R1"),
        },
    },
    KnownCall {
        marker: "to=functions.",
        parser: Parser {
            vllm: Some("openai"),
            llama_cpp: Some("GPT-OSS"),
        },
    },
    KnownCall {
        marker: "<function=",
        parser: Parser {
            vllm: None,
            llama_cpp: Some("Functionary v3.1 Llama 3.1"),
        },
    },
];

const LLAMA3_JSON: Parser = Parser {
    vllm: Some("llama3_json"),
    llama_cpp: Some("Llama 3.x"),
};
const THINK_TAGS: Parser = Parser {
    vllm: Some("deepseek_r1"),
    llama_cpp: Some("--reasoning-format deepseek"),
};
/// Think tags switched by `enable_thinking` (Qwen3): vLLM's `qwen3` parser reads the switch from
/// the request's `chat_template_kwargs`; `deepseek_r1` does not, and with thinking switched off
/// it returns the whole answer as reasoning and `content` null when not streaming (vLLM 0.32
/// `reasoning/basic_parsers.py`, docs/research/vllm-parsers.md).
const QWEN3_THINK: Parser = Parser {
    vllm: Some("qwen3"),
    llama_cpp: Some("--reasoning-format deepseek"),
};
const MISTRAL_THINK: Parser = Parser {
    vllm: Some("mistral"),
    llama_cpp: Some("--reasoning-format auto (its Magistral format)"),
};
const GEMMA4_THINK: Parser = Parser {
    vllm: Some("gemma4"),
    llama_cpp: Some("--reasoning-format auto (its Gemma 4 format)"),
};
const HARMONY: Parser = Parser {
    vllm: Some("openai_gptoss"),
    llama_cpp: Some("--reasoning-format auto (its GPT-OSS format)"),
};

/// `chat_template_kwargs` templates read to switch reasoning (Qwen3 `enable_thinking`,
/// DeepSeek-V3.1 `thinking`, and the spellings other templates copied), and gpt-oss's
/// `reasoning_effort` level.
fn switches_tried() -> Vec<(&'static str, Value)> {
    let mut tried = Vec::new();
    for name in ["enable_thinking", "thinking", "reasoning", "think"] {
        tried.push((name, Value::Bool(false)));
        tried.push((name, Value::Bool(true)));
    }
    tried.push(("reasoning_effort", json!("low")));
    tried
}

const QUESTION: &str = "What is the weather in Paris?";
const NAME: &str = "get_weather";
const OTHER: &str = "get_time";
/// Mistral's templates insist on nine alphanumerics for a call id.
const CALL_ID: &str = "a1b2c3d4e";
const REASONING: &str = "Reasoning R.";
const ANSWER: &str = "Answer A.";

fn tool(name: &str, what: &str) -> Value {
    json!({"type": "function", "function": {
        "name": name,
        "description": what,
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    }})
}

fn tools() -> Value {
    json!([
        tool(NAME, "The current weather in a city"),
        tool(OTHER, "The local time in a city")
    ])
}

fn user() -> Value {
    json!({"role": "user", "content": QUESTION})
}

/// An assistant turn calling `names`, the arguments as a JSON object or as a JSON string
/// (templates differ on which they take).
fn calling(names: &[&str], content: Value, args_as_string: bool) -> Value {
    let calls: Vec<Value> = names
        .iter()
        .map(|n| {
            let args = json!({"city": "Paris"});
            let args = if args_as_string {
                Value::String(args.to_string())
            } else {
                args
            };
            json!({"id": CALL_ID, "type": "function", "function": {"name": n, "arguments": args}})
        })
        .collect();
    json!({"role": "assistant", "content": content, "tool_calls": calls})
}

/// Renders probes through one template.
struct Prober<'a> {
    template: &'a ChatTemplate,
    special: &'a SpecialTokens,
    /// The request's `chat_template_kwargs`, under every probe (a probe's own win).
    kwargs: &'a serde_json::Map<String, Value>,
}

impl Prober<'_> {
    fn render(
        &self,
        messages: Vec<Value>,
        tools: Option<Value>,
        generation: bool,
        extra: &[(&str, Value)],
    ) -> Option<String> {
        let req = RenderRequest {
            messages,
            tools,
            add_generation_prompt: generation,
            special_tokens: self.special.clone(),
            extra: self
                .kwargs
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .chain(extra.iter().map(|(k, v)| (k.to_string(), v.clone())))
                .collect(),
            // A fixed day: templates that print the date render the same text every time.
            now: chrono::NaiveDate::from_ymd_opt(2026, 1, 1).and_then(|d| d.and_hms_opt(0, 0, 0)),
            ..RenderRequest::default()
        };
        self.template.render(&req).ok().map(|r| r.text)
    }

    /// The prompt for the question, with the generation prompt.
    fn prompt(&self, tools: Option<Value>, extra: &[(&str, Value)]) -> Option<String> {
        self.render(vec![user()], tools, true, extra)
    }

    /// The assistant turn `turn` as written after the question: the render of the whole
    /// conversation past the prompt. Where the generation prompt is not a prefix of the written
    /// turn (it opens a think block the history does not), past the question alone, less the
    /// header the two share.
    fn turn(&self, turn: Value, tools: Option<Value>) -> Option<String> {
        let full = self.render(vec![user(), turn], tools.clone(), false, &[])?;
        let prompt = self.render(vec![user()], tools.clone(), true, &[]);
        if let Some(rest) = prompt.as_deref().and_then(|p| full.strip_prefix(p)) {
            return Some(rest.to_string());
        }
        let history = self.render(vec![user()], tools, false, &[])?;
        let rest = full.strip_prefix(&history)?;
        let header = prompt
            .as_deref()
            .and_then(|p| p.strip_prefix(&history))
            .unwrap_or("");
        Some(rest[shared_header(rest, header)..].to_string())
    }
}

/// The length of the header `a` and `b` start with: their common prefix, cut back to before a
/// tag it ends inside (`<｜Assistant｜><think>` and `<｜Assistant｜><｜tool…` share
/// `<｜Assistant｜>`, not the `<` after it).
fn shared_header(a: &str, b: &str) -> usize {
    let common: usize = a
        .chars()
        .zip(b.chars())
        .take_while(|(x, y)| x == y)
        .map(|(x, _)| x.len_utf8())
        .sum();
    let prefix = &a[..common];
    match (prefix.rfind('<'), prefix.rfind('>')) {
        (Some(open), close) if close.is_none_or(|c| c < open) => open,
        _ => common,
    }
}

/// The framing `template` gives reasoning and tool calls.
pub fn derive(template: &ChatTemplate, special: &SpecialTokens) -> Framing {
    derive_with(template, special, &serde_json::Map::new())
}

/// The framing under a request's `chat_template_kwargs` (`enable_thinking: false` closes the
/// think block in the generation prompt, so the reply starts as content).
pub fn derive_with(
    template: &ChatTemplate,
    special: &SpecialTokens,
    kwargs: &serde_json::Map<String, Value>,
) -> Framing {
    let p = Prober {
        template,
        special,
        kwargs,
    };
    let reasoning = reasoning(&p);
    let mut call = call(&p);
    // A turn that reasons before it calls (Qwen3 writes an empty think block into the last
    // turn): the call's own framing starts after the reasoning.
    if let (Some(c), Some(r)) = (&mut call, &reasoning) {
        if let Some(at) = c.open.rfind(&r.close) {
            c.open = c.open[at + r.close.len()..].trim_start().to_string();
        }
    }
    let named = match call {
        Some(_) => None,
        None => KNOWN_CALLS
            .iter()
            .find(|k| template.source().contains(k.marker))
            .map(|k| (k.marker, k.parser)),
    };
    Framing {
        reasoning,
        tools: Tools {
            offered: tools_offered(&p),
            call,
            named,
        },
    }
}

fn tools_offered(p: &Prober) -> bool {
    let with = p.prompt(Some(tools()), &[]).unwrap_or_default();
    let without = p.prompt(None, &[]).unwrap_or_default();
    with.contains(NAME) && !without.contains(NAME)
}

/// One call as the template writes it: the first of the message shapes it renders (the
/// arguments as an object or a string; the content empty or null).
fn call(p: &Prober) -> Option<Call> {
    let shapes = [
        (json!(""), false),
        (json!(""), true),
        (Value::Null, false),
        (Value::Null, true),
    ];
    let (turn, shape) = shapes.iter().find_map(|(content, as_string)| {
        p.turn(calling(&[NAME], content.clone(), *as_string), Some(tools()))
            .filter(|t| t.contains(NAME) && t.contains("Paris"))
            .map(|t| (t, (content, *as_string)))
    })?;
    let end = turn_end(p);
    let (open, close, arguments_key) = split_call(&turn, end.as_deref())?;
    let parallel = p
        .turn(
            calling(&[NAME, OTHER], shape.0.clone(), shape.1),
            Some(tools()),
        )
        .is_some_and(|t| t.contains(NAME) && t.contains(OTHER));
    let parser = KNOWN_CALLS
        .iter()
        .find(|k| open.contains(k.marker) || turn.contains(k.marker))
        .map(|k| k.parser)
        .or_else(|| {
            (open.trim().is_empty() && arguments_key.as_deref() == Some("parameters"))
                .then_some(LLAMA3_JSON)
        });
    Some(Call {
        open,
        close,
        arguments_key,
        parallel,
        rendered: turn,
        parser,
    })
}

/// What the template writes after a plain assistant reply: the end of a turn.
fn turn_end(p: &Prober) -> Option<String> {
    // With the tools: some templates (Hermes 2 Pro's tool_use) render nothing without them.
    let turn = p.turn(
        json!({"role": "assistant", "content": ANSWER}),
        Some(tools()),
    )?;
    let at = turn.find(ANSWER)? + ANSWER.len();
    Some(turn[at..].to_string())
}

/// The text before the call's JSON, after it (less the turn's end), and the arguments' key when
/// the name sits inside the JSON.
fn split_call(turn: &str, end: Option<&str>) -> Option<(String, String, Option<String>)> {
    let name_at = turn.find(NAME)?;
    // A JSON object (or an array of them) holding the name: the call is JSON.
    let whole = turn[..name_at]
        .char_indices()
        .rev()
        .filter(|(_, c)| *c == '{' || *c == '[')
        .find_map(|(i, _)| {
            let (value, len) = json_at(&turn[i..])?;
            let object = match &value {
                Value::Array(items) => items.first()?.clone(),
                v => v.clone(),
            };
            let named = object.get("name").and_then(Value::as_str) == Some(NAME);
            named.then_some((i, len, object))
        });
    let (start, len, key) = match whole {
        Some((i, len, object)) => {
            let key = ["arguments", "parameters"]
                .into_iter()
                .find(|k| object.get(*k).is_some())
                .map(str::to_string);
            (i, len, key)
        }
        None => {
            // The name outside the JSON: the arguments object after it.
            let brace = name_at + turn[name_at..].find('{')?;
            let (_, len) = json_at(&turn[brace..])?;
            (name_at, brace - name_at + len, None)
        }
    };
    let open = turn[..start].to_string();
    let mut close = turn[start + len..].to_string();
    if let Some(end) = end.filter(|e| !e.is_empty()) {
        if let Some(stripped) = close.strip_suffix(end) {
            close = stripped.to_string();
        }
    }
    Some((open, close, key))
}

fn reasoning(p: &Prober) -> Option<Reasoning> {
    let source = p.template.source();
    let prompt = p.prompt(None, &[]).unwrap_or_default();
    let (open, close, parser) = if source.contains("<|channel|>") {
        (
            "<|channel|>analysis<|message|>".to_string(),
            "<|end|>".to_string(),
            HARMONY,
        )
    } else if source.contains("[THINK]") && source.contains("[/THINK]") {
        // Magistral / Ministral 3 (v13 tokenizers): the tags are special tokens, not `<…>`.
        ("[THINK]".to_string(), "[/THINK]".to_string(), MISTRAL_THINK)
    } else if source.contains("<|channel>") && source.contains("<channel|>") {
        // Gemma 4: `<|channel>thought\n…<channel|>`; the channel's name is not reasoning.
        (
            "<|channel>thought".to_string(),
            "<channel|>".to_string(),
            GEMMA4_THINK,
        )
    } else {
        let (open, close) = think_tags(p)?;
        (open, close, THINK_TAGS)
    };
    let prompt_opens = {
        let tail = prompt.trim_end();
        tail.ends_with(open.trim()) && !open.trim().is_empty()
    };
    let mut switches: Vec<(String, Value)> = Vec::new();
    for (name, value) in switches_tried() {
        if switches.iter().any(|(n, _)| n == name) {
            continue;
        }
        if p.prompt(None, &[(name, value.clone())])
            .is_some_and(|switched| switched != prompt)
        {
            switches.push((name.to_string(), value));
        }
    }
    let parser = if parser == THINK_TAGS && switches.iter().any(|(n, _)| n == "enable_thinking") {
        QWEN3_THINK
    } else {
        parser
    };
    Some(Reasoning {
        open,
        close,
        prompt_opens,
        switches,
        parser,
    })
}

/// The tags the template writes around a turn's `reasoning_content`, else the think tags it
/// names in its source.
fn think_tags(p: &Prober) -> Option<(String, String)> {
    let turn = json!({"role": "assistant", "content": ANSWER, "reasoning_content": REASONING});
    if let Some(t) = p.turn(turn, None) {
        if let (Some(r), Some(a)) = (t.find(REASONING), t.find(ANSWER)) {
            let open = t[..r].trim();
            let close = t[r + REASONING.len()..a].trim();
            if open.starts_with('<') && close.starts_with("</") {
                // The last tag before the reasoning (after the turn's header, if any).
                let open = &open[open.rfind('<').unwrap_or(0)..];
                return Some((open.to_string(), close.to_string()));
            }
        }
    }
    let source = p.template.source();
    (source.contains("<think>") || source.contains("</think>"))
        .then(|| ("<think>".to_string(), "</think>".to_string()))
}

impl Reasoning {
    /// Harmony's analysis channel rather than tags in the text.
    pub fn harmony(&self) -> bool {
        self.parser == HARMONY
    }
}

/// One piece of a reply, split as a reasoning parser splits it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    Reasoning(String),
    Content(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Inside {
    /// Not yet known whether the reply opens a reasoning block.
    Start,
    Reasoning,
    Content,
}

/// Splits a reply's text, piece by piece as it streams, into reasoning and content the way
/// vLLM's `deepseek_r1` parser and llama-server's `--reasoning-format deepseek` do: a reply
/// whose prompt opened the block is reasoning up to the close tag; otherwise a reply that starts
/// with the open tag is reasoning up to the close; the rest is content, the whitespace between
/// the close tag and it dropped. A reply with no block is all content, byte for byte. Text that
/// may be the start of a tag is held back until it is known.
#[derive(Debug, Clone)]
pub struct Splitter {
    open: String,
    close: String,
    inside: Inside,
    held: String,
    content_started: bool,
}

impl Splitter {
    /// A splitter for think tags (None for harmony, whose channels are tokens, not text).
    pub fn new(r: &Reasoning) -> Option<Splitter> {
        (!r.harmony()).then(|| Splitter {
            open: r.open.clone(),
            close: r.close.clone(),
            inside: if r.prompt_opens {
                Inside::Reasoning
            } else {
                Inside::Start
            },
            held: String::new(),
            content_started: false,
        })
    }

    /// The parts `text` completes.
    pub fn push(&mut self, text: &str) -> Vec<Part> {
        self.held.push_str(text);
        let mut out = Vec::new();
        loop {
            match self.inside {
                Inside::Start => {
                    let t = self.held.trim_start();
                    if t.is_empty() || (self.open.starts_with(t) && t.len() < self.open.len()) {
                        break; // maybe the open tag, not all here yet
                    }
                    if let Some(rest) = t.strip_prefix(self.open.as_str()) {
                        self.held = rest.to_string();
                        self.inside = Inside::Reasoning;
                    } else {
                        // No block: the reply is content from its first byte, leading space
                        // and all (vLLM's parsers and the in-process model keep it).
                        self.inside = Inside::Content;
                        self.content_started = true;
                    }
                }
                Inside::Reasoning => match self.held.find(self.close.as_str()) {
                    Some(at) => {
                        let reasoning = self.held[..at].to_string();
                        self.held = self.held[at + self.close.len()..].to_string();
                        push_part(&mut out, Part::Reasoning(reasoning));
                        self.inside = Inside::Content;
                    }
                    None => {
                        let keep = partial_suffix(&self.held, &self.close);
                        let ready = self.held[..self.held.len() - keep].to_string();
                        self.held.drain(..ready.len());
                        push_part(&mut out, Part::Reasoning(ready));
                        break;
                    }
                },
                Inside::Content => {
                    let mut text = std::mem::take(&mut self.held);
                    if !self.content_started {
                        text = text.trim_start().to_string();
                        self.content_started = !text.is_empty();
                    }
                    push_part(&mut out, Part::Content(text));
                    break;
                }
            }
        }
        out
    }

    /// The reply ended: what was held back.
    pub fn finish(&mut self) -> Vec<Part> {
        let held = std::mem::take(&mut self.held);
        let mut out = Vec::new();
        match self.inside {
            Inside::Reasoning => push_part(&mut out, Part::Reasoning(held)),
            Inside::Start => push_part(&mut out, Part::Content(held)),
            Inside::Content => {
                let text = if self.content_started {
                    held
                } else {
                    held.trim_start().to_string()
                };
                push_part(&mut out, Part::Content(text));
            }
        }
        out
    }

    /// A whole reply: (reasoning, content).
    pub fn split(mut self, text: &str) -> (String, String) {
        let (mut reasoning, mut content) = (String::new(), String::new());
        let mut parts = self.push(text);
        parts.extend(self.finish());
        for p in parts {
            match p {
                Part::Reasoning(r) => reasoning.push_str(&r),
                Part::Content(c) => content.push_str(&c),
            }
        }
        (reasoning, content)
    }
}

fn push_part(out: &mut Vec<Part>, part: Part) {
    let empty = match &part {
        Part::Reasoning(t) | Part::Content(t) => t.is_empty(),
    };
    if !empty {
        out.push(part);
    }
}

/// The length of the longest end of `text` that begins `tag` (a tag split across pieces).
pub(crate) fn partial_suffix(text: &str, tag: &str) -> usize {
    (1..tag.len().min(text.len() + 1))
        .rev()
        .find(|&n| {
            text.is_char_boundary(text.len() - n) && tag.starts_with(&text[text.len() - n..])
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_splits_around_its_json() {
        let turn = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n";
        let (open, close, key) = split_call(turn, Some("<|im_end|>\n")).unwrap();
        assert_eq!(open, "<tool_call>\n");
        assert_eq!(close, "\n</tool_call>");
        assert_eq!(key.as_deref(), Some("arguments"));
        // The name outside the JSON: the arguments object after it.
        let turn = "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}<|call|>";
        let (open, close, key) = split_call(turn, None).unwrap();
        assert_eq!(open, "<|channel|>commentary to=functions.");
        assert_eq!(close, "<|call|>");
        assert_eq!(key, None);
    }

    fn think(prompt_opens: bool) -> Reasoning {
        Reasoning {
            open: "<think>".into(),
            close: "</think>".into(),
            prompt_opens,
            switches: vec![],
            parser: THINK_TAGS,
        }
    }

    #[test]
    fn a_reply_splits_at_the_close_whether_the_prompt_or_the_reply_opened_the_block() {
        let opened = || Splitter::new(&think(true)).unwrap();
        assert_eq!(
            opened().split("Let me see.\n</think>\n\nParis is sunny."),
            ("Let me see.\n".into(), "Paris is sunny.".into())
        );
        // Cut inside the reasoning: all of it is reasoning, no content.
        assert_eq!(opened().split("Let me"), ("Let me".into(), String::new()));
        let own = || Splitter::new(&think(false)).unwrap();
        assert_eq!(
            own().split("<think>hm</think>Yes."),
            ("hm".into(), "Yes.".into())
        );
        assert_eq!(
            own().split("Just an answer."),
            (String::new(), "Just an answer.".into())
        );
        // No block: the content keeps its first byte (a leading space is part of the reply).
        assert_eq!(
            own().split(" wease ben"),
            (String::new(), " wease ben".into())
        );
        assert_eq!(own().split("\n"), (String::new(), "\n".into()));
        let mut streamed = own();
        let mut content = String::new();
        for piece in [" ", " we", "ase"] {
            for p in streamed.push(piece) {
                if let Part::Content(c) = p {
                    content.push_str(&c);
                }
            }
        }
        for p in streamed.finish() {
            if let Part::Content(c) = p {
                content.push_str(&c);
            }
        }
        assert_eq!(content, "  wease");
    }

    /// Streamed one character at a time, the parts join to the whole reply's split: a tag split
    /// across pieces is held back, never sent as content or reasoning.
    #[test]
    fn streamed_pieces_join_to_the_whole_split() {
        for (opens, text) in [
            (true, "a b </think> c"),
            (false, "  <think>x</thi</think>\n y"),
            (false, "<thin is not a tag"),
            (true, "no close at all </thi"),
        ] {
            let whole = Splitter::new(&think(opens)).unwrap().split(text);
            let mut s = Splitter::new(&think(opens)).unwrap();
            let mut parts = Vec::new();
            for c in text.chars() {
                parts.extend(s.push(&c.to_string()));
            }
            parts.extend(s.finish());
            let (mut r, mut c) = (String::new(), String::new());
            for p in parts {
                match p {
                    Part::Reasoning(t) => r.push_str(&t),
                    Part::Content(t) => c.push_str(&t),
                }
            }
            assert_eq!((r, c), whole, "{text:?}");
        }
    }
}
