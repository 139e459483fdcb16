//! `chatgate serve`: run the OpenAI-compatible server until SIGINT/SIGTERM.
use std::io::Write;
use std::path::PathBuf;

use clap::Args;

use crate::error::{Error, Result};
use crate::serve::{self, Fault, ServeOptions};

#[derive(Args)]
pub struct ServeArgs {
    /// The model to serve: a Hugging Face model directory or a .gguf file.
    #[arg(long, value_name = "DIR|FILE.gguf")]
    pub model: PathBuf,
    /// The address to bind.
    #[arg(long, default_value = "127.0.0.1", value_name = "HOST")]
    pub host: String,
    /// The port to bind; 0 picks a free one (read it from the `listening on` line).
    #[arg(long, default_value_t = 8000, value_name = "N")]
    pub port: u16,
    /// The model name clients send (default: the directory's name, or the .gguf file's stem).
    #[arg(long, value_name = "NAME")]
    pub model_name: Option<String>,
    /// Inject a fault on purpose (repeatable); see the list below.
    #[arg(long = "fault", value_enum, value_name = "NAME")]
    pub faults: Vec<Fault>,
    /// The checkpoint `--fault base-checkpoint` really generates with
    /// (default: the directory `tiny-base` next to the served model).
    #[arg(long, value_name = "DIR")]
    pub fault_model: Option<PathBuf>,
    /// Hold the model at least N ms per request (one request runs at a time, so the server's
    /// capacity is known: 1000/N requests per second). For testing a capacity search
    /// (`chatgate bench --mode capacity`) against a server whose answer is computed, not guessed.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=600_000))]
    pub service_ms: Option<u64>,
}

pub fn run(a: ServeArgs) -> Result<i32> {
    let opts = ServeOptions {
        model: a.model,
        model_name: a.model_name,
        faults: a.faults,
        fault_model: a.fault_model,
        service_time: a.service_ms.map(std::time::Duration::from_millis),
    };
    let state = serve::load(&opts)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::input(format!("cannot start the async runtime: {e}")))?;
    rt.block_on(async move {
        let addr = format!("{}:{}", a.host, a.port);
        let listener = tokio::net::TcpListener::bind((a.host.as_str(), a.port))
            .await
            .map_err(|e| {
                Error::input(format!("cannot listen on {addr}: {e}"))
                    .hint("pick another --port (0 picks a free one) or --host")
            })?;
        let local = listener
            .local_addr()
            .map_err(|e| Error::input(format!("cannot listen on {addr}: {e}")))?;
        if !state.faults.is_empty() {
            let names: Vec<&str> = state.faults.iter().map(Fault::name).collect();
            eprintln!("chatgate serve: faults injected: {}", names.join(", "));
        }
        if let Some(s) = state.service_time {
            eprintln!(
                "chatgate serve: each request holds the model at least {} ms ({:.2} requests/s at most)",
                s.as_millis(),
                1.0 / s.as_secs_f64()
            );
        }
        eprintln!(
            "chatgate serve: serving {} as {:?} (context {}, {})",
            state.root, state.name, state.context_length, state.fingerprint
        );
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "listening on http://{local}");
        let _ = out.flush();
        drop(out);
        serve::serve(listener, state, super::shutdown_signal("serve"))
            .await
            .map_err(|e| Error::input(format!("the server failed: {e}")))?;
        Ok(0)
    })
}
