//! Boundary 1 online: is the server running the checkpoint we trained? What it says it serves
//! (identity against the lock), and what it does: the log-probabilities it reports for its own
//! tokens against a local candle run of the reference checkpoint on the same prompt ids.
use super::{first_reply_ids, Determinism, Observed, Online, ProbeRun, Reference};
use crate::chain::recording::{RecordedProbe, Recording};
use crate::chain::{Boundary::Checkpoint, Finding, Severity};
use crate::replay::Record;

/// Tokens of each reply compared with the reference.
const FINGERPRINT_TOKENS: usize = 16;
/// Default largest |server − reference| logprob for the same checkpoint.
const DEFAULT_TOLERANCE: f32 = 0.05;
/// Below this margin between the reference's top two tokens, a different greedy pick is
/// numeric drift, not another checkpoint.
const DRIFT_MARGIN: f32 = 0.1;

pub async fn check(online: &Online<'_>, obs: &Observed) -> Vec<Finding> {
    let mut out = vec![identity(online, obs)];
    out.push(fingerprint(online, obs).await);
    out
}

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
                    Checkpoint,
                    "checkpoint.server-identity",
                    "the server's system_fingerprint matches the locked weights",
                )
                .with("system_fingerprint", fp);
            }
            return Finding::new(
                Checkpoint,
                "checkpoint.server-identity",
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
            Checkpoint,
            "checkpoint.server-identity",
            if known { Severity::Pass } else { Severity::Warning },
            if known { "the server's model file has the locked file's name (names are not content: the fingerprint decides)" } else { "the server's model file is not one the lock names" },
        )
        .with("server model_path", path);
    }
    let mut f = Finding::new(Checkpoint, "checkpoint.server-identity", Severity::Info, "the server reports no checkpoint identity the lock can be compared with; the behavioural fingerprint decides");
    if let Some(fp) = fp {
        f = f.with("system_fingerprint", fp);
    }
    f
}

const ID: &str = "checkpoint.fingerprint";

/// The behavioural fingerprint: the server's own tokens against the reference checkpoint's.
async fn fingerprint(online: &Online<'_>, obs: &Observed) -> Finding {
    match online.reference {
        None => Finding::new(Checkpoint, ID, Severity::Info, "the suite names no [reference] model and has no recorded reference: the served checkpoint's behaviour is not fingerprinted")
            .with("to record one", format!("chatgate lock {} --fingerprint", online.ctx.suite.path.display())),
        Some(Reference::Local(r)) => teacher_forced(online, obs, r).await,
        Some(Reference::Recorded(rec)) => against_recording(online, obs, rec).await,
    }
}

/// Largest |server − reference| logprob still counted as the same checkpoint.
fn tolerance(online: &Online) -> f32 {
    online
        .ctx
        .suite
        .file
        .reference
        .as_ref()
        .and_then(|r| r.logprob_tolerance)
        .unwrap_or(DEFAULT_TOLERANCE)
}

/// The server's generated ids: reported, or recovered through its own tokenizer.
async fn reply_ids(online: &Online<'_>, main: &Record) -> Option<Vec<u32>> {
    match first_reply_ids(main, online) {
        Some(ids) => Some(ids),
        None => ids_by_server_tokenizer(online, main).await,
    }
}

/// The reference in-process: its logprobs of the server's own tokens, teacher-forced.
async fn teacher_forced(
    online: &Online<'_>,
    obs: &Observed,
    reference: &crate::endpoint::local::CandleTarget,
) -> Finding {
    let tol = tolerance(online);
    let mut t = Tally::default();
    for run in &obs.runs {
        let Some(main) = run.main() else { continue };
        let Some(prompt) = run.confirmed_prompt() else {
            t.inconclusive.push(run.probe.id.clone());
            continue;
        };
        let Some(ids) = reply_ids(online, main).await else {
            // The server reported neither ids nor logprob tokens the vocabulary confirms.
            t.inconclusive
                .push(format!("{} (generated ids unconfirmed)", run.probe.id));
            continue;
        };
        let ids: Vec<u32> = ids.into_iter().take(FINGERPRINT_TOKENS).collect();
        if ids.is_empty() {
            continue;
        }
        let Ok(scored) = reference.score(prompt.to_vec(), ids.clone()).await else {
            t.inconclusive.push(run.probe.id.clone());
            continue;
        };
        t.add(compare_run(run, main, &scored, tol, reference));
    }
    if let Some((_, detail)) = t.worst {
        return Finding::new(
            Checkpoint,
            ID,
            Severity::Error,
            "the server behaves like another checkpoint than the reference",
        )
        .with("first difference", detail)
        .with("reference", reference.path().display())
        .with("tolerance", format!("{tol} nats"));
    }
    if t.compared == 0 {
        let mut f = Finding::new(Checkpoint, ID, Severity::Warning, "unconfirmed: no probe could be fingerprinted, because the server's prompt ids could not be confirmed (no tokenize endpoint, and usage.prompt_tokens differs from the local render) or it reported neither generated ids nor logprob tokens the vocabulary maps");
        if !t.inconclusive.is_empty() {
            f = f.with("probes", t.inconclusive.join(", "));
        }
        return f;
    }
    let mut f = Finding::pass(
        Checkpoint,
        ID,
        format!(
            "{} probe(s) match the reference checkpoint {}",
            t.compared,
            reference.path().display()
        ),
    );
    if !t.drift.is_empty() {
        f = Finding::new(Checkpoint, ID, Severity::Warning, "the server's greedy tokens differ from the reference's only where the reference's top two candidates are nearly tied (numeric drift)")
            .with("where", t.drift.join("; "));
    }
    f
}

/// The recorded reference: the server's temperature-0 reply must follow the recorded greedy
/// reply, each shared token's logprob within the tolerance, and where the two part, the
/// recorded top-k must show a near tie (numeric drift), else it is another checkpoint. Only
/// probes the server fed the recorded prompt ids count.
async fn against_recording(online: &Online<'_>, obs: &Observed, rec: &Recording) -> Finding {
    let tol = tolerance(online);
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
            t.inconclusive
                .push(format!("{id} (generated ids unconfirmed)"));
            continue;
        };
        t.add(follow_recording(id, main, &ids, recorded, tol));
    }
    let by = &rec.computed_by;
    let computed = format!(
        "{} ({}, {}), chatgate {}",
        by.reference, by.engine, by.dtype, by.chatgate
    );
    if let Some((_, detail)) = t.worst {
        return Finding::new(
            Checkpoint,
            ID,
            Severity::Error,
            "the server behaves like another checkpoint than the recorded reference",
        )
        .with("first difference", detail)
        .with("recorded reference", computed)
        .with("tolerance", format!("{tol} nats"));
    }
    if t.compared == 0 {
        let mut f = Finding::new(
            Checkpoint,
            ID,
            Severity::Warning,
            "unconfirmed: no probe could be compared with the recorded reference",
        );
        if !t.inconclusive.is_empty() {
            f = f.with("probes", t.inconclusive.join("; "));
        }
        return f.with("recorded reference", computed);
    }
    let mut f = if t.drift.is_empty() {
        Finding::pass(Checkpoint, ID, format!("{} probe(s) match the recorded reference (the weights are checked behaviourally, not by hash)", t.compared))
    } else {
        Finding::new(Checkpoint, ID, Severity::Warning, "the server's greedy tokens leave the recorded reference's only where its top two candidates are nearly tied (numeric drift)")
            .with("where", t.drift.join("; "))
    };
    f = f.with("recorded reference", computed);
    if !t.inconclusive.is_empty() {
        f = f.with("not compared", t.inconclusive.join("; "));
    }
    f
}

/// Walk the server's reply along the recorded one, up to `FINGERPRINT_TOKENS` tokens.
fn follow_recording(
    id: &str,
    main: &Record,
    ids: &[u32],
    recorded: &RecordedProbe,
    tol: f32,
) -> Verdict {
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
            let gap = (s.logprob - at.logprob).abs();
            if gap.is_finite() && gap > tol || s.logprob.is_finite() != at.logprob.is_finite() {
                return Verdict::Different(
                    gap,
                    format!(
                        "probe {id}, token {k} {:?}: server logprob {:.3}, recorded reference {:.3}",
                        at.token, s.logprob, at.logprob
                    ),
                );
            }
            continue;
        }
        // The paths part: only a near tie in the reference's own top-k is drift.
        let server_token = server_lps
            .and_then(|l| l.get(k))
            .map(|l| l.token.clone())
            .unwrap_or_else(|| format!("id {got}"));
        let alternative = at.top.iter().find(|t| t.id == Some(got));
        let Some(alt) = alternative else {
            return Verdict::Different(
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
        return if margin < DRIFT_MARGIN {
            Verdict::Drift(detail)
        } else {
            Verdict::Different(margin, detail)
        };
    }
    Verdict::Same
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
    lps: &[crate::replay::TokenLogprob],
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
    serving: &crate::chain::Pipeline,
    tok: &tokenizers::Tokenizer,
    lps: &[crate::replay::TokenLogprob],
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
        spelled(id).is_some_and(|s| s == text) || super::vocab_id(tok, text) == Some(id)
    };
    ids.iter()
        .zip(lps)
        .all(|(&id, l)| spells(id, &l.token))
        .then_some(ids)
}

enum Verdict {
    Same,
    Drift(String),
    Different(f32, String),
}

/// What the compared probes add up to, and the ones that could not be compared.
#[derive(Default)]
struct Tally {
    compared: usize,
    inconclusive: Vec<String>,
    /// The largest difference, and where.
    worst: Option<(f32, String)>,
    drift: Vec<String>,
}

impl Tally {
    fn add(&mut self, verdict: Verdict) {
        self.compared += 1;
        match verdict {
            Verdict::Same => {}
            Verdict::Drift(d) => self.drift.push(d),
            Verdict::Different(gap, detail) => {
                if self.worst.as_ref().is_none_or(|(g, _)| gap > *g) {
                    self.worst = Some((gap, detail));
                }
            }
        }
    }
}

/// With server logprobs: each token's logprob must match the reference's within `tol`
/// (sampling does not matter: the reference scores the server's own choices). Without them:
/// the server's temperature-0 tokens must be the reference's argmax, unless nearly tied.
fn compare_run(
    run: &ProbeRun,
    main: &Record,
    scored: &[crate::endpoint::local::Scored],
    tol: f32,
    reference: &crate::endpoint::local::CandleTarget,
) -> Verdict {
    let id = &run.probe.id;
    if let Some(lps) = &main.logprobs {
        for (k, (lp, s)) in lps.iter().zip(scored).enumerate() {
            let gap = (lp.logprob - s.logprob).abs();
            if gap.is_finite() && gap > tol || (lp.logprob.is_finite() != s.logprob.is_finite()) {
                return Verdict::Different(
                    gap,
                    format!(
                        "probe {id}, token {k} {:?}: server logprob {:.3}, reference {:.3}",
                        lp.token, lp.logprob, s.logprob
                    ),
                );
            }
        }
        return Verdict::Same;
    }
    for (k, s) in scored.iter().enumerate() {
        if s.id != s.argmax {
            let margin = s.argmax_logprob - s.logprob;
            let detail = format!(
                "probe {id}, token {k}: server chose {:?}, the reference's greedy choice is {:?} (margin {margin:.3} nats; the server reports no logprobs, so sampling and another checkpoint look alike)",
                reference.decode_token(s.id),
                reference.decode_token(s.argmax)
            );
            return if margin < DRIFT_MARGIN {
                Verdict::Drift(detail)
            } else {
                Verdict::Different(margin, detail)
            };
        }
    }
    Verdict::Same
}
