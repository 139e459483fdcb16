//! The snapshot workflow end to end on real files: insta-compatible files that insta itself
//! reads, pending files that never touch accepted ones, accept/reject that never lose a
//! snapshot, orphans, comparators over records, `cargo insta` on our files, and the
//! `review`/`accept`/`reject` commands of the built binary.
use std::path::{Path, PathBuf};
use std::process::Command as StdCommand;

use assert_cmd::Command;
use chatgate::exchange::{Record, TokenLogprob, TopLogprob};
use chatgate::snapshot::{
    DivergenceClass, SnapshotBody, SnapshotFile, SnapshotHeader, SnapshotInfo, SnapshotSettings,
    Store,
};
use chatgate::suite::Comparator;
use predicates::prelude::*;

/// A generated token for a test record: text, logprob, top alternatives.
type Tok<'a> = (&'a str, f32, &'a [(&'a str, f32)]);

const TRICKY: &str = "Line one.  \n\n---\nsource: not a header\n---\nunicode: 日本語 🦀\ttab\r\nend with newlines\n\n";

fn record(text: &str, ids: Vec<u32>, tokens: &[Tok]) -> Record {
    let mut r = Record::new();
    r.text = text.to_string();
    r.finish_reason = Some("stop".into());
    r.token_ids = Some(ids.clone());
    r.system_fingerprint = Some("fp_123".into());
    r.logprobs = Some(
        tokens
            .iter()
            .zip(ids)
            .map(|((t, l, top), id)| TokenLogprob {
                merged: false,
                id: Some(id),
                token: t.to_string(),
                logprob: *l,
                top: top
                    .iter()
                    .map(|(t, l)| TopLogprob {
                        id: None,
                        token: t.to_string(),
                        logprob: *l,
                    })
                    .collect(),
            })
            .collect(),
    );
    r
}

fn file_for(id: &str, body: SnapshotBody) -> SnapshotFile {
    SnapshotFile {
        header: SnapshotHeader {
            source: "suites/s.toml".into(),
            expression: id.into(),
            assertion_line: None,
            info: SnapshotInfo {
                suite: "s".into(),
                prompt: id.into(),
                target: Some("http://127.0.0.1:8000".into()),
                model: Some("tiny-chat".into()),
                messages: Some(vec![serde_json::json!({"role": "user", "content": id})]),
                tools: None,
                settings: SnapshotSettings {
                    temperature: Some(0.0),
                    seed: Some(0),
                    max_tokens: Some(48),
                    stop: vec!["\n\n".into()],
                },
                comparator: Comparator::Regex(r"^\d+\s$".into()),
                template_date: None,
            },
        },
        body,
    }
}

fn tricky_file(id: &str) -> SnapshotFile {
    let r = record(
        TRICKY,
        vec![10, 11, 12],
        &[
            ("Line", -0.0123, &[("Row", -4.4)]),
            (" one", -0.5, &[]),
            (".", -0.25, &[]),
        ],
    );
    file_for(id, SnapshotBody::from_record(&r, 16))
}

#[test]
fn a_tricky_reply_round_trips_through_the_store_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("nested/snapshots")).unwrap();
    let f = tricky_file("tricky");
    let path = store.write_pending("tricky", &f).unwrap();
    assert_eq!(path, store.pending_path("tricky"));
    let back = store.pending("tricky").unwrap().unwrap();
    assert_eq!(back, f);
    assert_eq!(back.body.text, TRICKY);
    assert_eq!(back.body.token_ids, Some(vec![10, 11, 12]));
    assert!(store.accepted("tricky").unwrap().is_none());
}

#[test]
fn insta_reads_our_files_and_compares_our_body() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let f = tricky_file("tricky");
    store.write_pending("tricky", &f).unwrap();
    std::fs::copy(store.pending_path("tricky"), store.accepted_path("tricky")).unwrap();

    let snap = insta::Snapshot::from_file(&store.accepted_path("tricky")).unwrap();
    assert_eq!(snap.metadata().source(), Some("suites/s.toml"));
    assert_eq!(snap.metadata().expression(), Some("tricky"));
    let contents = snap
        .contents()
        .as_text()
        .expect("a text snapshot")
        .to_string();
    assert_eq!(
        contents,
        f.body.render().trim_end(),
        "insta sees exactly our body"
    );
    // What insta compares can be read back into the same reply, text byte for byte.
    let reread = SnapshotBody::parse(&contents, Path::new("insta"), 1).unwrap();
    assert_eq!(reread.text, TRICKY);

    let same = insta::Snapshot::from_file(&store.pending_path("tricky")).unwrap();
    assert!(same
        .contents()
        .as_text()
        .unwrap()
        .matches_latest(snap.contents().as_text().unwrap()));
    let mut changed = tricky_file("tricky");
    changed.body.text.push(' '); // only a trailing space: insta must still see a difference
    store.write_pending("tricky", &changed).unwrap();
    let other = insta::Snapshot::from_file(&store.pending_path("tricky")).unwrap();
    assert!(!other
        .contents()
        .as_text()
        .unwrap()
        .matches_latest(snap.contents().as_text().unwrap()));
}

fn mtime(p: &Path) -> std::time::SystemTime {
    std::fs::metadata(p).unwrap().modified().unwrap()
}

#[test]
fn write_pending_never_touches_the_accepted_file() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let accepted = store.accepted_path("p");
    std::fs::write(&accepted, tricky_file("p").render()).unwrap();
    let (bytes, time) = (std::fs::read(&accepted).unwrap(), mtime(&accepted));
    std::thread::sleep(std::time::Duration::from_millis(20));
    for text in ["first change", "second change"] {
        let body = SnapshotBody {
            text: text.into(),
            ..Default::default()
        };
        store.write_pending("p", &file_for("p", body)).unwrap();
    }
    assert_eq!(std::fs::read(&accepted).unwrap(), bytes);
    assert_eq!(mtime(&accepted), time);
    assert_eq!(
        store.pending("p").unwrap().unwrap().body.text,
        "second change"
    );
}

#[test]
fn accept_and_reject_never_lose_a_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let old = tricky_file("p");
    std::fs::write(store.accepted_path("p"), old.render()).unwrap();

    // Reject: the pending file goes, the accepted one stays byte for byte.
    let mut new = old.clone();
    new.body.text = "rejected reply".into();
    store.write_pending("p", &new).unwrap();
    assert!(store.reject("p").unwrap());
    assert!(!store.pending_path("p").exists());
    assert_eq!(
        std::fs::read_to_string(store.accepted_path("p")).unwrap(),
        old.render()
    );
    assert!(!store.reject("p").unwrap(), "nothing left to reject");

    // Accept: the pending file replaces the accepted one, assertion_line stripped.
    new.body.text = "accepted reply".into();
    new.header.assertion_line = Some(42);
    store.write_pending("p", &new).unwrap();
    assert!(std::fs::read_to_string(store.pending_path("p"))
        .unwrap()
        .contains("assertion_line: 42"));
    assert!(store.accept("p").unwrap());
    assert!(!store.pending_path("p").exists());
    let accepted = store.accepted("p").unwrap().unwrap();
    assert_eq!(accepted.body.text, "accepted reply");
    assert_eq!(accepted.header.assertion_line, None);
    assert!(!store.accept("p").unwrap(), "nothing left to accept");

    // A malformed pending file is refused and the accepted file is untouched.
    std::fs::write(store.pending_path("p"), "---\nsource: x\n---\nnot a body\n").unwrap();
    let e = store.accept("p").unwrap_err();
    assert_eq!(e.exit_code(), 2);
    assert!(e.to_string().contains("p.snap.new: line 4"), "{e}");
    assert_eq!(
        store.accepted("p").unwrap().unwrap().body.text,
        "accepted reply"
    );
}

#[test]
fn leftovers_of_a_crash_are_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    std::fs::write(store.accepted_path("a"), tricky_file("a").render()).unwrap();
    store.write_pending("b", &tricky_file("b")).unwrap();
    // What an interrupted write could leave behind.
    std::fs::write(dir.path().join("a.snap.new.tmp"), "half a fi").unwrap();
    std::fs::write(dir.path().join(".chatgate-Xyz12.tmp"), "---\nsource:").unwrap();
    std::fs::write(dir.path().join(".tmpAbC.snap.new"), "junk").unwrap();
    std::fs::create_dir(dir.path().join("dir.snap")).unwrap();
    assert_eq!(store.accepted_ids().unwrap(), ["a"]);
    assert_eq!(store.pending_ids().unwrap(), ["b"]);
    assert!(store.pending("a").unwrap().is_none());
    assert!(store.orphans(&["a".into(), "b".into()]).unwrap().is_empty());
    // Writing again over the stray files works.
    store.write_pending("a", &tricky_file("a")).unwrap();
    assert!(store.accept("a").unwrap());
}

#[test]
fn orphans_are_files_of_prompts_that_left_the_suite() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    for id in ["kept", "gone"] {
        std::fs::write(store.accepted_path(id), tricky_file(id).render()).unwrap();
    }
    store
        .write_pending("gone-too", &tricky_file("gone-too"))
        .unwrap();
    store.write_pending("kept", &tricky_file("kept")).unwrap();
    std::fs::write(dir.path().join("latency.json"), "{}").unwrap();
    let orphans = store.orphans(&["kept".into()]).unwrap();
    let names: Vec<_> = orphans.iter().map(|o| (o.id.as_str(), o.pending)).collect();
    assert_eq!(names, [("gone", false), ("gone-too", true)]);
    assert_eq!(store.prune(&orphans).unwrap(), 2);
    assert!(store.orphans(&["kept".into()]).unwrap().is_empty());
    assert!(store.accepted_path("kept").exists() && store.pending_path("kept").exists());
    assert!(
        dir.path().join("latency.json").exists(),
        "other files are left alone"
    );
    assert!(store.remove_stale_pending("kept").unwrap());
    assert!(!store.pending_path("kept").exists());
    assert!(store.accepted_path("kept").exists());
}

#[test]
fn ids_that_could_escape_the_folder_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    for id in ["../x", "a/b", ".hidden", ""] {
        let e = store.write_pending(id, &tricky_file("x")).unwrap_err();
        assert_eq!(e.exit_code(), 2, "{id}");
    }
}

fn body_of(text: &str, ids: Vec<u32>, tokens: &[Tok]) -> SnapshotBody {
    SnapshotBody::from_record(&record(text, ids, tokens), 16)
}

#[test]
fn comparators_over_records_pass_and_fail() {
    let acc = body_of(
        "The answer is 42.",
        vec![1, 2, 3],
        &[
            ("The", -0.01, &[]),
            (" answer", -0.1, &[]),
            (" is 42.", -0.2, &[]),
        ],
    );
    let same = acc.clone();
    let spaced = body_of(
        "The  answer is\n42.",
        vec![1, 2, 4],
        &[
            ("The", -0.01, &[]),
            (" answer", -0.1, &[]),
            (" is\n42.", -0.2, &[]),
        ],
    );
    let cases: Vec<(Comparator, &SnapshotBody, bool)> = vec![
        (Comparator::Exact, &same, true),
        (Comparator::Exact, &spaced, false),
        (Comparator::ExactTokens, &same, true),
        (Comparator::ExactTokens, &spaced, false),
        (Comparator::PrefixTokens(2), &spaced, true),
        (Comparator::PrefixTokens(3), &spaced, false),
        (Comparator::NormalizedWhitespace, &spaced, true),
        (Comparator::Similarity(0.6), &spaced, true),
        (Comparator::Similarity(0.7), &spaced, false),
        (Comparator::Contains("42".into()), &spaced, true),
        (Comparator::Contains("43".into()), &spaced, false),
        (Comparator::Regex(r"is\s+42\.$".into()), &spaced, true),
        (Comparator::Regex(r"^42".into()), &spaced, false),
    ];
    for (c, new, pass) in cases {
        let result = c.compare(&acc, new);
        assert_eq!(result.pass, pass, "{}: {}", c.describe(), result.detail);
        assert!(!result.detail.is_empty());
    }
    let json = body_of("{\"n\": 1}", vec![1], &[("{", -0.1, &[])]);
    let schema = Comparator::JsonSchema(serde_json::json!({"type": "object", "required": ["n"]}));
    assert!(schema.compare(&acc, &json).pass);
    assert!(!schema.compare(&acc, &acc).pass);
}

#[test]
fn the_accepted_runs_margin_survives_the_file_and_classifies_the_change() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let acc = body_of(
        "It is blue",
        vec![7, 8, 9],
        &[
            ("It", -0.001, &[]),
            (" is", -0.002, &[]),
            (" blue", -0.6934, &[(" green", -0.7300)]),
        ],
    );
    std::fs::write(store.accepted_path("sky"), file_for("sky", acc).render()).unwrap();
    let accepted = store.accepted("sky").unwrap().unwrap().body;
    let drift = body_of(
        "It is green",
        vec![7, 8, 10],
        &[
            ("It", -0.001, &[]),
            (" is", -0.002, &[]),
            (" green", -0.69, &[(" blue", -0.71)]),
        ],
    );
    let d = Comparator::Exact
        .compare(&accepted, &drift)
        .divergence
        .unwrap();
    assert_eq!(d.index, 2);
    assert_eq!(d.accepted_logprob, Some(-0.693));
    assert_eq!(d.accepted_logprob_of_new, Some(-0.73));
    assert_eq!(d.class, DivergenceClass::NumericDrift);
    let change = body_of(
        "It is red",
        vec![7, 8, 11],
        &[
            ("It", -0.001, &[]),
            (" is", -0.002, &[]),
            (" red", -0.01, &[(" blue", -5.0)]),
        ],
    );
    let d = Comparator::Exact
        .compare(&accepted, &change)
        .divergence
        .unwrap();
    assert_eq!(d.class, DivergenceClass::BehaviourChange);
    assert_eq!(d.new_logprob_of_accepted, Some(-5.0));
}

// ---- cargo insta on our files ----

fn cargo_insta_available() -> bool {
    StdCommand::new("cargo")
        .args(["insta", "--version"])
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn cargo_insta_lists_and_accepts_our_pending_files() {
    if !cargo_insta_available() {
        // CI installs it (.ci/run), so there the check must run; a developer without it is told.
        assert!(
            std::env::var_os("CI").is_none(),
            "cargo-insta is not installed: .ci/run must install it"
        );
        eprintln!("cargo-insta is not installed: skipping the cargo insta compatibility check");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let pkg = dir.path();
    std::fs::write(
        pkg.join("Cargo.toml"),
        "[package]\nname = \"snapcheck\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[workspace]\n",
    )
    .unwrap();
    std::fs::create_dir_all(pkg.join("src")).unwrap();
    std::fs::write(pkg.join("src/lib.rs"), "").unwrap();
    let store = Store::open(&pkg.join("snapshots/s")).unwrap();
    let fresh = tricky_file("fresh");
    store.write_pending("fresh", &fresh).unwrap();
    let mut old = tricky_file("changed");
    old.body.text = "old".into();
    std::fs::write(store.accepted_path("changed"), old.render()).unwrap();
    let mut changed = tricky_file("changed");
    changed.header.assertion_line = Some(7);
    store.write_pending("changed", &changed).unwrap();

    let insta = |args: &[&str]| {
        let out = StdCommand::new("cargo")
            .arg("insta")
            .args(args)
            .current_dir(pkg)
            .env_remove("CARGO_TARGET_DIR")
            .env("CARGO_TERM_COLOR", "never")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "cargo insta {args:?} failed:\n{text}");
        text
    };
    let listed = insta(&["pending-snapshots", "--as-json"]);
    assert!(listed.contains("fresh.snap"), "{listed}");
    assert!(listed.contains("changed.snap"), "{listed}");
    insta(&["accept"]);
    assert!(store.pending_ids().unwrap().is_empty());
    // cargo insta rewrote the files with its own YAML emitter: we still read them, the reply
    // is intact and assertion_line is gone.
    let accepted = store.accepted("changed").unwrap().unwrap();
    assert_eq!(accepted.body, changed.body);
    assert_eq!(accepted.header.assertion_line, None);
    assert_eq!(accepted.header.info, changed.header.info);
    assert_eq!(store.accepted("fresh").unwrap().unwrap().body.text, TRICKY);
}

// ---- the CLI ----

fn model_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("models/tiny-chat")
}

/// A suite with prompts `a` and `b` in a tempdir.
fn cli_suite() -> (tempfile::TempDir, PathBuf, Store) {
    let dir = tempfile::tempdir().unwrap();
    let model = model_dir();
    let suite = dir.path().join("s.toml");
    std::fs::write(
        &suite,
        format!(
            "name = \"s\"\n[model]\ndir = {:?}\n[replay]\nprompts = \"prompts.jsonl\"\n",
            model.display().to_string()
        ),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("prompts.jsonl"),
        "{\"id\": \"a\", \"prompt\": \"Capital of France?\"}\n{\"id\": \"b\", \"prompt\": \"2+2?\", \"compare\": {\"contains\": \"4\"}}\n",
    )
    .unwrap();
    let store = Store::open(&dir.path().join("snapshots/s")).unwrap();
    (dir, suite, store)
}

fn chatgate() -> Command {
    let mut c = Command::cargo_bin("chatgate").unwrap();
    c.env("NO_COLOR", "1");
    c
}

#[test]
fn cli_accept_all_and_report_orphans() {
    let (_dir, suite, store) = cli_suite();
    store.write_pending("a", &tricky_file("a")).unwrap();
    store.write_pending("b", &tricky_file("b")).unwrap();
    std::fs::write(store.accepted_path("old"), tricky_file("old").render()).unwrap();
    chatgate()
        .arg("accept")
        .arg(&suite)
        .assert()
        .code(0)
        .stdout(predicate::str::contains(
            "accepted a\naccepted b\naccepted 2 snapshot(s)",
        ))
        .stdout(predicate::str::contains("1 orphaned snapshot file(s)"))
        .stdout(predicate::str::contains("old.snap"));
    assert_eq!(store.accepted_ids().unwrap(), ["a", "b", "old"]);
    assert!(store.pending_ids().unwrap().is_empty());
    chatgate()
        .args(["accept", "--prune-orphans"])
        .arg(&suite)
        .assert()
        .code(0)
        .stdout(predicate::str::contains("no pending snapshots"))
        .stdout(predicate::str::contains("pruned 1 orphaned"));
    assert_eq!(store.accepted_ids().unwrap(), ["a", "b"]);
}

#[test]
fn cli_reject_one_prompt_keeps_the_rest() {
    let (_dir, suite, store) = cli_suite();
    std::fs::write(store.accepted_path("a"), tricky_file("a").render()).unwrap();
    let before = std::fs::read(store.accepted_path("a")).unwrap();
    let mut new = tricky_file("a");
    new.body.text = "changed".into();
    store.write_pending("a", &new).unwrap();
    store.write_pending("b", &tricky_file("b")).unwrap();
    chatgate()
        .args(["reject", "--prompt", "a"])
        .arg(&suite)
        .assert()
        .code(0)
        .stdout(predicate::str::contains("rejected a\n"));
    assert_eq!(std::fs::read(store.accepted_path("a")).unwrap(), before);
    assert_eq!(store.pending_ids().unwrap(), ["b"]);
}

#[test]
fn cli_bad_input_exits_2_with_a_message() {
    let (dir, suite, store) = cli_suite();
    store.write_pending("a", &tricky_file("a")).unwrap();
    chatgate()
        .args(["accept", "--prompt", "b"])
        .arg(&suite)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("\"b\" has no pending snapshot"));
    chatgate()
        .args(["reject", "--prompt", "nope"])
        .arg(&suite)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("not in the suite"));
    assert_eq!(store.pending_ids().unwrap(), ["a"], "nothing changed");

    let no_replay = dir.path().join("plain.toml");
    std::fs::write(&no_replay, "[model]\ndir = \"m\"\n").unwrap();
    chatgate()
        .arg("accept")
        .arg(&no_replay)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("plain.toml"))
        .stderr(predicate::str::contains("no [replay] section"));

    // A corrupt pending file: exit 2 naming it, the accepted file untouched.
    std::fs::write(store.pending_path("a"), "garbage").unwrap();
    chatgate()
        .arg("accept")
        .arg(&suite)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("a.snap.new"));
    assert!(!store.accepted_path("a").exists());
}

#[test]
fn cli_review_refuses_without_a_terminal() {
    let (_dir, suite, store) = cli_suite();
    store.write_pending("a", &tricky_file("a")).unwrap();
    chatgate()
        .arg("review")
        .arg(&suite)
        .write_stdin("a\n")
        .assert()
        .code(2)
        .stderr(predicate::str::contains("not a terminal"))
        .stderr(predicate::str::contains("chatgate accept"));
    assert_eq!(store.pending_ids().unwrap(), ["a"], "nothing accepted");
}

/// On a real terminal (a pseudo-terminal here) one key answers: `a` accepts without Enter.
#[test]
fn cli_review_takes_single_keys_on_a_terminal() {
    use std::io::{Read, Write};
    use std::os::fd::{FromRawFd, OwnedFd};
    let (_dir, suite, store) = cli_suite();
    store.write_pending("a", &tricky_file("a")).unwrap();
    store.write_pending("b", &tricky_file("b")).unwrap();

    let (mut master, slave) = unsafe {
        let (mut m, mut s) = (0, 0);
        let rc = libc::openpty(
            &mut m,
            &mut s,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        );
        assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
        (
            std::fs::File::from(OwnedFd::from_raw_fd(m)),
            OwnedFd::from_raw_fd(s),
        )
    };
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("chatgate"))
        .arg("review")
        .arg(&suite)
        .env("NO_COLOR", "1")
        .stdin(slave.try_clone().unwrap())
        .stdout(slave.try_clone().unwrap())
        .stderr(slave)
        .spawn()
        .unwrap();

    // Read the terminal until `want` shows, at most 20 s.
    let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
    let mut reader = master.try_clone().unwrap();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = reader.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let mut seen = String::new();
    let mut wait_for = |want: &str| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while !seen.contains(want) {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match rx.recv_timeout(left) {
                Ok(bytes) => seen.push_str(&String::from_utf8_lossy(&bytes)),
                Err(_) => panic!("{want:?} never showed; the terminal showed:\n{seen}"),
            }
        }
    };
    wait_for("[1/2] a");
    wait_for("quit [q]? ");
    master.write_all(b"a").unwrap(); // no Enter
    wait_for("accepted a");
    wait_for("[2/2] b");
    master.write_all(b"s").unwrap();
    wait_for("skipped b");
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}\n{seen}");
    assert_eq!(store.accepted_ids().unwrap(), ["a"]);
    assert_eq!(store.pending_ids().unwrap(), ["b"]);
}
