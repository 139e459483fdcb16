//! Boundary 2 online: does the server split text into the ids the serving stack's tokenizer
//! predicts? Servers with a text tokenize endpoint (vLLM/SGLang `/tokenize`, llama-server
//! `/tokenize`, llama-cpp-python `/extras/tokenize`, `chatgate serve`) are asked for a fixed set
//! of probe strings. A swapped tokenizer shows here, at its own boundary, before it shows as a
//! template's wrong prompt ids.
use crate::chain::run::probe::{corpus, PROBE_VERSION};
use crate::chain::run::probes::{Judge, JudgeFn, Observed, Online, ServerTokens};
use crate::endpoint::openai::HttpTarget;
use crate::verdict::checks;
use crate::verdict::{Finding, Severity};
/// Probe strings sent: enough to tell tokenizers apart, few enough to cost milliseconds.
const STRINGS: usize = 24;

pub async fn gather(http: &HttpTarget) -> ServerTokens {
    let strings = corpus(PROBE_VERSION).unwrap_or_default();
    let mut out = ServerTokens::default();
    for text in strings.into_iter().take(STRINGS) {
        let mut reply = http.tokenize_text(text, out.add_special).await;
        if out.ids.is_empty() && matches!(reply, Ok(None)) {
            // llama-cpp-python's /extras/tokenize has only the add-special form.
            out.add_special = true;
            reply = http.tokenize_text(text, true).await;
        }
        match reply {
            Ok(None) => return ServerTokens::default(),
            Ok(Some(ids)) => out.ids.push((text.to_string(), Ok(ids))),
            Err(e) => out.ids.push((text.to_string(), Err(e))),
        }
    }
    out
}

/// The tokenizer's online judge.
pub static ONLINE: &[Judge] = &[Judge {
    checks: &[checks::TOKENIZER_SERVER_TOKENIZE],
    run: JudgeFn::Reads(check),
}];

fn check(online: &Online, obs: &Observed) -> Vec<Finding> {
    let Some(local) = online.ctx.serving.as_ref() else {
        return Vec::new();
    };
    if obs.text_ids.ids.is_empty() {
        return vec![Finding::new(
            checks::TOKENIZER_SERVER_TOKENIZE,
            Severity::Info,
            "the server has no text tokenize endpoint: its tokenizer shows only through its prompt ids and counts (template checks)",
        )];
    }
    let tok = &local.tokenizer;
    let special = |id: u32| {
        tok.id_to_token(id)
            .is_some_and(|t| tok.get_added_vocabulary().is_special_token(&t))
    };
    // One extra leading special token on either side (a BOS the endpoint or the stack adds) is
    // the stack's policy, checked at the template boundary, not another tokenizer.
    let same = |server: &[u32], mine: &[u32]| {
        server == mine
            || (server.len() == mine.len() + 1 && special(server[0]) && server[1..] == *mine)
            || (mine.len() == server.len() + 1 && special(mine[0]) && mine[1..] == *server)
    };
    let mut compared = 0;
    for (text, reply) in &obs.text_ids.ids {
        let Ok(server) = reply else {
            continue;
        };
        let Ok(mine) = crate::chain::run::tokens::encode(tok, text, obs.text_ids.add_special)
        else {
            continue;
        };
        if !same(server, &mine) {
            return vec![Finding::new(
                checks::TOKENIZER_SERVER_TOKENIZE,
                Severity::Error,
                "the server tokenizes probe text differently from the model's tokenizer: it serves another tokenizer (or another version of it)",
            )
            .with("text", format!("{text:?}"))
            .with("server ids", crate::chain::run::probes::show(&format!("{server:?}")))
            .with("local ids", crate::chain::run::probes::show(&format!("{mine:?}")))];
        }
        compared += 1;
    }
    if compared == 0 {
        return vec![Finding::new(
            checks::TOKENIZER_SERVER_TOKENIZE,
            Severity::Warning,
            "the server's tokenize endpoint answered no probe string",
        )];
    }
    vec![Finding::pass(
        checks::TOKENIZER_SERVER_TOKENIZE,
        format!("the server tokenizes {compared} probe strings as the model's tokenizer does"),
    )]
}
