//! Boundary 5: the server API as an OpenAI-compatible client sees it — the model list, response
//! and chunk schemas, SSE framing and `[DONE]`, usage, stream ≠ non-stream, determinism alone and
//! under load, max_tokens and stop, and errors for bad requests (4xx with a body, not a 500 or
//! a hang).
pub mod fields;
pub mod long_prompt;
pub mod reasoning;
pub mod responses;
pub mod round_trip;
pub mod sampled;
pub mod tool_calls;
use crate::verdict::checks;
use serde_json::{json, Value};

use crate::chain::run::probes::{reply_ids, Determinism, Judge, JudgeFn, Observed, Online};
use crate::endpoint::openai::CallError;
use crate::verdict::{Finding, Severity};

/// The server API's online judges, then its parsers' and request fields' (the online driver
/// runs them in this order).
pub static ONLINE: &[Judge] = &[
    Judge {
        checks: &[checks::SERVER_MODELS],
        run: JudgeFn::Reads(|online, obs| vec![models(online, obs)]),
    },
    Judge {
        checks: &[checks::SERVER_HEALTH],
        run: JudgeFn::Reads(|_, obs| vec![health(obs)]),
    },
    Judge {
        checks: &[checks::SERVER_RESPONDS],
        run: JudgeFn::Reads(|_, obs| vec![responds(obs)]),
    },
    Judge {
        checks: &[checks::SERVER_SCHEMA],
        run: JudgeFn::Reads(|_, obs| vec![schema(obs)]),
    },
    Judge {
        checks: &[
            checks::SERVER_SSE_DONE,
            checks::SERVER_SSE_FRAMING,
            checks::SERVER_INCLUDE_USAGE,
        ],
        run: JudgeFn::Reads(|_, obs| stream(obs)),
    },
    Judge {
        checks: &[checks::SERVER_USAGE],
        run: JudgeFn::Reads(|online, obs| vec![usage(online, obs)]),
    },
    Judge {
        checks: &[checks::SERVER_STREAM_PARITY],
        run: JudgeFn::Reads(|_, obs| vec![parity(obs)]),
    },
    Judge {
        checks: &[checks::SERVER_DETERMINISM],
        run: JudgeFn::Reads(|_, obs| vec![determinism(obs)]),
    },
    Judge {
        checks: &[checks::SERVER_MAX_TOKENS],
        run: JudgeFn::Sends(|online, obs| {
            Box::pin(async move { vec![max_tokens(online, obs).await] })
        }),
    },
    Judge {
        checks: &[checks::SERVER_STOP],
        run: JudgeFn::Sends(|online, obs| Box::pin(async move { vec![stop(online, obs).await] })),
    },
    Judge {
        checks: &[checks::SERVER_BAD_REQUESTS],
        run: JudgeFn::Sends(|online, _| Box::pin(async move { vec![bad_requests(online).await] })),
    },
    Judge {
        checks: &[checks::SERVER_LONG_PROMPT],
        run: JudgeFn::Sends(|online, obs| Box::pin(long_prompt::check(online, obs))),
    },
    Judge {
        checks: &[checks::SERVER_REASONING_SPLIT],
        run: JudgeFn::Reads(|online, obs| reasoning::check(online, obs).into_iter().collect()),
    },
    Judge {
        checks: &[checks::SERVER_TOOL_CALL_PARSE],
        run: JudgeFn::Reads(|online, obs| tool_calls::check(online, obs).into_iter().collect()),
    },
    Judge {
        checks: &[checks::SERVER_AGENT_ROUND_TRIP],
        run: JudgeFn::Sends(|online, obs| Box::pin(round_trip::check(online, obs))),
    },
    Judge {
        checks: &[checks::SERVER_SAMPLED_PARSE],
        run: JudgeFn::Sends(|online, obs| Box::pin(sampled::check(online, obs))),
    },
    Judge {
        checks: &[
            checks::SERVER_MAX_COMPLETION_TOKENS,
            checks::SERVER_TEMPLATE_KWARGS,
            checks::SERVER_TOOL_CHOICE,
            checks::SERVER_RESPONSE_FORMAT,
        ],
        run: JudgeFn::Reads(fields::check),
    },
    Judge {
        checks: &[checks::SERVER_RESPONSES_PARITY],
        run: JudgeFn::Reads(|online, obs| responses::check(online, obs).into_iter().collect()),
    },
];

fn models(online: &Online, obs: &Observed) -> Finding {
    let Some(list) = &obs.models else {
        return Finding::new(
            checks::SERVER_MODELS,
            Severity::Error,
            "GET /v1/models does not return JSON",
        );
    };
    let ids: Vec<&str> = list
        .get("data")
        .and_then(Value::as_array)
        .map(|d| {
            d.iter()
                .filter_map(|m| m.get("id").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default();
    if ids.contains(&online.model.as_str()) {
        return Finding::pass(
            checks::SERVER_MODELS,
            format!("/v1/models lists {:?}", online.model),
        );
    }
    // A server that answers requests naming the model but does not list it (`transformers
    // serve` lists only models in the Hugging Face cache, never a folder it was started on)
    // breaks model discovery, not chat: a warning. Refused requests make it the likely cause.
    let answered = obs
        .runs
        .iter()
        .any(|r| r.plain.first().is_some_and(|p| p.is_ok()));
    let severity = if answered {
        Severity::Warning
    } else {
        Severity::Error
    };
    let what = if ids.is_empty() {
        "GET /v1/models lists no models (expected {\"object\": \"list\", \"data\": [{\"id\": …}]})"
            .to_string()
    } else {
        format!(
            "the server does not list the suite's model {:?}",
            online.model
        )
    };
    let what = if answered {
        format!("{what}, though it answers requests naming it: clients that discover models there will not find it")
    } else {
        what
    };
    let mut f = Finding::new(checks::SERVER_MODELS, severity, what);
    f = if ids.is_empty() {
        f.with("body", crate::chain::run::probes::show(&list.to_string()))
    } else {
        f.with("listed", ids.join(", "))
    };
    if !answered {
        f = f.with(
            "hint",
            "set [target] model to the served name, or serve the model under this name",
        );
    }
    f
}

fn health(obs: &Observed) -> Finding {
    match obs.health_status {
        Some(s) if (200..300).contains(&s) => {
            Finding::pass(checks::SERVER_HEALTH, "GET /health answers")
        }
        Some(s) => Finding::new(
            checks::SERVER_HEALTH,
            Severity::Info,
            format!("GET /health answers {s}: readiness has to be polled on /v1/models"),
        ),
        None => Finding::new(
            checks::SERVER_HEALTH,
            Severity::Info,
            "GET /health does not answer: readiness has to be polled on /v1/models",
        ),
    }
}

/// Valid probe requests must succeed: a failure is reported once, with the first error.
fn responds(obs: &Observed) -> Finding {
    let mut total = 0;
    let mut failed: Vec<(String, &CallError)> = Vec::new();
    for run in &obs.runs {
        let all = run
            .plain
            .iter()
            .chain(run.other_seed.iter())
            .chain(run.streamed.iter())
            .chain(run.concurrent.iter());
        for r in all {
            total += 1;
            if let Err(e) = r {
                failed.push((run.probe.id.clone(), e));
            }
        }
    }
    match failed.first() {
        None => Finding::pass(
            checks::SERVER_RESPONDS,
            format!("{total} valid probe requests answered"),
        ),
        Some((id, e)) => {
            let what = match e {
                CallError::Timeout { .. } => "timed out",
                CallError::Interrupted { .. } => "broke off mid-response",
                CallError::Status { .. } => "were refused",
                _ => "failed",
            };
            let f = Finding::new(
                checks::SERVER_RESPONDS,
                Severity::Error,
                format!("{} of {total} valid probe requests {what}", failed.len()),
            )
            .with("probe", id)
            .with("first error", e);
            // Every request refused with a 4xx that talks about the model: the suite names a
            // model the server does not serve (vLLM: 404 "model ... does not exist";
            // transformers serve: 400 naming the served folder).
            let wrong_model = failed.len() == total
                && failed.iter().all(|(_, e)| {
                    matches!(e, CallError::Status { status, body, .. }
                        if (400..500).contains(status) && body.to_lowercase().contains("model"))
                });
            if wrong_model {
                f.with("hint", "every request was refused over its `model` field: set [target] model to the name the server serves (its /v1/models list, or the path it was started with)")
            } else {
                f
            }
        }
    }
}

/// The non-streamed reply and every streamed chunk against the OpenAI shapes clients parse.
fn schema(obs: &Observed) -> Finding {
    let mut problems = Vec::new();
    if let Some(Ok(reply)) = &obs.raw_reply {
        problems.extend(
            reply_problems(reply)
                .into_iter()
                .map(|p| format!("reply: {p}")),
        );
    }
    for run in &obs.runs {
        if let Some(Ok(rec)) = &run.streamed {
            if let Some(trace) = &rec.stream {
                for (i, c) in trace.chunks.iter().enumerate() {
                    problems.extend(
                        chunk_problems(c)
                            .into_iter()
                            .map(|p| format!("chunk {i}: {p}")),
                    );
                }
            }
        }
    }
    if problems.is_empty() {
        return Finding::pass(
            checks::SERVER_SCHEMA,
            "replies and stream chunks have the OpenAI shapes",
        );
    }
    problems.dedup();
    let mut f = Finding::new(
        checks::SERVER_SCHEMA,
        Severity::Error,
        format!("{} schema problem(s) in replies or chunks", problems.len()),
    );
    for p in problems.iter().take(5) {
        f = f.with("problem", p);
    }
    f
}

fn reply_problems(v: &Value) -> Vec<String> {
    let mut p = Vec::new();
    for key in ["id", "model"] {
        if !v.get(key).is_some_and(Value::is_string) {
            p.push(format!("`{key}` is missing or not a string"));
        }
    }
    if v.get("object").and_then(Value::as_str) != Some("chat.completion") {
        p.push("`object` is not \"chat.completion\"".into());
    }
    if !v.get("created").is_some_and(Value::is_u64) {
        p.push("`created` is missing or not an integer".into());
    }
    match v
        .get("choices")
        .and_then(Value::as_array)
        .and_then(|c| c.first())
    {
        None => p.push("`choices` is missing or empty".into()),
        Some(c) => {
            let msg = c.get("message");
            if msg.and_then(|m| m.get("role")).and_then(Value::as_str) != Some("assistant") {
                p.push("`choices[0].message.role` is not \"assistant\"".into());
            }
            if !msg
                .and_then(|m| m.get("content"))
                .is_some_and(|c| c.is_string() || c.is_null())
            {
                p.push("`choices[0].message.content` is neither a string nor null".into());
            }
            if !finish_ok(c.get("finish_reason")) {
                p.push(format!("`choices[0].finish_reason` {} is not one of stop, length, tool_calls, content_filter", c.get("finish_reason").unwrap_or(&Value::Null)));
            }
        }
    }
    p
}

fn finish_ok(v: Option<&Value>) -> bool {
    matches!(
        v.and_then(Value::as_str),
        Some("stop" | "length" | "tool_calls" | "content_filter" | "function_call")
    )
}

fn chunk_problems(v: &Value) -> Vec<String> {
    let mut p = Vec::new();
    if v.get("object").and_then(Value::as_str) != Some("chat.completion.chunk") {
        p.push("`object` is not \"chat.completion.chunk\"".into());
    }
    let Some(choices) = v.get("choices").and_then(Value::as_array) else {
        p.push("`choices` is missing (a usage-only chunk has `choices: []`)".into());
        return p;
    };
    for c in choices {
        if !c.get("delta").is_some_and(Value::is_object) {
            p.push("a choice has no `delta` object".into());
        }
        if let Some(f) = c.get("finish_reason").filter(|f| !f.is_null()) {
            if !finish_ok(Some(f)) {
                p.push(format!("finish_reason {f} is not a known reason"));
            }
        }
    }
    p
}

/// SSE framing: `[DONE]`, well-formed payloads, the content type, the usage chunk.
fn stream(obs: &Observed) -> Vec<Finding> {
    let traces: Vec<(&str, &crate::exchange::StreamTrace)> = obs
        .runs
        .iter()
        .filter_map(|r| match &r.streamed {
            Some(Ok(rec)) => rec.stream.as_ref().map(|t| (r.probe.id.as_str(), t)),
            _ => None,
        })
        .collect();
    if traces.is_empty() {
        return vec![Finding::new(
            checks::SERVER_SSE_DONE,
            Severity::Warning,
            "no streamed probe completed: SSE framing was not checked",
        )];
    }
    let mut out = Vec::new();
    out.push(match traces.iter().find(|(_, t)| !t.done) {
        Some((id, _)) => Finding::new(checks::SERVER_SSE_DONE, Severity::Error, "a stream ended without `data: [DONE]`: OpenAI clients wait for it until the connection closes")
            .with("probe", id),
        None => Finding::pass(checks::SERVER_SSE_DONE, "every stream ends with `data: [DONE]`"),
    });
    let malformed: Vec<String> = traces
        .iter()
        .flat_map(|(id, t)| t.malformed.iter().map(move |m| format!("{id}: {m}")))
        .collect();
    let wrong_type = traces.iter().find(|(_, t)| {
        !t.content_type
            .as_deref()
            .is_some_and(|c| c.starts_with("text/event-stream"))
    });
    out.push(if let Some(m) = malformed.first() {
        Finding::new(
            checks::SERVER_SSE_FRAMING,
            Severity::Error,
            format!("{} stream payload(s) are not JSON", malformed.len()),
        )
        .with("first", m)
    } else if let Some((id, t)) = wrong_type {
        Finding::new(
            checks::SERVER_SSE_FRAMING,
            Severity::Warning,
            "a stream is not served as text/event-stream",
        )
        .with("probe", id)
        .with(
            "content-type",
            t.content_type.clone().unwrap_or_else(|| "(none)".into()),
        )
    } else if traces.iter().any(|(_, t)| t.after_done) {
        Finding::new(
            checks::SERVER_SSE_FRAMING,
            Severity::Warning,
            "a stream sends events after `[DONE]`",
        )
    } else {
        Finding::pass(
            checks::SERVER_SSE_FRAMING,
            "stream payloads are JSON events on text/event-stream",
        )
    });
    out.push(if traces.iter().all(|(_, t)| t.usage_chunk || t.chunks.iter().any(|c| c.get("usage").is_some_and(|u| !u.is_null()))) {
        Finding::pass(checks::SERVER_INCLUDE_USAGE, "streams honour stream_options.include_usage")
    } else {
        Finding::new(checks::SERVER_INCLUDE_USAGE, Severity::Warning, "streams ignore stream_options.include_usage: no usage arrives, so clients must count tokens themselves (latency figures mark N_out as estimated)")
    });
    out
}

/// Usage against what the server itself shows: its own prompt ids and its generated ids.
fn usage(online: &Online, obs: &Observed) -> Finding {
    let mut checked = 0;
    let mut eos_excluded = false;
    for run in &obs.runs {
        let Some(main) = run.main() else { continue };
        let Some(u) = main.usage else {
            return Finding::new(
                checks::SERVER_USAGE,
                Severity::Warning,
                "a non-streamed reply carries no usage",
            )
            .with("probe", &run.probe.id);
        };
        checked += 1;
        if let (Some(p), Some(ids)) = (u.prompt_tokens, &run.server_ids) {
            if p as usize != ids.len() {
                return Finding::new(checks::SERVER_USAGE, Severity::Error, format!("usage.prompt_tokens is {p}, but the server's own tokenization of the prompt has {} tokens", ids.len()))
                    .with("probe", &run.probe.id);
            }
        }
        // Only ids the server reported count here (re-encoded text would blame the server for
        // tokenizer round trips) — or, when it reports none but replied exactly what the
        // reference did, the reference's ids (the fingerprint checks that claim separately).
        let reported = main
            .token_ids
            .clone()
            .or_else(|| {
                main.per_token_logprobs()
                    .and_then(|l| l.iter().map(|x| x.id).collect())
            })
            .or_else(|| {
                run.reference
                    .as_ref()
                    .filter(|r| r.text == main.text && r.finish_reason == main.finish_reason)
                    .and_then(|r| r.token_ids.clone())
            });
        if let (Some(c), Some(ids)) = (u.completion_tokens, reported) {
            let n = ids.len() as u64;
            let stopped = main.finish_reason.as_deref() == Some("stop");
            if c + 1 == n && stopped {
                eos_excluded = true;
            } else if c != n {
                return Finding::new(
                    checks::SERVER_USAGE,
                    Severity::Error,
                    format!("usage.completion_tokens is {c}, but the server generated {n} tokens"),
                )
                .with("probe", &run.probe.id);
            }
        }
        if let (Some(p), Some(c), Some(t)) = (u.prompt_tokens, u.completion_tokens, u.total_tokens)
        {
            if p + c != t {
                return Finding::new(
                    checks::SERVER_USAGE,
                    Severity::Error,
                    format!("usage.total_tokens {t} ≠ prompt_tokens {p} + completion_tokens {c}"),
                )
                .with("probe", &run.probe.id);
            }
        }
    }
    let _ = online;
    if checked == 0 {
        return Finding::new(
            checks::SERVER_USAGE,
            Severity::Warning,
            "no reply to check usage on",
        );
    }
    if eos_excluded {
        return Finding::new(checks::SERVER_USAGE, Severity::Info, "usage.completion_tokens leaves out the token that ended the reply (llama-cpp-python counts this way; llama.cpp and vLLM count it)");
    }
    Finding::pass(
        checks::SERVER_USAGE,
        "usage agrees with the server's own token counts",
    )
}

/// At temperature 0 the streamed reply must equal the non-streamed one.
fn parity(obs: &Observed) -> Finding {
    // A server that samples at temperature 0 on some probe may have sampled on this one too,
    // though its repeats happened to agree: a difference is then no proof of a streaming fault
    // (server.determinism reports the sampling, first).
    let sampling = obs
        .runs
        .iter()
        .any(|r| r.determinism() == Some(Determinism::Sampled));
    let mut compared = 0;
    for run in &obs.runs {
        let (Some(main), Some(Ok(streamed))) = (run.main(), &run.streamed) else {
            continue;
        };
        if run.determinism() == Some(Determinism::Sampled) {
            continue; // unstable replies cannot be compared; server.determinism reports them
        }
        compared += 1;
        if main.text != streamed.text || main.finish_reason != streamed.finish_reason {
            let (severity, why) = match sampling {
                false => (Severity::Error, ""),
                true => (
                    Severity::Warning,
                    " (the server samples at temperature 0 on other probes: this may be that, not the stream)",
                ),
            };
            return Finding::new(
                checks::SERVER_STREAM_PARITY,
                severity,
                format!(
                    "the streamed reply differs from the non-streamed one at temperature 0{why}"
                ),
            )
            .with("probe", &run.probe.id)
            .with(
                "non-streamed",
                format!(
                    "{} ({})",
                    crate::chain::run::probes::show(&main.text),
                    main.finish_reason.as_deref().unwrap_or("-")
                ),
            )
            .with(
                "streamed",
                format!(
                    "{} ({})",
                    crate::chain::run::probes::show(&streamed.text),
                    streamed.finish_reason.as_deref().unwrap_or("-")
                ),
            );
        }
    }
    if compared == 0 {
        return Finding::new(
            checks::SERVER_STREAM_PARITY,
            Severity::Warning,
            "no stable probe to compare streamed and non-streamed replies on",
        );
    }
    Finding::pass(
        checks::SERVER_STREAM_PARITY,
        format!("streamed = non-streamed on {compared} probe(s)"),
    )
}

fn determinism(obs: &Observed) -> Finding {
    let classes: Vec<(&str, Option<Determinism>)> = obs
        .runs
        .iter()
        .map(|r| (r.probe.id.as_str(), r.determinism()))
        .collect();
    let named = |d: Determinism| {
        classes
            .iter()
            .filter(|(_, c)| *c == Some(d))
            .map(|(id, _)| *id)
            .collect::<Vec<_>>()
    };
    let sampled = named(Determinism::Sampled);
    if !sampled.is_empty() {
        let run = obs
            .runs
            .iter()
            .find(|r| r.determinism() == Some(Determinism::Sampled));
        let mut f = Finding::new(checks::SERVER_DETERMINISM, Severity::Error, format!("identical temperature-0 requests get different replies ({} of {} probes): exact snapshots will flake", sampled.len(), classes.len()))
            .with("sampled", sampled.join(", "));
        if let Some(run) = run {
            let texts: Vec<String> = run
                .plain
                .iter()
                .filter_map(|r| r.as_ref().ok())
                .map(|r| crate::chain::run::probes::show(&r.text))
                .collect();
            f = f.with("replies", texts.join(" | "));
        }
        return f;
    }
    let variant = named(Determinism::BatchVariant);
    if !variant.is_empty() {
        return Finding::new(checks::SERVER_DETERMINISM, Severity::Warning, "replies change under concurrent load (batch-variant): compare these prompts with a tolerant comparator")
            .with("batch-variant", variant.join(", "));
    }
    Finding::pass(
        checks::SERVER_DETERMINISM,
        format!(
            "{} probe(s) deterministic alone and under concurrent load",
            classes.len()
        ),
    )
}

/// max_tokens is a hard limit.
async fn max_tokens(online: &Online<'_>, obs: &Observed) -> Finding {
    let Some(run) = obs.runs.first() else {
        return Finding::new(
            checks::SERVER_MAX_TOKENS,
            Severity::Warning,
            "no probe to test max_tokens with",
        );
    };
    let mut req = online.request(&run.probe, online.settings.seed, false);
    req.max_tokens = Some(2);
    match online.http.chat(&req).await {
        Err(e) => Finding::new(
            checks::SERVER_MAX_TOKENS,
            Severity::Error,
            "a request with max_tokens 2 failed",
        )
        .with("error", e),
        Ok(rec) => {
            let n = rec
                .usage
                .and_then(|u| u.completion_tokens)
                .map(|c| c as usize)
                .or_else(|| reply_ids(&rec, online).map(|i| i.len()));
            match n {
                Some(n) if n > 2 => Finding::new(
                    checks::SERVER_MAX_TOKENS,
                    Severity::Error,
                    format!("max_tokens 2 returned {n} tokens"),
                )
                .with("reply", crate::chain::run::probes::show(&rec.text)),
                _ if rec.finish_reason.as_deref() == Some("stop")
                    || rec.finish_reason.as_deref() == Some("length") =>
                {
                    Finding::pass(checks::SERVER_MAX_TOKENS, "max_tokens is honoured")
                }
                _ => Finding::new(
                    checks::SERVER_MAX_TOKENS,
                    Severity::Warning,
                    format!(
                        "max_tokens 2 ended with finish_reason {:?}",
                        rec.finish_reason
                    ),
                ),
            }
        }
    }
}

/// A stop string cuts the reply before it, and is not part of the text.
async fn stop(online: &Online<'_>, obs: &Observed) -> Finding {
    let Some((run, main)) = obs.runs.iter().find_map(|r| {
        r.main()
            .filter(|m| stop_word(&m.text).is_some())
            .map(|m| (r, m))
    }) else {
        return Finding::new(
            checks::SERVER_STOP,
            Severity::Info,
            "no probe reply long enough to test stop strings with",
        );
    };
    let word = stop_word(&main.text).unwrap_or_default();
    let mut req = online.request_text(&run.probe, online.settings.seed, false);
    req.stop = vec![word.clone()];
    let expected: String = main.text[..main.text.find(&word).unwrap_or(0)].to_string();
    match online.http.chat(&req).await {
        Err(e) => Finding::new(
            checks::SERVER_STOP,
            Severity::Error,
            "a request with a stop string failed",
        )
        .with("error", e),
        Ok(rec) if rec.text.contains(&word) => Finding::new(
            checks::SERVER_STOP,
            Severity::Error,
            format!("the stop string {word:?} is in the reply"),
        )
        .with("reply", crate::chain::run::probes::show(&rec.text)),
        Ok(rec)
            if rec.text != expected && run.determinism() == Some(Determinism::Deterministic) =>
        {
            Finding::new(
                checks::SERVER_STOP,
                Severity::Warning,
                format!("with stop {word:?} the reply is not the unstopped reply cut before it"),
            )
            .with("expected", crate::chain::run::probes::show(&expected))
            .with("got", crate::chain::run::probes::show(&rec.text))
        }
        Ok(rec) if rec.finish_reason.as_deref() != Some("stop") => Finding::new(
            checks::SERVER_STOP,
            Severity::Warning,
            format!(
                "a stop string ended the reply with finish_reason {:?}, not \"stop\"",
                rec.finish_reason
            ),
        ),
        Ok(_) => Finding::pass(
            checks::SERVER_STOP,
            format!("the stop string {word:?} cuts the reply before it"),
        ),
    }
}

/// A word from the middle of a reply (not its first), to stop on.
fn stop_word(text: &str) -> Option<String> {
    let words: Vec<&str> = text.split_whitespace().collect();
    let w = words.get(1)?;
    let w: String = w.chars().filter(|c| c.is_alphanumeric()).collect();
    (w.len() >= 2 && text.find(&w)? > 0).then_some(w)
}

/// Bad requests get a 4xx with an OpenAI error body — not a 500, not a hang, not a 200.
async fn bad_requests(online: &Online<'_>) -> Finding {
    let path = "/v1/chat/completions";
    let model = &online.model;
    let cases: [(&str, Result<Vec<u8>, Value>); 3] = [
        ("malformed JSON", Ok(b"{\"model\": ".to_vec())),
        (
            "temperature as a string",
            Err(
                json!({"model": model, "messages": [{"role": "user", "content": "hi"}], "temperature": "hot", "max_tokens": 1}),
            ),
        ),
        ("no messages", Err(json!({"model": model, "max_tokens": 1}))),
    ];
    let mut quirks = Vec::new();
    for (what, body) in cases {
        let r = match body {
            Ok(bytes) => {
                online
                    .http
                    .post_bytes(path, bytes, "application/json")
                    .await
            }
            Err(v) => online.http.post_json(path, &v).await,
        };
        match r {
            Err(e) if e.unreachable() => {
                return Finding::new(
                    checks::SERVER_BAD_REQUESTS,
                    Severity::Error,
                    format!("a bad request ({what}) got no answer"),
                )
                .with("error", e)
            }
            Err(e) => quirks.push(format!("{what}: {e}")),
            Ok(resp) if (400..500).contains(&resp.status) => {
                if resp.json.as_ref().is_none_or(|j| j.get("error").is_none()) {
                    quirks.push(format!(
                        "{what}: {} without an OpenAI error body",
                        resp.status
                    ));
                }
            }
            Ok(resp) => quirks.push(format!("{what}: HTTP {} (expected 4xx)", resp.status)),
        }
    }
    if quirks.is_empty() {
        return Finding::pass(
            checks::SERVER_BAD_REQUESTS,
            "bad requests get 4xx with an error body",
        );
    }
    let mut f = Finding::new(
        checks::SERVER_BAD_REQUESTS,
        Severity::Warning,
        format!(
            "{} bad request(s) are not answered with a 4xx error body",
            quirks.len()
        ),
    );
    for q in quirks {
        f = f.with("case", q);
    }
    f
}
