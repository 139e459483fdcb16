//! Tokenizer calls with errors a user can read, and the helpers every boundary shares.
use tokenizers::Tokenizer;

use crate::error::{Error, Result};

/// `Tokenizer::encode(text, add_special_tokens)`: what transformers' `apply_chat_template`
/// (add_special_tokens=false) or a completions endpoint (true) feeds the model.
/// Offsets are not tracked: only the ids are wanted, and this runs for every SFT row.
pub fn encode(tok: &Tokenizer, text: &str, add_special_tokens: bool) -> Result<Vec<u32>> {
    tok.encode_fast(text, add_special_tokens)
        .map(|e| e.get_ids().to_vec())
        .map_err(|e| Error::input(format!("the tokenizer failed to encode a string: {e}")))
}

/// A hash as reports show it: its first 12 hex digits.
pub fn short(hash: &str) -> &str {
    &hash[..hash.len().min(12)]
}

/// Decode keeping special tokens, as vLLM's /detokenize and a training-data dump show them.
pub fn decode(tok: &Tokenizer, ids: &[u32]) -> String {
    tok.decode(ids, false)
        .unwrap_or_else(|e| format!("<undecodable: {e}>"))
}

/// A readable view of a few tokens: `'<|im_start|>' 'user' '\n'`.
pub fn show_tokens(tok: &Tokenizer, ids: &[u32]) -> String {
    ids.iter()
        .map(|&id| {
            // A decoder may strip a lone token to nothing (SentencePiece's `▁`): show its piece.
            let text = decode(tok, &[id]);
            match tok.id_to_token(id) {
                Some(piece) if text.is_empty() => format!("{id}:{piece:?}"),
                _ => format!("{id}:{text:?}"),
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The id of a token text when the vocabulary has it as one token (added or regular).
pub fn single_id(tok: &Tokenizer, text: &str) -> Option<u32> {
    tok.token_to_id(text)
}

/// How many times `bos` leads the sequence.
pub fn leading_count(ids: &[u32], bos: Option<u32>) -> usize {
    match bos {
        Some(b) => ids.iter().take_while(|&&i| i == b).count(),
        None => 0,
    }
}
