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
/// The default length on a slow server: still past Ollama's 2,048-token default.
const PACED_FLOOR: usize = 2560;
/// The most the whole default length may take, estimated from the server's time over the floor,
/// for it to be sent after the floor: a prefill is quadratic-ish in the prompt and cannot be
/// cut short, and on a CPU server (llama-cpp-python on Gemma 3 270M: 4,064 tokens in 50 s)
/// it was a third of a gate.
const PREFILL_BUDGET_S: f64 = 15.0;
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
    let sizes = Sizes {
        declared,
        shorter: served
            .filter(|s| *s < declared)
            .map(|s| (s, declared_by_suite.is_some())),
    };
    // A default length past the floor is tried at the floor first: how long the server took
    // over it says whether the whole length is worth its prefill (`PREFILL_BUDGET_S`).
    let first = match declared_by_suite {
        None if limit > PACED_FLOOR => PACED_FLOOR,
        _ => limit,
    };
    let mut judged = match send(online, obs, first, &sizes).await {
        Ok(j) => j,
        Err(f) => return vec![f],
    };
    if first < limit && judged.whole() {
        match whole_length(judged.took(), judged.rendered, limit) {
            Ok(()) => {
                judged = match send(online, obs, limit, &sizes).await {
                    Ok(j) => j,
                    Err(f) => return vec![f],
                }
            }
            Err(why) => judged.paced = Some(why),
        }
    }
    if judged.reply.is_some() {
        judged.control = control(online).await;
    }
    vec![judged.finding()]
}

/// Whether the whole default length of `limit` tokens is worth sending after the server took
/// `took` over a prompt of `rendered`: Err with why not when its prefill, estimated linearly
/// (short of a real one, which grows faster), would take more than `PREFILL_BUDGET_S`.
fn whole_length(took: std::time::Duration, rendered: usize, limit: usize) -> Result<(), String> {
    let took = took.as_secs_f64();
    let estimate = took * limit as f64 / rendered.max(1) as f64;
    if estimate <= PREFILL_BUDGET_S {
        return Ok(());
    }
    Err(format!(
        "sent at {rendered} tokens, not {limit}: this server took {took:.1} s over them, so {limit} would take ~{estimate:.0} s (over {PREFILL_BUDGET_S:.0} s); a context between the two is not seen, and [server] long_prompt_tokens = {limit} sends the whole length"
    ))
}

/// The declared context and the server's own when shorter (whether the suite declared it).
struct Sizes {
    declared: usize,
    shorter: Option<(usize, bool)>,
}

/// The long prompt rendered within `limit` tokens, sent and judged (all but the control);
/// Err: the finding that says why nothing could be judged.
async fn send(
    online: &Online<'_>,
    obs: &Observed,
    limit: usize,
    sizes: &Sizes,
) -> Result<Judged, Finding> {
    let Some((probe, rendered)) = long_probe(online, limit.saturating_sub(REPLY as usize + SLACK))
    else {
        return Err(info("the serving template does not render the long prompt"));
    };
    let mut judged = Judged {
        rendered,
        declared: sizes.declared,
        shorter: sizes.shorter,
        ..Judged::default()
    };
    // Thousands of prompt tokens: its prefill alone outlasts the probes' pace.
    match online.http.patient().chat(&request(online, &probe)).await {
        Ok(rec) => judged.reply = Some(rec),
        Err(CallError::Status { status, body, .. }) => {
            judged.refused = Some(format!("HTTP {status}: {}", show(&body)))
        }
        Err(e) => return Err(info(&format!("the long prompt got no reply: {e}"))),
    }
    judged.offset = count_offset(online, obs);
    Ok(judged)
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
    /// Why the prompt was sent shorter than the default length, when it was.
    paced: Option<String>,
}

fn counted(rec: &Record) -> Option<i64> {
    rec.usage.and_then(|u| u.prompt_tokens).map(|n| n as i64)
}

impl Judged {
    /// The prompt tokens the server should count: the template's, and its usual offset.
    fn expected(&self) -> i64 {
        self.rendered as i64 + self.offset
    }

    /// The server counts fewer prompt tokens than the template renders. A cut drops a share of
    /// the prompt; a tokenizer that splits the filler otherwise moves the count by a few tokens
    /// (template.prompt-tokens names that).
    fn cut(&self, rec: &Record) -> bool {
        let margin = (self.rendered as i64 / 20).max(8);
        counted(rec).is_some_and(|n| n + margin < self.expected())
    }

    /// The server answered the prompt and counted it whole.
    fn whole(&self) -> bool {
        self.refused.is_none() && self.reply.as_ref().is_some_and(|r| !self.cut(r))
    }

    /// How long the server took over the prompt.
    fn took(&self) -> std::time::Duration {
        self.reply.as_ref().map_or(std::time::Duration::ZERO, |r| {
            r.timing.t_end.saturating_duration_since(r.timing.t_send)
        })
    }

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
        if let Some(why) = &self.paced {
            f = f.with("length", why);
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
        let expected = self.expected();
        let counted = counted(rec);
        if let Some(n) = counted.filter(|_| self.cut(rec)) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_whole_default_length_follows_only_a_floor_the_server_took_quickly() {
        // llama-cpp-python on Gemma 3 270M with one core busy: 4,064 tokens took 50 s, so the
        // floor's ~2,536 take about 28 s and the whole length is not sent.
        let why = whole_length(Duration::from_secs(28), 2536, 4096).unwrap_err();
        assert_eq!(why, "sent at 2536 tokens, not 4096: this server took 28.0 s over them, so 4096 would take ~45 s (over 15 s); a context between the two is not seen, and [server] long_prompt_tokens = 4096 sends the whole length");
        // A GPU server's prefill of the floor in 0.3 s: the whole length follows.
        assert_eq!(whole_length(Duration::from_millis(300), 2536, 4096), Ok(()));
        // At the line: 9.2 s for the floor is 14.9 s for 4,096, 9.4 s is 15.2.
        assert_eq!(
            whole_length(Duration::from_millis(9_200), 2536, 4096),
            Ok(())
        );
        assert!(whole_length(Duration::from_millis(9_400), 2536, 4096).is_err());
    }
}
