//! The tokenizer transformers 5 actually runs for a model directory.
//!
//! `AutoTokenizer.from_pretrained(dir)` does not simply load tokenizer.json: it picks a class
//! from tokenizer_config.json and config.json, and most classes (LlamaTokenizer, Qwen2Tokenizer,
//! GemmaTokenizer, GPT2Tokenizer, ...) *rebuild* the backend, keeping only the vocabulary,
//! merges and post-processor and replacing the normalizer, pre-tokenizer, decoder and model
//! flags with their own. On Llama-2-family SentencePiece files that changes the ids of almost
//! every chat (no `▁` after a special token). vLLM, SGLang, `transformers serve` and TRL all
//! tokenize through it, so this is what the model was trained on and is fed.
//!
//! This is the rule of docs/research/transformers-tokenization.md (sources cited there as
//! transformers 5.23 `file:line`), expressed as a rewrite of tokenizer.json that the
//! `tokenizers` crate loads. It was verified against live transformers 5.23 on every corpus
//! golden and on 48 edited model directories (tests/corpus/goldens/stack_variants.json).
use serde_json::{json, Map, Value};

/// How transformers treats tokenizer.json.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `TokenizersBackend` / `PreTrainedTokenizerFast`: tokenizer.json is loaded as it is.
    AsIs,
    /// A class with its own `__init__`: the backend is rebuilt from the vocabulary.
    Rebuilt,
}

/// The tokenizer transformers would run, and why.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// The class `AutoTokenizer` picks, without `Fast` ("LlamaTokenizer", "TokenizersBackend").
    pub class: String,
    pub mode: Mode,
    /// tokenizer.json as transformers ends up with it.
    pub json: Value,
}

/// The model's files, parsed; each may be absent except tokenizer.json.
pub struct Files<'a> {
    pub tokenizer_json: &'a Value,
    pub tokenizer_config: Option<&'a Value>,
    pub config: Option<&'a Value>,
    pub special_tokens_map: Option<&'a Value>,
}

/// tokenization_auto.py L390-432: model types whose hub `tokenizer_class` transformers overrides.
const INCORRECT_HUB_CLASS: &[&str] = &[
    "arctic",
    "chatlm",
    "ernie4_5",
    "ernie4_5_moe",
    "fuyu",
    "h2ovl_chat",
    "hyperclovax",
    "hyperclovax_vlm",
    "hyperclovax_vision_v2",
    "internlm2",
    "internlm3",
    "iquestcoder",
    "jamba",
    "llava",
    "llava_next",
    "minicpm3",
    "minicpmv",
    "minimax_m2",
    "modernbert",
    "modernbert-decoder",
    "molmo",
    "molmo2",
    "nemotron",
    "nvfp4",
    "opencua",
    "openvla",
    "paddleocr_vl",
    "phi3",
    "phi3_v",
    "phimoe",
    "qwen2",
    "qwen3_5",
    "qwen3_5_moe",
    "qwen3_5_moe_text",
    "qwen4_exp",
    "step3_vl",
    "vipllava",
    "cohere_asr",
    "camembertv2-base",
    "siglip2",
    "smolvlm",
];

/// TokenizersBackend subclasses with their own `__init__`: they rebuild the backend.
const REBUILDING: &[&str] = &[
    "AlbertTokenizer",
    "BartTokenizer",
    "BarthezTokenizer",
    "BertTokenizer",
    "BigBirdTokenizer",
    "BlenderbotTokenizer",
    "CLIPTokenizer",
    "CamembertTokenizer",
    "CodeLlamaTokenizer",
    "CohereTokenizer",
    "DPRQuestionEncoderTokenizer",
    "DebertaTokenizer",
    "DebertaV2Tokenizer",
    "EsmcTokenizer",
    "FunnelTokenizer",
    "GPT2Tokenizer",
    "GPTNeoXTokenizer",
    "GemmaTokenizer",
    "HerbertTokenizer",
    "LEDTokenizer",
    "LasrTokenizer",
    "LayoutLMv2Tokenizer",
    "LayoutLMv3Tokenizer",
    "LayoutXLMTokenizer",
    "LlamaTokenizer",
    "LukeTokenizer",
    "LxmertTokenizer",
    "MBart50Tokenizer",
    "MBartTokenizer",
    "MPNetTokenizer",
    "MarkupLMTokenizer",
    "MobileBertTokenizer",
    "MvpTokenizer",
    "NllbTokenizer",
    "NougatTokenizer",
    "OpenAIGPTTokenizer",
    "PegasusTokenizer",
    "Qwen2Tokenizer",
    "Qwen3_5Tokenizer",
    "ReformerTokenizer",
    "RemBertTokenizer",
    "RoFormerTokenizer",
    "RobertaTokenizer",
    "SeamlessM4TTokenizer",
    "Siglip2Tokenizer",
    "SplinterTokenizer",
    "T5Tokenizer",
    "UdopTokenizer",
    "VideoPrismTokenizer",
    "WhisperTokenizer",
    "XGLMTokenizer",
    "XLMRobertaTokenizer",
    "XLNetTokenizer",
];

/// Pure-Python tokenizers (tokenizer.json unused) and sentencepiece-only ones.
const NOT_FROM_JSON: &[&str] = &[
    "BertJapaneseTokenizer",
    "BertweetTokenizer",
    "BioGptTokenizer",
    "BlenderbotSmallTokenizer",
    "ByT5Tokenizer",
    "CTRLTokenizer",
    "CanineTokenizer",
    "ClvpTokenizer",
    "CpmAntTokenizer",
    "DiaTokenizer",
    "EsmTokenizer",
    "FSMTTokenizer",
    "FlaubertTokenizer",
    "GPTNeoXJapaneseTokenizer",
    "MgpstrTokenizer",
    "MyT5Tokenizer",
    "PerceiverTokenizer",
    "PhobertTokenizer",
    "ProphetNetTokenizer",
    "RagTokenizer",
    "RoCBertTokenizer",
    "TapasTokenizer",
    "VitsTokenizer",
    "Wav2Vec2CTCTokenizer",
    "Wav2Vec2PhonemeCTCTokenizer",
    "XLMTokenizer",
    "BartphoTokenizer",
    "CpmTokenizer",
    "PLBartTokenizer",
];

const AS_IS: &str = "TokenizersBackend";

/// `TOKENIZER_MAPPING_NAMES[model_type]` (transformers 5.23, without mistral-common installed,
/// which is how vLLM and TRL images ship); "llama" is absent there.
fn mapped_class(model_type: &str) -> Option<&'static str> {
    super::transformers_map::TOKENIZER_MAPPING_NAMES
        .binary_search_by(|(k, _)| (*k).cmp(model_type))
        .ok()
        .map(|i| super::transformers_map::TOKENIZER_MAPPING_NAMES[i].1)
}

fn strip_fast(name: &str) -> &str {
    name.strip_suffix("Fast").unwrap_or(name)
}

fn str_field<'a>(doc: Option<&'a Value>, key: &str) -> Option<&'a str> {
    doc?.get(key)?.as_str().filter(|s| !s.is_empty())
}

fn mentions_byte_level(tj: &Value) -> bool {
    ["normalizer", "pre_tokenizer", "decoder", "post_processor"]
        .iter()
        .any(|k| {
            tj.get(*k)
                .is_some_and(|v| v.to_string().contains("\"ByteLevel\""))
        })
}

/// Step 1: the class `AutoTokenizer` picks (tokenization_auto.py L745-1010).
/// Err when transformers would run code or files this rule does not model.
pub fn resolve_class(f: &Files) -> Result<String, String> {
    let tc = f.tokenizer_config;
    let model_type = str_field(f.config, "model_type").unwrap_or("");
    if let Some(auto) = tc.and_then(|t| t.get("auto_map")) {
        let remote = match auto {
            Value::Object(m) => m.contains_key("AutoTokenizer"),
            Value::Null => false,
            _ => true,
        };
        if remote {
            return Err("tokenizer_config.json names remote code (auto_map.AutoTokenizer)".into());
        }
    }
    let hub = str_field(tc, "tokenizer_class").or(str_field(f.config, "tokenizer_class"));
    let mapped = mapped_class(model_type);
    if let Some(hub) = hub {
        if strip_fast(hub) == "LlamaTokenizer"
            && !INCORRECT_HUB_CLASS.contains(&model_type)
            && mentions_byte_level(f.tokenizer_json)
        {
            return Ok(AS_IS.into());
        }
        if let (Some(mapped), false) = (mapped, model_type.is_empty()) {
            if strip_fast(mapped) != strip_fast(hub) {
                if strip_fast(mapped) != AS_IS && !is_as_is_name(strip_fast(mapped)) {
                    let name = if INCORRECT_HUB_CLASS.contains(&model_type) {
                        strip_fast(mapped)
                    } else {
                        strip_fast(hub)
                    };
                    if !is_as_is_name(name) {
                        return Ok(name.to_string());
                    }
                }
                return Ok(AS_IS.into());
            }
        }
    }
    if let Some(name) = str_field(tc, "tokenizer_class") {
        let name = strip_fast(name);
        if REBUILDING.contains(&name) || NOT_FROM_JSON.contains(&name) {
            return Ok(name.to_string());
        }
        return Ok(AS_IS.into());
    }
    if let Some(name) = str_field(f.config, "tokenizer_class") {
        return Ok(strip_fast(name).to_string());
    }
    Ok(mapped.map(strip_fast).unwrap_or(AS_IS).to_string())
}

fn is_as_is_name(name: &str) -> bool {
    matches!(
        name,
        "TokenizersBackend" | "PythonBackend" | "PreTrainedTokenizerFast" | "PreTrainedTokenizer"
    )
}

/// Steps 2-5: tokenizer.json as transformers ends up running it.
pub fn resolve(f: &Files) -> Result<Resolved, String> {
    let class = resolve_class(f)?;
    let tj = f.tokenizer_json;
    let empty = Value::Object(Map::new());
    let tc = f.tokenizer_config.unwrap_or(&empty);
    let mut out = tj.clone();
    let mode = if is_as_is_name(&class) || class == "FNetTokenizer" || class == "ParakeetTokenizer"
    {
        Mode::AsIs
    } else {
        let rebuilt = match class.as_str() {
            "LlamaTokenizer" => llama(tj, tc),
            "GemmaTokenizer" => gemma(tj, tc),
            "Qwen2Tokenizer" => qwen2(tj, tc),
            "GPT2Tokenizer" => gpt2(tj, tc),
            other if NOT_FROM_JSON.contains(&other) => {
                return Err(format!(
                    "transformers loads {other} without tokenizer.json (sentencepiece or pure Python)"
                ))
            }
            other => {
                return Err(format!(
                    "transformers rebuilds {other}'s tokenizer from the vocabulary, and chatgate does not model that class"
                ))
            }
        };
        let obj = out
            .as_object_mut()
            .ok_or("tokenizer.json is not an object")?;
        for (k, v) in rebuilt {
            obj.insert(k.into(), v);
        }
        Mode::Rebuilt
    };
    if out.get("post_processor").is_none_or(Value::is_null) {
        // update_post_processor() with add_bos/eos_token popped (tokenization_utils_base.py
        // L1807-1810): a TemplateProcessing that adds nothing.
        out["post_processor"] = json!({
            "type": "TemplateProcessing",
            "single": [{"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {}
        });
    }
    let tokens = added_tokens(f, tc, &class, mode == Mode::Rebuilt);
    out["added_tokens"] = Value::Array(assign_ids(tokens, &out["model"]["vocab"]));
    Ok(Resolved {
        class,
        mode,
        json: out,
    })
}

/// (vocab as an object, merges) from the JSON model (L179-197).
fn vocab_merges(tj: &Value) -> (Value, Value) {
    let model = &tj["model"];
    let vocab = match &model["vocab"] {
        Value::Array(list) => Value::Object(
            list.iter()
                .enumerate()
                .filter_map(|(i, t)| {
                    let piece = t.get(0).unwrap_or(t).as_str()?;
                    Some((piece.to_string(), json!(i)))
                })
                .collect(),
        ),
        v => v.clone(),
    };
    let merges = match &model["merges"] {
        Value::Null => json!([]),
        m => m.clone(),
    };
    (vocab, merges)
}

fn bpe(tj: &Value, flags: Value) -> Value {
    let (vocab, merges) = vocab_merges(tj);
    let mut m = json!({"type": "BPE", "dropout": null, "unk_token": null,
        "continuing_subword_prefix": null, "end_of_word_suffix": null, "fuse_unk": false,
        "byte_fallback": false, "ignore_merges": false});
    for (k, v) in flags.as_object().into_iter().flatten() {
        m[k] = v.clone();
    }
    m["vocab"] = vocab;
    m["merges"] = merges;
    m
}

fn flag(tc: &Value, key: &str) -> Option<bool> {
    tc.get(key).and_then(Value::as_bool)
}

/// A field that Python reads truthily (`legacy` may be a bool, null or absent).
fn truthy(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(Value::Number(n)) => n.as_f64() != Some(0.0),
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(o)) => !o.is_empty(),
    }
}

/// LlamaTokenizer (models/llama/tokenization_llama.py L92-143; tokenization_utils_base.py
/// L3750-3757): no normalizer, Metaspace without split, prepend scheme from
/// `add_prefix_space` and `legacy`.
fn llama(tj: &Value, tc: &Value) -> Vec<(&'static str, Value)> {
    let aps = flag(tc, "add_prefix_space").unwrap_or(true);
    let scheme = match (aps, truthy(tc.get("legacy"))) {
        (false, _) => "never",
        (true, true) => "always",
        (true, false) => "first",
    };
    let mut dec = vec![
        json!({"type": "Replace", "pattern": {"String": "\u{2581}"}, "content": " "}),
        json!({"type": "ByteFallback"}),
        json!({"type": "Fuse"}),
    ];
    if aps {
        dec.push(json!({"type": "Strip", "content": " ", "start": 1, "stop": 0}));
    }
    vec![
        ("normalizer", Value::Null),
        (
            "pre_tokenizer",
            json!({"type": "Metaspace", "replacement": "\u{2581}", "prepend_scheme": scheme, "split": false}),
        ),
        ("decoder", json!({"type": "Sequence", "decoders": dec})),
        (
            "model",
            bpe(tj, json!({"fuse_unk": true, "byte_fallback": true})),
        ),
    ]
}

/// GemmaTokenizer (models/gemma/tokenization_gemma.py L59-106).
fn gemma(tj: &Value, tc: &Value) -> Vec<(&'static str, Value)> {
    let unk = match tc.get("unk_token") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Object(o)) => o
            .get("content")
            .and_then(Value::as_str)
            .unwrap_or("<unk>")
            .to_string(),
        _ => "<unk>".into(),
    };
    vec![
        (
            "normalizer",
            json!({"type": "Replace", "pattern": {"String": " "}, "content": "\u{2581}"}),
        ),
        (
            "pre_tokenizer",
            json!({"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious", "invert": false}),
        ),
        (
            "decoder",
            json!({"type": "Sequence", "decoders": [
                {"type": "Replace", "pattern": {"String": "\u{2581}"}, "content": " "},
                {"type": "ByteFallback"}, {"type": "Fuse"}]}),
        ),
        (
            "model",
            bpe(
                tj,
                json!({"fuse_unk": true, "byte_fallback": true, "unk_token": unk}),
            ),
        ),
    ]
}

/// models/qwen2/tokenization_qwen2.py L33.
const QWEN2_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Qwen2Tokenizer (models/qwen2/tokenization_qwen2.py L41-98).
fn qwen2(tj: &Value, tc: &Value) -> Vec<(&'static str, Value)> {
    let aps = flag(tc, "add_prefix_space").unwrap_or(false);
    vec![
        ("normalizer", json!({"type": "NFC"})),
        (
            "pre_tokenizer",
            json!({"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": QWEN2_REGEX}, "behavior": "Isolated", "invert": false},
                {"type": "ByteLevel", "add_prefix_space": aps, "trim_offsets": true, "use_regex": false}]}),
        ),
        byte_level_decoder(),
        ("model", byte_level_bpe(tj)),
    ]
}

/// The decoder both byte-level classes (Qwen2, GPT2) install.
fn byte_level_decoder() -> (&'static str, Value) {
    (
        "decoder",
        json!({"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true}),
    )
}

/// Their BPE model flags.
fn byte_level_bpe(tj: &Value) -> Value {
    bpe(
        tj,
        json!({"continuing_subword_prefix": "", "end_of_word_suffix": ""}),
    )
}

/// GPT2Tokenizer (models/gpt2/tokenization_gpt2.py L94-121).
fn gpt2(tj: &Value, tc: &Value) -> Vec<(&'static str, Value)> {
    let aps = flag(tc, "add_prefix_space").unwrap_or(false);
    vec![
        ("normalizer", Value::Null),
        (
            "pre_tokenizer",
            json!({"type": "ByteLevel", "add_prefix_space": aps, "trim_offsets": true, "use_regex": true}),
        ),
        byte_level_decoder(),
        ("model", byte_level_bpe(tj)),
    ]
}

/// The named special tokens, in transformers' order.
const NAMED: [&str; 7] = crate::artifacts::NAMED_TOKEN_KEYS;
const FLAGS: [&str; 5] = ["single_word", "lstrip", "rstrip", "normalized", "special"];

/// Keyword defaults of each rebuilding class's `__init__`, used when no file names the token.
fn class_default(class: &str, key: &str) -> Option<&'static str> {
    Some(match (class, key) {
        ("LlamaTokenizer", "unk_token") => "<unk>",
        ("LlamaTokenizer", "bos_token") => "<s>",
        ("LlamaTokenizer", "eos_token") => "</s>",
        ("GemmaTokenizer", "unk_token") => "<unk>",
        ("GemmaTokenizer", "bos_token") => "<bos>",
        ("GemmaTokenizer", "eos_token") => "<eos>",
        ("GemmaTokenizer", "pad_token") => "<pad>",
        ("GemmaTokenizer", "mask_token") => "<mask>",
        ("Qwen2Tokenizer", "unk_token" | "eos_token" | "pad_token") => "<|endoftext|>",
        ("GPT2Tokenizer", "unk_token" | "bos_token" | "eos_token") => "<|endoftext|>",
        _ => return None,
    })
}

/// A string or AddedToken dict as an added-token entry (Python `AddedToken(t, special=True)`).
fn as_token(v: &Value) -> Option<Map<String, Value>> {
    let mut t = Map::new();
    match v {
        Value::String(s) => {
            t.insert("content".into(), json!(s));
            for f in ["single_word", "lstrip", "rstrip", "normalized"] {
                t.insert(f.into(), json!(false));
            }
        }
        Value::Object(o) => {
            t.insert("content".into(), o.get("content")?.clone());
            for f in ["single_word", "lstrip", "rstrip", "normalized"] {
                t.insert(
                    f.into(),
                    json!(o.get(f).and_then(Value::as_bool).unwrap_or(false)),
                );
            }
        }
        _ => return None,
    }
    t.insert("special".into(), json!(true));
    Some(t)
}

fn content(t: &Map<String, Value>) -> &str {
    t.get("content").and_then(Value::as_str).unwrap_or("")
}

/// Named and extra special tokens in transformers' order (tokenization_utils_base.py
/// L1840-1865, L1012-1050, L1097).
fn special_tokens(f: &Files, tc: &Value, class: &str, rebuilt: bool) -> (Vec<Value>, Vec<Value>) {
    let mut src: Map<String, Value> = tc.as_object().cloned().unwrap_or_default();
    if !src.contains_key("added_tokens_decoder") {
        // special_tokens_map.json is read only for legacy saves (L1891-1914).
        for (k, v) in f
            .special_tokens_map
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            src.insert(k.clone(), v.clone());
        }
    }
    if src.contains_key("additional_special_tokens") && !truthy(src.get("extra_special_tokens")) {
        let v = src.remove("additional_special_tokens").unwrap_or_default();
        src.insert("extra_special_tokens".into(), v);
    }
    let mut named = Vec::new();
    for key in NAMED {
        let v = match src.get(key) {
            Some(v) => v.clone(),
            None if rebuilt => class_default(class, key)
                .map(|s| json!(s))
                .unwrap_or_default(),
            None => Value::Null,
        };
        if truthy(Some(&v)) {
            named.push(v);
        }
    }
    for (k, v) in &src {
        if !NAMED.contains(&k.as_str()) && k.ends_with("_token") && v.is_string() {
            named.push(v.clone());
        }
    }
    let extra = match src.get("extra_special_tokens") {
        Some(Value::Object(o)) => {
            named.extend(o.values().cloned());
            vec![]
        }
        Some(Value::Array(a)) => a.clone(),
        _ => vec![],
    };
    (named, extra)
}

/// The final added-token list in load order (tokenization_utils_tokenizers.py L448-505;
/// Qwen2Tokenizer L98). Adding a token already present overwrites its flags in place.
fn added_tokens(f: &Files, tc: &Value, class: &str, rebuilt: bool) -> Vec<Map<String, Value>> {
    let from_json = |t: &Value| -> Option<Map<String, Value>> {
        let mut m = Map::new();
        m.insert("content".into(), t.get("content")?.clone());
        for fl in FLAGS {
            m.insert(
                fl.into(),
                json!(t.get(fl).and_then(Value::as_bool).unwrap_or(false)),
            );
        }
        Some(m)
    };
    let tj_added: Vec<&Value> = f.tokenizer_json["added_tokens"]
        .as_array()
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    let mut toks: Vec<Map<String, Value>> = if rebuilt {
        vec![]
    } else {
        tj_added.iter().filter_map(|t| from_json(t)).collect()
    };
    fn add(toks: &mut Vec<Map<String, Value>>, t: Map<String, Value>) {
        match toks.iter_mut().find(|x| content(x) == content(&t)) {
            Some(x) => x.extend(t),
            None => toks.push(t),
        }
    }
    let mut src: Vec<(i64, Map<String, Value>)> = match tc.get("added_tokens_decoder") {
        Some(Value::Object(dec)) => dec
            .iter()
            .filter_map(|(id, v)| Some((id.parse().ok()?, from_json(v)?)))
            .collect(),
        _ => tj_added
            .iter()
            .filter_map(|t| Some((t.get("id")?.as_i64()?, from_json(t)?)))
            .collect(),
    };
    src.sort_by_key(|(id, _)| *id);
    let (named, extra) = special_tokens(f, tc, class, rebuilt);
    let named_contents: Vec<String> = named
        .iter()
        .filter_map(|v| as_token(v).map(|t| content(&t).to_string()))
        .collect();
    for (_, mut t) in src {
        if named_contents.iter().any(|c| c == content(&t)) {
            t.insert("special".into(), json!(true));
        }
        add(&mut toks, t);
    }
    for v in named.iter().chain(&extra) {
        if let Some(t) = as_token(v) {
            if !toks.iter().any(|x| content(x) == content(&t)) {
                toks.push(t);
            }
        }
    }
    if class == "Qwen2Tokenizer" {
        for v in named.iter().chain(&extra) {
            let text = match v {
                Value::Object(o) => o.get("content").cloned(),
                other => Some(other.clone()),
            };
            if let Some(t) = text.as_ref().and_then(as_token) {
                add(&mut toks, t);
            }
        }
    }
    toks
}

/// Ids as `AddedVocabulary::add_tokens` gives them when the JSON is loaded in order: the
/// vocabulary's id for a known piece, else the next free one (the JSON `id` is not honoured).
fn assign_ids(toks: Vec<Map<String, Value>>, vocab: &Value) -> Vec<Value> {
    let lookup = |piece: &str| -> Option<u64> {
        match vocab {
            Value::Object(m) => m.get(piece).and_then(Value::as_u64),
            Value::Array(a) => a
                .iter()
                .position(|t| t.get(0).unwrap_or(t).as_str() == Some(piece))
                .map(|i| i as u64),
            _ => None,
        }
    };
    let size = match vocab {
        Value::Object(m) => m.len() as u64,
        Value::Array(a) => a.len() as u64,
        _ => 0,
    };
    let mut max_used: Option<u64> = None;
    toks.into_iter()
        .map(|mut t| {
            let id = lookup(content(&t)).unwrap_or(match max_used {
                Some(m) if !(m < size && size != 0) => m + 1,
                _ => size,
            });
            max_used = Some(max_used.map_or(id, |m| m.max(id)));
            t.insert("id".into(), json!(id));
            Value::Object(t)
        })
        .collect()
}
