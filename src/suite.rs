//! The suite manifest (TOML): which model directory is served, what the SFT format was, which
//! conversations to render, which generation settings are expected, and where the lock lives.
//! `suites/example.toml` documents every key. Unknown keys and wrong types are errors that name
//! the line and the key (serde `deny_unknown_fields` + the toml crate's spans).
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

use crate::error::{Error, Result};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SuiteFile {
    /// A short name for reports and snapshot folders; defaults to the file stem.
    pub name: Option<String>,
    pub model: ModelSection,
    pub sft: Option<SftSection>,
    #[serde(default)]
    pub conversations: Vec<ConversationEntry>,
    pub conversations_file: Option<PathBuf>,
    #[serde(default)]
    pub generation: GenerationSection,
    #[serde(default)]
    pub lock: LockSection,
}

/// The serving side: the model directory the server loads, and how it renders and tokenizes.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSection {
    /// The model directory (or .gguf file) the server serves. Relative to the suite file.
    pub dir: PathBuf,
    /// Serve this template file instead of the directory's own (what `--chat-template` does).
    pub chat_template: Option<PathBuf>,
    /// Which named template to use when the directory ships several ("default", "tool_use", ...).
    pub template_name: Option<String>,
    /// Whether the server adds the tokenizer's special tokens when it tokenizes the rendered
    /// prompt: false for vLLM/SGLang/TGI chat (transformers' `apply_chat_template`), true for
    /// llama.cpp and for clients that send rendered text to a completions endpoint.
    #[serde(default)]
    pub add_special_tokens: bool,
}

/// The format the model was fine-tuned on.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SftSection {
    /// JSONL of golden conversations: {"messages": [...], "input_ids": [...], "assistant_mask": [...]}.
    pub golden: Option<PathBuf>,
    /// Or: the template the SFT pipeline rendered with…
    pub template: Option<PathBuf>,
    /// …and the tokenizer it used (a tokenizer.json or a model directory). Defaults to the
    /// serving model's tokenizer.
    pub tokenizer: Option<PathBuf>,
    /// Special tokens for the SFT template; default to the serving model's.
    pub bos_token: Option<String>,
    pub eos_token: Option<String>,
    /// Whether the SFT pipeline tokenized with special tokens added (TRL: false for
    /// conversational data).
    #[serde(default)]
    pub add_special_tokens: bool,
}

/// One conversation to render through both pipelines.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConversationEntry {
    pub id: Option<String>,
    pub messages: Vec<Value>,
    pub tools: Option<Vec<Value>>,
}

/// The generation settings the suite expects the serving defaults to have.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GenerationSection {
    /// Extra token ids the server is known to stop on (added to generation_config eos ∪ tokenizer eos).
    #[serde(default)]
    pub extra_stop_token_ids: Vec<u32>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<i64>,
    pub min_p: Option<f64>,
    pub repetition_penalty: Option<f64>,
    pub do_sample: Option<bool>,
    pub max_new_tokens: Option<u64>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockSection {
    /// The lock file; default `<suite file stem>.lock.json` beside the suite.
    pub path: Option<PathBuf>,
}

/// A loaded suite with every path resolved against the suite file's folder.
#[derive(Debug, Clone)]
pub struct Suite {
    pub path: PathBuf,
    pub name: String,
    pub file: SuiteFile,
    pub model_dir: PathBuf,
    pub chat_template: Option<PathBuf>,
    pub sft_golden: Option<PathBuf>,
    pub sft_template: Option<PathBuf>,
    pub sft_tokenizer: Option<PathBuf>,
    pub conversations_file: Option<PathBuf>,
    pub lock_path: PathBuf,
}

impl Suite {
    pub fn load(path: &Path) -> Result<Suite> {
        let text = crate::error::read_to_string(path)?;
        let file: SuiteFile = toml::from_str(&text).map_err(|e| {
            Error::in_file(path, format!("invalid suite: {}", e.to_string().trim_end()))
                .hint("see suites/example.toml for every key and its type")
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        let resolve = |p: &PathBuf| {
            if p.is_absolute() {
                p.clone()
            } else {
                base.join(p)
            }
        };
        let stem = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("suite")
            .to_string();
        if let Some(sft) = &file.sft {
            match (&sft.golden, &sft.template) {
                (None, None) => {
                    return Err(Error::in_file(path, "[sft] needs `golden` (a JSONL of SFT ids) or `template` (the SFT chat template)"))
                }
                (Some(_), Some(_)) => {
                    return Err(Error::in_file(path, "[sft] takes either `golden` or `template`, not both")
                        .hint("a golden JSONL already carries the ids the SFT template produced"))
                }
                _ => {}
            }
        }
        let sft = file.sft.as_ref();
        Ok(Suite {
            path: path.to_path_buf(),
            name: file.name.clone().unwrap_or_else(|| stem.clone()),
            model_dir: resolve(&file.model.dir),
            chat_template: file.model.chat_template.as_ref().map(resolve),
            sft_golden: sft.and_then(|s| s.golden.as_ref()).map(resolve),
            sft_template: sft.and_then(|s| s.template.as_ref()).map(resolve),
            sft_tokenizer: sft.and_then(|s| s.tokenizer.as_ref()).map(resolve),
            conversations_file: file.conversations_file.as_ref().map(resolve),
            lock_path: file
                .lock
                .path
                .as_ref()
                .map(resolve)
                .unwrap_or_else(|| base.join(format!("{stem}.lock.json"))),
            file,
        })
    }
}

/// A golden SFT row: what the training pipeline fed the model.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GoldenRow {
    pub id: Option<String>,
    pub messages: Vec<Value>,
    pub tools: Option<Vec<Value>>,
    pub input_ids: Vec<u32>,
    pub assistant_mask: Option<Vec<u8>>,
}

/// Read a golden JSONL, naming the file and line of any malformed row.
pub fn read_golden(path: &Path) -> Result<Vec<GoldenRow>> {
    let text = crate::error::read_to_string(path)?;
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let row: GoldenRow = serde_json::from_str(line).map_err(|e| {
            Error::in_file(path, format!("line {}: not a golden SFT row: {e}", i + 1))
                .hint("each line is {\"messages\": [...], \"input_ids\": [...], \"assistant_mask\": [...]} (mask optional)")
        })?;
        if let Some(mask) = &row.assistant_mask {
            if mask.len() != row.input_ids.len() {
                return Err(Error::in_file(
                    path,
                    format!(
                        "line {}: assistant_mask has {} entries but input_ids has {}",
                        i + 1,
                        mask.len(),
                        row.input_ids.len()
                    ),
                ));
            }
        }
        rows.push(row);
    }
    if rows.is_empty() {
        return Err(Error::in_file(path, "the golden SFT file has no rows"));
    }
    Ok(rows)
}

/// Read extra conversations: a JSONL of {"id"?, "messages", "tools"?} rows.
pub fn read_conversations(path: &Path) -> Result<Vec<ConversationEntry>> {
    let text = crate::error::read_to_string(path)?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        out.push(serde_json::from_str(line).map_err(|e| {
            Error::in_file(path, format!("line {}: not a conversation: {e}", i + 1))
                .hint("each line is {\"id\": \"...\", \"messages\": [...], \"tools\": [...]} (id and tools optional)")
        })?);
    }
    Ok(out)
}
