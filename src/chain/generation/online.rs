//! Boundary 4 online: the generation settings the server really applies — does it stop where
//! the checkpoint ends its turn, does it honour temperature 0, and which defaults does it say
//! it uses?
use crate::verdict::checks;
use serde_json::Value;

use crate::chain::run::probes::{Judge, JudgeFn, Observed, Online};
use crate::verdict::{Finding, Severity};

/// The generation config's online judges (the online driver runs them in this order).
pub static ONLINE: &[Judge] = &[
    Judge {
        checks: &[checks::GENERATION_SERVER_STOP],
        run: JudgeFn::Reads(|online, obs| vec![stops(online, obs)]),
    },
    Judge {
        checks: &[checks::GENERATION_SAMPLING_HONOURED],
        run: JudgeFn::Reads(|online, obs| vec![sampling(online, obs)]),
    },
    Judge {
        checks: &[checks::GENERATION_SERVER_DEFAULTS],
        run: JudgeFn::Reads(|online, obs| defaults(online, obs).into_iter().collect()),
    },
];

/// The server must stop where the reference checkpoint ends its turn.
fn stops(online: &Online, obs: &Observed) -> Finding {
    let (mut referenced, mut compared) = (0, 0);
    for run in &obs.runs {
        let Some(main) = run.main() else { continue };
        // Identical requests already got different replies: the reply is not the reference's
        // to compare (server.determinism names it), whatever the stop set.
        if run.determinism() == Some(crate::chain::run::probes::Determinism::Sampled) {
            continue;
        }
        let Some(reference) = &run.reference else {
            // No reference: the tell-tale of a missing terminator is its text in the reply.
            if let Some(tok) = leaked_terminator(online, &main.text) {
                return Finding::new(checks::GENERATION_SERVER_STOP, Severity::Error, format!("the reply contains the turn terminator {tok:?} as text: the server does not stop on it"))
                    .with("probe", &run.probe.id)
                    .with("reply", crate::chain::run::probes::show(&main.text));
            }
            continue;
        };
        referenced += 1;
        if reference.finish_reason.as_deref() != Some("stop") {
            continue; // the reference did not end its turn within max_tokens: nothing to compare
        }
        compared += 1;
        // The streamed reply too: `transformers serve` returns only the text after the last
        // `<|im_end|>` of a non-streamed Qwen reply (and strips it), so a run past the
        // terminator shows in full only in the stream (server.stream-parity names the quirk).
        let streamed = run.streamed.as_ref().and_then(|r| r.as_ref().ok());
        let replies = [
            ("server reply", Some(main)),
            ("server reply (streamed)", streamed),
        ];
        let ran_on = replies.into_iter().find_map(|(label, r)| {
            let r = r?;
            // Whitespace aside: that parser also strips the reply.
            let past = r.finish_reason.as_deref() == Some("length")
                && r.text.trim_start().starts_with(reference.text.trim());
            past.then_some((label, r))
        });
        let Some((label, reply)) = ran_on else {
            continue;
        };
        let terminator_id = reference
            .token_ids
            .as_ref()
            .and_then(|ids| ids.last())
            .copied();
        let at = reference
            .token_ids
            .as_ref()
            .map(|ids| ids.len().saturating_sub(1));
        // Where the server reports its own tokens, the one at the reference's stop position
        // must be the terminator: the server generated it and went on. Another token there
        // means the server's model left the reference's path (a checkpoint or numerics matter,
        // judged elsewhere), not that its stop set lacks the terminator.
        let server_token = match (
            crate::chain::run::probes::first_reply_ids(reply, online),
            at,
        ) {
            (Some(ids), Some(n)) => ids.get(n).copied(),
            _ => None,
        };
        if let (Some(got), Some(want)) = (server_token, terminator_id) {
            if got != want {
                continue;
            }
        }
        let terminator = terminator_id
            .map(|id| online.reference_token(id))
            .unwrap_or_default();
        let mut f = Finding::new(checks::GENERATION_SERVER_STOP, Severity::Error, "the server runs past the end of the assistant turn: the turn terminator is not in its stop set")
            .with("probe", &run.probe.id)
            .with("reference stops on", format!("{terminator:?} after {}", crate::chain::run::probes::show(&reference.text)))
            .with(label, crate::chain::run::probes::show(&reply.text))
            .with("server finish_reason", "length");
        if let (Some(_), Some(n)) = (server_token, at) {
            f = f.with(
                "server's own token at that position",
                format!("{terminator:?} (token {n}), and it went on"),
            );
        }
        return f;
    }
    match (referenced, compared) {
        (0, _) => Finding::new(
            checks::GENERATION_SERVER_STOP,
            Severity::Info,
            "no reference run to compare the server's stops with (set [reference] model)",
        ),
        (n, 0) => Finding::new(
            checks::GENERATION_SERVER_STOP,
            Severity::Info,
            format!("the reference ended none of the {n} probe replies within max_tokens: no stop to compare (raise [server] max_tokens)"),
        ),
        (_, n) => Finding::pass(
            checks::GENERATION_SERVER_STOP,
            format!("the server stops where the reference does on {n} probe(s)"),
        ),
    }
}

fn leaked_terminator(online: &Online, text: &str) -> Option<String> {
    let special = online.ctx.model.special_tokens();
    let found = [
        special.eos_token.as_deref(),
        Some("<|im_end|>"),
        Some("<|eot_id|>"),
        Some("</s>"),
    ]
    .into_iter()
    .flatten()
    .find(|t| !t.is_empty() && text.contains(t))
    .map(str::to_string);
    found
}

/// Temperature 0 must be greedy: the seed must not change the reply, and each chosen token
/// must be the most likely one the server itself reports. A server that applies its own
/// sampling defaults over the request (vllm#15241) fails here, seeded and therefore stable.
fn sampling(online: &Online, obs: &Observed) -> Finding {
    let f = sampling_verdict(obs);
    if f.severity != Severity::Error {
        return f;
    }
    let (cause, fix) = sampling_cause(online);
    f.with("known cause on this stack", cause).with("fix", fix)
}

/// What makes a stack pick tokens other than its argmax at temperature 0, and the suite line
/// that stops it.
fn sampling_cause(online: &Online) -> (String, String) {
    let extra = &online
        .ctx
        .suite
        .file
        .target
        .as_ref()
        .map(|t| t.extra_body.clone())
        .unwrap_or_default();
    let profile = online.ctx.stack.profile();
    let (cause, fix) = match profile.default_sampler {
        Some((field, cause, fix)) if !extra.contains_key(field) => (cause, fix),
        _ => profile.sampling_cause,
    };
    (cause.into(), fix.into())
}

fn sampling_verdict(obs: &Observed) -> Finding {
    // Unstable same-seed replies are the server's nondeterminism, judged at the server boundary.
    let same_seed_unstable = obs
        .runs
        .iter()
        .any(|r| r.determinism() == Some(crate::chain::run::probes::Determinism::Sampled))
        || matches!((obs.sampling.first(), obs.sampling.get(1)), (Some(Ok(a)), Some(Ok(b))) if a.text != b.text);
    if same_seed_unstable {
        return Finding::new(checks::GENERATION_SAMPLING_HONOURED, Severity::Info, "identical requests already differ (see server.determinism): whether the seed steers temperature 0 cannot be told apart");
    }
    let replies: Vec<&crate::exchange::Record> = obs
        .sampling
        .iter()
        .filter_map(|r| r.as_ref().ok())
        .collect();
    if let Some(other) = replies
        .iter()
        .skip(2)
        .find(|r| replies.first().is_some_and(|a| a.text != r.text))
    {
        return Finding::new(checks::GENERATION_SAMPLING_HONOURED, Severity::Error, "temperature 0 is not honoured: another seed gives another reply, so the server samples (it applies its own sampling defaults over the request)")
            .with("probe", crate::chain::run::probes::show(&obs.sampling_prompt))
            .with("seed A", crate::chain::run::probes::show(&replies[0].text))
            .with("seed B", crate::chain::run::probes::show(&other.text));
    }
    for run in &obs.runs {
        let (Some(main), Some(Ok(other))) = (run.main(), &run.other_seed) else {
            continue;
        };
        if main.text != other.text {
            return Finding::new(checks::GENERATION_SAMPLING_HONOURED, Severity::Error, "temperature 0 is not honoured: another seed gives another reply, so the server samples (it applies its own sampling defaults over the request)")
                .with("probe", &run.probe.id)
                .with("seed A", crate::chain::run::probes::show(&main.text))
                .with("seed B", crate::chain::run::probes::show(&other.text));
        }
    }
    let greedy_checked = replies
        .iter()
        .copied()
        .chain(obs.runs.iter().filter_map(|r| r.main()));
    for rec in greedy_checked {
        if let Some(detail) = not_greedy(rec) {
            return Finding::new(checks::GENERATION_SAMPLING_HONOURED, Severity::Error, "temperature 0 is not honoured: the server picked a token that is not its own most likely one")
                .with("where", detail);
        }
    }
    if replies.is_empty() && obs.runs.iter().all(|r| r.main().is_none()) {
        return Finding::new(
            checks::GENERATION_SAMPLING_HONOURED,
            Severity::Warning,
            "no temperature-0 reply to check sampling on",
        );
    }
    Finding::pass(
        checks::GENERATION_SAMPLING_HONOURED,
        "temperature 0 replies are greedy and independent of the seed",
    )
}

/// The first step where the chosen token is less likely than the server's own top candidate.
fn not_greedy(rec: &crate::exchange::Record) -> Option<String> {
    let lps = rec.logprobs.as_ref()?;
    lps.iter().enumerate().find_map(|(k, lp)| {
        let best = lp
            .top
            .iter()
            .map(|t| t.logprob)
            .fold(f32::NEG_INFINITY, f32::max);
        (best - lp.logprob > 1e-3).then(|| {
            format!(
                "token {k} {:?} (logprob {:.3}; the server's top candidate has {best:.3})",
                lp.token, lp.logprob
            )
        })
    })
}

/// Defaults the server reveals (llama.cpp /props) against generation_config.json.
fn defaults(online: &Online, obs: &Observed) -> Vec<Finding> {
    let Some(settings) = obs
        .props
        .as_ref()
        .and_then(|p| p.get("default_generation_settings"))
        .map(|s| s.get("params").unwrap_or(s))
    else {
        return vec![];
    };
    let gc = online.ctx.model.generation_config.as_ref();
    let want = |name: &str| -> Option<f64> {
        let g = gc?;
        match name {
            "temperature" => g.temperature,
            "top_p" => g.top_p,
            "top_k" => g.top_k.map(|k| k as f64),
            "repeat_penalty" => g.repetition_penalty,
            _ => None,
        }
    };
    let mut f = Finding::pass(
        checks::GENERATION_SERVER_DEFAULTS,
        "the defaults the server reports agree with generation_config.json",
    );
    let mut differs = false;
    for name in ["temperature", "top_p", "top_k", "repeat_penalty"] {
        let Some(have) = settings.get(name).and_then(Value::as_f64) else {
            continue;
        };
        let expected = want(name).or((name == "repeat_penalty").then_some(1.0));
        if let Some(e) = expected {
            if (have - e).abs() > 1e-6 {
                differs = true;
                f = f.with(
                    name,
                    format!("server default {have}, generation_config.json {e}"),
                );
            }
        }
    }
    if differs {
        f.severity = Severity::Warning;
        f.message = "the server's default sampling differs from generation_config.json (requests that omit these fields get the server's)".into();
    }
    vec![f]
}
