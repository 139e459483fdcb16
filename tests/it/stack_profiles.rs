//! Serving-stack profiles on real files: `chatgate check` predicts what the named stack feeds
//! the model, so a healthy deploy passes and a broken one fails on the stack that breaks it.
//! - a Llama-2-family SentencePiece model (TinyLlama) whose SFT ids came from transformers
//!   passes under `transformers` and fails golden re-encode under `tokenizers` (TGI really
//!   feeds other ids);
//! - a GGUF whose template writes the BOS that llama.cpp also adds: no double BOS under
//!   `llama.cpp` (it cuts the template's), a real one for a completions client;
//! - a GGUF metadata-only edit is reported at its own boundary, never as another checkpoint;
//! - eos only in the tokenizer, not in generation_config.json: an error under `transformers`,
//!   a warning under `tokenizers`;
//! - a BOS prefixed to a template whose tokenizer names no bos_token is `double-bos`.
use std::fs;
use std::path::{Path, PathBuf};

use assert_cmd::Command;
use serde_json::{json, Value};

use crate::common::gguf_writer::{gguf, T, V};

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            fs::copy(&p, to.join(p.file_name().unwrap())).unwrap();
        }
    }
}

/// `chatgate <cmd> <suite> --format json` → (exit code, report).
fn run(cmd: &str, suite: &Path) -> (i32, Value) {
    let out = Command::cargo_bin("chatgate")
        .unwrap()
        .arg(cmd)
        .arg(suite)
        .args(["--format", "json"])
        .output()
        .unwrap();
    let code = out.status.code().unwrap_or(-1);
    let v = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "no JSON from chatgate {cmd} ({e}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (code, v)
}

fn lock(suite: &Path) {
    let out = Command::cargo_bin("chatgate")
        .unwrap()
        .args(["lock", "--update"])
        .arg(suite)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "lock: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn findings<'a>(report: &'a Value, check: &str) -> Vec<&'a Value> {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["check"] == check)
        .collect()
}

use crate::common::report_json::errors;

fn severity(report: &Value, check: &str) -> Vec<String> {
    findings(report, check)
        .iter()
        .map(|f| f["severity"].as_str().unwrap().to_string())
        .collect()
}

/// TinyLlama's files and SFT rows whose ids are transformers 5.23's (the corpus golden).
fn tinyllama_suite(dir: &Path, stack: &str) -> PathBuf {
    let corpus = repo().join("tests/corpus");
    copy_dir(
        &corpus.join("models/TinyLlama-1.1B-Chat-v1.0"),
        &dir.join("model"),
    );
    let convs: Vec<Value> = serde_json::from_str(
        &fs::read_to_string(corpus.join("goldens/conversations.json")).unwrap(),
    )
    .unwrap();
    let golden: Value = serde_json::from_str(
        &fs::read_to_string(corpus.join("goldens/model__TinyLlama-1.1B-Chat-v1.0.json")).unwrap(),
    )
    .unwrap();
    let mut rows = String::new();
    for case in golden["cases"].as_array().unwrap() {
        if case["add_generation_prompt"] == true || case.get("error").is_some() {
            continue;
        }
        let conv = convs.iter().find(|c| c["id"] == case["id"]).unwrap();
        if conv.get("tools").is_some() {
            continue;
        }
        let row = json!({"id": case["id"], "messages": conv["messages"], "input_ids": case["ids_transformers"]});
        rows.push_str(&row.to_string());
        rows.push('\n');
    }
    assert!(rows.lines().count() >= 8, "golden rows");
    fs::write(dir.join("sft.jsonl"), rows).unwrap();
    let suite = dir.join("suite.toml");
    fs::write(
        &suite,
        format!("[model]\ndir = \"model\"\n\n[sft]\ngolden = \"sft.jsonl\"\n\n[target]\nstack = \"{stack}\"\n"),
    )
    .unwrap();
    suite
}

#[test]
fn a_sentencepiece_llama_fine_tune_with_transformers_sft_ids_passes_under_transformers() {
    let tmp = tempfile::tempdir().unwrap();
    let suite = tinyllama_suite(tmp.path(), "transformers");
    let (code, report) = run("check", &suite);
    assert_eq!(code, 0, "errors: {:?}", errors(&report));
    for check in [
        "tokenizer.golden-reencode",
        "template.parity",
        "template.bos-count",
    ] {
        assert_eq!(severity(&report, check), ["pass"], "{check}");
    }
    let stack = findings(&report, "tokenizer.stack")[0];
    assert!(
        stack.to_string().contains("LlamaTokenizer rebuilt"),
        "{stack}"
    );
}

/// The same fine-tune served by a stack that loads TinyLlama's legacy tokenizer.json as is
/// (TGI): its `Prepend("▁")` normalizer puts a ▁ after every special token, where transformers
/// 5 (which made these SFT ids) does not. The ids differ by that space prefix alone: a warning
/// of class `space-prefix`, and an error in a suite that asks for one (`[server] strict`).
#[test]
fn the_same_fine_tune_served_by_a_raw_tokenizer_json_stack_is_fed_a_space_prefix() {
    let tmp = tempfile::tempdir().unwrap();
    let suite = tinyllama_suite(tmp.path(), "tokenizers");
    let (code, report) = run("check", &suite);
    assert_eq!(code, 0, "errors: {:?}", errors(&report));
    assert_eq!(severity(&report, "tokenizer.golden-reencode"), ["warning"]);
    let reencode = findings(&report, "tokenizer.golden-reencode")[0];
    assert_eq!(reencode["evidence"]["class"], "space-prefix", "{reencode}");
    let strict = "\n[server]\nstrict = [\"tokenizer.golden-reencode\", \"template.parity\"]\n";
    fs::write(&suite, fs::read_to_string(&suite).unwrap() + strict).unwrap();
    let (code, report) = run("check", &suite);
    assert_eq!(code, 1, "errors: {:?}", errors(&report));
    assert_eq!(severity(&report, "tokenizer.golden-reencode"), ["error"]);
    assert_eq!(report["first_broken"]["check"], "tokenizer.golden-reencode");
}

/// The fixture (ChatML, template writes `<s>`, SFT ids start with `<s>`) as a GGUF whose
/// vocabulary adds a BOS, as llama.cpp's converter writes it.
fn chatml_gguf(dir: &Path, add_bos: bool) -> PathBuf {
    let fixture = repo().join("tests/fixtures/tiny-chatml");
    let tj: Value =
        serde_json::from_str(&fs::read_to_string(fixture.join("tokenizer.json")).unwrap()).unwrap();
    let tc: Value =
        serde_json::from_str(&fs::read_to_string(fixture.join("tokenizer_config.json")).unwrap())
            .unwrap();
    let vocab = tj["model"]["vocab"].as_object().unwrap();
    let mut tokens = vec![String::new(); vocab.len()];
    for (t, id) in vocab {
        tokens[id.as_u64().unwrap() as usize] = t.clone();
    }
    let merges: Vec<String> = tj["model"]["merges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| match m {
            Value::Array(p) => format!("{} {}", p[0].as_str().unwrap(), p[1].as_str().unwrap()),
            s => s.as_str().unwrap().to_string(),
        })
        .collect();
    let types: Vec<i32> = (0..tokens.len())
        .map(|i| if i <= 4 { 3 } else { 1 })
        .collect();
    let bytes = gguf(
        &[
            ("general.architecture", V::s("llama")),
            ("general.name", V::s("tiny-chatml")),
            ("llama.block_count", V::U32(1)),
            ("tokenizer.ggml.model", V::s("gpt2")),
            ("tokenizer.ggml.pre", V::s("gpt-2")),
            ("tokenizer.ggml.tokens", V::strs(&tokens)),
            ("tokenizer.ggml.token_type", V::i32s(&types)),
            ("tokenizer.ggml.merges", V::strs(&merges)),
            ("tokenizer.ggml.bos_token_id", V::U32(0)),
            ("tokenizer.ggml.eos_token_id", V::U32(3)),
            ("tokenizer.ggml.padding_token_id", V::U32(4)),
            ("tokenizer.ggml.add_bos_token", V::Bool(add_bos)),
            (
                "tokenizer.chat_template",
                V::s(tc["chat_template"].as_str().unwrap()),
            ),
        ],
        &[T {
            name: "token_embd.weight",
            dims: vec![8, 512],
            ggml_type: 0,
            nbytes: 8 * 512 * 4,
        }],
    );
    let path = dir.join("model.gguf");
    fs::write(&path, bytes).unwrap();
    fs::copy(fixture.join("sft.jsonl"), dir.join("sft.jsonl")).unwrap();
    path
}

fn gguf_suite(dir: &Path, stack: &str, add_special_tokens: bool) -> PathBuf {
    chatml_gguf(dir, true);
    let suite = dir.join("suite.toml");
    fs::write(
        &suite,
        format!("[model]\ndir = \"model.gguf\"\nadd_special_tokens = {add_special_tokens}\n\n[sft]\ngolden = \"sft.jsonl\"\n\n[target]\nstack = \"{stack}\"\n"),
    )
    .unwrap();
    suite
}

#[test]
fn llama_cpp_cuts_the_template_bos_it_adds_itself_so_there_is_no_double_bos() {
    for stack in ["llama.cpp", "llama-cpp-python"] {
        let tmp = tempfile::tempdir().unwrap();
        let suite = gguf_suite(tmp.path(), stack, true);
        let (_, report) = run("check", &suite);
        assert_eq!(
            severity(&report, "template.bos-count"),
            ["pass"],
            "{stack}: {:?}",
            errors(&report)
        );
        assert_eq!(severity(&report, "template.parity"), ["pass"], "{stack}");
    }
    // A client that sends the rendered text to a completions endpoint of a transformers-based
    // server gets the tokenizer's BOS on top of the template's: a real double BOS.
    let tmp = tempfile::tempdir().unwrap();
    let suite = gguf_suite(tmp.path(), "tokenizers", true);
    let (code, report) = run("check", &suite);
    assert_eq!(code, 1);
    let bos = findings(&report, "template.bos-count");
    assert_eq!(bos[0]["severity"], "error", "{bos:?}");
    assert!(bos[0].to_string().contains("double-bos"), "{bos:?}");
}

#[test]
fn a_gguf_metadata_only_edit_is_not_blamed_on_the_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let suite = gguf_suite(tmp.path(), "llama.cpp", false);
    lock(&suite);
    let (code, report) = run("check", &suite);
    assert_eq!(code, 0, "healthy: {:?}", errors(&report));
    assert_eq!(severity(&report, "checkpoint.weights-hash"), ["pass"]);
    // Point eos at `<pad>` (id 4): metadata only, the tensor data is untouched.
    crate::common::llama_server::gguf_with_eos(
        &tmp.path().join("model.gguf"),
        4,
        &tmp.path().join("patched.gguf"),
    );
    fs::rename(
        tmp.path().join("patched.gguf"),
        tmp.path().join("model.gguf"),
    )
    .unwrap();
    let (_, report) = run("check", &suite);
    assert_eq!(
        severity(&report, "checkpoint.weights-hash"),
        ["pass"],
        "{:?}",
        errors(&report)
    );
    let meta = findings(&report, "generation.gguf-metadata");
    assert_eq!(meta.len(), 1, "{:?}", errors(&report));
    assert_eq!(meta[0]["boundary"], "generation-config");
    assert!(findings(&report, "checkpoint.gguf-metadata").is_empty());
}

/// tiny-chat's template ends turns with `<|im_end|>`, its tokenizer's eos; generation_config
/// lists it too. Remove it from generation_config only.
fn eos_only_in_tokenizer(dir: &Path, stack: &str) -> PathBuf {
    copy_dir(
        &repo().join("tests/fixtures/tiny-chatml"),
        &dir.join("model"),
    );
    let p = dir.join("model/generation_config.json");
    let mut g: Value = serde_json::from_str(&fs::read_to_string(&p).unwrap()).unwrap();
    g["eos_token_id"] = json!([1]);
    fs::write(&p, g.to_string()).unwrap();
    let suite = dir.join("suite.toml");
    fs::write(
        &suite,
        format!("[model]\ndir = \"model\"\n\n[sft]\ngolden = \"model/sft.jsonl\"\n\n[target]\nstack = \"{stack}\"\n"),
    )
    .unwrap();
    suite
}

#[test]
fn eos_changed_only_in_generation_config_fails_under_transformers_and_is_reported_otherwise() {
    let tmp = tempfile::tempdir().unwrap();
    let (code, report) = run("check", &eos_only_in_tokenizer(tmp.path(), "transformers"));
    assert_eq!(code, 1);
    assert_eq!(report["first_broken"]["check"], "generation.stop-set");
    // TGI and vLLM stop on the tokenizer's eos too.
    for stack in ["tokenizers", "vllm"] {
        let tmp = tempfile::tempdir().unwrap();
        let (code, report) = run("check", &eos_only_in_tokenizer(tmp.path(), stack));
        assert_eq!(code, 0, "{stack}: {:?}", errors(&report));
        assert_eq!(
            severity(&report, "generation.stop-set"),
            ["warning"],
            "{stack}"
        );
    }
}

/// The SFT rows captured with `return_assistant_tokens_mask=True` on a template without
/// `{% generation %}` (all-zero masks), served by a template that lost its generation prompt.
#[test]
fn all_zero_assistant_masks_are_treated_as_absent_and_a_missing_generation_prompt_is_still_caught()
{
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("model");
    copy_dir(&repo().join("tests/fixtures/tiny-chatml"), &model);
    let rows: String = fs::read_to_string(model.join("sft.jsonl"))
        .unwrap()
        .lines()
        .map(|l| {
            let mut row: Value = serde_json::from_str(l).unwrap();
            let n = row["input_ids"].as_array().unwrap().len();
            row["assistant_mask"] = json!(vec![0; n]);
            format!("{row}\n")
        })
        .collect();
    fs::write(model.join("sft.jsonl"), rows).unwrap();
    let suite = tmp.path().join("suite.toml");
    fs::write(
        &suite,
        "[model]\ndir = \"model\"\n\n[sft]\ngolden = \"model/sft.jsonl\"\n\n[target]\nstack = \"transformers\"\n",
    )
    .unwrap();
    let (code, report) = run("check", &suite);
    assert_eq!(code, 0, "{:?}", errors(&report));
    assert_eq!(severity(&report, "template.assistant-mask"), ["warning"]);
    assert_eq!(severity(&report, "generation.stop-set"), ["pass"]);
    assert_eq!(severity(&report, "template.generation-prompt"), ["pass"]);

    let p = model.join("tokenizer_config.json");
    let mut tc: Value = serde_json::from_str(&fs::read_to_string(&p).unwrap()).unwrap();
    let tpl = tc["chat_template"].as_str().unwrap().to_string();
    let cut = tpl.find("{% if add_generation_prompt %}").unwrap();
    tc["chat_template"] = json!(tpl[..cut]);
    fs::write(&p, tc.to_string()).unwrap();
    let (code, report) = run("check", &suite);
    assert_eq!(code, 1);
    assert_eq!(
        severity(&report, "template.generation-prompt"),
        ["error"],
        "{:?}",
        errors(&report)
    );
}

#[test]
fn render_gives_each_stacks_ids_for_a_gguf() {
    let tmp = tempfile::tempdir().unwrap();
    let gguf = chatml_gguf(tmp.path(), true);
    let m = tmp.path().join("m.json");
    fs::write(&m, r#"[{"role": "user", "content": "hi"}]"#).unwrap();
    let ids = |stack: &str| -> Vec<u64> {
        let out = Command::cargo_bin("chatgate")
            .unwrap()
            .args(["render", "--model"])
            .arg(&gguf)
            .arg("--messages")
            .arg(&m)
            .args([
                "--add-generation-prompt",
                "--format",
                "json",
                "--stack",
                stack,
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["stack"], stack);
        v["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i.as_u64().unwrap())
            .collect()
    };
    // The template writes `<s>` (0); llama.cpp cuts it and adds its own: one BOS either way.
    for stack in ["llama.cpp", "llama-cpp-python", "transformers"] {
        let got = ids(stack);
        assert_eq!(&got[..2], &[0, 2], "{stack}: {got:?}");
        assert_eq!(got.iter().filter(|&&i| i == 0).count(), 1, "{stack}");
    }
}

/// llama.cpp serves the GGUF's own template: a llama-2 `<s>[INST]` template written into the
/// GGUF of a ChatML model trained without a BOS is another chat format (role-format), not a
/// double BOS, though it adds one.
#[test]
fn a_llama2_template_in_the_gguf_is_a_role_format_fault() {
    let tmp = tempfile::tempdir().unwrap();
    let suite = gguf_suite(tmp.path(), "llama-cpp-python", false);
    // SFT rows without the leading `<s>`.
    let rows: String = fs::read_to_string(tmp.path().join("sft.jsonl"))
        .unwrap()
        .lines()
        .map(|l| {
            let mut row: Value = serde_json::from_str(l).unwrap();
            for key in ["input_ids", "assistant_mask"] {
                row[key].as_array_mut().unwrap().remove(0);
            }
            format!("{row}\n")
        })
        .collect();
    fs::write(tmp.path().join("sft.jsonl"), rows).unwrap();
    let path = tmp.path().join("model.gguf");
    let model = chatgate::artifacts::ModelDir::open(&path).unwrap();
    let info = model.gguf.unwrap();
    let mut kvs: Vec<(String, V)> = Vec::new();
    for (k, v) in &info.metadata {
        let v = match (k.as_str(), v) {
            ("tokenizer.chat_template", _) => V::s(LLAMA2),
            (_, Value::String(s)) => V::s(s),
            (_, Value::Bool(b)) => V::Bool(*b),
            (_, Value::Number(n)) if k.ends_with("_id") || k.ends_with("block_count") => {
                V::U32(n.as_u64().unwrap() as u32)
            }
            (_, Value::Array(a)) if a.iter().all(Value::is_string) => V::strs(
                &a.iter()
                    .map(|s| s.as_str().unwrap().to_string())
                    .collect::<Vec<_>>(),
            ),
            (_, Value::Array(a)) => V::i32s(
                &a.iter()
                    .map(|n| n.as_i64().unwrap() as i32)
                    .collect::<Vec<_>>(),
            ),
            other => panic!("unexpected metadata {other:?}"),
        };
        kvs.push((k.clone(), v));
    }
    let kvs: Vec<(&str, V)> = kvs.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    let bytes = gguf(
        &kvs,
        &[T {
            name: "token_embd.weight",
            dims: vec![8, 512],
            ggml_type: 0,
            nbytes: 8 * 512 * 4,
        }],
    );
    fs::write(&path, bytes).unwrap();
    let (code, report) = run("check", &suite);
    assert_eq!(code, 1);
    let parity = findings(&report, "template.parity");
    assert_eq!(parity[0]["severity"], "error", "{:?}", errors(&report));
    assert_eq!(parity[0]["evidence"]["class"], "role-format", "{parity:?}");
    assert_eq!(severity(&report, "template.bos-count"), ["info"]);
    assert_eq!(report["first_broken"]["check"], "template.parity");
}

const LLAMA2: &str = "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'system' %}{{ '<<SYS>>\\n' + message['content'] + '\\n<</SYS>>\\n\\n' }}{% else %}{{ ' ' + message['content'] + eos_token }}{% endif %}{% endfor %}";
