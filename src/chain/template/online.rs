//! Boundary 3 online: does the server build the prompt the local render builds? Its own token
//! ids when it can show them (vLLM /tokenize, TGI /chat_tokenize, llama.cpp /apply-template),
//! else the prompt size it reports in usage.
use crate::chain::run::diff::diverge;
use crate::chain::run::probes::{Judge, JudgeFn, Observed, Online};
use crate::verdict::checks;
use crate::verdict::{Finding, Severity};

/// The template's online judge: the server's prompt ids (or counts), the day it renders, and
/// its refusals.
pub static ONLINE: &[Judge] = &[Judge {
    checks: &[
        checks::TEMPLATE_SERVER_IDS,
        checks::TEMPLATE_PROMPT_TOKENS,
        checks::TEMPLATE_SERVER_DATE,
        checks::TEMPLATE_SERVER_RENDER,
    ],
    run: JudgeFn::Reads(check),
}];

fn check(online: &Online, obs: &Observed) -> Vec<Finding> {
    let Some(local) = online.ctx.serving.as_ref() else {
        return vec![Finding::new(checks::TEMPLATE_SERVER_IDS, Severity::Info, "the served model has no local template or tokenizer to compare the server's prompt with")];
    };
    let mut out = Vec::new();
    let mut compared = 0;
    let mut diverged = Vec::new();
    for run in &obs.runs {
        let (Some(server), Some(mine)) = (&run.server_ids, &run.local_ids) else {
            continue;
        };
        compared += 1;
        if let Some(d) = diverge(
            &local.tokenizer,
            server,
            &local.tokenizer,
            mine,
            local.bos_id(),
            &run.probe.messages,
        ) {
            let class = shape_class(&local.tokenizer, server, mine).unwrap_or(d.class.name());
            diverged.push((run.probe.id.clone(), d, class));
        }
    }
    if let Some((id, d, class)) = diverged.first() {
        out.push(
            Finding::new(checks::TEMPLATE_SERVER_IDS, Severity::Error, format!("the server builds another prompt than the model's template: {class} ({} of {compared} probes)", diverged.len()))
                .with("class", class)
                .with("probe", id)
                .with("first difference", format!("token {} (server has {} tokens, local render {})", d.position, d.serving_len, d.sft_len))
                .with("server", &d.serving_context)
                .with("local render", &d.sft_context),
        );
    } else if compared > 0 {
        out.push(Finding::pass(
            checks::TEMPLATE_SERVER_IDS,
            format!("the server's own prompt ids equal the local render on {compared} probe(s)"),
        ));
    }
    // Without the server's ids, the prompt size it reports is the only view of its template.
    if compared == 0 {
        out.push(prompt_tokens(obs));
    }
    out.extend(server_date(online, obs));
    out.extend(tokenize_failures(obs));
    out.extend(server_render_errors(obs, &online.model));
    out
}

/// A server that prints its own date in the prompt (the template reads the clock, and the
/// request cannot pin it): the template checks compared its prompts at the day it printed,
/// the date span set aside.
fn server_date(online: &Online, obs: &Observed) -> Option<crate::verdict::Finding> {
    let dated: Vec<_> = obs
        .runs
        .iter()
        .filter_map(|r| r.server_day.map(|d| (&r.probe.id, d)))
        .collect();
    let (id, at) = dated.first()?;
    let dates = &online.ctx.dates;
    let pinned = online
        .ctx
        .serving
        .as_ref()
        .and_then(|p| p.now)
        .map(|t| crate::clock::show_pin(&t))
        .unwrap_or_else(|| "today".into());
    Some(
        Finding::new(
            checks::TEMPLATE_SERVER_DATE,
            Severity::Info,
            format!(
                "the server prints its own date in the prompt ({}): {} of {} probes were compared at the day it printed, {}, not the suite's ({pinned}); the date span is set aside",
                dates.describe(),
                dated.len(),
                obs.runs.len(),
                crate::chain::run::dates::show_day(dates, at)
            ),
        )
        .with("first probe", id),
    )
}

/// Shapes the token diff alone names, whatever the tokenizer calls its BOS: one extra leading
/// special token (a BOS the server adds on top of the template's: double-bos), or one side a
/// prefix of the other (the generation prompt is missing or extra).
fn shape_class(tok: &tokenizers::Tokenizer, server: &[u32], local: &[u32]) -> Option<&'static str> {
    let special = |id: u32| {
        tok.get_added_vocabulary()
            .is_special_token(&tok.id_to_token(id).unwrap_or_default())
    };
    if server.len() == local.len() + 1 && server[1..] == *local && special(server[0]) {
        return Some("double-bos");
    }
    if local.len() == server.len() + 1 && local[1..] == *server && special(local[0]) {
        return Some("missing-bos");
    }
    if server.len() != local.len() && (local.starts_with(server) || server.starts_with(local)) {
        return Some("generation-prompt");
    }
    None
}

/// A server that refuses valid chats because its template fails to render them: the model's
/// own template renders these conversations (the offline chain did), so the server's is another.
fn server_render_errors(obs: &Observed, model: &str) -> Option<Finding> {
    let failed = obs.runs.iter().find_map(|r| match r.plain.first() {
        Some(Err(crate::endpoint::openai::CallError::Status { status, body, .. }))
            if (400..600).contains(status) && names_a_template_error(body, model) =>
        {
            Some((r.probe.id.clone(), *status, body.clone()))
        }
        _ => None,
    })?;
    Some(
        Finding::new(checks::TEMPLATE_SERVER_RENDER, Severity::Error, "the server's chat template fails on a conversation the model's own template renders: it serves another template")
            .with("probe", failed.0)
            .with("server", format!("HTTP {}: {}", failed.1, crate::chain::run::probes::show(&failed.2))),
    )
}

/// Wording servers use when rendering the chat failed (vLLM "Error in applying chat template",
/// transformers/jinja2 `TemplateError`, llama.cpp "chat template", a template's own
/// `raise_exception`). The suite's model name is cut out first: a model folder called
/// `...-template` echoed in a "model not found" error is not a template failure.
fn names_a_template_error(body: &str, model: &str) -> bool {
    // A short name would cut letters out of words ("m" out of "template").
    let body = if model.len() < 4 {
        body.to_lowercase()
    } else {
        body.replace(model, "").to_lowercase()
    };
    [
        "chat template",
        "chat_template",
        "templateerror",
        "template error",
        "jinja",
        "raise_exception",
    ]
    .iter()
    .any(|w| body.contains(w))
}

/// A server that offers its prompt ids (a chat tokenize endpoint) but failed to give them for
/// some probes: those probes were checked by prompt size alone, and saying so keeps a weaker
/// check from passing for the strong one.
fn tokenize_failures(obs: &Observed) -> Option<Finding> {
    let failed: Vec<_> = obs
        .runs
        .iter()
        .filter_map(|r| Some((&r.probe.id, r.server_ids_error.as_ref()?)))
        .collect();
    let (probe, error) = failed.first()?;
    Some(
        Finding::new(checks::TEMPLATE_SERVER_IDS, Severity::Warning, format!("the server's chat tokenize request failed on {} of {} probes: their prompt ids were not compared", failed.len(), obs.runs.len()))
            .with("probe", probe)
            .with("error", error),
    )
}

/// usage.prompt_tokens against the local render's count (docs/design/METRICS.md: their difference is the
/// template overhead, and a nonzero one is a template finding).
fn prompt_tokens(obs: &Observed) -> Finding {
    let mut compared = 0;
    for run in &obs.runs {
        let (Some(main), Some(mine)) = (run.main(), &run.local_ids) else {
            continue;
        };
        let Some(reported) = main.usage.and_then(|u| u.prompt_tokens) else {
            continue;
        };
        compared += 1;
        if reported as usize != mine.len() {
            let overhead = reported as i64 - mine.len() as i64;
            return Finding::new(checks::TEMPLATE_PROMPT_TOKENS, Severity::Error, format!("the server's prompt has {reported} tokens, the local render {}: it renders or tokenizes the chat differently ({overhead:+} tokens)", mine.len()))
                .with("probe", &run.probe.id)
                .with("hint", "the server has no tokenize endpoint to show its ids; compare its chat template (--chat-template, GGUF tokenizer.chat_template, chat_format) with the model's");
        }
    }
    if compared == 0 {
        return Finding::new(checks::TEMPLATE_PROMPT_TOKENS, Severity::Warning, "the server shows neither its prompt ids nor usage.prompt_tokens: its template cannot be checked online");
    }
    Finding::pass(checks::TEMPLATE_PROMPT_TOKENS, format!("usage.prompt_tokens equals the local render's count on {compared} probe(s) (the server shows no ids)"))
}

#[cfg(test)]
mod tests {
    use super::names_a_template_error;

    #[test]
    fn a_model_name_with_template_in_it_is_not_a_template_error() {
        // transformers serve's 400 for a model it does not serve echoes the served folder.
        let body = r#"{"detail":"Requested model 'x' does not match the served model '/tmp/Qwen2.5+7B-template/model'"}"#;
        assert!(!names_a_template_error(
            body,
            "/tmp/Qwen2.5+7B-template/model"
        ));
        assert!(!names_a_template_error(body, ""));
        // vLLM's and jinja2's wording is.
        assert!(names_a_template_error(
            r#"{"error":{"message":"Error in applying chat template from request: 'tools' is undefined"}}"#,
            "m"
        ));
        assert!(names_a_template_error(
            "jinja2.exceptions.TemplateError: Conversation roles must alternate",
            "m"
        ));
    }
}
