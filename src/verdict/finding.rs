//! A finding is one check's verdict at one boundary. Reports order findings by boundary, so
//! the first broken link of the chain is the first thing a person reads.
use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

use super::checks::{self, Check};

/// The links of the serving chain, in chain order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Boundary {
    Checkpoint,
    Tokenizer,
    Template,
    GenerationConfig,
    /// The server's API: schemas, SSE framing, usage, parity, determinism, errors, latency.
    Server,
    /// The application calling the server: endpoint, model, parameters, stream handling.
    Client,
    /// Replayed outputs against reviewed snapshots: a symptom, explained by the first broken
    /// boundary when there is one.
    Replay,
}

impl Boundary {
    pub fn name(self) -> &'static str {
        match self {
            Boundary::Checkpoint => "checkpoint",
            Boundary::Tokenizer => "tokenizer",
            Boundary::Template => "template",
            Boundary::GenerationConfig => "generation-config",
            Boundary::Server => "server",
            Boundary::Client => "client",
            Boundary::Replay => "replay",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The check ran and found nothing wrong.
    Pass,
    /// Worth knowing; never fails the gate.
    Info,
    /// Suspicious; does not fail the gate.
    Warning,
    /// A broken link: the gate fails.
    Error,
}

#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    /// The link the finding blames: its check's boundary, unless the judge knows an earlier
    /// layer is at fault ([`Finding::blaming`]).
    pub boundary: Boundary,
    /// The check that judged (serialized as its id, e.g. "template.parity").
    pub check: &'static Check,
    pub severity: Severity,
    pub message: String,
    /// Named pieces of evidence, in the order a reader needs them.
    pub evidence: IndexMap<String, String>,
}

impl Finding {
    pub fn new(check: &'static Check, severity: Severity, message: impl Into<String>) -> Self {
        Finding {
            boundary: check.boundary,
            check,
            severity,
            message: message.into(),
            evidence: IndexMap::new(),
        }
    }
    pub fn pass(check: &'static Check, message: impl Into<String>) -> Self {
        Finding::new(check, Severity::Pass, message)
    }
    /// File the finding at an earlier boundary than its check's: the judge saw that the layer
    /// at fault is that one (a chat template that never renders the tools a request offers
    /// makes `server.tool-call-parse` a template finding).
    pub fn blaming(mut self, boundary: Boundary) -> Self {
        self.boundary = boundary;
        self
    }
    /// Add a piece of evidence; a repeated key gets a number ("problem", "problem 2", …).
    pub fn with(mut self, key: &str, value: impl ToString) -> Self {
        let mut k = key.to_string();
        let mut n = 1;
        while self.evidence.contains_key(&k) {
            n += 1;
            k = format!("{key} {n}");
        }
        self.evidence.insert(k, value.to_string());
        self
    }
}

/// A finding read back (a sharded run's part), its check one this chatgate reports.
#[derive(Deserialize)]
struct FindingData {
    boundary: Boundary,
    check: String,
    severity: Severity,
    message: String,
    evidence: IndexMap<String, String>,
}

// By hand: the check id read back is looked up in the registry.
impl<'de> Deserialize<'de> for Finding {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Finding, D::Error> {
        Finding::try_from(FindingData::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

impl TryFrom<FindingData> for Finding {
    type Error = String;
    fn try_from(d: FindingData) -> Result<Finding, String> {
        let check = checks::find(&d.check).ok_or_else(|| {
            format!(
                "unknown check id {:?} (a part written by another chatgate version?)",
                d.check
            )
        })?;
        Ok(Finding {
            boundary: d.boundary,
            check,
            severity: d.severity,
            message: d.message,
            evidence: d.evidence,
        })
    }
}

/// All findings of a run, kept in chain order.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Findings(pub Vec<Finding>);

impl Findings {
    pub fn push(&mut self, f: Finding) {
        self.0.push(f);
    }
    pub fn extend(&mut self, fs: impl IntoIterator<Item = Finding>) {
        self.0.extend(fs);
    }
    /// Stable sort by boundary: checks keep their order within a boundary.
    pub fn sort(&mut self) {
        self.0.sort_by_key(|f| f.boundary);
    }
    pub fn has_errors(&self) -> bool {
        self.0.iter().any(|f| f.severity == Severity::Error)
    }
    /// The first boundary with an error finding: the link to blame.
    pub fn first_broken(&self) -> Option<&Finding> {
        self.0
            .iter()
            .filter(|f| f.severity == Severity::Error)
            .min_by_key(|f| f.boundary)
    }
    /// Error findings at boundaries after the first broken one: the symptoms it may explain.
    pub fn downstream(&self) -> Vec<&Finding> {
        let Some(first) = self.first_broken() else {
            return Vec::new();
        };
        self.0
            .iter()
            .filter(|f| f.severity == Severity::Error && f.boundary > first.boundary)
            .collect()
    }
}
