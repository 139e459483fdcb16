//! `client.fields-honoured`: the request fields the recorded client really sends (`[client]
//! recording`), each against what the server was seen to do with it (the server boundary's own
//! checks in the same run). A server can accept a field and ignore it — llama-cpp-python drops
//! `max_completion_tokens` and per-request `chat_template_kwargs`, transformers serve ignores
//! `tool_choice` and `response_format` — and the application that sends it then breaks in a way
//! no server check alone can call an error: whether it matters depends on what the client sends.
//! The recording settles that, so a field the client sends and the server does not honour is an
//! error here, named with the server's observed behaviour (the "request field accepted but
//! ignored" rows of the bug zoo).
use crate::verdict::checks::{self, Check};
use std::collections::BTreeMap;

use serde_json::Value;

use crate::proxy::record::RecordedExchange;
use crate::verdict::{Finding, Severity};

/// Request fields and the server check that observes what the server does with each.
static OBSERVED_BY: &[(&str, &Check)] = &[
    ("max_tokens", checks::SERVER_MAX_TOKENS),
    (
        "max_completion_tokens",
        checks::SERVER_MAX_COMPLETION_TOKENS,
    ),
    ("stop", checks::SERVER_STOP),
    ("stream_options.include_usage", checks::SERVER_INCLUDE_USAGE),
    ("tools", checks::SERVER_TOOL_CALL_PARSE),
    ("tool_choice", checks::SERVER_TOOL_CHOICE),
    ("response_format", checks::SERVER_RESPONSE_FORMAT),
    ("chat_template_kwargs", checks::SERVER_TEMPLATE_KWARGS),
];

/// Fields a server may accept and ignore that no check of this gate exercises: named, so the
/// report does not pass them over in silence.
const UNCHECKED: &[&str] = &[
    "parallel_tool_calls",
    "reasoning_effort",
    "logit_bias",
    "n",
    "presence_penalty",
    "frequency_penalty",
    "top_logprobs",
    "service_tier",
];

/// What the client sends: each field's number of chat requests carrying it, of `total`.
#[derive(Debug, Default)]
pub struct Sent {
    pub fields: BTreeMap<String, usize>,
    pub total: usize,
}

/// Count the fields of the recorded chat requests (`stream_options` by its `include_usage`).
pub fn sent(exchanges: &[RecordedExchange]) -> Sent {
    let mut out = Sent::default();
    for e in exchanges {
        if !e.exchange.path.ends_with("/chat/completions") {
            continue;
        }
        let Value::Object(body) = &e.exchange.request_body else {
            continue;
        };
        out.total += 1;
        for (key, value) in body {
            let key = match key.as_str() {
                "stream_options" if value["include_usage"] == true => {
                    "stream_options.include_usage".to_string()
                }
                "stream_options" => continue,
                // `tool_choice: "auto"` is what servers do anyway; only a demand can be ignored.
                "tool_choice" if value == "auto" => continue,
                k => k.to_string(),
            };
            *out.fields.entry(key).or_default() += 1;
        }
    }
    out
}

/// Judge what the client sends against the server findings of the same run.
pub fn judge(sent: &Sent, server: &[Finding]) -> Vec<Finding> {
    if sent.total == 0 {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut honoured = Vec::new();
    let mut unprobed = Vec::new();
    for (field, check) in OBSERVED_BY {
        let Some(&n) = sent.fields.get(*field) else {
            continue;
        };
        let seen: Vec<&Finding> = server.iter().filter(|f| f.check == *check).collect();
        // Severity orders pass < info < warning < error; an info is a check that did not judge.
        let worst = seen.iter().max_by_key(|f| f.severity);
        match worst {
            None => unprobed.push(format!("`{field}` ({check})")),
            Some(f) if f.severity == Severity::Info => unprobed.push(format!("`{field}` ({check})")),
            Some(f) if matches!(f.severity, Severity::Error | Severity::Warning) => out.push(
                Finding::new(
                    checks::CLIENT_FIELDS_HONOURED,
                    Severity::Error,
                    format!(
                        "the client sends `{field}` ({n} of {} chat requests) and the server does not honour it: {}",
                        sent.total, f.message
                    ),
                )
                .with("server check", format!("{check} ({})", severity_name(f.severity)))
                .with(
                    "hint",
                    "configure the server to honour the field, or change the client not to rely on it (the server check's evidence says what the server did)",
                ),
            ),
            Some(_) => honoured.push(format!("`{field}`")),
        }
    }
    if !unprobed.is_empty() {
        out.push(
            Finding::new(
                checks::CLIENT_FIELDS_HONOURED,
                Severity::Warning,
                format!(
                    "the client sends {}, which this run's probes did not exercise, so whether the server honours it is unknown",
                    unprobed.join(", ")
                ),
            )
            .with("hint", "add a probe that uses the field (a prompt with tools, a stop string), or set [client] relies_on"),
        );
    }
    let unchecked: Vec<String> = UNCHECKED
        .iter()
        .filter_map(|f| sent.fields.get(*f).map(|n| format!("`{f}` ({n})")))
        .collect();
    if !unchecked.is_empty() {
        out.push(Finding::new(
            checks::CLIENT_FIELDS_HONOURED,
            Severity::Info,
            format!(
                "the client also sends {}, which chatgate does not check against the server",
                unchecked.join(", ")
            ),
        ));
    }
    if !out.iter().any(|f| f.severity == Severity::Error) && !honoured.is_empty() {
        out.push(Finding::pass(
            checks::CLIENT_FIELDS_HONOURED,
            format!(
                "the server honours what the client sends that this run checked: {}",
                honoured.join(", ")
            ),
        ));
    }
    out
}

fn severity_name(s: Severity) -> &'static str {
    match s {
        Severity::Error => "error",
        Severity::Warning => "warning",
        Severity::Info => "info",
        Severity::Pass => "pass",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::record::{Exchange, ExchangeTimings};
    use crate::verdict::Boundary;
    use serde_json::json;

    fn exchange(path: &str, body: Value) -> RecordedExchange {
        RecordedExchange {
            line: 1,
            exchange: Exchange {
                ts: String::new(),
                method: "POST".into(),
                path: path.into(),
                query: None,
                request_headers: Default::default(),
                request_body: body,
                status: 200,
                content_type: None,
                response_body: Value::Null,
                stream: false,
                timings: ExchangeTimings {
                    headers_ms: 1.0,
                    end_ms: 2.0,
                },
                error: None,
            },
        }
    }

    fn recording() -> Vec<RecordedExchange> {
        vec![
            exchange(
                "/v1/chat/completions",
                json!({"model": "m", "messages": [], "max_completion_tokens": 64,
                       "stream": true, "stream_options": {"include_usage": true},
                       "tools": [], "tool_choice": "auto", "parallel_tool_calls": false}),
            ),
            exchange(
                "/v1/chat/completions",
                json!({"model": "m", "messages": [], "max_completion_tokens": 64}),
            ),
            exchange("/v1/models", Value::Null),
        ]
    }

    #[test]
    fn counts_what_the_chat_requests_carry() {
        let s = sent(&recording());
        assert_eq!(s.total, 2);
        assert_eq!(s.fields["max_completion_tokens"], 2);
        assert_eq!(s.fields["stream_options.include_usage"], 1);
        assert!(
            !s.fields.contains_key("tool_choice"),
            "auto demands nothing"
        );
        assert!(!s.fields.contains_key("stream_options"));
    }

    #[test]
    fn an_ignored_field_the_client_sends_is_an_error_naming_the_server_behaviour() {
        let server = vec![
            Finding::new(
                checks::SERVER_MAX_COMPLETION_TOKENS,
                Severity::Warning,
                "replies ran to 128 tokens past max_completion_tokens 8",
            ),
            Finding::pass(checks::SERVER_INCLUDE_USAGE, "usage in streams"),
            Finding::pass(checks::SERVER_TOOL_CHOICE, "honoured"),
        ];
        let fs = judge(&sent(&recording()), &server);
        let err = fs.iter().find(|f| f.severity == Severity::Error).unwrap();
        assert!(
            err.message.contains("`max_completion_tokens` (2 of 2"),
            "{}",
            err.message
        );
        assert!(err.message.contains("past max_completion_tokens 8"));
        assert_eq!(err.boundary, Boundary::Client);
        // `tools` was sent but no probe offered tools: unknown, said so.
        let unknown = fs.iter().find(|f| f.severity == Severity::Warning).unwrap();
        assert!(unknown.message.contains("`tools`"), "{}", unknown.message);
        let info = fs.iter().find(|f| f.severity == Severity::Info).unwrap();
        assert!(info.message.contains("`parallel_tool_calls` (1)"));
        assert!(
            fs.iter().all(|f| f.severity != Severity::Pass),
            "no pass beside an error"
        );
    }

    #[test]
    fn honoured_fields_pass() {
        let server = vec![
            Finding::pass(checks::SERVER_MAX_COMPLETION_TOKENS, "honoured"),
            Finding::pass(checks::SERVER_INCLUDE_USAGE, "usage in streams"),
            Finding::pass(checks::SERVER_TOOL_CALL_PARSE, "parsed"),
        ];
        let fs = judge(&sent(&recording()), &server);
        let pass = fs.iter().find(|f| f.severity == Severity::Pass).unwrap();
        assert!(pass.message.contains("`max_completion_tokens`"));
        assert!(fs.iter().all(|f| f.severity != Severity::Error));
        assert!(judge(&Sent::default(), &server).is_empty());
    }
}
