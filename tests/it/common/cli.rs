//! The real `chatgate` binary run in a folder: (exit code, stdout, stderr), no colour; and the
//! one way tests run a whole gate through it ([`gate`]).
use std::path::Path;
use std::process::Command;

use serde_json::Value;

pub fn chatgate_in(args: &[&str], cwd: &Path) -> (i32, String, String) {
    chatgate_env(args, cwd, &[])
}

/// As [`chatgate_in`], with more environment (e.g. `CHATGATE_NOW`).
pub fn chatgate_env(args: &[&str], cwd: &Path, env: &[(&str, &str)]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_chatgate"))
        .args(args)
        .current_dir(cwd)
        .env("NO_COLOR", "1")
        .envs(env.iter().copied())
        .output()
        .expect("chatgate runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// One `chatgate gate SUITE --no-progress --format json` run in a folder, built up:
/// `gate(dir).target(url).update().run()` → (exit code, the JSON report).
pub struct Gate<'a> {
    dir: &'a Path,
    suite: &'a str,
    args: Vec<&'a str>,
    env: Vec<(&'a str, &'a str)>,
}

/// A gate of `suite.toml` in `dir` (see [`Gate`]).
pub fn gate(dir: &Path) -> Gate<'_> {
    Gate {
        dir,
        suite: "suite.toml",
        args: Vec::new(),
        env: Vec::new(),
    }
}

impl<'a> Gate<'a> {
    /// Another suite file than `suite.toml`, relative to the folder.
    pub fn suite(mut self, suite: &'a str) -> Self {
        self.suite = suite;
        self
    }
    pub fn target(mut self, url: &'a str) -> Self {
        self.args.extend(["--target", url]);
        self
    }
    /// `--update` when `yes`.
    pub fn update_if(mut self, yes: bool) -> Self {
        if yes {
            self.args.push("--update");
        }
        self
    }
    pub fn args(mut self, extra: &[&'a str]) -> Self {
        self.args.extend_from_slice(extra);
        self
    }
    pub fn env(mut self, key: &'a str, value: &'a str) -> Self {
        self.env.push((key, value));
        self
    }

    /// Run it: the exit code and the parsed report (panics with the output when stdout is not
    /// the JSON report).
    pub fn run(self) -> (i32, Value) {
        let mut args = vec!["gate", self.suite, "--no-progress", "--format", "json"];
        args.extend(self.args.iter().copied());
        let (code, out, err) = chatgate_env(&args, self.dir, &self.env);
        let report = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}{err}"));
        // Where the gate's time went, on the test's stderr (nextest shows it for a failure, or
        // with `--success-output`): the first thing to read when a test grows slow.
        eprintln!(
            "gate {:?} in {}: {}",
            self.args,
            self.dir.display(),
            phases(&report)
        );
        (code, report)
    }
}

/// A report's phase table as the human report prints it (`chatgate::report::time_lines`),
/// from its JSON.
pub fn phases(report: &Value) -> String {
    let phases: Vec<chatgate::verdict::PhaseTime> =
        serde_json::from_value(report["phases"].clone()).unwrap_or_default();
    format!(
        "{:.1} s; {}",
        report["duration_s"].as_f64().unwrap_or(0.0),
        chatgate::report::time_lines(&phases).join("; ")
    )
}
