//! `ModelDir::open` and the special-token resolution.
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{config, gguf, gguf_tokenizer, safetensors, templates, tokenizer_files};
use super::{GgufInfo, ModelDir, TemplateSources, TokenizerFile, WeightFile};
use crate::error::{Error, Result};
use crate::template::SpecialTokens;

pub const CONFIG_FILE: &str = "config.json";
pub const TOKENIZER_FILE: &str = "tokenizer.json";
pub const TOKENIZER_CONFIG_FILE: &str = "tokenizer_config.json";
pub const SPECIAL_TOKENS_MAP_FILE: &str = "special_tokens_map.json";
pub const GENERATION_CONFIG_FILE: &str = "generation_config.json";
pub const SHARD_INDEX_FILE: &str = "model.safetensors.index.json";

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn has_ext(path: &Path, ext: &str) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case(ext))
}

/// The tokenizer a GGUF describes, with why not (or what to know) recorded in `notes`.
fn gguf_tokenizer_noted(info: &GgufInfo, notes: &mut Vec<String>) -> Option<TokenizerFile> {
    let name = file_name(&info.path);
    match gguf_tokenizer::build(info) {
        Ok(t) => {
            notes.extend(t.notes.into_iter().map(|n| format!("{name}: {n}")));
            Some(t.file)
        }
        Err(why) => {
            notes.push(format!(
                "{name}: no tokenizer built from the GGUF metadata: {why}"
            ));
            None
        }
    }
}

pub fn open(path: &Path) -> Result<ModelDir> {
    let meta = std::fs::metadata(path).map_err(|e| {
        Error::io(path, e).hint("give a Hugging Face model directory or a .gguf file")
    })?;
    if meta.is_file() {
        if has_ext(path, "gguf") {
            return open_gguf_file(path);
        }
        return Err(Error::in_file(path, "is a file but not a .gguf model")
            .hint("give the model directory (the folder holding config.json and tokenizer.json) or a .gguf file"));
    }
    open_dir(path)
}

/// A single GGUF file: weights, tokenizer and templates all come from its header.
fn open_gguf_file(path: &Path) -> Result<ModelDir> {
    let info = gguf::read_gguf(path)?;
    let name = file_name(path);
    let weights = vec![gguf::weight_file(&info, &name)];
    let mut notes = Vec::new();
    let tokenizer = gguf_tokenizer_noted(&info, &mut notes);
    let templates = templates::resolve(None, None, Some((&info, name)))?;
    Ok(ModelDir {
        root: path.to_path_buf(),
        config: None,
        weights,
        shard_index: None,
        tokenizer,
        tokenizer_config: None,
        special_tokens_map: None,
        generation_config: None,
        templates,
        gguf: Some(info),
        notes,
    })
}

fn open_dir(root: &Path) -> Result<ModelDir> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(root)
        .map_err(|e| Error::io(root, e))?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    entries.sort();

    let mut notes = Vec::new();
    let present = |name: &str| Some(root.join(name)).filter(|p| p.is_file());

    let config = present(CONFIG_FILE)
        .map(|p| config::read_model_config(&p))
        .transpose()?;
    let generation_config = present(GENERATION_CONFIG_FILE)
        .map(|p| config::read_generation_config(&p))
        .transpose()?;
    let tokenizer_config = present(TOKENIZER_CONFIG_FILE)
        .map(|p| tokenizer_files::read_tokenizer_config(&p))
        .transpose()?;
    let special_tokens_map = present(SPECIAL_TOKENS_MAP_FILE)
        .map(|p| tokenizer_files::read_special_tokens_map(&p))
        .transpose()?;

    // Weights: top-level *.safetensors and *.gguf.
    let mut weights: Vec<WeightFile> = Vec::new();
    let mut ggufs: Vec<GgufInfo> = Vec::new();
    for path in &entries {
        if has_ext(path, "safetensors") {
            weights.push(safetensors::read_header(path, &file_name(path))?);
        } else if has_ext(path, "gguf") {
            let info = gguf::read_gguf(path)?;
            weights.push(gguf::weight_file(&info, &file_name(path)));
            ggufs.push(info);
        }
    }
    weights.sort_by(|a, b| a.name.cmp(&b.name));

    let shard_index = match present(SHARD_INDEX_FILE) {
        Some(p) => Some(safetensors::read_index(&p, root)?),
        None => {
            // Other index names (e.g. consolidated.safetensors.index.json): take the first.
            match entries
                .iter()
                .find(|p| file_name(p).ends_with(".safetensors.index.json"))
            {
                Some(p) => Some(safetensors::read_index(p, root)?),
                None => None,
            }
        }
    };

    let gguf = match ggufs.len() {
        0 => None,
        1 => ggufs.pop(),
        n => {
            notes.push(format!(
                "{n} GGUF files in the directory; none is taken as the model's GGUF header (open one file to inspect it)"
            ));
            None
        }
    };

    let tokenizer = match present(TOKENIZER_FILE) {
        Some(p) => Some(tokenizer_files::read_tokenizer_json(&p)?),
        None => match &gguf {
            Some(info) => gguf_tokenizer_noted(info, &mut notes),
            None => None,
        },
    };

    let tc_obj = tokenizer_config.as_ref().and_then(|tc| match &tc.raw {
        Value::Object(map) => Some((tc.path.as_path(), map)),
        _ => None,
    });
    let templates: TemplateSources = templates::resolve(
        Some(root),
        tc_obj,
        gguf.as_ref().map(|info| (info, file_name(&info.path))),
    )?;
    if templates
        .shadowed
        .iter()
        .any(|t| t.origin == templates::LEGACY_CHAT_TEMPLATE_FILE)
    {
        notes.push(format!(
            "{} is a processor-level template; a tokenizer ignores it, so it is shadowed",
            templates::LEGACY_CHAT_TEMPLATE_FILE
        ));
    }

    let found_anything = config.is_some()
        || tokenizer.is_some()
        || tokenizer_config.is_some()
        || special_tokens_map.is_some()
        || generation_config.is_some()
        || !weights.is_empty()
        || shard_index.is_some()
        || !templates.templates.is_empty();
    if !found_anything {
        return Err(Error::in_file(
            root,
            "holds no model files (config.json, tokenizer.json, tokenizer_config.json, *.safetensors, *.gguf, chat_template.jinja)",
        )
        .hint("point at a Hugging Face model directory or at a .gguf file"));
    }

    Ok(ModelDir {
        root: root.to_path_buf(),
        config,
        weights,
        shard_index,
        tokenizer,
        tokenizer_config,
        special_tokens_map,
        generation_config,
        templates,
        gguf,
        notes,
    })
}

pub fn special_tokens(dir: &ModelDir) -> SpecialTokens {
    let tc = dir.tokenizer_config.as_ref();
    // transformers 5 (`_from_pretrained`) reads special_tokens_map.json only when
    // tokenizer_config.json has no `added_tokens_decoder` (a legacy save), and then lets it
    // override the config's tokens; otherwise the map is ignored (verified with 5.23.0).
    let legacy = tc.is_none_or(|tc| tc.raw.get("added_tokens_decoder").is_none());
    let map = if legacy {
        dir.special_tokens_map.as_ref()
    } else {
        None
    };
    let gguf = dir.gguf.as_ref();
    let hf_files = tc.is_some() || map.is_some();
    let pick =
        |from_tc: Option<&String>, from_map: Option<&String>, gguf_key: &str| -> Option<String> {
            match from_map.or(from_tc) {
                Some(t) => Some(t.clone()),
                // GGUF metadata only when no Hugging Face tokenizer files name special tokens.
                None if !hf_files => gguf.and_then(|g| g.token_text(gguf_key)),
                None => None,
            }
        };
    macro_rules! tok {
        ($field:ident, $key:expr) => {
            pick(
                tc.and_then(|t| t.$field.as_ref()),
                map.and_then(|m| m.$field.as_ref()),
                $key,
            )
        };
    }
    SpecialTokens {
        bos_token: tok!(bos_token, "bos_token_id"),
        eos_token: tok!(eos_token, "eos_token_id"),
        unk_token: tok!(unk_token, "unknown_token_id"),
        sep_token: tok!(sep_token, "seperator_token_id"),
        pad_token: tok!(pad_token, "padding_token_id"),
        cls_token: tok!(cls_token, "cls_token_id"),
        mask_token: tok!(mask_token, "mask_token_id"),
    }
}
