//! The checkpoint boundary with a reference *server* (`[reference] url`): a known-good
//! deployment of the checkpoint teacher-forces the served replies over HTTP, so a gate that
//! holds no weights still fingerprints the server. Here the reference is a real vLLM 0.32.0
//! (`prompt_logprobs` on token-id prompts) serving a Qwen2.5 stand-in, and the server under test
//! is the real `chatgate serve` binary of the same weights (passes). The same reference server
//! then records the reference (`lock --fingerprint`), and a gate from a model directory with no
//! weights fingerprints from the recording: the same weights pass, another seed's weights of the
//! same shape are caught at `checkpoint.fingerprint`. (Other weights against the live vLLM
//! reference — another seed, an older step, another quantization — are the catch matrix's
//! `checkpoint_at_real_shape_vllm_reference` rows, at SmolLM2-135M's real shape.) A reference
//! whose stack cannot teacher-force (`transformers serve`) gives its greedy replies only, and
//! agreement with them is never a pass.
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::common::cli::chatgate_in;
use crate::common::families::Family;
use crate::common::report_json::{errors, finding};
use crate::reasoning_split::Serve;

/// The Qwen2.5 stand-in with 32-wide heads: `seed` 0 is the checkpoint "we trained".
fn qwen25(seed: u64) -> PathBuf {
    Family::corpus("Qwen2.5 0.5B Instruct", "Qwen2.5-0.5B-Instruct")
        .standin_with(seed, 32)
        .0
}

/// `chatgate init` for `model` against `url`, then `[reference] url = reference`.
fn suite(dir: &Path, model: &Path, url: &str, reference: &str) -> PathBuf {
    let (code, out, err) = chatgate_in(
        &[
            "init",
            "suite.toml",
            "--model",
            model.to_str().unwrap(),
            "--target",
            url,
        ],
        dir,
    );
    assert_eq!(code, 0, "init: {out}{err}");
    let path = dir.join("suite.toml");
    let text = std::fs::read_to_string(&path).expect("suite.toml");
    let start = text
        .find("\n[reference]\n")
        .expect("init writes a [reference]");
    let end = text[start + 1..]
        .find("\n[")
        .map_or(text.len(), |i| start + 1 + i);
    let text = format!(
        "{}\n[reference]\nurl = \"{reference}\"\n{}",
        &text[..start],
        &text[end..]
    );
    std::fs::write(&path, text).expect("suite.toml");
    path
}

/// `gate` in `dir` against `url`: (exit code, report).
fn gate(dir: &Path, url: &str, extra: &[&str]) -> (i32, Value) {
    crate::common::cli::gate(dir).target(url).args(extra).run()
}

/// The fingerprint's severity and message.
fn fingerprint(report: &Value) -> (String, String) {
    let f = finding(report, "checkpoint.fingerprint");
    (
        f["severity"].as_str().unwrap_or_default().to_string(),
        f["message"].as_str().unwrap_or_default().to_string(),
    )
}

#[test]
fn vllm_as_the_reference_server_fingerprints_the_served_checkpoint() {
    let Some(python) = crate::common::vllm::python() else {
        return;
    };
    let (trained, other) = (qwen25(0), qwen25(1));
    let tmp = tempfile::tempdir().expect("tempdir");

    let reference = crate::common::vllm::start(&python, &trained, "model", &[]);
    let healthy = Serve::start(&trained, &[]);
    let dir = tmp.path().join("suite");
    std::fs::create_dir_all(&dir).unwrap();
    suite(&dir, &trained, &healthy.url, &reference.url);
    // The checkpoint boundary is what this test judges; the latency stage comes after it.
    crate::common::gate_workspace::without_latency(&dir.join("suite.toml"));

    let (code, report) = gate(&dir, &healthy.url, &["--update"]);
    assert_eq!(code, 0, "{:?}", errors(&report));
    let (severity, message) = fingerprint(&report);
    assert_eq!(severity, "pass", "{message}");
    assert!(
        message.contains("vLLM"),
        "the finding names the reference server: {message}"
    );
    let f = finding(&report, "checkpoint.fingerprint");
    assert!(
        f["evidence"]["agreement"]
            .as_str()
            .is_some_and(|a| a.contains("tokens: mean")),
        "{f}"
    );

    // Other weights of the same shape served under the same name (another seed, an older step,
    // another quantization) are caught by a vLLM reference server at SmolLM2-135M's real shape:
    // the catch matrix's `checkpoint_at_real_shape_vllm_reference` rows. Here: the recording.
    // The reference server records the reference once; the gate then needs neither weights
    // nor the reference server.
    let (code, out, err) = chatgate_in(&["lock", "suite.toml", "--fingerprint"], &dir);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("(reference server)"), "{out}");
    let rec: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("suite.fingerprint.json")).expect("the recording"),
    )
    .expect("json");
    assert!(
        rec["computed_by"]["engine"]
            .as_str()
            .is_some_and(|e| e.starts_with("vLLM at ")),
        "{}",
        rec["computed_by"]
    );
    for p in rec["probes"].as_array().expect("probes") {
        let ids = p["token_ids"].as_array().expect("ids");
        let lps = p["logprobs"].as_array().expect("logprobs");
        assert!(!ids.is_empty() && ids.len() == lps.len(), "{p}");
        assert!(lps.iter().all(|l| l["top"]
            .as_array()
            .is_some_and(|t| t.len() == 5 && t.iter().all(|x| x["id"].is_u64()))));
    }
    drop(reference);
    let bare = tmp.path().join("bare");
    crate::common::gate_workspace::copy_dir(&trained, &bare);
    let _ = std::fs::remove_file(bare.join("model.safetensors"));
    let _ = std::fs::remove_file(bare.join("model.gguf"));
    let text = std::fs::read_to_string(dir.join("suite.toml")).unwrap();
    let text = text.replace(
        &format!("dir = {:?}", trained.to_str().unwrap()),
        &format!("dir = {:?}", bare.to_str().unwrap()),
    );
    std::fs::write(dir.join("suite.toml"), text).unwrap();
    let (code, report) = gate(&dir, &healthy.url, &[]);
    assert_eq!(code, 0, "{:?}", errors(&report));
    let (severity, message) = fingerprint(&report);
    assert_eq!(severity, "pass", "{message}");
    assert!(message.contains("recorded reference"), "{message}");
    let served = Serve::start(&other, &[]);
    let (code, report) = gate(&dir, &served.url, &["--fail-fast"]);
    assert_eq!(code, 1);
    assert_eq!(fingerprint(&report).0, "error", "{:?}", errors(&report));
}

#[test]
fn a_reference_server_that_cannot_teacher_force_gives_weak_evidence_never_a_pass() {
    let Some(exe) = crate::common::transformers_serve::executable() else {
        return;
    };
    let trained = qwen25(0);
    // The run's shared transformers serve loads the folder a request's `model` names.
    let reference = crate::common::transformers_serve::shared(&exe);
    let healthy = Serve::start(&trained, &[]);
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("suite");
    std::fs::create_dir_all(&dir).unwrap();
    let path = suite(&dir, &trained, &healthy.url, &reference.url);
    let text = std::fs::read_to_string(&path).unwrap().replace(
        "\n[reference]\n",
        &format!(
            "\n[reference]\nserved_model = {:?}\n",
            trained.to_str().unwrap()
        ),
    );
    std::fs::write(&path, text).unwrap();
    let (code, report) = gate(&dir, &healthy.url, &["--update"]);
    let f = finding(&report, "checkpoint.fingerprint");
    assert_eq!(code, 0, "{:?}", errors(&report));
    assert_eq!(f["severity"], "warning", "{f}");
    let message = f["message"].as_str().unwrap_or_default();
    assert!(message.contains("weak evidence"), "{f}");
    assert!(
        f["evidence"]["how"]
            .as_str()
            .is_some_and(|h| h.contains("cannot teacher-force")),
        "{f}"
    );
    // Recording from it is refused with the reason: no ids in, no alternatives by id out.
    let (code, out, err) = chatgate_in(&["lock", "suite.toml", "--fingerprint"], &dir);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("cannot be recorded from"), "{err}");
}
