//! `server.reasoning-split` on a reasoning family: a stand-in of DeepSeek-R1 — the DeepSeek-V3
//! tokenizer R1 ships, and R1's template (tests/corpus/templates, the Distill's copy: the
//! generation prompt opens `<think>\n`, so every reply starts as reasoning). The real
//! `chatgate serve` splits the reasoning out as vLLM's `deepseek_r1` parser does and passes;
//! `transformers serve`, whose qwen response parser reads the prompt as a prefix, splits it
//! too. The faults — `chatgate serve`'s `reasoning-in-content` and `reasoning-dropped`, and
//! llama-cpp-python, which has no reasoning parser — are catch-matrix rows
//! (tests/it/catch_matrix.rs `reasoning_faults`), with this file's stand-in and suite.
use crate::common::report_json::finding;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::cli::chatgate_in;
use crate::common::families::Family;

/// The DeepSeek-R1 stand-in (built once, cached; read it, never change it).
pub(crate) fn standin() -> PathBuf {
    let family = Family {
        name: "DeepSeek-R1: the DeepSeek-V3 tokenizer R1 ships, R1's template",
        model: "DeepSeek-V3",
        arch: Some("qwen3"),
        template: Some("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja"),
    };
    family.standin().0
}

/// The real `chatgate serve` binary on `model`, killed when dropped.
pub(crate) struct Serve {
    child: Child,
    pub url: String,
}

impl Serve {
    pub fn start(model: &Path, faults: &[&str]) -> Serve {
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
pub(crate) fn gate(dir: &Path, url: &str, update: bool) -> (i32, Value) {
    crate::common::cli::gate(dir)
        .target(url)
        .update_if(update)
        .run()
}

/// `gate --fail-fast` in `dir` against `url`, for a gate that is meant to fail at the server
/// boundary: the same exit code, first broken boundary and findings up to it, without the
/// replay and latency stages after it (on vLLM's CPU build, most of such a gate's time).
pub(crate) fn gate_fail_fast(dir: &Path, url: &str) -> (i32, Value) {
    crate::common::cli::gate(dir)
        .target(url)
        .args(&["--fail-fast"])
        .run()
}

/// `chatgate init` in `dir` for `model` served at `url`, without its `[sft]` rows, for a
/// client that reads `reasoning_content`.
pub(crate) fn init(dir: &Path, model: &Path, url: &str, stack: Option<&str>) {
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
    // The client reads the field DeepSeek's API named (vLLM's newer `reasoning` would fail).
    let suite = dir.join("suite.toml");
    let text = std::fs::read_to_string(&suite).expect("suite.toml");
    // A 512-token long prompt, as the catch matrix's real-shape rows declare: these tests judge
    // the parsers, and every gate's prefill up to the 4,096-token cap was most of their time
    // (candle's prefill and the reference's teacher-forced pass, profiled on an AVX2 machine).
    // The check still runs on every gate; its full length is the family matrix's.
    let (from, to) = LONG_PROMPT_512;
    assert!(text.contains(from), "init's suite changed: {from:?}");
    let text = text.replacen(from, to, 1);
    // The fingerprint's long reply at two windows, for the same reason: it judges the
    // checkpoint, which these stand-ins never break, and at 256 tokens it was a third of a
    // fail-fast gate on `chatgate serve` (the catch matrix's real-shape rows declare 64 too;
    // the family matrix's healthy gates keep the default).
    let (from, to) = LONG_REPLY_64;
    assert!(text.contains(from), "init's suite changed: {from:?}");
    let text = text.replacen(from, to, 1);
    std::fs::write(&suite, text + CLIENT).expect("suite.toml");
}

/// The long reply's line as `init` writes it, and the two windows these suites declare.
pub(crate) const LONG_REPLY_64: (&str, &str) =
    ("# long_reply_tokens = 256", "long_reply_tokens = 64");

/// The long prompt's line as `init` writes it (the declared context, capped at 4,096), and the
/// 512-token one these suites declare instead ([`init`]; vLLM's tests turn it back).
pub(crate) const LONG_PROMPT_512: (&str, &str) =
    ("# long_prompt_tokens = 4096", "long_prompt_tokens = 512");

/// The `[client]` table `init` gets here: the last in the file, so callers may add keys to it.
const CLIENT: &str = "\n[client]\nreasoning_field = \"reasoning_content\"\n";

/// Without the `[sft]` rows `init` renders from the template's history: that history strips
/// reasoning (`content.split('</think>')[-1]`) while the generation prompt opens `<think>\n`,
/// so rows rendered from it never hold what the prompt opens — `template.generation-prompt`
/// rightly says so (the template's own inconsistency, DeepSeek-R1 issue 352), before any server
/// boundary. These tests are about the server's parser: a deploy with no SFT data.
fn drop_sft(dir: &Path) {
    let path = dir.join("suite.toml");
    let text = std::fs::read_to_string(&path).expect("suite.toml");
    let mut out = String::new();
    let mut dropped = false;
    // These tests judge the reasoning and tool-call boundary: the latency stage (dozens of
    // streamed requests against the baseline) is left out too, as a suite may.
    for line in text.lines() {
        if line.starts_with('[') {
            dropped = matches!(line.trim(), "[sft]" | "[latency]");
        }
        if !dropped {
            out.push_str(line);
            out.push('\n');
        }
    }
    assert!(text.contains("[sft]"), "init wrote an [sft] section");
    std::fs::write(&path, out).expect("suite.toml");
}

/// The healthy `chatgate serve` splits what the model reasons (its faults are catch-matrix
/// rows: tests/it/catch_matrix.rs `reasoning_faults`).
#[test]
fn chatgate_serve_splits_the_reasoning_the_prompt_opened() {
    let model = standin();
    let dir = tempfile::tempdir().expect("tempdir");
    let healthy = Serve::start(&model, &[]);
    init(dir.path(), &model, &healthy.url, None);
    for update in [true, false] {
        let (code, report) = gate(dir.path(), &healthy.url, update);
        let split = finding(&report, "server.reasoning-split");
        assert_eq!(code, 0, "healthy: {}", report["first_broken"]);
        // The stand-in never closes its reasoning: every reply is cut inside it, which is said.
        assert_eq!(split["severity"], "warning", "{split}");
        assert!(split["message"]
            .as_str()
            .unwrap()
            .contains("ended inside their reasoning"));
        assert_eq!(split["evidence"]["reasoning field"], "reasoning_content");
    }
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
    let server = crate::common::transformers_serve::shared(&exe);
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
