//! Every vocab-only GGUF of llama.cpp's test set: the header and vocabulary must read, and for
//! every file with `.inp`/`.out` test vectors whose tokenizer chatgate builds, our encoding must
//! equal llama.cpp's expected ids (tests/test-tokenizer-0.cpp: add_special=false,
//! parse_special=false; inputs separated by "\n__ggml_vocab_test__\n"; one `.out` line of
//! space-separated ids per input).
use std::path::{Path, PathBuf};

use chatgate::artifacts::{build_gguf_tokenizer, read_gguf, ModelDir};

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
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/corpus/gguf-vocab")
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
        .map(|l| l.trim().split(' ').filter(|s| !s.is_empty()).map(|s| s.parse().expect("id")).collect())
        .collect();
    assert_eq!(inputs.len(), outputs.len(), "{}: input and output counts differ", inp.display());
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
    assert!(ggufs.len() >= 10, "expected the llama.cpp vocab GGUFs in {}", dir.display());

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
        assert!(info.get_str("tokenizer.ggml.model").is_some(), "{name}: no tokenizer.ggml.model");
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
                assert!(model.notes.iter().any(|n| n.contains("no tokenizer")), "{name}: reason not recorded");
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
                    let enc = t.file.tokenizer.encode(text.as_str(), false).expect("encode");
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
        assert!(checked.iter().any(|c| c == claimed), "{claimed}: claimed but not checked");
    }
    assert!(failures.is_empty(), "claimed vocabularies mismatch llama.cpp:\n{}", failures.join("\n"));
}
