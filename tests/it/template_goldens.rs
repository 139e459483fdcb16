//! Rendering parity with the corpus goldens: what transformers 5's `apply_chat_template`
//! produced for real templates and model directories (tests/corpus/goldens).
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use chatgate::template::{ChatTemplate, RenderRequest, SpecialTokens, TemplateError};
use serde_json::Value;

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus")
}

fn read_json(path: &Path) -> Value {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("parse {}: {e}", path.display()))
}

/// A special token in tokenizer_config.json: a string or an AddedToken dict.
fn token(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("content").and_then(Value::as_str).map(str::to_string),
        _ => None,
    }
}

/// The template and special tokens transformers would load from a model directory.
fn load_model(dir: &Path) -> (String, SpecialTokens) {
    let config = read_json(&dir.join("tokenizer_config.json"));
    let jinja = dir.join("chat_template.jinja");
    let template = if jinja.exists() {
        std::fs::read_to_string(&jinja).expect("read chat_template.jinja")
    } else {
        match config.get("chat_template") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Array(list)) => list
                .iter()
                .find(|t| t.get("name").and_then(Value::as_str) == Some("default"))
                .and_then(|t| t.get("template"))
                .and_then(Value::as_str)
                .expect("default chat template")
                .to_string(),
            other => panic!("{}: no chat template ({other:?})", dir.display()),
        }
    };
    let map_path = dir.join("special_tokens_map.json");
    let map = if map_path.exists() {
        read_json(&map_path)
    } else {
        Value::Null
    };
    let tok = |name: &str| token(config.get(name)).or_else(|| token(map.get(name)));
    let special = SpecialTokens {
        bos_token: tok("bos_token"),
        eos_token: tok("eos_token"),
        unk_token: tok("unk_token"),
        pad_token: tok("pad_token"),
        ..SpecialTokens::default()
    };
    (template, special)
}

/// The directory a model golden refers to (its recorded path, else `models/<name>`).
fn model_dir(golden_path: &Path, source: &Value) -> PathBuf {
    let recorded = corpus().join(source["path"].as_str().unwrap_or_default());
    if recorded.join("tokenizer_config.json").exists() {
        return recorded;
    }
    let stem = golden_path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default();
    corpus()
        .join("models")
        .join(stem.trim_start_matches("model__"))
}

#[test]
fn corpus_goldens_render_identically() {
    let conversations = read_json(&corpus().join("goldens/conversations.json"));
    let by_id: HashMap<&str, &Value> = conversations
        .as_array()
        .expect("conversations list")
        .iter()
        .map(|c| (c["id"].as_str().expect("conversation id"), c))
        .collect();

    let mut golden_files: Vec<PathBuf> = std::fs::read_dir(corpus().join("goldens"))
        .expect("goldens dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            (name.starts_with("template__") || name.starts_with("model__"))
                && name.ends_with(".json")
        })
        .collect();
    golden_files.sort();
    assert!(
        golden_files.len() >= 13,
        "expected the corpus goldens, found {}",
        golden_files.len()
    );

    let mut failures = Vec::new();
    let mut checked = 0;
    for path in &golden_files {
        let golden = read_json(path);
        let source = &golden["source"];
        let (template_src, special) = if source["kind"] == "model" {
            load_model(&model_dir(path, source))
        } else {
            let src = std::fs::read_to_string(
                corpus().join(source["path"].as_str().expect("template path")),
            )
            .expect("read template");
            let special = SpecialTokens {
                bos_token: source["bos_token"].as_str().map(str::to_string),
                eos_token: source["eos_token"].as_str().map(str::to_string),
                ..SpecialTokens::default()
            };
            (src, special)
        };
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_string();
        let template = match ChatTemplate::new(&template_src) {
            Ok(t) => t,
            Err(e) => {
                failures.push(format!("{name}: template does not compile: {e}"));
                continue;
            }
        };
        for case in golden["cases"].as_array().expect("cases") {
            checked += 1;
            let id = case["id"].as_str().expect("case id");
            let agp = case["add_generation_prompt"].as_bool().unwrap_or(false);
            let Some(conv) = by_id.get(id) else {
                failures.push(format!("{name} [{id}]: unknown conversation"));
                continue;
            };
            let req = RenderRequest {
                messages: conv["messages"].as_array().cloned().unwrap_or_default(),
                tools: conv.get("tools").cloned(),
                add_generation_prompt: agp,
                special_tokens: special.clone(),
                ..RenderRequest::default()
            };
            let got = template.render(&req);
            let label = format!("{name} [{id}, add_generation_prompt={agp}]");
            match (case.get("text").and_then(Value::as_str), got) {
                (Some(want), Ok(r)) if r.text == want => {}
                (Some(want), Ok(r)) => failures.push(format!(
                    "{label}: text differs\n  want {want:?}\n  got  {:?}",
                    r.text
                )),
                (Some(_), Err(e)) => failures.push(format!("{label}: unexpected error: {e}")),
                (None, Err(e)) => {
                    // A template that raises must fail the same way, with its own message.
                    let want = case["error"].as_str().unwrap_or_default();
                    if let Some(msg) = want.strip_prefix("TemplateError: ") {
                        if e != TemplateError::Raised(msg.to_string()) {
                            failures.push(format!(
                                "{label}: expected raise_exception({msg:?}), got {e}"
                            ));
                        }
                    }
                }
                (None, Ok(r)) => failures.push(format!(
                    "{label}: expected an error ({}), rendered {:?}",
                    case["error"], r.text
                )),
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {checked} golden cases differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(checked >= 300, "only {checked} golden cases checked");
}
