//! The chat template: compiled once, rendered per request the way transformers' apply_chat_template does.
#[allow(unused_imports)]
use super::*;
use serde_json::{Map, Value};

/// The named special tokens transformers 5 passes to every template
/// (`special_tokens_map`: bos, eos, unk, sep, pad, cls, mask — no additional_special_tokens).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct SpecialTokens {
    pub bos_token: Option<String>,
    pub eos_token: Option<String>,
    pub unk_token: Option<String>,
    pub sep_token: Option<String>,
    pub pad_token: Option<String>,
    pub cls_token: Option<String>,
    pub mask_token: Option<String>,
}

impl SpecialTokens {
    /// The tokens the chain checks by name, with their template variable names.
    pub fn named(&self) -> [(&'static str, &Option<String>); 4] {
        [
            ("bos_token", &self.bos_token),
            ("eos_token", &self.eos_token),
            ("pad_token", &self.pad_token),
            ("unk_token", &self.unk_token),
        ]
    }
}

/// Everything `apply_chat_template` gives a template.
#[derive(Debug, Clone, Default)]
pub struct RenderRequest {
    /// The raw messages as the user wrote them (transformers 5 preprocessing is applied inside render).
    pub messages: Vec<Value>,
    /// `tools`; passed to the template as none when absent.
    pub tools: Option<Value>,
    /// `documents`; passed to the template as none when absent.
    pub documents: Option<Value>,
    pub add_generation_prompt: bool,
    pub continue_final_message: bool,
    pub special_tokens: SpecialTokens,
    /// Extra template kwargs (they override special tokens, as in transformers).
    pub extra: Map<String, Value>,
    /// The clock `strftime_now` reads (local time, as every stack reads it); None: now
    /// ([`crate::clock::now`]).
    pub now: Option<chrono::NaiveDateTime>,
}

/// A rendered conversation.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Rendered {
    pub text: String,
    /// `{% generation %}` spans as (start, end) Python code-point offsets into `text`.
    pub assistant_spans: Vec<(usize, usize)>,
    /// The formats the render called `strftime_now` with: the text depends on the clock.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub clock_formats: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TemplateError {
    /// The template does not parse. Carries minijinja's message (with line).
    Syntax(String),
    /// The template called `raise_exception(msg)`; carries msg verbatim.
    Raised(String),
    /// Any other render-time failure (undefined attribute, bad operation, ...).
    Render(String),
    /// Fuel, recursion or output limit hit.
    Limit(String),
    /// The request itself is invalid (e.g. continue_final_message with add_generation_prompt).
    Input(String),
    /// The template engine itself failed (a panic inside minijinja, caught): bad input, never
    /// a crash of chatgate.
    Engine(String),
}

impl std::fmt::Display for TemplateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TemplateError::Syntax(m) => write!(f, "template syntax error: {m}"),
            TemplateError::Raised(m) => write!(f, "template raised an exception: {m}"),
            TemplateError::Render(m) => write!(f, "template failed to render: {m}"),
            TemplateError::Limit(m) => write!(f, "template exceeded a render limit: {m}"),
            TemplateError::Input(m) => write!(f, "invalid render request: {m}"),
            TemplateError::Engine(m) => write!(
                f,
                "the template engine failed on this template ({m}); the template uses a construct chatgate cannot render"
            ),
        }
    }
}
impl std::error::Error for TemplateError {}

/// What a template can do, found by rendering probes.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Capabilities {
    /// A system message's content appears in the render (and the template does not raise on it).
    pub system_role: bool,
    /// The template references `tools`.
    pub tools: bool,
    /// The template has `{% generation %}` tags (assistant masks are available).
    pub generation_tags: bool,
    /// render(add_generation_prompt=true) minus render(false) on a one-user-message conversation;
    /// None when the first is not an extension of the second.
    pub generation_prompt: Option<String>,
}

/// The name the template is compiled under (no extension, so no autoescape).
pub(super) const TEMPLATE_NAME: &str = "chat_template";

/// A compiled chat template.
pub struct ChatTemplate {
    source: String,
    env: minijinja::Environment<'static>,
    limits: RenderLimits,
    has_generation: bool,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("source_len", &self.source.len())
            .field("limits", &self.limits)
            .field("has_generation", &self.has_generation)
            .finish()
    }
}

thread_local! {
    /// Set while a guarded render runs on this thread: its panics are caught and reported as
    /// errors, so the panic hook stays quiet for them.
    static GUARDED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Run `f`, turning a panic into `Err(message)`.
pub(super) fn guarded<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    let was = GUARDED.with(|g| g.replace(true));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    GUARDED.with(|g| g.set(was));
    result.map_err(|payload| {
        let msg = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "no message".to_string());
        format!("internal error in minijinja: {msg}")
    })
}

/// Install a panic hook that keeps quiet about panics a guarded render catches (they become
/// ordinary errors naming the template) and defers to the previous hook for every other one.
pub fn quiet_caught_panics() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !GUARDED.with(|g| g.get()) {
            previous(info);
        }
    }));
}

pub(super) fn syntax_error(e: &minijinja::Error) -> TemplateError {
    TemplateError::Syntax(e.to_string())
}

impl ChatTemplate {
    pub fn new(source: &str) -> Result<Self, TemplateError> {
        Self::with_limits(source, RenderLimits::default())
    }
    pub fn with_limits(source: &str, limits: RenderLimits) -> Result<Self, TemplateError> {
        let mut env = env::build(&limits).map_err(|e| syntax_error(&e))?;
        // jinja2's lexer turns every "\r\n" and "\r" of the source into "\n" before anything else.
        let normalized = source.replace("\r\n", "\n").replace('\r', "\n");
        let with_generation = generation::rewrite(&normalized);
        // Python semantics for literals, filter names and operators; a parse failure is the
        // template's own syntax error.
        let syntax = env.syntax().clone();
        let with_generation = rewrite::normalize_string_escapes(&with_generation, &syntax);
        rewrite::check_filter_and_test_names(&with_generation, TEMPLATE_NAME, &syntax)
            .map_err(TemplateError::Syntax)?;
        let operators = rewrite::rewrite_operators(&with_generation, TEMPLATE_NAME, &syntax)
            .map_err(|e| syntax_error(&e))?;
        // If the rewritten source ever failed to compile, the original still renders, only
        // without the Python operator semantics.
        let compiled = match operators {
            Some(rewritten) => env.add_template_owned(TEMPLATE_NAME, rewritten).is_ok(),
            None => false,
        };
        if !compiled {
            env.add_template_owned(TEMPLATE_NAME, with_generation)
                .map_err(|e| syntax_error(&e))?;
        }
        Ok(ChatTemplate {
            source: source.to_string(),
            env,
            limits,
            has_generation: generation::has_generation_tags(source),
        })
    }
    pub fn source(&self) -> &str {
        &self.source
    }
    pub fn has_generation_tags(&self) -> bool {
        self.has_generation
    }
    pub fn render(&self, req: &RenderRequest) -> Result<Rendered, TemplateError> {
        if req.messages.is_empty() {
            return Err(TemplateError::Input(
                "Cannot apply chat template to an empty conversation. Provide at least one message.".into(),
            ));
        }
        let chat = inputs::drop_none_keys(&req.messages)?;
        if req.continue_final_message && req.add_generation_prompt {
            return Err(TemplateError::Input(inputs::CFM_WITH_AGP.into()));
        }
        if let Some(key) = inputs::RESERVED
            .iter()
            .find(|k| req.extra.contains_key(**k))
        {
            return Err(TemplateError::Input(format!(
                "render() got multiple values for keyword argument '{key}'"
            )));
        }
        let tools = inputs::check_tools(&req.tools)?;
        let documents = inputs::check_documents(&req.documents)?;
        let mut chat: Vec<Map<String, Value>> = chat
            .into_iter()
            .map(inputs::alias_reasoning_fields)
            .collect();
        let final_message = if req.continue_final_message {
            Some(inputs::tag_final_message(&mut chat, &self.source)?)
        } else {
            None
        };

        let mut ctx: indexmap::IndexMap<minijinja::Value, minijinja::Value> =
            indexmap::IndexMap::new();
        let special = &req.special_tokens;
        for (name, tok) in [
            ("bos_token", &special.bos_token),
            ("eos_token", &special.eos_token),
            ("unk_token", &special.unk_token),
            ("sep_token", &special.sep_token),
            ("pad_token", &special.pad_token),
            ("cls_token", &special.cls_token),
            ("mask_token", &special.mask_token),
        ] {
            if let Some(tok) = tok {
                ctx.insert(name.into(), tok.as_str().into());
            }
        }
        for (k, v) in &req.extra {
            ctx.insert(k.as_str().into(), values::from_json(v));
        }
        let messages: Vec<Value> = chat.into_iter().map(Value::Object).collect();
        ctx.insert(
            "messages".into(),
            values::from_json(&Value::Array(messages)),
        );
        let none = minijinja::Value::from(());
        ctx.insert(
            "tools".into(),
            tools
                .as_ref()
                .map(values::from_json)
                .unwrap_or_else(|| none.clone()),
        );
        ctx.insert(
            "documents".into(),
            documents.as_ref().map(values::from_json).unwrap_or(none),
        );
        ctx.insert(
            "add_generation_prompt".into(),
            req.add_generation_prompt.into(),
        );
        let ctx = minijinja::Value::from_object(values::PyDict(ctx));

        let rendered = self.render_value(ctx, req.now)?;
        match final_message {
            None => Ok(rendered),
            Some(final_message) => {
                let Rendered {
                    text,
                    assistant_spans: spans,
                    clock_formats,
                } = rendered;
                let text = inputs::cut_at_tag(&text, &final_message)?;
                let len = text.chars().count();
                let assistant_spans = spans
                    .into_iter()
                    .filter(|(start, _)| *start < len)
                    .map(|(start, end)| (start, end.min(len)))
                    .collect();
                Ok(Rendered {
                    text,
                    assistant_spans,
                    clock_formats,
                })
            }
        }
    }

    /// Renders with a prepared context, mapping failures to [`TemplateError`].
    fn render_value(
        &self,
        ctx: minijinja::Value,
        now: Option<chrono::NaiveDateTime>,
    ) -> Result<Rendered, TemplateError> {
        let tmpl = self
            .env
            .get_template(TEMPLATE_NAME)
            .map_err(|e| syntax_error(&e))?;
        let guard = limits::RenderStateGuard::install(&self.limits, now);
        let mut out = limits::LimitedWriter { buf: Vec::new() };
        // A template from anywhere must not crash chatgate: minijinja panics on a few
        // constructs (`loop.cycle()` with no arguments, `divisibleby 0`); catch them.
        let caught = guarded(|| tmpl.render_captured_to(ctx, &mut out).map(|_| ()));
        let state = guard.take();
        drop(guard);
        let result = caught.map_err(TemplateError::Engine)?;
        if let Err(e) = result {
            return Err(classify_error(&e, &state, &self.limits));
        }
        let text = String::from_utf8(out.buf)
            .map_err(|e| TemplateError::Render(format!("rendered output is not UTF-8: {e}")))?;
        Ok(Rendered {
            text,
            assistant_spans: state.spans,
            clock_formats: state.clock_formats,
        })
    }

    /// The entries of `kwargs` the template reads (vLLM passes only those to
    /// `apply_chat_template`, so a variable it does not know changes nothing).
    pub fn read_variables(&self, kwargs: &Map<String, Value>) -> Map<String, Value> {
        if kwargs.is_empty() {
            return Map::new();
        }
        let Ok(t) = self.env.get_template(TEMPLATE_NAME) else {
            return Map::new();
        };
        let read = t.undeclared_variables(false);
        kwargs
            .iter()
            .filter(|(k, _)| read.contains(k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// The template reads a `date_string` variable (Llama-3.x: the date its system header
    /// prints, "26 Jul 2024" when none is given): a server that passes one — llama-server
    /// always does, with today's date — renders another prompt than transformers' default.
    pub fn reads_date_string(&self) -> bool {
        self.env
            .get_template(TEMPLATE_NAME)
            .map(|t| t.undeclared_variables(false).contains("date_string"))
            .unwrap_or(false)
    }

    pub fn capabilities(&self, special: &SpecialTokens) -> Capabilities {
        let msg = |role: &str, content: &str| serde_json::json!({"role": role, "content": content});
        let probe = |messages: Vec<Value>, add_generation_prompt: bool| {
            self.render(&RenderRequest {
                messages,
                add_generation_prompt,
                special_tokens: special.clone(),
                ..RenderRequest::default()
            })
        };
        let system_role = probe(vec![msg("system", "SYSPROBE"), msg("user", "hi")], false)
            .map(|r| r.text.contains("SYSPROBE"))
            .unwrap_or(false);
        let tools = self
            .env
            .get_template(TEMPLATE_NAME)
            .map(|t| t.undeclared_variables(false).contains("tools"))
            .unwrap_or(false);
        let generation_prompt = match (
            probe(vec![msg("user", "hi")], true),
            probe(vec![msg("user", "hi")], false),
        ) {
            (Ok(with), Ok(without)) => with
                .text
                .strip_prefix(without.text.as_str())
                .map(str::to_string),
            _ => None,
        };
        Capabilities {
            system_role,
            tools,
            generation_tags: self.has_generation,
            generation_prompt,
        }
    }
}

/// Maps a minijinja failure to the error kinds of this module.
pub(super) fn classify_error(
    e: &minijinja::Error,
    state: &limits::RenderState,
    limits: &RenderLimits,
) -> TemplateError {
    if let Some(limit) = &state.limit {
        return TemplateError::Limit(limit.clone());
    }
    if e.kind() == minijinja::ErrorKind::OutOfFuel {
        return TemplateError::Limit(format!(
            "template ran out of fuel ({} instructions)",
            limits.fuel
        ));
    }
    let detail = e.detail().unwrap_or_default();
    if detail.contains("recursion limit exceeded") {
        return TemplateError::Limit(format!(
            "recursion limit ({}) exceeded",
            limits.max_recursion
        ));
    }
    if let Some(msg) = &state.raised {
        return TemplateError::Raised(msg.clone());
    }
    TemplateError::Render(e.to_string())
}
