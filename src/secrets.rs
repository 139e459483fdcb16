//! Secrets never leave the process: the API key (and credentials found in URLs) are registered
//! here when read, and every output — reports in every format, error messages, proxy
//! recordings — passes through [`redact`]. A file that would hold one is not written
//! ([`check_not_in`]): a server that echoes the key into its replies must not get it into an
//! accepted snapshot.
use std::borrow::Cow;
use std::sync::RwLock;

use serde_json::Value;

pub const REDACTED: &str = "<redacted>";

static SECRETS: RwLock<Vec<String>> = RwLock::new(Vec::new());

/// Remember a secret's value for redaction. Values shorter than 4 characters would redact
/// ordinary text and are ignored (no real key is that short).
pub fn register(secret: &str) {
    let s = secret.trim();
    if s.chars().count() < 4 {
        return;
    }
    if let Ok(mut all) = SECRETS.write() {
        if !all.iter().any(|x| x == s) {
            all.push(s.to_string());
            // Longest first, so a key that contains another is replaced whole.
            all.sort_by_key(|x| std::cmp::Reverse(x.len()));
        }
    }
}

/// Remember the credentials of a URL (`http://user:pass@host/…`): the password, and the whole
/// user-info part.
pub fn register_url_credentials(url: &str) {
    let userinfo = url
        .split_once("://")
        .and_then(|(_, rest)| rest.split('/').next())
        .and_then(|host| host.rsplit_once('@'))
        .map(|(u, _)| u.to_string());
    if let Some(userinfo) = userinfo {
        register(
            userinfo
                .split_once(':')
                .map_or(userinfo.as_str(), |(_, p)| p),
        );
        register(&userinfo);
    }
}

/// The text with every registered secret replaced by `<redacted>`.
pub fn redact(text: &str) -> Cow<'_, str> {
    let Ok(all) = SECRETS.read() else {
        return Cow::Borrowed(text);
    };
    if !all.iter().any(|s| text.contains(s.as_str())) {
        return Cow::Borrowed(text);
    }
    let mut out = text.to_string();
    for s in all.iter() {
        out = out.replace(s.as_str(), REDACTED);
    }
    Cow::Owned(out)
}

/// Whether the text holds a registered secret.
pub fn contains(text: &str) -> bool {
    SECRETS
        .read()
        .map(|all| all.iter().any(|s| text.contains(s.as_str())))
        .unwrap_or(false)
}

/// Refuse to write `bytes` to `path` when they hold a secret.
pub fn check_not_in(path: &std::path::Path, bytes: &[u8]) -> crate::error::Result<()> {
    if contains(&String::from_utf8_lossy(bytes)) {
        return Err(crate::error::Error::in_file(
            path,
            "not written: it would contain the API key (the server echoed it back)",
        )
        .hint("a server must never return its credentials; fix the server, then run again"));
    }
    Ok(())
}

/// JSON object keys, query parameters and header names that name credentials: their values
/// are never recorded. Judged on the last word (`api_key`, `access_token`, `x-auth`,
/// `client_secret`), so `max_tokens`, `stop_token_ids` or `add_special_tokens` stay readable.
pub fn is_credential_name(name: &str) -> bool {
    const WORDS: &[&str] = &[
        "key",
        "apikey",
        "token",
        "secret",
        "password",
        "passwd",
        "authorization",
        "auth",
        "cookie",
        "credential",
        "credentials",
        "signature",
        "bearer",
    ];
    let n = name.to_ascii_lowercase().replace('-', "_");
    if n == "prompt_cache_key" || n == "cache_key" {
        return false;
    }
    n.rsplit('_')
        .next()
        .is_some_and(|last| WORDS.contains(&last))
        || n == "set_cookie"
}

/// Replace the values of credential-named fields, at any depth, and registered secrets in
/// every string.
pub fn redact_json(v: &mut Value) {
    match v {
        Value::Object(m) => {
            for (k, val) in m.iter_mut() {
                if is_credential_name(k) && !val.is_null() {
                    *val = Value::String(REDACTED.into());
                } else {
                    redact_json(val);
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(redact_json),
        Value::String(s) => {
            if let Cow::Owned(r) = redact(s) {
                *s = r;
            }
        }
        _ => {}
    }
}

/// A query string with credential-named parameters' values replaced.
pub fn redact_query(query: &str) -> String {
    query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((k, _)) if is_credential_name(k) => format!("{k}={REDACTED}"),
            _ => redact(pair).into_owned(),
        })
        .collect::<Vec<_>>()
        .join("&")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registered_values_credential_fields_and_query_params_are_redacted() {
        register("canary-sk-0123456789");
        assert_eq!(
            redact("401: bad key canary-sk-0123456789!"),
            "401: bad key <redacted>!"
        );
        assert!(contains("xx canary-sk-0123456789"));
        let mut v = serde_json::json!({"api_key": "abc", "nested": {"X-Auth": "q", "ok": "canary-sk-0123456789"}, "model": "m",
            "max_tokens": 12, "stop_token_ids": [2], "add_special_tokens": false, "client_secret": "s"});
        redact_json(&mut v);
        assert_eq!(v["api_key"], REDACTED);
        assert_eq!(v["nested"]["X-Auth"], REDACTED);
        assert_eq!(v["nested"]["ok"], REDACTED);
        assert_eq!(v["client_secret"], REDACTED);
        assert_eq!(v["model"], "m");
        assert_eq!(v["max_tokens"], 12);
        assert_eq!(v["stop_token_ids"], serde_json::json!([2]));
        assert_eq!(v["add_special_tokens"], false);
        assert_eq!(
            redact_query("api_key=abc&model=x&access_token=t"),
            "api_key=<redacted>&model=x&access_token=<redacted>"
        );
        register("ab");
        assert_eq!(redact("ab cd"), "ab cd", "too short to be a key");
    }
}
