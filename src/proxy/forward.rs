//! Forwarding one exchange: the client's request goes upstream verbatim (minus hop-by-hop
//! headers), the response streams back as it arrives, and a pump task tees what passes through
//! into the recording once the response has ended.
//!
//! The pump writes the exchange to the recording *before* it ends the client's body, so a client
//! that has read a whole response can rely on its line being in the file.
use std::sync::Arc;
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::header::{CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, HOST};
use axum::http::{HeaderMap, HeaderName, StatusCode};
use axum::response::{IntoResponse, Response};
use futures_util::{Stream, StreamExt};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::hostile::{HostileSse, PAUSE, PAUSE_EVERY};
use super::record::{body_value, payload_value, redacted_headers, Exchange, ExchangeTimings};
use super::ProxyState;
use crate::endpoint::sse::{SseEvent, SseParser};
use crate::serve::ApiError;

/// The largest request body forwarded (the request is read whole so it can be recorded).
const MAX_REQUEST_BYTES: usize = 32 << 20;
/// The most of a non-streamed response body kept for the recording (all of it is forwarded).
const MAX_RECORDED_BYTES: usize = 16 << 20;

/// Headers that describe one connection, not the message (RFC 9110 §7.6.1); never forwarded.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

const DISCONNECTED: &str = "the client disconnected before the end of the response";

type Chunk = Result<Bytes, std::io::Error>;

/// The axum handler for every method and path.
pub async fn forward(State(st): State<Arc<ProxyState>>, req: Request) -> Response {
    let started = Instant::now();
    let ts = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let (parts, body) = req.into_parts();
    let body = match axum::body::to_bytes(body, MAX_REQUEST_BYTES).await {
        Ok(b) => b,
        Err(e) => return body_error(e).into_response(),
    };
    let ex = Exchange {
        ts,
        method: parts.method.to_string(),
        path: parts.uri.path().to_string(),
        query: parts.uri.query().map(str::to_string),
        request_headers: redacted_headers(&parts.headers),
        request_body: body_value(&body),
        status: 0,
        content_type: None,
        response_body: serde_json::Value::Null,
        stream: false,
        timings: ExchangeTimings::default(),
        error: None,
    };
    let url = st.target_url(parts.uri.path(), parts.uri.query());
    let mut upstream_req = st.client.request(parts.method.clone(), &url).body(body);
    for (name, value) in forwarded(&parts.headers, &[HOST, CONTENT_LENGTH]) {
        upstream_req = upstream_req.header(name, value);
    }
    // A client that gives up while the upstream has not answered drops this future: the guard
    // records the exchange then, so an unanswered request is never lost from the recording.
    let mut guard = Abandoned(Some((st.clone(), ex, started)));
    let sent = upstream_req.send().await;
    let (st, ex, started) = match guard.0.take() {
        Some(parts) => parts,
        None => return ApiError::bad_request("internal: the exchange was lost").into_response(),
    };
    match sent {
        Ok(resp) => respond(st, resp, ex, started),
        Err(e) => unreachable_upstream(&st, ex, started, &url, &e),
    }
}

/// Records the exchange if the handler is dropped before the upstream answered.
struct Abandoned(Option<(Arc<ProxyState>, Exchange, Instant)>);

impl Drop for Abandoned {
    fn drop(&mut self) {
        if let Some((st, mut ex, started)) = self.0.take() {
            ex.error =
                Some("the client gave up before the upstream sent response headers".to_string());
            ex.timings.end_ms = started.elapsed().as_secs_f64() * 1000.0;
            st.record(&ex);
        }
    }
}

/// The request body could not be read (too large, or the client broke off).
fn body_error(e: axum::Error) -> ApiError {
    let msg = e.to_string();
    if msg.contains("length limit") {
        ApiError {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            message: format!("the request body exceeds {MAX_REQUEST_BYTES} bytes"),
            kind: "invalid_request_error",
            param: None,
            code: Some("request_too_large"),
        }
    } else {
        ApiError::bad_request(format!("cannot read the request body: {msg}"))
    }
}

/// The headers to pass on: all but hop-by-hop ones, those the `Connection` header names, and
/// `skip`.
fn forwarded<'a>(
    headers: &'a HeaderMap,
    skip: &'a [HeaderName],
) -> impl Iterator<Item = (&'a HeaderName, &'a axum::http::HeaderValue)> + 'a {
    let listed: Vec<String> = headers
        .get_all(CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|s| s.trim().to_ascii_lowercase())
        .collect();
    headers.iter().filter(move |(name, _)| {
        let n = name.as_str();
        !HOP_BY_HOP.contains(&n) && !listed.iter().any(|l| l == n) && !skip.contains(name)
    })
}

/// A reqwest error with its causes, e.g. "error sending request: … Connection refused".
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut msg = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !msg.contains(&text) {
            msg.push_str(": ");
            msg.push_str(&text);
        }
        source = s.source();
    }
    msg
}

/// 502 with an OpenAI-shaped body naming the upstream; the exchange is still recorded.
fn unreachable_upstream(
    st: &ProxyState,
    mut ex: Exchange,
    started: Instant,
    url: &str,
    e: &reqwest::Error,
) -> Response {
    let err = ApiError {
        status: StatusCode::BAD_GATEWAY,
        message: format!(
            "chatgate proxy: cannot reach the upstream {} ({url}): {}",
            st.upstream,
            error_chain(e)
        ),
        kind: "server_error",
        param: None,
        code: Some("upstream_unreachable"),
    };
    let ms = started.elapsed().as_secs_f64() * 1e3;
    ex.status = err.status.as_u16();
    ex.content_type = Some("application/json".into());
    ex.response_body = err.body();
    ex.timings = ExchangeTimings {
        headers_ms: ms,
        end_ms: ms,
    };
    ex.error = Some(err.message.clone());
    st.record(&ex);
    err.into_response()
}

/// Pass the upstream's status and headers on now, and its body as it arrives.
fn respond(
    st: Arc<ProxyState>,
    resp: reqwest::Response,
    mut ex: Exchange,
    started: Instant,
) -> Response {
    let status = resp.status();
    let content_type = resp
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let sse = content_type.as_deref().is_some_and(|c| {
        c.trim_start()
            .to_ascii_lowercase()
            .starts_with("text/event-stream")
    });
    let hostile = st.hostile.clone().filter(|_| sse);
    ex.status = status.as_u16();
    ex.content_type = content_type;
    ex.stream = sse;
    ex.timings.headers_ms = started.elapsed().as_secs_f64() * 1e3;
    // Re-framed bodies change length; a hostile stream is sent one read per chunk.
    let skip: &[HeaderName] = if hostile.is_some() {
        &[CONTENT_LENGTH]
    } else {
        &[]
    };
    let mut builder = Response::builder().status(status);
    for (name, value) in forwarded(resp.headers(), skip) {
        builder = builder.header(name, value);
    }
    let (tx, rx) = mpsc::channel::<Chunk>(if hostile.is_some() { 1 } else { 16 });
    let pump = Pump {
        _inflight: st.inflight_token(),
        st,
        tx,
        ex,
        started,
        sse,
        hostile,
    };
    tokio::spawn(pump.run(resp.bytes_stream()));
    builder
        .body(Body::from_stream(ReceiverStream::new(rx)))
        .unwrap_or_else(|e| {
            ApiError::internal(format!("cannot build the response: {e}")).into_response()
        })
}

/// Moves one response body from the upstream to the client and records it at the end.
struct Pump {
    st: Arc<ProxyState>,
    tx: mpsc::Sender<Chunk>,
    ex: Exchange,
    started: Instant,
    sse: bool,
    hostile: Option<HostileSse>,
    /// Held until the exchange is recorded (see `ProxyState::drain`); taken before the pump is
    /// spawned so a shutdown cannot slip in between.
    _inflight: Option<mpsc::Sender<()>>,
}

/// What passed through, for the recording.
#[derive(Default)]
struct Seen {
    raw: Vec<u8>,
    truncated: bool,
    payloads: Vec<String>,
    /// Events re-framed so far (the hostile framing rotates with it).
    events: usize,
}

impl Pump {
    async fn run(self, mut upstream: impl Stream<Item = reqwest::Result<Bytes>> + Unpin) {
        let mut parser = SseParser::new();
        let mut seen = Seen::default();
        let mut error = None;
        loop {
            // A client that leaves is noticed at once, not at the upstream's next chunk, so a
            // slow generation upstream is cancelled (its request dropped) right away.
            let item = tokio::select! {
                item = upstream.next() => item,
                _ = self.tx.closed() => {
                    error = Some(DISCONNECTED.to_string());
                    break;
                }
            };
            let Some(item) = item else { break };
            let chunk = match item {
                Ok(c) => c,
                Err(e) => {
                    let msg = format!("the upstream failed mid-body: {}", error_chain(&e));
                    let _ = self.tx.send(Err(std::io::Error::other(msg.clone()))).await;
                    error = Some(msg);
                    break;
                }
            };
            let events = if self.sse {
                // Comments (`: keep-alive`) are neither recorded nor re-framed.
                let mut events = parser.push(&chunk);
                events.retain(|e| matches!(e, SseEvent::Message { .. }));
                events
            } else {
                seen.keep(&chunk);
                Vec::new()
            };
            let delivered = match &self.hostile {
                None => self.tx.send(Ok(chunk)).await.is_ok(),
                Some(h) => self.send_hostile(&events, &mut seen, h).await,
            };
            seen.payloads
                .extend(events.into_iter().filter_map(|e| match e {
                    SseEvent::Message { data, .. } => Some(data),
                    SseEvent::Comment(_) => None,
                }));
            if !delivered {
                error = Some(DISCONNECTED.to_string());
                break;
            }
        }
        self.finish(seen, error);
    }

    /// Each event re-framed and sent as the variants' reads (the preamble before the first,
    /// the keep-alive pause after it), yielding after each read so they reach the socket
    /// separately.
    async fn send_hostile(&self, events: &[SseEvent], seen: &mut Seen, h: &HostileSse) -> bool {
        for ev in events {
            let k = seen.events;
            if k == 0 && !self.send_reads(h, &h.preamble()).await {
                return false;
            }
            if !self.send_reads(h, &h.frame_event(ev, k)).await {
                return false;
            }
            if h.pauses_after(k) {
                let until = Instant::now() + PAUSE;
                while Instant::now() < until {
                    tokio::time::sleep(PAUSE_EVERY).await;
                    if !self.send_reads(h, &h.keep_alive(k)).await {
                        return false;
                    }
                }
            }
            seen.events += 1;
        }
        true
    }

    async fn send_reads(&self, h: &HostileSse, bytes: &[u8]) -> bool {
        for read in h.reads(bytes) {
            if self.tx.send(Ok(Bytes::from(read))).await.is_err() {
                return false;
            }
            tokio::task::yield_now().await;
        }
        true
    }

    /// Record the exchange, then end the client's body (by dropping the sender).
    fn finish(mut self, seen: Seen, error: Option<String>) {
        self.ex.response_body = if self.sse {
            serde_json::Value::Array(seen.payloads.iter().map(|p| payload_value(p)).collect())
        } else {
            body_value(&seen.raw)
        };
        self.ex.timings.end_ms = self.started.elapsed().as_secs_f64() * 1e3;
        self.ex.error = error.or_else(|| {
            seen.truncated.then(|| {
                format!("response body truncated to {MAX_RECORDED_BYTES} bytes in the recording")
            })
        });
        self.st.record(&self.ex);
    }
}

impl Seen {
    fn keep(&mut self, chunk: &[u8]) {
        let room = MAX_RECORDED_BYTES.saturating_sub(self.raw.len());
        if chunk.len() > room {
            self.truncated = true;
        }
        self.raw.extend_from_slice(&chunk[..chunk.len().min(room)]);
    }
}
