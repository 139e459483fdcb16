//! Boundary 5, the Responses API beside chat completions: a server that offers `/v1/responses`
//! (vLLM, SGLang, llama-server, `transformers serve`) runs the same model, template and parsers
//! behind a second API, and clients move between the two. One probe — the one that offers tools
//! when one does — is sent there too, at temperature 0, and its reply must say what the chat reply
//! said: the same text, the same reasoning, the same calls (arguments compared as JSON). Where the
//! two differ, the server's second API is configured or parsed otherwise than its first (vLLM 0.32
//! checks `--enable-auto-tool-choice` on chat completions only: without it chat refuses every
//! request with tools while Responses answers with the call as text — captured in
//! tests/fixtures/server-replies/vllm-0.32.0/no-parsers/; docs/research/responses-api.md).
use serde_json::{json, Value};

use super::{Determinism, Observed, Online, Probe};
use crate::chain::{Boundary::Server, Finding, Severity};
use crate::endpoint::openai::{CallError, RawResponse};
use crate::exchange::Record;

const ID: &str = "server.responses-parity";

/// The probe's id and what `/v1/responses` answered.
pub type ResponsesReply = (String, Result<RawResponse, CallError>);

/// What a Responses reply carries, as the chat reply's fields.
#[derive(Debug, Default, PartialEq)]
pub struct Said {
    pub text: String,
    pub reasoning: String,
    /// Each call's name and arguments (parsed JSON; a string that does not parse stays one).
    pub calls: Vec<(String, Value)>,
}

/// Send the probe to `/v1/responses` (none when the suite skips the check, or no probe is a plain
/// conversation the Responses API can take as input messages).
pub async fn gather(online: &Online<'_>, probes: &[Probe]) -> Option<ResponsesReply> {
    let skipped = online.ctx.suite.file.server.skip.iter().any(|s| s == ID);
    if skipped {
        return None;
    }
    let plain = |p: &&Probe| {
        p.messages.iter().all(|m| {
            matches!(
                m.get("role").and_then(Value::as_str),
                Some("system" | "user" | "assistant")
            ) && m.get("content").is_some_and(Value::is_string)
        })
    };
    let probe = probes
        .iter()
        .filter(plain)
        .find(|p| p.tools.as_ref().is_some_and(|t| !t.is_empty()))
        .or_else(|| probes.iter().find(plain))?;
    let input: Vec<Value> = probe
        .messages
        .iter()
        .map(|m| json!({"role": m["role"], "content": m["content"]}))
        .collect();
    // `stream` false said outright: transformers serve streams Responses unless told not to.
    let mut body = json!({
        "model": online.model,
        "input": input,
        "max_output_tokens": online.settings.max_tokens,
        "temperature": 0,
        "stream": false,
    });
    if let Some(tools) = probe.tools.as_ref().filter(|t| !t.is_empty()) {
        body["tools"] = Value::Array(tools.iter().map(flat_tool).collect());
    }
    let reply = online.http.post_json("/v1/responses", &body).await;
    Some((probe.id.clone(), reply))
}

/// A chat tool (`{"type": "function", "function": {...}}`) as the Responses API takes it: flat.
fn flat_tool(tool: &Value) -> Value {
    match tool.get("function") {
        Some(f) => {
            let mut flat = f.clone();
            if let Some(o) = flat.as_object_mut() {
                o.insert("type".into(), json!("function"));
            }
            flat
        }
        None => tool.clone(),
    }
}

/// Read a Responses reply's `output` items: message text, reasoning text, function calls.
pub fn said(v: &Value) -> Option<Said> {
    let mut out = Said::default();
    for item in v.get("output")?.as_array()? {
        match item.get("type").and_then(Value::as_str) {
            Some("message") => {
                for part in item["content"].as_array().into_iter().flatten() {
                    if let Some(t) = part.get("text").and_then(Value::as_str) {
                        out.text.push_str(t);
                    }
                }
            }
            Some("reasoning") => {
                let parts = item["content"]
                    .as_array()
                    .filter(|c| !c.is_empty())
                    .or_else(|| item["summary"].as_array());
                for part in parts.into_iter().flatten() {
                    if let Some(t) = part.get("text").and_then(Value::as_str) {
                        out.reasoning.push_str(t);
                    }
                }
            }
            Some("function_call") => {
                let name = item["name"].as_str().unwrap_or_default().to_string();
                out.calls.push((name, arguments(&item["arguments"])));
            }
            _ => {}
        }
    }
    Some(out)
}

/// Arguments as JSON (a string of JSON parsed; anything else kept as it came).
fn arguments(v: &Value) -> Value {
    match v.as_str() {
        Some(s) => serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.to_string())),
        None => v.clone(),
    }
}

/// The chat reply's fields, as [`Said`].
fn said_by_chat(rec: &Record) -> Said {
    Said {
        text: rec.text.clone(),
        reasoning: rec.reasoning.clone(),
        calls: rec
            .tool_calls
            .iter()
            .map(|c| {
                let name = c
                    .pointer("/function/name")
                    .or_else(|| c.get("name"))
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string();
                let args = c
                    .pointer("/function/arguments")
                    .or_else(|| c.get("arguments"))
                    .map(arguments)
                    .unwrap_or(Value::Null);
                (name, args)
            })
            .collect(),
    }
}

/// Where the two replies differ (whitespace at the ends aside), or None.
fn difference(chat: &Said, responses: &Said) -> Option<String> {
    if chat.calls != responses.calls {
        let shown = |c: &[(String, Value)]| {
            if c.is_empty() {
                "no call".to_string()
            } else {
                c.iter()
                    .map(|(n, a)| format!("{n}({a})"))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        };
        return Some(format!(
            "calls: chat completions {}, Responses {}",
            shown(&chat.calls),
            shown(&responses.calls)
        ));
    }
    if chat.reasoning.trim() != responses.reasoning.trim() {
        return Some(format!(
            "reasoning: chat completions {}, Responses {}",
            super::show(chat.reasoning.trim()),
            super::show(responses.reasoning.trim())
        ));
    }
    if chat.text.trim() != responses.text.trim() {
        return Some(format!(
            "text: chat completions {}, Responses {}",
            super::show(chat.text.trim()),
            super::show(responses.text.trim())
        ));
    }
    None
}

/// `server.responses-parity`, when the probe was sent.
pub fn check(online: &Online, obs: &Observed) -> Option<Finding> {
    let (id, reply) = obs.responses.as_ref()?;
    let run = obs.runs.iter().find(|r| &r.probe.id == id)?;
    let chat = run.plain.first()?;
    let broken = if online.ctx.suite.client_relies_on("responses") {
        Severity::Error
    } else {
        Severity::Warning
    };
    let r = match reply {
        Err(e) => {
            return Some(Finding::new(
                Server,
                ID,
                Severity::Info,
                format!("`/v1/responses` could not be asked (probe {id}: {e})"),
            ))
        }
        Ok(r) => r,
    };
    if matches!(r.status, 404 | 405) {
        return Some(Finding::new(
            Server,
            ID,
            Severity::Info,
            "the server offers no `/v1/responses` (HTTP 404/405): nothing to compare",
        ));
    }
    let body = String::from_utf8_lossy(&r.body);
    let responses = match (r.status, r.json.as_ref().and_then(said)) {
        (200..=299, Some(s)) => Ok(s),
        (200..=299, None) => Err(format!(
            "a 2xx without a Responses `output`: {}",
            super::show(&body)
        )),
        (status, _) => Err(format!("HTTP {status}: {}", super::show(&body))),
    };
    let f = match (chat, responses) {
        (Ok(c), Ok(s)) => match difference(&said_by_chat(c), &s) {
            None => Finding::pass(
                Server,
                ID,
                format!("`/v1/responses` gives the chat reply's text, reasoning and calls (probe {id})"),
            ),
            Some(what) => {
                // A probe the server does not answer alike twice cannot be held to parity.
                let severity = if run.determinism() == Some(Determinism::Deterministic) {
                    broken
                } else {
                    Severity::Warning
                };
                Finding::new(
                    Server,
                    ID,
                    severity,
                    format!("`/v1/responses` and `/v1/chat/completions` answer the same probe differently at temperature 0 (probe {id}: {what})"),
                )
                .with("layer", "the server's Responses API (its own parsing or configuration of the same model)")
                .with("fix", "start the server with the same parsers for both APIs (vLLM's --reasoning-parser, --enable-auto-tool-choice --tool-call-parser apply to both), or have clients use the API that gives the right reply")
            }
        },
        (Err(e), Ok(_)) => Finding::new(
            Server,
            ID,
            broken,
            format!("chat completions refuses the probe `/v1/responses` answers (probe {id}: {e}): the two APIs are not configured alike"),
        )
        .with("layer", "the server API (one of its two APIs checks what the other does not)")
        .with("fix", "start the server with the flags its chat API asks for (the error says which); the Responses API's answer may then be the unparsed text"),
        (Ok(_), Err(why)) => Finding::new(
            Server,
            ID,
            Severity::Warning,
            format!("`/v1/responses` refuses the probe chat completions answers (probe {id}: {why})"),
        )
        .with("fix", "a client that moves to the Responses API gets this error from this server"),
        (Err(_), Err(_)) => Finding::new(
            Server,
            ID,
            Severity::Info,
            format!("both APIs refuse the probe (probe {id}): nothing to compare"),
        ),
    };
    Some(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real vLLM 0.32 Responses reply, captured by scripts/fixtures/capture_vllm_replies.py.
    fn captured(config: &str) -> Value {
        let path = format!(
            "{}/tests/fixtures/server-replies/vllm-0.32.0/{config}/responses-tools.json",
            env!("CARGO_MANIFEST_DIR")
        );
        let text = std::fs::read_to_string(&path).expect(&path);
        serde_json::from_str::<Value>(&text).expect("json")["body"].clone()
    }

    #[test]
    fn a_real_responses_reply_reads_as_the_chat_fields() {
        // The right parsers: a reasoning item, then a function_call (no message item).
        let s = said(&captured("right-parsers")).unwrap();
        assert_eq!(s.reasoning, "Paris weather.");
        assert_eq!(s.text, "");
        assert_eq!(
            s.calls,
            vec![("get_weather".to_string(), json!({"city": "Paris"}))]
        );
        let chat = Said {
            text: String::new(),
            reasoning: "Paris weather.".into(),
            calls: vec![("get_weather".into(), json!({"city":"Paris"}))],
        };
        assert_eq!(difference(&chat, &s), None, "arguments compare as JSON");
        // No parsers: one message item holding the think block and the call as text.
        let text = said(&captured("no-parsers")).unwrap();
        assert!(
            text.text
                .starts_with("<think>Paris weather.</think><tool_call>"),
            "{text:?}"
        );
        assert!(difference(&chat, &text).is_some_and(|d| d.starts_with("calls:")));
        // Another family's parser: the call lost here as on chat completions.
        let lost = said(&captured("another-familys-tool-parser")).unwrap();
        assert!(lost.calls.is_empty() && lost.text.is_empty(), "{lost:?}");
        assert_eq!(lost.reasoning, "Paris weather.");
    }

    #[test]
    fn a_reply_without_output_is_not_read() {
        assert_eq!(said(&json!({"error": {"message": "no"}})), None);
    }

    #[test]
    fn chat_tools_are_flattened() {
        let t = json!({"type": "function", "function": {"name": "f", "parameters": {}}});
        assert_eq!(
            flat_tool(&t),
            json!({"type": "function", "name": "f", "parameters": {}})
        );
    }
}
