//! The online chain's driver: the probe pass, each boundary's own probes, then every
//! boundary's judges in chain order (`ONLINE` in each boundary's folder), then the suite's
//! policy.
use crate::chain::run::policy::apply_policy;
use crate::chain::run::probes::{Judge, Online, OnlineResult, Probe};
use crate::chain::{checkpoint, generation, server, template, tokenizer};
use crate::error::Result;

/// Every boundary's online judges, in chain order.
fn judges() -> [&'static [Judge]; 5] {
    [
        checkpoint::online::ONLINE,
        tokenizer::online::ONLINE,
        template::online::ONLINE,
        generation::online::ONLINE,
        server::ONLINE,
    ]
}

/// Run every online check against the server. Err only when it cannot be reached at all
/// (exit 3).
pub async fn run(online: &Online<'_>, probes: &[Probe]) -> Result<OnlineResult> {
    let mut obs = online.gather(probes).await?;
    // The boundaries' own probes: a check the suite skips sends none (each gather asks).
    obs.text_ids = tokenizer::online::gather(online.http).await;
    obs.fields = server::fields::gather(online, probes, obs.framing.as_ref()).await;
    obs.responses = server::responses::gather(online, probes).await;
    let server_section = &online.ctx.suite.file.server;
    let mut findings = Vec::new();
    for judge in judges().into_iter().flatten() {
        if judge.checks.iter().all(|c| server_section.skips(c)) {
            continue;
        }
        findings.extend(judge.run(online, &obs).await);
    }
    apply_policy(&mut findings, server_section);
    let determinism = obs
        .runs
        .iter()
        .filter_map(|r| r.determinism().map(|d| (r.probe.id.clone(), d)))
        .collect();
    let server_day = obs.runs.iter().find_map(|r| r.server_day.map(|t| t.date()));
    Ok(OnlineResult {
        findings,
        determinism,
        server_day,
    })
}
