//! config.json and generation_config.json.
use std::path::Path;

use serde_json::Value;

use super::json::{read_object, Fields};
use super::{GenerationConfig, ModelConfig};
use crate::error::Result;

/// Read config.json. Fields missing at the top level are taken from `text_config` (multimodal
/// checkpoints keep the language model's sizes there).
pub fn read_model_config(path: &Path) -> Result<ModelConfig> {
    let obj = read_object(path)?;
    let top = Fields::new(path, &obj);
    let text = top.nested("text_config")?;

    macro_rules! field {
        ($method:ident, $key:expr) => {{
            match top.$method($key)? {
                Some(v) => Some(v),
                None => match &text {
                    Some(t) => t.$method($key)?,
                    None => None,
                },
            }
        }};
    }
    let ids = |key: &str| -> Result<Vec<u32>> {
        let v = top.ids(key)?;
        if !v.is_empty() || top.has(key) {
            return Ok(v);
        }
        match &text {
            Some(t) => t.ids(key),
            None => Ok(v),
        }
    };

    let dtype = match top.string("dtype")? {
        Some(d) => Some(d),
        None => top.string("torch_dtype")?,
    };
    let dtype = match dtype {
        Some(d) => Some(d),
        None => match &text {
            Some(t) => match t.string("dtype")? {
                Some(d) => Some(d),
                None => t.string("torch_dtype")?,
            },
            None => None,
        },
    };

    Ok(ModelConfig {
        path: path.to_path_buf(),
        model_type: top.string("model_type")?,
        architectures: top.strings("architectures")?,
        vocab_size: field!(count, "vocab_size"),
        hidden_size: field!(count, "hidden_size"),
        num_hidden_layers: field!(count, "num_hidden_layers"),
        num_attention_heads: field!(count, "num_attention_heads"),
        num_key_value_heads: field!(count, "num_key_value_heads"),
        max_position_embeddings: field!(count, "max_position_embeddings"),
        bos_token_ids: ids("bos_token_id")?,
        eos_token_ids: ids("eos_token_id")?,
        pad_token_id: field!(id, "pad_token_id"),
        tie_word_embeddings: field!(boolean, "tie_word_embeddings"),
        dtype,
        raw: Value::Object(obj),
    })
}

/// Read generation_config.json.
pub fn read_generation_config(path: &Path) -> Result<GenerationConfig> {
    let obj = read_object(path)?;
    let f = Fields::new(path, &obj);
    let bos_token_id = f.id("bos_token_id")?;
    let eos_token_ids = f.ids("eos_token_id")?;
    let pad_token_id = f.id("pad_token_id")?;
    let do_sample = f.boolean("do_sample")?;
    let temperature = f.number("temperature")?;
    let top_p = f.number("top_p")?;
    let top_k = f.integer("top_k")?;
    let min_p = f.number("min_p")?;
    let repetition_penalty = f.number("repetition_penalty")?;
    let max_new_tokens = f.count("max_new_tokens")?;
    let max_length = f.count("max_length")?;
    Ok(GenerationConfig {
        path: path.to_path_buf(),
        bos_token_id,
        eos_token_ids,
        pad_token_id,
        do_sample,
        temperature,
        top_p,
        top_k,
        min_p,
        repetition_penalty,
        max_new_tokens,
        max_length,
        raw: Value::Object(obj),
    })
}
