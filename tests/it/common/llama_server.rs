//! A real llama-cpp-python server (`python -m llama_cpp.server`) on a free loopback port, for
//! tests that must run against a server chatgate did not write. The interpreter comes from
//! `CHATGATE_LLAMA_PYTHON`, else the venv scripts/servers/install-llama-cpp-python.sh installs
//! (`$CHATGATE_LLAMA_VENV`, default `~/.cache/chatgate/venv-llama-cpp-python-0.3.36`), as
//! .ci/run does. The server's log is kept in
//! `target/real-server-logs/` and printed when a test using it fails.
#![allow(dead_code)]
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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

pub struct LlamaServer {
    child: Child,
    pub url: String,
    pub log: PathBuf,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

impl LlamaServer {
    /// Serve `model` (a .gguf) under the name `alias`, with extra server flags. Waits until
    /// `GET /v1/models` answers (llama-cpp-python has no /health), at most 60 s.
    pub fn start(python: &Path, model: &Path, alias: &str, extra: &[&str]) -> LlamaServer {
        LlamaServer::start_with_env(python, model, alias, extra, &[])
    }

    /// As [`LlamaServer::start`], with more environment (e.g. a moved clock).
    pub fn start_with_env(
        python: &Path,
        model: &Path,
        alias: &str,
        extra: &[&str],
        env: &[(String, String)],
    ) -> LlamaServer {
        let port = free_port();
        let logs = Path::new(REPO).join("target/real-server-logs");
        std::fs::create_dir_all(&logs).expect("log dir");
        let log = logs.join(format!("llama-cpp-python-{port}.log"));
        let out = std::fs::File::create(&log).expect("log file");
        let err = out.try_clone().expect("log file");
        let child = Command::new(python)
            .args(["-m", "llama_cpp.server", "--model"])
            .arg(model)
            .args([
                "--model_alias",
                alias,
                "--host",
                "127.0.0.1",
                "--port",
                &port.to_string(),
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
            .args(extra)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("llama-cpp-python starts");
        let mut server = LlamaServer {
            child,
            url: format!("http://127.0.0.1:{port}"),
            log,
        };
        server.wait_ready();
        server
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let addr = self.url.trim_start_matches("http://").to_string();
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "llama-cpp-python exited ({status}) before it was ready:\n{}",
                    self.log_text()
                );
            }
            if get_ok(&addr, "/v1/models") {
                return;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        panic!(
            "llama-cpp-python was not ready within 60 s:\n{}",
            self.log_text()
        );
    }

    pub fn log_text(&self) -> String {
        read_log(&self.log)
    }
}

/// A raw HTTP GET of `path` that answers 200 (no async runtime needed here).
pub fn get_ok(addr: &str, path: &str) -> bool {
    use std::io::Write;
    let Ok(mut s) = std::net::TcpStream::connect(addr) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    if s.write_all(req.as_bytes()).is_err() {
        return false;
    }
    let mut buf = String::new();
    let _ = s.read_to_string(&mut buf);
    buf.starts_with("HTTP/1.1 200")
}

/// A server's log file, as far as it can be read.
pub fn read_log(path: &Path) -> String {
    let mut s = String::new();
    if let Ok(mut f) = std::fs::File::open(path) {
        let _ = f.read_to_string(&mut s);
    }
    s
}

impl Drop for LlamaServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!(
                "--- llama-cpp-python log ({}) ---\n{}",
                self.log.display(),
                self.log_text()
            );
        }
    }
}

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
