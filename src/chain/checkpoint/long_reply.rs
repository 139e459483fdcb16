//! The fingerprint's long reply: one probe's chat run to hundreds of tokens and judged window by
//! window. The short probes see a reply's first 16 tokens; a server whose output degrades after
//! N tokens (llama.cpp#23717: a q8_0 KV cache turned output to gibberish after 100–150) passes
//! them. Teacher forcing keeps every position comparable however long the reply runs: the
//! reference scores the server's own tokens, so a near tie taken the other way early changes
//! the text, not the comparison.
use crate::chain::checkpoint::drift::Tolerance;
use crate::chain::checkpoint::online::{compare_run, reply_ids, Forcer, Judged, Reply, Tally};
use crate::chain::run::probes::{Observed, Online, Probe};
use crate::endpoint::openai::CallError;
use crate::exchange::Record;

/// The long reply's prompt unless the suite sets one (`[reference] long_reply_prompt`).
pub const PROMPT: &str =
    "Write a long, detailed story about a lighthouse keeper and the ships she guides, chapter by chapter.";
/// Tokens of the long reply unless the suite says otherwise (`[reference] long_reply_tokens`).
pub const DEFAULT_TOKENS: usize = 256;
/// Positions judged together: enough for the bounds on the mean and p95 to mean something,
/// few enough to say where the reply left the reference.
pub const WINDOW: usize = 32;
/// A long reply no longer than this adds nothing to the short probes.
const AT_LEAST: usize = 2 * WINDOW;
/// The most the long reply's logprobs may add to the gate, in seconds, at the cost per token
/// the probes measured; past it the reply is asked without them. llama-cpp-python sorts the
/// whole vocabulary in Python for every token it reports logprobs for and detokenizes the reply
/// again per token: on Gemma 3's 262k vocabulary 0.4 s a token, and a 256-token reply took 8
/// minutes, during which it served nothing else (it does not stop work a client gave up on).
const LOGPROB_BUDGET_S: f64 = 30.0;

/// What the long reply showed.
pub enum LongReply {
    /// Not run or not judged, and why.
    Unjudged(String),
    /// Judged: every window's verdict, and the first that left the reference.
    Judged {
        tokens: usize,
        /// Why the reply is shorter than asked for, when it is.
        short: Option<String>,
        verdict: Judged,
        /// The first window out of bounds, as (from, to).
        left_at: Option<(usize, usize)>,
        /// Each window's mean |Δ| up to the first out of bounds (None: no logprobs compared).
        means: Vec<Option<f32>>,
        /// Why the reply was asked without logprobs (judged on its tokens), when it was.
        without_logprobs: Option<String>,
    },
}

impl LongReply {
    /// The window out of the reference's bounds, as (from, to), and what, said.
    pub fn departure(&self) -> Option<((usize, usize), String)> {
        match self {
            LongReply::Judged {
                verdict: Judged::Different(detail),
                left_at: Some(at),
                ..
            } => Some((*at, detail.clone())),
            _ => None,
        }
    }

    /// Its evidence line.
    pub fn describe(&self) -> String {
        match self {
            LongReply::Unjudged(why) => format!("not judged: {why}"),
            LongReply::Judged {
                tokens,
                short,
                verdict,
                left_at,
                means,
                without_logprobs,
            } => {
                let windows = spans(*tokens).len();
                let mut s = match (verdict, left_at) {
                    (Judged::Different(_), Some((at, _))) => format!(
                        "{tokens} tokens in {windows} windows of {WINDOW}: out of the reference's bounds from token {at}"
                    ),
                    (Judged::Drift, _) => format!(
                        "{tokens} tokens in {windows} windows of {WINDOW}: within the reference's bounds; the greedy path leaves it at near ties only"
                    ),
                    _ => format!(
                        "{tokens} tokens in {windows} windows of {WINDOW}: every window within the reference's bounds"
                    ),
                };
                if means.iter().any(Option::is_some) {
                    let shown: Vec<String> = means
                        .iter()
                        .map(|m| m.map_or("–".into(), |m| format!("{m:.2}")))
                        .collect();
                    s.push_str(&format!("; mean |Δ| by window: {}", shown.join(" ")));
                }
                if let Some(why) = short {
                    s.push_str(&format!(" ({why})"));
                }
                if let Some(why) = without_logprobs {
                    s.push_str(&format!(
                        "; judged on the server's tokens, not its logprobs: {why}"
                    ));
                }
                s
            }
        }
    }
}

/// The tokens the suite asks for (0: none).
fn wanted(online: &Online) -> usize {
    online
        .ctx
        .suite
        .file
        .reference
        .as_ref()
        .and_then(|r| r.long_reply_tokens)
        .unwrap_or(DEFAULT_TOKENS)
}

/// The context a reply must fit: the server's and the checkpoint's, the smaller.
fn context_length(online: &Online, obs: &Observed) -> Option<usize> {
    let checkpoint = online.ctx.model.context_length();
    obs.served_context().into_iter().chain(checkpoint).min()
}

/// What the long reply says against a reference that cannot teacher-force, when the suite
/// asks for one.
pub fn not_judged_by(online: &Online, reference: &str) -> Option<String> {
    (wanted(online) > 0).then(|| format!("not judged: {reference} gives no logprobs of the server's own tokens past the short probes; a reference that teacher-forces ([reference] model, or a url on vLLM, SGLang, TGI or llama-server) judges it"))
}

/// Run and judge the long reply against a reference that teacher-forces.
pub(super) async fn judge(
    online: &Online<'_>,
    obs: &Observed,
    reference: &Forcer<'_>,
    tol: &Tolerance,
) -> LongReply {
    let wanted = wanted(online);
    if wanted == 0 {
        return LongReply::Unjudged("off ([reference] long_reply_tokens = 0)".into());
    }
    let probe = probe(online);
    let Some(local) = online.local_ids(&probe) else {
        return LongReply::Unjudged("the serving template does not render its prompt".into());
    };
    let room = context_length(online, obs).map_or(wanted, |c| c.saturating_sub(local.len()));
    let asked = wanted.min(room);
    if asked < AT_LEAST {
        return LongReply::Unjudged(format!(
            "the context leaves {room} tokens after the prompt, fewer than {AT_LEAST}"
        ));
    }
    let server_ids = online
        .http
        .tokenize_chat(&probe.messages, None, true)
        .await
        .ok()
        .flatten();
    let Sized {
        tokens: asked,
        without_logprobs,
        shortened,
    } = match sized(obs, asked) {
        Ok(s) => s,
        Err(why) => return LongReply::Unjudged(why),
    };
    let reply = match ask(online, &probe, asked, without_logprobs.is_none()).await {
        Ok(r) => r,
        Err(e) => return LongReply::Unjudged(format!("the long request failed: {e}")),
    };
    let Some(prompt) = confirmed(server_ids, local, &reply) else {
        return LongReply::Unjudged("the server's prompt ids are unconfirmed (no tokenize route, and usage.prompt_tokens differs from the local render: the template boundary says why)".into());
    };
    let Some(ids) = reply_ids(online, &reply).await else {
        return LongReply::Unjudged("its generated ids are unconfirmed".into());
    };
    let scored = match reference.score(online, &prompt, &ids).await {
        Ok(s) => s,
        Err(why) => return LongReply::Unjudged(format!("the reference could not score it: {why}")),
    };
    let stopped = (ids.len() < asked).then(|| {
        format!(
            "asked for {asked}, the server stopped after {} with finish_reason {:?}; a server that takes no `ignore_eos` stops where the model does",
            ids.len(),
            reply.finish_reason.as_deref().unwrap_or("none")
        )
    });
    let short = match (shortened, stopped) {
        (Some(a), Some(b)) => Some(format!("{a}; {b}")),
        (a, b) => a.or(b),
    };
    if ids.len() < AT_LEAST {
        return LongReply::Unjudged(short.unwrap_or_default());
    }
    let (verdict, left_at, means) = windows(&probe.id, &reply, &scored, tol, &|id| {
        reference.decode_token(online, id)
    });
    LongReply::Judged {
        tokens: ids.len(),
        short,
        verdict,
        left_at,
        means,
        without_logprobs,
    }
}

/// How the long reply is asked, at what its logprobs cost this server per token (the probes
/// measured it).
struct Sized {
    tokens: usize,
    /// Why it goes without logprobs (judged on the ids the server reports), when it does.
    without_logprobs: Option<String>,
    /// Why it is shorter than the suite asked for, when it is.
    shortened: Option<String>,
}

/// `asked` tokens with logprobs while they add at most [`LOGPROB_BUDGET_S`]; past that, without
/// them on a server that reports token ids (only reported ids say which tokens it generated:
/// its text re-tokenized may split otherwise), else the whole windows the budget pays for — a
/// shorter reply judged says more than none, and a busy server's cost must not turn the check
/// off. Err: not even two windows fit.
fn sized(obs: &Observed, asked: usize) -> Result<Sized, String> {
    let cost = obs.logprob_cost();
    let whole = |without_logprobs| Sized {
        tokens: asked,
        without_logprobs,
        shortened: None,
    };
    let Some(why) = cost.and_then(|c| dear(c, asked)) else {
        return Ok(whole(None));
    };
    let reports_ids = obs
        .runs
        .iter()
        .any(|r| r.main().is_some_and(|m| m.token_ids.is_some()));
    if reports_ids {
        return Ok(whole(Some(why)));
    }
    let Some(fit) = cost.and_then(affordable) else {
        return Err(format!("logprobs are too dear on this server ({why}) even for {AT_LEAST} tokens, and without them it reports no token ids to judge; a stack that reports them (vLLM with return_token_ids, chatgate serve) or whose logprobs are cheap (vLLM, llama-server) judges it, and [reference] long_reply_tokens = 0 says it is not wanted"));
    };
    Ok(Sized {
        tokens: fit,
        without_logprobs: None,
        shortened: Some(format!(
            "shortened from {asked}: {why}, and the {LOGPROB_BUDGET_S:.0} s logprobs may add pays for {fit}"
        )),
    })
}

/// The most tokens, in whole windows and at least [`AT_LEAST`], whose logprobs fit
/// [`LOGPROB_BUDGET_S`] at this cost per token.
fn affordable(per_token: std::time::Duration) -> Option<usize> {
    let per_token = per_token.as_secs_f64();
    if per_token <= 0.0 {
        return None;
    }
    let windows = (LOGPROB_BUDGET_S / per_token / WINDOW as f64).floor() as usize;
    let tokens = windows.saturating_mul(WINDOW);
    (tokens >= AT_LEAST).then_some(tokens)
}

fn dear(per_token: std::time::Duration, tokens: usize) -> Option<String> {
    let per_token = per_token.as_secs_f64();
    let total = per_token * tokens as f64;
    (total > LOGPROB_BUDGET_S).then(|| {
        format!(
            "they cost this server {:.0} ms a token on the probes, {total:.0} s or more for {tokens} tokens",
            per_token * 1e3
        )
    })
}

/// The long-writing chat: the suite's prompt, else one a chat model answers at length.
fn probe(online: &Online) -> Probe {
    let prompt = online
        .ctx
        .suite
        .file
        .reference
        .as_ref()
        .and_then(|r| r.long_reply_prompt.clone())
        .unwrap_or_else(|| PROMPT.to_string());
    Probe {
        id: "long-reply".into(),
        messages: vec![serde_json::json!({"role": "user", "content": prompt})],
        tools: None,
    }
}

/// The prompt ids the server used: its own tokenization, else the local render when
/// `usage.prompt_tokens` counts it.
fn confirmed(server: Option<Vec<u32>>, local: Vec<u32>, reply: &Record) -> Option<Vec<u32>> {
    if server.is_some() {
        return server;
    }
    let counted = reply.usage?.prompt_tokens? as usize;
    (counted == local.len()).then_some(local)
}

/// The long request: the chat at temperature 0 (with logprobs unless they are too dear), past
/// the eos where the server takes vLLM's `ignore_eos`; a server that refuses the field is asked
/// again without it.
/// Not streamed: a stream fault belongs to `server.stream-parity`, downstream of the checkpoint,
/// and must not read as another checkpoint here.
async fn ask(
    online: &Online<'_>,
    probe: &Probe,
    tokens: usize,
    logprobs: bool,
) -> Result<Record, CallError> {
    let seed = online.settings.seed;
    let mut req = match logprobs {
        true => online.request(probe, seed, false),
        false => online.request_text(probe, seed, false),
    };
    req.max_tokens = Some(tokens as u32);
    let mut past_eos = req.clone();
    past_eos
        .extra
        .insert("ignore_eos".into(), serde_json::Value::Bool(true));
    // Ten times the probes' tokens: it outlasts their pace.
    let http = online.http.patient();
    match http.chat(&past_eos).await {
        Err(CallError::Status { status, .. }) if (400..500).contains(&status) => {
            http.chat(&req).await
        }
        other => other,
    }
}

/// Judge the reply `WINDOW` positions at a time: the verdict of the first window out of the
/// reference's bounds and where it starts, else drift or the same; and each window's mean gap
/// up to there.
fn windows(
    id: &str,
    reply: &Record,
    scored: &[crate::endpoint::Scored],
    tol: &Tolerance,
    decode: &dyn Fn(u32) -> String,
) -> (Judged, Option<(usize, usize)>, Vec<Option<f32>>) {
    let lps = reply.per_token_logprobs();
    let tol = &window_bounds(tol);
    let mut drift = false;
    let mut means = Vec::new();
    for (from, to) in spans(scored.len()) {
        let chunk = &scored[from..to];
        let mut t = Tally::default();
        t.compared = 1;
        let window = Reply {
            id,
            logprobs: lps.map(|l| &l[from.min(l.len())..(from + WINDOW).min(l.len())]),
            scored: chunk,
            from,
        };
        compare_run(&mut t, window, tol, decode);
        means.push(t.summary().map(|s| s.mean));
        match t.judge(tol) {
            Judged::Different(detail) => {
                let first = (from..from + chunk.len())
                    .find(|&k| position_out(id, lps, scored, k, tol, decode));
                let detail = match first {
                    Some(k) => format!("from token {k}: {detail}"),
                    None => detail,
                };
                return (Judged::Different(detail), Some((from, to)), means);
            }
            Judged::Drift => drift = true,
            _ => {}
        }
    }
    let verdict = if drift { Judged::Drift } else { Judged::Same };
    (verdict, None, means)
}

/// A window's bounds: twice the pair's. A window is a small sample beside the short probes'
/// pool — a Q8_0 reference beside a float server put one 32-token window of a random-weight
/// SmolLM2 shape at mean 0.64 against the kind's 0.5 (pooled: 0.43), a Q4_0 one a 23-token
/// window's p95 at 4.8 against 4.5 — and what the long reply looks for is a departure, many
/// times the bounds (`long-reply-degrades`: mean 6.0, p95 13.5 against 0.1 and 0.3).
fn window_bounds(tol: &Tolerance) -> Tolerance {
    Tolerance {
        mean: 2.0 * tol.mean,
        quantile: 2.0 * tol.quantile,
        ..tol.clone()
    }
}

/// The windows of a reply of `len` tokens, as (from, to): `WINDOW` each, a last one shorter
/// than half a window joined to the one before (its p95 would be its maximum).
fn spans(len: usize) -> Vec<(usize, usize)> {
    let mut starts: Vec<usize> = (0..len).step_by(WINDOW).collect();
    if starts.len() > 1 && len % WINDOW != 0 && len % WINDOW < WINDOW / 2 {
        starts.pop();
    }
    starts
        .iter()
        .enumerate()
        .map(|(i, &from)| (from, starts.get(i + 1).copied().unwrap_or(len)))
        .collect()
}

/// Whether position `k` alone is out of the reference's bounds: its gap past the p95 bound, or
/// a difference no bound covers.
fn position_out(
    id: &str,
    lps: Option<&[crate::exchange::TokenLogprob]>,
    scored: &[crate::endpoint::Scored],
    k: usize,
    tol: &Tolerance,
    decode: &dyn Fn(u32) -> String,
) -> bool {
    let mut t = Tally::default();
    t.compared = 1;
    let one = Reply {
        id,
        logprobs: lps.map(|l| &l[k.min(l.len())..(k + 1).min(l.len())]),
        scored: &scored[k..k + 1],
        from: k,
    };
    compare_run(&mut t, one, tol, decode);
    match t.summary() {
        Some(s) => s.max > tol.quantile,
        None => matches!(t.judge(tol), Judged::Different(_)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::endpoint::Scored;
    use crate::exchange::TokenLogprob;

    #[test]
    fn logprobs_are_too_dear_for_the_long_reply_past_the_budget() {
        use std::time::Duration;
        // llama-cpp-python 0.3.36, measured: Gemma 3 270M (262k vocabulary) 391 ms a token,
        // SmolLM2-135M (49k) 38 ms.
        let gemma = dear(Duration::from_millis(391), 256).expect("100 s: too dear");
        assert!(
            gemma.contains("391 ms a token") && gemma.contains("100 s"),
            "{gemma}"
        );
        assert_eq!(dear(Duration::from_millis(38), 256), None, "10 s: asked");
        assert_eq!(dear(Duration::ZERO, 256), None);
        // SmolLM2-135M on llama-cpp-python under CI's load, measured: 166 ms a token; 30 s pay
        // for 180 tokens, five whole windows. Gemma 3's 391 ms pay for 76: two windows. Past
        // 469 ms not even two windows fit.
        assert_eq!(affordable(Duration::from_millis(166)), Some(160));
        assert_eq!(affordable(Duration::from_millis(391)), Some(64));
        assert_eq!(affordable(Duration::from_millis(470)), None);
        assert_eq!(affordable(Duration::ZERO), None);
        let judged = LongReply::Judged {
            tokens: 256,
            short: None,
            verdict: Judged::Same,
            left_at: None,
            means: vec![None; 8],
            without_logprobs: Some(gemma),
        };
        assert!(
            judged
                .describe()
                .ends_with("judged on the server's tokens, not its logprobs: they cost this server 391 ms a token on the probes, 100 s or more for 256 tokens"),
            "{}",
            judged.describe()
        );
    }

    /// A reply of `n` tokens whose server logprob is the reference's plus `gap(k)` at
    /// position k, and the reference's scores of it.
    fn reply(n: usize, gap: impl Fn(usize) -> f32) -> (Record, Vec<Scored>) {
        let mut rec = Record::new();
        let mut scored = Vec::new();
        let mut lps = Vec::new();
        for k in 0..n {
            let reference = -0.5;
            lps.push(TokenLogprob {
                id: Some(k as u32),
                token: format!("t{k}"),
                logprob: reference + gap(k),
                top: Vec::new(),
                merged: false,
            });
            scored.push(Scored {
                id: k as u32,
                logprob: Some(reference),
                argmax: Some((k as u32, reference)),
                top: Vec::new(),
            });
        }
        rec.logprobs = Some(lps);
        (rec, scored)
    }

    fn judged(
        rec: &Record,
        scored: &[Scored],
    ) -> (Judged, Option<(usize, usize)>, Vec<Option<f32>>) {
        let tol = Tolerance::for_quantization(None);
        windows("long", rec, scored, &tol, &|id| format!("t{id}"))
    }

    #[test]
    fn a_reply_that_degrades_after_100_tokens_is_named_at_its_window() {
        let (rec, scored) = reply(256, |k| if k >= 100 { 3.0 } else { 0.01 });
        let (verdict, at, means) = judged(&rec, &scored);
        let Judged::Different(detail) = verdict else {
            panic!("not caught")
        };
        assert_eq!(at, Some((96, 128)), "the window holding token 100");
        assert!(detail.starts_with("from token 100: "), "{detail}");
        // Windows 0–2 sat inside the bounds; the fourth is the one that left.
        assert_eq!(means.len(), 4);
        assert!(means[..3].iter().all(|m| m.is_some_and(|m| m < 0.02)));
    }

    #[test]
    fn one_unlucky_token_in_a_window_is_not_a_departure() {
        let (rec, scored) = reply(256, |k| if k == 130 { 2.0 } else { 0.01 });
        let (verdict, at, means) = judged(&rec, &scored);
        assert!(matches!(verdict, Judged::Same), "{at:?} {means:?}");
        assert_eq!(means.len(), 8);
    }

    #[test]
    fn a_short_last_window_joins_the_one_before() {
        assert_eq!(spans(64), vec![(0, 32), (32, 64)]);
        assert_eq!(spans(70), vec![(0, 32), (32, 70)]);
        assert_eq!(spans(183).last(), Some(&(160, 183)));
        assert_eq!(spans(10), vec![(0, 10)]);
    }
}
