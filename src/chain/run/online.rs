//! The online chain's driver: the probe pass, then every boundary's judges in chain order
//! (`ONLINE` in each boundary's folder), each boundary's own probes just before its first
//! judge, then the suite's policy.
use std::time::Instant;

use crate::chain::run::fail_fast::FailFast;
use crate::chain::run::policy::apply_policy;
use crate::chain::run::probes::{Judge, JudgeFn, Online, OnlineResult, Probe};
use crate::chain::{checkpoint, generation, server, template, tokenizer};
use crate::endpoint::openai::HttpTarget;
use crate::error::Result;
use crate::verdict::{Boundary, PhaseTime};

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
/// (exit 3). With `fail_fast` (`gate --fail-fast`, holding the offline chain's findings), a
/// boundary's own probes and each judge are left out once an earlier boundary is broken.
pub async fn run(
    online: &Online<'_>,
    probes: &[Probe],
    mut fail_fast: Option<FailFast>,
) -> Result<OnlineResult> {
    let mut steps = Steps::from(online.http);
    let mut obs = online.gather(probes).await?;
    steps.mark("probe pass");
    let server_section = &online.ctx.suite.file.server;
    let mut findings = Vec::new();
    let mut gathered = (false, false);
    let mut judged = 0;
    for judge in judges().into_iter().flatten() {
        if judge.checks.iter().all(|c| server_section.skips(c)) {
            continue;
        }
        if let Some(ff) = fail_fast.as_mut() {
            // Only what the last judge added: what came before is already taken in.
            ff.saw(&findings[judged..], server_section);
            judged = findings.len();
            if !ff.runs(judge.checks) {
                continue;
            }
        }
        // A boundary's own probes go just before its first judge: a check the suite skips
        // sends none (each gather asks), nor one a fail-fast run leaves out.
        let boundary = judge.checks.first().map(|c| c.boundary);
        if boundary >= Some(Boundary::Tokenizer) && !gathered.0 {
            gathered.0 = true;
            obs.text_ids = tokenizer::online::gather(online.http).await;
            steps.mark("tokenizer probes");
        }
        // A fail-fast run that stopped before the server still runs the judges that can blame
        // an earlier boundary (they need no server probe for that): none is sent for them.
        let server_probes = !fail_fast
            .as_ref()
            .is_some_and(|ff| ff.stops_before(Boundary::Server));
        if boundary >= Some(Boundary::Server) && server_probes && !gathered.1 {
            gathered.1 = true;
            obs.fields = server::fields::gather(online, probes, obs.framing.as_ref()).await;
            steps.mark("request-field probes");
            obs.responses = server::responses::gather(online, probes).await;
            steps.mark("/v1/responses probes");
        }
        findings.extend(judge.run(online, &obs).await);
        // Judges that only read take no time of their own: it lands in the next step.
        if let (JudgeFn::Sends(_), Some(check)) = (&judge.run, judge.checks.first()) {
            steps.mark(check.id);
        }
    }
    if let Some(ff) = fail_fast.as_mut() {
        ff.saw(&findings[judged..], server_section);
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
        fail_fast,
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
