//! `server.reasoning-split` on a reasoning family: a stand-in of DeepSeek-R1 — the DeepSeek-V3
//! tokenizer R1 ships, and R1's template (tests/corpus/templates, the Distill's copy: the
//! generation prompt opens `<think>\n`, so every reply starts as reasoning). The real
//! `chatgate serve` splits the reasoning out as vLLM's `deepseek_r1` parser does and passes; its
//! `reasoning-in-content` and `reasoning-dropped` faults are caught there, first; llama-cpp-python,
//! which has no reasoning parser, is caught leaving the reasoning in `content` — what its users
//! see; `transformers serve`, whose qwen response parser reads the prompt as a prefix, splits it.
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::cli::chatgate_in;
use crate::common::families::Family;

fn standin() -> PathBuf {
    let family = Family {
        name: "DeepSeek-R1: the DeepSeek-V3 tokenizer R1 ships, R1's template",
        model: "DeepSeek-V3",
        arch: Some("qwen3"),
        template: Some("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja"),
    };
    family.standin().0
}

/// The real `chatgate serve` binary on `model`, killed when dropped.
struct Serve {
    child: Child,
    url: String,
}

impl Serve {
    fn start(model: &Path, faults: &[&str]) -> Serve {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_chatgate"));
        cmd.args(["serve", "--model"])
            .arg(model)
            .args(["--port", &port.to_string(), "--model-name", "model"])
            .env("CANDLE_NUM_THREADS", "1")
            .env("RAYON_NUM_THREADS", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        for f in faults {
            cmd.args(["--fault", f]);
        }
        let mut child = cmd.spawn().expect("chatgate serve starts");
        let t = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                child.try_wait().expect("wait").is_none(),
                "chatgate serve exited"
            );
            assert!(t.elapsed() < Duration::from_secs(60), "serve did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        Serve {
            child,
            url: format!("http://127.0.0.1:{port}"),
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `gate` in `dir` against `url`: (exit code, report).
fn gate(dir: &Path, url: &str, update: bool) -> (i32, Value) {
    let mut args = vec![
        "gate",
        "suite.toml",
        "--target",
        url,
        "--no-progress",
        "--format",
        "json",
    ];
    if update {
        args.push("--update");
    }
    let (code, out, err) = chatgate_in(&args, dir);
    let report = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}{err}"));
    (code, report)
}

fn finding<'a>(report: &'a Value, check: &str) -> &'a Value {
    report["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .find(|f| f["check"] == check)
        .unwrap_or_else(|| panic!("no {check} finding: {report}"))
}

fn init(dir: &Path, model: &Path, url: &str, stack: Option<&str>) {
    let mut args = vec![
        "init",
        "suite.toml",
        "--model",
        model.to_str().unwrap(),
        "--target",
        url,
    ];
    if let Some(s) = stack {
        args.extend(["--stack", s]);
    }
    let (code, out, err) = chatgate_in(&args, dir);
    assert_eq!(code, 0, "init: {out}{err}");
    drop_sft(dir);
}

/// Without the `[sft]` rows `init` renders from the template's history: that history strips
/// reasoning (`content.split('</think>')[-1]`) while the generation prompt opens `<think>\n`,
/// so rows rendered from it never hold what the prompt opens — `template.generation-prompt`
/// rightly says so (the template's own inconsistency, DeepSeek-R1 issue 352), before any server
/// boundary. These tests are about the server's parser: a deploy with no SFT data.
fn drop_sft(dir: &Path) {
    let path = dir.join("suite.toml");
    let text = std::fs::read_to_string(&path).expect("suite.toml");
    let mut out = String::new();
    let mut in_sft = false;
    for line in text.lines() {
        if line.starts_with('[') {
            in_sft = line.trim() == "[sft]";
        }
        if !in_sft {
            out.push_str(line);
            out.push('\n');
        }
    }
    assert_ne!(out, text, "init wrote an [sft] section");
    std::fs::write(&path, out).expect("suite.toml");
}

#[test]
fn chatgate_serve_splits_reasoning_and_each_parser_fault_is_caught_first() {
    let model = standin();
    let dir = tempfile::tempdir().expect("tempdir");
    let healthy = Serve::start(&model, &[]);
    init(dir.path(), &model, &healthy.url, None);
    let (code, report) = gate(dir.path(), &healthy.url, true);
    let split = finding(&report, "server.reasoning-split");
    assert_ne!(split["severity"], "error", "{split}");
    assert_eq!(code, 0, "healthy: {}", report["first_broken"]);
    // The stand-in never closes its reasoning: every reply is cut inside it, which is said.
    assert_eq!(split["severity"], "warning", "{split}");
    assert!(split["message"]
        .as_str()
        .unwrap()
        .contains("ended inside their reasoning"));
    drop(healthy);

    for (fault, says) in [
        (
            "reasoning-in-content",
            "leaves the model's reasoning in `content`",
        ),
        ("reasoning-dropped", "loses the model's reasoning"),
    ] {
        let broken = Serve::start(&model, &[fault]);
        let (code, report) = gate(dir.path(), &broken.url, false);
        assert_eq!(code, 1, "{fault}: {}", report["first_broken"]);
        assert_eq!(
            report["first_broken"]["check"], "server.reasoning-split",
            "{fault}: {}",
            report["first_broken"]
        );
        let f = finding(&report, "server.reasoning-split");
        assert!(
            f["message"].as_str().unwrap().contains(says),
            "{fault}: {f}"
        );
    }
}

/// llama-cpp-python renders the GGUF's template (the prompt opens `<think>`) and has no
/// reasoning parser: the reasoning comes back as `content`, and the gate says so, naming the
/// flags of the stacks that do split it.
#[test]
fn llama_cpp_python_leaves_the_reasoning_in_content() {
    let Some(python) = crate::common::llama_server::python() else {
        return;
    };
    let model = standin();
    let server = crate::common::llama_server::LlamaServer::start(
        &python,
        &model.join("model.gguf"),
        "model",
        &[],
    );
    let dir = tempfile::tempdir().expect("tempdir");
    init(dir.path(), &model, &server.url, Some("llama-cpp-python"));
    let (code, report) = gate(dir.path(), &server.url, true);
    let f = finding(&report, "server.reasoning-split");
    assert_eq!(f["severity"], "error", "{f}\n{}", server.log_text());
    assert!(f["message"]
        .as_str()
        .unwrap()
        .contains("leaves the model's reasoning in `content`"));
    assert!(f["evidence"]["fix"]
        .as_str()
        .unwrap()
        .contains("--reasoning-parser deepseek_r1"));
    assert_eq!(code, 1);
}

/// `transformers serve` parses replies with a response template it picks by `model_type`
/// (`transformers/cli/serving/utils.py`, `_RESPONSE_TEMPLATE_FALLBACKS`; qwen2/qwen3: `<think>`
/// … `</think>` into `reasoning_content`), and passes it the decoded prompt as a prefix, so a
/// block the generation prompt opened is read as open: the reasoning comes back split, plain
/// and streamed (the stream keeps the newline after `<think>` that the whole reply strips:
/// whitespace, not a fault). Served here as qwen3, the stand-in's architecture.
#[test]
fn transformers_serve_splits_reasoning_the_prompt_opened() {
    let Some(exe) = crate::common::transformers_serve::executable() else {
        return;
    };
    let model = standin();
    let server = crate::common::transformers_serve::TransformersServe::start(&exe, &model);
    let dir = tempfile::tempdir().expect("tempdir");
    init(dir.path(), &model, &server.url, Some("transformers"));
    let (_, report) = gate(dir.path(), &server.url, true);
    let f = finding(&report, "server.reasoning-split");
    assert_ne!(f["severity"], "error", "{f}\n{}", server.log_text());
    let replies = f["evidence"]["replies"].as_str().unwrap();
    assert!(
        !replies.contains(" 0 split, 0 cut"),
        "nothing was split: {f}"
    );
}
