//! Boundary 4, the generation config: does the server stop where training taught the model to
//! stop, never earlier, and with the sampling defaults the suite expects?
pub mod harmony;
pub mod online;
use crate::verdict::checks;
use std::collections::BTreeSet;

use serde_json::{json, Value};
use tokenizers::Tokenizer;

use crate::chain::run::context::{Context, Conversation, Pipeline, Sft};
use crate::chain::run::rows::Examples;
use crate::chain::run::tokens::{encode, show_tokens, single_id};
use crate::chain::template::mask_spans;
use crate::error::Result;
use crate::verdict::{Finding, Severity};

pub fn check(ctx: &Context, g: &GenerationTally) -> Result<Vec<Finding>> {
    let Some(tok) = ctx.model.tokenizer.as_ref().map(|t| &t.tokenizer) else {
        return Ok(vec![]);
    };
    let stops = stop_set(ctx, tok);
    let mut out = Vec::new();
    out.extend(terminator_in_stop_set(ctx, tok, &stops, g)?);
    out.extend(no_stop_inside_reply(tok, &stops.ids, g));
    out.extend(defaults(ctx));
    Ok(out)
}

/// What the generation boundary's per-row checks saw over all rows.
#[derive(Default)]
pub struct GenerationTally {
    /// Some row carried an assistant mask: the terminators come from the masks.
    pub from_mask: bool,
    /// The special tokens that close a masked assistant span.
    pub terminators: BTreeSet<u32>,
    /// A mask that stops before the terminator: the model never learned to emit it.
    pub outside_mask: bool,
    /// Assistant replies looked at, and those with a stop token inside: (row, token, position).
    pub spans_seen: usize,
    pub stop_inside: Examples<(String, u32, usize)>,
}

impl GenerationTally {
    pub fn merge(&mut self, later: GenerationTally) {
        self.from_mask |= later.from_mask;
        self.terminators.extend(later.terminators);
        self.outside_mask |= later.outside_mask;
        self.spans_seen += later.spans_seen;
        self.stop_inside.merge(later.stop_inside);
    }
}

/// The stop set the per-row checks test replies against; None without a tokenizer.
pub fn row_stops(ctx: &Context) -> Option<BTreeSet<u32>> {
    let tok = &ctx.model.tokenizer.as_ref()?.tokenizer;
    Some(stop_set(ctx, tok).ids)
}

/// One conversation through the generation boundary's checks: which token closes its
/// assistant turns (from the mask), and does a stop token occur inside a reply (ollama#17939)?
pub fn row(
    ctx: &Context,
    stops: Option<&BTreeSet<u32>>,
    conv: &Conversation,
) -> Result<GenerationTally> {
    let mut t = GenerationTally::default();
    let (Some(tok), Some(stops)) = (ctx.model.tokenizer.as_ref().map(|t| &t.tokenizer), stops)
    else {
        return Ok(t);
    };
    match &conv.golden {
        Some((golden, Some(mask))) => {
            t.from_mask = true;
            for (start, end) in mask_spans(mask) {
                let last = golden[end - 1];
                if is_special(tok, last) {
                    t.terminators.insert(last);
                } else if let Some(&next) = golden.get(end).filter(|&&n| is_special(tok, n)) {
                    t.terminators.insert(next);
                    t.outside_mask = true;
                }
                t.spans_seen += 1;
                // The span's last token may be the terminator itself.
                if let Some(pos) =
                    (start..end.saturating_sub(1)).find(|&i| stops.contains(&golden[i]))
                {
                    t.stop_inside.push((conv.id.clone(), golden[pos], pos));
                }
            }
        }
        _ => {
            for m in conv
                .messages
                .iter()
                .filter(|m| m.get("role").and_then(Value::as_str) == Some("assistant"))
            {
                let Some(content) = m.get("content").and_then(Value::as_str) else {
                    continue;
                };
                t.spans_seen += 1;
                let ids = encode(tok, content, false)?;
                if let Some(pos) = ids.iter().position(|i| stops.contains(i)) {
                    t.stop_inside.push((conv.id.clone(), ids[pos], pos));
                }
            }
        }
    }
    Ok(t)
}

/// The stop set the serving stack uses, and the ids a stricter member of its family would
/// miss.
pub struct StopSet {
    pub ids: BTreeSet<u32>,
    /// Where the ids come from, for evidence.
    pub source: String,
    /// transformers/TGI: generation_config.json's eos ids (config.json's without one). HF
    /// `generate()` and `transformers serve` stop on these alone; vLLM and TGI add the
    /// tokenizer's eos, so an id only the tokenizer names is a gap for some servers.
    pub generation_config: Option<BTreeSet<u32>>,
}

/// What the serving stack stops on, plus the suite's extra stop ids.
pub fn stop_set(ctx: &Context, tok: &Tokenizer) -> StopSet {
    let extra = ctx
        .suite
        .file
        .generation
        .extra_stop_token_ids
        .iter()
        .copied();
    if ctx.stack.reads_gguf() {
        if let Some(info) = &ctx.model.gguf {
            let mut ids: BTreeSet<u32> = crate::stack::gguf_stop_ids(info).into_iter().collect();
            let has = |t: &str| tok.token_to_id(t).is_some();
            ids.extend(
                crate::artifacts::llama_cpp_vocab::eog_texts(&has)
                    .into_iter()
                    .filter_map(|t| tok.token_to_id(t)),
            );
            ids.extend(extra);
            return StopSet {
                ids,
                source: format!(
                    "{}: the GGUF's eos/eot/eom ids and the end-of-generation tokens llama.cpp recognises by name",
                    ctx.stack
                ),
                generation_config: None,
            };
        }
    }
    let mut gen = BTreeSet::new();
    let gen_source = match &ctx.model.generation_config {
        Some(gc) => {
            gen.extend(gc.eos_token_ids.iter().copied());
            "generation_config.json eos_token_id"
        }
        None => {
            gen.extend(
                ctx.model
                    .config
                    .iter()
                    .flat_map(|c| c.eos_token_ids.iter().copied()),
            );
            "config.json eos_token_id"
        }
    };
    gen.extend(extra);
    let mut ids = gen.clone();
    if let Some(eos) = ctx
        .model
        .special_tokens()
        .eos_token
        .as_deref()
        .and_then(|e| single_id(tok, e))
    {
        ids.insert(eos);
    }
    StopSet {
        ids,
        source: format!("{}: {gen_source} ∪ the tokenizer's eos_token", ctx.stack),
        generation_config: Some(gen),
    }
}

fn show_set(tok: &Tokenizer, ids: &BTreeSet<u32>) -> String {
    let v: Vec<u32> = ids.iter().copied().collect();
    format!("[{}]", show_tokens(tok, &v))
}

/// The token(s) that close an assistant turn in the SFT format.
struct Terminators {
    ids: BTreeSet<u32>,
    /// Where they came from, for evidence.
    source: String,
    /// A golden mask that stops before the terminator: the model never learned to emit it.
    outside_mask: bool,
}

fn terminators(ctx: &Context, rows: &GenerationTally) -> Result<Option<Terminators>> {
    if rows.from_mask {
        return Ok(Some(Terminators {
            ids: rows.terminators.clone(),
            source: "the golden SFT assistant masks".into(),
            outside_mask: rows.outside_mask,
        }));
    }
    // No mask: render a probe turn with the SFT template (or the serving one, whose parity with
    // the SFT ids is checked at the template boundary) and read the token after the reply.
    let pipeline: Option<&Pipeline> = match &ctx.sft {
        Sft::Template(p) => Some(p),
        _ => ctx.serving.as_ref(),
    };
    let Some(p) = pipeline else { return Ok(None) };
    Ok(probe_terminator(p)?.map(|id| Terminators {
        ids: BTreeSet::from([id]),
        source: format!("a probe turn rendered with {}", p.origin),
        outside_mask: false,
    }))
}

fn is_special(tok: &Tokenizer, id: u32) -> bool {
    tok.get_added_vocabulary().simple_id_to_token(id).is_some()
}

/// Render [user, assistant "<reply>"] and return the first token after the reply's text.
fn probe_terminator(p: &Pipeline) -> Result<Option<u32>> {
    const REPLY: &str = "Probe reply 7 done.";
    let msgs: Vec<Value> = vec![
        json!({"role": "user", "content": "Hello"}),
        json!({"role": "assistant", "content": REPLY}),
    ];
    let Ok(r) = p.render(&msgs, None, false) else {
        return Ok(None);
    };
    let Some(byte_end) = r.text.rfind(REPLY).map(|b| b + REPLY.len()) else {
        return Ok(None);
    };
    let enc = p
        .tokenizer
        .encode(r.text.as_str(), p.add_special_tokens)
        .map_err(|e| {
            crate::error::Error::input(format!("the tokenizer failed to encode a probe: {e}"))
        })?;
    Ok(enc
        .get_ids()
        .iter()
        .zip(enc.get_offsets())
        .find(|(_, (s, _))| *s >= byte_end)
        .map(|(id, _)| *id))
}

fn terminator_in_stop_set(
    ctx: &Context,
    tok: &Tokenizer,
    set: &StopSet,
    rows: &GenerationTally,
) -> Result<Vec<Finding>> {
    let stops = &set.ids;
    let Some(t) = terminators(ctx, rows)? else {
        return Ok(vec![Finding::new(
            checks::GENERATION_STOP_SET,
            Severity::Info,
            "no SFT format or template to find the turn terminator in",
        )]);
    };
    // gpt-oss: the turn ends on <|return|> or <|call|>, never on <|end|> (a message end).
    if let Some(h) = ctx
        .serving
        .as_ref()
        .and_then(|p| crate::chain::generation::harmony::Harmony::of(tok, p.template.source()))
    {
        return Ok(harmony_stop_set(ctx, tok, set, &h, &t));
    }
    let mut out = Vec::new();
    if t.ids.is_empty() {
        out.push(
            Finding::new(
                checks::GENERATION_STOP_SET,
                Severity::Warning,
                "no special token closes the assistant turns of the SFT format",
            )
            .with("source", &t.source),
        );
        return Ok(out);
    }
    let missing: BTreeSet<u32> = t.ids.difference(stops).copied().collect();
    let only_tokenizer: BTreeSet<u32> = set
        .generation_config
        .as_ref()
        .map(|g| t.ids.difference(g).copied().collect())
        .unwrap_or_default();
    if missing.is_empty() && !only_tokenizer.is_empty() {
        // The tokenizer's eos covers it, generation_config.json does not: HF generate() and
        // `transformers serve` run on; vLLM (which merges both) and TGI stop.
        let severity = if ctx.stack == crate::stack::Stack::Transformers {
            Severity::Error
        } else {
            Severity::Warning
        };
        out.push(
            Finding::new(checks::GENERATION_STOP_SET, severity, "the turn terminator is the tokenizer's eos but not in generation_config.json's eos_token_id: HF generate() and `transformers serve` stop only on the latter and will run on (vLLM and TGI also stop on the tokenizer's eos)")
                .with("stack", ctx.stack)
                .with("turn terminator", show_set(tok, &only_tokenizer))
                .with("generation_config eos", show_set(tok, set.generation_config.as_ref().unwrap_or(stops)))
                .with("found in", &t.source)
                .with("fix", stop_fix(ctx)),
        );
    } else if missing.is_empty() {
        out.push(
            Finding::pass(
                checks::GENERATION_STOP_SET,
                format!(
                    "the turn terminator {} is in the stop set {}",
                    show_set(tok, &t.ids),
                    show_set(tok, stops)
                ),
            )
            .with("stop set of", &set.source),
        );
    } else {
        out.push(
            Finding::new(checks::GENERATION_STOP_SET, Severity::Error, "the token that ends an assistant turn is not in the stop set: replies will run on past the answer")
                .with("turn terminator", show_set(tok, &missing))
                .with("stop set", show_set(tok, stops))
                .with("stop set of", &set.source)
                .with("found in", &t.source)
                .with("fix", stop_fix(ctx)),
        );
    }
    if t.outside_mask {
        out.push(
            Finding::new(checks::GENERATION_TERMINATOR_TRAINED, Severity::Warning, "the SFT assistant mask ends before the turn terminator: the model was not trained to emit it")
                .with("terminator", show_set(tok, &t.ids)),
        );
    }
    Ok(out)
}

/// Where the stack reads its stop tokens from, and so what to change: llama.cpp never reads
/// generation_config.json.
fn stop_fix(ctx: &Context) -> String {
    if ctx.stack.reads_gguf() {
        format!(
            "{} stops on the GGUF's eos/eot/eom ids and the end-of-generation tokens it knows by name, not on generation_config.json: set the terminator as the GGUF's tokenizer.ggml.eot_token_id (llama-server --override-kv tokenizer.ggml.eot_token_id=int:ID, or convert again with it as eos)",
            ctx.stack
        )
    } else {
        "add the terminator's id to generation_config.json eos_token_id".into()
    }
}

/// The stop set of a harmony model (gpt-oss): `<|return|>` must be in it (the final answer's
/// end), `<|call|>` should be (a tool call's end), and `<|end|>` must not (it ends every
/// message, the analysis channel mid-turn included). A template that closes the last
/// assistant message with `<|end|>` (history form) does not make `<|end|>` a terminator.
fn harmony_stop_set(
    ctx: &Context,
    tok: &Tokenizer,
    set: &StopSet,
    h: &crate::chain::generation::harmony::Harmony,
    t: &Terminators,
) -> Vec<Finding> {
    use crate::chain::generation::harmony::{CALL, END, RETURN};
    let stops = &set.ids;
    let fix = |name: &str, id: u32| {
        stop_fix(ctx)
            .replace("the terminator's id", &format!("{name}'s id ({id})"))
            .replace("set the terminator as", &format!("set {name} ({id}) as"))
    };
    let found = if t.ids.contains(&h.end) {
        format!(
            "{} (it writes {END} after the assistant's last message: the history form of a final answer, a message end and not the turn's)",
            t.source
        )
    } else {
        t.source.clone()
    };
    if stops.contains(&h.end) {
        return vec![Finding::new(checks::GENERATION_STOP_SET, Severity::Error, format!("the stop set holds {END}, which ends every harmony message: replies stop after the analysis channel, before the final answer"))
            .with("stop set", show_set(tok, stops))
            .with("stop set of", &set.source)
            .with("turn ends (harmony)", format!("{RETURN} (final answer), {CALL} (tool call)"))
            .with("fix", format!("remove {END} from the stop set ({})", if ctx.stack.reads_gguf() { "the GGUF's eos/eot ids" } else { "generation_config.json eos_token_id" }))];
    }
    if !stops.contains(&h.ret) {
        return vec![Finding::new(checks::GENERATION_STOP_SET, Severity::Error, format!("the harmony final-answer end {RETURN} is not in the stop set: replies run on past the answer"))
            .with("stop set", show_set(tok, stops))
            .with("stop set of", &set.source)
            .with("found in", found)
            .with("fix", fix(RETURN, h.ret))];
    }
    if !stops.contains(&h.call) {
        return vec![Finding::new(checks::GENERATION_STOP_SET, Severity::Warning, format!("the harmony tool-call end {CALL} is not in the stop set: a tool call runs on instead of stopping for the tool (gpt-oss's first generation_config.json lacked 200012)"))
            .with("stop set", show_set(tok, stops))
            .with("stop set of", &set.source)
            .with("fix", fix(CALL, h.call))
            .with("unless", "the server stops on it on purpose to allow parallel tool calls")];
    }
    vec![Finding::pass(
        checks::GENERATION_STOP_SET,
        format!(
            "the harmony turn ends {RETURN} and {CALL} are in the stop set {}, and {END} (a message end) is not",
            show_set(tok, stops)
        ),
    )
    .with("stop set of", &set.source)
    .with("found in", found)]
}

/// No stop token may occur inside what the assistant is trained to say, or replies are cut
/// short there (ollama#17939).
fn no_stop_inside_reply(
    tok: &Tokenizer,
    stops: &BTreeSet<u32>,
    rows: &GenerationTally,
) -> Vec<Finding> {
    let spans_seen = rows.spans_seen;
    if spans_seen == 0 {
        return vec![];
    }
    vec![match rows.stop_inside.first() {
        None => Finding::pass(
            checks::GENERATION_STOP_INSIDE_REPLY,
            format!("no stop token inside {spans_seen} assistant replies"),
        ),
        Some((id, token, pos)) => Finding::new(
            checks::GENERATION_STOP_INSIDE_REPLY,
            Severity::Error,
            format!(
                "a stop token occurs inside {} assistant replies: the server will cut them short",
                rows.stop_inside.count
            ),
        )
        .with("first conversation", id)
        .with("token", show_tokens(tok, &[*token]))
        .with("position", pos)
        .with("stop set", show_set(tok, stops)),
    }]
}

/// The generation defaults the serving files carry vs what the suite expects (vllm#15241: a
/// server applies generation_config.json silently).
fn defaults(ctx: &Context) -> Vec<Finding> {
    let want = &ctx.suite.file.generation;
    // llama.cpp never reads generation_config.json: its defaults are the server's flags
    // (checked online against /props as generation.server-defaults).
    if ctx.stack.reads_gguf() {
        return vec![Finding::new(
            checks::GENERATION_DEFAULTS,
            Severity::Info,
            format!(
                "{} does not read generation_config.json: its sampling defaults are the server's flags (compared online with /props)",
                ctx.stack
            ),
        )];
    }
    let gc = ctx.model.generation_config.clone().unwrap_or_default();
    // transformers' GenerationConfig defaults when the file omits a field.
    let pairs: Vec<(&str, Option<String>, String)> = vec![
        (
            "temperature",
            want.temperature.map(|v| v.to_string()),
            gc.temperature.unwrap_or(1.0).to_string(),
        ),
        (
            "top_p",
            want.top_p.map(|v| v.to_string()),
            gc.top_p.unwrap_or(1.0).to_string(),
        ),
        (
            "top_k",
            want.top_k.map(|v| v.to_string()),
            gc.top_k.unwrap_or(50).to_string(),
        ),
        (
            "min_p",
            want.min_p.map(|v| v.to_string()),
            gc.min_p
                .map(|v| v.to_string())
                .unwrap_or_else(|| "none".into()),
        ),
        (
            "repetition_penalty",
            want.repetition_penalty.map(|v| v.to_string()),
            gc.repetition_penalty.unwrap_or(1.0).to_string(),
        ),
        (
            "do_sample",
            want.do_sample.map(|v| v.to_string()),
            gc.do_sample.unwrap_or(false).to_string(),
        ),
        (
            "max_new_tokens",
            want.max_new_tokens.map(|v| v.to_string()),
            gc.max_new_tokens
                .map(|v| v.to_string())
                .unwrap_or_else(|| "none".into()),
        ),
    ];
    let expected: Vec<_> = pairs
        .into_iter()
        .filter_map(|(k, w, h)| w.map(|w| (k, w, h)))
        .collect();
    if expected.is_empty() {
        return vec![];
    }
    let wrong: Vec<_> = expected.iter().filter(|(_, w, h)| w != h).collect();
    if wrong.is_empty() {
        return vec![Finding::pass(
            checks::GENERATION_DEFAULTS,
            format!("{} generation defaults match the suite", expected.len()),
        )];
    }
    let mut f = Finding::new(checks::GENERATION_DEFAULTS, Severity::Error, "the model's generation defaults differ from what the suite expects: servers that read generation_config.json will sample differently");
    for (k, w, h) in wrong {
        f = f.with(
            k,
            format!("suite expects {w}, generation_config.json gives {h}"),
        );
    }
    vec![f]
}
