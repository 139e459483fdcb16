//! The gate against a server chatgate did not write: llama-cpp-python serving the committed
//! GGUF of models/tiny-chat on loopback. The gate must pass — its replies equal the candle
//! reference's snapshots — and report the server's known quirks (servers.md) as findings of the
//! right severity, never as failures. (Real faults on this server are rows of the catch matrix.)
use crate::common::llama_server;
use crate::common::report_json::finding;

use std::path::Path;

use serde_json::Value;

use chatgate::gate::{self, GateOptions};
use chatgate::verdict::Severity;
use chatgate::verdict::{GateReport, PromptStatus};
use llama_server::REPO;

fn severity_of(r: &GateReport, check: &str) -> Option<Severity> {
    r.findings
        .0
        .iter()
        .find(|f| f.check.id == check)
        .map(|f| f.severity)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llama_cpp_python_passes_the_gate_and_its_quirks_are_findings() {
    std::env::set_var("CANDLE_NUM_THREADS", "1");
    std::env::set_var("RAYON_NUM_THREADS", "1");
    let Some(python) = llama_server::python() else {
        return;
    };
    let gguf = Path::new(REPO).join("models/tiny-chat/model.gguf");
    let server = crate::common::llama_server::start(&python, &gguf, "tiny-chat", &[]);
    // Read-only: a passing gate writes nothing, so the repository's suite and snapshots serve.
    let r = gate::run(&GateOptions {
        suite: Path::new(REPO).join("suites/llama-cpp-python.toml"),
        target: Some(server.url.clone()),
        update: false,
        progress: false,
        deadline_s: None,
        shard: None,
        part: None,
        stack: None,
        fail_fast: false,
    })
    .await
    .expect("the gate runs");
    let errors: Vec<String> = r
        .findings
        .0
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .map(|f| format!("{}: {} {:?}", f.check, f.message, f.evidence))
        .collect();
    assert_eq!(r.exit_code.code(), 0, "errors: {errors:#?}");
    // Every replayed greedy prompt equals the candle reference's accepted snapshot.
    assert_eq!(r.prompts.len(), 11);
    assert!(r.prompts.iter().all(|p| p.status == PromptStatus::Pass));
    // The fingerprint really compared logprobs with the local reference.
    assert_eq!(
        severity_of(&r, "checkpoint.fingerprint"),
        Some(Severity::Pass)
    );
    assert_eq!(
        severity_of(&r, "template.prompt-tokens"),
        Some(Severity::Pass)
    );
    // A prompt filling the checkpoint's 256-token context is counted whole (llama-cpp-python
    // runs it with n_ctx 2048); the tiny model cannot recall a code, which is said.
    assert_eq!(severity_of(&r, "server.long-prompt"), Some(Severity::Pass));
    let long = r
        .findings
        .0
        .iter()
        .find(|f| f.check.id == "server.long-prompt")
        .expect("finding");
    assert!(long.message.contains("counted whole"), "{}", long.message);
    // servers.md's quirks, each reported, none failing the gate:
    assert_eq!(
        severity_of(&r, "server.include-usage"),
        Some(Severity::Warning),
        "include_usage is ignored"
    );
    assert_eq!(
        severity_of(&r, "server.usage"),
        Some(Severity::Info),
        "completion_tokens leaves out the EOS"
    );
    assert_eq!(
        severity_of(&r, "server.health"),
        Some(Severity::Info),
        "there is no /health"
    );
    assert_eq!(
        severity_of(&r, "server.bad-requests"),
        Some(Severity::Warning),
        "500s for bad requests"
    );
    let bad = r
        .findings
        .0
        .iter()
        .find(|f| f.check.id == "server.bad-requests")
        .expect("finding");
    assert!(
        bad.evidence.values().any(|v| v.contains("HTTP 500")),
        "{:?}",
        bad.evidence
    );
    assert!(
        std::fs::read_dir(Path::new(REPO).join("snapshots/smoke"))
            .expect("snapshots")
            .all(|e| !e
                .expect("entry")
                .file_name()
                .to_string_lossy()
                .ends_with(".snap.new")),
        "a passing gate leaves no pending snapshot"
    );
}

/// The same quirks made strict by the suite fail the gate (informative findings fail only a
/// suite that asks for it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_strict_suite_fails_on_a_quirk() {
    std::env::set_var("CANDLE_NUM_THREADS", "1");
    std::env::set_var("RAYON_NUM_THREADS", "1");
    let Some(python) = llama_server::python() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tmp");
    std::fs::create_dir_all(dir.path().join("suites")).expect("mkdir");
    for f in [
        "llama-cpp-python.toml",
        "smoke.prompts.jsonl",
        "llama-cpp-python.lock.json",
    ] {
        std::fs::copy(
            Path::new(REPO).join("suites").join(f),
            dir.path().join("suites").join(f),
        )
        .expect("copy");
    }
    std::os::unix::fs::symlink(Path::new(REPO).join("models"), dir.path().join("models"))
        .expect("link");
    std::os::unix::fs::symlink(
        Path::new(REPO).join("snapshots"),
        dir.path().join("snapshots"),
    )
    .expect("link");
    let suite = dir.path().join("suites/llama-cpp-python.toml");
    let text = std::fs::read_to_string(&suite).expect("suite");
    // No `stack` either: the gate must detect llama-cpp-python from its routes.
    assert!(text.contains("stack = \"llama-cpp-python\"\n"));
    std::fs::write(
        &suite,
        text.replace(
            "[server]\n",
            "[server]\nstrict = [\"server.include-usage\"]\n",
        )
        .replace("stack = \"llama-cpp-python\"\n", ""),
    )
    .expect("write");
    let gguf = Path::new(REPO).join("models/tiny-chat/model.gguf");
    let server = crate::common::llama_server::start(&python, &gguf, "tiny-chat", &[]);
    let r = gate::run(&GateOptions {
        suite,
        target: Some(server.url.clone()),
        update: false,
        progress: false,
        deadline_s: None,
        shard: None,
        part: None,
        stack: None,
        fail_fast: false,
    })
    .await
    .expect("the gate runs");
    assert_eq!(r.exit_code.code(), 1);
    let first = r.findings.first_broken().expect("a failure");
    assert_eq!(
        (first.boundary.name(), first.check.id),
        ("server", "server.include-usage")
    );
    let stack = crate::common::gate_workspace::message_of(&r, "tokenizer.stack");
    assert!(
        stack.contains("what llama-cpp-python feeds") && stack.contains("/extras/tokenize"),
        "{stack}"
    );
}

/// A swapped checkpoint on llama-cpp-python with a SentencePiece model (Phi-3): its logprobs
/// carry token texts only, which the vocabulary cannot always map back (`con` and `▁con`), so
/// the reply's ids come from the server's own tokenize route — and the gate names the
/// checkpoint, not the replay drift it causes. The healthy server confirms the same way.
#[test]
fn a_swapped_sentencepiece_checkpoint_is_named_at_the_checkpoint() {
    use crate::common::cli::chatgate_in;
    use crate::common::families::Family;
    let Some(python) = llama_server::python() else {
        return;
    };
    let phi3 = Family {
        name: "Phi-3 mini 4k, phi3 architecture",
        model: "Phi-3-mini-4k-instruct",
        arch: Some("phi3"),
        template: None,
    };
    let (trained, _) = phi3.standin();
    let tmp = tempfile::tempdir().unwrap();
    // Another checkpoint of the same shape and files: the stand-in at another seed.
    let source = phi3.source(tmp.path());
    let other = tmp.path().join("other");
    let (code, out, err) = chatgate_in(
        &[
            "standin",
            "--from",
            source.to_str().unwrap(),
            "--out",
            other.to_str().unwrap(),
            "--seed",
            "1",
            "--layers",
            "2",
            "--hidden",
            "64",
        ],
        tmp.path(),
    );
    assert_eq!(code, 0, "standin: {out}{err}");
    let fingerprint_of = |gguf: &Path, dir: &Path| -> (i32, Value) {
        let server = crate::common::llama_server::start(&python, gguf, "model", &[]);
        let model = trained.to_str().unwrap();
        let (code, out, err) = chatgate_in(
            &[
                "init",
                "suite.toml",
                "--model",
                model,
                "--target",
                &server.url,
            ],
            dir,
        );
        assert_eq!(code, 0, "init: {out}{err}");
        let (code, out, err) = chatgate_in(
            &[
                "gate",
                "suite.toml",
                "--update",
                "--no-progress",
                "--format",
                "json",
            ],
            dir,
        );
        drop(server);
        let report: Value =
            serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}{err}"));
        (code, report)
    };
    let healthy_dir = tmp.path().join("healthy");
    std::fs::create_dir(&healthy_dir).unwrap();
    let (code, report) = fingerprint_of(&trained.join("model.gguf"), &healthy_dir);
    let fp = finding(&report, "checkpoint.fingerprint");
    assert_eq!(
        (code, fp["severity"].as_str()),
        (0, Some("pass")),
        "{fp}\n{report}"
    );
    let swapped_dir = tmp.path().join("swapped");
    std::fs::create_dir(&swapped_dir).unwrap();
    let (code, report) = fingerprint_of(&other.join("model.gguf"), &swapped_dir);
    assert_eq!(code, 1, "{report}");
    assert_eq!(
        report["first_broken"]["check"], "checkpoint.fingerprint",
        "{report}"
    );
}
