//! `ModelDir::open` on the corpus model directories (read-only) and on crafted temp dirs:
//! template precedence, malformed files, truncated/corrupted weights, sharded safetensors,
//! GGUF metadata, weight hashing.
use std::path::{Path, PathBuf};

use chatgate::artifacts::{
    read_gguf, read_safetensors_header, sha256_file, ModelDir, WeightFormat,
};
use chatgate::error::Error;
use serde_json::{json, Value};
use sha2::Digest;

use crate::common::gguf_writer as writer;
use writer::{gguf, V};

fn models() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/models")
}

fn open(path: &Path) -> ModelDir {
    ModelDir::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn open_err(path: &Path) -> Error {
    match ModelDir::open(path) {
        Ok(_) => panic!("{}: expected an error", path.display()),
        Err(e) => e,
    }
}

fn json_file(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("read")).expect("json")
}

fn sha256_bytes(bytes: &[u8]) -> String {
    hex::encode(sha2::Sha256::digest(bytes))
}

fn write(path: &Path, text: &str) {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).expect("mkdir");
    }
    std::fs::write(path, text).expect("write");
}

const EMPTY_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

// ---------------------------------------------------------------- corpus model directories

#[test]
fn every_corpus_model_opens() {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(models())
        .expect("corpus")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    assert!(dirs.len() >= 6);
    for dir in dirs {
        let m = open(&dir);
        let tok = m
            .tokenizer
            .as_ref()
            .expect("every corpus model ships tokenizer.json");
        let bytes = std::fs::read(dir.join("tokenizer.json")).expect("read");
        assert_eq!(tok.sha256, sha256_bytes(&bytes), "{}", dir.display());
        assert!(m.weights.is_empty(), "metadata-only corpus");
        let id = m.hash_weights().expect("hash");
        assert!(id.files.is_empty());
        assert_eq!(id.total, EMPTY_SHA256);
        // Every template found is the text of the file it names.
        for t in m.templates.templates.iter().chain(&m.templates.shadowed) {
            assert!(!t.text.is_empty(), "{}: {}", dir.display(), t.origin);
        }
    }
}

#[test]
fn tinyllama_template_comes_from_chat_template_jinja() {
    let dir = models().join("TinyLlama-1.1B-Chat-v1.0");
    let m = open(&dir);
    let tc = json_file(&dir.join("tokenizer_config.json"));
    assert!(
        tc.get("chat_template").is_none(),
        "the corpus file has no chat_template"
    );
    assert_eq!(m.templates.templates.len(), 1);
    let t = &m.templates.templates[0];
    assert_eq!(t.name, "default");
    assert_eq!(t.origin, "chat_template.jinja");
    assert_eq!(
        t.text,
        std::fs::read_to_string(dir.join("chat_template.jinja")).expect("read")
    );
    assert!(m.templates.shadowed.is_empty());
    assert_eq!(
        m.templates.select(false).map(|t| t.origin.as_str()),
        Some("chat_template.jinja")
    );
    assert_eq!(
        m.templates.select(true).map(|t| t.name.as_str()),
        Some("default")
    );

    // transformers 5.23 AutoTokenizer: {'bos_token': '<s>', 'eos_token': '</s>', 'unk_token': '<unk>', 'pad_token': '</s>'}
    let st = m.special_tokens();
    assert_eq!(st.bos_token.as_deref(), Some("<s>"));
    assert_eq!(st.eos_token.as_deref(), Some("</s>"));
    assert_eq!(st.unk_token.as_deref(), Some("<unk>"));
    assert_eq!(st.pad_token.as_deref(), Some("</s>"));
    assert_eq!(st.sep_token, None);

    let cfg = m.config.as_ref().expect("config");
    assert_eq!(cfg.model_type.as_deref(), Some("llama"));
    assert_eq!(cfg.architectures, vec!["LlamaForCausalLM".to_string()]);
    assert_eq!(cfg.vocab_size, Some(32000));
    assert_eq!(cfg.hidden_size, Some(2048));
    assert_eq!(cfg.num_hidden_layers, Some(22));
    assert_eq!(cfg.num_key_value_heads, Some(4));
    assert_eq!(cfg.max_position_embeddings, Some(2048));
    assert_eq!(cfg.bos_token_ids, vec![1]);
    assert_eq!(cfg.eos_token_ids, vec![2]);
    assert_eq!(cfg.dtype.as_deref(), Some("float32"));
    assert_eq!(cfg.tie_word_embeddings, Some(false));

    let gen = m.generation_config.as_ref().expect("generation_config");
    assert_eq!(gen.eos_token_ids, vec![2]);
    assert_eq!(gen.bos_token_id, Some(1));
    assert_eq!(gen.pad_token_id, Some(0));
    assert_eq!(gen.max_length, Some(2048));
    assert_eq!(gen.temperature, None);

    let tc = m.tokenizer_config.as_ref().expect("tokenizer_config");
    assert_eq!(tc.tokenizer_class.as_deref(), Some("LlamaTokenizer"));
    assert_eq!(tc.add_bos_token, Some(true));
    assert_eq!(tc.legacy, Some(false));
    assert_eq!(tc.add_prefix_space, None);
    assert_eq!(tc.model_max_length, Some(2048.0));
    assert_eq!(
        tc.added_tokens_decoder.get(&2),
        Some(&("</s>".to_string(), true))
    );

    let stm = m.special_tokens_map.as_ref().expect("special_tokens_map");
    assert_eq!(stm.eos_token.as_deref(), Some("</s>"));

    let tok = m.tokenizer.as_ref().expect("tokenizer");
    // SOURCES.md
    assert_eq!(
        tok.sha256,
        "c88bda6bdd84543eadebdf4bd2ec325ae43b71a3ff1fead6a766562c00b29bd8"
    );
    assert_eq!(tok.model_type, "BPE");
    assert_eq!(tok.pre_tokenizer, "none");
    assert_eq!(tok.vocab_size, 32000);
    assert_eq!(tok.added_tokens.len(), 3);
    assert_eq!(tok.added_tokens[1].content, "<s>");
    assert!(tok.added_tokens[1].special);
}

#[test]
fn qwen25_special_tokens_vocab_and_template() {
    let dir = models().join("Qwen2.5-0.5B-Instruct");
    let m = open(&dir);
    // transformers 5.23: {'eos_token': '<|im_end|>', 'pad_token': '<|endoftext|>'}, len 151665
    let st = m.special_tokens();
    assert_eq!(st.eos_token.as_deref(), Some("<|im_end|>"));
    assert_eq!(st.pad_token.as_deref(), Some("<|endoftext|>"));
    assert_eq!(st.bos_token, None);
    assert_eq!(st.unk_token, None);
    let tok = m.tokenizer.as_ref().expect("tokenizer");
    assert_eq!(tok.vocab_size, 151665);
    assert_eq!(tok.added_tokens.len(), 22);
    assert_eq!(tok.pre_tokenizer, "Sequence[Split, ByteLevel]");
    assert_eq!(
        tok.sha256,
        "c0382117ea329cdf097041132f6d735924b697924d6f6fc3945713e96ce87539"
    );
    let raw = json_file(&dir.join("tokenizer_config.json"));
    assert_eq!(m.templates.templates.len(), 1);
    assert_eq!(
        m.templates.templates[0].origin,
        "tokenizer_config.json#chat_template"
    );
    assert_eq!(
        Some(m.templates.templates[0].text.as_str()),
        raw["chat_template"].as_str()
    );
    let tc = m.tokenizer_config.as_ref().expect("tokenizer_config");
    assert_eq!(tc.tokenizer_class.as_deref(), Some("Qwen2Tokenizer"));
    assert_eq!(tc.model_max_length, Some(131072.0));
    assert_eq!(tc.added_tokens_decoder.len(), 22);
    assert_eq!(
        tc.added_tokens_decoder.get(&151657),
        Some(&("<tool_call>".to_string(), false))
    );
    assert!(m.config.is_none() && m.generation_config.is_none());
}

#[test]
fn mistral_v03_config_generation_and_tokens() {
    let dir = models().join("Mistral-7B-Instruct-v0.3");
    let m = open(&dir);
    let cfg = m.config.as_ref().expect("config");
    assert_eq!(cfg.model_type.as_deref(), Some("mistral"));
    assert_eq!(cfg.vocab_size, Some(32768));
    assert_eq!(cfg.num_attention_heads, Some(32));
    assert_eq!(cfg.num_key_value_heads, Some(8));
    assert_eq!(cfg.max_position_embeddings, Some(32768));
    assert_eq!(
        cfg.dtype.as_deref(),
        Some("bfloat16"),
        "torch_dtype is read when dtype is absent"
    );
    assert_eq!(cfg.bos_token_ids, vec![1]);
    assert_eq!(cfg.eos_token_ids, vec![2]);
    let gen = m.generation_config.as_ref().expect("generation_config");
    assert_eq!(gen.eos_token_ids, vec![2]);
    // transformers 5.23: {'bos_token': '<s>', 'eos_token': '</s>', 'unk_token': '<unk>'}, len 32768
    let st = m.special_tokens();
    assert_eq!(st.bos_token.as_deref(), Some("<s>"));
    assert_eq!(st.eos_token.as_deref(), Some("</s>"));
    assert_eq!(st.unk_token.as_deref(), Some("<unk>"));
    assert_eq!(st.pad_token, None);
    let tok = m.tokenizer.as_ref().expect("tokenizer");
    assert_eq!(tok.vocab_size, 32768);
    assert_eq!(tok.added_tokens.len(), 771);
    assert_eq!(tok.pre_tokenizer, "Metaspace");
    assert_eq!(
        tok.sha256,
        "e553af6fff7d7ad76e830608b218c5c0b0822998d5a1a96099a74cd3c1cb1a49"
    );
    let tc = m.tokenizer_config.as_ref().expect("tokenizer_config");
    assert_eq!(tc.add_bos_token, Some(true));
    assert_eq!(tc.add_eos_token, Some(false));
    assert_eq!(tc.add_prefix_space, Some(true));
    assert!(tc.model_max_length.is_some_and(|x| x > 1e29));
    assert_eq!(
        m.templates.templates[0].origin,
        "tokenizer_config.json#chat_template"
    );
}

#[test]
fn phi3_smollm2_gpt2() {
    let phi = open(&models().join("Phi-3-mini-4k-instruct"));
    // transformers 5.23: {'bos_token': '<s>', 'eos_token': '<|endoftext|>', 'unk_token': '<unk>', 'pad_token': '<|endoftext|>'}, len 32011
    let st = phi.special_tokens();
    assert_eq!(st.bos_token.as_deref(), Some("<s>"));
    assert_eq!(st.eos_token.as_deref(), Some("<|endoftext|>"));
    assert_eq!(st.pad_token.as_deref(), Some("<|endoftext|>"));
    assert_eq!(phi.tokenizer.as_ref().expect("tok").vocab_size, 32011);
    assert_eq!(
        phi.tokenizer_config.as_ref().expect("tc").model_max_length,
        Some(4096.0)
    );
    assert_eq!(phi.templates.templates.len(), 1);

    let smol = open(&models().join("SmolLM2-135M-Instruct"));
    // transformers 5.23: special_tokens_map {}, no chat template, len 49152
    assert_eq!(smol.special_tokens(), Default::default());
    assert!(smol.templates.templates.is_empty() && smol.templates.shadowed.is_empty());
    assert_eq!(smol.templates.select(false), None);
    let tok = smol.tokenizer.as_ref().expect("tok");
    assert_eq!(tok.vocab_size, 49152);
    assert_eq!(tok.pre_tokenizer, "Sequence[Digits, ByteLevel]");
    let cfg = smol.config.as_ref().expect("config");
    assert_eq!(cfg.vocab_size, Some(49152));
    assert_eq!(cfg.pad_token_id, Some(2));
    assert_eq!(cfg.tie_word_embeddings, Some(true));

    let gpt2 = open(&models().join("gpt2-xl"));
    let tok = gpt2.tokenizer.as_ref().expect("tok");
    // This tokenizer.json predates the "type" tag on its model; the type is still known.
    assert_eq!(tok.model_type, "BPE");
    assert_eq!(tok.pre_tokenizer, "ByteLevel");
    assert_eq!(tok.vocab_size, 50257);
    assert_eq!(
        gpt2.generation_config.as_ref().expect("gen").eos_token_ids,
        vec![50256]
    );
    assert_eq!(
        gpt2.config.as_ref().expect("cfg").model_type.as_deref(),
        Some("gpt2")
    );
    assert_eq!(gpt2.config.as_ref().expect("cfg").vocab_size, Some(50257));
}

// ---------------------------------------------------------------- template precedence

#[test]
fn chat_template_jinja_wins_over_tokenizer_config() {
    let tmp = tempfile::tempdir().expect("tmp");
    let d = tmp.path();
    write(&d.join("chat_template.jinja"), "JINJA {{ messages }}");
    write(
        &d.join("tokenizer_config.json"),
        &json!({"chat_template": "CONFIG", "eos_token": "</s>"}).to_string(),
    );
    let m = open(d);
    assert_eq!(m.templates.templates.len(), 1);
    assert_eq!(m.templates.templates[0].origin, "chat_template.jinja");
    assert_eq!(m.templates.templates[0].text, "JINJA {{ messages }}");
    assert_eq!(m.templates.shadowed.len(), 1);
    assert_eq!(
        m.templates.shadowed[0].origin,
        "tokenizer_config.json#chat_template"
    );
    assert_eq!(m.templates.shadowed[0].text, "CONFIG");
}

#[test]
fn list_form_chat_template_default_and_tool_use() {
    let tmp = tempfile::tempdir().expect("tmp");
    let d = tmp.path();
    write(
        &d.join("tokenizer_config.json"),
        &json!({"chat_template": [
            {"name": "tool_use", "template": "TOOLS"},
            {"name": "default", "template": "PLAIN"},
            {"name": "rag", "template": "RAG"}
        ]})
        .to_string(),
    );
    let m = open(d);
    let names: Vec<&str> = m
        .templates
        .templates
        .iter()
        .map(|t| t.name.as_str())
        .collect();
    assert_eq!(names, ["default", "tool_use", "rag"], "default first");
    assert_eq!(
        m.templates.templates[1].origin,
        "tokenizer_config.json#chat_template[tool_use]"
    );
    assert_eq!(
        m.templates.select(true).map(|t| t.text.as_str()),
        Some("TOOLS")
    );
    assert_eq!(
        m.templates.select(false).map(|t| t.text.as_str()),
        Some("PLAIN")
    );
    assert!(m.templates.shadowed.is_empty());
}

#[test]
fn template_files_replace_every_config_template() {
    let tmp = tempfile::tempdir().expect("tmp");
    let d = tmp.path();
    write(&d.join("chat_template.jinja"), "FILE-DEFAULT");
    write(
        &d.join("additional_chat_templates/tool_use.jinja"),
        "FILE-TOOLS",
    );
    write(
        &d.join("tokenizer_config.json"),
        &json!({"chat_template": [
            {"name": "default", "template": "CFG-DEFAULT"},
            {"name": "rag", "template": "CFG-RAG"}
        ]})
        .to_string(),
    );
    let m = open(d);
    let got: Vec<(&str, &str)> = m
        .templates
        .templates
        .iter()
        .map(|t| (t.name.as_str(), t.origin.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("default", "chat_template.jinja"),
            ("tool_use", "additional_chat_templates/tool_use.jinja")
        ]
    );
    // transformers drops the config's dict entirely, "rag" included.
    let shadowed: Vec<&str> = m
        .templates
        .shadowed
        .iter()
        .map(|t| t.origin.as_str())
        .collect();
    assert_eq!(
        shadowed,
        [
            "tokenizer_config.json#chat_template[default]",
            "tokenizer_config.json#chat_template[rag]"
        ]
    );
    assert_eq!(
        m.templates.select(true).map(|t| t.text.as_str()),
        Some("FILE-TOOLS")
    );
}

#[test]
fn legacy_chat_template_json_is_processor_only() {
    let tmp = tempfile::tempdir().expect("tmp");
    let d = tmp.path();
    write(
        &d.join("chat_template.json"),
        &json!({"chat_template": "LEGACY"}).to_string(),
    );
    let m = open(d);
    assert_eq!(
        m.templates.templates.len(),
        1,
        "used when nothing else exists"
    );
    assert_eq!(m.templates.templates[0].origin, "chat_template.json");
    assert_eq!(m.templates.templates[0].text, "LEGACY");

    write(
        &d.join("tokenizer_config.json"),
        &json!({"chat_template": "TOKENIZER"}).to_string(),
    );
    let m = open(d);
    assert_eq!(m.templates.templates[0].text, "TOKENIZER");
    assert_eq!(m.templates.shadowed.len(), 1);
    assert_eq!(m.templates.shadowed[0].origin, "chat_template.json");
    assert!(m.notes.iter().any(|n| n.contains("chat_template.json")));
}

// ---------------------------------------------------------------- special tokens (transformers 5 semantics)

#[test]
fn special_tokens_map_is_legacy_only() {
    let tmp = tempfile::tempdir().expect("tmp");
    let d = tmp.path();
    // With added_tokens_decoder, transformers 5.23 ignores special_tokens_map.json entirely.
    write(
        &d.join("tokenizer_config.json"),
        &json!({"bos_token": "<s>", "added_tokens_decoder": {"1": {"content": "<s>", "special": true}}}).to_string(),
    );
    write(
        &d.join("special_tokens_map.json"),
        &json!({"bos_token": "<unk>", "eos_token": "</s>"}).to_string(),
    );
    let st = open(d).special_tokens();
    assert_eq!(st.bos_token.as_deref(), Some("<s>"));
    assert_eq!(st.eos_token, None);

    // Without it (a legacy save), the map overrides the config.
    write(
        &d.join("tokenizer_config.json"),
        &json!({"bos_token": "<s>", "eos_token": "</s>"}).to_string(),
    );
    write(
        &d.join("special_tokens_map.json"),
        &json!({"eos_token": {"content": "<unk>", "lstrip": false}, "pad_token": "<pad>"})
            .to_string(),
    );
    let st = open(d).special_tokens();
    assert_eq!(st.bos_token.as_deref(), Some("<s>"));
    assert_eq!(st.eos_token.as_deref(), Some("<unk>"));
    assert_eq!(st.pad_token.as_deref(), Some("<pad>"));
}

// ---------------------------------------------------------------- malformed files

#[test]
fn malformed_json_names_the_file() {
    let files = [
        "config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "generation_config.json",
        "model.safetensors.index.json",
        "chat_template.json",
    ];
    for name in files {
        let tmp = tempfile::tempdir().expect("tmp");
        let path = tmp.path().join(name);
        write(&path, "{\"a\": 1,,}");
        let e = open_err(tmp.path());
        assert_eq!(e.file.as_deref(), Some(path.as_path()), "{name}: {e}");
        assert!(e.problem.contains("malformed JSON"), "{name}: {e}");
        assert!(e.problem.contains("line 1"), "{name}: {e}");
        assert_eq!(e.exit_code(), 2);
        assert!(e.to_string().contains(name));
    }
}

#[test]
fn wrong_types_name_the_file_and_key() {
    let cases: [(&str, Value, &str); 9] = [
        ("config.json", json!({"vocab_size": "32000"}), "vocab_size"),
        (
            "config.json",
            json!({"eos_token_id": [2, "x"]}),
            "eos_token_id",
        ),
        (
            "config.json",
            json!({"text_config": {"hidden_size": 1.5}}),
            "text_config.hidden_size",
        ),
        (
            "generation_config.json",
            json!({"eos_token_id": "</s>"}),
            "eos_token_id",
        ),
        (
            "generation_config.json",
            json!({"temperature": "hot"}),
            "temperature",
        ),
        (
            "tokenizer_config.json",
            json!({"chat_template": 5}),
            "chat_template",
        ),
        (
            "tokenizer_config.json",
            json!({"bos_token": 1}),
            "bos_token",
        ),
        (
            "tokenizer_config.json",
            json!({"added_tokens_decoder": {"abc": {"content": "x"}}}),
            "added_tokens_decoder",
        ),
        (
            "special_tokens_map.json",
            json!({"additional_special_tokens": "x"}),
            "additional_special_tokens",
        ),
    ];
    for (name, doc, key) in cases {
        let tmp = tempfile::tempdir().expect("tmp");
        let path = tmp.path().join(name);
        write(&path, &doc.to_string());
        let e = open_err(tmp.path());
        assert_eq!(e.file.as_deref(), Some(path.as_path()), "{name}: {e}");
        assert!(e.problem.contains(key), "{name}: {e}");
        assert!(e.hint.is_some(), "{name}: {e}");
    }
    // A top level that is not an object.
    let tmp = tempfile::tempdir().expect("tmp");
    write(&tmp.path().join("config.json"), "[1, 2]");
    let e = open_err(tmp.path());
    assert!(e.problem.contains("object"), "{e}");
    // Unknown fields and explicit nulls are fine; a negative id reads as absent.
    write(
        &tmp.path().join("config.json"),
        &json!({"vocab_size": 10, "whatever": {"x": [1]}, "pad_token_id": -1, "eos_token_id": null}).to_string(),
    );
    let m = open(tmp.path());
    let cfg = m.config.as_ref().expect("config");
    assert_eq!(cfg.vocab_size, Some(10));
    assert_eq!(cfg.pad_token_id, None);
    assert!(cfg.eos_token_ids.is_empty());
}

#[test]
fn config_reads_text_config_and_eos_lists() {
    let tmp = tempfile::tempdir().expect("tmp");
    write(
        &tmp.path().join("config.json"),
        &json!({"model_type": "llava", "eos_token_id": [128001, 128009],
                "text_config": {"vocab_size": 128256, "hidden_size": 4096, "torch_dtype": "bfloat16"}})
        .to_string(),
    );
    write(
        &tmp.path().join("generation_config.json"),
        &json!({"eos_token_id": [128001, 128008, 128009], "do_sample": true, "temperature": 0.6, "top_p": 0.9, "top_k": 50}).to_string(),
    );
    let m = open(tmp.path());
    let cfg = m.config.as_ref().expect("config");
    assert_eq!(cfg.vocab_size, Some(128256));
    assert_eq!(cfg.hidden_size, Some(4096));
    assert_eq!(cfg.dtype.as_deref(), Some("bfloat16"));
    assert_eq!(cfg.eos_token_ids, vec![128001, 128009]);
    let gen = m.generation_config.as_ref().expect("gen");
    assert_eq!(gen.eos_token_ids, vec![128001, 128008, 128009]);
    assert_eq!(gen.do_sample, Some(true));
    assert_eq!(gen.temperature, Some(0.6));
    assert_eq!(gen.top_k, Some(50));
}

#[test]
fn missing_and_wrong_paths() {
    let tmp = tempfile::tempdir().expect("tmp");
    let e = open_err(tmp.path());
    assert!(e.problem.contains("no model files"), "{e}");
    let e = open_err(&tmp.path().join("nope"));
    assert_eq!(e.file.as_deref(), Some(tmp.path().join("nope").as_path()));
    write(&tmp.path().join("notes.txt"), "hi");
    let e = open_err(&tmp.path().join("notes.txt"));
    assert!(e.problem.contains("not a .gguf"), "{e}");
    // A bad tokenizer.json that is valid JSON.
    write(&tmp.path().join("tokenizer.json"), "{\"model\": 3}");
    let e = open_err(tmp.path());
    assert_eq!(
        e.file.as_deref(),
        Some(tmp.path().join("tokenizer.json").as_path())
    );
}

// ---------------------------------------------------------------- safetensors

fn f32_bytes(n: usize) -> Vec<u8> {
    (0..n).flat_map(|i| (i as f32).to_le_bytes()).collect()
}

fn safetensors_file(tensors: &[(&str, safetensors::Dtype, Vec<usize>, Vec<u8>)]) -> Vec<u8> {
    let views: Vec<(String, safetensors::tensor::TensorView)> = tensors
        .iter()
        .map(|(n, dt, shape, data)| {
            (
                n.to_string(),
                safetensors::tensor::TensorView::new(*dt, shape.clone(), data).expect("view"),
            )
        })
        .collect();
    safetensors::tensor::serialize(views, None).expect("serialize")
}

#[test]
fn sharded_safetensors_with_index_and_missing_shard() {
    let tmp = tempfile::tempdir().expect("tmp");
    let d = tmp.path();
    let shard1 = safetensors_file(&[
        (
            "model.embed.weight",
            safetensors::Dtype::F32,
            vec![4, 3],
            f32_bytes(12),
        ),
        (
            "model.norm.weight",
            safetensors::Dtype::BF16,
            vec![3],
            vec![0u8; 6],
        ),
    ]);
    let shard2 = safetensors_file(&[(
        "lm_head.weight",
        safetensors::Dtype::F32,
        vec![3, 4],
        f32_bytes(12),
    )]);
    std::fs::write(d.join("model-00001-of-00002.safetensors"), &shard1).expect("write");
    std::fs::write(d.join("model-00002-of-00002.safetensors"), &shard2).expect("write");
    write(
        &d.join("model.safetensors.index.json"),
        &json!({"metadata": {"total_size": 102}, "weight_map": {
            "model.embed.weight": "model-00001-of-00002.safetensors",
            "model.norm.weight": "model-00001-of-00002.safetensors",
            "lm_head.weight": "model-00002-of-00002.safetensors"}})
        .to_string(),
    );
    let m = open(d);
    assert_eq!(m.weights.len(), 2);
    let w = &m.weights[0];
    assert_eq!(w.name, "model-00001-of-00002.safetensors");
    assert_eq!(w.format, WeightFormat::Safetensors);
    assert_eq!(w.tensors, 2);
    assert_eq!(w.parameters, 15);
    assert_eq!(w.dtypes.get("F32"), Some(&1));
    assert_eq!(w.dtypes.get("BF16"), Some(&1));
    assert_eq!(w.size, shard1.len() as u64);
    let idx = m.shard_index.as_ref().expect("index");
    assert_eq!(idx.weight_map.len(), 3);
    assert!(idx.missing_shards.is_empty());

    // Hashes: per file, and the total over "name\tsize\tsha256\n" lines sorted by name.
    let id = m.hash_weights().expect("hash");
    assert_eq!(id.files.len(), 2);
    assert_eq!(id.files[0].sha256, sha256_bytes(&shard1));
    assert_eq!(id.files[1].sha256, sha256_bytes(&shard2));
    let lines = format!(
        "model-00001-of-00002.safetensors\t{}\t{}\nmodel-00002-of-00002.safetensors\t{}\t{}\n",
        shard1.len(),
        sha256_bytes(&shard1),
        shard2.len(),
        sha256_bytes(&shard2)
    );
    assert_eq!(id.total, sha256_bytes(lines.as_bytes()));
    assert_eq!(m.hash_weights().expect("again"), id, "stable");

    std::fs::remove_file(d.join("model-00002-of-00002.safetensors")).expect("rm");
    let m = open(d);
    assert_eq!(m.weights.len(), 1);
    assert_eq!(
        m.shard_index.as_ref().expect("index").missing_shards,
        vec!["model-00002-of-00002.safetensors"]
    );
    assert_ne!(m.hash_weights().expect("hash").total, id.total);
}

#[test]
fn broken_safetensors_headers_are_clean_errors() {
    let tmp = tempfile::tempdir().expect("tmp");
    let good = safetensors_file(&[("w", safetensors::Dtype::F32, vec![2, 2], f32_bytes(4))]);
    let header_len = u64::from_le_bytes(good[..8].try_into().expect("8 bytes")) as usize;
    let mut cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("short", vec![1, 2, 3], "too short"),
        ("absurd", u64::MAX.to_le_bytes().to_vec(), "limit"),
        (
            "truncated-header",
            good[..8 + header_len / 2].to_vec(),
            "only",
        ),
        (
            "truncated-data",
            good[..good.len() - 4].to_vec(),
            "truncated",
        ),
    ];
    let mut not_json = 4u64.to_le_bytes().to_vec();
    not_json.extend_from_slice(b"nope");
    cases.push(("not-json", not_json, "not valid JSON"));
    let mut bad_shape = Vec::new();
    let header = br#"{"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}"#;
    bad_shape.extend_from_slice(&(header.len() as u64).to_le_bytes());
    bad_shape.extend_from_slice(header);
    bad_shape.extend_from_slice(&[0u8; 8]);
    cases.push(("bad-shape", bad_shape, "needs 12 bytes"));
    for (label, bytes, needle) in cases {
        let path = tmp.path().join(format!("{label}.safetensors"));
        std::fs::write(&path, bytes).expect("write");
        let e = match read_safetensors_header(&path, label) {
            Ok(_) => panic!("{label}: expected an error"),
            Err(e) => e,
        };
        assert_eq!(e.file.as_deref(), Some(path.as_path()), "{label}");
        assert!(e.problem.contains(needle), "{label}: {e}");
        assert!(e.hint.is_some());
        std::fs::remove_file(&path).expect("rm");
    }
    // And through ModelDir::open.
    std::fs::write(tmp.path().join("model.safetensors"), &good[..20]).expect("write");
    let e = open_err(tmp.path());
    assert!(
        e.file
            .as_deref()
            .is_some_and(|f| f.ends_with("model.safetensors")),
        "{e}"
    );
}

// ---------------------------------------------------------------- GGUF

fn vocab_kvs() -> Vec<(&'static str, V)> {
    let tokens = ["<s>", "</s>", "a", "b", "ab", "Ġ", "Ġab", "<|im_end|>"];
    vec![
        ("general.architecture", V::s("llama")),
        ("general.alignment", V::U32(32)),
        ("llama.context_length", V::U32(2048)),
        ("llama.rope.freq_base", V::F32(10000.0)),
        ("llama.attention.layer_norm_rms_epsilon", V::F64(1e-5)),
        ("some.flag", V::Bool(true)),
        ("some.i8", V::I8(-3)),
        ("some.u16", V::U16(7)),
        ("some.i16", V::I16(-7)),
        ("some.u64", V::U64(1 << 40)),
        ("some.i64", V::I64(-(1 << 40))),
        ("some.u8", V::U8(255)),
        (
            "some.nested",
            V::Arr(9, vec![V::i32s(&[1, 2]), V::strs(&["x"])]),
        ),
        ("tokenizer.ggml.model", V::s("gpt2")),
        ("tokenizer.ggml.pre", V::s("gpt-2")),
        ("tokenizer.ggml.tokens", V::strs(&tokens)),
        (
            "tokenizer.ggml.token_type",
            V::i32s(&[3, 3, 1, 1, 1, 1, 1, 3]),
        ),
        ("tokenizer.ggml.merges", V::strs(&["a b", "Ġ ab"])),
        ("tokenizer.ggml.bos_token_id", V::U32(0)),
        ("tokenizer.ggml.eos_token_id", V::U32(7)),
        (
            "tokenizer.chat_template",
            V::s("{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}"),
        ),
        ("tokenizer.chat_template.tool_use", V::s("TOOLS")),
    ]
}

#[test]
fn gguf_file_metadata_tensors_tokenizer_templates() {
    let tmp = tempfile::tempdir().expect("tmp");
    let path = tmp.path().join("tiny.gguf");
    let tensors = [
        writer::T {
            name: "token_embd.weight",
            dims: vec![4, 8],
            ggml_type: 1,
            nbytes: 64,
        },
        writer::T {
            name: "blk.0.attn_q.weight",
            dims: vec![32, 2],
            ggml_type: 8,
            nbytes: 68,
        },
        writer::T {
            name: "future.weight",
            dims: vec![3],
            ggml_type: 99,
            nbytes: 3,
        },
    ];
    let bytes = gguf(&vocab_kvs(), &tensors);
    std::fs::write(&path, &bytes).expect("write");

    let info = read_gguf(&path).expect("read");
    assert_eq!(info.version, 3);
    assert_eq!(info.tensor_count, 3);
    assert_eq!(info.metadata["llama.context_length"], json!(2048));
    assert_eq!(info.metadata["llama.rope.freq_base"], json!(10000.0));
    assert_eq!(info.metadata["some.flag"], json!(true));
    assert_eq!(info.metadata["some.i8"], json!(-3));
    assert_eq!(info.metadata["some.i64"], json!(-(1i64 << 40)));
    assert_eq!(info.metadata["some.nested"], json!([[1, 2], ["x"]]));
    let keys: Vec<&String> = info.metadata.keys().collect();
    assert_eq!(keys[0], "general.architecture", "file order");
    assert_eq!(info.tensors[1].type_name, "Q8_0");
    assert_eq!(info.tensors[2].type_name, "type_99");
    assert_eq!(info.tensors[0].dims, vec![4, 8]);

    let m = open(&path);
    assert_eq!(m.root, path);
    let w = &m.weights[0];
    assert_eq!(w.format, WeightFormat::Gguf);
    assert_eq!(w.name, "tiny.gguf");
    assert_eq!(w.tensors, 3);
    assert_eq!(w.parameters, 32 + 64 + 3);
    assert_eq!(w.dtypes.get("F16"), Some(&1));
    assert_eq!(w.dtypes.get("type_99"), Some(&1));
    assert_eq!(w.size, bytes.len() as u64);

    let names: Vec<(&str, &str)> = m
        .templates
        .templates
        .iter()
        .map(|t| (t.name.as_str(), t.origin.as_str()))
        .collect();
    assert_eq!(
        names,
        [
            ("default", "tiny.gguf#tokenizer.chat_template"),
            ("tool_use", "tiny.gguf#tokenizer.chat_template.tool_use")
        ]
    );
    let st = m.special_tokens();
    assert_eq!(st.bos_token.as_deref(), Some("<s>"));
    assert_eq!(st.eos_token.as_deref(), Some("<|im_end|>"));
    assert_eq!(st.unk_token, None);

    let tok = m.tokenizer.as_ref().expect("tokenizer from GGUF");
    assert_eq!(tok.path, path);
    assert_eq!(tok.model_type, "BPE");
    let canonical = tok.tokenizer.to_string(false).expect("json");
    assert_eq!(tok.sha256, sha256_bytes(canonical.as_bytes()));
    let ids = tok
        .tokenizer
        .encode("ab ab<|im_end|>", false)
        .expect("encode");
    assert_eq!(ids.get_ids(), &[4, 6, 7]);
    // add_special_tokens=true adds nothing: gpt-2 has no add_bos by default.
    assert_eq!(
        tok.tokenizer.encode("ab", true).expect("encode").get_ids(),
        &[4]
    );

    // A GGUF's identity is its tensor data (the header is hashed per boundary, apart).
    let id = m.hash_weights().expect("hash");
    let data_offset = m.gguf.as_ref().expect("gguf").data_offset as usize;
    assert!(data_offset > 0 && data_offset < bytes.len());
    assert_eq!(id.files[0].sha256, sha256_bytes(&bytes[data_offset..]));
    assert_eq!(id.files[0].size, (bytes.len() - data_offset) as u64);
    assert_eq!(id.files[0].scope.as_deref(), Some("tensor-data"));
    let groups = id.files[0].metadata.as_ref().expect("metadata hashes");
    assert_eq!(
        groups.keys().map(String::as_str).collect::<Vec<_>>(),
        ["general", "model", "special-ids", "template", "tokenizer"]
    );
    assert_eq!(id.files[0].name, "tiny.gguf");
    // Locks made before the split compare whole files.
    let whole = m.hash_weights_whole_files().expect("hash");
    assert_eq!(whole.files[0].sha256, sha256_bytes(&bytes));
    assert_eq!(whole.files[0].scope, None);

    // The same file inside a directory is its GGUF; HF files there take precedence.
    let dir = tmp.path().join("dir");
    std::fs::create_dir(&dir).expect("mkdir");
    std::fs::write(dir.join("model.gguf"), &bytes).expect("write");
    write(
        &dir.join("tokenizer_config.json"),
        &json!({"chat_template": "HF", "eos_token": "</s>"}).to_string(),
    );
    let m = open(&dir);
    assert!(m.gguf.is_some());
    assert!(
        m.tokenizer.is_some(),
        "no tokenizer.json: built from the GGUF"
    );
    assert_eq!(m.templates.templates[0].text, "HF");
    assert_eq!(m.templates.shadowed.len(), 2);
    assert_eq!(m.special_tokens().eos_token.as_deref(), Some("</s>"));
    assert_eq!(
        m.special_tokens().bos_token,
        None,
        "GGUF ids only when no HF tokenizer files"
    );
}

#[test]
fn gguf_without_supported_tokenizer_records_why() {
    let tmp = tempfile::tempdir().expect("tmp");
    let path = tmp.path().join("bert.gguf");
    std::fs::write(
        &path,
        gguf(
            &[
                ("general.architecture", V::s("bert")),
                ("tokenizer.ggml.model", V::s("bert")),
                ("tokenizer.ggml.tokens", V::strs(&["[PAD]", "hello"])),
            ],
            &[],
        ),
    )
    .expect("write");
    let m = open(&path);
    assert!(m.tokenizer.is_none());
    assert!(
        m.notes
            .iter()
            .any(|n| n.contains("bert") && n.contains("not supported")),
        "{:?}",
        m.notes
    );
}

#[test]
fn sentencepiece_gguf_tokenizer() {
    // A tiny SentencePiece vocabulary: merges come from the scores.
    let tokens = [
        "<unk>", "<s>", "</s>", "<0x0A>", "▁", "h", "i", "▁h", "hi", "▁hi",
    ];
    let scores = [0.0, 0.0, 0.0, 0.0, -1.0, -2.0, -3.0, -4.0, -5.0, -1.5];
    let tmp = tempfile::tempdir().expect("tmp");
    let path = tmp.path().join("spm.gguf");
    std::fs::write(
        &path,
        gguf(
            &[
                ("general.architecture", V::s("llama")),
                ("tokenizer.ggml.model", V::s("llama")),
                ("tokenizer.ggml.tokens", V::strs(&tokens)),
                ("tokenizer.ggml.scores", V::f32s(&scores)),
                (
                    "tokenizer.ggml.token_type",
                    V::i32s(&[2, 3, 3, 6, 1, 1, 1, 1, 1, 1]),
                ),
                ("tokenizer.ggml.bos_token_id", V::U32(1)),
                ("tokenizer.ggml.eos_token_id", V::U32(2)),
                ("tokenizer.ggml.unknown_token_id", V::U32(0)),
            ],
            &[],
        ),
    )
    .expect("write");
    let m = open(&path);
    let tok = &m.tokenizer.as_ref().expect("tokenizer").tokenizer;
    assert_eq!(tok.encode("hi", false).expect("enc").get_ids(), &[9]);
    // Space prefix on every fragment (llama.cpp's add_space_prefix), leading spaces kept.
    assert_eq!(tok.encode(" hi", false).expect("enc").get_ids(), &[4, 9]);
    assert_eq!(
        tok.encode("hi</s>hi", false).expect("enc").get_ids(),
        &[9, 2, 9]
    );
    // Byte fallback for the newline; add_bos by default for SentencePiece.
    assert_eq!(tok.encode("hi\n", true).expect("enc").get_ids(), &[1, 9, 3]);
    assert_eq!(tok.decode(&[1, 9, 3], true).expect("dec"), "hi\n");
}

/// Bytes of a valid GGUF with one metadata entry whose array count we can corrupt.
fn corrupt_cases() -> Vec<(&'static str, Vec<u8>, &'static str)> {
    let good = gguf(&vocab_kvs(), &[]);
    let mut cases = Vec::new();
    let mut bad_magic = good.clone();
    bad_magic[..4].copy_from_slice(b"GGML");
    cases.push(("bad-magic", bad_magic, "magic"));
    cases.push(("tiny", b"GG".to_vec(), "too short"));
    cases.push(("truncated", good[..good.len() / 2].to_vec(), "truncated"));
    let mut big_endian = good.clone();
    big_endian[4..8].copy_from_slice(&3u32.to_be_bytes());
    cases.push(("big-endian", big_endian, "big-endian"));
    let mut v1 = good.clone();
    v1[4..8].copy_from_slice(&1u32.to_le_bytes());
    cases.push(("v1", v1, "version 1"));
    let mut v9 = good.clone();
    v9[4..8].copy_from_slice(&9u32.to_le_bytes());
    cases.push(("v9", v9, "version 9"));
    let mut many_kv = good.clone();
    many_kv[16..24].copy_from_slice(&u64::MAX.to_le_bytes());
    cases.push(("absurd-kv-count", many_kv, "metadata entries"));
    let mut many_tensors = good.clone();
    many_tensors[8..16].copy_from_slice(&(1u64 << 60).to_le_bytes());
    cases.push(("absurd-tensor-count", many_tensors, "tensors"));

    // Hand-built headers: one key with a hostile value.
    let one = |ty: u32, value: &[u8]| {
        let mut out = b"GGUF".to_vec();
        out.extend_from_slice(&3u32.to_le_bytes());
        out.extend_from_slice(&0u64.to_le_bytes());
        out.extend_from_slice(&1u64.to_le_bytes());
        writer::put_str(&mut out, "k");
        out.extend_from_slice(&ty.to_le_bytes());
        out.extend_from_slice(value);
        out
    };
    let mut arr = 8u32.to_le_bytes().to_vec();
    arr.extend_from_slice(&(u64::MAX / 2).to_le_bytes());
    cases.push(("absurd-array", one(9, &arr), "more than"));
    let mut arr = 8u32.to_le_bytes().to_vec();
    arr.extend_from_slice(&1_000_000u64.to_le_bytes());
    cases.push(("array-past-end", one(9, &arr), "cannot fit"));
    cases.push((
        "absurd-string",
        one(8, &(1u64 << 50).to_le_bytes()),
        "claims a length",
    ));
    cases.push(("unknown-type", one(42, &[0; 8]), "not a GGUF value type"));
    let mut nested = Vec::new();
    for _ in 0..20 {
        nested.extend_from_slice(&9u32.to_le_bytes());
        nested.extend_from_slice(&1u64.to_le_bytes());
    }
    nested.extend_from_slice(&4u32.to_le_bytes());
    nested.extend_from_slice(&0u64.to_le_bytes());
    cases.push(("deep-nesting", one(9, &nested), "nested"));
    cases.push(("bad-bool", one(7, &[5]), "boolean"));

    // A tensor whose data runs past the end of the file.
    let mut with_tensor = gguf(
        &[("general.architecture", V::s("llama"))],
        &[writer::T {
            name: "w",
            dims: vec![1024],
            ggml_type: 0,
            nbytes: 4096,
        }],
    );
    with_tensor.truncate(with_tensor.len() - 100);
    cases.push(("truncated-data", with_tensor, "truncated GGUF"));
    let five_dims = gguf(
        &[],
        &[writer::T {
            name: "w",
            dims: vec![1, 1, 1, 1, 1],
            ggml_type: 0,
            nbytes: 4,
        }],
    );
    cases.push(("five-dims", five_dims, "dimensions"));
    cases
}

#[test]
fn corrupted_ggufs_are_clean_errors() {
    let tmp = tempfile::tempdir().expect("tmp");
    for (label, bytes, needle) in corrupt_cases() {
        let path = tmp.path().join(format!("{label}.gguf"));
        std::fs::write(&path, &bytes).expect("write");
        let e = match read_gguf(&path) {
            Ok(_) => panic!("{label}: expected an error"),
            Err(e) => e,
        };
        assert_eq!(e.file.as_deref(), Some(path.as_path()), "{label}");
        assert!(e.problem.contains(needle), "{label}: {e}");
        assert!(e.hint.is_some(), "{label}: {e}");
        let e = open_err(&path);
        assert!(e.problem.contains(needle), "{label} via open: {e}");
        std::fs::remove_file(&path).expect("rm");
    }
}

/// Every prefix of a valid GGUF (and every single-byte corruption of its header) is either
/// read or rejected with an error, never a panic or a huge allocation.
#[test]
fn gguf_prefixes_and_byte_flips_never_panic() {
    let tmp = tempfile::tempdir().expect("tmp");
    let good = gguf(
        &vocab_kvs(),
        &[writer::T {
            name: "w",
            dims: vec![8],
            ggml_type: 0,
            nbytes: 32,
        }],
    );
    let path = tmp.path().join("x.gguf");
    for cut in (0..good.len()).step_by(7) {
        std::fs::write(&path, &good[..cut]).expect("write");
        assert!(read_gguf(&path).is_err(), "prefix {cut} read as complete");
    }
    let header_end = 600.min(good.len());
    for i in 0..header_end {
        for flip in [0x80u8, 0xff] {
            let mut b = good.clone();
            b[i] ^= flip;
            std::fs::write(&path, &b).expect("write");
            let _ = read_gguf(&path);
        }
    }
}

// ---------------------------------------------------------------- hashing

#[test]
fn sha256_file_matches_one_shot_digest_on_multi_buffer_files() {
    let tmp = tempfile::tempdir().expect("tmp");
    // Sizes around the pipelining threshold and the 2 MiB read size, and not a multiple of it.
    for size in [0usize, 1, 4095, (8 << 20) - 1, (8 << 20) + 12345, 21 << 20] {
        let data: Vec<u8> = (0..size)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        let path = tmp.path().join(format!("f{size}"));
        std::fs::write(&path, &data).expect("write");
        assert_eq!(
            sha256_file(&path).expect("hash"),
            sha256_bytes(&data),
            "size {size}"
        );
    }
    let e = sha256_file(&tmp.path().join("missing")).expect_err("missing file");
    assert!(e.to_string().contains("missing"));
}

#[test]
fn sha256_file_agrees_with_sha256sum_when_available() {
    let tmp = tempfile::tempdir().expect("tmp");
    let path = tmp.path().join("data.bin");
    let data: Vec<u8> = (0..(9 << 20)).map(|i: usize| (i % 251) as u8).collect();
    std::fs::write(&path, &data).expect("write");
    let Ok(out) = std::process::Command::new("sha256sum").arg(&path).output() else {
        return; // no sha256sum on this machine; the one-shot comparison above still ran
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let expected = text.split_whitespace().next().unwrap_or_default();
    assert_eq!(sha256_file(&path).expect("hash"), expected);
}

#[test]
fn weights_identity_serializes() {
    let tmp = tempfile::tempdir().expect("tmp");
    std::fs::write(
        tmp.path().join("model.safetensors"),
        safetensors_file(&[("w", safetensors::Dtype::F16, vec![2], vec![0u8; 4])]),
    )
    .expect("write");
    let id = open(tmp.path()).hash_weights().expect("hash");
    let text = serde_json::to_string(&id).expect("json");
    let back: chatgate::artifacts::WeightsIdentity = serde_json::from_str(&text).expect("parse");
    assert_eq!(back, id);
}
