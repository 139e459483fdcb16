//! Real servers for the integration tests, started, waited for, logged and stopped one way:
//! vLLM, `transformers serve`, llama-cpp-python, llama.cpp's `llama-server` and the `chatgate
//! serve` binary each describe how they are launched ([`Launch`], in their own module), and
//! this module runs them.
//!
//! Two ways to hold one:
//! - [`RealServer::start`]: this test's own server, stopped when dropped. For a server a test
//!   breaks (a fault, other flags, a moved clock).
//! - [`shared`]: one server per configuration (program, arguments, environment) for the whole
//!   test run, shared by every test that asks for the same configuration, in any test process.
//!   The first test to ask starts it under a file lock (two processes never start the same one);
//!   the others find it running. It outlives the test that started it and is stopped when the
//!   test runner (nextest, or cargo) exits. A shared server that has died is reported by its
//!   name and log, once, to every test that asks for it — not as a cascade of timeouts.
#![allow(dead_code)]
use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const REPO: &str = env!("CARGO_MANIFEST_DIR");

/// How a server is launched and when it is ready.
#[derive(Debug, Clone)]
pub struct Launch {
    /// How messages name it, e.g. "vLLM 0.32 (--reasoning-parser qwen3) on qwen3-standin".
    pub name: String,
    /// A short tag for its log file's name (`vllm`, `transformers-serve`, …).
    pub tag: &'static str,
    pub program: PathBuf,
    /// The arguments; `{port}` in any of them is replaced by the port chosen.
    pub args: Vec<OsString>,
    pub env: Vec<(String, String)>,
    /// The route that answers 200 once it can serve (`/health`, `/v1/models`).
    pub ready_path: &'static str,
    /// How long its start may take before the test fails.
    pub ready_within: Duration,
    /// A private folder the server may write (HF_HOME), made fresh beside its log; the
    /// environment variable that names it.
    pub home_env: Option<&'static str>,
}

impl Launch {
    pub fn new(name: impl Into<String>, tag: &'static str, program: impl Into<PathBuf>) -> Launch {
        Launch {
            name: name.into(),
            tag,
            program: program.into(),
            args: Vec::new(),
            env: Vec::new(),
            ready_path: "/health",
            ready_within: Duration::from_secs(60),
            home_env: None,
        }
    }

    pub fn args<I, S>(mut self, args: I) -> Launch
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    pub fn env(mut self, key: &str, value: impl Into<String>) -> Launch {
        self.env.push((key.to_string(), value.into()));
        self
    }

    pub fn envs(mut self, env: &[(String, String)]) -> Launch {
        self.env.extend(env.iter().cloned());
        self
    }

    pub fn ready(mut self, path: &'static str, within: Duration) -> Launch {
        self.ready_path = path;
        self.ready_within = within;
        self
    }

    pub fn home(mut self, var: &'static str) -> Launch {
        self.home_env = Some(var);
        self
    }

    /// What makes two launches the same configuration: program, arguments, environment.
    fn key(&self) -> String {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        h.update(self.program.as_os_str().as_encoded_bytes());
        for a in &self.args {
            h.update(b"\0");
            h.update(a.as_encoded_bytes());
        }
        for (k, v) in &self.env {
            h.update(format!("\0{k}={v}").as_bytes());
        }
        format!("{}-{}", self.tag, &hex::encode(h.finalize())[..16])
    }
}

/// A running server: its URL and log.
pub struct RealServer {
    pub url: String,
    pub log: PathBuf,
    pub name: String,
    pid: i32,
    /// Set for a server this test owns (stopped on drop); None for a shared one.
    child: Option<Child>,
    /// The owned server's private home, removed with it.
    _home: Option<tempfile::TempDir>,
}

/// A free port no other test of this run has taken. The kernel may hand the same free port to
/// two test processes that ask at once (each releases it for its server to bind, seconds
/// later): two vLLMs were once started on one port, and the second test talked to the first's
/// server. So each port is also claimed by a file in the run's target folder, created only if
/// it is not there.
fn free_port() -> u16 {
    let claims = Path::new(REPO).join("target/real-server-ports");
    std::fs::create_dir_all(&claims).expect("target/real-server-ports");
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        let claimed = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(claims.join(port.to_string()));
        if claimed.is_ok() {
            return port;
        }
    }
}

fn logs_dir() -> PathBuf {
    let dir = Path::new(REPO).join("target/real-server-logs");
    std::fs::create_dir_all(&dir).expect("target/real-server-logs");
    dir
}

/// Spawn `launch` on a free port in a process group of its own (a server's workers are its
/// children: stopping the group stops them all); its output goes to its log.
fn spawn(launch: &Launch, home: Option<&Path>) -> (Child, u16, PathBuf) {
    let port = free_port();
    let log = logs_dir().join(format!("{}-{port}.log", launch.tag));
    let out = std::fs::File::create(&log).expect("log file");
    let err = out.try_clone().expect("log file");
    let args = launch.args.iter().map(|a| {
        let s = a.to_string_lossy();
        if s.contains("{port}") {
            OsString::from(s.replace("{port}", &port.to_string()))
        } else {
            a.clone()
        }
    });
    let mut cmd = Command::new(&launch.program);
    cmd.args(args)
        .envs(launch.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0);
    if let (Some(var), Some(home)) = (launch.home_env, home) {
        cmd.env(var, home);
    }
    let child = cmd.spawn().unwrap_or_else(|e| {
        panic!(
            "{} does not start ({}): {e}",
            launch.name,
            launch.program.display()
        )
    });
    (child, port, log)
}

/// Wait until `path` answers 200; Err with why when the process exits or time runs out.
fn wait_ready(child: &mut Child, launch: &Launch, port: u16, log: &Path) -> Result<(), String> {
    let deadline = Instant::now() + launch.ready_within;
    let addr = format!("127.0.0.1:{port}");
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!(
                "{} exited ({status}) before it was ready; its log ({}):\n{}",
                launch.name,
                log.display(),
                tail(log, 40)
            ));
        }
        if get_ok(&addr, launch.ready_path) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Err(format!(
        "{} was not ready within {} s; its log ({}):\n{}",
        launch.name,
        launch.ready_within.as_secs(),
        log.display(),
        tail(log, 40)
    ))
}

impl RealServer {
    /// This test's own server: started now, stopped when dropped.
    pub fn start(launch: &Launch) -> RealServer {
        let home = launch
            .home_env
            .map(|_| tempfile::tempdir().expect("a home for the server"));
        if let Some(h) = &home {
            std::fs::create_dir_all(h.path().join("hub")).expect("home/hub");
        }
        let (mut child, port, log) = spawn(launch, home.as_ref().map(|h| h.path()));
        if let Err(why) = wait_ready(&mut child, launch, port, &log) {
            stop_group(child.id() as i32, &mut Some(&mut child));
            panic!("{why}");
        }
        RealServer {
            url: format!("http://127.0.0.1:{port}"),
            log,
            name: launch.name.clone(),
            pid: child.id() as i32,
            child: Some(child),
            _home: home,
        }
    }

    pub fn log_text(&self) -> String {
        read_log(&self.log)
    }

    /// Whether the server's process is still running.
    pub fn alive(&self) -> bool {
        // SAFETY: kill(2) with signal 0 only asks whether the process exists.
        let exists = unsafe { libc::kill(self.pid, 0) == 0 };
        // A zombie (exited, not yet reaped) is not running.
        let zombie = std::fs::read_to_string(format!("/proc/{}/stat", self.pid))
            .is_ok_and(|s| s.split_whitespace().nth(2) == Some("Z"));
        exists && !zombie
    }
}

impl Drop for RealServer {
    fn drop(&mut self) {
        let panicking = std::thread::panicking();
        match self.child.take() {
            Some(mut child) => {
                stop_group(self.pid, &mut Some(&mut child));
                if panicking {
                    eprintln!(
                        "--- {} log ({}) ---\n{}",
                        self.name,
                        self.log.display(),
                        tail(&self.log, 200)
                    );
                }
            }
            // A shared server stays up for the next test; when this test failed, say whether
            // the server died under it, by name, so its failure is not read as the test's.
            None if panicking && !self.alive() => eprintln!(
                "!! the shared server {} (pid {}) died during this test; its log ({}):\n{}",
                self.name,
                self.pid,
                self.log.display(),
                tail(&self.log, 60)
            ),
            None => {}
        }
    }
}

/// SIGTERM to the group (a user's Ctrl-C: vLLM shuts its engine down), then SIGKILL to whatever
/// is left after 20 s.
fn stop_group(pid: i32, child: &mut Option<&mut Child>) {
    // SAFETY: kill(2) with a negative pid signals the process group the child leads.
    unsafe { libc::kill(-pid, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(20);
    if let Some(c) = child {
        while Instant::now() < deadline {
            if let Ok(Some(_)) = c.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    // SAFETY: as above.
    unsafe { libc::kill(-pid, libc::SIGKILL) };
    if let Some(c) = child {
        let _ = c.wait();
    }
}

/// The folder of this test run's shared servers: keyed by nextest's run id (every test process
/// of one `cargo nextest run` has the same), else by the runner's pid (`cargo test`).
fn run_dir() -> PathBuf {
    let run = std::env::var("NEXTEST_RUN_ID")
        .unwrap_or_else(|_| format!("ppid-{}", std::os::unix::process::parent_id()));
    let root = Path::new(REPO).join("target/shared-servers");
    let dir = root.join(run);
    std::fs::create_dir_all(&dir).expect("target/shared-servers");
    dir
}

/// The record of a shared server that is up.
#[derive(serde::Serialize, serde::Deserialize)]
struct Record {
    name: String,
    url: String,
    pid: i32,
    log: PathBuf,
}

/// The shared server of this configuration: started by the first test of the run to ask (under
/// a lock), found running by the rest. Panics by name when it cannot start or has died.
pub fn shared(launch: &Launch) -> RealServer {
    let dir = run_dir();
    let key = launch.key();
    let _lock = FileLock::take(&dir.join(format!("{key}.lock")));
    let record = dir.join(format!("{key}.json"));
    let failed = dir.join(format!("{key}.failed"));
    if let Ok(why) = std::fs::read_to_string(&failed) {
        panic!(
            "the shared server {} could not start earlier in this run:\n{why}",
            launch.name
        );
    }
    if let Ok(bytes) = std::fs::read(&record) {
        let r: Record = serde_json::from_slice(&bytes).expect("a shared server's record");
        let server = RealServer {
            url: r.url,
            log: r.log,
            name: r.name,
            pid: r.pid,
            child: None,
            _home: None,
        };
        let addr = server.url.trim_start_matches("http://").to_string();
        if server.alive() && get_ok(&addr, launch.ready_path) {
            return server;
        }
        panic!(
            "the shared server {} (pid {}) started earlier in this run is gone{}; its log ({}):\n{}",
            server.name,
            server.pid,
            if server.alive() { " (it no longer answers)" } else { "" },
            server.log.display(),
            tail(&server.log, 60)
        );
    }
    let home = launch.home_env.map(|_| {
        let h = dir.join(format!("{key}-home"));
        std::fs::create_dir_all(h.join("hub")).expect("the shared server's home");
        h
    });
    let (mut child, port, log) = spawn(launch, home.as_deref());
    if let Err(why) = wait_ready(&mut child, launch, port, &log) {
        stop_group(child.id() as i32, &mut Some(&mut child));
        std::fs::write(&failed, &why).expect("record the failure");
        panic!("{why}");
    }
    let pid = child.id() as i32;
    // The server outlives this test's process: a watchdog stops its group when the test
    // runner (this process's parent: nextest, or cargo) exits.
    watch_runner(pid);
    // Not waited for by this process: the watchdog reaps it with the runner.
    std::mem::forget(child);
    let r = Record {
        name: launch.name.clone(),
        url: format!("http://127.0.0.1:{port}"),
        pid,
        log: log.clone(),
    };
    let tmp = record.with_extension("json.tmp");
    std::fs::write(&tmp, serde_json::to_vec(&r).expect("json")).expect("write the record");
    std::fs::rename(&tmp, &record).expect("publish the record");
    eprintln!(
        "started the shared server {} at {} (log {})",
        r.name,
        r.url,
        log.display()
    );
    RealServer {
        url: r.url,
        log,
        name: r.name,
        pid,
        child: None,
        _home: None,
    }
}

/// A detached shell that stops the server's process group once the test runner is gone.
fn watch_runner(server_pid: i32) {
    let runner = std::os::unix::process::parent_id();
    let script = format!(
        "while kill -0 {runner} 2>/dev/null; do sleep 1; done; \
         kill -TERM -{server_pid} 2>/dev/null; sleep 20; kill -KILL -{server_pid} 2>/dev/null"
    );
    let watchdog = Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("the shared server's watchdog");
    // It outlives this process by design; init reaps it.
    std::mem::forget(watchdog);
}

/// An exclusive lock on a file, released when dropped.
pub struct FileLock(std::fs::File);

impl FileLock {
    pub fn take(path: &Path) -> FileLock {
        use std::os::fd::AsRawFd;
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .expect("a lock file");
        // SAFETY: flock on a file descriptor this struct owns; released when it is dropped.
        assert_eq!(unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) }, 0);
        FileLock(f)
    }
}

impl Drop for FileLock {
    fn drop(&mut self) {
        use std::os::fd::AsRawFd;
        // SAFETY: as in `take`.
        unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
    }
}

/// A raw HTTP GET of `path` that answers 200 (no async runtime needed here).
pub fn get_ok(addr: &str, path: &str) -> bool {
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
    buf.starts_with("HTTP/1.1 200") || buf.starts_with("HTTP/1.0 200")
}

/// A server's log file, as far as it can be read.
pub fn read_log(path: &Path) -> String {
    let mut s = String::new();
    if let Ok(mut f) = std::fs::File::open(path) {
        let _ = f.read_to_string(&mut s);
    }
    s
}

/// The last `n` lines of a log.
pub fn tail(path: &Path, n: usize) -> String {
    let text = read_log(path);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
