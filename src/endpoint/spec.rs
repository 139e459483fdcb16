//! Which target a gate run talks to: `candle:DIR` (the checkpoint in-process) or the base URL of
//! an OpenAI-compatible server. Both answer a `ChatRequest` with a `Record`.
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::local::CandleTarget;
use super::openai::{CallError, HttpOptions, HttpTarget};
use crate::error::{Error, Result};
use crate::exchange::{ChatRequest, Record};
use crate::suite::Suite;

/// A parsed `--target` / `[target] url`.
#[derive(Debug, Clone, PartialEq)]
pub enum TargetSpec {
    Candle(PathBuf),
    Http(String),
}

impl TargetSpec {
    /// `candle:DIR` (relative paths resolve against `base`) or `http(s)://…`.
    pub fn parse(s: &str, base: &Path) -> Result<TargetSpec> {
        if let Some(dir) = s.strip_prefix("candle:") {
            let p = PathBuf::from(dir);
            return Ok(TargetSpec::Candle(if p.is_absolute() {
                p
            } else {
                base.join(p)
            }));
        }
        if s.starts_with("http://") || s.starts_with("https://") {
            let query_secret = s.split_once('?').is_some_and(|(_, q)| {
                q.split('&').any(|p| {
                    p.split_once('=').is_some_and(|(k, v)| {
                        crate::secrets::is_credential_name(k) && !v.is_empty()
                    })
                })
            });
            if s.contains('@') || query_secret {
                // Keep the value out of every output, this error's included.
                if let Some((_, q)) = s.split_once('?') {
                    for (k, v) in q.split('&').filter_map(|p| p.split_once('=')) {
                        if crate::secrets::is_credential_name(k) {
                            crate::secrets::register(v);
                        }
                    }
                }
                return Err(Error::input(format!(
                    "target {:?} carries credentials in the URL",
                    crate::secrets::redact(&redact(s))
                ))
                .hint("put the API key in an environment variable and name it with [target] api_key_env"));
            }
            return Ok(TargetSpec::Http(s.trim_end_matches('/').to_string()));
        }
        Err(Error::input(format!(
            "target {s:?} is neither `candle:DIR` nor an http(s) URL"
        ))
        .hint("e.g. --target candle:models/tiny-chat or --target http://127.0.0.1:8000"))
    }

    /// `candle` or `http`: the key latency baselines are stored under (a server and the
    /// in-process model have different overheads, so they never share a baseline).
    pub fn label(&self) -> &'static str {
        match self {
            TargetSpec::Candle(_) => "candle",
            TargetSpec::Http(_) => "http",
        }
    }

    /// For reports: the target as given, never with credentials.
    pub fn display(&self) -> String {
        match self {
            TargetSpec::Candle(p) => format!("candle:{}", p.display()),
            TargetSpec::Http(u) => redact(u),
        }
    }
}

/// Drop anything between `//` and `@` (userinfo) from a URL.
fn redact(url: &str) -> String {
    match (url.find("//"), url.find('@')) {
        (Some(a), Some(b)) if b > a => format!("{}<redacted>@{}", &url[..a + 2], &url[b + 1..]),
        _ => url.to_string(),
    }
}

/// A connected target.
#[derive(Clone)]
pub enum Target {
    Candle(CandleTarget),
    Http(HttpTarget),
}

impl Target {
    /// Open the target a suite (or `--target`) names. Loading a candle model is blocking work.
    pub fn open(spec: &TargetSpec, suite: &Suite) -> Result<Target> {
        match spec {
            TargetSpec::Candle(dir) => Ok(Target::Candle(
                CandleTarget::load(dir)?.with_template_now(suite.template_now),
            )),
            TargetSpec::Http(url) => {
                let t = suite.file.target.as_ref();
                let secs =
                    |v: Option<f64>, d: f64| Duration::from_secs_f64(v.unwrap_or(d).max(0.001));
                let mib = |v: Option<u64>, d: usize| {
                    v.map(|m| usize::try_from(m.saturating_mul(1 << 20)).unwrap_or(usize::MAX))
                        .unwrap_or(d)
                };
                Ok(Target::Http(HttpTarget::new(HttpOptions {
                    base_url: url.clone(),
                    model: model_name(suite),
                    api_key_env: t.and_then(|t| t.api_key_env.clone()),
                    connect_timeout: secs(t.and_then(|t| t.connect_timeout_s), 5.0),
                    read_timeout: secs(t.and_then(|t| t.read_timeout_s), 30.0),
                    total_timeout: secs(t.and_then(|t| t.total_timeout_s), 120.0),
                    extra_body: t.map(|t| t.extra_body.clone()).unwrap_or_default(),
                    max_body_bytes: mib(
                        t.and_then(|t| t.max_body_mb),
                        crate::endpoint::openai::MAX_BODY_BYTES,
                    ),
                    max_stream_bytes: mib(
                        t.and_then(|t| t.max_stream_mb),
                        crate::endpoint::openai::MAX_STREAM_BYTES,
                    ),
                    max_line_bytes: crate::endpoint::openai::MAX_LINE_BYTES
                        .max(mib(t.and_then(|t| t.max_stream_mb), 0) / 8),
                    max_in_flight_bytes: mib(
                        t.and_then(|t| t.max_in_flight_mb),
                        crate::endpoint::openai::MAX_IN_FLIGHT_BYTES,
                    ),
                })?))
            }
        }
    }

    pub async fn chat(&self, req: &ChatRequest) -> Result<Record, CallError> {
        match self {
            Target::Candle(c) => c.chat(req).await.map_err(|e| CallError::Status {
                url: format!("candle:{}", c.path().display()),
                status: 400,
                body: e.to_string(),
            }),
            Target::Http(h) => h.chat(req).await,
        }
    }

    pub fn http(&self) -> Option<&HttpTarget> {
        match self {
            Target::Http(h) => Some(h),
            Target::Candle(_) => None,
        }
    }
}

/// The `model` field requests carry: `[target] model`, else the served directory's name.
pub fn model_name(suite: &Suite) -> String {
    suite
        .file
        .target
        .as_ref()
        .and_then(|t| t.model.clone())
        .unwrap_or_else(|| default_model_name(&suite.model_dir))
}

/// The suite's target: `--target` wins over `[target] url`; with neither, the served model
/// directory in-process.
pub fn resolve(cli: Option<&str>, suite: &Suite) -> Result<TargetSpec> {
    let cwd = Path::new(".");
    let suite_dir = suite.path.parent().unwrap_or(cwd);
    match (cli, suite.file.target.as_ref()) {
        (Some(s), _) => TargetSpec::parse(s, cwd),
        (None, Some(t)) if t.url.is_some() => {
            TargetSpec::parse(t.url.as_deref().unwrap_or_default(), suite_dir)
        }
        (None, _) => Ok(TargetSpec::Candle(suite.model_dir.clone())),
    }
}

/// The name a model path is served under by default.
pub fn default_model_name(model: &std::path::Path) -> String {
    let abs = std::fs::canonicalize(model).unwrap_or_else(|_| model.to_path_buf());
    let name = if abs.is_file() {
        abs.file_stem()
    } else {
        abs.file_name()
    };
    name.map(|n| n.to_string_lossy().into_owned())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "model".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_targets_and_refuses_credentials() {
        let base = Path::new("/s");
        assert_eq!(
            TargetSpec::parse("candle:m", base).ok(),
            Some(TargetSpec::Candle("/s/m".into()))
        );
        assert_eq!(
            TargetSpec::parse("http://h:1/", base).ok(),
            Some(TargetSpec::Http("http://h:1".into()))
        );
        let e = TargetSpec::parse("https://u:secret@h", base)
            .err()
            .map(|e| e.to_string());
        assert!(e.as_deref().is_some_and(|e| !e.contains("secret")), "{e:?}");
        assert!(TargetSpec::parse("ftp://h", base).is_err());
    }
}
