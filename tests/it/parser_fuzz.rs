//! A short fuzz of the parsers that read files from outside: GGUF headers, suites, snapshot
//! files, tokenizer_config.json. Real files are mutated (bytes flipped, cut short, spliced);
//! every parse must return Ok or a clear error — never panic, abort or hang.
use std::path::{Path, PathBuf};

use proptest::prelude::*;

use crate::common::gguf_writer::{gguf, T, V};

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Flip `flips` bytes (position, xor) and cut the result at `cut` (a fraction of its length).
fn mutate(mut bytes: Vec<u8>, flips: &[(usize, u8)], cut: Option<f64>) -> Vec<u8> {
    if bytes.is_empty() {
        return bytes;
    }
    let n = bytes.len();
    for &(at, x) in flips {
        bytes[at % n] ^= x.max(1);
    }
    if let Some(f) = cut {
        bytes.truncate(((n as f64) * f) as usize);
    }
    bytes
}

fn small_gguf() -> Vec<u8> {
    gguf(
        &[
            ("general.architecture", V::s("llama")),
            ("llama.block_count", V::U32(1)),
            ("llama.context_length", V::U32(64)),
            ("tokenizer.ggml.model", V::s("gpt2")),
            ("tokenizer.ggml.tokens", V::strs(&["a", "b", "ab", "<s>"])),
            ("tokenizer.ggml.token_type", V::i32s(&[1, 1, 1, 3])),
            ("tokenizer.ggml.merges", V::strs(&["a b"])),
            ("tokenizer.ggml.bos_token_id", V::U32(3)),
            (
                "tokenizer.chat_template",
                V::s("{{ messages[0]['content'] }}"),
            ),
        ],
        &[T {
            name: "token_embd.weight",
            dims: vec![4, 4],
            ggml_type: 0,
            nbytes: 64,
        }],
    )
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

fn flips() -> impl Strategy<Value = Vec<(usize, u8)>> {
    proptest::collection::vec((any::<usize>(), any::<u8>()), 0..6)
}

fn cut() -> impl Strategy<Value = Option<f64>> {
    proptest::option::of(0.0f64..1.0)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn gguf_headers_never_panic(f in flips(), c in cut()) {
        let tmp = tempfile::tempdir().unwrap();
        let p = write(tmp.path(), "m.gguf", &mutate(small_gguf(), &f, c));
        let _ = chatgate::artifacts::read_gguf(&p);
        let _ = chatgate::artifacts::ModelDir::open(&p);
    }

    #[test]
    fn suites_never_panic(f in flips(), c in cut()) {
        let tmp = tempfile::tempdir().unwrap();
        let text = std::fs::read(repo().join("suites/example.toml")).unwrap();
        let p = write(tmp.path(), "s.toml", &mutate(text, &f, c));
        let _ = chatgate::suite::Suite::load(&p);
    }

    #[test]
    fn snapshot_files_never_panic(f in flips(), c in cut()) {
        let dir = repo().join("snapshots/smoke");
        let first = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok().map(|e| e.path()))
            .find(|p| p.extension().is_some_and(|e| e == "snap"))
            .unwrap();
        let bytes = mutate(std::fs::read(&first).unwrap(), &f, c);
        let text = String::from_utf8_lossy(&bytes);
        let _ = chatgate::snapshot::SnapshotFile::parse(&text, &first);
    }

    #[test]
    fn tokenizer_configs_never_panic(f in flips(), c in cut()) {
        let tmp = tempfile::tempdir().unwrap();
        let text = std::fs::read(
            repo().join("tests/corpus/models/TinyLlama-1.1B-Chat-v1.0/tokenizer_config.json"),
        )
        .unwrap();
        let p = write(tmp.path(), "tokenizer_config.json", &mutate(text, &f, c));
        let _ = chatgate::artifacts::read_tokenizer_config(&p);
    }
}
