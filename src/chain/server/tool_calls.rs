//! Boundary 5, the server's tool-call parser: a probe that offers `tools` to a model whose
//! template frames calls (any format `template/reply` reads: Hermes and Mistral JSON, Llama's
//! bare JSON, Qwen3-Coder and GLM XML, MiniMax-M2, DeepSeek-V3.x and DSML, Kimi-K2, Gemma 4,
//! harmony) must get the call the model wrote back in `tool_calls`: every call of a parallel
//! turn in order, each with an `id`, its arguments a JSON string that parses to what the
//! model wrote, typed by the tool's schema as the family's reference parser types them, each
//! value kept byte for byte (whitespace, unicode, a closing marker inside a string), and the
//! streamed deltas adding up to the same calls. What users report when the parser is missing,
//! is another family's, or mangles its output: the call returned as text in `content`,
//! arguments that are not JSON, values stringified (vllm#47906) or stripped (sglang#41317), a
//! call ended at a marker inside a value (ollama#18659), parallel calls collapsed, a call cut
//! by the token limit returned as an empty message (ollama PR 17250).
//!
//! What the model wrote is read from the reply's own token ids when the server returns them,
//! else from the reference's greedy reply on the same chat: so a reply with no call is told
//! apart as the model's (it did not call) or the server's (it called, and the API lost it).
use crate::chain::run::probes::{show, Observed, Online, ProbeRun};
use crate::exchange::Record;
use crate::template::calls::ToolCall;
use crate::template::reply::{CallFormat, Reader};
use crate::verdict::checks;
use crate::verdict::{Boundary, Finding, Severity};

/// What one reply shows of the server's tool-call parser.
#[derive(Debug, Clone, PartialEq)]
pub enum Parse {
    /// The call is in `content` as text: no parser, or one that reads another framing.
    AsText(String),
    /// `tool_calls` whose arguments are not a JSON object, or a call without its `id`.
    BrokenArguments(String),
    /// A value the schema types came back as a string (or another type).
    Mistyped(String),
    /// A value came back changed: whitespace stripped, cut at a marker inside it.
    Altered(String),
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
    let reader = Reader::of(&serving.template, &serving.special, &serde_json::Map::new());
    if reader.format.is_none() {
        return Some(Finding::new(
            checks::SERVER_TOOL_CALL_PARSE,
            Severity::Info,
            "the template writes calls in no format chatgate reads (docs/reasoning-and-tools.md lists those it does), so the parse is not checked",
        ));
    }
    let fixes = Fixes::of(&reader, framing.tools.call.as_ref());
    // What the model wrote, read as a correct server reads it (`chatgate parse-reply`).
    let emitted_by = |rec: &Record, tools: &[serde_json::Value]| -> Option<Vec<ToolCall>> {
        let ids = rec.token_ids.as_deref()?;
        let text = serving.tokenizer.decode(ids, false).ok()?;
        Some(calls_of(&reader.read(&text, tools).message))
    };
    if let Some(f) = refused(&fixes, &runs, broken) {
        return Some(f);
    }
    let mut seen: Vec<(String, Parse)> = Vec::new();
    let mut parity = None;
    for run in &runs {
        let tools = run.probe.tools.as_deref().unwrap_or_default();
        // What the model wrote: the reply's own tokens, else the reference's reply.
        let reference = run.reference.as_ref().and_then(|r| {
            emitted_by(r, tools)
                .or_else(|| Some(calls_of(&reader.read_calls(&r.text, tools).message)))
                .filter(|c| !c.is_empty())
                .or_else(|| {
                    r.tool_calls
                        .iter()
                        .map(|c| ToolCall::from_openai(c).ok())
                        .collect()
                })
        });
        let streamed = run.streamed.as_ref().and_then(|r| r.as_ref().ok());
        for (how, rec) in [("reply", run.main()), ("streamed reply", streamed)] {
            let Some(rec) = rec else { continue };
            let emitted = emitted_by(rec, tools).or_else(|| reference.clone());
            let at = format!("probe {} ({how})", run.probe.id);
            let judged = Judge {
                reader: &reader,
                tools,
            };
            seen.push((at, judged.judge(rec, emitted.as_deref())));
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
    let mut f = finding(&fixes, &reader, &seen, broken);
    if f.severity != broken {
        if let Some(cut) = cut_inside_a_call(obs, &reader, serving, broken) {
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
fn refused(fixes: &Fixes, runs: &[&ProbeRun], severity: Severity) -> Option<Finding> {
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
        .with("fix", fixes.serve()),
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
/// partial call, `finish_reason` length): a parser that raises on the unfinished call turns
/// it into a server error (transformers serve 5.23: HTTP 500 from its response parser), one
/// that drops it returns an empty message (ollama PR 17250: a GLM call missing its closing
/// tag came back as an empty success).
fn cut_inside_a_call(
    obs: &Observed,
    reader: &Reader,
    serving: &crate::chain::run::context::Pipeline,
    severity: Severity,
) -> Option<Finding> {
    use crate::endpoint::openai::CallError;
    let (probe, reply) = obs.fields.tool_cut.as_ref()?;
    let tokens = crate::chain::server::fields::TOOL_CUT_TOKENS;
    let layer = "the server's tool-call parser (it fails on the unfinished call instead of returning the text)";
    let fix = "give tool-calling requests a max_tokens that fits a whole call; the server should return the partial text (or the partial call) with finish_reason \"length\"";
    match reply {
        Err(CallError::Status { status, body, .. }) if *status >= 500 => Some(
            Finding::new(
                checks::SERVER_TOOL_CALL_PARSE,
                severity,
                format!(
                    "the server fails with HTTP {status} when the token budget cuts a reply inside a tool call (probe {probe}, max_tokens {tokens}): {}",
                    show(body)
                ),
            )
            .with("layer", layer)
            .with("fix", fix),
        ),
        Ok(rec) if rec.text.trim().is_empty() && rec.tool_calls.is_empty() && rec.reasoning.is_empty() => {
            // Empty is right only when the model wrote nothing a reader keeps: known from the
            // reply's own ids (decoded with the special tokens a parser reads), else from the
            // reference's greedy reply to the same chat, as far as the budget goes.
            let ids = match rec.token_ids.as_deref() {
                Some(ids) => ids.to_vec(),
                None => {
                    let run = obs.runs.iter().find(|r| &r.probe.id == probe)?;
                    let reference = run.reference.as_ref()?.token_ids.as_deref()?;
                    let n = rec
                        .usage
                        .as_ref()
                        .and_then(|u| u.completion_tokens)
                        .map_or(tokens as usize, |n| n as usize);
                    reference[..n.min(reference.len())].to_vec()
                }
            };
            let text = serving.tokenizer.decode(&ids, false).ok()?;
            let marker = reader.marker();
            let opened = !marker.is_empty() && text.contains(marker);
            // What the family's reference parser returns for the cut text: where even it reads
            // nothing (vLLM's qwen3_coder on `<tool_call><function`), empty is the reference.
            let tools = obs
                .runs
                .iter()
                .find(|r| &r.probe.id == probe)
                .and_then(|r| r.probe.tools.clone())
                .unwrap_or_default();
            let expected = reader.read(&text, &tools).message;
            let readable = expected.content.is_some_and(|c| !c.trim().is_empty())
                || !expected.tool_calls.is_empty();
            (opened && readable).then(|| {
                Finding::new(
                    checks::SERVER_TOOL_CALL_PARSE,
                    severity,
                    format!(
                        "the server returns an empty message (no content, no calls) when the token budget cuts a reply inside a tool call (probe {probe}, max_tokens {tokens}); the model wrote {}",
                        show(&text)
                    ),
                )
                .with("layer", "the server's tool-call parser (it drops a call that has no closing marker, and its text with it)")
                .with("fix", fix)
            })
        }
        _ => None,
    }
}

/// The calls of a message read by the reader (arguments as the family's parser types them).
pub fn calls_of(m: &crate::template::reply::Message) -> Vec<ToolCall> {
    m.tool_calls
        .iter()
        .map(|c| ToolCall {
            name: c.name.clone(),
            arguments: c.arguments.clone(),
        })
        .collect()
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

/// How one reply is judged: by the template's reader, against the tools its probe offers.
pub struct Judge<'a> {
    pub reader: &'a Reader,
    pub tools: &'a [serde_json::Value],
}

impl Judge<'_> {
    /// One reply. `emitted`: the calls the model wrote, when known.
    pub fn judge(&self, rec: &Record, emitted: Option<&[ToolCall]>) -> Parse {
        let in_content = calls_of(&self.reader.read_calls(&rec.text, self.tools).message);
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
        if let Some(c) = rec
            .tool_calls
            .iter()
            .find(|c| c["id"].as_str().is_none_or(str::is_empty))
        {
            return Parse::BrokenArguments(format!(
                "the call {} has no `id` (a client answers a call by its id: the tool result's `tool_call_id`)",
                c["function"]["name"]
            ));
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
        for (e, a) in emitted.iter().zip(&api) {
            if e.name != a.name {
                return Parse::Lost(format!(
                    "the model wrote {}({}) and the reply carries {}({}){}",
                    e.name,
                    e.arguments,
                    a.name,
                    a.arguments,
                    if emitted.iter().any(|x| x.name == a.name) {
                        " (the calls' order changed)"
                    } else {
                        ""
                    }
                ));
            }
            if e.arguments != a.arguments {
                return self.arguments_differ(e, a);
            }
        }
        Parse::Parsed(api.len())
    }

    /// How a call's arguments came back other than the model wrote them.
    fn arguments_differ(&self, e: &ToolCall, a: &ToolCall) -> Parse {
        let lost = || {
            Parse::Lost(format!(
                "the model wrote {}({}) and the reply carries {}({})",
                e.name, e.arguments, a.name, a.arguments
            ))
        };
        let (Some(want), Some(got)) = (e.arguments.as_object(), a.arguments.as_object()) else {
            return lost();
        };
        let closer = self.reader.closer();
        for (key, w) in want {
            let at = format!("`{}` argument `{key}`", e.name);
            let Some(g) = got.get(key) else {
                let cut = want.values().any(|v| {
                    v.as_str()
                        .is_some_and(|s| !closer.is_empty() && s.contains(closer))
                });
                return match cut {
                    true => Parse::Altered(format!(
                        "{at} is missing: the call was ended early at the {closer:?} the model wrote inside a value ({}({}) written, {}({}) returned)",
                        e.name, e.arguments, a.name, a.arguments
                    )),
                    false => lost(),
                };
            };
            if g == w {
                continue;
            }
            let written = w.as_str();
            let returned = g.as_str();
            return match (written, returned) {
                (None, Some(text))
                    if serde_json::from_str::<serde_json::Value>(text.trim()).ok().as_ref()
                        == Some(w) =>
                {
                    Parse::Mistyped(format!(
                        "{at} is the string {g} where the model wrote {w} and the tool's schema says {}: values stringified",
                        schema_type(self.tools, &e.name, key).unwrap_or_else(|| "a non-string".into())
                    ))
                }
                (Some(w_text), Some(g_text)) if w_text.trim() == g_text.trim() => Parse::Altered(format!(
                    "{at} came back {g} where the model wrote {w}: whitespace stripped (values must be kept byte for byte)"
                )),
                (Some(w_text), Some(g_text))
                    if !closer.is_empty()
                        && w_text.starts_with(g_text)
                        && w_text[g_text.len()..].starts_with(closer) =>
                {
                    Parse::Altered(format!(
                        "{at} came back {g} where the model wrote {w}: the call was ended at the {closer:?} inside the value"
                    ))
                }
                _ if std::mem::discriminant(g) != std::mem::discriminant(w) => Parse::Mistyped(format!(
                    "{at} came back as {g} where the model wrote {w}{}",
                    schema_type(self.tools, &e.name, key)
                        .map(|t| format!(" (the tool's schema says {t})"))
                        .unwrap_or_default()
                )),
                _ => lost(),
            };
        }
        lost()
    }
}

/// The JSON-schema type a tool's parameter declares.
fn schema_type(tools: &[serde_json::Value], name: &str, key: &str) -> Option<String> {
    let props = crate::template::reply::schema::properties(tools, name)?;
    let t = &props.get(key)?["type"];
    Some(match t {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    })
}

fn finding(
    fixes: &Fixes,
    reader: &Reader,
    seen: &[(String, Parse)],
    broken_severity: Severity,
) -> Finding {
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
    let broken = seen
        .iter()
        .find(|(_, s)| !matches!(s, Parse::Parsed(_) | Parse::NoCall));
    let error = |message: String, layer: &str, fix: String| {
        Finding::new(checks::SERVER_TOOL_CALL_PARSE, broken_severity, message)
            .with("layer", layer)
            .with("fix", fix)
    };
    let f = match broken {
        Some((at, Parse::AsText(why))) => error(
            format!("the server returns the model's tool call as text ({at}: {why}): its tool-call parser is missing or reads another framing"),
            "the server's tool-call parser (the model wrote the call as its template frames it)",
            fixes.serve(),
        ),
        Some((at, Parse::BrokenArguments(why))) => error(
            format!("the server's tool calls carry what clients cannot use ({at}: {why})"),
            "the server's tool-call parser (it found the call and wrote it wrong)",
            "each call needs an `id` and `function.arguments` a string of JSON (json.dumps, not str() of a dict); check the parser for this model's framing".into(),
        ),
        Some((at, Parse::Mistyped(why))) => error(
            format!("the server's tool calls carry arguments of the wrong type ({at}: {why})"),
            "the server's tool-call parser (it reads the call and does not type its values by the tool's schema)",
            format!("{}; `chatgate parse-reply` prints the arguments a correct parser returns for this completion", fixes.upgrade()),
        ),
        Some((at, Parse::Altered(why))) => error(
            format!("the server's tool calls do not keep the model's argument values ({at}: {why})"),
            "the server's tool-call parser (it changes the values it reads)",
            format!("{}; `chatgate parse-reply` prints the arguments a correct parser returns for this completion", fixes.upgrade()),
        ),
        Some((at, Parse::Lost(why))) => error(
            format!("the server loses the model's tool calls ({at}: {why})"),
            "the server's tool-call parser or API (the model wrote the calls; the reply does not carry them)",
            format!("{}; a parser that keeps only the first call collapses parallel calls", fixes.serve()),
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
                "the tool calls the model writes come back in `tool_calls`, each with an id, its arguments JSON typed and kept as the model wrote them, streamed and not{}",
                parallel_kept(seen)
            ),
        ),
    };
    f.with("replies", tally)
        .with("framing", reader.describe().join("; "))
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

/// The server flags that run this format's parser.
struct Fixes {
    vllm: String,
    llama: Option<&'static str>,
}

impl Fixes {
    fn of(reader: &Reader, json: Option<&crate::template::framing::Call>) -> Fixes {
        let parser = json.and_then(|c| c.parser);
        let vllm = match reader.format {
            Some(CallFormat::Json) | None => parser.and_then(|p| p.vllm).unwrap_or("hermes"),
            Some(f) => f.vllm_parser(),
        };
        Fixes {
            vllm: vllm.to_string(),
            llama: parser.and_then(|p| p.llama_cpp),
        }
    }

    /// How to serve with the parser enabled.
    fn serve(&self) -> String {
        let llama = self
            .llama
            .map(|l| format!("llama-server --jinja (its {l} format)"))
            .unwrap_or_else(|| "llama-server --jinja".into());
        format!(
            "serve with vLLM --enable-auto-tool-choice --tool-call-parser {}, or {llama}; llama-cpp-python parses calls only with a function-calling chat format",
            self.vllm
        )
    }

    /// A parser that is there and reads wrong: the reference parser's version.
    fn upgrade(&self) -> String {
        format!(
            "serve with a parser that keeps the model's values and types them by the schema (vLLM --tool-call-parser {} as of 0.32, llama-server --jinja)",
            self.vllm
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Qwen2.5's template: Hermes `<tool_call>` JSON.
    fn hermes() -> Reader {
        let source = include_str!("../../../tests/corpus/templates/Qwen-Qwen2.5-7B-Instruct.jinja");
        let template = crate::template::ChatTemplate::new(source).expect("template");
        let special = crate::template::SpecialTokens {
            eos_token: Some("<|im_end|>".into()),
            ..Default::default()
        };
        Reader::of(&template, &special, &serde_json::Map::new())
    }

    fn tools() -> Vec<serde_json::Value> {
        vec![
            json!({"type": "function", "function": {"name": "get_weather", "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}, "note": {"type": "string"}},
            }}}),
        ]
    }

    fn call(arguments: serde_json::Value) -> ToolCall {
        ToolCall {
            name: "get_weather".into(),
            arguments,
        }
    }

    fn weather() -> ToolCall {
        call(json!({"city": "Paris"}))
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
        let reader = hermes();
        let tools = tools();
        let j = Judge {
            reader: &reader,
            tools: &tools,
        };
        let written = [weather()];
        let call_text = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
        // Parsed.
        let ok = reply("", vec![weather().to_openai("call_1")]);
        assert_eq!(j.judge(&ok, Some(&written)), Parse::Parsed(1));
        // As text.
        assert!(matches!(
            j.judge(&reply(call_text, vec![]), Some(&written)),
            Parse::AsText(_)
        ));
        // Arguments as a Python dict.
        let mut bad = weather().to_openai("call_1");
        bad["function"]["arguments"] = json!("{'city': 'Paris'}");
        assert!(matches!(
            j.judge(&reply("", vec![bad]), Some(&written)),
            Parse::BrokenArguments(_)
        ));
        // No id.
        let mut no_id = weather().to_openai("call_1");
        no_id["id"] = json!(null);
        assert!(matches!(
            j.judge(&reply("", vec![no_id]), Some(&written)),
            Parse::BrokenArguments(why) if why.contains("`id`")
        ));
        // Two calls written, one returned.
        let two = [weather(), weather()];
        assert!(matches!(
            j.judge(&ok, Some(&two)),
            Parse::Lost(why) if why.contains("collapsed")
        ));
        // No call written, none returned: the model's choice.
        assert_eq!(j.judge(&reply("Sunny.", vec![]), Some(&[])), Parse::NoCall);
        // A call written, nothing returned.
        assert!(matches!(
            j.judge(&reply("", vec![]), Some(&written)),
            Parse::Lost(_)
        ));
    }

    #[test]
    fn values_changed_by_the_parser_are_named() {
        let reader = hermes();
        let tools = tools();
        let j = Judge {
            reader: &reader,
            tools: &tools,
        };
        let written = [call(
            json!({"city": " Paris ", "days": 3, "note": "a</tool_call>b"}),
        )];
        let returned = |args: serde_json::Value| reply("", vec![call(args).to_openai("call_1")]);
        // Stringified.
        let got = j.judge(
            &returned(json!({"city": " Paris ", "days": "3", "note": "a</tool_call>b"})),
            Some(&written),
        );
        assert!(
            matches!(&got, Parse::Mistyped(w) if w.contains("integer") && w.contains("stringified")),
            "{got:?}"
        );
        // Whitespace stripped.
        let got = j.judge(
            &returned(json!({"city": "Paris", "days": 3, "note": "a</tool_call>b"})),
            Some(&written),
        );
        assert!(
            matches!(&got, Parse::Altered(w) if w.contains("whitespace")),
            "{got:?}"
        );
        // Cut at the marker inside a value.
        let got = j.judge(
            &returned(json!({"city": " Paris ", "days": 3, "note": "a"})),
            Some(&written),
        );
        assert!(
            matches!(&got, Parse::Altered(w) if w.contains("</tool_call>")),
            "{got:?}"
        );
        // The same values: parsed.
        assert_eq!(
            j.judge(&returned(written[0].arguments.clone()), Some(&written)),
            Parse::Parsed(1)
        );
    }
}
