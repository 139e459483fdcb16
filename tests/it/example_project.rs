//! `chatgate example DIR`: the project carried inside the binary is complete (the whole smoke gate
//! passes on it, away from the clone), is the repository's own files, and never replaces a file.
use std::path::Path;

use crate::common::cli::chatgate_in;

const REPO: &str = env!("CARGO_MANIFEST_DIR");

#[test]
fn the_example_project_passes_the_whole_gate_away_from_the_clone() {
    let tmp = tempfile::tempdir().unwrap();
    let (code, out, err) = chatgate_in(&["example", "demo"], tmp.path());
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("chatgate gate demo/suites/smoke.toml"),
        "{out}"
    );

    // Byte for byte the repository's files: the lock it carries pins these very weights.
    for f in chatgate::example::FILES {
        let ours = std::fs::read(Path::new(REPO).join(f.path)).unwrap();
        let written = std::fs::read(tmp.path().join("demo").join(f.path)).unwrap();
        assert!(ours == written, "{} differs from the repository's", f.path);
    }

    // Every file the gate reads is there: a missing one fails the offline chain or the replay.
    let (code, out, err) = chatgate_in(
        &[
            "gate",
            "demo/suites/smoke.toml",
            "--no-progress",
            "--format",
            "json",
        ],
        tmp.path(),
    );
    assert_eq!(code, 0, "the example's gate did not pass:\n{out}\n{err}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["verdict"], "pass", "{out}");
    let pending: Vec<_> = walk(&tmp.path().join("demo/snapshots"))
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "new"))
        .collect();
    assert!(
        pending.is_empty(),
        "the gate left pending snapshots: {pending:?}"
    );
}

#[test]
fn the_example_never_replaces_a_users_file() {
    let tmp = tempfile::tempdir().unwrap();
    let suite = tmp.path().join("demo/suites/smoke.toml");
    std::fs::create_dir_all(suite.parent().unwrap()).unwrap();
    std::fs::write(&suite, "# my own suite\n").unwrap();

    let (code, _out, err) = chatgate_in(&["example", "demo"], tmp.path());
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("smoke.toml") && err.contains("already exists"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&suite).unwrap(), "# my own suite\n");
    // Nothing else was written either: all or nothing.
    assert_eq!(walk(&tmp.path().join("demo")), vec![suite]);
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out.sort();
    out
}

/// The two flags the GitHub Action passes besides the reports: `--stack` overrides the suite's
/// `[target] stack` (the chain predicts that stack's feed), and `--sarif FILE` writes the same
/// document `--format sarif` prints.
#[test]
fn stack_overrides_the_suite_and_sarif_file_is_the_sarif_format() {
    let tmp = tempfile::tempdir().unwrap();
    let (code, _, err) = chatgate_in(&["example", "demo"], tmp.path());
    assert_eq!(code, 0, "{err}");
    let suite = "demo/suites/smoke.toml";
    let stack_of = |args: &[&str]| {
        let mut all = vec!["gate", suite, "--no-progress", "--format", "json"];
        all.extend_from_slice(args);
        let (code, out, err) = chatgate_in(&all, tmp.path());
        assert_eq!(code, 0, "{out}{err}");
        let r: serde_json::Value = serde_json::from_str(&out).unwrap();
        let f = r["findings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["check"] == "tokenizer.stack")
            .cloned()
            .unwrap_or_else(|| panic!("no tokenizer.stack finding: {out}"));
        f["message"].as_str().unwrap().to_string()
    };
    assert!(
        stack_of(&[]).contains("what transformers feeds"),
        "{}",
        stack_of(&[])
    );
    let told = stack_of(&["--stack", "tokenizers"]);
    assert!(told.contains("what tokenizers feeds"), "{told}");

    let (code, printed, err) = chatgate_in(
        &[
            "gate",
            suite,
            "--no-progress",
            "--format",
            "sarif",
            "--sarif",
            "g.sarif",
        ],
        tmp.path(),
    );
    assert_eq!(code, 0, "{err}");
    let file = std::fs::read_to_string(tmp.path().join("g.sarif")).unwrap();
    let (a, b): (serde_json::Value, serde_json::Value) = (
        serde_json::from_str(&printed).unwrap(),
        serde_json::from_str(&file).unwrap(),
    );
    assert_eq!(a["version"], "2.1.0");
    assert_eq!(a["runs"][0]["tool"], b["runs"][0]["tool"]);
    assert_eq!(a["runs"][0]["results"], b["runs"][0]["results"]);

    let (code, _, err) = chatgate_in(&["gate", suite, "--stack", "ollama"], tmp.path());
    assert_eq!(code, 2, "an unknown stack is bad input: {err}");
    assert!(err.contains("possible values"), "{err}");
}
