//! The latency stage: the replay prompts, streamed, in a closed loop (concurrency c, R repeats,
//! warm-up first), measured as docs/design/METRICS.md defines it and compared with the baseline stored for
//! this kind of target under `snapshots/<suite>/latency/`. `--update` records a new baseline.
use std::time::Instant;

use crate::endpoint::openai::CallError;
use crate::endpoint::spec::{Target, TargetSpec};
use crate::error::Result;
use crate::exchange::Record;
use crate::latency::client::{ClientHealth, Watch};
use crate::latency::{
    closed_loop, latency_row, Baseline, Environment, Metric, RunSummary, Sample, Settings,
    WallClock,
};
use crate::replay::Prompt;
use crate::suite::{LatencySection, Suite};
use crate::verdict::LatencyRow;

use crate::chain::latency::{
    judge, metrics_of, reached_nothing, samples, scenarios, unreachable_reason, LatencyData,
    Measured,
};

use super::progress::Progress;
use super::shard::Shard;

/// The metrics an open-loop run reports: also TTFT from the scheduled send and the queueing
/// before the send (coordinated omission).
const LOAD_ROWS: [Metric; 9] = [
    Metric::Ttft,
    Metric::TtftSched,
    Metric::Ttfc,
    Metric::Tpot,
    Metric::Itl,
    Metric::Icl,
    Metric::E2el,
    Metric::Ntpot,
    Metric::Queue,
];

/// The requests of a latency run that `shard` sends (all of them without one).
pub fn owned(planned: usize, shard: Option<Shard>) -> Vec<usize> {
    (0..planned)
        .filter(|&i| shard.is_none_or(|s| s.owns(i)))
        .collect()
}

/// Measure, then judge; `--update` records the baseline from this run.
#[allow(clippy::too_many_arguments)]
pub async fn run(
    suite: &Suite,
    spec: &TargetSpec,
    target: &Target,
    prompts: &[Prompt],
    section: &LatencySection,
    update: bool,
    shard: Option<Shard>,
    progress: &Progress,
) -> Result<(Measured, LatencyData)> {
    let data = measure(suite, spec, target, prompts, section, shard, progress).await?;
    let measured = judge(&data, section, update);
    if update {
        let settings = Settings {
            repeats: section.repeats.unwrap_or(3).max(1),
            concurrency: section.concurrency.unwrap_or(1),
            warmup: section.warmup.unwrap_or(1),
            max_tokens: data.max_tokens,
        };
        let env = data.environment.clone();
        Baseline::new(env, settings, scenarios(&data)).write(&data.baseline_path)?;
    }
    Ok((measured, data))
}

/// The closed loop over this shard's requests (warm-up first), as samples.
pub async fn measure(
    suite: &Suite,
    spec: &TargetSpec,
    target: &Target,
    prompts: &[Prompt],
    section: &LatencySection,
    shard: Option<Shard>,
    progress: &Progress,
) -> Result<LatencyData> {
    let repeats = section.repeats.unwrap_or(3).max(1);
    let planned = prompts.len() * repeats;
    let mine = owned(planned, shard);
    progress.stage("latency", mine.len() as u64);
    let clock = WallClock::now();
    let watch = Watch::start();
    // More shards than requests leaves some with none (and nothing to warm up with).
    let outcomes = if mine.is_empty() {
        Vec::new()
    } else {
        closed_loop(
            mine.len(),
            section.concurrency.unwrap_or(1),
            section.warmup.unwrap_or(1),
            |j, _t: Instant| timed_request(target, prompts, mine[j]),
        )
        .await
    };
    let client = watch.finish().await;
    for _ in &outcomes {
        progress.step("");
    }
    let count = n_out_counter(suite);
    let samples = outcomes
        .iter()
        .map(|o| Sample::measured(o, mine[o.index], &count, reached_nothing, &clock))
        .collect();
    let label = section
        .baseline
        .clone()
        .unwrap_or_else(|| spec.label().to_string());
    let baseline_path = Baseline::path(&suite.snapshot_dir, &label);
    Ok(LatencyData {
        samples,
        prompts: prompts.iter().map(|p| p.id.clone()).collect(),
        planned,
        label,
        baseline: Baseline::read(&baseline_path)?,
        baseline_path,
        environment: Environment::current(
            spec.label(),
            Some(crate::endpoint::spec::model_name(suite)),
        ),
        in_process: matches!(spec, TargetSpec::Candle(_)),
        max_tokens: suite.file.replay.as_ref().and_then(|r| r.max_tokens),
        client: Some(client),
    })
}

/// Request i of a latency run: the prompts in turn, streamed (so every event is timed), without
/// logprobs (they are not what is measured and they make servers slower).
fn timed_request(
    target: &Target,
    prompts: &[Prompt],
    i: usize,
) -> impl std::future::Future<Output = Result<Record, CallError>> + Send + 'static {
    let target = target.clone();
    let mut req = prompts[i % prompts.len()].request();
    req.stream = true;
    req.top_logprobs = None;
    async move { target.chat(&req).await.map(compact) }
}

/// What a latency request keeps of its reply, as soon as it ends: what its metrics read (the
/// timing and its output events, usage, the prompt's ids for N_in, and the generated text only
/// when no usage gives N_out and the tokenizer must count it). Every chunk's JSON, logprobs and
/// token ids are dropped, so a long load run holds the events of each request, not its stream.
fn compact(mut rec: Record) -> Record {
    rec.stream = None;
    rec.logprobs = None;
    rec.token_ids = None;
    if rec.usage.and_then(|u| u.completion_tokens).is_some() {
        rec.text = String::new();
        rec.reasoning = String::new();
        rec.tool_calls.clear();
    }
    rec
}

/// An open-loop load run (`chatgate bench --mode load`): request i goes at its scheduled
/// instant whatever the earlier ones are doing, cycling through the prompts, streamed.
/// What an open-loop run measured: its summary, table rows, why the target was unreachable (if
/// it was), the client's own health, and the raw samples (for a sharded run's part).
pub struct LoadRun {
    pub summary: RunSummary,
    pub rows: Vec<LatencyRow>,
    pub unreachable: Option<String>,
    pub client: ClientHealth,
    pub samples: Vec<Sample>,
    /// When the measured schedule began (and when it was asked to).
    pub started: crate::latency::Started,
}

/// Run `schedule` open loop. `indices` maps each of its requests to its place in the whole
/// run (a shard's slice of a larger schedule), which picks the prompt and names the sample;
/// None: the schedule is the whole run.
#[allow(clippy::too_many_arguments)]
pub async fn load(
    suite: &Suite,
    target: &Target,
    prompts: &[Prompt],
    schedule: &crate::latency::Schedule,
    indices: Option<&[usize]>,
    warmup: usize,
    max_in_flight: usize,
    slo: Option<&crate::suite::MetricMs>,
    start_at: Option<std::time::SystemTime>,
) -> LoadRun {
    let global = |i: usize| indices.map_or(i, |ix| ix[i]);
    let clock = WallClock::now();
    let watch = Watch::start();
    let (outcomes, started) = crate::latency::open_loop_at(
        schedule,
        warmup,
        max_in_flight,
        start_at,
        |i, _t: Instant| timed_request(target, prompts, global(i)),
    )
    .await;
    let client = watch.finish().await;
    let count = n_out_counter(suite);
    let samples: Vec<Sample> = outcomes
        .iter()
        .map(|o| Sample::measured(o, global(o.index), &count, reached_nothing, &clock))
        .collect();
    let (summary, rows) = load_figures(&samples, slo);
    LoadRun {
        summary,
        rows,
        unreachable: unreachable_reason(&samples),
        client,
        samples,
        started,
    }
}

/// An open-loop run's summary and table rows, from its raw samples alone: the same figures for
/// one run and for the merged samples of its shards.
pub fn load_figures(
    samples: &[Sample],
    slo: Option<&crate::suite::MetricMs>,
) -> (RunSummary, Vec<LatencyRow>) {
    let summary = RunSummary::from_samples(samples, slo);
    let measured = metrics_of(samples);
    let rows = LOAD_ROWS
        .into_iter()
        .filter_map(|m| latency_row(m, &self::samples(&measured, m), None, None))
        .collect();
    (summary, rows)
}

/// The pinned tokenizer's count of a whole reply: N_out when a server reports no usage
/// (docs/design/METRICS.md: estimated, never counted per chunk).
fn n_out_counter(suite: &Suite) -> impl Fn(&str) -> Option<usize> {
    let tokenizer = crate::artifacts::ModelDir::open(&suite.model_dir)
        .ok()
        .and_then(|d| d.tokenizer)
        .map(|t| t.tokenizer);
    move |text: &str| {
        tokenizer
            .as_ref()
            .and_then(|t| t.encode(text, false).ok())
            .map(|e| e.len())
    }
}
