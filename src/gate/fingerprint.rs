//! `chatgate lock SUITE.toml --fingerprint`: the reference run once, where it fits, and kept
//! beside the lock (chain/recording.rs), so the gate fingerprints a server with no weights.
//!
//! It sends the reference exactly what the gate's probe pass sends a server — the same probes,
//! the same temperature-0 request — and keeps the prompt ids, the greedy reply and each
//! position's top-k.
use crate::artifacts::ModelDir;
use crate::chain::run::context::Context;
use crate::chain::run::lock::Lock;
use crate::chain::run::probes::Probe;
use crate::chain::run::recording::{
    messages_sha256, ComputedBy, RecordedProbe, Recording, RECORDING_VERSION,
};
use crate::endpoint::candle::memory;
use crate::endpoint::local::CandleTarget;
use crate::endpoint::reference::{ReferenceServer, ServerSpec};
use crate::error::{Error, Result};
use crate::suite::Suite;

/// Record the suite's reference (`[reference] model` or `url`, else `[model] dir`) against
/// `lock`.
pub async fn record(suite: &Suite, lock: &Lock) -> Result<Recording> {
    if let Some(spec) = suite
        .file
        .reference
        .as_ref()
        .and_then(ServerSpec::from_section)
    {
        return record_from_server(suite, lock, &spec).await;
    }
    let reference_path = suite
        .reference_model
        .clone()
        .unwrap_or_else(|| suite.model_dir.clone());
    let (ctx, probes) = probes_to_record(suite)?;
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

/// The suite's context and the probes the gate would send a server.
fn probes_to_record(suite: &Suite) -> Result<(Context, Vec<Probe>)> {
    let model = ModelDir::open(&suite.model_dir)?;
    let ctx = Context::load_unbound(suite.clone(), model, None)?;
    let prompts = super::run::load_prompts(suite)?;
    let chosen = prompts.as_ref().map(|p| p.chosen.as_slice());
    let probes = super::run::probes(&ctx, chosen, ctx.suite.file.server.probes.unwrap_or(4));
    if probes.is_empty() {
        return Err(Error::in_file(
            &suite.path,
            "the suite has no probe to record: no greedy replay prompt and no conversation",
        )
        .hint("add [replay] prompts at temperature 0, or [sft] golden rows"));
    }
    Ok((ctx, probes))
}

/// Record from a reference server (`[reference] url`): each probe rendered here with the suite's
/// own template and tokenizer — the ids the gate will find a healthy server fed — then the
/// server's greedy reply to exactly those ids, and its top alternatives by id, teacher-forced.
async fn record_from_server(suite: &Suite, lock: &Lock, spec: &ServerSpec) -> Result<Recording> {
    let (ctx, probes) = probes_to_record(suite)?;
    let server = ReferenceServer::connect(spec).await?;
    if !server.forces() {
        return Err(Error::in_file(
            &suite.path,
            format!(
                "the reference server {} cannot be recorded from: a recording holds the reply to exactly the prompt's ids and its alternatives by id, and this stack takes neither",
                server.describe()
            ),
        )
        .hint("record from a vLLM, SGLang, TGI (--enable-prefill-logprobs) or llama-server deployment of the checkpoint, or from the weights: [reference] model = DIR"));
    }
    let Some(serving) = ctx.serving.as_ref() else {
        return Err(Error::in_file(
            &suite.path,
            "the suite's model directory has no tokenizer and template to render the probes with",
        ));
    };
    check_same_tokenizer(&server, serving, &suite.path).await?;
    let settings = super::probe_settings(&ctx);
    let texts = |ids: &[u32]| serving.tokenizer.decode(ids, false).ok();
    let mut recorded = Vec::new();
    for probe in &probes {
        let now = suite.template_now.or(serving.now);
        let r = serving
            .render_at(&probe.messages, probe.tools.as_deref(), true, now)
            .map_err(|e| {
                Error::in_file(&suite.path, format!("rendering probe {:?}: {e}", probe.id))
            })?;
        let rendered = serving.ids(&r.text)?;
        let reply = server
            .greedy(&rendered, settings.max_tokens, &texts)
            .await
            .map_err(|e| {
                e.to_error().hint(format!(
                    "recording probe {:?} from the reference server",
                    probe.id
                ))
            })?;
        recorded.push(RecordedProbe {
            id: probe.id.clone(),
            messages_sha256: messages_sha256(&probe.messages, probe.tools.as_deref()),
            prompt_ids: rendered,
            text: reply.text,
            token_ids: reply.token_ids.unwrap_or_default(),
            finish_reason: reply.finish_reason,
            logprobs: reply.logprobs.unwrap_or_default(),
        });
    }
    let architecture = ctx
        .model
        .config
        .as_ref()
        .and_then(|c| c.model_type.clone())
        .unwrap_or_else(|| "unknown".into());
    Ok(Recording {
        version: RECORDING_VERSION,
        weights: lock.weights.total.clone(),
        tokenizer: lock.tokenizer.as_ref().map(|t| t.sha256.clone()),
        template: lock.template.as_ref().map(|t| t.sha256.clone()),
        computed_by: ComputedBy {
            engine: format!("{} (reference server)", server.describe()),
            chatgate: env!("CARGO_PKG_VERSION").into(),
            dtype: match server.quantization() {
                Some(q) => format!("as served ({q}, [reference] quantization)"),
                None => "as served (float weights: no [reference] quantization)".into(),
            },
            quantization: server.quantization().map(str::to_string),
            architecture,
            reference: format!("[reference] url = {:?}", spec.url),
            template_date: suite.template_now.map(|t| t.date().to_string()),
        },
        settings: settings.recorded(),
        probes: recorded,
    })
}

/// The reference server must tokenize as the suite does: forced ids mean other tokens under
/// another vocabulary. Checked on a fixed text where the server can tokenize.
async fn check_same_tokenizer(
    server: &ReferenceServer,
    serving: &crate::chain::run::context::Pipeline,
    suite_path: &std::path::Path,
) -> Result<()> {
    let text = "The quick brown fox: 1234, ünïcödé, <tags>\n\tand spaces.";
    let Ok(Some(theirs)) = server.tokenize(text).await else {
        return Ok(());
    };
    let ours = serving
        .tokenizer
        .encode(text, false)
        .map(|e| e.get_ids().to_vec())
        .unwrap_or_default();
    if theirs != ours {
        return Err(Error::in_file(
            suite_path,
            format!(
                "the reference server {} tokenizes otherwise than the suite's tokenizer ({} ids against {} for the same text): it does not serve this checkpoint's tokenizer",
                server.describe(),
                theirs.len(),
                ours.len()
            ),
        )
        .hint("point [reference] url at a deployment of the locked checkpoint"));
    }
    Ok(())
}

/// The reference as the suite names it (relative paths stay relative: the recording is
/// committed and read on other machines).
fn shown_reference(suite: &Suite) -> String {
    match &suite.file.reference {
        Some(r) => match &r.model {
            Some(m) => format!("[reference] model = {:?}", m.display().to_string()),
            None => format!("[reference] url = {:?}", r.url.clone().unwrap_or_default()),
        },
        None => format!(
            "[model] dir = {:?}",
            suite.file.model.dir.display().to_string()
        ),
    }
}

async fn record_probe(
    reference: &CandleTarget,
    probe: &Probe,
    settings: &crate::chain::run::probes::ProbeSettings,
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
