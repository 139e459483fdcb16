//! Boundary 5, the Responses API beside chat completions: a server that offers `/v1/responses`
//! (vLLM, SGLang, llama-server, `transformers serve`) runs the same model, template and parsers
//! behind a second API, and clients move between the two. One probe — the one that offers tools
//! when one does — is sent there too, at temperature 0, and its reply must say what the chat reply
//! said: the same text, the same reasoning, the same calls (arguments compared as JSON). Where the
//! two differ, the server's second API is configured or parsed otherwise than its first (vLLM 0.32
//! checks `--enable-auto-tool-choice` on chat completions only: without it chat refuses every
//! request with tools while Responses answers with the call as text — captured in
//! tests/fixtures/server-replies/vllm-0.32.0/no-parsers/; docs/research/responses-api.md).
use crate::verdict::checks;
use serde_json::{json, Value};

use crate::chain::run::probes::{Determinism, Observed, Online, Probe, ResponsesReply};
use crate::endpoint::openai::{CallError, RawResponse};
use crate::exchange::Record;
use crate::verdict::{Finding, Severity};

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
    if online
        .ctx
        .suite
        .file
        .server
        .skips(checks::SERVER_RESPONSES_PARITY)
    {
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
    let plain = online.http.post_json("/v1/responses", &body).await;
    let answered = plain
        .as_ref()
        .is_ok_and(|r| (200..300).contains(&r.status) && r.json.as_ref().and_then(said).is_some());
    let streamed = if answered {
        body["stream"] = json!(true);
        Some(online.http.post_json("/v1/responses", &body).await)
    } else {
        None
    };
    Some(ResponsesReply {
        probe: probe.id.clone(),
        plain,
        streamed,
    })
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

/// One function call as its stream events give it.
#[derive(Default)]
struct StreamedCall {
    key: String,
    name: String,
    deltas: String,
    done: Option<String>,
}

/// What a streaming client has assembled so far.
#[derive(Default)]
struct Assembly {
    said: Said,
    calls: Vec<StreamedCall>,
    /// A server that sends no text deltas still says the text in `.done`.
    text_done: String,
    reasoning_done: String,
}

impl Assembly {
    /// The call an event belongs to: by item id, else by its place in the output. An unknown
    /// key opens a call on `.added`; a later event of a call whose ids do not line up goes to
    /// the call open now (each stack streams one call after another).
    fn call(&mut self, kind: &str, v: &Value) -> &mut StreamedCall {
        let key = v
            .get("item_id")
            .or_else(|| v["item"].get("id"))
            .and_then(Value::as_str)
            .map(str::to_string)
            .or_else(|| v.get("output_index").map(Value::to_string))
            .unwrap_or_default();
        let opens = kind == "response.output_item.added";
        let i = match self.calls.iter().position(|c| c.key == key) {
            Some(i) => i,
            None if !opens && !self.calls.is_empty() => self.calls.len() - 1,
            None => {
                self.calls.push(StreamedCall {
                    key,
                    ..StreamedCall::default()
                });
                self.calls.len() - 1
            }
        };
        &mut self.calls[i]
    }

    /// Take one event (its JSON `data`); an `error` or `response.failed` ends the stream.
    fn take(&mut self, v: &Value, data: &str) -> Result<(), String> {
        let kind = v.get("type").and_then(Value::as_str).unwrap_or_default();
        let text = |field: &str| v.get(field).and_then(Value::as_str).unwrap_or_default();
        let item = &v["item"];
        let name = |n: &Value| n.as_str().filter(|n| !n.is_empty()).map(str::to_string);
        match kind {
            "response.output_text.delta" => self.said.text.push_str(text("delta")),
            "response.reasoning_text.delta" => self.said.reasoning.push_str(text("delta")),
            "response.output_text.done" => self.text_done.push_str(text("text")),
            "response.reasoning_text.done" => self.reasoning_done.push_str(text("text")),
            "response.output_item.added" | "response.output_item.done"
                if item["type"] == "function_call" =>
            {
                let call = self.call(kind, v);
                if let Some(n) = name(&item["name"]) {
                    call.name = n;
                }
                let args = item["arguments"].as_str().filter(|a| !a.is_empty());
                if let (Some(a), "response.output_item.done") = (args, kind) {
                    call.done = Some(a.to_string());
                }
            }
            "response.function_call_arguments.delta" => {
                self.call(kind, v).deltas.push_str(text("delta"));
            }
            "response.function_call_arguments.done" => {
                let call = self.call(kind, v);
                call.done = Some(text("arguments").to_string());
                if let Some(n) = name(&v["name"]) {
                    call.name = n;
                }
            }
            "error" | "response.failed" => {
                return Err(format!(
                    "the stream ended in `{kind}`: {}",
                    crate::chain::run::probes::show(data)
                ))
            }
            _ => {}
        }
        Ok(())
    }

    /// What the client holds at the end: each call's arguments from their deltas, else `.done`.
    fn finish(self) -> Said {
        let mut out = self.said;
        if out.text.is_empty() {
            out.text = self.text_done;
        }
        if out.reasoning.is_empty() {
            out.reasoning = self.reasoning_done;
        }
        for c in self.calls {
            let args = if c.deltas.is_empty() {
                c.done.unwrap_or_default()
            } else {
                c.deltas
            };
            out.calls.push((c.name, arguments(&Value::String(args))));
        }
        out
    }
}

/// Read a streamed Responses reply the way a streaming client assembles it ([`Assembly`]). The
/// events are keyed on their JSON `type` (transformers serve writes no `event:` lines, and no
/// server sends `[DONE]` here).
pub fn streamed_said(body: &[u8]) -> Result<Said, String> {
    let mut parser = crate::endpoint::sse::SseParser::new();
    let mut events = parser.push(body);
    events.extend(parser.finish());
    let mut assembly = Assembly::default();
    let mut seen = 0;
    for event in events {
        let crate::endpoint::sse::SseEvent::Message { data, .. } = event else {
            continue;
        };
        let Ok(v) = serde_json::from_str::<Value>(&data) else {
            continue;
        };
        seen += 1;
        assembly.take(&v, &data)?;
    }
    if seen == 0 {
        return Err(format!(
            "no Responses events in the stream: {}",
            crate::chain::run::probes::show(&String::from_utf8_lossy(body))
        ));
    }
    Ok(assembly.finish())
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
            crate::chain::run::probes::show(chat.reasoning.trim()),
            crate::chain::run::probes::show(responses.reasoning.trim())
        ));
    }
    if chat.text.trim() != responses.text.trim() {
        return Some(format!(
            "text: chat completions {}, Responses {}",
            crate::chain::run::probes::show(chat.text.trim()),
            crate::chain::run::probes::show(responses.text.trim())
        ));
    }
    None
}

/// `server.responses-parity`, when the probe was sent.
pub fn check(online: &Online, obs: &Observed) -> Option<Finding> {
    let sent = obs.responses.as_ref()?;
    let (id, reply) = (&sent.probe, &sent.plain);
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
                checks::SERVER_RESPONSES_PARITY,
                Severity::Info,
                format!("`/v1/responses` could not be asked (probe {id}: {e})"),
            ))
        }
        Ok(r) => r,
    };
    if matches!(r.status, 404 | 405) {
        return Some(Finding::new(
            checks::SERVER_RESPONSES_PARITY,
            Severity::Info,
            "the server offers no `/v1/responses` (HTTP 404/405): nothing to compare",
        ));
    }
    let body = String::from_utf8_lossy(&r.body);
    let responses = match (r.status, r.json.as_ref().and_then(said)) {
        (200..=299, Some(s)) => Ok(s),
        (200..=299, None) => Err(format!(
            "a 2xx without a Responses `output`: {}",
            crate::chain::run::probes::show(&body)
        )),
        (status, _) => Err(format!(
            "HTTP {status}: {}",
            crate::chain::run::probes::show(&body)
        )),
    };
    // A probe the server does not answer alike twice cannot be held to parity.
    let held = if run.determinism() == Some(Determinism::Deterministic) {
        broken
    } else {
        Severity::Warning
    };
    let f = match (chat, responses) {
        (Ok(c), Ok(s)) => match difference(&said_by_chat(c), &s) {
            None => streamed_parity(id, &s, sent.streamed.as_ref(), held),
            Some(what) => Finding::new(
                checks::SERVER_RESPONSES_PARITY,
                held,
                format!("`/v1/responses` and `/v1/chat/completions` answer the same probe differently at temperature 0 (probe {id}: {what})"),
            )
            .with("layer", "the server's Responses API (its own parsing or configuration of the same model)")
            .with("fix", "start the server with the same parsers for both APIs (vLLM's --reasoning-parser, --enable-auto-tool-choice --tool-call-parser apply to both), or have clients use the API that gives the right reply"),
        },
        (Err(e), Ok(_)) => Finding::new(
            checks::SERVER_RESPONSES_PARITY,
            broken,
            format!("chat completions refuses the probe `/v1/responses` answers (probe {id}: {e}): the two APIs are not configured alike"),
        )
        .with("layer", "the server API (one of its two APIs checks what the other does not)")
        .with("fix", "start the server with the flags its chat API asks for (the error says which); the Responses API's answer may then be the unparsed text"),
        (Ok(_), Err(why)) => Finding::new(
            checks::SERVER_RESPONSES_PARITY,
            Severity::Warning,
            format!("`/v1/responses` refuses the probe chat completions answers (probe {id}: {why})"),
        )
        .with("fix", "a client that moves to the Responses API gets this error from this server"),
        (Err(_), Err(_)) => Finding::new(
            checks::SERVER_RESPONSES_PARITY,
            Severity::Info,
            format!("both APIs refuse the probe (probe {id}): nothing to compare"),
        ),
    };
    Some(f)
}

/// The plain Responses reply matched chat; the streamed one must add up to it too.
fn streamed_parity(
    id: &str,
    plain: &Said,
    streamed: Option<&Result<RawResponse, CallError>>,
    broken: Severity,
) -> Finding {
    let pass = |how: &str| {
        Finding::pass(
            checks::SERVER_RESPONSES_PARITY,
            format!("`/v1/responses` gives the chat reply's text, reasoning and calls{how} (probe {id})"),
        )
    };
    let assembled = match streamed {
        None => return pass(""),
        Some(Err(e)) => Err(e.to_string()),
        Some(Ok(r)) if !(200..300).contains(&r.status) => Err(format!(
            "HTTP {}: {}",
            r.status,
            crate::chain::run::probes::show(&String::from_utf8_lossy(&r.body))
        )),
        Some(Ok(r)) => streamed_said(&r.body),
    };
    let what = match assembled {
        Ok(s) => match difference(plain, &s) {
            None => return pass(", plain and streamed"),
            Some(d) => d
                .replace("chat completions", "plain")
                .replace("Responses", "streamed"),
        },
        Err(e) => format!("the stream failed: {e}"),
    };
    Finding::new(
        checks::SERVER_RESPONSES_PARITY,
        broken,
        format!("`/v1/responses` streamed does not add up to its plain reply (probe {id}: {what})"),
    )
    .with(
        "layer",
        "the server's Responses streaming (its events, not the model)",
    )
    .with(
        "fix",
        "upgrade the server, or have streaming clients use chat completions",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real vLLM 0.32 Responses reply, captured by scripts/fixtures/capture_server_replies.py.
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
        // The right parsers: a reasoning item, then a function_call per parallel call (no
        // message item).
        let s = said(&captured("right-parsers")).unwrap();
        assert_eq!(s.reasoning, "Paris and Tokyo weather.");
        assert_eq!(s.text, "");
        let calls = vec![
            ("get_weather".to_string(), json!({"city": "Paris"})),
            ("get_weather".to_string(), json!({"city": "Tokyo"})),
        ];
        assert_eq!(s.calls, calls);
        let chat = Said {
            text: String::new(),
            reasoning: "Paris and Tokyo weather.".into(),
            calls,
        };
        assert_eq!(difference(&chat, &s), None, "arguments compare as JSON");
        // No parsers: one message item holding the think block and the call as text.
        let text = said(&captured("no-parsers")).unwrap();
        assert!(
            text.text
                .starts_with("<think>Paris and Tokyo weather.</think><tool_call>"),
            "{text:?}"
        );
        assert!(difference(&chat, &text).is_some_and(|d| d.starts_with("calls:")));
        // Another family's parser: the call lost here as on chat completions.
        let lost = said(&captured("another-familys-tool-parser")).unwrap();
        assert!(lost.calls.is_empty() && lost.text.is_empty(), "{lost:?}");
        assert_eq!(lost.reasoning, "Paris and Tokyo weather.");
    }

    #[test]
    fn a_real_responses_stream_adds_up_to_its_plain_reply() {
        // vLLM 0.32, the right parsers, `stream: true`: `event:` lines, reasoning deltas, the
        // call's argument deltas; its `response.completed` mints new ids (not compared).
        let stream = |config: &str| {
            let path = format!(
                "{}/tests/fixtures/server-replies/vllm-0.32.0/{config}/responses-tools.sse",
                env!("CARGO_MANIFEST_DIR")
            );
            let text = std::fs::read_to_string(&path).expect(&path);
            let body = text.split_once('\n').expect("status line").1.to_string();
            streamed_said(body.as_bytes()).unwrap()
        };
        let streamed = stream("right-parsers");
        let plain = said(&captured("right-parsers")).unwrap();
        assert_eq!(difference(&plain, &streamed), None, "{streamed:?}");
        assert_eq!(streamed.calls.len(), 2);
        // Without parsers: the text deltas add up to the plain message.
        let streamed = stream("no-parsers");
        assert_eq!(
            difference(&said(&captured("no-parsers")).unwrap(), &streamed),
            None
        );
        assert!(streamed.text.contains("<tool_call>"), "{streamed:?}");
    }

    /// transformers serve's shape (cli/serving/response.py, docs/research/responses-api.md):
    /// no `event:` lines, no `[DONE]`, a call's arguments only in `.done`.
    const WITHOUT_DELTAS: [&str; 5] = [
        r#"{"type":"response.created","sequence_number":0}"#,
        r#"{"type":"response.output_text.delta","delta":""}"#,
        r#"{"type":"response.output_item.added","output_index":1,"item":{"type":"function_call","id":"r_tool_call_0","name":"get_weather","arguments":"{\"city\": \"Paris\"}"}}"#,
        r#"{"type":"response.function_call_arguments.done","item_id":"r_tool_call_0","output_index":1,"arguments":"{\"city\": \"Paris\"}"}"#,
        r#"{"type":"response.completed","response":{}}"#,
    ];

    #[test]
    fn a_stream_without_argument_deltas_reads_its_done_event() {
        let body: String = WITHOUT_DELTAS
            .iter()
            .map(|e| format!("data: {e}\n\n"))
            .collect();
        let s = streamed_said(body.as_bytes()).unwrap();
        assert_eq!(
            s.calls,
            vec![("get_weather".to_string(), json!({"city": "Paris"}))]
        );
    }

    #[test]
    fn argument_deltas_that_repeat_do_not_add_up() {
        // Each delta the whole arguments so far (the chat fault `tool-stream-broken`, here).
        let events = [
            r#"{"type":"response.output_item.added","output_index":0,"item":{"type":"function_call","id":"fc_1","name":"get_weather","arguments":""}}"#,
            r#"{"type":"response.function_call_arguments.delta","item_id":"fc_1","delta":"{\"city\":"}"#,
            r#"{"type":"response.function_call_arguments.delta","item_id":"fc_1","delta":"{\"city\": \"Paris\"}"}"#,
        ];
        let body: String = events
            .iter()
            .map(|e| format!("event: x\ndata: {e}\n\n"))
            .collect();
        let s = streamed_said(body.as_bytes()).unwrap();
        let plain = Said {
            calls: vec![("get_weather".into(), json!({"city": "Paris"}))],
            ..Said::default()
        };
        assert!(
            difference(&plain, &s).is_some_and(|d| d.starts_with("calls:")),
            "{s:?}"
        );
        assert!(streamed_said(b"data: {\"type\":\"error\",\"message\":\"boom\"}\n\n").is_err());
        assert!(streamed_said(b"not a stream").is_err());
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
