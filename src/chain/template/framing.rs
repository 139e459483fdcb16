//! The template's reasoning and tool-call framing as findings: what the model emits and the
//! parser a server needs to read it. The derivation is the template layer's
//! ([`crate::template::framing`]), shared with `chatgate serve`'s own reasoning parser.
use crate::chain::run::context::Pipeline;
use crate::template::framing::{derive, Call, Parser, Reasoning, Tools};
use crate::template::reply::CallFormat;
use crate::verdict::checks;
use crate::verdict::{Finding, Severity};

/// `template.tool-framing` and `template.reasoning-framing`: what the serving template says
/// the model emits, and the parser a server needs to read it. Only for templates that have
/// either; information until a suite says its client relies on them.
pub fn findings(serving: &Pipeline, tools_probed: Option<bool>) -> Vec<Finding> {
    let f = derive(&serving.template, &serving.special);
    let format = CallFormat::of_source(serving.template.source());
    let mut out = Vec::new();
    let tools = tool_finding(&f.tools, format).map(|finding| match tools_probed {
        // A template that frames calls, and no replay prompt offers tools: no server's
        // tool-call parser is ever judged.
        Some(false) if f.tools.offered => finding.with(
            "tools probe",
            "none: no replay prompt offers `tools`, so server.tool-call-parse judges nothing; add a prompt with a `tools` list the model would call (docs/reasoning-and-tools.md)",
        ),
        _ => finding,
    });
    out.extend(tools);
    out.extend(f.reasoning.as_ref().map(reasoning_finding));
    out
}

fn tool_finding(t: &Tools, format: Option<CallFormat>) -> Option<Finding> {
    if let Some(format) = format.filter(|f| t.call.is_none() && *f != CallFormat::Json) {
        // Framings the JSON probe cannot split (tags around each argument, the name in a
        // header): recognised by their markers (template::reply).
        let f = Finding::new(
            checks::TEMPLATE_TOOL_FRAMING,
            Severity::Info,
            format!(
                "{}; a call is written in the {format:?} framing: the server's tool-call parser must read exactly that (`chatgate parse-reply` shows what it must return)",
                if t.offered { "the template offers tools" } else { "the template never prints a request's tools" }
            ),
        );
        return Some(f.with(
            "vLLM",
            format!("--tool-call-parser {}", format.vllm_parser()),
        ));
    }
    let Some(call) = &t.call else {
        if let Some((marker, parser)) = t.named {
            let f = Finding::new(checks::TEMPLATE_TOOL_FRAMING, Severity::Info, format!(
                "the template names the call marker {marker:?} but writes no call into history (a call message's `content: null` is dropped before rendering, as transformers 5 does){}",
                if t.offered { "" } else { "; it never prints a request's tools" }
            ));
            return Some(with_parser(f, Some(parser), "--tool-call-parser", |l| {
                format!("--jinja (its {l} chat format)")
            }));
        }
        return t.offered.then(|| {
            Finding::new(checks::TEMPLATE_TOOL_FRAMING, Severity::Info, "the template prints a request's tools but writes no tool call into history: how the model frames a call is unknown")
        });
    };
    let offered = if t.offered {
        "the template offers tools"
    } else {
        "the template never prints a request's tools (the model is offered none, whatever the server is told), though it writes calls into history"
    };
    let mut f = Finding::new(
        checks::TEMPLATE_TOOL_FRAMING,
        Severity::Info,
        format!(
            "{offered}; a call is written {}: the server's tool-call parser must read exactly that",
            shown_call(call)
        ),
    )
    .with(
        "parallel calls",
        if call.parallel {
            "yes"
        } else {
            "one call per turn"
        },
    );
    f = with_parser(f, call.parser, "--tool-call-parser", |l| {
        format!("--jinja (its {l} chat format)")
    });
    Some(f.with(
        "call as the template writes it",
        format!("{:?}", call.rendered),
    ))
}

fn shown_call(call: &Call) -> String {
    let json = match &call.arguments_key {
        Some(key) => format!("JSON with \"name\" and {key:?}"),
        None => "the name, then the arguments as JSON".to_string(),
    };
    match (call.open.trim().is_empty(), call.close.trim().is_empty()) {
        (true, true) => format!("as bare {json}"),
        _ => format!("as {:?} {json} {:?}", call.open, call.close),
    }
}

fn reasoning_finding(r: &Reasoning) -> Finding {
    let opened = if r.prompt_opens {
        "; the generation prompt opens the block, so a reply starts inside it and only the close marks where the answer begins"
    } else {
        ""
    };
    let mut f = Finding::new(
        checks::TEMPLATE_REASONING_FRAMING,
        Severity::Info,
        format!(
            "the model reasons between {:?} and {:?}{opened}: the server's reasoning parser must move that out of `content`",
            r.open, r.close
        ),
    );
    for (name, value) in &r.switches {
        f = f.with("chat_template_kwargs", format!("{name}={value}"));
    }
    with_parser(f, Some(r.parser), "--reasoning-parser", str::to_string)
}

fn with_parser(
    f: Finding,
    parser: Option<Parser>,
    vllm_flag: &str,
    llama_cpp: impl Fn(&str) -> String,
) -> Finding {
    match parser {
        Some(p) => f
            .with(
                "vLLM",
                p.vllm
                    .map_or("no parser for this framing".to_string(), |v| {
                        format!("{vllm_flag} {v}")
                    }),
            )
            .with(
                "llama.cpp",
                p.llama_cpp
                    .map_or("no format for this framing".to_string(), llama_cpp),
            ),
        None => f.with("parser", "no stack chatgate knows parses this framing"),
    }
}
