//! Where the chat templates come from, resolved as transformers 5's tokenizer resolves them.
//!
//! Precedence (transformers 5.23 `PreTrainedTokenizerBase._from_pretrained`):
//! 1. `chat_template.jinja` ("default") and `additional_chat_templates/*.jinja` (named by file
//!    stem). If any of these files exist they replace *every* template in
//!    tokenizer_config.json ("If independent chat template file(s) exist, they take priority over
//!    template entries in the tokenizer config"). An additional file named `default.jinja`
//!    overrides `chat_template.jinja`, as the later dict insert does in transformers.
//! 2. tokenizer_config.json `chat_template`: a string ("default") or a list of
//!    `{"name", "template"}` (later duplicates win, as the dict comprehension does).
//! 3. Legacy `chat_template.json` (`{"chat_template": ...}`) is read only by *processors*
//!    (multimodal models); a tokenizer ignores it. chatgate models the tokenizer, so it is put in
//!    `shadowed` whenever 1. or 2. supplies a template, and used as the "default" template only
//!    when nothing else exists (a processor-only checkpoint would be rendered with it).
//! 4. A GGUF's `tokenizer.chat_template` / `tokenizer.chat_template.<name>`: what llama.cpp uses;
//!    used when the directory has no Hugging Face template at all, shadowed otherwise.
use std::path::Path;

use serde_json::{Map, Value};

use super::{GgufInfo, TemplateSource, TemplateSources};
use crate::error::{Error, Result};

pub const CHAT_TEMPLATE_FILE: &str = "chat_template.jinja";
pub const CHAT_TEMPLATE_DIR: &str = "additional_chat_templates";
pub const LEGACY_CHAT_TEMPLATE_FILE: &str = "chat_template.json";

/// Insert by name; a replaced entry goes to `shadowed`.
fn put(list: &mut Vec<TemplateSource>, shadowed: &mut Vec<TemplateSource>, t: TemplateSource) {
    if let Some(pos) = list.iter().position(|x| x.name == t.name) {
        let old = std::mem::replace(&mut list[pos], t);
        shadowed.push(old);
    } else {
        list.push(t);
    }
}

fn read_template_file(path: &Path) -> Result<String> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    String::from_utf8(bytes).map_err(|e| {
        Error::in_file(
            path,
            format!("not valid UTF-8 (byte {})", e.utf8_error().valid_up_to()),
        )
        .hint("save the chat template as UTF-8 text")
    })
}

/// The standalone template files of a directory (step 1).
fn template_files(root: &Path, shadowed: &mut Vec<TemplateSource>) -> Result<Vec<TemplateSource>> {
    let mut out = Vec::new();
    let main = root.join(CHAT_TEMPLATE_FILE);
    if main.is_file() {
        out.push(TemplateSource {
            name: "default".into(),
            origin: CHAT_TEMPLATE_FILE.into(),
            text: read_template_file(&main)?,
        });
    }
    let dir = root.join(CHAT_TEMPLATE_DIR);
    if dir.is_dir() {
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .map_err(|e| Error::io(&dir, e))?
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "jinja"))
            .collect();
        files.sort();
        for path in files {
            let Some(stem) = path.file_stem().map(|s| s.to_string_lossy().into_owned()) else {
                continue;
            };
            let file = path
                .file_name()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            let t = TemplateSource {
                name: stem,
                origin: format!("{CHAT_TEMPLATE_DIR}/{file}"),
                text: read_template_file(&path)?,
            };
            put(&mut out, shadowed, t);
        }
    }
    Ok(out)
}

/// Templates in a `chat_template` value (string or list of {name, template}).
fn templates_from_value(
    path: &Path,
    file_label: &str,
    key: &str,
    value: &Value,
    shadowed: &mut Vec<TemplateSource>,
) -> Result<Vec<TemplateSource>> {
    let mut out = Vec::new();
    let bad = |what: String| {
        Error::in_file(path, what).hint(format!(
            "`{key}` must be a string, or a list of {{\"name\": ..., \"template\": ...}} objects"
        ))
    };
    match value {
        Value::Null => {}
        Value::String(s) => out.push(TemplateSource {
            name: "default".into(),
            origin: format!("{file_label}#{key}"),
            text: s.clone(),
        }),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let Value::Object(obj) = item else {
                    return Err(bad(format!(
                        "`{key}[{i}]` should be an object with `name` and `template`, but it is {}",
                        super::json::kind(item)
                    )));
                };
                let name = match obj.get("name") {
                    Some(Value::String(s)) => s.clone(),
                    other => {
                        return Err(bad(format!(
                            "`{key}[{i}].name` should be a string, but it is {}",
                            other.map(super::json::kind).unwrap_or("missing")
                        )))
                    }
                };
                let text = match obj.get("template") {
                    Some(Value::String(s)) => s.clone(),
                    other => {
                        return Err(bad(format!(
                            "`{key}[{i}].template` should be a string, but it is {}",
                            other.map(super::json::kind).unwrap_or("missing")
                        )))
                    }
                };
                let t = TemplateSource {
                    origin: format!("{file_label}#{key}[{name}]"),
                    name,
                    text,
                };
                put(&mut out, shadowed, t);
            }
        }
        other => {
            return Err(bad(format!(
                "`{key}` should be a string or a list of named templates, but it is {}",
                super::json::kind(other)
            )))
        }
    }
    Ok(out)
}

/// Templates a GGUF carries in its metadata.
pub fn gguf_templates(info: &GgufInfo, label: &str) -> Vec<TemplateSource> {
    let mut out = Vec::new();
    let mut shadowed = Vec::new();
    for (key, value) in &info.metadata {
        let name = if key == "tokenizer.chat_template" {
            "default".to_string()
        } else if let Some(n) = key.strip_prefix("tokenizer.chat_template.") {
            n.to_string()
        } else {
            continue;
        };
        if let Value::String(text) = value {
            let t = TemplateSource {
                name,
                origin: format!("{label}#{key}"),
                text: text.clone(),
            };
            put(&mut out, &mut shadowed, t);
        }
    }
    out
}

/// Resolve all sources. `tokenizer_config` is the parsed tokenizer_config.json (path, object).
pub fn resolve(
    root: Option<&Path>,
    tokenizer_config: Option<(&Path, &Map<String, Value>)>,
    gguf: Option<(&GgufInfo, String)>,
) -> Result<TemplateSources> {
    let mut shadowed = Vec::new();
    let files = match root {
        Some(r) => template_files(r, &mut shadowed)?,
        None => Vec::new(),
    };
    let config = match tokenizer_config {
        Some((path, obj)) => match obj.get("chat_template") {
            Some(v) => templates_from_value(
                path,
                "tokenizer_config.json",
                "chat_template",
                v,
                &mut shadowed,
            )?,
            None => Vec::new(),
        },
        None => Vec::new(),
    };
    let legacy = match root
        .map(|r| r.join(LEGACY_CHAT_TEMPLATE_FILE))
        .filter(|p| p.is_file())
    {
        Some(path) => {
            let obj = super::json::read_object(&path)?;
            match obj.get("chat_template") {
                Some(v) => {
                    templates_from_value(&path, LEGACY_CHAT_TEMPLATE_FILE, "chat_template", v, &mut shadowed)?
                        .into_iter()
                        .map(|mut t| {
                            // A single legacy template is labelled by the file alone.
                            if t.origin == format!("{LEGACY_CHAT_TEMPLATE_FILE}#chat_template") {
                                t.origin = LEGACY_CHAT_TEMPLATE_FILE.into();
                            }
                            t
                        })
                        .collect()
                }
                None => {
                    return Err(Error::in_file(&path, "has no `chat_template` key")
                        .hint(format!(
                            "{LEGACY_CHAT_TEMPLATE_FILE} must be {{\"chat_template\": \"...\"}}; or move the template to {CHAT_TEMPLATE_FILE}"
                        )))
                }
            }
        }
        None => Vec::new(),
    };
    let gguf = match gguf {
        Some((info, label)) => gguf_templates(info, &label),
        None => Vec::new(),
    };

    let mut tiers = [files, config, legacy, gguf].into_iter();
    let mut templates = Vec::new();
    for tier in tiers.by_ref() {
        if !tier.is_empty() {
            templates = tier;
            break;
        }
    }
    for tier in tiers {
        shadowed.extend(tier);
    }
    // "default" first, the rest in the order found.
    if let Some(pos) = templates.iter().position(|t| t.name == "default") {
        let d = templates.remove(pos);
        templates.insert(0, d);
    }
    Ok(TemplateSources {
        templates,
        shadowed,
    })
}
