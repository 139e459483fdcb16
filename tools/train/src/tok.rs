//! Byte-level BPE training, ChatML rendering, assistant masks and the HF tokenizer files.

use crate::data::Message;
use anyhow::{bail, ensure, Context, Result};
use serde_json::{json, Value};
use std::str::FromStr;
use tokenizers::models::bpe::{BpeTrainerBuilder, BPE};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::{
    AddedToken, DecoderWrapper, NormalizerWrapper, PostProcessorWrapper, PreTokenizerWrapper,
    Tokenizer, TokenizerBuilder, TokenizerImpl,
};

pub const ENDOFTEXT: &str = "<|endoftext|>";
pub const IM_START: &str = "<|im_start|>";
pub const IM_END: &str = "<|im_end|>";
pub const SPECIALS: [&str; 3] = [ENDOFTEXT, IM_START, IM_END];
pub const ENDOFTEXT_ID: u32 = 0;
pub const IM_START_ID: u32 = 1;
pub const IM_END_ID: u32 = 2;

/// Qwen2-style ChatML template, no default system prompt (as served in GGUF and as the
/// reference rendering).
pub const CHATML_TEMPLATE: &str = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/// The same template with the assistant content + `<|im_end|>` wrapped in
/// `{% generation %}` so transformers' `return_assistant_tokens_mask` works. Renders
/// byte-identically to `CHATML_TEMPLATE`. Shipped in both tokenizer_config.json files.
pub const CHATML_TEMPLATE_GEN: &str = "{% for message in messages %}{% if message['role'] == 'assistant' %}{{'<|im_start|>assistant\\n'}}{% generation %}{{message['content'] + '<|im_end|>'}}{% endgeneration %}{{'\\n'}}{% else %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/// Render like the templates above. Returns the text and the char spans
/// [start, end) of every `{% generation %}` block (assistant content + `<|im_end|>`).
pub fn render_chatml(
    messages: &[Message],
    add_generation_prompt: bool,
) -> (String, Vec<(usize, usize)>) {
    let mut s = String::new();
    let mut spans = Vec::new();
    for m in messages {
        s.push_str(IM_START);
        s.push_str(&m.role);
        s.push('\n');
        let start = s.chars().count();
        s.push_str(&m.content);
        s.push_str(IM_END);
        if m.role == "assistant" {
            spans.push((start, s.chars().count()));
        }
        s.push('\n');
    }
    if add_generation_prompt {
        s.push_str(IM_START);
        s.push_str("assistant\n");
    }
    (s, spans)
}

/// Train a byte-level BPE with the three specials first (ids 0, 1, 2).
/// Returns the tokenizer.json text (pretty-printed).
pub fn train_tokenizer(texts: &[String], vocab_size: usize) -> Result<String> {
    let byte_level = ByteLevel::new(false, true, true); // add_prefix_space=false, trim_offsets, use_regex (GPT-2 regex)
    let mut tk: TokenizerImpl<
        BPE,
        NormalizerWrapper,
        PreTokenizerWrapper,
        PostProcessorWrapper,
        DecoderWrapper,
    > = TokenizerBuilder::new()
        .with_model(BPE::default())
        .with_normalizer(None)
        .with_pre_tokenizer(Some(PreTokenizerWrapper::ByteLevel(byte_level)))
        .with_post_processor(None)
        .with_decoder(Some(DecoderWrapper::ByteLevel(byte_level)))
        .build()
        .map_err(anyhow::Error::msg)?;
    let mut trainer = BpeTrainerBuilder::new()
        .vocab_size(vocab_size)
        .min_frequency(0)
        .show_progress(false)
        .special_tokens(
            SPECIALS
                .iter()
                .map(|s| AddedToken::from(*s, true))
                .collect(),
        )
        .initial_alphabet(ByteLevel::alphabet().into_iter().collect())
        .build();
    // The special strings are removed from the training text: they are added tokens,
    // not something BPE should learn merges for.
    let cleaned: Vec<String> = texts
        .iter()
        .map(|t| {
            let mut t = t.clone();
            for s in SPECIALS {
                t = t.replace(s, "\n");
            }
            t
        })
        .collect();
    tk.train(&mut trainer, cleaned.iter())
        .map_err(anyhow::Error::msg)?;
    let json = tk.to_string(true).map_err(anyhow::Error::msg)?;
    // Sanity: loadable as a generic Tokenizer, specials at 0..3, exact vocab size.
    let t = Tokenizer::from_str(&json).map_err(anyhow::Error::msg)?;
    for (s, id) in SPECIALS.iter().zip([ENDOFTEXT_ID, IM_START_ID, IM_END_ID]) {
        ensure!(t.token_to_id(s) == Some(id), "special {s} is not id {id}");
    }
    ensure!(
        t.get_vocab_size(true) == vocab_size,
        "vocab size {} != {vocab_size}",
        t.get_vocab_size(true)
    );
    Ok(json)
}

pub fn load_tokenizer(json: &str) -> Result<Tokenizer> {
    Tokenizer::from_str(json).map_err(anyhow::Error::msg)
}

pub fn encode(tk: &Tokenizer, text: &str) -> Result<Vec<u32>> {
    Ok(tk
        .encode(text, false)
        .map_err(anyhow::Error::msg)?
        .get_ids()
        .to_vec())
}

pub fn decode(tk: &Tokenizer, ids: &[u32]) -> Result<String> {
    tk.decode(ids, false).map_err(anyhow::Error::msg)
}

/// input_ids and assistant mask for a conversation, the way transformers computes
/// `return_assistant_tokens_mask`: for each generation span, mark tokens from
/// char_to_token(start) through char_to_token(end - 1).
pub fn encode_with_mask(tk: &Tokenizer, messages: &[Message]) -> Result<(Vec<u32>, Vec<u8>)> {
    let (text, spans) = render_chatml(messages, false);
    let enc = tk
        .encode_char_offsets(text.as_str(), false)
        .map_err(anyhow::Error::msg)?;
    let ids = enc.get_ids().to_vec();
    let mut mask = vec![0u8; ids.len()];
    for (start, end) in spans {
        let s = enc
            .char_to_token(start, 0)
            .context("no token at span start")?;
        let e = enc
            .char_to_token(end - 1, 0)
            .context("no token at span end")?;
        for m in mask.iter_mut().take(e + 1).skip(s) {
            *m = 1;
        }
    }
    // Cross-check: masked tokens decode to exactly the assistant contents + <|im_end|>.
    let want: String = messages
        .iter()
        .filter(|m| m.role == "assistant")
        .map(|m| format!("{}{IM_END}", m.content))
        .collect();
    let masked: Vec<u32> = ids
        .iter()
        .zip(&mask)
        .filter(|(_, &m)| m == 1)
        .map(|(&i, _)| i)
        .collect();
    let got = decode(tk, &masked)?;
    if got != want {
        bail!("assistant mask mismatch: {got:?} != {want:?}");
    }
    Ok((ids, mask))
}

fn added_token_json(content: &str) -> Value {
    json!({
        "content": content,
        "lstrip": false,
        "normalized": false,
        "rstrip": false,
        "single_word": false,
        "special": true
    })
}

/// tokenizer_config.json. `eos` is `<|im_end|>` for chat, `<|endoftext|>` for base.
pub fn tokenizer_config(eos: &str, model_max_length: usize) -> Value {
    let mut dec = serde_json::Map::new();
    for (i, s) in SPECIALS.iter().enumerate() {
        dec.insert(i.to_string(), added_token_json(s));
    }
    json!({
        "add_bos_token": false,
        "add_eos_token": false,
        "add_prefix_space": false,
        "added_tokens_decoder": dec,
        "additional_special_tokens": [IM_START, IM_END],
        "bos_token": null,
        "chat_template": CHATML_TEMPLATE_GEN,
        "clean_up_tokenization_spaces": false,
        "eos_token": eos,
        "errors": "replace",
        "model_max_length": model_max_length,
        "pad_token": ENDOFTEXT,
        "split_special_tokens": false,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": null
    })
}

pub fn special_tokens_map(eos: &str) -> Value {
    let tok = |c: &str| json!({"content": c, "lstrip": false, "normalized": false, "rstrip": false, "single_word": false});
    json!({
        "additional_special_tokens": [IM_START, IM_END],
        "eos_token": tok(eos),
        "pad_token": tok(ENDOFTEXT)
    })
}

/// Vocabulary in id order and merges as "a b" strings, read from tokenizer.json
/// (handles both the list-of-pairs and the "a b" merge formats).
pub fn vocab_and_merges(tokenizer_json: &str) -> Result<(Vec<String>, Vec<String>)> {
    let v: Value = serde_json::from_str(tokenizer_json)?;
    let vocab = v["model"]["vocab"].as_object().context("model.vocab")?;
    let mut tokens = vec![String::new(); vocab.len()];
    for (tok, id) in vocab {
        let id = id.as_u64().context("vocab id")? as usize;
        ensure!(
            id < tokens.len() && tokens[id].is_empty(),
            "vocab ids not dense"
        );
        tokens[id] = tok.clone();
    }
    let mut merges = Vec::new();
    for m in v["model"]["merges"].as_array().context("model.merges")? {
        match m {
            Value::String(s) => merges.push(s.clone()),
            Value::Array(p) if p.len() == 2 => merges.push(format!(
                "{} {}",
                p[0].as_str().context("merge")?,
                p[1].as_str().context("merge")?
            )),
            _ => bail!("unexpected merge entry {m}"),
        }
    }
    Ok((tokens, merges))
}
