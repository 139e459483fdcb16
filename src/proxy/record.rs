//! The recording: one JSONL line per exchange (what the client sent, what the server answered),
//! which the client boundary later diffs against the suite's `[client]` contract.
//!
//! Secrets never reach the file: only allow-listed headers keep their values (the others,
//! `authorization` and cookies included, are written as `<redacted>`), query parameters and
//! JSON body fields named like credentials are redacted, and so is any registered secret
//! (the upstream URL's password) wherever it appears. Lines are appended with a single
//! write on a file opened in append mode, under a mutex, so concurrent exchanges never
//! interleave within a line and a crash leaves at most one torn last line.
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use axum::http::HeaderMap;
use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{Error, Result};

pub const REDACTED: &str = "<redacted>";

/// One request/response exchange as recorded.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Exchange {
    /// When the request arrived (RFC 3339).
    pub ts: String,
    pub method: String,
    pub path: String,
    /// The raw query string, without `?`.
    #[serde(default)]
    pub query: Option<String>,
    /// Lower-case header names; repeated headers joined with ", "; secrets redacted.
    #[serde(default)]
    pub request_headers: IndexMap<String, String>,
    /// The body as JSON when it parses, else as a string (null when empty).
    #[serde(default)]
    pub request_body: Value,
    /// The status the client got (502 when the upstream was unreachable).
    pub status: u16,
    #[serde(default)]
    pub content_type: Option<String>,
    /// JSON when it parses, a string otherwise; for SSE the list of `data` payloads (each JSON
    /// when it parses, else the string, e.g. "[DONE]").
    #[serde(default)]
    pub response_body: Value,
    /// Whether the response was an SSE stream.
    #[serde(default)]
    pub stream: bool,
    pub timings: ExchangeTimings,
    /// What went wrong in transit (upstream unreachable or failed mid-body, client gone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Default)]
pub struct ExchangeTimings {
    /// From the request's arrival to the upstream's response headers.
    pub headers_ms: f64,
    /// From the request's arrival to the last byte sent to the client.
    pub end_ms: f64,
}

/// Headers whose values are recorded; every other header is recorded by name with its value
/// `<redacted>` (an allow-list: an unknown auth header such as `X-Auth` never leaks).
const RECORDED_HEADERS: &[&str] = &[
    "accept",
    "accept-encoding",
    "cache-control",
    "connection",
    "content-encoding",
    "content-length",
    "content-type",
    "host",
    "openai-organization",
    "openai-project",
    "transfer-encoding",
    "user-agent",
    "x-request-id",
    "x-stainless-arch",
    "x-stainless-lang",
    "x-stainless-os",
    "x-stainless-package-version",
    "x-stainless-retry-count",
    "x-stainless-runtime",
    "x-stainless-runtime-version",
];

/// Whether a header's value must not be written to the recording.
pub fn is_secret(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    !RECORDED_HEADERS.contains(&n.as_str())
}

/// Headers as recorded: lower-case names, repeated values joined, secrets redacted.
pub fn redacted_headers(headers: &HeaderMap) -> IndexMap<String, String> {
    let mut out: IndexMap<String, String> = IndexMap::new();
    for (name, value) in headers {
        let name = name.as_str().to_ascii_lowercase();
        let value = if is_secret(&name) {
            REDACTED.to_string()
        } else {
            String::from_utf8_lossy(value.as_bytes()).into_owned()
        };
        match out.get_mut(&name) {
            Some(v) if v != REDACTED => {
                v.push_str(", ");
                v.push_str(&value);
            }
            Some(_) => {}
            None => {
                out.insert(name, value);
            }
        }
    }
    out
}

/// A body as JSON when it parses, else as (lossy) text; an empty body is null.
pub fn body_value(bytes: &[u8]) -> Value {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Value::Null;
    }
    serde_json::from_slice(bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(bytes).into_owned()))
}

/// An SSE payload as JSON when it parses, else the string.
pub fn payload_value(data: &str) -> Value {
    serde_json::from_str(data).unwrap_or_else(|_| Value::String(data.to_string()))
}

/// Appends exchanges to the recording file.
#[derive(Debug)]
pub struct Recorder {
    path: PathBuf,
    file: Mutex<File>,
}

impl Recorder {
    /// Open (or create) `path` for appending.
    pub fn open(path: &Path) -> Result<Recorder> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| {
                Error::in_file(
                    path,
                    format!("cannot open the recording for appending: {e}"),
                )
                .hint("check that the folder exists and is writable")
            })?;
        Ok(Recorder {
            path: path.to_path_buf(),
            file: Mutex::new(file),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Append one exchange as one line, with one write.
    pub fn append(&self, ex: &Exchange) -> Result<()> {
        let mut ex = ex.clone();
        crate::secrets::redact_json(&mut ex.request_body);
        crate::secrets::redact_json(&mut ex.response_body);
        ex.query = ex.query.as_deref().map(crate::secrets::redact_query);
        ex.path = crate::secrets::redact(&ex.path).into_owned();
        ex.error = ex
            .error
            .as_deref()
            .map(|e| crate::secrets::redact(e).into_owned());
        let line = serde_json::to_string(&ex)
            .map_err(|e| Error::input(format!("cannot serialize an exchange: {e}")))?;
        let mut line = crate::secrets::redact(&line).into_owned();
        line.push('\n');
        let mut file = self
            .file
            .lock()
            .map_err(|_| Error::in_file(&self.path, "the recording lock is poisoned"))?;
        file.write_all(line.as_bytes())
            .map_err(|e| Error::in_file(&self.path, format!("cannot append: {e}")))
    }
}

/// One exchange of a recording, with the line it came from.
#[derive(Debug, Clone)]
pub struct RecordedExchange {
    /// 1-based line number in the recording.
    pub line: usize,
    pub exchange: Exchange,
}

/// Read a recording, naming the file and line of anything malformed. Blank lines are skipped.
pub fn read_recording(path: &Path) -> Result<Vec<RecordedExchange>> {
    let text = crate::error::read_to_string(path)?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let exchange: Exchange = serde_json::from_str(line).map_err(|e| {
            Error::in_file(
                path,
                format!("line {}: not a recorded exchange: {e}", i + 1),
            )
            .hint("record with `chatgate proxy --record FILE`; each line is one exchange")
        })?;
        out.push(RecordedExchange {
            line: i + 1,
            exchange,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn secrets_are_redacted_and_repeats_joined() {
        let mut h = HeaderMap::new();
        h.insert("authorization", HeaderValue::from_static("Bearer sk-1"));
        h.insert("x-api-key", HeaderValue::from_static("k"));
        h.insert("x-auth-token", HeaderValue::from_static("t"));
        h.append("accept", HeaderValue::from_static("a"));
        h.append("accept", HeaderValue::from_static("b"));
        let r = redacted_headers(&h);
        assert_eq!(r["authorization"], REDACTED);
        assert_eq!(r["x-api-key"], REDACTED);
        assert_eq!(r["x-auth-token"], REDACTED);
        assert_eq!(r["accept"], "a, b");
    }

    #[test]
    fn bodies_are_json_when_they_parse() {
        assert_eq!(body_value(b""), Value::Null);
        assert_eq!(body_value(b"{\"a\":1}")["a"], 1);
        assert_eq!(body_value(b"not json"), Value::String("not json".into()));
    }

    #[test]
    fn a_malformed_line_names_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("rec.jsonl");
        let rec = Recorder::open(&p).unwrap();
        let ex = Exchange {
            ts: "2025-01-01T00:00:00Z".into(),
            method: "POST".into(),
            path: "/v1/chat/completions".into(),
            query: None,
            request_headers: IndexMap::new(),
            request_body: Value::Null,
            status: 200,
            content_type: None,
            response_body: Value::Null,
            stream: false,
            timings: ExchangeTimings::default(),
            error: None,
        };
        rec.append(&ex).unwrap();
        assert_eq!(read_recording(&p).unwrap()[0].exchange, ex);
        std::fs::write(
            &p,
            format!("{}\n{{oops\n", serde_json::to_string(&ex).unwrap()),
        )
        .unwrap();
        let err = read_recording(&p).unwrap_err().to_string();
        assert!(err.contains("rec.jsonl") && err.contains("line 2"), "{err}");
    }
}
