//! `gate --fail-fast`: a red build sooner. Once a boundary is broken, a check that can only file
//! at a later boundary sends nothing, nor does the part of the probe pass only later boundaries
//! read (`run::online`), and the replay and the latency stage are not run.
//!
//! A check is left out only when it cannot file at or before the boundary already broken, so
//! the exit code and the first broken boundary and check are the ones the whole run gives, and
//! so is every finding before it. What is lost is the symptoms downstream of it (later
//! boundaries' errors, replay drift) and the later stages' checks even at the broken boundary
//! (a server boundary's latency checks), and the time they take; the report lists what was
//! left out.
use crate::chain::run::policy::apply_policy;
use crate::suite::ServerSection;
use crate::verdict::checks::{self, Check};
use crate::verdict::{Boundary, Finding, Severity};

/// The checks whose judge may file at an earlier boundary than the check's own
/// ([`Finding::blaming`]), and that boundary: a template that never renders the offered tools
/// makes `server.tool-call-parse` a template finding. A judge that blames earlier and is not
/// here could be left out by a fail-fast run that then names a later boundary than the whole
/// run (tests/it/architecture.rs counts the `blaming` calls against this list).
pub static BLAMES_EARLIER: &[(&str, Boundary)] = &[("server.tool-call-parse", Boundary::Template)];

/// The earliest boundary `check`'s judge can file at: its own, or the one it may blame.
pub fn earliest(check: &Check) -> Boundary {
    BLAMES_EARLIER
        .iter()
        .find(|(id, _)| *id == check.id)
        .map_or(check.boundary, |(_, b)| *b)
}

/// Where a fail-fast run stands: the first broken boundary of what has run, and what was left
/// out because of it.
#[derive(Debug, Clone, Default)]
pub struct FailFast {
    broken: Option<Boundary>,
    /// The checks left out, in the order they would have run.
    pub left_out: Vec<&'static Check>,
}

impl FailFast {
    /// Starting from the findings already made (the offline chain's).
    pub fn after(findings: &[Finding], policy: &ServerSection) -> Self {
        let mut ff = FailFast::default();
        ff.saw(findings, policy);
        ff
    }

    /// Take in more findings, judged under the suite's policy (a strict warning breaks, a
    /// skipped check does not).
    pub fn saw(&mut self, findings: &[Finding], policy: &ServerSection) {
        let mut judged = findings.to_vec();
        apply_policy(&mut judged, policy);
        let broken = judged
            .iter()
            .filter(|f| f.severity == Severity::Error)
            .map(|f| f.boundary)
            .min();
        self.broken = self.broken.into_iter().chain(broken).min();
    }

    /// The first broken boundary so far.
    pub fn broken(&self) -> Option<Boundary> {
        self.broken
    }

    /// Whether work that files at `boundary` or later is left out: an earlier one is broken.
    pub fn stops_before(&self, boundary: Boundary) -> bool {
        self.broken.is_some_and(|b| b < boundary)
    }

    /// Whether a judge of `judged` runs; when it does not, its checks are listed as left out.
    pub fn runs(&mut self, judged: &[&'static Check]) -> bool {
        let Some(at) = judged.iter().map(|c| earliest(c)).min() else {
            return true;
        };
        if self.stops_before(at) {
            self.left_out.extend(judged.iter().copied());
            return false;
        }
        true
    }

    /// The report's note of what was not run, once the run stopped early.
    pub fn note(&self, stages: &[String]) -> Option<Finding> {
        let broken = self.broken?;
        let mut not_run: Vec<String> = Vec::new();
        if !self.left_out.is_empty() {
            let ids: Vec<&str> = self.left_out.iter().map(|c| c.id).collect();
            not_run.push(format!(
                "{} later check{} ({})",
                ids.len(),
                if ids.len() == 1 { "" } else { "s" },
                ids.join(", ")
            ));
        }
        not_run.extend(stages.iter().cloned());
        let what = if not_run.is_empty() {
            "nothing was left out".to_string()
        } else {
            format!("not run: {}", not_run.join("; "))
        };
        Some(
            Finding::new(
                checks::REPLAY_NOT_RUN,
                Severity::Info,
                format!(
                    "--fail-fast: the gate stopped at the first broken boundary ({}); {what}",
                    broken.name()
                ),
            )
            .with(
                "to see every symptom",
                "fix the first broken boundary, or run the gate without --fail-fast",
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> ServerSection {
        ServerSection {
            strict: vec!["server.health".into()],
            skip: vec!["tokenizer.round-trip".into()],
            ..ServerSection::default()
        }
    }

    #[test]
    fn a_later_boundary_stops_an_earlier_one_does_not() {
        let mut ff = FailFast::after(
            &[Finding::new(
                checks::GENERATION_SERVER_STOP,
                Severity::Error,
                "no stop",
            )],
            &policy(),
        );
        assert_eq!(ff.broken(), Some(Boundary::GenerationConfig));
        // The template's judge may still file first; the server's may not.
        assert!(ff.runs(&[checks::TEMPLATE_SERVER_IDS]));
        assert!(ff.runs(&[checks::GENERATION_SAMPLING_HONOURED]));
        assert!(!ff.runs(&[checks::SERVER_MAX_TOKENS]));
        // The tool-call parse can blame the template: it runs.
        assert!(ff.runs(&[checks::SERVER_TOOL_CALL_PARSE]));
        assert_eq!(ff.left_out, vec![checks::SERVER_MAX_TOKENS]);
        let note = ff.note(&["the replay".into()]).unwrap();
        assert_eq!(note.check, checks::REPLAY_NOT_RUN);
        assert!(
            note.message.contains("(generation-config)")
                && note
                    .message
                    .contains("1 later check (server.max-tokens); the replay"),
            "{}",
            note.message
        );
    }

    #[test]
    fn the_suites_policy_decides_what_is_broken() {
        // A skipped check's error breaks nothing; a strict check's warning does.
        let mut ff = FailFast::after(
            &[Finding::new(
                checks::TOKENIZER_ROUND_TRIP,
                Severity::Error,
                "skipped",
            )],
            &policy(),
        );
        assert_eq!(ff.broken(), None);
        assert!(ff.runs(&[checks::SERVER_STOP]));
        assert!(ff.note(&["the replay".into()]).is_none());
        ff.saw(
            &[Finding::new(
                checks::SERVER_HEALTH,
                Severity::Warning,
                "no /health",
            )],
            &policy(),
        );
        assert_eq!(ff.broken(), Some(Boundary::Server));
        // The same boundary is not "later": its other checks still run.
        assert!(ff.runs(&[checks::SERVER_STOP]));
        assert!(!ff.runs(&[checks::CLIENT_SSE]));
        // An earlier break moves the stop back; a later one does not move it.
        ff.saw(
            &[Finding::new(
                checks::TEMPLATE_SERVER_IDS,
                Severity::Error,
                "ids",
            )],
            &policy(),
        );
        ff.saw(
            &[Finding::new(checks::SERVER_STOP, Severity::Error, "stop")],
            &policy(),
        );
        assert_eq!(ff.broken(), Some(Boundary::Template));
    }
}
