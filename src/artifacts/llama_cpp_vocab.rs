//! What llama.cpp does to a GGUF vocabulary on load, whatever the file says
//! (`llama_vocab::impl::load` in src/llama-vocab.cpp, read at ggml-org/llama.cpp master of
//! 2026-11): tokens it recognises by their text as end-of-turn, end-of-message, fill-in-the-middle
//! or end-of-generation become control tokens — so they are parsed as one special token in text
//! and stop generation — with a few family workarounds. chatgate's `llama.cpp` profile applies
//! the same rules, so it tokenizes and stops as llama.cpp does (a Qwen vocabulary's plain `</s>`
//! token, for one, becomes an end-of-generation control token).

pub const NORMAL: i64 = 1;
pub const CONTROL: i64 = 3;
pub const USER_DEFINED: i64 = 4;

/// Searched when the file names no eot id (the first match becomes eot, and control).
const EOT: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<end_of_utterance>",
];
const EOM: &[&str] = &["<|eom_id|>"];
const FIM_PRE: &[&str] = &[
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<fim_prefix>",
    "<PRE>",
    "<|code_prefix|>",
    "<|prefix|>",
];
const FIM_SUF: &[&str] = &[
    "<|fim_suffix|>",
    "<fim-suffix>",
    "<fim_suffix>",
    "<SUF>",
    "<|code_suffix|>",
    "<|suffix|>",
];
const FIM_MID: &[&str] = &[
    "<|fim_middle|>",
    "<fim-middle>",
    "<fim_middle>",
    "<MID>",
    "<|code_middle|>",
    "<|middle|>",
];
/// FIM pad/repo/sep: control, and end-of-generation too.
const FIM_PAD: &[&str] = &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"];
const FIM_REP: &[&str] = &[
    "<|fim_repo|>",
    "<|repo_name|>",
    "<fim-repo>",
    "<REPO>",
    "<reponame>",
];
const FIM_SEP: &[&str] = &["<|file_sep|>"];

/// End-of-generation by text (`special_eog_ids`).
pub const EOG: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
];

/// gpt-oss: always rendered as text.
const ALWAYS_USER_DEFINED: &[&str] = &["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"];

/// The metadata key that, when present, turns off the search of each list.
const SEARCHED: &[(&str, &[&str])] = &[
    ("tokenizer.ggml.eot_token_id", EOT),
    ("tokenizer.ggml.eom_token_id", EOM),
    ("tokenizer.ggml.fim_pre_token_id", FIM_PRE),
    ("tokenizer.ggml.fim_suf_token_id", FIM_SUF),
    ("tokenizer.ggml.fim_mid_token_id", FIM_MID),
    ("tokenizer.ggml.fim_pad_token_id", FIM_PAD),
    ("tokenizer.ggml.fim_rep_token_id", FIM_REP),
    ("tokenizer.ggml.fim_sep_token_id", FIM_SEP),
];

/// The token types llama.cpp ends up with. `has_key` says whether the file sets a metadata key.
pub fn effective_types(
    tokens: &[String],
    types: &[i64],
    has_key: &dyn Fn(&str) -> bool,
) -> Vec<i64> {
    let mut out = types.to_vec();
    let index: std::collections::HashMap<&str, usize> = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.as_str(), i))
        .collect();
    let control = |out: &mut Vec<i64>, i: usize| {
        if out[i] != CONTROL {
            out[i] = CONTROL;
        }
    };
    for (key, names) in SEARCHED {
        if has_key(key) {
            continue;
        }
        // llama.cpp walks an unordered map and takes the first match; vocabularies hold at
        // most one of each list in practice, so every match is marked.
        for n in *names {
            if let Some(&i) = index.get(n) {
                control(&mut out, i);
            }
        }
    }
    for n in EOG {
        if let Some(&i) = index.get(n) {
            control(&mut out, i);
        }
    }
    for n in ALWAYS_USER_DEFINED {
        if let Some(&i) = index.get(n) {
            out[i] = USER_DEFINED;
        }
    }
    // o200k_harmony / solar-open: `<|end|>` is not end-of-generation there.
    let has = |n: &str| index.contains_key(n);
    if (has("<|return|>") && has("<|call|>") || has("<|calls|>") && has("<|flush|>"))
        && has("<|end|>")
    {
        out[index["<|end|>"]] = USER_DEFINED;
    }
    // gemma4 / paddleocr: `</s>` is text again when `<|tool_response>` is end-of-generation.
    if has("<|tool_response>") && has("</s>") {
        out[index["</s>"]] = NORMAL;
    }
    out
}

/// The end-of-generation texts llama.cpp stops on in this vocabulary (after the workarounds).
pub fn eog_texts(has_token: &dyn Fn(&str) -> bool) -> Vec<&'static str> {
    let harmony = (has_token("<|return|>") && has_token("<|call|>"))
        || (has_token("<|calls|>") && has_token("<|flush|>"));
    let gemma4 = has_token("<|tool_response>");
    EOG.iter()
        .chain(FIM_PAD)
        .chain(FIM_REP)
        .chain(FIM_SEP)
        .copied()
        .filter(|t| has_token(t))
        .filter(|t| !(harmony && *t == "<|end|>"))
        .filter(|t| !(gemma4 && *t == "</s>"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn plain_eog_texts_become_control_and_workarounds_apply() {
        let t = toks(&["a", "</s>", "<|im_end|>", "<|fim_pad|>", "<|channel|>"]);
        let got = effective_types(&t, &[1, 1, 4, 1, 3], &|_| false);
        assert_eq!(got, vec![1, 3, 3, 3, 4]);
        let t = toks(&["</s>", "<|tool_response>"]);
        assert_eq!(effective_types(&t, &[3, 1], &|_| false), vec![1, 3]);
        let t = toks(&["<|return|>", "<|call|>", "<|end|>"]);
        assert_eq!(effective_types(&t, &[1, 1, 3], &|_| false), vec![3, 3, 4]);
        // A declared fim_pad id turns the text search off for that list (not EOG's).
        let t = toks(&["<|fim_pad|>"]);
        assert_eq!(
            effective_types(&t, &[1], &|k| k.ends_with("fim_pad_token_id")),
            vec![1]
        );
    }

    #[test]
    fn eog_texts_follow_the_vocabulary() {
        let v = ["</s>", "<|im_end|>", "<|file_sep|>"];
        let got = eog_texts(&|t| v.contains(&t));
        assert_eq!(got, vec!["<|im_end|>", "</s>", "<|file_sep|>"]);
        let v = ["</s>", "<|tool_response>"];
        assert_eq!(eog_texts(&|t| v.contains(&t)), vec!["<|tool_response>"]);
    }
}
