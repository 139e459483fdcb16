//! The lock: the identity of the checkpoint, tokenizer and template a suite was accepted with.
//! Written only by `chatgate lock`, atomically (temp file + rename in the same folder), and an
//! existing lock that differs is replaced only with `--update`.
use std::path::Path;

use serde::{Deserialize, Serialize};

use sha2::{Digest, Sha256};

use crate::artifacts::WeightsIdentity;
use crate::error::{Error, Result};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Lock {
    pub version: u32,
    pub weights: WeightsIdentity,
    pub tokenizer: Option<TokenizerLock>,
    pub template: Option<TemplateLock>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TokenizerLock {
    pub sha256: String,
    /// sha256 of the ids of the built-in probe corpus.
    pub fingerprint: String,
    pub probe_version: u32,
    pub vocab_size: usize,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TemplateLock {
    pub origin: String,
    pub sha256: String,
}

pub const LOCK_VERSION: u32 = 1;

impl Lock {
    /// The identity of what the suite serves now.
    pub fn of(
        model: &crate::artifacts::ModelDir,
        template: Option<&crate::artifacts::TemplateSource>,
    ) -> Result<Lock> {
        let tokenizer = match &model.tokenizer {
            Some(t) => Some(TokenizerLock {
                sha256: t.sha256.clone(),
                fingerprint: crate::chain::run::probe::fingerprint(&t.tokenizer)?,
                probe_version: crate::chain::run::probe::PROBE_VERSION,
                vocab_size: t.tokenizer.get_vocab_size(true),
            }),
            None => None,
        };
        Ok(Lock {
            version: LOCK_VERSION,
            weights: model.hash_weights()?,
            tokenizer,
            template: template.map(|t| TemplateLock {
                origin: t.origin.clone(),
                sha256: template_sha256(&t.text),
            }),
        })
    }
}

impl Lock {
    /// Whether this lock was made before GGUF tensor data and metadata were hashed apart (its
    /// GGUF entries hash whole files): it is then compared with whole-file hashes.
    pub fn hashes_whole_gguf_files(&self) -> bool {
        self.weights
            .files
            .iter()
            .any(|f| f.scope.is_none() && f.name.to_ascii_lowercase().ends_with(".gguf"))
    }

    /// This lock with only the weights kept, for diffing weights alone.
    pub fn weights_only(&self) -> Lock {
        Lock {
            version: self.version,
            weights: self.weights.clone(),
            tokenizer: None,
            template: None,
        }
    }

    pub fn read(path: &Path) -> Result<Option<Lock>> {
        if !path.exists() {
            return Ok(None);
        }
        let text = crate::error::read_to_string(path)?;
        let lock: Lock = serde_json::from_str(&text).map_err(|e| {
            Error::in_file(path, format!("not a chatgate lock: {e}"))
                .hint("regenerate it with `chatgate lock SUITE.toml --update`")
        })?;
        if lock.version != LOCK_VERSION {
            return Err(Error::in_file(
                path,
                format!(
                    "lock version {} is not supported (expected {LOCK_VERSION})",
                    lock.version
                ),
            )
            .hint("regenerate it with `chatgate lock SUITE.toml --update`"));
        }
        Ok(Some(lock))
    }

    /// Write atomically: a crash leaves either the old lock or the new one, never half of one.
    pub fn write(&self, path: &Path) -> Result<()> {
        let mut json = serde_json::to_string_pretty(self)
            .map_err(|e| Error::input(format!("cannot serialize the lock: {e}")))?;
        json.push('\n');
        crate::files::write_atomic(path, json.as_bytes())
    }
}

/// Human-readable differences between two locks (empty when equal).
pub fn diff(old: &Lock, new: &Lock) -> Vec<String> {
    let mut out = Vec::new();
    if old.weights.total != new.weights.total {
        for f in &new.weights.files {
            match old.weights.files.iter().find(|o| o.name == f.name) {
                None => out.push(format!("weights: new file {}", f.name)),
                Some(o) if o.sha256 != f.sha256 => out.push(format!(
                    "weights: {} changed ({} → {})",
                    f.name,
                    short(&o.sha256),
                    short(&f.sha256)
                )),
                _ => {}
            }
        }
        for o in &old.weights.files {
            if !new.weights.files.iter().any(|f| f.name == o.name) {
                out.push(format!("weights: {} removed", o.name));
            }
        }
    }
    match (&old.tokenizer, &new.tokenizer) {
        (Some(a), Some(b)) if a != b => {
            if a.sha256 != b.sha256 {
                out.push(format!(
                    "tokenizer file: {} → {}",
                    short(&a.sha256),
                    short(&b.sha256)
                ));
            }
            if a.fingerprint != b.fingerprint {
                out.push(format!(
                    "tokenizer fingerprint: {} → {}",
                    short(&a.fingerprint),
                    short(&b.fingerprint)
                ));
            }
        }
        (None, Some(_)) => out.push("tokenizer: now present".into()),
        (Some(_), None) => out.push("tokenizer: now missing".into()),
        _ => {}
    }
    match (&old.template, &new.template) {
        (Some(a), Some(b)) if a != b => out.push(format!(
            "template: {} {} → {} {}",
            a.origin,
            short(&a.sha256),
            b.origin,
            short(&b.sha256)
        )),
        (None, Some(b)) => out.push(format!("template: now {}", b.origin)),
        (Some(a), None) => out.push(format!("template: {} now missing", a.origin)),
        _ => {}
    }
    out
}

pub use crate::chain::run::tokens::short;

pub fn template_sha256(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}
