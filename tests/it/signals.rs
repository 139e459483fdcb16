//! SIGINT and SIGTERM during a write leave no temporary file and no half-written file: the
//! process removes what it was writing and exits 128 + the signal, as a shell reports.
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn smoke_suite() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("suites/smoke.toml")
}

fn temporaries(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .expect("read dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(".chatgate-") && n.ends_with(".tmp"))
        })
        .collect()
}

fn signal_mid_write(signal: &str, code: i32) {
    let dir = tempfile::tempdir().expect("tempdir");
    let report = dir.path().join("gate.junit.xml");
    let mut child = Command::new(env!("CARGO_BIN_EXE_chatgate"))
        .arg("gate")
        .arg(smoke_suite())
        .arg("--no-progress")
        .arg("--junit")
        .arg(&report)
        .env("CHATGATE_TEST_WRITE_PAUSE_MS", "30000")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn chatgate");
    // Wait until the report's temporary file exists: the process is mid-write.
    let t0 = Instant::now();
    while temporaries(dir.path()).is_empty() {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "no temporary file appeared"
        );
        assert!(child.try_wait().expect("wait").is_none(), "exited early");
        std::thread::sleep(Duration::from_millis(20));
    }
    let sent = Instant::now();
    let killed = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(child.id().to_string())
        .status()
        .expect("kill");
    assert!(killed.success());
    let out = child.wait_with_output().expect("wait");
    assert!(
        sent.elapsed() < Duration::from_secs(10),
        "{:?}",
        sent.elapsed()
    );
    assert_eq!(out.status.code(), Some(code), "{out:?}");
    assert!(
        temporaries(dir.path()).is_empty(),
        "a temporary file was left"
    );
    assert!(!report.exists(), "a report was written after the signal");
}

#[test]
fn sigterm_mid_write_leaves_no_temporary_file() {
    signal_mid_write("TERM", 143);
}

#[test]
fn sigint_mid_write_leaves_no_temporary_file() {
    signal_mid_write("INT", 130);
}
