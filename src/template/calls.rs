//! Tool calls in the text a model emitted, read by the template's own framing (framing.rs
//! `Call`): what a server's tool-call parser must turn into `tool_calls`.
//!
//! The rules are those of vLLM 0.32.0's parsers for JSON-in-text framings, from their sources
//! and checked by running them (scripts/fixtures/vllm_read_replies.py): `hermes` (every
//! `<tool_call>` body one JSON object with `name` and `arguments`, else no calls at all; the
//! text before the first call kept as it is), `mistral` before tokenizer v11 (the first JSON
//! value after `[TOOL_CALLS]`) and `llama3_json` (every JSON object in the reply a call with
//! `name` and `arguments` or `parameters`; the text around them dropped). Framings whose function
//! name sits outside the JSON (DeepSeek's, harmony's) are read by `reply`.
//! `chatgate serve` parses with it; `server.tool-call-parse` reads what the model emitted with it.
use serde_json::Value;

use super::framing::Call;

/// One call: the function's name and its arguments as JSON.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    pub name: String,
    pub arguments: Value,
}

impl ToolCall {
    /// The call as the OpenAI API carries it: `arguments` a string of JSON.
    pub fn to_openai(&self, id: &str) -> Value {
        serde_json::json!({
            "id": id,
            "type": "function",
            "function": {"name": self.name, "arguments": match &self.arguments {
                // Text a parser could not read as JSON passes through as the model wrote it.
                Value::String(text) => text.clone(),
                v => v.to_string(),
            }},
        })
    }

    /// A call from the API's `tool_calls[i]`: Err says why its arguments are not a JSON object.
    pub fn from_openai(v: &Value) -> Result<ToolCall, String> {
        let f = &v["function"];
        let name = f["name"].as_str().unwrap_or_default().to_string();
        let arguments = match &f["arguments"] {
            Value::String(s) => serde_json::from_str::<Value>(s)
                .map_err(|e| format!("`{name}`'s arguments {s:?} are not JSON ({e})"))?,
            // Some servers send the object itself; the API says a string.
            Value::Object(_) => f["arguments"].clone(),
            other => {
                return Err(format!(
                    "`{name}`'s arguments are {other}, not a JSON string"
                ))
            }
        };
        if !arguments.is_object() {
            return Err(format!(
                "`{name}`'s arguments {arguments} are not a JSON object"
            ));
        }
        Ok(ToolCall { name, arguments })
    }
}

/// A reply read by the framing: its calls, the content the parser returns beside them, and any
/// call that was opened and did not parse (then no calls at all: the JSON parsers fail whole).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Parsed {
    pub calls: Vec<ToolCall>,
    /// The message's content as the server returns it ("" for none).
    pub content: String,
    pub broken: Vec<String>,
    /// What the parser did silently that a reader should know (a call without a name, the
    /// arguments under a key the parser does not read).
    pub notes: Vec<String>,
}

impl Parsed {
    /// No calls: the text is content.
    fn content(text: &str) -> Parsed {
        Parsed {
            content: text.to_string(),
            ..Parsed::default()
        }
    }

    /// Nothing read: the whole text is content, and `why` names the call that failed it.
    fn failed(text: &str, why: String) -> Parsed {
        Parsed {
            content: text.to_string(),
            broken: vec![why],
            ..Parsed::default()
        }
    }
}

impl Call {
    /// Whether this framing is one [`Call::parse`] reads (the name inside the JSON).
    pub fn parseable(&self) -> bool {
        self.arguments_key.is_some()
    }

    /// The marker that opens a call ("" for a bare JSON call).
    pub fn marker(&self) -> &str {
        self.open.trim()
    }

    /// The calls in `text`; None for a framing not read here.
    pub fn parse(&self, text: &str) -> Option<Parsed> {
        let key = self.arguments_key.as_deref()?;
        let marker = self.marker();
        let mistral_marker = marker.starts_with("[TOOL_CALLS]");
        let parsed = match self.parser.and_then(|p| p.vllm) {
            // Mistral Nemo's framing opens `[TOOL_CALLS][`: the array's bracket is the JSON's.
            Some("mistral") | None if mistral_marker => {
                mistral(text, marker.strip_suffix('[').unwrap_or(marker))
            }
            _ if marker.is_empty() => llama3_json(text, key),
            _ => hermes(text, marker, self.close.trim(), key),
        };
        Some(parsed)
    }
}

/// vLLM's `hermes`: every `<tool_call>` body (to its closing tag, else to the end) is one JSON
/// object with a string `name` and the arguments under `key`; one that is not fails the whole
/// parse (no calls, the text as content). Content is the text before the first call as it is.
fn hermes(text: &str, marker: &str, close: &str, key: &str) -> Parsed {
    let Some(first) = text.find(marker) else {
        return Parsed::content(text);
    };
    let mut calls = Vec::new();
    let mut notes = Vec::new();
    let mut rest = &text[first..];
    while let Some(at) = rest.find(marker) {
        let after = &rest[at + marker.len()..];
        let (value, next) = match hermes_body(after, marker, close) {
            Ok(read) => read,
            Err(why) => return Parsed::failed(text, why),
        };
        rest = next;
        let Some(name) = value.get("name").and_then(Value::as_str) else {
            return Parsed::failed(text, format!("{value} has no string `name`"));
        };
        let Some(arguments) = value.get(key) else {
            let under = other_key(&value, key)
                .map(|k| format!(" (they are under `{k}`)"))
                .unwrap_or_default();
            return Parsed::failed(
                text,
                format!("`{name}` has no `{key}`{under}: vLLM's hermes parser reads no call"),
            );
        };
        if !close.is_empty() && arguments.to_string().contains(close) {
            notes.push(format!(
                "`{name}`: a value holds {close}; vLLM's hermes parser ends the call there and \
                 returns the whole text as content (the gate flags that)"
            ));
        }
        calls.push(ToolCall {
            name: name.to_string(),
            arguments: encoded(name, arguments, &mut notes),
        });
    }
    Parsed {
        calls,
        content: served_content(&text[..first]),
        broken: Vec::new(),
        notes,
    }
}

/// One call's JSON after its marker, and the text after its closing tag. A string value may
/// hold the closing tag: the object is read through it first. vLLM's regex ends the body at the
/// first closing tag and so reads no call there (ollama#18659's class), a server bug the gate
/// names (`server.tool-call-parse`), not a reading to copy. Otherwise the body is vLLM's: up
/// to the closing tag (or the end), one JSON value and nothing else.
fn hermes_body<'a>(after: &'a str, marker: &str, close: &str) -> Result<(Value, &'a str), String> {
    let lead = after.len() - after.trim_start().len();
    if let Some((value, len)) = json_at(&after[lead..]) {
        let tail = after[lead + len..].trim_start();
        let ends = match close {
            "" => tail.is_empty() || tail.starts_with(marker),
            c => tail.is_empty() || tail.starts_with(c),
        };
        if ends {
            return Ok((value, tail.strip_prefix(close).unwrap_or(tail)));
        }
    }
    let end = match close {
        "" => after.find(marker),
        c => after.find(c),
    };
    let body = &after[..end.unwrap_or(after.len())];
    match serde_json::from_str::<Value>(body.trim()) {
        Ok(v) => Ok((v, end.map_or("", |e| &after[e + close.len()..]))),
        Err(e) => Err(format!("{body:?} is not JSON ({e})")),
    }
}

/// vLLM's `mistral` before tokenizer v11: the first JSON value after the first non-empty
/// `[TOOL_CALLS]` (text after it ignored); an object or an array of them, each with `name` or
/// `arguments` (a missing name is "", missing arguments `{}`, string arguments kept as text).
/// Nothing read: the text after the marker is the content, the text before it dropped.
fn mistral(text: &str, marker: &str) -> Parsed {
    let mut segments = text.split(marker);
    let before = segments.next().unwrap_or_default();
    let Some(segment) = segments.map(str::trim).find(|s| !s.is_empty()) else {
        return Parsed::content(text);
    };
    let parsed = json_at(segment).map(|(v, _)| v).or_else(|| {
        // vLLM's fallback: the outermost `[{…}]` in the segment.
        let (open, close) = (segment.find("[{")?, segment.rfind("}]")?);
        (open < close)
            .then(|| serde_json::from_str(&segment[open..close + 2]).ok())
            .flatten()
    });
    let items = match parsed {
        Some(Value::Array(items)) => items,
        Some(v @ Value::Object(_)) => vec![v],
        _ => Vec::new(),
    };
    let mut calls = Vec::new();
    let mut notes = Vec::new();
    for item in &items {
        if item.get("name").is_none() && item.get("arguments").is_none() {
            continue;
        }
        let name = item.get("name").and_then(Value::as_str).unwrap_or_default();
        if name.is_empty() {
            notes.push(format!(
                "a call without a string `name` ({item}): vLLM's mistral parser returns it named \"\""
            ));
        }
        let arguments = match item.get("arguments") {
            None | Some(Value::Null) => {
                if let Some(k) = other_key(item, "arguments") {
                    notes.push(format!(
                        "`{name}` writes its arguments under `{k}`: vLLM's mistral parser reads \
                         only `arguments` and returns {{}}"
                    ));
                }
                Value::Object(Default::default())
            }
            // Text is passed on as it is: JSON text reads as its value.
            Some(Value::String(s)) => serde_json::from_str(s).unwrap_or(Value::String(s.clone())),
            Some(a) => a.clone(),
        };
        calls.push(ToolCall {
            name: name.to_string(),
            arguments,
        });
    }
    if calls.is_empty() {
        let why = format!("no call object after {marker}: {segment:?}");
        return Parsed {
            content: segment.to_string(),
            broken: vec![why],
            ..Parsed::default()
        };
    }
    Parsed {
        calls,
        content: served_content(before),
        broken: Vec::new(),
        notes,
    }
}

/// vLLM's `llama3_json`: every JSON object that starts at a `{` outside an earlier one is a
/// call with a string `name` and `arguments` or `parameters`; one that is not fails the whole
/// parse. With calls, the text around them is dropped (content null).
fn llama3_json(text: &str, key: &str) -> Parsed {
    let mut calls = Vec::new();
    let mut notes = Vec::new();
    let mut end = 0;
    for (at, _) in text.match_indices('{') {
        if at < end {
            continue;
        }
        let Some((value, len)) = json_at(&text[at..]) else {
            return match calls.is_empty() && !looks_like_a_call(&text[at..]) {
                true => Parsed::content(text),
                false => Parsed::failed(text, format!("{:?} is not JSON", &text[at..])),
            };
        };
        end = at + len;
        let name = value.get("name").and_then(Value::as_str);
        let arguments = value.get("arguments").or_else(|| value.get(key));
        let (Some(name), Some(arguments)) = (name, arguments) else {
            if name.is_some() || !calls.is_empty() {
                return Parsed::failed(text, format!("{value} is not a call with `{key}`"));
            }
            return Parsed::content(text);
        };
        calls.push(ToolCall {
            name: name.to_string(),
            arguments: encoded(name, arguments, &mut notes),
        });
    }
    Parsed {
        calls,
        notes,
        ..Parsed::content(if end == 0 { text } else { "" })
    }
}

/// Whether text a JSON reader failed on opens like a call (`{"name"`): a call cut off, not
/// prose with a brace in it.
fn looks_like_a_call(text: &str) -> bool {
    text[1..].trim_start().starts_with("\"name\"")
}

/// The arguments as the parser's `json.dumps` carries them, read back: anything but an object
/// is noted, since a client expecting an object gets something else.
fn encoded(name: &str, arguments: &Value, notes: &mut Vec<String>) -> Value {
    if !arguments.is_object() {
        notes.push(format!(
            "`{name}`'s arguments are {arguments}, not an object: the server passes them on \
             JSON-encoded as they are"
        ));
    }
    arguments.clone()
}

/// A key other than `key` the model put the arguments under.
fn other_key<'a>(call: &'a Value, key: &str) -> Option<&'a str> {
    ["arguments", "parameters", "args", "input"]
        .into_iter()
        .find(|k| *k != key && call.get(k).is_some())
}

/// Content beside calls as vLLM's chat serving returns it: whitespace alone is none.
fn served_content(before: &str) -> String {
    match before.trim().is_empty() {
        true => String::new(),
        false => before.to_string(),
    }
}
/// The JSON value at the start of `text` and its length in bytes.
pub(crate) fn json_at(text: &str) -> Option<(Value, usize)> {
    let mut stream = serde_json::Deserializer::from_str(text).into_iter::<Value>();
    let value = stream.next()?.ok()?;
    Some((value, stream.byte_offset()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn hermes() -> Call {
        Call {
            open: "<tool_call>\n".into(),
            close: "\n</tool_call>".into(),
            arguments_key: Some("arguments".into()),
            parallel: true,
            rendered: String::new(),
            parser: None,
        }
    }

    fn call(name: &str, arguments: Value) -> ToolCall {
        ToolCall {
            name: name.into(),
            arguments,
        }
    }

    // Every expectation below is what vLLM 0.32.0's parser returned for the same text, run by
    // scripts/fixtures/vllm_read_replies.py (its serving layer's whitespace rule applied).

    #[test]
    fn hermes_reads_every_call_and_keeps_the_text_before_them_as_it_is() {
        let text = "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\":\"get_time\",\"arguments\":{\"city\":\"Rome\"}}\n</tool_call>";
        let p = hermes().parse(text).unwrap();
        assert_eq!(p.content, "Let me look.\n");
        assert_eq!(
            p.calls,
            vec![
                call("get_weather", json!({"city": "Paris"})),
                call("get_time", json!({"city": "Rome"}))
            ]
        );
        assert!(p.broken.is_empty());
        // Whitespace alone before the call is no content.
        let p = hermes()
            .parse("\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>")
            .unwrap();
        assert_eq!((p.calls.len(), p.content.as_str()), (1, ""));
        // No marker: all content.
        let p = hermes().parse("Sunny.").unwrap();
        assert_eq!((p.calls.len(), p.content.as_str()), (0, "Sunny."));
    }

    #[test]
    fn hermes_fails_whole_on_any_call_it_cannot_read() {
        for (text, why) in [
            // Cut off by the token limit.
            ("<tool_call>\n{\"name\": \"get_we", "not JSON"),
            // The arguments under Llama's key: vLLM raises KeyError and reads no call.
            (
                "Let me check. <tool_call>\n{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}\n</tool_call>",
                "they are under `parameters`",
            ),
            // An array is Mistral's shape, not Hermes's.
            (
                "<tool_call>\n[{\"name\": \"f\", \"arguments\": {}}]\n</tool_call>",
                "no string `name`",
            ),
            // Text after the object inside the tags.
            (
                "<tool_call>\n{\"name\": \"f\", \"arguments\": {}} junk\n</tool_call>",
                "not JSON",
            ),
        ] {
            let p = hermes().parse(text).unwrap();
            assert!(p.calls.is_empty(), "{text}");
            assert_eq!(p.content, text);
            assert!(p.broken[0].contains(why), "{text}: {:?}", p.broken);
        }
        // A string where the object goes is passed on as that string, and noted.
        let p = hermes()
            .parse(
                "<tool_call>\n{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}\n</tool_call>",
            )
            .unwrap();
        assert_eq!(p.calls, vec![call("f", json!("{\"a\": 1}"))]);
        assert!(p.notes[0].contains("not an object"), "{:?}", p.notes);
    }

    fn mistral() -> Call {
        Call {
            open: "[TOOL_CALLS]".into(),
            close: String::new(),
            arguments_key: Some("arguments".into()),
            ..hermes()
        }
    }

    #[test]
    fn mistral_reads_the_first_json_after_the_marker() {
        let p = mistral()
            .parse("Sure. [TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {}}, {\"name\": \"b\", \"arguments\": {\"x\": 1}}] trailing")
            .unwrap();
        assert_eq!(
            p.calls,
            vec![call("a", json!({})), call("b", json!({"x": 1}))]
        );
        assert_eq!(p.content, "Sure. ");
        // A later marker's calls are trailing text.
        let p = mistral()
            .parse("[TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {}}][TOOL_CALLS] [{\"name\": \"b\", \"arguments\": {}}]")
            .unwrap();
        assert_eq!(p.calls, vec![call("a", json!({}))]);
        // String arguments are the text they hold; a lone object is one call.
        let p = mistral()
            .parse(
                "[TOOL_CALLS] {\"name\": \"f\", \"arguments\": \"{\\\"city\\\": \\\"Paris\\\"}\"}",
            )
            .unwrap();
        assert_eq!(p.calls, vec![call("f", json!({"city": "Paris"}))]);
        // Arguments under `parameters` are read as {}, and said.
        let p = mistral()
            .parse("  [TOOL_CALLS] [{\"name\": \"f\", \"parameters\": {\"city\": \"Paris\"}}]")
            .unwrap();
        assert_eq!(
            (p.calls, p.content.as_str()),
            (vec![call("f", json!({}))], "")
        );
        assert!(p.notes[0].contains("under `parameters`"), "{:?}", p.notes);
        // Nothing read: the text after the marker is the content.
        let p = mistral()
            .parse("Hi [TOOL_CALLS] [{\"city\": \"Paris\"}]")
            .unwrap();
        assert!(p.calls.is_empty());
        assert_eq!(p.content, "[{\"city\": \"Paris\"}]");
        assert_eq!(p.broken.len(), 1);
    }

    #[test]
    fn llama3_reads_every_call_object_and_drops_the_text_around_them() {
        let llama = Call {
            open: String::new(),
            close: String::new(),
            arguments_key: Some("parameters".into()),
            ..hermes()
        };
        let p = llama
            .parse("Let me see {\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"arguments\": {\"x\": {\"y\": 1}}} ok")
            .unwrap();
        assert_eq!(
            p.calls,
            vec![call("a", json!({})), call("b", json!({"x": {"y": 1}}))]
        );
        assert_eq!(p.content, "");
        // Prose with braces, and JSON that is no call, stay content with nothing broken.
        for text in ["Use {x} here", "{\"city\": \"Paris\"}"] {
            let p = llama.parse(text).unwrap();
            assert_eq!((p.calls.len(), p.content.as_str()), (0, text));
            assert!(p.broken.is_empty(), "{text}");
        }
        // A call without its arguments, or cut off: content, and broken.
        for text in [
            "{\"name\": \"get_weather\"}",
            "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Par",
        ] {
            let p = llama.parse(text).unwrap();
            assert_eq!((p.calls.len(), p.content.as_str()), (0, text));
            assert_eq!(p.broken.len(), 1, "{text}");
        }
    }

    #[test]
    fn api_calls_read_back_and_broken_arguments_are_named() {
        let c = ToolCall {
            name: "f".into(),
            arguments: json!({"a": "b"}),
        };
        assert_eq!(ToolCall::from_openai(&c.to_openai("call_1")).unwrap(), c);
        let bad = json!({"function": {"name": "f", "arguments": "{'a': 'b'}"}});
        assert!(ToolCall::from_openai(&bad)
            .unwrap_err()
            .contains("not JSON"));
    }
}
