//! Streaming detokenization and stop strings.
//!
//! [`Detokenizer`] is the prefix/read-offset technique of TGI and vLLM: the text of a new token
//! is `decode(ids[prefix..]) - decode(ids[prefix..read])`, emitted only when it does not end
//! with U+FFFD (a byte-level token that ends inside a multi-byte character); the offsets then
//! move forward. Decoding a few tokens of context (the prompt's last ones) keeps the spacing a
//! SentencePiece decoder would strip from a leading token.
//!
//! [`StopText`] holds back any tail of the text that could be the start of a stop string, so
//! a stop string never leaks into streamed text, and cuts the text before the first match.
use tokenizers::Tokenizer;

use crate::error::{Error, Result};

/// How many prompt tokens the detokenizer decodes as context (vLLM uses 5).
pub const CONTEXT_TOKENS: usize = 5;

/// Incremental detokenizer over one sequence.
pub struct Detokenizer<'a> {
    tokenizer: &'a Tokenizer,
    skip_special_tokens: bool,
    ids: Vec<u32>,
    prefix: usize,
    read: usize,
    /// `decode(ids[prefix..read])`, cached while the offsets do not move.
    prefix_text: String,
}

impl<'a> Detokenizer<'a> {
    /// `context` are the tokens before the generated ones (normally the prompt's last
    /// [`CONTEXT_TOKENS`]); their text is never emitted.
    pub fn new(
        tokenizer: &'a Tokenizer,
        context: &[u32],
        skip_special_tokens: bool,
    ) -> Result<Self> {
        let start = context.len().saturating_sub(CONTEXT_TOKENS);
        let ids: Vec<u32> = context[start..].to_vec();
        let read = ids.len();
        let mut d = Detokenizer {
            tokenizer,
            skip_special_tokens,
            ids,
            prefix: 0,
            read,
            prefix_text: String::new(),
        };
        d.prefix_text = d.decode(0, read)?;
        Ok(d)
    }

    fn decode(&self, from: usize, to: usize) -> Result<String> {
        if from >= to {
            return Ok(String::new());
        }
        self.tokenizer
            .decode(&self.ids[from..to], self.skip_special_tokens)
            .map_err(|e| Error::input(format!("cannot decode token ids: {e}")))
    }

    /// Add a token; returns the text it completes (whole characters only, maybe empty).
    pub fn push(&mut self, id: u32) -> Result<String> {
        self.ids.push(id);
        let new_text = self.decode(self.prefix, self.ids.len())?;
        if new_text.len() <= self.prefix_text.len() || new_text.ends_with('\u{FFFD}') {
            return Ok(String::new());
        }
        let out = match new_text.strip_prefix(self.prefix_text.as_str()) {
            Some(rest) => rest.to_string(),
            None => {
                // The context decodes differently once followed by more tokens (a decoder that
                // merges across tokens): emit what differs after the common prefix.
                let common = common_prefix_len(&self.prefix_text, &new_text);
                new_text[common..].to_string()
            }
        };
        self.prefix = self.read;
        self.read = self.ids.len();
        self.prefix_text = self.decode(self.prefix, self.read)?;
        Ok(out)
    }

    /// Text decoded but not yet emitted (an incomplete character); dropped at the end.
    pub fn has_pending(&self) -> bool {
        self.read < self.ids.len()
    }
}

/// Byte length of the longest common prefix of `a` and `b`, on a char boundary.
fn common_prefix_len(a: &str, b: &str) -> usize {
    let mut n = 0;
    for ((i, ca), cb) in a.char_indices().zip(b.chars()) {
        if ca != cb {
            return i;
        }
        n = i + ca.len_utf8();
    }
    n
}

/// What pushing text through [`StopText`] gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopOutcome {
    /// Text that can be emitted now (possibly empty while a possible stop string is pending).
    Emit(String),
    /// A stop string matched: the text before it, and the generation ends.
    Stopped(String),
}

/// Stop-string matching over streamed text.
#[derive(Debug, Clone, Default)]
pub struct StopText {
    stops: Vec<String>,
    /// Text not emitted yet: the longest tail that is a proper prefix of a stop string.
    pending: String,
}

impl StopText {
    /// Empty stop strings are ignored.
    pub fn new(stops: &[String]) -> Self {
        StopText {
            stops: stops.iter().filter(|s| !s.is_empty()).cloned().collect(),
            pending: String::new(),
        }
    }

    pub fn push(&mut self, text: &str) -> StopOutcome {
        if self.stops.is_empty() {
            return StopOutcome::Emit(text.to_string());
        }
        self.pending.push_str(text);
        // A match can only start inside `pending`: everything emitted before had no tail that
        // could begin a stop string.
        let first = self
            .stops
            .iter()
            .filter_map(|s| self.pending.find(s.as_str()))
            .min();
        if let Some(at) = first {
            let before = self.pending[..at].to_string();
            self.pending.clear();
            return StopOutcome::Stopped(before);
        }
        let hold = self
            .stops
            .iter()
            .map(|s| longest_suffix_prefix(&self.pending, s))
            .max()
            .unwrap_or(0);
        let cut = self.pending.len() - hold;
        let out = self.pending[..cut].to_string();
        self.pending.drain(..cut);
        StopOutcome::Emit(out)
    }

    /// The generation ended for another reason: release the held-back text.
    pub fn flush(&mut self) -> String {
        std::mem::take(&mut self.pending)
    }
}

/// Length of the longest suffix of `text` that is a proper prefix of `stop`.
fn longest_suffix_prefix(text: &str, stop: &str) -> usize {
    let max = (stop.len() - 1).min(text.len());
    (1..=max)
        .rev()
        .find(|&k| stop.is_char_boundary(k) && text.ends_with(&stop[..k]))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_text_holds_back_and_cuts() {
        let mut s = StopText::new(&["</end>".to_string()]);
        assert_eq!(s.push("hello </"), StopOutcome::Emit("hello ".into()));
        assert_eq!(s.push("e"), StopOutcome::Emit(String::new()));
        assert_eq!(s.push("x"), StopOutcome::Emit("</ex".into()));
        assert_eq!(s.push("a</en"), StopOutcome::Emit("a".into()));
        assert_eq!(s.push("d> tail"), StopOutcome::Stopped(String::new()));
    }

    #[test]
    fn stop_text_flushes_and_handles_multibyte() {
        let mut s = StopText::new(&["é!".to_string(), String::new()]);
        assert_eq!(s.push("café"), StopOutcome::Emit("caf".into()));
        assert_eq!(s.flush(), "é");
        assert_eq!(s.push("xé!y"), StopOutcome::Stopped("x".into()));
    }

    #[test]
    fn earliest_stop_wins() {
        let mut s = StopText::new(&["bc".to_string(), "ab".to_string()]);
        assert_eq!(s.push("xabc"), StopOutcome::Stopped("x".into()));
    }
}
