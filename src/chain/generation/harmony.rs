//! OpenAI's harmony format (gpt-oss): which token ends what.
//!
//! From the format's spec (openai/harmony `docs/format.md`, `src/registry.rs`):
//! - `<|end|>` closes *every* message — the system, developer and user messages, and the
//!   assistant's own analysis and commentary messages in the middle of its turn;
//! - `<|return|>` ends the final answer: the model is done, stop sampling;
//! - `<|call|>` ends a tool call: stop sampling, run the tool.
//!
//! harmony's `stop_tokens_for_assistant_actions` is exactly {`<|return|>`, `<|call|>`}. A stop
//! set holding `<|end|>` cuts every reply after its analysis channel; one without `<|call|>`
//! runs a tool call on (gpt-oss's first generation_config.json listed only 200002 and 199999,
//! the later one adds 200012). In history, a final answer's `<|return|>` is written `<|end|>`
//! (format.md: replace it when storing), so a template may close the last assistant message
//! with `<|end|>`: that is a message end, not the turn terminator to add to a stop set.
//!
//! How stacks stop gpt-oss: HF `generate()` and `transformers serve` on generation_config.json's
//! eos list; vLLM (0.33) likewise; llama.cpp on its end-of-generation tokens, which include
//! `<|return|>` and `<|call|>` by name and leave `<|end|>` out for gpt-oss (`llama-vocab.cpp`).
use std::collections::BTreeSet;

use tokenizers::Tokenizer;

use crate::chain::run::tokens::single_id;

/// The harmony tokens of a vocabulary that has them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Harmony {
    /// `<|end|>`: the end of a message.
    pub end: u32,
    /// `<|return|>`: the end of the final answer.
    pub ret: u32,
    /// `<|call|>`: the end of a tool call.
    pub call: u32,
}

pub const END: &str = "<|end|>";
pub const RETURN: &str = "<|return|>";
pub const CALL: &str = "<|call|>";
const CHANNEL: &str = "<|channel|>";

impl Harmony {
    /// The harmony tokens, when the template writes harmony (its channels) and the vocabulary
    /// has all of them.
    pub fn of(tok: &Tokenizer, template_source: &str) -> Option<Harmony> {
        if !template_source.contains(CHANNEL) {
            return None;
        }
        single_id(tok, CHANNEL)?;
        Some(Harmony {
            end: single_id(tok, END)?,
            ret: single_id(tok, RETURN)?,
            call: single_id(tok, CALL)?,
        })
    }

    /// The tokens that end an assistant turn: the final answer's and the tool call's.
    pub fn turn_ends(&self) -> BTreeSet<u32> {
        BTreeSet::from([self.ret, self.call])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokenizer_with(names: &[&str]) -> Tokenizer {
        let mut t = Tokenizer::from_file(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("models/tiny-chat/tokenizer.json"),
        )
        .unwrap();
        let added: Vec<tokenizers::AddedToken> = names
            .iter()
            .map(|n| tokenizers::AddedToken::from(n.to_string(), true))
            .collect();
        t.add_special_tokens(added).unwrap();
        t
    }

    #[test]
    fn harmony_is_the_channels_and_all_three_ends() {
        let all = tokenizer_with(&[CHANNEL, END, RETURN, CALL]);
        let h = Harmony::of(&all, "<|start|>assistant<|channel|>final<|message|>").unwrap();
        assert_eq!(h.turn_ends(), BTreeSet::from([h.ret, h.call]));
        assert!(!h.turn_ends().contains(&h.end));
        // ChatML with an `<|end|>` (Phi-3) is not harmony; nor is a vocabulary missing `<|call|>`.
        assert_eq!(Harmony::of(&all, "<|user|>{{ m }}<|end|>"), None);
        let no_call = tokenizer_with(&[CHANNEL, END, RETURN]);
        assert_eq!(Harmony::of(&no_call, "<|channel|>"), None);
    }
}
