//! Large SFT files are streamed in parallel batches (issue 13): a fault in any row, however far
//! into the file, is counted exactly and the first one named; the report does not depend on
//! how many threads ran; a malformed row far into the file is bad input naming its line.
//! The rows are models/tiny-chat's real golden rows (captured with transformers), repeated
//! past the batch size and the in-memory sample, with distinct ids.
use crate::common::report_json::finding;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// models/tiny-chat's `<|im_end|>`, its turn terminator and a stop token.
const IM_END: u64 = 2;

fn model() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("models/tiny-chat")
}

/// `n` golden rows, row k (1-based) a copy of the fixture's row k mod its length, with id
/// `row-k`; `edit` may change a row's JSON.
fn rows(n: usize, edit: impl Fn(usize, &mut Value)) -> String {
    let text = std::fs::read_to_string(model().join("sft.jsonl")).unwrap();
    let base: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut out = String::new();
    for k in 1..=n {
        let mut row = base[(k - 1) % base.len()].clone();
        row["id"] = Value::from(format!("row-{k}"));
        edit(k, &mut row);
        writeln!(out, "{row}").unwrap();
    }
    out
}

/// Put the turn terminator inside row `k`'s first assistant reply: the serving render no
/// longer matches its ids, and a stop token sits inside a trained reply.
fn terminator_inside(row: &mut Value) {
    let mask: Vec<u64> = row["assistant_mask"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    let start = mask.iter().position(|&m| m == 1).unwrap();
    row["input_ids"][start + 1] = Value::from(IM_END);
}

struct Workspace {
    dir: tempfile::TempDir,
}

impl Workspace {
    fn new(golden: &str) -> Workspace {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("sft.jsonl"), golden).unwrap();
        let suite = format!(
            "[model]\ndir = {:?}\nadd_special_tokens = false\n\n[sft]\ngolden = \"sft.jsonl\"\n\n[generation]\ndo_sample = true\ntemperature = 0.7\ntop_p = 0.9\n\n[lock]\npath = \"suite.lock.json\"\n",
            model().display().to_string()
        );
        std::fs::write(dir.path().join("suite.toml"), suite).unwrap();
        let w = Workspace { dir };
        let (code, _, err) = w.run(&["lock"], None);
        assert_eq!(code, 0, "lock: {err}");
        w
    }

    fn run(&self, args: &[&str], threads: Option<usize>) -> (i32, String, String) {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_chatgate"));
        cmd.args(args)
            .arg(self.dir.path().join("suite.toml"))
            .env("NO_COLOR", "1");
        if let Some(t) = threads {
            cmd.env("RAYON_NUM_THREADS", t.to_string());
        }
        let out = cmd.output().unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    fn check(&self, threads: Option<usize>) -> (i32, Value) {
        let (code, out, err) = self.run(&["check", "--format", "json"], threads);
        let report =
            serde_json::from_str(&out).unwrap_or_else(|e| panic!("no JSON report ({e}): {err}"));
        (code, report)
    }
}

fn evidence<'a>(f: &'a Value, key: &str) -> &'a Value {
    f["evidence"]
        .get(key)
        .unwrap_or_else(|| panic!("no evidence {key:?} in {f:#}"))
}

#[test]
fn every_row_of_a_large_file_is_checked_and_faults_far_into_it_are_counted() {
    const N: usize = 3000;
    let healthy = Workspace::new(&rows(N, |_, _| {}));
    let (code, report) = healthy.check(None);
    assert_eq!(code, 0, "{report:#}");
    let f = finding(&report, "tokenizer.golden-reencode");
    assert!(
        f["message"]
            .as_str()
            .unwrap()
            .contains(&format!("all {N} golden")),
        "{f:#}"
    );
    let f = finding(&report, "template.parity");
    assert!(
        f["message"]
            .as_str()
            .unwrap()
            .contains(&format!("all {N} conversations")),
        "{f:#}"
    );

    // Two broken rows, both past the in-memory sample and in different batches.
    let broken = Workspace::new(&rows(N, |k, row| {
        if k == 1500 || k == 2900 {
            terminator_inside(row)
        }
    }));
    let (code, report) = broken.check(None);
    assert_eq!(code, 1, "{report:#}");
    let parity = finding(&report, "template.parity");
    assert_eq!(parity["severity"], "error");
    assert!(
        parity["message"]
            .as_str()
            .unwrap()
            .contains(&format!("in 2 of {N} conversations")),
        "{parity:#}"
    );
    assert_eq!(evidence(parity, "first conversation"), "row-1500");
    let inside = finding(&report, "generation.stop-inside-reply");
    assert_eq!(inside["severity"], "error");
    assert!(
        inside["message"]
            .as_str()
            .unwrap()
            .contains("inside 2 assistant replies"),
        "{inside:#}"
    );
    assert_eq!(evidence(inside, "first conversation"), "row-1500");

    // The same report on one thread as on all of them: order is the file's, not the pool's.
    let (_, one) = broken.check(Some(1));
    let (_, two) = broken.check(Some(2));
    assert_eq!(one["findings"], two["findings"]);
    assert_eq!(one["findings"], report["findings"]);
}

#[test]
fn a_malformed_row_far_into_a_large_file_is_bad_input_naming_its_line() {
    let mut text = rows(2999, |_, _| {});
    text.push_str("{\"messages\": [], \"input_ids\": [1, 2\n");
    let w = Workspace::new(&rows(10, |_, _| {}));
    std::fs::write(w.dir.path().join("sft.jsonl"), text).unwrap();
    let (code, _, err) = w.run(&["check"], None);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("sft.jsonl") && err.contains("line 3000"),
        "{err}"
    );
}
