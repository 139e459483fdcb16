//! The suite's policy over check ids (`[server] skip` and `strict`), applied the same way to
//! offline, online, replay and latency findings.
use crate::suite::ServerSection;
use crate::verdict::{Finding, Severity};

/// Drop skipped checks, and turn warnings of strict checks into errors. Idempotent, so every
/// stage may apply it to what it adds.
pub fn apply_policy(findings: &mut Vec<Finding>, policy: &ServerSection) {
    findings.retain(|f| !policy.skips(f.check));
    for f in findings {
        if f.severity == Severity::Warning && policy.strict.iter().any(|s| s == f.check.id) {
            f.severity = Severity::Error;
            f.message.push_str(" (strict in this suite)");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skip_drops_and_strict_promotes_once() {
        use crate::verdict::checks;
        let policy = ServerSection {
            strict: vec!["server.health".into()],
            skip: vec!["tokenizer.round-trip".into()],
            ..ServerSection::default()
        };
        let mut f = vec![
            Finding::new(checks::TOKENIZER_ROUND_TRIP, Severity::Warning, "nfc"),
            Finding::new(checks::SERVER_HEALTH, Severity::Warning, "no /health"),
        ];
        apply_policy(&mut f, &policy);
        apply_policy(&mut f, &policy);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].severity, Severity::Error);
        assert_eq!(f[0].message, "no /health (strict in this suite)");
    }
}
