//! Boundary 5 under sampling: the reasoning and tool-call parsers over many sampled replies.
//! Every other probe is greedy, and a parser that fails on one sampled output in twenty passes
//! all of them: gpt-oss on llama.cpp wrote a malformed harmony header on ~4% of turns at
//! temperature 1.0 (llama.cpp#27720), vLLM's harmony parser failed intermittently
//! (vllm#51977). So the tools probe (else the first probe) is sent `[server] sampled_runs`
//! times at the suite's sampling settings, each reply is judged as `server.tool-call-parse` and
//! `server.reasoning-split` judge one, and the failure rate is reported with its 95% interval:
//! an error when the interval's lower bound is above the suite's allowance, a pass when its
//! upper bound is within it, and INCONCLUSIVE — a warning, never a pass — in between, with how
//! many runs would decide.
use futures_util::stream::{self, StreamExt};
use serde_json::json;

use crate::chain::run::probes::{show, Observed, Online, Probe};
use crate::chain::server::reasoning::{self, Split};
use crate::chain::server::tool_calls::{calls_of, Judge, Parse};
use crate::endpoint::openai::CallError;
use crate::exchange::Record;
use crate::template::framing::Reasoning;
use crate::template::reply::Reader;
use crate::verdict::checks;
use crate::verdict::{Finding, Severity};

/// Sampled requests unless the suite says otherwise.
pub const DEFAULT_RUNS: usize = 20;
/// The share of failed parses allowed unless the suite says otherwise: 20 clean runs decide
/// it (their interval's upper bound is 0.16).
pub const DEFAULT_ALLOWANCE: f64 = 0.2;
/// The normal quantile of a two-sided 95% interval.
const Z: f64 = 1.96;
/// Sampled requests in flight at once.
const IN_FLIGHT: usize = 2;

/// `server.sampled-parse`; nothing when the template frames neither calls nor reasoning.
pub async fn check(online: &Online<'_>, obs: &Observed) -> Vec<Finding> {
    let Some(parsers) = Parsers::of(online, obs) else {
        return Vec::new();
    };
    let server = &online.ctx.suite.file.server;
    let runs = server.sampled_runs.unwrap_or(DEFAULT_RUNS);
    if runs == 0 {
        return vec![Finding::new(
            checks::SERVER_SAMPLED_PARSE,
            Severity::Info,
            "not run ([server] sampled_runs = 0)",
        )];
    }
    let allowance = server.sampled_allowance.unwrap_or(DEFAULT_ALLOWANCE);
    let sampling = Sampling::of(online);
    let replies = send(online, &parsers.probe, runs, &sampling).await;
    let mut tally = Tally::default();
    for (k, reply) in replies.iter().enumerate() {
        let at = format!("run {k} (seed {})", seed(online, k));
        match reply {
            Ok(rec) => tally.add(at, parsers.judge(online, rec)),
            Err(CallError::Status { status, body, .. }) if *status >= 500 => tally.add(
                at,
                Outcome::Failed(format!("HTTP {status}: {}", show(body))),
            ),
            Err(e) => tally.unsent.push(format!("{at}: {e}")),
        }
    }
    vec![tally.finding(allowance, &sampling, parsers.broken)]
}

/// The parsers the template calls for, and the probe that exercises them.
struct Parsers {
    probe: Probe,
    reader: Option<Reader>,
    reasoning: Option<Reasoning>,
    /// The severity of a rate past the allowance (`[client] relies_on`, as the greedy checks).
    broken: Severity,
}

impl Parsers {
    fn of(online: &Online, obs: &Observed) -> Option<Parsers> {
        let serving = online.ctx.serving.as_ref()?;
        let framing = obs.framing.as_ref()?;
        let reasoning = framing.reasoning.clone().filter(|r| !r.harmony());
        let reader = Reader::of(&serving.template, &serving.special, &serde_json::Map::new());
        let offers = |p: &Probe| p.tools.as_ref().is_some_and(|t| !t.is_empty());
        let tools_probe = (framing.tools.offered && reader.format.is_some())
            .then(|| obs.runs.iter().map(|r| &r.probe).find(|p| offers(p)))
            .flatten();
        let (probe, reader) = match (tools_probe, &reasoning) {
            (Some(p), _) => (p.clone(), Some(reader)),
            (None, Some(_)) => (obs.runs.first()?.probe.clone(), None),
            (None, None) => return None,
        };
        let relies = |what| online.ctx.suite.client_relies_on(what);
        let broken = if relies("tool_calls") || relies("reasoning") {
            Severity::Error
        } else {
            Severity::Warning
        };
        Some(Parsers {
            probe,
            reader,
            reasoning,
            broken,
        })
    }

    /// One sampled reply: a failed parse, a parse that held, or nothing to parse.
    fn judge(&self, online: &Online, rec: &Record) -> Outcome {
        let generated = rec.token_ids.as_deref().and_then(|ids| online.decode(ids));
        let tools = self.probe.tools.as_deref().unwrap_or_default();
        let call = self.reader.as_ref().map(|reader| {
            let emitted = generated
                .as_deref()
                .map(|g| calls_of(&reader.read(g, tools).message));
            Judge { reader, tools }.judge(rec, emitted.as_deref())
        });
        let split = self
            .reasoning
            .as_ref()
            .map(|r| reasoning::judge(r, rec, generated.as_deref()));
        let failed = match (&call, &split) {
            (
                Some(
                    Parse::AsText(why)
                    | Parse::BrokenArguments(why)
                    | Parse::Mistyped(why)
                    | Parse::Altered(why)
                    | Parse::Lost(why),
                ),
                _,
            ) => Some(why.clone()),
            (_, Some(Split::Leaked(why) | Split::Dropped(why))) => Some(why.clone()),
            _ => None,
        };
        if let Some(why) = failed {
            return Outcome::Failed(why);
        }
        let parsed = matches!(call, Some(Parse::Parsed(_)))
            || matches!(split, Some(Split::Split | Split::CutInside));
        if parsed {
            Outcome::Parsed
        } else {
            Outcome::Nothing
        }
    }
}

/// What one sampled reply showed.
enum Outcome {
    Failed(String),
    Parsed,
    /// The model wrote neither a call nor reasoning: nothing for a parser to do.
    Nothing,
}

/// The suite's sampling settings: `[generation]`, else generation_config.json, else
/// temperature 1.0 (what an OpenAI client gets when it sets nothing).
struct Sampling {
    temperature: f64,
    top_p: Option<f64>,
    top_k: Option<i64>,
}

impl Sampling {
    fn of(online: &Online) -> Sampling {
        let suite = &online.ctx.suite.file.generation;
        let config = online.ctx.model.generation_config.as_ref();
        Sampling {
            temperature: suite
                .temperature
                .or_else(|| config.and_then(|c| c.temperature))
                .filter(|t| *t > 0.0)
                .unwrap_or(1.0),
            top_p: suite.top_p.or_else(|| config.and_then(|c| c.top_p)),
            top_k: suite.top_k.or_else(|| config.and_then(|c| c.top_k)),
        }
    }

    fn shown(&self) -> String {
        let mut s = format!("temperature {}", self.temperature);
        if let Some(p) = self.top_p {
            s.push_str(&format!(", top_p {p}"));
        }
        if let Some(k) = self.top_k {
            s.push_str(&format!(", top_k {k}"));
        }
        s
    }
}

/// Run k's seed: a different one per run, fixed across gates.
fn seed(online: &Online, k: usize) -> u64 {
    online.settings.seed + 1000 + k as u64
}

/// The probe `runs` times at these settings, a few at a time.
async fn send(
    online: &Online<'_>,
    probe: &Probe,
    runs: usize,
    sampling: &Sampling,
) -> Vec<Result<Record, CallError>> {
    let requests = (0..runs).map(|k| {
        let mut req = online.request_text(probe, seed(online, k), false);
        req.temperature = Some(sampling.temperature);
        req.top_p = sampling.top_p;
        if let Some(top_k) = sampling.top_k {
            req.extra.insert("top_k".into(), json!(top_k));
        }
        req
    });
    stream::iter(requests)
        .map(|req| async move { online.http.chat(&req).await })
        .buffered(IN_FLIGHT)
        .collect()
        .await
}

/// The sampled replies added up.
#[derive(Default)]
struct Tally {
    /// Replies a parser had work in.
    trials: usize,
    failures: Vec<String>,
    /// Requests that got no reply to judge.
    unsent: Vec<String>,
}

impl Tally {
    fn add(&mut self, at: String, outcome: Outcome) {
        match outcome {
            Outcome::Failed(why) => {
                self.trials += 1;
                self.failures.push(format!("{at}: {why}"));
            }
            Outcome::Parsed => self.trials += 1,
            Outcome::Nothing => {}
        }
    }

    fn finding(&self, allowance: f64, sampling: &Sampling, broken: Severity) -> Finding {
        let (n, k) = (self.trials, self.failures.len());
        if n == 0 {
            let mut f = Finding::new(
                checks::SERVER_SAMPLED_PARSE,
                Severity::Warning,
                "no sampled reply held a call or reasoning for a parser to read: the parsers under sampling are untested",
            )
            .with("sampling", sampling.shown());
            if !self.unsent.is_empty() {
                f = f.with("not answered", self.unsent.join("; "));
            }
            return f;
        }
        let interval = Interval::wilson(k, n);
        let rate = format!(
            "{k} of {n} parses failed ({:.1}%), 95% interval {interval}",
            100.0 * k as f64 / n as f64
        );
        let mut f = match interval.against(allowance) {
            Decision::Above => Finding::new(
                checks::SERVER_SAMPLED_PARSE,
                broken,
                format!("the server's parsers fail on sampled replies more often than the suite allows: {rate}, above {allowance}"),
            ),
            Decision::Within => Finding::pass(
                checks::SERVER_SAMPLED_PARSE,
                format!("{rate}: within the allowance of {allowance}"),
            ),
            Decision::Straddles => {
                let mut f = Finding::new(
                    checks::SERVER_SAMPLED_PARSE,
                    Severity::Warning,
                    format!("INCONCLUSIVE: {rate} straddles the allowance of {allowance}; not a pass"),
                );
                f = f.with(
                    "to decide",
                    match runs_to_decide(k, n, allowance) {
                        Some(m) => format!("about {m} runs at this rate ([server] sampled_runs)"),
                        None => "no number of runs: the observed rate is the allowance".into(),
                    },
                );
                f
            }
        };
        f = f.with("sampling", sampling.shown());
        if let Some(first) = self.failures.first() {
            f = f.with("first failure", first.clone());
        }
        if !self.unsent.is_empty() {
            f = f.with("not answered", self.unsent.join("; "));
        }
        f
    }
}

/// A failure rate's 95% interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Interval {
    pub low: f64,
    pub high: f64,
}

/// Where an interval lies against an allowance.
#[derive(Debug, PartialEq, Eq)]
pub enum Decision {
    Above,
    Within,
    Straddles,
}

impl Interval {
    /// The Wilson score interval of `k` failures in `n` trials: unlike the normal
    /// approximation it stays inside [0, 1] and says something at k = 0, where a parser
    /// that never failed in n runs still has a rate up to about 3.84/n.
    pub fn wilson(k: usize, n: usize) -> Interval {
        Interval::at_rate(k as f64 / n.max(1) as f64, n)
    }

    fn at_rate(p: f64, n: usize) -> Interval {
        let n = n.max(1) as f64;
        let z2 = Z * Z;
        let denom = 1.0 + z2 / n;
        let center = (p + z2 / (2.0 * n)) / denom;
        let half = Z * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt() / denom;
        Interval {
            low: (center - half).max(0.0),
            high: (center + half).min(1.0),
        }
    }

    pub fn against(&self, allowance: f64) -> Decision {
        if self.low > allowance {
            Decision::Above
        } else if self.high <= allowance {
            Decision::Within
        } else {
            Decision::Straddles
        }
    }
}

impl std::fmt::Display for Interval {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "[{:.3}, {:.3}]", self.low, self.high)
    }
}

/// Runs that would decide at the observed rate: the smallest count whose interval at that rate
/// no longer straddles the allowance (None: the rate is the allowance, or past 100,000 runs).
pub fn runs_to_decide(k: usize, n: usize, allowance: f64) -> Option<usize> {
    let p = k as f64 / n.max(1) as f64;
    let decides = |m: usize| Interval::at_rate(p, m).against(allowance) != Decision::Straddles;
    let mut high = n.max(1);
    while !decides(high) {
        high = high.checked_mul(2)?;
        if high > 100_000 {
            return None;
        }
    }
    let mut low = n.max(1);
    while low < high {
        let mid = (low + high) / 2;
        if decides(mid) {
            high = mid;
        } else {
            low = mid + 1;
        }
    }
    Some(high)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn twenty_clean_runs_are_within_a_20_percent_allowance_and_not_a_5_percent_one() {
        let i = Interval::wilson(0, 20);
        assert_eq!(i.low, 0.0);
        assert!((i.high - 0.161).abs() < 0.001, "{i}");
        assert_eq!(i.against(0.2), Decision::Within);
        assert_eq!(i.against(0.05), Decision::Straddles);
        // 0 of n is within 5% from n = 73 on: 3.84 / (n + 3.84) <= 0.05.
        assert_eq!(runs_to_decide(0, 20, 0.05), Some(73));
    }

    #[test]
    fn half_the_runs_failing_is_above_the_allowance() {
        let i = Interval::wilson(10, 20);
        assert!(i.low > 0.2, "{i}");
        assert_eq!(i.against(0.2), Decision::Above);
    }

    #[test]
    fn a_rate_of_4_percent_against_1_percent_is_decided_at_43_runs() {
        // llama.cpp#27720's rate: one failure in 25 runs straddles 1%. At a 4% rate the
        // interval's lower bound is 0.00997 at 42 runs and 0.0101 at 43 (worked by hand).
        assert_eq!(Interval::wilson(1, 25).against(0.01), Decision::Straddles);
        assert_eq!(runs_to_decide(1, 25, 0.01), Some(43));
        assert_eq!(runs_to_decide(1, 5, 0.2), None, "the rate is the allowance");
    }
}
