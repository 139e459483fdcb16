//! A `tokenizers::Tokenizer` built from a GGUF's tokenizer metadata, to tokenize as llama.cpp
//! does for that file.
//!
//! - `tokenizer.ggml.model == "gpt2"`: byte-level BPE. Vocabulary from `tokenizer.ggml.tokens`
//!   (spelled as stored: raw user-defined tokens stay raw and are matched whole as added
//!   tokens, as llama.cpp does), merges from `tokenizer.ggml.merges`, and
//!   the pre-tokenizer llama.cpp uses for `tokenizer.ggml.pre` (`llm_tokenizer_bpe` in
//!   llama-vocab.cpp): each regex is a `Split(..., Isolated)` in sequence — llama.cpp keeps the
//!   text between matches as pieces too — followed by `ByteLevel` without its own regex.
//!   `ignore_merges` follows llama.cpp (llama3 and tekken families).
//! - `tokenizer.ggml.model == "llama"`: SentencePiece as an HF BPE with byte fallback. Merges
//!   are recovered from the scores exactly as transformers' `generate_merges` does (the
//!   `LlamaConverter` path). The space prefix is a normalizer (`Prepend("▁")` +
//!   `Replace(" ", "▁")`), which, like llama.cpp's `add_space_prefix`, prefixes every text
//!   fragment — including one following a special token — and keeps leading spaces
//!   (`" a"` → `▁▁a`), unlike `Metaspace(prepend_scheme="first")`.
//! - Control (3) and unknown (2) tokens become special added tokens, user-defined (4) tokens
//!   plain added tokens (llama.cpp always matches those whole). A file whose `general.name`
//!   says Phi-3 gets llama.cpp's Phi-3 RSTRIP rule on them.
//!
//! Any other tokenizer model (bert/WPM, t5/UGM, rwkv, ...) is not built: the caller records why.
use std::collections::{HashMap, HashSet};

use serde_json::{json, Map, Value};

use super::hashing::sha256_hex;
use super::tokenizer_files::describe;
use super::{GgufInfo, TokenizerFile};

const TOKEN_TYPE_UNKNOWN: i64 = 2;
const TOKEN_TYPE_CONTROL: i64 = 3;
const TOKEN_TYPE_USER_DEFINED: i64 = 4;

/// llama.cpp's GPT-2 pre-tokenizer regex.
const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";
/// llama.cpp's Llama 3 regex (the `(?i:...)` contraction group spelled out, as llama.cpp does).
const LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN35: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const TEKKEN: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const GPT4O: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const SEED_CODER: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+";
const BAILINGMOE: &str = r"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+";
const BLOOM: &str = r" ?[^(\s|.,!?…。，、।۔،)]+";
/// DeepSeek's cased-letter class (llama.cpp's LLAMA_VOCAB_PRE_TYPE_DEEPSEEK_LLM).
const DEEPSEEK_LETTERS: &str = "\\s?[A-Za-z\u{b5}\u{c0}-\u{d6}\u{d8}-\u{f6}\u{f8}-\u{1ba}\u{1bc}-\u{1bf}\u{1c4}-\u{293}\u{295}-\u{2af}\u{370}-\u{373}\u{376}\u{377}\u{37b}-\u{37d}\u{37f}\u{386}\u{388}-\u{38a}\u{38c}\u{38e}-\u{3a1}\u{3a3}-\u{3f5}\u{3f7}-\u{481}\u{48a}-\u{52f}\u{531}-\u{556}\u{10a0}-\u{10c5}\u{13a0}-\u{13f5}\u{13f8}-\u{13fd}\u{1c90}-\u{1cba}\u{1cbd}-\u{1cbf}\u{1d00}-\u{1d2b}\u{1d6b}-\u{1d77}\u{1d79}-\u{1d9a}\u{1e00}-\u{1f15}\u{1f18}-\u{1f1d}\u{1f20}-\u{1f45}\u{1f48}-\u{1f4d}\u{1f50}-\u{1f57}\u{1f59}\u{1f5b}\u{1f5d}\u{1f5f}-\u{1f7d}\u{1f80}-\u{1fb4}\u{1fb6}-\u{1fbc}\u{1fbe}\u{1fc2}-\u{1fc4}\u{1fc6}-\u{1fcc}\u{1fd0}-\u{1fd3}\u{1fd6}-\u{1fdb}\u{1fe0}-\u{1fec}\u{1ff2}-\u{1ff4}\u{1ff6}-\u{1ffc}\u{2102}\u{2107}\u{210a}-\u{2113}\u{2115}\u{2119}-\u{211d}\u{2124}\u{2126}\u{2128}\u{212a}-\u{212d}\u{212f}-\u{2134}\u{2139}\u{213c}-\u{213f}\u{2145}-\u{2149}\u{214e}\u{2183}\u{2184}\u{2c00}-\u{2c7b}\u{2c7e}-\u{2ce4}\u{2ceb}-\u{2cee}\u{2cf2}\u{2cf3}\u{a640}-\u{a66d}\u{a680}-\u{a69b}\u{a722}-\u{a76f}\u{a771}-\u{a787}\u{a78b}-\u{a78e}\u{ab70}-\u{abbf}\u{fb00}-\u{fb06}\u{fb13}-\u{fb17}\u{ff21}-\u{ff3a}\u{ff41}-\u{ff5a}\u{10400}-\u{1044f}\u{104b0}-\u{104d3}\u{104d8}-\u{104fb}\u{10c80}-\u{10cb2}\u{10cc0}-\u{10cf2}\u{118a0}-\u{118df}\u{1e900}-\u{1e943}]+";
const DEEPSEEK_PUNCT: &str =
    "\\s?[!-/:-~\u{ff01}-\u{ff0f}\u{ff1a}-\u{ff5e}\u{2018}-\u{201f}\u{3000}-\u{3002}]+";
const DEEPSEEK_CJK: &str = "[\u{4e00}-\u{9fa5}\u{800}-\u{4e00}\u{ac00}-\u{d7ff}]+";
const DEEPSEEK3_CJK: &str = "[\u{4e00}-\u{9fa5}\u{3040}-\u{309f}\u{30a0}-\u{30ff}]+";
const DEEPSEEK3_MAIN: &str = r##"[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"##;

/// How llama.cpp pre-tokenizes a byte-level BPE vocabulary.
struct BpePre {
    regexes: Vec<&'static str>,
    ignore_merges: bool,
    add_bos: bool,
}

/// The pre-tokenizer for a `tokenizer.ggml.pre` value (llama-vocab.cpp `load` + `llm_tokenizer_bpe`).
/// None for values llama.cpp knows but this table does not implement.
fn bpe_pre(pre: &str) -> Option<BpePre> {
    let p = |regexes: Vec<&'static str>| BpePre {
        regexes,
        ignore_merges: false,
        add_bos: false,
    };
    Some(match pre {
        "default" => p(vec![
            r"[\p{P}\$\+<=>\^~\|]+",
            GPT2,
            r"\p{N}+",
            "[0-9][0-9][0-9]",
        ]),
        "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral" | "midm-2.0"
        | "lfm2" | "jina-v5-nano" => BpePre {
            regexes: vec![LLAMA3],
            ignore_merges: true,
            add_bos: true,
        },
        "dbrx" | "smaug-bpe" | "glm4" | "chatglm-bpe" => p(vec![LLAMA3]),
        "deepseek-llm" => p(vec![
            r"[\r\n]",
            DEEPSEEK_LETTERS,
            DEEPSEEK_PUNCT,
            r"\s+$",
            DEEPSEEK_CJK,
            r"\p{N}+",
        ]),
        "deepseek-coder" => p(vec![
            r"[\r\n]",
            r"\s?\p{L}+",
            r"\s?\p{P}+",
            DEEPSEEK_CJK,
            r"\p{N}",
        ]),
        "deepseek-v3" | "hunyuan-dense" => p(vec![r"\p{N}{1,3}", DEEPSEEK3_CJK, DEEPSEEK3_MAIN]),
        "falcon" => p(vec![r"[\p{P}\$\+<=>\^~\|`]+", GPT2, "[0-9][0-9][0-9]"]),
        "starcoder" | "refact" | "command-r" | "smollm" | "codeshell" | "exaone" | "minerva-7b" => {
            p(vec![r"\p{N}", GPT2])
        }
        "gpt-2" | "phi-2" | "jina-es" | "jina-de" | "gigachat" | "jina-v2-es" | "jina-v2-de"
        | "a.x-4.0" | "mellum" | "jina-v1-en" | "jina-v2-code" | "roberta-bpe" | "mpt" | "olmo"
        | "jais" | "trillion" | "granite-docling" | "exaone4" => p(vec![GPT2]),
        "qwen2" | "deepseek-r1-qwen" | "kormo" | "stablelm2" | "megrez" | "hunyuan" => {
            p(vec![QWEN2])
        }
        "qwen35" => p(vec![QWEN35]),
        "poro-chat" | "bloom" | "gpt3-finnish" => p(vec![BLOOM]),
        "viking" => p(vec![BLOOM, r"\p{N}"]),
        "tekken" => BpePre {
            regexes: vec![TEKKEN],
            ignore_merges: true,
            add_bos: true,
        },
        "gpt-4o" | "llama4" | "minimax-m2" => p(vec![GPT4O]),
        "seed-coder" => p(vec![SEED_CODER]),
        "grok-2" => p(vec![QWEN2]),
        "bailingmoe" | "bailingmoe2" | "llada-moe" => p(vec![BAILINGMOE]),
        _ => return None,
    })
}

fn metadata_strings(info: &GgufInfo, key: &str) -> Result<Option<Vec<String>>, String> {
    match info.metadata.get(key) {
        None => Ok(None),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::String(s) => Ok(s.clone()),
                _ => Err(format!("`{key}`[{i}] is not a string")),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        Some(_) => Err(format!("`{key}` is not an array of strings")),
    }
}

fn metadata_numbers(info: &GgufInfo, key: &str, len: usize) -> Result<Option<Vec<f64>>, String> {
    match info.metadata.get(key) {
        None => Ok(None),
        Some(Value::Array(items)) => {
            if items.len() != len {
                return Err(format!(
                    "`{key}` has {} entries but there are {len} tokens",
                    items.len()
                ));
            }
            Ok(Some(
                items.iter().map(|v| v.as_f64().unwrap_or(0.0)).collect(),
            ))
        }
        Some(_) => Err(format!("`{key}` is not an array of numbers")),
    }
}

/// A GGUF-built tokenizer plus what is worth telling the user about it.
pub struct GgufTokenizer {
    pub file: TokenizerFile,
    pub notes: Vec<String>,
}

/// Build the tokenizer a GGUF describes. `Err` says why none could be built (not an error of
/// the file: the caller records it).
pub fn tokenizer_from_gguf(info: &GgufInfo) -> Result<TokenizerFile, String> {
    build(info).map(|t| t.file)
}

/// As [`tokenizer_from_gguf`], with notes (e.g. an unknown pre-tokenizer replaced by llama.cpp's
/// default).
pub fn build(info: &GgufInfo) -> Result<GgufTokenizer, String> {
    let model = info
        .get_str("tokenizer.ggml.model")
        .ok_or("the file has no `tokenizer.ggml.model`, so it carries no tokenizer")?;
    let mut tokens = metadata_strings(info, "tokenizer.ggml.tokens")?
        .ok_or("the file has no `tokenizer.ggml.tokens`")?;
    if tokens.is_empty() {
        return Err("`tokenizer.ggml.tokens` is empty".into());
    }
    // llama.cpp renames empty tokens so every id keeps a unique text.
    for (i, t) in tokens.iter_mut().enumerate() {
        if t.is_empty() {
            *t = format!("[EMPTY_{i}]");
        }
    }
    let declared: Vec<i64> =
        match metadata_numbers(info, "tokenizer.ggml.token_type", tokens.len())? {
            Some(v) => v.into_iter().map(|x| x as i64).collect(),
            None => vec![1; tokens.len()],
        };
    // llama.cpp makes the end-of-turn/generation and FIM tokens it knows by text control tokens.
    let types = crate::artifacts::llama_cpp_vocab::effective_types(&tokens, &declared, &|k| {
        info.metadata.contains_key(k)
    });
    let mut notes = Vec::new();
    let built = match model {
        "gpt2" => byte_level(info, &tokens, &types, &mut notes)?,
        "llama" => sentencepiece(info, &tokens, &types)?,
        other => {
            let what = match other {
                "bert" => "WordPiece",
                "t5" => "Unigram",
                "rwkv" => "RWKV",
                "plamo2" => "PLaMo-2",
                _ => "an unknown model",
            };
            return Err(format!(
                "tokenizer.ggml.model \"{other}\" ({what}) is not supported; chatgate builds \"gpt2\" (byte-level BPE) and \"llama\" (SentencePiece) tokenizers"
            ));
        }
    };
    let text = serde_json::to_string(&built)
        .map_err(|e| format!("cannot serialize the tokenizer: {e}"))?;
    let tokenizer: tokenizers::Tokenizer = text
        .parse()
        .map_err(|e| format!("the tokenizer built from the metadata does not load: {e}"))?;
    let canonical = tokenizer
        .to_string(false)
        .map_err(|e| format!("cannot serialize the tokenizer: {e}"))?;
    let file = describe(&info.path, sha256_hex(canonical.as_bytes()), tokenizer);
    Ok(GgufTokenizer { file, notes })
}

fn added_token(id: usize, content: &str, special: bool, rstrip: bool) -> Value {
    json!({
        "id": id,
        "content": content,
        "single_word": false,
        "lstrip": false,
        "rstrip": rstrip,
        "normalized": false,
        "special": special,
    })
}

/// Control/unknown tokens as special added tokens, user-defined ones as plain added tokens.
/// With `phi3_rstrip`, llama.cpp's Phi-3 rule (`phi3_rstrip`) on each of them.
fn added_tokens(tokens: &[String], types: &[i64], phi3_rstrip: bool) -> Vec<Value> {
    let rstrip = |t: &str| phi3_rstrip && !matches!(t, "<unk>" | "<s>" | "<|endoftext|>");
    tokens
        .iter()
        .zip(types)
        .enumerate()
        .filter_map(|(i, (t, &ty))| match ty {
            TOKEN_TYPE_CONTROL | TOKEN_TYPE_UNKNOWN => Some(added_token(i, t, true, rstrip(t))),
            TOKEN_TYPE_USER_DEFINED => Some(added_token(i, t, false, rstrip(t))),
            _ => None,
        })
        .collect()
}

/// llama.cpp's Phi-3 rule (`llama-vocab.cpp`, keyed on `general.name` containing "phi-3" or
/// "phi3", since nothing in the tokenizer metadata tells a Phi-3 vocabulary apart): whitespace
/// after every special token but `<unk>`, `<s>` and `<|endoftext|>` is dropped (RSTRIP), as
/// Phi-3's `rstrip=True` added tokens do in transformers. Another name keeps the whitespace.
fn phi3_rstrip(info: &GgufInfo) -> bool {
    info.get_str("general.name")
        .map(str::to_lowercase)
        .is_some_and(|n| n.contains("phi-3") || n.contains("phi3"))
}

/// BOS/EOS insertion for `add_special_tokens=true`, from `tokenizer.ggml.add_bos_token` /
/// `add_eos_token` (llama.cpp's defaults when absent).
fn post_processor(info: &GgufInfo, tokens: &[String], default_bos: bool) -> Value {
    let pick = |flag: &str, default: bool, id_key: &str| -> Option<(String, usize)> {
        if !info.get_bool(flag).unwrap_or(default) {
            return None;
        }
        let id = usize::try_from(info.get_u64(id_key)?).ok()?;
        tokens.get(id).map(|t| (t.clone(), id))
    };
    let bos = pick(
        "tokenizer.ggml.add_bos_token",
        default_bos,
        "tokenizer.ggml.bos_token_id",
    );
    let eos = pick(
        "tokenizer.ggml.add_eos_token",
        false,
        "tokenizer.ggml.eos_token_id",
    );
    if bos.is_none() && eos.is_none() {
        return Value::Null;
    }
    let mut single = Vec::new();
    let mut pair = Vec::new();
    let mut specials = Map::new();
    let special = |t: &str, type_id: u32| json!({"SpecialToken": {"id": t, "type_id": type_id}});
    if let Some((t, id)) = &bos {
        single.push(special(t, 0));
        pair.push(special(t, 0));
        specials.insert(t.clone(), json!({"id": t, "ids": [id], "tokens": [t]}));
    }
    single.push(json!({"Sequence": {"id": "A", "type_id": 0}}));
    pair.push(json!({"Sequence": {"id": "A", "type_id": 0}}));
    if let Some((t, id)) = &eos {
        single.push(special(t, 0));
        pair.push(special(t, 0));
        specials.insert(t.clone(), json!({"id": t, "ids": [id], "tokens": [t]}));
    }
    if let Some((t, _)) = &bos {
        pair.push(special(t, 1));
    }
    pair.push(json!({"Sequence": {"id": "B", "type_id": 1}}));
    if let Some((t, _)) = &eos {
        pair.push(special(t, 1));
    }
    json!({"type": "TemplateProcessing", "single": single, "pair": pair, "special_tokens": specials})
}

fn tokenizer_json(
    added: Vec<Value>,
    normalizer: Value,
    pre_tokenizer: Value,
    post_processor: Value,
    decoder: Value,
    model: Value,
) -> Value {
    json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": normalizer,
        "pre_tokenizer": pre_tokenizer,
        "post_processor": post_processor,
        "decoder": decoder,
        "model": model,
    })
}

fn bpe_model(
    vocab: Map<String, Value>,
    merges: Vec<Value>,
    byte_fallback: bool,
    unk: Option<&str>,
    ignore_merges: bool,
) -> Value {
    json!({
        "type": "BPE",
        "dropout": null,
        "unk_token": unk,
        "continuing_subword_prefix": null,
        "end_of_word_suffix": null,
        "fuse_unk": byte_fallback,
        "byte_fallback": byte_fallback,
        "ignore_merges": ignore_merges,
        "vocab": vocab,
        "merges": merges,
    })
}

fn byte_level(
    info: &GgufInfo,
    tokens: &[String],
    types: &[i64],
    notes: &mut Vec<String>,
) -> Result<Value, String> {
    let merges_raw = metadata_strings(info, "tokenizer.ggml.merges")?.ok_or(
        "a gpt2 (byte-level BPE) tokenizer needs `tokenizer.ggml.merges`, which the file lacks",
    )?;
    let pre_name = match info.get_str("tokenizer.ggml.pre") {
        Some(p) => p,
        None => {
            notes.push(
                "no tokenizer.ggml.pre; using llama.cpp's default pre-tokenizer, as llama.cpp does"
                    .into(),
            );
            "default"
        }
    };
    let pre = match bpe_pre(pre_name) {
        Some(p) => p,
        None => {
            notes.push(format!(
                "tokenizer.ggml.pre \"{pre_name}\" is not in chatgate's table; using llama.cpp's default pre-tokenizer (llama.cpp does the same for names it does not know, but a newer llama.cpp may know this one)"
            ));
            bpe_pre("default").ok_or("internal: no default pre-tokenizer")?
        }
    };

    // Tokens keep their spelling as vocabulary keys. Normal tokens are already written in the
    // byte alphabet; a user-defined token written raw (`"  "`, `"<think>"`, CJK) can then only be
    // reached whole, as an added token, which is how llama.cpp matches it. Re-spelling it
    // byte-level (as transformers' GGUF converter does) would collide with the real token of
    // that spelling (`"  "` -> `"ĠĠ"`) and take over its id.
    let mut vocab = Map::with_capacity(tokens.len());
    for (i, t) in tokens.iter().enumerate() {
        vocab.insert(t.clone(), json!(i));
    }
    let mut merges = Vec::with_capacity(merges_raw.len());
    let mut dropped = 0usize;
    for m in &merges_raw {
        match m.split_once(' ') {
            Some((a, b))
                if vocab.contains_key(a)
                    && vocab.contains_key(b)
                    && vocab.contains_key(&format!("{a}{b}")) =>
            {
                merges.push(json!([a, b]));
            }
            _ => dropped += 1,
        }
    }
    if dropped > 0 {
        notes.push(format!(
            "{dropped} of {} merges name tokens outside the vocabulary and were skipped",
            merges_raw.len()
        ));
    }
    let split = |r: &str| json!({"type": "Split", "pattern": {"Regex": r}, "behavior": "Isolated", "invert": false});
    let mut pres: Vec<Value> = pre.regexes.iter().map(|r| split(r)).collect();
    pres.push(json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}));
    Ok(tokenizer_json(
        added_tokens(tokens, types, phi3_rstrip(info)),
        Value::Null,
        json!({"type": "Sequence", "pretokenizers": pres}),
        post_processor(info, tokens, pre.add_bos),
        json!({"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true}),
        bpe_model(vocab, merges, false, None, pre.ignore_merges),
    ))
}

/// transformers' `generate_merges(vocab, vocab_scores)`: every split of a token into two
/// vocabulary pieces, best score first, ties by longer left then longer right piece, then by
/// token order and piece ids (Python's stable sort).
fn merges_from_scores(
    tokens: &[String],
    vocab: &HashMap<&str, usize>,
    scores: &[f64],
) -> Vec<Value> {
    // (score, len(left), len(right), sequence) so a stable sort reproduces Python's order.
    let mut found: Vec<(f64, usize, usize, &str, &str)> = Vec::new();
    let mut seen: HashSet<&str> = HashSet::new();
    for (i, token) in tokens.iter().enumerate() {
        // dict(zip(tokens, scores)): a duplicate keeps its first position and its last score.
        if !seen.insert(token.as_str()) {
            continue;
        }
        let score = match vocab.get(token.as_str()) {
            Some(&last) => scores.get(last).copied().unwrap_or(scores[i]),
            None => scores[i],
        };
        let mut local: Vec<(usize, usize, &str, &str)> = Vec::new();
        let boundaries: Vec<usize> = token.char_indices().map(|(b, _)| b).skip(1).collect();
        for b in boundaries {
            let (l, r) = token.split_at(b);
            if let (Some(&li), Some(&ri)) = (vocab.get(l), vocab.get(r)) {
                local.push((li, ri, l, r));
            }
        }
        local.sort_by_key(|&(li, ri, _, _)| (li, ri));
        for (_, _, l, r) in local {
            found.push((score, l.chars().count(), r.chars().count(), l, r));
        }
    }
    // Python: sorted(key=(score, len l, len r), reverse=True) is stable for equal keys.
    found.sort_by(|a, b| {
        b.0.partial_cmp(&a.0)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then(b.1.cmp(&a.1))
            .then(b.2.cmp(&a.2))
    });
    found
        .into_iter()
        .map(|(_, _, _, l, r)| json!([l, r]))
        .collect()
}

fn sentencepiece(info: &GgufInfo, tokens: &[String], types: &[i64]) -> Result<Value, String> {
    let arch = info.architecture().unwrap_or("");
    let gemma = matches!(arch, "gemma" | "gemma2" | "gemma3");
    // Gemma stores tokens of several spaces as real spaces and its scores do not follow its
    // merge order; transformers re-spells those tokens and ranks by file position.
    let tokens: Vec<String> = if gemma {
        tokens
            .iter()
            .map(|t| {
                if t.contains(' ') && t.trim().is_empty() {
                    "\u{2581}".repeat(t.chars().count())
                } else {
                    t.clone()
                }
            })
            .collect()
    } else {
        tokens.to_vec()
    };
    let mut vocab_index: HashMap<&str, usize> = HashMap::with_capacity(tokens.len());
    let mut vocab = Map::with_capacity(tokens.len());
    for (i, t) in tokens.iter().enumerate() {
        vocab_index.insert(t.as_str(), i);
        vocab.insert(t.clone(), json!(i));
    }
    let merges = match metadata_strings(info, "tokenizer.ggml.merges")? {
        Some(m) => m
            .iter()
            .filter_map(|m| m.split_once(' '))
            .filter(|(a, b)| {
                vocab.contains_key(*a)
                    && vocab.contains_key(*b)
                    && vocab.contains_key(&format!("{a}{b}"))
            })
            .map(|(a, b)| json!([a, b]))
            .collect(),
        None => {
            let scores: Vec<f64> = if gemma {
                (0..tokens.len()).map(|i| -(i as f64)).collect()
            } else {
                metadata_numbers(info, "tokenizer.ggml.scores", tokens.len())?
                    .ok_or("a SentencePiece (\"llama\") tokenizer needs `tokenizer.ggml.scores` or `tokenizer.ggml.merges`")?
            };
            merges_from_scores(&tokens, &vocab_index, &scores)
        }
    };
    let unk = info
        .get_u64("tokenizer.ggml.unknown_token_id")
        .and_then(|id| tokens.get(usize::try_from(id).ok()?))
        .cloned()
        .or_else(|| vocab.contains_key("<unk>").then(|| "<unk>".to_string()));
    let add_space_prefix = info
        .get_bool("tokenizer.ggml.add_space_prefix")
        .unwrap_or(!gemma);
    let replace = json!({"type": "Replace", "pattern": {"String": " "}, "content": "\u{2581}"});
    let normalizer = if add_space_prefix {
        json!({"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u{2581}"}, replace]})
    } else {
        replace
    };
    let mut decoders = vec![
        json!({"type": "Replace", "pattern": {"String": "\u{2581}"}, "content": " "}),
        json!({"type": "ByteFallback"}),
        json!({"type": "Fuse"}),
    ];
    if add_space_prefix {
        decoders.push(json!({"type": "Strip", "content": " ", "start": 1, "stop": 0}));
    }
    Ok(tokenizer_json(
        added_tokens(&tokens, types, phi3_rstrip(info)),
        normalizer,
        Value::Null,
        post_processor(info, &tokens, true),
        json!({"type": "Sequence", "decoders": decoders}),
        bpe_model(vocab, merges, true, unk.as_deref(), false),
    ))
}
