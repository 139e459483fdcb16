//! `chatgate init` → `gate --update` → `gate` passes, on stand-ins of real model families and on
//! the trained tiny-chat with its captured SFT rows; an existing suite is never overwritten.
use crate::common::report_json::finding;
use std::path::Path;

use serde_json::Value;

use crate::common::cli::chatgate_in as chatgate;

/// A copy of the cached seed-0 stand-in of a corpus model at `out`.
fn standin(name: &'static str, out: &Path) {
    let (cached, _) = crate::common::families::Family::corpus(name, name).standin();
    crate::common::gate_workspace::copy_dir(&cached, out);
}

fn errors(report: &Value) -> Vec<String> {
    report["findings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|f| f["severity"] == "error")
        .map(|f| format!("{}: {}", f["check"], f["message"]))
        .collect()
}

/// init, gate --update, then gate twice: exit 0 and no error finding each time.
fn init_and_gate(dir: &Path, model: &Path, extra: &[&str]) -> Value {
    let mut args = vec!["init", "suite.toml", "--model", model.to_str().unwrap()];
    args.extend_from_slice(extra);
    let (code, out, err) = chatgate(&args, dir);
    assert_eq!(code, 0, "init: {out}{err}");
    let (code, out, err) = chatgate(
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
    let report: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}{err}"));
    assert_eq!(code, 0, "gate --update: {:?}\n{err}", errors(&report));
    let mut last = Value::Null;
    for run in 0..2 {
        let (code, out, err) = chatgate(
            &["gate", "suite.toml", "--no-progress", "--format", "json"],
            dir,
        );
        let report: Value =
            serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}{err}"));
        assert_eq!(code, 0, "gate run {run}: {:?}\n{err}", errors(&report));
        assert!(errors(&report).is_empty());
        last = report;
    }
    last
}

#[test]
fn init_then_gate_passes_on_standins_of_every_family() {
    for name in [
        "TinyLlama-1.1B-Chat-v1.0",
        "Mistral-7B-Instruct-v0.3",
        "Qwen2.5-0.5B-Instruct",
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let model = tmp.path().join("model");
        standin(name, &model);
        let suite_dir = tmp.path().join("suites");
        std::fs::create_dir(&suite_dir).unwrap();
        let report = init_and_gate(&suite_dir, &model, &[]);
        // The rendered rows are marked as such in the suite.
        let suite = std::fs::read_to_string(suite_dir.join("suite.toml")).unwrap();
        assert!(
            suite.contains("RENDERED BY CHATGATE, NOT CAPTURED FROM YOUR TRAINER"),
            "{name}"
        );
        assert_eq!(report["verdict"], "pass", "{name}");
        // Snapshots were recorded and reviewed-in: one per prompt.
        let prompts = std::fs::read_to_string(suite_dir.join("suite.prompts.jsonl")).unwrap();
        let snaps = std::fs::read_dir(suite_dir.join("snapshots/suite"))
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .path()
                    .extension()
                    .is_some_and(|x| x == "snap")
            })
            .count();
        assert_eq!(snaps, prompts.lines().count(), "{name}");
    }
}

#[test]
fn init_takes_captured_sft_rows_and_their_first_user_turns() {
    let tmp = tempfile::tempdir().unwrap();
    let tiny = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/tiny-chat");
    let sft = tiny.join("sft.jsonl");
    init_and_gate(tmp.path(), &tiny, &["--sft", sft.to_str().unwrap()]);
    let suite = std::fs::read_to_string(tmp.path().join("suite.toml")).unwrap();
    assert!(suite.contains("from --sft"), "{suite}");
    let rows: Vec<Value> = std::fs::read_to_string(tmp.path().join("suite.sft.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let source: Vec<Value> = std::fs::read_to_string(&sft)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), source.len());
    for (a, b) in rows.iter().zip(&source) {
        assert_eq!(a["input_ids"], b["input_ids"]);
        assert_eq!(a["messages"], b["messages"]);
    }
    let prompts = std::fs::read_to_string(tmp.path().join("suite.prompts.jsonl")).unwrap();
    assert_eq!(prompts.lines().count(), 8);
}

#[test]
fn an_existing_suite_is_never_overwritten() {
    let tmp = tempfile::tempdir().unwrap();
    let tiny = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/tiny-chat");
    std::fs::write(tmp.path().join("suite.toml"), "# mine\n").unwrap();
    let (code, _, err) = chatgate(
        &["init", "suite.toml", "--model", tiny.to_str().unwrap()],
        tmp.path(),
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("never overwrites"), "{err}");
    assert_eq!(
        std::fs::read_to_string(tmp.path().join("suite.toml")).unwrap(),
        "# mine\n"
    );
    assert!(!tmp.path().join("suite.prompts.jsonl").exists());
}

/// The corpus copy of Phi-3 ships only its tokenizer files: no config.json or
/// generation_config.json, so a transformers stack stops on the tokenizer's eos
/// `<|endoftext|>` alone while the template ends a turn with `<|end|>`. A stand-in keeps that
/// gap (it never invents a generation config), and the gate must name it — while the same files
/// served by llama.cpp, which stops on `<|end|>` by name, pass.
#[test]
fn a_standin_keeps_its_sources_missing_generation_config_and_the_gate_names_it() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("model");
    standin("Phi-3-mini-4k-instruct", &model);
    assert!(!model.join("generation_config.json").exists());
    let (code, out, err) = chatgate(
        &["init", "suite.toml", "--model", model.to_str().unwrap()],
        tmp.path(),
    );
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, _) = chatgate(
        &[
            "gate",
            "suite.toml",
            "--update",
            "--no-progress",
            "--format",
            "json",
        ],
        tmp.path(),
    );
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(code, 1);
    assert_eq!(
        report["first_broken"]["check"],
        "generation.stop-set",
        "{:?}",
        errors(&report)
    );
    assert_eq!(errors(&report).len(), 1, "{:?}", errors(&report));
    // Served by llama.cpp (the GGUF), `<|end|>` is an end-of-generation token by name.
    let (code, out, _) = chatgate(&["check", "suite.toml", "--format", "json"], tmp.path());
    assert_eq!(code, 1, "{out}");
    let suite = std::fs::read_to_string(tmp.path().join("suite.toml")).unwrap();
    std::fs::write(
        tmp.path().join("suite.toml"),
        suite.replace("# stack = \"transformers\"", "stack = \"llama.cpp\""),
    )
    .unwrap();
    let (code, out, _) = chatgate(&["check", "suite.toml", "--format", "json"], tmp.path());
    let report: Value = serde_json::from_str(&out).unwrap();
    let stop = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["check"] == "generation.stop-set")
        .unwrap();
    assert_eq!(stop["severity"], "pass", "{stop}");
    assert!(
        code == 0 || !errors(&report).iter().any(|e| e.contains("stop-set")),
        "{:?}",
        errors(&report)
    );
}

/// llama.cpp puts a `▁` before the text after every special token of a SentencePiece
/// vocabulary; transformers, which tokenized the SFT rows, does not. That alone is a warning
/// (every llama.cpp deploy of TinyLlama has it), found by undoing exactly that rule — so a
/// template that writes a real extra space after `</s>` is still an error.
#[test]
fn llamacpp_space_prefix_after_special_tokens_warns_and_a_template_space_still_fails() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("model");
    standin("TinyLlama-1.1B-Chat-v1.0", &model);
    let args = [
        "init",
        "suite.toml",
        "--model",
        model.to_str().unwrap(),
        "--stack",
        "llama-cpp-python",
    ];
    let (code, out, err) = chatgate(&args, tmp.path());
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, _) = chatgate(&["check", "suite.toml", "--format", "json"], tmp.path());
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(code, 0, "{:?}", errors(&report));
    for check in ["template.parity", "tokenizer.golden-reencode"] {
        let f = finding(&report, check);
        assert_eq!(f["severity"], "warning", "{f}");
        assert_eq!(f["evidence"]["class"], "space-prefix", "{f}");
    }
    // The lone ▁ is shown as its piece, not as an empty string.
    let parity = finding(&report, "template.parity");
    assert!(
        parity["evidence"]["serving"]
            .as_str()
            .unwrap()
            .contains("29871:\"▁\""),
        "{parity}"
    );
    assert_eq!(
        finding(&report, "template.generation-prompt")["severity"],
        "pass"
    );

    // The same template, but with a space written after every `</s>`.
    let template = std::fs::read_to_string(model.join("chat_template.jinja")).unwrap();
    let spaced = template.replace("eos_token }}", "eos_token + ' ' }}");
    assert_ne!(spaced, template);
    std::fs::write(tmp.path().join("spaced.jinja"), spaced).unwrap();
    let suite = std::fs::read_to_string(tmp.path().join("suite.toml")).unwrap();
    let suite = suite.replacen(
        "[model]\n",
        "[model]\nchat_template = \"spaced.jinja\"\n",
        1,
    );
    std::fs::write(tmp.path().join("suite.toml"), suite).unwrap();
    let (code, out, _) = chatgate(&["check", "suite.toml", "--format", "json"], tmp.path());
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(code, 1, "{out}");
    let parity = finding(&report, "template.parity");
    assert_eq!(parity["severity"], "error", "{parity}");
    assert_ne!(parity["evidence"]["class"], "space-prefix", "{parity}");
}
