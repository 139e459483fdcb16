//! The fixed probe corpus behind the tokenizer's semantic fingerprint and round-trip check.
//! Changing a string here changes every fingerprint: add strings only in a new version
//! (`corpus(version)`), so locks made with an older version are still compared on the strings
//! they were made with.
use sha2::{Digest, Sha256};
use tokenizers::Tokenizer;

use crate::error::{Error, Result};

pub const PROBE_VERSION: u32 = 2;

/// The probe strings of a corpus version (None for a version this build does not know).
pub fn corpus(version: u32) -> Option<Vec<&'static str>> {
    match version {
        1 => Some(PROBE_CORPUS.to_vec()),
        2 => Some(PROBE_CORPUS.iter().chain(ENGLISH).copied().collect()),
        _ => None,
    }
}

/// Version 2: common English words and sentences. A merge such as Qwen2.5's `Ġ t` never
/// fires on version 1's strings, so removing it left the fingerprint unchanged.
pub const ENGLISH: &[&str] = &[
    "the to and of a in that is for it with as was on be at by this had not are but from or have an they which you were her all she there would their we him been has when who will more no if out so said what up its about into than them can only other new some could time these two may then do first any my now such like our over man me even most made after also did many before must through back years where much your way well down should because each just those people how too little state good very make world still own see men work long get here between both life being under never day same another know while last might us great old year off come since against go came right used take three",
    "The quick brown fox jumps over the lazy dog. It was the best of times, it was the worst of times.",
    "I think that this is a good idea, but we should test it first and then talk to them about it.",
    "Thank you! Could you please tell me what the weather will be like tomorrow in the city?",
];

/// Strings chosen where tokenizers differ: unicode and normalization, whitespace runs, digits
/// (split rules differ between Llama-3, Qwen and GPT-2), code, and text that looks like special
/// tokens followed by spaces and newlines (llama.cpp#23840, #7094).
/// Version 1's strings.
pub const PROBE_CORPUS: &[&str] = &[
    "Hello world",
    " Hello world",
    "Hello  world   with    runs",
    "\n\n\ttabs\tand\nnewlines\r\n",
    "    indented code",
    "naïve café — 日本語のテキスト 🤖 ∑ x² ≠ y",
    "Ünïcödé NFC vs NFD: e\u{301} é",
    "ضمن العربية и кириллица",
    "1234567890 3.14159 1,000,000 2024-11-22",
    "x=1; y = x**2 // 3 % 7",
    "def f(x):\n    return {\"a\": [1, 2, 3]}\n",
    "fn main() { println!(\"{}\", 42); }",
    "<|im_start|>user\nhi<|im_end|>",
    "<s> [INST] hi [/INST]</s>",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
    "<|endoftext|> after special",
    "</s> space after eos",
    "<s>\nnewline after bos",
    "<think>\nreasoning\n</think>\n\nanswer",
    "'quotes' \"double\" `back` it's don't",
    "URLs https://example.com/a?b=c&d=e#f",
    "emoji 👩‍👩‍👧 flags 🇫🇷 zwj",
];

/// sha256 over the ids of the probe corpus: two tokenizers with the same fingerprint split the
/// probe strings identically, whatever their files look like.
pub fn fingerprint(tok: &Tokenizer) -> Result<String> {
    fingerprint_v(tok, PROBE_VERSION)
}

/// The fingerprint over a given probe-corpus version (locks keep the version they used).
pub fn fingerprint_v(tok: &Tokenizer, version: u32) -> Result<String> {
    let corpus = crate::chain::run::probe::corpus(version).ok_or_else(|| {
        Error::input(format!(
            "the lock's tokenizer probe version {version} is newer than this chatgate knows ({PROBE_VERSION})"
        ))
        .hint("upgrade chatgate, or re-lock with this one")
    })?;
    let mut h = Sha256::new();
    h.update(format!("chatgate-probe-v{version}\n"));
    for s in corpus {
        for id in crate::chain::run::tokens::encode(tok, s, false)? {
            h.update(id.to_le_bytes());
        }
        h.update(u32::MAX.to_le_bytes());
    }
    Ok(hex::encode(h.finalize()))
}
