//! Sending a request and reading the reply within bounds: timeouts, sizes, the bytes held by
//! every request in flight, and an error for each way a read fails.
use super::*;

/// One request's share of `Inner::held`, given back when the read ends however it ends.
pub(super) struct Held<'a> {
    total: &'a AtomicUsize,
    mine: usize,
}

impl Held<'_> {
    /// Count `n` more bytes; the total all requests now hold.
    pub(super) fn add(&mut self, n: usize) -> usize {
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
impl HttpTarget {
    pub(super) async fn raw(
        &self,
        path: &str,
        rb: reqwest::RequestBuilder,
    ) -> Result<RawResponse, CallError> {
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
    pub(super) async fn with_total<T>(
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

    pub(super) fn headers(&self) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Some(a) = &self.inner.auth {
            h.insert(AUTHORIZATION, a.clone());
        }
        h
    }

    /// Send and wait for the headers; the wait is bounded by connect + read timeouts.
    pub(super) async fn send(
        &self,
        path: &str,
        rb: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, CallError> {
        let o = &self.inner.opts;
        self.inner.sent.fetch_add(1, Ordering::Relaxed);
        let read = self.read_wait();
        match tokio::time::timeout(o.connect_timeout + read, rb.headers(self.headers()).send())
            .await
        {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) => Err(self.classify(path, e)),
            Err(_) => Err(CallError::Timeout {
                url: self.shown(path),
                phase: "read",
                after: read,
            }),
        }
    }

    /// How long a read may wait: the suite's read timeout, longer where the server's pace says
    /// a reply takes longer (pace.rs).
    fn read_wait(&self) -> Duration {
        let o = &self.inner.opts;
        if self.patient {
            return o.total_timeout.max(o.read_timeout);
        }
        self.inner.pace.read_wait(o.read_timeout, o.total_timeout)
    }

    /// POST JSON, returning the response and a record with `t_send`/`t_headers` set.
    pub(super) async fn send_json(
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

    pub(super) fn classify(&self, path: &str, e: reqwest::Error) -> CallError {
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
    pub(super) async fn next_chunk<S, B>(
        &self,
        path: &str,
        stream: &mut S,
    ) -> Result<Option<B>, ChunkErr>
    where
        S: futures_util::Stream<Item = reqwest::Result<B>> + Unpin,
    {
        let read = self.read_wait();
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
    pub(super) async fn read_bytes(
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
    pub(super) fn status_error(
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
    pub(super) fn hold(&self) -> Held<'_> {
        Held {
            total: &self.inner.held,
            mine: 0,
        }
    }

    /// The replies in flight together past `max_in_flight_bytes`: this one stops there.
    pub(super) fn in_flight_too_large(&self, path: &str) -> CallError {
        CallError::Protocol {
            url: self.shown(path),
            detail: format!(
                "the replies in flight together exceeded {} MiB; this one stopped there (lower the load's concurrency, or raise [target] max_in_flight_mb if the server is right)",
                self.inner.opts.max_in_flight_bytes >> 20
            ),
        }
    }

    /// A reply past a size limit: reading stops there, so memory stays bounded.
    pub(super) fn too_large(&self, path: &str, what: &str, limit: usize, key: &str) -> CallError {
        CallError::Protocol {
            url: self.shown(path),
            detail: format!(
                "the {what} exceeded {} MiB; reading stopped there (raise [target] {key} if the server is right)",
                limit >> 20
            ),
        }
    }

    /// The body of a reply that must be 2xx.
    pub(super) async fn read_body(
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

    pub(super) fn parse_json(&self, path: &str, bytes: &[u8]) -> Result<Value, CallError> {
        serde_json::from_slice(bytes).map_err(|e| CallError::Protocol {
            url: self.shown(path),
            detail: format!(
                "the body is not JSON ({e}): {}",
                truncate(&String::from_utf8_lossy(bytes), 200)
            ),
        })
    }

    /// Read an SSE body into `rec`, timestamping each read as it arrives.
    pub(super) async fn read_stream(
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
}

/// Why reading the next chunk failed.
pub(super) enum ChunkErr {
    Timeout(CallError),
    /// The connection dropped; the detail says how.
    Dropped(String),
}

/// A `Retry-After` header as the server sent it (seconds or an HTTP date), bounded in length.
pub(super) fn retry_after(resp: &reqwest::Response) -> Option<String> {
    let v = resp.headers().get(reqwest::header::RETRY_AFTER)?;
    Some(truncate(&String::from_utf8_lossy(v.as_bytes()), 64))
}

pub(super) fn content_type(resp: &reqwest::Response) -> Option<String> {
    resp.headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// A streamed reply is read as SSE unless the server answered with plain JSON (some servers
/// ignore `stream: true`; errors come back as JSON).
pub(super) fn is_event_stream(resp: &reqwest::Response) -> bool {
    let ct = content_type(resp).unwrap_or_default().to_ascii_lowercase();
    resp.status().is_success() && !ct.starts_with("application/json")
}
