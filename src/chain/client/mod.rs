//! The client boundary: the requests a real client sent (recorded by `chatgate proxy`) diffed
//! against the suite's `[client]` contract.
//!
//! Why: a model can be served perfectly and still answer badly because the application calls
//! another endpoint, names another model, overrides the temperature or drops `max_tokens`. The
//! recording is what was really on the wire, so every check reads it, not the app's config.
//!
//! One finding per check id: an Error listing the offending requests (by index and recording
//! line, with the values sent), or a Pass when every request complies. Only requests with a
//! body-carrying method count (GET /v1/models, /health and the like are not calls to the model).
pub mod fields;
pub mod sse;
use crate::verdict::checks::{self, Check};
use std::path::Path;

use serde_json::{Map, Value};

use crate::chain::run::context::Context;
use crate::error::Result;
use crate::proxy::record::{read_recording, RecordedExchange};
use crate::suite::ClientSection;
use crate::verdict::{Finding, Severity};

/// The endpoint a chat client calls unless the contract says otherwise.
pub const DEFAULT_ENDPOINT: &str = "/v1/chat/completions";
/// Roles a chat request may carry (OpenAI's, plus `developer`).
pub const ROLES: &[&str] = &["system", "user", "assistant", "tool", "developer"];
/// At most this many offending requests are listed per finding; the rest are counted.
const MAX_LISTED: usize = 10;

pub fn check(ctx: &Context) -> Result<Vec<Finding>> {
    let Some(contract) = &ctx.suite.file.client else {
        return Ok(Vec::new());
    };
    let default_model = ctx
        .suite
        .file
        .target
        .as_ref()
        .and_then(|t| t.model.as_deref());
    match &ctx.suite.client_recording {
        Some(path) => check_recording(contract, default_model, path),
        None => Ok(vec![Finding::new(
            checks::CLIENT_RECORDING,
            Severity::Info,
            "[client] states a contract but names no recording, so nothing was checked",
        )
        .with("hint", "record the app with `chatgate proxy --upstream URL --record client.jsonl` and set [client] recording = \"client.jsonl\"")]),
    }
}

/// Read the recording at `path` and diff it against `contract`. `default_model` is the model
/// expected when the contract names none (the suite's target model).
pub fn check_recording(
    contract: &ClientSection,
    default_model: Option<&str>,
    path: &Path,
) -> Result<Vec<Finding>> {
    let exchanges = read_recording(path)?;
    Ok(diff(contract, default_model, &exchanges, path))
}

/// A request to check: its label for evidence and its body as an object.
struct Req<'a> {
    label: String,
    ex: &'a RecordedExchange,
    body: Map<String, Value>,
    /// The body was not a JSON object.
    not_object: bool,
}

/// Diff recorded exchanges against the contract; `origin` names the recording in evidence.
pub fn diff(
    contract: &ClientSection,
    default_model: Option<&str>,
    exchanges: &[RecordedExchange],
    origin: &Path,
) -> Vec<Finding> {
    let reqs = requests(exchanges);
    if reqs.is_empty() {
        return vec![Finding::new(
            checks::CLIENT_RECORDING,
            Severity::Warning,
            "the recording holds no requests to the model, so the contract was not checked",
        )
        .with("recording", origin.display())
        .with("exchanges", exchanges.len())
        .with(
            "hint",
            "send the app's traffic through `chatgate proxy --record FILE` while using it",
        )];
    }
    let n = reqs.len();
    let mut out = Vec::new();
    let endpoint = expected_endpoint(contract);
    out.push(verdict(
        checks::CLIENT_ENDPOINT,
        n,
        per_request(&reqs, |r| endpoint_problem(r, &endpoint)),
        format!("every request went to {endpoint}"),
        format!("requests went to another endpoint than {endpoint}"),
    ));
    if let Some(model) = contract.model.as_deref().or(default_model) {
        out.push(verdict(
            checks::CLIENT_MODEL,
            n,
            per_request(&reqs, |r| model_problem(r, model)),
            format!("every request named the model {model:?}"),
            format!("requests named another model than {model:?}"),
        ));
    }
    if !contract.params.is_empty() {
        out.push(verdict(
            checks::CLIENT_PARAMS,
            n,
            per_request(&reqs, |r| params_problem(r, &contract.params)),
            "every request sent the contract's parameter values".into(),
            "requests sent other parameter values than the contract".into(),
        ));
    }
    if !contract.required.is_empty() {
        out.push(verdict(
            checks::CLIENT_REQUIRED,
            n,
            per_request(&reqs, |r| required_problem(r, &contract.required)),
            format!("every request sent {}", contract.required.join(", ")),
            "requests left out fields the contract requires".into(),
        ));
    }
    if !contract.forbidden.is_empty() {
        out.push(verdict(
            checks::CLIENT_FORBIDDEN,
            n,
            per_request(&reqs, |r| forbidden_problem(r, &contract.forbidden)),
            format!("no request sent {}", contract.forbidden.join(", ")),
            "requests sent fields the contract forbids".into(),
        ));
    }
    if let Some(stream) = contract.stream {
        let how = if stream { "streamed" } else { "did not stream" };
        out.push(verdict(
            checks::CLIENT_STREAM,
            n,
            per_request(&reqs, |r| stream_problem(r, stream)),
            format!("every request {how}, as the contract says"),
            format!("the contract says requests {how}, but some did otherwise"),
        ));
    }
    out.push(verdict(
        checks::CLIENT_MESSAGE_SHAPE,
        n,
        per_request(&reqs, message_problem),
        "every request's messages are well-formed".into(),
        "requests carried malformed messages".into(),
    ));
    out.push(errors_verdict(&reqs));
    out
}

/// The exchanges that carried a request body to the server, with their labels.
fn requests(exchanges: &[RecordedExchange]) -> Vec<Req<'_>> {
    exchanges
        .iter()
        .filter(|e| !matches!(e.exchange.method.as_str(), "GET" | "HEAD" | "OPTIONS"))
        .enumerate()
        .map(|(i, ex)| {
            let (body, not_object) = match &ex.exchange.request_body {
                Value::Object(m) => (m.clone(), false),
                _ => (Map::new(), true),
            };
            Req {
                label: format!("request {} (line {})", i + 1, ex.line),
                ex,
                body,
                not_object,
            }
        })
        .collect()
}

fn expected_endpoint(contract: &ClientSection) -> String {
    let e = contract
        .endpoint
        .as_deref()
        .unwrap_or(DEFAULT_ENDPOINT)
        .trim();
    if e.starts_with('/') {
        e.to_string()
    } else {
        format!("/{e}")
    }
}

/// Each request's problem (if any), labelled.
fn per_request(reqs: &[Req], f: impl Fn(&Req) -> Option<String>) -> Vec<(String, String)> {
    reqs.iter()
        .filter_map(|r| f(r).map(|p| (r.label.clone(), p)))
        .collect()
}

/// One finding for one check: Pass, or Error with the offending requests as evidence.
fn verdict(
    check: &'static Check,
    total: usize,
    problems: Vec<(String, String)>,
    ok: String,
    bad: String,
) -> Finding {
    if problems.is_empty() {
        return Finding::pass(check, format!("{ok} ({total} requests)"));
    }
    let msg = format!("{} of {total} requests: {bad}", problems.len());
    listed(Finding::new(check, Severity::Error, msg), &problems)
}

fn listed(mut f: Finding, problems: &[(String, String)]) -> Finding {
    for (label, problem) in problems.iter().take(MAX_LISTED) {
        f = f.with(label, problem);
    }
    if problems.len() > MAX_LISTED {
        f = f.with(
            "more",
            format!("{} more requests", problems.len() - MAX_LISTED),
        );
    }
    f
}

fn endpoint_problem(r: &Req, endpoint: &str) -> Option<String> {
    let ex = &r.ex.exchange;
    (ex.path != endpoint).then(|| format!("{} {} (contract: {endpoint})", ex.method, ex.path))
}

fn model_problem(r: &Req, model: &str) -> Option<String> {
    match r.body.get("model") {
        Some(Value::String(m)) if m == model => None,
        Some(v) => Some(format!("model {} (contract: {model:?})", short(v))),
        None => Some(format!("no model field (contract: {model:?})")),
    }
}

fn params_problem(r: &Req, params: &Map<String, Value>) -> Option<String> {
    let problems: Vec<String> = params
        .iter()
        .filter_map(|(k, want)| match lookup(&r.body, k) {
            None => Some(format!("{k} missing (contract: {})", short(want))),
            Some(got) if !json_eq(got, want) => {
                Some(format!("{k} = {} (contract: {})", short(got), short(want)))
            }
            Some(_) => None,
        })
        .collect();
    joined(problems)
}

fn required_problem(r: &Req, required: &[String]) -> Option<String> {
    let missing: Vec<&str> = required
        .iter()
        .filter(|k| lookup(&r.body, k).is_none())
        .map(String::as_str)
        .collect();
    (!missing.is_empty()).then(|| format!("missing {}", missing.join(", ")))
}

fn forbidden_problem(r: &Req, forbidden: &[String]) -> Option<String> {
    let sent: Vec<String> = forbidden
        .iter()
        .filter_map(|k| lookup(&r.body, k).map(|v| format!("{k} = {}", short(v))))
        .collect();
    joined(sent).map(|s| format!("sent {s}"))
}

fn stream_problem(r: &Req, want: bool) -> Option<String> {
    match r.body.get("stream") {
        None | Some(Value::Null) if !want => None,
        None | Some(Value::Null) => Some("stream not sent (contract: true)".into()),
        Some(Value::Bool(b)) if *b == want => None,
        Some(v) => Some(format!("stream = {} (contract: {want})", short(v))),
    }
}

/// The request's messages against the chat shape servers accept.
fn message_problem(r: &Req) -> Option<String> {
    if r.not_object {
        return Some(format!(
            "the body is not a JSON object: {}",
            short(&r.ex.exchange.request_body)
        ));
    }
    match r.body.get("messages") {
        None if r.ex.exchange.path.ends_with("/chat/completions") => {
            Some("no messages field on a chat request".into())
        }
        None => None,
        Some(Value::Array(msgs)) if msgs.is_empty() => Some("messages is empty".into()),
        Some(Value::Array(msgs)) => joined(
            msgs.iter()
                .enumerate()
                .filter_map(|(i, m)| message_shape(i, m))
                .collect(),
        ),
        Some(v) => Some(format!("messages is {}, not a list", short(v))),
    }
}

/// What is wrong with message `i`, if anything.
fn message_shape(i: usize, m: &Value) -> Option<String> {
    let Value::Object(m) = m else {
        return Some(format!("messages[{i}] is {}, not an object", short(m)));
    };
    let role = match m.get("role") {
        Some(Value::String(r)) if ROLES.contains(&r.as_str()) => r.as_str(),
        Some(v) => {
            return Some(format!(
                "messages[{i}].role {} is not one of {}",
                short(v),
                ROLES.join("/")
            ))
        }
        None => return Some(format!("messages[{i}] has no role")),
    };
    if let Some(p) = content_shape(i, role, m) {
        return Some(p);
    }
    if role == "tool" && !matches!(m.get("tool_call_id"), Some(Value::String(_))) {
        return Some(format!("messages[{i}] (tool) has no tool_call_id string"));
    }
    None
}

/// Content is a string or a list of `{type, ...}` parts; only an assistant turn that calls
/// tools may leave it out (or null).
fn content_shape(i: usize, role: &str, m: &Map<String, Value>) -> Option<String> {
    match m.get("content") {
        Some(Value::String(_)) => None,
        Some(Value::Array(parts)) => parts.iter().enumerate().find_map(|(j, p)| {
            let typed = p.get("type").is_some_and(Value::is_string);
            (!typed).then(|| {
                format!(
                    "messages[{i}].content[{j}] is {}, not a part {{\"type\": ...}}",
                    short(p)
                )
            })
        }),
        None | Some(Value::Null)
            if role == "assistant"
                && (m.contains_key("tool_calls") || m.contains_key("function_call")) =>
        {
            None
        }
        None | Some(Value::Null) => Some(format!("messages[{i}] ({role}) has no content")),
        Some(v) => Some(format!(
            "messages[{i}].content is {}, not a string or a list of parts",
            short(v)
        )),
    }
}

/// Exchanges the server rejected: the client sent something the server would not take.
fn errors_verdict(reqs: &[Req]) -> Finding {
    let rejected: Vec<(String, String)> = reqs
        .iter()
        .filter(|r| r.ex.exchange.status >= 400)
        .map(|r| {
            let ex = &r.ex.exchange;
            let why = ex.response_body["error"]["message"]
                .as_str()
                .map(str::to_string)
                .or_else(|| ex.error.clone())
                .unwrap_or_else(|| short(&ex.response_body));
            (
                r.label.clone(),
                format!("{} {}: {} {why}", ex.method, ex.path, ex.status),
            )
        })
        .collect();
    if rejected.is_empty() {
        return Finding::pass(
            checks::CLIENT_ERRORS,
            format!(
                "the server accepted every request ({} requests)",
                reqs.len()
            ),
        );
    }
    let msg = format!(
        "the server answered {} of {} requests with an error status",
        rejected.len(),
        reqs.len()
    );
    listed(
        Finding::new(checks::CLIENT_ERRORS, Severity::Warning, msg),
        &rejected,
    )
}

/// A field by name, or by a dotted path into nested objects (`stream_options.include_usage`).
fn lookup<'a>(body: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    if let Some(v) = body.get(key) {
        return Some(v);
    }
    let mut parts = key.split('.');
    let mut cur = body.get(parts.next()?)?;
    for p in parts {
        cur = cur.as_object()?.get(p)?;
    }
    Some(cur)
}

/// JSON equality where 1 and 1.0 are the same number (TOML and clients differ in how they
/// write numbers).
pub fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_f64(), y.as_f64()) {
            (Some(x), Some(y)) => x == y || (x - y).abs() <= 1e-9 * x.abs().max(y.abs()),
            _ => x == y,
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_eq(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}

/// A value for evidence, cut to a readable length.
fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() <= 80 {
        return s;
    }
    let cut: String = s.chars().take(77).collect();
    format!("{cut}...")
}

fn joined(problems: Vec<String>) -> Option<String> {
    (!problems.is_empty()).then(|| problems.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::record::{Exchange, ExchangeTimings};
    use serde_json::json;

    fn contract(toml_text: &str) -> ClientSection {
        toml::from_str(toml_text).unwrap()
    }

    fn ex(line: usize, path: &str, body: Value, status: u16) -> RecordedExchange {
        RecordedExchange {
            line,
            exchange: Exchange {
                ts: "2025-01-01T00:00:00Z".into(),
                method: "POST".into(),
                path: path.into(),
                query: None,
                request_headers: Default::default(),
                request_body: body,
                status,
                content_type: None,
                response_body: json!({"error": {"message": "nope"}}),
                stream: false,
                timings: ExchangeTimings::default(),
                error: None,
            },
        }
    }

    fn find<'a>(fs: &'a [Finding], id: &str) -> &'a Finding {
        fs.iter()
            .find(|f| f.check.id == id)
            .unwrap_or_else(|| panic!("no {id}: {fs:?}"))
    }

    #[test]
    fn shapes_and_numbers() {
        let c = contract("params = { temperature = 1 }\nstream = false");
        let good = json!({"model": "m", "temperature": 1.0, "messages": [
            {"role": "system", "content": "s"},
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {"role": "assistant", "content": null, "tool_calls": []},
            {"role": "tool", "tool_call_id": "c1", "content": "42"}]});
        let bad = json!({"model": "m", "temperature": 1, "stream": true, "messages": [
            {"role": "bot", "content": "x"}]});
        let rec = vec![
            ex(1, "/v1/chat/completions", good, 200),
            ex(2, "/v1/chat/completions", bad, 400),
            ex(
                3,
                "/v1/chat/completions",
                json!({"model": "m", "temperature": 1,
                "messages": [{"role": "tool", "content": "x"}]}),
                200,
            ),
        ];
        let fs = diff(&c, Some("m"), &rec, Path::new("r.jsonl"));
        assert_eq!(find(&fs, "client.params").severity, Severity::Pass);
        let shape = find(&fs, "client.message-shape");
        assert_eq!(shape.severity, Severity::Error);
        assert!(shape.evidence["request 2 (line 2)"].contains("\"bot\""));
        assert!(shape.evidence["request 3 (line 3)"].contains("tool_call_id"));
        assert!(!shape.evidence.contains_key("request 1 (line 1)"));
        assert_eq!(find(&fs, "client.stream").severity, Severity::Error);
        let errors = find(&fs, "client.errors");
        assert_eq!(errors.severity, Severity::Warning);
        assert!(errors.evidence["request 2 (line 2)"].contains("400 nope"));
    }

    #[test]
    fn dotted_required_and_forbidden() {
        let c =
            contract("required = [\"stream_options.include_usage\"]\nforbidden = [\"logit_bias\"]");
        let rec = vec![ex(
            4,
            "/v1/chat/completions",
            json!({"model": "m", "logit_bias": {}, "messages": [{"role": "user", "content": "x"}]}),
            200,
        )];
        let fs = diff(&c, None, &rec, Path::new("r.jsonl"));
        assert!(
            fs.iter().all(|f| f.check.id != "client.model"),
            "no model to check"
        );
        assert!(find(&fs, "client.required").evidence["request 1 (line 4)"]
            .contains("stream_options.include_usage"));
        assert!(find(&fs, "client.forbidden").evidence["request 1 (line 4)"].contains("logit_bias"));
    }

    #[test]
    fn gets_alone_are_an_empty_recording() {
        let mut get = ex(1, "/v1/models", Value::Null, 200);
        get.exchange.method = "GET".into();
        let fs = diff(&contract(""), Some("m"), &[get], Path::new("r.jsonl"));
        assert_eq!(fs.len(), 1);
        assert_eq!(fs[0].check.id, "client.recording");
        assert_eq!(fs[0].severity, Severity::Warning);
    }
}
