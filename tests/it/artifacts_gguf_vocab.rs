//! Every vocab-only GGUF of llama.cpp's test set: the header and vocabulary must read, and for
//! every file with `.inp`/`.out` test vectors whose tokenizer chatgate builds, our encoding must
//! equal llama.cpp's expected ids (tests/test-tokenizer-0.cpp: add_special=false,
//! parse_special=false; inputs separated by "\n__ggml_vocab_test__\n"; one `.out` line of
//! space-separated ids per input).
use std::path::{Path, PathBuf};

use chatgate::artifacts::{build_gguf_tokenizer, read_gguf, ModelDir};

use crate::common::gguf_writer as writer;
use writer::{gguf, V};

/// Vocabularies chatgate claims to tokenize exactly as llama.cpp does. A mismatch in any of these
/// fails the test; each must be present and checked.
const CLAIMED: &[&str] = &[
    "ggml-vocab-deepseek-coder.gguf",
    "ggml-vocab-deepseek-llm.gguf",
    "ggml-vocab-falcon.gguf",
    "ggml-vocab-gpt-2.gguf",
    "ggml-vocab-llama-spm.gguf",
    "ggml-vocab-mpt.gguf",
    "ggml-vocab-phi-3.gguf",
    "ggml-vocab-refact.gguf",
    "ggml-vocab-starcoder.gguf",
];

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/gguf-vocab")
}

/// test-tokenizer-0.cpp's `read_tests`.
fn read_tests(inp: &Path, out: &Path) -> Vec<(String, Vec<u32>)> {
    let raw = std::fs::read_to_string(inp).expect("read .inp");
    let sep = "\n__ggml_vocab_test__\n";
    let mut inputs = Vec::new();
    let mut pos = 0;
    while pos < raw.len() {
        match raw[pos..].find(sep) {
            Some(i) => {
                inputs.push(raw[pos..pos + i].to_string());
                pos += i + sep.len();
            }
            None => {
                inputs.push(raw[pos..].to_string());
                break;
            }
        }
    }
    let outputs: Vec<Vec<u32>> = std::fs::read_to_string(out)
        .expect("read .out")
        .lines()
        .map(|l| {
            l.trim()
                .split(' ')
                .filter(|s| !s.is_empty())
                .map(|s| s.parse().expect("id"))
                .collect()
        })
        .collect();
    assert_eq!(
        inputs.len(),
        outputs.len(),
        "{}: input and output counts differ",
        inp.display()
    );
    inputs.into_iter().zip(outputs).collect()
}

#[test]
fn every_gguf_vocab_reads_and_claimed_vocabs_tokenize_exactly() {
    let dir = corpus();
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .expect("corpus dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let ggufs: Vec<&String> = names.iter().filter(|n| n.ends_with(".gguf")).collect();
    assert!(
        ggufs.len() >= 10,
        "expected the llama.cpp vocab GGUFs in {}",
        dir.display()
    );

    let mut summary = Vec::new();
    let mut failures = Vec::new();
    let mut checked = Vec::new();
    for name in &ggufs {
        let path = dir.join(name);
        let info = read_gguf(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
        let tokens = info
            .metadata
            .get("tokenizer.ggml.tokens")
            .and_then(|v| v.as_array())
            .unwrap_or_else(|| panic!("{name}: no tokenizer.ggml.tokens"));
        assert!(!tokens.is_empty(), "{name}: empty vocabulary");
        assert!(
            info.get_str("tokenizer.ggml.model").is_some(),
            "{name}: no tokenizer.ggml.model"
        );
        if name.as_str() == "ggml-vocab-llama-spm.gguf" {
            assert_eq!(info.missing_llama_cpp_keys(), Vec::<String>::new());
        }
        // Opening the file as a model works too, and describes it as one GGUF weight file.
        let model = ModelDir::open(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(model.weights.len(), 1);
        assert_eq!(model.weights[0].tensors as u64, info.tensor_count);

        let inp = dir.join(format!("{name}.inp"));
        let out = dir.join(format!("{name}.out"));
        let built = build_gguf_tokenizer(&info);
        let line = match (&built, inp.is_file() && out.is_file()) {
            (Err(why), _) => {
                assert!(
                    !CLAIMED.contains(&name.as_str()),
                    "{name}: claimed vocabulary but no tokenizer was built: {why}"
                );
                assert!(model.tokenizer.is_none());
                assert!(
                    model.notes.iter().any(|n| n.contains("no tokenizer")),
                    "{name}: reason not recorded"
                );
                format!("{name}: {} tokens; no tokenizer ({why})", tokens.len())
            }
            (Ok(t), false) => format!(
                "{name}: {} tokens; tokenizer built ({}, {}), no test vectors",
                tokens.len(),
                t.file.model_type,
                t.file.pre_tokenizer
            ),
            (Ok(t), true) => {
                let tests = read_tests(&inp, &out);
                let mut bad = 0;
                for (text, expected) in &tests {
                    let enc = t
                        .file
                        .tokenizer
                        .encode(text.as_str(), false)
                        .expect("encode");
                    if enc.get_ids() != expected.as_slice() {
                        bad += 1;
                        if bad <= 3 {
                            eprintln!(
                                "{name}: mismatch for {text:?}\n  expected {expected:?}\n  got      {:?}",
                                enc.get_ids()
                            );
                        }
                    }
                }
                checked.push(name.to_string());
                if bad > 0 && CLAIMED.contains(&name.as_str()) {
                    failures.push(format!("{name}: {bad}/{} mismatches", tests.len()));
                }
                format!(
                    "{name}: {} tokens; tokenized-checked {}/{} exact ({}, {})",
                    tokens.len(),
                    tests.len() - bad,
                    tests.len(),
                    t.file.model_type,
                    t.file.pre_tokenizer
                )
            }
        };
        summary.push(line);
    }
    for name in &names {
        if let Some(base) = name.strip_suffix(".inp") {
            if !dir.join(base).is_file() {
                summary.push(format!("{base}: test vectors only, no .gguf in the corpus"));
            }
        }
    }
    println!("GGUF vocab summary:\n  {}", summary.join("\n  "));
    println!("tokenized-checked: {}", checked.join(", "));
    for claimed in CLAIMED {
        assert!(
            checked.iter().any(|c| c == claimed),
            "{claimed}: claimed but not checked"
        );
    }
    assert!(
        failures.is_empty(),
        "claimed vocabularies mismatch llama.cpp:\n{}",
        failures.join("\n")
    );
}

/// A GGUF written the way llama.cpp's converter writes a byte-level BPE vocabulary (tokens in id
/// order, added tokens raw, special ones CONTROL and the rest USER_DEFINED, merges "a b"), from
/// a corpus tokenizer.json.
fn gguf_from_tokenizer_json(tokenizer_json: &Path, pre: &str) -> Vec<u8> {
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(tokenizer_json).expect("read"))
            .expect("json");
    let vocab = doc["model"]["vocab"].as_object().expect("vocab");
    let added = doc["added_tokens"].as_array().expect("added");
    let n = vocab.len().max(
        added
            .iter()
            .map(|a| a["id"].as_u64().unwrap() as usize + 1)
            .max()
            .unwrap_or(0),
    );
    let mut tokens = vec![String::new(); n];
    let mut types = vec![1i32; n];
    for (t, id) in vocab {
        tokens[id.as_u64().unwrap() as usize] = t.clone();
    }
    for a in added {
        let id = a["id"].as_u64().unwrap() as usize;
        tokens[id] = a["content"].as_str().unwrap().to_string();
        types[id] = if a["special"].as_bool().unwrap() {
            3
        } else {
            4
        };
    }
    let merges: Vec<String> = doc["model"]["merges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| match m {
            serde_json::Value::String(s) => s.clone(),
            other => format!(
                "{} {}",
                other[0].as_str().unwrap(),
                other[1].as_str().unwrap()
            ),
        })
        .collect();
    gguf(
        &[
            ("general.architecture", V::s("qwen2")),
            ("tokenizer.ggml.model", V::s("gpt2")),
            ("tokenizer.ggml.pre", V::s(pre)),
            ("tokenizer.ggml.tokens", V::strs(&tokens)),
            ("tokenizer.ggml.token_type", V::i32s(&types)),
            ("tokenizer.ggml.merges", V::strs(&merges)),
        ],
        &[],
    )
}

/// Vocabularies whose llama.cpp test vectors exist but whose GGUF is not in the corpus: rebuild
/// the GGUF from the same tokenizer shipped in corpus/models and check it against the vectors.
/// Qwen2.5 shares Qwen1.5's byte-level vocabulary and merges (llama.cpp's qwen2 vectors), and
/// DeepSeek-R1-Distill-Qwen uses the same pre-tokenizer and vectors.
#[test]
fn synthetic_ggufs_from_corpus_tokenizers_match_llama_cpp_vectors() {
    let models = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/models");
    let cases = [
        ("Qwen2.5-0.5B-Instruct", "qwen2", "ggml-vocab-qwen2.gguf"),
        (
            "Qwen2.5-0.5B-Instruct",
            "deepseek-r1-qwen",
            "ggml-vocab-deepseek-r1-qwen.gguf",
        ),
        ("gpt2-xl", "gpt-2", "ggml-vocab-gpt-2.gguf"),
    ];
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut summary = Vec::new();
    for (model, pre, vectors) in cases {
        let path = tmp.path().join(format!("{model}-{pre}.gguf"));
        std::fs::write(
            &path,
            gguf_from_tokenizer_json(&models.join(model).join("tokenizer.json"), pre),
        )
        .expect("write");
        let info = read_gguf(&path).expect("read synthetic gguf");
        let built = build_gguf_tokenizer(&info).expect("build");
        assert!(built.notes.is_empty(), "{model}: {:?}", built.notes);
        let tests = read_tests(
            &corpus().join(format!("{vectors}.inp")),
            &corpus().join(format!("{vectors}.out")),
        );
        let mut bad = 0;
        for (text, expected) in &tests {
            let ids = built
                .file
                .tokenizer
                .encode(text.as_str(), false)
                .expect("encode")
                .get_ids()
                .to_vec();
            if &ids != expected {
                bad += 1;
                eprintln!(
                    "{model} as {pre}: {text:?}\n  expected {expected:?}\n  got      {ids:?}"
                );
            }
        }
        summary.push(format!(
            "{model} as tokenizer.ggml.pre={pre}: {}/{} exact vs {vectors}.out",
            tests.len() - bad,
            tests.len()
        ));
        assert_eq!(bad, 0, "{model} as {pre}: {bad} mismatches");
        // Special tokens are matched whole, as llama.cpp does with parse_special.
        if model.starts_with("Qwen") {
            let ids = built
                .file
                .tokenizer
                .encode("<|im_start|>user\nhi<|im_end|>", false)
                .expect("encode");
            assert_eq!(ids.get_ids()[0], 151644);
            assert_eq!(*ids.get_ids().last().expect("ids"), 151645);
            assert_eq!(built.file.vocab_size, 151665);
        }
    }
    println!("synthetic GGUF summary:\n  {}", summary.join("\n  "));
}

/// Every `tokenizer.ggml.pre` name in chatgate's table builds a loadable tokenizer (its regexes
/// compile under the `tokenizers` crate's engine) without falling back to the default.
#[test]
fn every_known_pre_tokenizer_builds() {
    let names = [
        "default",
        "llama3",
        "llama-v3",
        "llama-bpe",
        "falcon3",
        "falcon-h1",
        "pixtral",
        "midm-2.0",
        "lfm2",
        "jina-v5-nano",
        "dbrx",
        "smaug-bpe",
        "glm4",
        "chatglm-bpe",
        "deepseek-llm",
        "deepseek-coder",
        "deepseek-v3",
        "hunyuan-dense",
        "falcon",
        "starcoder",
        "refact",
        "command-r",
        "smollm",
        "codeshell",
        "exaone",
        "minerva-7b",
        "gpt-2",
        "phi-2",
        "jina-es",
        "jina-de",
        "gigachat",
        "jina-v2-es",
        "jina-v2-de",
        "a.x-4.0",
        "mellum",
        "jina-v1-en",
        "jina-v2-code",
        "roberta-bpe",
        "mpt",
        "olmo",
        "jais",
        "trillion",
        "granite-docling",
        "exaone4",
        "qwen2",
        "deepseek-r1-qwen",
        "kormo",
        "stablelm2",
        "megrez",
        "hunyuan",
        "qwen35",
        "poro-chat",
        "bloom",
        "gpt3-finnish",
        "viking",
        "tekken",
        "gpt-4o",
        "llama4",
        "minimax-m2",
        "seed-coder",
        "grok-2",
        "bailingmoe",
        "bailingmoe2",
        "llada-moe",
    ];
    let tmp = tempfile::tempdir().expect("tmp");
    let tokens = ["a", "b", "ab", "Ġ", "Ġab", "1", "2", "12", "<|eot|>"];
    for pre in names.iter().chain(["no-such-pre"].iter()) {
        let path = tmp.path().join(format!("{pre}.gguf"));
        let bytes = gguf(
            &[
                ("general.architecture", V::s("llama")),
                ("tokenizer.ggml.model", V::s("gpt2")),
                ("tokenizer.ggml.pre", V::s(pre)),
                ("tokenizer.ggml.tokens", V::strs(&tokens)),
                (
                    "tokenizer.ggml.token_type",
                    V::i32s(&[1, 1, 1, 1, 1, 1, 1, 1, 3]),
                ),
                ("tokenizer.ggml.merges", V::strs(&["a b", "Ġ ab", "1 2"])),
                ("tokenizer.ggml.bos_token_id", V::U32(8)),
            ],
            &[],
        );
        std::fs::write(&path, bytes).expect("write");
        let info = read_gguf(&path).expect("read");
        let built = build_gguf_tokenizer(&info).unwrap_or_else(|e| panic!("{pre}: {e}"));
        if *pre == "no-such-pre" {
            assert!(
                built.notes.iter().any(|n| n.contains("default")),
                "{pre}: {:?}",
                built.notes
            );
        } else {
            assert!(built.notes.is_empty(), "{pre}: {:?}", built.notes);
        }
        let ids = built
            .file
            .tokenizer
            .encode("ab ab<|eot|>", false)
            .expect("encode");
        assert_eq!(ids.get_ids(), &[2, 4, 8], "{pre}");
        // llama3-family vocabularies add BOS with add_special_tokens=true, as llama.cpp does.
        let with_bos = built.file.tokenizer.encode("ab", true).expect("encode");
        let llama3 = [
            "llama3",
            "llama-v3",
            "llama-bpe",
            "falcon3",
            "falcon-h1",
            "pixtral",
            "midm-2.0",
            "lfm2",
            "jina-v5-nano",
            "tekken",
        ];
        assert_eq!(
            with_bos.get_ids().first() == Some(&8),
            llama3.contains(pre),
            "{pre}"
        );
        assert!(info
            .missing_llama_cpp_keys()
            .contains(&"llama.context_length".to_string()));
    }
}
