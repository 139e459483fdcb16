//! The `chatgate render` contract on real model directories: text equal to transformers'
//! apply_chat_template; ids equal to transformers 5.23's `apply_chat_template(tokenize=True)`
//! with `--stack transformers` (the default) and to raw tokenizers' encode(text,
//! add_special_tokens=false) with `--stack tokenizers`, for every model golden in
//! tests/corpus/goldens; the stack profile's tokenizer against live transformers on 48 edited
//! model directories (goldens/stack_variants.json); and the fixture's SFT rows (produced by
//! transformers itself, assistant masks included).
use std::fs;
use std::path::{Path, PathBuf};

use assert_cmd::Command;
use chatgate::cli::render::{render, RenderOutput};
use chatgate::cli::{Format, RenderArgs};
use chatgate::stack::Stack;
use serde_json::{json, Value};

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus")
}

fn args(model: &Path, messages: &Path, add_generation_prompt: bool) -> RenderArgs {
    args_on(model, messages, add_generation_prompt, Stack::Transformers)
}

fn args_on(model: &Path, messages: &Path, add_generation_prompt: bool, stack: Stack) -> RenderArgs {
    RenderArgs {
        stack,
        model: Some(model.to_path_buf()),
        template: None,
        messages: messages.to_path_buf(),
        add_generation_prompt,
        continue_final_message: false,
        bos_token: None,
        eos_token: None,
        template_kwargs: None,
        format: Format::Json,
    }
}

/// The model golden's directory; the Qwen golden names a sub-folder the corpus flattened.
fn model_dir(source_path: &str) -> PathBuf {
    let p = corpus().join(source_path);
    if p.is_dir() {
        p
    } else {
        p.parent().unwrap().to_path_buf()
    }
}

#[test]
fn every_model_golden_text_and_ids() {
    let convs: Vec<Value> = serde_json::from_str(
        &fs::read_to_string(corpus().join("goldens/conversations.json")).unwrap(),
    )
    .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let mut checked = 0;
    let mut failures = Vec::new();
    for entry in fs::read_dir(corpus().join("goldens")).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        if !name.starts_with("model__") {
            continue;
        }
        let golden: Value = serde_json::from_str(&fs::read_to_string(&path).unwrap()).unwrap();
        let dir = model_dir(golden["source"]["path"].as_str().unwrap());
        for case in golden["cases"].as_array().unwrap() {
            let id = case["id"].as_str().unwrap();
            let conv = convs.iter().find(|c| c["id"] == id).unwrap();
            let mut doc = json!({"messages": conv["messages"]});
            if let Some(t) = conv.get("tools") {
                doc["tools"] = t.clone();
            }
            let file = tmp.path().join(format!("{id}.json"));
            fs::write(&file, doc.to_string()).unwrap();
            let agp = case["add_generation_prompt"].as_bool().unwrap();
            for (stack, ids_key) in [
                (Stack::Transformers, "ids_transformers"),
                (Stack::Tokenizers, "ids_tokenizers"),
            ] {
                let label = format!("{name} {id} agp={agp} --stack {stack}");
                checked += 1;
                match (render(&args_on(&dir, &file, agp, stack)), case.get("error")) {
                    (Ok(out), None) => compare(&label, &out, case, ids_key, &mut failures),
                    (Err(_), Some(_)) => {}
                    (Ok(out), Some(e)) => failures.push(format!(
                        "{label}: transformers raised {e}, we rendered {:?}",
                        out.text
                    )),
                    (Err(e), None) => failures.push(format!("{label}: we failed: {e}")),
                }
            }
        }
    }
    assert!(checked >= 200, "only {checked} cases found");
    assert!(
        failures.is_empty(),
        "{} of {checked} model-golden cases differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

fn compare(
    label: &str,
    out: &RenderOutput,
    case: &Value,
    ids_key: &str,
    failures: &mut Vec<String>,
) {
    if out.text != case["text"].as_str().unwrap() {
        failures.push(format!(
            "{label}: text differs\n  want {:?}\n  got  {:?}",
            case["text"], out.text
        ));
        return;
    }
    let want: Vec<u32> = serde_json::from_value(case[ids_key].clone()).unwrap();
    let got = out
        .encoding
        .as_ref()
        .map(|e| e.get_ids().to_vec())
        .unwrap_or_default();
    if got != want {
        failures.push(format!(
            "{label}: ids differ\n  want {want:?}\n  got  {got:?}"
        ));
    }
}

/// Tokens whose characters intersect the assistant spans, as transformers builds
/// `assistant_masks` (char_to_token(start) ..= char_to_token(end - 1)).
fn mask_from_spans(out: &RenderOutput) -> Vec<u8> {
    let enc = out.encoding.as_ref().unwrap();
    // Encoding offsets are bytes; spans are code points.
    let byte_of = |cp: usize| {
        out.text
            .char_indices()
            .nth(cp)
            .map(|(b, _)| b)
            .unwrap_or(out.text.len())
    };
    let mut mask = vec![0u8; enc.get_ids().len()];
    for &(s, e) in &out.assistant_spans {
        let (bs, be) = (byte_of(s), byte_of(e - 1));
        let first = enc
            .get_offsets()
            .iter()
            .position(|&(a, b)| a <= bs && bs < b)
            .unwrap();
        let last = enc
            .get_offsets()
            .iter()
            .position(|&(a, b)| a <= be && be < b)
            .unwrap();
        mask[first..=last].iter_mut().for_each(|m| *m = 1);
    }
    mask
}

#[test]
fn fixture_sft_rows_ids_and_assistant_masks() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-chatml");
    let tmp = tempfile::tempdir().unwrap();
    let rows = fs::read_to_string(dir.join("sft.jsonl")).unwrap();
    let mut n = 0;
    for (i, line) in rows.lines().enumerate() {
        let row: Value = serde_json::from_str(line).unwrap();
        let file = tmp.path().join(format!("{i}.json"));
        fs::write(&file, row["messages"].to_string()).unwrap();
        let out = render(&args(&dir, &file, false)).unwrap();
        let want: Vec<u32> = serde_json::from_value(row["input_ids"].clone()).unwrap();
        assert_eq!(
            out.encoding.as_ref().unwrap().get_ids(),
            &want[..],
            "row {i}"
        );
        let mask: Vec<u8> = serde_json::from_value(row["assistant_mask"].clone()).unwrap();
        assert_eq!(
            mask_from_spans(&out),
            mask,
            "row {i}: assistant spans do not give transformers' mask"
        );
        n += 1;
    }
    assert_eq!(n, 8);
}

#[test]
fn json_output_shape_through_the_binary() {
    let tmp = tempfile::tempdir().unwrap();
    let m = tmp.path().join("m.json");
    fs::write(
        &m,
        r#"{"messages": [{"role": "user", "content": "What is 2+2?"}], "tools": null}"#,
    )
    .unwrap();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-chatml");
    let out = Command::cargo_bin("chatgate")
        .unwrap()
        .args(["render", "--model"])
        .arg(&fixture)
        .arg("--messages")
        .arg(&m)
        .args(["--add-generation-prompt", "--format", "json"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["text"],
        "<s><|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
    );
    assert_eq!(
        v["ids"].as_array().unwrap().len(),
        v["tokens"].as_array().unwrap().len()
    );
    assert_eq!(v["ids"][0], 0, "the template's own BOS, once");
    assert_eq!(v["tokens"][1], "<|im_start|>");
    assert_eq!(v["assistant_spans"], json!([]));

    // --template without a model: no tokenizer, so no ids; bos from the flag.
    let t = tmp.path().join("t.jinja");
    fs::write(
        &t,
        "{{ bos_token }}{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}",
    )
    .unwrap();
    let out = Command::cargo_bin("chatgate")
        .unwrap()
        .args(["render", "--template"])
        .arg(&t)
        .arg("--messages")
        .arg(&m)
        .args(["--bos-token", "<B>", "--format", "json"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["text"], "<B>[user] What is 2+2?\n");
    assert!(v.get("ids").is_none() && v.get("tokens").is_none(), "{v}");
}

/// Copy a corpus model and apply one variant's edits, as scripts/fixtures/make_stack_goldens.py did.
fn make_variant(root: &Path, v: &Value) -> PathBuf {
    let dir = root.join(v["name"].as_str().unwrap());
    fs::create_dir_all(&dir).unwrap();
    let base = corpus().join("models").join(v["base"].as_str().unwrap());
    for e in fs::read_dir(&base).unwrap() {
        let p = e.unwrap().path();
        fs::copy(&p, dir.join(p.file_name().unwrap())).unwrap();
    }
    let read = |p: &Path| -> Value {
        fs::read_to_string(p)
            .map(|t| serde_json::from_str(&t).unwrap())
            .unwrap_or(json!({}))
    };
    if let Some(edits) = v["tokenizer_config"].as_object() {
        let p = dir.join("tokenizer_config.json");
        let mut tc = read(&p);
        for (k, val) in edits {
            if val.get("$delete").is_some() {
                tc.as_object_mut().unwrap().remove(k);
            } else {
                tc[k] = val.clone();
            }
        }
        fs::write(&p, tc.to_string()).unwrap();
    }
    if v["tokenizer_json_post_processor_null"] == true {
        let p = dir.join("tokenizer.json");
        let mut tj = read(&p);
        tj["post_processor"] = Value::Null;
        fs::write(&p, tj.to_string()).unwrap();
    }
    if v["drop_config"] == true {
        let _ = fs::remove_file(dir.join("config.json"));
    }
    if v["config"].is_object() {
        fs::write(dir.join("config.json"), v["config"].to_string()).unwrap();
    }
    dir
}

#[test]
fn the_transformers_stack_predicts_live_transformers_on_edited_model_directories() {
    let golden: Value = serde_json::from_str(
        &fs::read_to_string(corpus().join("goldens/stack_variants.json")).unwrap(),
    )
    .unwrap();
    let strings: Vec<String> = serde_json::from_value(golden["strings"].clone()).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    let mut compared = 0;
    let variants = golden["variants"].as_array().unwrap();
    for v in variants {
        let name = v["name"].as_str().unwrap();
        let dir = make_variant(tmp.path(), v);
        let model = chatgate::artifacts::ModelDir::open(&dir).unwrap();
        let feed = chatgate::stack::feed(Stack::Transformers, &model, false)
            .unwrap()
            .unwrap();
        let class = v["class"].as_str().unwrap();
        if !feed.tokenizer_origin.contains(class) {
            failures.push(format!(
                "{name}: transformers picks {class}, we predicted {:?}",
                feed.tokenizer_origin
            ));
        }
        let extra: Vec<String> = serde_json::from_value(v["extra_strings"].clone()).unwrap();
        let texts: Vec<&String> = strings.iter().chain(&extra).collect();
        for (key, special) in [("ids", false), ("ids_special", true)] {
            let want: Vec<Vec<u32>> = serde_json::from_value(v[key].clone()).unwrap();
            assert_eq!(want.len(), texts.len(), "{name}: golden shape");
            for (text, want) in texts.iter().zip(&want) {
                compared += 1;
                let got = feed.tokenizer.encode(text.as_str(), special).unwrap();
                if got.get_ids() != &want[..] {
                    failures.push(format!(
                        "{name} add_special_tokens={special} {text:?}\n  want {want:?}\n  got  {:?}",
                        got.get_ids()
                    ));
                }
            }
        }
    }
    assert!(
        variants.len() >= 48 && compared > 4000,
        "{compared} comparisons"
    );
    assert!(
        failures.is_empty(),
        "{} of {compared} differ:\n{}",
        failures.len(),
        failures
            .iter()
            .take(20)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// A model directory without tokenizer.json (tokenizer_config.json and the template only, as
/// trimmed copies and many hub snapshots are): the text still equals transformers' render of
/// the full model — the special tokens come from tokenizer_config.json, as strings (Llama-3.2's
/// `<|begin_of_text|>`) or AddedToken dicts (DeepSeek-V3's `<｜begin▁of▁sentence｜>`) — and the
/// output says that ids need a tokenizer (tests/corpus/goldens/tokenizerless.json, made by
/// scripts/fixtures/make_tokenizerless_goldens.py with transformers 5.23).
#[test]
fn model_dirs_without_tokenizer_json_render_like_transformers() {
    let goldens: Value = serde_json::from_str(
        &fs::read_to_string(corpus().join("goldens/tokenizerless.json")).unwrap(),
    )
    .unwrap();
    let day = goldens["source"]["day"].as_str().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let mut checked = 0;
    for case in goldens["cases"].as_array().unwrap() {
        let folder = case["model"].as_str().unwrap();
        let dir = tmp.path().join(folder);
        if !dir.exists() {
            // Every file but the tokenizer itself.
            fs::create_dir(&dir).unwrap();
            for e in fs::read_dir(corpus().join("models").join(folder)).unwrap() {
                let e = e.unwrap();
                if e.file_name() != "tokenizer.json" {
                    fs::copy(e.path(), dir.join(e.file_name())).unwrap();
                }
            }
            if let Some(t) = case["template"].as_str() {
                fs::copy(
                    corpus().join("templates").join(t),
                    dir.join("chat_template.jinja"),
                )
                .unwrap();
            }
        }
        let messages = tmp.path().join("messages.json");
        fs::write(&messages, case["messages"].to_string()).unwrap();
        let agp = case["add_generation_prompt"].as_bool().unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_chatgate"));
        cmd.env("CHATGATE_NOW", day)
            .args(["render", "--model"])
            .arg(&dir);
        cmd.arg("--messages")
            .arg(&messages)
            .args(["--format", "json"]);
        if agp {
            cmd.arg("--add-generation-prompt");
        }
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{folder}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let got: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(got["text"], case["text"], "{folder} (agp {agp})");
        assert_eq!(got["ids"], Value::Null, "{folder}");
        assert!(
            got["no_ids"].as_str().unwrap().contains("has no tokenizer"),
            "{got}"
        );
        checked += 1;
    }
    assert_eq!(checked, 12);
    // The text form says why there are no ids, instead of asking for --model.
    let dir = tmp.path().join("DeepSeek-V3");
    let out = Command::new(env!("CARGO_BIN_EXE_chatgate"))
        .args(["render", "--model"])
        .arg(&dir)
        .arg("--messages")
        .arg(tmp.path().join("messages.json"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("<｜begin▁of▁sentence｜>"), "{text}");
    assert!(
        text.contains("has no tokenizer (ids need tokenizer.json"),
        "{text}"
    );
    assert!(!text.contains("pass --model DIR"), "{text}");
}

/// `--template-kwargs` reaches the template as apply_chat_template's keyword arguments do:
/// Qwen3's template closes an empty think block in the generation prompt when
/// `enable_thinking` is false. Expected texts: transformers 5.23's `render_jinja_template(...,
/// add_generation_prompt=True, **kwargs)` on the same template and messages.
#[test]
fn template_kwargs_reach_the_template() {
    let tmp = tempfile::tempdir().unwrap();
    let m = tmp.path().join("m.json");
    fs::write(&m, r#"[{"role": "user", "content": "Hi"}]"#).unwrap();
    let template = corpus().join("templates/Qwen-Qwen3.jinja");
    let run = |extra: &[&str]| {
        let out = Command::cargo_bin("chatgate")
            .unwrap()
            .args(["render", "--template"])
            .arg(&template)
            .arg("--messages")
            .arg(&m)
            .args(["--add-generation-prompt", "--format", "json"])
            .args(extra)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        (out.status.code(), out.stdout, err)
    };
    let (code, out, err) = run(&[]);
    assert_eq!(code, Some(0), "{err}");
    let text = serde_json::from_slice::<Value>(&out).unwrap()["text"].clone();
    assert_eq!(
        text,
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    );
    let (code, out, err) = run(&["--template-kwargs", r#"{"enable_thinking": false}"#]);
    assert_eq!(code, Some(0), "{err}");
    let text = serde_json::from_slice::<Value>(&out).unwrap()["text"].clone();
    assert_eq!(
        text,
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    );
    // Not an object: bad input, said plainly.
    let (code, _, err) = run(&["--template-kwargs", "[1]"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("a JSON object"), "{err}");
}
