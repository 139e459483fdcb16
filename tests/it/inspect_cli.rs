//! `chatgate inspect` on the fixture, checked against independent sources: the system's
//! sha256sum, and the fixture's own JSON files.
use std::path::{Path, PathBuf};
use std::process::Command as Sys;

use assert_cmd::Command;
use serde_json::Value;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-chatml")
}

fn inspect(dir: &Path) -> Value {
    let out = Command::cargo_bin("chatgate")
        .unwrap()
        .arg("inspect")
        .arg(dir)
        .args(["--format", "json"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn weights_hash_matches_sha256sum() {
    let v = inspect(&fixture());
    let out = Sys::new("sha256sum")
        .arg(fixture().join("model.safetensors"))
        .output()
        .expect("sha256sum is part of coreutils");
    let expected = String::from_utf8(out.stdout)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_string();
    let files = v["weights"]["files"].as_array().unwrap();
    assert_eq!(files.len(), 1);
    assert_eq!(files[0]["name"], "model.safetensors");
    assert_eq!(files[0]["sha256"], expected.as_str());
    assert_eq!(files[0]["format"], "safetensors");
    // 2 layers of a 64-wide Llama with a 512-token vocabulary (scripts/fixtures/make_fixture.py).
    let params = 2 * 512 * 64 + 64 + 2 * (4 * 64 * 64 + 3 * 128 * 64 + 2 * 64);
    assert_eq!(files[0]["parameters"], params);
}

#[test]
fn tokenizer_templates_and_generation_config() {
    let v = inspect(&fixture());
    let t = &v["tokenizer"];
    assert_eq!(t["vocab_size"], 512);
    assert_eq!(t["model_type"], "BPE");
    let specials = t["special_tokens"].as_array().unwrap();
    let id_of = |name: &str| {
        specials
            .iter()
            .find(|s| s["name"] == name)
            .map(|s| s["id"].clone())
    };
    assert_eq!(id_of("bos_token"), Some(Value::from(0)));
    assert_eq!(id_of("eos_token"), Some(Value::from(3)));
    assert_eq!(t["fingerprint"].as_str().unwrap().len(), 64);

    assert_eq!(
        v["templates"]["active"],
        "tokenizer_config.json#chat_template"
    );
    let caps = &v["templates"]["available"][0]["capabilities"];
    assert_eq!(caps["generation_tags"], true);
    assert_eq!(caps["system_role"], true);
    assert_eq!(caps["tools"], false);
    assert_eq!(caps["generation_prompt"], "<|im_start|>assistant\n");

    assert_eq!(
        v["generation_config"]["eos_token_ids"],
        serde_json::json!([3, 1])
    );
    assert_eq!(v["generation_config"]["temperature"], 0.7);
    let consistency = v["consistency"].as_array().unwrap();
    assert!(
        consistency.iter().all(|f| f["severity"] == "pass"),
        "{consistency:?}"
    );
}

#[test]
fn fingerprint_is_stable_across_a_resave_and_changes_with_the_tokenizer() {
    let tmp = tempfile::tempdir().unwrap();
    // The same tokenizer re-serialized (different bytes) keeps its semantic fingerprint.
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture().join("tokenizer.json")).unwrap())
            .unwrap();
    std::fs::write(
        tmp.path().join("tokenizer.json"),
        serde_json::to_string(&json).unwrap(),
    )
    .unwrap();
    let a = inspect(&fixture());
    let b = inspect(tmp.path());
    assert_ne!(a["tokenizer"]["sha256"], b["tokenizer"]["sha256"]);
    assert_eq!(a["tokenizer"]["fingerprint"], b["tokenizer"]["fingerprint"]);
    std::fs::copy(
        fixture().join("../swapped-tokenizer.json"),
        tmp.path().join("tokenizer.json"),
    )
    .unwrap();
    let c = inspect(tmp.path());
    assert_ne!(a["tokenizer"]["fingerprint"], c["tokenizer"]["fingerprint"]);
}
