//! Boundary 3, the chat template: does the serving template produce the same token ids as the
//! SFT format, for whole conversations and for the prompt the server builds before a reply?
pub mod framing;
pub mod history;
pub mod online;
pub mod shapes;
use crate::verdict::checks;
use std::collections::BTreeSet;

use chrono::NaiveDateTime;
use tokenizers::Tokenizer;

use crate::chain::run::context::{limit_is_bad_input, Context, Conversation, Pipeline, Sft};
use crate::chain::run::diff::{
    diverge, first_difference, space_prefix_only, Divergence, DivergenceClass,
};
use crate::chain::run::rows::Examples;
use crate::chain::run::tokens::short;
use crate::chain::run::tokens::{leading_count, show_tokens};
use crate::error::{Error, Result};
use crate::verdict::{Finding, Severity};

pub fn check(
    ctx: &Context,
    t: &TemplateTally,
    degenerate: &Examples<String>,
    shapes_used: &BTreeSet<&'static str>,
) -> Result<Vec<Finding>> {
    let Some(serving) = &ctx.serving else {
        if ctx.model.tokenizer.is_none() {
            return Ok(vec![]); // already reported at the tokenizer boundary
        }
        return Ok(vec![Finding::new(checks::TEMPLATE_PRESENT, Severity::Error, "the model ships no chat template (chat_template.jinja, tokenizer_config.json, GGUF metadata): servers fall back to a built-in format")
            .with("dir", ctx.model.root.display())]);
    };
    let mut out = vec![vs_lock(ctx, serving)];
    out.extend(degenerate_masks(degenerate));
    out.extend(crate::chain::template::shapes::check(
        ctx,
        serving,
        shapes_used,
    )?);
    out.extend(crate::chain::template::framing::findings(
        serving,
        tools_probed(ctx),
    ));
    out.extend(history::prefix_stability(serving));
    if !t.render_failed.is_empty() {
        let mut f = Finding::new(
            checks::TEMPLATE_RENDER,
            Severity::Error,
            format!(
                "the serving template fails on {} conversation(s)",
                t.render_failed.count
            ),
        );
        for (id, msg) in &t.render_failed.kept {
            f = f.with("conversation", format!("{id}: {msg}"));
        }
        out.push(f);
    }
    if matches!(ctx.sft, Sft::Unknown) {
        out.push(Finding::new(checks::TEMPLATE_PARITY, Severity::Info, "the suite names no SFT format ([sft] golden or template): template parity is not checked"));
        return Ok(out);
    }
    out.push(bos_count(serving, t.first_compared.as_ref()));
    out.extend(dates(ctx, t));
    out.push(parity(t, serving));
    out.push(match &t.prompt_failure {
        Some(f) => f.clone(),
        None => prompt_pass(t.prompt_checked, &generation_suffix(serving)),
    });
    out.extend(suffix_vs_sft(ctx, serving));
    Ok(out)
}

/// Whether a replay prompt offers tools; None when the suite replays no prompts (`check`
/// without a prompt file judges no server).
fn tools_probed(ctx: &Context) -> Option<bool> {
    let (path, section) = (
        ctx.suite.replay_prompts.as_ref()?,
        ctx.suite.file.replay.as_ref()?,
    );
    let prompts = crate::replay::prompts::load(path, section).ok()?;
    Some(
        prompts
            .iter()
            .any(|p| p.tools.as_ref().is_some_and(|t| !t.is_empty())),
    )
}

/// What the template prints as a date, the day the suite pins, and the golden rows made on
/// another day (compared at their own day, so a day passing is never a regression).
fn dates(ctx: &Context, t: &TemplateTally) -> Option<Finding> {
    let d = &ctx.dates;
    if !d.prints_date() {
        return None;
    }
    let pinned = ctx.serving.as_ref().and_then(|p| p.now);
    let mut f = match (pinned, d.varies) {
        (Some(at), _) => Finding::new(
            checks::TEMPLATE_DATE,
            Severity::Info,
            format!(
                "the template prints a date ({}): offline it is rendered at the suite's day, {}",
                d.describe(),
                crate::clock::show_pin(&at)
            ),
        ),
        (None, true) => Finding::new(
            checks::TEMPLATE_DATE,
            Severity::Warning,
            format!(
                "the template prints today's date ({}) and the suite pins no day: what is accepted today differs tomorrow",
                d.describe()
            ),
        )
        .with(
            "hint",
            format!(
                "add `template_date = \"{}\"` to [model] (the day the golden rows and snapshots were made; chatgate init writes it)",
                crate::clock::now().format("%Y-%m-%d")
            ),
        ),
        (None, false) => Finding::new(
            checks::TEMPLATE_DATE,
            Severity::Info,
            format!(
                "the template prints `date_string` when a server passes one (llama-server passes today's): {}",
                d.date_string_value
                    .as_deref()
                    .map(|v| format!("without one it prints {v:?}"))
                    .unwrap_or_else(|| "it prints no default".into())
            ),
        ),
    };
    if let Some((id, at)) = t.dated.first() {
        f = f
            .with(
                "rows made on another day",
                format!(
                    "{} of {} golden rows, compared at their own day (the date span set aside)",
                    t.dated.count, t.compared
                ),
            )
            .with(
                "first",
                format!("{id}: {}", crate::chain::run::dates::show_day(d, at)),
            );
    }
    if let Some(v) = &d.date_string_value {
        f = f.with("date_string sent to servers that take it", v);
    }
    Some(f)
}

/// The first conversation rendered on both sides: its id, messages, serving and SFT ids.
pub type Compared = (String, Vec<serde_json::Value>, Ids, Ids);

/// What the template's per-row checks saw over all rows.
#[derive(Default)]
pub struct TemplateTally {
    /// Conversations the serving template raises on: (id, what it said).
    pub render_failed: Examples<(String, String)>,
    /// Conversations rendered on both sides.
    pub compared: usize,
    pub first_compared: Option<Compared>,
    /// Conversations whose serving ids differ from the SFT ids, and their classes.
    pub diverged: Examples<(String, Divergence)>,
    pub classes: BTreeSet<&'static str>,
    /// Conversations that differ only by llama.cpp's space prefix after special tokens.
    pub prefix_only: Examples<(String, Divergence)>,
    /// Golden rows rendered on another day than the suite's (a template that prints the
    /// date), compared at their own day: (id, the day).
    pub dated: Examples<(String, NaiveDateTime)>,
    /// Assistant turns whose serving prompt was compared with the training context, and the
    /// first that differed.
    pub prompt_checked: usize,
    pub prompt_failure: Option<Finding>,
}

impl TemplateTally {
    pub fn merge(&mut self, later: TemplateTally) {
        self.render_failed.merge(later.render_failed);
        self.compared += later.compared;
        if self.first_compared.is_none() {
            self.first_compared = later.first_compared;
        }
        self.diverged.merge(later.diverged);
        self.classes.extend(later.classes);
        self.prefix_only.merge(later.prefix_only);
        self.dated.merge(later.dated);
        self.prompt_checked += later.prompt_checked;
        if self.prompt_failure.is_none() {
            self.prompt_failure = later.prompt_failure;
        }
    }
}

/// One conversation through the template's checks: does it render, do its serving ids equal
/// the SFT ids, and does the server's prompt before each assistant turn equal the training
/// context?
pub fn row(
    ctx: &Context,
    conv: &Conversation,
    suffix: &Option<String>,
    served: &crate::chain::run::context::Served,
) -> Result<TemplateTally> {
    let mut t = TemplateTally::default();
    let (Some(serving), Some(served)) = (&ctx.serving, served) else {
        return Ok(t);
    };
    let (s, text, dated) = match served {
        Ok(all) => all,
        Err(msg) => {
            t.render_failed.push((conv.id.clone(), msg.clone()));
            return Ok(t);
        }
    };
    let Some(sft_ids) = sft_ids(ctx, conv)? else {
        return Ok(t);
    };
    t.compared = 1;
    if let Some(at) = dated {
        t.dated.push((conv.id.clone(), *at));
    }
    let sft_tok = match &ctx.sft {
        Sft::Template(p) => &p.tokenizer,
        _ => &serving.tokenizer,
    };
    let diverged = match diverge(
        &serving.tokenizer,
        s,
        sft_tok,
        &sft_ids,
        serving.bos_id(),
        &conv.messages,
    ) {
        Some(d) if serving.start_only_ids(text)?.as_ref() == Some(&sft_ids) => {
            t.prefix_only.push((conv.id.clone(), d));
            false
        }
        Some(d) => {
            t.classes.insert(d.class.name());
            t.diverged.push((conv.id.clone(), d));
            true
        }
        None => false,
    };
    // A conversation whose render differs says nothing more about its prompts.
    if !diverged {
        let now = dated.or(serving.now);
        let (checked, failure) = generation_prompt(ctx, serving, conv, &sft_ids, suffix, now)?;
        t.prompt_checked = checked;
        t.prompt_failure = failure;
    }
    t.first_compared = Some((conv.id.clone(), conv.messages.clone(), s.clone(), sft_ids));
    Ok(t)
}

/// Golden masks that mark nothing (or everything) say nothing about the assistant turns: a
/// template without `{% generation %}` makes transformers return all zeros.
fn degenerate_masks(rows: &Examples<String>) -> Option<Finding> {
    let first = rows.first()?;
    Some(
        Finding::new(
            checks::TEMPLATE_ASSISTANT_MASK,
            Severity::Warning,
            format!(
                "{} golden row(s) carry an all-zero or all-one assistant_mask, treated as absent: the template that produced them has no {{% generation %}} block, so return_assistant_tokens_mask marked nothing",
                rows.count
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
    let Sft::Template(sft) = &ctx.sft else {
        return None;
    };
    let (s, t) = (generation_suffix(serving), generation_suffix(sft));
    Some(if s == t {
        Finding::pass(
            checks::TEMPLATE_GENERATION_PROMPT_SUFFIX,
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
        Finding::new(checks::TEMPLATE_GENERATION_PROMPT_SUFFIX, Severity::Error, "generation-prompt: the serving template starts a reply differently from the SFT template")
            .with("class", DivergenceClass::GenerationPrompt.name())
            .with("serving appends", show(&s))
            .with("sft appends", show(&t))
    })
}

type Ids = Vec<u32>;

/// The SFT ids of a conversation: its golden ids, else the SFT template's render.
fn sft_ids(ctx: &Context, conv: &Conversation) -> Result<Option<Ids>> {
    Ok(match (&ctx.sft, &conv.golden) {
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
    })
}

fn vs_lock(ctx: &Context, serving: &Pipeline) -> Finding {
    let sha = crate::chain::run::lock::template_sha256(serving.template.source());
    match ctx.lock.as_ref().and_then(|l| l.template.as_ref()) {
        None => Finding::new(
            checks::TEMPLATE_LOCK,
            Severity::Info,
            "no template identity in the lock",
        )
        .with("serving template", &serving.origin),
        Some(t) if t.sha256 == sha => Finding::pass(
            checks::TEMPLATE_LOCK,
            format!("the serving template matches the lock ({})", short(&sha)),
        ),
        Some(t) => Finding::new(
            checks::TEMPLATE_LOCK,
            Severity::Warning,
            "the serving template is not the locked one (parity below says whether it matters)",
        )
        .with("locked", format!("{} {}", t.origin, short(&t.sha256)))
        .with("found", format!("{} {}", serving.origin, short(&sha))),
    }
}

fn bos_count(serving: &Pipeline, first: Option<&Compared>) -> Finding {
    let bos = serving.bos_id();
    let Some((conv_id, messages, s, t)) = first else {
        return Finding::new(
            checks::TEMPLATE_BOS_COUNT,
            Severity::Info,
            "no conversation to compare",
        );
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
        return Finding::pass(
            checks::TEMPLATE_BOS_COUNT,
            format!("{ns} leading BOS on both sides"),
        )
        .with("bos", bos_text);
    }
    // Counts that differ as part of another chat format (llama-2's `<s>[INST]` served for
    // ChatML) are that format's fault, which template.parity names.
    if let Some(d) = diverge(&serving.tokenizer, s, &serving.tokenizer, t, bos, messages) {
        if !matches!(
            d.class,
            DivergenceClass::DoubleBos | DivergenceClass::MissingBos
        ) {
            return Finding::new(
                checks::TEMPLATE_BOS_COUNT,
                Severity::Info,
                format!(
                    "{ns} leading BOS served, {nt} in the SFT data, as part of another chat format ({}): see template.parity",
                    d.class.name()
                ),
            )
            .with("bos", bos_text)
            .with("conversation", conv_id);
        }
    }
    let class = if ns > nt {
        DivergenceClass::DoubleBos
    } else {
        DivergenceClass::MissingBos
    };
    Finding::new(
        checks::TEMPLATE_BOS_COUNT,
        Severity::Error,
        format!(
            "{}: the serving prompt starts with {ns} BOS, the SFT data with {nt}",
            class.name()
        ),
    )
    .with("class", class.name())
    .with("bos", bos_text)
    .with("conversation", conv_id)
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

fn parity(t: &TemplateTally, serving: &Pipeline) -> Finding {
    let (total, prefix_only) = (t.compared, &t.prefix_only);
    let with_prefix_count = |f: Finding| match prefix_only.count {
        0 => f,
        n => f.with(
            "differing only by a space prefix (warning class space-prefix)",
            n,
        ),
    };
    if total == 0 {
        return Finding::new(
            checks::TEMPLATE_PARITY,
            Severity::Info,
            "no conversation rendered on both sides: nothing to compare",
        );
    }
    let Some((id, d)) = t.diverged.first() else {
        if let Some((id, d)) = prefix_only.first() {
            return space_prefix_only(
                checks::TEMPLATE_PARITY,
                prefix_only.count,
                total,
                "conversations",
            )
            .with("first conversation", id)
            .with("first difference at token", d.position)
            .with("serving", &d.serving_context)
            .with("sft", &d.sft_context)
            .with("serving template", &serving.origin);
        }
        return Finding::pass(
            checks::TEMPLATE_PARITY,
            format!(
                "the serving template reproduces the SFT token ids for all {total} conversations"
            ),
        )
        .with("serving template", &serving.origin);
    };
    let classes: Vec<&str> = t.classes.iter().copied().collect();
    with_prefix_count(
        Finding::new(
            checks::TEMPLATE_PARITY,
            Severity::Error,
            format!(
                "{}: the serving render differs from the SFT ids in {} of {total} conversations",
                d.class.name(),
                t.diverged.count
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
/// Returns the turns checked and the first failure.
fn generation_prompt(
    ctx: &Context,
    serving: &Pipeline,
    conv: &Conversation,
    sft_ids: &[u32],
    suffix: &Option<String>,
    now: Option<NaiveDateTime>,
) -> Result<(usize, Option<Finding>)> {
    let mut checked = 0;
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
        let prompt = match serving.render_at(&conv.messages[..k], conv.tools.as_deref(), true, now)
        {
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
                    sft_prompt = match sft.render(&conv.messages[..k], conv.tools.as_deref(), true)
                    {
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
                        return Ok((
                            checked,
                            Some(prompt_finding(
                                serving,
                                conv,
                                k,
                                &prompt,
                                sft_ids,
                                first_difference(&prompt, sft_ids).unwrap_or(0),
                                suffix,
                            )),
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
                            return Ok((
                                checked,
                                Some(prompt_finding(
                                    serving,
                                    conv,
                                    k,
                                    &prompt,
                                    &sft_ids[..prompt.len() + end],
                                    prompt.len(),
                                    suffix,
                                )),
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
            return Ok((
                checked,
                Some(prompt_finding(
                    serving, conv, k, &prompt, expected, at, suffix,
                )),
            ));
        }
    }
    Ok((checked, None))
}

/// The generation prompt's finding when no turn differed.
fn prompt_pass(checked: usize, suffix: &Option<String>) -> Finding {
    if checked == 0 {
        return Finding::new(
            checks::TEMPLATE_GENERATION_PROMPT,
            Severity::Info,
            "no assistant turn to check the generation prompt against",
        );
    }
    let mut f = Finding::pass(checks::TEMPLATE_GENERATION_PROMPT, format!("the serving prompt equals the training context before each of {checked} assistant turns"));
    if let Some(s) = suffix {
        f = f.with("generation prompt", format!("{s:?}"));
    }
    f
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
        checks::TEMPLATE_GENERATION_PROMPT,
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
    let text = crate::chain::run::tokens::decode(&p.tokenizer, rest);
    if text.trim_start().starts_with(&head) {
        return None;
    }
    // How many tokens precede the reply's first characters.
    (1..=rest.len().min(64)).find(|&n| {
        crate::chain::run::tokens::decode(&p.tokenizer, &rest[n..])
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
