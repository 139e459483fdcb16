//! Boundary 2, the tokenizer: is it the one we trained with — the same file, the same
//! behaviour on a fixed probe corpus, the same special tokens in every file, and the same ids
//! for the SFT data?
pub mod online;
use crate::verdict::checks;
use tokenizers::Tokenizer;

use crate::artifacts::ModelDir;
use crate::chain::run::context::{Context, Conversation};
use crate::chain::run::diff::space_prefix_only;
use crate::chain::run::probe::{PROBE_CORPUS, PROBE_VERSION};
use crate::chain::run::rows::Examples;
use crate::chain::run::tokens::short;
use crate::chain::run::tokens::{decode, encode, show_tokens, single_id};
use crate::error::Result;
use crate::verdict::{Finding, Severity};

pub fn check(ctx: &Context, reencode: &ReencodeTally) -> Result<Vec<Finding>> {
    let Some(tok) = ctx.model.tokenizer.as_ref() else {
        return Ok(vec![Finding::new(
            checks::TOKENIZER_PRESENT,
            Severity::Error,
            "the model directory has no tokenizer (tokenizer.json, or GGUF tokenizer metadata)",
        )
        .with("dir", ctx.model.root.display())]);
    };
    let mut out = Vec::new();
    out.extend(vs_lock(ctx, &tok.tokenizer, &tok.sha256)?);
    out.push(round_trip(&tok.tokenizer)?);
    out.extend(vocab_size(&ctx.model));
    out.extend(special_tokens(&ctx.model));
    out.push(stack(ctx));
    out.extend(golden_reencode(ctx, reencode));
    Ok(out)
}

/// Which serving stack's feed the chain predicts, and which tokenizer that stack runs.
fn stack(ctx: &Context) -> Finding {
    let why = match &ctx.stack_origin {
        crate::chain::run::context::StackOrigin::Suite => {
            "[target] stack, or gate --stack".to_string()
        }
        crate::chain::run::context::StackOrigin::Detected(e) => {
            format!("detected: {e}; set [target] stack to choose")
        }
        crate::chain::run::context::StackOrigin::Default if ctx.model.root.is_file() => {
            "default for a GGUF file; set [target] stack to choose".to_string()
        }
        crate::chain::run::context::StackOrigin::Default => {
            "default for a Hugging Face directory; set [target] stack to choose".to_string()
        }
    };
    let mut f = Finding::new(
        checks::TOKENIZER_STACK,
        Severity::Info,
        format!("predicting what {} feeds the model ({why})", ctx.stack),
    );
    if let Some(t) = &ctx.stack_tokenizer {
        f = f.with("tokenizer", t);
    }
    if let Some(p) = &ctx.serving {
        f = f.with("template", &p.origin);
    }
    for n in &ctx.stack_notes {
        f = f.with("note", n);
    }
    f
}

fn vs_lock(ctx: &Context, tok: &Tokenizer, file_sha: &str) -> Result<Vec<Finding>> {
    let Some(locked) = ctx.lock.as_ref().and_then(|l| l.tokenizer.as_ref()) else {
        return Ok(vec![Finding::new(
            checks::TOKENIZER_LOCK,
            Severity::Warning,
            "no tokenizer identity in the lock: tokenizer drift cannot be detected",
        )
        .with("lock", ctx.suite.lock_path.display())]);
    };
    // Compared on the probe strings the lock was made with.
    let fp = crate::chain::run::probe::fingerprint_v(tok, locked.probe_version)?;
    let file = if locked.sha256 == file_sha {
        Finding::pass(
            checks::TOKENIZER_FILE_HASH,
            format!("tokenizer file matches the lock ({})", short(file_sha)),
        )
    } else {
        Finding::new(
            checks::TOKENIZER_FILE_HASH,
            Severity::Warning,
            "the tokenizer file differs from the lock (re-saved, or replaced)",
        )
        .with("locked", short(&locked.sha256))
        .with("found", short(file_sha))
    };
    let semantic = if locked.fingerprint == fp {
        let mut f = Finding::pass(
            checks::TOKENIZER_FINGERPRINT,
            format!(
                "the tokenizer splits the probe corpus as locked ({})",
                short(&fp)
            ),
        );
        if locked.probe_version != PROBE_VERSION {
            f = f.with(
                "note",
                format!(
                    "the lock uses probe corpus v{}; this build's v{PROBE_VERSION} adds common English text — `chatgate lock --update {}` to use it",
                    locked.probe_version,
                    ctx.suite.path.display()
                ),
            );
        }
        f
    } else {
        let mut f = Finding::new(checks::TOKENIZER_FINGERPRINT, Severity::Error, "the tokenizer splits text differently from the locked one: another tokenizer, or another version of it")
            .with("locked", short(&locked.fingerprint))
            .with("found", short(&fp));
        if locked.vocab_size != tok.get_vocab_size(true) {
            f = f.with(
                "vocab size",
                format!("{} → {}", locked.vocab_size, tok.get_vocab_size(true)),
            );
        }
        f
    };
    Ok(vec![file, semantic])
}

/// decode(encode(x)) == x on the probe corpus: text lost here is text the model never sees.
fn round_trip(tok: &Tokenizer) -> Result<Finding> {
    let mut lost = Vec::new();
    for s in PROBE_CORPUS {
        let ids = encode(tok, s, false)?;
        let back = decode(tok, &ids);
        if back != *s {
            lost.push((s, back));
        }
    }
    if lost.is_empty() {
        return Ok(Finding::pass(
            checks::TOKENIZER_ROUND_TRIP,
            format!(
                "decode(encode(x)) == x for all {} probe strings",
                PROBE_CORPUS.len()
            ),
        ));
    }
    // SentencePiece tokenizers legitimately normalise some whitespace; text that changes
    // beyond whitespace (unknown tokens, lost bytes) is what breaks a model.
    let beyond_ws = lost.iter().any(|(a, b)| squash(a) != squash(b));
    let sev = if beyond_ws {
        Severity::Warning
    } else {
        Severity::Info
    };
    let mut f = Finding::new(
        checks::TOKENIZER_ROUND_TRIP,
        sev,
        format!(
            "{} of {} probe strings do not survive decode(encode(x))",
            lost.len(),
            PROBE_CORPUS.len()
        ),
    );
    for (a, b) in lost.iter().take(3) {
        f = f.with("example", format!("{a:?} → {b:?}"));
    }
    Ok(f)
}

fn squash(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Special tokens named in every file must agree with each other and with the vocabulary.
pub fn special_tokens(model: &ModelDir) -> Vec<Finding> {
    let Some(tok) = model.tokenizer.as_ref().map(|t| &t.tokenizer) else {
        return vec![];
    };
    let mut problems: Vec<(Severity, String)> = Vec::new();
    let special = model.special_tokens();
    let named = special.named();
    for (name, text) in named {
        if let Some(text) = text {
            if single_id(tok, text).is_none() {
                let split = encode(tok, text, false)
                    .map(|ids| show_tokens(tok, &ids))
                    .unwrap_or_default();
                problems.push((Severity::Error, format!("{name} {text:?} is not a single token in the vocabulary (it encodes as {split})")));
            }
        }
    }
    if let (Some(tc), Some(stm)) = (&model.tokenizer_config, &model.special_tokens_map) {
        let pairs = [
            ("bos_token", &tc.bos_token, &stm.bos_token),
            ("eos_token", &tc.eos_token, &stm.eos_token),
            ("pad_token", &tc.pad_token, &stm.pad_token),
            ("unk_token", &tc.unk_token, &stm.unk_token),
        ];
        for (name, a, b) in pairs {
            if let (Some(a), Some(b)) = (a, b) {
                if a != b {
                    problems.push((Severity::Error, format!("{name}: tokenizer_config.json says {a:?}, special_tokens_map.json says {b:?}")));
                }
            }
        }
    }
    if let Some(tc) = &model.tokenizer_config {
        for (id, (content, _)) in &tc.added_tokens_decoder {
            match tok.id_to_token(*id) {
                Some(t) if &t == content => {}
                other => problems.push((Severity::Error, format!("tokenizer_config.json added_tokens_decoder has {id} = {content:?}, tokenizer.json has {}", other.map(|t| format!("{t:?}")).unwrap_or_else(|| "no such id".into())))),
            }
        }
    }
    let bos_id = special.bos_token.as_deref().and_then(|t| single_id(tok, t));
    let eos_id = special.eos_token.as_deref().and_then(|t| single_id(tok, t));
    if let Some(cfg) = &model.config {
        if let (Some(b), Some(&cb)) = (bos_id, cfg.bos_token_ids.first()) {
            if !cfg.bos_token_ids.contains(&b) {
                problems.push((
                    Severity::Warning,
                    format!("config.json bos_token_id {cb} is not the tokenizer's bos {b}"),
                ));
            }
        }
        if let Some(vocab) = cfg.vocab_size {
            for id in cfg.bos_token_ids.iter().chain(&cfg.eos_token_ids) {
                if u64::from(*id) >= vocab {
                    problems.push((
                        Severity::Error,
                        format!("config.json names token id {id}, beyond vocab_size {vocab}"),
                    ));
                }
            }
        }
    }
    if let Some(gc) = &model.generation_config {
        if let (Some(b), Some(gb)) = (bos_id, gc.bos_token_id) {
            if b != gb {
                problems.push((
                    Severity::Warning,
                    format!(
                        "generation_config.json bos_token_id {gb} is not the tokenizer's bos {b}"
                    ),
                ));
            }
        }
        let size = tok.get_vocab_size(true) as u32;
        for id in gc.eos_token_ids.iter().chain(gc.bos_token_id.iter()) {
            if tok.id_to_token(*id).is_none() && *id >= size {
                problems.push((Severity::Error, format!("generation_config.json names token id {id}, which the tokenizer does not have")));
            }
        }
        if let (Some(e), false) = (eos_id, gc.eos_token_ids.is_empty()) {
            if !gc.eos_token_ids.contains(&e) {
                problems.push((Severity::Info, format!("the tokenizer's eos {e} is not in generation_config.json eos_token_id {:?} (servers stop on both)", gc.eos_token_ids)));
            }
        }
    }
    let worst = problems.iter().map(|p| p.0).max();
    match worst {
        None => vec![Finding::pass(checks::TOKENIZER_SPECIAL_TOKENS, "special tokens agree across tokenizer.json, tokenizer_config.json, special_tokens_map.json, config.json and generation_config.json")],
        Some(sev) => {
            let mut f = Finding::new(checks::TOKENIZER_SPECIAL_TOKENS, sev, "special tokens disagree between the model's files");
            for (_, p) in problems {
                f = f.with("problem", p);
            }
            vec![f]
        }
    }
}

/// One golden row that did not re-encode to its ids: (row, first differing token, the SFT
/// ids, the re-encoded ids).
pub type ReencodeRow = (String, usize, Vec<u32>, Vec<u32>);

/// What the golden re-encode saw over all rows.
#[derive(Default)]
pub struct ReencodeTally {
    pub golden_rows: usize,
    /// Rows whose text the serving tokenizer splits differently.
    pub failures: Examples<ReencodeRow>,
    /// Rows that differ only by llama.cpp's space prefix after special tokens.
    pub prefix_only: Examples<ReencodeRow>,
}

impl ReencodeTally {
    pub fn merge(&mut self, later: ReencodeTally) {
        self.golden_rows += later.golden_rows;
        self.failures.merge(later.failures);
        self.prefix_only.merge(later.prefix_only);
    }
}

/// The tokenizer the serving stack runs: its own pipeline's, else the model's file.
fn serving_tokenizer(ctx: &Context) -> Option<&Tokenizer> {
    ctx.serving.as_ref().map(|p| &p.tokenizer).or(ctx
        .model
        .tokenizer
        .as_ref()
        .map(|t| &t.tokenizer))
}

/// encode(decode(golden ids)) == golden ids for one row: decode it and encode it again the way
/// the serving stack does. A stack that splits the SFT text differently feeds the model ids it
/// was not trained on (tokenizers#1512, mellea#947).
/// `served` is the serving render of the same conversation: when its text is the decoded
/// text, its ids are the re-encode (the same tokenizer call), so the row is not encoded twice.
pub fn reencode_row(
    ctx: &Context,
    conv: &Conversation,
    served: &crate::chain::run::context::Served,
) -> Result<ReencodeTally> {
    let mut t = ReencodeTally::default();
    let (Some(tok), Some((ids, _))) = (serving_tokenizer(ctx), &conv.golden) else {
        return Ok(t);
    };
    t.golden_rows = 1;
    let text = decode(tok, ids);
    let stripped = |p: &crate::chain::run::context::Pipeline| {
        p.strip_leading.is_some() || p.strip_trailing.is_some()
    };
    let again = match (&ctx.serving, served) {
        (Some(p), Some(Ok((served_ids, served_text, _))))
            if *served_text == text && (stripped(p) || !p.add_special_tokens) =>
        {
            served_ids.clone()
        }
        // The stack's own text-to-ids step, minus a completions endpoint's added tokens:
        // the row's text already holds what the template wrote.
        (Some(p), _) if stripped(p) => p.ids(&text)?,
        _ => encode(tok, &text, false)?,
    };
    if &again == ids || same_after_bos(ctx, &again, ids) {
        return Ok(t);
    }
    let at = ids
        .iter()
        .zip(&again)
        .position(|(a, b)| a != b)
        .unwrap_or(ids.len().min(again.len()));
    let row = (conv.id.clone(), at, ids.clone(), again);
    // The same, with transformers' SentencePiece prefix rule in place of llama.cpp's.
    let start_only = match &ctx.serving {
        Some(p) if p.strip_leading.is_some() || p.strip_trailing.is_some() => {
            p.start_only_ids(&text)?
        }
        Some(p) => p
            .start_only_prefix
            .as_ref()
            .map(|v| encode(v, &text, false))
            .transpose()?,
        None => None,
    };
    if start_only.is_some_and(|s| s == *ids || same_after_bos(ctx, &s, ids)) {
        t.prefix_only.push(row);
    } else {
        t.failures.push(row);
    }
    Ok(t)
}

/// The same ids once the leading BOS run is set aside on both sides: how many BOS a stack puts
/// before the text (llama.cpp adds the vocabulary's own) is template.bos-count's finding, not
/// a different split of the text.
fn same_after_bos(ctx: &Context, again: &[u32], ids: &[u32]) -> bool {
    let Some(bos) = ctx.serving.as_ref().and_then(|p| p.bos_id()) else {
        return false;
    };
    let skip = |v: &[u32]| v.iter().take_while(|&&i| i == bos).count();
    again[skip(again)..] == ids[skip(ids)..]
}

/// The golden re-encode's finding over all rows.
fn golden_reencode(ctx: &Context, rows: &ReencodeTally) -> Vec<Finding> {
    let Some(tok) = serving_tokenizer(ctx) else {
        return vec![];
    };
    let golden = rows.golden_rows;
    if golden == 0 {
        return vec![];
    }
    let show = |(id, at, want, got): &ReencodeRow, f: Finding| {
        let lo = at.saturating_sub(2);
        f.with("stack", ctx.stack)
            .with("first row", id)
            .with("first difference at token", at)
            .with(
                "SFT ids",
                show_tokens(tok, &want[lo..(at + 3).min(want.len())]),
            )
            .with(
                "re-encoded",
                show_tokens(tok, &got[lo..(at + 3).min(got.len())]),
            )
    };
    let Some(first) = rows.failures.first() else {
        if let Some(first) = rows.prefix_only.first() {
            let f = space_prefix_only(
                checks::TOKENIZER_GOLDEN_REENCODE,
                rows.prefix_only.count,
                golden,
                "golden rows",
            );
            return vec![show(first, f)];
        }
        return vec![Finding::pass(
            checks::TOKENIZER_GOLDEN_REENCODE,
            format!(
                "the serving tokenizer re-encodes all {golden} golden SFT rows to the same ids"
            ),
        )];
    };
    let mut f = Finding::new(
        checks::TOKENIZER_GOLDEN_REENCODE,
        Severity::Error,
        format!(
            "the serving tokenizer encodes the SFT text differently in {} of {golden} golden rows",
            rows.failures.count
        ),
    );
    if !rows.prefix_only.is_empty() {
        f = f.with(
            "differing only by a space prefix (warning class space-prefix)",
            rows.prefix_only.count,
        );
    }
    vec![show(first, f)]
}

/// config.json vocab_size vs the tokenizer's size (added tokens included). A tokenizer with more
/// tokens than the embedding is the tokenizer's fault: a swapped checkpoint is caught earlier,
/// by its hash and fingerprint, while these weights still match the lock.
pub fn vocab_size(model: &ModelDir) -> Option<Finding> {
    let config = model.config.as_ref()?;
    let tok = model.tokenizer.as_ref()?;
    let declared = config.vocab_size?;
    let tok_size = tok.vocab_size as u64;
    Some(if tok_size > declared {
        Finding::new(checks::TOKENIZER_VOCAB_SIZE, Severity::Error, "the tokenizer has more tokens than the model's embedding: some ids index past the embedding table")
            .with("config.json vocab_size", declared)
            .with("tokenizer size", tok_size)
    } else if tok_size < declared {
        Finding::new(
            checks::TOKENIZER_VOCAB_SIZE,
            Severity::Info,
            "the embedding is larger than the tokenizer (padding rows are common)",
        )
        .with("config.json vocab_size", declared)
        .with("tokenizer size", tok_size)
    } else {
        Finding::pass(
            checks::TOKENIZER_VOCAB_SIZE,
            format!("config.json vocab_size = tokenizer size = {declared}"),
        )
    })
}
