//! Where two token sequences first differ, and what kind of difference it is. The class names
//! the usual cause so a reader knows where to look (docs/design/BUG-ZOO.md).
use serde::Serialize;
use serde_json::Value;
use tokenizers::Tokenizer;

use crate::chain::run::tokens::{decode, leading_count, show_tokens};
use crate::verdict::{Finding, Severity};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DivergenceClass {
    /// The serving ids start with more BOS tokens than the SFT ids.
    DoubleBos,
    /// The serving ids start with fewer BOS tokens than the SFT ids.
    MissingBos,
    /// The prompt the server builds for a reply differs from the training context before the
    /// assistant's tokens (missing, extra or different generation prompt).
    GenerationPrompt,
    /// The texts differ only in whitespace.
    Whitespace,
    /// A system prompt is handled differently (dropped, injected by default, moved).
    SystemPrompt,
    /// Role headers or turn markup differ (another chat format).
    RoleFormat,
    /// Same text, but a special token is one id on one side and several on the other.
    SpecialTokenSplit,
    /// llama.cpp's SentencePiece space prefix: a `▁` before the text after every special
    /// token, where transformers puts one at the start of the text only. Found by
    /// re-tokenizing with transformers' rule ([`crate::chain::run::context::Pipeline::differs_by_space_prefix_only`]).
    SpacePrefix,
    Other,
}

impl DivergenceClass {
    pub fn name(self) -> &'static str {
        match self {
            DivergenceClass::DoubleBos => "double-bos",
            DivergenceClass::MissingBos => "missing-bos",
            DivergenceClass::GenerationPrompt => "generation-prompt",
            DivergenceClass::Whitespace => "whitespace",
            DivergenceClass::SystemPrompt => "system-prompt",
            DivergenceClass::RoleFormat => "role-format",
            DivergenceClass::SpecialTokenSplit => "special-token-split",
            DivergenceClass::SpacePrefix => "space-prefix",
            DivergenceClass::Other => "other",
        }
    }
}

/// The first difference between the serving ids and the SFT ids.
#[derive(Debug, Clone)]
pub struct Divergence {
    pub position: usize,
    pub class: DivergenceClass,
    /// A few decoded tokens around the position, on each side.
    pub serving_context: String,
    pub sft_context: String,
    pub serving_len: usize,
    pub sft_len: usize,
}

pub fn first_difference(a: &[u32], b: &[u32]) -> Option<usize> {
    if a == b {
        return None;
    }
    Some(
        a.iter()
            .zip(b)
            .position(|(x, y)| x != y)
            .unwrap_or(a.len().min(b.len())),
    )
}

/// Compare serving ids with SFT ids; None when equal.
pub fn diverge(
    tok_serving: &Tokenizer,
    serving: &[u32],
    tok_sft: &Tokenizer,
    sft: &[u32],
    bos: Option<u32>,
    messages: &[Value],
) -> Option<Divergence> {
    let position = first_difference(serving, sft)?;
    let window = |ids: &[u32], tok: &Tokenizer| {
        let lo = position.saturating_sub(3);
        let hi = (position + 4).min(ids.len());
        if lo >= hi {
            return "(end of sequence)".to_string();
        }
        let mut s = show_tokens(tok, &ids[lo..hi]);
        if hi < ids.len() {
            s.push_str(" …");
        }
        s
    };
    Some(Divergence {
        position,
        class: classify(tok_serving, serving, tok_sft, sft, bos, messages, position),
        serving_context: window(serving, tok_serving),
        sft_context: window(sft, tok_sft),
        serving_len: serving.len(),
        sft_len: sft.len(),
    })
}

fn classify(
    tok_s: &Tokenizer,
    s: &[u32],
    tok_t: &Tokenizer,
    t: &[u32],
    bos: Option<u32>,
    messages: &[Value],
    pos: usize,
) -> DivergenceClass {
    let (bs, bt) = (leading_count(s, bos), leading_count(t, bos));
    if bs != bt {
        // A BOS count that differs is the fault only when the rest agrees; another chat
        // format that also writes a BOS (llama-2's `<s>[INST]` served for ChatML) is a
        // role-format fault, classed by what follows.
        let (rs, rt) = (&s[bs..], &t[bt..]);
        if rs == rt {
            return if bs > bt {
                DivergenceClass::DoubleBos
            } else {
                DivergenceClass::MissingBos
            };
        }
        let at = rs.iter().zip(rt).take_while(|(a, b)| a == b).count();
        return match classify(tok_s, rs, tok_t, rt, None, messages, at) {
            DivergenceClass::Other | DivergenceClass::Whitespace => {
                if bs > bt {
                    DivergenceClass::DoubleBos
                } else {
                    DivergenceClass::MissingBos
                }
            }
            other => other,
        };
    }
    // The SFT data used an id the serving tokenizer does not have, where the serving side spells
    // out markup: a special token lost from the serving vocabulary.
    if let Some(&sft_id) = t.get(pos) {
        let serving_piece = s.get(pos).map(|&i| {
            decode(tok_s, &s[pos..(pos + 3).min(s.len())]).starts_with(['<', '['])
                && tok_s.id_to_token(i).is_some()
        });
        if tok_s.id_to_token(sft_id).is_none() && serving_piece == Some(true) {
            return DivergenceClass::SpecialTokenSplit;
        }
    }
    let (text_s, text_t) = (decode(tok_s, s), decode(tok_t, t));
    if text_s == text_t {
        // Same characters, other ids: a special token matched on one side only.
        let special = |tok: &Tokenizer, id: Option<&u32>| {
            id.and_then(|&i| tok.id_to_token(i))
                .is_some_and(|t| is_markup(&t))
        };
        if special(tok_s, s.get(pos)) || special(tok_t, t.get(pos)) {
            return DivergenceClass::SpecialTokenSplit;
        }
        return DivergenceClass::Other;
    }
    if strip_ws(&text_s) == strip_ws(&text_t) {
        return DivergenceClass::Whitespace;
    }
    let p = text_s
        .chars()
        .zip(text_t.chars())
        .take_while(|(a, b)| a == b)
        .count();
    let system = first_content(messages, "system");
    if system.is_some_and(|c| !c.is_empty() && text_s.contains(c) != text_t.contains(c)) {
        return DivergenceClass::SystemPrompt; // one side dropped (or moved away) the system message
    }
    // Before the first user message, prose on one side only is a default system prompt; a
    // difference made of markup alone is another chat format.
    let user = first_content(messages, "user");
    let region = |text: &str| -> Option<String> {
        let end = text.find(user?)?;
        let end = text[..end].chars().count();
        (p <= end).then(|| text.chars().skip(p).take(end - p).collect())
    };
    if let (Some(rs), Some(rt)) = (region(&text_s), region(&text_t)) {
        if has_prose(&rs) != has_prose(&rt) {
            return DivergenceClass::SystemPrompt;
        }
    }
    let seg = |text: &str| text.chars().skip(p).take(16).collect::<String>();
    if looks_like_markup(&seg(&text_s), &seg(&text_t)) {
        return DivergenceClass::RoleFormat;
    }
    DivergenceClass::Other
}

fn first_content<'a>(messages: &'a [Value], role: &str) -> Option<&'a str> {
    messages
        .iter()
        .find(|m| m.get("role").and_then(Value::as_str) == Some(role))
        .and_then(|m| m.get("content"))
        .and_then(Value::as_str)
}

fn strip_ws(s: &str) -> String {
    s.chars().filter(|c| !c.is_whitespace()).collect()
}

/// Token text that is chat markup rather than prose: `<|im_start|>`, `<s>`, `[INST]`, `<start_of_turn>`.
fn is_markup(t: &str) -> bool {
    (t.starts_with('<') && t.ends_with('>')) || (t.starts_with('[') && t.ends_with(']'))
}

fn looks_like_markup(a: &str, b: &str) -> bool {
    const MARKUP: [&str; 7] = ["user", "assistant", "system", "<", "[", "### ", ":"];
    MARKUP.iter().any(|r| a.contains(r) || b.contains(r))
}

/// Three or more words of natural language (markup removed): a system prompt, not a header.
fn has_prose(s: &str) -> bool {
    let mut text = String::new();
    let mut depth = 0;
    for c in s.chars() {
        match c {
            '<' | '[' => depth += 1,
            '>' | ']' => depth = (depth - 1).max(0),
            _ if depth == 0 => text.push(c),
            _ => {}
        }
    }
    const ROLES: [&str; 3] = ["system", "user", "assistant"];
    text.split_whitespace()
        .filter(|w| {
            w.len() > 1
                && w.chars().all(|c| c.is_alphabetic() || c == ',' || c == '.')
                && !ROLES.contains(&w.to_lowercase().trim_end_matches(':'))
        })
        .count()
        >= 3
}

/// A warning, not an error, for ids that differ only by a space prefix after special tokens:
/// llama.cpp's SentencePiece `add_space_prefix` (`llama-vocab.cpp`: "prefix with space if
/// previous is special"), or a legacy Llama tokenizer.json loaded as is (TGI). Every such
/// deploy of a Llama-2-style vocabulary has it, and the text the model reads is the same:
/// failing the gate on it would fail them all, so it is reported and left to the user to weigh.
pub fn space_prefix_only(
    check: &'static crate::verdict::checks::Check,
    n: usize,
    total: usize,
    what: &str,
) -> Finding {
    Finding::new(
        check,
        Severity::Warning,
        format!(
            "{}: the stack's ids differ from the SFT ids in {n} of {total} {what}, only by a space prefix after special tokens (llama.cpp's, or a legacy tokenizer.json's)",
            DivergenceClass::SpacePrefix.name()
        ),
    )
    .with("class", DivergenceClass::SpacePrefix.name())
    .with("why", "this stack puts a ▁ (space) before the text that follows every special token of a SentencePiece vocabulary (llama.cpp's add_space_prefix; a legacy tokenizer.json's Prepend normalizer); transformers puts one at the start of the text only. Re-tokenized with transformers' rule, the ids are identical")
    .with("effect", "after each special token the model reads a ▁ token (or a word split differently) that it was not trained on; the text is the same, so replies usually hold, but check this server's snapshots and quality before relying on it")
    .with("fix", "serve with a stack that tokenizes as transformers does (vLLM, SGLang, TGI, transformers serve), or fine-tune on ids tokenized the way llama.cpp does")
}
