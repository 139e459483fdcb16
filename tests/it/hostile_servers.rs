//! The hostile-server battery: `chatgate gate` (every report format), `bench` and `bench --mode
//! load` against each misbehaving server of scripts/ci/hostile-server.py (endless streams, giant
//! lines and bodies, stalls, slow-loris, 429/503, resets, bad UTF-8, a reply that echoes the API
//! key), run by scripts/ci/hostile-battery.py: every command exits 1 or 3 within the time bound
//! docs/commands/gate.md states, under its memory bound, leaves no oversized or temporary file,
//! and prints or writes the canary key nowhere.
//!
//! A test, so the runner schedules it: beside the tests it ran its three servers at a time into
//! the paced latency tests' quiet start and made a sharded run's client fall behind.
use std::path::Path;
use std::process::Command;

use crate::common::gate_workspace::REPO;

#[test]
fn every_hostile_server_ends_the_gate_and_bench_within_bounds_and_no_key_leaks() {
    let script = Path::new(REPO).join("scripts/ci/hostile-battery.py");
    let out = Command::new("python3")
        .arg(&script)
        .arg(env!("CARGO_BIN_EXE_chatgate"))
        .output()
        .expect("python3 runs scripts/ci/hostile-battery.py");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stdout}");
    assert!(out.status.success(), "{stdout}\n{stderr}");
    // One line per server and command (`MODE  COMMAND  exit CODE  …`), three per server,
    // for as many servers as the summary names (the script's own mode list).
    let mut lines: std::collections::BTreeMap<&str, usize> = Default::default();
    for l in stdout.lines() {
        let mut words = l.split_whitespace();
        if let (Some(mode), Some("gate" | "bench")) = (words.next(), words.next()) {
            *lines.entry(mode).or_default() += 1;
        }
    }
    assert!(
        lines.values().all(|&n| n == 3),
        "gate, bench and bench load each:\n{stdout}"
    );
    assert!(
        stdout.contains(&format!(
            "all {} hostile servers: bounded, no key leaked",
            lines.len()
        )) && lines.len() >= 12,
        "{stdout}"
    );
}
