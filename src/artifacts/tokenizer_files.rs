//! tokenizer.json, tokenizer_config.json and special_tokens_map.json.
use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;
use tokenizers::models::ModelWrapper;

use super::hashing::{sha256_hex, ByContent};
use super::json::{read_object, Fields};
use super::{AddedToken, SpecialTokensMap, TokenizerConfig, TokenizerFile};
use crate::error::{Error, Result};

/// Load tokenizer.json with the `tokenizers` crate and describe it.
pub fn read_tokenizer_json(path: &Path) -> Result<TokenizerFile> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let sha256 = sha256_hex(&bytes);
    if let Some(tokenizer) = PARSED.get(&sha256) {
        return Ok(describe(path, sha256, tokenizer));
    }
    // A plain JSON pass first: its errors carry line and column, the tokenizer's do not.
    if let Err(e) = serde_json::from_slice::<serde::de::IgnoredAny>(&bytes) {
        return Err(Error::in_file(path, format!("malformed JSON: {e}"))
            .hint("re-download tokenizer.json or re-save it with tokenizers/transformers"));
    }
    let tokenizer = tokenizers::Tokenizer::from_bytes(&bytes).map_err(|e| {
        Error::in_file(
            path,
            format!("not a tokenizer the `tokenizers` library can load: {e}"),
        )
        .hint("re-save it with a current `tokenizers` (tokenizer.save(\"tokenizer.json\"))")
    })?;
    PARSED.keep(&sha256, &tokenizer);
    Ok(describe(path, sha256, tokenizer))
}

/// Tokenizers this process parsed, by the sha256 of their file's bytes. A gate opens the same
/// model folder several times (its context, the in-process reference, the latency counter), and
/// parsing a large vocabulary is most of an open: ~0.4 s for Gemma's 256k entries, where a
/// clone of the parsed one takes a tenth of that.
static PARSED: ByContent<tokenizers::Tokenizer> = ByContent::new();

/// Build a [`TokenizerFile`] around a loaded tokenizer.
pub fn describe(path: &Path, sha256: String, tokenizer: tokenizers::Tokenizer) -> TokenizerFile {
    let model_type = model_type_name(tokenizer.get_model()).to_string();
    let pre_tokenizer = match tokenizer.get_pre_tokenizer() {
        None => "none".to_string(),
        Some(pt) => serde_json::to_value(pt)
            .map(|v| describe_component(&v, "pretokenizers"))
            .unwrap_or_else(|_| "unknown".to_string()),
    };
    let mut added_tokens: Vec<AddedToken> = tokenizer
        .get_added_tokens_decoder()
        .into_iter()
        .map(|(id, t)| AddedToken {
            id,
            content: t.content,
            special: t.special,
        })
        .collect();
    added_tokens.sort_by_key(|t| t.id);
    // Distinct ids: an added token spelled differently from its vocabulary entry (a GGUF's raw
    // user-defined token, say) is one token, not two.
    let vocab_size = tokenizer
        .get_vocab(true)
        .into_values()
        .collect::<std::collections::HashSet<u32>>()
        .len();
    TokenizerFile {
        path: path.to_path_buf(),
        sha256,
        tokenizer,
        model_type,
        pre_tokenizer,
        vocab_size,
        added_tokens,
    }
}

pub fn model_type_name(model: &ModelWrapper) -> &'static str {
    match model {
        ModelWrapper::BPE(_) => "BPE",
        ModelWrapper::WordPiece(_) => "WordPiece",
        ModelWrapper::WordLevel(_) => "WordLevel",
        ModelWrapper::Unigram(_) => "Unigram",
    }
}

/// "ByteLevel", "Sequence[Split, ByteLevel]", ... from a serialized component.
pub fn describe_component(v: &Value, list_key: &str) -> String {
    let Some(obj) = v.as_object() else {
        return if v.is_null() {
            "none".into()
        } else {
            "unknown".into()
        };
    };
    let ty = obj.get("type").and_then(Value::as_str).unwrap_or("unknown");
    if ty == "Sequence" {
        let items: Vec<String> = obj
            .get(list_key)
            .and_then(Value::as_array)
            .map(|items| {
                items
                    .iter()
                    .map(|i| describe_component(i, list_key))
                    .collect()
            })
            .unwrap_or_default();
        format!("Sequence[{}]", items.join(", "))
    } else {
        ty.to_string()
    }
}

/// The named special-token keys of tokenizer_config.json, in transformers' order.
pub const NAMED_TOKEN_KEYS: [&str; 7] = [
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
];

/// Read tokenizer_config.json. `chat_template` is validated and resolved in `templates`.
pub fn read_tokenizer_config(path: &Path) -> Result<TokenizerConfig> {
    let obj = read_object(path)?;
    let f = Fields::new(path, &obj);
    let mut tokens: Vec<Option<String>> = Vec::with_capacity(NAMED_TOKEN_KEYS.len());
    for key in NAMED_TOKEN_KEYS {
        tokens.push(f.token(key)?);
    }
    let mut added_tokens_decoder = BTreeMap::new();
    match obj.get("added_tokens_decoder") {
        None | Some(Value::Null) => {}
        Some(Value::Object(map)) => {
            for (id_text, entry) in map {
                let key = format!("added_tokens_decoder.{id_text}");
                let id: u32 = id_text.parse().map_err(|_| {
                    Error::in_file(
                        path,
                        format!("`added_tokens_decoder` has the key \"{id_text}\", which is not a token id"),
                    )
                    .hint("keys of added_tokens_decoder are token ids written as strings, e.g. \"32000\"")
                })?;
                let content = f.token_value(&key, entry)?;
                let special = match entry.get("special") {
                    None | Some(Value::Null) => false,
                    Some(Value::Bool(b)) => *b,
                    Some(other) => {
                        return Err(f.wrong(&format!("{key}.special"), "true or false", other))
                    }
                };
                added_tokens_decoder.insert(id, (content, special));
            }
        }
        Some(other) => {
            return Err(f.wrong("added_tokens_decoder", "an object of id -> token", other))
        }
    }
    let mut tokens = tokens.into_iter();
    let mut next = || tokens.next().flatten();
    Ok(TokenizerConfig {
        path: path.to_path_buf(),
        bos_token: next(),
        eos_token: next(),
        unk_token: next(),
        sep_token: next(),
        pad_token: next(),
        cls_token: next(),
        mask_token: next(),
        add_bos_token: f.boolean("add_bos_token")?,
        add_eos_token: f.boolean("add_eos_token")?,
        tokenizer_class: f.string("tokenizer_class")?,
        legacy: f.boolean("legacy")?,
        add_prefix_space: f.boolean("add_prefix_space")?,
        model_max_length: f.number("model_max_length")?,
        added_tokens_decoder,
        raw: Value::Object(obj),
    })
}

/// Read special_tokens_map.json.
pub fn read_special_tokens_map(path: &Path) -> Result<SpecialTokensMap> {
    let obj = read_object(path)?;
    let f = Fields::new(path, &obj);
    let mut additional = f.tokens("additional_special_tokens")?;
    // transformers 5 writes the same list as `extra_special_tokens`.
    if additional.is_empty() && matches!(obj.get("extra_special_tokens"), Some(Value::Array(_))) {
        additional = f.tokens("extra_special_tokens")?;
    }
    Ok(SpecialTokensMap {
        path: path.to_path_buf(),
        bos_token: f.token("bos_token")?,
        eos_token: f.token("eos_token")?,
        unk_token: f.token("unk_token")?,
        sep_token: f.token("sep_token")?,
        pad_token: f.token("pad_token")?,
        cls_token: f.token("cls_token")?,
        mask_token: f.token("mask_token")?,
        additional_special_tokens: additional,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn corpus(model: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/corpus/models")
            .join(model)
            .join("tokenizer.json")
    }

    /// The parse is reused by content, not by path: a tokenizer.json rewritten in place is read
    /// as what it now holds, and a second read of the same bytes gives the same tokenizer.
    #[test]
    fn a_tokenizer_rewritten_in_place_is_parsed_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokenizer.json");
        std::fs::copy(corpus("SmolLM2-135M-Instruct"), &path).unwrap();
        let first = read_tokenizer_json(&path).unwrap();
        let again = read_tokenizer_json(&path).unwrap();
        assert_eq!(again.sha256, first.sha256);
        assert_eq!(
            again.tokenizer.get_vocab_size(true),
            first.tokenizer.get_vocab_size(true)
        );
        std::fs::copy(corpus("TinyLlama-1.1B-Chat-v1.0"), &path).unwrap();
        let other = read_tokenizer_json(&path).unwrap();
        assert_ne!(other.sha256, first.sha256);
        assert_eq!(other.model_type, "BPE");
        assert_ne!(
            other.tokenizer.get_vocab_size(true),
            first.tokenizer.get_vocab_size(true),
            "SmolLM2's 49k vocabulary was kept for TinyLlama's 32k"
        );
    }
}
