//! Tool calls in the text a model emitted, read by the template's own framing (framing.rs
//! `Call`): what a server's tool-call parser must turn into `tool_calls`.
//!
//! The rules are those of the parsers for JSON-in-text framings, from their sources: vLLM's
//! `hermes` (`<tool_call>` … `</tool_call>`, each a JSON object with `name` and `arguments`, the
//! text before the first call kept as content), `mistral` (`[TOOL_CALLS]` then a JSON array of
//! calls) and `llama3_json` (the whole reply one JSON object with `name` and `parameters`).
//! Framings whose function name sits outside the JSON (DeepSeek's, harmony's) are not read here.
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

/// A reply read by the framing: its calls, the text that is not a call, and any call that
/// was opened and did not parse.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Parsed {
    pub calls: Vec<ToolCall>,
    pub content: String,
    pub broken: Vec<String>,
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
        // Mistral Nemo's framing opens `[TOOL_CALLS][`: the array's bracket belongs to the
        // JSON, so that every call in it is read.
        let marker = self.marker();
        let marker = marker
            .strip_suffix('[')
            .filter(|m| !m.is_empty())
            .unwrap_or(marker);
        if marker.is_empty() {
            return Some(self.parse_bare(text, key));
        }
        let Some(first) = text.find(marker) else {
            return Some(Parsed {
                content: text.to_string(),
                ..Parsed::default()
            });
        };
        let mut out = Parsed {
            content: text[..first].trim_end().to_string(),
            ..Parsed::default()
        };
        let close = self.close.trim();
        let mut rest = &text[first..];
        while let Some(at) = rest.find(marker) {
            let body = rest[at + marker.len()..].trim_start();
            match json_at(body) {
                Some((value, len)) => {
                    let calls = match value {
                        Value::Array(items) => items,
                        v => vec![v],
                    };
                    for c in &calls {
                        match call_of(c, key) {
                            Some(call) => out.calls.push(call),
                            None => out.broken.push(c.to_string()),
                        }
                    }
                    rest = body[len..].trim_start();
                    if !close.is_empty() {
                        rest = rest.strip_prefix(close).unwrap_or(rest);
                    }
                }
                None => {
                    let end = if close.is_empty() {
                        body.len()
                    } else {
                        body.find(close).unwrap_or(body.len())
                    };
                    out.broken.push(body[..end].to_string());
                    rest = &body[end..];
                }
            }
        }
        Some(out)
    }

    /// llama3_json: the whole reply is one call object, else it is content.
    fn parse_bare(&self, text: &str, key: &str) -> Parsed {
        let t = text.trim();
        if let Some((value, _)) = json_at(t).filter(|(_, len)| *len == t.len()) {
            if let Some(call) = call_of(&value, key) {
                return Parsed {
                    calls: vec![call],
                    ..Parsed::default()
                };
            }
        }
        Parsed {
            content: text.to_string(),
            ..Parsed::default()
        }
    }
}

/// `{"name": …, KEY: {…}}` as a call.
fn call_of(v: &Value, key: &str) -> Option<ToolCall> {
    let name = v.get("name")?.as_str()?.to_string();
    let arguments = match v.get(key) {
        Some(Value::String(s)) => serde_json::from_str(s).ok()?,
        Some(a) => a.clone(),
        None => Value::Object(Default::default()),
    };
    Some(ToolCall { name, arguments })
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

    #[test]
    fn hermes_calls_parse_with_the_text_before_them_as_content() {
        let text = "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\":\"get_time\",\"arguments\":{\"city\":\"Rome\"}}\n</tool_call>";
        let p = hermes().parse(text).unwrap();
        assert_eq!(p.content, "Let me look.");
        assert_eq!(
            p.calls,
            vec![
                ToolCall {
                    name: "get_weather".into(),
                    arguments: json!({"city": "Paris"})
                },
                ToolCall {
                    name: "get_time".into(),
                    arguments: json!({"city": "Rome"})
                },
            ]
        );
        assert!(p.broken.is_empty());
        // No marker: all content.
        let p = hermes().parse("Sunny.").unwrap();
        assert_eq!((p.calls.len(), p.content.as_str()), (0, "Sunny."));
        // A call cut short: broken, not a call.
        let p = hermes().parse("<tool_call>\n{\"name\": \"get_we").unwrap();
        assert_eq!(p.broken, vec!["{\"name\": \"get_we".to_string()]);
    }

    #[test]
    fn mistral_arrays_and_llama3_bare_objects_parse() {
        let mistral = Call {
            open: "[TOOL_CALLS]".into(),
            close: String::new(),
            arguments_key: Some("arguments".into()),
            ..hermes()
        };
        let p = mistral
            .parse("[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {}}, {\"name\": \"b\", \"arguments\": {\"x\": 1}}]")
            .unwrap();
        assert_eq!(p.calls.len(), 2);
        let llama = Call {
            open: String::new(),
            close: String::new(),
            arguments_key: Some("parameters".into()),
            ..hermes()
        };
        let p = llama
            .parse("{\"name\": \"a\", \"parameters\": {\"x\": 1}}")
            .unwrap();
        assert_eq!(p.calls[0].arguments, json!({"x": 1}));
        assert_eq!(llama.parse("{\"x\": 1} and more").unwrap().calls.len(), 0);
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
