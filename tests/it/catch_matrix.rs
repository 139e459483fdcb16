//! The catch matrix: every fault class of the bug zoo (BUG-ZOO.md in the design notes) that can be
//! reproduced here, pushed through the real gate, against the boundary and check the gate must
//! blame first — and healthy targets gated five times each, which must raise no error at all.
//!
//! One test per group of rows and per healthy target, run two at a time. Each fails when one of
//! its faults is not caught where it should be, when a healthy run raises an error, or when its
//! rows differ from the block in docs/matrices/catch.md between `<!-- catch-matrix:start -->` and
//! `<!-- catch-matrix:end -->` (`CHATGATE_BLESS=1` rewrites them instead). The real-server rows
//! need llama-cpp-python (`CHATGATE_LLAMA_PYTHON`, see tests/it/common/llama_server.rs): without
//! it they say they skip (a failure in CI).
//!
//! Every case runs on a copy of the suites and snapshots in a temporary folder (with `models/`
//! linked to the repository's), so pending `.snap.new` files never land in the repository; the
//! broken model files are broken copies there too.
use crate::common::gate_workspace;
use crate::common::llama_server;

use std::path::{Path, PathBuf};
use std::time::Instant;

use chatgate::proxy::{self, ProxyOptions};
use chatgate::serve::Fault;
use chatgate::verdict::GateReport;
use gate_workspace::{
    copy_dir, errors, gate, gate_fail_fast, serve_model, serve_tiny_chat, single_threaded,
    Workspace, REPO,
};
use serde_json::{json, Value};

const START: &str = "<!-- catch-matrix:start -->";
const END: &str = "<!-- catch-matrix:end -->";
/// The book page the matrix lives on (between START and END).
const PAGE: &str = "docs/matrices/catch.md";
/// Gate runs per healthy target.
const HEALTHY_RUNS: usize = 5;

/// A served copy of tiny-chat for the file faults.
trait ServedCopy {
    /// A copy of models/tiny-chat at `served/`, which the smoke suite now serves (`[model] dir`
    /// and the candle target). What was trained stays the original: `[reference] model`, the SFT
    /// golden ids and the lock still describe models/tiny-chat.
    fn served_copy(&self) -> PathBuf;
}

impl ServedCopy for Workspace {
    fn served_copy(&self) -> PathBuf {
        let served = self.path("served");
        copy_dir(&Path::new(REPO).join("models/tiny-chat"), &served);
        self.edit_suite(
            "smoke",
            "dir = \"../models/tiny-chat\"",
            "dir = \"../served\"",
        );
        self.edit_suite(
            "smoke",
            "url = \"candle:../models/tiny-chat\"",
            "url = \"candle:../served\"",
        );
        served
    }
}

fn edit_json(path: &Path, f: impl FnOnce(&mut Value)) {
    let mut v: Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("read json")).expect("json");
    f(&mut v);
    std::fs::write(path, serde_json::to_string_pretty(&v).expect("json")).expect("write json");
}

/// One fault reproduction and what the gate made of it.
struct Row {
    class: &'static str,
    how: String,
    boundary: &'static str,
    check: &'static str,
    /// `None`: not run here (llama-cpp-python missing).
    outcome: Option<Outcome>,
}

struct Outcome {
    caught: bool,
    /// What came first instead (for the table) when not caught.
    instead: String,
    /// Every error the run raised (for the failure message).
    errors: Vec<String>,
}

impl Row {
    fn new(class: &'static str, how: String, boundary: &'static str, check: &'static str) -> Row {
        Row {
            class,
            how,
            boundary,
            check,
            outcome: None,
        }
    }
    /// Judge a gate run: caught when it exits 1 and the first broken link is the expected one.
    fn judge(mut self, r: &GateReport) -> Row {
        let first = r
            .findings
            .first_broken()
            .map(|f| (f.boundary.name().to_string(), f.check.to_string()));
        let caught = r.exit_code.code() == 1
            && first.as_ref().map(|(b, c)| (b.as_str(), c.as_str()))
                == Some((self.boundary, self.check));
        let instead = match (&first, r.exit_code.code()) {
            (None, code) => format!("no error (exit {code})"),
            (Some((b, c)), 1) => format!("`{b}` / `{c}` came first"),
            (Some((b, c)), code) => format!("`{b}` / `{c}` came first (exit {code})"),
        };
        self.outcome = Some(Outcome {
            caught,
            instead,
            errors: errors(r),
        });
        self
    }
    fn line(&self) -> String {
        let caught = match &self.outcome {
            Some(o) if o.caught => "✅".to_string(),
            Some(o) => format!("❌ {}", o.instead),
            None => "— not run (llama-cpp-python not installed)".to_string(),
        };
        let cells = [
            self.class.to_string(),
            self.how.clone(),
            format!("`{}`", self.boundary),
            format!("`{}`", self.check),
            caught,
        ];
        let cells: Vec<String> = cells.iter().map(|c| c.replace('|', "\\|")).collect();
        format!("| {} |", cells.join(" | "))
    }
}

/// The BUG-ZOO class, what the fault does, and the boundary and check that must catch it.
fn serve_fault(f: Fault) -> (&'static str, &'static str, &'static str, &'static str) {
    match f {
        Fault::BaseCheckpoint => (
            "wrong checkpoint",
            "generates with models/tiny-base while reporting tiny-chat",
            "checkpoint",
            "checkpoint.fingerprint",
        ),
        Fault::DoubleBos => (
            "double BOS",
            "prepends the bos id (`<|endoftext|>`) to every prompt's ids and counts it in usage",
            "template",
            "template.server-ids",
        ),
        Fault::WrongTemplate => (
            "serving template ≠ SFT format",
            "renders chats with a llama-2 `[INST]` template",
            "template",
            "template.server-ids",
        ),
        Fault::NoGenerationPrompt => (
            "missing / extra generation prompt",
            "renders chats with `add_generation_prompt=false`",
            "template",
            "template.server-ids",
        ),
        Fault::DropEosStop => (
            "stop set misses the turn terminator",
            "does not stop on the eos ids",
            "generation-config",
            "generation.server-stop",
        ),
        Fault::IgnoreTemperature => (
            "server applies generation_config silently",
            "applies generation_config.json's sampling over the request's",
            "generation-config",
            "generation.sampling-honoured",
        ),
        Fault::StreamDropsChunk => (
            "stream ≠ non-stream",
            "drops the 2nd content chunk of every stream",
            "server",
            "server.stream-parity",
        ),
        Fault::UsageLies => (
            "usage lies",
            "reports completion_tokens + 3 and prompt_tokens − 1",
            "server",
            "server.usage",
        ),
        Fault::NoDone => (
            "SSE framing (server API conformance; no BUG-ZOO row)",
            "ends streams without `data: [DONE]`",
            "server",
            "server.sse-done",
        ),
        Fault::SlowFirstToken => (
            "latency regression",
            "sleeps 300 ms before the first token",
            "server",
            "server.latency-ttft",
        ),
        Fault::SlowDecode => (
            "latency regression",
            "sleeps 30 ms per generated token",
            "server",
            "server.latency-tpot",
        ),
        Fault::Nondeterministic => (
            "nondeterminism at temperature 0",
            "picks the 2nd-best token at one random step per request",
            "server",
            "server.determinism",
        ),
        Fault::LongReplyDegrades => (
            "output degrades after N tokens",
            "after 100 tokens generates as if the KV cache had lost all but the last 8 positions (llama.cpp#23717)",
            "checkpoint",
            "checkpoint.fingerprint",
        ),
        Fault::PromptTruncated => (
            "long prompt truncated silently",
            "keeps the last half-context of a longer prompt's ids and counts those (ollama#17889)",
            "server",
            "server.long-prompt",
        ),
        Fault::ReasoningInContent => (
            "reasoning left in content",
            "has no reasoning parser",
            "server",
            "server.reasoning-split",
        ),
        Fault::ReasoningDropped => (
            "reasoning dropped",
            "splits the reasoning out and loses it",
            "server",
            "server.reasoning-split",
        ),
        Fault::ReasoningFieldRenamed => (
            "reasoning in a field the client does not read",
            "writes it to `reasoning` (vLLM's newer name) for a client that reads `reasoning_content`",
            "server",
            "server.reasoning-split",
        ),
        Fault::ToolCallsAsText => (
            "tool calls returned as text",
            "has no tool-call parser",
            "server",
            "server.tool-call-parse",
        ),
        Fault::ToolArgumentsBroken => (
            "tool-call arguments not JSON",
            "writes the arguments as a Python dict",
            "server",
            "server.tool-call-parse",
        ),
        Fault::ToolStreamBroken => (
            "streamed tool-call deltas broken",
            "repeats all the arguments so far in every delta",
            "server",
            "server.tool-call-parse",
        ),
        Fault::ParallelCallsCollapsed => (
            "parallel calls collapsed",
            "keeps the first call of a turn and loses the rest",
            "server",
            "server.tool-call-parse",
        ),
        Fault::ToolValuesStringified => (
            "tool-call values stringified",
            "returns every non-string argument as a string (`\"days\": \"3\"`, vllm#47906)",
            "server",
            "server.tool-call-parse",
        ),
        Fault::ToolValuesTrimmed => (
            "tool-call values not kept byte for byte",
            "strips the whitespace around string arguments (sglang#41317)",
            "server",
            "server.tool-call-parse",
        ),
        Fault::ToolCallCutAtMarker => (
            "tool call ended at a marker inside a value",
            "ends a call at the first `</tool_call>`, even inside a string (ollama#18659)",
            "server",
            "server.tool-call-parse",
        ),
        Fault::UnclosedCallEmpty => (
            "tool call cut by the token limit returned empty",
            "returns a reply cut inside a call as an empty message (ollama PR 17250)",
            "server",
            "server.tool-call-parse",
        ),
        Fault::SampledParseFails => (
            "parser fails on some sampled turns",
            "at temperature above 0, leaves every other reply's call in `content` (llama.cpp#27720); greedy replies are parsed",
            "server",
            "server.sampled-parse",
        ),
        Fault::HistoryReasoningDropped => (
            "reasoning dropped from the request history",
            "drops the assistant's reasoning from the history before rendering it (vllm#42664)",
            "server",
            "server.agent-round-trip",
        ),
        Fault::HistoryRewritten => (
            "history rewritten",
            "renders the history's calls with empty arguments (`{}`)",
            "server",
            "server.agent-round-trip",
        ),
        Fault::ToolChoiceIgnored => (
            "request field accepted but ignored",
            "ignores `tool_choice` (calls come back under \"none\")",
            "server",
            "server.tool-choice",
        ),
        Fault::MaxCompletionTokensIgnored => (
            "request field accepted but ignored",
            "ignores `max_completion_tokens`",
            "server",
            "server.max-completion-tokens",
        ),
        Fault::TemplateKwargsIgnored => (
            "request field accepted but ignored",
            "ignores `chat_template_kwargs`",
            "server",
            "server.template-kwargs",
        ),
        Fault::ResponseFormatIgnored => (
            "structured output ignored",
            "ignores `response_format` (json_schema)",
            "server",
            "server.response-format",
        ),
    }
}

/// Every `chatgate serve --fault`, against the smoke suite over loopback.
/// (The reasoning-parser faults change nothing for tiny-chat, whose template frames no
/// reasoning: tests/it/reasoning_split.rs serves them on a reasoning family's stand-in.)
async fn serve_rows(rows: &mut Vec<Row>) {
    for fault in Fault::ALL
        .into_iter()
        .filter(|f| !f.needs_reasoning() && !f.needs_tool_calls() && f.ignored_field().is_none())
    {
        let t = Instant::now();
        let (class, what, boundary, check) = serve_fault(fault);
        let server = serve_tiny_chat(&[fault]).await;
        let ws = Workspace::new();
        let mut r = gate_fail_fast(ws.suite("smoke"), Some(server.url())).await;
        // On a loaded machine the gate's client falls behind, and the gate then declines to
        // judge latency (a warning that points at server.latency-client): measure again, as a
        // user would, before judging the row — at most twice.
        for _ in 0..2 {
            if !latency_not_judged(&r, check) {
                break;
            }
            eprintln!("serve --fault {fault}: latency not judged (client behind); measuring again");
            r = gate_fail_fast(ws.suite("smoke"), Some(server.url())).await;
        }
        server.stop().await.expect("stop");
        let how = format!("`chatgate serve --fault {fault}`: {what}");
        rows.push(Row::new(class, how, boundary, check).judge(&r));
        eprintln!("serve --fault {fault}: {:.1} s", t.elapsed().as_secs_f64());
    }
}

/// Whether the gate declined to judge `check` because its own client fell behind.
fn latency_not_judged(r: &GateReport, check: &str) -> bool {
    r.findings.0.iter().any(|f| {
        f.check.id == check
            && f.severity == chatgate::verdict::Severity::Warning
            && f.message.contains("not judged")
    })
}

/// A Qwen3 stand-in scripted with `reply`, the healthy `chatgate serve` on it, and a suite `init`
/// wrote against that server whose first probe offers `get_weather(parameters)`, with room for
/// the reply (the workspace lives as long as the returned TempDir).
async fn scripted_tool_suite(
    reply: &str,
    parameters: Value,
) -> (PathBuf, tempfile::TempDir, chatgate::serve::RunningServer) {
    let model = crate::common::families::Family::scripted(&crate::tool_calls::qwen3(), reply).0;
    let ws = tempfile::tempdir().expect("tempdir");
    let healthy = serve_model(&model, &[], None).await;
    let (url, m, d) = (healthy.url(), model.clone(), ws.path().to_path_buf());
    tokio::task::spawn_blocking(move || {
        crate::tool_calls::suite_with_tool(&d, &m, &url, None, parameters);
        crate::tool_calls::probe_budget(&d, 64);
        // None of the faults these suites meet is the parser that fails on sampled turns.
        without_sampled_runs(&d.join("suite.toml"));
    })
    .await
    .expect("init");
    (model, ws, healthy)
}

/// `[server] sampled_runs = 0` in a suite `init` wrote: `server.sampled-parse` (20 requests a
/// gate) is left out, for the gates of faults it does not judge.
fn without_sampled_runs(suite: &Path) {
    let text = std::fs::read_to_string(suite).expect("suite.toml");
    assert!(
        text.contains("# sampled_runs = 20\n"),
        "init's suite changed"
    );
    let text = text.replacen("# sampled_runs = 20\n", "sampled_runs = 0\n", 1);
    std::fs::write(suite, text).expect("suite.toml");
}

/// One fault over a Qwen3 stand-in scripted with `reply` (offering `get_weather(city)`), the
/// suite written against the healthy server; `model` says what the stand-in writes.
async fn scripted_fault_row(rows: &mut Vec<Row>, reply: &str, fault: Fault, model: &str) {
    let city = serde_json::json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]});
    let (standin, ws, healthy) = scripted_tool_suite(reply, city).await;
    healthy.stop().await.expect("stop");
    let (class, what, boundary, check) = serve_fault(fault);
    let server = serve_model(&standin, &[fault], None).await;
    let r = gate_fail_fast(ws.path().join("suite.toml"), Some(server.url())).await;
    server.stop().await.expect("stop");
    let how =
        format!("`chatgate serve --fault {fault}` over a Qwen3 stand-in that {model}: {what}");
    rows.push(Row::new(class, how, boundary, check).judge(&r));
}

/// `parallel-calls-collapsed` needs a model that writes two calls in one turn: the Qwen3
/// stand-in scripted with two `<tool_call>` blocks, probes with room for both.
async fn parallel_call_row(rows: &mut Vec<Row>) {
    let (reply, fault) = (crate::tool_calls::PARALLEL, Fault::ParallelCallsCollapsed);
    scripted_fault_row(rows, reply, fault, "writes two calls").await;
}

/// The history faults need a model that thinks before it calls: its reasoning and its call's
/// arguments are what the client sends back in the agent's second turn.
async fn round_trip_row(rows: &mut Vec<Row>) {
    for fault in [Fault::HistoryReasoningDropped, Fault::HistoryRewritten] {
        let reply = crate::tool_calls::THINK_CALL;
        scripted_fault_row(rows, reply, fault, "thinks, then calls").await;
    }
}

/// The faults that change a call's values: they show only on a call whose values a parser can
/// change.
fn values_fault(f: Fault) -> bool {
    matches!(
        f,
        Fault::ToolValuesStringified | Fault::ToolValuesTrimmed | Fault::ToolCallCutAtMarker
    )
}

/// The value faults over the Qwen3 stand-in scripted with `tool_calls::VALUES` (a padded
/// string, an integer, a `</tool_call>` inside a string), its probe's tool typing `days`.
async fn value_rows(rows: &mut Vec<Row>) {
    let parameters = crate::tool_calls::values_parameters();
    let (model, ws, healthy) = scripted_tool_suite(crate::tool_calls::VALUES, parameters).await;
    let dir = ws.path().to_path_buf();
    // The healthy server keeps all three values: the check passes on it.
    let r = gate(dir.join("suite.toml"), Some(healthy.url())).await;
    healthy.stop().await.expect("stop");
    let parse = r
        .findings
        .0
        .iter()
        .find(|f| f.check.id == "server.tool-call-parse")
        .expect("server.tool-call-parse judged");
    assert_eq!(
        parse.severity,
        chatgate::verdict::Severity::Pass,
        "the healthy server: {}",
        parse.message
    );
    for fault in Fault::ALL.into_iter().filter(|f| values_fault(*f)) {
        let (class, what, boundary, check) = serve_fault(fault);
        let server = serve_model(&model, &[fault], None).await;
        let r = gate_fail_fast(dir.join("suite.toml"), Some(server.url())).await;
        server.stop().await.expect("stop");
        let how = format!(
            "`chatgate serve --fault {fault}` over a Qwen3 stand-in whose call carries \" Paris \", 3 and \"a</tool_call>b\": {what}"
        );
        rows.push(Row::new(class, how, boundary, check).judge(&r));
    }
}

/// The reasoning parser's faults on a reasoning family: the DeepSeek-R1 stand-in of
/// tests/it/reasoning_split.rs (its generation prompt opens `<think>`), with a suite `init`
/// wrote against the healthy `chatgate serve` (without SFT rows: see that file).
async fn reasoning_rows(rows: &mut Vec<Row>) {
    let model = crate::reasoning_split::standin();
    let ws = tempfile::tempdir().expect("tempdir");
    let suite_for = |url: String, stack: Option<&'static str>, name: &str| {
        let dir = ws.path().join(name);
        std::fs::create_dir_all(&dir).expect("mkdir");
        let model = model.clone();
        let suite = dir.join("suite.toml");
        let init = move || crate::reasoning_split::init(&dir, &model, &url, stack);
        (suite, init)
    };
    let healthy = serve_model(&model, &[], None).await;
    let (suite, init) = suite_for(healthy.url(), None, "serve");
    tokio::task::spawn_blocking(init).await.expect("init");
    healthy.stop().await.expect("stop");
    for fault in Fault::ALL.into_iter().filter(|f| f.needs_reasoning()) {
        let (class, what, boundary, check) = serve_fault(fault);
        let server = serve_model(&model, &[fault], None).await;
        let r = gate_fail_fast(suite.clone(), Some(server.url())).await;
        server.stop().await.expect("stop");
        let how = format!("`chatgate serve --fault {fault}` over a DeepSeek-R1 stand-in: {what}");
        rows.push(Row::new(class, how, boundary, check).judge(&r));
    }
    let row = Row::new(
        "reasoning left in content",
        "llama-cpp-python (no reasoning parser) over a DeepSeek-R1 stand-in's GGUF".to_string(),
        "server",
        "server.reasoning-split",
    );
    let Some(python) = llama_server::python() else {
        rows.push(row);
        return;
    };
    let server =
        crate::common::llama_server::start(&python, &model.join("model.gguf"), "model", &[]);
    let (suite, init) = suite_for(server.url.clone(), Some("llama-cpp-python"), "llama");
    tokio::task::spawn_blocking(init).await.expect("init");
    let r = gate_fail_fast(suite, Some(server.url.clone())).await;
    rows.push(row.judge(&r));
}

/// The tool-call parser's faults on a tool-calling family: the scripted Qwen3 stand-in of
/// tests/it/tool_calls.rs (every greedy reply is a `<tool_call>` block), with a suite `init`
/// wrote against the healthy `chatgate serve` and a probe that offers the tool; and
/// llama-cpp-python with its default chat format, which has no tool-call parser.
async fn tool_call_rows(rows: &mut Vec<Row>) {
    let model = crate::tool_calls::standin();
    let ws = tempfile::tempdir().expect("tempdir");
    let suite_for = |url: String, stack: Option<&'static str>, name: &str| {
        let dir = ws.path().join(name);
        std::fs::create_dir_all(&dir).expect("mkdir");
        let model = model.clone();
        let suite = dir.join("suite.toml");
        let init = move || crate::tool_calls::suite_with_tools(&dir, &model, &url, stack);
        (suite, init)
    };
    let healthy = serve_model(&model, &[], None).await;
    let (suite, init) = suite_for(healthy.url(), None, "serve");
    tokio::task::spawn_blocking(init).await.expect("init");
    healthy.stop().await.expect("stop");
    let tool_faults = Fault::ALL
        .into_iter()
        .filter(|f| f.needs_tool_calls() || f.ignored_field().is_some())
        .filter(|f| {
            !matches!(
                f,
                Fault::ParallelCallsCollapsed
                    | Fault::HistoryReasoningDropped
                    | Fault::HistoryRewritten
            ) && !values_fault(*f)
        });
    // The sampled runs (20 requests a gate) judge one fault of these, the parser that fails on
    // sampled turns; the others' gates go without them, in a copy of the same suite.
    let unsampled = ws.path().join("serve-unsampled");
    gate_workspace::copy_dir(suite.parent().expect("the suite's folder"), &unsampled);
    let unsampled = unsampled.join("suite.toml");
    without_sampled_runs(&unsampled);
    for fault in tool_faults {
        let (class, what, boundary, check) = serve_fault(fault);
        let server = serve_model(&model, &[fault], None).await;
        let suite = match fault {
            Fault::SampledParseFails => suite.clone(),
            _ => unsampled.clone(),
        };
        let r = gate_fail_fast(suite, Some(server.url())).await;
        server.stop().await.expect("stop");
        let how = format!("`chatgate serve --fault {fault}` over a Qwen3 stand-in: {what}");
        rows.push(Row::new(class, how, boundary, check).judge(&r));
    }
    parallel_call_row(rows).await;
    value_rows(rows).await;
    round_trip_row(rows).await;
    let row = Row::new(
        "tool calls returned as text",
        "llama-cpp-python (its default chat format: no tool-call parser) over a Qwen3 stand-in's GGUF".to_string(),
        "server",
        "server.tool-call-parse",
    );
    let Some(python) = llama_server::python() else {
        rows.push(row);
        return;
    };
    let server =
        crate::common::llama_server::start(&python, &model.join("model.gguf"), "model", &[]);
    let (suite, init) = suite_for(server.url.clone(), Some("llama-cpp-python"), "llama");
    tokio::task::spawn_blocking(init).await.expect("init");
    let r = gate_fail_fast(suite, Some(server.url.clone())).await;
    rows.push(row.judge(&r));
}

/// A llama-2 chat template, as a fine-tune's files end up with when the wrong base's
/// tokenizer_config.json is copied over.
const LLAMA2_TEMPLATE: &str = "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'system' %}{{ '<<SYS>>\\n' + message['content'] + '\\n<</SYS>>\\n\\n' }}{% else %}{{ ' ' + message['content'] + eos_token }}{% endif %}{% endfor %}";

type Mutation = fn(&Path);

/// Broken copies of models/tiny-chat, served in-process (candle) while the reference, the SFT
/// golden ids and the lock still describe the original.
fn file_faults() -> Vec<(
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    Mutation,
)> {
    vec![
        (
            "wrong checkpoint",
            "one byte of model.safetensors flipped (model.gguf untouched)",
            "checkpoint",
            "checkpoint.weights-hash",
            |d| {
                let p = d.join("model.safetensors");
                let mut bytes = std::fs::read(&p).expect("weights");
                let i = bytes.len() - 100; // inside the last tensor's data
                bytes[i] ^= 0x01;
                std::fs::write(&p, bytes).expect("write weights");
            },
        ),
        (
            "tokenizer version drift",
            "tokenizer.json without its first BPE merge (`Ġ t`); probe corpus v2's English text splits differently",
            "tokenizer",
            "tokenizer.fingerprint",
            |d| {
                edit_json(&d.join("tokenizer.json"), |t| {
                    let merges = t["model"]["merges"].as_array_mut().expect("merges");
                    assert_eq!(merges[0], json!(["Ġ", "t"]));
                    merges.remove(0);
                })
            },
        ),
        (
            "pre-tokenizer / space handling drift",
            "tokenizer.json's ByteLevel pre-tokenizer with `add_prefix_space: true`",
            "tokenizer",
            "tokenizer.fingerprint",
            |d| {
                edit_json(&d.join("tokenizer.json"), |t| {
                    t["pre_tokenizer"]["add_prefix_space"] = json!(true)
                })
            },
        ),
        (
            "double BOS",
            "chat template prefixed with `<|endoftext|>` (config.json's bos_token_id; the SFT ids start without it)",
            "template",
            "template.bos-count",
            |d| {
                edit_json(&d.join("tokenizer_config.json"), |t| {
                    let tpl = t["chat_template"].as_str().expect("template").to_string();
                    t["chat_template"] = json!(format!("<|endoftext|>{tpl}"));
                })
            },
        ),
        (
            "serving template ≠ SFT format",
            "a llama-2 `[INST]` chat template in tokenizer_config.json instead of ChatML",
            "template",
            "template.parity",
            |d| {
                edit_json(&d.join("tokenizer_config.json"), |t| {
                    t["chat_template"] = json!(LLAMA2_TEMPLATE)
                })
            },
        ),
        (
            "stop set misses the turn terminator",
            "eos is `<|endoftext|>` in generation_config.json (`eos_token_id: [0]`), tokenizer_config.json and special_tokens_map.json; turns end with `<|im_end|>`",
            "generation-config",
            "generation.stop-set",
            |d| {
                edit_json(&d.join("generation_config.json"), |g| {
                    g["eos_token_id"] = json!([0])
                });
                edit_json(&d.join("tokenizer_config.json"), |t| {
                    t["eos_token"] = json!("<|endoftext|>")
                });
                edit_json(&d.join("special_tokens_map.json"), |t| {
                    t["eos_token"] = json!("<|endoftext|>")
                });
            },
        ),
        (
            "stop token inside the reply",
            "`+` (id 13) added to generation_config.json's `eos_token_id`",
            "generation-config",
            "generation.stop-inside-reply",
            |d| {
                edit_json(&d.join("generation_config.json"), |g| {
                    g["eos_token_id"] = json!([2, 0, 13])
                })
            },
        ),
        (
            "server applies generation_config silently",
            "generation_config.json `temperature: 1.0` (the suite expects 0.7)",
            "generation-config",
            "generation.defaults",
            |d| {
                edit_json(&d.join("generation_config.json"), |g| {
                    g["temperature"] = json!(1.0)
                })
            },
        ),
    ]
}

async fn file_rows(rows: &mut Vec<Row>) {
    for (class, what, boundary, check, mutate) in file_faults() {
        let t = Instant::now();
        let ws = Workspace::new();
        mutate(&ws.served_copy());
        let r = gate_fail_fast(ws.suite("smoke"), None).await;
        let how = format!("served copy of tiny-chat (in-process): {what}");
        rows.push(Row::new(class, how, boundary, check).judge(&r));
        eprintln!("file fault {class}: {:.1} s", t.elapsed().as_secs_f64());
    }
}

/// The app calls another endpoint than the contract's: recorded through `chatgate proxy` in
/// front of a healthy `chatgate serve`, then gated with `[client] recording`.
async fn client_row(rows: &mut Vec<Row>) {
    let t = Instant::now();
    let server = serve_tiny_chat(&[]).await;
    let ws = Workspace::new();
    let recording = ws.path("client.jsonl");
    let proxy = proxy::start(
        &ProxyOptions {
            upstream: server.url(),
            record: Some(recording.clone()),
            hostile: None,
        },
        "127.0.0.1:0",
    )
    .await
    .expect("the proxy binds");
    let reply = reqwest::Client::new()
        .post(format!("{}/v1/completions", proxy.url()))
        .json(&json!({"model": "tiny-chat", "prompt": "What is 3+4?", "max_tokens": 8, "temperature": 0}))
        .send()
        .await
        .expect("the app's request goes through");
    assert!(reply.status().is_success(), "{}", reply.status());
    proxy.stop().await.expect("stop the proxy");
    let suite = ws.suite("smoke");
    let mut text = std::fs::read_to_string(&suite).expect("suite");
    text.push_str("\n[client]\nrecording = \"../client.jsonl\"\n");
    std::fs::write(&suite, text).expect("write suite");
    let r = gate_fail_fast(suite, Some(server.url())).await;
    server.stop().await.expect("stop");
    let how = "`chatgate proxy --record` in front of a healthy `chatgate serve`; the app posts to `/v1/completions` instead of `/v1/chat/completions`".to_string();
    rows.push(Row::new("client drift", how, "client", "client.endpoint").judge(&r));
    eprintln!("client drift: {:.1} s", t.elapsed().as_secs_f64());
}

async fn start_llama(
    python: &Path,
    gguf: &Path,
    extra: &[&'static str],
) -> llama_server::LlamaServer {
    let (python, gguf, extra) = (python.to_path_buf(), gguf.to_path_buf(), extra.to_vec());
    tokio::task::spawn_blocking(move || {
        crate::common::llama_server::start(&python, &gguf, "tiny-chat", &extra)
    })
    .await
    .expect("llama-cpp-python start task")
}

/// Real faults on a real llama-cpp-python server, gated with suites/llama-cpp-python.toml.
async fn real_rows(rows: &mut Vec<Row>, python: Option<&Path>) {
    let chat_gguf = Path::new(REPO).join("models/tiny-chat/model.gguf");
    let llama2 = Row::new(
        "serving template ≠ SFT format",
        "llama-cpp-python `--chat_format llama-2` over tiny-chat's GGUF".into(),
        "template",
        "template.prompt-tokens",
    );
    let base = Row::new(
        "wrong checkpoint",
        "llama-cpp-python serving models/tiny-base/model.gguf as tiny-chat".into(),
        "checkpoint",
        "checkpoint.fingerprint",
    );
    // llama.cpp stops on every end-of-generation token, and recognises `<|im_end|>` as one by
    // name whatever `eos_token_id` says: pointing eos at `<|endoftext|>` is harmless there (the
    // gate and the real server agree). Pointing it at `+` makes the server cut replies at the
    // first `+`, a metadata-only edit the gate must blame on the stop set, not the checkpoint.
    let eos = Row::new(
        "stop token inside the reply",
        "llama-cpp-python over a copy of tiny-chat's GGUF with `tokenizer.ggml.eos_token_id = 13` (`+`), which the suite serves and locks".into(),
        "generation-config",
        "generation.stop-inside-reply",
    );
    let Some(python) = python else {
        return;
    };

    let t = Instant::now();
    let server = start_llama(python, &chat_gguf, &["--chat_format", "llama-2"]).await;
    let ws = Workspace::new();
    let r = gate_fail_fast(ws.suite("llama-cpp-python"), Some(server.url.clone())).await;
    drop(server);
    rows.push(llama2.judge(&r));
    eprintln!(
        "llama-cpp-python llama-2: {:.1} s",
        t.elapsed().as_secs_f64()
    );

    let t = Instant::now();
    let base_gguf = Path::new(REPO).join("models/tiny-base/model.gguf");
    let server = start_llama(python, &base_gguf, &[]).await;
    let ws = Workspace::new();
    let r = gate_fail_fast(ws.suite("llama-cpp-python"), Some(server.url.clone())).await;
    drop(server);
    rows.push(base.judge(&r));
    eprintln!(
        "llama-cpp-python tiny-base: {:.1} s",
        t.elapsed().as_secs_f64()
    );

    let t = Instant::now();
    let ws = Workspace::new();
    std::fs::create_dir_all(ws.path("patched")).expect("mkdir");
    let patched = ws.path("patched/model.gguf");
    llama_server::gguf_with_eos(&chat_gguf, 13, &patched);
    ws.edit_suite(
        "llama-cpp-python",
        "dir = \"../models/tiny-chat/model.gguf\"",
        "dir = \"../patched/model.gguf\"",
    );
    // The lock pins the healthy file: this is the file the team converted and means to serve.
    let lock = assert_cmd::Command::cargo_bin("chatgate")
        .expect("the chatgate binary")
        .args(["lock", "--update"])
        .arg(ws.suite("llama-cpp-python"))
        .output()
        .expect("chatgate lock runs");
    assert!(
        lock.status.success(),
        "chatgate lock --update failed: {}{}",
        String::from_utf8_lossy(&lock.stdout),
        String::from_utf8_lossy(&lock.stderr)
    );
    let server = start_llama(python, &patched, &[]).await;
    let r = gate_fail_fast(ws.suite("llama-cpp-python"), Some(server.url.clone())).await;
    drop(server);
    rows.push(eos.judge(&r));
    eprintln!(
        "llama-cpp-python eos 13: {:.1} s",
        t.elapsed().as_secs_f64()
    );
}

/// The healthy targets' names in the page's summary line, in order.
const HEALTHY_TARGETS: [&str; 3] = [
    "in-process candle",
    "`chatgate serve` over loopback",
    "llama-cpp-python",
];

/// A healthy target gated `HEALTHY_RUNS` times: every run must exit 0 with no error finding.
fn assert_healthy(target: &str, runs: &[GateReport]) {
    let failures: Vec<String> = runs
        .iter()
        .enumerate()
        .filter(|(_, r)| r.exit_code.code() != 0 || !errors(r).is_empty())
        .map(|(i, r)| {
            format!(
                "healthy {target}, run {i}: exit {}\n  {}",
                r.exit_code,
                errors(r).join("\n  ")
            )
        })
        .collect();
    assert!(
        failures.is_empty(),
        "false alarms on a healthy target:\n{}",
        failures.join("\n\n")
    );
}

/// The page's line under the table: what the healthy tests assert, in numbers.
fn healthy_line() -> String {
    let n = HEALTHY_TARGETS.len();
    format!(
        "Healthy: {} gate runs on {n} targets ({HEALTHY_RUNS} each: {}), 0 error findings (false-alarm rate 0).",
        n * HEALTHY_RUNS,
        HEALTHY_TARGETS.join(", ")
    )
}

/// The page (PAGE) and the byte range of its catch-matrix block (between the marker lines).
fn readme_block() -> (String, std::ops::Range<usize>) {
    let path = Path::new(REPO).join(PAGE);
    let text = std::fs::read_to_string(&path).expect(PAGE);
    let start = text.find(START).expect("the page has the start marker") + START.len() + 1;
    let end = text.find(END).expect("the page has the end marker");
    assert!(
        start <= end,
        "docs/matrices/catch.md's catch-matrix markers are out of order"
    );
    (text, start..end)
}

/// Every row ran and was caught where it should be, and its line is the page's (rewritten
/// there with `CHATGATE_BLESS=1`, under a lock: the matrix's tests run at once).
fn check_rows(rows: &[Row]) {
    let mut problems = Vec::new();
    for r in rows {
        match &r.outcome {
            None => problems.push(format!("{} — {}: not run", r.class, r.how)),
            Some(o) if !o.caught => problems.push(format!(
                "{} — {}: expected {} / {}, {}; errors:\n  {}",
                r.class,
                r.how,
                r.boundary,
                r.check,
                o.instead,
                o.errors.join("\n  ")
            )),
            Some(_) => {}
        }
    }
    let lines: Vec<String> = rows.iter().map(Row::line).collect();
    assert!(
        problems.is_empty(),
        "the catch matrix has failures:\n{}\n\nthis test's rows:\n{}",
        problems.join("\n\n"),
        lines.join("\n")
    );
    let bless = std::env::var_os("CHATGATE_BLESS").is_some_and(|v| v == "1");
    let _lock = bless.then(ReadmeLock::take);
    let (mut readme, block) = readme_block();
    let mut missing = Vec::new();
    for (r, line) in rows.iter().zip(&lines) {
        let current = &readme[block.clone()];
        if current.lines().any(|c| c == line) {
            continue;
        }
        let key = format!(
            "| {} | {} |",
            r.class.replace('|', "\\|"),
            r.how.replace('|', "\\|")
        );
        match (bless, current.lines().find(|c| c.starts_with(&key))) {
            (true, Some(old)) => {
                let at = block.start + current.find(old).unwrap();
                readme.replace_range(at..at + old.len(), line);
            }
            _ => missing.push(line.clone()),
        }
    }
    if bless {
        std::fs::write(Path::new(REPO).join(PAGE), &readme).expect(PAGE);
    }
    assert!(
        missing.is_empty(),
        "these rows are not docs/matrices/catch.md's catch matrix (the block between {START} and {END}); review, then rerun with CHATGATE_BLESS=1 (a new row is added by hand first):\n{}",
        missing.join("\n")
    );
}

/// An exclusive lock beside the page while a test rewrites it.
struct ReadmeLock(std::fs::File);

impl ReadmeLock {
    fn take() -> ReadmeLock {
        use std::os::fd::AsRawFd;
        let f = std::fs::File::create(Path::new(REPO).join(format!("{PAGE}.bless-lock"))).unwrap();
        // SAFETY: flock on a descriptor this struct owns; released when it is dropped.
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

/// The checkpoint boundary at a real model's size: random bf16 weights at SmolLM2-135M's exact
/// shape (30 layers × 576, 9 heads of 64, a 49152-token vocabulary: its real config.json and
/// tokenizer, Qwen2.5's ChatML template; `standin --real-shape`), seed 0 the checkpoint "we
/// trained". Served by the real `chatgate serve` while reporting that checkpoint's identity (as
/// vLLM, SGLang and TGI report none the lock could refute), so only the behaviour can tell.
mod real_shape {
    use super::*;
    use crate::common::families::Family;
    use candle_core::quantized::GgmlDType;
    use candle_core::{DType, Device, Tensor};
    use std::collections::HashMap;

    pub const SHAPE: &str = "SmolLM2-135M's shape";

    fn family() -> Family {
        Family {
            template: Some("Qwen-Qwen2.5-7B-Instruct.jinja"),
            ..Family::corpus("SmolLM2-135M at its real shape", "SmolLM2-135M-Instruct")
        }
    }

    /// The checkpoint (seed 0), the base it was "fine-tuned" from (seed 1), an older step (every
    /// weight a tenth of the way back to the base), and Q8_0 / Q4_0 GGUFs of the checkpoint:
    /// built once beside the stand-in (`families::standins_root()`), reused by every run.
    pub struct Models {
        pub trained: PathBuf,
        pub base: PathBuf,
        pub older: PathBuf,
        pub q8_0: PathBuf,
        pub q4_0: PathBuf,
    }

    pub fn models() -> Models {
        let (trained, _) = family().real_shape(0);
        let (base, _) = family().real_shape(1);
        let derived = trained.with_extension("derived");
        let ready = derived.join("ready");
        let m = Models {
            trained: trained.clone(),
            base: base.clone(),
            older: derived.join("older-step"),
            q8_0: derived.join("q8_0/model-q8_0.gguf"),
            q4_0: derived.join("q4_0/model-q4_0.gguf"),
        };
        if ready.is_file() {
            return m;
        }
        // Built beside, then renamed into place (tests run at once).
        let tmp = tempfile::tempdir_in(trained.parent().expect("standins")).expect("tempdir");
        let out = tmp.path().join("derived");
        older_step(&trained, &base, 0.1, &out.join("older-step"));
        let f32_dir = out.join("f32");
        copy_dir(&trained, &f32_dir);
        chatgate::standin::rewrite_gguf(&f32_dir).expect("GGUF of the checkpoint");
        for (name, dtype) in [("q8_0", GgmlDType::Q8_0), ("q4_0", GgmlDType::Q4_0)] {
            let dir = out.join(name);
            copy_dir(&trained, &dir);
            let _ = std::fs::remove_file(dir.join("model.safetensors"));
            chatgate::standin::requantize_gguf(
                &f32_dir.join("model.gguf"),
                &dir.join(format!("model-{name}.gguf")),
                dtype,
            )
            .expect("requantize");
        }
        std::fs::remove_dir_all(&f32_dir).expect("drop the F32 GGUF");
        crate::common::gate_workspace::publish(&out, &derived, "ready", b"");
        m
    }

    /// Every weight `alpha` of the way from `trained` to `base`, bf16 as the checkpoints ship.
    fn older_step(trained: &Path, base: &Path, alpha: f64, out: &Path) {
        copy_dir(trained, out);
        let load = |d: &Path| {
            candle_core::safetensors::load(d.join("model.safetensors"), &Device::Cpu)
                .expect("weights")
        };
        let (t, b) = (load(trained), load(base));
        let mixed: HashMap<String, Tensor> = t
            .iter()
            .map(|(name, x)| {
                let x32 = x.to_dtype(DType::F32).expect("f32");
                let y32 = b[name].to_dtype(DType::F32).expect("f32");
                let m = ((&y32 - &x32)
                    .expect("sub")
                    .affine(alpha, 0.0)
                    .expect("scale")
                    + &x32)
                    .expect("add");
                (name.clone(), m.to_dtype(DType::BF16).expect("bf16"))
            })
            .collect();
        candle_core::safetensors::save(&mixed, out.join("model.safetensors")).expect("save");
    }

    /// The reference the gate compares with.
    #[derive(Clone, Copy, PartialEq)]
    pub enum Kind {
        /// `lock --fingerprint` where the weights are; the gate runs from a directory with none.
        Recorded,
        /// A real vLLM serving the checkpoint (`[reference] url`), teacher-forcing.
        VllmServer,
        /// The checkpoint's Q8_0 GGUF in-process (`[reference] model`).
        Q8Local,
    }

    impl Kind {
        fn shown(self) -> &'static str {
            match self {
                Kind::Recorded => {
                    "a recorded reference (`lock --fingerprint`; no weights beside the gate)"
                }
                Kind::VllmServer => "vLLM 0.32 as the reference server (`[reference] url`)",
                Kind::Q8Local => "the checkpoint's Q8_0 GGUF as the local reference",
            }
        }
    }

    /// A light suite `init` wrote for the checkpoint (2 probes of 16 tokens, 2 replay prompts,
    /// one latency pass: the fingerprint is what these rows judge), with `kind`'s reference.
    async fn suite(dir: &Path, m: &Models, kind: Kind, url: &str, vllm: Option<&str>) -> PathBuf {
        std::fs::create_dir_all(dir).expect("mkdir");
        let model = match kind {
            Kind::Recorded => {
                // The gate's side holds the model's files without its weights.
                let bare = dir.join("bare");
                copy_dir(&m.trained, &bare);
                let _ = std::fs::remove_file(bare.join("model.safetensors"));
                bare
            }
            _ => m.trained.clone(),
        };
        let (d, t, u) = (dir.to_path_buf(), m.trained.clone(), url.to_string());
        let out = tokio::task::spawn_blocking(move || {
            crate::common::cli::chatgate_in(
                &[
                    "init",
                    "suite.toml",
                    "--model",
                    t.to_str().unwrap(),
                    "--target",
                    &u,
                ],
                &d,
            )
        })
        .await
        .expect("init");
        assert_eq!(out.0, 0, "init: {}{}", out.1, out.2);
        let path = dir.join("suite.toml");
        let mut text = std::fs::read_to_string(&path).expect("suite.toml");
        for (from, to) in [
            ("# probes = 4\n# repeats = 3\n", "probes = 2\nrepeats = 2\n"),
            (
                "# max_tokens = 24\n",
                "max_tokens = 16\nskip = [\"generation.sampling-honoured\"]\n",
            ),
            ("# max_tokens = 48", "max_tokens = 16"),
            // Two windows of the long reply: enough to judge a quantized reference's
            // windows (docs/checkpoint-at-scale.md), at a quarter of the default's cost.
            crate::reasoning_split::LONG_REPLY_64,
            // A 4,096-token prefill of a 135M model in candle on two cores is a minute a
            // gate; 512 tokens still run the check against each reference kind.
            crate::reasoning_split::LONG_PROMPT_512,
            (
                "repeats = 3\nconcurrency = 1\nwarmup = 1",
                "repeats = 1\nconcurrency = 1\nwarmup = 0",
            ),
        ] {
            assert!(text.contains(from), "init's suite changed: {from:?}");
            text = text.replacen(from, to, 1);
        }
        let reference = match (kind, vllm) {
            (Kind::VllmServer, Some(url)) => format!("url = \"{url}\""),
            (Kind::Q8Local, _) => format!("model = {:?}", m.q8_0.to_str().unwrap()),
            _ => format!("model = {:?}", m.trained.to_str().unwrap()),
        };
        text = set_key(&text, "[reference]", "model = ", &reference);
        // Two greedy replay prompts are enough to probe with.
        let prompts = dir.join("suite.prompts.jsonl");
        let rows = std::fs::read_to_string(&prompts).expect("prompts");
        let kept: Vec<&str> = rows
            .lines()
            .filter(|l| !l.contains("\"temperature\""))
            .take(2)
            .collect();
        std::fs::write(&prompts, kept.join("\n") + "\n").expect("prompts");
        std::fs::write(&path, &text).expect("suite.toml");
        let (d, mm) = (dir.to_path_buf(), model.clone());
        if kind == Kind::Recorded {
            let rec = tokio::task::spawn_blocking(move || {
                crate::common::cli::chatgate_in(&["lock", "suite.toml", "--fingerprint"], &d)
            })
            .await
            .expect("lock");
            assert_eq!(rec.0, 0, "lock --fingerprint: {}{}", rec.1, rec.2);
            let text = set_key(
                &text,
                "[model]",
                "dir = ",
                &format!("dir = {:?}", mm.to_str().unwrap()),
            );
            std::fs::write(&path, text).expect("suite.toml");
        }
        path
    }

    /// `line` in place of the first line of `table` that starts with `key`.
    fn set_key(text: &str, table: &str, key: &str, line: &str) -> String {
        let start = text.find(&format!("\n{table}\n")).expect("the table") + table.len() + 2;
        let at = start + text[start..].find(&format!("\n{key}")).map_or(0, |i| i + 1);
        let end = at + text[at..].find('\n').expect("a line");
        assert!(
            text[at..end].starts_with(key),
            "{table} has no {key:?} line"
        );
        format!("{}{line}{}", &text[..at], &text[end..])
    }

    /// One reference kind: the healthy server must raise no fingerprint error, and each
    /// checkpoint fault must be caught first at `checkpoint.fingerprint`.
    pub async fn rows(rows: &mut Vec<Row>, kind: Kind) {
        let m = models();
        let python = match kind {
            Kind::VllmServer => match crate::common::vllm::python() {
                Some(p) => Some(p),
                None => return,
            },
            _ => None,
        };
        let vllm = python
            .as_ref()
            .map(|p| crate::common::vllm::start(p, &m.trained, "model", &[]));
        let tmp = tempfile::tempdir().expect("tempdir");
        let healthy = serve_model(&m.trained, &[], None).await;
        let suite = suite(
            &tmp.path().join("suite"),
            &m,
            kind,
            &healthy.url(),
            vllm.as_ref().map(|v| v.url.as_str()),
        )
        .await;
        // The healthy server's replies are the accepted snapshots (`gate --update`).
        let r = gate_workspace::gate_with(suite.clone(), Some(healthy.url()), true).await;
        healthy.stop().await.expect("stop");
        let f = r
            .findings
            .0
            .iter()
            .find(|f| f.check.id == "checkpoint.fingerprint")
            .expect("fingerprint");
        eprintln!(
            "{}: healthy: {} — {:?}",
            kind.shown(),
            f.message,
            f.evidence.get("agreement")
        );
        assert!(
            f.severity != chatgate::verdict::Severity::Error && r.exit_code.code() == 0,
            "{}: the healthy server: {} {:?}",
            kind.shown(),
            f.message,
            errors(&r)
        );
        for (class, what, weights) in [
            (
                "base weights served instead of the fine-tune",
                "another seed's weights",
                &m.base,
            ),
            (
                "an older step served",
                "every weight a tenth of the way back to the base",
                &m.older,
            ),
            (
                "another quantization served",
                "a Q4_0 GGUF of the checkpoint",
                &m.q4_0,
            ),
        ] {
            let server = serve_model(&m.trained, &[Fault::BaseCheckpoint], Some(weights)).await;
            let r = gate_fail_fast(suite.clone(), Some(server.url())).await;
            server.stop().await.expect("stop");
            if let Some(f) = r
                .findings
                .0
                .iter()
                .find(|f| f.check.id == "checkpoint.fingerprint")
            {
                eprintln!(
                    "{}: {class}: {} — {:?}",
                    kind.shown(),
                    f.message,
                    f.evidence.get("agreement")
                );
            }
            let how = format!(
                "{SHAPE}: `chatgate serve` of {what}, reporting the checkpoint's identity; {}",
                kind.shown()
            );
            rows.push(Row::new(class, how, "checkpoint", "checkpoint.fingerprint").judge(&r));
        }
        drop(vllm);
    }
}

// One test per group of rows (each checks its own lines of the page), so the matrix runs two
// groups at a time and a group runs alone: `cargo nextest run --release -E 'test(catch_matrix::)'`.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_faults() {
    single_threaded();
    let mut rows = Vec::new();
    serve_rows(&mut rows).await;
    check_rows(&rows);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reasoning_faults() {
    single_threaded();
    let mut rows = Vec::new();
    reasoning_rows(&mut rows).await;
    check_rows(&rows);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_call_faults() {
    single_threaded();
    let mut rows = Vec::new();
    tool_call_rows(&mut rows).await;
    check_rows(&rows);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_faults_in_process() {
    single_threaded();
    let mut rows = Vec::new();
    file_rows(&mut rows).await;
    check_rows(&rows);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_fault() {
    single_threaded();
    let mut rows = Vec::new();
    client_row(&mut rows).await;
    check_rows(&rows);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_server_faults() {
    single_threaded();
    let Some(python) = llama_server::python() else {
        return;
    };
    let mut rows = Vec::new();
    real_rows(&mut rows, Some(&python)).await;
    check_rows(&rows);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthy_in_process() {
    single_threaded();
    let ws = Workspace::new();
    let mut runs = Vec::new();
    for _ in 0..HEALTHY_RUNS {
        runs.push(gate(ws.suite("smoke"), None).await);
    }
    assert_healthy(HEALTHY_TARGETS[0], &runs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthy_chatgate_serve() {
    single_threaded();
    let ws = Workspace::new();
    let server = serve_tiny_chat(&[]).await;
    let mut runs = Vec::new();
    for _ in 0..HEALTHY_RUNS {
        runs.push(gate(ws.suite("smoke"), Some(server.url())).await);
    }
    server.stop().await.expect("stop");
    assert_healthy(HEALTHY_TARGETS[1], &runs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthy_llama_cpp_python() {
    single_threaded();
    let Some(python) = llama_server::python() else {
        return;
    };
    let ws = Workspace::new();
    let chat_gguf = Path::new(REPO).join("models/tiny-chat/model.gguf");
    let server = start_llama(&python, &chat_gguf, &[]).await;
    let mut runs = Vec::new();
    for _ in 0..HEALTHY_RUNS {
        runs.push(gate(ws.suite("llama-cpp-python"), Some(server.url.clone())).await);
    }
    drop(server);
    assert_healthy(HEALTHY_TARGETS[2], &runs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoint_at_real_shape_recorded() {
    single_threaded();
    let mut rows = Vec::new();
    real_shape::rows(&mut rows, real_shape::Kind::Recorded).await;
    check_rows(&rows);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoint_at_real_shape_vllm_reference() {
    single_threaded();
    let mut rows = Vec::new();
    real_shape::rows(&mut rows, real_shape::Kind::VllmServer).await;
    if rows.is_empty() {
        return; // vLLM is not installed here (a failure in CI)
    }
    check_rows(&rows);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoint_at_real_shape_q8_0_reference() {
    single_threaded();
    let mut rows = Vec::new();
    real_shape::rows(&mut rows, real_shape::Kind::Q8Local).await;
    check_rows(&rows);
}

/// The page's summary line says what the healthy tests assert.
#[test]
fn readme_healthy_line() {
    let (readme, block) = readme_block();
    let line = healthy_line();
    assert!(
        readme[block].lines().any(|l| l == line),
        "docs/matrices/catch.md's catch matrix lacks the line:\n{line}"
    );
}
