//! A real `transformers serve` (transformers 5.23 + torch, the venv of
//! scripts/servers/install-transformers-serve.sh) on a free loopback port, serving one model folder on
//! the CPU, offline. Its tokenizer and chat-template code are the ones vLLM and SGLang run.
//! The venv comes from `CHATGATE_TRANSFORMERS_VENV`, default
//! `~/.cache/chatgate/venv-transformers-serve`, as .ci/run installs it. `transformers serve DIR`
//! answers only requests whose `model` is DIR exactly as it was started (docs/research/
//! transformers-serve.md), so the folder is passed as given and suites name it the same way.
#![allow(dead_code)]
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const REPO: &str = env!("CARGO_MANIFEST_DIR");

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

pub struct TransformersServe {
    child: Child,
    pub url: String,
    pub log: PathBuf,
    /// An empty private Hugging Face cache: no hub access, and /v1/models answers `[]`.
    _hf_home: tempfile::TempDir,
}

impl TransformersServe {
    /// Serve `model` (a folder); waits until `GET /health` answers, at most 180 s (torch's
    /// import and the model load come before the socket opens: 8-30 s here).
    pub fn start(exe: &Path, model: &Path) -> TransformersServe {
        TransformersServe::start_with_env(exe, model, &[])
    }

    /// As [`TransformersServe::start`], with more environment (e.g. a moved clock).
    pub fn start_with_env(exe: &Path, model: &Path, env: &[(String, String)]) -> TransformersServe {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        let logs = Path::new(REPO).join("target/real-server-logs");
        std::fs::create_dir_all(&logs).expect("log dir");
        let log = logs.join(format!("transformers-serve-{port}.log"));
        let out = std::fs::File::create(&log).expect("log file");
        let err = out.try_clone().expect("log file");
        let hf_home = tempfile::tempdir().expect("HF_HOME");
        std::fs::create_dir_all(hf_home.path().join("hub")).expect("HF_HOME/hub");
        let child = Command::new(exe)
            .arg("serve")
            .arg(model)
            .args(["--device", "cpu", "--host", "127.0.0.1", "--port"])
            .arg(port.to_string())
            .args(["--default-seed", "42"])
            .env("HF_HOME", hf_home.path())
            .env("HF_HUB_OFFLINE", "1")
            .env("TRANSFORMERS_OFFLINE", "1")
            .env("OMP_NUM_THREADS", "1")
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("transformers serve starts");
        let mut s = TransformersServe {
            child,
            url: format!("http://127.0.0.1:{port}"),
            log,
            _hf_home: hf_home,
        };
        s.wait_ready(port);
        s
    }

    fn wait_ready(&mut self, port: u16) {
        let deadline = Instant::now() + Duration::from_secs(180);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "transformers serve exited ({status}) before it was ready:\n{}",
                    self.log_text()
                );
            }
            if super::llama_server::get_ok(&format!("127.0.0.1:{port}"), "/health") {
                return;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        panic!(
            "transformers serve was not ready within 180 s:\n{}",
            self.log_text()
        );
    }

    pub fn log_text(&self) -> String {
        super::llama_server::read_log(&self.log)
    }
}

impl Drop for TransformersServe {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!(
                "--- transformers serve log ({}) ---\n{}",
                self.log.display(),
                self.log_text()
            );
        }
    }
}
