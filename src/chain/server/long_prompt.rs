//! Boundary 5 at length: does the server take a prompt as long as the context the suite
//! declares, whole? Every other probe is a few dozen tokens. Ollama without `num_ctx` cut
//! prompts to ~2,050 tokens and answered 200 (ollama#17889); a server launched with a shorter
//! context or a sliding window the checkpoint does not have serves short prompts exactly right.
//! So one prompt is rendered near the declared context — a code on its first line, filler, and
//! a question whose answer is only that code — and the server's `prompt_tokens` is compared
//! with the template's own count (a cut prompt counts fewer), and its reply with a short
//! control of the same question (a model that recalls the code from a short prompt and not
//! from the long one no longer sees the start).
use serde_json::json;

use crate::chain::run::probes::{show, Observed, Online, Probe};
use crate::endpoint::openai::CallError;
use crate::exchange::Record;
use crate::verdict::checks;
use crate::verdict::{Finding, Severity};

/// The longest prompt sent unless the suite declares its context (`[server]
/// long_prompt_tokens`): past Ollama's 2,048-token default, and cheap on a CPU reference.
pub const DEFAULT_CAP: usize = 4096;
/// The reply's budget: enough for the code.
const REPLY: u32 = 16;
/// Room left for the server's own tokens around the template's (a BOS, a default system prompt).
const SLACK: usize = 8;
/// The most filler lines tried: far past any context's worth (each is about 15 tokens).
const MAX_LINES: usize = 1 << 17;
/// What the reply must recall: written only on the prompt's first line.
const CODE: &str = "AMBER-4172";
const NEEDLE: &str = "Remember this access code, you will be asked for it at the end: AMBER-4172.";
const QUESTION: &str =
    "What was the access code given at the very start? Answer with the code only.";

/// `server.long-prompt`.
pub async fn check(online: &Online<'_>, obs: &Observed) -> Vec<Finding> {
    let declared_by_suite = online.ctx.suite.file.server.long_prompt_tokens;
    let checkpoint = online.ctx.model.context_length();
    let declared = match (declared_by_suite, checkpoint) {
        (Some(0), _) => return vec![info("not run ([server] long_prompt_tokens = 0)")],
        (Some(n), _) => n,
        (None, Some(c)) => c.min(DEFAULT_CAP),
        (None, None) => return vec![info("the checkpoint declares no context length: set [server] long_prompt_tokens to send a long prompt")],
    };
    let served = obs.served_context();
    let limit = served.map_or(declared, |s| s.min(declared));
    let Some((probe, rendered)) = long_probe(online, limit.saturating_sub(REPLY as usize + SLACK))
    else {
        return vec![info("the serving template does not render the long prompt")];
    };
    let mut judged = Judged {
        rendered,
        declared,
        ..Judged::default()
    };
    if let Some(s) = served.filter(|s| *s < declared) {
        judged.shorter = Some((s, declared_by_suite.is_some()));
    }
    // Thousands of prompt tokens: its prefill alone outlasts the probes' pace.
    match online.http.patient().chat(&request(online, &probe)).await {
        Ok(rec) => judged.reply = Some(rec),
        Err(CallError::Status { status, body, .. }) => {
            judged.refused = Some(format!("HTTP {status}: {}", show(&body)))
        }
        Err(e) => return vec![info(&format!("the long prompt got no reply: {e}"))],
    }
    if judged.reply.is_some() {
        judged.offset = count_offset(online, obs);
        judged.control = control(online).await;
    }
    vec![judged.finding()]
}

fn info(why: &str) -> Finding {
    Finding::new(checks::SERVER_LONG_PROMPT, Severity::Info, why.to_string())
}

fn chat(id: &str, content: String) -> Probe {
    Probe {
        id: id.into(),
        messages: vec![json!({"role": "user", "content": content})],
        tools: None,
    }
}

/// The long chat: the code, `n` lines of filler, the question.
fn with_filler(n: usize) -> Probe {
    let filler: Vec<String> = (1..=n)
        .map(|i| {
            format!("Note {i}: the archive lists another routine entry with nothing to remember.")
        })
        .collect();
    chat(
        "long-prompt",
        format!("{NEEDLE}\n\n{}\n\n{QUESTION}", filler.join("\n")),
    )
}

/// The longest such chat whose render fits `target` tokens, and its rendered length.
fn long_probe(online: &Online, target: usize) -> Option<(Probe, usize)> {
    let len = |n: usize| online.local_ids(&with_filler(n)).map(|ids| ids.len());
    if len(0)? > target {
        return None;
    }
    // Grow until past the target, then bisect: the count of lines that still fits. A template
    // that does not render the user's text never grows past it: stop there, not loop.
    let mut high = 1;
    while len(high)? <= target {
        if high >= MAX_LINES {
            return None;
        }
        high *= 2;
    }
    let mut low = high / 2;
    while low + 1 < high {
        let mid = (low + high) / 2;
        if len(mid)? <= target {
            low = mid;
        } else {
            high = mid;
        }
    }
    Some((with_filler(low), len(low)?))
}

/// A greedy request for the code.
fn request(online: &Online, probe: &Probe) -> crate::exchange::ChatRequest {
    let mut req = online.request_text(probe, online.settings.seed, false);
    req.max_tokens = Some(REPLY);
    req
}

/// The server's usual difference between its `prompt_tokens` and the template's count (a BOS
/// it adds, a default system prompt), from the short probes: `template.prompt-tokens` judges
/// it; here it is not a cut.
fn count_offset(online: &Online, obs: &Observed) -> i64 {
    obs.runs
        .iter()
        .find_map(|r| {
            let counted = r.main()?.usage?.prompt_tokens? as i64;
            let local = online.local_ids(&r.probe)?.len() as i64;
            Some(counted - local)
        })
        .unwrap_or(0)
}

/// Whether the model recalls the code from the needle and the question alone.
async fn control(online: &Online<'_>) -> Option<bool> {
    let probe = chat("long-prompt-control", format!("{NEEDLE}\n\n{QUESTION}"));
    let rec = online.http.chat(&request(online, &probe)).await.ok()?;
    Some(recalls(&rec))
}

fn recalls(rec: &Record) -> bool {
    rec.text.contains(CODE)
}

/// What the long prompt showed.
#[derive(Default)]
struct Judged {
    /// The template's token count of the long prompt.
    rendered: usize,
    declared: usize,
    /// The server's own context, when shorter than the declared one; whether the suite
    /// declared it.
    shorter: Option<(usize, bool)>,
    reply: Option<Record>,
    refused: Option<String>,
    offset: i64,
    /// Whether the model recalls the code from a short prompt.
    control: Option<bool>,
}

impl Judged {
    fn finding(&self) -> Finding {
        let mut f = self.verdict();
        f = f.with(
            "prompt",
            format!(
                "{} tokens as the template renders it (declared context {}; the code on its first line)",
                self.rendered, self.declared
            ),
        );
        if let Some((served, _)) = self.shorter {
            f = f.with("served context", served.to_string());
        }
        if let Some(rec) = &self.reply {
            f = f.with("reply", show(&rec.text));
        }
        f
    }

    fn verdict(&self) -> Finding {
        if let Some(why) = &self.refused {
            return Finding::new(
                checks::SERVER_LONG_PROMPT,
                Severity::Warning,
                format!(
                    "the server refuses a {}-token prompt inside the declared context of {}: its context is shorter ({why})",
                    self.rendered, self.declared
                ),
            )
            .with("fix", "serve with the checkpoint's context (vLLM --max-model-len, llama.cpp -c, Ollama num_ctx), or declare the deployment's with [server] long_prompt_tokens");
        }
        let Some(rec) = &self.reply else {
            return info("the long prompt got no reply");
        };
        let expected = self.rendered as i64 + self.offset;
        let counted = rec.usage.and_then(|u| u.prompt_tokens).map(|n| n as i64);
        // A cut drops a share of the prompt; a tokenizer that splits the filler otherwise
        // moves the count by a few tokens (template.prompt-tokens names that).
        let margin = (self.rendered as i64 / 20).max(8);
        if let Some(n) = counted.filter(|n| n + margin < expected) {
            return Finding::new(
                checks::SERVER_LONG_PROMPT,
                Severity::Error,
                format!(
                    "the server cut the long prompt: it counts {n} of the {expected} tokens the template renders, and answered {} (the prompt's start is lost)",
                    rec.finish_reason.as_deref().unwrap_or("without a finish_reason")
                ),
            )
            .with("fix", "serve with the checkpoint's context (Ollama: set num_ctx; vLLM --max-model-len; llama.cpp -c), or make the server refuse what it cannot hold");
        }
        let recall = match (self.control, recalls(rec)) {
            (Some(true), false) => Some(false),
            (Some(true), true) => Some(true),
            _ => None,
        };
        if recall == Some(false) {
            return Finding::new(
                checks::SERVER_LONG_PROMPT,
                Severity::Warning,
                format!("the reply to the long prompt does not recall the code on its first line, which the model recalls from a short prompt: the server may lose the prompt's start while counting it (a sliding window, a cut), or the model cannot recall at {} tokens", self.rendered),
            );
        }
        if let Some((served, by_suite)) = self.shorter {
            let severity = if by_suite {
                Severity::Warning
            } else {
                Severity::Info
            };
            return Finding::new(
                checks::SERVER_LONG_PROMPT,
                severity,
                format!(
                    "the server's context ({served}) is shorter than the declared one ({}); a prompt of {} tokens is taken whole",
                    self.declared, self.rendered
                ),
            );
        }
        let counted = match counted {
            Some(n) => format!("counted whole ({n} tokens)"),
            None => "answered (the server reports no prompt_tokens to count it by)".into(),
        };
        let recalled = match recall {
            Some(true) => ", and the reply recalls the code on its first line",
            _ => {
                "; recall not judged (the model does not recall the code even from a short prompt)"
            }
        };
        Finding::pass(
            checks::SERVER_LONG_PROMPT,
            format!("a {}-token prompt is {counted}{recalled}", self.rendered),
        )
    }
}
