//! The offline chain: one module per boundary, run in chain order
//! (checkpoint → tokenizer → chat template → generation config).
pub mod checkpoint;
pub mod checks;
pub mod client;
pub mod diff;
pub mod finding;
pub mod generation;
pub mod lock;
pub mod online;
pub mod probe;
pub mod template;
pub mod tokenizer;
pub mod tokens;

use std::path::Path;

use serde_json::Value;
use tokenizers::Tokenizer;

pub use finding::{Boundary, Finding, Findings, Severity};

use crate::artifacts::{ModelDir, TemplateSource};
use crate::error::{Error, Result};
use crate::suite::{self, GoldenRow, Suite};
use crate::template::{ChatTemplate, RenderRequest, Rendered, SpecialTokens, TemplateError};

/// One way of turning messages into token ids: a template, its special tokens, a tokenizer,
/// and whether the tokenizer adds its own special tokens.
pub struct Pipeline {
    /// Where the template came from (a file path or a field), for evidence.
    pub origin: String,
    pub template: ChatTemplate,
    pub special: SpecialTokens,
    pub tokenizer: Tokenizer,
    pub add_special_tokens: bool,
}

impl Pipeline {
    pub fn render(
        &self,
        messages: &[Value],
        tools: Option<&[Value]>,
        add_generation_prompt: bool,
    ) -> Result<Rendered, TemplateError> {
        self.template.render(&RenderRequest {
            messages: messages.to_vec(),
            tools: tools.map(|t| Value::Array(t.to_vec())),
            add_generation_prompt,
            special_tokens: self.special.clone(),
            ..Default::default()
        })
    }

    pub fn ids(&self, text: &str) -> Result<Vec<u32>> {
        tokens::encode(&self.tokenizer, text, self.add_special_tokens)
    }

    pub fn bos_id(&self) -> Option<u32> {
        self.special
            .bos_token
            .as_deref()
            .and_then(|b| tokens::single_id(&self.tokenizer, b))
    }
}

/// What the model was fine-tuned on.
pub enum Sft {
    /// Ids the training pipeline produced.
    Golden(Vec<GoldenRow>),
    /// The template and tokenizer the training pipeline used.
    Template(Box<Pipeline>),
    /// The suite names no SFT format: template parity cannot be checked.
    Unknown,
}

/// A conversation to push through both pipelines.
pub struct Conversation {
    pub id: String,
    pub messages: Vec<Value>,
    pub tools: Option<Vec<Value>>,
    /// The SFT ids and mask, when a golden row supplied them.
    pub golden: Option<(Vec<u32>, Option<Vec<u8>>)>,
}

/// Everything the offline checks read, loaded once.
pub struct Context {
    pub suite: Suite,
    pub model: ModelDir,
    /// The serving pipeline; None when the model has no tokenizer or no template.
    pub serving: Option<Pipeline>,
    pub sft: Sft,
    pub conversations: Vec<Conversation>,
    pub lock: Option<lock::Lock>,
}

impl Context {
    pub fn load(suite: Suite) -> Result<Context> {
        let model = ModelDir::open(&suite.model_dir)?;
        let serving = serving_pipeline(&suite, &model)?;
        let sft = sft_side(&suite, &model)?;
        let conversations = conversations(&suite, &sft)?;
        let lock = lock::Lock::read(&suite.lock_path)?;
        Ok(Context {
            suite,
            model,
            serving,
            sft,
            conversations,
            lock,
        })
    }
}

/// The template the server would render with: the suite's override, else the directory's own.
pub fn serving_template(suite: &Suite, model: &ModelDir) -> Result<Option<TemplateSource>> {
    if let Some(path) = &suite.chat_template {
        return Ok(Some(TemplateSource {
            name: "override".into(),
            origin: path.display().to_string(),
            text: crate::error::read_to_string(path)?,
        }));
    }
    Ok(match &suite.file.model.template_name {
        Some(name) => Some(
            model
                .templates
                .templates
                .iter()
                .find(|t| &t.name == name)
                .cloned()
                .ok_or_else(|| {
                    let names: Vec<_> = model
                        .templates
                        .templates
                        .iter()
                        .map(|t| t.name.as_str())
                        .collect();
                    Error::in_file(
                        &suite.path,
                        format!(
                            "the model has no chat template named {name:?} (it has: {})",
                            names.join(", ")
                        ),
                    )
                })?,
        ),
        None => model.templates.select(false).cloned(),
    })
}

/// Compile a template that comes from a file the user pointed at: a syntax error is bad input.
pub fn compile(source: &TemplateSource, file_hint: &Path) -> Result<ChatTemplate> {
    ChatTemplate::new(&source.text).map_err(|e| {
        let file = if Path::new(&source.origin).exists() {
            Path::new(&source.origin).to_path_buf()
        } else {
            file_hint.to_path_buf()
        };
        Error::in_file(
            file,
            format!("chat template ({}) does not compile: {e}", source.origin),
        )
    })
}

fn serving_pipeline(suite: &Suite, model: &ModelDir) -> Result<Option<Pipeline>> {
    let (Some(source), Some(tok)) = (serving_template(suite, model)?, model.tokenizer.as_ref())
    else {
        return Ok(None);
    };
    Ok(Some(Pipeline {
        template: compile(&source, &model.root)?,
        origin: source.origin,
        special: model.special_tokens(),
        tokenizer: tok.tokenizer.clone(),
        add_special_tokens: suite.file.model.add_special_tokens,
    }))
}

fn sft_side(suite: &Suite, model: &ModelDir) -> Result<Sft> {
    if let Some(golden) = &suite.sft_golden {
        return Ok(Sft::Golden(suite::read_golden(golden)?));
    }
    let Some(path) = &suite.sft_template else {
        return Ok(Sft::Unknown);
    };
    let text = crate::error::read_to_string(path)?;
    let source = TemplateSource {
        name: "sft".into(),
        origin: path.display().to_string(),
        text,
    };
    let (tokenizer, mut special) = match &suite.sft_tokenizer {
        Some(p) => {
            let dir = ModelDir::open(p)?;
            let special = dir.special_tokens();
            let tok = dir.tokenizer.ok_or_else(|| {
                Error::in_file(p, "no tokenizer.json here").hint(
                    "point [sft] tokenizer at a tokenizer.json or a model directory that has one",
                )
            })?;
            (tok.tokenizer, special)
        }
        None => {
            let tok = model.tokenizer.as_ref().ok_or_else(|| {
                Error::in_file(
                    &suite.path,
                    "[sft] template needs a tokenizer, and the serving model has none",
                )
                .hint("set [sft] tokenizer")
            })?;
            (tok.tokenizer.clone(), model.special_tokens())
        }
    };
    let sft = suite.file.sft.as_ref();
    if let Some(b) = sft.and_then(|s| s.bos_token.clone()) {
        special.bos_token = Some(b);
    }
    if let Some(e) = sft.and_then(|s| s.eos_token.clone()) {
        special.eos_token = Some(e);
    }
    Ok(Sft::Template(Box::new(Pipeline {
        template: compile(&source, path)?,
        origin: source.origin,
        special,
        tokenizer,
        add_special_tokens: sft.map(|s| s.add_special_tokens).unwrap_or(false),
    })))
}

fn conversations(suite: &Suite, sft: &Sft) -> Result<Vec<Conversation>> {
    let mut out = Vec::new();
    if let Sft::Golden(rows) = sft {
        for (i, row) in rows.iter().enumerate() {
            out.push(Conversation {
                id: row
                    .id
                    .clone()
                    .unwrap_or_else(|| format!("golden#{}", i + 1)),
                messages: row.messages.clone(),
                tools: row.tools.clone(),
                golden: Some((row.input_ids.clone(), row.assistant_mask.clone())),
            });
        }
    }
    let mut extra = suite.file.conversations.clone();
    if let Some(path) = &suite.conversations_file {
        extra.extend(suite::read_conversations(path)?);
    }
    for (i, c) in extra.into_iter().enumerate() {
        out.push(Conversation {
            id: c.id.unwrap_or_else(|| format!("conversation#{}", i + 1)),
            messages: c.messages,
            tools: c.tools,
            golden: None,
        });
    }
    Ok(out)
}

/// Run every offline boundary in chain order.
pub fn run_offline(ctx: &Context) -> Result<Findings> {
    let mut findings = Findings::default();
    findings.extend(checkpoint::check(ctx)?);
    findings.extend(tokenizer::check(ctx)?);
    findings.extend(template::check(ctx)?);
    findings.extend(generation::check(ctx)?);
    findings.extend(client::check(ctx)?);
    checks::apply_policy(&mut findings.0, &ctx.suite.file.server);
    findings.sort();
    Ok(findings)
}

/// Template errors while checking: a template that raises on a conversation is a finding (the
/// server would fail the same way); one that hits a render limit is bad input.
pub fn limit_is_bad_input(origin: &str, err: &TemplateError) -> Option<Error> {
    match err {
        TemplateError::Limit(_) | TemplateError::Syntax(_) | TemplateError::Engine(_) => {
            Some(Error::input(format!("chat template {origin}: {err}")))
        }
        _ => None,
    }
}
