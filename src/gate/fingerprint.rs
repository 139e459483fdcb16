//! `chatgate lock SUITE.toml --fingerprint`: the reference run once, where it fits, and kept
//! beside the lock (chain/recording.rs), so the gate fingerprints a server with no weights.
//!
//! It sends the reference exactly what the gate's probe pass sends a server — the same probes,
//! the same temperature-0 request — and keeps the prompt ids, the greedy reply and each
//! position's top-k.
use crate::artifacts::ModelDir;
use crate::chain::lock::Lock;
use crate::chain::online::Probe;
use crate::chain::recording::{
    messages_sha256, ComputedBy, RecordedProbe, Recording, RECORDING_VERSION,
};
use crate::chain::Context;
use crate::endpoint::candle::memory;
use crate::endpoint::local::CandleTarget;
use crate::error::{Error, Result};
use crate::suite::Suite;

/// Record the suite's reference (`[reference] model`, else `[model] dir`) against `lock`.
pub async fn record(suite: &Suite, lock: &Lock) -> Result<Recording> {
    let reference_path = suite
        .reference_model
        .clone()
        .unwrap_or_else(|| suite.model_dir.clone());
    let model = ModelDir::open(&suite.model_dir)?;
    let ctx = Context::load_unbound(suite.clone(), model, None)?;
    let prompts = super::load_prompts(suite)?;
    let chosen = prompts.as_ref().map(|p| p.chosen.as_slice());
    let probes = super::probes(&ctx, chosen, ctx.suite.file.server.probes.unwrap_or(4));
    if probes.is_empty() {
        return Err(Error::in_file(
            &suite.path,
            "the suite has no probe to record: no greedy replay prompt and no conversation",
        )
        .hint("add [replay] prompts at temperature 0, or [sft] golden rows"));
    }
    let (path, s) = (reference_path.clone(), suite.clone());
    let reference = tokio::task::spawn_blocking(move || super::load_reference(&path, &s))
        .await
        .map_err(|e| Error::input(format!("loading the reference failed: {e}")))??;
    let settings = super::probe_settings(&ctx);
    let estimate = memory::estimate(&reference_path);
    let mut recorded = Vec::new();
    for probe in &probes {
        recorded.push(record_probe(&reference, probe, &settings).await?);
    }
    Ok(Recording {
        version: RECORDING_VERSION,
        weights: lock.weights.total.clone(),
        tokenizer: lock.tokenizer.as_ref().map(|t| t.sha256.clone()),
        template: lock.template.as_ref().map(|t| t.sha256.clone()),
        computed_by: ComputedBy {
            engine: "chatgate candle (in-process, CPU)".into(),
            chatgate: env!("CARGO_PKG_VERSION").into(),
            dtype: estimate
                .as_ref()
                .map(|e| e.held_as.clone())
                .unwrap_or_else(|| "unknown".into()),
            quantization: estimate.and_then(|e| e.quantization),
            architecture: reference.architecture(),
            reference: shown_reference(suite),
            template_date: suite.template_now.map(|t| t.date().to_string()),
        },
        settings: settings.recorded(),
        probes: recorded,
    })
}

/// The reference as the suite names it (relative paths stay relative: the recording is
/// committed and read on other machines).
fn shown_reference(suite: &Suite) -> String {
    match &suite.file.reference {
        Some(r) => format!("[reference] model = {:?}", r.model.display().to_string()),
        None => format!(
            "[model] dir = {:?}",
            suite.file.model.dir.display().to_string()
        ),
    }
}

async fn record_probe(
    reference: &CandleTarget,
    probe: &Probe,
    settings: &crate::chain::online::ProbeSettings,
) -> Result<RecordedProbe> {
    let req = settings.request(probe, settings.seed, false);
    let reply = reference.chat(&req).await?;
    let prompt_ids = match reply.prompt_ids.clone() {
        Some(ids) => ids,
        None => {
            let tools = probe.tools.clone().map(serde_json::Value::Array);
            reference.prompt_ids(probe.messages.clone(), tools).await?
        }
    };
    Ok(RecordedProbe {
        id: probe.id.clone(),
        messages_sha256: messages_sha256(&probe.messages, probe.tools.as_deref()),
        prompt_ids,
        text: reply.text,
        token_ids: reply.token_ids.unwrap_or_default(),
        finish_reason: reply.finish_reason,
        logprobs: reply.logprobs.unwrap_or_default(),
    })
}
