//! Results over time: each gate, merge or bench run can append one compact record to
//! `DIR/<suite>.jsonl` (`--history DIR`), and `chatgate history DIR` reads them back into a
//! trend — runs, latency medians over runs, the first run each check failed in — as text, JSON
//! or a self-contained HTML page.
use std::path::Path;

use crate::suite::Suite;
use crate::verdict::{checks, Finding, Severity};

pub mod page;
pub mod record;
pub mod store;
pub mod trend;

pub use record::{Identities, Record, RunFacts};

/// What was under test: the lock's pins (read from the lock file the gate checked against, not
/// hashed again) and, for a server, the model it listed and its `system_fingerprint`.
pub fn identities(suite: &Suite, target: &str, findings: &[Finding]) -> Identities {
    let lock = crate::chain::run::lock::Lock::read(&suite.lock_path)
        .ok()
        .flatten();
    let is_server = target.starts_with("http://") || target.starts_with("https://");
    let listed = findings
        .iter()
        .any(|f| f.check == checks::SERVER_MODELS && f.severity == Severity::Pass);
    Identities {
        weights_total: lock.as_ref().map(|l| l.weights.total.clone()),
        tokenizer_fingerprint: lock
            .as_ref()
            .and_then(|l| l.tokenizer.as_ref().map(|t| t.fingerprint.clone())),
        template_sha256: lock
            .as_ref()
            .and_then(|l| l.template.as_ref().map(|t| t.sha256.clone())),
        served_model: (is_server && listed).then(|| crate::endpoint::spec::model_name(suite)),
        system_fingerprint: findings
            .iter()
            .filter(|f| f.check == checks::CHECKPOINT_SERVER_IDENTITY)
            .find_map(|f| f.evidence.get("system_fingerprint").cloned()),
    }
}

/// The commit under test: `explicit` (`--commit`), else `$GITHUB_SHA`, else `git rev-parse
/// HEAD` in the suite file's folder (the repository the suite lives in), else none.
pub fn commit(explicit: Option<&str>, suite_file: &Path) -> Option<String> {
    let given = explicit
        .map(str::to_string)
        .or_else(|| std::env::var("GITHUB_SHA").ok())
        .map(|c| c.trim().to_string())
        .filter(|c| !c.is_empty());
    if given.is_some() {
        return given;
    }
    let dir = match suite_file.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let out = std::process::Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(dir)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    let sha = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success() && !sha.is_empty() && sha.chars().all(|c| c.is_ascii_hexdigit()))
        .then_some(sha)
}

/// A `--commit` value: one line of at most 100 printable characters (a sha, a tag, a build id).
pub fn valid_commit(c: &str) -> Result<String, String> {
    let c = c.trim();
    if c.is_empty() || c.len() > 100 || c.chars().any(char::is_control) {
        return Err(format!(
            "--commit takes one line of at most 100 characters (a commit sha), got {c:?}"
        ));
    }
    Ok(c.to_string())
}
