//! A GGUF beside (or instead of) the Hugging Face files: its metadata against the lock, and
//! against the HF files. A GGUF's identity is its tensor data (`checkpoint.weights-hash`); its
//! header is hashed per group, and each group that changes is reported at the boundary it
//! belongs to, so an eos edit is never "another checkpoint".
use crate::chain::run::context::Context;
use crate::chain::run::lock::short;
use crate::verdict::checks;
use crate::verdict::{Finding, Severity};

/// Every GGUF finding; each carries its own boundary.
pub fn check(ctx: &Context) -> Vec<Finding> {
    let mut out = metadata_vs_lock(ctx);
    out.extend(gguf_vs_hf(ctx));
    out
}

/// A GGUF's metadata against the lock, each group at its own boundary: the tokenizer's
/// vocabulary, the chat template, the special-token ids (stop set, BOS), the architecture.
fn metadata_vs_lock(ctx: &Context) -> Vec<Finding> {
    let (Some(lock), Some(info)) = (&ctx.lock, &ctx.model.gguf) else {
        return vec![];
    };
    let Some(name) = ctx
        .model
        .weights
        .iter()
        .find(|w| w.path == info.path)
        .map(|w| w.name.clone())
    else {
        return vec![];
    };
    let Some(locked) = lock
        .weights
        .files
        .iter()
        .find(|f| f.name == name)
        .and_then(|f| f.metadata.as_ref())
    else {
        return vec![];
    };
    let now = crate::artifacts::metadata_hashes(info);
    let keys_in = |group: &str| -> String {
        let keys: Vec<&str> = info
            .metadata
            .keys()
            .map(String::as_str)
            .filter(|k| crate::artifacts::metadata_group(k) == group)
            .take(8)
            .collect();
        keys.join(", ")
    };
    let mut out = Vec::new();
    for (group, hash) in locked {
        if now.get(group) == Some(hash) {
            continue;
        }
        let (check, severity, what) = match group.as_str() {
            "tokenizer" => (checks::TOKENIZER_GGUF_METADATA, Severity::Warning, "the GGUF's tokenizer metadata changed since the lock (the tensor data did not); the tokenizer fingerprint says whether it splits text differently"),
            "template" => (checks::TEMPLATE_GGUF_METADATA, Severity::Warning, "the GGUF's chat template changed since the lock (the tensor data did not)"),
            "special-ids" => (checks::GENERATION_GGUF_METADATA, Severity::Warning, "the GGUF's special-token ids or add-BOS/EOS flags changed since the lock (the tensor data did not); llama.cpp stops on and prepends these"),
            "general" => (checks::CHECKPOINT_GGUF_METADATA, Severity::Info, "the GGUF's general.* metadata (name, license, ...) changed since the lock"),
            _ => (checks::CHECKPOINT_GGUF_METADATA, Severity::Warning, "the GGUF's architecture metadata changed since the lock (the tensor data did not): llama.cpp builds the model from these values"),
        };
        out.push(
            Finding::new(check, severity, what)
                .with("file", &name)
                .with("keys", keys_in(group))
                .with("locked", short(hash))
                .with(
                    "found",
                    short(now.get(group).map(String::as_str).unwrap_or("")),
                ),
        );
    }
    out
}

/// A directory that ships both Hugging Face files and a GGUF: the two must describe the same
/// chat. llama.cpp serves the GGUF's template, special tokens and eos/eot ids; transformers
/// stacks serve the HF files. A difference is reported at its own boundary, saying which one
/// this suite's stack serves (the parity and stop-set checks judge the served one).
fn gguf_vs_hf(ctx: &Context) -> Vec<Finding> {
    let (Some(info), true) = (&ctx.model.gguf, ctx.model.root.is_dir()) else {
        return vec![];
    };
    let Some(tok) = ctx.model.tokenizer.as_ref().filter(|t| {
        t.path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("json"))
    }) else {
        return vec![];
    };
    let gguf_name = info
        .path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let served = if ctx.stack.reads_gguf() {
        format!("{} serves the GGUF's", ctx.stack)
    } else {
        format!("{} serves the Hugging Face files'", ctx.stack)
    };
    let mut out = Vec::new();
    // Template.
    let hf_template = ctx
        .model
        .templates
        .templates
        .iter()
        .find(|t| t.name == "default" && !t.origin.contains(&gguf_name));
    let gguf_template = info.get_str("tokenizer.chat_template");
    if let (Some(hf), Some(g)) = (hf_template, gguf_template) {
        if hf.text.trim_end() != g.trim_end() {
            let f = match first_render_difference(ctx, &hf.text, g) {
                // Texts that differ only in markup that renders nothing (`{% generation %}`
                // tags for assistant masks, whitespace control) serve the same prompts.
                None => Finding::new(
                    checks::TEMPLATE_GGUF_VS_HF,
                    Severity::Info,
                    format!(
                        "the GGUF's chat template text differs from the Hugging Face files', but both render the same text for {}, with and without a generation prompt",
                        rendered_on(ctx)
                    ),
                ),
                Some(diff) => Finding::new(
                    checks::TEMPLATE_GGUF_VS_HF,
                    Severity::Warning,
                    "the GGUF's chat template differs from the Hugging Face files' template",
                )
                .with("first difference", diff),
            };
            out.push(
                f.with("gguf", format!("{gguf_name}#tokenizer.chat_template"))
                    .with("hf", &hf.origin)
                    .with("served", &served),
            );
        }
    }
    // Special tokens, as text.
    let hf_special = ctx.model.special_tokens();
    for (name, key, hf) in [
        ("bos_token", "bos_token_id", &hf_special.bos_token),
        ("eos_token", "eos_token_id", &hf_special.eos_token),
    ] {
        let g = info.token_text(key);
        if let (Some(g), Some(h)) = (&g, hf) {
            if g != h {
                out.push(
                    Finding::new(
                        checks::TOKENIZER_GGUF_VS_HF,
                        Severity::Warning,
                        format!("the GGUF's {name} differs from the Hugging Face files'"),
                    )
                    .with("gguf", format!("{g:?} (tokenizer.ggml.{key})"))
                    .with("hf", format!("{h:?}"))
                    .with("served", &served),
                );
            }
        }
    }
    // Stop ids: the GGUF's eos/eot/eom against generation_config.json's eos.
    let gguf_stops: std::collections::BTreeSet<u32> =
        crate::stack::gguf_stop_ids(info).into_iter().collect();
    let hf_stops: std::collections::BTreeSet<u32> = match &ctx.model.generation_config {
        Some(g) => g.eos_token_ids.iter().copied().collect(),
        None => ctx
            .model
            .config
            .iter()
            .flat_map(|c| c.eos_token_ids.iter().copied())
            .collect(),
    };
    // Conversions commonly keep one eos of several: only an eos the HF files do not stop on
    // is a difference that changes where replies end.
    let gguf_eos = info
        .get_u64("tokenizer.ggml.eos_token_id")
        .and_then(|v| u32::try_from(v).ok());
    if !hf_stops.is_empty() && gguf_eos.is_some_and(|e| !hf_stops.contains(&e)) {
        let show = |s: &std::collections::BTreeSet<u32>| {
            let v: Vec<u32> = s.iter().copied().collect();
            crate::chain::run::tokens::show_tokens(&tok.tokenizer, &v)
        };
        out.push(
            Finding::new(
                checks::GENERATION_GGUF_VS_HF,
                Severity::Warning,
                "the GGUF's eos/eot ids differ from generation_config.json's eos_token_id",
            )
            .with("gguf", show(&gguf_stops))
            .with("generation_config", show(&hf_stops))
            .with("served", &served),
        );
    }
    out
}

/// Which conversations the template diff renders: all of them, or a sample of a large SFT file.
fn rendered_on(ctx: &Context) -> String {
    let n = ctx.conversations.len();
    if ctx.golden_sample < crate::chain::run::golden::SAMPLE_ROWS {
        format!("all {n} conversations")
    } else {
        format!(
            "the {n} conversations compared (the first {} golden rows and the suite's own)",
            ctx.golden_sample
        )
    }
}

/// Where two template texts first render differently on the suite's conversations (with and
/// without a generation prompt), or `None` when they render the same everywhere. A template that
/// fails to compile or render where the other succeeds is a difference.
fn first_render_difference(ctx: &Context, a: &str, b: &str) -> Option<String> {
    use crate::template::{ChatTemplate, RenderRequest};
    let (ta, tb) = match (ChatTemplate::new(a), ChatTemplate::new(b)) {
        (Ok(x), Ok(y)) => (x, y),
        (Err(e), _) | (_, Err(e)) => return Some(format!("a template does not compile: {e}")),
    };
    if ctx.conversations.is_empty() {
        return Some("no conversation to render them on".into());
    }
    let special = ctx.model.special_tokens();
    for conv in &ctx.conversations {
        for add_generation_prompt in [false, true] {
            let req = RenderRequest {
                messages: conv.messages.clone(),
                tools: conv
                    .tools
                    .as_ref()
                    .map(|t| serde_json::Value::Array(t.clone())),
                add_generation_prompt,
                special_tokens: special.clone(),
                ..Default::default()
            };
            let ra = ta.render(&req).map(|r| r.text).map_err(|e| e.to_string());
            let rb = tb.render(&req).map(|r| r.text).map_err(|e| e.to_string());
            if ra != rb {
                return Some(format!(
                    "conversation {} (add_generation_prompt = {add_generation_prompt})",
                    conv.id
                ));
            }
        }
    }
    None
}
