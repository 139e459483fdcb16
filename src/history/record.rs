//! One run's line in a history: what a trend needs and nothing a report already keeps in full
//! (no evidence, no samples, no replies), so years of CI runs stay a few megabytes.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::verdict::{Finding, LatencyRow, Severity};

/// Bumped when a field changes meaning; a reader refuses versions it does not know.
pub const RECORD_VERSION: u32 = 1;

/// The latency metrics a record keeps (the ones a trend is read on).
pub const METRICS: &[&str] = &["ttft", "tpot", "itl", "e2el"];

/// One gate, merge or bench run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Record {
    pub version: u32,
    /// UTC, RFC 3339 to the second.
    pub time: String,
    /// The chatgate version that ran.
    pub chatgate: String,
    /// `gate` (a merged sharded gate is a gate) or `bench`.
    pub command: String,
    pub suite: String,
    /// The suite file's sha256: two runs of "the same suite" with other settings differ here.
    pub suite_sha256: Option<String>,
    /// The target with any credentials taken out of it.
    pub target: String,
    /// `pass`, `fail` or `unreachable`.
    pub verdict: String,
    pub exit_code: i32,
    pub first_broken: Option<FirstBroken>,
    /// Check id → its worst outcome in the run (`pass`, `info`, `warning`, `error`).
    pub checks: BTreeMap<String, Severity>,
    /// Metric → percentiles in ms, for the metrics measured.
    pub latency: BTreeMap<String, Percentiles>,
    pub identities: Identities,
    /// The commit under test, when known.
    pub commit: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct FirstBroken {
    pub boundary: String,
    pub check: String,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct Percentiles {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
}

/// What was under test, as the lock pins it and the server names it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Identities {
    pub weights_total: Option<String>,
    pub tokenizer_fingerprint: Option<String>,
    pub template_sha256: Option<String>,
    /// The model id the server listed under the suite's name (servers only).
    pub served_model: Option<String>,
    /// The server's own `system_fingerprint`, when it reports one.
    pub system_fingerprint: Option<String>,
}

/// The parts of a run a record is made of.
pub struct RunFacts<'a> {
    pub command: &'a str,
    pub suite: &'a str,
    pub suite_sha256: Option<String>,
    pub target: &'a str,
    pub exit_code: i32,
    pub findings: &'a [Finding],
    pub latency: &'a [LatencyRow],
    pub identities: Identities,
    pub commit: Option<String>,
}

impl Record {
    pub fn new(run: RunFacts, now: chrono::DateTime<chrono::Utc>) -> Record {
        let mut checks: BTreeMap<String, Severity> = BTreeMap::new();
        for f in run.findings {
            let worst = checks.entry(f.check.to_string()).or_insert(f.severity);
            *worst = (*worst).max(f.severity);
        }
        let first_broken = run
            .findings
            .iter()
            .filter(|f| f.severity == Severity::Error)
            .min_by_key(|f| f.boundary)
            .map(|f| FirstBroken {
                boundary: f.boundary.name().to_string(),
                check: f.check.to_string(),
            });
        let latency = run
            .latency
            .iter()
            .filter(|r| METRICS.contains(&r.metric.as_str()) && r.n > 0)
            .map(|r| {
                let p = Percentiles {
                    p50: r.p50,
                    p90: r.p90,
                    p99: r.p99,
                };
                (r.metric.clone(), p)
            })
            .collect();
        Record {
            version: RECORD_VERSION,
            time: now.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
            chatgate: env!("CARGO_PKG_VERSION").to_string(),
            command: run.command.to_string(),
            suite: run.suite.to_string(),
            suite_sha256: run.suite_sha256,
            target: without_credentials(run.target),
            verdict: verdict_word(run.exit_code).to_string(),
            exit_code: run.exit_code,
            first_broken,
            checks,
            latency,
            identities: run.identities,
            commit: run.commit,
        }
    }

    /// The commit, short, for tables (`-` when unknown).
    pub fn commit_short(&self) -> &str {
        match &self.commit {
            Some(c) => &c[..c.len().min(10)],
            None => "-",
        }
    }
}

/// The word the gate's JSON report uses for an exit code.
pub fn verdict_word(exit_code: i32) -> &'static str {
    match exit_code {
        0 => "pass",
        3 => "unreachable",
        _ => "fail",
    }
}

/// A target URL with its user-info dropped and credential-named query values replaced: a
/// history is kept for years in places (CI caches, branches) a key must never reach.
pub fn without_credentials(target: &str) -> String {
    let Some((scheme, rest)) = target.split_once("://") else {
        return crate::secrets::redact(target).into_owned();
    };
    let (authority, tail) = match rest.find(['/', '?', '#']) {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let (query, fragment) = query
                .split_once('#')
                .map_or((query, None), |(q, f)| (q, Some(f)));
            let mut t = format!("{path}?{}", crate::secrets::redact_query(query));
            if let Some(f) = fragment {
                t.push('#');
                t.push_str(f);
            }
            t
        }
        None => tail.to_string(),
    };
    crate::secrets::redact(&format!("{scheme}://{host}{tail}")).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_never_stay_in_the_target() {
        assert_eq!(
            without_credentials("http://user:s3cret-pass@10.0.0.1:8000/v1?api_key=abc&x=1"),
            "http://10.0.0.1:8000/v1?api_key=<redacted>&x=1"
        );
        assert_eq!(
            without_credentials("https://<redacted>@host"),
            "https://host"
        );
        assert_eq!(without_credentials("candle:models/x"), "candle:models/x");
    }

    #[test]
    fn a_check_keeps_its_worst_outcome() {
        use crate::verdict::checks;
        let findings = vec![
            Finding::pass(checks::TEMPLATE_MESSAGE_SHAPES, "ok"),
            Finding::new(checks::TEMPLATE_MESSAGE_SHAPES, Severity::Warning, "w"),
            Finding::new(checks::SERVER_MODELS, Severity::Error, "e"),
            Finding::new(checks::TOKENIZER_LOCK, Severity::Error, "e"),
        ];
        let r = Record::new(
            RunFacts {
                command: "gate",
                suite: "s",
                suite_sha256: None,
                target: "candle:x",
                exit_code: 1,
                findings: &findings,
                latency: &[],
                identities: Identities::default(),
                commit: None,
            },
            chrono::Utc::now(),
        );
        assert_eq!(r.checks["template.message-shapes"], Severity::Warning);
        assert_eq!(r.first_broken.unwrap().check, "tokenizer.lock");
        assert_eq!(r.verdict, "fail");
    }
}
