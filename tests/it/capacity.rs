//! `chatgate bench --mode capacity` against the real `chatgate serve` (loopback) with a known
//! per-request cost: `--service-ms 50` holds the model 50 ms per request, one request at a
//! time, so the server keeps up with 20 requests/s and no more. Above that rate the queue grows
//! without end (requests arrive every 1/λ < 50 ms); below it nothing waits. (The 4-token
//! replies take a few ms to generate, well inside the 50 ms, even on a busy 2-core machine.) The search must find
//! an interval containing 20 on repeated runs, a slower build (`--fault slow-decode`, 30 ms per
//! token) must fail the capacity gate against the saved search, and a rerun whose interval
//! straddles the allowed drop must read INCONCLUSIVE — a warning by default, a failure when
//! the suite says `inconclusive = "fail"`. The HTML report renders in headless Chromium.
use std::path::{Path, PathBuf};
use std::time::Duration;

use chatgate::serve::{Fault, RunningServer, ServeOptions};
use serde_json::Value;

use crate::common::browser::{browser, rendered_dom};
use crate::common::cli::chatgate_in;
use crate::common::gate_workspace::{serve_with, Workspace};

const REPO: &str = env!("CARGO_MANIFEST_DIR");
/// The server's cost per request (ms), and so its capacity: 1000 / 50 = 20 requests/s.
const SERVICE_MS: u64 = 50;

async fn serve_paced(faults: &[Fault]) -> RunningServer {
    serve_with(ServeOptions {
        model: Path::new(REPO).join("models/tiny-chat"),
        faults: faults.to_vec(),
        service_time: Some(Duration::from_millis(SERVICE_MS)),
        ..ServeOptions::default()
    })
    .await
}

/// The smoke suite with an E2EL SLO of three service times, short replies, and `extra` lines
/// in [latency].
fn capacity_suite(ws: &Workspace, extra: &str) -> PathBuf {
    let smoke = std::fs::read_to_string(ws.suite("smoke")).expect("smoke suite");
    let suite = smoke
        .replace(
            "slo = { ttft = 1000, tpot = 200, e2el = 5000 }",
            &format!("slo = {{ e2el = {} }}\n{extra}", 3 * SERVICE_MS),
        )
        .replace("max_tokens = 48\n", "max_tokens = 4\n");
    assert!(
        suite.contains("e2el = 150"),
        "the smoke suite's SLO line moved"
    );
    let path = ws.path("suites/capacity.toml");
    std::fs::write(&path, suite).expect("write the suite");
    path
}

/// `chatgate bench <suite> --mode capacity --target URL --arrival constant ARGS…`, off the
/// runtime the server runs on.
async fn capacity(ws: &Workspace, suite: &Path, url: &str, args: &[&str]) -> (i32, String, String) {
    let mut all: Vec<String> = [
        "bench",
        suite.to_str().unwrap(),
        "--mode",
        "capacity",
        "--target",
        url,
        "--arrival",
        "constant",
        "--no-progress",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    all.extend(args.iter().map(|s| s.to_string()));
    let cwd = ws.path("");
    tokio::task::spawn_blocking(move || {
        let refs: Vec<&str> = all.iter().map(String::as_str).collect();
        chatgate_in(&refs, &cwd)
    })
    .await
    .expect("the CLI task")
}

fn saved(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("the saved search")).expect("JSON")
}

fn interval(doc: &Value) -> (f64, Option<f64>) {
    let c = &doc["capacity"];
    (
        c["low"]
            .as_f64()
            .unwrap_or_else(|| panic!("no low end: {c}")),
        c["high"].as_f64(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_search_finds_the_known_capacity_and_a_slower_build_fails_it() {
    let ws = Workspace::new();
    let suite = capacity_suite(&ws, "");
    let server = serve_paced(&[]).await;
    let url = server.url();
    let expected = 1000.0 / SERVICE_MS as f64;
    // Two searches with different seeds: each interval contains the computed capacity.
    for (i, seed) in ["1", "2"].into_iter().enumerate() {
        let save = ws.path(&format!("capacity-{i}.json"));
        let (code, out, err) = capacity(
            &ws,
            &suite,
            &url,
            &[
                "--rate",
                "10",
                "--requests",
                "40",
                "--seed",
                seed,
                "--budget",
                "90",
                "--save",
                save.to_str().unwrap(),
                "--html",
                ws.path("capacity.html").to_str().unwrap(),
            ],
        )
        .await;
        assert_eq!(code, 0, "{out}\n{err}");
        let doc = saved(&save);
        let (low, high) = interval(&doc);
        let high = high.unwrap_or_else(|| panic!("no failing rate found: {out}"));
        assert!(
            low <= expected && expected <= high,
            "[{low}, {high}] misses {expected}: {out}"
        );
        assert!(
            high / low - 1.0 <= 0.25,
            "[{low}, {high}] is too wide: {out}"
        );
        assert!(
            out.contains(&format!(
                "capacity: between {low:.2} and {high:.2} requests/s"
            )),
            "{out}"
        );
        // Past the capacity the server's own /metrics says requests queued, and why the
        // latency rose: its queue.
        assert!(out.contains("the server's queue explains it"), "{out}");
        assert!(!out.contains("client and server disagree"), "{out}");
        let late = doc["capacity"]["steps"][0]["send_late_ms"]["p50"]
            .as_f64()
            .unwrap();
        assert!(late < 5.0, "the open loop fell behind: {late} ms");
    }
    server.stop().await.unwrap();

    // The same build with every token 30 ms slower: 4 tokens take 120 ms, about 8 requests/s.
    let slow = serve_paced(&[Fault::SlowDecode]).await;
    let base = ws.path("capacity-0.json");
    let (code, out, err) = capacity(
        &ws,
        &suite,
        &slow.url(),
        &[
            "--rate",
            "10",
            "--requests",
            "16",
            "--repeats",
            "1",
            "--budget",
            "20",
            "--baseline",
            base.to_str().unwrap(),
        ],
    )
    .await;
    slow.stop().await.unwrap();
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(
        out.contains("server.capacity REGRESSION: capacity fell from between"),
        "{out}"
    );

    // The HTML report of the first search renders in a real browser: three kinds of chart.
    if let Some(b) = browser() {
        let html = std::fs::read_to_string(ws.path("capacity.html")).unwrap();
        assert!(
            !html.contains("src=\"http") && !html.contains("href=\"http"),
            "the page fetches something"
        );
        let dom = rendered_dom(&b, &ws.path("capacity.html"), &ws.path("profile"));
        for needle in [
            "Latency (ms) against the offered rate",
            "TTFT CDF per offered rate",
            "Requests running and waiting in the server",
            ">capacity</text>",
        ] {
            assert!(
                dom.contains(needle),
                "{needle:?} is not in the rendered page"
            );
        }
        assert!(dom.matches("<path").count() >= 6, "too few lines drawn");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_inside_the_noise_is_inconclusive_and_the_suite_decides() {
    let ws = Workspace::new();
    let server = serve_paced(&[]).await;
    let url = server.url();
    // A coarse search (brackets within 50 %): its interval is wider than the 10 % drop allowed,
    // so a rerun of the very same server can neither pass nor fail against it.
    let coarse = [
        "--rate",
        "10",
        "--requests",
        "30",
        "--repeats",
        "1",
        "--resolution",
        "0.5",
        "--budget",
        "60",
    ];
    let suite = capacity_suite(&ws, "");
    let base = ws.path("coarse.json");
    let mut args = coarse.to_vec();
    args.extend(["--save", base.to_str().unwrap()]);
    let (code, out, err) = capacity(&ws, &suite, &url, &args).await;
    assert_eq!(code, 0, "{out}\n{err}");

    let mut args = coarse.to_vec();
    args.extend(["--baseline", base.to_str().unwrap(), "--format", "json"]);
    let (code, out, err) = capacity(&ws, &suite, &url, &args).await;
    assert_eq!(code, 0, "INCONCLUSIVE warns by default: {out}\n{err}");
    let doc: Value = serde_json::from_str(&out).expect("JSON");
    let v = &doc["verdict"];
    assert_eq!(v["decision"], "INCONCLUSIVE", "{v}");
    assert!(
        v["to_decide"].as_str().unwrap().contains("--resolution"),
        "{v}"
    );

    let strict = capacity_suite(&ws, "inconclusive = \"fail\"");
    let mut args = coarse.to_vec();
    args.extend(["--baseline", base.to_str().unwrap()]);
    let (code, out, err) = capacity(&ws, &strict, &url, &args).await;
    server.stop().await.unwrap();
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(out.contains("server.capacity INCONCLUSIVE"), "{out}");
    assert!(
        out.contains("to decide: rerun both searches with --resolution"),
        "{out}"
    );
}

/// A suite without SLOs, a baseline that is not a saved search, and --save over the baseline
/// are bad input before any load is sent.
#[test]
fn bad_capacity_input_is_refused_before_any_load() {
    let ws = Workspace::new();
    let url = "http://127.0.0.1:9"; // nothing is sent: every case stops first
    let smoke = ws.suite("smoke");
    let no_slo = std::fs::read_to_string(&smoke)
        .unwrap()
        .replace("slo = { ttft = 1000, tpot = 200, e2el = 5000 }\n", "");
    std::fs::write(ws.path("suites/no-slo.toml"), no_slo).unwrap();
    let run = |args: &[&str]| {
        let mut all = vec!["bench", "--mode", "capacity", "--target", url];
        all.extend(args);
        chatgate_in(&all, &ws.path(""))
    };
    let (code, _, err) = run(&["suites/no-slo.toml"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("the suite states none") && err.contains("[latency.slo]"),
        "{err}"
    );
    std::fs::write(
        ws.path("not-a-search.json"),
        "{\"format\": \"something else\"}",
    )
    .unwrap();
    let (code, _, err) = run(&["suites/smoke.toml", "--baseline", "not-a-search.json"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("is not a saved capacity search"), "{err}");
    let (code, _, err) = run(&[
        "suites/smoke.toml",
        "--baseline",
        "not-a-search.json",
        "--save",
        "not-a-search.json",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("would replace the baseline"), "{err}");
    let (code, _, err) = run(&["suites/smoke.toml", "--resolution", "0"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--resolution must be between"), "{err}");
    let (code, _, err) = chatgate_in(
        &[
            "bench",
            "suites/smoke.toml",
            "--mode",
            "load",
            "--html",
            "x.html",
        ],
        &ws.path(""),
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("belong to --mode capacity"), "{err}");
}

/// A target that answers nothing stops the search after its first step (exit 3, the reason on
/// stderr), instead of halving the rate through slower and slower steps.
#[test]
fn an_unreachable_target_stops_the_search_at_once() {
    let ws = Workspace::new();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}"); // bound, then closed: refused
    let started = std::time::Instant::now();
    let (code, out, err) = chatgate_in(
        &[
            "bench",
            "suites/smoke.toml",
            "--mode",
            "capacity",
            "--target",
            &url,
            "--rate",
            "20",
            "--requests",
            "10",
            "--warmup",
            "0",
            "--format",
            "json",
        ],
        &ws.path(""),
    );
    assert_eq!(code, 3, "{out}\n{err}");
    assert!(err.contains("server.reachable error"), "{err}");
    let doc: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(doc["capacity"]["stopped"], "unreachable", "{doc}");
    assert_eq!(doc["capacity"]["steps"].as_array().unwrap().len(), 1);
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
}
