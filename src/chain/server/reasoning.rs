//! Boundary 5, the server's reasoning parser: a model whose template frames reasoning (think
//! tags; chain/framing.rs) must get back an answer in `content` and its reasoning beside it
//! (`reasoning_content`, or vLLM's newer `reasoning`). What users report when the parser is
//! missing, is another family's, or the API loses its output: the thinking text in `content`
//! (the tags with it, or — when the generation prompt opened the block — with none at all),
//! reasoning that never comes back, and an empty `content` because the reply was cut inside
//! its reasoning.
use crate::chain::run::probes::{show, Observed, Online};
use crate::exchange::Record;
use crate::template::framing::{Reasoning, Splitter};
use crate::verdict::checks;
use crate::verdict::{Finding, Severity};

/// What one reply shows of the server's reasoning parser.
#[derive(Debug, Clone, PartialEq)]
pub enum Split {
    /// The reasoning is in `content`: no parser, or one that does not read this framing.
    Leaked(String),
    /// The model reasoned and the reply carries none of it.
    Dropped(String),
    /// Reasoning, and no content: the reply ended inside its reasoning (`finish_reason` length).
    CutInside,
    /// Reasoning beside the answer.
    Split,
    /// No reasoning produced: nothing to split.
    Answered,
}

/// `server.reasoning-split` over every probe's reply, plain and streamed; None for a template
/// with no reasoning framing (or harmony's channels, which are tokens, not text).
pub fn check(online: &Online, obs: &Observed) -> Option<Finding> {
    let serving = online.ctx.serving.as_ref()?;
    let framing = obs.framing.as_ref()?.reasoning.clone()?;
    if framing.harmony() {
        return None;
    }
    let mut seen: Vec<(String, Split)> = Vec::new();
    let mut fields = std::collections::BTreeSet::new();
    let mut parity = None;
    for run in &obs.runs {
        let streamed = run.streamed.as_ref().and_then(|r| r.as_ref().ok());
        // The streaming parser path splits as the whole-reply one does (temperature 0, a
        // prompt that replies the same every time).
        if let (Some(plain), Some(streamed)) = (run.main(), streamed) {
            let same =
                run.determinism() == Some(crate::chain::run::probes::Determinism::Deterministic);
            // Whitespace at either end aside (transformers serve streams the newline after
            // `<think>` and strips it from the whole reply).
            let differs = plain.reasoning.trim() != streamed.reasoning.trim();
            if same && parity.is_none() && differs {
                parity = Some(format!(
                    "probe {}: reasoning {} streamed, {} not",
                    run.probe.id,
                    show(&streamed.reasoning),
                    show(&plain.reasoning)
                ));
            }
        }
        for (how, rec) in [("reply", run.main()), ("streamed reply", streamed)] {
            let Some(rec) = rec else { continue };
            fields.extend(rec.reasoning_field);
            let generated = rec
                .token_ids
                .as_deref()
                .and_then(|ids| serving.tokenizer.decode(ids, false).ok());
            let at = format!("probe {} ({how})", run.probe.id);
            seen.push((at, judge(&framing, rec, generated.as_deref())));
        }
    }
    // What the client does not rely on is a warning (`[client] relies_on`).
    let broken = if online.ctx.suite.client_relies_on("reasoning") {
        Severity::Error
    } else {
        Severity::Warning
    };
    let mut f = finding(&framing, &seen, broken);
    let pinned = online
        .ctx
        .suite
        .file
        .client
        .as_ref()
        .and_then(|c| c.reasoning_field.as_deref());
    if let Some(read) = pinned.filter(|p| !fields.is_empty() && !fields.contains(p)) {
        let sent: Vec<&str> = fields.iter().copied().collect();
        if f.severity != broken {
            f = Finding::new(
                checks::SERVER_REASONING_SPLIT,
                broken,
                format!(
                    "the server writes reasoning to `{}` and the client reads `{read}` (`[client] reasoning_field`): the client gets none",
                    sent.join("`, `")
                ),
            )
            .with("layer", "the server API (the field's name: vLLM renamed `reasoning_content` to `reasoning`)")
            .with("fix", format!("read `{}` in the client (then set [client] reasoning_field to it), or serve with a version that writes `{read}`", sent[0]));
        }
    }
    if !fields.is_empty() {
        // Which name the client must read: vLLM renamed `reasoning_content` to `reasoning`.
        let names: Vec<&str> = fields.into_iter().collect();
        f = f.with("reasoning field", names.join(", "));
    }
    Some(match parity {
        Some(why) if crate::chain::run::probes::parity_may_replace(f.severity, broken) => {
            Finding::new(
                checks::SERVER_REASONING_SPLIT,
                broken,
                format!(
                    "the streamed reply splits reasoning differently from the whole reply ({why})"
                ),
            )
            .with("layer", "the server's streaming reasoning parser")
            .with(
                "framing",
                format!("{:?} … {:?}", framing.open, framing.close),
            )
        }
        _ => f,
    })
}

/// One reply. `generated`: the reply's own token ids decoded with their special tokens, when
/// the server returned them: what the model emitted before any parser.
pub fn judge(r: &Reasoning, rec: &Record, generated: Option<&str>) -> Split {
    let content = rec.text.as_str();
    let (open, close) = (r.open.trim(), r.close.trim());
    if content.contains(close) {
        return Split::Leaked(format!("`content` holds the close tag {close:?}"));
    }
    if !open.is_empty() && content.trim_start().starts_with(open) {
        return Split::Leaked(format!("`content` starts with the open tag {open:?}"));
    }
    let reasoning = rec.reasoning.trim();
    // What the model reasoned, by the template's own framing, when its tokens came back.
    let emitted = generated
        .and_then(|g| Splitter::new(r).map(|s| s.split(g)))
        .map(|(reasoning, _)| reasoning);
    let emitted_reasoning = emitted.as_deref().map(str::trim).filter(|e| !e.is_empty());
    let cut = rec.finish_reason.as_deref() == Some("length");
    if reasoning.is_empty() && !content.trim().is_empty() && r.prompt_opens {
        // The prompt opened the block, so the reply is reasoning up to the close tag. Its
        // tokens show whether there was any; without them, a reply cut before any close
        // is reasoning through and through.
        let leaked = match emitted_reasoning {
            Some(e) => content.contains(e),
            None => emitted.is_none() && cut,
        };
        if leaked {
            return Split::Leaked(
                "the generation prompt opened the reasoning block, and the reply's reasoning came back as `content`".into(),
            );
        }
    }
    if reasoning.is_empty() {
        if let Some(e) = emitted_reasoning {
            return Split::Dropped(format!(
                "the model reasoned ({}) and the reply carries no reasoning",
                show(e)
            ));
        }
        if r.prompt_opens && content.trim().is_empty() && cut {
            return Split::Dropped(
                "the reply was cut inside the reasoning the prompt opened, and carries neither content nor reasoning".into(),
            );
        }
        return Split::Answered;
    }
    if content.trim().is_empty() && cut {
        return Split::CutInside;
    }
    Split::Split
}

fn finding(r: &Reasoning, seen: &[(String, Split)], broken_severity: Severity) -> Finding {
    let count = |f: fn(&Split) -> bool| seen.iter().filter(|(_, s)| f(s)).count();
    let split = count(|s| matches!(s, Split::Split));
    let cut = count(|s| matches!(s, Split::CutInside));
    let answered = count(|s| matches!(s, Split::Answered));
    let broken = seen
        .iter()
        .find(|(_, s)| matches!(s, Split::Leaked(_) | Split::Dropped(_)));
    let tally = format!(
        "{} replies: {split} split, {cut} cut inside their reasoning, {answered} without reasoning",
        seen.len()
    );
    let f = match broken {
        Some((at, Split::Leaked(why))) => Finding::new(
            checks::SERVER_REASONING_SPLIT,
            broken_severity,
            format!("the server leaves the model's reasoning in `content` ({at}: {why}): its reasoning parser is missing or reads another framing"),
        )
        .with("layer", "the server's reasoning parser (the model emitted its reasoning as the template frames it)")
        .with("fix", fix(r)),
        Some((at, why)) => Finding::new(
            checks::SERVER_REASONING_SPLIT,
            broken_severity,
            format!("the server loses the model's reasoning ({at}: {})", match why {
                Split::Dropped(w) => w.as_str(),
                _ => "",
            }),
        )
        .with("layer", "the server API (its parser split the reasoning out; the reply does not carry it in `reasoning_content` or `reasoning`)")
        .with("fix", "check which field the server writes reasoning to (vLLM renamed `reasoning_content` to `reasoning`) and that the client reads it"),
        None if cut > 0 => Finding::new(
            checks::SERVER_REASONING_SPLIT,
            Severity::Warning,
            format!("{cut} of {} replies ended inside their reasoning (finish_reason \"length\", empty `content`): the answer never came", seen.len()),
        )
        .with("fix", "raise max_tokens (reasoning spends tokens before the answer), or switch reasoning off where the template allows it"),
        None => Finding::pass(
            checks::SERVER_REASONING_SPLIT,
            "the reasoning the template frames comes back split out of `content`",
        ),
    };
    f.with("replies", tally)
        .with("framing", format!("{:?} … {:?}", r.open, r.close))
}

fn fix(r: &Reasoning) -> String {
    let vllm = r.parser.vllm.unwrap_or("deepseek_r1");
    let llama = r.parser.llama_cpp.unwrap_or("--reasoning-format deepseek");
    format!("serve with vLLM --reasoning-parser {vllm}, or llama-server {llama}; a stack with no reasoning parser (llama-cpp-python) leaves it to the client")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::template::framing::derive;

    fn opened() -> Reasoning {
        let template = crate::template::ChatTemplate::new(
            "{% for m in messages %}{{ m.content }}{% endfor %}{% if add_generation_prompt %}<|A|><think>\n{% endif %}{# </think> #}",
        )
        .unwrap();
        derive(&template, &Default::default()).reasoning.unwrap()
    }

    fn reply(content: &str, reasoning: &str, finish: &str) -> Record {
        Record {
            text: content.into(),
            reasoning: reasoning.into(),
            finish_reason: Some(finish.into()),
            ..Record::new()
        }
    }

    #[test]
    fn each_way_a_parser_fails_is_told_apart() {
        let r = opened();
        assert!(r.prompt_opens);
        // A parser that split: reasoning beside the answer.
        assert_eq!(
            judge(&r, &reply("Sunny.", "Check.", "stop"), None),
            Split::Split
        );
        // The close tag in content: no parser.
        assert!(matches!(
            judge(&r, &reply("Check.</think>Sunny.", "", "stop"), None),
            Split::Leaked(_)
        ));
        // The prompt opened the block, the reply was cut before any close, all of it came
        // back as content.
        assert!(matches!(
            judge(&r, &reply("Check, check", "", "length"), None),
            Split::Leaked(_)
        ));
        // Its tokens show the model closed at once: an answer with no reasoning is healthy.
        assert_eq!(
            judge(&r, &reply("Sunny.", "", "stop"), Some("</think>\n\nSunny.")),
            Split::Answered
        );
        // The tokens show reasoning the reply does not carry.
        assert!(matches!(
            judge(
                &r,
                &reply("Sunny.", "", "stop"),
                Some("Check.</think>Sunny.")
            ),
            Split::Dropped(_)
        ));
        // Reasoning only, cut by max_tokens.
        assert_eq!(
            judge(&r, &reply("", "Check, check", "length"), None),
            Split::CutInside
        );
    }
}
