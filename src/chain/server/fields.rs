//! Boundary 5, request fields the server accepts and ignores: a field a client sends that
//! the server does not refuse and does not apply is the quietest API break there is — the
//! request succeeds and the reply is simply not the one asked for. Three that clients of chat
//! models rely on, each asked for once and judged on what came back:
//! - `max_completion_tokens` (OpenAI's name since 2024; `max_tokens` is deprecated for it):
//!   a server that reads only `max_tokens` runs the reply past it (asked with both, the new
//!   one smaller: the new one must win);
//! - `chat_template_kwargs` (vLLM, SGLang, llama-server: the template's switches, such as
//!   Qwen3's `enable_thinking`): the prompt the server renders must change as the template
//!   says, which its prompt token count shows;
//! - `tool_choice: "none"`: no call may come back; a named function (a decoy the probe adds
//!   beside its own tools, which the model has no reason to call): the call must be to it; and
//!   `"required"` after a greeting no tool answers: a call to one of the offered tools must come
//!   back (BUG-ZOO: vLLM 44216 and 54808 return prose under `required`).
//!
//! Severity follows the suite's `[client] relies_on`: an error for what the client relies on,
//! a warning otherwise (without the list, the recorded client's requests show which fields it
//! sends).
use crate::verdict::checks::{self, Check};
use serde_json::{json, Value};

use crate::chain::run::probes::{FieldReplies, Observed, Online, Probe, Reply};
use crate::endpoint::openai::CallError;
use crate::exchange::Record;
use crate::template::framing::Framing;
use crate::verdict::{Finding, Severity};

/// The completion-token budget of the `max_completion_tokens` probe.
pub const MAX_COMPLETION: u32 = 3;

/// The function the named `tool_choice` probe adds and names: nothing in any prompt asks for it,
/// so a call to it came from the request's `tool_choice`, not from the model's own choice.
pub const NAMED: &str = "chatgate_named_choice";

/// Tokens the named `tool_choice` probe may take (room for reasoning, then a small call).
const NAMED_CHOICE_TOKENS: u32 = 64;

/// What the `required` probe says: nothing a tool answers, so a call comes from the request.
const GREETING: &str = "Hello!";

fn named_tool() -> Value {
    json!({"type": "function", "function": {
        "name": NAMED,
        "description": "Acknowledge the request.",
        "parameters": {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]},
    }})
}

/// The token budget that cuts a reply inside a tool call.
pub const TOOL_CUT_TOKENS: u32 = 3;

/// Tokens the `response_format` probe may take (room for a small JSON object).
const RESPONSE_FORMAT_TOKENS: u32 = 48;

/// The JSON schema the `response_format` probe asks for: one key, one of two values.
pub fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {"answer": {"type": "string", "enum": ["yes", "no"]}},
        "required": ["answer"],
        "additionalProperties": false,
    })
}

/// Whether `text` is a JSON object [`schema`] accepts.
fn meets_schema(text: &str) -> bool {
    match serde_json::from_str::<Value>(text.trim()) {
        Ok(Value::Object(o)) => {
            o.len() == 1 && matches!(o.get("answer").and_then(Value::as_str), Some("yes" | "no"))
        }
        _ => false,
    }
}

/// Send the field probes.
pub async fn gather(
    online: &Online<'_>,
    probes: &[Probe],
    framing: Option<&Framing>,
) -> FieldReplies {
    let seed = online.settings.seed;
    let mut out = FieldReplies::default();
    // A check the suite skips (`[server] skip`) sends no probe: skipping a known quirk also
    // spares the server its request.
    let wanted = |check: &Check| !online.ctx.suite.file.server.skips(check);
    // The fields that are not about tools are asked on a probe without tools, so that what
    // the server does with tools (a call cut by the token budget) is not taken for them.
    let offers = |p: &&Probe| p.tools.as_ref().is_some_and(|t| !t.is_empty());
    let plain = probes.iter().find(|p| !offers(p)).or(probes.first());
    let tooled = probes.iter().find(offers);
    if let Some(p) = plain.filter(|_| wanted(checks::SERVER_MAX_COMPLETION_TOKENS)) {
        // Beside the probes' own `max_tokens`, which bounds the reply of a server that ignores
        // the new field (one that reads neither would generate to its context's end). OpenAI's
        // rule, and vLLM's and transformers': `max_completion_tokens` wins.
        // Its length is read from usage; logprobs (dear on some stacks: llama-cpp-python sorts
        // the vocabulary per token) only where the server counts nothing.
        let mut req = online.request_text(p, seed, false);
        req.extra
            .insert("max_completion_tokens".into(), json!(MAX_COMPLETION));
        let mut reply = online.http.chat(&req).await;
        if reply.as_ref().is_ok_and(|r| completion_tokens(r).is_none()) {
            req.top_logprobs = online.request(p, seed, false).top_logprobs;
            reply = online.http.chat(&req).await;
        }
        if reply.is_err() {
            let mut control = online.request(p, seed, false);
            control.max_tokens = Some(MAX_COMPLETION);
            out.max_tokens_control = Some(online.http.chat(&control).await);
        }
        out.max_completion = Some((p.id.clone(), reply));
    }
    let switch = framing
        .and_then(|f| f.reasoning.as_ref())
        .and_then(|r| r.switches.first().cloned());
    if let (Some(p), Some((name, value))) = (
        plain.filter(|_| wanted(checks::SERVER_TEMPLATE_KWARGS)),
        switch,
    ) {
        // Only the prompt is judged (its token count); the reply keeps the probes' budget, so
        // that a server that fails replies cut mid-call (transformers serve) is not taken for
        // one that refuses the field.
        let mut req = online.request_text(p, seed, false);
        req.extra.insert(
            "chat_template_kwargs".into(),
            json!({ name.clone(): value.clone() }),
        );
        out.kwargs = Some((p.id.clone(), (name, value), online.http.chat(&req).await));
    }
    if let Some(p) = tooled.filter(|_| wanted(checks::SERVER_TOOL_CHOICE)) {
        let mut req = online.request_text(p, seed, false);
        req.extra.insert("tool_choice".into(), json!("none"));
        out.tool_choice_none = Some((p.id.clone(), online.http.chat(&req).await));
        let mut req = online.request_text(p, seed, false);
        req.max_tokens = Some(NAMED_CHOICE_TOKENS);
        req.tools.get_or_insert_with(Vec::new).push(named_tool());
        req.extra.insert(
            "tool_choice".into(),
            json!({"type": "function", "function": {"name": NAMED}}),
        );
        out.tool_choice_named = Some((p.id.clone(), online.http.chat(&req).await));
        let mut req = online.request_text(p, seed, false);
        req.max_tokens = Some(NAMED_CHOICE_TOKENS);
        req.messages = vec![json!({"role": "user", "content": GREETING})];
        req.extra.insert("tool_choice".into(), json!("required"));
        out.tool_choice_required = Some((p.id.clone(), online.http.chat(&req).await));
    }
    if let Some(p) = tooled.filter(|_| wanted(checks::SERVER_TOOL_CALL_PARSE)) {
        let mut req = online.request_text(p, seed, false);
        req.max_tokens = Some(TOOL_CUT_TOKENS);
        out.tool_cut = Some((p.id.clone(), online.http.chat(&req).await));
    }
    if let Some(p) = plain.filter(|_| wanted(checks::SERVER_RESPONSE_FORMAT)) {
        let mut req = online.request_text(p, seed, false);
        req.max_tokens = Some(RESPONSE_FORMAT_TOKENS);
        req.extra.insert(
            "response_format".into(),
            json!({"type": "json_schema", "json_schema": {"name": "answer", "strict": true, "schema": schema()}}),
        );
        out.response_format = Some((p.id.clone(), online.http.chat(&req).await));
    }
    out
}

/// Every field check that had a probe to judge.
pub fn check(online: &Online, obs: &Observed) -> Vec<Finding> {
    let f = &obs.fields;
    let mut out = Vec::new();
    out.extend(
        f.max_completion
            .as_ref()
            .map(|(id, r)| max_completion(online, id, r, f.max_tokens_control.as_ref())),
    );
    out.extend(
        f.kwargs
            .as_ref()
            .map(|(id, kw, r)| kwargs(online, obs, id, kw, r)),
    );
    let choices: [(_, &str, ChoiceJudge); 3] = [
        (&f.tool_choice_none, "tool_choice", tool_choice_none),
        (
            &f.tool_choice_named,
            "tool_choice (a named function)",
            tool_choice_named,
        ),
        (
            &f.tool_choice_required,
            "tool_choice (\"required\")",
            tool_choice_required,
        ),
    ];
    for (sent, field, judge) in choices {
        out.extend(sent.as_ref().map(|(id, r)| match r {
            Ok(rec) => judge(online, id, rec),
            Err(e) => refused(checks::SERVER_TOOL_CHOICE, field, id, e),
        }));
    }
    out.extend(
        f.response_format
            .as_ref()
            .map(|(id, r)| response_format(online, id, r)),
    );
    out
}

/// The severity of a field the server ignores: an error when the client relies on it.
fn ignored(online: &Online, feature: &str) -> Severity {
    if online.ctx.suite.client_relies_on(feature) {
        Severity::Error
    } else {
        Severity::Warning
    }
}

fn refused(check: &'static Check, field: &str, probe: &str, e: &CallError) -> Finding {
    Finding::new(
        check,
        Severity::Warning,
        format!("the server refuses `{field}` (probe {probe}: {e})"),
    )
    .with("fix", format!("a client that sends `{field}` gets this error from this server; send what the server reads instead, or upgrade it"))
}

fn max_completion(online: &Online, probe: &str, r: &Reply, control: Option<&Reply>) -> Finding {
    let rec = match (r, control) {
        (Ok(rec), _) => rec,
        (Err(e), Some(Err(c))) => {
            return Finding::new(
                checks::SERVER_MAX_COMPLETION_TOKENS,
                Severity::Info,
                format!("not judged: a reply cut at {MAX_COMPLETION} tokens fails with `max_tokens` too (probe {probe}: {c}), so the failure is not the field's (with `max_completion_tokens`: {e})"),
            )
        }
        (Err(e), _) => return refused(checks::SERVER_MAX_COMPLETION_TOKENS, "max_completion_tokens", probe, e),
    };
    let n = completion_tokens(rec);
    match n {
        Some(n) if n > MAX_COMPLETION as usize => Finding::new(
            checks::SERVER_MAX_COMPLETION_TOKENS,
            ignored(online, "max_completion_tokens"),
            format!("the server ignores `max_completion_tokens`: asked for at most {MAX_COMPLETION} tokens, it generated {n} (probe {probe}, finish_reason {})", rec.finish_reason.as_deref().unwrap_or("none")),
        )
        .with("layer", "the server API (it reads only the deprecated `max_tokens`)")
        .with("fix", "send `max_tokens` to this server (OpenAI SDKs send `max_completion_tokens` when asked to), or serve with a stack that reads both (vLLM, llama-server)"),
        Some(n) => Finding::pass(
            checks::SERVER_MAX_COMPLETION_TOKENS,
            format!("`max_completion_tokens` is applied ({n} of at most {MAX_COMPLETION} tokens)"),
        ),
        None => Finding::new(
            checks::SERVER_MAX_COMPLETION_TOKENS,
            Severity::Info,
            "the reply to the `max_completion_tokens` probe says nothing of its length (no usage, ids or logprobs): not judged",
        ),
    }
}

/// Generated tokens: usage, else the ids, else the logprob entries.
fn completion_tokens(rec: &Record) -> Option<usize> {
    rec.usage
        .and_then(|u| u.completion_tokens)
        .map(|n| n as usize)
        .or_else(|| rec.token_ids.as_ref().map(Vec::len))
        .or_else(|| rec.logprobs.as_ref().map(Vec::len))
}

fn kwargs(
    online: &Online,
    obs: &Observed,
    probe: &str,
    (name, value): &(String, Value),
    r: &Result<Record, CallError>,
) -> Finding {
    let rec = match r {
        Ok(rec) => rec,
        Err(e) => {
            return refused(
                checks::SERVER_TEMPLATE_KWARGS,
                "chat_template_kwargs",
                probe,
                e,
            )
        }
    };
    let kw = format!("{name}={value}");
    let run = obs.runs.iter().find(|r| r.probe.id == probe);
    let plain = run
        .and_then(|r| r.main())
        .and_then(|r| r.usage?.prompt_tokens);
    let switched = rec.usage.and_then(|u| u.prompt_tokens);
    let expected = run.and_then(|r| {
        let p = online.ctx.serving.as_ref()?;
        let text = p
            .render_with(
                &r.probe.messages,
                r.probe.tools.as_deref(),
                online.local_now.or(p.now),
                &[(name.clone(), value.clone())],
            )
            .ok()?;
        let with = p.ids(&text).ok()?.len() as u64;
        let without = r.local_ids.as_ref()?.len() as u64;
        (with != without).then_some((with, without))
    });
    match (plain, switched, expected) {
        (Some(a), Some(b), Some((with, without))) if a == b && a == without => Finding::new(
            checks::SERVER_TEMPLATE_KWARGS,
            ignored(online, "chat_template_kwargs"),
            format!("the server ignores `chat_template_kwargs` ({kw}): the template renders {with} prompt tokens with it and {without} without, and the server's prompt is {b} tokens either way (probe {probe})"),
        )
        .with("layer", "the server API (it does not pass request kwargs to the template)")
        .with("fix", "serve with a stack that passes `chat_template_kwargs` to the template per request (vLLM, SGLang, llama-server); llama-cpp-python takes them only at load (`--chat_template_kwargs`)"),
        (_, Some(b), Some((with, _))) if b == with => Finding::pass(
            checks::SERVER_TEMPLATE_KWARGS,
            format!("`chat_template_kwargs` ({kw}) reach the template: {b} prompt tokens, as the template renders them"),
        ),
        (_, Some(b), Some((with, without))) => Finding::new(
            checks::SERVER_TEMPLATE_KWARGS,
            Severity::Info,
            format!("with `chat_template_kwargs` ({kw}) the server's prompt is {b} tokens; the template renders {with} with them and {without} without: not judged (the template boundary compares the prompts)"),
        ),
        _ => Finding::new(
            checks::SERVER_TEMPLATE_KWARGS,
            Severity::Info,
            format!("the server's prompt count with and without `chat_template_kwargs` ({kw}) is not known: not judged"),
        ),
    }
}

/// Judges a `tool_choice` probe's reply (the server answered it).
type ChoiceJudge = fn(&Online, &str, &Record) -> Finding;

fn tool_choice_none(online: &Online, probe: &str, rec: &Record) -> Finding {
    if rec.tool_calls.is_empty() {
        return Finding::pass(
            checks::SERVER_TOOL_CHOICE,
            format!("`tool_choice: \"none\"` is honoured: no call came back (probe {probe})"),
        );
    }
    Finding::new(
        checks::SERVER_TOOL_CHOICE,
        ignored(online, "tool_choice"),
        format!(
            "the server ignores `tool_choice: \"none\"`: {} call(s) came back (probe {probe})",
            rec.tool_calls.len()
        ),
    )
    .with("layer", "the server API (its tool-call parser runs whatever the request says)")
    .with("fix", "the server must not return calls when the request forbids them; until it is fixed, a client that sends `tool_choice: \"none\"` must not send `tools`")
}

/// `tool_choice: "required"` after a greeting: the reply must call one of the offered tools.
/// Only that a call came back, and to which function, is judged: a server forces the call's
/// shape, and an untrained stand-in forced into one writes arguments no schema would take.
fn tool_choice_required(online: &Online, probe: &str, rec: &Record) -> Finding {
    let names = called(rec);
    if !names.is_empty() {
        return Finding::pass(
            checks::SERVER_TOOL_CHOICE,
            format!("`tool_choice: \"required\"` is honoured: after {GREETING:?} the reply calls `{}` (probe {probe}'s tools)", names.join("`, `")),
        );
    }
    Finding::new(
        checks::SERVER_TOOL_CHOICE,
        ignored(online, "tool_choice"),
        format!("the server ignores `tool_choice: \"required\"`: after {GREETING:?} the reply holds no call (probe {probe}'s tools): {}", crate::chain::run::probes::show(&rec.text)),
    )
    .with("layer", "the server API (`required` must force a call: vLLM constrains the decoding to its tools' calls)")
    .with("fix", "serve with a stack and parser that force required tool choices (vLLM with --enable-auto-tool-choice and a --tool-call-parser), or do not rely on them")
}

/// The names of the functions a reply calls.
fn called(rec: &Record) -> Vec<&str> {
    rec.tool_calls
        .iter()
        .filter_map(|c| {
            c.pointer("/function/name")
                .or_else(|| c.get("name"))
                .and_then(Value::as_str)
        })
        .collect()
}

/// A named `tool_choice`: the reply must call the named function (the decoy no prompt asks
/// for), whatever the model would have chosen.
fn tool_choice_named(online: &Online, probe: &str, rec: &Record) -> Finding {
    let names = called(rec);
    if names.contains(&NAMED) {
        return Finding::pass(
            checks::SERVER_TOOL_CHOICE,
            format!("a named `tool_choice` is honoured: the reply calls `{NAMED}`, the function it names (probe {probe})"),
        );
    }
    let got = if names.is_empty() {
        "no call".to_string()
    } else {
        format!("a call to `{}`", names.join("`, `"))
    };
    Finding::new(
        checks::SERVER_TOOL_CHOICE,
        ignored(online, "tool_choice"),
        format!("the server ignores a named `tool_choice`: asked to call `{NAMED}`, the reply holds {got} (probe {probe})"),
    )
    .with("layer", "the server API (a named tool_choice must force the call: vLLM and llama-cpp-python constrain the decoding to it)")
    .with("fix", "serve with a stack that forces named tool choices (vLLM with --enable-auto-tool-choice and a --tool-call-parser; llama-cpp-python's function-calling formats), or do not rely on them")
}

fn response_format(online: &Online, probe: &str, r: &Result<Record, CallError>) -> Finding {
    let rec = match r {
        Ok(rec) => rec,
        Err(e) => return refused(checks::SERVER_RESPONSE_FORMAT, "response_format", probe, e),
    };
    if meets_schema(&rec.text) {
        return Finding::pass(
            checks::SERVER_RESPONSE_FORMAT,
            format!("`response_format` json_schema is honoured: the reply is JSON the schema accepts (probe {probe})"),
        );
    }
    let cut = rec.finish_reason.as_deref() == Some("length");
    if cut && rec.text.trim_start().starts_with('{') {
        return Finding::new(
            checks::SERVER_RESPONSE_FORMAT,
            Severity::Info,
            format!("the `response_format` reply was cut at {RESPONSE_FORMAT_TOKENS} tokens before its JSON closed (probe {probe}): not judged"),
        );
    }
    Finding::new(
        checks::SERVER_RESPONSE_FORMAT,
        ignored(online, "response_format"),
        format!(
            "the server ignores `response_format` (json_schema): the reply is not JSON the schema accepts (probe {probe}: {})",
            crate::chain::run::probes::show(&rec.text)
        ),
    )
    .with("schema", schema().to_string())
    .with("layer", "the server API (it accepted the field and decoded without the schema)")
    .with("fix", "serve with structured output enabled (vLLM guided decoding, llama-server / llama-cpp-python grammars), or have the server refuse the field so the client knows")
}
