//! What every boundary reads: the suite, the model's files, the pipelines (template, tokenizer, special tokens) the serving stack and the SFT side feed the model, and the offline run over them.
#[allow(unused_imports)]
use crate::chain::run::{dates, golden, lock, recording, tokens};
use std::path::{Path, PathBuf};

use serde_json::Value;
use tokenizers::Tokenizer;

use crate::artifacts::{ModelDir, TemplateSource};
use crate::error::{Error, Result};
use crate::stack::Stack;
use crate::suite::{self, Suite};
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
    /// llama.cpp cuts a leading BOS text (and a trailing EOS text) off the rendering before
    /// it tokenizes with special tokens added.
    pub strip_leading: Option<String>,
    pub strip_trailing: Option<String>,
    /// config.json's / generation_config.json's `bos_token_id`.
    pub config_bos: Option<u32>,
    /// A tokenizer that puts a ▁ before every text fragment (llama.cpp's SentencePiece, a legacy
    /// tokenizer.json as is): the same with transformers' prefix rule
    /// ([`crate::stack::start_only_prefix`]).
    pub start_only_prefix: Option<Tokenizer>,
    /// The clock the template reads (`[model] template_date`); None: now.
    pub now: Option<chrono::NaiveDateTime>,
}

impl Pipeline {
    /// Render at the pipeline's clock (the suite's pinned date, else now).
    pub fn render(
        &self,
        messages: &[Value],
        tools: Option<&[Value]>,
        add_generation_prompt: bool,
    ) -> Result<Rendered, TemplateError> {
        self.render_at(messages, tools, add_generation_prompt, self.now)
    }

    /// Render with the template's clock at `now` (a row made on another day; the day a server
    /// renders).
    pub fn render_at(
        &self,
        messages: &[Value],
        tools: Option<&[Value]>,
        add_generation_prompt: bool,
        now: Option<chrono::NaiveDateTime>,
    ) -> Result<Rendered, TemplateError> {
        self.template.render(&RenderRequest {
            messages: messages.to_vec(),
            tools: tools.map(|t| Value::Array(t.to_vec())),
            add_generation_prompt,
            special_tokens: self.special.clone(),
            now,
            ..Default::default()
        })
    }

    /// Render a prompt (with the generation prompt) with extra template variables, as a
    /// request's `chat_template_kwargs` pass them.
    pub fn render_with(
        &self,
        messages: &[Value],
        tools: Option<&[Value]>,
        now: Option<chrono::NaiveDateTime>,
        extra: &[(String, Value)],
    ) -> Result<String, TemplateError> {
        let r = self.template.render(&RenderRequest {
            messages: messages.to_vec(),
            tools: tools.map(|t| Value::Array(t.to_vec())),
            add_generation_prompt: true,
            special_tokens: self.special.clone(),
            now,
            extra: extra.iter().cloned().collect(),
            ..Default::default()
        })?;
        Ok(r.text)
    }

    pub fn ids(&self, text: &str) -> Result<Vec<u32>> {
        let t = crate::stack::trim_added_specials(
            text,
            self.strip_leading.as_deref(),
            self.strip_trailing.as_deref(),
        );
        tokens::encode(&self.tokenizer, t, self.add_special_tokens)
    }

    /// The ids of `text` with a ▁ before every text fragment (llama.cpp's SentencePiece
    /// `add_space_prefix`, applied after each special token too; a legacy tokenizer.json as is)
    /// replaced by transformers' rule (a ▁ at the start of the text only); None when the stack
    /// has no such prefix. Ids that equal the training ids only this way differ from them by
    /// that prefix alone.
    pub fn start_only_ids(&self, text: &str) -> Result<Option<Vec<u32>>> {
        let Some(tok) = &self.start_only_prefix else {
            return Ok(None);
        };
        let t = crate::stack::trim_added_specials(
            text,
            self.strip_leading.as_deref(),
            self.strip_trailing.as_deref(),
        );
        tokens::encode(tok, t, self.add_special_tokens).map(Some)
    }

    /// The BOS id: the tokenizer's named bos_token, else config.json's `bos_token_id` (a
    /// tokenizer may name none while the model was trained with one).
    pub fn bos_id(&self) -> Option<u32> {
        self.special
            .bos_token
            .as_deref()
            .and_then(|b| tokens::single_id(&self.tokenizer, b))
            .or(self.config_bos)
    }
}

/// What the model was fine-tuned on.
pub enum Sft {
    /// Ids the training pipeline produced: a JSONL of golden rows, streamed (see `sft_stream`).
    Golden(PathBuf),
    /// The template and tokenizer the training pipeline used.
    Template(Box<Pipeline>),
    /// The suite names no SFT format: template parity cannot be checked.
    Unknown,
}

impl Sft {
    pub fn golden_path(&self) -> Option<&Path> {
        match self {
            Sft::Golden(p) => Some(p),
            _ => None,
        }
    }
}

/// A conversation to push through both pipelines.
pub struct Conversation {
    pub id: String,
    pub messages: Vec<Value>,
    pub tools: Option<Vec<Value>>,
    /// The SFT ids and mask, when a golden row supplied them.
    pub golden: Option<(Vec<u32>, Option<Vec<u8>>)>,
}

/// Why the chain predicts a given stack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StackOrigin {
    /// `[target] stack` names it.
    Suite,
    /// Detected from the server's routes (the evidence).
    Detected(String),
    /// Nothing names it: the default for the model's format.
    Default,
}

/// Everything the offline checks read, loaded once.
pub struct Context {
    pub suite: Suite,
    pub model: ModelDir,
    /// The serving stack whose feed the chain predicts.
    pub stack: Stack,
    pub stack_origin: StackOrigin,
    /// Which tokenizer that stack runs, and notes about the prediction.
    pub stack_tokenizer: Option<String>,
    pub stack_notes: Vec<String>,
    /// The serving pipeline; None when the model has no tokenizer or no template.
    pub serving: Option<Pipeline>,
    pub sft: Sft,
    /// The first golden rows (at most `golden::SAMPLE_ROWS`), then the suite's own
    /// conversations: what the checks that read conversations whole use. The per-row checks
    /// stream the whole golden file instead.
    pub conversations: Vec<Conversation>,
    /// How many of `conversations` are golden rows.
    pub golden_sample: usize,
    pub lock: Option<lock::Lock>,
    /// The recorded reference beside the lock (`chatgate lock --fingerprint`), bound to it.
    pub recording: Option<crate::chain::run::recording::Recording>,
    /// What the serving template does with dates (none without a serving pipeline).
    pub dates: dates::TemplateDates,
}

impl Context {
    pub fn load(suite: Suite) -> Result<Context> {
        let model = ModelDir::open(&suite.model_dir)?;
        Context::load_with(suite, model, None)
    }

    /// Load predicting the suite's stack, else a detected one, else the model format's default.
    pub fn load_with(
        suite: Suite,
        model: ModelDir,
        detected: Option<(Stack, String)>,
    ) -> Result<Context> {
        let mut ctx = Context::load_unbound(suite, model, detected)?;
        let path = crate::chain::run::recording::path_for(&ctx.suite.lock_path);
        ctx.recording = crate::chain::run::recording::Recording::read(&path, ctx.lock.as_ref())?;
        Ok(ctx)
    }

    /// Load without the recorded reference: what `chatgate lock --fingerprint` records it from
    /// (the recording there may be the stale one it replaces).
    pub fn load_unbound(
        suite: Suite,
        model: ModelDir,
        detected: Option<(Stack, String)>,
    ) -> Result<Context> {
        let named = suite.file.target.as_ref().and_then(|t| t.stack);
        let (stack, stack_origin) = match (named, detected) {
            (Some(s), _) => (s, StackOrigin::Suite),
            (None, Some((s, why))) => (s, StackOrigin::Detected(why)),
            (None, None) => (Stack::default_for(&model), StackOrigin::Default),
        };
        let feed = crate::stack::feed(stack, &model, suite.file.model.add_special_tokens)?;
        let stack_tokenizer = feed.as_ref().map(|f| f.tokenizer_origin.clone());
        let stack_notes = feed.as_ref().map(|f| f.notes.clone()).unwrap_or_default();
        let serving = serving_pipeline(&suite, &model, feed)?;
        // The SFT side tokenizes the transformers way: the serving pipeline already built
        // that tokenizer when the stack is transformers.
        let built = serving
            .as_ref()
            .filter(|_| stack.transformers_tokenization());
        let sft = sft_side(&suite, &model, built)?;
        let (conversations, golden_sample) = conversations(&suite, &sft)?;
        let lock = lock::Lock::read(&suite.lock_path)?;
        let dates = serving
            .as_ref()
            .map(dates::TemplateDates::of)
            .unwrap_or_default();
        Ok(Context {
            dates,
            suite,
            model,
            stack,
            stack_origin,
            stack_tokenizer,
            stack_notes,
            golden_sample,
            serving,
            sft,
            conversations,
            lock,
            recording: None,
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

/// The serving side as the stack builds it: its tokenizer, special tokens and BOS handling;
/// its template unless the suite overrides it (a GGUF stack serves the GGUF's template).
pub(super) fn serving_pipeline(
    suite: &Suite,
    model: &ModelDir,
    feed: Option<crate::stack::Feed>,
) -> Result<Option<Pipeline>> {
    let Some(feed) = feed else {
        return Ok(None);
    };
    let overridden = suite.chat_template.is_some() || suite.file.model.template_name.is_some();
    let source = if feed.stack.reads_gguf() && !overridden && feed.template.is_some() {
        feed.template.clone()
    } else {
        serving_template(suite, model)?
    };
    let Some(source) = source else {
        return Ok(None);
    };
    let mut p = pipeline(feed, source, model)?;
    p.now = suite.template_now;
    Ok(Some(p))
}

/// What `stack` feeds `model` with the model's own template and no suite overrides (a GGUF
/// stack serves the GGUF's template): how `chatgate init` renders SFT rows.
pub fn model_pipeline(model: &ModelDir, stack: Stack) -> Result<Option<Pipeline>> {
    let Some(feed) = crate::stack::feed(stack, model, false)? else {
        return Ok(None);
    };
    let source = match (&feed.template, feed.stack.reads_gguf()) {
        (Some(t), true) => Some(t.clone()),
        _ => model.templates.select(false).cloned(),
    };
    let Some(source) = source else {
        return Ok(None);
    };
    pipeline(feed, source, model).map(Some)
}

/// Why [`model_pipeline`] found nothing to render a chat with, naming what is missing: the
/// tokenizer, the chat template, or both — and for a GGUF, how a user adds a template to it.
pub fn no_pipeline(model: &ModelDir, purpose: &str) -> Error {
    let gguf = model.root.is_file();
    let (what, hint) = match (model.tokenizer.is_some(), model.templates.select(false).is_some()) {
        // What each stack does without one, from its source: llama-server renders ChatML
        // (common/chat.cpp, CHATML_TEMPLATE_SRC); llama-cpp-python 0.3 formats as Llama 2
        // (llama.py: "Using fallback chat format: llama-2"); vLLM refuses every chat
        // (renderers/hf.py: "default chat template is no longer allowed") unless it has a
        // fallback for the model type. None is the model's own format.
        (true, _) if gguf => (
            "has no chat template (no tokenizer.chat_template in its metadata; it has a tokenizer)",
            "without one the serving stacks fall back to a format the model was not trained on: llama-server renders ChatML, llama-cpp-python formats as Llama 2 ([INST] … [/INST]), vLLM refuses the chat. Give the model's own template: add it to the file the way llama.cpp's converter does, `gguf-new-metadata --chat-template-file TEMPLATE.jinja IN.gguf OUT.gguf` (PyPI: gguf), and serve that file; or serve a model directory whose tokenizer_config.json or chat_template.jinja has it",
        ),
        (true, _) => (
            "has no chat template",
            "a chat model directory ships one in chat_template.jinja or tokenizer_config.json's chat_template (base models have none: gate the instruct model)",
        ),
        (false, true) => (
            "has no tokenizer",
            "a model directory ships tokenizer.json; a GGUF carries tokenizer.ggml.* metadata",
        ),
        (false, false) => (
            "has no tokenizer and no chat template",
            "a chat model directory ships tokenizer.json and a chat template (chat_template.jinja or tokenizer_config.json)",
        ),
    };
    Error::in_file(&model.root, format!("{what} to {purpose}")).hint(hint)
}

/// A feed's tokenizer and special tokens with the template it serves.
pub(super) fn pipeline(
    feed: crate::stack::Feed,
    source: TemplateSource,
    model: &ModelDir,
) -> Result<Pipeline> {
    Ok(Pipeline {
        template: compile(&source, &model.root)?,
        origin: source.origin,
        special: feed.special,
        tokenizer: feed.tokenizer,
        add_special_tokens: feed.add_special_tokens,
        strip_leading: feed.strip_leading,
        strip_trailing: feed.strip_trailing,
        config_bos: config_bos(model),
        start_only_prefix: feed.start_only_prefix,
        now: None,
    })
}

pub(super) fn config_bos(model: &ModelDir) -> Option<u32> {
    model
        .config
        .as_ref()
        .and_then(|c| c.bos_token_ids.first().copied())
        .or(model
            .generation_config
            .as_ref()
            .and_then(|g| g.bos_token_id))
}

pub(super) fn sft_side(
    suite: &Suite,
    model: &ModelDir,
    transformers: Option<&Pipeline>,
) -> Result<Sft> {
    if let Some(golden) = &suite.sft_golden {
        return Ok(Sft::Golden(golden.clone()));
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
    // SFT pipelines (TRL, transformers trainers) tokenize through transformers.
    let (tokenizer, mut special) = match (&suite.sft_tokenizer, transformers) {
        (Some(p), _) => {
            let dir = ModelDir::open(p)?;
            let feed = crate::stack::feed(Stack::Transformers, &dir, false)?.ok_or_else(|| {
                Error::in_file(p, "no tokenizer.json here").hint(
                    "point [sft] tokenizer at a tokenizer.json or a model directory that has one",
                )
            })?;
            (feed.tokenizer, feed.special)
        }
        (None, Some(p)) => (p.tokenizer.clone(), p.special.clone()),
        (None, None) => {
            let feed = crate::stack::feed(Stack::Transformers, model, false)?.ok_or_else(|| {
                Error::in_file(
                    &suite.path,
                    "[sft] template needs a tokenizer, and the serving model has none",
                )
                .hint("set [sft] tokenizer")
            })?;
            (feed.tokenizer, feed.special)
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
        strip_leading: None,
        strip_trailing: None,
        config_bos: config_bos(model),
        start_only_prefix: None,
        now: suite.template_now,
    })))
}

pub(super) fn conversations(suite: &Suite, sft: &Sft) -> Result<(Vec<Conversation>, usize)> {
    let mut out: Vec<Conversation> = match sft.golden_path() {
        Some(path) => golden::sample(path, golden::SAMPLE_ROWS)?
            .into_iter()
            .map(|(c, _)| c)
            .collect(),
        None => Vec::new(),
    };
    let golden_sample = out.len();
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
    Ok((out, golden_sample))
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

/// A conversation as the serving stack feeds it: its ids and rendered text, and the day it was
/// rendered at when that is not the suite's (a golden row made on another day by a template
/// that prints the date), or what the template raised. None without a serving pipeline.
/// Rendered once per row and shared by the template's checks and the tokenizer's re-encode.
pub type Served =
    Option<std::result::Result<(Vec<u32>, String, Option<chrono::NaiveDateTime>), String>>;

/// Render and tokenize a whole conversation the serving way. The outer Result is bad input
/// (a template that exhausts its limits); a template that raises on this conversation is a
/// finding, kept in the inner Err.
pub fn serve(ctx: &Context, conv: &Conversation) -> Result<Served> {
    let Some(serving) = &ctx.serving else {
        return Ok(None);
    };
    let r = match serving.render(&conv.messages, conv.tools.as_deref(), false) {
        Ok(r) => r,
        Err(e) => {
            if let Some(bad) = limit_is_bad_input(&serving.origin, &e) {
                return Err(bad);
            }
            return Ok(Some(Err(e.to_string())));
        }
    };
    let ids = serving.ids(&r.text)?;
    // A golden row from another day carries that day's date: compare it at its own day.
    if let Some((golden, _)) = &conv.golden {
        let dated = crate::chain::run::dates::row_date(
            serving,
            &ctx.dates,
            &conv.messages,
            conv.tools.as_deref(),
            golden,
            &ids,
        )?;
        if let Some(d) = dated {
            return Ok(Some(Ok((d.ids, d.text, Some(d.at)))));
        }
    }
    Ok(Some(Ok((ids, r.text, None))))
}
