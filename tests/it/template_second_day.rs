//! A user's second day, on a template that prints today's date: Llama-3.2's real template
//! (`strftime_now("%d %b %Y")` unless a `date_string` is given) on a stand-in with its real
//! 128k tokenizer. `chatgate init` → `gate --update` → `gate` on each CI server with its
//! default flags, then the same suite the next day — chatgate's clock moved with
//! `CHATGATE_NOW`, the server's with libfaketime (or `CHATGATE_NOW` for `chatgate serve`) — must
//! give the same verdict: a day passing is never a regression. And golden rows a trainer
//! rendered on another day than the suite pins compare at their own day.
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::clock::{chatgate_now, faketime_env, today_and_tomorrow};
use crate::common::families::LLAMA32;
use crate::common::llama_server::{self, LlamaServer};
use crate::common::transformers_serve::{self, TransformersServe};

/// Known quirks of `transformers serve` 5.23 that fail its healthy gate on every family (the
/// family matrix's healthy column): no `[DONE]`, the stop text kept, stream ≠ non-stream.
const TRANSFORMERS_SERVE_QUIRKS: &[&str] =
    &["server.sse-done", "server.stop", "server.stream-parity"];

/// `chatgate ARGS` in `dir` with `CHATGATE_NOW` set when given: (exit code, stdout, stderr).
fn chatgate(args: &[&str], dir: &Path, now: Option<&str>) -> (i32, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_chatgate"));
    cmd.args(args).current_dir(dir).env("NO_COLOR", "1");
    if let Some(n) = now {
        cmd.env("CHATGATE_NOW", n);
    }
    let out = cmd.output().expect("chatgate runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// One gate run: its exit code, its error checks and its JSON report.
struct Run {
    code: i32,
    errors: Vec<String>,
    report: Value,
}

impl Run {
    fn has(&self, check: &str) -> bool {
        self.report["findings"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|f| f["check"] == check)
    }
}

fn gate(dir: &Path, now: Option<&str>, update: bool, target: Option<&str>) -> Run {
    let mut g = crate::common::cli::gate(dir).update_if(update);
    if let Some(t) = target {
        g = g.target(t);
    }
    if let Some(n) = now {
        g = g.env("CHATGATE_NOW", n);
    }
    let (code, report) = g.run();
    let errors = report["findings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|f| f["severity"] == "error")
        .map(|f| format!("{}: {} {}", f["check"], f["message"], f["evidence"]))
        .collect();
    Run {
        code,
        errors,
        report,
    }
}

fn checks(r: &Run) -> Vec<String> {
    let mut c: Vec<String> = r
        .errors
        .iter()
        .map(|e| {
            e.split(':')
                .next()
                .unwrap_or_default()
                .trim_matches('"')
                .to_string()
        })
        .collect();
    c.dedup();
    c
}

/// init's suite with fewer and shorter probes, replies and latency repeats: llama-cpp-python
/// sorts the whole 128k vocabulary in Python for every logprob token, and dates, not load,
/// are what this test is about. The server flags stay their defaults.
fn lighten(suite: &Path) {
    let mut doc: toml::Table = std::fs::read_to_string(suite).unwrap().parse().unwrap();
    let table = |doc: &mut toml::Table, name: &str| -> toml::Table {
        doc.get(name)
            .and_then(|v| v.as_table().cloned())
            .unwrap_or_default()
    };
    let mut server = table(&mut doc, "server");
    server.insert("probes".into(), 2.into());
    server.insert("max_tokens".into(), 8.into());
    doc.insert("server".into(), server.into());
    let mut replay = table(&mut doc, "replay");
    replay.insert("max_tokens".into(), 12.into());
    doc.insert("replay".into(), replay.into());
    let mut latency = table(&mut doc, "latency");
    latency.insert("repeats".into(), 1.into());
    doc.insert("latency".into(), latency.into());
    std::fs::write(suite, toml::to_string(&doc).unwrap()).unwrap();
}

/// A day's server, held until the day ends (each kind stops its process when dropped).
enum Day {
    InProcess,
    Serve(Child),
    Llama(#[allow(dead_code)] LlamaServer),
    Transformers(#[allow(dead_code)] TransformersServe),
}

impl Drop for Day {
    fn drop(&mut self) {
        if let Day::Serve(c) = self {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The real `chatgate serve` binary on the stand-in, its clock at `now` (or the real one).
fn chatgate_serve(model: &Path, now: Option<&str>) -> (Child, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_chatgate"));
    cmd.args(["serve", "--model"])
        .arg(model)
        .args(["--port", &port.to_string(), "--model-name", "model"])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if let Some(n) = now {
        cmd.env("CHATGATE_NOW", n);
    }
    let mut child = cmd.spawn().unwrap();
    let t = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(child.try_wait().unwrap().is_none(), "chatgate serve exited");
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "chatgate serve did not start"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    (child, format!("http://127.0.0.1:{port}"))
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Server {
    InProcess,
    Serve,
    LlamaCppPython,
    TransformersServe,
}

/// Start `server` on the stand-in for a day: `days` = 0 today, 1 tomorrow. None when a real
/// server is not installed (the skip is said, and fails in CI).
fn start(server: Server, standin: &Path, days: i64) -> Option<(Day, Option<String>)> {
    let tomorrow = chatgate_now(&today_and_tomorrow().1);
    let now = (days == 1).then_some(tomorrow.as_str());
    Some(match server {
        Server::InProcess => (Day::InProcess, None),
        Server::Serve => {
            let (child, url) = chatgate_serve(standin, now);
            (Day::Serve(child), Some(url))
        }
        Server::LlamaCppPython => {
            let py = llama_server::python()?;
            let env = if days == 0 {
                vec![]
            } else {
                faketime_env(days)?
            };
            let s = crate::common::llama_server::start_with_env(
                &py,
                &standin.join("model.gguf"),
                "model",
                &[],
                &env,
            );
            let url = s.url.clone();
            (Day::Llama(s), Some(url))
        }
        Server::TransformersServe => {
            let exe = transformers_serve::executable()?;
            let env = if days == 0 {
                vec![]
            } else {
                faketime_env(days)?
            };
            let s = crate::common::transformers_serve::start_with_env(&exe, standin, &env);
            let url = s.url.clone();
            (Day::Transformers(s), Some(url))
        }
    })
}

/// init and `gate --update` today; `gate` tomorrow (both clocks moved), against today's
/// snapshots and baseline. The verdict must not change with the day.
fn second_day(server: Server) {
    let (standin, _) = LLAMA32.standin();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let Some((day1, url)) = start(server, &standin, 0) else {
        return;
    };
    let model = standin.to_str().unwrap();
    let mut init = vec!["init", "suite.toml", "--model", model];
    if let Some(u) = &url {
        init.extend(["--target", u]);
    }
    let (code, out, err) = chatgate(&init, dir, None);
    assert_eq!(code, 0, "init: {out}{err}");
    let suite = std::fs::read_to_string(dir.join("suite.toml")).unwrap();
    let today = chrono::Local::now().format("%Y-%m-%d").to_string();
    assert!(
        suite.contains(&format!("template_date = \"{today}\"")),
        "init pins the day the rows are made:\n{suite}"
    );
    if server == Server::LlamaCppPython {
        // The documented server path: init asks the server what it is.
        assert!(suite.contains("stack = \"llama-cpp-python\""), "{suite}");
        assert!(suite.contains("repeat_penalty = 1.0"), "{suite}");
    }
    lighten(&dir.join("suite.toml"));
    // Day 1 is the update alone: a gate right after it replays the snapshots it accepted, which
    // the day-2 gate does too, across the day (20-35 s a server, the same verdict every run).
    let first = gate(dir, None, true, None);
    drop(day1);
    let expected_day1 = |r: &Run| match server {
        Server::TransformersServe => checks(r)
            .iter()
            .all(|c| TRANSFORMERS_SERVE_QUIRKS.contains(&c.as_str())),
        _ => r.code == 0,
    };
    assert!(
        expected_day1(&first),
        "day 1 on {server:?}: --update exit {} {:#?}",
        first.code,
        first.errors
    );
    // The server restarts on another port: the suite's url is yesterday's.
    let Some((day2, url)) = start(server, &standin, 1) else {
        return;
    };
    let tomorrow = chatgate_now(&today_and_tomorrow().1);
    let second = gate(dir, Some(&tomorrow), false, url.as_deref());
    drop(day2);
    assert_eq!(
        (second.code, checks(&second)),
        (first.code, checks(&first)),
        "day 2 on {server:?} differs from day 1: {:#?}",
        second.errors
    );
    // The report says what it did with the date.
    for f in second.report["findings"].as_array().into_iter().flatten() {
        if f["check"].as_str().is_some_and(|c| c.contains("date")) {
            eprintln!(
                "day 2 on {server:?}: {} {} {}",
                f["check"], f["message"], f["evidence"]
            );
        }
    }
    assert!(second.has("template.date"), "{}", second.report);
    if matches!(server, Server::LlamaCppPython | Server::TransformersServe) {
        // These print their own date: replies compared with yesterday's snapshots were set
        // aside where they differ, and said so.
        let replays = second.report["prompts"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let aside = replays
            .iter()
            .filter(|p| {
                p["detail"]
                    .as_str()
                    .is_some_and(|d| d.starts_with("date set aside"))
            })
            .count();
        assert_eq!(aside > 0, second.has("replay.date"), "{}", second.report);
    } else {
        // In-process and `chatgate serve` (sent the pinned date_string) render the suite's day.
        assert!(!second.has("replay.date"), "{}", second.report["findings"]);
    }
}

mod second_day {
    use super::*;

    #[test]
    fn in_process() {
        second_day(Server::InProcess);
    }

    #[test]
    fn chatgate_serve() {
        second_day(Server::Serve);
    }

    #[test]
    fn llama_cpp_python() {
        second_day(Server::LlamaCppPython);
    }

    #[test]
    fn transformers_serve() {
        second_day(Server::TransformersServe);
    }
}

/// Golden rows a trainer rendered five days before the day the suite pins: each is compared at
/// its own day (the date span set aside), the report names the day, and nothing fails.
#[test]
fn golden_rows_from_another_day_compare_at_their_own_day() {
    let (standin, _) = LLAMA32.standin();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (now, _) = today_and_tomorrow();
    let before = now - chrono::Duration::days(5);
    let model = standin.to_str().unwrap();
    // The trainer's rows: rendered five days ago.
    let (code, out, err) = chatgate(
        &["init", "suite.toml", "--model", model],
        dir,
        Some(&chatgate_now(&before)),
    );
    assert_eq!(code, 0, "init: {out}{err}");
    let rows = std::fs::read_to_string(dir.join("suite.sft.jsonl")).unwrap();
    let day_then = before.format("%d %b %Y").to_string();
    // The rows differ from today's render: the template printed another date into them.
    let row: Value = serde_json::from_str(rows.lines().next().unwrap()).unwrap();
    std::fs::write(dir.join("messages.json"), row["messages"].to_string()).unwrap();
    let (code, out, err) = chatgate(
        &[
            "render",
            "--model",
            model,
            "--messages",
            "messages.json",
            "--format",
            "json",
        ],
        dir,
        Some(&chatgate_now(&now)),
    );
    assert_eq!(code, 0, "{err}");
    let today_render: Value = serde_json::from_str(&out).unwrap();
    assert_ne!(
        today_render["ids"], row["input_ids"],
        "the rows carry their day"
    );
    assert!(!today_render["text"].as_str().unwrap().contains(&day_then));
    // The suite now pins today.
    let suite = std::fs::read_to_string(dir.join("suite.toml")).unwrap();
    let pinned_then = before.format("%Y-%m-%d").to_string();
    let today = now.format("%Y-%m-%d").to_string();
    assert!(suite.contains(&pinned_then), "{suite}");
    std::fs::write(dir.join("suite.toml"), suite.replace(&pinned_then, &today)).unwrap();
    let (code, out, err) = chatgate(&["check", "suite.toml", "--format", "json"], dir, None);
    let report: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}{err}"));
    assert_eq!(code, 0, "{report}");
    let date = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["check"] == "template.date")
        .unwrap_or_else(|| panic!("a template.date finding: {report}"));
    let evidence = date["evidence"].to_string();
    assert!(evidence.contains("rows made on another day"), "{evidence}");
    // The rows' own day, as the template prints it.
    assert!(evidence.contains(&day_then), "{evidence}");
    // Parity holds: the rows equal the render at their own day.
    let parity = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["check"] == "template.parity")
        .unwrap();
    assert_eq!(parity["severity"], "pass", "{parity}");
}
