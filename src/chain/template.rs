//! Boundary 3, the chat template: does the serving template produce the same token ids as the
//! SFT format, for whole conversations and for the prompt the server builds before a reply?
use sha2::{Digest, Sha256};
use tokenizers::Tokenizer;

use super::diff::{diverge, first_difference, space_prefix_only, Divergence, DivergenceClass};
use super::lock::short;
use super::tokens::{leading_count, show_tokens};
use super::{
    limit_is_bad_input, Boundary::Template, Context, Conversation, Finding, Pipeline, Severity, Sft,
};
use crate::error::{Error, Result};

pub fn check(ctx: &Context) -> Result<Vec<Finding>> {
    let Some(serving) = &ctx.serving else {
        if ctx.model.tokenizer.is_none() {
            return Ok(vec![]); // already reported at the tokenizer boundary
        }
        return Ok(vec![Finding::new(Template, "template.present", Severity::Error, "the model ships no chat template (chat_template.jinja, tokenizer_config.json, GGUF metadata): servers fall back to a built-in format")
            .with("dir", ctx.model.root.display())]);
    };
    let mut out = vec![vs_lock(ctx, serving)];
    out.extend(degenerate_masks(ctx));
    out.extend(super::shapes::check(ctx, serving)?);
    let sft_tok = match &ctx.sft {
        Sft::Template(p) => &p.tokenizer,
        _ => &serving.tokenizer,
    };
    let mut renders = Vec::new();
    let mut failed_renders = Vec::new();
    for conv in &ctx.conversations {
        match render_both(ctx, serving, conv)? {
            Ok(pair) => renders.push((conv, pair)),
            Err(msg) => failed_renders.push((conv.id.clone(), msg)),
        }
    }
    if !failed_renders.is_empty() {
        let mut f = Finding::new(
            Template,
            "template.render",
            Severity::Error,
            format!(
                "the serving template fails on {} conversation(s)",
                failed_renders.len()
            ),
        );
        for (id, msg) in failed_renders.iter().take(5) {
            f = f.with("conversation", format!("{id}: {msg}"));
        }
        out.push(f);
    }
    if matches!(ctx.sft, Sft::Unknown) {
        out.push(Finding::new(Template, "template.parity", Severity::Info, "the suite names no SFT format ([sft] golden or template): template parity is not checked"));
        return Ok(out);
    }
    let compared: Vec<_> = renders
        .iter()
        .filter_map(|(c, (s, text, t))| t.as_ref().map(|t| (*c, s, text, t)))
        .collect();
    let ids_only: Vec<_> = compared.iter().map(|(c, s, _, t)| (*c, *s, *t)).collect();
    out.push(bos_count(serving, &ids_only));
    let mut diverged = Vec::new();
    let mut prefix_only = Vec::new();
    for (conv, s, text, t) in &compared {
        if let Some(d) = diverge(
            &serving.tokenizer,
            s,
            sft_tok,
            t,
            serving.bos_id(),
            &conv.messages,
        ) {
            if serving.start_only_ids(text)?.as_ref() == Some(*t) {
                prefix_only.push((conv.id.clone(), d));
            } else {
                diverged.push((conv.id.clone(), d));
            }
        }
    }
    out.push(parity(&diverged, &prefix_only, compared.len(), serving));
    let clean: Vec<_> = compared
        .iter()
        .filter(|(c, _, _, _)| !diverged.iter().any(|(id, _)| id == &c.id))
        .map(|(c, _, _, t)| (*c, *t))
        .collect();
    out.push(generation_prompt(ctx, serving, &clean)?);
    out.extend(suffix_vs_sft(ctx, serving));
    Ok(out)
}

/// Golden masks that mark nothing (or everything) say nothing about the assistant turns: a
/// template without `{% generation %}` makes transformers return all zeros.
fn degenerate_masks(ctx: &Context) -> Option<Finding> {
    let rows = &ctx.degenerate_masks;
    let first = rows.first()?;
    Some(
        Finding::new(
            Template,
            "template.assistant-mask",
            Severity::Warning,
            format!(
                "{} golden row(s) carry an all-zero or all-one assistant_mask, treated as absent: the template that produced them has no {{% generation %}} block, so return_assistant_tokens_mask marked nothing",
                rows.len()
            ),
        )
        .with("first row", first)
        .with("effect", "the turn terminator and the generation prompt are checked from the ids and the template instead of the mask")
        .with("fix", "capture masks with a template that has {% generation %} blocks, or leave assistant_mask out"),
    )
}

/// The text each template appends for add_generation_prompt, compared directly when the SFT
/// side is a template (with golden ids the token-level check above covers it).
fn suffix_vs_sft(ctx: &Context, serving: &Pipeline) -> Option<Finding> {
    const ID: &str = "template.generation-prompt-suffix";
    let Sft::Template(sft) = &ctx.sft else {
        return None;
    };
    let (s, t) = (generation_suffix(serving), generation_suffix(sft));
    Some(if s == t {
        Finding::pass(
            Template,
            ID,
            format!(
                "both templates append {:?} for a reply",
                s.unwrap_or_default()
            ),
        )
    } else {
        let show = |x: &Option<String>| {
            x.as_ref()
                .map(|x| format!("{x:?}"))
                .unwrap_or_else(|| "(not an extension of the prompt)".into())
        };
        Finding::new(Template, ID, Severity::Error, "generation-prompt: the serving template starts a reply differently from the SFT template")
            .with("class", DivergenceClass::GenerationPrompt.name())
            .with("serving appends", show(&s))
            .with("sft appends", show(&t))
    })
}

type Ids = Vec<u32>;
/// A conversation's serving ids and rendered text, and its SFT ids when the SFT side has them.
type Both = (Ids, String, Option<Ids>);

/// Serving ids and text, and SFT ids (when the SFT side can produce them), of a whole
/// conversation.
/// The outer Result is bad input (a template that exhausts its limits); the inner one is a
/// template that raises on this conversation.
fn render_both(
    ctx: &Context,
    serving: &Pipeline,
    conv: &Conversation,
) -> Result<Result<Both, String>> {
    let (s, text) = match serving.render(&conv.messages, conv.tools.as_deref(), false) {
        Ok(r) => (serving.ids(&r.text)?, r.text),
        Err(e) => {
            if let Some(bad) = limit_is_bad_input(&serving.origin, &e) {
                return Err(bad);
            }
            return Ok(Err(e.to_string()));
        }
    };
    let t = match (&ctx.sft, &conv.golden) {
        (_, Some((ids, _))) => Some(ids.clone()),
        (Sft::Template(sft), None) => {
            match sft.render(&conv.messages, conv.tools.as_deref(), false) {
                Ok(r) => Some(sft.ids(&r.text)?),
                Err(e) => {
                    return Err(Error::input(format!(
                        "the SFT template {} fails on conversation {}: {e}",
                        sft.origin, conv.id
                    )))
                }
            }
        }
        _ => None,
    };
    Ok(Ok((s, text, t)))
}

fn vs_lock(ctx: &Context, serving: &Pipeline) -> Finding {
    let sha = template_sha256(serving.template.source());
    match ctx.lock.as_ref().and_then(|l| l.template.as_ref()) {
        None => Finding::new(
            Template,
            "template.lock",
            Severity::Info,
            "no template identity in the lock",
        )
        .with("serving template", &serving.origin),
        Some(t) if t.sha256 == sha => Finding::pass(
            Template,
            "template.lock",
            format!("the serving template matches the lock ({})", short(&sha)),
        ),
        Some(t) => Finding::new(
            Template,
            "template.lock",
            Severity::Warning,
            "the serving template is not the locked one (parity below says whether it matters)",
        )
        .with("locked", format!("{} {}", t.origin, short(&t.sha256)))
        .with("found", format!("{} {}", serving.origin, short(&sha))),
    }
}

pub fn template_sha256(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

fn bos_count(serving: &Pipeline, compared: &[(&Conversation, &Ids, &Ids)]) -> Finding {
    const ID: &str = "template.bos-count";
    let bos = serving.bos_id();
    let Some((conv, s, t)) = compared.first() else {
        return Finding::new(Template, ID, Severity::Info, "no conversation to compare");
    };
    let (ns, nt) = (leading_count(s, bos), leading_count(t, bos));
    let bos_text = match (&serving.special.bos_token, bos) {
        (Some(t), _) => t.clone(),
        (None, Some(id)) => format!(
            "{:?} (id {id}, config.json's bos_token_id)",
            serving.tokenizer.id_to_token(id).unwrap_or_default()
        ),
        (None, None) => "(none)".into(),
    };
    if ns == nt {
        return Finding::pass(Template, ID, format!("{ns} leading BOS on both sides"))
            .with("bos", bos_text);
    }
    // Counts that differ as part of another chat format (llama-2's `<s>[INST]` served for
    // ChatML) are that format's fault, which template.parity names.
    if let Some(d) = diverge(
        &serving.tokenizer,
        s,
        &serving.tokenizer,
        t,
        bos,
        &conv.messages,
    ) {
        if !matches!(
            d.class,
            DivergenceClass::DoubleBos | DivergenceClass::MissingBos
        ) {
            return Finding::new(
                Template,
                ID,
                Severity::Info,
                format!(
                    "{ns} leading BOS served, {nt} in the SFT data, as part of another chat format ({}): see template.parity",
                    d.class.name()
                ),
            )
            .with("bos", bos_text)
            .with("conversation", &conv.id);
        }
    }
    let class = if ns > nt {
        DivergenceClass::DoubleBos
    } else {
        DivergenceClass::MissingBos
    };
    Finding::new(
        Template,
        ID,
        Severity::Error,
        format!(
            "{}: the serving prompt starts with {ns} BOS, the SFT data with {nt}",
            class.name()
        ),
    )
    .with("class", class.name())
    .with("bos", bos_text)
    .with("conversation", &conv.id)
    .with(
        "serving starts",
        show_tokens(&serving.tokenizer, &s[..s.len().min(4)]),
    )
    .with(
        "sft starts",
        show_tokens(&serving.tokenizer, &t[..t.len().min(4)]),
    )
    .with("add_special_tokens (serving)", serving.add_special_tokens)
}

fn parity(
    diverged: &[(String, Divergence)],
    prefix_only: &[(String, Divergence)],
    total: usize,
    serving: &Pipeline,
) -> Finding {
    const ID: &str = "template.parity";
    let with_prefix_count = |f: Finding| match prefix_only.len() {
        0 => f,
        n => f.with(
            "differing only by a space prefix (warning class space-prefix)",
            n,
        ),
    };
    if total == 0 {
        return Finding::new(
            Template,
            ID,
            Severity::Info,
            "no conversation rendered on both sides: nothing to compare",
        );
    }
    let Some((id, d)) = diverged.first() else {
        if let Some((id, d)) = prefix_only.first() {
            return space_prefix_only(Template, ID, prefix_only.len(), total, "conversations")
                .with("first conversation", id)
                .with("first difference at token", d.position)
                .with("serving", &d.serving_context)
                .with("sft", &d.sft_context)
                .with("serving template", &serving.origin);
        }
        return Finding::pass(
            Template,
            ID,
            format!(
                "the serving template reproduces the SFT token ids for all {total} conversations"
            ),
        )
        .with("serving template", &serving.origin);
    };
    let mut classes: Vec<&str> = diverged.iter().map(|(_, d)| d.class.name()).collect();
    classes.sort();
    classes.dedup();
    with_prefix_count(
        Finding::new(
            Template,
            ID,
            Severity::Error,
            format!(
                "{}: the serving render differs from the SFT ids in {} of {total} conversations",
                d.class.name(),
                diverged.len()
            ),
        )
        .with("class", d.class.name())
        .with("first conversation", id)
        .with("first difference at token", d.position)
        .with("serving", &d.serving_context)
        .with("sft", &d.sft_context)
        .with(
            "lengths (serving/sft)",
            format!("{}/{}", d.serving_len, d.sft_len),
        )
        .with("classes seen", classes.join(", "))
        .with("serving template", &serving.origin),
    )
}

/// For every assistant turn: the prompt the server builds (messages before it, with the
/// generation prompt) must be exactly the training context that preceded the assistant's
/// tokens. Otherwise the reply starts from a context the model never saw (vllm#13125).
fn generation_prompt(
    ctx: &Context,
    serving: &Pipeline,
    clean: &[(&Conversation, &Ids)],
) -> Result<Finding> {
    const ID: &str = "template.generation-prompt";
    let suffix = generation_suffix(serving);
    let mut checked = 0;
    for (conv, sft_ids) in clean {
        let spans = conv
            .golden
            .as_ref()
            .and_then(|g| g.1.as_ref())
            .map(|m| mask_spans(m));
        let turns = assistant_turns(&conv.messages);
        for (j, &k) in turns.iter().enumerate() {
            if k == 0 {
                continue; // an opening assistant message has no prompt before it
            }
            let prompt = match serving.render(&conv.messages[..k], conv.tools.as_deref(), true) {
                Ok(r) => {
                    let ids = serving.ids(&r.text)?;
                    // llama.cpp's space prefix alone is template.parity's warning, not a
                    // generation-prompt fault: compare what remains once it is undone.
                    match serving.start_only_ids(&r.text)? {
                        Some(alt) if alt != ids => (ids, Some(alt)),
                        _ => (ids, None),
                    }
                }
                Err(e) => match limit_is_bad_input(&serving.origin, &e) {
                    Some(bad) => return Err(bad),
                    None => continue, // a template may refuse a prefix (e.g. "must end with user"); reported by template.render if it matters
                },
            };
            let expected: Option<&[u32]> = match (&ctx.sft, &spans) {
                (_, Some(spans)) => spans.get(j).map(|&(start, _)| &sft_ids[..start]),
                (Sft::Template(_), None) => None,
                _ => None,
            };
            let sft_prompt;
            let expected = match expected {
                Some(e) => e,
                None => match &ctx.sft {
                    Sft::Template(sft) => {
                        sft_prompt =
                            match sft.render(&conv.messages[..k], conv.tools.as_deref(), true) {
                                Ok(r) => sft.ids(&r.text)?,
                                Err(_) => continue,
                            };
                        &sft_prompt[..]
                    }
                    // Golden ids without a mask: the serving prompt must at least be a prefix (TRL's check).
                    _ => {
                        checked += 1;
                        let prompt = match prompt {
                            (ids, Some(alt))
                                if !sft_ids.starts_with(&ids) && sft_ids.starts_with(&alt) =>
                            {
                                alt
                            }
                            (ids, _) => ids,
                        };
                        if !sft_ids.starts_with(&prompt) {
                            return Ok(prompt_finding(
                                serving,
                                conv,
                                k,
                                &prompt,
                                sft_ids,
                                first_difference(&prompt, sft_ids).unwrap_or(0),
                                &suffix,
                            ));
                        }
                        // A template that appends nothing for add_generation_prompt passes the
                        // prefix test trivially: then the training context must continue with
                        // the reply itself, not with markup the model would have to generate.
                        if suffix.as_deref() == Some("") {
                            if let Some(end) = markup_before_reply(
                                serving,
                                &conv.messages[k],
                                &sft_ids[prompt.len()..],
                            ) {
                                return Ok(prompt_finding(
                                    serving,
                                    conv,
                                    k,
                                    &prompt,
                                    &sft_ids[..prompt.len() + end],
                                    prompt.len(),
                                    &suffix,
                                ));
                            }
                        }
                        continue;
                    }
                },
            };
            checked += 1;
            let prompt = match prompt {
                (_, Some(alt)) if alt == expected => alt,
                (ids, _) => ids,
            };
            if prompt != expected {
                let at = first_difference(&prompt, expected).unwrap_or(0);
                return Ok(prompt_finding(
                    serving, conv, k, &prompt, expected, at, &suffix,
                ));
            }
        }
    }
    if checked == 0 {
        return Ok(Finding::new(
            Template,
            ID,
            Severity::Info,
            "no assistant turn to check the generation prompt against",
        ));
    }
    let mut f = Finding::pass(Template, ID, format!("the serving prompt equals the training context before each of {checked} assistant turns"));
    if let Some(s) = suffix {
        f = f.with("generation prompt", format!("{s:?}"));
    }
    Ok(f)
}

fn prompt_finding(
    serving: &Pipeline,
    conv: &Conversation,
    k: usize,
    prompt: &[u32],
    expected: &[u32],
    at: usize,
    suffix: &Option<String>,
) -> Finding {
    let tok: &Tokenizer = &serving.tokenizer;
    let lo = at.saturating_sub(3);
    let view = |ids: &[u32]| {
        if lo < ids.len() {
            show_tokens(tok, &ids[lo..(at + 4).min(ids.len())])
        } else {
            "(end)".into()
        }
    };
    let what = if prompt.len() < expected.len() && expected.starts_with(prompt) {
        "the server's prompt stops short of the training context: the model must generate tokens it was never trained to produce"
    } else if prompt.len() > expected.len() && prompt.starts_with(expected) {
        "the server's prompt runs past the training context into tokens the model was trained to generate"
    } else {
        "the server's prompt differs from the training context before the reply"
    };
    let mut f = Finding::new(
        Template,
        "template.generation-prompt",
        Severity::Error,
        format!("generation-prompt: {what}"),
    )
    .with("class", DivergenceClass::GenerationPrompt.name())
    .with("conversation", &conv.id)
    .with("before message", k)
    .with("first difference at token", at)
    .with("serving prompt", view(prompt))
    .with("training context", view(expected))
    .with(
        "lengths (serving/sft)",
        format!("{}/{}", prompt.len(), expected.len()),
    );
    if let Some(s) = suffix {
        f = f.with("serving generation prompt", format!("{s:?}"));
    }
    f
}

/// render(add_generation_prompt=true) minus render(false) on one user message.
/// When the SFT ids after the serving prompt do not start with the assistant reply's text
/// (leading whitespace aside), the number of tokens before the reply: markup the SFT data had
/// in the context and the server leaves for the model to generate. None when the reply follows
/// directly, or cannot be located.
fn markup_before_reply(p: &Pipeline, message: &serde_json::Value, rest: &[u32]) -> Option<usize> {
    let content = message.get("content")?.as_str()?.trim();
    let head: String = content.chars().take(12).collect();
    if head.is_empty() {
        return None;
    }
    let text = super::tokens::decode(&p.tokenizer, rest);
    if text.trim_start().starts_with(&head) {
        return None;
    }
    // How many tokens precede the reply's first characters.
    (1..=rest.len().min(64)).find(|&n| {
        super::tokens::decode(&p.tokenizer, &rest[n..])
            .trim_start()
            .starts_with(&head)
    })
}

pub fn generation_suffix(p: &Pipeline) -> Option<String> {
    let msgs = vec![serde_json::json!({"role": "user", "content": "Hello"})];
    let with = p.render(&msgs, None, true).ok()?.text;
    let without = p.render(&msgs, None, false).ok()?.text;
    with.strip_prefix(&without).map(str::to_string)
}

fn assistant_turns(messages: &[serde_json::Value]) -> Vec<usize> {
    messages
        .iter()
        .enumerate()
        .filter(|(_, m)| m.get("role").and_then(|r| r.as_str()) == Some("assistant"))
        .map(|(i, _)| i)
        .collect()
}

/// Runs of 1 in an assistant mask, as (start, end) token ranges.
pub fn mask_spans(mask: &[u8]) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut start = None;
    for (i, &m) in mask.iter().chain(std::iter::once(&0)).enumerate() {
        match (m != 0, start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                spans.push((s, i));
                start = None;
            }
            _ => {}
        }
    }
    spans
}
