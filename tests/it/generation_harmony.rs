//! The generation boundary on harmony (gpt-oss): gpt-oss's real chat template over a copy of
//! models/tiny-chat whose vocabulary gets the harmony tokens (the real 200k vocabulary adds
//! nothing here: the stop set is about which token ids are in it). `<|return|>` must be in the
//! stop set, `<|call|>` should be, `<|end|>` must not — whatever token the template writes after
//! the last assistant message (the history form writes `<|end|>`).
use std::fs;
use std::path::Path;

use assert_cmd::Command;
use serde_json::{json, Value};

const REPO: &str = env!("CARGO_MANIFEST_DIR");
const HARMONY: &[&str] = &[
    "<|start|>",
    "<|channel|>",
    "<|message|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|constrain|>",
];

/// A model folder in `dir`: tiny-chat's files, the harmony tokens added (ids 512..), gpt-oss's
/// template (with `edit` applied), the tokenizer's eos `eos`, and generation_config.json's
/// eos list named by token.
fn model(dir: &Path, eos: &str, gen_eos: &[&str], edit: impl Fn(String) -> String) -> Vec<u32> {
    let src = Path::new(REPO).join("models/tiny-chat");
    fs::create_dir_all(dir).unwrap();
    for f in ["config.json", "tokenizer.json", "tokenizer_config.json"] {
        fs::copy(src.join(f), dir.join(f)).unwrap();
    }
    let mut tj: Value =
        serde_json::from_slice(&fs::read(dir.join("tokenizer.json")).unwrap()).unwrap();
    let first = tj["model"]["vocab"].as_object().unwrap().len() as u32;
    let mut ids = Vec::new();
    for (i, t) in HARMONY.iter().enumerate() {
        let id = first + i as u32;
        tj["added_tokens"].as_array_mut().unwrap().push(json!({
            "id": id, "content": t, "single_word": false, "lstrip": false, "rstrip": false,
            "normalized": false, "special": true
        }));
        ids.push(id);
    }
    fs::write(dir.join("tokenizer.json"), tj.to_string()).unwrap();
    let mut tc: Value =
        serde_json::from_slice(&fs::read(dir.join("tokenizer_config.json")).unwrap()).unwrap();
    tc.as_object_mut().unwrap().remove("chat_template");
    tc.as_object_mut().unwrap().remove("added_tokens_decoder");
    tc["eos_token"] = json!(eos);
    fs::write(dir.join("tokenizer_config.json"), tc.to_string()).unwrap();
    let template =
        fs::read_to_string(Path::new(REPO).join("tests/corpus/templates/openai-gpt-oss-20b.jinja"))
            .unwrap();
    fs::write(dir.join("chat_template.jinja"), edit(template)).unwrap();
    let id_of = |t: &str| first + HARMONY.iter().position(|h| *h == t).unwrap() as u32;
    let gen: Vec<u32> = gen_eos.iter().map(|t| id_of(t)).collect();
    fs::write(
        dir.join("generation_config.json"),
        json!({"eos_token_id": gen}).to_string(),
    )
    .unwrap();
    ids
}

/// `chatgate check` over `model/`: the generation.stop-set finding.
fn stop_set(dir: &Path) -> Value {
    fs::write(dir.join("suite.toml"), "[model]\ndir = \"model\"\n").unwrap();
    let out = Command::cargo_bin("chatgate")
        .unwrap()
        .args(["check", "suite.toml", "--format", "json"])
        .current_dir(dir)
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["check"] == "generation.stop-set")
        .cloned()
        .unwrap_or_else(|| panic!("no generation.stop-set: {report}"))
}

fn case(eos: &str, gen: &[&str], edit: impl Fn(String) -> String) -> Value {
    let tmp = tempfile::tempdir().unwrap();
    model(&tmp.path().join("model"), eos, gen, edit);
    stop_set(tmp.path())
}

#[test]
fn return_and_call_end_the_turn_end_does_not() {
    let same = |t: String| t;
    // gpt-oss's generation_config.json today: <|return|>, <|call|>.
    let f = case("<|return|>", &["<|return|>", "<|call|>"], same);
    assert_eq!(f["severity"], "pass", "{f}");
    assert!(
        f["message"]
            .as_str()
            .unwrap()
            .contains("<|end|> (a message end) is not"),
        "{f}"
    );
    // Its first release listed no <|call|>: a tool call runs on.
    let f = case("<|return|>", &["<|return|>"], same);
    assert_eq!(f["severity"], "warning", "{f}");
    assert!(f["message"].as_str().unwrap().contains("<|call|>"), "{f}");
    // <|end|> in the stop set cuts every reply after its analysis channel.
    let f = case("<|return|>", &["<|end|>", "<|return|>", "<|call|>"], same);
    assert_eq!(f["severity"], "error", "{f}");
    assert!(
        f["message"].as_str().unwrap().contains("holds <|end|>"),
        "{f}"
    );
    // No <|return|> anywhere in the stop set: the final answer runs on.
    let f = case("<|call|>", &["<|call|>"], same);
    assert_eq!(f["severity"], "error", "{f}");
    assert!(f["message"].as_str().unwrap().contains("<|return|>"), "{f}");
    let fix = f["evidence"]["fix"].as_str().unwrap();
    assert!(
        fix.contains("add <|return|>'s id") && fix.contains("generation_config.json"),
        "{f}"
    );
}

/// A template that closes the last assistant message with `<|end|>` (the history form of a
/// final answer) does not make `<|end|>` the terminator to add: the advice the gate gave before
/// ("add <|end|> to eos_token_id") would cut every reply after its analysis channel.
#[test]
fn a_template_writing_end_after_the_last_message_is_not_told_to_stop_on_end() {
    let history_form = |t: String| {
        let edited = t.replace(
            "\"<|start|>assistant<|channel|>final<|message|>\" + message.content + \"<|return|>\"",
            "\"<|start|>assistant<|channel|>final<|message|>\" + message.content + \"<|end|>\"",
        );
        assert_ne!(
            edited, t,
            "the template's final-answer line changed upstream"
        );
        edited
    };
    let f = case("<|return|>", &["<|return|>", "<|call|>"], history_form);
    assert_eq!(f["severity"], "pass", "{f}");
    assert!(
        f["evidence"]["found in"]
            .as_str()
            .unwrap()
            .contains("history form"),
        "{f}"
    );
    let f = case("<|return|>", &["<|return|>"], history_form);
    assert_ne!(f["severity"], "error", "{f}");
    let fix = f["evidence"]["fix"].as_str().unwrap();
    assert!(fix.contains("<|call|>") && !fix.contains("<|end|>"), "{f}");
}
