//! Boundary 1 online: is the server running the checkpoint we trained? What it says it serves
//! (identity against the lock), and what it does: the log-probabilities it reports for its own
//! tokens against a local candle run of the reference checkpoint on the same prompt ids.
use crate::chain::checkpoint::drift::{Gap, Summary, Tolerance};
use crate::chain::checkpoint::long_reply;
use crate::chain::run::probes::{
    first_reply_ids, Determinism, Judge, JudgeFn, Observed, Online, ProbeRun, Reference,
};
use crate::chain::run::recording::{RecordedProbe, Recording};
use crate::endpoint::Scored;
use crate::exchange::Record;
use crate::exchange::TopLogprob;
use crate::verdict::checks;
use crate::verdict::{Finding, Severity};

/// Tokens of each reply compared with the reference.
const FINGERPRINT_TOKENS: usize = 16;

/// The checkpoint's online judges (the online driver runs them in this order).
pub static ONLINE: &[Judge] = &[
    Judge {
        checks: &[checks::CHECKPOINT_SERVER_IDENTITY],
        run: JudgeFn::Reads(|online, obs| vec![identity(online, obs)]),
    },
    Judge {
        checks: &[checks::CHECKPOINT_FINGERPRINT],
        run: JudgeFn::Sends(|online, obs| {
            Box::pin(async move { vec![fingerprint(online, obs).await] })
        }),
    },
];

/// A lock that hashes whole GGUF files (made before tensor data and metadata were hashed
/// apart) cannot hold the server's newer identity: accept the server's when the local files
/// are the locked ones and their current identity is the server's.
fn same_as_legacy_lock(online: &Online, hex: &str) -> bool {
    let (Some(lock), model) = (online.ctx.lock.as_ref(), &online.ctx.model) else {
        return false;
    };
    lock.hashes_whole_gguf_files()
        && model
            .hash_weights_whole_files()
            .is_ok_and(|w| w.total == lock.weights.total)
        && model.hash_weights().is_ok_and(|w| w.total.starts_with(hex))
}

/// What the server reports about its weights, against the lock.
fn identity(online: &Online, obs: &Observed) -> Finding {
    let fp = obs
        .runs
        .iter()
        .find_map(|r| r.main().and_then(|m| m.system_fingerprint.clone()));
    let lock = online.ctx.lock.as_ref();
    // chatgate serve reports `fp_` + the first 12 hex digits of the weights' total sha256.
    if let (Some(fp), Some(lock)) = (&fp, lock) {
        if let Some(hex) = fp
            .strip_prefix("fp_")
            .filter(|h| h.len() >= 8 && h.chars().all(|c| c.is_ascii_hexdigit()))
        {
            if lock.weights.total.starts_with(hex) || same_as_legacy_lock(online, hex) {
                return Finding::pass(
                    checks::CHECKPOINT_SERVER_IDENTITY,
                    "the server's system_fingerprint matches the locked weights",
                )
                .with("system_fingerprint", fp);
            }
            return Finding::new(
                checks::CHECKPOINT_SERVER_IDENTITY,
                Severity::Error,
                "the server reports other weights than the lock pins",
            )
            .with("system_fingerprint", fp)
            .with(
                "locked weights",
                &lock.weights.total[..12.min(lock.weights.total.len())],
            );
        }
    }
    if let (Some(path), Some(lock)) = (
        obs.props
            .as_ref()
            .and_then(|p| p.get("model_path"))
            .and_then(|v| v.as_str()),
        lock,
    ) {
        let name = std::path::Path::new(path)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let known = lock.weights.files.iter().any(|f| f.name == name);
        return Finding::new(
            checks::CHECKPOINT_SERVER_IDENTITY,
            if known { Severity::Pass } else { Severity::Warning },
            if known { "the server's model file has the locked file's name (names are not content: the fingerprint decides)" } else { "the server's model file is not one the lock names" },
        )
        .with("server model_path", path);
    }
    let mut f = Finding::new(checks::CHECKPOINT_SERVER_IDENTITY, Severity::Info, "the server reports no checkpoint identity the lock can be compared with; the behavioural fingerprint decides");
    if let Some(fp) = fp {
        f = f.with("system_fingerprint", fp);
    }
    f
}

/// The behavioural fingerprint: the server's own tokens against the reference checkpoint's.
async fn fingerprint(online: &Online<'_>, obs: &Observed) -> Finding {
    match online.reference {
        None => Finding::new(checks::CHECKPOINT_FINGERPRINT, Severity::Info, "the suite names no [reference] model and has no recorded reference: the served checkpoint's behaviour is not fingerprinted")
            .with("to record one", format!("chatgate lock {} --fingerprint", online.ctx.suite.path.display())),
        Some(Reference::Local(r)) => teacher_forced(online, obs, Forcer::Local(r)).await,
        Some(Reference::Recorded(rec)) => against_recording(online, obs, rec).await,
        Some(Reference::Server(r)) if r.forces() => {
            teacher_forced(online, obs, Forcer::Server(r)).await
        }
        Some(Reference::Server(r)) => greedy_only(online, obs, r).await,
    }
}

/// The reference kind's bounds (its quantization), or the suite's own.
fn tolerance(online: &Online, quantization: Option<&str>) -> Tolerance {
    Tolerance::for_quantization(quantization)
        .overridden_by(online.ctx.suite.file.reference.as_ref())
}

/// The bounds for a teacher-forcing reference: the pair decides. A local reference that is the
/// locked file itself may differ from the server by kernel noise only, so a requantized copy
/// served under the same name cannot hide inside a quantized reference's wide bounds.
fn pair_tolerance(online: &Online, reference: &Forcer) -> Tolerance {
    let kind = Tolerance::for_quantization(reference.quantization());
    let kind = match reference {
        Forcer::Local(r) if is_locked_file(online, r.path()) => kind.same_file(),
        _ => kind,
    };
    kind.overridden_by(online.ctx.suite.file.reference.as_ref())
}

/// Whether `path` holds the weights the suite's lock pins: the suite's own model, or a copy
/// whose weights hash to the locked identity.
fn is_locked_file(online: &Online, path: &std::path::Path) -> bool {
    let canonical = |p: &std::path::Path| std::fs::canonicalize(p).ok();
    let Some(lock) = online.ctx.lock.as_ref() else {
        return false;
    };
    if canonical(path).is_some_and(|p| Some(p) == canonical(&online.ctx.model.root)) {
        // The suite's model: checkpoint.weights-hash has judged it against the lock already
        // (an error there comes first), so it is not hashed twice.
        return true;
    }
    crate::artifacts::ModelDir::open(path)
        .and_then(|m| m.hash_weights())
        .is_ok_and(|w| w.total == lock.weights.total)
}

/// The server's generated ids: reported, or recovered through its own tokenizer.
pub(super) async fn reply_ids(online: &Online<'_>, main: &Record) -> Option<Vec<u32>> {
    match first_reply_ids(main, online) {
        Some(ids) => Some(ids),
        None => ids_by_server_tokenizer(online, main).await,
    }
}

/// A probe whose generated ids are unconfirmed, and why: its main reply was asked without
/// logprobs (the probe pass's budget for them was spent), or the server reported neither ids
/// nor logprob tokens the vocabulary confirms.
fn ids_unconfirmed(run: &ProbeRun) -> String {
    match &run.without_logprobs {
        Some(why) => format!("{} (asked without logprobs: {why})", run.probe.id),
        None => format!("{} (generated ids unconfirmed)", run.probe.id),
    }
}

/// A reference that teacher-forces: the checkpoint in-process, or a reference server.
#[derive(Clone, Copy)]
pub(super) enum Forcer<'a> {
    Local(&'a crate::endpoint::local::CandleTarget),
    Server(&'a crate::endpoint::reference::ReferenceServer),
}

impl Forcer<'_> {
    pub(super) async fn score(
        &self,
        online: &Online<'_>,
        prompt: &[u32],
        ids: &[u32],
    ) -> std::result::Result<Vec<Scored>, String> {
        match self {
            Forcer::Local(r) => r
                .score(prompt.to_vec(), ids.to_vec())
                .await
                .map_err(|e| e.to_string()),
            Forcer::Server(r) => {
                let texts = |ids: &[u32]| online.decode(ids);
                r.score(prompt, ids, &texts)
                    .await
                    .map_err(|e| e.to_string())
            }
        }
    }

    pub(super) fn decode_token(&self, online: &Online<'_>, id: u32) -> String {
        match self {
            Forcer::Local(r) => r.decode_token(id),
            Forcer::Server(_) => online.decode(&[id]).unwrap_or_else(|| format!("id {id}")),
        }
    }

    fn quantization(&self) -> Option<&str> {
        match self {
            Forcer::Local(r) => r.quantization(),
            Forcer::Server(r) => r.quantization(),
        }
    }

    /// The reference as the finding names it.
    fn shown(&self) -> String {
        match self {
            Forcer::Local(r) => r.path().display().to_string(),
            Forcer::Server(r) => format!("the reference server: {}", r.describe()),
        }
    }
}

/// The reference teacher-forced: its logprobs of the server's own tokens.
async fn teacher_forced(online: &Online<'_>, obs: &Observed, reference: Forcer<'_>) -> Finding {
    let tol = pair_tolerance(online, &reference);
    let mut t = Tally::default();
    for run in &obs.runs {
        let Some(main) = run.main() else { continue };
        let Some(prompt) = run.confirmed_prompt() else {
            t.inconclusive.push(run.probe.id.clone());
            continue;
        };
        let Some(ids) = reply_ids(online, main).await else {
            t.inconclusive.push(ids_unconfirmed(run));
            continue;
        };
        let ids: Vec<u32> = ids.into_iter().take(FINGERPRINT_TOKENS).collect();
        if ids.is_empty() {
            continue;
        }
        let scored = match reference.score(online, prompt, &ids).await {
            Ok(s) => s,
            Err(why) => {
                t.inconclusive.push(format!("{} ({why})", run.probe.id));
                continue;
            }
        };
        t.compared += 1;
        let reply = Reply {
            id: &run.probe.id,
            logprobs: main.logprobs.as_deref(),
            scored: &scored,
            from: 0,
        };
        compare_run(&mut t, reply, &tol, &|id| {
            reference.decode_token(online, id)
        });
    }
    let shown = reference.shown();
    let judged = t.judge(&tol);
    let long = match judged {
        Judged::Same | Judged::Drift => {
            Some(long_reply::judge(online, obs, &reference, &tol).await)
        }
        _ => None,
    };
    let mut f = match judged {
        Judged::Different(detail) => Finding::new(
            checks::CHECKPOINT_FINGERPRINT,
            Severity::Error,
            "the server behaves like another checkpoint than the reference",
        )
        .with("first difference", detail),
        Judged::Unconfirmed => {
            let mut f = Finding::new(checks::CHECKPOINT_FINGERPRINT, Severity::Warning, "unconfirmed: no probe could be fingerprinted, because the server's prompt ids could not be confirmed (no tokenize endpoint, and usage.prompt_tokens differs from the local render) or it reported neither generated ids nor logprob tokens the vocabulary maps");
            if !t.inconclusive.is_empty() {
                f = f.with("probes", t.inconclusive.join(", "));
            }
            return f;
        }
        Judged::Drift => Finding::new(checks::CHECKPOINT_FINGERPRINT, Severity::Warning, "the server's greedy tokens differ from the reference's only where the reference's top two candidates are nearly tied (numeric drift)")
            .with("where", t.drift.join("; ")),
        Judged::Same => Finding::pass(
            checks::CHECKPOINT_FINGERPRINT,
            format!(
                "{} probe(s) match the reference checkpoint {shown}",
                t.compared
            ),
        ),
    };
    if let Some(long) = long {
        f = with_long_reply(f, &long);
    }
    f = f.with("reference", shown);
    t.described(f, &tol)
}

/// The short probes' finding with the long reply's verdict: an error when the long reply left
/// the reference, though the short probes follow it.
fn with_long_reply(f: Finding, long: &long_reply::LongReply) -> Finding {
    match long.departure() {
        Some(((from, to), detail)) => Finding::new(
            checks::CHECKPOINT_FINGERPRINT,
            Severity::Error,
            format!("the server's long reply leaves the reference checkpoint in tokens {from}–{}, though its first tokens follow it: its output degrades with length", to - 1),
        )
        .with("first difference", detail)
        .with("long reply", long.describe()),
        None => f.with("long reply", long.describe()),
    }
}

/// The recorded reference: the server's temperature-0 reply must follow the recorded greedy
/// reply, its shared tokens' logprobs within the reference kind's bounds, and where the two
/// part, the recorded top-k must show a near tie (the reference's own rounding), else it is
/// another checkpoint. Only probes the server fed the recorded prompt ids count.
async fn against_recording(online: &Online<'_>, obs: &Observed, rec: &Recording) -> Finding {
    let tol = tolerance(online, rec.computed_by.quantization.as_deref());
    let mut t = Tally::default();
    for run in &obs.runs {
        let Some(main) = run.main() else { continue };
        let id = &run.probe.id;
        let Some(recorded) = online.recorded(rec, &run.probe) else {
            t.inconclusive.push(format!(
                "{id} (not in the recording, or recorded with other messages or settings)"
            ));
            continue;
        };
        let Some(prompt) = run.confirmed_prompt() else {
            t.inconclusive
                .push(format!("{id} (the server's prompt ids are unconfirmed)"));
            continue;
        };
        if prompt != recorded.prompt_ids.as_slice() {
            t.inconclusive.push(format!("{id} (the server's prompt ids are not the recorded ones: the template boundary says why)"));
            continue;
        }
        if run.determinism() == Some(Determinism::Sampled) {
            t.inconclusive.push(format!(
                "{id} (the server samples at temperature 0: server.determinism)"
            ));
            continue;
        }
        let Some(ids) = reply_ids(online, main).await else {
            t.inconclusive.push(ids_unconfirmed(run));
            continue;
        };
        t.compared += 1;
        follow_recording(&mut t, id, main, &ids, recorded, &tol);
    }
    let by = &rec.computed_by;
    let computed = format!(
        "{} ({}, {}), chatgate {}",
        by.reference, by.engine, by.dtype, by.chatgate
    );
    let same = Finding::pass(checks::CHECKPOINT_FINGERPRINT, format!("{} probe(s) match the recorded reference (the weights are checked behaviourally, not by hash)", t.compared));
    let drift = "the server's greedy tokens leave the recorded reference's only where its top two candidates are nearly tied (numeric drift)";
    let (f, unconfirmed) = t.verdict(&tol, "the recorded reference", drift, same);
    let mut f = f.with("recorded reference", computed);
    if unconfirmed {
        return f;
    }
    if let Some(why) = long_reply::not_judged_by(online, "a recorded reference") {
        f = f.with("long reply", why);
    }
    t.described(f, &tol)
}

/// A reference server that cannot teacher-force (llama-cpp-python, `transformers serve`): the
/// server's temperature-0 reply against the reference's own, as against a recording made live.
/// Where the reference reports its top alternatives, a parting is judged by their margin;
/// where it reports none, a parting cannot tell drift from another checkpoint (a warning). Agreement
/// is never a pass: a checkpoint that agrees on the greedy tokens (an older step) would pass.
async fn greedy_only(
    online: &Online<'_>,
    obs: &Observed,
    r: &crate::endpoint::reference::ReferenceServer,
) -> Finding {
    let tol = tolerance(online, r.quantization());
    let mut t = Tally::default();
    for run in &obs.runs {
        let Some(main) = run.main() else { continue };
        let id = &run.probe.id;
        let Some(reference) = &run.reference else {
            t.inconclusive
                .push(format!("{id} (the reference server did not answer)"));
            continue;
        };
        let prompt_counts = (
            main.usage.and_then(|u| u.prompt_tokens),
            reference.usage.and_then(|u| u.prompt_tokens),
        );
        if let (Some(a), Some(b)) = prompt_counts {
            if a != b {
                t.inconclusive.push(format!(
                    "{id} (the server was fed {a} prompt tokens, the reference server {b})"
                ));
                continue;
            }
        }
        if run.determinism() == Some(Determinism::Sampled) {
            t.inconclusive.push(format!(
                "{id} (the server samples at temperature 0: server.determinism)"
            ));
            continue;
        }
        // A reference that reports neither ids nor logprobs (`transformers serve`) gives text:
        // the same text is agreement; otherwise its text is read with the suite's tokenizer.
        let local = |text: &str| {
            let tok = &online.ctx.serving.as_ref()?.tokenizer;
            Some(tok.encode(text, false).ok()?.get_ids().to_vec())
        };
        let want = match reply_ids(online, reference).await {
            Some(ids) => Some(ids),
            None => local(&reference.text),
        };
        let (Some(ids), Some(want)) = (reply_ids(online, main).await, want) else {
            t.inconclusive.push(ids_unconfirmed(run));
            continue;
        };
        t.compared += 1;
        // Servers differ in the whitespace they strip from a reply's ends (transformers serve
        // strips it): the same words are the same reply.
        if main.text.trim() == reference.text.trim() && reference.logprobs.is_none() {
            continue;
        }
        match reference.logprobs.as_ref().filter(|l| !l.is_empty()) {
            Some(lps) => {
                let live = RecordedProbe {
                    id: id.clone(),
                    messages_sha256: String::new(),
                    prompt_ids: Vec::new(),
                    text: reference.text.clone(),
                    token_ids: want,
                    finish_reason: reference.finish_reason.clone(),
                    logprobs: lps.clone(),
                };
                follow_recording(&mut t, id, main, &ids, &live, &tol);
            }
            None => {
                if let Some(k) = ids
                    .iter()
                    .zip(&want)
                    .take(FINGERPRINT_TOKENS)
                    .position(|(a, b)| a != b)
                {
                    t.drift.push(format!("probe {id}, token {k}: the server's greedy reply leaves the reference server's, which reports no logprobs: drift and another checkpoint look alike"));
                }
            }
        }
    }
    let shown = r.describe();
    let same = Finding::new(checks::CHECKPOINT_FINGERPRINT, Severity::Warning, format!("{} probe(s) agree with the reference server's greedy replies — weak evidence: this reference cannot teacher-force, so a checkpoint that agrees on the greedy tokens (an older step) passes too", t.compared));
    let drift = "the server's greedy replies leave the reference server's where they cannot be told apart from numeric drift";
    let (f, unconfirmed) = t.verdict(&tol, "the reference server", drift, same);
    let mut f = f.with("reference", shown);
    if unconfirmed {
        return f;
    }
    if let Some(why) =
        long_reply::not_judged_by(online, "a reference server that cannot teacher-force")
    {
        f = f.with("long reply", why);
    }
    f = f
        .with("how", "greedy replies compared: the reference server's stack cannot teacher-force (vLLM, SGLang, TGI with --enable-prefill-logprobs and llama-server can; or record the reference with `chatgate lock SUITE.toml --fingerprint`)");
    t.described(f, &tol)
}

/// Walk the server's reply along the recorded one, up to `FINGERPRINT_TOKENS` tokens: the
/// shared tokens' gaps, and where the paths part, drift or another checkpoint.
fn follow_recording(
    t: &mut Tally,
    id: &str,
    main: &Record,
    ids: &[u32],
    recorded: &RecordedProbe,
    tol: &Tolerance,
) {
    let server_lps = main.per_token_logprobs();
    let steps = ids
        .iter()
        .zip(&recorded.token_ids)
        .zip(&recorded.logprobs)
        .take(FINGERPRINT_TOKENS)
        .enumerate();
    for (k, ((&got, &want), at)) in steps {
        if got == want {
            let Some(s) = server_lps.and_then(|l| l.get(k)) else {
                continue;
            };
            t.position(
                &format!("probe {id}, token {k}"),
                "recorded reference",
                (&at.token, s.logprob, at.logprob),
                &shared_alternatives(&s.top, &at.top),
            );
            continue;
        }
        // The paths part: only a near tie in the reference's own top-k is drift.
        let server_token = server_lps
            .and_then(|l| l.get(k))
            .map(|l| l.token.clone())
            .unwrap_or_else(|| format!("id {got}"));
        let alternative = at.top.iter().find(|t| t.id == Some(got));
        let Some(alt) = alternative else {
            return t.different(
                f32::INFINITY,
                format!(
                    "probe {id}, token {k}: server chose {server_token:?}, which is not among the recorded reference's top {} (its greedy choice is {:?} at {:.3})",
                    at.top.len(),
                    at.token,
                    at.logprob
                ),
            );
        };
        let margin = at.logprob - alt.logprob;
        let detail = format!(
            "probe {id}, token {k}: server chose {server_token:?}, the recorded reference's greedy choice is {:?} (margin {margin:.3} nats)",
            at.token
        );
        return t.parted(margin, tol, detail);
    }
}

/// The reply's ids from the server's own tokenizer, when its logprobs carry token texts only and
/// the vocabulary cannot tell a SentencePiece word-start piece from its twin (`con`/`▁con`, both
/// "con" once a leading space is dropped). The reply's text keeps its spaces: the server
/// tokenizes it (llama-cpp-python's `/extras/tokenize`,
/// llama.cpp's and vLLM's `/tokenize`), and the ids count only when there is one per logprob
/// entry and each spells its entry's text — so a text the server would split otherwise than the
/// model generated it is never taken for the model's tokens.
async fn ids_by_server_tokenizer(online: &Online<'_>, rec: &Record) -> Option<Vec<u32>> {
    let lps = rec.logprobs.as_ref()?;
    if lps.is_empty() || lps.iter().any(|l| l.merged) || rec.text.is_empty() {
        return None;
    }
    let serving = online.ctx.serving.as_ref()?;
    let tok = &serving.tokenizer;
    if let Some(ids) = spelled_exactly(tok, lps) {
        return Some(ids);
    }
    // A SentencePiece vocabulary puts a `▁` before the text's first word itself: a reply that
    // starts with a space is tokenized without it too, and the reading that spells every entry
    // is kept.
    let mut texts = vec![rec.text.as_str()];
    if let Some(rest) = rec.text.strip_prefix(' ') {
        texts.push(rest);
    }
    for text in texts {
        let Some(ids) = online.http.tokenize_text(text, true).await.ok().flatten() else {
            continue;
        };
        if let Some(found) = confirm(serving, tok, lps, text, ids) {
            return Some(found);
        }
    }
    None
}

/// A server whose token texts keep a word-start space (some entry begins with one: llama.cpp's
/// `token_to_piece` keeps it, where a decoder of one token alone drops it) spells every piece
/// exactly: `▁con` is " con" and `con` is "con", so each entry names one piece.
fn spelled_exactly(
    tok: &tokenizers::Tokenizer,
    lps: &[crate::exchange::TokenLogprob],
) -> Option<Vec<u32>> {
    if !lps.iter().any(|l| l.token.starts_with(' ')) {
        return None;
    }
    lps.iter()
        .map(|l| {
            tok.token_to_id(&l.token.replace(' ', "\u{2581}"))
                .or_else(|| match l.token.as_bytes() {
                    [b] => tok.token_to_id(&format!("<0x{b:02X}>")),
                    _ => None,
                })
        })
        .collect()
}

/// The server's ids for the reply's text, kept when they are one per logprob entry and each
/// spells its entry.
fn confirm(
    serving: &crate::chain::run::context::Pipeline,
    tok: &tokenizers::Tokenizer,
    lps: &[crate::exchange::TokenLogprob],
    text: &str,
    mut ids: Vec<u32>,
) -> Option<Vec<u32>> {
    // llama-cpp-python may add the BOS whatever it is asked: drop it.
    if let Some(bos) = serving.bos_id() {
        if ids.first() == Some(&bos) && !text.starts_with(&tok.id_to_token(bos)?) {
            ids.remove(0);
        }
    }
    if ids.len() != lps.len() {
        return None;
    }
    // A token's text as a server reports it: the piece with `▁` as a space, a byte-fallback
    // piece as its byte. Exactly: a server that drops a word-start space from its token texts
    // leaves the twins (`con`/`▁con`) apart only by a guess, and then nothing is confirmed.
    let spelled = |id: u32| -> Option<String> {
        let piece = tok.id_to_token(id)?;
        if let Some(hex) = piece.strip_prefix("<0x").and_then(|p| p.strip_suffix('>')) {
            let b = u8::from_str_radix(hex, 16).ok()?;
            return Some(char::from(b).to_string());
        }
        Some(piece.replace('\u{2581}', " "))
    };
    let spells = |id: u32, text: &str| -> bool {
        spelled(id).is_some_and(|s| s == text)
            || crate::chain::run::probes::vocab_id(tok, text) == Some(id)
    };
    ids.iter()
        .zip(lps)
        .all(|(&id, l)| spells(id, &l.token))
        .then_some(ids)
}

/// What the compared probes add up to, and the ones that could not be compared.
#[derive(Default)]
pub(super) struct Tally {
    pub(super) compared: usize,
    inconclusive: Vec<String>,
    /// Every shared token's |server − reference| logprob.
    gaps: Vec<Gap>,
    /// A difference no tolerance covers (a token outside the reference's top-k, a margin past
    /// the kind's drift margin, a logprob one side calls impossible): the largest, and where.
    worst: Option<(f32, String)>,
    drift: Vec<String>,
}

pub enum Judged {
    Same,
    Drift,
    Different(String),
    Unconfirmed,
}

/// The alternatives both sides report at one position, as (token, server, reference)
/// logprobs: matched by id where both give ids, else by the token's text.
fn shared_alternatives(server: &[TopLogprob], reference: &[TopLogprob]) -> Vec<Pair> {
    server
        .iter()
        .filter_map(|s| {
            let r = reference.iter().find(|r| match (s.id, r.id) {
                (Some(a), Some(b)) => a == b,
                _ => s.token == r.token,
            })?;
            Some((s.token.clone(), s.logprob, r.logprob))
        })
        .collect()
}

/// A token's text, and its logprob at the server and at the reference.
type Pair = (String, f32, f32);

impl Tally {
    /// One position's gap: the largest |server − reference| over the chosen token and the
    /// alternatives both report. A near-certain chosen token says nothing about the checkpoint
    /// (its logprob is ~0 whatever the weights); the head of the distribution behind it does.
    fn position(
        &mut self,
        at: &str,
        reference: &str,
        (token, server, expected): (&str, f32, f32),
        alternatives: &[Pair],
    ) {
        if server.is_finite() != expected.is_finite() {
            let detail =
                format!("{at} {token:?}: server logprob {server:.3}, {reference} {expected:.3}");
            return self.different(f32::INFINITY, detail);
        }
        // The chosen token first, then the alternatives both sides report: the widest gap.
        let pairs = std::iter::once((token, server, expected))
            .chain(alternatives.iter().map(|(t, a, b)| (t.as_str(), *a, *b)));
        let widest = pairs
            .enumerate()
            .filter(|(_, (_, a, b))| (a - b).is_finite())
            .max_by(|(_, x), (_, y)| (x.1 - x.2).abs().total_cmp(&(y.1 - y.2).abs()));
        if let Some((i, (tok, a, b))) = widest {
            let which = if i == 0 { "" } else { "alternative " };
            self.gaps.push(Gap {
                nats: (a - b).abs(),
                at: format!(
                    "{at} {token:?}, {which}{tok:?}: server logprob {a:.3}, {reference} {b:.3}"
                ),
            });
        }
    }

    fn different(&mut self, gap: f32, detail: String) {
        if self.worst.as_ref().is_none_or(|(g, _)| gap > *g) {
            self.worst = Some((gap, detail));
        }
    }

    /// The server's greedy token is not the reference's: a near tie is the reference's own
    /// rounding, anything else another checkpoint.
    fn parted(&mut self, margin: f32, tol: &Tolerance, detail: String) {
        if margin < tol.drift_margin {
            self.drift.push(detail);
        } else {
            self.different(margin, detail);
        }
    }

    /// The gaps so far, summed up.
    pub(super) fn summary(&self) -> Option<Summary> {
        Summary::of(&self.gaps)
    }

    pub(super) fn judge(&self, tol: &Tolerance) -> Judged {
        if let Some((_, detail)) = &self.worst {
            return Judged::Different(detail.clone());
        }
        if self.compared == 0 {
            return Judged::Unconfirmed;
        }
        if let Some(s) = Summary::of(&self.gaps) {
            if let Some(why) = s.exceeds(tol) {
                return Judged::Different(format!(
                    "over {} tokens the logprobs are out of the reference's bounds: {why} (largest {:.3} at {})",
                    s.tokens, s.max, s.max_at
                ));
            }
        }
        if self.drift.is_empty() {
            Judged::Same
        } else {
            Judged::Drift
        }
    }

    /// The finding for a reference compared as a recording (`whom`): another checkpoint (an
    /// error), unconfirmed (a warning with the probes; `true`: nothing else to add), numeric
    /// drift (a warning: `drift`), else `same`.
    fn verdict(&self, tol: &Tolerance, whom: &str, drift: &str, same: Finding) -> (Finding, bool) {
        match self.judge(tol) {
            Judged::Different(detail) => (
                Finding::new(
                    checks::CHECKPOINT_FINGERPRINT,
                    Severity::Error,
                    format!("the server behaves like another checkpoint than {whom}"),
                )
                .with("first difference", detail),
                false,
            ),
            Judged::Unconfirmed => {
                let mut f = Finding::new(
                    checks::CHECKPOINT_FINGERPRINT,
                    Severity::Warning,
                    format!("unconfirmed: no probe could be compared with {whom}"),
                );
                if !self.inconclusive.is_empty() {
                    f = f.with("probes", self.inconclusive.join("; "));
                }
                (f, true)
            }
            Judged::Drift => (
                Finding::new(checks::CHECKPOINT_FINGERPRINT, Severity::Warning, drift)
                    .with("where", self.drift.join("; ")),
                false,
            ),
            Judged::Same => (same, false),
        }
    }

    /// On every verdict: the probes not compared (and why), the bounds the agreement was judged
    /// by, and the measured agreement.
    fn described(&self, mut f: Finding, tol: &Tolerance) -> Finding {
        if !self.inconclusive.is_empty() {
            f = f.with("not compared", self.inconclusive.join("; "));
        }
        let f = f.with("bounds", tol.to_string());
        match Summary::of(&self.gaps) {
            Some(s) => f.with("agreement", s.to_string()),
            None => f,
        }
    }
}

/// One reply's positions as `compare_run` reads them, labelled from `from` on.
pub(super) struct Reply<'a> {
    pub(super) id: &'a str,
    /// The server's logprobs of those positions (None: it reports none).
    pub(super) logprobs: Option<&'a [crate::exchange::TokenLogprob]>,
    pub(super) scored: &'a [Scored],
    pub(super) from: usize,
}

/// With server logprobs: each token's gap to the reference's logprob (sampling does not
/// matter: the reference scores the server's own choices). Without them: the server's
/// temperature-0 tokens must be the reference's argmax, unless nearly tied.
pub(super) fn compare_run(
    t: &mut Tally,
    reply: Reply,
    tol: &Tolerance,
    decode: &dyn Fn(u32) -> String,
) {
    let Reply {
        id,
        logprobs,
        scored,
        from,
    } = reply;
    if let Some(lps) = logprobs {
        for (k, (lp, s)) in (from..).zip(lps.iter().zip(scored)) {
            let Some(reference_lp) = s.logprob else {
                // The reference reports only its top alternatives here (llama-server), and the
                // server's greedy token is not among them.
                return t.different(
                    f32::INFINITY,
                    format!(
                        "probe {id}, token {k}: server chose {:?}, which is not among the reference's top {} here",
                        lp.token,
                        s.top.len()
                    ),
                );
            };
            let top: Vec<TopLogprob> = s
                .top
                .iter()
                .map(|&(id, logprob)| TopLogprob {
                    id: Some(id),
                    token: decode(id),
                    logprob,
                })
                .collect();
            t.position(
                &format!("probe {id}, token {k}"),
                "reference",
                (&lp.token, lp.logprob, reference_lp),
                &shared_alternatives(&lp.top, &top),
            );
        }
        return;
    }
    for (k, s) in (from..).zip(scored) {
        let Some((argmax, argmax_lp)) = s.argmax else {
            t.inconclusive.push(format!(
                "{id} (the server reports no logprobs, and the reference no alternatives)"
            ));
            return;
        };
        if s.id == argmax {
            continue;
        }
        let Some(chosen) = s.logprob else {
            return t.different(
                f32::INFINITY,
                format!(
                    "probe {id}, token {k}: server chose {:?}, which is not among the reference's top {} here",
                    decode(s.id),
                    s.top.len()
                ),
            );
        };
        let margin = argmax_lp - chosen;
        let detail = format!(
            "probe {id}, token {k}: server chose {:?}, the reference's greedy choice is {:?} (margin {margin:.3} nats; the server reports no logprobs, so sampling and another checkpoint look alike)",
            decode(s.id),
            decode(argmax)
        );
        return t.parted(margin, tol, detail);
    }
}
