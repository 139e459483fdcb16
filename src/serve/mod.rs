//! `chatgate serve`: an OpenAI-compatible HTTP server over the in-process candle model, with
//! the bug zoo's server-side faults injectable on purpose (`--fault NAME`).
//!
//! Layout: `routes` (axum handlers), `openai` (request fields and response shapes), `sse`
//! (stream framing), `engine` (the model behind a mutex on a blocking thread, prompt
//! construction, fault application), `faults` (the fault list and its help), `errors`
//! (OpenAI-shaped errors).
//!
//! One model serves one request at a time: requests queue on the mutex; a stream is fed
//! through a channel from the blocking generation, and a client that disconnects cancels its
//! generation at the next token.
pub mod engine;
pub mod errors;
pub mod faults;
pub mod metrics;
pub mod openai;
pub mod routes;
pub mod sse;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub use errors::ApiError;
pub use faults::{Fault, Faults, FAULTS_HELP};

use crate::error::{Error, Result};
use engine::Engine;
use openai::TokenStrings;

/// What `chatgate serve` was asked to serve.
#[derive(Debug, Clone, Default)]
pub struct ServeOptions {
    /// A model directory or a .gguf file.
    pub model: PathBuf,
    /// The name clients use (default: the directory's name, or the .gguf file's stem).
    pub model_name: Option<String>,
    pub faults: Vec<Fault>,
    /// `base-checkpoint`'s model (default: a sibling directory named `tiny-base`).
    pub fault_model: Option<PathBuf>,
    /// The least time each request holds the model (`--service-ms`): with one request at a
    /// time, a server whose capacity is known, 1/service_time requests per second.
    pub service_time: Option<std::time::Duration>,
}

/// Token ids to text, outside the model lock.
pub struct Tokens(Option<tokenizers::Tokenizer>);

impl Tokens {
    pub fn decode(&self, ids: &[u32]) -> Result<String, ApiError> {
        let t = self
            .0
            .as_ref()
            .ok_or_else(|| ApiError::bad_request("the served model has no tokenizer"))?;
        t.decode(ids, false)
            .map_err(|e| ApiError::invalid("tokens", format!("cannot decode: {e}")))
    }
    /// The vocabulary entry of `id` (e.g. `Ġhello`).
    pub fn raw_token(&self, id: u32) -> String {
        self.0
            .as_ref()
            .and_then(|t| t.id_to_token(id))
            .unwrap_or_default()
    }
}

impl TokenStrings for Tokens {
    fn token_str(&self, id: u32) -> String {
        self.0
            .as_ref()
            .and_then(|t| t.decode(&[id], false).ok())
            .unwrap_or_else(|| format!("token_id:{id}"))
    }
    fn reply_text(&self, ids: &[u32]) -> String {
        self.0
            .as_ref()
            .and_then(|t| t.decode(ids, true).ok())
            .unwrap_or_default()
    }
}

/// Everything the handlers share.
pub struct AppState {
    /// The served model name.
    pub name: String,
    /// The served model's path (as `/v1/models` `root` reports it).
    pub root: String,
    pub created: u64,
    /// `system_fingerprint`: a short hash of the served weights' identity.
    pub fingerprint: String,
    pub context_length: usize,
    pub vocab_size: usize,
    pub faults: Faults,
    pub tokens: Arc<Tokens>,
    pub engine: Arc<Mutex<Engine>>,
    /// The reasoning framing of the model's template (think tags), which the server's reasoning
    /// parser splits out of `content`.
    pub reasoning: Option<crate::template::framing::Reasoning>,
    /// The tool-call parser of the model's template (the format it writes calls in), when
    /// chatgate reads that format.
    pub tool_calls: Option<crate::endpoint::parsers::ToolParser>,
    /// What `/metrics` exposes.
    pub metrics: Arc<metrics::ServerMetrics>,
    pub service_time: Option<std::time::Duration>,
}

/// Weight sets up to this size are content-hashed for the fingerprint; larger ones are
/// identified by file names, sizes and tensor counts (hashing many GB would delay startup).
const HASH_LIMIT_BYTES: u64 = 4 << 30;

fn fingerprint(dir: &crate::artifacts::ModelDir) -> Result<String> {
    let total: u64 = dir.weights.iter().map(|w| w.size).sum();
    let digest = if total <= HASH_LIMIT_BYTES {
        dir.hash_weights()?.total
    } else {
        let mut lines = String::new();
        for w in &dir.weights {
            lines.push_str(&format!("{}\t{}\t{}\n", w.name, w.size, w.tensors));
        }
        crate::artifacts::sha256_hex(lines.as_bytes())
    };
    Ok(format!("fp_{}", &digest[..digest.len().min(12)]))
}

/// Load the model (and the fault model) and build the shared state. Blocking.
pub fn load(opts: &ServeOptions) -> Result<Arc<AppState>> {
    let faults = Faults::new(opts.faults.iter().copied());
    if opts.fault_model.is_some() && !faults.has(Fault::BaseCheckpoint) {
        return Err(
            Error::input("--fault-model is only used with --fault base-checkpoint")
                .hint("add --fault base-checkpoint, or drop --fault-model"),
        );
    }
    let engine = Engine::load(&opts.model, &faults, opts.fault_model.as_deref())?;
    let dir = engine.model().model_dir();
    let fingerprint = fingerprint(dir)?;
    let tokens = Tokens(dir.tokenizer.as_ref().map(|t| t.tokenizer.clone()));
    let crate::endpoint::parsers::ReplyParsers {
        reasoning,
        calls: tool_calls,
    } = crate::endpoint::parsers::ReplyParsers::of(dir);
    let root = std::fs::canonicalize(&opts.model)
        .unwrap_or_else(|_| opts.model.clone())
        .display()
        .to_string();
    let name = opts
        .model_name
        .clone()
        .unwrap_or_else(|| crate::endpoint::spec::default_model_name(&opts.model));
    let created = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    Ok(Arc::new(AppState {
        name,
        root,
        created,
        fingerprint,
        context_length: engine.context_length(),
        vocab_size: engine.vocab_size(),
        faults,
        tokens: Arc::new(tokens),
        engine: Arc::new(Mutex::new(engine)),
        reasoning,
        tool_calls,
        metrics: Arc::default(),
        service_time: opts.service_time,
    }))
}

/// The axum application.
pub fn router(state: Arc<AppState>) -> axum::Router {
    routes::router(state)
}

/// Serve on `listener` until `shutdown` resolves, then finish in-flight requests.
pub async fn serve(
    listener: TcpListener,
    state: Arc<AppState>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    // Without TCP_NODELAY, Nagle's algorithm holds a stream's first small SSE write until the
    // client's delayed ACK (~40 ms on Linux): every TTFT would carry that delay.
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown)
        .await
}

/// A server running on a task of the current runtime (tests, benchmarks, embedding).
pub struct RunningServer {
    pub addr: SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
    task: JoinHandle<std::io::Result<()>>,
}

impl RunningServer {
    /// `http://HOST:PORT`
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
    /// Graceful shutdown; waits for the server task.
    pub async fn stop(mut self) -> std::io::Result<()> {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        match self.task.await {
            Ok(r) => r,
            Err(e) => Err(std::io::Error::other(e)),
        }
    }
}

impl RunningServer {
    /// Run a server on a background task of the current runtime: `serve` gets the future that
    /// resolves when `stop` is called (chatgate serve and chatgate proxy share this).
    pub fn spawn<F>(
        addr: SocketAddr,
        serve: impl FnOnce(BoxFuture<'static, ()>) -> F,
    ) -> RunningServer
    where
        F: Future<Output = std::io::Result<()>> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(serve(Box::pin(async move {
            let _ = rx.await;
        })));
        RunningServer {
            addr,
            shutdown: Some(tx),
            task,
        }
    }
}

/// Bind `addr` (e.g. "127.0.0.1:0") and serve `state` on a background task.
pub async fn start(state: Arc<AppState>, addr: &str) -> Result<RunningServer> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| Error::input(format!("cannot listen on {addr}: {e}")))?;
    let local = listener
        .local_addr()
        .map_err(|e| Error::input(format!("cannot listen on {addr}: {e}")))?;
    Ok(RunningServer::spawn(local, |shutdown| {
        serve(listener, state, shutdown)
    }))
}
