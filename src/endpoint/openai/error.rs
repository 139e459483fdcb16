//! Why a call failed, in one readable line without secrets: the server is down (exit 3), or it
//! answered wrongly (a finding).
use super::*;

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
    /// No reply in time from a server that has answered before: slower than its own pace
    /// (not unreachable; pace.rs).
    Slow { url: String, detail: String },
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
            | CallError::Slow { url, .. }
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
            CallError::Slow { url, detail } => write!(f, "{url}: {detail}"),
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

impl CallError {
    pub(super) fn to_string_detail(&self) -> String {
        match self {
            CallError::Connect { detail, .. }
            | CallError::Slow { detail, .. }
            | CallError::Protocol { detail, .. }
            | CallError::Interrupted { detail, .. } => detail.clone(),
            other => other.to_string(),
        }
    }
}

/// An error and its causes, joined (reqwest's top-level message alone says little).
pub(super) fn error_chain(e: &dyn std::error::Error) -> String {
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

/// A request that died on a reused connection before the server answered anything.
pub(super) fn stale_connection(e: &CallError) -> bool {
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

pub(super) fn truncate(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}
