//! The gate's findings as SARIF 2.1.0, the format code-scanning dashboards (GitHub's
//! `upload-sarif`, Azure DevOps, SonarQube…) import: one result per error or warning finding,
//! its rule the check id, located at the suite file — or, for a replayed prompt that changed,
//! at its snapshot file, so the dashboard points at what a reviewer opens.
use crate::verdict::Outcome;
use std::collections::BTreeSet;
use std::path::Path;

use serde_json::{json, Value};

use crate::verdict::{checks, Finding, GateReport, PromptStatus, Severity};

pub const SCHEMA: &str = "https://json.schemastore.org/sarif-2.1.0.json";
pub const INFORMATION_URI: &str = "https://github.com/chatgate/chatgate";
pub const HELP_URI: &str = "https://github.com/chatgate/chatgate/blob/main/docs/checks.md";

/// Where results point, as URIs relative to the directory the gate ran in.
pub struct Locations {
    pub suite: String,
    /// The suite's snapshot folder, when known.
    pub snapshots: Option<String>,
}

/// A path as a SARIF artifact URI: relative to the current directory when it is inside it,
/// with forward slashes; an absolute path elsewhere becomes a `file://` URI.
pub fn relative_uri(path: &Path) -> String {
    let cwd = std::env::current_dir().ok();
    let rel = match (&cwd, path.is_absolute()) {
        (Some(cwd), true) => path.strip_prefix(cwd).ok().map(Path::to_path_buf),
        (_, false) => Some(path.to_path_buf()),
        (None, true) => None,
    };
    match rel {
        Some(r) => lexically_normal(&r),
        None => format!("file://{}", path.to_string_lossy().replace('\\', "/")),
    }
}

/// `suites/../snapshots/x` as `snapshots/x`: dashboards match URIs against repository paths
/// as text. A leading `..` (a suite outside the current directory) stays.
fn lexically_normal(path: &Path) -> String {
    use std::path::Component;
    let mut parts: Vec<String> = Vec::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir if parts.last().is_some_and(|p| p != "..") => {
                parts.pop();
            }
            other => parts.push(other.as_os_str().to_string_lossy().into_owned()),
        }
    }
    parts.join("/")
}

/// The whole SARIF log.
pub fn render(report: &GateReport, at: &Locations) -> Value {
    let mut results = Vec::new();
    let mut rules: BTreeSet<&'static str> = BTreeSet::new();
    for f in report
        .findings
        .0
        .iter()
        .filter(|f| f.severity >= Severity::Warning)
    {
        rules.insert(f.check.id);
        results.extend(results_of(f, report, at));
    }
    // Rules in id order; each result names its rule's index, as SARIF viewers prefer.
    let rules: Vec<&'static str> = rules.into_iter().collect();
    for r in &mut results {
        let id = r["ruleId"].as_str().unwrap_or_default().to_string();
        if let Some(i) = rules.iter().position(|x| *x == id) {
            r["ruleIndex"] = json!(i);
        }
    }
    json!({
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "chatgate",
                "version": env!("CARGO_PKG_VERSION"),
                "semanticVersion": env!("CARGO_PKG_VERSION"),
                "informationUri": INFORMATION_URI,
                "rules": rules.iter().map(|id| rule(id)).collect::<Vec<_>>(),
            }},
            "invocations": [{
                "executionSuccessful": report.exit_code != Outcome::Unreachable,
                "exitCode": report.exit_code,
            }],
            "properties": {
                "suite": report.suite,
                "target": report.target,
                "verdict": super::gate_json(report).get("verdict").cloned().unwrap_or(Value::Null),
            },
            "results": results,
        }],
    })
}

fn rule(id: &str) -> Value {
    let boundary = id.split('.').next().unwrap_or(id);
    json!({
        "id": id,
        "name": id,
        "shortDescription": {"text": format!("chatgate check {id} (the {boundary} boundary of the serving chain)")},
        "helpUri": HELP_URI,
        "properties": {"boundary": boundary},
    })
}

fn level(s: Severity) -> &'static str {
    match s {
        Severity::Error => "error",
        Severity::Warning => "warning",
        Severity::Info | Severity::Pass => "note",
    }
}

/// One result per finding; the replay's snapshot finding becomes one per prompt that did not
/// pass when the snapshot folder is known.
fn results_of(f: &Finding, report: &GateReport, at: &Locations) -> Vec<Value> {
    let mut text = f.message.clone();
    for (k, v) in &f.evidence {
        text.push_str(&format!("\n{k}: {v}"));
    }
    if let (Some(dir), true) = (&at.snapshots, f.check == checks::REPLAY_SNAPSHOTS) {
        let per_prompt: Vec<Value> = report
            .prompts
            .iter()
            .filter(|p| p.status != PromptStatus::Pass)
            .map(|p| {
                let file = match p.status {
                    PromptStatus::New => format!("{dir}/{}.snap.new", p.id),
                    _ => format!("{dir}/{}.snap", p.id),
                };
                let text = format!(
                    "{}\nprompt {} ({:?}): {}",
                    f.message, p.id, p.status, p.detail
                );
                result(f, &text, &file)
            })
            .collect();
        if !per_prompt.is_empty() {
            return per_prompt;
        }
    }
    vec![result(f, &text, &at.suite)]
}

fn result(f: &Finding, text: &str, uri: &str) -> Value {
    json!({
        "ruleId": f.check.id,
        "level": level(f.severity),
        "message": {"text": text},
        "locations": [{"physicalLocation": {"artifactLocation": {"uri": uri}}}],
        "properties": {"boundary": f.boundary.name()},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_are_relative_and_lexically_normal() {
        assert_eq!(
            relative_uri(Path::new("suites/../snapshots/smoke")),
            "snapshots/smoke"
        );
        assert_eq!(
            relative_uri(Path::new("./suites/smoke.toml")),
            "suites/smoke.toml"
        );
        assert_eq!(relative_uri(Path::new("../x/../y.toml")), "../y.toml");
        let here = std::env::current_dir().unwrap().join("a/b.toml");
        assert_eq!(relative_uri(&here), "a/b.toml");
    }
}
