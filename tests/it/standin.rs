//! `chatgate standin` on the real corpus models: deterministic, loadable by candle (HF and
//! GGUF) and by real llama.cpp (llama-cpp-python), talking in words and sometimes ending a turn,
//! and — the point of the GGUF — llama.cpp tokenizes the stand-in's text exactly as chatgate's
//! `llama.cpp` stack profile predicts from the file.
use std::path::{Path, PathBuf};
use std::process::Command;

use chatgate::artifacts::ModelDir;
use chatgate::endpoint::candle::CandleModel;
use chatgate::endpoint::GenerateRequest;
use chatgate::stack::Stack;
use chatgate::standin::{build, Built, Options};

use crate::common::families::Family;
use serde_json::{json, Value};

/// Corpus models a stand-in is built from (gpt2-xl's architecture is not one yet), the phi3
/// and qwen3 architectures on corpus tokenizers, Gemma-2 (its real tokenizer and template, its
/// config's values) and Gemma 3's architecture and template on that tokenizer.
const FAMILIES: &[Family] = &[
    Family::corpus("TinyLlama-1.1B-Chat-v1.0", "TinyLlama-1.1B-Chat-v1.0"),
    Family::corpus("Mistral-7B-Instruct-v0.3", "Mistral-7B-Instruct-v0.3"),
    Family::corpus("Phi-3-mini-4k-instruct", "Phi-3-mini-4k-instruct"),
    Family::corpus("Qwen2.5-0.5B-Instruct", "Qwen2.5-0.5B-Instruct"),
    Family::corpus("SmolLM2-135M-Instruct", "SmolLM2-135M-Instruct"),
    Family {
        name: "Phi-3 (phi3 architecture)",
        model: "Phi-3-mini-4k-instruct",
        arch: Some("phi3"),
        template: None,
    },
    Family {
        name: "Qwen3 architecture, Qwen2.5 tokenizer",
        model: "Qwen2.5-0.5B-Instruct",
        arch: Some("qwen3"),
        template: None,
    },
    crate::common::families::GEMMA2,
    crate::common::families::GEMMA3,
];

fn corpus(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus/models")
        .join(name)
}

fn family(name: &str) -> &'static Family {
    FAMILIES
        .iter()
        .find(|f| f.name == name)
        .expect("a family of FAMILIES")
}

fn standin(name: &str, out: &Path, seed: u64) -> Built {
    let tmp = out.with_extension("source");
    build(&Options {
        from: family(name).source(&tmp),
        out: out.to_path_buf(),
        seed,
        layers: 2,
        hidden: 64,
        head_dim: 16,
        real_shape: false,
        force: false,
        reply: None,
    })
    .unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[test]
fn the_same_seed_gives_the_same_bytes_and_another_seed_other_weights() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b, c) = (
        tmp.path().join("a"),
        tmp.path().join("b"),
        tmp.path().join("c"),
    );
    standin("TinyLlama-1.1B-Chat-v1.0", &a, 7);
    standin("TinyLlama-1.1B-Chat-v1.0", &b, 7);
    standin("TinyLlama-1.1B-Chat-v1.0", &c, 8);
    for f in ["model.safetensors", "model.gguf", "config.json"] {
        assert_eq!(
            std::fs::read(a.join(f)).unwrap(),
            std::fs::read(b.join(f)).unwrap(),
            "{f}"
        );
    }
    assert_ne!(
        std::fs::read(a.join("model.safetensors")).unwrap(),
        std::fs::read(c.join("model.safetensors")).unwrap()
    );
    // The tokenizer and template files are the source's, byte for byte.
    for f in [
        "tokenizer.json",
        "tokenizer_config.json",
        "chat_template.jinja",
        "generation_config.json",
    ] {
        assert_eq!(
            std::fs::read(a.join(f)).unwrap(),
            std::fs::read(corpus("TinyLlama-1.1B-Chat-v1.0").join(f)).unwrap(),
            "{f}"
        );
    }
}

#[test]
fn an_existing_folder_is_not_overwritten_without_force() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("keep.txt"), "mine").unwrap();
    let err = build(&Options {
        from: corpus("TinyLlama-1.1B-Chat-v1.0"),
        out: tmp.path().to_path_buf(),
        seed: 0,
        layers: 2,
        hidden: 64,
        head_dim: 16,
        real_shape: false,
        force: false,
        reply: None,
    })
    .expect_err("a non-empty folder");
    assert!(err.to_string().contains("not empty"), "{err}");
    assert_eq!(
        std::fs::read_to_string(tmp.path().join("keep.txt")).unwrap(),
        "mine"
    );
    let unsupported = build(&Options {
        from: corpus("gpt2-xl"),
        out: tmp.path().join("gpt2"),
        seed: 0,
        layers: 2,
        hidden: 64,
        head_dim: 16,
        real_shape: false,
        force: false,
        reply: None,
    })
    .expect_err("gpt2 is not a stand-in architecture yet");
    assert!(
        unsupported.to_string().contains("model_type \"gpt2\""),
        "{unsupported}"
    );
    assert_eq!(unsupported.exit_code(), 2);
}

/// Every family: the source's architecture kept (or inferred), candle runs the HF directory,
/// greedy replies are words, some end with the template's terminator, and for llama-architecture
/// GGUFs candle's run of model.gguf gives the same tokens as the safetensors.
#[test]
fn every_family_builds_runs_and_talks() {
    let tmp = tempfile::tempdir().unwrap();
    for fam in FAMILIES {
        let name = &fam.name;
        let (out, built) = fam.standin();
        let cfg: Value =
            serde_json::from_slice(&std::fs::read(out.join("config.json")).unwrap()).unwrap();
        let src_cfg = fam.source(&tmp.path().join("sources")).join("config.json");
        if src_cfg.is_file() {
            let src: Value = serde_json::from_slice(&std::fs::read(src_cfg).unwrap()).unwrap();
            assert_eq!(cfg["model_type"], src["model_type"], "{name}");
            assert_eq!(cfg["eos_token_id"], src["eos_token_id"], "{name}");
        }
        assert!(
            built.files.contains(&"model.gguf".to_string()),
            "{name}: {:?}",
            built.notes
        );
        let mut hf = CandleModel::load(&out).unwrap_or_else(|e| panic!("{name}: {e}"));
        let chat = [json!({"role": "user", "content": "Tell me about the sea."})];
        // SmolLM2's corpus copy ships no template (tokenizer_config.json is not in it).
        let ids = match hf.render_chat(&chat, None, true) {
            Ok((_, ids)) => ids,
            Err(_) if built.turn_terminator.is_none() => {
                hf.encode("Tell me about the sea.").unwrap()
            }
            Err(e) => panic!("{name}: {e}"),
        };
        let req = GenerateRequest {
            prompt_ids: ids,
            max_tokens: 12,
            ignore_eos: true,
            ..Default::default()
        };
        let g = hf.generate(&req, &mut |_| true).unwrap();
        let words = g.text.split_whitespace().count();
        assert!(
            words >= 3 && g.text.chars().all(|c| c.is_ascii_lowercase() || c == ' '),
            "{name}: not words: {:?}",
            g.text
        );
        if let Some((_, term)) = &built.turn_terminator {
            let (ending, of) = built.replies_ending;
            assert!(
                ending >= 1 && ending < of,
                "{name}: {ending} of {of} end with {term}"
            );
        } else {
            // Only a source without a chat template has no terminator.
            assert_eq!(*name, "SmolLM2-135M-Instruct");
        }
        assert_eq!(
            built.gguf_architecture.as_deref(),
            Some(match cfg["model_type"].as_str().unwrap() {
                "mistral" => "llama",
                "gemma3_text" => "gemma3",
                other => other,
            }),
            "{name}: the GGUF keeps the architecture"
        );
        let mut gg =
            CandleModel::load(&out.join("model.gguf")).unwrap_or_else(|e| panic!("{name}: {e}"));
        let g2 = gg.generate(&req, &mut |_| true).unwrap();
        assert_eq!(g.ids, g2.ids, "{name}: GGUF and safetensors disagree");
    }
}

/// Probe strings, chat markup of every family, and the stand-in's own rendered chats.
fn probe_strings() -> Vec<String> {
    let mut s: Vec<String> =
        chatgate::chain::run::probe::corpus(chatgate::chain::run::probe::PROBE_VERSION)
            .unwrap()
            .iter()
            .map(|x| x.to_string())
            .collect();
    s.extend(
        [
            "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
            "<s>[INST] What is 2+2? [/INST]",
            "<|user|>\nhi<|end|>\n<|assistant|>\n",
            "<|system|>\nYou are kind.</s>\n<|user|>\nHello</s>\n<|assistant|>\n",
            "<bos><start_of_turn>user\nHi  there\n\n<end_of_turn>\n<start_of_turn>model\n",
            " leading and  double  spaces ",
            "tabs\tand\nnewlines\n\n",
        ]
        .map(String::from),
    );
    s
}

/// llama.cpp (llama-cpp-python's `Llama.tokenize`, special tokens parsed, no BOS) on the
/// stand-in's GGUF equals chatgate's `llama.cpp` profile on the same file, string by string.
#[test]
fn llama_cpp_tokenizes_standins_as_the_llama_cpp_profile_predicts() {
    let Some(python) = crate::common::llama_server::python() else {
        return;
    };

    let strings = probe_strings();
    let script = r#"
import json, sys
from llama_cpp import Llama
m = Llama(model_path=sys.argv[1], vocab_only=True, verbose=False)
print(json.dumps([m.tokenize(s.encode(), add_bos=False, special=True) for s in json.load(sys.stdin)]))
"#;
    let mut mismatches = Vec::new();
    for fam in FAMILIES {
        let name = &fam.name;
        let (out, _) = fam.standin();
        let gguf = out.join("model.gguf");
        let mut child = Command::new(&python)
            .args(["-c", script])
            .arg(&gguf)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        serde_json::to_writer(child.stdin.take().unwrap(), &strings).unwrap();
        let o = child.wait_with_output().unwrap();
        assert!(
            o.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let real: Vec<Vec<u32>> = serde_json::from_slice(&o.stdout).unwrap();
        let model = ModelDir::open(&gguf).unwrap();
        let feed = chatgate::stack::feed(Stack::LlamaCpp, &model, false)
            .unwrap()
            .expect("a llama.cpp feed");
        for (s, want) in strings.iter().zip(&real) {
            let got = feed
                .tokenizer
                .encode(s.as_str(), false)
                .unwrap()
                .get_ids()
                .to_vec();
            if &got != want {
                mismatches.push(format!(
                    "{name}: {s:?}\n  llama.cpp {want:?}\n  profile   {got:?}"
                ));
            }
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} mismatches:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
}

/// A `model_type` stand-ins are not built in (cohere here) stands in as the first supported
/// architecture for which transformers picks the same tokenizer class — the tokenizer is what
/// the serving chain sees — and the report says so; the stand-in then passes init and the gate.
/// When no supported architecture gives that class, `standin` refuses and names config.json.
#[test]
fn an_unsupported_architecture_stands_in_as_one_with_the_same_tokenizer_class() {
    let tmp = tempfile::tempdir().unwrap();
    let tinyllama = Family::corpus("TinyLlama", "TinyLlama-1.1B-Chat-v1.0");
    let source = tmp.path().join("source");
    crate::common::gate_workspace::copy_dir(&tinyllama.source(tmp.path()), &source);
    let cfg_path = source.join("config.json");
    let mut cfg: Value = serde_json::from_slice(&std::fs::read(&cfg_path).unwrap()).unwrap();
    cfg["model_type"] = json!("cohere");
    cfg["architectures"] = json!(["CohereForCausalLM"]);
    std::fs::write(&cfg_path, serde_json::to_vec(&cfg).unwrap()).unwrap();
    let options = |from: &Path, out: &Path| Options {
        from: from.to_path_buf(),
        out: out.to_path_buf(),
        seed: 0,
        layers: 2,
        hidden: 64,
        head_dim: 16,
        real_shape: false,
        force: false,
        reply: None,
    };
    let out = tmp.path().join("standin");
    let built = build(&options(&source, &out)).unwrap();
    assert_eq!(built.model_type, "llama");
    assert_eq!(built.gguf_architecture.as_deref(), Some("llama"));
    assert!(
        built
            .notes
            .iter()
            .any(|n| n.contains("\"cohere\"") && n.contains("same tokenizer class")),
        "{:?}",
        built.notes
    );
    let cfg: Value =
        serde_json::from_slice(&std::fs::read(out.join("config.json")).unwrap()).unwrap();
    assert_eq!(cfg["model_type"], "llama");
    assert_eq!(cfg["eos_token_id"], 2);
    // The substitute serves the same chain: init, accept, and the gate passes in-process.
    let suites = tmp.path().join("suites");
    std::fs::create_dir(&suites).unwrap();
    let model = out.to_str().unwrap();
    let (code, out_, err) =
        crate::common::cli::chatgate_in(&["init", "suite.toml", "--model", model], &suites);
    assert_eq!(code, 0, "{out_}{err}");
    for update in [true, false] {
        let mut args = vec!["gate", "suite.toml", "--no-progress"];
        if update {
            args.push("--update");
        }
        let (code, out_, err) = crate::common::cli::chatgate_in(&args, &suites);
        assert_eq!(code, 0, "update {update}: {out_}{err}");
    }

    // Without tokenizer_class, transformers picks CohereTokenizer by model_type: no supported
    // architecture gives that class.
    let tc_path = source.join("tokenizer_config.json");
    let mut tc: Value = serde_json::from_slice(&std::fs::read(&tc_path).unwrap()).unwrap();
    tc.as_object_mut().unwrap().remove("tokenizer_class");
    std::fs::write(&tc_path, serde_json::to_vec(&tc).unwrap()).unwrap();
    let Err(err) = build(&options(&source, &tmp.path().join("refused"))) else {
        panic!("a cohere source without tokenizer_class was built")
    };
    let err = err.to_string();
    assert!(
        err.contains("config.json") && err.contains("cohere"),
        "{err}"
    );
    assert!(!tmp.path().join("refused").exists());
}

/// What candle's Gemma-2 cannot run as transformers and llama.cpp do is refused by name, never
/// run wrong: queries scaled by another `query_pre_attn_scalar` than head_dim (Gemma-2 27B),
/// an untied output head, and a GGUF with its own `output.weight`.
#[test]
fn gemma2_shapes_candle_would_run_wrong_are_refused() {
    let (standin, _) = crate::common::families::GEMMA2.standin();
    let tmp = tempfile::tempdir().unwrap();
    let cfg: Value =
        serde_json::from_slice(&std::fs::read(standin.join("config.json")).unwrap()).unwrap();
    let head_dim = cfg["head_dim"].as_u64().unwrap();
    // The stand-in itself loads (its scalar is its head_dim).
    CandleModel::load(&standin).unwrap();
    for (key, value, said) in [
        (
            "query_pre_attn_scalar",
            json!(head_dim * 2),
            "scales attention by head_dim",
        ),
        ("tie_word_embeddings", json!(false), "ties the output head"),
    ] {
        let dir = tmp.path().join(key);
        crate::common::gate_workspace::copy_dir(&standin, &dir);
        let mut c = cfg.clone();
        c[key] = value;
        std::fs::write(dir.join("config.json"), serde_json::to_vec(&c).unwrap()).unwrap();
        let Err(err) = CandleModel::load(&dir) else {
            panic!("{key}: a Gemma-2 candle would run wrong was loaded")
        };
        let err = err.to_string();
        assert!(err.contains(key) && err.contains(said), "{key}: {err}");
    }
}
