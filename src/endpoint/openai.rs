//! The OpenAI-compatible HTTP target (reqwest + rustls): chat and completions, plain and
//! streamed, with a monotonic timestamp per event, and server introspection where it exists.
//!
//! Everything a server sends is kept as evidence rather than judged here: the SSE framing goes
//! into a [`StreamTrace`] (chunks, malformed payloads, `[DONE]`, comments) for the server
//! boundary's conformance checks, and the reply into the same [`Record`] the in-process target
//! produces, so snapshots and latency metrics never care which target ran. Failures are typed
//! ([`CallError`]) so callers can tell "the server is down" (exit 3) from "the server answered
//! wrongly" (a finding), and a stream cut mid-way still hands back what arrived.
//!
//! The API key is read once from a named environment variable and only ever leaves this
//! module inside a sensitive `Authorization` header: it is not in `Debug`, errors or logs.
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use reqwest::header::{HeaderMap, HeaderValue, AUTHORIZATION, CONTENT_TYPE};
use serde_json::{json, Map, Value};
use tokio::sync::OnceCell;

mod error;
mod introspect;
mod reply;
mod stream;
mod pace;
mod transport;

pub use error::CallError;

/// A non-streamed chat completion's body read as the gate reads a live one (content, reasoning,
/// tool calls, finish reason, ids, logprobs): for replies captured from a server.
pub fn chat_record(body: &Value) -> Record {
    let mut rec = Record::new();
    parse_chat_reply(body, &mut rec);
    finish_plain(&mut rec);
    rec
}
use error::*;
pub use introspect::Introspection;
use introspect::*;
use reply::*;
use stream::*;
use transport::*;

use super::sse::{SseEvent, SseParser};
use crate::error::{Error, Result};
use crate::exchange::{
    ChatRequest, OutputEvent, OutputKind, Record, StreamTrace, TokenLogprob, TopLogprob, Usage,
};
use crate::stack::Stack;

/// Error bodies and malformed payloads are kept up to this many characters.
const KEEP_CHARS: usize = 2000;

/// How to reach an OpenAI-compatible server.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// `http://host:port`, with or without a trailing `/v1` or `/`.
    pub base_url: String,
    /// The `model` field sent with every request.
    pub model: String,
    /// The environment variable holding the API key (sent as `Authorization: Bearer`).
    pub api_key_env: Option<String>,
    pub connect_timeout: Duration,
    /// The longest gap allowed between two reads of a response (headers included).
    pub read_timeout: Duration,
    /// The longest a whole request may take.
    pub total_timeout: Duration,
    /// Body fields sent with every request (server-specific: `repeat_penalty`, …).
    pub extra_body: Map<String, Value>,
    /// The largest non-streamed reply body read; a larger one is a protocol failure.
    pub max_body_bytes: usize,
    /// The most bytes one stream may carry, and the longest SSE line.
    pub max_stream_bytes: usize,
    pub max_line_bytes: usize,
    /// The most reply bytes all of this target's requests in flight may hold together: with
    /// many open streams (an open-loop bench) the per-stream limit alone would not bound memory.
    pub max_in_flight_bytes: usize,
}

/// Defaults that no healthy chat reply comes near, and that bound the gate's memory against a
/// server that never stops sending.
pub const MAX_BODY_BYTES: usize = 16 << 20;
pub const MAX_STREAM_BYTES: usize = 32 << 20;
pub const MAX_LINE_BYTES: usize = 4 << 20;
pub const MAX_IN_FLIGHT_BYTES: usize = 64 << 20;

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            base_url: String::new(),
            model: String::new(),
            api_key_env: None,
            connect_timeout: Duration::from_secs(10),
            read_timeout: Duration::from_secs(60),
            total_timeout: Duration::from_secs(300),
            extra_body: Map::new(),
            max_body_bytes: MAX_BODY_BYTES,
            max_stream_bytes: MAX_STREAM_BYTES,
            max_line_bytes: MAX_LINE_BYTES,
            max_in_flight_bytes: MAX_IN_FLIGHT_BYTES,
        }
    }
}

/// A response as it came, for conformance probes (any status is returned, not an error).
#[derive(Debug, Clone)]
pub struct RawResponse {
    pub status: u16,
    pub content_type: Option<String>,
    pub body: Vec<u8>,
    /// The body parsed as JSON, when it is JSON.
    pub json: Option<Value>,
    /// From just before sending to the end of the body.
    pub elapsed: Duration,
}

/// A client for one OpenAI-compatible server. Cheap to clone.
#[derive(Clone)]
pub struct HttpTarget {
    inner: Arc<Inner>,
    /// Requests known to take far longer than the probes (a prompt of thousands of tokens):
    /// they wait the suite's `total_timeout_s`, not the server's pace (see [`HttpTarget::patient`]).
    patient: bool,
}

struct Inner {
    client: reqwest::Client,
    /// Scheme, host, port and path prefix, without `/v1` and without a trailing `/`.
    base: String,
    /// `base` with any user:password removed, for messages.
    shown: String,
    opts: HttpOptions,
    auth: Option<HeaderValue>,
    introspection: OnceCell<Introspection>,
    /// Generation requests in a row that timed out or were refused.
    failures_in_a_row: AtomicUsize,
    /// Of those, the ones that were answering, only slower than the server's own pace.
    slow_in_a_row: AtomicUsize,
    /// Why the circuit breaker opened: no request is sent after that.
    breaker: std::sync::OnceLock<String>,
    /// Reply bytes held by requests in flight (see `HttpOptions::max_in_flight_bytes`).
    held: AtomicUsize,
    /// Template variables the gate sends with every chat (e.g. the pinned `date_string`),
    /// set once the serving stack is known to take `chat_template_kwargs`.
    template_kwargs: std::sync::OnceLock<Map<String, Value>>,
    /// Requests sent so far (the gate's per-phase table counts them).
    sent: AtomicUsize,
    /// The server's pace, learnt from its replies: how long it may take to answer.
    pace: pace::Pace,
}

pub const BREAKER_THRESHOLD: usize = 3;

impl fmt::Debug for HttpTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let key = match (&self.inner.opts.api_key_env, &self.inner.auth) {
            (Some(var), Some(_)) => format!("<from ${var}>"),
            _ => "none".to_string(),
        };
        f.debug_struct("HttpTarget")
            .field("base_url", &self.inner.shown)
            .field("model", &self.inner.opts.model)
            .field("api_key", &key)
            .finish()
    }
}

/// `http://h:8000/v1/` → `http://h:8000`.
fn normalise_base(raw: &str) -> Result<(String, String)> {
    let mut base = raw.trim().trim_end_matches('/');
    if let Some(stripped) = base.strip_suffix("/v1") {
        base = stripped.trim_end_matches('/');
    }
    let url = reqwest::Url::parse(base).map_err(|e| {
        Error::input(format!("the target base URL {base:?} is not a URL: {e}"))
            .hint("write it as http://HOST:PORT (a trailing /v1 is accepted)")
    })?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(Error::input(format!(
            "the target base URL {base:?} is not an http(s) URL"
        ))
        .hint("write it as http://HOST:PORT (a trailing /v1 is accepted)"));
    }
    let mut shown_url = url.clone();
    let _ = shown_url.set_password(None);
    let _ = shown_url.set_username("");
    let shown = shown_url.as_str().trim_end_matches('/').to_string();
    Ok((base.to_string(), shown))
}

/// The `Authorization` header from the named variable (marked sensitive).
fn auth_header(var: &str) -> Result<HeaderValue> {
    let key = std::env::var(var).map_err(|_| {
        Error::input(format!(
            "the API key variable {var} is not set (or not valid UTF-8)"
        ))
        .hint(format!(
            "export {var}=... before running, or remove api_key_env from the suite's [target]"
        ))
    })?;
    if key.trim().is_empty() {
        return Err(Error::input(format!("the API key variable {var} is empty"))
            .hint(format!("export {var}=... with the server's key")));
    }
    // From here on the key's value is redacted from every output.
    crate::secrets::register(&key);
    let mut v = HeaderValue::from_str(&format!("Bearer {}", key.trim())).map_err(|_| {
        Error::input(format!(
            "the API key in {var} has characters an HTTP header cannot carry"
        ))
    })?;
    v.set_sensitive(true);
    Ok(v)
}

impl HttpTarget {
    pub fn new(opts: HttpOptions) -> Result<HttpTarget> {
        let (base, shown) = normalise_base(&opts.base_url)?;
        let auth = match &opts.api_key_env {
            Some(var) => Some(auth_header(var)?),
            None => None,
        };
        // Reads are bounded by `transport`'s waits, which follow the server's pace (pace.rs)
        // and may exceed `read_timeout`: the client's own read bound is the total timeout.
        let client = reqwest::Client::builder()
            .connect_timeout(opts.connect_timeout)
            .read_timeout(opts.total_timeout.max(opts.read_timeout))
            .build()
            .map_err(|e| Error::input(format!("cannot build the HTTP client: {e}")))?;
        Ok(HttpTarget {
            inner: Arc::new(Inner {
                client,
                base,
                shown,
                opts,
                auth,
                introspection: OnceCell::new(),
                failures_in_a_row: AtomicUsize::new(0),
                breaker: std::sync::OnceLock::new(),
                slow_in_a_row: AtomicUsize::new(0),
                held: AtomicUsize::new(0),
                template_kwargs: std::sync::OnceLock::new(),
                sent: AtomicUsize::new(0),
                pace: pace::Pace::default(),
            }),
            patient: false,
        })
    }

    /// How many requests this target has sent (every route, retries included).
    pub fn requests_sent(&self) -> u64 {
        self.inner.sent.load(Ordering::Relaxed) as u64
    }

    /// The options this target was built with.
    pub fn options(&self) -> &HttpOptions {
        &self.inner.opts
    }

    /// The normalised base URL (no `/v1`, no credentials).
    pub fn base_url(&self) -> &str {
        &self.inner.shown
    }

    fn url(&self, path: &str) -> String {
        format!("{}/{}", self.inner.base, path.trim_start_matches('/'))
    }

    fn shown(&self, path: &str) -> String {
        format!("{}/{}", self.inner.shown, path.trim_start_matches('/'))
    }

    /// Why the circuit breaker is open (the target stopped answering), if it is.
    pub fn breaker_open(&self) -> Option<&str> {
        self.inner.breaker.get().map(String::as_str)
    }

    /// The breaker opened on replies that were coming, only slower than the server's own
    /// pace: a server that slowed down, not one that is gone.
    pub fn breaker_slow(&self) -> bool {
        self.breaker_open().is_some()
            && self.inner.slow_in_a_row.load(Ordering::SeqCst) >= BREAKER_THRESHOLD
    }

    /// A generation request under the total timeout and the circuit breaker.
    async fn generation(
        &self,
        path: &str,
        fut: impl std::future::Future<Output = Result<Record, CallError>>,
    ) -> Result<Record, CallError> {
        if let Some(why) = self.inner.breaker.get() {
            return Err(CallError::Connect {
                url: self.shown(path),
                detail: format!("not sent: {why}"),
            });
        }
        // Until the server has answered once its pace is unknown: one request at a time, so
        // that the first replies are not timed out by the queue behind each other.
        let first = self.inner.pace.until_known().await;
        let flight = self.inner.pace.depart();
        let t0 = Instant::now();
        let r = self
            .with_total(path, fut)
            .await
            .and_then(|rec| self.no_echoed_key(path, rec));
        drop(flight);
        if first.is_some() {
            self.inner.pace.first_ended();
        }
        let r = match r {
            Ok(rec) => {
                if !self.patient {
                    self.inner.pace.answered(t0.elapsed());
                }
                Ok(rec)
            }
            Err(e) => Err(self.inner.pace.explain(e)),
        };
        match &r {
            // A reply slower than the server's own pace counts too: three in a row is a
            // server that stopped, whatever it did before.
            Err(e) if e.unreachable() || e.overloaded() || matches!(e, CallError::Slow { .. }) => {
                let n = self.inner.failures_in_a_row.fetch_add(1, Ordering::SeqCst) + 1;
                let slow = match e {
                    CallError::Slow { .. } => {
                        self.inner.slow_in_a_row.fetch_add(1, Ordering::SeqCst) + 1
                    }
                    _ => {
                        self.inner.slow_in_a_row.store(0, Ordering::SeqCst);
                        0
                    }
                };
                if n >= BREAKER_THRESHOLD {
                    let what = if e.overloaded() {
                        "were turned away as overloaded"
                    } else if slow >= n {
                        "took longer than the server's own pace allows"
                    } else {
                        "timed out or were refused"
                    };
                    let _ = self.inner.breaker.set(format!(
                        "{n} requests in a row {what} (the last: {e}); the gate stopped sending"
                    ));
                }
            }
            _ => {
                self.inner.failures_in_a_row.store(0, Ordering::SeqCst);
                self.inner.slow_in_a_row.store(0, Ordering::SeqCst);
            }
        }
        r
    }

    /// A reply that holds the API key the request carried is not used as a reply: the server
    /// echoes credentials (a finding for the user), and the text must not reach any output.
    fn no_echoed_key(&self, path: &str, rec: Record) -> Result<Record, CallError> {
        let echoed = crate::secrets::contains(&rec.text)
            || crate::secrets::contains(&rec.reasoning)
            || rec
                .tool_calls
                .iter()
                .any(|c| crate::secrets::contains(&c.to_string()));
        if echoed {
            return Err(CallError::Protocol {
                url: self.shown(path),
                detail: "the reply contains the API key the request carried (the server echoes credentials); the reply is not used".into(),
            });
        }
        Ok(rec)
    }

    /// One chat completion (streamed when `req.stream`).
    pub async fn chat(&self, req: &ChatRequest) -> Result<Record, CallError> {
        let body = self.chat_body(req);
        let path = "/v1/chat/completions";
        self.generation(path, async {
            let (resp, mut rec) = self.send_json(path, &body).await?;
            if req.stream && is_event_stream(&resp) {
                self.read_stream(path, resp, rec).await
            } else {
                let bytes = self.read_body(path, resp, &mut rec).await?;
                let v = self.parse_json(path, &bytes)?;
                parse_chat_reply(&v, &mut rec);
                finish_plain(&mut rec);
                Ok(rec)
            }
        })
        .await
    }

    /// Send these template variables with every chat and chat-tokenize request, as
    /// `chat_template_kwargs` (vLLM, SGLang, `transformers serve`, llama-server take them; the
    /// suite's own `extra_body.chat_template_kwargs` win over them). Set once; later calls
    /// are ignored.
    pub fn set_template_kwargs(&self, kwargs: Map<String, Value>) {
        let _ = self.inner.template_kwargs.set(kwargs);
    }

    /// The `chat_template_kwargs` requests carry: the gate's, then the suite's over them.
    fn template_kwargs(&self) -> Option<Map<String, Value>> {
        let mut out = self
            .inner
            .template_kwargs
            .get()
            .cloned()
            .unwrap_or_default();
        if let Some(Value::Object(user)) = self.inner.opts.extra_body.get("chat_template_kwargs") {
            out.extend(user.clone());
        }
        (!out.is_empty()).then_some(out)
    }

    /// The request body of a chat call: fixed fields, then `extra_body`, then `req.extra`.
    pub fn chat_body(&self, req: &ChatRequest) -> Value {
        let mut b = Map::new();
        b.insert("model".into(), json!(self.inner.opts.model));
        b.insert("messages".into(), json!(req.messages));
        if let Some(t) = &req.tools {
            b.insert("tools".into(), json!(t));
        }
        if let Some(m) = req.max_tokens {
            b.insert("max_tokens".into(), json!(m));
        }
        if let Some(t) = req.temperature {
            b.insert("temperature".into(), json!(t));
        }
        if let Some(p) = req.top_p {
            b.insert("top_p".into(), json!(p));
        }
        if let Some(s) = req.seed {
            b.insert("seed".into(), json!(s));
        }
        if !req.stop.is_empty() {
            b.insert("stop".into(), json!(req.stop));
        }
        if let Some(n) = req.top_logprobs {
            b.insert("logprobs".into(), json!(true));
            b.insert("top_logprobs".into(), json!(n));
        }
        b.insert("stream".into(), json!(req.stream));
        if req.stream {
            b.insert("stream_options".into(), json!({"include_usage": true}));
        }
        for (k, v) in self.inner.opts.extra_body.iter().chain(req.extra.iter()) {
            b.insert(k.clone(), v.clone());
        }
        if let Some(kw) = self.template_kwargs() {
            if !req.extra.contains_key("chat_template_kwargs") {
                b.insert("chat_template_kwargs".into(), Value::Object(kw));
            }
        }
        Value::Object(b)
    }

    /// A plain completion over raw prompt ids at temperature 0 (bypasses the chat template:
    /// the checkpoint's own fingerprint).
    pub async fn completion_ids(
        &self,
        prompt_ids: &[u32],
        max_tokens: u32,
        top_logprobs: Option<u8>,
    ) -> Result<Record, CallError> {
        let mut b = Map::new();
        b.insert("model".into(), json!(self.inner.opts.model));
        b.insert("prompt".into(), json!(prompt_ids));
        b.insert("max_tokens".into(), json!(max_tokens));
        b.insert("temperature".into(), json!(0));
        b.insert("stream".into(), json!(false));
        b.insert("logprobs".into(), json!(top_logprobs.unwrap_or(0)));
        for (k, v) in &self.inner.opts.extra_body {
            b.insert(k.clone(), v.clone());
        }
        let body = Value::Object(b);
        let path = "/v1/completions";
        self.generation(path, async {
            let (resp, mut rec) = self.send_json(path, &body).await?;
            let bytes = self.read_body(path, resp, &mut rec).await?;
            let v = self.parse_json(path, &bytes)?;
            parse_completion_reply(&v, &mut rec);
            finish_plain(&mut rec);
            Ok(rec)
        })
        .await
    }

    /// The same server, asking for another `model` (a client is cheap to clone; the
    /// introspection already made is kept).
    pub fn with_model(&self, model: &str) -> HttpTarget {
        let inner = &self.inner;
        let mut opts = inner.opts.clone();
        opts.model = model.to_string();
        let introspection = OnceCell::new_with(inner.introspection.get().cloned());
        HttpTarget {
            inner: Arc::new(Inner {
                client: inner.client.clone(),
                base: inner.base.clone(),
                shown: inner.shown.clone(),
                opts,
                auth: inner.auth.clone(),
                introspection,
                failures_in_a_row: AtomicUsize::new(0),
                breaker: std::sync::OnceLock::new(),
                slow_in_a_row: AtomicUsize::new(0),
                held: AtomicUsize::new(0),
                template_kwargs: std::sync::OnceLock::new(),
                sent: AtomicUsize::new(0),
                pace: pace::Pace::default(),
            }),
            patient: false,
        }
    }

    /// The same client for requests known to take far longer than the probes: the pace is
    /// learnt on the probes' short replies, and a 4k-token prompt's prefill on a CPU server
    /// (20–35 s for Gemma 3 270M under llama-cpp-python) is not slowness. Such a request waits
    /// up to the suite's `total_timeout_s`, and its time does not set the pace.
    pub fn patient(&self) -> HttpTarget {
        HttpTarget {
            inner: self.inner.clone(),
            patient: true,
        }
    }

    /// `POST path` expecting a 2xx JSON reply (any other status is a `CallError::Status`).
    pub async fn post_ok_json(&self, path: &str, body: &Value) -> Result<Value, CallError> {
        self.post_ok(path, body).await
    }

    /// A reply that is not what the protocol promises, as the error a check reports.
    pub fn protocol_error(&self, path: &str, detail: &str) -> CallError {
        self.protocol(path, detail)
    }

    /// `GET path` (relative to the server root, e.g. `/v1/models`).
    pub async fn get(&self, path: &str) -> Result<RawResponse, CallError> {
        let rb = self.inner.client.get(self.url(path));
        self.raw(path, rb).await
    }

    /// `POST path` with a JSON body.
    pub async fn post_json(&self, path: &str, body: &Value) -> Result<RawResponse, CallError> {
        let rb = self.inner.client.post(self.url(path)).json(body);
        self.raw(path, rb).await
    }

    /// `POST path` with any bytes (malformed-JSON and wrong-content-type probes).
    pub async fn post_bytes(
        &self,
        path: &str,
        body: Vec<u8>,
        content_type: &str,
    ) -> Result<RawResponse, CallError> {
        let rb = self
            .inner
            .client
            .post(self.url(path))
            .header(CONTENT_TYPE, content_type)
            .body(body);
        self.raw(path, rb).await
    }
}
