//! The recorded reference: the behavioural fingerprint computed once, where the checkpoint fits,
//! and kept beside the lock (`chatgate lock SUITE.toml --fingerprint`).
//!
//! For each probe the gate sends a server, it holds the prompt ids the reference rendered, and
//! the reference's greedy reply with each position's top-k logprobs. The gate compares a
//! server's temperature-0 reply with it token by token, so a CI runner needs no weights at all:
//! a 70B checkpoint's recording is a few KB. It is bound to the lock's weights, tokenizer and
//! template hashes, and a recording that no longer matches the lock is refused, never used.
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::chain::run::lock::{short, Lock};
use crate::error::{Error, Result};
use crate::exchange::{Record, TokenLogprob};

pub const RECORDING_VERSION: u32 = 1;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Recording {
    pub version: u32,
    /// The lock's weights total this was computed from.
    pub weights: String,
    /// The lock's tokenizer.json sha256 (None: the lock pins no tokenizer).
    pub tokenizer: Option<String>,
    /// The lock's template sha256.
    pub template: Option<String>,
    pub computed_by: ComputedBy,
    /// The request every probe was sent with.
    pub settings: ProbeRequest,
    pub probes: Vec<RecordedProbe>,
}

/// How the reference was computed: a recording is only as exact as its engine.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ComputedBy {
    /// "chatgate candle (in-process)".
    pub engine: String,
    pub chatgate: String,
    /// How the weights were held: "F32 (the files hold BF16)", "GGUF Q8_0 …".
    pub dtype: String,
    /// The quantized type that holds most of the reference's weights (None: float weights):
    /// the gate's tolerance is this kind's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quantization: Option<String>,
    /// The architecture candle ran.
    pub architecture: String,
    /// The reference checkpoint as the suite named it.
    pub reference: String,
    /// The day the templates were rendered at (a template that prints the date).
    pub template_date: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ProbeRequest {
    pub max_tokens: u32,
    pub top_logprobs: u8,
    pub seed: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RecordedProbe {
    pub id: String,
    /// sha256 of the probe's messages and tools as sent: a changed prompt is not this probe.
    pub messages_sha256: String,
    pub prompt_ids: Vec<u32>,
    pub text: String,
    /// The greedy reply's ids (a stop token that ended it included).
    pub token_ids: Vec<u32>,
    pub finish_reason: Option<String>,
    /// Per generated token: its logprob and the top-k.
    pub logprobs: Vec<TokenLogprob>,
}

impl RecordedProbe {
    /// The reply as the online checks read a reference's (`ProbeRun::reference`).
    pub fn record(&self) -> Record {
        Record {
            text: self.text.clone(),
            token_ids: Some(self.token_ids.clone()),
            prompt_ids: Some(self.prompt_ids.clone()),
            logprobs: Some(self.logprobs.clone()),
            finish_reason: self.finish_reason.clone(),
            ..Record::default()
        }
    }
}

/// sha256 of a probe's messages and tools, as the recording keys it.
pub fn messages_sha256(
    messages: &[serde_json::Value],
    tools: Option<&[serde_json::Value]>,
) -> String {
    use sha2::{Digest, Sha256};
    let body = serde_json::json!({"messages": messages, "tools": tools});
    hex::encode(Sha256::digest(body.to_string().as_bytes()))
}

/// The recording's file: beside the lock, `X.lock.json` → `X.fingerprint.json`.
pub fn path_for(lock_path: &Path) -> PathBuf {
    let name = lock_path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stem = name
        .strip_suffix(".lock.json")
        .or_else(|| name.strip_suffix(".json"))
        .unwrap_or(&name);
    lock_path.with_file_name(format!("{stem}.fingerprint.json"))
}

impl Recording {
    /// Read the recording beside a lock; refused (exit 2) when it was computed for other weights,
    /// another tokenizer or template than the lock pins, or there is no lock to bind it to.
    pub fn read(path: &Path, lock: Option<&Lock>) -> Result<Option<Recording>> {
        if !path.exists() {
            return Ok(None);
        }
        let text = crate::error::read_to_string(path)?;
        let rec: Recording = serde_json::from_str(&text).map_err(|e| {
            Error::in_file(path, format!("not a chatgate fingerprint recording: {e}"))
                .hint("record it again with `chatgate lock SUITE.toml --fingerprint --update`")
        })?;
        if rec.version != RECORDING_VERSION {
            return Err(Error::in_file(
                path,
                format!(
                    "recording version {} is not supported (expected {RECORDING_VERSION})",
                    rec.version
                ),
            )
            .hint("record it again with `chatgate lock SUITE.toml --fingerprint --update`"));
        }
        let Some(lock) = lock else {
            return Err(Error::in_file(path, "a fingerprint recording without a lock: nothing binds it to the weights it was computed from")
                .hint("restore the suite's lock file, or record both again with `chatgate lock SUITE.toml --fingerprint`"));
        };
        rec.bound_to(lock).map_err(|why| {
            Error::in_file(path, format!("refused: {why}; the server would be compared with another checkpoint's behaviour"))
                .hint("if the lock is right, record the reference again where it fits: `chatgate lock SUITE.toml --fingerprint --update`")
        })?;
        Ok(Some(rec))
    }

    /// Whether this recording was computed from what the lock pins.
    pub fn bound_to(&self, lock: &Lock) -> std::result::Result<(), String> {
        if self.weights != lock.weights.total {
            return Err(format!(
                "it was recorded for weights {}, and the lock pins {}",
                short(&self.weights),
                short(&lock.weights.total)
            ));
        }
        let locked_tok = lock.tokenizer.as_ref().map(|t| t.sha256.as_str());
        if self.tokenizer.as_deref() != locked_tok {
            return Err(format!(
                "it was recorded with tokenizer {}, and the lock pins {}",
                self.tokenizer.as_deref().map(short).unwrap_or("none"),
                locked_tok.map(short).unwrap_or("none")
            ));
        }
        let locked_tpl = lock.template.as_ref().map(|t| t.sha256.as_str());
        if self.template.as_deref() != locked_tpl {
            return Err(format!(
                "it was recorded with template {}, and the lock pins {}",
                self.template.as_deref().map(short).unwrap_or("none"),
                locked_tpl.map(short).unwrap_or("none")
            ));
        }
        Ok(())
    }

    pub fn probe(&self, id: &str) -> Option<&RecordedProbe> {
        self.probes.iter().find(|p| p.id == id)
    }

    /// Write atomically.
    pub fn write(&self, path: &Path) -> Result<()> {
        let mut json = serde_json::to_string_pretty(self)
            .map_err(|e| Error::input(format!("cannot serialize the recording: {e}")))?;
        json.push('\n');
        crate::files::write_atomic(path, json.as_bytes())
    }

    /// Whether two recordings say the same thing about the checkpoint (who computed them, and
    /// when, aside).
    pub fn same_reference(&self, other: &Recording) -> bool {
        self.weights == other.weights
            && self.tokenizer == other.tokenizer
            && self.template == other.template
            && self.settings == other.settings
            && self.probes == other.probes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_recording_sits_beside_the_lock() {
        assert_eq!(
            path_for(Path::new("suites/smoke.lock.json")),
            Path::new("suites/smoke.fingerprint.json")
        );
        assert_eq!(
            path_for(Path::new("a/pins.json")),
            Path::new("a/pins.fingerprint.json")
        );
        assert_eq!(
            path_for(Path::new("lockfile")),
            Path::new("lockfile.fingerprint.json")
        );
    }
}
