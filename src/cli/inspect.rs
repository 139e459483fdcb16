//! `chatgate inspect`: what a model directory ships, and whether its files agree.
use serde_json::{json, Value};

use super::{Format, InspectArgs};
use crate::artifacts::ModelDir;
use crate::chain;
use crate::error::Result;
use crate::report;
use crate::template::ChatTemplate;
use crate::verdict::Findings;

pub fn run(a: InspectArgs) -> Result<i32> {
    let model = ModelDir::open(&a.dir)?;
    let doc = describe(&model)?;
    let mut findings = Findings::default();
    findings.extend(chain::tokenizer::vocab_size(&model));
    findings.extend(chain::tokenizer::special_tokens(&model));
    findings.sort();
    match a.format {
        Format::Json => {
            let mut doc = doc;
            doc["consistency"] = json!(findings.0);
            println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
        }
        Format::Text => {
            print!("{}", text(&doc));
            print!(
                "{}",
                report::terminal("\nconsistency", &findings, report::use_colour())
            );
        }
    }
    Ok(0)
}

fn describe(model: &ModelDir) -> Result<Value> {
    let identity = model.hash_weights()?;
    let weights: Vec<Value> = model
        .weights
        .iter()
        .map(|w| {
            let sha = identity.files.iter().find(|f| f.name == w.name).map(|f| f.sha256.clone());
            json!({"name": w.name, "format": w.format, "size": w.size, "tensors": w.tensors, "parameters": w.parameters, "dtypes": w.dtypes, "sha256": sha})
        })
        .collect();
    let config = model
        .config
        .as_ref()
        .map(|c| serde_json::to_value(c).unwrap_or(Value::Null));
    let tokenizer = match &model.tokenizer {
        Some(t) => {
            let special = model.special_tokens();
            let named = special.named();
            let specials: Vec<Value> = named
                .iter()
                .filter_map(|(k, v)| {
                    v.as_ref()
                        .map(|v| json!({"name": k, "text": v, "id": t.tokenizer.token_to_id(v)}))
                })
                .collect();
            json!({
                "path": t.path, "sha256": t.sha256, "fingerprint": crate::chain::run::probe::fingerprint(&t.tokenizer)?,
                "probe_version": crate::chain::run::probe::PROBE_VERSION, "vocab_size": t.vocab_size, "model_type": t.model_type,
                "pre_tokenizer": t.pre_tokenizer, "special_tokens": specials,
                "added_tokens": t.added_tokens.iter().filter(|a| a.special).map(|a| json!({"id": a.id, "content": a.content})).collect::<Vec<_>>(),
            })
        }
        None => Value::Null,
    };
    let special = model.special_tokens();
    let templates: Vec<Value> = model
        .templates
        .templates
        .iter()
        .map(|t| {
            let caps = ChatTemplate::new(&t.text).map(|c| serde_json::to_value(c.capabilities(&special)).unwrap_or(Value::Null)).unwrap_or_else(|e| json!({"error": e.to_string()}));
            json!({"name": t.name, "origin": t.origin, "sha256": crate::chain::run::lock::template_sha256(&t.text), "capabilities": caps})
        })
        .collect();
    let gguf = model.gguf.as_ref().map(|g| {
        let keep: serde_json::Map<String, Value> = g
            .metadata
            .iter()
            .map(|(k, v)| match v {
                Value::Array(a) if a.len() > 8 => (k.clone(), json!(format!("[{} items]", a.len()))),
                Value::String(s) if s.len() > 200 => (k.clone(), json!(format!("({} chars)", s.len()))),
                _ => (k.clone(), v.clone()),
            })
            .collect();
        json!({"path": g.path, "version": g.version, "tensor_count": g.tensor_count, "metadata": keep})
    });
    Ok(json!({
        "model": model.root,
        "weights": {"files": weights, "total_sha256": identity.total},
        "config": config,
        "tokenizer": tokenizer,
        "templates": {"active": model.templates.select(false).map(|t| t.origin.clone()), "available": templates,
                      "shadowed": model.templates.shadowed.iter().map(|t| t.origin.clone()).collect::<Vec<_>>()},
        "generation_config": model.generation_config.as_ref().map(|g| serde_json::to_value(g).unwrap_or(Value::Null)),
        "gguf": gguf,
    }))
}

/// The text view: the same facts as the JSON, one per line.
fn text(doc: &Value) -> String {
    let mut out = String::new();
    let mut line = |s: String| {
        out.push_str(&s);
        out.push('\n');
    };
    line(format!("model {}", doc["model"].as_str().unwrap_or("")));
    line("\nweights".into());
    for w in doc["weights"]["files"].as_array().into_iter().flatten() {
        line(format!(
            "  {}  {} {} bytes, {} tensors, {} parameters, sha256 {}",
            w["name"].as_str().unwrap_or(""),
            w["format"].as_str().unwrap_or(""),
            w["size"],
            w["tensors"],
            w["parameters"],
            w["sha256"].as_str().unwrap_or("")
        ));
    }
    line(format!(
        "  total sha256 {}",
        doc["weights"]["total_sha256"].as_str().unwrap_or("")
    ));
    if let Some(c) = doc["config"].as_object() {
        line("\nconfig.json".into());
        for k in [
            "model_type",
            "architectures",
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "max_position_embeddings",
            "bos_token_ids",
            "eos_token_ids",
            "dtype",
        ] {
            if let Some(v) = c.get(k).filter(|v| !v.is_null()) {
                line(format!("  {k}: {v}"));
            }
        }
    }
    let t = &doc["tokenizer"];
    if !t.is_null() {
        line("\ntokenizer".into());
        for k in [
            "path",
            "sha256",
            "fingerprint",
            "vocab_size",
            "model_type",
            "pre_tokenizer",
        ] {
            line(format!(
                "  {k}: {}",
                t[k].as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| t[k].to_string())
            ));
        }
        for s in t["special_tokens"].as_array().into_iter().flatten() {
            line(format!(
                "  {}: {} → id {}",
                s["name"].as_str().unwrap_or(""),
                s["text"],
                s["id"]
            ));
        }
    } else {
        line("\ntokenizer: none".into());
    }
    line("\nchat templates".into());
    line(format!(
        "  active: {}",
        doc["templates"]["active"].as_str().unwrap_or("(none)")
    ));
    for t in doc["templates"]["available"]
        .as_array()
        .into_iter()
        .flatten()
    {
        line(format!(
            "  {} ({}): {}",
            t["name"].as_str().unwrap_or(""),
            t["origin"].as_str().unwrap_or(""),
            t["capabilities"]
        ));
    }
    for s in doc["templates"]["shadowed"]
        .as_array()
        .into_iter()
        .flatten()
    {
        line(format!("  shadowed: {}", s.as_str().unwrap_or("")));
    }
    if let Some(g) = doc["generation_config"].as_object() {
        line("\ngeneration_config.json".into());
        for (k, v) in g.iter().filter(|(_, v)| !v.is_null()) {
            line(format!("  {k}: {v}"));
        }
    }
    if let Some(g) = doc["gguf"].as_object() {
        line(format!(
            "\ngguf v{} ({} tensors)",
            g["version"], g["tensor_count"]
        ));
        for (k, v) in g["metadata"].as_object().into_iter().flatten() {
            line(format!("  {k}: {v}"));
        }
    }
    out
}
