//! The family × server matrix: stand-ins of real model families (the corpus models, and the
//! corpus's real templates on a tokenizer they fit) through `chatgate init`, `gate --update`
//! and three `gate` runs on every server here — in-process candle, the real `chatgate serve`
//! binary, and real llama-cpp-python over the stand-in's GGUF. The README's table is generated
//! from this run (`CHATGATE_BLESS=1` rewrites it after review); a cell that changes fails the
//! test, so a new false alarm or a lost finding is seen.
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::llama_server::{self, LlamaServer};

const REPO: &str = env!("CARGO_MANIFEST_DIR");
const START: &str = "<!-- family-matrix:start -->";
const END: &str = "<!-- family-matrix:end -->";

/// (row name, corpus model, corpus template replacing the model's own). Templates whose special
/// tokens the tokenizer lacks (DeepSeek-R1's `<｜Assistant｜>` on Qwen2.5's vocabulary) do not
/// fit; Phi-3.5's template on the Phi-3 tokenizer gives the Phi-3 row's results and was left out
/// to keep CI short.
const FAMILIES: &[(&str, &str, Option<&str>)] = &[
    (
        "TinyLlama 1.1B Chat (SentencePiece, Zephyr format)",
        "TinyLlama-1.1B-Chat-v1.0",
        None,
    ),
    (
        "Mistral 7B Instruct v0.3 (SentencePiece, [INST])",
        "Mistral-7B-Instruct-v0.3",
        None,
    ),
    (
        "Phi-3 mini 4k (SentencePiece; tokenizer files only)",
        "Phi-3-mini-4k-instruct",
        None,
    ),
    (
        "Qwen2.5 0.5B Instruct (byte-level BPE, ChatML)",
        "Qwen2.5-0.5B-Instruct",
        None,
    ),
    (
        "Qwen2.5 tokenizer + Qwen2.5 7B template (tools)",
        "Qwen2.5-0.5B-Instruct",
        Some("Qwen-Qwen2.5-7B-Instruct.jinja"),
    ),
];

use crate::common::cli::chatgate_in as chatgate;

/// The source directory: the corpus model, with a corpus template in place of its own.
fn source(tmp: &Path, model: &str, template: Option<&str>) -> PathBuf {
    let from = Path::new(REPO).join("tests/corpus/models").join(model);
    let Some(t) = template else {
        return from;
    };
    let dir = tmp.join("source");
    crate::common::gate_workspace::copy_dir(&from, &dir);
    let text =
        std::fs::read_to_string(Path::new(REPO).join("tests/corpus/templates").join(t)).unwrap();
    let _ = std::fs::remove_file(dir.join("chat_template.jinja"));
    let p = dir.join("tokenizer_config.json");
    let mut tc: Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
    tc["chat_template"] = Value::String(text);
    std::fs::write(&p, serde_json::to_string_pretty(&tc).unwrap()).unwrap();
    dir
}

/// `chatgate serve` as a process on a free port, until `GET /v1/models` answers.
struct Serve {
    child: Child,
    url: String,
}

impl Serve {
    fn start(model: &Path) -> Serve {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(env!("CARGO_BIN_EXE_chatgate"))
            .args(["serve", "--model"])
            .arg(model)
            .args(["--port", &port.to_string(), "--model-name", "model"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let url = format!("http://127.0.0.1:{port}");
        let t = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "chatgate serve did not start"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Serve { child, url }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What the cell shows: `pass ×3`, or the first broken check of the runs.
fn cell(dir: &Path, model: &Path, target: Option<&str>, stack: Option<&str>) -> String {
    let mut args = vec!["init", "suite.toml", "--model", model.to_str().unwrap()];
    if let Some(t) = target {
        args.extend(["--target", t]);
    }
    if let Some(s) = stack {
        args.extend(["--stack", s]);
    }
    let (code, out, err) = chatgate(&args, dir);
    assert_eq!(code, 0, "init: {out}{err}");
    let mut outcomes = Vec::new();
    for run in 0..4 {
        let mut args = vec!["gate", "suite.toml", "--no-progress", "--format", "json"];
        if run == 0 {
            args.push("--update");
        }
        let (code, out, err) = chatgate(&args, dir);
        let report: Value =
            serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}{err}"));
        let errors: Vec<String> = report["findings"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|f| f["severity"] == "error")
            .map(|f| f["check"].as_str().unwrap_or_default().to_string())
            .collect();
        outcomes.push((code, errors));
    }
    if outcomes.iter().all(|(c, e)| *c == 0 && e.is_empty()) {
        return "pass ×3".into();
    }
    let (code, errors) = outcomes
        .iter()
        .find(|(c, _)| *c != 0)
        .unwrap_or(&outcomes[0]);
    let mut e = errors.clone();
    e.dedup();
    format!("exit {code}: {}", e.join(", "))
}

#[test]
fn family_by_server_matrix() {
    let python = llama_server::python();
    let started = Instant::now();
    let mut lines = vec![
        "| family (stand-in) | in-process (candle) | `chatgate serve` | llama-cpp-python 0.3.36 |"
            .to_string(),
        "|---|---|---|---|".to_string(),
    ];
    for (name, model, template) in FAMILIES {
        let tmp = tempfile::tempdir().unwrap();
        let src = source(tmp.path(), model, *template);
        let standin = tmp.path().join("model");
        chatgate::standin::build(&chatgate::standin::Options {
            from: src,
            out: standin.clone(),
            seed: 0,
            layers: 2,
            hidden: 64,
            force: false,
        })
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        let mut cells = Vec::new();
        let d = tmp.path().join("in-process");
        std::fs::create_dir(&d).unwrap();
        cells.push(cell(&d, &standin, None, None));
        let serve = Serve::start(&standin);
        let d = tmp.path().join("serve");
        std::fs::create_dir(&d).unwrap();
        cells.push(cell(&d, &standin, Some(&serve.url), None));
        drop(serve);
        cells.push(match &python {
            Some(py) => {
                let server = LlamaServer::start(py, &standin.join("model.gguf"), "model", &[]);
                let d = tmp.path().join("llama-cpp-python");
                std::fs::create_dir(&d).unwrap();
                let c = cell(&d, &standin, Some(&server.url), Some("llama-cpp-python"));
                drop(server);
                c
            }
            None => "not run".into(),
        });
        lines.push(format!("| {name} | {} |", cells.join(" | ")));
        eprintln!(
            "{} ({:.0} s)",
            lines.last().unwrap(),
            started.elapsed().as_secs_f64()
        );
    }
    let generated = lines.join("\n") + "\n";
    let readme_path = Path::new(REPO).join("README.md");
    let readme = std::fs::read_to_string(&readme_path).unwrap();
    let (a, b) = (
        readme
            .find(START)
            .expect("the README's family-matrix block")
            + START.len()
            + 1,
        readme.find(END).expect("the README's family-matrix end"),
    );
    let current = &readme[a..b];
    let bless = std::env::var_os("CHATGATE_BLESS").is_some_and(|v| v == "1");
    if current != generated {
        assert!(
            python.is_some(),
            "the llama-cpp-python column did not run:\n{generated}"
        );
        if bless {
            let mut text = readme.clone();
            text.replace_range(a..b, &generated);
            std::fs::write(&readme_path, text).unwrap();
            eprintln!("README.md: family matrix rewritten (CHATGATE_BLESS=1)");
        } else {
            panic!("README.md's family matrix differs from this run's; review and rerun with CHATGATE_BLESS=1 to rewrite it.\nGenerated:\n\n{generated}\nREADME has:\n\n{current}");
        }
    }
}
