//! Source directories stand-ins are built from: a corpus model, optionally given another
//! architecture's config.json (tests/corpus/configs, for phi3 and qwen3, which the corpus has
//! no config for) or a corpus template in place of its own.
#![allow(dead_code)]
use std::path::{Path, PathBuf};

use serde_json::Value;

const REPO: &str = env!("CARGO_MANIFEST_DIR");

#[derive(Debug, Clone, Copy)]
pub struct Family {
    /// How tables and messages name it.
    pub name: &'static str,
    /// The folder under tests/corpus/models.
    pub model: &'static str,
    /// `tests/corpus/configs/<arch>.config.json` (and `<arch>.generation_config.json` when
    /// present) replace the model's own.
    pub arch: Option<&'static str>,
    /// A tests/corpus/templates file replacing the model's chat template.
    pub template: Option<&'static str>,
}

/// Gemma-2 2B it: its real tokenizer files (tests/corpus/models/gemma-2-2b-it), its real chat
/// template, and its config's values (tests/corpus/configs/gemma2.*).
pub const GEMMA2: Family = Family {
    name: "Gemma-2 2B it (SentencePiece 256k, BOS in the template, no system role), gemma2",
    model: "gemma-2-2b-it",
    arch: Some("gemma2"),
    template: Some("google-gemma-2-2b-it.jinja"),
};

/// Gemma 3 as a stand-in: Gemma 3 270M's architecture (`gemma3_text`, tests/corpus/configs/
/// gemma3.*) and Gemma 3's official chat template, on the Gemma-2 tokenizer (the same chat
/// markup tokens; Gemma 3's own 262k tokenizer is 33 MB).
pub const GEMMA3: Family = Family {
    name: "Gemma 3 architecture and template on the Gemma-2 tokenizer, gemma3_text",
    model: "gemma-2-2b-it",
    arch: Some("gemma3"),
    template: Some("google-gemma-3-it.jinja"),
};

/// Llama-3.2 3B Instruct: its real tokenizer files (tests/corpus/models/Llama-3.2-3B-Instruct),
/// its real chat template (it prints today's date: `strftime_now("%d %b %Y")` unless a
/// `date_string` is given) and its config's values (tests/corpus/configs/llama3.*).
pub const LLAMA32: Family = Family {
    name: "Llama-3.2 3B Instruct (byte-level BPE 128k, header format, prints today's date)",
    model: "Llama-3.2-3B-Instruct",
    arch: Some("llama3"),
    template: None,
};

impl Family {
    pub const fn corpus(name: &'static str, model: &'static str) -> Family {
        Family {
            name,
            model,
            arch: None,
            template: None,
        }
    }

    /// The directory to build a stand-in from: the corpus folder itself, or an edited copy
    /// under `tmp`.
    pub fn source(&self, tmp: &Path) -> PathBuf {
        let from = Path::new(REPO).join("tests/corpus/models").join(self.model);
        if self.arch.is_none() && self.template.is_none() {
            return from;
        }
        let dir = tmp.join(format!("source-{}", self.model));
        super::gate_workspace::copy_dir(&from, &dir);
        if let Some(arch) = self.arch {
            let configs = Path::new(REPO).join("tests/corpus/configs");
            for file in ["config.json", "generation_config.json"] {
                let src = configs.join(format!("{arch}.{file}"));
                if src.is_file() {
                    std::fs::copy(&src, dir.join(file)).expect("copy config");
                }
            }
        }
        if let Some(t) = self.template {
            let text =
                std::fs::read_to_string(Path::new(REPO).join("tests/corpus/templates").join(t))
                    .expect("corpus template");
            let _ = std::fs::remove_file(dir.join("chat_template.jinja"));
            let p = dir.join("tokenizer_config.json");
            // SmolLM2's corpus copy has no tokenizer_config.json: the template makes one.
            let mut tc: Value = match std::fs::read(&p) {
                Ok(bytes) => serde_json::from_slice(&bytes).expect("json"),
                Err(_) => serde_json::json!({}),
            };
            tc["chat_template"] = Value::String(text);
            std::fs::write(&p, serde_json::to_string_pretty(&tc).expect("json"))
                .expect("write tokenizer_config.json");
        }
        dir
    }
}

/// The code that decides a stand-in's bytes: part of the cache key, so a change to it builds
/// new stand-ins instead of reusing old ones.
const STANDIN_CODE: &[&str] = &[
    include_str!("../../../src/standin/mod.rs"),
    include_str!("../../../src/standin/weights.rs"),
    include_str!("../../../src/standin/scripted.rs"),
    include_str!("../../../src/standin/build.rs"),
    include_str!("../../../src/standin/gguf.rs"),
    include_str!("../../../src/artifacts/llama_cpp_pre.rs"),
    include_str!("../../../src/artifacts/llama_cpp_pre_hashes.tsv"),
];

/// Where stand-ins (and what tests derive from them beside them: the family matrix's broken
/// copies, the catch matrix's real-shape references) are built once and kept: `target/standins`,
/// or `$CHATGATE_STANDINS`. `.ci/run` points that outside the clone, at a folder named by a hash
/// of every tracked file that can change what is built there (the library, the tests, the
/// lockfile, the install scripts), so a second run of the same tree — the landing run after a
/// fresh-clone run — finds them built, and any change to those files starts an empty folder.
pub fn standins_root() -> PathBuf {
    std::env::var_os("CHATGATE_STANDINS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(REPO).join("target/standins"))
}

impl Family {
    /// A seed-0 stand-in (2 layers, 64 wide) of this family, built once into
    /// `<standins_root>/<key>/` and reused by every test and run whose source files and
    /// stand-in code are the same (the key hashes both). Read it, never change it: tests that
    /// break a stand-in break a copy.
    pub fn standin(&self) -> (PathBuf, chatgate::standin::Built) {
        self.build_standin(None, 0, 16)
    }

    /// A stand-in of this family with another seed (another checkpoint of the same shape) and
    /// head width (vLLM's CPU attention takes 32 and up), cached like [`Family::standin`].
    pub fn standin_with(&self, seed: u64, head_dim: usize) -> (PathBuf, chatgate::standin::Built) {
        self.build_standin(None, seed, head_dim)
    }

    /// A scripted stand-in of this family: every greedy reply is `reply`, then the turn
    /// terminator (`chatgate standin --reply`), cached like [`Family::standin`].
    pub fn scripted(&self, reply: &str) -> (PathBuf, chatgate::standin::Built) {
        self.build_standin(Some(reply), 0, 16)
    }

    /// A stand-in at the family's real shape (its own config.json's dimensions, random bf16
    /// weights: `standin --real-shape`), cached like [`Family::standin`]; `seed` is another
    /// checkpoint of the same shape.
    pub fn real_shape(&self, seed: u64) -> (PathBuf, chatgate::standin::Built) {
        self.build(None, seed, 16, true)
    }

    /// A scripted stand-in with 32-wide heads, for vLLM.
    pub fn scripted_for_vllm(&self, reply: &str) -> (PathBuf, chatgate::standin::Built) {
        self.build_standin(Some(reply), 0, 32)
    }

    fn build_standin(
        &self,
        reply: Option<&str>,
        seed: u64,
        head_dim: usize,
    ) -> (PathBuf, chatgate::standin::Built) {
        self.build(reply, seed, head_dim, false)
    }

    fn build(
        &self,
        reply: Option<&str>,
        seed: u64,
        head_dim: usize,
        real_shape: bool,
    ) -> (PathBuf, chatgate::standin::Built) {
        use sha2::{Digest, Sha256};
        let scratch = tempfile::tempdir().expect("tempdir");
        let src = self.source(scratch.path());
        let mut h = Sha256::new();
        for code in STANDIN_CODE {
            h.update(code.as_bytes());
        }
        let mut names: Vec<_> = std::fs::read_dir(&src)
            .expect("source dir")
            .map(|e| e.expect("entry").file_name())
            .collect();
        names.sort();
        for n in names {
            h.update(n.to_string_lossy().as_bytes());
            h.update(std::fs::read(src.join(&n)).expect("source file"));
        }
        if let Some(reply) = reply {
            h.update(b"reply\0");
            h.update(reply.as_bytes());
        }
        // The defaults leave the key as it was before seeds and head widths were asked for.
        if (seed, head_dim) != (0, 16) {
            h.update(format!("seed {seed} head_dim {head_dim}").as_bytes());
        }
        if real_shape {
            h.update(b"real shape");
        }
        let key = hex::encode(&h.finalize()[..8]);
        let root = standins_root();
        let dir = root.join(format!("{}-{key}", self.model));
        let marker = dir.join("built.json");
        if let Ok(bytes) = std::fs::read(&marker) {
            if let Ok(mut built) = serde_json::from_slice::<chatgate::standin::Built>(&bytes) {
                built.out = dir.clone();
                return (dir, built);
            }
        }
        // Built beside, then renamed into place: tests running at once never see half a
        // stand-in, and the one that loses the race uses the winner's.
        std::fs::create_dir_all(&root).expect("the stand-ins' folder");
        let tmp = tempfile::tempdir_in(&root).expect("tempdir in the stand-ins' folder");
        let out = tmp.path().join("model");
        let built = chatgate::standin::build(&chatgate::standin::Options {
            from: src,
            out: out.clone(),
            seed,
            layers: 2,
            hidden: 64,
            head_dim,
            real_shape,
            force: false,
            reply: reply.map(str::to_string),
        })
        .unwrap_or_else(|e| panic!("{}: {e}", self.name));
        let json = serde_json::to_vec(&built).expect("json");
        super::gate_workspace::publish(&out, &dir, "built.json", &json);
        let mut built = built;
        built.out = dir.clone();
        (dir, built)
    }
}
