//! The checkpoint's files: what a Hugging Face model directory (or a GGUF file) ships.
//! Reading never fails on a missing optional file; a malformed file is an error naming it.
//!
//! The faces of this module are below; internals live in sibling files:
//! `open.rs` (directory walk, special-token resolution), `config.rs` (config.json,
//! generation_config.json), `tokenizer_files.rs` (tokenizer.json, tokenizer_config.json,
//! special_tokens_map.json), `templates.rs` (template sources and their precedence),
//! `safetensors.rs` (headers, shard index), `gguf.rs` (hand-written GGUF header reader),
//! `gguf_tokenizer.rs` (a `tokenizers::Tokenizer` from GGUF metadata), `hashing.rs`
//! (streamed sha256), `json.rs` (typed JSON fields with file/key errors).
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

use crate::error::Result;
use crate::template::SpecialTokens;

mod config;
mod gguf;
mod gguf_tokenizer;
mod hashing;
mod json;
pub mod llama_cpp_pre;
pub mod llama_cpp_vocab;
mod open;
mod safetensors;
mod templates;
pub(crate) mod tokenizer_files;

pub use config::{read_generation_config, read_model_config};
pub use gguf::{
    ggml_type_name, metadata_group, metadata_hashes, read_gguf, tensor_bytes as gguf_tensor_bytes,
    GgufTensor,
};
pub use gguf_tokenizer::{build as build_gguf_tokenizer, tokenizer_from_gguf, GgufTokenizer};
pub use hashing::{sha256_file, sha256_hex, total_hash, ByContent};
pub use safetensors::{
    read_header as read_safetensors_header, read_index as read_shard_index,
    MAX_HEADER_BYTES as SAFETENSORS_MAX_HEADER_BYTES,
};
pub use templates::gguf_templates;
pub use tokenizer_files::{
    read_special_tokens_map, read_tokenizer_config, read_tokenizer_json, NAMED_TOKEN_KEYS,
};

/// config.json, the fields the chain checks, plus the raw document.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ModelConfig {
    pub path: PathBuf,
    pub model_type: Option<String>,
    pub architectures: Vec<String>,
    pub vocab_size: Option<u64>,
    pub hidden_size: Option<u64>,
    pub num_hidden_layers: Option<u64>,
    pub num_attention_heads: Option<u64>,
    pub num_key_value_heads: Option<u64>,
    pub max_position_embeddings: Option<u64>,
    pub bos_token_ids: Vec<u32>,
    pub eos_token_ids: Vec<u32>,
    pub pad_token_id: Option<u32>,
    pub tie_word_embeddings: Option<bool>,
    pub dtype: Option<String>,
    #[serde(skip)]
    pub raw: Value,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WeightFormat {
    Safetensors,
    Gguf,
}

/// One weight file (a safetensors shard or a GGUF), from its header only.
#[derive(Debug, Clone, Serialize)]
pub struct WeightFile {
    pub path: PathBuf,
    /// Path relative to the model directory, `/`-separated (stable across machines).
    pub name: String,
    pub format: WeightFormat,
    pub size: u64,
    pub tensors: usize,
    /// dtype name -> tensor count.
    pub dtypes: BTreeMap<String, usize>,
    /// Total element count over all tensors.
    pub parameters: u64,
    /// A GGUF's tensor-data offset: its identity is the bytes from here on, so a metadata
    /// edit (eos id, template) is not a new checkpoint.
    #[serde(skip)]
    pub data_offset: Option<u64>,
}

/// model.safetensors.index.json
#[derive(Debug, Clone, Serialize)]
pub struct ShardIndex {
    pub path: PathBuf,
    /// tensor name -> shard file name
    pub weight_map: BTreeMap<String, String>,
    /// Shards named in the index that are not on disk.
    pub missing_shards: Vec<String>,
}

/// One added token as tokenizer.json declares it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct AddedToken {
    pub id: u32,
    pub content: String,
    pub special: bool,
}

/// tokenizer.json (or a tokenizer built from GGUF metadata).
pub struct TokenizerFile {
    pub path: PathBuf,
    /// sha256 of the file's bytes (for a GGUF-built tokenizer: of the canonical tokenizer JSON).
    pub sha256: String,
    pub tokenizer: tokenizers::Tokenizer,
    /// "BPE", "Unigram", "WordPiece", "WordLevel".
    pub model_type: String,
    /// A short description of the pre-tokenizer, e.g. "ByteLevel", "Metaspace", "Sequence[Split, ByteLevel]", "none".
    pub pre_tokenizer: String,
    /// Vocabulary size including added tokens.
    pub vocab_size: usize,
    pub added_tokens: Vec<AddedToken>,
}

/// A token field in tokenizer_config.json / special_tokens_map.json: a string or an AddedToken dict.
pub type TokenText = Option<String>;

/// tokenizer_config.json
#[derive(Debug, Clone, Default)]
pub struct TokenizerConfig {
    pub path: PathBuf,
    pub bos_token: TokenText,
    pub eos_token: TokenText,
    pub unk_token: TokenText,
    pub sep_token: TokenText,
    pub pad_token: TokenText,
    pub cls_token: TokenText,
    pub mask_token: TokenText,
    pub add_bos_token: Option<bool>,
    pub add_eos_token: Option<bool>,
    pub tokenizer_class: Option<String>,
    pub legacy: Option<bool>,
    pub add_prefix_space: Option<bool>,
    pub model_max_length: Option<f64>,
    /// added_tokens_decoder: id -> (content, special)
    pub added_tokens_decoder: BTreeMap<u32, (String, bool)>,
    pub raw: Value,
}

/// special_tokens_map.json
#[derive(Debug, Clone, Default)]
pub struct SpecialTokensMap {
    pub path: PathBuf,
    pub bos_token: TokenText,
    pub eos_token: TokenText,
    pub unk_token: TokenText,
    pub sep_token: TokenText,
    pub pad_token: TokenText,
    pub cls_token: TokenText,
    pub mask_token: TokenText,
    pub additional_special_tokens: Vec<String>,
}

/// generation_config.json
#[derive(Debug, Clone, Default, Serialize)]
pub struct GenerationConfig {
    pub path: PathBuf,
    pub bos_token_id: Option<u32>,
    /// `eos_token_id` as a list (an int becomes a one-element list).
    pub eos_token_ids: Vec<u32>,
    pub pad_token_id: Option<u32>,
    pub do_sample: Option<bool>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<i64>,
    pub min_p: Option<f64>,
    pub repetition_penalty: Option<f64>,
    pub max_new_tokens: Option<u64>,
    pub max_length: Option<u64>,
    #[serde(skip)]
    pub raw: Value,
}

/// Where a chat template came from.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct TemplateSource {
    /// The template's name: "default" or the name of an additional/named template.
    pub name: String,
    /// Human-readable origin, e.g. "chat_template.jinja", "tokenizer_config.json#chat_template",
    /// "tokenizer_config.json#chat_template[tool_use]", "additional_chat_templates/tool_use.jinja",
    /// "model.gguf#tokenizer.chat_template".
    pub origin: String,
    pub text: String,
}

/// All chat templates the directory ships, resolved with transformers' precedence.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TemplateSources {
    /// The templates transformers would load, by name ("default" first when present).
    pub templates: Vec<TemplateSource>,
    /// Templates present on disk but shadowed by a higher-precedence source (e.g. the
    /// tokenizer_config.json template when chat_template.jinja exists).
    pub shadowed: Vec<TemplateSource>,
}

impl TemplateSources {
    /// The template transformers uses without an explicit name: with tools, "tool_use" if it
    /// exists; else "default" (or the only one).
    pub fn select(&self, with_tools: bool) -> Option<&TemplateSource> {
        if with_tools {
            if let Some(t) = self.templates.iter().find(|t| t.name == "tool_use") {
                return Some(t);
            }
        }
        self.templates.iter().find(|t| t.name == "default")
    }
}

/// A GGUF file's header: metadata and tensor table (no tensor data is read).
#[derive(Debug, Clone, Serialize)]
pub struct GgufInfo {
    pub path: PathBuf,
    pub version: u32,
    /// Metadata as JSON values, in file order. Long arrays (tokens, merges, scores, token_type)
    /// are kept whole here; callers print summaries.
    #[serde(skip)]
    pub metadata: indexmap::IndexMap<String, Value>,
    pub tensor_count: u64,
    /// The tensor table, in file order.
    #[serde(skip)]
    pub tensors: Vec<GgufTensor>,
    /// Where the tensor data section starts (after the header, aligned).
    pub data_offset: u64,
    /// The file's size in bytes.
    pub file_size: u64,
}

/// Content hash of one weight file.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct FileHash {
    pub name: String,
    /// Bytes hashed: the file, or a GGUF's tensor data.
    pub size: u64,
    pub sha256: String,
    /// "tensor-data" for a GGUF (its header is hashed apart, in `metadata`); absent for a
    /// whole file (locks made before GGUF metadata was split off hash whole GGUF files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// A GGUF's metadata, hashed per boundary: "tokenizer", "template", "special-ids", "general", "model".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<BTreeMap<String, String>>,
}

/// The weights' identity: one hash per file and one over all of them.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct WeightsIdentity {
    pub files: Vec<FileHash>,
    /// sha256 over the lines "name\tsize\tsha256\n" of `files`, sorted by name.
    pub total: String,
}

/// Everything read from a model directory (or a single GGUF file).
pub struct ModelDir {
    /// The directory, or the `.gguf` file itself when a single file was opened.
    pub root: PathBuf,
    pub config: Option<ModelConfig>,
    /// Weight files sorted by name (safetensors shards and GGUF files).
    pub weights: Vec<WeightFile>,
    pub shard_index: Option<ShardIndex>,
    pub tokenizer: Option<TokenizerFile>,
    pub tokenizer_config: Option<TokenizerConfig>,
    pub special_tokens_map: Option<SpecialTokensMap>,
    pub generation_config: Option<GenerationConfig>,
    pub templates: TemplateSources,
    /// The GGUF header when the model is (or the directory holds exactly one) GGUF file.
    pub gguf: Option<GgufInfo>,
    /// Things worth knowing that are not errors, e.g. why no tokenizer could be built from a
    /// GGUF, or which of several GGUF files was not described.
    pub notes: Vec<String>,
}

impl ModelDir {
    /// Read a model directory, or a single `.gguf` file.
    pub fn open(path: &Path) -> Result<ModelDir> {
        open::open(path)
    }

    /// Where a file the model's origins name lives: origins are relative to the model
    /// directory, or to a GGUF file's own folder (`model.gguf#tokenizer.chat_template`).
    /// The context the checkpoint was made for: config.json's `max_position_embeddings`, else
    /// a GGUF's `{arch}.context_length`.
    pub fn context_length(&self) -> Option<usize> {
        let config = self.config.as_ref().and_then(|c| c.max_position_embeddings);
        let gguf = self.gguf.as_ref().and_then(|g| {
            let arch = g.architecture()?;
            g.get_u64(&format!("{arch}.context_length"))
        });
        config.or(gguf).map(|n| n as usize)
    }

    pub fn path_of(&self, origin: &str) -> PathBuf {
        let base = if self.root.is_file() {
            self.root.parent().unwrap_or(&self.root)
        } else {
            &self.root
        };
        base.join(origin)
    }

    /// The special tokens transformers 5 passes to the template: tokenizer_config.json's
    /// named tokens, then special_tokens_map.json, then GGUF metadata.
    ///
    /// Exactly as transformers 5.23 `_from_pretrained` does (checked against it):
    /// special_tokens_map.json is read only when tokenizer_config.json has no
    /// `added_tokens_decoder` (a legacy save, or no tokenizer_config.json at all), and then it
    /// *overrides* the config's tokens; with `added_tokens_decoder` present it is ignored. GGUF
    /// metadata (`tokenizer.ggml.bos_token_id` → token text, ...) is used only when there are
    /// no Hugging Face tokenizer files. Tokenizer-class defaults (e.g. GPT2Tokenizer's
    /// `<|endoftext|>` when no file names a token) are not applied.
    pub fn special_tokens(&self) -> SpecialTokens {
        open::special_tokens(self)
    }

    /// Stream every weight file through sha256 (a GGUF: its tensor data, and its metadata
    /// hashed per boundary).
    pub fn hash_weights(&self) -> Result<WeightsIdentity> {
        let mut id = hashing::hash_files(&self.weights, false)?;
        if let Some(info) = &self.gguf {
            for f in &mut id.files {
                if self
                    .weights
                    .iter()
                    .any(|w| w.name == f.name && w.path == info.path)
                {
                    f.metadata = Some(gguf::metadata_hashes(info));
                }
            }
        }
        Ok(id)
    }

    /// The identity as locks made before GGUF tensor data and metadata were hashed apart
    /// computed it: whole files.
    pub fn hash_weights_whole_files(&self) -> Result<WeightsIdentity> {
        hashing::hash_files(&self.weights, true)
    }
}
