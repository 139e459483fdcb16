//! Boundary 5, the agent's second turn: after a tool call the client sends the history back —
//! the first turn, the assistant's call with its reasoning, the tool's result — and the server
//! renders that history with its template. That render is where stacks break: vLLM >= 0.20
//! dropped `reasoning_content` from request history, so the thinking the model wrote rendered
//! empty in the next turn (QwenLM/qwen-code#4285, vllm#42664). Every other online probe is a
//! first turn and cannot see it.
//!
//! The probe: the first reply to a probe that offers tools and got a call back, sent back as a
//! client sends it (`[client] reasoning_field` names the field the reasoning goes in) with a
//! result for each call. The server's prompt for it — its tokenize route, else the
//! `prompt_tokens` it counts — is compared with the serving template's own render of the same
//! history, and what differs is named: the reasoning, a call, the tool result.
use serde_json::{json, Value};

use crate::chain::run::probes::{Observed, Online, Probe, ProbeRun};
use crate::exchange::Record;
use crate::verdict::checks;
use crate::verdict::{Finding, Severity};

/// The result every call of the probe gets back.
const TOOL_RESULT: &str = "{\"temperature_c\": 21, \"sky\": \"clear\"}";

/// `server.agent-round-trip`: None when no probe offers tools.
pub async fn check(online: &Online<'_>, obs: &Observed) -> Vec<Finding> {
    let Some(serving) = online.ctx.serving.as_ref() else {
        return Vec::new();
    };
    let tooled: Vec<&ProbeRun> = obs
        .runs
        .iter()
        .filter(|r| r.probe.tools.as_ref().is_some_and(|t| !t.is_empty()))
        .collect();
    if tooled.is_empty() {
        return Vec::new();
    }
    let called = tooled.iter().find_map(|r| {
        r.main()
            .filter(|m| !m.tool_calls.is_empty())
            .map(|m| (*r, m))
    });
    let Some((run, first)) = called else {
        return vec![Finding::new(
            checks::SERVER_AGENT_ROUND_TRIP,
            Severity::Info,
            "no reply to a probe with tools holds a call: the agent's second turn is not sent (server.tool-call-parse says why)",
        )];
    };
    if run.server_ids.is_some() && run.server_ids != run.local_ids {
        return vec![Finding::new(
            checks::SERVER_AGENT_ROUND_TRIP,
            Severity::Info,
            format!(
                "the first turn of probe {} is already another prompt on the server (template.server-ids): the second turn's history is not judged apart from it",
                run.probe.id
            ),
        )];
    }
    let field = online
        .ctx
        .suite
        .file
        .client
        .as_ref()
        .and_then(|c| c.reasoning_field.clone())
        .unwrap_or_else(|| "reasoning_content".into());
    let probe = Probe {
        id: format!("{}-turn-2", run.probe.id),
        messages: second_turn(&run.probe.messages, first, &field),
        tools: run.probe.tools.clone(),
    };
    let tools = probe.tools.as_deref();
    let now = run.server_day.or(online.local_now).or(serving.now);
    let Some(local) = serving
        .render_at(&probe.messages, tools, true, now)
        .ok()
        .and_then(|r| serving.ids(&r.text).ok())
    else {
        return vec![Finding::new(
            checks::SERVER_AGENT_ROUND_TRIP,
            Severity::Info,
            "the template does not render the agent's second turn (the call and the tool result): nothing to compare",
        )];
    };
    let server = online
        .http
        .tokenize_chat(&probe.messages, tools, true)
        .await
        .ok()
        .flatten();
    // Without a tokenize route, the count the server reports for a reply; a server
    // that fails the request says so (the agent's second turn fails on it).
    let mut failed = None;
    let counted = match &server {
        Some(_) => None,
        None => {
            // The probe's own budget, not 1 token: a reply cut inside a call fails some
            // servers' parsers (transformers serve 5.23: HTTP 500), a fault of its own that
            // server.tool-call-parse reports.
            let req = online.request_text(&probe, online.settings.seed, false);
            match online.http.chat(&req).await {
                Ok(r) => r.usage.and_then(|u| u.prompt_tokens).map(|n| n as usize),
                Err(e) => {
                    failed = Some(e.to_string());
                    None
                }
            }
        }
    };
    if let Some(why) = failed {
        return vec![Finding::new(
            checks::SERVER_AGENT_ROUND_TRIP,
            Severity::Warning,
            format!("the server does not answer the agent's second turn (probe {}: the first turn, the call it returned, a tool result): {why}", probe.id),
        )
        .with("layer", "the server's handling of a request history with a tool call and its result")
        .with("fix", "a client that sends the call back as the server returned it, with a `tool` message for its result, is what every agent does: check the server's chat template handling of `tool_calls` and `tool` messages")];
    }
    let parts = Parts::of(first);
    let broken = if online.ctx.suite.client_relies_on("tool_calls")
        || online.ctx.suite.client_relies_on("reasoning")
    {
        Severity::Error
    } else {
        Severity::Warning
    };
    vec![judge(&Compared {
        serving,
        probe: &probe.id,
        local: &local,
        server: server.as_deref(),
        counted,
        parts: &parts,
        field: &field,
        broken,
    })]
}

/// The history a client sends after the first reply: the first turn, the assistant's message
/// as the server returned it (its calls with their ids, the reasoning in `field`), and a tool
/// result for each call.
pub fn second_turn(first_turn: &[Value], reply: &Record, field: &str) -> Vec<Value> {
    let mut messages = first_turn.to_vec();
    // `content` as a string, "" with no text: templates call string methods on it (Qwen3's
    // `content.lstrip`) and raise on null, which a server converts first.
    let mut assistant =
        json!({"role": "assistant", "content": reply.text, "tool_calls": reply.tool_calls});
    if !reply.reasoning.is_empty() {
        assistant[field] = json!(reply.reasoning);
    }
    messages.push(assistant);
    for (i, call) in reply.tool_calls.iter().enumerate() {
        let id = call["id"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| format!("call_{i}"));
        messages.push(json!({
            "role": "tool",
            "tool_call_id": id,
            "name": call["function"]["name"],
            "content": TOOL_RESULT,
        }));
    }
    messages
}

/// The pieces of the history a server may drop or change, as text to look for in a render.
struct Parts {
    reasoning: String,
    /// Each call's argument values (strings) and name.
    calls: Vec<String>,
    result: String,
}

impl Parts {
    fn of(reply: &Record) -> Parts {
        let mut calls = Vec::new();
        for c in &reply.tool_calls {
            if let Some(name) = c["function"]["name"].as_str() {
                calls.push(name.to_string());
            }
            let args: Option<Value> = c["function"]["arguments"]
                .as_str()
                .and_then(|a| serde_json::from_str(a).ok());
            if let Some(Value::Object(map)) = args {
                calls.extend(map.values().filter_map(|v| v.as_str().map(str::to_string)));
            }
        }
        // The result's first key: text any render of it holds, whatever its JSON spacing.
        let result: Value = serde_json::from_str(TOOL_RESULT).unwrap_or_default();
        let result = result
            .as_object()
            .and_then(|o| o.keys().next().cloned())
            .unwrap_or_else(|| TOOL_RESULT.to_string());
        Parts {
            reasoning: reply.reasoning.trim().to_string(),
            calls,
            result,
        }
    }
}

struct Compared<'a> {
    serving: &'a crate::chain::run::context::Pipeline,
    probe: &'a str,
    local: &'a [u32],
    server: Option<&'a [u32]>,
    counted: Option<usize>,
    parts: &'a Parts,
    field: &'a str,
    broken: Severity,
}

fn judge(c: &Compared) -> Finding {
    let decode = |ids: &[u32]| c.serving.tokenizer.decode(ids, false).unwrap_or_default();
    let local_text = decode(c.local);
    let sent = format!(
        "probe {}: the first turn, the assistant's call{} and a tool result",
        c.probe,
        if c.parts.reasoning.is_empty() {
            String::new()
        } else {
            format!(" with its reasoning in `{}`", c.field)
        }
    );
    let template_drops_reasoning =
        !c.parts.reasoning.is_empty() && !local_text.contains(&c.parts.reasoning);
    let with_note = |f: Finding| {
        let f = f.with("sent", &sent);
        match template_drops_reasoning {
            true => f.with("template", format!("the template itself does not render the reasoning sent in `{}` (it reads another field, or drops the reasoning of a turn that called a tool)", c.field)),
            false => f,
        }
    };
    match (c.server, c.counted) {
        (Some(server), _) if server == c.local => with_note(Finding::pass(
            checks::SERVER_AGENT_ROUND_TRIP,
            format!(
                "the server renders the agent's second turn as the template does ({} tokens)",
                c.local.len()
            ),
        )),
        (Some(server), _) => {
            let server_text = decode(server);
            let missing = c.missing(&local_text, &server_text);
            let at = c
                .local
                .iter()
                .zip(server)
                .position(|(a, b)| a != b)
                .unwrap_or(c.local.len().min(server.len()));
            let what = match missing.as_slice() {
                [] => format!(
                    "they differ from token {at} on: the template's {:?}, the server's {:?}",
                    tail(&decode(&c.local[at.min(c.local.len())..])),
                    tail(&decode(&server[at.min(server.len())..]))
                ),
                m => format!("the server's prompt lacks {}", m.join(", ")),
            };
            with_note(
                Finding::new(
                    checks::SERVER_AGENT_ROUND_TRIP,
                    c.broken,
                    format!(
                        "the server renders the agent's second turn into another prompt than the template ({} tokens against {}): {what}",
                        server.len(),
                        c.local.len()
                    ),
                )
                .with("layer", "the server's handling of the request history (before its template renders it)")
                .with("fix", fix(c.field)),
            )
        }
        (None, Some(n)) if n == c.local.len() => with_note(Finding::pass(
            checks::SERVER_AGENT_ROUND_TRIP,
            format!(
                "the server counts the agent's second turn as the template renders it ({n} prompt tokens; it has no tokenize route, so the count is the evidence)"
            ),
        )),
        (None, Some(n)) => {
            let short = c.local.len().saturating_sub(n);
            let reasoning_tokens = c
                .serving
                .ids(&c.parts.reasoning)
                .map(|i| i.len())
                .unwrap_or(0);
            let likely = if short > 0 && !c.parts.reasoning.is_empty() && short.abs_diff(reasoning_tokens) <= 3 {
                format!(" — about the reasoning's length ({reasoning_tokens} tokens): the reasoning was likely dropped")
            } else {
                String::new()
            };
            with_note(
                Finding::new(
                    checks::SERVER_AGENT_ROUND_TRIP,
                    c.broken,
                    format!(
                        "the server counts {n} prompt tokens for the agent's second turn, the template renders {}{likely}",
                        c.local.len()
                    ),
                )
                .with("layer", "the server's handling of the request history (before its template renders it)")
                .with("fix", fix(c.field)),
            )
        }
        (None, None) => Finding::new(
            checks::SERVER_AGENT_ROUND_TRIP,
            Severity::Info,
            "the server neither tokenizes chats nor counts the second turn's prompt tokens: its render of the history is not checked",
        ),
    }
}

impl Compared<'_> {
    /// The parts of the history the template's render holds and the server's does not.
    fn missing(&self, local: &str, server: &str) -> Vec<String> {
        let mut out = Vec::new();
        let p = self.parts;
        if !p.reasoning.is_empty() && local.contains(&p.reasoning) && !server.contains(&p.reasoning)
        {
            out.push(format!(
                "the reasoning sent back in `{}` ({:?})",
                self.field,
                tail(&p.reasoning)
            ));
        }
        for part in &p.calls {
            if local.contains(part.as_str()) && !server.contains(part.as_str()) {
                out.push(format!("the call's {part:?}"));
            }
        }
        if local.contains(&p.result) && !server.contains(&p.result) {
            out.push("the tool result".into());
        }
        out
    }
}

fn fix(field: &str) -> String {
    let other = if field == "reasoning" {
        "reasoning_content"
    } else {
        "reasoning"
    };
    format!("the server must render the history the client sends as the template does: send the reasoning in the field it reads (`{field}`, or `{other}`; `[client] reasoning_field`), or serve with a version that keeps it (vLLM >= 0.20 dropped `reasoning_content` from history: vllm#42664)")
}

/// The first 60 characters of a text, for a message.
fn tail(s: &str) -> String {
    let t: String = s.chars().take(60).collect();
    if t.len() < s.len() {
        format!("{t}…")
    } else {
        t
    }
}
