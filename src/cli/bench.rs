//! `chatgate bench`: latency on its own. Smoke (closed loop, the gate's latency stage with its
//! baseline) or load (open loop: constant, Poisson or gamma arrivals on a seeded schedule that
//! is saved with the result).
use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use serde_json::json;

use super::Format;
use crate::endpoint::spec::{self, Target};
use crate::error::{Error, Result};
use crate::gate::merge::{self, BenchPart, BENCH_PART_FORMAT};
use crate::gate::shard::Shard;
use crate::gate::{latency, progress::Progress};
use crate::latency::client::ClientHealth;
use crate::latency::{Arrival, RunSummary, Schedule, PERCENTILE_METHOD};
use crate::replay::prompts;
use crate::report;
use crate::suite::Suite;
use crate::verdict::LatencyRow;

#[derive(Clone, Copy, Debug, Default, ValueEnum, PartialEq, Eq)]
pub enum Mode {
    /// Closed loop at the suite's [latency] concurrency, compared with the stored baseline.
    #[default]
    Smoke,
    /// Open loop: requests start on a seeded arrival schedule, whether or not earlier ones ended.
    Load,
    /// The highest open-loop rate at which [latency] min_slo_attainment (default 0.9) of the
    /// requests meet every [latency] slo: a seeded search, reported as an interval, compared
    /// with --baseline (PASS, REGRESSION or INCONCLUSIVE).
    Capacity,
}

#[derive(Clone, Copy, Debug, Default, ValueEnum, PartialEq, Eq)]
pub enum ArrivalKind {
    /// Evenly spaced: 1/rate apart.
    Constant,
    /// Exponential gaps (a Poisson process).
    #[default]
    Poisson,
    /// Gamma gaps with --shape k (k < 1 is burstier than Poisson, k = 1 is Poisson).
    Gamma,
}

#[derive(Args)]
pub struct BenchArgs {
    /// The suite manifest: its [replay] prompts are the requests, its [latency] the settings.
    pub suite: PathBuf,
    /// `candle:DIR` or a server's base URL (default: the suite's [target]).
    #[arg(long, value_name = "URL|candle:DIR")]
    pub target: Option<String>,
    #[arg(long, value_enum, default_value_t)]
    pub mode: Mode,
    /// load: requests per second (λ); capacity: the first rate tried.
    #[arg(long, default_value_t = 10.0)]
    pub rate: f64,
    /// load: how many measured requests; capacity: per step.
    #[arg(long, default_value_t = 100)]
    pub requests: usize,
    /// load: inter-arrival distribution.
    #[arg(long, value_enum, default_value_t)]
    pub arrival: ArrivalKind,
    /// load: the gamma shape k.
    #[arg(long, default_value_t = 1.0)]
    pub shape: f64,
    /// load: the schedule's seed (the same seed gives the same schedule).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// load: unmeasured requests first.
    #[arg(long, default_value_t = 2)]
    pub warmup: usize,
    /// load: cap on requests in flight (0: none). A capped request's lateness is measured.
    #[arg(long, default_value_t = 0)]
    pub max_in_flight: usize,
    /// Save the result (and the load schedule) as JSON here.
    #[arg(long, value_name = "FILE")]
    pub save: Option<PathBuf>,
    /// load: run shard K of N of the schedule (request i is shard i mod N + 1's, sent at the
    /// offset the whole schedule gives it) and write its raw samples to --part; start every
    /// shard at once, then `chatgate merge PART...` gives the whole run's figures.
    #[arg(long, value_name = "K/N", requires = "part")]
    pub shard: Option<Shard>,
    /// load: where --shard writes this shard's part (JSON, atomically).
    #[arg(long, value_name = "FILE", requires = "shard")]
    pub part: Option<PathBuf>,
    /// load: start the measured schedule at this wall-clock time (RFC 3339, e.g.
    /// 2026-11-28T07:00:00Z, or Unix seconds), after the warm-up: give every --shard the same
    /// time and the generators start together. The part records when it really started;
    /// `chatgate merge` flags a part that started more than 20 ms off.
    #[arg(long, value_name = "TIME", value_parser = parse_start_at)]
    pub start_at: Option<std::time::SystemTime>,
    /// smoke: record this run as the baseline (the explicit accept); capacity: allow --save to
    /// replace the file --baseline reads.
    #[arg(long)]
    pub update: bool,
    #[command(flatten)]
    pub capacity: super::capacity::CapacityArgs,
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
    #[command(flatten)]
    pub progress: super::ProgressFlag,
    #[command(flatten)]
    pub history: super::history::HistoryFlags,
}

pub fn run(a: BenchArgs) -> Result<i32> {
    super::runtime()?.block_on(bench(a))
}

/// Flags that size the work or the schedule: an absurd value is bad input, not an allocation
/// abort or a run that never ends.
fn validate(a: &BenchArgs) -> Result<()> {
    let bad = |msg: String| Err(Error::input(msg).hint("see chatgate bench --help"));
    if !(1..=10_000_000).contains(&a.requests) {
        return bad(format!(
            "--requests must be between 1 and 10000000, got {}",
            a.requests
        ));
    }
    if !(a.rate.is_finite() && (0.01..=1_000_000.0).contains(&a.rate)) {
        return bad(format!(
            "--rate must be between 0.01 and 1000000 requests per second, got {}",
            a.rate
        ));
    }
    if !(a.shape.is_finite() && a.shape > 0.0 && a.shape <= 1_000.0) {
        return bad(format!(
            "--shape must be above 0 and at most 1000, got {}",
            a.shape
        ));
    }
    if a.warmup > 100_000 {
        return bad(format!("--warmup must be at most 100000, got {}", a.warmup));
    }
    if a.start_at.is_some() && a.mode != Mode::Load {
        return bad("--start-at starts the open-loop schedule of --mode load".into());
    }
    if let Some(t) = a.start_at {
        let ahead = t
            .duration_since(std::time::SystemTime::now())
            .unwrap_or_default();
        if ahead > std::time::Duration::from_secs(86_400) {
            return bad(format!(
                "--start-at is {:.0} hours ahead; at most 24 hours ahead is accepted (a typo would otherwise wait for days)",
                ahead.as_secs_f64() / 3600.0
            ));
        }
    }
    if a.mode == Mode::Capacity {
        super::capacity::validate(a)?;
    } else if a.capacity.given() {
        return bad("--max-rate, --resolution, --repeats, --budget, --baseline and --html belong to --mode capacity".into());
    }
    if a.shard.is_some() && a.mode != Mode::Load {
        return bad("--shard splits the open-loop schedule of --mode load; a smoke run is sharded with `chatgate gate --shard`".into());
    }
    if a.shard.is_some() && a.history.history.is_some() {
        return bad("--history records a whole run; a shard's share is recorded by `chatgate merge PART... --history DIR`".into());
    }
    if a.shard.is_some() && a.update {
        return bad(
            "--update records a baseline from one whole run; it cannot be combined with --shard"
                .into(),
        );
    }
    Ok(())
}

async fn bench(a: BenchArgs) -> Result<i32> {
    validate(&a)?;
    let suite = Suite::load(&a.suite)?;
    let (Some(path), Some(replay)) = (&suite.replay_prompts, &suite.file.replay) else {
        return Err(Error::in_file(
            &suite.path,
            "chatgate bench sends the suite's [replay] prompts, and the suite has none",
        )
        .hint("add [replay] prompts = \"prompts.jsonl\""));
    };
    let prompts = prompts::selected(prompts::load(path, replay)?, replay);
    let spec = spec::resolve(a.target.as_deref(), &suite)?;
    let target = {
        let (spec, suite) = (spec.clone(), suite.clone());
        tokio::task::spawn_blocking(move || Target::open(&spec, &suite))
            .await
            .map_err(|e| Error::input(format!("loading the target failed: {e}")))??
    };
    let section = suite.file.latency.clone().unwrap_or_default();
    match a.mode {
        Mode::Capacity => {
            let arrival = arrival(&a);
            super::capacity::run(&a, &suite, &spec, &target, &prompts, &section, arrival).await
        }
        Mode::Smoke => {
            let progress = Progress::new(a.progress.wanted(a.format == Format::Text));
            let (m, _) = latency::run(
                &suite, &spec, &target, &prompts, &section, a.update, None, &progress,
            )
            .await?;
            progress.finish();
            let failed = m
                .findings
                .iter()
                .any(|f| f.severity == crate::verdict::Severity::Error);
            let doc = json!({"mode": "smoke", "target": spec.display(), "findings": m.findings, "totals": m.totals, "latency": m.rows, "percentiles": PERCENTILE_METHOD, "definitions": crate::latency::definitions()});
            emit(
                a.format,
                a.save.as_deref(),
                &doc,
                &m.rows,
                &format!(
                    "{} requests, {} errors, {:.2} s, {:.1} output tok/s",
                    m.totals.requests,
                    m.totals.errors,
                    m.totals.duration_s,
                    m.totals.output_throughput
                ),
            )?;
            for f in m
                .findings
                .iter()
                .filter(|f| f.severity >= crate::verdict::Severity::Warning)
            {
                eprintln!(
                    "{} {}: {}",
                    f.check.id,
                    format!("{:?}", f.severity).to_lowercase(),
                    crate::secrets::redact(&f.message)
                );
            }
            let code = if let Some(why) = &m.unreachable {
                eprintln!("server.reachable error: {}", crate::secrets::redact(why));
                3
            } else {
                i32::from(failed)
            };
            record(&a, &spec.display(), code, &m.findings, &m.rows)?;
            Ok(code)
        }
        Mode::Load => {
            let arrival = arrival(&a);
            let schedule = Schedule::generate(a.requests, a.rate, arrival, a.seed)?;
            let started = std::time::Instant::now();
            let run = match a.shard {
                None => {
                    latency::load(
                        &suite,
                        &target,
                        &prompts,
                        &schedule,
                        None,
                        a.warmup,
                        a.max_in_flight,
                        section.slo.as_ref(),
                        a.start_at,
                    )
                    .await
                }
                Some(k) => {
                    let (slice, indices) = shard_slice(&schedule, k);
                    latency::load(
                        &suite,
                        &target,
                        &prompts,
                        &slice,
                        Some(&indices),
                        a.warmup,
                        a.max_in_flight,
                        section.slo.as_ref(),
                        a.start_at,
                    )
                    .await
                }
            };
            let in_process = matches!(spec, spec::TargetSpec::Candle(_));
            if let (Some(k), Some(path)) = (a.shard, &a.part) {
                BenchPart {
                    format: BENCH_PART_FORMAT.into(),
                    chatgate: env!("CARGO_PKG_VERSION").into(),
                    shard: k,
                    suite: suite.name.clone(),
                    suite_file: suite.path.clone(),
                    suite_sha256: merge::suite_sha256(&suite)?,
                    target: spec.display(),
                    schedule: schedule.clone(),
                    warmup: a.warmup,
                    max_in_flight: a.max_in_flight,
                    unreliable: run.client.unreliable(in_process),
                    client: run.client.clone(),
                    samples: run.samples.clone(),
                    duration_s: started.elapsed().as_secs_f64(),
                    started: Some(run.started),
                }
                .write(path)?;
            }
            let latency::LoadRun {
                summary,
                rows,
                unreachable,
                client,
                ..
            } = run;
            let behind = client.unreliable(in_process);
            let kept = rows.clone();
            let code = report_load(
                LoadReport {
                    target: spec.display(),
                    schedule: &schedule,
                    summary,
                    rows,
                    client,
                    behind,
                    starts: Vec::new(),
                    skew_warning: None,
                    unreachable,
                    min_slo_attainment: section.min_slo_attainment,
                },
                a.format,
                a.save.as_deref(),
            )?;
            record(&a, &spec.display(), code, &[], &kept)?;
            Ok(code)
        }
    }
}

/// `--start-at`: RFC 3339 (`2026-11-28T07:00:00Z`, `…+01:00`, fractional seconds) or Unix
/// seconds (`1795849200`, `1795849200.5`).
fn parse_start_at(s: &str) -> std::result::Result<std::time::SystemTime, String> {
    let unix = match s.trim().parse::<f64>() {
        Ok(secs) => secs,
        Err(_) => {
            chrono::DateTime::parse_from_rfc3339(s.trim())
                .map_err(|e| {
                    format!("not an RFC 3339 time (2026-11-28T07:00:00Z) or Unix seconds: {e}")
                })?
                .timestamp_micros() as f64
                / 1e6
        }
    };
    if !(unix.is_finite() && unix > 0.0) {
        return Err(format!("not a time after 1970: {s}"));
    }
    std::time::Duration::try_from_secs_f64(unix)
        .map(|d| std::time::UNIX_EPOCH + d)
        .map_err(|e| format!("{s}: {e}"))
}

fn arrival(a: &BenchArgs) -> Arrival {
    match a.arrival {
        ArrivalKind::Constant => Arrival::Constant,
        ArrivalKind::Poisson => Arrival::Poisson,
        ArrivalKind::Gamma => Arrival::Gamma { shape: a.shape },
    }
}

/// The run's line in the history, when --history asks for one (after the output).
pub(super) fn record(
    a: &BenchArgs,
    target: &str,
    code: i32,
    findings: &[crate::verdict::Finding],
    rows: &[LatencyRow],
) -> Result<()> {
    super::history::append(
        &a.history,
        super::history::Ran {
            command: "bench",
            suite_file: &a.suite,
            target,
            exit_code: code,
            findings,
            latency: rows,
        },
    )
}

/// An open-loop run as it is reported and judged: one run's, or its shards' merged.
struct LoadReport<'a> {
    target: String,
    schedule: &'a Schedule,
    summary: RunSummary,
    rows: Vec<LatencyRow>,
    client: ClientHealth,
    /// Why the client could not be trusted to time the server, if it could not.
    behind: Option<String>,
    /// A merge's parts' starts, and which started off the others.
    starts: Vec<merge::PartStart>,
    skew_warning: Option<String>,
    unreachable: Option<String>,
    min_slo_attainment: Option<f64>,
}

/// Print (and save) a load run's figures; its exit code: 3 unreachable, 1 when requests failed
/// or SLO attainment is below the suite's minimum, else 0.
fn report_load(r: LoadReport, format: Format, save: Option<&Path>) -> Result<i32> {
    let LoadReport {
        target,
        schedule,
        summary,
        rows,
        client,
        behind,
        starts,
        skew_warning,
        unreachable,
        min_slo_attainment,
    } = r;
    let doc = json!({"mode": "load", "target": target, "schedule": schedule, "summary": summary, "client": client, "unreliable": behind, "starts": starts, "start_skew": skew_warning, "latency": rows, "percentiles": PERCENTILE_METHOD, "definitions": crate::latency::definitions()});
    let achieved = if summary.duration_s > 0.0 {
        summary.requests as f64 / summary.duration_s
    } else {
        0.0
    };
    // A seeded random schedule's own mean rate differs from λ by chance: print both, so the
    // generator is judged against what it was asked to send.
    let span = schedule.span().as_secs_f64();
    let scheduled = if span > 0.0 {
        (schedule.len().saturating_sub(1)) as f64 / span
    } else {
        schedule.rate
    };
    let mut line = format!(
        "{} requests at {:.1}/s requested ({:.1}/s in this seed's schedule), {:.1}/s achieved; {} errors; {:.1} output tok/s",
        summary.requests, schedule.rate, scheduled, achieved, summary.errors, summary.throughput
    );
    if let Some(d) = &summary.drift {
        line.push_str(&format!(
            "; send − scheduled p50 {:.2} ms, p99 {:.2} ms",
            d.p50, d.p99
        ));
    }
    if let Some(w) = &summary.drift_warning {
        line.push_str(&format!("\nwarning: {w}"));
    }
    if let Some(w) = &behind {
        line.push_str(&format!(
            "\nwarning: the latency figures are unreliable: {w}"
        ));
    }
    if !starts.is_empty() {
        let each: Vec<String> = starts
            .iter()
            .map(|s| format!("{} +{:.1} ms{}", s.shard, s.after_first_ms, s.offset_note()))
            .collect();
        line.push_str(&format!("\nstarts: {}", each.join(", ")));
    }
    if let Some(w) = &skew_warning {
        line.push_str(&format!("\nwarning: generators started apart: {w}"));
    }
    emit(format, save, &doc, &rows, &line)?;
    if let Some(why) = &unreachable {
        eprintln!("server.reachable error: {}", crate::secrets::redact(why));
        return Ok(3);
    }
    let below_slo = matches!((min_slo_attainment, summary.slo_attainment), (Some(min), Some(have)) if have + 1e-9 < min);
    Ok(i32::from(summary.errors > 0 || below_slo))
}

/// `chatgate merge` of the parts `bench --mode load --shard K/N --part FILE` wrote: the figures
/// of the whole schedule, from every shard's raw samples.
pub fn merge(
    parts: &[PathBuf],
    suite: Option<&Path>,
    r: &super::gate::ReportArgs,
    history: &super::history::HistoryFlags,
) -> Result<i32> {
    // Bench parts merge into bench's own figures (text or JSON): the gate's report formats
    // have nothing to say about them.
    let wanted = r.wanted()?;
    let format = match wanted.as_slice() {
        [(crate::report::Format::Text, None)] => Format::Text,
        [(crate::report::Format::Json, None)] => Format::Json,
        _ => {
            return Err(Error::input(
                "bench parts merge into bench's own output: --format text or json, no other report",
            )
            .hint("merge bench parts with --format text or json, and no --report/--junit/--markdown/--html/--sarif"))
        }
    };
    let merge::MergedBench {
        part: merged,
        starts,
        skew_warning,
    } = merge::merge_bench(parts)?;
    let suite_path = suite
        .map(Path::to_path_buf)
        .unwrap_or_else(|| merged.suite_file.clone());
    let suite = Suite::load(&suite_path)?;
    if merge::suite_sha256(&suite)? != merged.suite_sha256 {
        return Err(Error::in_file(
            &suite_path,
            "is not the suite file the shards ran (its bytes changed since)",
        )
        .hint("merge with the suite file of the sharded run (--suite FILE)"));
    }
    let section = suite.file.latency.clone().unwrap_or_default();
    let (summary, rows) = latency::load_figures(&merged.samples, section.slo.as_ref());
    let kept = rows.clone();
    let code = report_load(
        LoadReport {
            target: merged.target.clone(),
            schedule: &merged.schedule,
            summary,
            rows,
            client: merged.client.clone(),
            behind: merged.unreliable.clone(),
            starts,
            skew_warning,
            unreachable: crate::chain::latency::unreachable_reason(&merged.samples),
            min_slo_attainment: section.min_slo_attainment,
        },
        format,
        None,
    )?;
    super::history::append(
        history,
        super::history::Ran {
            command: "bench",
            suite_file: &suite_path,
            target: &merged.target,
            exit_code: code,
            findings: &[],
            latency: &kept,
        },
    )?;
    Ok(code)
}

/// Shard `k`'s requests of the whole schedule: their offsets (as the whole schedule has them)
/// and their indices in it.
fn shard_slice(schedule: &Schedule, k: Shard) -> (Schedule, Vec<usize>) {
    let indices: Vec<usize> = (0..schedule.len()).filter(|&i| k.owns(i)).collect();
    let slice = Schedule {
        offsets: indices.iter().map(|&i| schedule.offsets[i]).collect(),
        ..schedule.clone()
    };
    (slice, indices)
}

pub(super) fn emit(
    format: Format,
    save: Option<&Path>,
    doc: &serde_json::Value,
    rows: &[LatencyRow],
    line: &str,
) -> Result<()> {
    let text = serde_json::to_string_pretty(doc).unwrap_or_default();
    if let Some(p) = save {
        super::output::write(p, &text)?;
    }
    match format {
        Format::Json => println!("{}", crate::secrets::redact(&text)),
        Format::Text => {
            println!("{}", crate::secrets::redact(&report::latency_table(rows)));
            println!("{}", crate::secrets::redact(line));
        }
    }
    Ok(())
}
