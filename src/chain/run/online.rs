//! The online chain's driver: the probe pass, then every boundary's judges in chain order
//! (`ONLINE` in each boundary's folder), each boundary's own probes (and the part of the probe
//! pass only later boundaries read) just before its first judge, then the suite's policy.
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
    let mut gathered = Gathered::default();
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
        if boundary >= Some(Boundary::Tokenizer) && !gathered.tokenizer {
            gathered.tokenizer = true;
            obs.text_ids = tokenizer::online::gather(online.http).await;
            steps.mark("tokenizer probes");
        }
        // A fail-fast run that stopped before a boundary still runs the judges that can blame
        // an earlier one (they need none of its probes for that): none is sent for them.
        let sends = |from| !fail_fast.as_ref().is_some_and(|ff| ff.stops_before(from));
        if boundary >= Some(Boundary::GenerationConfig)
            && sends(Boundary::GenerationConfig)
            && !gathered.rest
        {
            gathered.rest = true;
            online.gather_rest(&mut obs).await;
            steps.mark(REST);
        }
        if boundary >= Some(Boundary::Server) && sends(Boundary::Server) && !gathered.server {
            gathered.server = true;
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
    // A suite that skips every later check still has its replay judged by each probe's
    // determinism, which reads the concurrent copies; a fail-fast run that stopped runs no
    // replay.
    let stopped = fail_fast.as_ref().is_some_and(|ff| ff.broken().is_some());
    if !gathered.rest && !stopped {
        online.gather_rest(&mut obs).await;
        steps.mark(REST);
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

/// The step that sends the rest of the probe pass ([`Online::gather_rest`]), as the report's
/// time table names it.
pub const REST: &str = "probe pass (streams, seeds, concurrency)";

/// Which boundaries' probes have been sent.
#[derive(Default)]
struct Gathered {
    tokenizer: bool,
    /// The rest of the probe pass, which the generation config and the server read.
    rest: bool,
    server: bool,
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
