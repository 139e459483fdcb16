//! Typed access to the fields of a JSON document, with errors that name the file and the key.
use std::path::Path;

use serde_json::{Map, Value};

use crate::error::{Error, Result};

/// Read a JSON file whose top level must be an object.
pub(crate) fn read_object(path: &Path) -> Result<Map<String, Value>> {
    match crate::error::read_json(path)? {
        Value::Object(map) => Ok(map),
        other => Err(Error::in_file(
            path,
            format!(
                "expected a JSON object at the top level, found {}",
                kind(&other)
            ),
        )
        .hint("the file is not in the format Hugging Face writes; re-download or re-save it")),
    }
}

/// A short name for a JSON value's type, for error messages.
pub(crate) fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "an integer",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// A JSON object read from `path`; `prefix` names the enclosing key for nested objects.
pub(crate) struct Fields<'a> {
    pub path: &'a Path,
    pub obj: &'a Map<String, Value>,
    pub prefix: String,
}

impl<'a> Fields<'a> {
    pub fn new(path: &'a Path, obj: &'a Map<String, Value>) -> Self {
        Fields {
            path,
            obj,
            prefix: String::new(),
        }
    }

    /// The object under `key`, if it is one (None when absent or null).
    pub fn nested(&self, key: &str) -> Result<Option<Fields<'a>>> {
        match self.obj.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Object(map)) => Ok(Some(Fields {
                path: self.path,
                obj: map,
                prefix: format!("{}{key}.", self.prefix),
            })),
            Some(other) => Err(self.wrong(key, "an object", other)),
        }
    }

    pub fn key_name(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    pub fn wrong(&self, key: &str, expected: &str, found: &Value) -> Error {
        Error::in_file(
            self.path,
            format!(
                "`{}` should be {expected}, but it is {}",
                self.key_name(key),
                kind(found)
            ),
        )
        .hint(format!(
            "fix or remove `{}` in {}",
            self.key_name(key),
            self.path
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default()
        ))
    }

    fn get(&self, key: &str) -> Option<&'a Value> {
        match self.obj.get(key) {
            None | Some(Value::Null) => None,
            Some(v) => Some(v),
        }
    }

    pub fn has(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    pub fn string(&self, key: &str) -> Result<Option<String>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(self.wrong(key, "a string", other)),
        }
    }

    pub fn boolean(&self, key: &str) -> Result<Option<bool>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(self.wrong(key, "true or false", other)),
        }
    }

    pub fn number(&self, key: &str) -> Result<Option<f64>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Number(n)) => Ok(n.as_f64()),
            Some(other) => Err(self.wrong(key, "a number", other)),
        }
    }

    pub fn integer(&self, key: &str) -> Result<Option<i64>> {
        match self.get(key) {
            None => Ok(None),
            Some(v @ Value::Number(n)) => match n.as_i64() {
                Some(i) => Ok(Some(i)),
                None => Err(self.wrong(key, "an integer", v)),
            },
            Some(other) => Err(self.wrong(key, "an integer", other)),
        }
    }

    /// A non-negative integer.
    pub fn count(&self, key: &str) -> Result<Option<u64>> {
        match self.get(key) {
            None => Ok(None),
            Some(v @ Value::Number(n)) => match n.as_u64() {
                Some(i) => Ok(Some(i)),
                None => Err(self.wrong(key, "a non-negative integer", v)),
            },
            Some(other) => Err(self.wrong(key, "a non-negative integer", other)),
        }
    }

    /// A token id. A negative id (some configs write -1 for "none") reads as absent.
    pub fn id(&self, key: &str) -> Result<Option<u32>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => self.one_id(key, v),
        }
    }

    fn one_id(&self, key: &str, v: &Value) -> Result<Option<u32>> {
        match v {
            Value::Number(n) => {
                if let Some(u) = n.as_u64() {
                    u32::try_from(u)
                        .map(Some)
                        .map_err(|_| self.wrong(key, "a token id (below 2^32)", v))
                } else if n.as_i64().is_some() {
                    Ok(None)
                } else {
                    Err(self.wrong(key, "an integer token id", v))
                }
            }
            other => Err(self.wrong(key, "an integer token id", other)),
        }
    }

    /// A token id or a list of token ids (an int becomes a one-element list).
    pub fn ids(&self, key: &str) -> Result<Vec<u32>> {
        match self.get(key) {
            None => Ok(Vec::new()),
            Some(Value::Array(items)) => {
                let mut out = Vec::with_capacity(items.len());
                for item in items {
                    match item {
                        Value::Number(_) => {
                            if let Some(id) = self.one_id(key, item)? {
                                out.push(id);
                            }
                        }
                        other => {
                            return Err(self.wrong(
                                key,
                                "an integer token id or a list of them",
                                other,
                            ))
                        }
                    }
                }
                Ok(out)
            }
            Some(v @ Value::Number(_)) => Ok(self.one_id(key, v)?.into_iter().collect()),
            Some(other) => Err(self.wrong(key, "an integer token id or a list of them", other)),
        }
    }

    pub fn strings(&self, key: &str) -> Result<Vec<String>> {
        match self.get(key) {
            None => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .map(|item| match item {
                    Value::String(s) => Ok(s.clone()),
                    other => Err(self.wrong(key, "a list of strings", other)),
                })
                .collect(),
            Some(other) => Err(self.wrong(key, "a list of strings", other)),
        }
    }

    /// A token field: a string, or an AddedToken dict `{"content": ...}`.
    pub fn token(&self, key: &str) -> Result<Option<String>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => self.token_value(key, v).map(Some),
        }
    }

    pub fn token_value(&self, key: &str, v: &Value) -> Result<String> {
        match v {
            Value::String(s) => Ok(s.clone()),
            Value::Object(map) => match map.get("content") {
                Some(Value::String(s)) => Ok(s.clone()),
                Some(other) => Err(self.wrong(&format!("{key}.content"), "a string", other)),
                None => Err(Error::in_file(
                    self.path,
                    format!(
                        "`{}` is an object without a `content` string",
                        self.key_name(key)
                    ),
                )
                .hint("a token is either a string or {\"content\": \"...\", ...}")),
            },
            other => Err(self.wrong(key, "a string or {\"content\": ...}", other)),
        }
    }

    /// A list of tokens (each a string or an AddedToken dict).
    pub fn tokens(&self, key: &str) -> Result<Vec<String>> {
        match self.get(key) {
            None => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .map(|item| self.token_value(key, item))
                .collect(),
            Some(other) => Err(self.wrong(key, "a list of tokens", other)),
        }
    }
}
