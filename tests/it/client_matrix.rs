//! The real-client matrix: real clients from the package registries — the OpenAI Python SDK,
//! the OpenAI Node SDK, LangChain's ChatOpenAI and the Vercel AI SDK (tests/clients/, pinned
//! there) — each running a plain chat, a streamed chat and a streamed tool call through
//! `chatgate client-probe` (the real binary): the plain stream, every hostile SSE variant alone,
//! then all at once, against `chatgate serve` on a scripted Qwen3 stand-in that always calls
//! `get_weather` for "Zürich" (so the streams carry multi-byte characters and tool-call deltas).
//!
//! The table of which client breaks on which variant is the block of docs/matrices/clients.md
//! between `<!-- client-matrix:start -->` and `<!-- client-matrix:end -->`: a changed cell fails
//! this test until reviewed (`CHATGATE_BLESS=1` rewrites the block). A client fixed or broken
//! upstream shows up as a changed cell when its pin moves. The Python clients run with
//! `CHATGATE_CLIENTS_PYTHON`, the Node ones from `tests/clients/node_modules`; both come from
//! scripts/clients/install.sh (.ci/run runs it). Without them the test says it skips (a failure
//! in CI).
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::common::skip::skip;
use crate::reasoning_split::Serve;

const REPO: &str = env!("CARGO_MANIFEST_DIR");
const START: &str = "<!-- client-matrix:start -->";
const END: &str = "<!-- client-matrix:end -->";
/// The book page the matrix lives on (between START and END).
const PAGE: &str = "docs/matrices/clients.md";

/// The stand-in's every reply: a Hermes-style call whose argument is not ASCII.
const CALL: &str =
    "<tool_call>{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Zürich\"}}</tool_call>";

/// One real client: its column in the table and how to run it.
struct Client {
    column: String,
    command: Vec<String>,
}

fn pinned(file: &str, name: &str) -> String {
    let text = std::fs::read_to_string(Path::new(REPO).join("tests/clients").join(file))
        .expect("a pin file");
    if file.ends_with(".json") {
        let v: Value = serde_json::from_str(&text).expect("package.json");
        v["dependencies"][name]
            .as_str()
            .expect("a pinned version")
            .to_string()
    } else {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}==")))
            .expect("a pinned version")
            .to_string()
    }
}

/// The clients, or `None` (after saying why) when they are not installed.
fn clients() -> Option<Vec<Client>> {
    let dir = Path::new(REPO).join("tests/clients");
    let Some(python) = std::env::var_os("CHATGATE_CLIENTS_PYTHON").map(PathBuf::from) else {
        skip("CHATGATE_CLIENTS_PYTHON is not set (scripts/clients/install.sh prints it; .ci/run runs it)");
        return None;
    };
    if !dir.join("node_modules/openai").is_dir() {
        skip("tests/clients/node_modules has no openai (scripts/clients/install.sh installs it)");
        return None;
    }
    let script = |s: &str| dir.join(s).to_string_lossy().into_owned();
    let py = python.to_string_lossy().into_owned();
    Some(vec![
        Client {
            column: format!("OpenAI Python {}", pinned("requirements.txt", "openai")),
            command: vec![py.clone(), script("openai_python.py")],
        },
        Client {
            column: format!("OpenAI Node {}", pinned("package.json", "openai")),
            command: vec!["node".into(), script("openai_node.mjs")],
        },
        Client {
            column: format!(
                "langchain-openai {}",
                pinned("requirements.txt", "langchain-openai")
            ),
            command: vec![py, script("langchain_chatopenai.py")],
        },
        Client {
            column: format!("Vercel AI SDK {}", pinned("package.json", "ai")),
            command: vec!["node".into(), script("ai_sdk.mjs")],
        },
    ])
}

/// `chatgate client-probe --format json` of one client against `url`.
fn probe(url: &str, client: &Client) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_chatgate"))
        .args([
            "client-probe",
            "--upstream",
            url,
            "--timeout",
            "60",
            "--format",
            "json",
            "--",
        ])
        .args(&client.command)
        .output()
        .expect("chatgate client-probe runs");
    let code = out.status.code();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        matches!(code, Some(0 | 1)),
        "{}: client-probe exited {code:?}:\n{}\n{stdout}",
        client.column,
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_str(&stdout).expect("client-probe --format json");
    let broken = report["runs"]
        .as_array()
        .unwrap()
        .iter()
        .chain(report["combined"].as_object().map(|_| &report["combined"]))
        .any(broke);
    assert_eq!(
        code == Some(1),
        broken,
        "{}: exit code vs report",
        client.column
    );
    report
}

fn broke(run: &Value) -> bool {
    run["exit"] != 0 || run["timed_out"] == true || run["output_differs"] == true
}

/// A cell: `ok`, or which calls broke and the client's error (its `FAILED call: error` lines).
fn cell(run: &Value) -> String {
    if !broke(run) {
        return "ok".into();
    }
    if run["timed_out"] == true {
        return "**breaks**: hangs".into();
    }
    if run["exit"] == 0 {
        return "**breaks**: reads other text".into();
    }
    let failed: Vec<String> = run["stderr_tail"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|l| l.as_str()?.strip_prefix("FAILED "))
        .map(|l| {
            let (call, err) = l.split_once(": ").unwrap_or((l, ""));
            let kind = err.split(':').next().unwrap_or(err);
            format!("{call} ({kind})")
        })
        .collect();
    if failed.is_empty() {
        format!("**breaks**: exit {}", run["exit"])
    } else {
        format!("**breaks**: {}", failed.join(", "))
    }
}

/// The table: a row per variant (what it does, each client's cell), the `all` row, and the
/// a minimal set of variants that pass alone but break a client together.
fn table(columns: &[String], reports: &[Value]) -> String {
    let mut out = format!(
        "| variant | what the stream does | {} |\n|---|---|{}\n",
        columns.join(" | "),
        "---|".repeat(columns.len())
    );
    for info in chatgate::proxy::VARIANTS {
        let cells: Vec<String> = reports
            .iter()
            .map(|r| {
                let run = r["runs"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|run| run["label"] == info.name)
                    .expect("every variant ran");
                cell(run)
            })
            .collect();
        out.push_str(&format!(
            "| `{}` | {} | {} |\n",
            info.name,
            info.does.replace('|', "\\|"),
            cells.join(" | ")
        ));
    }
    let all: Vec<String> = reports.iter().map(|r| cell(&r["combined"])).collect();
    out.push_str(&format!(
        "| **all** | every variant at once | {} |\n",
        all.join(" | ")
    ));
    let culprits: Vec<String> = reports
        .iter()
        .map(|r| match r["culprit"].as_array() {
            Some(c) => c
                .iter()
                .map(|v| format!("`{}`", v.as_str().unwrap()))
                .collect::<Vec<_>>()
                .join(" + "),
            None => "—".into(),
        })
        .collect();
    out.push_str(&format!(
        "| **together** | a minimal set of variants that each pass alone but break the client together (dropping any one makes it pass) | {} |\n",
        culprits.join(" | ")
    ));
    out
}

fn readme_block() -> (String, std::ops::Range<usize>) {
    let text = std::fs::read_to_string(Path::new(REPO).join(PAGE)).expect(PAGE);
    let start = text.find(START).expect("the page has the start marker") + START.len() + 1;
    let end = text.find(END).expect("the page has the end marker");
    assert!(
        start <= end,
        "docs/matrices/clients.md's client-matrix markers are out of order"
    );
    (text, start..end)
}

/// The Qwen3 stand-in that always calls `get_weather` for Zürich (built once, cached).
fn standin() -> PathBuf {
    crate::tool_calls::qwen3().scripted(CALL).0
}

#[test]
fn real_clients_through_every_sse_variant() {
    let Some(clients) = clients() else { return };
    let model = standin();
    let server = Serve::start(&model, &[]);
    let mut reports = Vec::new();
    for c in &clients {
        let r = probe(&server.url, c);
        // Every client reads the healthy stream: the plain run passed (client-probe exits 2
        // otherwise) and saw the call, with its multi-byte argument.
        assert_eq!(r["plain"]["exit"], 0, "{}", c.column);
        let plain = r["plain"]["stdout"].as_str().unwrap();
        let lines: Vec<Value> = plain
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON line"))
            .collect();
        assert_eq!(lines.len(), 3, "{}: {plain}", c.column);
        assert_eq!(lines[0]["chat"]["content"], CALL, "{}", c.column);
        assert_eq!(lines[1]["stream"]["content"], CALL, "{}", c.column);
        let call = &lines[2]["tool-stream"]["tool_calls"];
        assert_eq!(
            call,
            &serde_json::json!([{"name": "get_weather", "arguments": {"city": "Zürich"}}]),
            "{}",
            c.column
        );
        reports.push(r);
    }
    let columns: Vec<String> = clients.iter().map(|c| c.column.clone()).collect();
    let got = table(&columns, &reports);
    let (mut readme, block) = readme_block();
    if readme[block.clone()] == got {
        return;
    }
    if std::env::var_os("CHATGATE_BLESS").is_some_and(|v| v == "1") {
        readme.replace_range(block, &got);
        std::fs::write(Path::new(REPO).join(PAGE), readme).expect(PAGE);
        return;
    }
    panic!(
        "the client matrix is not {PAGE}'s (the block between {START} and {END}); review, then rerun with CHATGATE_BLESS=1:\n\n{got}\n{PAGE} has:\n{}",
        &readme[block]
    );
}

/// `[client] command` in a suite: the gate runs the suite's own client (here the OpenAI Python
/// SDK) through every variant against its target, and fails at the client boundary for the
/// variant the deployment must survive (`retry`, which the SDK cannot read) and for the pair it
/// must survive that breaks the SDK together (`ids` + `blank-lines`). And `[client] recording`, made of LangChain's
/// real requests (it sends `max_completion_tokens`), against a server that ignores that field
/// (`chatgate serve --fault max-completion-tokens-ignored`, as llama-cpp-python does): the server
/// check alone can only warn (the suite does not say the client relies on it), the recording
/// proves the client does, and `client.fields-honoured` says so.
#[test]
fn the_gate_fails_at_the_client_boundary_for_what_its_client_relies_on() {
    let Some(clients) = clients() else { return };
    let model = standin();
    let server = Serve::start(&model, &["max-completion-tokens-ignored"]);
    let dir = tempfile::tempdir().expect("tempdir");
    crate::reasoning_split::init(dir.path(), &model, &server.url, None);
    record_langchain(&server.url, &clients[2], &dir.path().join("client.jsonl"));
    let suite = dir.path().join("suite.toml");
    let command = serde_json::to_string(&clients[0].command).unwrap();
    let text = std::fs::read_to_string(&suite).expect("suite.toml");
    std::fs::write(
        &suite,
        format!(
            "{text}recording = \"client.jsonl\"\ncommand = {command}\nsse_variants = [\"retry\", \"ids\", \"blank-lines\"]\n"
        ),
    )
    .expect("suite.toml");
    let (code, report) = crate::reasoning_split::gate(dir.path(), &server.url, true);
    assert_eq!(code, 1, "{report:#}");
    let of = |check: &str| -> Vec<&Value> {
        report["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["check"] == check)
            .collect()
    };
    let sse = of("client.sse");
    let retry = sse
        .iter()
        .find(|f| f["severity"] == "error")
        .expect("an error for retry");
    let message = retry["message"].as_str().unwrap();
    assert!(
        message.contains("`retry`") && message.contains("JSONDecodeError"),
        "{retry}"
    );
    assert!(retry["evidence"]["retry: reported"]
        .as_str()
        .unwrap()
        .contains("openai/openai-python#2722"));
    assert_eq!(retry["boundary"], "client");
    // `ids` and `blank-lines` each pass alone; together they break the SDK (every blank line
    // after an `id:` dispatches an empty event). Both must be survived: the pair is looked for
    // among them first, so it is an error, not hidden behind a pair that is only a warning.
    let together = sse
        .iter()
        .find(|f| f["message"].as_str().unwrap().contains(" + "))
        .expect("the combination of variants that pass alone");
    assert!(
        together["message"]
            .as_str()
            .unwrap()
            .contains("`ids + blank-lines`"),
        "{together}"
    );
    assert_eq!(together["severity"], "error", "{together}");
    // The server boundary sees the field ignored, and can only warn ...
    let server_check = of("server.max-completion-tokens");
    assert_eq!(
        server_check[0]["severity"], "warning",
        "{:#}",
        server_check[0]
    );
    // ... the recording shows the client sends it: an error at the client boundary.
    let fields = of("client.fields-honoured");
    let ignored = fields
        .iter()
        .find(|f| f["severity"] == "error")
        .unwrap_or_else(|| panic!("{fields:#?}"));
    assert!(
        ignored["message"]
            .as_str()
            .unwrap()
            .contains("sends `max_completion_tokens` (3 of 3 chat requests)"),
        "{ignored}"
    );
    // Nothing else broke: the client is the first (and only) broken boundary.
    for f in report["findings"].as_array().unwrap() {
        if f["severity"] == "error" {
            assert_eq!(f["boundary"], "client", "{f}");
        }
    }
}

/// One run of the LangChain client through `chatgate proxy --record`: its real requests.
fn record_langchain(url: &str, client: &Client, to: &Path) {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let proxy = rt
        .block_on(chatgate::proxy::start(
            &chatgate::proxy::ProxyOptions {
                upstream: url.to_string(),
                record: Some(to.to_path_buf()),
                hostile: None,
            },
            "127.0.0.1:0",
        ))
        .expect("the proxy starts");
    let out = Command::new(&client.command[0])
        .args(&client.command[1..])
        .env("OPENAI_BASE_URL", format!("{}/v1", proxy.url()))
        .env("OPENAI_API_KEY", "unused")
        .output()
        .expect("the LangChain client runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    rt.block_on(proxy.stop()).expect("the proxy stops");
}
