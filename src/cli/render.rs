//! `chatgate render`: what exactly does the model get fed for this conversation?
use serde_json::{json, Value};

use super::{Format, RenderArgs};
use crate::artifacts::ModelDir;
use crate::error::{read_json, Error, Result};
use crate::template::{ChatTemplate, RenderRequest};

/// The messages file: a list of messages, or {"messages": [...], "tools": [...], "documents": [...]}.
pub fn read_conversation(
    path: &std::path::Path,
) -> Result<(Vec<Value>, Option<Value>, Option<Value>)> {
    let doc = read_json(path)?;
    let shape = "a JSON list of messages, or an object {\"messages\": [...], \"tools\": [...]}";
    let (messages, tools, documents) = match doc {
        Value::Array(m) => (m, None, None),
        Value::Object(mut o) => {
            let m = match o.remove("messages") {
                Some(Value::Array(m)) => m,
                Some(_) => {
                    return Err(Error::in_file(path, "\"messages\" is not a list").hint(shape))
                }
                None => return Err(Error::in_file(path, "no \"messages\" key").hint(shape)),
            };
            (
                m,
                o.remove("tools").filter(|t| !t.is_null()),
                o.remove("documents").filter(|d| !d.is_null()),
            )
        }
        _ => return Err(Error::in_file(path, "not a conversation").hint(shape)),
    };
    if let Some(i) = messages.iter().position(|m| !m.is_object()) {
        return Err(
            Error::in_file(path, format!("message {i} is not an object"))
                .hint("each message is {\"role\": \"...\", \"content\": ...}"),
        );
    }
    Ok((messages, tools, documents))
}

/// The render contract's result: the text, its ids and token strings (when there is a
/// tokenizer), and the assistant spans in code points.
pub struct RenderOutput {
    pub text: String,
    pub origin: String,
    pub encoding: Option<tokenizers::Encoding>,
    pub assistant_spans: Vec<(usize, usize)>,
    /// Which tokenizer the stack runs, e.g. "transformers 5: LlamaTokenizer rebuilt …".
    pub tokenizer_origin: Option<String>,
    /// What to know about the prediction (fallbacks).
    pub notes: Vec<String>,
    pub stack: crate::stack::Stack,
    tokenizer: Option<tokenizers::Tokenizer>,
    /// The model directory given, when it has no tokenizer (ids need one).
    tokenizerless_model: Option<std::path::PathBuf>,
}

impl RenderOutput {
    /// `{"text", "ids", "tokens", "assistant_spans"}`; ids and tokens only with a tokenizer.
    pub fn to_json(&self) -> Value {
        let mut out = json!({"text": self.text});
        if let Some(enc) = &self.encoding {
            out["ids"] = json!(enc.get_ids());
            out["tokens"] = json!(enc.get_tokens());
        }
        out["stack"] = json!(self.stack.name());
        if let Some(t) = &self.tokenizer_origin {
            out["tokenizer"] = json!(t);
        }
        if !self.notes.is_empty() {
            out["notes"] = json!(self.notes);
        }
        if let Some(dir) = &self.tokenizerless_model {
            out["ids"] = Value::Null;
            out["no_ids"] = json!(format!(
                "{} has no tokenizer: ids need tokenizer.json, or a GGUF with tokenizer metadata",
                dir.display()
            ));
        }
        out["assistant_spans"] = json!(self
            .assistant_spans
            .iter()
            .map(|(s, e)| [s, e])
            .collect::<Vec<_>>());
        out
    }

    fn to_text(&self) -> String {
        let mut out = format!("{}\n── template: {}\n", self.text, self.origin);
        for (s, e) in &self.assistant_spans {
            out.push_str(&format!("── assistant span: chars {s}..{e}\n"));
        }
        match (&self.encoding, &self.tokenizer) {
            (Some(enc), Some(t)) => {
                out.push_str(&format!(
                    "── {} tokens, as {} feeds them ({}):\n",
                    enc.get_ids().len(),
                    self.stack,
                    self.tokenizer_origin.as_deref().unwrap_or("tokenizer")
                ));
                let view: Vec<String> = enc
                    .get_ids()
                    .iter()
                    .map(|&id| format!("{id}:{:?}", t.decode(&[id], false).unwrap_or_default()))
                    .collect();
                out.push_str(&view.join(" "));
                out.push('\n');
            }
            _ => match &self.tokenizerless_model {
                Some(dir) => out.push_str(&format!(
                    "── no token ids: {} has no tokenizer (ids need tokenizer.json, or a GGUF with tokenizer metadata)\n",
                    dir.display()
                )),
                None => out.push_str("── no tokenizer (pass --model DIR to see token ids)\n"),
            },
        }
        for n in &self.notes {
            out.push_str(&format!("── note: {n}\n"));
        }
        out
    }
}

/// Render and tokenize as `chatgate render` does: the template, special tokens and tokenizer
/// the chosen stack would use.
pub fn render(a: &RenderArgs) -> Result<RenderOutput> {
    let model = a.model.as_deref().map(ModelDir::open).transpose()?;
    let (messages, tools, documents) = read_conversation(&a.messages)?;
    let feed = match &model {
        Some(m) => crate::stack::feed(a.stack, m, false)?,
        None => None,
    };
    let model_template = |m: &ModelDir| -> Result<(String, String)> {
        // With tools, transformers picks the "tool_use" template when the model has one.
        let t = match &feed {
            Some(f) if a.stack.reads_gguf() => f.template.as_ref(),
            _ => m.templates.select(tools.is_some()),
        }
        .ok_or_else(|| {
            Error::in_file(
                &m.root,
                format!("the model ships no chat template {} would use", a.stack),
            )
            .hint("pass one with --template FILE.jinja")
        })?;
        Ok((t.text.clone(), m.path_of(&t.origin).display().to_string()))
    };
    let (source, origin) = match (&a.template, &model) {
        (Some(path), _) => (
            crate::error::read_to_string(path)?,
            path.display().to_string(),
        ),
        (None, Some(m)) => model_template(m)?,
        (None, None) => return Err(Error::input("give --model DIR or --template FILE.jinja")),
    };
    let template =
        ChatTemplate::new(&source).map_err(|e| Error::in_file(&origin, e.to_string()))?;
    // Without a tokenizer there are no ids, but the template still gets the special tokens
    // tokenizer_config.json names (a string or an AddedToken dict), as transformers gives them.
    let mut special = match (&feed, &model) {
        (Some(f), _) => f.special.clone(),
        (None, Some(m)) => m.special_tokens(),
        (None, None) => Default::default(),
    };
    if a.bos_token.is_some() {
        special.bos_token = a.bos_token.clone();
    }
    if a.eos_token.is_some() {
        special.eos_token = a.eos_token.clone();
    }
    let rendered = template
        .render(&RenderRequest {
            messages,
            tools,
            documents,
            add_generation_prompt: a.add_generation_prompt,
            continue_final_message: a.continue_final_message,
            special_tokens: special,
            extra: a.template_kwargs.clone().unwrap_or_default(),
            ..Default::default()
        })
        .map_err(|e| Error::in_file(&origin, e.to_string()))?;
    let encoding = feed
        .as_ref()
        .map(|f| f.encode(&rendered.text))
        .transpose()?;
    Ok(RenderOutput {
        text: rendered.text,
        origin,
        encoding,
        assistant_spans: rendered.assistant_spans,
        tokenizer_origin: feed.as_ref().map(|f| f.tokenizer_origin.clone()),
        notes: feed.as_ref().map(|f| f.notes.clone()).unwrap_or_default(),
        stack: a.stack,
        tokenizerless_model: model
            .as_ref()
            .filter(|_| feed.is_none())
            .map(|m| m.root.clone()),
        tokenizer: feed.map(|f| f.tokenizer),
    })
}

pub fn run(a: RenderArgs) -> Result<i32> {
    let out = render(&a)?;
    match a.format {
        Format::Json => println!(
            "{}",
            serde_json::to_string_pretty(&out.to_json()).unwrap_or_default()
        ),
        Format::Text => print!("{}", out.to_text()),
    }
    Ok(0)
}
