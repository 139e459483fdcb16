//! The HTTP routes: `/health`, `/v1/models`, `/v1/chat/completions`, `/v1/completions`,
//! `/tokenize`, `/detokenize`, and JSON 404/405 for everything else.
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{FromRequest, Request, State};
use axum::http::{Method, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Map, Value};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

use super::engine::{run_job, Job, JobContext, Msg, Prepared, Prompt};
use super::errors::ApiError;
use super::faults::{random_hex, Fault, Faults, Rng};
use super::openai::{
    self, chat_logprobs, completion_logprobs, finish_reason_str, Fields, Meta, Usage,
};
use super::sse::{self, Kind, StreamSpec};
use super::AppState;
use crate::endpoint::parsers::{ReplyParsers, StreamReader, ToolParser};
use crate::endpoint::Generation;
use crate::template::calls::ToolCall;
use crate::template::framing::Splitter;

/// The largest request body accepted.
const MAX_BODY_BYTES: usize = 32 << 20;

/// The raw request body (any content type); failing to read it is an OpenAI-shaped error.
pub struct RawBody(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for RawBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, _state: &S) -> Result<Self, Self::Rejection> {
        axum::body::to_bytes(req.into_body(), MAX_BODY_BYTES)
            .await
            .map(RawBody)
            .map_err(|e| {
                let msg = e.to_string();
                if msg.contains("length limit") {
                    ApiError {
                        status: axum::http::StatusCode::PAYLOAD_TOO_LARGE,
                        message: format!("the request body exceeds {MAX_BODY_BYTES} bytes"),
                        kind: "invalid_request_error",
                        param: None,
                        code: Some("request_too_large"),
                    }
                } else {
                    ApiError::bad_request(format!("cannot read the request body: {msg}"))
                }
            })
    }
}

pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/v1/models", get(models))
        .route("/v1/chat/completions", post(chat))
        .route("/v1/completions", post(completions))
        .route("/tokenize", post(tokenize))
        .route("/detokenize", post(detokenize))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
}

async fn not_found(method: Method, uri: Uri) -> ApiError {
    ApiError::route_not_found(method.as_str(), uri.path())
}

async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::method_not_allowed(method.as_str(), uri.path())
}

async fn health() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// The Prometheus text exposition, under vLLM's names (serve::metrics).
async fn metrics(State(st): State<Arc<AppState>>) -> Response {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        st.metrics.render(&st.name),
    )
        .into_response()
}

async fn models(State(st): State<Arc<AppState>>) -> Json<Value> {
    Json(json!({
        "object": "list",
        "data": [{
            "id": st.name,
            "object": "model",
            "created": st.created,
            "owned_by": "chatgate",
            "root": st.root,
            "parent": null,
            "max_model_len": st.context_length,
        }],
    }))
}

fn check_model(st: &AppState, model: Option<&str>) -> Result<(), ApiError> {
    match model {
        Some(m) if m != st.name => Err(ApiError::model_not_found(m)),
        _ => Ok(()),
    }
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn meta(st: &AppState, prefix: &str) -> Meta {
    Meta {
        id: format!("{prefix}-{}", random_hex(32)),
        created: unix_now(),
        model: st.name.clone(),
        fingerprint: st.fingerprint.clone(),
    }
}

/// Queue a job on the model; resolves once the prompt is built and accepted (or rejected).
async fn start_job(
    st: &AppState,
    job: Job,
) -> Result<(Prepared, UnboundedReceiver<Msg>), ApiError> {
    let (tx, mut rx) = unbounded_channel();
    let engine = st.engine.clone();
    let cx = JobContext {
        metrics: st.metrics.clone(),
        service_time: st.service_time,
        arrived: std::time::Instant::now(),
    };
    tokio::task::spawn_blocking(move || run_job(&engine, job, tx, cx));
    match rx.recv().await {
        Some(Msg::Prepared(p)) => Ok((p, rx)),
        Some(Msg::Rejected(e)) | Some(Msg::Failed(e)) => Err(e),
        Some(_) | None => Err(ApiError::internal(
            "the model worker ended without preparing the prompt",
        )),
    }
}

/// Wait for the whole generation. Dropping this future (the client went away) cancels it.
async fn collect(mut rx: UnboundedReceiver<Msg>) -> Result<Generation, ApiError> {
    while let Some(msg) = rx.recv().await {
        match msg {
            Msg::Done(g) => return Ok(g),
            Msg::Failed(e) | Msg::Rejected(e) => return Err(e),
            Msg::Step(_) | Msg::Prepared(_) => {}
        }
    }
    Err(ApiError::internal("the generation ended without a result"))
}

fn usage_json(st: &AppState, prepared: &Prepared, g: &Generation) -> Value {
    Usage {
        prompt_tokens: prepared.prompt_ids.len(),
        completion_tokens: g.ids.len(),
    }
    .to_json(st.faults.has(Fault::UsageLies))
}

fn parse(body: &Bytes) -> Result<Map<String, Value>, ApiError> {
    openai::parse_body(body)
}

async fn chat(State(st): State<Arc<AppState>>, RawBody(body): RawBody) -> Response {
    match chat_inner(st, body).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

/// What a chat or completion request produced: a stream already under way, or a finished
/// generation to shape into the endpoint's response.
enum Outcome {
    Streamed(Response),
    Done(Box<Finished>),
}

struct Finished {
    g: Generation,
    prepared: Prepared,
    meta: Meta,
    stop_reason: Value,
}

/// The part chat and completions share: run the job, stream it or collect it.
async fn run(
    st: &Arc<AppState>,
    kind: Kind,
    common: &openai::Common,
    prompt: Prompt,
    tool_parser: Option<ToolParser>,
) -> Result<Outcome, ApiError> {
    check_model(st, common.model.as_deref())?;
    let job = Job {
        prompt,
        params: common.params.clone(),
        want_steps: common.stream,
    };
    let (prepared, rx) = start_job(st, job).await?;
    let meta = meta(
        st,
        if kind == Kind::Chat {
            "chatcmpl"
        } else {
            "cmpl"
        },
    );
    if common.stream {
        let spec = StreamSpec {
            kind,
            meta,
            include_usage: common.include_usage,
            return_token_ids: common.return_token_ids,
            logprobs: common.logprobs.is_some(),
            stop: common.params.stop.clone(),
            stop_token_ids: common.params.stop_token_ids.clone(),
            faults: st.faults.clone(),
            tokens: st.tokens.clone(),
            reader: StreamReader::new(
                (kind == Kind::Chat).then(|| reasoning_parser(st)).flatten(),
                tool_parser,
            ),
        };
        return Ok(Outcome::Streamed(sse::stream_response(spec, prepared, rx)));
    }
    let g = collect(rx).await?;
    let stop_reason = sse::stop_reason(
        &g,
        &prepared,
        &common.params.stop_token_ids,
        &common.params.stop,
        st.tokens.as_ref(),
    );
    Ok(Outcome::Done(Box::new(Finished {
        g,
        prepared,
        meta,
        stop_reason: json!(stop_reason),
    })))
}

/// The reasoning parser for a chat reply: the template's think tags, unless the
/// `reasoning-in-content` fault leaves the server without one.
fn reasoning_parser(st: &AppState) -> Option<Splitter> {
    if st.faults.has(Fault::ReasoningInContent) {
        return None;
    }
    st.reasoning.as_ref().and_then(Splitter::new)
}

/// The tool-call parser for a chat reply: the template's call framing when the request lets the
/// model call its tools, unless the `tool-calls-as-text` fault leaves the server without one.
fn tool_parser(
    st: &AppState,
    parse_tools: bool,
    prompt: &Prompt,
    temperature: f64,
) -> Option<ToolParser> {
    if !parse_tools || st.faults.has(Fault::ToolCallsAsText) {
        return None;
    }
    if st.faults.has(Fault::SampledParseFails)
        && temperature > 0.0
        && super::faults::sampled_parse_fails_now()
    {
        return None;
    }
    let tools = match prompt {
        Prompt::Chat {
            tools: Some(Value::Array(tools)),
            ..
        } => tools.as_slice(),
        _ => &[],
    };
    Some(st.tool_calls.as_ref()?.offering(tools))
}

/// What the tool-call parser returned (`calls`, `content`) as the parser faults change it.
/// `text`: what the parser read; `cut`: the token limit ended the reply.
pub(super) fn call_faults(
    parser: &ToolParser,
    calls: &mut Vec<ToolCall>,
    content: &mut String,
    text: &str,
    cut: bool,
    faults: &Faults,
) {
    let marker = parser.marker();
    if faults.has(Fault::UnclosedCallEmpty) && cut && !marker.is_empty() && text.contains(marker) {
        calls.clear();
        content.clear();
        return;
    }
    if faults.has(Fault::ToolCallCutAtMarker) {
        cut_at_marker(calls, parser.closer());
    }
    if faults.has(Fault::ParallelCallsCollapsed) {
        calls.truncate(1);
    }
    let (stringified, trimmed) = (
        faults.has(Fault::ToolValuesStringified),
        faults.has(Fault::ToolValuesTrimmed),
    );
    for call in calls.iter_mut() {
        let Value::Object(args) = &mut call.arguments else {
            continue;
        };
        for v in args.values_mut() {
            match v {
                Value::String(s) if trimmed => *s = s.trim().to_string(),
                Value::String(_) => {}
                other if stringified => *other = Value::String(other.to_string()),
                _ => {}
            }
        }
    }
}

/// A parser that finds a call's end by scanning for the closing marker: the first value that
/// holds the marker ends the call there (the rest of the value, the later arguments and calls
/// are lost).
fn cut_at_marker(calls: &mut Vec<ToolCall>, closer: &str) {
    if closer.is_empty() {
        return;
    }
    for (i, call) in calls.iter_mut().enumerate() {
        let Value::Object(args) = &mut call.arguments else {
            continue;
        };
        let Some(k) = args
            .values()
            .position(|v| v.as_str().is_some_and(|s| s.contains(closer)))
        else {
            continue;
        };
        let mut kept: Map<String, Value> = std::mem::take(args).into_iter().take(k + 1).collect();
        if let Some(Value::String(s)) = kept.values_mut().last() {
            let at = s.find(closer).unwrap_or(s.len());
            s.truncate(at);
        }
        *args = kept;
        calls.truncate(i + 1);
        return;
    }
}

/// A parsed call as the API carries it; under `tool-arguments-broken`, its arguments written as
/// a Python dict.
pub(super) fn api_call(call: &ToolCall, faults: &Faults) -> Value {
    let mut v = call.to_openai(&format!("call_{}", random_hex(24)));
    if faults.has(Fault::ToolArgumentsBroken) {
        v["function"]["arguments"] = json!(python_dict(&call.arguments));
    }
    v
}

/// `{'city': 'Paris'}`: what a parser that formats arguments with Python's str() returns.
fn python_dict(v: &Value) -> String {
    v.to_string().replace('"', "'")
}

/// The request fields this server is made to accept and ignore (`*-ignored` faults).
fn drop_ignored_fields(st: &AppState, body: &mut Map<String, Value>) {
    for field in st.faults.iter().filter_map(Fault::ignored_field) {
        body.remove(field);
    }
}

async fn chat_inner(st: Arc<AppState>, body: Bytes) -> Result<Response, ApiError> {
    let mut body = parse(&body)?;
    drop_ignored_fields(&st, &mut body);
    let req = openai::parse_chat(&body, st.vocab_size, Rng::from_time().next_u64())?;
    let common = req.common;
    let temperature = common.params.sampling.temperature;
    let tools = tool_parser(&st, req.parse_tools, &req.prompt, temperature);
    let Finished {
        g,
        prepared,
        meta,
        stop_reason,
    } = match run(&st, Kind::Chat, &common, req.prompt, tools.clone()).await? {
        Outcome::Streamed(r) => return Ok(r),
        Outcome::Done(f) => *f,
    };
    let logprobs = match common.logprobs {
        Some(_) => json!({"content": chat_logprobs(&g.steps, st.tokens.as_ref())}),
        None => Value::Null,
    };
    // The healthy server's parsers (the in-process target reads with the same), as far as
    // the faults leave them; then the faults that change what they returned.
    let parsers = ReplyParsers {
        reasoning: st
            .reasoning
            .clone()
            .filter(|_| !st.faults.has(Fault::ReasoningInContent)),
        calls: tools,
    };
    let mut read = parsers.read(&g.text, parsers.calls.is_some());
    if let Some(parser) = &parsers.calls {
        let cut = g.finish_reason == crate::endpoint::FinishReason::Length;
        call_faults(
            parser,
            &mut read.calls,
            &mut read.content,
            &g.text,
            cut,
            &st.faults,
        );
    }
    let mut message =
        json!({"role": "assistant", "content": read.content, "refusal": null, "tool_calls": []});
    if parsers.reasoning.as_ref().and_then(Splitter::new).is_some()
        && !st.faults.has(Fault::ReasoningDropped)
    {
        message[st.faults.reasoning_field()] = json!(read.reasoning);
    }
    let mut finish_reason = finish_reason_str(g.finish_reason);
    if !read.calls.is_empty() {
        // vLLM's hermes parser: the text before the first call is the content, null when none.
        if read.content.is_empty() {
            message["content"] = Value::Null;
        }
        message["tool_calls"] = read.calls.iter().map(|c| api_call(c, &st.faults)).collect();
        finish_reason = "tool_calls";
    }
    let mut choice = json!({
        "index": 0,
        "message": message,
        "logprobs": logprobs,
        "finish_reason": finish_reason,
        "stop_reason": stop_reason,
    });
    if common.return_token_ids {
        choice["token_ids"] = json!(g.ids);
    }
    let mut out = json!({
        "id": meta.id,
        "object": "chat.completion",
        "created": meta.created,
        "model": meta.model,
        "system_fingerprint": meta.fingerprint,
        "choices": [choice],
        "usage": usage_json(&st, &prepared, &g),
    });
    if common.return_token_ids {
        out["prompt_token_ids"] = json!(prepared.prompt_ids);
    }
    Ok(Json(out).into_response())
}

async fn completions(State(st): State<Arc<AppState>>, RawBody(body): RawBody) -> Response {
    match completions_inner(st, body).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn completions_inner(st: Arc<AppState>, body: Bytes) -> Result<Response, ApiError> {
    let mut body = parse(&body)?;
    drop_ignored_fields(&st, &mut body);
    let req = openai::parse_completion(&body, st.vocab_size, Rng::from_time().next_u64())?;
    let common = req.common;
    let Finished {
        g,
        prepared,
        meta,
        stop_reason,
    } = match run(&st, Kind::Completion, &common, req.prompt, None).await? {
        Outcome::Streamed(r) => return Ok(r),
        Outcome::Done(f) => *f,
    };
    let logprobs = match common.logprobs {
        Some(_) => completion_logprobs(&g.steps, st.tokens.as_ref(), 0),
        None => Value::Null,
    };
    let mut choice = json!({
        "index": 0,
        "text": g.text,
        "logprobs": logprobs,
        "finish_reason": finish_reason_str(g.finish_reason),
        "stop_reason": stop_reason,
    });
    if common.return_token_ids {
        choice["prompt_token_ids"] = json!(prepared.prompt_ids);
        choice["token_ids"] = json!(g.ids);
    }
    Ok(Json(json!({
        "id": meta.id,
        "object": "text_completion",
        "created": meta.created,
        "model": meta.model,
        "system_fingerprint": meta.fingerprint,
        "choices": [choice],
        "usage": usage_json(&st, &prepared, &g),
    }))
    .into_response())
}

/// The ids this server would feed the model for `prompt` (faults included).
async fn prompt_ids(st: &AppState, prompt: Prompt) -> Result<Vec<u32>, ApiError> {
    let engine = st.engine.clone();
    tokio::task::spawn_blocking(move || {
        let guard = match engine.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        guard.prompt_ids(&prompt)
    })
    .await
    .map_err(|e| ApiError::internal(format!("the tokenizer worker failed: {e}")))?
}

async fn tokenize(State(st): State<Arc<AppState>>, RawBody(body): RawBody) -> Response {
    match tokenize_inner(st, body).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

/// vLLM's `/tokenize`: `{"prompt", "add_special_tokens"}` or `{"messages",
/// "add_generation_prompt", "add_special_tokens"}`.
async fn tokenize_inner(st: Arc<AppState>, body: Bytes) -> Result<Response, ApiError> {
    let body = parse(&body)?;
    let f = Fields(&body);
    check_model(&st, f.string("model")?)?;
    let prompt = match (f.get("messages"), f.get("prompt")) {
        (Some(_), _) => openai::parse_messages(&f)?,
        (None, Some(Value::String(_))) => openai::parse_prompt(&f, st.vocab_size)?,
        (None, Some(v)) => {
            return Err(
                ApiError::invalid("prompt", format!("'prompt' must be a string, not {v}"))
                    .code("invalid_type"),
            )
        }
        (None, None) => {
            return Err(
                ApiError::bad_request("either 'prompt' or 'messages' is required")
                    .param("prompt")
                    .code("missing_required_parameter"),
            )
        }
    };
    let return_token_strs = f.boolean("return_token_strs")?.unwrap_or(false);
    let ids = prompt_ids(&st, prompt).await?;
    let token_strs = if return_token_strs {
        json!(ids
            .iter()
            .map(|&i| st.tokens.raw_token(i))
            .collect::<Vec<_>>())
    } else {
        Value::Null
    };
    Ok(Json(json!({
        "count": ids.len(),
        "max_model_len": st.context_length,
        "tokens": ids,
        "token_strs": token_strs,
    }))
    .into_response())
}

async fn detokenize(State(st): State<Arc<AppState>>, RawBody(body): RawBody) -> Response {
    match detokenize_inner(st, body).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn detokenize_inner(st: Arc<AppState>, body: Bytes) -> Result<Response, ApiError> {
    let body = parse(&body)?;
    let f = Fields(&body);
    check_model(&st, f.string("model")?)?;
    if f.get("tokens").is_none() {
        return Err(ApiError::missing("tokens"));
    }
    let ids = f.ids("tokens", st.vocab_size)?;
    let prompt = st.tokens.decode(&ids)?;
    Ok(Json(json!({"prompt": prompt})).into_response())
}
