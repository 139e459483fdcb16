//! `chatgate parse-reply`: the message a correct server returns for a completion, read by the
//! template's own framing (template::reply).
use serde_json::{json, Value};

use super::{Format, ParseReplyArgs};
use crate::artifacts::ModelDir;
use crate::error::{read_json, read_to_string, Error, Result};
use crate::template::reply::{Reader, Reading};
use crate::template::{ChatTemplate, SpecialTokens};

/// Completions are model output: bounded like any file read from outside.
const MAX_TEXT: u64 = 16 << 20;

pub fn run(a: ParseReplyArgs) -> Result<i32> {
    let (template, special, origin) = template_of(&a)?;
    let tools = read_tools(a.tools.as_deref())?;
    let text = read_text(&a.text)?;
    let reader = Reader::of(
        &template,
        &special,
        &a.template_kwargs.clone().unwrap_or_default(),
    );
    let reading = reader.read(&text, &tools);
    match a.format {
        Format::Json => println!(
            "{}",
            serde_json::to_string_pretty(&to_json(&reader, &reading, &origin)).unwrap_or_default()
        ),
        Format::Text => print!("{}", to_text(&reader, &reading, &origin)),
    }
    for p in &reading.problems {
        eprintln!("chatgate: {}: byte {}: {}", a.text.display(), p.at, p.why);
    }
    Ok(if reading.problems.is_empty() { 0 } else { 1 })
}

fn template_of(a: &ParseReplyArgs) -> Result<(ChatTemplate, SpecialTokens, String)> {
    let model = a.model.as_deref().map(ModelDir::open).transpose()?;
    let (source, origin) = match (&a.template, &model) {
        (Some(path), _) => (read_to_string(path)?, path.display().to_string()),
        (None, Some(m)) => {
            let t = m.templates.select(a.tools.is_some()).ok_or_else(|| {
                Error::in_file(&m.root, "the model ships no chat template")
                    .hint("pass one with --template FILE.jinja")
            })?;
            (t.text.clone(), m.path_of(&t.origin).display().to_string())
        }
        (None, None) => return Err(Error::input("give --model DIR or --template FILE.jinja")),
    };
    let template =
        ChatTemplate::new(&source).map_err(|e| Error::in_file(&origin, e.to_string()))?;
    let mut special = model
        .as_ref()
        .map(ModelDir::special_tokens)
        .unwrap_or_default();
    if model.is_none() {
        // A template alone names no special tokens; a template that writes eos_token after
        // each turn renders no call without one. Stand-ins: only the call's framing is read.
        special.bos_token = Some("<s>".into());
        special.eos_token = Some("</s>".into());
    }
    if a.bos_token.is_some() {
        special.bos_token = a.bos_token.clone();
    }
    if a.eos_token.is_some() {
        special.eos_token = a.eos_token.clone();
    }
    Ok((template, special, origin))
}

/// `--tools`: a list of tools, or an object with one under "tools".
fn read_tools(path: Option<&std::path::Path>) -> Result<Vec<Value>> {
    let Some(path) = path else {
        return Ok(Vec::new());
    };
    let shape = "a JSON list of tools ({\"type\": \"function\", \"function\": {\"name\", \"parameters\"}}), or {\"tools\": [...]}";
    match read_json(path)? {
        Value::Array(tools) => Ok(tools),
        Value::Object(mut o) => match o.remove("tools") {
            Some(Value::Array(tools)) => Ok(tools),
            _ => Err(Error::in_file(path, "no \"tools\" list").hint(shape)),
        },
        _ => Err(Error::in_file(path, "not a list of tools").hint(shape)),
    }
}

fn read_text(path: &std::path::Path) -> Result<String> {
    use std::io::Read;
    let mut bytes = Vec::new();
    let read = if path.as_os_str() == "-" {
        std::io::stdin().take(MAX_TEXT + 1).read_to_end(&mut bytes)
    } else {
        std::fs::File::open(path).and_then(|f| f.take(MAX_TEXT + 1).read_to_end(&mut bytes))
    };
    read.map_err(|e| Error::in_file(path, format!("cannot read the completion: {e}")))?;
    if bytes.len() as u64 > MAX_TEXT {
        return Err(Error::in_file(
            path,
            format!("the completion is over {} MiB", MAX_TEXT >> 20),
        ));
    }
    String::from_utf8(bytes).map_err(|e| {
        Error::in_file(
            path,
            format!(
                "the completion is not UTF-8 (byte {})",
                e.utf8_error().valid_up_to()
            ),
        )
    })
}

fn to_json(reader: &Reader, r: &Reading, origin: &str) -> Value {
    let calls: Vec<Value> = r
        .message
        .tool_calls
        .iter()
        .map(|c| {
            let mut v = json!({"name": c.name, "arguments": c.arguments});
            if let Some(id) = &c.id {
                v["id"] = json!(id);
            }
            v
        })
        .collect();
    json!({
        "content": r.message.content,
        "reasoning_content": r.message.reasoning_content,
        "tool_calls": calls,
        "framing": {
            "template": origin,
            "calls": reader.format,
            "vllm_tool_call_parser": reader.format.map(|f| f.vllm_parser()),
            "read": reader.describe(),
        },
        "notes": r.notes,
        "problems": r.problems,
    })
}

fn to_text(reader: &Reader, r: &Reading, origin: &str) -> String {
    let mut out = String::new();
    let show = |v: &Option<String>| {
        v.as_deref()
            .map_or("(none)".to_string(), |s| format!("{s:?}"))
    };
    out.push_str(&format!(
        "reasoning_content: {}\n",
        show(&r.message.reasoning_content)
    ));
    out.push_str(&format!("content: {}\n", show(&r.message.content)));
    for (i, c) in r.message.tool_calls.iter().enumerate() {
        out.push_str(&format!("tool_calls[{i}]: {}({})\n", c.name, c.arguments));
    }
    out.push_str(&format!("── template: {origin}\n"));
    for line in reader.describe() {
        out.push_str(&format!("── {line}\n"));
    }
    for n in &r.notes {
        out.push_str(&format!("── note: {n}\n"));
    }
    out
}
