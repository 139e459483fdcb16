//! `server.tool-call-parse` on a tool-calling family: a scripted stand-in of Qwen3 (the
//! Qwen2.5 tokenizer, whose `<tool_call>` is an added token as in Qwen3; Qwen3's template; the
//! qwen3 architecture) whose every greedy reply is a Hermes-style `<tool_call>` block —
//! `chatgate standin --reply`: real weights that write the family's real framing. The healthy
//! `chatgate serve` parses the call as vLLM's hermes parser does, plain and streamed, and
//! passes; `transformers serve`, whose qwen response parser reads `<tool_call>`, passes too;
//! llama-cpp-python with its default chat format (no tool-call parser: the way users run it)
//! returns the call as text and is caught, and it ignores `max_completion_tokens` and
//! `chat_template_kwargs`. `chatgate serve`'s tool faults are catch-matrix rows
//! (tests/it/catch_matrix.rs `tool_call_faults`).
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::common::families::Family;
use crate::common::report_json::finding;
use crate::reasoning_split::{gate, init, Serve};

/// What the stand-in writes, its `<tool_call>` tags the tokenizer's added tokens (spelt with
/// token ids used once each). Real Qwen writes a newline inside the tags and spaces in the
/// JSON; a bigram stand-in cannot: the newline token is the one every prompt ends on (it must
/// lead into the reply, not on inside it), and `": "` has too few spellings for three keys. The
/// parsers read the call either way (vLLM's hermes regex, transformers' `\s*<tool_call>`).
pub(crate) const CALL: &str =
    "<tool_call>{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}</tool_call>";

/// Two calls in one turn: `<tool_call>` written twice (the stand-in reads the token before it
/// to know which call comes next).
pub(crate) const PARALLEL: &str = "<tool_call>{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}</tool_call><tool_call>{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Tokyo\"}}</tool_call>";

/// The suite's `[server] max_tokens`: the probes' budget (default 24 tokens).
pub(crate) fn probe_budget(dir: &Path, tokens: u32) {
    let path = dir.join("suite.toml");
    let text = std::fs::read_to_string(&path).expect("suite.toml");
    assert!(text.contains("\n[server]\n"), "{text}");
    let text = text.replacen(
        "\n[server]\n",
        &format!("\n[server]\nmax_tokens = {tokens}\n"),
        1,
    );
    std::fs::write(&path, text).expect("suite.toml");
}

/// The Qwen3 stand-in that always calls `get_weather` (built once, cached).
pub(crate) fn standin() -> PathBuf {
    qwen3().scripted(CALL).0
}

/// Qwen3 as a stand-in builds it: the Qwen2.5 tokenizer (whose `<tool_call>` is an added token,
/// as in Qwen3), Qwen3's template, the qwen3 architecture.
pub(crate) fn qwen3() -> Family {
    Family {
        template: Some("Qwen-Qwen3.jinja"),
        arch: Some("qwen3"),
        ..Family::corpus(
            "Qwen3: the Qwen2.5 tokenizer, Qwen3's template",
            "Qwen2.5-0.5B-Instruct",
        )
    }
}

/// What the suites here say their client relies on: everything the server's parsers and
/// request fields can break, so each is an error (a key of the `[client]` table `init` ends
/// with).
const RELIES_ON: &str = "relies_on = [\"reasoning\", \"tool_calls\", \"tool_choice\", \"max_completion_tokens\", \"chat_template_kwargs\", \"response_format\"]\n";

/// A call whose values a parser can change: a string with whitespace at its ends, an integer
/// the schema types, and a string holding the call's closing marker (`</tool_call>`, the same
/// added token the call ends with). JSON keeps all three; a parser that scans for the marker
/// (vLLM's hermes regex too), strips values or stringifies them does not.
pub(crate) const VALUES: &str = "<tool_call>{\"name\":\"get_weather\",\"arguments\":{\"city\":\" Paris \",\"days\":3,\"note\":\"a</tool_call>b\"}}</tool_call>";

/// `get_weather`'s parameters for [`VALUES`]: `days` is an integer.
pub(crate) fn values_parameters() -> Value {
    json!({"type": "object", "properties": {
        "city": {"type": "string"},
        "days": {"type": "integer"},
        "note": {"type": "string"},
    }, "required": ["city"]})
}

/// A suite `init` wrote for `model` at `url`, whose first probe offers `get_weather`, and
/// whose client relies on every reasoning, tool and request-field feature.
pub(crate) fn suite_with_tools(dir: &Path, model: &Path, url: &str, stack: Option<&str>) {
    let city =
        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]});
    suite_with_tool(dir, model, url, stack, city);
}

/// [`suite_with_tools`] with `get_weather` taking `parameters`.
pub(crate) fn suite_with_tool(
    dir: &Path,
    model: &Path,
    url: &str,
    stack: Option<&str>,
    parameters: Value,
) {
    init(dir, model, url, stack);
    let suite = dir.join("suite.toml");
    let text = std::fs::read_to_string(&suite).expect("suite.toml");
    std::fs::write(&suite, text + RELIES_ON).expect("suite.toml");
    let path = dir.join("suite.prompts.jsonl");
    let rows = std::fs::read_to_string(&path).expect("prompts");
    let tool = json!({
        "id": "weather-tool",
        "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
        "tools": [{"type": "function", "function": {
            "name": "get_weather",
            "description": "The current weather in a city",
            "parameters": parameters,
        }}],
    });
    std::fs::write(&path, format!("{tool}\n{rows}")).expect("prompts");
}

/// The stand-in's greedy reply is the call, to any prompt, and ends on the turn terminator:
/// the framing is the model's, byte for byte (read back through the real server without a
/// tool parser, which returns it as text).
#[test]
fn the_scripted_standin_writes_the_call() {
    let model = standin();
    let server = Serve::start(&model, &["tool-calls-as-text"]);
    let url = format!("{}/v1/chat/completions", server.url);
    let reply: Value = tokio::runtime::Runtime::new()
        .expect("runtime")
        .block_on(async {
            reqwest::Client::new()
                .post(url)
                .json(&json!({
                    "model": "model",
                    "messages": [{"role": "user", "content": "Hi"}],
                    "temperature": 0,
                    "max_tokens": 64,
                }))
                .send()
                .await?
                .json()
                .await
        })
        .expect("a reply");
    let choice = &reply["choices"][0];
    assert_eq!(choice["message"]["content"], CALL, "{reply}");
    assert_eq!(choice["finish_reason"], "stop", "{reply}");
}

/// The healthy `chatgate serve` parses the call the model wrote: `tool_calls` with JSON
/// arguments, plain and streamed, `content` null, finish_reason `tool_calls`; the gate passes,
/// and replays against the snapshot it accepted (the call's random id left out).
#[test]
fn chatgate_serve_parses_the_call_the_model_wrote() {
    let model = standin();
    let server = Serve::start(&model, &[]);
    let dir = tempfile::tempdir().expect("tempdir");
    suite_with_tools(dir.path(), &model, &server.url, None);
    // The latency stage is not what this test judges (the chain and the replay are).
    crate::common::gate_workspace::without_latency(&dir.path().join("suite.toml"));
    // Accept the snapshots (the call with its arguments as JSON), then replay against them.
    let (code, _) = gate(dir.path(), &server.url, true);
    assert_eq!(code, 0);
    let snapshot = std::fs::read_dir(dir.path().join("snapshots/suite"))
        .expect("snapshots")
        .map(|e| std::fs::read_to_string(e.expect("entry").path()).expect("snapshot"))
        .find(|s| s.contains("tool_calls:"))
        .expect("a snapshot with the call");
    assert!(
        snapshot.contains(r#""arguments":{"city":"Paris"}"#),
        "{snapshot}"
    );
    let (code, report) = gate(dir.path(), &server.url, false);
    let f = finding(&report, "server.tool-call-parse");
    assert_eq!(f["severity"], "pass", "{f}");
    // It has no `/v1/responses`: said, not counted against it.
    let parity = finding(&report, "server.responses-parity");
    assert_eq!(parity["severity"], "info", "{parity}");
    assert!(
        parity["message"]
            .as_str()
            .unwrap()
            .contains("no `/v1/responses`"),
        "{parity}"
    );
    assert!(
        f["evidence"]["replies"]
            .as_str()
            .unwrap()
            .contains(": 2 with their calls parsed"),
        "{f}"
    );
    // Sampled at the suite's settings, every reply's call is parsed: 20 clean runs are within
    // the default allowance (their interval's upper bound is 0.161).
    let sampled = finding(&report, "server.sampled-parse");
    assert_eq!(sampled["severity"], "pass", "{sampled}");
    assert!(
        sampled["message"]
            .as_str()
            .unwrap()
            .starts_with("0 of 20 parses failed (0.0%), 95% interval [0.000, 0.161]"),
        "{sampled}"
    );
    // The request fields it is asked to honour, it honours.
    for check in [
        "server.tool-choice",
        "server.max-completion-tokens",
        "server.template-kwargs",
    ] {
        assert_eq!(finding(&report, check)["severity"], "pass", "{check}");
    }
    // It has no constrained decoding: it refuses `tool_choice: "required"` and structured
    // output rather than ignore them.
    assert!(
        crate::common::report_json::says(
            &report,
            "server.tool-choice",
            "warning",
            "refuses `tool_choice (\"required\")`"
        ),
        "{:?}",
        crate::common::report_json::findings_of(&report, "server.tool-choice")
    );
    let format = finding(&report, "server.response-format");
    assert_eq!(format["severity"], "warning", "{format}");
    assert!(
        format["message"].as_str().unwrap().contains("refuses"),
        "{format}"
    );
    assert_eq!(code, 0, "healthy: {}", report["first_broken"]);
}

/// Parallel calls: a stand-in whose every reply is two `<tool_call>` blocks. The healthy
/// `chatgate serve` returns both, in order, plain and streamed, and the gate says they were
/// kept; under `parallel-calls-collapsed` (a parser that reads one call a turn) the second call
/// is lost and `server.tool-call-parse` names it, as the first broken boundary.
#[test]
fn parallel_calls_are_kept_and_a_collapsing_parser_is_caught() {
    let model = qwen3().scripted(PARALLEL).0;
    let server = Serve::start(&model, &[]);
    let dir = tempfile::tempdir().expect("tempdir");
    suite_with_tools(dir.path(), &model, &server.url, None);
    probe_budget(dir.path(), 64);
    // The latency stage is not what this test judges (the chain and the replay are).
    crate::common::gate_workspace::without_latency(&dir.path().join("suite.toml"));
    // Accepting the snapshots (both calls in them) is the healthy run.
    let (code, report) = gate(dir.path(), &server.url, true);
    let f = finding(&report, "server.tool-call-parse");
    assert_eq!(f["severity"], "pass", "{f}");
    assert!(
        f["message"]
            .as_str()
            .unwrap()
            .contains("parallel calls kept (2 in one reply)"),
        "{f}"
    );
    assert_eq!(code, 0, "healthy: {}", report["first_broken"]);
    drop(server);

    let server = Serve::start(&model, &["parallel-calls-collapsed"]);
    // Judged at the server boundary: `--fail-fast` leaves out the replay after it.
    let (code, report) = crate::reasoning_split::gate_fail_fast(dir.path(), &server.url);
    assert_eq!(code, 1);
    let f = finding(&report, "server.tool-call-parse");
    assert_eq!(f["severity"], "error", "{f}");
    let m = f["message"].as_str().unwrap();
    assert!(
        m.contains("the model wrote 2 call(s) and the reply carries 1 (parallel calls collapsed)"),
        "{m}"
    );
    assert_eq!(report["first_broken"]["check"], "server.tool-call-parse");
}

/// llama-cpp-python 0.3.36 started as users start it (the model's own template, no
/// `--chat_format`): no tool-call parser, so the call comes back as text (a catch-matrix row);
/// and two request fields it accepts and ignores — its request models have no
/// `max_completion_tokens` (pydantic drops unknown fields) and take `chat_template_kwargs` only
/// at load (`llama_cpp/server/settings.py`) — each named at its own check, an error for a
/// client that relies on it.
#[test]
fn llama_cpp_python_ignores_max_completion_tokens_and_template_kwargs() {
    let Some(python) = crate::common::llama_server::python() else {
        return;
    };
    let model = standin();
    let server =
        crate::common::llama_server::start(&python, &model.join("model.gguf"), "model", &[]);
    let dir = tempfile::tempdir().expect("tempdir");
    suite_with_tools(dir.path(), &model, &server.url, Some("llama-cpp-python"));
    let (code, report) = gate(dir.path(), &server.url, true);
    assert_eq!(code, 1, "{}", report["first_broken"]);
    for (check, says) in [
        ("server.tool-call-parse", "as text"),
        (
            "server.max-completion-tokens",
            "ignores `max_completion_tokens`",
        ),
        ("server.template-kwargs", "ignores `chat_template_kwargs`"),
    ] {
        let f = finding(&report, check);
        assert_eq!(f["severity"], "error", "{f}");
        assert!(f["message"].as_str().unwrap().contains(says), "{f}");
    }
    // Without a parser there is no call to forbid: `tool_choice: "none"` is met.
    assert_eq!(finding(&report, "server.tool-choice")["severity"], "pass");
    // It takes `response_format` type `text` or `json_object` only: `json_schema` is a
    // validation error it answers with HTTP 500 — refused, not ignored.
    let format = finding(&report, "server.response-format");
    assert_eq!(format["severity"], "warning", "{format}");
    assert!(
        format["message"].as_str().unwrap().contains("HTTP 500"),
        "{format}"
    );
}

/// `transformers serve` picks its response parser by `model_type` (qwen3: `<tool_call>` JSON
/// into `tool_calls`): the call comes back parsed, whole and streamed. But a reply the token
/// budget cuts inside the call is an HTTP 500: its response parser raises on the unfinished
/// JSON (`content_parsers.py` `_json`: "json parser could not parse region as JSON") instead
/// of returning the text — a client with a small max_tokens gets a server error. And it
/// ignores `tool_choice` and `response_format`.
#[test]
fn transformers_serve_parses_the_call_and_fails_one_cut_inside_it() {
    let Some(exe) = crate::common::transformers_serve::executable() else {
        return;
    };
    let model = standin();
    let server = crate::common::transformers_serve::shared(&exe);
    let dir = tempfile::tempdir().expect("tempdir");
    suite_with_tools(dir.path(), &model, &server.url, Some("transformers"));
    let (_, report) = gate(dir.path(), &server.url, true);
    // The agent's second turn: it has no tokenize route, and counts the history's prompt
    // tokens as the template renders them.
    let rt = finding(&report, "server.agent-round-trip");
    assert_eq!(rt["severity"], "pass", "{rt}");
    assert!(
        rt["message"].as_str().is_some_and(
            |m| m.contains("counts the agent's second turn as the template renders it")
        ),
        "{rt}"
    );
    let f = finding(&report, "server.tool-call-parse");
    // Its `/v1/responses` gives the same reasoning and call as chat completions, plain and
    // streamed (its stream: no `event:` lines, the call's arguments only in `.done`).
    let parity = finding(&report, "server.responses-parity");
    assert_eq!(parity["severity"], "pass", "{parity}");
    assert!(
        parity["message"]
            .as_str()
            .unwrap()
            .contains("plain and streamed"),
        "{parity}"
    );
    assert_eq!(f["severity"], "error", "{f}\n{}", server.log_text());
    let message = f["message"].as_str().unwrap();
    assert!(
        message.contains("HTTP 500") && message.contains("cuts a reply inside a tool call"),
        "{f}"
    );
    // Both the whole reply and the stream carry the call.
    assert!(
        f["evidence"]["replies"]
            .as_str()
            .unwrap()
            .contains(": 2 with their calls parsed"),
        "{f}"
    );
    // It applies `chat_template_kwargs`. `max_completion_tokens` it applies too
    // (chat_completion.py), but on this stand-in every reply is a call, so the 3-token probe is
    // cut inside it: the same 500 with `max_tokens`, and the check says so. `tool_choice` and
    // `response_format` it accepts and ignores (`UNUSED_CHAT_COMPLETION_FIELDS`: "Ignoring
    // unsupported fields in the request", a log line only): a call under "none", free text for
    // a JSON schema.
    let budget = finding(&report, "server.max-completion-tokens");
    assert_eq!(budget["severity"], "info", "{budget}");
    assert!(
        budget["message"]
            .as_str()
            .unwrap()
            .contains("fails with `max_tokens` too"),
        "{budget}"
    );
    assert_eq!(
        finding(&report, "server.template-kwargs")["severity"],
        "pass"
    );
    for (check, says) in [
        ("server.tool-choice", "ignores `tool_choice"),
        ("server.response-format", "ignores `response_format`"),
    ] {
        let f = finding(&report, check);
        assert_eq!(f["severity"], "error", "{f}");
        assert!(f["message"].as_str().unwrap().contains(says), "{f}");
    }
}

/// A reply the table cannot write (2000 `a`s: every spelling revisits a pair of tokens, which
/// must name one next token) is refused with the reason and exit 2.
#[test]
fn a_reply_a_standin_cannot_script_is_refused() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let family = Family::corpus("Qwen2.5", "Qwen2.5-0.5B-Instruct");
    let from = family.source(tmp.path());
    let out = tmp.path().join("out");
    let reply = "a".repeat(2000);
    let (code, stdout, stderr) = crate::common::cli::chatgate_in(
        &[
            "standin",
            "--from",
            from.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--reply",
            &reply,
        ],
        tmp.path(),
    );
    assert_eq!(code, 2, "{stdout}{stderr}");
    assert!(
        stderr.contains("cannot be spelt for a scripted stand-in"),
        "{stderr}"
    );
}

/// A recording `chatgate proxy` in front of a server: what the gate really sends.
struct Recorder {
    child: std::process::Child,
    url: String,
}

impl Recorder {
    fn start(upstream: &str, record: &Path) -> Recorder {
        use std::io::BufRead;
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_chatgate"))
            .args([
                "proxy",
                "--upstream",
                upstream,
                "--listen",
                "127.0.0.1:0",
                "--record",
            ])
            .arg(record)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("chatgate proxy starts");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("the proxy's first line");
        let url = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_string();
        Recorder { child, url }
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `[server] skip` spares the server the probes of the checks it skips, not only their
/// findings: through a recording proxy, each field probe's request is sent without the skip
/// and absent with it.
#[test]
fn skipped_checks_send_no_probe() {
    let model = standin();
    let server = Serve::start(&model, &[]);
    const SKIPPED: &str = r#"skip = ["server.max-completion-tokens", "server.template-kwargs", "server.tool-choice", "server.tool-call-parse", "server.response-format", "server.responses-parity"]"#;
    let sent = |skip: bool| -> Vec<Value> {
        let dir = tempfile::tempdir().expect("tempdir");
        let record = dir.path().join("sent.jsonl");
        let proxy = Recorder::start(&server.url, &record);
        suite_with_tools(dir.path(), &model, &proxy.url, None);
        if skip {
            let suite = dir.path().join("suite.toml");
            let text = std::fs::read_to_string(&suite).expect("suite.toml");
            assert!(text.contains("\n[server]\n"), "{text}");
            let text = text.replacen("\n[server]\n", &format!("\n[server]\n{SKIPPED}\n"), 1);
            std::fs::write(&suite, text).expect("suite.toml");
        }
        let (code, report) = gate(dir.path(), &proxy.url, true);
        assert_ne!(code, 2, "{report}");
        drop(proxy);
        std::fs::read_to_string(&record)
            .expect("the recording")
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).expect("a recorded exchange"))
            .filter_map(|x| x.get("request_body").cloned())
            .collect()
    };
    let field_probes = |bodies: &[Value]| -> Vec<String> {
        let mut found = Vec::new();
        for b in bodies {
            for field in [
                "max_completion_tokens",
                "chat_template_kwargs",
                "tool_choice",
                "response_format",
            ] {
                if b.get(field).is_some() {
                    found.push(field.to_string());
                }
            }
            if b.get("tools").is_some() && b["max_tokens"] == 3 {
                found.push("tools cut at 3 tokens".into());
            }
            if b.get("input").is_some() && b.get("max_output_tokens").is_some() {
                found.push("the probe again at /v1/responses".into());
            }
        }
        found.sort();
        found.dedup();
        found
    };
    let all = field_probes(&sent(false));
    assert_eq!(
        all,
        [
            "chat_template_kwargs",
            "max_completion_tokens",
            "response_format",
            "the probe again at /v1/responses",
            "tool_choice",
            "tools cut at 3 tokens"
        ],
        "without a skip every field probe is sent"
    );
    let skipped = field_probes(&sent(true));
    assert!(skipped.is_empty(), "skipped checks still sent: {skipped:?}");
}

/// What a Qwen3 stand-in that thinks before it calls writes (the think tags plain text here:
/// the Qwen2.5 tokenizer has no `<think>` token, and the template frames it all the same).
pub(crate) const THINK_CALL: &str = "<think>Paris weather.</think><tool_call>{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}</tool_call>";

/// The agent's second turn (`server.agent-round-trip`): the healthy `chatgate serve` renders
/// the history a client sends back — the call, its reasoning in `reasoning_content`, a tool
/// result — as the template does, token for token (its `/tokenize` shows it); under
/// `history-reasoning-dropped` (vLLM >= 0.20's bug) the reasoning is missing from its prompt,
/// and the finding says so.
#[test]
fn the_agents_second_turn_is_rendered_as_the_template_does() {
    let model = qwen3().scripted(THINK_CALL).0;
    let dir = tempfile::tempdir().expect("tempdir");
    let healthy = Serve::start(&model, &[]);
    suite_with_tools(dir.path(), &model, &healthy.url, None);
    probe_budget(dir.path(), 64);
    // The latency stage is not what this test judges (the chain and the replay are).
    crate::common::gate_workspace::without_latency(&dir.path().join("suite.toml"));
    let (code, report) = gate(dir.path(), &healthy.url, true);
    assert_eq!(code, 0, "{:?}", crate::common::report_json::errors(&report));
    let f = finding(&report, "server.agent-round-trip");
    assert_eq!(f["severity"], "pass", "{f}");
    assert!(
        f["evidence"]["sent"]
            .as_str()
            .is_some_and(|s| s.contains("reasoning in `reasoning_content`")),
        "{f}"
    );
    drop(healthy);
    let broken = Serve::start(&model, &["history-reasoning-dropped"]);
    // Judged at the server boundary: `--fail-fast` leaves out the replay after it.
    let (code, report) = crate::reasoning_split::gate_fail_fast(dir.path(), &broken.url);
    assert_eq!(code, 1);
    let f = finding(&report, "server.agent-round-trip");
    assert_eq!(f["severity"], "error", "{f}");
    let m = f["message"].as_str().unwrap_or_default();
    assert!(
        m.contains("lacks the reasoning sent back in `reasoning_content`"),
        "{m}"
    );
    assert_eq!(report["first_broken"]["check"], "server.agent-round-trip");
}
