//! The replay prompt set: a JSONL file, one prompt a line.
//!
//! ```json
//! {"id": "capital", "messages": [{"role": "user", "content": "What is the capital of France?"}],
//!  "tags": ["facts"], "temperature": 0, "seed": 1, "max_tokens": 32, "stop": ["\n"],
//!  "compare": {"similarity": 0.9}}
//! ```
//! `id` and `messages` are required; a single-turn prompt may give `"prompt": "text"` instead of
//! `messages`. Everything else falls back to the suite's `[replay]` defaults.
use std::collections::HashSet;
use std::path::Path;

use serde::Deserialize;
use serde_json::{json, Value};

use crate::error::{Error, Result};
use crate::exchange::ChatRequest;
use crate::files::valid_id;
use crate::suite::Comparator;
use crate::suite::ReplaySection;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Row {
    id: String,
    messages: Option<Vec<Value>>,
    prompt: Option<String>,
    tools: Option<Vec<Value>>,
    #[serde(default)]
    tags: Vec<String>,
    temperature: Option<f64>,
    seed: Option<u64>,
    max_tokens: Option<u32>,
    #[serde(default)]
    stop: Vec<String>,
    compare: Option<Comparator>,
}

/// Sampling settings of one prompt, after the suite's defaults were applied.
#[derive(Debug, Clone, PartialEq)]
pub struct PromptSettings {
    pub temperature: f64,
    pub seed: u64,
    pub max_tokens: u32,
    pub stop: Vec<String>,
    pub top_logprobs: u8,
}

/// One replay prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct Prompt {
    pub id: String,
    pub messages: Vec<Value>,
    pub tools: Option<Vec<Value>>,
    pub tags: Vec<String>,
    pub settings: PromptSettings,
    pub compare: Comparator,
}

impl Prompt {
    /// The request this prompt sends (not streamed; the caller decides).
    pub fn request(&self) -> ChatRequest {
        ChatRequest {
            messages: self.messages.clone(),
            tools: self.tools.clone(),
            max_tokens: Some(self.settings.max_tokens),
            temperature: Some(self.settings.temperature),
            seed: Some(self.settings.seed),
            stop: self.settings.stop.clone(),
            top_logprobs: Some(self.settings.top_logprobs),
            ..ChatRequest::default()
        }
    }

    /// The request without logprobs: enough for a comparator that reads the text, when the
    /// reply matches its snapshot (the gate asks again with logprobs when it does not, so the
    /// pending snapshot and the divergence report carry them).
    pub fn request_text(&self) -> ChatRequest {
        ChatRequest {
            top_logprobs: None,
            ..self.request()
        }
    }
}

/// Default max_tokens of a replayed prompt.
pub const DEFAULT_MAX_TOKENS: u32 = 48;

/// The prompts a suite replays: `load`, then the `[replay]` tag filters.
pub fn selected(all: Vec<Prompt>, defaults: &ReplaySection) -> Vec<Prompt> {
    all.into_iter()
        .filter(|p| defaults.tags.is_empty() || p.tags.iter().any(|t| defaults.tags.contains(t)))
        .filter(|p| !p.tags.iter().any(|t| defaults.exclude_tags.contains(t)))
        .collect()
}

/// Read and validate the prompt file (ids unique and usable as file names).
pub fn load(path: &Path, defaults: &ReplaySection) -> Result<Vec<Prompt>> {
    let text = crate::error::read_to_string(path)?;
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() || line.trim_start().starts_with("//") {
            continue;
        }
        let at = |msg: String| Error::in_file(path, format!("line {}: {msg}", i + 1));
        let row: Row = serde_json::from_str(line).map_err(|e| {
            at(format!("not a prompt: {e}")).hint(
                "each line is {\"id\": \"...\", \"messages\": [...]} or {\"id\": \"...\", \"prompt\": \"...\"}, \
                 with optional tags, temperature, seed, max_tokens, stop and compare",
            )
        })?;
        if !valid_id(&row.id) {
            return Err(at(format!("prompt id {:?} must be 1-100 characters of letters, digits, '-', '_' or '.', not starting with '.'", row.id)));
        }
        if !seen.insert(row.id.clone()) {
            return Err(at(format!("prompt id {:?} is used twice", row.id)));
        }
        let messages = match (row.messages, row.prompt) {
            (Some(m), None) if !m.is_empty() => m,
            (None, Some(p)) => vec![json!({"role": "user", "content": p})],
            (Some(_), Some(_)) => return Err(at("give `messages` or `prompt`, not both".into())),
            _ => {
                return Err(at(
                    "a prompt needs `messages` (a non-empty list) or `prompt`".into(),
                ))
            }
        };
        let settings = PromptSettings {
            temperature: row.temperature.or(defaults.temperature).unwrap_or(0.0),
            seed: row.seed.or(defaults.seed).unwrap_or(0),
            max_tokens: row
                .max_tokens
                .or(defaults.max_tokens)
                .unwrap_or(DEFAULT_MAX_TOKENS),
            stop: row.stop,
            top_logprobs: defaults.top_logprobs.unwrap_or(2),
        };
        if !(0.0..=2.0).contains(&settings.temperature) {
            return Err(at(format!(
                "temperature {} is outside 0..2",
                settings.temperature
            )));
        }
        if settings.max_tokens == 0 {
            return Err(at("max_tokens must be at least 1".into()));
        }
        let compare = row
            .compare
            .or_else(|| defaults.comparator.clone())
            .unwrap_or_default();
        compare.validate(&row.id).map_err(|e| e.file(path))?;
        out.push(Prompt {
            id: row.id,
            messages,
            tools: row.tools,
            tags: row.tags,
            settings,
            compare,
        });
    }
    if out.is_empty() {
        return Err(Error::in_file(path, "the prompt file has no prompts"));
    }
    Ok(out)
}
