//! Template robustness over the message shapes real OpenAI clients send: tool calls with
//! dict and with string arguments, tool results, `content: null`, content-part arrays,
//! `reasoning_content`, chats without a system message, a system message mid-chat,
//! consecutive turns of one role (the shapes the suite uses are read from its conversations,
//! replay prompts and `[client]` recording). Each is rendered with the serving template exactly as
//! transformers would (its input preprocessing included) and classed: renders, raises (with
//! the template's message) or silently drops content. A shape the suite itself uses that
//! raises is an error (the deploy will fail on real traffic); the others are warnings.
use crate::verdict::checks;
use std::collections::BTreeSet;

use serde_json::{json, Value};

use crate::chain::run::context::{limit_is_bad_input, Context, Pipeline};
use crate::error::Result;
use crate::verdict::{Finding, Severity};

/// One message shape: a name, the chat, and the texts a faithful render must contain.
struct Shape {
    name: &'static str,
    messages: Vec<Value>,
    with_tools: bool,
    /// Content that must reach the prompt (reasoning is allowed to be dropped: many templates
    /// strip past reasoning on purpose).
    must_keep: Vec<&'static str>,
}

fn tool_def() -> Value {
    json!([{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])
}

fn tool_call(arguments: Value) -> Value {
    json!({"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": arguments}}]})
}

fn user(t: &str) -> Value {
    json!({"role": "user", "content": t})
}

fn assistant(t: &str) -> Value {
    json!({"role": "assistant", "content": t})
}

fn shapes() -> Vec<Shape> {
    let tool_result = json!({"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "Sunny zqresult"});
    vec![
        Shape {
            name: "tool-call-dict-arguments",
            messages: vec![
                user("Weather in zqparis?"),
                tool_call(json!({"city": "zqcity"})),
                tool_result.clone(),
            ],
            with_tools: true,
            must_keep: vec!["zqparis", "zqcity", "zqresult"],
        },
        Shape {
            name: "tool-call-string-arguments",
            messages: vec![
                user("Weather in zqparis?"),
                tool_call(json!("{\"city\": \"zqcity\"}")),
                tool_result.clone(),
            ],
            with_tools: true,
            must_keep: vec!["zqparis", "zqcity", "zqresult"],
        },
        Shape {
            name: "content-null",
            messages: vec![
                user("zqfirst"),
                json!({"role": "assistant", "content": null}),
                user("zqsecond"),
            ],
            with_tools: false,
            must_keep: vec!["zqfirst", "zqsecond"],
        },
        Shape {
            name: "content-parts",
            messages: vec![
                json!({"role": "user", "content": [{"type": "text", "text": "zqparts"}]}),
            ],
            with_tools: false,
            must_keep: vec!["zqparts"],
        },
        Shape {
            name: "reasoning-content",
            messages: vec![
                user("zqq"),
                json!({"role": "assistant", "content": "zqanswer", "reasoning_content": "zqthought"}),
                user("zqnext"),
            ],
            with_tools: false,
            must_keep: vec!["zqq", "zqanswer", "zqnext"],
        },
        Shape {
            name: "no-system",
            messages: vec![user("zqa"), assistant("zqb"), user("zqc")],
            with_tools: false,
            must_keep: vec!["zqa", "zqb", "zqc"],
        },
        Shape {
            name: "system-mid-chat",
            messages: vec![
                user("zqa"),
                assistant("zqb"),
                json!({"role": "system", "content": "zqsys"}),
                user("zqc"),
            ],
            with_tools: false,
            must_keep: vec!["zqa", "zqb", "zqsys", "zqc"],
        },
        Shape {
            name: "consecutive-same-role",
            messages: vec![user("zqa"), user("zqb"), assistant("zqc")],
            with_tools: false,
            must_keep: vec!["zqa", "zqb", "zqc"],
        },
    ]
}

/// Which shapes a chat uses.
pub fn used_by(messages: &[Value]) -> Vec<&'static str> {
    let role = |m: &Value| {
        m.get("role")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let mut out = Vec::new();
    let calls: Vec<&Value> = messages
        .iter()
        .filter_map(|m| m.get("tool_calls").and_then(Value::as_array))
        .flatten()
        .collect();
    let args = |c: &&Value| {
        c.pointer("/function/arguments")
            .cloned()
            .unwrap_or(Value::Null)
    };
    if calls.iter().any(|c| args(c).is_object()) {
        out.push("tool-call-dict-arguments");
    }
    if calls.iter().any(|c| args(c).is_string()) {
        out.push("tool-call-string-arguments");
    }
    // `content: null` beside tool calls is the tool-call shapes' business.
    if messages
        .iter()
        .any(|m| m.get("content").is_some_and(Value::is_null) && m.get("tool_calls").is_none())
    {
        out.push("content-null");
    }
    if messages
        .iter()
        .any(|m| m.get("content").is_some_and(Value::is_array))
    {
        out.push("content-parts");
    }
    if messages
        .iter()
        .any(|m| m.get("reasoning_content").is_some() || m.get("reasoning").is_some())
    {
        out.push("reasoning-content");
    }
    if !messages.iter().any(|m| role(m) == "system") {
        out.push("no-system");
    }
    if messages.iter().skip(1).any(|m| role(m) == "system") {
        out.push("system-mid-chat");
    }
    if messages.windows(2).any(|w| role(&w[0]) == role(&w[1])) {
        out.push("consecutive-same-role");
    }
    out
}

enum Outcome {
    Renders,
    Raises(String),
    Drops(Vec<&'static str>),
}

fn try_shape(p: &Pipeline, s: &Shape) -> Result<Outcome> {
    let tools = tool_def();
    let tools = s
        .with_tools
        .then(|| tools.as_array().cloned().unwrap_or_default());
    match p.render(&s.messages, tools.as_deref(), false) {
        Ok(r) => {
            let lost: Vec<&str> = s
                .must_keep
                .iter()
                .copied()
                .filter(|m| !r.text.contains(m))
                .collect();
            Ok(if lost.is_empty() {
                Outcome::Renders
            } else {
                Outcome::Drops(lost)
            })
        }
        Err(e) => match limit_is_bad_input(&p.origin, &e) {
            Some(bad) => Err(bad),
            None => Ok(Outcome::Raises(e.to_string())),
        },
    }
}

/// "the serving template <what>", with the shape and one piece of evidence.
fn shape_finding(sev: Severity, shape: &str, what: String, evidence: (&str, String)) -> Finding {
    Finding::new(
        checks::TEMPLATE_MESSAGE_SHAPES,
        sev,
        format!("the serving template {what}"),
    )
    .with("shape", shape)
    .with(evidence.0, evidence.1)
}

/// `rows_use`: the shapes the SFT rows and the suite's conversations use.
pub fn check(
    ctx: &Context,
    serving: &Pipeline,
    rows_use: &BTreeSet<&'static str>,
) -> Result<Vec<Finding>> {
    // The shapes the suite declares it uses: its conversations and its replay prompts.
    let mut used: Vec<&str> = rows_use.iter().copied().collect();
    if let (Some(path), Some(section)) = (&ctx.suite.replay_prompts, &ctx.suite.file.replay) {
        if let Ok(prompts) = crate::replay::prompts::load(path, section) {
            used.extend(prompts.iter().flat_map(|p| used_by(&p.messages)));
        }
    }
    // And what the real client sends ([client] recording).
    if let Some(path) = &ctx.suite.client_recording {
        if let Ok(exchanges) = crate::proxy::record::read_recording(path) {
            for ex in exchanges {
                if let Some(Value::Array(m)) = ex.exchange.request_body.get("messages") {
                    used.extend(used_by(m));
                }
            }
        }
    }
    // A template that never mentions tools is not meant for tool calls: its failing on them
    // is worth knowing, not a warning.
    let tool_support = serving.template.source().contains("tool");
    let mut out = Vec::new();
    let mut fine = Vec::new();
    for shape in shapes() {
        let in_suite = used.contains(&shape.name);
        match try_shape(serving, &shape)? {
            Outcome::Renders => fine.push(shape.name),
            Outcome::Raises(msg) => {
                let (sev, why) = if in_suite {
                    (Severity::Error, "the suite's own conversations use it")
                } else if shape.with_tools && !tool_support {
                    (Severity::Info, "the template has no tool support")
                } else {
                    (Severity::Warning, "clients that send it will get an error")
                };
                out.push(shape_finding(
                    sev,
                    shape.name,
                    format!("raises on `{}` messages: {why}", shape.name),
                    ("template says", msg),
                ));
            }
            Outcome::Drops(lost) => {
                let sev = if in_suite {
                    Severity::Warning
                } else {
                    Severity::Info
                };
                out.push(shape_finding(
                    sev,
                    shape.name,
                    format!("silently drops content of `{}` messages", shape.name),
                    ("missing from the prompt", lost.join(", ")),
                ));
            }
        }
    }
    if out.is_empty() {
        out.push(Finding::pass(
            checks::TEMPLATE_MESSAGE_SHAPES,
            format!(
                "the serving template renders all {} client message shapes without losing content",
                fine.len()
            ),
        ));
    } else if !fine.is_empty() {
        out.push(
            Finding::new(
                checks::TEMPLATE_MESSAGE_SHAPES,
                Severity::Info,
                "message shapes that render with all their content",
            )
            .with("shapes", fine.join(", ")),
        );
    }
    Ok(out)
}
