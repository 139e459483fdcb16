//! The client boundary: `chatgate proxy` sits between a real client and the server, records
//! both sides, and can serve hostile-but-legal SSE to test the client's stream handling.
//!
//! Why a proxy: what an application really sends (endpoint, model name, sampling parameters,
//! stream flag, message shapes) is rarely what its configuration claims. Recording the wire and
//! diffing it against the suite's `[client]` contract (`chain::client`) settles it; serving the
//! same payloads with hostile framing (`hostile`) shows whether the client's SSE reader is
//! spec-correct.
//!
//! Layout: `forward` (the one axum handler and the body pump), `record` (the JSONL recording
//! and its reader), `hostile` (the re-framing, variant by variant), `probe` (a user's client
//! run through each variant). Upstream SSE is read with the project's own
//! spec-correct reader, `crate::endpoint::sse`.
pub mod forward;
pub mod hostile;
pub mod probe;
pub mod record;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::mpsc;

pub use hostile::{HostileSse, Variant, VARIANTS};
pub use record::{read_recording, Exchange, ExchangeTimings, RecordedExchange, Recorder};

use crate::error::{Error, Result};

/// What `chatgate proxy` was asked to do.
#[derive(Debug, Clone, Default)]
pub struct ProxyOptions {
    /// The server's base URL, e.g. `http://127.0.0.1:8000`; request paths are appended verbatim.
    pub upstream: String,
    /// Append every exchange to this JSONL file.
    pub record: Option<PathBuf>,
    /// Re-frame streamed responses as hostile-but-legal SSE.
    pub hostile: Option<HostileSse>,
}

/// Everything the handler shares.
pub struct ProxyState {
    /// The upstream base URL as given (for messages).
    pub upstream: String,
    /// The base with no trailing slash, to which request paths are appended.
    base: String,
    client: reqwest::Client,
    recorder: Option<Recorder>,
    hostile: Option<HostileSse>,
    /// Every body pump holds a clone of this sender until its exchange is recorded; shutdown
    /// drops the original and waits on `drained`, so no exchange is lost on SIGTERM.
    inflight: Mutex<Option<mpsc::Sender<()>>>,
    drained: Mutex<Option<mpsc::Receiver<()>>>,
}

impl ProxyState {
    /// Check the upstream URL, open the recording, build the HTTP client.
    pub fn new(opts: &ProxyOptions) -> Result<Arc<ProxyState>> {
        let url = reqwest::Url::parse(&opts.upstream).map_err(|e| {
            Error::input(format!("--upstream {:?} is not a URL: {e}", opts.upstream))
                .hint("give the server's base URL, e.g. http://127.0.0.1:8000")
        })?;
        if !matches!(url.scheme(), "http" | "https") || url.query().is_some() {
            return Err(Error::input(format!(
                "--upstream {:?} must be an http(s) base URL without a query",
                opts.upstream
            ))
            .hint("e.g. http://127.0.0.1:8000; the client's paths are appended to it"));
        }
        if opts
            .hostile
            .as_ref()
            .is_some_and(|h| h.chunk_bytes == Some(0))
        {
            return Err(Error::input("--chunk-bytes must be at least 1"));
        }
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| Error::input(format!("cannot build the HTTP client: {e}")))?;
        let recorder = opts.record.as_deref().map(Recorder::open).transpose()?;
        let (inflight, drained) = mpsc::channel(1);
        Ok(Arc::new(ProxyState {
            upstream: opts.upstream.clone(),
            base: url.as_str().trim_end_matches('/').to_string(),
            client,
            recorder,
            hostile: opts.hostile.clone(),
            inflight: Mutex::new(Some(inflight)),
            drained: Mutex::new(Some(drained)),
        }))
    }

    /// The upstream URL of a request path and query.
    fn target_url(&self, path: &str, query: Option<&str>) -> String {
        match query {
            Some(q) => format!("{}{path}?{q}", self.base),
            None => format!("{}{path}", self.base),
        }
    }

    /// A token a body pump holds while its exchange is in flight (None once shutting down).
    fn inflight_token(&self) -> Option<mpsc::Sender<()>> {
        self.inflight.lock().ok().and_then(|t| t.clone())
    }

    /// Wait until every in-flight exchange has been recorded.
    async fn drain(&self) {
        if let Ok(mut t) = self.inflight.lock() {
            t.take();
        }
        let rx = self.drained.lock().ok().and_then(|mut r| r.take());
        if let Some(mut rx) = rx {
            while rx.recv().await.is_some() {}
        }
    }

    /// Append an exchange; a failing write is reported but never breaks the client's traffic.
    pub(crate) fn record(&self, ex: &Exchange) {
        if let Some(rec) = &self.recorder {
            if let Err(e) = rec.append(ex) {
                eprintln!("chatgate proxy: {e}");
            }
        }
    }
}

/// The axum application: every method and path goes to the forwarding handler.
pub fn router(state: Arc<ProxyState>) -> axum::Router {
    axum::Router::new()
        .fallback(forward::forward)
        .with_state(state)
}

/// Serve on `listener` until `shutdown` resolves, then finish in-flight exchanges and their
/// records.
/// Nagle is off so the small reads of a hostile stream leave one by one.
pub async fn serve(
    listener: TcpListener,
    state: Arc<ProxyState>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use axum::serve::ListenerExt;
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    // Graceful shutdown waits for open connections; a stalled client would hold it forever.
    // After DRAIN it stops waiting: exchanges still in flight are recorded as abandoned when
    // their handlers are dropped (the runtime drops them on exit).
    let (tx, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = tx.send(true);
    });
    let fired = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|v| *v).await;
    };
    let served = std::future::IntoFuture::into_future(
        axum::serve(listener, router(state.clone())).with_graceful_shutdown(fired(rx.clone())),
    );
    let bounded = async {
        fired(rx).await;
        tokio::time::sleep(DRAIN).await;
        eprintln!(
            "chatgate proxy: stopped waiting for open connections after {} s",
            DRAIN.as_secs()
        );
        Ok(())
    };
    let served = tokio::select! {
        r = served => r,
        r = bounded => r,
    };
    state.drain().await;
    served
}

/// How long a shutdown waits for open exchanges to finish.
const DRAIN: std::time::Duration = std::time::Duration::from_secs(5);

/// Bind `addr`, with the error a user can act on.
pub async fn bind(addr: &str) -> Result<(TcpListener, SocketAddr)> {
    let err = |e: std::io::Error| {
        Error::input(format!("cannot listen on {addr}: {e}"))
            .hint("pick another --listen address (port 0 picks a free one)")
    };
    let listener = TcpListener::bind(addr).await.map_err(err)?;
    let local = listener.local_addr().map_err(err)?;
    Ok((listener, local))
}

/// A proxy running on a task of the current runtime (tests, embedding): `url()`, `stop()`.
pub type RunningProxy = crate::serve::RunningServer;

/// Bind `addr` (e.g. "127.0.0.1:0") and proxy to `opts.upstream` on a background task.
pub async fn start(opts: &ProxyOptions, addr: &str) -> Result<RunningProxy> {
    let state = ProxyState::new(opts)?;
    let (listener, local) = bind(addr).await?;
    Ok(RunningProxy::spawn(local, |shutdown| {
        serve(listener, state, shutdown)
    }))
}
