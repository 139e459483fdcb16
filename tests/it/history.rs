//! Results over time: `--history DIR` on real gates appends one record per run, and
//! `chatgate history` reads them back — as text, as JSON, and as a trend page whose charts its
//! own script draws, checked in a real headless browser (Chromium's headless shell).
//!
//! The browser is `$CHATGATE_BROWSER`, else `chromium-headless-shell` on PATH (Debian's
//! package of that name; .ci/run installs it). Without one the browser test says SKIPPED, and
//! under `CI` it fails.
use std::path::{Path, PathBuf};
use std::process::Command;

use chatgate::history::{Identities, Record, RunFacts};
use chatgate::verdict::LatencyRow;
use chatgate::verdict::{checks, Finding, Severity};
use serde_json::Value;

use crate::common::browser::{browser, rendered_dom};
use crate::common::cli::chatgate_in;
use crate::common::gate_workspace::{serve_tiny_chat, Workspace};

const KEY_ENV: &str = "CHATGATE_HISTORY_TEST_KEY";
const KEY: &str = "sk-history-canary-0123456789";

/// The real binary with extra environment, off the async runtime (a server may be serving on it).
async fn chatgate_env(
    args: Vec<String>,
    cwd: PathBuf,
    env: Vec<(String, String)>,
) -> (i32, String, String) {
    tokio::task::spawn_blocking(move || {
        let out = Command::new(env!("CARGO_BIN_EXE_chatgate"))
            .args(&args)
            .current_dir(&cwd)
            .env("NO_COLOR", "1")
            .env_remove("GITHUB_SHA")
            .envs(env)
            .output()
            .expect("chatgate runs");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    })
    .await
    .expect("the chatgate task")
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

fn count(haystack: &str, needle: &str) -> usize {
    haystack.matches(needle).count()
}

/// Two real gates — the model in-process, then a real server with an API key — append two
/// records; the trend page, loaded in a real browser, draws a point per run on every line and
/// names both commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gates_make_a_trend_page_that_shows_both_runs() {
    let ws = Workspace::new();
    ws.edit_suite(
        "smoke",
        "model = \"tiny-chat\"",
        &format!("model = \"tiny-chat\"\napi_key_env = \"{KEY_ENV}\""),
    );
    let root = ws.path("");
    let hist = ws.path("history");
    let key = vec![(KEY_ENV.to_string(), KEY.to_string())];
    let (code, out, err) = chatgate_env(
        s(&[
            "gate",
            "suites/smoke.toml",
            "--no-progress",
            "--history",
            "history",
            "--commit",
            "aaaa1111cafe",
        ]),
        root.clone(),
        key.clone(),
    )
    .await;
    assert_eq!(code, 0, "{out}\n{err}");
    let server = serve_tiny_chat(&[]).await;
    let (code, out, err) = chatgate_env(
        vec![
            "gate".into(),
            "suites/smoke.toml".into(),
            "--no-progress".into(),
            "--target".into(),
            server.url(),
            "--history".into(),
            "history".into(),
            "--commit".into(),
            "bbbb2222beef".into(),
        ],
        root.clone(),
        key,
    )
    .await;
    assert_eq!(code, 0, "{out}\n{err}");

    let file = hist.join("smoke.jsonl");
    let text = std::fs::read_to_string(&file).expect("the history file");
    assert_eq!(text.lines().count(), 2, "{text}");
    assert!(
        !text.contains(KEY),
        "the API key reached the history:\n{text}"
    );
    let second: Value = serde_json::from_str(text.lines().nth(1).unwrap()).unwrap();
    assert_eq!(second["version"], 1);
    assert_eq!(second["command"], "gate");
    assert_eq!(second["target"], server.url());
    assert_eq!(second["commit"], "bbbb2222beef");
    assert_eq!(second["verdict"], "pass");
    assert_eq!(second["identities"]["served_model"], "tiny-chat");
    assert_eq!(
        second["identities"]["weights_total"].as_str().map(str::len),
        Some(64)
    );
    assert_eq!(second["suite_sha256"].as_str().map(str::len), Some(64));
    assert_eq!(second["checks"]["server.models"], "pass");
    for m in ["ttft", "tpot", "itl", "e2el"] {
        assert!(
            second["latency"][m]["p50"].as_f64().is_some(),
            "{m}: {second}"
        );
    }

    let page = ws.path("trend.html");
    let (code, out, err) = chatgate_in(&["history", "history", "--html", "trend.html"], &root);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains("aaaa1111ca") && out.contains("bbbb2222be"),
        "{out}"
    );
    let html = std::fs::read_to_string(&page).expect("the page");
    assert!(
        !html.contains(" src=") && !html.contains(" href=") && !html.contains("@import"),
        "the page loads nothing from outside itself"
    );
    assert!(
        !html.contains("<circle"),
        "the points are the page script's work, not the server's"
    );

    let Some(browser) = browser() else { return };
    let dom = rendered_dom(&browser, &page, &ws.path("browser-profile"));
    assert!(
        dom.contains("data-charts=\"drawn\""),
        "the page's script did not finish:\n{dom}"
    );
    for m in ["ttft", "tpot", "itl", "e2el"] {
        for q in ["p50", "p90", "p99"] {
            let points = count(
                &dom,
                &format!("class=\"pt {q}\" data-q=\"{q}\" data-metric=\"{m}\""),
            );
            assert_eq!(points, 2, "{m} {q}: one point per run expected:\n{dom}");
        }
        assert_eq!(
            count(&dom, &format!("data-q=\"p50\" data-metric=\"{m}\" points=")),
            1,
            "one p50 line for {m}"
        );
    }
    for commit in ["aaaa1111cafe", "bbbb2222beef"] {
        assert!(
            dom.contains(&format!("data-commit=\"{commit}\"")),
            "no point of {commit}"
        );
        assert!(
            dom.contains(&format!("title=\"{commit}\"")),
            "the runs table does not name {commit}"
        );
    }
    assert_eq!(
        count(&dom, "<tr class=\"ok\" data-run="),
        2,
        "two passing runs in the table"
    );
}

/// A target URL that carries credentials is refused before anything is recorded.
#[test]
fn credentials_in_the_target_never_reach_the_history() {
    let ws = Workspace::new();
    let (code, _, err) = chatgate_in(
        &[
            "gate",
            "suites/smoke.toml",
            "--no-progress",
            "--target",
            "http://user:s3cret-history@127.0.0.1:9/",
            "--history",
            "history",
        ],
        &ws.path(""),
    );
    assert_eq!(code, 2, "{err}");
    assert!(!err.contains("s3cret-history"), "{err}");
    if let Ok(text) = std::fs::read_to_string(ws.path("history/smoke.jsonl")) {
        assert!(!text.contains("s3cret-history"), "{text}");
    }
}

fn row(metric: &str, p50: f64) -> LatencyRow {
    LatencyRow {
        metric: metric.into(),
        n: 10,
        p50,
        p90: p50 * 1.5,
        p95: p50 * 1.7,
        p99: p50 * 2.0,
        mean: p50,
        std: 1.0,
        min: p50 / 2.0,
        max: p50 * 2.0,
        baseline_p50: None,
        verdict: chatgate::verdict::LatencyVerdict::Ok,
        samples: vec![],
        baseline_samples: vec![],
    }
}

/// A record as a run with these failing checks and this TTFT median would append.
fn record(commit: &str, errors: &[&'static str], ttft: f64) -> String {
    let mut findings = vec![
        Finding::pass(checks::TEMPLATE_PARITY, "ok"),
        Finding::pass(checks::SERVER_MODELS, "ok"),
        Finding::pass(checks::SERVER_USAGE, "ok"),
    ];
    for e in errors {
        findings.retain(|f| f.check.id != *e);
        let check = checks::find(e).expect("a check id");
        findings.push(Finding::new(check, Severity::Error, "broke"));
    }
    let r = Record::new(
        RunFacts {
            command: "gate",
            suite: "demo",
            suite_sha256: None,
            target: "http://127.0.0.1:8000",
            exit_code: i32::from(!errors.is_empty()),
            findings: &findings,
            latency: &[row("ttft", ttft), row("e2el", ttft * 10.0)],
            identities: Identities::default(),
            commit: Some(commit.into()),
        },
        chrono::Utc::now(),
    );
    serde_json::to_string(&r).unwrap()
}

fn history_dir(lines: &[String]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("demo.jsonl"), lines.join("\n") + "\n").unwrap();
    dir
}

/// The JSON trend: runs in order, latency first → last, and for each check that failed the
/// first failing run and the run since which it has been failing.
#[test]
fn history_json_names_first_failures_and_streaks() {
    let dir = history_dir(&[
        record("c1", &["server.usage"], 100.0),
        record("c2", &[], 110.0),
        record("c3", &["template.parity"], 120.0),
        record("c4", &["template.parity"], 150.0),
    ]);
    let (code, out, err) = chatgate_in(&["history", ".", "--format", "json"], dir.path());
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).expect(&out);
    let suite = &v["suites"][0];
    assert_eq!(suite["suite"], "demo");
    let runs = suite["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 4);
    assert_eq!(runs[0]["commit"], "c1");
    assert_eq!(runs[2]["first_broken"], "template (template.parity)");
    let ttft = &suite["latency"].as_array().unwrap()[0];
    assert_eq!(ttft["metric"], "ttft");
    assert_eq!(ttft["first_p50"], 100.0);
    assert_eq!(ttft["last_p50"], 150.0);
    assert!((ttft["change_pct"].as_f64().unwrap() - 50.0).abs() < 1e-9);
    let checks = suite["checks"].as_array().unwrap();
    let by = |id: &str| checks.iter().find(|c| c["check"] == id).cloned().unwrap();
    let parity = by("template.parity");
    assert_eq!(parity["first_failed"]["run"], 3);
    assert_eq!(parity["first_failed"]["commit"], "c3");
    assert_eq!(parity["still_failing"], true);
    assert_eq!(parity["failing_since"]["run"], 3);
    let usage = by("server.usage");
    assert_eq!(usage["first_failed"]["run"], 1);
    assert_eq!(usage["still_failing"], false);
    assert!(usage["failing_since"].is_null());
    assert_eq!(usage["last_outcome"], "pass");

    let (code, out, _) = chatgate_in(
        &["history", ".", "--last", "2", "--format", "json"],
        dir.path(),
    );
    assert_eq!(code, 0);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["suites"][0]["skipped"], 2);
    assert_eq!(v["suites"][0]["runs"][0]["run"], 3);

    let (code, text, _) = chatgate_in(&["history", ".", "--suite", "demo"], dir.path());
    assert_eq!(code, 0);
    assert!(
        text.contains("template.parity")
            && text.contains("first failed in run 3")
            && text.contains("still failing, since run 3"),
        "{text}"
    );
}

/// Damaged histories are errors naming file:line (exit 2), never a panic or a silent skip.
#[test]
fn a_damaged_history_line_is_an_error_naming_file_and_line() {
    let good = record("c1", &[], 100.0);
    for (second, why) in [
        (
            "{\"version\": 1, \"time\": ".to_string(),
            "not a JSON record",
        ),
        ("{\"version\": 9}".to_string(), "version 9"),
        ("[1, 2]".to_string(), "without a \"version\""),
        (
            format!("\"{}\"", "x".repeat(1_100_000)),
            "longer than 1 MiB",
        ),
    ] {
        let dir = history_dir(&[good.clone(), second]);
        let (code, out, err) = chatgate_in(&["history", "."], dir.path());
        assert_eq!(code, 2, "{why}: {out}{err}");
        assert!(
            err.contains("demo.jsonl:2:") && err.contains(why),
            "{why}: {err}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }
    let (code, _, err) = chatgate_in(
        &["history", "no-such-dir"],
        Path::new(env!("CARGO_MANIFEST_DIR")),
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("no-such-dir"), "{err}");
}

/// A history folder that cannot be written is an error after the report: exit 2, naming it.
#[test]
fn an_unwritable_history_fails_the_run_by_name() {
    let ws = Workspace::new();
    // A file where the folder should be: no permission trick a root user would bypass.
    std::fs::write(ws.path("blocked"), "not a folder").unwrap();
    let (code, out, err) = chatgate_in(
        &[
            "gate",
            "suites/smoke.toml",
            "--no-progress",
            "--history",
            "blocked/history",
        ],
        &ws.path(""),
    );
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(out.contains("PASS"), "the report still comes first: {out}");
    assert!(
        err.contains("blocked/history") && err.contains("history record was not kept"),
        "{err}"
    );
}

/// SARIF's reader: `$CHATGATE_SARIF` (.ci/run sets it to the sarif-tools venv it makes), else
/// `sarif` on PATH; None after saying SKIPPED (a failure under CI).
fn sarif_tool() -> Option<PathBuf> {
    crate::common::browser::tool(
        "CHATGATE_SARIF",
        "sarif",
        "no SARIF reader at {} (set CHATGATE_SARIF; pip install sarif-tools; .ci/run installs it)",
    )
}

/// A sharded gate whose template drifted from the lock and whose snapshot went missing, merged
/// with `--format sarif --history`: the SARIF log has the required fields, a rule per check
/// reported, results at the suite file and at the snapshot file, and a real SARIF reader
/// (sarif-tools) counts them; the merge appends one gate record.
#[test]
fn a_merged_gate_reports_sarif_and_appends_its_record() {
    let ws = Workspace::new();
    let root = ws.path("");
    std::fs::remove_file(ws.path("snapshots/smoke/hello.snap")).unwrap();
    let lock = ws.path("suites/smoke.lock.json");
    let text = std::fs::read_to_string(&lock).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    let template = v["template"]["sha256"].as_str().unwrap().to_string();
    std::fs::write(&lock, text.replace(&template, &"0".repeat(64))).unwrap();
    for k in ["1/2", "2/2"] {
        let part = format!("part-{}.json", &k[..1]);
        let (code, out, err) = chatgate_in(
            &[
                "gate",
                "suites/smoke.toml",
                "--no-progress",
                "--shard",
                k,
                "--part",
                &part,
            ],
            &root,
        );
        assert!(code == 0 || code == 1, "{out}\n{err}");
    }
    let (code, out, err) = chatgate_in(
        &[
            "merge",
            "part-1.json",
            "part-2.json",
            "--format",
            "sarif",
            "--history",
            "h",
            "--commit",
            "cafe",
        ],
        &root,
    );
    assert_eq!(code, 1, "a missing snapshot fails the gate: {err}");
    let log: Value = serde_json::from_str(&out).expect(&out);
    assert_eq!(log["version"], "2.1.0");
    assert!(log["$schema"].as_str().unwrap().contains("sarif-2.1.0"));
    let run = &log["runs"][0];
    let driver = &run["tool"]["driver"];
    assert_eq!(driver["name"], "chatgate");
    assert_eq!(
        driver["informationUri"],
        "https://github.com/chatgate/chatgate"
    );
    let rules: Vec<&str> = driver["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            assert_eq!(
                r["helpUri"],
                "https://github.com/chatgate/chatgate/blob/main/docs/checks.md"
            );
            assert!(r["shortDescription"]["text"]
                .as_str()
                .is_some_and(|t| !t.is_empty()));
            r["id"].as_str().unwrap()
        })
        .collect();
    let results = run["results"].as_array().unwrap();
    for r in results {
        let id = r["ruleId"].as_str().unwrap();
        assert!(rules.contains(&id), "{id} has no rule");
        assert!(chatgate::verdict::checks::find(id).is_some());
        assert_eq!(rules[r["ruleIndex"].as_u64().unwrap() as usize], id);
        assert!(
            ["error", "warning"].contains(&r["level"].as_str().unwrap()),
            "{r}"
        );
        assert!(!r["message"]["text"].as_str().unwrap().is_empty());
    }
    let at = |id: &str| -> Vec<String> {
        results
            .iter()
            .filter(|r| r["ruleId"] == id)
            .map(|r| {
                r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect()
    };
    assert_eq!(at("template.lock"), vec!["suites/smoke.toml".to_string()]);
    assert_eq!(
        at("replay.snapshots"),
        vec!["snapshots/smoke/hello.snap.new".to_string()]
    );

    let history = std::fs::read_to_string(ws.path("h/smoke.jsonl")).expect("the merge's record");
    let record: Value = serde_json::from_str(history.trim()).unwrap();
    assert_eq!(record["command"], "gate");
    assert_eq!(record["commit"], "cafe");
    assert_eq!(record["verdict"], "fail");
    assert_eq!(record["first_broken"]["check"], "replay.snapshots");
    assert_eq!(record["checks"]["template.lock"], "warning");

    let sarif_file = ws.path("gate.sarif");
    std::fs::write(&sarif_file, &out).unwrap();
    let Some(sarif) = sarif_tool() else { return };
    let summary = Command::new(sarif)
        .args(["summary", sarif_file.to_str().unwrap()])
        .output()
        .expect("sarif runs");
    let text = String::from_utf8_lossy(&summary.stdout);
    assert!(
        summary.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&summary.stderr)
    );
    let errors = results.iter().filter(|r| r["level"] == "error").count();
    assert!(errors >= 1);
    assert!(text.contains(&format!("error: {errors}")), "{text}");
    assert!(
        text.contains("replay.snapshots") && text.contains("template.lock"),
        "{text}"
    );
}

/// Commands whose --format has no SARIF say which formats they take; bench appends records.
#[test]
fn bench_appends_a_record_and_other_commands_refuse_sarif() {
    let ws = Workspace::new();
    let root = ws.path("");
    let (code, _, err) = chatgate_in(&["check", "suites/smoke.toml", "--format", "sarif"], &root);
    assert_eq!(code, 2);
    assert!(
        err.contains("sarif") && err.contains("text") && err.contains("json"),
        "{err}"
    );
    let (code, _, err) = chatgate_in(
        &[
            "gate",
            "suites/smoke.toml",
            "--shard",
            "1/2",
            "--part",
            "p.json",
            "--history",
            "h",
        ],
        &root,
    );
    assert_eq!(code, 2, "a shard is not a run: {err}");
    assert!(
        err.contains("chatgate merge") && !ws.path("h").exists(),
        "{err}"
    );
    let (code, out, err) = chatgate_in(&["bench", "suites/smoke.toml", "--history", "h"], &root);
    assert_eq!(code, 0, "{out}\n{err}");
    let record: Value = serde_json::from_str(
        std::fs::read_to_string(ws.path("h/smoke.jsonl"))
            .unwrap()
            .trim(),
    )
    .unwrap();
    assert_eq!(record["command"], "bench");
    assert!(
        record["latency"]["ttft"]["p99"].as_f64().is_some(),
        "{record}"
    );
    assert!(
        record["identities"]["served_model"].is_null(),
        "in-process: no server"
    );
}
