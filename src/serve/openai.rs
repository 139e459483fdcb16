//! The OpenAI (and vLLM-extension) request fields this server reads, validated with
//! OpenAI-shaped errors, and the response objects it writes. Unknown fields are ignored, as
//! vLLM does.
use serde_json::{json, Map, Value};

use super::engine::{GenParams, Prompt};
use super::errors::ApiError;
use crate::endpoint::{FinishReason, SamplingParams, TokenStep};

/// The most alternatives a request may ask for per token (vLLM's default cap).
pub const MAX_TOP_LOGPROBS: usize = 20;

/// Parse a request body: malformed JSON and non-objects are 400s.
pub fn parse_body(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    let v: Value = serde_json::from_slice(body).map_err(ApiError::malformed_json)?;
    match v {
        Value::Object(o) => Ok(o),
        other => Err(ApiError::bad_request(format!(
            "the request body must be a JSON object, not {}",
            type_name(&other)
        ))
        .code("invalid_json")),
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 40 {
        format!("{}…", s.chars().take(40).collect::<String>())
    } else {
        s
    }
}

/// Typed access to a request's fields; null counts as absent.
pub struct Fields<'a>(pub &'a Map<String, Value>);

impl<'a> Fields<'a> {
    pub fn get(&self, key: &str) -> Option<&'a Value> {
        self.0.get(key).filter(|v| !v.is_null())
    }
    fn wrong(&self, key: &str, expected: &str, found: &Value) -> ApiError {
        ApiError::invalid(
            key,
            format!(
                "'{key}' must be {expected}, not {} ({})",
                type_name(found),
                short(found)
            ),
        )
        .code("invalid_type")
    }
    pub fn number(&self, key: &str) -> Result<Option<f64>, ApiError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Number(n)) => n
                .as_f64()
                .map(Some)
                .ok_or_else(|| self.wrong(key, "a number", &Value::Number(n.clone()))),
            Some(v) => Err(self.wrong(key, "a number", v)),
        }
    }
    pub fn integer(&self, key: &str) -> Result<Option<i64>, ApiError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Number(n)) => {
                if let Some(i) = n.as_i64() {
                    return Ok(Some(i));
                }
                match n.as_f64() {
                    Some(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => Ok(Some(f as i64)),
                    _ => Err(self.wrong(key, "an integer", &Value::Number(n.clone()))),
                }
            }
            Some(v) => Err(self.wrong(key, "an integer", v)),
        }
    }
    /// A non-negative integer.
    pub fn count(&self, key: &str) -> Result<Option<usize>, ApiError> {
        match self.integer(key)? {
            None => Ok(None),
            Some(i) if i < 0 => Err(ApiError::invalid(
                key,
                format!("'{key}' must be non-negative, got {i}"),
            )),
            Some(i) => Ok(Some(i as usize)),
        }
    }
    pub fn boolean(&self, key: &str) -> Result<Option<bool>, ApiError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(self.wrong(key, "a boolean", v)),
        }
    }
    pub fn string(&self, key: &str) -> Result<Option<&'a str>, ApiError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(v) => Err(self.wrong(key, "a string", v)),
        }
    }
    pub fn object(&self, key: &str) -> Result<Option<Fields<'a>>, ApiError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Object(o)) => Ok(Some(Fields(o))),
            Some(v) => Err(self.wrong(key, "an object", v)),
        }
    }
    /// A list of token ids below `vocab`.
    pub fn ids(&self, key: &str, vocab: usize) -> Result<Vec<u32>, ApiError> {
        match self.get(key) {
            None => Ok(vec![]),
            Some(Value::Array(items)) => items.iter().map(|v| token_id(key, v, vocab)).collect(),
            Some(v) => Err(self.wrong(key, "a list of token ids", v)),
        }
    }
}

fn token_id(key: &str, v: &Value, vocab: usize) -> Result<u32, ApiError> {
    use crate::exchange::BadTokenId;
    crate::exchange::token_id(key, v, vocab).map_err(|e| match e {
        BadTokenId::OutOfVocabulary(why) => ApiError::invalid(key, why),
        BadTokenId::NotAnId(why) => ApiError::invalid(key, why).code("invalid_type"),
    })
}

/// What chat and completions requests share.
#[derive(Debug, Clone)]
pub struct Common {
    pub model: Option<String>,
    pub params: GenParams,
    pub stream: bool,
    pub include_usage: bool,
    pub return_token_ids: bool,
    /// Some(n): log-probabilities requested with n alternatives per token.
    pub logprobs: Option<usize>,
}

/// Read the fields both endpoints share. `random_seed` is used when the request has no seed.
pub fn parse_common(
    f: &Fields,
    vocab: usize,
    random_seed: u64,
    logprobs: Option<usize>,
) -> Result<Common, ApiError> {
    let model = f.string("model")?.map(str::to_string);
    if let Some(n) = f.integer("n")? {
        if n != 1 {
            return Err(ApiError::unsupported(
                "n",
                format!("n must be 1: chatgate serve returns one choice per request (got n = {n})"),
            ));
        }
    }
    if let Some(b) = f.integer("best_of")? {
        if b != 1 {
            return Err(ApiError::unsupported(
                "best_of",
                format!("best_of must be 1 (got {b})"),
            ));
        }
    }
    let max_tokens = match f.count("max_completion_tokens")? {
        Some(m) => Some(m),
        None => f.count("max_tokens")?,
    };
    if max_tokens == Some(0) {
        let key = if f.get("max_completion_tokens").is_some() {
            "max_completion_tokens"
        } else {
            "max_tokens"
        };
        return Err(ApiError::invalid(
            key,
            format!("'{key}' must be at least 1, got 0"),
        ));
    }
    let temperature = f.number("temperature")?.unwrap_or(1.0);
    if !(0.0..=100.0).contains(&temperature) {
        return Err(ApiError::invalid(
            "temperature",
            format!("'temperature' must be >= 0, got {temperature}"),
        ));
    }
    let top_p = f.number("top_p")?.unwrap_or(1.0);
    if !(top_p > 0.0 && top_p <= 1.0) {
        return Err(ApiError::invalid(
            "top_p",
            format!("'top_p' must be in (0, 1], got {top_p}"),
        ));
    }
    let top_k = match f.integer("top_k")? {
        None | Some(-1) | Some(0) => None,
        Some(k) if k > 0 => Some(k as usize),
        Some(k) => {
            return Err(ApiError::invalid(
                "top_k",
                format!("'top_k' must be -1 (disabled) or at least 1, got {k}"),
            ))
        }
    };
    let repetition_penalty = f.number("repetition_penalty")?.unwrap_or(1.0);
    if !(repetition_penalty > 0.0 && repetition_penalty.is_finite()) {
        return Err(ApiError::invalid(
            "repetition_penalty",
            format!("'repetition_penalty' must be > 0, got {repetition_penalty}"),
        ));
    }
    let seed = f.integer("seed")?.map(|s| s as u64).unwrap_or(random_seed);
    let stop = match f.get("stop") {
        None => vec![],
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| match v {
                Value::String(s) => Ok(s.clone()),
                other => Err(ApiError::invalid(
                    "stop",
                    format!(
                        "'stop' must be a string or a list of strings, found {}",
                        type_name(other)
                    ),
                )
                .code("invalid_type")),
            })
            .collect::<Result<Vec<_>, _>>()?,
        Some(v) => return Err(f.wrong("stop", "a string or a list of strings", v)),
    };
    let stop: Vec<String> = stop.into_iter().filter(|s| !s.is_empty()).collect();
    let stop_token_ids = f.ids("stop_token_ids", vocab)?;
    let ignore_eos = f.boolean("ignore_eos")?.unwrap_or(false);
    let stream = f.boolean("stream")?.unwrap_or(false);
    let include_usage = match f.object("stream_options")? {
        None => false,
        Some(opts) => {
            if !stream {
                return Err(ApiError::invalid(
                    "stream_options",
                    "Stream options can only be defined when `stream=True`.",
                ));
            }
            opts.boolean("include_usage")?.unwrap_or(false)
        }
    };
    let return_token_ids = f.boolean("return_token_ids")?.unwrap_or(false);
    Ok(Common {
        model,
        params: GenParams {
            max_tokens,
            sampling: SamplingParams {
                temperature,
                top_p,
                top_k,
                repetition_penalty: repetition_penalty as f32,
                seed,
            },
            stop,
            stop_token_ids,
            top_logprobs: logprobs,
            ignore_eos,
        },
        stream,
        include_usage,
        return_token_ids,
        logprobs,
    })
}

fn check_top(key: &str, n: usize) -> Result<usize, ApiError> {
    if n > MAX_TOP_LOGPROBS {
        return Err(ApiError::invalid(
            key,
            format!("'{key}' must be at most {MAX_TOP_LOGPROBS}, got {n}"),
        ));
    }
    Ok(n)
}

/// A chat message's content: a string, or a list of text parts (joined with "\n" as vLLM does
/// for string-content templates).
fn normalize_message(i: usize, m: &Value) -> Result<Value, ApiError> {
    let Value::Object(obj) = m else {
        return Err(ApiError::invalid(
            "messages",
            format!("messages[{i}] must be an object, not {}", type_name(m)),
        )
        .code("invalid_type"));
    };
    match obj.get("role") {
        Some(Value::String(_)) => {}
        None | Some(Value::Null) => return Err(ApiError::missing(&format!("messages[{i}].role"))),
        Some(v) => {
            return Err(ApiError::invalid(
                "messages",
                format!("messages[{i}].role must be a string, not {}", type_name(v)),
            )
            .code("invalid_type"))
        }
    }
    let mut out = obj.clone();
    match obj.get("content") {
        None | Some(Value::Null) | Some(Value::String(_)) => {}
        Some(Value::Array(parts)) => {
            let mut texts = vec![];
            for (j, part) in parts.iter().enumerate() {
                let kind = part.get("type").and_then(Value::as_str);
                match (kind, part.get("text")) {
                    (Some("text"), Some(Value::String(t))) => texts.push(t.clone()),
                    _ => {
                        return Err(ApiError::unsupported(
                            "messages",
                            format!(
                                "messages[{i}].content[{j}]: only {{\"type\": \"text\", \"text\": ...}} parts are supported"
                            ),
                        ))
                    }
                }
            }
            out.insert("content".into(), Value::String(texts.join("\n")));
        }
        Some(v) => {
            return Err(ApiError::invalid(
                "messages",
                format!(
                    "messages[{i}].content must be a string or a list of parts, not {}",
                    type_name(v)
                ),
            )
            .code("invalid_type"))
        }
    }
    Ok(Value::Object(out))
}

/// The conversation part of a chat (or tokenize-with-messages) request.
pub fn parse_messages(f: &Fields) -> Result<Prompt, ApiError> {
    let messages = match f.get("messages") {
        None => return Err(ApiError::missing("messages")),
        Some(Value::Array(m)) if m.is_empty() => {
            return Err(ApiError::invalid(
                "messages",
                "'messages' must hold at least one message",
            ))
        }
        Some(Value::Array(m)) => m
            .iter()
            .enumerate()
            .map(|(i, m)| normalize_message(i, m))
            .collect::<Result<Vec<_>, _>>()?,
        Some(v) => return Err(f.wrong("messages", "a list of messages", v)),
    };
    let tools = match f.get("tools") {
        None => None,
        Some(t @ Value::Array(_)) => Some(t.clone()),
        Some(v) => return Err(f.wrong("tools", "a list of tools", v)),
    };
    let add_generation_prompt = f.boolean("add_generation_prompt")?.unwrap_or(true);
    let add_special_tokens = f.boolean("add_special_tokens")?.unwrap_or(false);
    if f.boolean("continue_final_message")?.unwrap_or(false) {
        return Err(ApiError::unsupported(
            "continue_final_message",
            "continue_final_message is not supported by chatgate serve",
        ));
    }
    // vLLM's rule: the variables go to the template (those it does not read are dropped).
    let template_kwargs = f
        .object("chat_template_kwargs")?
        .map(|kw| kw.0.clone())
        .unwrap_or_default();
    if f.get("chat_template").is_some() {
        return Err(ApiError::unsupported(
            "chat_template",
            "a request-supplied chat_template is not supported by chatgate serve",
        ));
    }
    Ok(Prompt::Chat {
        messages,
        tools,
        add_generation_prompt,
        add_special_tokens,
        template_kwargs,
    })
}

pub struct ChatRequest {
    pub common: Common,
    pub prompt: Prompt,
    /// The request offers tools and lets the model call them (`tool_choice` is not "none"):
    /// vLLM's rule for running the tool-call parser.
    pub parse_tools: bool,
}

pub fn parse_chat(
    body: &Map<String, Value>,
    vocab: usize,
    random_seed: u64,
) -> Result<ChatRequest, ApiError> {
    let f = Fields(body);
    let prompt = parse_messages(&f)?;
    let logprobs = f.boolean("logprobs")?.unwrap_or(false);
    let top = f.count("top_logprobs")?;
    let logprobs = match (logprobs, top) {
        (false, Some(n)) if n > 0 => {
            return Err(ApiError::invalid(
                "top_logprobs",
                "when using `top_logprobs`, `logprobs` must be set to true",
            ))
        }
        (false, _) => None,
        (true, n) => Some(check_top("top_logprobs", n.unwrap_or(0))?),
    };
    // Structured output needs a constrained decoder, which this server does not have: it
    // refuses rather than answer free text to a client that asked for JSON.
    if let Some(kind) = f
        .get("response_format")
        .and_then(|r| r.get("type"))
        .and_then(Value::as_str)
        .filter(|t| *t != "text")
    {
        return Err(ApiError::unsupported(
            "response_format",
            format!("response_format {kind:?} is not supported by chatgate serve (it has no constrained decoding)"),
        ));
    }
    // Forcing a call ("required", or a named function) needs the same constrained decoder.
    if let Some(choice) = f
        .get("tool_choice")
        .filter(|c| c.is_object() || c.as_str() == Some("required"))
    {
        return Err(ApiError::unsupported(
            "tool_choice",
            format!("tool_choice {choice} is not supported by chatgate serve (forcing a call needs constrained decoding, which it does not have)"),
        ));
    }
    let common = parse_common(&f, vocab, random_seed, logprobs)?;
    let offered = matches!(&prompt, Prompt::Chat { tools: Some(t), .. } if t.as_array().is_some_and(|t| !t.is_empty()));
    let parse_tools = offered && f.get("tool_choice").and_then(Value::as_str) != Some("none");
    Ok(ChatRequest {
        common,
        prompt,
        parse_tools,
    })
}

pub struct CompletionRequest {
    pub common: Common,
    pub prompt: Prompt,
}

/// `prompt`: a string, a list holding one string, a list of token ids, or a list holding one
/// list of token ids.
pub fn parse_prompt(f: &Fields, vocab: usize) -> Result<Prompt, ApiError> {
    let add_special_tokens = f.boolean("add_special_tokens")?.unwrap_or(true);
    let text = |s: &str| Prompt::Text {
        text: s.to_string(),
        add_special_tokens,
    };
    let ids = |items: &[Value]| -> Result<Prompt, ApiError> {
        items
            .iter()
            .map(|v| token_id("prompt", v, vocab))
            .collect::<Result<Vec<_>, _>>()
            .map(Prompt::Ids)
    };
    match f.get("prompt") {
        None => Err(ApiError::missing("prompt")),
        Some(Value::String(s)) => Ok(text(s)),
        Some(Value::Array(items)) => match items.as_slice() {
            [] => Err(ApiError::invalid("prompt", "'prompt' must not be empty")),
            [Value::String(s)] => Ok(text(s)),
            [Value::Array(inner)] => ids(inner),
            [Value::Number(_), ..] => ids(items),
            _ if items.len() > 1 && items.iter().all(|v| v.is_string() || v.is_array()) => {
                Err(ApiError::unsupported(
                    "prompt",
                    "only one prompt per request is supported by chatgate serve",
                ))
            }
            _ => Err(f.wrong(
                "prompt",
                "a string or a list of token ids",
                &Value::Array(items.clone()),
            )),
        },
        Some(v) => Err(f.wrong("prompt", "a string or a list of token ids", v)),
    }
}

pub fn parse_completion(
    body: &Map<String, Value>,
    vocab: usize,
    random_seed: u64,
) -> Result<CompletionRequest, ApiError> {
    let f = Fields(body);
    let prompt = parse_prompt(&f, vocab)?;
    let logprobs = match f.count("logprobs")? {
        None => None,
        Some(n) => Some(check_top("logprobs", n)?),
    };
    if f.boolean("echo")?.unwrap_or(false) {
        return Err(ApiError::unsupported(
            "echo",
            "echo is not supported by chatgate serve",
        ));
    }
    if f.string("suffix")?.is_some_and(|s| !s.is_empty()) {
        return Err(ApiError::unsupported(
            "suffix",
            "suffix is not supported by chatgate serve",
        ));
    }
    let common = parse_common(&f, vocab, random_seed, logprobs)?;
    Ok(CompletionRequest { common, prompt })
}

/// Prompt and completion token counts as the server reports them.
#[derive(Debug, Clone, Copy)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
}

impl Usage {
    /// `lies`: the `usage-lies` fault.
    pub fn to_json(self, lies: bool) -> Value {
        let (p, c) = if lies {
            (
                self.prompt_tokens.saturating_sub(1),
                self.completion_tokens + 3,
            )
        } else {
            (self.prompt_tokens, self.completion_tokens)
        };
        json!({"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c})
    }
}

pub fn finish_reason_str(f: FinishReason) -> &'static str {
    match f {
        FinishReason::Stop => "stop",
        FinishReason::Length => "length",
    }
}

/// A token's text for logprobs.
pub trait TokenStrings {
    fn token_str(&self, id: u32) -> String;
    /// The text of `ids` without special tokens (as a reply's text is decoded).
    fn reply_text(&self, ids: &[u32]) -> String;
}

fn lp(x: f32) -> Value {
    if x.is_finite() {
        json!(x)
    } else {
        json!(-9999.0)
    }
}

/// Chat logprob entries (`choices[].logprobs.content`).
pub fn chat_logprobs(steps: &[TokenStep], tokens: &dyn TokenStrings) -> Vec<Value> {
    steps
        .iter()
        .map(|s| {
            let tok = tokens.token_str(s.id);
            let top: Vec<Value> = s
                .top_logprobs
                .iter()
                .map(|(id, l)| {
                    let t = tokens.token_str(*id);
                    json!({"id": id, "token": t, "logprob": lp(*l), "bytes": t.as_bytes()})
                })
                .collect();
            // `id` as llama-server sends it: a token's text alone does not name it (a
            // SentencePiece `▁con` and `con` both decode to "con").
            json!({"id": s.id, "token": tok, "logprob": lp(s.logprob), "bytes": tok.as_bytes(), "top_logprobs": top})
        })
        .collect()
}

/// Completions logprobs (`{"tokens", "token_logprobs", "top_logprobs", "text_offset"}`),
/// offsets starting at `offset`.
pub fn completion_logprobs(
    steps: &[TokenStep],
    tokens: &dyn TokenStrings,
    mut offset: usize,
) -> Value {
    let mut toks = vec![];
    let mut lps = vec![];
    let mut tops = vec![];
    let mut offsets = vec![];
    for s in steps {
        let tok = tokens.token_str(s.id);
        // Distinct ids can decode to the same text (e.g. partial UTF-8): the first (most
        // likely) keeps the key; the chosen token goes first.
        let mut top = Map::new();
        top.insert(tok.clone(), lp(s.logprob));
        for (id, l) in &s.top_logprobs {
            top.entry(tokens.token_str(*id)).or_insert_with(|| lp(*l));
        }
        offsets.push(offset);
        offset += tok.chars().count();
        toks.push(tok);
        lps.push(lp(s.logprob));
        tops.push(Value::Object(top));
    }
    json!({"tokens": toks, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offsets})
}

/// Identity fields every response carries.
#[derive(Debug, Clone)]
pub struct Meta {
    pub id: String,
    pub created: u64,
    pub model: String,
    pub fingerprint: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(o) => o,
            _ => Map::new(),
        }
    }

    #[test]
    fn wrong_types_are_400_with_param() {
        let body =
            obj(json!({"messages": [{"role": "user", "content": "hi"}], "temperature": "hot"}));
        let e = parse_chat(&body, 512, 0).err().expect("an error");
        assert_eq!(e.status.as_u16(), 400);
        assert_eq!(e.param.as_deref(), Some("temperature"));
    }

    #[test]
    fn n_must_be_one_and_messages_required() {
        let body = obj(json!({"messages": [{"role": "user", "content": "hi"}], "n": 2}));
        assert_eq!(
            parse_chat(&body, 512, 0).err().map(|e| e.param),
            Some(Some("n".into()))
        );
        let body = obj(json!({"model": "x"}));
        assert_eq!(
            parse_chat(&body, 512, 0).err().map(|e| e.param),
            Some(Some("messages".into()))
        );
    }

    #[test]
    fn defaults_are_neutral() {
        let body =
            obj(json!({"messages": [{"role": "user", "content": "hi"}], "unknown_field": 3}));
        let r = parse_chat(&body, 512, 7).expect("parses");
        assert_eq!(r.common.params.sampling.temperature, 1.0);
        assert_eq!(r.common.params.sampling.top_p, 1.0);
        assert_eq!(r.common.params.sampling.seed, 7);
        assert_eq!(r.common.params.max_tokens, None);
    }

    #[test]
    fn content_parts_are_joined() {
        let body = obj(
            json!({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]}),
        );
        let r = parse_chat(&body, 512, 0).expect("parses");
        match r.prompt {
            Prompt::Chat { messages, .. } => assert_eq!(messages[0]["content"], "a\nb"),
            _ => panic!("not a chat"),
        }
    }

    #[test]
    fn prompt_shapes() {
        let f = |v: Value| parse_prompt(&Fields(&obj(json!({"prompt": v}))), 512);
        assert!(matches!(f(json!("x")), Ok(Prompt::Text { .. })));
        assert!(matches!(f(json!(["x"])), Ok(Prompt::Text { .. })));
        assert!(matches!(f(json!([1, 2])), Ok(Prompt::Ids(_))));
        assert!(matches!(f(json!([[1, 2]])), Ok(Prompt::Ids(_))));
        assert!(f(json!(["x", "y"])).is_err());
        assert!(f(json!([1, 9999])).is_err());
        assert!(f(json!(3)).is_err());
    }

    #[test]
    fn usage_lies() {
        let u = Usage {
            prompt_tokens: 10,
            completion_tokens: 5,
        };
        assert_eq!(u.to_json(false)["total_tokens"], 15);
        assert_eq!(u.to_json(true)["prompt_tokens"], 9);
        assert_eq!(u.to_json(true)["completion_tokens"], 8);
    }
}
