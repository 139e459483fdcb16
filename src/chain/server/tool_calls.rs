//! Boundary 5, the server's tool-call parser: a probe that offers `tools` to a model whose
//! template frames calls as JSON in text (`<tool_call>`, `[TOOL_CALLS]`, Llama's bare JSON;
//! template/framing.rs) must get the call the model wrote back in `tool_calls`, its arguments a
//! JSON string that parses to what the model wrote, every call of a parallel turn kept, and the
//! streamed deltas adding up to the same calls. What users report when the parser is missing,
//! is another family's, or the API mangles its output: the call returned as text in `content`,
//! arguments that are not JSON, parallel calls collapsed into one, streamed deltas that do not
//! assemble.
//!
//! What the model wrote is read from the reply's own token ids when the server returns them,
//! else from the reference's greedy reply on the same chat: so a reply with no call is told
//! apart as the model's (it did not call) or the server's (it called, and the API lost it).
use crate::chain::run::probes::{show, Observed, Online, ProbeRun};
use crate::exchange::Record;
use crate::template::calls::ToolCall;
use crate::template::framing::{Call, Splitter};
use crate::verdict::checks;
use crate::verdict::{Boundary, Finding, Severity};

/// What one reply shows of the server's tool-call parser.
#[derive(Debug, Clone, PartialEq)]
pub enum Parse {
    /// The call is in `content` as text: no parser, or one that reads another framing.
    AsText(String),
    /// `tool_calls` whose arguments are not a JSON object.
    BrokenArguments(String),
    /// The model called and the reply carries other calls (fewer: collapsed; or none).
    Lost(String),
    /// The calls the model wrote, in `tool_calls`.
    Parsed(usize),
    /// The model wrote no call: nothing for the parser to do.
    NoCall,
}

/// `server.tool-call-parse` over the replies of every probe that offers tools; None when no
/// probe does.
pub fn check(online: &Online, obs: &Observed) -> Option<Finding> {
    let serving = online.ctx.serving.as_ref()?;
    let runs: Vec<&ProbeRun> = obs
        .runs
        .iter()
        .filter(|r| r.probe.tools.as_ref().is_some_and(|t| !t.is_empty()))
        .collect();
    let first = runs.first()?;
    let framing = obs.framing.clone()?;
    // What the client does not rely on is a warning (`[client] relies_on`).
    let broken = if online.ctx.suite.client_relies_on("tool_calls") {
        Severity::Error
    } else {
        Severity::Warning
    };
    if !framing.tools.offered {
        return Some(
            Finding::new(
                checks::SERVER_TOOL_CALL_PARSE,
                broken,
                format!(
                    "probe {} offers tools and the chat template never shows them to the model: no server parser can return a call it was not offered",
                    first.probe.id
                ),
            )
            .blaming(Boundary::Template)
            .with("layer", "the chat template (it does not render `tools`)")
            .with("fix", "serve with a template that renders the request's tools (the model's tool-use template), or do not rely on tool calls with this model"),
        );
    }
    let Some(call) = framing.tools.call.filter(Call::parseable) else {
        return Some(Finding::new(
            checks::SERVER_TOOL_CALL_PARSE,
            Severity::Info,
            "the template writes calls with the function's name outside their JSON (DeepSeek, harmony): chatgate does not read that framing yet, so the parse is not checked",
        ));
    };
    let splitter = framing.reasoning.as_ref().and_then(Splitter::new);
    let emitted_by = |rec: &Record| -> Option<Vec<ToolCall>> {
        let ids = rec.token_ids.as_deref()?;
        let text = serving.tokenizer.decode(ids, false).ok()?;
        let answer = match splitter.clone() {
            Some(s) => s.split(&text).1,
            None => text,
        };
        Some(call.parse(&answer)?.calls)
    };
    if let Some(f) = refused(&call, &runs, broken) {
        return Some(f);
    }
    let mut seen: Vec<(String, Parse)> = Vec::new();
    let mut parity = None;
    for run in &runs {
        // What the model wrote: the reply's own tokens, else the reference's reply.
        let reference = run
            .reference
            .as_ref()
            .and_then(|r| emitted_by(r).or_else(|| call.parse(&r.text).map(|p| p.calls)));
        let streamed = run.streamed.as_ref().and_then(|r| r.as_ref().ok());
        for (how, rec) in [("reply", run.main()), ("streamed reply", streamed)] {
            let Some(rec) = rec else { continue };
            let emitted = emitted_by(rec).or_else(|| reference.clone());
            let at = format!("probe {} ({how})", run.probe.id);
            seen.push((at, judge(&call, rec, emitted.as_deref())));
        }
        if let (Some(plain), Some(streamed)) = (run.main(), streamed) {
            let same =
                run.determinism() == Some(crate::chain::run::probes::Determinism::Deterministic);
            let (a, b) = (api_calls(plain), api_calls(streamed));
            if same && parity.is_none() && a != b && plain.text.trim() == streamed.text.trim() {
                parity = Some(format!(
                    "probe {}: {} streamed, {} not",
                    run.probe.id,
                    shown(&b),
                    shown(&a)
                ));
            }
        }
    }
    let mut f = finding(&call, &seen, broken);
    if f.severity != broken {
        if let Some(cut) = cut_inside_a_call(obs, broken) {
            let replies = f.evidence.get("replies").cloned().unwrap_or_default();
            f = cut.with("replies", replies);
        }
    }
    Some(match parity {
        Some(why) if crate::chain::run::probes::parity_may_replace(f.severity, broken) => Finding::new(
            checks::SERVER_TOOL_CALL_PARSE,
            broken,
            format!("the streamed tool-call deltas do not add up to the whole reply's calls ({why})"),
        )
        .with("layer", "the server's streaming tool-call parser")
        .with("fix", "each delta must carry only the new part of `function.arguments` (clients concatenate them); check the server's streaming parser for this model's framing"),
        _ => f,
    })
}

/// Every request that offers tools refused with a 4xx: the server will not take tools at all
/// (vLLM without `--enable-auto-tool-choice`: "\"auto\" tool choice requires
/// --enable-auto-tool-choice and --tool-call-parser to be set"). The parser layer, with the
/// flags that enable it; not "the model did not call" (no reply was seen).
fn refused(call: &Call, runs: &[&ProbeRun], severity: Severity) -> Option<Finding> {
    use crate::endpoint::openai::CallError;
    let replies: Vec<&std::result::Result<Record, CallError>> = runs
        .iter()
        .flat_map(|r| r.plain.iter().chain(r.streamed.iter()))
        .collect();
    if replies.is_empty() {
        return None;
    }
    let mut first = None;
    for r in &replies {
        match r {
            Err(CallError::Status { status, body, .. }) if (400..500).contains(status) => {
                first.get_or_insert_with(|| format!("HTTP {status}: {}", error_message(body)));
            }
            _ => return None,
        }
    }
    Some(
        Finding::new(
            checks::SERVER_TOOL_CALL_PARSE,
            severity,
            format!(
                "the server refuses every request that offers tools ({} of {}; {}): its tool-call parser is not enabled",
                replies.len(),
                replies.len(),
                first.unwrap_or_default()
            ),
        )
        .with("layer", "the server's tool-call parser (not enabled: it refuses the request before the model runs)")
        .with("fix", fix(call)),
    )
}

/// The message of an OpenAI-style error body (`error.message`, or FastAPI's `detail`), else
/// the body's start.
fn error_message(body: &str) -> String {
    let v: Option<serde_json::Value> = serde_json::from_str(body).ok();
    let message = v.as_ref().and_then(|v| {
        v.pointer("/error/message")
            .or_else(|| v.get("message"))
            .or_else(|| v.get("detail"))
            .and_then(|m| m.as_str())
            .map(str::to_string)
    });
    match message {
        Some(m) => m.chars().take(200).collect(),
        None => show(body),
    }
}

/// A reply the token budget cuts inside the model's call must still be a reply (its text, a
/// partial call, `finish_reason` length): a parser that raises on the unfinished JSON turns it
/// into a server error (transformers serve 5.23: HTTP 500 from its response parser).
fn cut_inside_a_call(obs: &Observed, severity: Severity) -> Option<Finding> {
    use crate::endpoint::openai::CallError;
    let (probe, reply) = obs.fields.tool_cut.as_ref()?;
    let Err(CallError::Status { status, body, .. }) = reply else {
        return None;
    };
    (*status >= 500).then(|| {
        Finding::new(
            checks::SERVER_TOOL_CALL_PARSE,
            severity,
            format!(
                "the server fails with HTTP {status} when the token budget cuts a reply inside a tool call (probe {probe}, max_tokens {}): {}",
                crate::chain::server::fields::TOOL_CUT_TOKENS,
                show(body)
            ),
        )
        .with("layer", "the server's tool-call parser (it raises on the unfinished call instead of returning the text)")
        .with("fix", "give tool-calling requests a max_tokens that fits a whole call; the server should return the partial text with finish_reason \"length\"")
    })
}

/// The reply's `tool_calls`, each read back (Err: why its arguments are not JSON).
fn api_calls(rec: &Record) -> Vec<Result<ToolCall, String>> {
    rec.tool_calls.iter().map(ToolCall::from_openai).collect()
}

fn shown(calls: &[Result<ToolCall, String>]) -> String {
    let parts: Vec<String> = calls
        .iter()
        .map(|c| match c {
            Ok(c) => format!("{}({})", c.name, c.arguments),
            Err(e) => e.clone(),
        })
        .collect();
    if parts.is_empty() {
        "no calls".into()
    } else {
        parts.join(", ")
    }
}

/// One reply. `emitted`: the calls the model wrote, when known.
pub fn judge(call: &Call, rec: &Record, emitted: Option<&[ToolCall]>) -> Parse {
    let in_content = call.parse(&rec.text).map(|p| p.calls).unwrap_or_default();
    if let Some(c) = in_content.first() {
        return Parse::AsText(format!(
            "`content` holds the call {}({}) as text: {}",
            c.name,
            c.arguments,
            show(&rec.text)
        ));
    }
    let api = api_calls(rec);
    if let Some(Err(why)) = api.iter().find(|c| c.is_err()) {
        return Parse::BrokenArguments(why.clone());
    }
    let api: Vec<ToolCall> = api.into_iter().filter_map(Result::ok).collect();
    // Unknown or none: the model's own calls cannot be compared, only counted.
    let emitted = match emitted {
        Some(e) if !e.is_empty() => e,
        _ if api.is_empty() => return Parse::NoCall,
        _ => return Parse::Parsed(api.len()),
    };
    if api.len() < emitted.len() {
        return Parse::Lost(format!(
            "the model wrote {} call(s) and the reply carries {}{}",
            emitted.len(),
            api.len(),
            if api.is_empty() {
                ""
            } else {
                " (parallel calls collapsed)"
            }
        ));
    }
    let differs = emitted
        .iter()
        .zip(&api)
        .find(|(e, a)| e.name != a.name || e.arguments != a.arguments);
    if let Some((e, a)) = differs {
        return Parse::Lost(format!(
            "the model wrote {}({}) and the reply carries {}({})",
            e.name, e.arguments, a.name, a.arguments
        ));
    }
    Parse::Parsed(api.len())
}

fn finding(call: &Call, seen: &[(String, Parse)], broken_severity: Severity) -> Finding {
    let parsed = seen
        .iter()
        .filter(|(_, s)| matches!(s, Parse::Parsed(_)))
        .count();
    let none = seen
        .iter()
        .filter(|(_, s)| matches!(s, Parse::NoCall))
        .count();
    let tally = format!(
        "{} replies to probes with tools: {parsed} with their calls parsed, {none} without a call",
        seen.len()
    );
    let broken = seen.iter().find(|(_, s)| {
        matches!(
            s,
            Parse::AsText(_) | Parse::BrokenArguments(_) | Parse::Lost(_)
        )
    });
    let error = |message: String, layer: &str, fix: String| {
        Finding::new(checks::SERVER_TOOL_CALL_PARSE, broken_severity, message)
            .with("layer", layer)
            .with("fix", fix)
    };
    let f = match broken {
        Some((at, Parse::AsText(why))) => error(
            format!("the server returns the model's tool call as text ({at}: {why}): its tool-call parser is missing or reads another framing"),
            "the server's tool-call parser (the model wrote the call as its template frames it)",
            fix(call),
        ),
        Some((at, Parse::BrokenArguments(why))) => error(
            format!("the server's tool calls carry arguments clients cannot parse ({at}: {why})"),
            "the server's tool-call parser (it found the call and wrote its arguments wrong)",
            "`function.arguments` must be a string of JSON (json.dumps, not str() of a dict); check the parser for this model's framing".into(),
        ),
        Some((at, Parse::Lost(why))) => error(
            format!("the server loses the model's tool calls ({at}: {why})"),
            "the server's tool-call parser or API (the model wrote the calls; the reply does not carry them)",
            format!("{}; a parser that keeps only the first call collapses parallel calls", fix(call)),
        ),
        _ if parsed == 0 => Finding::new(
            checks::SERVER_TOOL_CALL_PARSE,
            Severity::Warning,
            "no reply to a probe with tools holds a call: the model did not call (the model layer, not the parser), so the parse is not tested",
        )
        .with("fix", "add a probe the reference model answers with a call (the checks then test the server's parser on it)"),
        _ => Finding::pass(
            checks::SERVER_TOOL_CALL_PARSE,
            format!(
                "the tool calls the model writes come back in `tool_calls` with JSON arguments, streamed and not{}",
                parallel_kept(seen)
            ),
        ),
    };
    f.with("replies", tally)
        .with("framing", format!("{:?} … {:?}", call.open, call.close))
}

/// "; parallel calls kept (N in one reply)" where a reply held more than one call.
fn parallel_kept(seen: &[(String, Parse)]) -> String {
    let most = seen
        .iter()
        .filter_map(|(_, s)| match s {
            Parse::Parsed(n) => Some(*n),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    if most > 1 {
        format!("; parallel calls kept ({most} in one reply)")
    } else {
        String::new()
    }
}

fn fix(call: &Call) -> String {
    let vllm = call
        .parser
        .and_then(|p| p.vllm)
        .map(|v| format!("vLLM --enable-auto-tool-choice --tool-call-parser {v}"))
        .unwrap_or_else(|| "vLLM with the tool-call parser for this framing".into());
    let llama = call
        .parser
        .and_then(|p| p.llama_cpp)
        .map(|l| format!("llama-server --jinja (its {l} format)"))
        .unwrap_or_else(|| "llama-server --jinja".into());
    format!("serve with {vllm}, or {llama}; llama-cpp-python parses calls only with a function-calling chat format")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn hermes() -> Call {
        Call {
            open: "<tool_call>\n".into(),
            close: "\n</tool_call>".into(),
            arguments_key: Some("arguments".into()),
            parallel: true,
            rendered: String::new(),
            parser: None,
        }
    }

    fn weather() -> ToolCall {
        ToolCall {
            name: "get_weather".into(),
            arguments: json!({"city": "Paris"}),
        }
    }

    fn reply(content: &str, calls: Vec<serde_json::Value>) -> Record {
        Record {
            text: content.into(),
            tool_calls: calls,
            ..Record::new()
        }
    }

    #[test]
    fn each_way_a_parser_fails_is_told_apart() {
        let c = hermes();
        let written = [weather()];
        let call_text = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
        // Parsed.
        let ok = reply("", vec![weather().to_openai("call_1")]);
        assert_eq!(judge(&c, &ok, Some(&written)), Parse::Parsed(1));
        // As text.
        assert!(matches!(
            judge(&c, &reply(call_text, vec![]), Some(&written)),
            Parse::AsText(_)
        ));
        // Arguments as a Python dict.
        let mut bad = weather().to_openai("call_1");
        bad["function"]["arguments"] = json!("{'city': 'Paris'}");
        assert!(matches!(
            judge(&c, &reply("", vec![bad]), Some(&written)),
            Parse::BrokenArguments(_)
        ));
        // Two calls written, one returned.
        let two = [weather(), weather()];
        assert!(matches!(
            judge(&c, &ok, Some(&two)),
            Parse::Lost(why) if why.contains("collapsed")
        ));
        // No call written, none returned: the model's choice.
        assert_eq!(
            judge(&c, &reply("Sunny.", vec![]), Some(&[])),
            Parse::NoCall
        );
        // A call written, nothing returned.
        assert!(matches!(
            judge(&c, &reply("", vec![]), Some(&written)),
            Parse::Lost(_)
        ));
    }
}
