//! The online chain's driver: the probe pass, each boundary's own probes, then every
//! boundary's judges in chain order (`ONLINE` in each boundary's folder), then the suite's
//! policy.
use std::time::Instant;

use crate::chain::run::policy::apply_policy;
use crate::chain::run::probes::{Judge, JudgeFn, Online, OnlineResult, Probe};
use crate::chain::{checkpoint, generation, server, template, tokenizer};
use crate::endpoint::openai::HttpTarget;
use crate::error::Result;
use crate::verdict::PhaseTime;

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
    let mut steps = Steps::from(online.http);
    let mut obs = online.gather(probes).await?;
    steps.mark("probe pass");
    // The boundaries' own probes: a check the suite skips sends none (each gather asks).
    obs.text_ids = tokenizer::online::gather(online.http).await;
    steps.mark("tokenizer probes");
    obs.fields = server::fields::gather(online, probes, obs.framing.as_ref()).await;
    steps.mark("request-field probes");
    obs.responses = server::responses::gather(online, probes).await;
    steps.mark("/v1/responses probes");
    let server_section = &online.ctx.suite.file.server;
    let mut findings = Vec::new();
    for judge in judges().into_iter().flatten() {
        if judge.checks.iter().all(|c| server_section.skips(c)) {
            continue;
        }
        findings.extend(judge.run(online, &obs).await);
        // Judges that only read take no time of their own: it lands in the next step.
        if let (JudgeFn::Sends(_), Some(check)) = (&judge.run, judge.checks.first()) {
            steps.mark(check.id);
        }
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
        steps: steps.done(),
    })
}

/// The online chain's clock: each step's seconds and the requests it sent.
struct Steps<'a> {
    http: &'a HttpTarget,
    since: Instant,
    sent: u64,
    done: Vec<PhaseTime>,
}

impl<'a> Steps<'a> {
    fn from(http: &'a HttpTarget) -> Self {
        Steps {
            http,
            since: Instant::now(),
            sent: http.requests_sent(),
            done: Vec::new(),
        }
    }

    /// End the step running since the last mark; one that sent nothing and took no time (a
    /// skipped check) is left out.
    fn mark(&mut self, step: &str) {
        let (now, sent) = (Instant::now(), self.http.requests_sent());
        let seconds = now.duration_since(self.since).as_secs_f64();
        let requests = sent.saturating_sub(self.sent);
        if requests > 0 || seconds >= 0.05 {
            self.done.push(PhaseTime {
                phase: step.to_string(),
                seconds,
                requests: Some(requests),
                steps: Vec::new(),
            });
        }
        (self.since, self.sent) = (now, sent);
    }

    fn done(self) -> Vec<PhaseTime> {
        self.done
    }
}
