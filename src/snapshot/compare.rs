//! How a replayed reply is compared with its accepted snapshot.
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One comparator per prompt. In TOML/JSON: `"exact"`, `"exact-tokens"`,
/// `"normalized-whitespace"`, `{ prefix-tokens = 8 }`, `{ similarity = 0.9 }`,
/// `{ contains = "Paris" }`, `{ regex = "^\\d+$" }`, `{ json-schema = {...} }`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Comparator {
    /// Same text and finish reason (and the same token ids when both sides have them).
    #[default]
    Exact,
    /// Same token ids (falls back to the text when a side has no ids).
    ExactTokens,
    /// The first N tokens agree.
    PrefixTokens(usize),
    /// Same text after collapsing whitespace runs and trimming.
    NormalizedWhitespace,
    /// Token edit ratio (1 − edit distance / longer length) at least this.
    Similarity(f64),
    /// The reply contains this string.
    Contains(String),
    /// The reply matches this regular expression.
    Regex(String),
    /// The reply parses as JSON and validates against this schema.
    JsonSchema(Value),
}
