//! Rendering parity with the committed transformers reference goldens (tests/reference/).
//!
//! The goldens were produced by transformers 5 itself (scripts/fixtures/make_reference_goldens.py):
//! adversarial mini-templates, the corpus templates and the corpus model templates, over
//! adversarial inputs, with add_generation_prompt on/off and continue_final_message.
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use chatgate::template::{ChatTemplate, RenderRequest, SpecialTokens, TemplateError};
use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read_json(path: &Path) -> Value {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("parse {}: {e}", path.display()))
}

fn special_tokens(v: &Value) -> SpecialTokens {
    let get = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
    SpecialTokens {
        bos_token: get("bos_token"),
        eos_token: get("eos_token"),
        unk_token: get("unk_token"),
        sep_token: get("sep_token"),
        pad_token: get("pad_token"),
        cls_token: get("cls_token"),
        mask_token: get("mask_token"),
    }
}

/// All inputs by id: tests/reference/inputs.json plus the corpus conversations ("corpus:<id>").
fn inputs() -> HashMap<String, Value> {
    let mut all = HashMap::new();
    for inp in read_json(&root().join("tests/reference/inputs.json"))
        .as_array()
        .expect("inputs")
    {
        all.insert(inp["id"].as_str().expect("id").to_string(), inp.clone());
    }
    let corpus = root().join("tests/corpus/goldens/conversations.json");
    for conv in read_json(&corpus).as_array().expect("conversations") {
        all.insert(
            format!("corpus:{}", conv["id"].as_str().expect("id")),
            conv.clone(),
        );
    }
    all
}

fn template_source(golden: &Value) -> String {
    if let Some(src) = golden.get("template_source").and_then(Value::as_str) {
        return src.to_string();
    }
    let path = golden["template"].as_str().expect("template path");
    let file = match path.strip_prefix("corpus:") {
        Some(rel) => root().join("tests/corpus").join(rel),
        None => root().join("tests/reference").join(path),
    };
    std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("read {}: {e}", file.display()))
}

#[test]
fn transformers_reference_goldens() {
    let inputs = inputs();
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("tests/reference/goldens"))
        .expect("goldens dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 40,
        "expected the reference goldens, found {}",
        files.len()
    );

    let (mut checked, mut texts, mut spans_checked) = (0, 0, 0);
    let mut failures = Vec::new();
    for path in &files {
        let name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default()
            .to_string();
        let golden = read_json(path);
        let source = template_source(&golden);
        let compiled = ChatTemplate::new(&source);
        for case in golden["cases"].as_array().expect("cases") {
            checked += 1;
            let input_id = case["input"].as_str().expect("input id");
            let inp = inputs
                .get(input_id)
                .unwrap_or_else(|| panic!("{name}: unknown input {input_id}"));
            let agp = case["add_generation_prompt"].as_bool().unwrap_or(false);
            let cfm = case["continue_final_message"].as_bool().unwrap_or(false);
            let label = format!("{name} [{input_id}, agp={agp}, cfm={cfm}]");
            let result = compiled.as_ref().map_err(Clone::clone).and_then(|t| {
                t.render(&RenderRequest {
                    messages: inp["messages"].as_array().cloned().unwrap_or_default(),
                    tools: inp.get("tools").cloned(),
                    documents: inp.get("documents").cloned(),
                    add_generation_prompt: agp,
                    continue_final_message: cfm,
                    special_tokens: special_tokens(&case["special_tokens"]),
                    extra: inp
                        .get("extra")
                        .and_then(Value::as_object)
                        .cloned()
                        .unwrap_or_default(),
                    now: None,
                })
            });
            match (case.get("text").and_then(Value::as_str), result) {
                (Some(want), Ok(got)) => {
                    texts += 1;
                    if got.text != want {
                        failures.push(format!(
                            "{label}: text differs\n  want {want:?}\n  got  {:?}",
                            got.text
                        ));
                        continue;
                    }
                    let want_spans: Vec<(usize, usize)> = case["spans"]
                        .as_array()
                        .map(|a| {
                            a.iter()
                                .filter_map(|s| {
                                    Some((
                                        s.get(0)?.as_u64()? as usize,
                                        s.get(1)?.as_u64()? as usize,
                                    ))
                                })
                                .collect()
                        })
                        .unwrap_or_default();
                    if !want_spans.is_empty() || (t_has_gen(&compiled) && !cfm) {
                        spans_checked += 1;
                        if got.assistant_spans != want_spans {
                            failures.push(format!(
                                "{label}: generation spans differ\n  want {want_spans:?}\n  got  {:?}",
                                got.assistant_spans
                            ));
                        }
                    }
                }
                (Some(_), Err(e)) => failures.push(format!("{label}: unexpected error: {e}")),
                (None, Ok(got)) => failures.push(format!(
                    "{label}: expected an error ({}), rendered {:?}",
                    case["error"], got.text
                )),
                (None, Err(e)) => {
                    if case["error_type"] == "TemplateError" {
                        let msg = case["error"]
                            .as_str()
                            .unwrap_or_default()
                            .trim_start_matches("TemplateError: ");
                        if e != TemplateError::Raised(msg.to_string()) {
                            failures.push(format!(
                                "{label}: expected raise_exception({msg:?}), got {e}"
                            ));
                        }
                    }
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {checked} reference cases differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(
        checked >= 1000 && texts >= 600 && spans_checked >= 30,
        "{checked} cases, {texts} texts, {spans_checked} spans"
    );
}

fn t_has_gen(t: &Result<ChatTemplate, TemplateError>) -> bool {
    t.as_ref()
        .map(ChatTemplate::has_generation_tags)
        .unwrap_or(false)
}
