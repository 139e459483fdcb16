//! The family × server matrix: stand-ins of real model families (the corpus models, the phi3
//! and qwen3 architectures on corpus tokenizers, and a real template on a tokenizer it fits)
//! through `chatgate init`, `gate --update` and a `gate` run on every server here —
//! in-process candle, the real `chatgate serve` binary, real llama-cpp-python over the
//! stand-in's GGUF, and real `transformers serve` over its HF folder — and then the faults
//! users meet, each broken in a served copy of the stand-in (HF files and GGUF alike) and gated
//! once per server against the healthy suite: the first broken boundary must be the fault's.
//!
//! The two tables of docs/matrices/family.md are generated from this run (`CHATGATE_BLESS=1`
//! rewrites them after review); a cell that changes fails the test, so a new false alarm or a
//! lost finding is seen.
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::families::Family;
use crate::common::llama_server::{self, LlamaServer};
use crate::common::transformers_serve::{self, TransformersServe};

const REPO: &str = env!("CARGO_MANIFEST_DIR");
const HEALTHY_START: &str = "<!-- family-matrix:start -->";
const HEALTHY_END: &str = "<!-- family-matrix:end -->";
const FAULTS_START: &str = "<!-- family-faults:start -->";
const FAULTS_END: &str = "<!-- family-faults:end -->";

/// A row of the matrix, and whether the faults are injected into it. The fault rows cover one
/// family per tokenizer/template kind (SentencePiece without and with a BOS in the template,
/// phi3, byte-level BPE ChatML, Gemma-2's own architecture) to keep CI short.
const FAMILIES: &[(Family, bool)] = &[
    (
        Family::corpus(
            "TinyLlama 1.1B Chat (SentencePiece, Zephyr format)",
            "TinyLlama-1.1B-Chat-v1.0",
        ),
        true,
    ),
    (
        Family::corpus(
            "Mistral 7B Instruct v0.3 (SentencePiece, [INST], BOS in the template)",
            "Mistral-7B-Instruct-v0.3",
        ),
        true,
    ),
    (
        Family::corpus(
            "Phi-3 mini 4k, tokenizer files only (no config: llama architecture)",
            "Phi-3-mini-4k-instruct",
        ),
        false,
    ),
    (
        Family {
            name: "Phi-3 mini 4k, phi3 architecture (config + generation config)",
            model: "Phi-3-mini-4k-instruct",
            arch: Some("phi3"),
            template: None,
        },
        true,
    ),
    (
        Family::corpus(
            "Qwen2.5 0.5B Instruct (byte-level BPE, ChatML, tools)",
            "Qwen2.5-0.5B-Instruct",
        ),
        true,
    ),
    (
        Family {
            name: "qwen3 architecture on the Qwen2.5 tokenizer",
            model: "Qwen2.5-0.5B-Instruct",
            arch: Some("qwen3"),
            template: None,
        },
        false,
    ),
    (
        Family {
            name: "SmolLM2 135M (byte-level BPE `smollm`) + Qwen2.5 7B's ChatML template",
            model: "SmolLM2-135M-Instruct",
            arch: None,
            template: Some("Qwen-Qwen2.5-7B-Instruct.jinja"),
        },
        false,
    ),
    (
        Family {
            name: "Phi-3.5 mini's template (eos after the last turn) on the Phi-3 tokenizer, phi3",
            model: "Phi-3-mini-4k-instruct",
            arch: Some("phi3"),
            template: Some("microsoft-Phi-3.5-mini-instruct.jinja"),
        },
        false,
    ),
    (
        Family {
            name: "Mistral Nemo's template (`[INST]` without spaces) on the Mistral v0.3 tokenizer",
            model: "Mistral-7B-Instruct-v0.3",
            arch: None,
            template: Some("mistralai-Mistral-Nemo-Instruct-2407.jinja"),
        },
        false,
    ),
    (crate::common::families::GEMMA2, true),
    (crate::common::families::GEMMA3, false),
];

/// The row whose healthy cells keep `init`'s latency stage. What that stage measures and judges
/// (time to first token, time per output token, the baseline `gate --update` records, the
/// client's own health) is the server's and the gate's, not the family's: the same stream
/// reader and token counts serve every family, and the online chain's streamed probes already
/// read every row's streams. So one row per server column judges latency (the cheapest: a 49k
/// vocabulary), and the others run the chain and the replay. Every row ran it until 2026-12-07:
/// 400 s of the matrix's test time, 233 s of it on `transformers serve`, with the same verdict
/// in every cell.
const LATENCY_ROW: &str = "SmolLM2 135M (byte-level BPE `smollm`) + Qwen2.5 7B's ChatML template";

/// Healthy cells that fail on a true finding about the source, reviewed: the row, the cell, and
/// why (docs/matrices/family.md says the same).
const REVIEWED_HEALTHY: &[(&str, &str, &str)] = &[
    (
        "TinyLlama 1.1B Chat (SentencePiece, Zephyr format)",
        "exit 1: template.bos-count, template.parity",
        "on llama-server only: its vocabulary adds BOS (tokenizer.ggml.add_bos_token) and the \
         template writes none, so the model is fed a leading <s> that transformers' \
         apply_chat_template (the SFT rows init renders) and vLLM leave out; golden rows from a \
         trainer that tokenized the rendered text with its BOS match it",
    ),
    (
        "Mistral Nemo's template (`[INST]` without spaces) on the Mistral v0.3 tokenizer",
        "exit 1: template.generation-prompt",
        "the template writes the system message into the last user turn only: a conversation that \
     ends with the reply is rendered without it, the prompt before that reply with it, so the \
     model is served a context it was not trained on",
    ),
];

/// Cells the CI matrix leaves to an opt-in run, each with its measured reason
/// (docs/matrices/family.md shows the cell as written here). llama-cpp-python 0.3.36 answers a
/// logprobs request by sorting the whole vocabulary in Python for every token (`llama.py`,
/// `_create_completion`): 0.55 s per token on Gemma's 256k vocabulary against 0.013 s without
/// logprobs, so one gate (every replay and probe asks for logprobs) takes over 20 minutes.
/// Gemma-2 on llama.cpp runs in the llama-server column instead, whose logprobs are computed in
/// C++.
fn not_in_ci(fam: &Family, server: Server) -> Option<String> {
    let gemma_vocabulary = fam.model == crate::common::families::GEMMA2.model;
    (server == Server::LlamaCppPython && gemma_vocabulary).then(|| {
        "not run in CI: its logprobs sort the 256k vocabulary in Python, 0.55 s/token (llama-server column)".to_string()
    })
}

use crate::common::cli::chatgate_in as chatgate;

/// The servers of the matrix.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Server {
    InProcess,
    Serve,
    LlamaCppPython,
    TransformersServe,
    /// llama.cpp's own `llama-server`: opt-in (`--features llama-server`), its build takes
    /// longer than CI has.
    #[cfg_attr(not(feature = "llama-server"), allow(dead_code))]
    LlamaCpp,
}

const SERVERS: [Server; 4] = [
    Server::InProcess,
    Server::Serve,
    Server::LlamaCppPython,
    Server::TransformersServe,
];

/// What the real servers need installed (None: not here; the column says "not run").
struct Installed {
    python: Option<PathBuf>,
    transformers: Option<PathBuf>,
    llama_server: Option<PathBuf>,
}

/// A running server and how suites address it.
enum Running {
    InProcess,
    /// A server binary this test started: `chatgate serve`, `llama-server`.
    Serve(Child, String),
    Llama(LlamaServer),
    Transformers(TransformersServe),
}

impl Running {
    fn url(&self) -> Option<&str> {
        match self {
            Running::InProcess => None,
            Running::Serve(_, url) => Some(url),
            Running::Llama(s) => Some(&s.url),
            Running::Transformers(s) => Some(&s.url),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Running::Serve(child, _) = self {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Start `server` on the stand-in folder `model`; None when it is not installed, or (Some(Err))
/// when the server cannot serve this folder, with why.
fn start(server: Server, model: &Path, inst: &Installed) -> Option<Result<Running, String>> {
    Some(Ok(match server {
        Server::InProcess => Running::InProcess,
        Server::Serve => {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let mut child = Command::new(env!("CARGO_BIN_EXE_chatgate"))
                .args(["serve", "--model"])
                .arg(model)
                .args(["--port", &port.to_string(), "--model-name", "model"])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            let t = Instant::now();
            while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
                if let Ok(Some(_)) = child.try_wait() {
                    let mut why = String::new();
                    use std::io::Read;
                    let _ = child.stderr.take().unwrap().read_to_string(&mut why);
                    let why = why.lines().next().unwrap_or_default().to_string();
                    return Some(Err(format!("`chatgate serve` refuses the files ({why})")));
                }
                assert!(
                    t.elapsed() < Duration::from_secs(60),
                    "chatgate serve did not start"
                );
                std::thread::sleep(Duration::from_millis(100));
            }
            Running::Serve(child, format!("http://127.0.0.1:{port}"))
        }
        Server::LlamaCppPython => {
            let py = inst.python.as_ref()?;
            let gguf = model.join("model.gguf");
            if !gguf.is_file() {
                return Some(Err("no GGUF: the converter refuses these files".into()));
            }
            Running::Llama(crate::common::llama_server::start(py, &gguf, "model", &[]))
        }
        // One `transformers serve` for the whole run: it loads whichever folder a request's
        // `model` names, so every stand-in and every broken copy is served by the same process
        // (suites name their folder; `redirect` points a fault's suite at its copy). Its start
        // (torch's import) was 8-30 s a cell and a fault before.
        Server::TransformersServe => {
            let exe = inst.transformers.as_ref()?;
            let _ = model;
            Running::Transformers(crate::common::transformers_serve::shared(exe))
        }
        Server::LlamaCpp => {
            let exe = inst.llama_server.as_ref()?;
            let gguf = model.join("model.gguf");
            if !gguf.is_file() {
                return Some(Err("no GGUF: the converter refuses these files".into()));
            }
            return Some(start_llama_server(exe, &gguf, &[]));
        }
    }))
}

/// llama.cpp's `llama-server` on `gguf`, as scripts/servers/llama-server.sh runs it (one slot, one
/// thread, the GGUF's template through its jinja engine) with `extra` flags, ready when /health
/// says 200.
fn start_llama_server(exe: &Path, gguf: &Path, extra: &[&str]) -> Result<Running, String> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let logs = Path::new(REPO).join("target/real-server-logs");
    std::fs::create_dir_all(&logs).unwrap();
    let log = logs.join(format!("llama-server-{port}.log"));
    let out = std::fs::File::create(&log).unwrap();
    let mut child = Command::new(exe)
        .arg("-m")
        .arg(gguf)
        .args([
            "-a",
            "model",
            "--host",
            "127.0.0.1",
            "--port",
            &port.to_string(),
        ])
        .args([
            "-c", "2048", "-t", "1", "-tb", "1", "-np", "1", "--seed", "42",
        ])
        .args(["--jinja", "--offline"])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(out)
        .spawn()
        .map_err(|e| format!("{}: {e}", exe.display()))?;
    let t = Instant::now();
    while !health_ok(port) {
        if let Ok(Some(status)) = child.try_wait() {
            let tail = std::fs::read_to_string(&log).unwrap_or_default();
            let tail: Vec<&str> = tail.lines().rev().take(3).collect();
            return Err(format!(
                "llama-server exited ({status}): {}",
                tail.join(" / ")
            ));
        }
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "llama-server did not become ready; log: {}",
            log.display()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(Running::Serve(child, format!("http://127.0.0.1:{port}")))
}

/// GET /health answers 200 (llama-server says 503 while it loads the model).
fn health_ok(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut c) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = c.set_read_timeout(Some(Duration::from_secs(2)));
    if c.write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut head = [0u8; 12];
    c.read_exact(&mut head).is_ok() && head.ends_with(b" 200")
}

/// One gate run's outcome.
struct Outcome {
    code: i32,
    /// (boundary, check) of every error, in the report's (chain) order.
    errors: Vec<(String, String)>,
    /// Where the run's time went: the report's phases (name, seconds, requests).
    phases: Vec<(String, f64, u64)>,
}

impl Outcome {
    fn checks(&self) -> Vec<String> {
        let mut c: Vec<String> = self.errors.iter().map(|(_, c)| c.clone()).collect();
        c.dedup();
        c
    }
}

fn gate(dir: &Path, update: bool) -> Outcome {
    outcome(crate::common::cli::gate(dir).update_if(update).run())
}

/// A fault's gate, judged by its first new error against the healthy run's, run `--fail-fast`
/// first. A fail-fast run makes every finding at and before its first broken boundary that the
/// whole run makes (`chain::run::fail_fast`), so when its first new error is at that boundary it
/// is the whole run's first new error too. Otherwise — every error at that boundary is one the
/// healthy run raised too (`transformers serve`'s missing `[DONE]`), or there is no new error —
/// the first new error may lie past it, and the gate runs again whole. Both runs' time is kept.
/// A fail-fast run with no error broke no boundary, so it left nothing out: it is the whole run.
fn fault_gate(dir: &Path, baseline: &[(String, String)], time: &mut CellTime) -> Outcome {
    let fast = outcome(crate::common::cli::gate(dir).args(&["--fail-fast"]).run());
    time.gate(&fast);
    if fast.errors.is_empty() {
        return fast;
    }
    let first_broken = fast.errors.iter().map(|(b, _)| boundary_of(b)).min();
    let first_new = fast.errors.iter().find(|e| !baseline.contains(e));
    if first_new.is_some_and(|(b, _)| Some(boundary_of(b)) == first_broken) {
        return fast;
    }
    let whole = outcome(crate::common::cli::gate(dir).run());
    time.gate(&whole);
    whole
}

/// A boundary as the report names it, ordered as the chain is.
fn boundary_of(name: &str) -> chatgate::verdict::Boundary {
    serde_json::from_value(Value::String(name.to_string())).unwrap_or_else(|e| {
        panic!("the report names a boundary the chain does not have: {name}: {e}")
    })
}

fn outcome((code, report): (i32, Value)) -> Outcome {
    let errors = report["findings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|f| f["severity"] == "error")
        .map(|f| {
            (
                f["boundary"].as_str().unwrap_or_default().to_string(),
                f["check"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    let phases = report["phases"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            let name = p["phase"].as_str().unwrap_or_default();
            (
                name.split(':').next().unwrap_or(name).to_string(),
                p["seconds"].as_f64().unwrap_or(0.0),
                p["requests"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    Outcome {
        code,
        errors,
        phases,
    }
}

/// Where one cell's time went, appended as a JSON line to `target/matrix-timings.jsonl`
/// (`scripts/ci/matrix-timings.py` makes docs/development.md's table from it): server starts,
/// `init`, and each gate phase summed over the cell's gates (healthy and faults).
#[derive(Default)]
struct CellTime {
    server_start_s: f64,
    server_starts: u32,
    init_s: f64,
    gates: u32,
    phases: std::collections::BTreeMap<String, (f64, u64)>,
}

impl CellTime {
    fn gate(&mut self, o: &Outcome) {
        self.gates += 1;
        for (name, secs, requests) in &o.phases {
            let e = self.phases.entry(name.clone()).or_default();
            e.0 += secs;
            e.1 += requests;
        }
    }

    fn write(&self, fam: &Family, server: Server, total_s: f64) {
        let phases: serde_json::Map<String, Value> = self
            .phases
            .iter()
            .map(|(k, (s, r))| (k.clone(), json!({"seconds": s, "requests": r})))
            .collect();
        let line = json!({
            "family": fam.name,
            "server": format!("{server:?}"),
            "total_s": total_s,
            "server_start_s": self.server_start_s,
            "server_starts": self.server_starts,
            "init_s": self.init_s,
            "gates": self.gates,
            "phases": phases,
        });
        let path = Path::new(REPO).join("target/matrix-timings.jsonl");
        let _lock = ReadmeLock::take(&path);
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .expect("target/matrix-timings.jsonl");
        writeln!(f, "{line}").expect("append a timing line");
    }
}

/// init (without the latency stage unless `latency`) + `gate --update` in `dir`, and one gate
/// after it on the latency row; the cell: `pass`, or the exit code and the error
/// checks of the first failing run; and the errors of the last run (the baseline the faults are
/// judged against).
fn healthy_cell(
    dir: &Path,
    model: &Path,
    running: &Running,
    server: Server,
    latency: bool,
    time: &mut CellTime,
) -> (String, Vec<(String, String)>) {
    let model_arg = model.to_str().unwrap();
    let mut args = vec!["init", "suite.toml", "--model", model_arg];
    if let Some(url) = running.url() {
        args.extend(["--target", url]);
    }
    match server {
        Server::LlamaCppPython => args.extend(["--stack", "llama-cpp-python"]),
        Server::TransformersServe => args.extend(["--stack", "transformers"]),
        Server::LlamaCpp => args.extend(["--stack", "llama.cpp"]),
        _ => {}
    }
    let t = Instant::now();
    let (code, out, err) = chatgate(&args, dir);
    time.init_s += t.elapsed().as_secs_f64();
    assert_eq!(code, 0, "init: {out}{err}");
    if !latency {
        crate::common::gate_workspace::without_latency(&dir.join("suite.toml"));
    }
    // `gate --update` accepts the snapshots (and, on the latency row, the latency baseline,
    // which one gate then judges the same server against). On the other rows a second gate
    // would send the same requests to the same process: its one addition, the replay against
    // the accepted snapshots, is what the update's probe pass already checks by repeating each
    // greedy probe (`server.determinism`), and run-to-run stability is the catch matrix's
    // `healthy_*` tests and `template_second_day`'s gate per server (docs/matrices/family.md).
    let gates = if latency { 2 } else { 1 };
    let runs: Vec<Outcome> = (0..gates).map(|run| gate(dir, run == 0)).collect();
    runs.iter().for_each(|o| time.gate(o));
    let baseline = runs.last().expect("the update ran").errors.clone();
    if runs.iter().all(|o| o.code == 0 && o.errors.is_empty()) {
        return ("pass".into(), baseline);
    }
    let o = runs.iter().find(|o| o.code != 0).unwrap_or(&runs[0]);
    (
        format!("exit {}: {}", o.code, o.checks().join(", ")),
        baseline,
    )
}

/// The faults, each a change to a served copy of the stand-in.
#[derive(Debug, Clone, Copy)]
enum Fault {
    ExtraBos,
    WrongTemplate,
    EosNotTerminator,
    TokenizerSwapped,
}

const FAULTS: [Fault; 4] = [
    Fault::ExtraBos,
    Fault::WrongTemplate,
    Fault::EosNotTerminator,
    Fault::TokenizerSwapped,
];

impl Fault {
    fn name(self) -> &'static str {
        match self {
            Fault::ExtraBos => "extra BOS",
            Fault::WrongTemplate => "wrong template",
            Fault::EosNotTerminator => "eos ≠ turn terminator",
            Fault::TokenizerSwapped => "tokenizer swapped",
        }
    }
    fn boundary(self) -> &'static str {
        match self {
            Fault::ExtraBos | Fault::WrongTemplate => "template",
            Fault::EosNotTerminator => "generation-config",
            Fault::TokenizerSwapped => "tokenizer",
        }
    }
}

/// A server's fallback when a model has no template: plain ChatML.
const CHATML: &str = "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
/// Llama-2's `[INST]` format.
const LLAMA2: &str = "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}{{ '[INST] ' + m['content'] + ' [/INST]' }}{% elif m['role'] == 'assistant' %}{{ ' ' + m['content'] + eos_token }}{% endif %}{% endfor %}";

fn read_json(p: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
        .unwrap()
}

fn write_json(p: &Path, v: &Value) {
    std::fs::write(p, serde_json::to_string_pretty(v).unwrap()).unwrap();
}

/// Writes a folder's chat template back where it came from.
type SetTemplate = Box<dyn Fn(&str)>;

/// The chat template of an HF folder, and where it lives.
fn template_of(dir: &Path) -> (String, SetTemplate) {
    let jinja = dir.join("chat_template.jinja");
    if jinja.is_file() {
        let text = std::fs::read_to_string(&jinja).unwrap();
        return (
            text,
            Box::new(move |t: &str| std::fs::write(&jinja, t).unwrap()),
        );
    }
    let tc_path = dir.join("tokenizer_config.json");
    let tc = read_json(&tc_path);
    let text = tc["chat_template"]
        .as_str()
        .expect("a template")
        .to_string();
    (
        text,
        Box::new(move |t: &str| {
            let mut tc = read_json(&tc_path);
            tc["chat_template"] = json!(t);
            write_json(&tc_path, &tc);
        }),
    )
}

/// The text of a token id in tokenizer.json (base vocabulary or added tokens).
fn token_text(dir: &Path, id: u64) -> Option<String> {
    let tj = read_json(&dir.join("tokenizer.json"));
    let added = tj["added_tokens"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|t| t["id"] == id)
        .and_then(|t| t["content"].as_str().map(str::to_string));
    added.or_else(|| {
        tj["model"]["vocab"]
            .as_object()?
            .iter()
            .find(|(_, v)| v.as_u64() == Some(id))
            .map(|(k, _)| k.clone())
    })
}

/// The special token the faults use in place of the right one: config.json's BOS, or (Qwen has
/// none) the first special token the template does not end turns with — `<|endoftext|>`, the
/// base model's eos.
fn other_special(dir: &Path) -> u64 {
    if let Some(id) = read_json(&dir.join("config.json"))["bos_token_id"].as_u64() {
        return id;
    }
    let (template, _) = template_of(dir);
    let tj = read_json(&dir.join("tokenizer.json"));
    tj["added_tokens"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| t["special"] == true)
        .filter(|t| !template.contains(t["content"].as_str().unwrap_or_default()))
        .find_map(|t| t["id"].as_u64())
        .expect("a special token the template does not use")
}

/// The corpus tokenizer a family's tokenizer is swapped for: a different one whose ids fit the
/// stand-in's embedding where the corpus has one (the Mistral v0.1/v0.3 mix-up, Llama-2's
/// tokenizer under Phi-3, another byte-level BPE under Qwen), else the nearest larger one.
/// Phi-3's is Llama-2's base vocabulary plus tokens its tokenizer_config.json re-adds, so
/// TinyLlama's tokenizer.json under Phi-3's configs is Phi-3's tokenizer again on transformers
/// stacks: it gets Mistral v0.3's, whose ids overrun the embedding.
fn swap_partner(model: &str) -> &'static str {
    match model {
        "Mistral-7B-Instruct-v0.3" => "TinyLlama-1.1B-Chat-v1.0",
        "Qwen2.5-0.5B-Instruct" => "SmolLM2-135M-Instruct",
        _ => "Mistral-7B-Instruct-v0.3",
    }
}

/// Break a copy of the stand-in at `served` (HF files, then the GGUF rewritten from them with
/// the same weights). Returns how, for the table, and why the GGUF could not carry the fault
/// when it cannot.
fn break_copy(
    fault: Fault,
    fam: &Family,
    standin: &Path,
    served: &Path,
) -> (String, Option<String>) {
    crate::common::gate_workspace::copy_dir(standin, served);
    let other = other_special(served);
    let how = match fault {
        Fault::ExtraBos => {
            let bos = token_text(served, other).expect("a bos token");
            let (text, set) = template_of(served);
            set(&format!("{bos}{text}"));
            format!("the template writes `{bos}` before its own output")
        }
        Fault::WrongTemplate => {
            let (text, set) = template_of(served);
            if text.contains("<|im_start|>") {
                set(LLAMA2);
                "Llama-2 `[INST]` template instead of ChatML".to_string()
            } else {
                set(CHATML);
                "plain ChatML (a server's fallback) instead of the model's template".to_string()
            }
        }
        Fault::EosNotTerminator => {
            let bos = other;
            for f in ["config.json", "generation_config.json"] {
                let p = served.join(f);
                let mut v = if p.is_file() {
                    read_json(&p)
                } else {
                    json!({})
                };
                v["eos_token_id"] = json!(bos);
                write_json(&p, &v);
            }
            let text = token_text(served, bos).unwrap_or_default();
            format!("eos_token_id = {bos} (`{text}`) in config.json, generation_config.json and the GGUF")
        }
        Fault::TokenizerSwapped => {
            let partner = swap_partner(fam.model);
            std::fs::copy(
                Path::new(REPO)
                    .join("tests/corpus/models")
                    .join(partner)
                    .join("tokenizer.json"),
                served.join("tokenizer.json"),
            )
            .unwrap();
            format!("tokenizer.json of {partner}")
        }
    };
    let gguf = match chatgate::standin::rewrite_gguf(served) {
        Ok(_) => None,
        // The healthy GGUF stays (the weights the lock pins); llama.cpp cannot serve the fault.
        // The reason alone: the folder is a temporary one, and the table must be stable.
        Err(e) => Some(
            e.to_string()
                .split("not written: ")
                .last()
                .unwrap_or_default()
                .to_string(),
        ),
    };
    if let (Fault::EosNotTerminator, None) = (fault, &gguf) {
        // The converter takes eos from tokenizer_config.json's name before config.json's id,
        // so edited ids alone do not reach a converted GGUF: patch the GGUF's eos as well.
        let bos = other as u32;
        let p = served.join("model.gguf");
        let tmp = served.join("patched.gguf");
        llama_server::gguf_with_eos(&p, bos, &tmp);
        std::fs::rename(&tmp, &p).unwrap();
    }
    (how, gguf)
}

/// Each fault's broken copy of the stand-in: (fault, its folder, how it was made, why the GGUF
/// could not carry it). Built once beside the stand-in (`<stand-ins>/<stand-in>.faults/`,
/// renamed into place whole, as the stand-ins are) and served by every server's cell: the copies
/// are the same files on every server and a cell only reads them, while making one (a copy of
/// the stand-in and its GGUF rewritten) took seconds on Gemma's 256k vocabulary, once per
/// server before.
fn broken_copies(fam: &Family, standin: &Path) -> Vec<(Fault, PathBuf, String, Option<String>)> {
    let name = standin
        .file_name()
        .expect("a stand-in folder")
        .to_string_lossy();
    let root = standin.with_file_name(format!("{name}.faults"));
    let made = root.join("made.json");
    let read = |made: &Path| -> Option<Vec<(String, Option<String>)>> {
        serde_json::from_slice(&std::fs::read(made).ok()?).ok()
    };
    let listed = match read(&made) {
        Some(listed) => listed,
        None => {
            let tmp = tempfile::tempdir_in(standin.parent().expect("the stand-ins' folder"))
                .expect("tempdir in the stand-ins' folder");
            let out = tmp.path().join("faults");
            let listed: Vec<(String, Option<String>)> = FAULTS
                .iter()
                .map(|&f| break_copy(f, fam, standin, &out.join(format!("{f:?}"))))
                .collect();
            let json = serde_json::to_vec(&listed).expect("json");
            crate::common::gate_workspace::publish(&out, &root, "made.json", &json);
            read(&made).expect("the broken copies' made.json")
        }
    };
    FAULTS
        .iter()
        .zip(listed)
        .map(|(&f, (how, gguf))| (f, root.join(format!("{f:?}")), how, gguf))
        .collect()
}

/// Point a healthy suite (a copy of its folder) at the broken copy: in-process, the model it
/// serves; a server, the one serving the broken copy (and its name for transformers serve);
/// without the latency stage.
fn redirect(suite: &Path, served: &Path, running: &Running, server: Server) {
    let mut doc: toml::Table = std::fs::read_to_string(suite).unwrap().parse().unwrap();
    let served = served.to_str().unwrap().to_string();
    match server {
        Server::InProcess => {
            doc["model"]["dir"] = toml::Value::String(served);
        }
        _ => {
            let target = doc["target"].as_table_mut().unwrap();
            target.insert(
                "url".into(),
                toml::Value::String(running.url().unwrap().to_string()),
            );
            if server == Server::TransformersServe {
                target.insert("model".into(), toml::Value::String(served));
            }
        }
    }
    // The fingerprint's long reply at its shortest (two windows): none of these faults is at
    // the checkpoint, and a shorter reply can only give the checkpoint less to blame, so the
    // first broken boundary stays the one the cell is about. At 256 tokens it was a third of
    // a fault gate on `chatgate serve` and 20-30 s on llama-cpp-python, whose logprobs sort the
    // vocabulary in Python per token. The healthy gates keep the suite's 256.
    if let Some(reference) = doc.get_mut("reference").and_then(toml::Value::as_table_mut) {
        reference.insert("long_reply_tokens".into(), toml::Value::Integer(64));
    }
    std::fs::write(suite, toml::to_string(&doc).unwrap()).unwrap();
    // The fault's gate judges the chain and the replay; its latency is not what the cell is
    // about, and no fault here is caught at the latency checks, which come after every
    // boundary the faults break.
    crate::common::gate_workspace::without_latency(suite);
}

/// llama.cpp ends generation on tokens it knows by name whatever the GGUF's eos says
/// (`llama_cpp_vocab::EOG`, from llama-vocab.cpp): with such a terminator an eos pointed
/// elsewhere changes nothing a client sees, and the gate must not cry wolf.
fn llama_cpp_stops_by_name(terminator: &str) -> bool {
    chatgate::stack::llama_cpp_vocab::EOG.contains(&terminator)
}

/// A prompt after a whole exchange (user, assistant, user; with the generation prompt) as the
/// stand-in's GGUF template renders it, with `eos` as the eos text.
fn gguf_prompt(standin: &Path, eos: Option<&str>) -> String {
    let model = chatgate::artifacts::ModelDir::open(&standin.join("model.gguf")).unwrap();
    let Some(source) = model.templates.select(false) else {
        return String::new();
    };
    let template = chatgate::template::ChatTemplate::new(&source.text).unwrap();
    let mut special = model.special_tokens();
    if let Some(e) = eos {
        special.eos_token = Some(e.to_string());
    }
    let request = chatgate::template::RenderRequest {
        messages: vec![
            json!({"role": "user", "content": "Hi"}),
            json!({"role": "assistant", "content": "Hello."}),
            json!({"role": "user", "content": "Bye"}),
        ],
        add_generation_prompt: true,
        special_tokens: special,
        ..Default::default()
    };
    template
        .render(&request)
        .map(|r| r.text)
        .unwrap_or_default()
}

/// The served prompt carries the eos text (the template writes `eos_token` after a turn), so a
/// server that renders it from the GGUF shows an eos pointed elsewhere in the prompt itself.
fn eos_in_prompt(standin: &Path) -> bool {
    gguf_prompt(standin, None) != gguf_prompt(standin, Some("<<eos>>"))
}

/// llama-server cuts one leading BOS text from the rendered prompt when its vocabulary adds
/// BOS (`common_chat_template_direct_apply`), then adds its own: a template that wrote none
/// and now writes one feeds the model exactly what it fed before.
fn llama_server_absorbs_one_bos(standin: &Path) -> bool {
    let model = chatgate::artifacts::ModelDir::open(&standin.join("model.gguf")).unwrap();
    let adds_bos = model.gguf.as_ref().is_some_and(|g| {
        g.metadata.get("tokenizer.ggml.add_bos_token") == Some(&Value::Bool(true))
    });
    let bos = model.special_tokens().bos_token.unwrap_or_default();
    adds_bos && !bos.is_empty() && !gguf_prompt(standin, None).starts_with(&bos)
}

/// vLLM and SGLang (and `chatgate serve`, which stands in for them) stop on the tokenizer's
/// eos as well as generation_config.json's (vLLM `SamplingParams.update_from_generation_config`):
/// when the tokenizer's eos is the turn terminator, an eos id pointed elsewhere in the configs
/// changes nothing a client of theirs sees. `transformers serve` and HF `generate` stop on
/// generation_config.json's alone.
fn tokenizer_eos_ends_turns(standin: &Path, terminator: &str) -> bool {
    let tc = read_json(&standin.join("tokenizer_config.json"));
    let eos = tc["eos_token"]
        .as_str()
        .or_else(|| tc["eos_token"]["content"].as_str());
    eos == Some(terminator)
}

/// The fault cell, judged against the healthy run on the same server (a server whose healthy
/// run already fails — `transformers serve` on its quirks (no `[DONE]`, the stop string kept) — must show the fault
/// as a new error): ✅ and the check of the first new error when it is at the expected
/// boundary, ✅ "immune" when the server cannot show the fault and nothing new is raised, or ❌
/// and what came first instead.
fn fault_cell(
    expected: Option<&str>,
    o: &Outcome,
    baseline: &[(String, String)],
) -> (bool, String) {
    let first_new = o.errors.iter().find(|e| !baseline.contains(e));
    match (expected, first_new) {
        // Exit 3: the broken server died under the probes (llama.cpp on a vocabulary its
        // weights were not made for, at times); the gate still named the boundary first.
        (Some(b), Some((fb, fc))) if matches!(o.code, 1 | 3) && fb == b => {
            (true, format!("✅ `{fc}`"))
        }
        (None, None) => (true, "✅ immune: no new error".into()),
        (_, Some((fb, fc))) => (false, format!("❌ exit {}: `{fb}` / `{fc}` first", o.code)),
        (_, None) => (false, format!("❌ exit {}: no new error", o.code)),
    }
}

/// Faults the gate cannot see at their boundary on a server, and why. Each is a limit of what
/// that server shows, stated in docs/matrices/family.md; the cell says so in fixed words (what
/// the replay happens to catch varies with the tiny model's replies). Anything else missed fails
/// the test.
fn known_miss(fault: Fault, server: Server, template_uses_eos: bool) -> Option<&'static str> {
    match (fault, server) {
        (Fault::EosNotTerminator, Server::LlamaCppPython) if template_uses_eos => Some(
            "⚠️ not at the template boundary: llama-cpp-python renders the template's `eos_token` from the GGUF, so the prompt changes, but not its token count, and it has no chat tokenize endpoint",
        ),
        (Fault::TokenizerSwapped, Server::TransformersServe) => Some(
            "⚠️ not at the tokenizer or template boundary: the server has no tokenize endpoint and returns no logprob ids, and the prompt's token count did not change (or every request failed)",
        ),
        _ => None,
    }
}

/// One family on one server: the healthy cell, and (on a fault row) each fault's cell.
struct Cell {
    healthy: String,
    /// (fault, how it was made, the cell).
    faults: Vec<(Fault, String, String)>,
    /// False alarms on the healthy stand-in and faults not caught at their boundary.
    missed: Vec<String>,
}

/// `fam` through `server`: init, `gate --update` and three gates on the healthy stand-in, then
/// (on a fault row) each fault in a served copy, judged against the healthy run's errors.
fn run_cell(fam: &Family, with_faults: bool, server: Server, inst: &Installed) -> Cell {
    let started = Instant::now();
    let tmp = tempfile::tempdir().unwrap();
    let (standin, built) = fam.standin();
    let broken = if with_faults {
        broken_copies(fam, &standin)
    } else {
        Vec::new()
    };
    let terminator = built
        .turn_terminator
        .as_ref()
        .map(|(_, t)| t.clone())
        .unwrap_or_default();
    let immune = llama_cpp_stops_by_name(&terminator);
    let eos_is_terminator = tokenizer_eos_ends_turns(&standin, &terminator);
    let template_uses_eos = template_of(&standin).0.contains("eos_token");
    // Read from the GGUF's vocabulary (a 256k one takes seconds to open): llama-server's
    // expectations only.
    let llama_server = server == Server::LlamaCpp;
    let eos_in_prompt = llama_server && eos_in_prompt(&standin);
    let absorbs_bos = llama_server && llama_server_absorbs_one_bos(&standin);
    let mut missed = Vec::new();
    let workspace = tmp.path().join(format!("{server:?}"));
    std::fs::create_dir(&workspace).unwrap();
    let mut time = CellTime::default();
    let t = Instant::now();
    let running = start(server, &standin, inst);
    time.server_start_s += t.elapsed().as_secs_f64();
    time.server_starts += 1;
    let Some(running) = running else {
        // The server is not installed: `start`'s caller said so (a failure in CI).
        let faults = broken
            .into_iter()
            .map(|(f, _, how, _)| (f, how, "not run".to_string()))
            .collect();
        return Cell {
            healthy: "not run".into(),
            faults,
            missed,
        };
    };
    let running = running.unwrap_or_else(|e| panic!("{}: {e}", fam.name));
    let latency = fam.name == LATENCY_ROW;
    let (healthy, baseline) =
        healthy_cell(&workspace, &standin, &running, server, latency, &mut time);
    // Healthy stand-ins pass in-process and on the llama.cpp servers (the page's claim); the
    // one finding allowed is true of the source: it ships no generation config, so a
    // transformers stack stops on the tokenizer's eos alone.
    let named_gap = healthy == "exit 1: generation.stop-set"
        && !standin.join("generation_config.json").exists();
    let reviewed = REVIEWED_HEALTHY
        .iter()
        .any(|(family, c, _)| *family == fam.name && *c == healthy);
    if matches!(
        server,
        Server::InProcess | Server::LlamaCppPython | Server::LlamaCpp
    ) && healthy != "pass"
        && !named_gap
        && !reviewed
    {
        missed.push(format!("{} / healthy / {server:?}: {healthy}", fam.name));
    }
    drop(running);
    eprintln!(
        "{} / {server:?}: {healthy} ({:.0} s)",
        fam.name,
        started.elapsed().as_secs_f64()
    );
    let mut faults = Vec::new();
    for (fault, served, how, gguf) in broken {
        let cell = fault_on_server(FaultRun {
            fam,
            fault,
            served: &served,
            gguf: gguf.as_deref(),
            server,
            inst,
            workspace: &workspace,
            baseline: &baseline,
            expected: match (fault, server) {
                (Fault::EosNotTerminator, Server::LlamaCppPython) if template_uses_eos => {
                    Some("template")
                }
                // llama-server renders the GGUF's eos into the prompt, and its
                // /apply-template + /tokenize show the prompt's ids.
                (Fault::EosNotTerminator, Server::LlamaCpp) if eos_in_prompt => Some("template"),
                (Fault::EosNotTerminator, Server::LlamaCppPython | Server::LlamaCpp) if immune => {
                    None
                }
                (Fault::ExtraBos, Server::LlamaCpp) if absorbs_bos => None,
                (Fault::EosNotTerminator, Server::Serve) if eos_is_terminator => None,
                // No tokenize endpoint and no logprob ids: a swapped tokenizer shows only in
                // the chat prompt's token count, which the template boundary reads.
                (Fault::TokenizerSwapped, Server::TransformersServe) => Some("template"),
                _ => Some(fault.boundary()),
            },
            template_uses_eos,
            missed: &mut missed,
            time: &mut time,
        });
        faults.push((fault, how, cell));
    }
    time.write(fam, server, started.elapsed().as_secs_f64());
    Cell {
        healthy,
        faults,
        missed,
    }
}

/// What one fault's gate needs to know.
struct FaultRun<'a> {
    fam: &'a Family,
    fault: Fault,
    served: &'a Path,
    /// Why the GGUF could not carry the fault, when it could not.
    gguf: Option<&'a str>,
    server: Server,
    inst: &'a Installed,
    /// The healthy run's folder (suite, lock, snapshots), copied for the fault's gate.
    workspace: &'a Path,
    /// The errors of the last healthy gate on this server.
    baseline: &'a [(String, String)],
    /// The boundary the fault must be caught at; None: the server cannot show it.
    expected: Option<&'static str>,
    template_uses_eos: bool,
    missed: &'a mut Vec<String>,
    time: &'a mut CellTime,
}

/// The fault's cell: its served copy on the server, the healthy suite redirected to it, one gate.
fn fault_on_server(r: FaultRun) -> String {
    let FaultRun {
        fam,
        fault,
        served,
        gguf,
        server,
        inst,
        workspace,
        baseline,
        expected,
        template_uses_eos,
        missed,
        time,
    } = r;
    if matches!(server, Server::LlamaCppPython | Server::LlamaCpp) {
        if let Some(why) = gguf {
            return format!("— not producible: {why}");
        }
    }
    let t = Instant::now();
    let running = start(server, served, inst);
    time.server_start_s += t.elapsed().as_secs_f64();
    time.server_starts += 1;
    let running = match running {
        None => return "not run".into(),
        Some(Err(why)) => return format!("— not producible: {why}"),
        Some(Ok(r)) => r,
    };
    let dir = workspace.with_file_name(format!("{server:?}-{fault:?}"));
    crate::common::gate_workspace::copy_dir(workspace, &dir);
    redirect(&dir.join("suite.toml"), served, &running, server);
    let o = fault_gate(&dir, baseline, time);
    drop(running);
    let (ok, cell) = fault_cell(expected, &o, baseline);
    let (ok, cell) = match known_miss(fault, server, template_uses_eos) {
        Some(why) if !ok => (true, why.to_string()),
        _ => (ok, cell),
    };
    eprintln!("  {} / {server:?}: {cell} {:?}", fault.name(), o.checks());
    if !ok {
        missed.push(format!(
            "{} / {} / {server:?}: {cell} (errors: {:?})",
            fam.name,
            fault.name(),
            o.checks()
        ));
    }
    cell
}

/// Where the matrix's tables live, and the markers around each.
const TABLES: &str = "docs/matrices/family.md";

/// A table's place: its block's markers, and the column a server's cells are in.
struct Table {
    start: &'static str,
    end: &'static str,
    /// The healthy table's column of the server (0: the family name).
    healthy_col: usize,
    /// The fault table's column of the server (0 family, 1 fault, 2 how, 3 boundary).
    fault_col: usize,
}

fn table(server: Server) -> Table {
    let (start, end) = match server {
        Server::LlamaCpp => (
            "<!-- family-llama-server:start -->",
            "<!-- family-llama-server:end -->",
        ),
        _ => (HEALTHY_START, HEALTHY_END),
    };
    let col = match server {
        Server::InProcess | Server::LlamaCpp => 1,
        Server::Serve => 2,
        Server::LlamaCppPython => 3,
        Server::TransformersServe => 4,
    };
    Table {
        start,
        end,
        healthy_col: col,
        fault_col: col + 3,
    }
}

/// The fault table's first column: the family name up to its parenthesis.
fn short_name(fam: &Family) -> &'static str {
    fam.name.split(" (").next().unwrap_or(fam.name)
}

/// One family × server of the matrix: its cells must equal the page's (rewritten there with
/// `CHATGATE_BLESS=1`, after review), and nothing may be missed.
fn matrix_cell(fam: &Family, server: Server) {
    // Every chatgate this cell starts (the gate with its in-process reference, `chatgate
    // serve`) computes on one thread: the cells run two at a time on two cores, and two
    // threads per process there cost more CPU for the same work (a Gemma-2 and a Qwen3 cell
    // side by side: 325 CPU s with two threads, 285 with one; the Qwen3 cell 83 s → 66 s).
    crate::common::gate_workspace::single_threaded();
    let with_faults = FAMILIES
        .iter()
        .find(|(f, _)| f.name == fam.name)
        .map(|(_, w)| *w)
        .expect("a family of FAMILIES");
    assert!(
        FAMILIES.iter().any(|(f, _)| f.name == LATENCY_ROW),
        "LATENCY_ROW names no row: no cell would judge latency"
    );
    assert!(
        not_in_ci(fam, server).is_none(),
        "{} on {server:?} is not run in CI (the cell in docs/matrices/family.md says why)",
        fam.name
    );
    let inst = Installed {
        python: match server {
            Server::LlamaCppPython => llama_server::python(),
            _ => None,
        },
        transformers: match server {
            Server::TransformersServe => transformers_serve::executable(),
            _ => None,
        },
        llama_server: match server {
            Server::LlamaCpp => Some(llama_server_binary()),
            _ => None,
        },
    };
    let cell = run_cell(fam, with_faults, server, &inst);
    if cell.healthy == "not run" {
        return; // the skip is already said (and fails in CI)
    }
    let t = table(server);
    let mut cells = vec![(
        t.start,
        t.end,
        vec![fam.name.to_string()],
        t.healthy_col,
        cell.healthy.clone(),
    )];
    let fault_block = match server {
        Server::LlamaCpp => (t.start, t.end),
        _ => (FAULTS_START, FAULTS_END),
    };
    for (fault, how, c) in &cell.faults {
        cells.push((
            fault_block.0,
            fault_block.1,
            vec![
                short_name(fam).to_string(),
                fault.name().to_string(),
                how.replace('|', "\\|"),
                format!("`{}`", fault.boundary()),
            ],
            t.fault_col,
            c.replace('|', "\\|"),
        ));
    }
    let differs = check_cells(&cells);
    assert!(
        cell.missed.is_empty(),
        "false alarms on the healthy stand-in, or faults not caught at their boundary:\n{}",
        cell.missed.join("\n")
    );
    assert!(
        differs.is_empty(),
        "{TABLES}'s cells differ from this run's; review and rerun with CHATGATE_BLESS=1 to rewrite them:\n{}",
        differs.join("\n")
    );
}

/// The llama-server binary of the opt-in column: `CHATGATE_LLAMA_SERVER`, or the build
/// scripts/servers/llama-server.sh caches.
fn llama_server_binary() -> PathBuf {
    let exe = std::env::var_os("CHATGATE_LLAMA_SERVER")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let cache = std::env::var_os("CHATGATE_CACHE")
                .map(PathBuf::from)
                .unwrap_or_else(|| {
                    Path::new(&std::env::var_os("HOME").unwrap_or_default()).join(".cache/chatgate")
                });
            cache.join("llama-server-11434.0.0/build/bin/llama-server")
        });
    assert!(
        exe.is_file(),
        "no llama-server at {} (scripts/servers/llama-server.sh --build-only builds it; CHATGATE_LLAMA_SERVER names another)",
        exe.display()
    );
    exe
}

/// The cells of a Markdown table row: split on `|` that is not escaped.
fn row_cells(line: &str) -> Vec<String> {
    let inner = line.trim().trim_start_matches('|').trim_end_matches('|');
    let mut cells = vec![String::new()];
    let mut prev = ' ';
    for c in inner.chars() {
        if c == '|' && prev != '\\' {
            cells.push(String::new());
        } else {
            cells.last_mut().unwrap().push(c);
        }
        prev = c;
    }
    cells.iter().map(|c| c.trim().to_string()).collect()
}

/// Compare each (block, row key, column, value) with the page (TABLES); with `CHATGATE_BLESS=1`
/// rewrite the cells that differ (under a lock: the matrix's tests run at once). Returns what
/// differs (and was not rewritten).
fn check_cells(cells: &[(&str, &str, Vec<String>, usize, String)]) -> Vec<String> {
    let bless = std::env::var_os("CHATGATE_BLESS").is_some_and(|v| v == "1");
    let path = Path::new(REPO).join(TABLES);
    let _lock = bless.then(|| ReadmeLock::take(&path));
    let mut text = std::fs::read_to_string(&path).unwrap();
    let mut differs = Vec::new();
    for (start, end, key, col, value) in cells {
        let a = text.find(start).expect("the table's block") + start.len();
        let b = a + text[a..].find(end).expect("the table's block end");
        let block = &text[a..b];
        let mut offset = a;
        let mut found = false;
        for line in block.split_inclusive('\n') {
            let cols = row_cells(line);
            if line.trim_start().starts_with('|')
                && cols.len() > *col
                && cols[..key.len()] == key[..]
            {
                found = true;
                if cols[*col] != *value {
                    if bless {
                        let mut new = cols.clone();
                        new[*col] = value.clone();
                        let new_line = format!("| {} |\n", new.join(" | "));
                        text.replace_range(offset..offset + line.len(), &new_line);
                        eprintln!("{TABLES}: {} rewritten (CHATGATE_BLESS=1)", key.join(" / "));
                    } else {
                        differs.push(format!(
                            "{} (column {col}):\n  {TABLES}: {}\n  run:    {value}",
                            key.join(" / "),
                            cols[*col]
                        ));
                    }
                }
                break;
            }
            offset += line.len();
        }
        if !found {
            differs.push(format!(
                "{}: no row in {TABLES}'s {start} table (add it by hand, with every column, then bless)",
                key.join(" / ")
            ));
        }
    }
    if bless {
        let tmp = path.with_extension("md.bless-tmp");
        std::fs::write(&tmp, &text).unwrap();
        std::fs::rename(&tmp, &path).unwrap();
    }
    differs
}

/// An exclusive lock on a file beside the page while a test rewrites it.
struct ReadmeLock(std::fs::File);

impl ReadmeLock {
    fn take(readme: &Path) -> ReadmeLock {
        use std::os::fd::AsRawFd;
        let f = std::fs::File::create(readme.with_extension("md.bless-lock")).unwrap();
        // SAFETY: flock on a file descriptor this struct owns; released when it is dropped.
        assert_eq!(unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) }, 0);
        ReadmeLock(f)
    }
}

impl Drop for ReadmeLock {
    fn drop(&mut self) {
        use std::os::fd::AsRawFd;
        // SAFETY: as in `take`.
        unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
    }
}

/// The page's tables have exactly the rows FAMILIES and FAULTS make, and the cells left to
/// an opt-in run say why.
#[test]
fn readme_rows_are_the_matrix() {
    let text = std::fs::read_to_string(Path::new(REPO).join(TABLES)).unwrap();
    let rows = |start: &str, end: &str| -> Vec<Vec<String>> {
        let a = text.find(start).unwrap() + start.len();
        let b = a + text[a..].find(end).unwrap();
        text[a..b]
            .lines()
            .filter(|l| l.starts_with('|'))
            .skip(2)
            .take_while(|l| !l.is_empty())
            .map(row_cells)
            .collect()
    };
    let healthy = rows(HEALTHY_START, HEALTHY_END);
    let names: Vec<&str> = healthy.iter().map(|r| r[0].as_str()).collect();
    let want: Vec<&str> = FAMILIES.iter().map(|(f, _)| f.name).collect();
    assert_eq!(names, want, "the healthy table's rows");
    let faults = rows(FAULTS_START, FAULTS_END);
    let got: Vec<(String, String)> = faults
        .iter()
        .map(|r| (r[0].clone(), r[1].clone()))
        .collect();
    let want: Vec<(String, String)> = FAMILIES
        .iter()
        .filter(|(_, w)| *w)
        .flat_map(|(f, _)| {
            FAULTS
                .iter()
                .map(move |x| (short_name(f).to_string(), x.name().to_string()))
        })
        .collect();
    assert_eq!(got, want, "the fault table's rows");
    for (fam, _) in FAMILIES {
        for server in SERVERS {
            if let Some(why) = not_in_ci(fam, server) {
                let t = table(server);
                let row = healthy.iter().find(|r| r[0] == fam.name).unwrap();
                assert_eq!(row[t.healthy_col], why, "{} / {server:?}", fam.name);
                for r in faults.iter().filter(|r| r[0] == short_name(fam)) {
                    assert_eq!(r[t.fault_col], why, "{} / {server:?}", fam.name);
                }
            }
        }
    }
}

/// llama-server's own `/metrics` (`--metrics`), read the way `bench --mode capacity` reads it:
/// the scrape is recognised as llama.cpp's, its generated-token counter agrees with the
/// client's `usage` over one step (a disagreement would be a note), and its slot gauges are
/// read before, during and after the step. Opt-in with the column: the build is llama.cpp's.
#[cfg(feature = "llama-server")]
#[test]
fn llama_server_metrics_agree_with_the_client() {
    let model = Path::new(REPO).join("models/tiny-chat");
    let running = start_llama_server(
        &llama_server_binary(),
        &model.join("model.gguf"),
        &["--metrics"],
    )
    .expect("llama-server starts");
    let url = running.url().unwrap().to_string();
    let tmp = tempfile::tempdir().unwrap();
    let (code, out, err) = chatgate(
        &[
            "init",
            "suite.toml",
            "--model",
            model.to_str().unwrap(),
            "--target",
            &url,
            "--stack",
            "llama.cpp",
        ],
        tmp.path(),
    );
    assert_eq!(code, 0, "init: {out}{err}");
    let step = crate::common::server_metrics::one_capacity_step(tmp.path(), &url, 4);
    assert_eq!(step["requests"], 4, "{step}");
    assert_eq!(
        step["notes"],
        json!([]),
        "client and server disagree: {step}"
    );
    let server = &step["server"];
    assert_eq!(server["stack"], "llamacpp", "{server}");
    let generated = server["generation_tokens"]
        .as_f64()
        .expect("tokens_predicted_total");
    assert!(generated >= 4.0, "{server}");
    assert!(
        server["timeline"].as_array().unwrap().len() >= 3,
        "{server}"
    );
}

/// One test per family × server (test names: `family_matrix::<family>::<server>`), so that the
/// matrix runs two cells at a time and one cell runs alone:
/// `cargo nextest run --release -E 'test(family_matrix::qwen25::)'`.
macro_rules! family_tests {
    ($($module:ident: $family:expr => [$($server:ident),* $(,)?];)*) => {
        $(
            mod $module {
                #[allow(unused_imports)]
                use super::*;
                $(
                    #[test]
                    fn $server() {
                        matrix_cell(&$family, server_named(stringify!($server)));
                    }
                )*
                #[cfg(feature = "llama-server")]
                #[test]
                fn llama_server() {
                    matrix_cell(&$family, Server::LlamaCpp);
                }
            }
        )*
    };
}

fn server_named(name: &str) -> Server {
    match name {
        "in_process" => Server::InProcess,
        "chatgate_serve" => Server::Serve,
        "llama_cpp_python" => Server::LlamaCppPython,
        "transformers_serve" => Server::TransformersServe,
        other => panic!("no server {other}"),
    }
}

family_tests! {
    tinyllama: FAMILIES[0].0 => [in_process, chatgate_serve, llama_cpp_python, transformers_serve];
    mistral_v03: FAMILIES[1].0 => [in_process, chatgate_serve, llama_cpp_python, transformers_serve];
    phi3_files_only: FAMILIES[2].0 => [in_process, chatgate_serve, llama_cpp_python, transformers_serve];
    phi3: FAMILIES[3].0 => [in_process, chatgate_serve, llama_cpp_python, transformers_serve];
    qwen25: FAMILIES[4].0 => [in_process, chatgate_serve, llama_cpp_python, transformers_serve];
    qwen3_arch: FAMILIES[5].0 => [in_process, chatgate_serve, llama_cpp_python, transformers_serve];
    smollm2_chatml: FAMILIES[6].0 => [in_process, chatgate_serve, llama_cpp_python, transformers_serve];
    phi35_template: FAMILIES[7].0 => [in_process, chatgate_serve, llama_cpp_python, transformers_serve];
    mistral_nemo_template: FAMILIES[8].0 => [in_process, chatgate_serve, llama_cpp_python, transformers_serve];
    // llama-cpp-python: not in CI (not_in_ci says why; the page's cell says the same).
    gemma2: FAMILIES[9].0 => [in_process, chatgate_serve, transformers_serve];
    // llama-cpp-python: not in CI, as gemma2.
    gemma3: FAMILIES[10].0 => [in_process, chatgate_serve, transformers_serve];
}
