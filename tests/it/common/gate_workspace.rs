//! What the gate's end-to-end tests share: a temporary copy of the suites and the smoke
//! snapshots (so pending `.snap.new` files never land in the repository) with `models/` linked
//! to the repository's, an in-process `chatgate serve` of models/tiny-chat, and the gate itself.
#![allow(dead_code)]
use std::path::{Path, PathBuf};

use chatgate::gate::{self, GateOptions};
use chatgate::serve::{self, Fault, RunningServer, ServeOptions};
use chatgate::verdict::GateReport;
use chatgate::verdict::Severity;

pub const REPO: &str = env!("CARGO_MANIFEST_DIR");

/// The suite at `suite` without its `[latency]` stage (the gate then judges the chain and the
/// replay only).
pub fn without_latency(suite: &Path) {
    let mut doc: toml::Table = std::fs::read_to_string(suite)
        .expect("suite.toml")
        .parse()
        .expect("a TOML suite");
    doc.remove("latency");
    std::fs::write(suite, toml::to_string(&doc).expect("TOML")).expect("suite.toml");
}

/// Tiny models run fastest and steadiest on one thread (docs/commands/serve.md).
pub fn single_threaded() {
    std::env::set_var("CANDLE_NUM_THREADS", "1");
    std::env::set_var("RAYON_NUM_THREADS", "1");
}

/// A copy of the smoke and llama-cpp-python suites and the smoke snapshots.
pub struct Workspace {
    dir: tempfile::TempDir,
}

impl Workspace {
    pub fn new() -> Workspace {
        let dir = tempfile::tempdir().expect("a temp dir");
        let root = dir.path();
        std::fs::create_dir_all(root.join("suites")).expect("suites dir");
        for f in [
            "smoke.toml",
            "smoke.prompts.jsonl",
            "smoke.lock.json",
            "llama-cpp-python.toml",
            "llama-cpp-python.lock.json",
        ] {
            std::fs::copy(
                Path::new(REPO).join("suites").join(f),
                root.join("suites").join(f),
            )
            .expect("copy the suite");
        }
        copy_dir(
            &Path::new(REPO).join("snapshots/smoke"),
            &root.join("snapshots/smoke"),
        );
        std::os::unix::fs::symlink(Path::new(REPO).join("models"), root.join("models"))
            .expect("link models");
        Workspace { dir }
    }
    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }
    /// `suites/<name>.toml` in the copy.
    pub fn suite(&self, name: &str) -> PathBuf {
        self.path(&format!("suites/{name}.toml"))
    }
    pub fn snapshots(&self) -> PathBuf {
        self.path("snapshots/smoke")
    }
    /// Replace the first `find` in a suite (e.g. to add short timeouts).
    pub fn edit_suite(&self, name: &str, find: &str, replace: &str) {
        let p = self.suite(name);
        let text = std::fs::read_to_string(&p).expect("suite");
        assert!(text.contains(find), "{find:?} not in {}", p.display());
        std::fs::write(&p, text.replacen(find, replace, 1)).expect("write suite");
    }
}

/// Publish `out`, a folder built beside `dir` (in a temporary folder of the same parent), as
/// `dir`: its `marker` file written with `contents` last, then the folder renamed into place
/// whole, so tests running at once never see half of it. The test that loses the race keeps the
/// winner's (whose marker is there).
pub fn publish(out: &Path, dir: &Path, marker: &str, contents: &[u8]) {
    std::fs::write(out.join(marker), contents)
        .unwrap_or_else(|e| panic!("{}: {e}", out.join(marker).display()));
    if std::fs::rename(out, dir).is_err() && !dir.join(marker).is_file() {
        panic!("cannot move {} into place", dir.display());
    }
}

pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read dir") {
        let e = e.expect("entry");
        let dest = to.join(e.file_name());
        if e.path().is_dir() {
            copy_dir(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), dest).expect("copy");
        }
    }
}

/// The real `chatgate serve` of models/tiny-chat on 127.0.0.1:0, with these faults.
pub async fn serve_tiny_chat(faults: &[Fault]) -> RunningServer {
    serve_tiny_chat_with(faults, None).await
}

/// `serve_tiny_chat`, with the weights of the faults that serve another checkpoint taken from
/// `fault_model` (a model directory).
pub async fn serve_tiny_chat_with(faults: &[Fault], fault_model: Option<&Path>) -> RunningServer {
    serve_model(
        &Path::new(REPO).join("models/tiny-chat"),
        faults,
        fault_model,
    )
    .await
}

/// The real `chatgate serve` (in-process, loopback) over `model`, with `faults`.
pub async fn serve_model(
    model: &Path,
    faults: &[Fault],
    fault_model: Option<&Path>,
) -> RunningServer {
    serve_with(ServeOptions {
        model: model.to_path_buf(),
        faults: faults.to_vec(),
        fault_model: fault_model.map(Path::to_path_buf),
        ..ServeOptions::default()
    })
    .await
}

/// The real `chatgate serve` (in-process, loopback) with any options (`--service-ms`, …).
pub async fn serve_with(opts: ServeOptions) -> RunningServer {
    single_threaded();
    let state = tokio::task::spawn_blocking(move || serve::load(&opts))
        .await
        .expect("load task")
        .expect("the model loads");
    serve::start(state, "127.0.0.1:0").await.expect("bind")
}

pub async fn gate(suite: PathBuf, target: Option<String>) -> GateReport {
    gate_with(suite, target, false).await
}

/// As [`gate`], with `--update` when `update`: the replies become the accepted snapshots.
pub async fn gate_with(suite: PathBuf, target: Option<String>, update: bool) -> GateReport {
    gate::run(&GateOptions {
        suite,
        target,
        update,
        ..GateOptions::default()
    })
    .await
    .map(logged)
    .expect("the gate runs")
}

/// `gate --fail-fast`: the same exit code and first broken boundary as [`gate`], without the
/// checks, replay and latency after it. For a fault's gate, which is judged by its first broken
/// boundary alone.
pub async fn gate_fail_fast(suite: PathBuf, target: Option<String>) -> GateReport {
    gate::run(&GateOptions {
        suite,
        target,
        fail_fast: true,
        ..GateOptions::default()
    })
    .await
    .map(logged)
    .expect("the gate runs")
}

/// The report, after its phase table went to the test's stderr
/// (`chatgate::report::time_lines`).
fn logged(r: GateReport) -> GateReport {
    let time = chatgate::report::time_lines(&r.phases).join("; ");
    eprintln!("gate of {}: {:.1} s; {time}", r.suite_file, r.duration_s);
    r
}

/// Every error finding, for failure messages.
/// The message of the first finding with this check id (panics, naming it, when none).
pub fn message_of<'a>(r: &'a GateReport, check: &str) -> &'a str {
    r.findings
        .0
        .iter()
        .find(|f| f.check.id == check)
        .map(|f| f.message.as_str())
        .unwrap_or_else(|| panic!("no {check} finding"))
}

pub fn errors(r: &GateReport) -> Vec<String> {
    r.findings
        .0
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .map(|f| {
            format!(
                "{} {}: {} {:?}",
                f.boundary.name(),
                f.check,
                f.message,
                f.evidence
            )
        })
        .collect()
}
