//! A real llama-cpp-python server (`python -m llama_cpp.server`) on a free loopback port, for
//! tests that must run against a server chatgate did not write. The interpreter comes from
//! `CHATGATE_LLAMA_PYTHON`, else the venv scripts/servers/install-llama-cpp-python.sh installs
//! (`$CHATGATE_LLAMA_VENV`, default `~/.cache/chatgate/venv-llama-cpp-python-0.3.36`), as
//! .ci/run does. The server's log is kept in
//! `target/real-server-logs/` and printed when a test using it fails.
#![allow(dead_code)]
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::server::{Launch, RealServer};

pub const REPO: &str = env!("CARGO_MANIFEST_DIR");

/// The python that has llama_cpp installed, if any; otherwise the calling test says it skips
/// (a failure in CI, where .ci/run installs it).
pub fn python() -> Option<PathBuf> {
    let p = std::env::var_os("CHATGATE_LLAMA_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(default_venv_python);
    let ok = Command::new(&p)
        .args(["-c", "import llama_cpp.server"])
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        return Some(p);
    }
    super::skip::skip(&format!(
        "llama-cpp-python is not importable with {} (set CHATGATE_LLAMA_PYTHON; .ci/run installs it)",
        p.display()
    ));
    None
}

/// Where scripts/servers/install-llama-cpp-python.sh puts the venv.
fn default_venv_python() -> PathBuf {
    let venv = std::env::var_os("CHATGATE_LLAMA_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let home = std::env::var_os("HOME").unwrap_or_default();
            Path::new(&home).join(".cache/chatgate/venv-llama-cpp-python-0.3.36")
        });
    venv.join("bin/python")
}

/// How llama-cpp-python serves `model` (a .gguf) under the name `alias`, with extra server
/// flags: one thread, a 2048 context, seed 42, requests never interrupted. Ready when
/// `GET /v1/models` answers (it has no /health), at most 60 s.
pub fn launch(
    python: &Path,
    model: &Path,
    alias: &str,
    extra: &[&str],
    env: &[(String, String)],
) -> Launch {
    let shown = if extra.is_empty() {
        String::new()
    } else {
        format!(" ({})", extra.join(" "))
    };
    Launch::new(
        format!("llama-cpp-python{shown} on {}", model.display()),
        "llama-cpp-python",
        python,
    )
    .args(["-m", "llama_cpp.server", "--model"])
    .args([model.as_os_str()])
    .args([
        "--model_alias",
        alias,
        "--host",
        "127.0.0.1",
        "--port",
        "{port}",
    ])
    .args([
        "--n_ctx",
        "2048",
        "--seed",
        "42",
        "--n_threads",
        "1",
        "--n_threads_batch",
        "1",
    ])
    .args(["--interrupt_requests", "False"])
    .args(extra.iter().copied())
    .envs(env)
    .ready("/v1/models", Duration::from_secs(60))
}

/// A running llama-cpp-python (the one server type every real server here is).
pub type LlamaServer = RealServer;

/// This test's own llama-cpp-python (see [`launch`]), stopped when dropped.
pub fn start(python: &Path, model: &Path, alias: &str, extra: &[&str]) -> RealServer {
    RealServer::start(&launch(python, model, alias, extra, &[]))
}

/// As [`start`], with more environment (e.g. a moved clock).
pub fn start_with_env(
    python: &Path,
    model: &Path,
    alias: &str,
    extra: &[&str],
    env: &[(String, String)],
) -> RealServer {
    RealServer::start(&launch(python, model, alias, extra, env))
}

#[allow(unused_imports)]
pub use super::server::{get_ok, read_log};

/// A copy of `gguf` whose `tokenizer.ggml.eos_token_id` is `eos` (the metadata value patched in
/// place: a u32 right after the key and its type tag).
pub fn gguf_with_eos(gguf: &Path, eos: u32, out: &Path) {
    let mut bytes = std::fs::read(gguf).expect("read gguf");
    let key = b"tokenizer.ggml.eos_token_id";
    let at = bytes
        .windows(key.len())
        .position(|w| w == key)
        .expect("the GGUF has tokenizer.ggml.eos_token_id");
    let ty = at + key.len();
    let ty_tag = u32::from_le_bytes(bytes[ty..ty + 4].try_into().expect("4 bytes"));
    assert_eq!(ty_tag, 4, "eos_token_id is a UINT32 in GGUF");
    bytes[ty + 4..ty + 8].copy_from_slice(&eos.to_le_bytes());
    std::fs::write(out, bytes).expect("write gguf");
}
