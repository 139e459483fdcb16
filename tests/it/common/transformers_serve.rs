//! A real `transformers serve` (transformers 5.23 + torch, the venv of
//! scripts/servers/install-transformers-serve.sh) on a free loopback port, serving one model folder on
//! the CPU, offline. Its tokenizer and chat-template code are the ones vLLM and SGLang run.
//! The venv comes from `CHATGATE_TRANSFORMERS_VENV`, default
//! `~/.cache/chatgate/venv-transformers-serve`, as .ci/run installs it. `transformers serve DIR`
//! answers only requests whose `model` is DIR exactly as it was started (docs/research/
//! transformers-serve.md), so the folder is passed as given and suites name it the same way.
#![allow(dead_code)]
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::server::{Launch, RealServer};

/// The venv's `transformers` executable when it imports the serving code; otherwise the
/// calling test says it skips (a failure in CI, where .ci/run installs it).
pub fn executable() -> Option<PathBuf> {
    let venv = std::env::var_os("CHATGATE_TRANSFORMERS_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let home = std::env::var_os("HOME").unwrap_or_default();
            Path::new(&home).join(".cache/chatgate/venv-transformers-serve")
        });
    let ok = Command::new(venv.join("bin/python"))
        .args([
            "-c",
            "import torch, transformers.cli.serving.chat_completion",
        ])
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        return Some(venv.join("bin/transformers"));
    }
    super::skip::skip(&format!(
        "transformers serve is not importable from {} (set CHATGATE_TRANSFORMERS_VENV; .ci/run installs it)",
        venv.display()
    ));
    None
}

/// How `transformers serve` runs: with `model` it serves that folder only (a request must name
/// it exactly as given); without, it loads whatever folder a request names (and keeps it loaded
/// while it is used), so one server serves every stand-in of a test run. Ready when
/// `GET /health` answers, at most 180 s (torch's import and the model load come first: 8-30 s
/// here).
pub fn launch(exe: &Path, model: Option<&Path>, env: &[(String, String)]) -> Launch {
    let name = match model {
        Some(m) => format!(
            "transformers serve on {}",
            m.file_name().unwrap_or_default().to_string_lossy()
        ),
        None => "transformers serve (any model a request names)".to_string(),
    };
    let mut l = Launch::new(name, "transformers-serve", exe).args(["serve"]);
    if let Some(m) = model {
        l = l.args([m.as_os_str()]);
    }
    l.args(["--device", "cpu", "--host", "127.0.0.1", "--port", "{port}"])
        .args(["--default-seed", "42"])
        .env("HF_HUB_OFFLINE", "1")
        .env("TRANSFORMERS_OFFLINE", "1")
        .env("OMP_NUM_THREADS", "1")
        .envs(env)
        // An empty private Hugging Face cache: no hub access, and /v1/models answers `[]`.
        .home("HF_HOME")
        .ready("/health", Duration::from_secs(180))
}

/// This test's own `transformers serve` of `model` (see [`launch`]), stopped when dropped.
pub fn start(exe: &Path, model: &Path) -> RealServer {
    RealServer::start(&launch(exe, Some(model), &[]))
}

/// As [`start`], with more environment (e.g. a moved clock).
pub fn start_with_env(exe: &Path, model: &Path, env: &[(String, String)]) -> RealServer {
    RealServer::start(&launch(exe, Some(model), env))
}

/// The run's one shared `transformers serve`, which serves any folder a request names: a
/// suite's `[target] model` is the folder's path.
pub fn shared(exe: &Path) -> RealServer {
    super::server::shared(&launch(exe, None, &[]))
}

/// A running `transformers serve`.
pub type TransformersServe = RealServer;
