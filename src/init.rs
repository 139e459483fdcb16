//! `chatgate init`: from "my model directory" to a suite that passes, without writing the suite,
//! the prompts or the SFT golden rows by hand.
//!
//! Beside SUITE.toml it writes the suite (every key commented), `<name>.prompts.jsonl`,
//! `<name>.sft.jsonl` and `<name>.lock.json`. The golden rows come from the user's trainer when
//! `--sft` carries `input_ids`; otherwise chatgate renders them the way transformers (the
//! trainer's stack) would and the suite says so — they then prove the serving stack matches
//! transformers, not that it matches the trainer. Nothing that exists is overwritten.
use std::path::{Component, Path, PathBuf};

use serde_json::{json, Value};

use crate::artifacts::ModelDir;
use crate::error::{Error, Result};
use crate::stack::Stack;

#[derive(Debug, Clone)]
pub struct Options {
    pub suite: PathBuf,
    pub model: PathBuf,
    pub target: Option<String>,
    pub sft: Option<PathBuf>,
    pub stack: Option<Stack>,
    /// The stack the `--target` server's routes reveal, and the evidence (when `stack` is not
    /// given).
    pub detected: Option<(Stack, String)>,
    /// The name the server serves the model under (`GET /v1/models`, asked by the CLI), when
    /// it lists exactly one.
    pub served_model: Option<String>,
}

/// What was written.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Written {
    pub suite: PathBuf,
    pub prompts: PathBuf,
    pub sft: PathBuf,
    pub lock: PathBuf,
    /// "captured" (from --sft's input_ids) or "rendered" (by chatgate).
    pub sft_origin: String,
    pub prompt_count: usize,
    pub sft_rows: usize,
    pub notes: Vec<String>,
}

/// SFT rows rendered without `--sft`: short chats of the shapes a chat model is trained on.
fn builtin_conversations(system: bool) -> Vec<Value> {
    let mut out = vec![
        json!([{"role": "user", "content": "What is the capital of France?"},
               {"role": "assistant", "content": "The capital of France is Paris."}]),
        json!([{"role": "user", "content": "Name a colour."},
               {"role": "assistant", "content": "Blue."},
               {"role": "user", "content": "Another one?"},
               {"role": "assistant", "content": "Green."}]),
        json!([{"role": "user", "content": "Write a haiku about the sea."},
               {"role": "assistant", "content": "Waves fold into foam,\nsalt wind carries gull voices,\nthe tide keeps its time."}]),
        json!([{"role": "user", "content": "Hi!"},
               {"role": "assistant", "content": "Hello! How can I help you today?"}]),
    ];
    if system {
        out.push(json!([{"role": "system", "content": "You answer in one short sentence."},
                        {"role": "user", "content": "Why is the sky blue?"},
                        {"role": "assistant", "content": "Air scatters blue light more than red."}]));
    }
    out
}

/// Replay prompts without `--sft`: single and multi-turn, a system prompt when the template
/// takes one, a stop string, and a seeded sampled prompt.
fn builtin_prompts(system: bool) -> Vec<Value> {
    let mut out = vec![
        json!({"id": "greeting", "prompt": "Hi! Who are you?", "tags": ["single-turn"]}),
        json!({"id": "capital", "prompt": "What is the capital of France?", "tags": ["single-turn"]}),
        json!({"id": "multi-turn", "messages": [
            {"role": "user", "content": "Name a colour."},
            {"role": "assistant", "content": "Blue."},
            {"role": "user", "content": "Another one?"}], "tags": ["multi-turn"]}),
        json!({"id": "stop-string", "prompt": "Count from one to ten, in words.", "stop": ["five"], "tags": ["stop"]}),
        json!({"id": "sampled", "prompt": "Write a short poem about rain.", "temperature": 0.8, "seed": 7, "tags": ["sampled"]}),
    ];
    if system {
        out.push(json!({"id": "system-prompt", "messages": [
            {"role": "system", "content": "You answer in one short sentence."},
            {"role": "user", "content": "Why is the sky blue?"}], "tags": ["system"]}));
    }
    out
}

pub fn init(o: &Options) -> Result<Written> {
    let suite = &o.suite;
    if suite.extension().is_none_or(|e| e != "toml") {
        return Err(Error::in_file(suite, "is not a .toml path")
            .hint("name the suite file, e.g. suites/my-model.toml"));
    }
    let name = suite
        .file_stem()
        .and_then(|s| s.to_str())
        .filter(|s| crate::files::valid_id(s))
        .ok_or_else(|| {
            Error::in_file(suite, "the file name must be letters, digits, '-', '_' or '.' (it names the suite's folders)")
        })?
        .to_string();
    let dir = match suite.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let prompts_path = dir.join(format!("{name}.prompts.jsonl"));
    let sft_path = dir.join(format!("{name}.sft.jsonl"));
    let lock_path = dir.join(format!("{name}.lock.json"));
    for p in [suite, &prompts_path, &sft_path, &lock_path] {
        if p.exists() {
            return Err(Error::in_file(
                p,
                "already exists; chatgate init never overwrites a suite",
            )
            .hint("choose another suite name, or remove the old suite's files first"));
        }
    }
    let model = ModelDir::open(&o.model)?;
    // The trainer's side: transformers for a Hugging Face directory, llama.cpp for a lone GGUF.
    let sft_stack = if model.root.is_dir() {
        Stack::Transformers
    } else {
        Stack::LlamaCpp
    };
    let mut pipeline = crate::chain::run::context::model_pipeline(&model, sft_stack)?
        .ok_or_else(|| crate::chain::run::context::no_pipeline(&model, "render a chat with"))?;
    // A template that prints the date renders today's: the rows are made at today, and the
    // suite pins today so that they (and the snapshots) still hold tomorrow.
    pipeline.now = Some(crate::clock::now().date().and_time(chrono::NaiveTime::MIN));
    let dates = crate::chain::run::dates::TemplateDates::of(&pipeline);
    let pin = dates
        .prints_date()
        .then(|| (pipeline.now, dates.describe()));
    let system = takes_system(&pipeline);
    let mut notes = Vec::new();
    if !system {
        notes.push(
            "the template rejects or drops a system message: no system prompt in the prompts"
                .into(),
        );
    }

    let (sft_rows, sft_origin, sft_prompts) = sft_rows(o, &pipeline, system, &mut notes)?;
    let mut prompts = if sft_prompts.is_empty() {
        builtin_prompts(system)
    } else {
        sft_prompts
    };
    prompts.extend(framing_probes(&pipeline, &prompts, &mut notes));

    std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
    let jsonl = |rows: &[Value]| {
        rows.iter()
            .map(|r| r.to_string() + "\n")
            .collect::<String>()
    };
    crate::files::write_atomic(&prompts_path, jsonl(&prompts).as_bytes())?;
    crate::files::write_atomic(&sft_path, jsonl(&sft_rows).as_bytes())?;
    let model_rel = relative(&dir, &o.model);
    let pin = pin.and_then(|(at, what)| Some((crate::clock::show_pin(&at?), what)));
    let text = suite_text(&name, &model_rel, &model, o, &sft_origin, pin.as_ref());
    crate::files::write_atomic(suite, text.as_bytes())?;

    // The lock pins what the suite serves now.
    let loaded = crate::suite::Suite::load(suite)?;
    let template = crate::chain::run::context::serving_template(&loaded, &model)?;
    crate::chain::run::lock::Lock::of(&model, template.as_ref())?.write(&lock_path)?;
    Ok(Written {
        suite: suite.clone(),
        prompts: prompts_path,
        sft: sft_path,
        lock: lock_path,
        sft_origin,
        prompt_count: prompts.len(),
        sft_rows: sft_rows.len(),
        notes,
    })
}

/// The probes a template's framing calls for, so that a user's first suite gates the
/// reasoning and tool-call boundary: a prompt that offers a tool when the template frames
/// calls (the model writes its call in its own framing; server.tool-call-parse judges the
/// server's parse of it), and one that invites reasoning when it frames reasoning. Skipped
/// where the prompts (`--sft`) already have one.
fn framing_probes(
    p: &crate::chain::run::context::Pipeline,
    prompts: &[Value],
    notes: &mut Vec<String>,
) -> Vec<Value> {
    let framing = crate::template::framing::derive(&p.template, &p.special);
    let format = crate::template::reply::CallFormat::of_source(p.template.source());
    let mut out = Vec::new();
    let frames_calls = framing.tools.call.is_some() || format.is_some();
    let has_tools = prompts.iter().any(|r| {
        r.get("tools")
            .and_then(Value::as_array)
            .is_some_and(|t| !t.is_empty())
    });
    if framing.tools.offered && frames_calls && !has_tools {
        out.push(json!({"id": "tool-call", "messages": [
            {"role": "user", "content": "What is the weather in Paris right now? Use the get_weather tool."}],
            "tools": [{"type": "function", "function": {
                "name": "get_weather",
                "description": "The current weather in a city",
                "parameters": {"type": "object",
                    "properties": {"city": {"type": "string", "description": "The city's name"}},
                    "required": ["city"]}}}],
            "max_tokens": 64, "tags": ["tools"]}));
        notes.push("the template frames tool calls: a `tool-call` prompt offers a tool (server.tool-call-parse judges the server's parser on it)".into());
    }
    let has_reasoning = prompts.iter().any(|r| {
        r.get("tags")
            .and_then(Value::as_array)
            .is_some_and(|t| t.iter().any(|t| t == "reasoning"))
    });
    if framing.reasoning.is_some() && !has_reasoning {
        out.push(json!({"id": "reasoning",
            "prompt": "Is 221 a prime number? Think it through, then answer yes or no.",
            "max_tokens": 96, "tags": ["reasoning"]}));
        notes.push("the template frames reasoning: a `reasoning` prompt invites it (its snapshot keeps the reasoning apart from the answer)".into());
    }
    out
}

/// The template renders a system message's content (it neither raises nor drops it).
fn takes_system(p: &crate::chain::run::context::Pipeline) -> bool {
    let marker = "chatgate-system-marker";
    let msgs = [
        json!({"role": "system", "content": marker}),
        json!({"role": "user", "content": "Hi"}),
    ];
    p.render(&msgs, None, true)
        .is_ok_and(|r| r.text.contains(marker))
}

/// The golden rows, where they came from, and replay prompts taken from them.
fn sft_rows(
    o: &Options,
    p: &crate::chain::run::context::Pipeline,
    system: bool,
    notes: &mut Vec<String>,
) -> Result<(Vec<Value>, String, Vec<Value>)> {
    let Some(path) = &o.sft else {
        let rows = builtin_conversations(system)
            .into_iter()
            .enumerate()
            .map(|(i, m)| render_row(p, &format!("chat-{}", i + 1), &m, None))
            .collect::<Result<Vec<_>>>()?;
        return Ok((rows, "rendered".into(), vec![]));
    };
    let text = crate::error::read_to_string(path)?;
    let mut rows = Vec::new();
    let mut prompts = Vec::new();
    let mut captured = true;
    for (i, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let v: Value = serde_json::from_str(line)
            .map_err(|e| Error::in_file(path, format!("line {}: not JSON: {e}", i + 1)))?;
        let messages = v["messages"].as_array().cloned().ok_or_else(|| {
            Error::in_file(path, format!("line {}: no \"messages\" list", i + 1)).hint(
                "each line is {\"messages\": [...], \"input_ids\": [...]} (input_ids optional)",
            )
        })?;
        let id = v["id"]
            .as_str()
            .map_or_else(|| format!("sft-{}", i + 1), str::to_string);
        let tools = v["tools"].as_array().cloned();
        let row = match v["input_ids"].as_array() {
            Some(ids) => {
                let mut r = json!({"id": id, "messages": messages, "input_ids": ids});
                if let Some(m) = v.get("assistant_mask").filter(|m| m.is_array()) {
                    r["assistant_mask"] = m.clone();
                }
                if let Some(t) = &tools {
                    r["tools"] = json!(t);
                }
                r
            }
            None => {
                captured = false;
                render_row(p, &id, &Value::Array(messages.clone()), tools.as_deref())?
            }
        };
        rows.push(row);
        if prompts.len() < 8 {
            if let Some(upto) = messages.iter().position(|m| m["role"] == "user") {
                prompts
                    .push(json!({"id": format!("sft-{}", i + 1), "messages": messages[..=upto]}));
            }
        }
        if rows.len() >= 10_000 {
            notes.push("the SFT file has more than 10,000 rows: the first 10,000 are used".into());
            break;
        }
    }
    if rows.is_empty() {
        return Err(Error::in_file(path, "has no rows"));
    }
    let origin = if captured { "captured" } else { "rendered" };
    if !captured {
        notes.push(format!(
            "{}: rows without input_ids were rendered by chatgate",
            path.display()
        ));
    }
    Ok((rows, origin.into(), prompts))
}

fn render_row(
    p: &crate::chain::run::context::Pipeline,
    id: &str,
    messages: &Value,
    tools: Option<&[Value]>,
) -> Result<Value> {
    let msgs = messages.as_array().cloned().unwrap_or_default();
    let r = p
        .render(&msgs, tools, false)
        .map_err(|e| Error::input(format!("the chat template fails on conversation {id}: {e}")))?;
    let ids = p.ids(&r.text)?;
    let mut row = json!({"id": id, "messages": msgs, "input_ids": ids});
    if let Some(t) = tools {
        row["tools"] = json!(t);
    }
    Ok(row)
}

/// `to` relative to `from` (both made absolute), for paths written into the suite.
fn relative(from: &Path, to: &Path) -> String {
    let abs = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let (from, to) = (abs(from), abs(to));
    let f: Vec<Component> = from.components().collect();
    let t: Vec<Component> = to.components().collect();
    let common = f.iter().zip(&t).take_while(|(a, b)| a == b).count();
    if common == 0 {
        return to.display().to_string();
    }
    let mut out = PathBuf::new();
    for _ in common..f.len() {
        out.push("..");
    }
    for c in &t[common..] {
        out.push(c);
    }
    let s = out.display().to_string();
    if s.is_empty() {
        ".".into()
    } else {
        s
    }
}

fn toml_str(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

fn suite_text(
    name: &str,
    model_rel: &str,
    model: &ModelDir,
    o: &Options,
    sft_origin: &str,
    pin: Option<&(String, String)>,
) -> String {
    let mut t = format!(
        "# chatgate suite for {model_rel}, written by `chatgate init`. Paths are relative to this file.\n\
         # Accept the first snapshots and latency baseline, then gate:\n\
         #   chatgate gate {name}.toml --update    (review what it records)\n\
         #   chatgate gate {name}.toml\n\
         # Every key is documented in chatgate's suites/example.toml.\n\
         name = {}\n\n\
         [model]\n\
         # The model directory (Hugging Face layout) or .gguf file the server serves.\n\
         dir = {}\n\
         # Whether the server adds the tokenizer's special tokens to the rendered prompt (false for\n\
         # chat endpoints of vLLM, SGLang, TGI; llama.cpp stacks decide for themselves).\n\
         add_special_tokens = false\n",
        toml_str(name),
        toml_str(model_rel),
    );
    if let Some((day, what)) = pin {
        t.push_str(&format!(
            "# The chat template prints the date ({what}): the golden rows and snapshots are made at\n\
             # this day, offline checks render it, and servers that take chat_template_kwargs are sent it.\n\
             # Change it only with the rows and snapshots (`chatgate gate {name}.toml --update`).\n\
             template_date = {}\n",
            toml_str(day)
        ));
    }
    t.push_str("\n[sft]\n");
    if sft_origin == "captured" {
        t.push_str("# The ids your training pipeline produced (from --sft): the serving stack must feed the same.\n");
    } else {
        t.push_str(
            "# RENDERED BY CHATGATE, NOT CAPTURED FROM YOUR TRAINER: these ids are what transformers'\n\
             # apply_chat_template gives for the model's own template, so template.parity proves the\n\
             # serving stack matches transformers, not your SFT data. Capture real rows from your trainer\n\
             # (TRL: apply_chat_template(messages, tokenize=True, return_dict=True,\n\
             # return_assistant_tokens_mask=True)), one {\"messages\", \"input_ids\", \"assistant_mask\"} per line,\n\
             # and rerun `chatgate init --sft FILE` or replace this file.\n",
        );
    }
    t.push_str(&format!(
        "golden = {}\n\n",
        toml_str(&format!("{name}.sft.jsonl"))
    ));
    t.push_str(&generation_section(model));
    t.push_str(&format!(
        "[lock]\n# Pins the weights, tokenizer and template; `chatgate lock {name}.toml --update` accepts a change.\n\
         path = {}\n\n",
        toml_str(&format!("{name}.lock.json"))
    ));
    t.push_str("[target]\n");
    match &o.target {
        Some(url) => t.push_str(&format!(
            "# The server under test (--target on the command line overrides it).\nurl = {}\n",
            toml_str(url)
        )),
        None => t.push_str(
            "# No url: the model runs in-process (candle). Point it at a server with\n\
             # url = \"http://127.0.0.1:8000\" or `chatgate gate --target URL`.\n",
        ),
    }
    let (served, why) = served_model_name(o, model_rel, name);
    t.push_str(&format!(
        "# The `model` field of every request ({why}).\nmodel = {}\n",
        toml_str(&served)
    ));
    let stack = o.stack.or(o.detected.as_ref().map(|(s, _)| *s));
    match (o.stack, &o.detected) {
        (Some(s), _) => t.push_str(&format!(
            "# The serving stack whose ids chatgate predicts.\nstack = {}\n",
            toml_str(&s.to_string())
        )),
        (None, Some((s, why))) => t.push_str(&format!(
            "# The serving stack whose ids chatgate predicts: detected by `chatgate init` ({why}).\nstack = {}\n",
            toml_str(&s.to_string())
        )),
        (None, None) => t.push_str(
            "# The serving stack (transformers, vllm, tokenizers, llama.cpp, llama-cpp-python): detected from the\n\
             # server's routes when unset.\n# stack = \"transformers\"\n",
        ),
    }
    if let Some((why, body)) = stack.and_then(|s| s.profile().extra_body) {
        t.push_str(&format!("# {why}\nextra_body = {body}\n"));
    }
    t.push_str("# connect_timeout_s = 5.0\n# read_timeout_s = 30.0\n# total_timeout_s = 120.0\n\n");
    if o.target.is_some() {
        t.push_str(&reference_section(model, model_rel));
    }
    t.push_str(&format!(
        "[server]\n# Online probes (defaults shown).\n# probes = 4\n# repeats = 3\n# concurrency = 2\n# max_tokens = 24\n\
         # The long prompt's length (default: the checkpoint's context, at most 4096; 0: none).\n# long_prompt_tokens = 4096\n\
         # Sampled requests through the reasoning and tool-call parsers, and the failed share allowed.\n\
         # sampled_runs = 20\n# sampled_allowance = 0.2\n\n\
         [replay]\n# Prompts replayed against reviewed snapshots.\nprompts = {}\nsnapshots = {}\n\
         # comparator = \"exact\"\n# max_tokens = 48\n\n\
         [latency]\n# Closed-loop latency against the baseline recorded by --update.\nrepeats = 3\nconcurrency = 1\nwarmup = 1\n\
         # tolerance = 1.0\n# min_regression_ms = {{ ttft = 50, tpot = 10, e2el = 100 }}\n\
         # What an INCONCLUSIVE comparison does (its interval straddles the allowance): warn or fail.\n# inconclusive = \"warn\"\n\
         # SLOs (ms) for load and `bench --mode capacity`, the share of requests that must meet them,\n\
         # and the capacity drop allowed against a saved search.\n\
         # slo = {{ ttft = 2000, tpot = 200, e2el = 30000 }}\n# min_slo_attainment = 0.9\n# capacity_drop = 0.1\n",
        toml_str(&format!("{name}.prompts.jsonl")),
        toml_str(&format!("snapshots/{name}")),
    ));
    t
}

/// `[generation]`: the sampling defaults the model's generation_config.json carries now.
/// The `model` field requests carry, and where it came from. A server names what it serves:
/// the one id its `/v1/models` lists; else the model path as given, which is what vLLM and
/// `transformers serve` answer to when started on a local folder (and what they match exactly:
/// `transformers serve DIR` refuses any other name with a 400); in-process, the folder's name.
fn served_model_name(o: &Options, model_rel: &str, suite: &str) -> (String, &'static str) {
    if let Some(m) = &o.served_model {
        return (m.clone(), "the model the server lists at /v1/models");
    }
    if o.target.is_some() {
        return (
            o.model.to_string_lossy().into_owned(),
            "the server lists none at /v1/models: vLLM and `transformers serve` name a local model by the path it was started with; use the server's --served-model-name if it has one",
        );
    }
    let stem = Path::new(model_rel)
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| suite.to_string());
    (stem, "the in-process model answers to any name")
}

fn generation_section(model: &ModelDir) -> String {
    let mut t = String::from(
        "[generation]\n# The sampling defaults the serving files must keep carrying (servers apply them silently).\n",
    );
    let Some(g) = &model.generation_config else {
        t.push_str("# (the model ships no generation_config.json)\n# temperature = 0.7\n\n");
        return t;
    };
    let mut any = false;
    if let Some(v) = g.do_sample {
        t.push_str(&format!("do_sample = {v}\n"));
        any = true;
    }
    for (k, v) in [
        ("temperature", g.temperature),
        ("top_p", g.top_p),
        ("min_p", g.min_p),
        ("repetition_penalty", g.repetition_penalty),
    ] {
        if let Some(v) = v {
            t.push_str(&format!("{k} = {}\n", toml::Value::Float(v)));
            any = true;
        }
    }
    if let Some(k) = g.top_k {
        t.push_str(&format!("top_k = {k}\n"));
        any = true;
    }
    if let Some(m) = g.max_new_tokens {
        t.push_str(&format!("max_new_tokens = {m}\n"));
        any = true;
    }
    if !any {
        t.push_str("# (generation_config.json sets no sampling defaults)\n");
    }
    t.push('\n');
    t
}

/// `[reference]` for a suite with a server target: the model itself, run in-process, when the
/// candle target runs its architecture; else the line commented out with why, and the ways
/// that work (a reference server, or none: the fingerprint then says it is not checked).
fn reference_section(model: &ModelDir, model_rel: &str) -> String {
    let line = format!("model = {}", toml_str(model_rel));
    match crate::endpoint::candle::runs(model) {
        Ok(()) => format!(
            "[reference]\n# The checkpoint the server should serve, run locally for the behavioural fingerprint.\n{line}\n\
             # The long reply it also judges, 32 tokens at a time (0: none).\n# long_reply_tokens = 256\n\n"
        ),
        // The whole table commented out: a [reference] with neither `model` nor `url` is refused.
        Err(why) => format!(
            "# The checkpoint the server should serve, for the behavioural fingerprint. Not run\n\
             # in-process here: {why}.\n\
             # Point it at a deployment of the same checkpoint that teacher-forces (vLLM, SGLang, TGI with\n\
             # --enable-prefill-logprobs, llama-server) with url = \"http://HOST:PORT\"; until then\n\
             # checkpoint.fingerprint says the served checkpoint is not fingerprinted.\n\
             # [reference]\n# {line}\n# url = \"http://HOST:PORT\"\n\n"
        ),
    }
}

#[cfg(test)]
mod reference_tests {
    use super::*;

    /// A copy of tiny-chat's GGUF whose `general.architecture` is `arch` (five letters, patched
    /// in place).
    fn with_architecture(arch: &str, dir: &Path) -> PathBuf {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/tiny-chat/model.gguf");
        let mut bytes = std::fs::read(src).unwrap();
        let key = b"general.architecture";
        let at = bytes.windows(key.len()).position(|w| w == key).unwrap() + key.len();
        // type tag 8 (string), u64 length 5, then the bytes.
        assert_eq!(&bytes[at + 12..at + 17], b"llama");
        bytes[at + 12..at + 17].copy_from_slice(arch.as_bytes());
        let out = dir.join("model.gguf");
        std::fs::write(&out, bytes).unwrap();
        out
    }

    /// A copy of tiny-chat's GGUF whose `blk.0.attn_q.weight` (64 × 64, F32) is declared IQ4_NL
    /// (ggml type 20, an i-quant candle cannot read): its data is smaller than the F32 bytes it
    /// points at, so the header stays consistent.
    fn with_iq4_nl_tensor(dir: &Path) -> PathBuf {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/tiny-chat/model.gguf");
        let mut bytes = std::fs::read(src).unwrap();
        let name = b"blk.0.attn_q.weight";
        let at = bytes.windows(name.len()).position(|w| w == name).unwrap() + name.len();
        // n_dims (u32) 2, two u64 dims, then the type (u32).
        assert_eq!(&bytes[at..at + 4], &2u32.to_le_bytes());
        let ty = at + 4 + 16;
        assert_eq!(&bytes[ty..ty + 4], &0u32.to_le_bytes(), "F32");
        bytes[ty..ty + 4].copy_from_slice(&20u32.to_le_bytes());
        let out = dir.join("model.gguf");
        std::fs::write(&out, bytes).unwrap();
        out
    }

    #[test]
    fn a_gguf_in_a_quantization_candle_cannot_read_gets_no_in_process_reference() {
        let tmp = tempfile::tempdir().unwrap();
        let path = with_iq4_nl_tensor(tmp.path());
        let model = ModelDir::open(&path).unwrap();
        let text = reference_section(&model, "../model.gguf");
        assert!(text.contains("\n# model = \"../model.gguf\"\n"), "{text}");
        assert!(
            text.contains("1 of its 21 tensors are in types candle cannot read (1 IQ4_NL)"),
            "{text}"
        );
        // The gate, given it anyway, names the type before candle tries to open the file
        // (which it cannot: "unknown dtype for tensor 20").
        let err = match crate::endpoint::candle::CandleModel::load(&path) {
            Ok(_) => panic!("an IQ4_NL tensor loaded"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains("(1 IQ4_NL)"), "{err}");
    }

    #[test]
    fn the_reference_init_writes_is_one_the_gate_can_load_or_says_why_not() {
        let tmp = tempfile::tempdir().unwrap();
        let runs = ModelDir::open(&with_architecture("llama", tmp.path())).unwrap();
        let text = reference_section(&runs, "../model.gguf");
        assert!(text.contains("\nmodel = \"../model.gguf\"\n"), "{text}");
        let other = tempfile::tempdir().unwrap();
        let not = ModelDir::open(&with_architecture("jamba", other.path())).unwrap();
        let text = reference_section(&not, "../model.gguf");
        assert!(text.contains("\n# model = \"../model.gguf\"\n"), "{text}");
        assert!(text.contains("general.architecture is \"jamba\""), "{text}");
        assert!(text.contains("url = "), "{text}");
        // Nothing of it is live TOML: a [reference] table with neither key is refused.
        let parsed: toml::Value = toml::from_str(&text).unwrap();
        assert!(parsed.get("reference").is_none(), "{text}");
    }
}
