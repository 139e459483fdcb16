//! Every check id the gate can report: the one list suites, policies and reports name ids
//! from. A suite naming an id that is not here is refused at load: a typo in `skip` must not
//! leave a quirk unsilenced, and a typo in `strict` must not leave a check lenient without a word.

/// The ids, by boundary. A unit test checks this list against the ids the source reports.
pub const CHECKS: &[&str] = &[
    "checkpoint.fingerprint",
    "checkpoint.gguf-metadata",
    "checkpoint.model-dir",
    "checkpoint.server-identity",
    "checkpoint.shards",
    "checkpoint.weights-hash",
    "checkpoint.weights-present",
    "tokenizer.file-hash",
    "tokenizer.fingerprint",
    "tokenizer.golden-reencode",
    "tokenizer.gguf-metadata",
    "tokenizer.gguf-vs-hf",
    "tokenizer.json",
    "tokenizer.lock",
    "tokenizer.present",
    "tokenizer.round-trip",
    "tokenizer.server-tokenize",
    "tokenizer.special-tokens",
    "tokenizer.stack",
    "tokenizer.vocab-size",
    "template.assistant-mask",
    "template.bos-count",
    "template.date",
    "template.generation-prompt",
    "template.generation-prompt-suffix",
    "template.gguf-metadata",
    "template.gguf-vs-hf",
    "template.lock",
    "template.message-shapes",
    "template.parity",
    "template.present",
    "template.prompt-tokens",
    "template.reasoning-framing",
    "template.render",
    "template.server-date",
    "template.server-ids",
    "template.server-render",
    "template.tool-framing",
    "generation.defaults",
    "generation.gguf-metadata",
    "generation.gguf-vs-hf",
    "generation.sampling-honoured",
    "generation.server-defaults",
    "generation.server-stop",
    "generation.stop-inside-reply",
    "generation.stop-set",
    "generation.terminator-trained",
    "server.bad-requests",
    "server.determinism",
    "server.health",
    "server.include-usage",
    "server.latency",
    "server.latency-baseline",
    "server.latency-client",
    "server.latency-e2el",
    "server.latency-errors",
    "server.latency-itl",
    "server.latency-tpot",
    "server.latency-ttft",
    "server.max-completion-tokens",
    "server.max-tokens",
    "server.models",
    "server.reachable",
    "server.reasoning-split",
    "server.responds",
    "server.response-format",
    "server.responses-parity",
    "server.schema",
    "server.slo",
    "server.sse-done",
    "server.sse-framing",
    "server.stop",
    "server.stream-parity",
    "server.target",
    "server.template-kwargs",
    "server.tool-call-parse",
    "server.tool-choice",
    "server.usage",
    "client.endpoint",
    "client.errors",
    "client.fields-honoured",
    "client.forbidden",
    "client.message-shape",
    "client.model",
    "client.params",
    "client.recording",
    "client.required",
    "client.sse",
    "client.stream",
    "replay.date",
    "replay.orphans",
    "replay.prompt",
    "replay.snapshots",
    "latency.regression",
];

/// `Ok` when `id` is a check id; otherwise a message naming the closest ones.
pub fn known(id: &str) -> Result<(), String> {
    if CHECKS.contains(&id) {
        return Ok(());
    }
    let prefix = id.split('.').next().unwrap_or(id);
    let near: Vec<&str> = CHECKS
        .iter()
        .copied()
        .filter(|c| c.starts_with(&format!("{prefix}.")))
        .collect();
    Err(if near.is_empty() {
        format!(
            "unknown check id {id:?} (ids start with checkpoint., tokenizer., template., generation., server., client., replay. or latency.)"
        )
    } else {
        format!(
            "unknown check id {id:?}; the {prefix} checks are: {}",
            near.join(", ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use std::path::Path;

    /// Every `"boundary.check"` string literal in src/ outside this file.
    fn ids_in_source(dir: &Path, out: &mut BTreeSet<String>) {
        let re = regex::Regex::new(
            r#""((?:checkpoint|tokenizer|template|generation|server|client|replay|latency)\.[a-z0-9-]+)""#,
        )
        .unwrap();
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            // src/standin names files (`tokenizer.model`) that look like check ids.
            if path.is_dir() && !path.ends_with("standin") {
                ids_in_source(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") && !path.ends_with("checks.rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                out.extend(re.captures_iter(&text).map(|c| c[1].to_string()));
            }
        }
    }

    #[test]
    fn the_list_is_every_id_the_source_reports() {
        let mut found = BTreeSet::new();
        ids_in_source(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
            &mut found,
        );
        let listed: BTreeSet<String> = CHECKS.iter().map(|s| s.to_string()).collect();
        let missing: Vec<_> = found.difference(&listed).collect();
        let stale: Vec<_> = listed.difference(&found).collect();
        assert!(
            missing.is_empty(),
            "ids reported but not listed: {missing:?}"
        );
        assert!(stale.is_empty(), "ids listed but never reported: {stale:?}");
    }

    #[test]
    fn unknown_ids_name_their_neighbours() {
        assert!(known("tokenizer.round-trip").is_ok());
        let e = known("tokenizer.roundtrip").unwrap_err();
        assert!(e.contains("tokenizer.round-trip"), "{e}");
        assert!(known("nonsense").unwrap_err().contains("ids start with"));
    }
}
