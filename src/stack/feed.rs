//! What a stack feeds the model: its tokenizer, template, special tokens and the text cut before tokenizing.
#[allow(unused_imports)]
use super::*;
use std::fmt;

use serde::Deserialize;
use serde_json::Value;
use tokenizers::Tokenizer;

use crate::artifacts::{GgufInfo, ModelDir, TemplateSource, TokenizerFile};
use crate::error::{Error, Result};
use crate::template::SpecialTokens;

/// A serving stack whose tokenization chatgate models.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, clap::ValueEnum)]
pub enum Stack {
    /// `transformers serve`, HF `generate()`, TRL: transformers 5 tokenizer and template
    /// semantics; stops on generation_config.json's eos only.
    #[serde(rename = "transformers")]
    #[value(name = "transformers")]
    Transformers,
    /// vLLM, SGLang: transformers 5 tokenizer and template semantics; stops on
    /// generation_config.json's eos and the tokenizer's eos (`SamplingParams.
    /// update_from_generation_config` adds the former to the latter).
    #[serde(rename = "vllm")]
    #[value(name = "vllm")]
    Vllm,
    /// TGI, mistral.rs: tokenizer.json loaded as is.
    #[serde(rename = "tokenizers")]
    #[value(name = "tokenizers")]
    Tokenizers,
    /// llama.cpp's llama-server: the GGUF's tokenizer and template, template BOS deduplicated.
    #[serde(rename = "llama.cpp")]
    #[value(name = "llama.cpp")]
    LlamaCpp,
    /// llama-cpp-python's server: the GGUF's tokenizer and template, no BOS added.
    #[serde(rename = "llama-cpp-python")]
    #[value(name = "llama-cpp-python")]
    LlamaCppPython,
}

impl fmt::Display for Stack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Stack {
    pub fn name(self) -> &'static str {
        match self {
            Stack::Transformers => "transformers",
            Stack::Vllm => "vllm",
            Stack::Tokenizers => "tokenizers",
            Stack::LlamaCpp => "llama.cpp",
            Stack::LlamaCppPython => "llama-cpp-python",
        }
    }

    /// Whether the stack tokenizes and renders with transformers (vLLM and SGLang load the
    /// tokenizer with `AutoTokenizer` and render with `apply_chat_template`).
    pub fn transformers_tokenization(self) -> bool {
        matches!(self, Stack::Transformers | Stack::Vllm)
    }

    /// Whether the stack reads the GGUF's metadata rather than the HF files.
    pub fn reads_gguf(self) -> bool {
        matches!(self, Stack::LlamaCpp | Stack::LlamaCppPython)
    }

    /// The stack a model is served with when the suite does not say: a GGUF file can only be
    /// served by llama.cpp; a Hugging Face directory most often by a transformers-based server.
    pub fn default_for(model: &ModelDir) -> Stack {
        if model.root.is_file() {
            Stack::LlamaCpp
        } else {
            Stack::Transformers
        }
    }
}

/// What a stack feeds the model: the tokenizer, template and special tokens it uses, and how
/// it turns the rendered text into ids.
pub struct Feed {
    pub stack: Stack,
    pub tokenizer: Tokenizer,
    /// What was built, for evidence ("transformers 5: LlamaTokenizer, rebuilt …").
    pub tokenizer_origin: String,
    pub template: Option<TemplateSource>,
    pub special: SpecialTokens,
    /// Whether the tokenizer's post-processor runs (adds BOS/EOS) on the rendered text.
    pub add_special_tokens: bool,
    /// llama.cpp: a leading BOS text removed from the rendering before tokenizing.
    pub strip_leading: Option<String>,
    /// llama.cpp: a trailing EOS text removed when the vocabulary adds its own EOS.
    pub strip_trailing: Option<String>,
    /// Things worth saying about the prediction (a fallback, a class not modelled).
    pub notes: Vec<String>,
    /// A tokenizer that puts a `▁` before every text fragment: the same with transformers'
    /// prefix rule ([`start_only_prefix`]).
    pub start_only_prefix: Option<Tokenizer>,
}

impl Feed {
    /// The ids the stack feeds the model for an already rendered prompt.
    pub fn ids(&self, text: &str) -> Result<Vec<u32>> {
        Ok(self.encode(text)?.get_ids().to_vec())
    }

    /// The encoding (ids, tokens, offsets into the text actually tokenized).
    pub fn encode(&self, text: &str) -> Result<tokenizers::Encoding> {
        self.tokenizer
            .encode(self.text_tokenized(text), self.add_special_tokens)
            .map_err(|e| Error::input(format!("the tokenizer failed: {e}")))
    }

    /// The part of the rendering the stack tokenizes (llama.cpp trims a template BOS/EOS).
    pub fn text_tokenized<'a>(&self, text: &'a str) -> &'a str {
        trim_added_specials(
            text,
            self.strip_leading.as_deref(),
            self.strip_trailing.as_deref(),
        )
    }
}

/// llama-server cuts a leading BOS text (and a trailing EOS text) off the rendering when the
/// vocabulary adds its own, so the template's and the tokenizer's do not double up.
pub fn trim_added_specials<'a>(
    text: &'a str,
    leading: Option<&str>,
    trailing: Option<&str>,
) -> &'a str {
    let mut t = text;
    if let Some(b) = leading.filter(|b| !b.is_empty()) {
        t = t.strip_prefix(b).unwrap_or(t);
    }
    if let Some(e) = trailing.filter(|e| !e.is_empty()) {
        t = t.strip_suffix(e).unwrap_or(t);
    }
    t
}

/// Build what `stack` feeds the model from `model`'s files. `add_special_tokens` is the
/// suite's setting for the HF stacks (a completions endpoint adds them); llama.cpp decides
/// from the GGUF.
pub fn feed(stack: Stack, model: &ModelDir, add_special_tokens: bool) -> Result<Option<Feed>> {
    match stack {
        Stack::Transformers | Stack::Vllm | Stack::Tokenizers => {
            hf_feed(stack, model, add_special_tokens)
        }
        Stack::LlamaCpp | Stack::LlamaCppPython => gguf_feed(stack, model),
    }
}

pub(super) fn hf_feed(
    stack: Stack,
    model: &ModelDir,
    add_special_tokens: bool,
) -> Result<Option<Feed>> {
    let Some(tok) = &model.tokenizer else {
        return Ok(None);
    };
    let mut notes = Vec::new();
    let from_json = tok
        .path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"));
    let (tokenizer, tokenizer_origin) = match stack {
        s if s.transformers_tokenization() && from_json => {
            match transformers_tokenizer(model, tok)? {
                Ok((t, origin)) => (t, origin),
                Err(why) => {
                    notes.push(format!(
                        "transformers: {why}; predicting with tokenizer.json as it is"
                    ));
                    (tok.tokenizer.clone(), "tokenizer.json (as is)".to_string())
                }
            }
        }
        _ => (
            tok.tokenizer.clone(),
            format!("{} (as is)", display_name(&tok.path)),
        ),
    };
    Ok(Some(Feed {
        start_only_prefix: start_only_prefix(&tokenizer),
        stack,
        tokenizer,
        tokenizer_origin,
        template: model.templates.select(false).cloned(),
        special: model.special_tokens(),
        add_special_tokens,
        strip_leading: None,
        strip_trailing: None,
        notes,
    }))
}

/// For a SentencePiece tokenizer whose normalizer puts a `▁` before every text fragment — the
/// one after each special token too, as llama.cpp's `add_space_prefix` and a legacy Llama
/// tokenizer.json loaded as is (TGI) do — the same tokenizer with transformers' rule instead:
/// `Metaspace(prepend_scheme="first")`, one `▁` at the start of the text only. A difference from
/// the training ids that vanishes under it is that prefix alone. None for any other tokenizer
/// (or one with a pre-tokenizer of its own, where the rule is not this simple).
pub fn start_only_prefix(tokenizer: &Tokenizer) -> Option<Tokenizer> {
    let is_prepend = |n: &Value| n["type"] == "Prepend" && n["prepend"] == "\u{2581}";
    // The cheap test first (this runs for every pipeline): only a tokenizer it applies to has
    // its whole vocabulary serialized and rebuilt.
    if tokenizer.get_pre_tokenizer().is_some() {
        return None;
    }
    let normalizer = serde_json::to_value(tokenizer.get_normalizer()?).ok()?;
    let prepends = is_prepend(&normalizer)
        || normalizer["normalizers"]
            .as_array()
            .is_some_and(|all| all.iter().any(is_prepend));
    if !prepends {
        return None;
    }
    let mut json: Value = serde_json::from_str(&tokenizer.to_string(false).ok()?).ok()?;
    let rest = match &json["normalizer"] {
        n if is_prepend(n) => Vec::new(),
        n if n["type"] == "Sequence" => {
            let all = n["normalizers"].as_array()?;
            if !all.iter().any(is_prepend) {
                return None;
            }
            all.iter().filter(|x| !is_prepend(x)).cloned().collect()
        }
        _ => return None,
    };
    if !json["pre_tokenizer"].is_null() {
        return None;
    }
    json["normalizer"] = match rest.len() {
        0 => Value::Null,
        _ => serde_json::json!({"type": "Sequence", "normalizers": rest}),
    };
    json["pre_tokenizer"] = serde_json::json!({"type": "Metaspace", "replacement": "\u{2581}", "prepend_scheme": "first", "split": false});
    json.to_string().parse().ok()
}

pub(super) fn display_name(p: &std::path::Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| p.display().to_string())
}

/// The tokenizer transformers 5 runs and how it was built, or why it cannot be predicted.
type Predicted = std::result::Result<(Tokenizer, String), String>;

/// What [`transformers_tokenizer`] predicted in this process, by a hash of every file it reads.
/// A gate predicts it for each pipeline and each open of the model folder, and each prediction
/// parses tokenizer.json twice (as JSON, then as the rebuilt tokenizer): a quarter of a gate's
/// CPU on Gemma's 256k vocabulary.
static PREDICTED: crate::artifacts::ByContent<Predicted> = crate::artifacts::ByContent::new();

/// The hash of what the prediction reads: tokenizer.json (its hash, taken when it was read),
/// tokenizer_config.json, config.json and special_tokens_map.json.
fn prediction_key(model: &ModelDir, tok: &TokenizerFile) -> Option<String> {
    let mut all = tok.sha256.clone().into_bytes();
    for part in [
        model.tokenizer_config.as_ref().map(|t| t.raw.to_string()),
        model.config.as_ref().map(|c| c.raw.to_string()),
    ] {
        all.push(0);
        all.extend(part.unwrap_or_default().into_bytes());
    }
    all.push(0);
    if let Some(m) = &model.special_tokens_map {
        all.extend(std::fs::read(&m.path).ok()?);
    }
    Some(crate::artifacts::sha256_hex(&all))
}

/// The tokenizer transformers 5 runs, or why it cannot be predicted (Ok(Err)).
pub(super) fn transformers_tokenizer(model: &ModelDir, tok: &TokenizerFile) -> Result<Predicted> {
    let key = prediction_key(model, tok);
    if let Some(p) = key.as_deref().and_then(|k| PREDICTED.get(k)) {
        return Ok(p);
    }
    let p = predict_transformers_tokenizer(model, &tok.path)?;
    if let Some(key) = key {
        PREDICTED.keep(&key, &p);
    }
    Ok(p)
}

fn predict_transformers_tokenizer(
    model: &ModelDir,
    tokenizer_json: &std::path::Path,
) -> Result<Predicted> {
    let tj = crate::error::read_json(tokenizer_json)?;
    let stm = model
        .special_tokens_map
        .as_ref()
        .map(|m| crate::error::read_json(&m.path))
        .transpose()?;
    let files = transformers::Files {
        tokenizer_json: &tj,
        tokenizer_config: model.tokenizer_config.as_ref().map(|t| &t.raw),
        config: model.config.as_ref().map(|c| &c.raw),
        special_tokens_map: stm.as_ref(),
    };
    let resolved = match transformers::resolve(&files) {
        Ok(r) => r,
        Err(why) => return Ok(Err(why)),
    };
    let text = resolved.json.to_string();
    let tokenizer = Tokenizer::from_bytes(text.as_bytes()).map_err(|e| {
        Error::in_file(
            tokenizer_json,
            format!(
                "the tokenizer transformers would build ({}) does not load: {e}",
                resolved.class
            ),
        )
    })?;
    let how = match resolved.mode {
        transformers::Mode::AsIs => format!("transformers 5: {} (tokenizer.json as is)", resolved.class),
        transformers::Mode::Rebuilt => format!(
            "transformers 5: {} rebuilt from tokenizer.json's vocabulary (its normalizer, pre-tokenizer and model flags replaced)",
            resolved.class
        ),
    };
    Ok(Ok((tokenizer, how)))
}

pub(super) fn gguf_feed(stack: Stack, model: &ModelDir) -> Result<Option<Feed>> {
    let Some(info) = &model.gguf else {
        // No GGUF beside the HF files: llama.cpp would serve a conversion of them, which
        // carries the same tokenizer and template.
        let Some(mut f) = hf_feed(Stack::Tokenizers, model, false)? else {
            return Ok(None);
        };
        f.stack = stack;
        f.notes.push(format!(
            "{stack}: the model has no GGUF; predicting from the Hugging Face files a conversion would copy"
        ));
        return Ok(Some(llama_cpp_bos(stack, f, None)));
    };
    let built = match crate::artifacts::build_gguf_tokenizer(info) {
        Ok(t) => t,
        Err(why) => {
            return Err(Error::in_file(
                &info.path,
                format!(
                    "{stack} reads the tokenizer from this GGUF, and it cannot be rebuilt: {why}"
                ),
            ))
        }
    };
    let label = display_name(&info.path);
    let template = crate::artifacts::gguf_templates(info, &label)
        .into_iter()
        .find(|t| t.name == "default");
    let special = SpecialTokens {
        bos_token: info.token_text("bos_token_id"),
        eos_token: info.token_text("eos_token_id"),
        unk_token: info.token_text("unknown_token_id"),
        sep_token: info.token_text("seperator_token_id"),
        pad_token: info.token_text("padding_token_id"),
        cls_token: info.token_text("cls_token_id"),
        mask_token: info.token_text("mask_token_id"),
    };
    let f = Feed {
        start_only_prefix: start_only_prefix(&built.file.tokenizer),
        stack,
        tokenizer: built.file.tokenizer,
        tokenizer_origin: format!("{label} (tokenizer.ggml.* metadata)"),
        template,
        special,
        add_special_tokens: false,
        strip_leading: None,
        strip_trailing: None,
        notes: built.notes,
    };
    Ok(Some(llama_cpp_bos(stack, f, Some(info))))
}

/// llama-server: `add_bos`/`add_eos` from the vocabulary; a template's leading BOS text (and
/// trailing EOS text) is cut before tokenizing with special tokens added. llama-cpp-python:
/// the rendering is tokenized with `add_bos=False`.
pub(super) fn llama_cpp_bos(stack: Stack, mut f: Feed, info: Option<&GgufInfo>) -> Feed {
    if stack == Stack::LlamaCppPython {
        f.add_special_tokens = false;
        return f;
    }
    let add_bos = info
        .and_then(|i| i.get_bool("tokenizer.ggml.add_bos_token"))
        .unwrap_or_else(|| adds_bos(&f.tokenizer));
    let add_eos = info
        .and_then(|i| i.get_bool("tokenizer.ggml.add_eos_token"))
        .unwrap_or(false);
    f.add_special_tokens = true;
    if add_bos {
        f.strip_leading = f.special.bos_token.clone();
    }
    if add_eos {
        f.strip_trailing = f.special.eos_token.clone();
    }
    f
}

/// Whether the tokenizer's post-processor adds a token in front of the text.
pub(super) fn adds_bos(t: &Tokenizer) -> bool {
    t.encode("a", true)
        .ok()
        .zip(t.encode("a", false).ok())
        .is_some_and(|(with, without)| with.get_ids().len() > without.get_ids().len())
}

/// The GGUF's stop ids: llama.cpp stops on every end-of-generation token (eos, eot, eom and
/// the `tokenizer.ggml.eog_token_ids` list when present).
pub fn gguf_stop_ids(info: &GgufInfo) -> Vec<u32> {
    let mut ids: Vec<u32> = [
        "tokenizer.ggml.eos_token_id",
        "tokenizer.ggml.eot_token_id",
        "tokenizer.ggml.eom_token_id",
    ]
    .iter()
    .filter_map(|k| info.get_u64(k))
    .filter_map(|v| u32::try_from(v).ok())
    .collect();
    if let Some(Value::Array(list)) = info.metadata.get("tokenizer.ggml.eog_token_ids") {
        ids.extend(
            list.iter()
                .filter_map(Value::as_u64)
                .filter_map(|v| u32::try_from(v).ok()),
        );
    }
    ids.sort_unstable();
    ids.dedup();
    ids
}
