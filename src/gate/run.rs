//! Running the gate: its stages in order — the context, the chains, the replay, the latency — and the report they fold into.
use super::*;
#[allow(unused_imports)]
use crate::verdict::checks::{self, Check};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use serde_json::Value;

use crate::chain::run::context::Context;
use crate::chain::run::fail_fast::FailFast;
use crate::chain::run::probes::{Online, Probe, ProbeSettings, Reference};
use crate::chain::run::recording;
use crate::endpoint::candle::memory;
use crate::endpoint::local::CandleTarget;
use crate::endpoint::reference::{ReferenceServer, ServerSpec};
use crate::endpoint::spec::{self, Target, TargetSpec};
use crate::error::{Error, ErrorKind, Result};
use crate::replay::prompts::{self, Prompt};
use crate::suite::Suite;
use crate::verdict::GateReport;
use crate::verdict::{Finding, Findings, Severity};

/// What `chatgate gate` was asked to do.
#[derive(Debug, Clone, Default)]
pub struct GateOptions {
    pub suite: PathBuf,
    /// `--target`: overrides the suite's `[target] url`.
    pub target: Option<String>,
    /// `--update`: accept this run's replies as snapshots and its latency as the baseline.
    pub update: bool,
    /// Show a progress bar (only ever on a terminal).
    pub progress: bool,
    /// `--deadline`: the whole run's budget in seconds (overrides `[target] deadline_s`).
    pub deadline_s: Option<f64>,
    /// `--shard K/N`: run this shard's share of the work ([`shard`]).
    pub shard: Option<shard::Shard>,
    /// `--part FILE`: write what the merge needs (with `--shard`).
    pub part: Option<PathBuf>,
    /// `--stack`: overrides the suite's `[target] stack` (what the chain predicts the server
    /// feeds the model), e.g. from a CI matrix that gates one suite on several stacks.
    pub stack: Option<crate::stack::Stack>,
    /// `--fail-fast`: stop once the first broken boundary is known for certain: no request of
    /// a later boundary's checks, no replay, no latency
    /// ([`crate::chain::run::fail_fast`]).
    pub fail_fast: bool,
}

/// Checks the merge of sharded parts recomputes from every shard's results, so a part does not
/// carry them: the replay verdict and everything judged from latency samples.
pub(super) static RECOMPUTED: &[&Check] = &[
    checks::REPLAY_SNAPSHOTS,
    checks::SERVER_LATENCY,
    checks::SERVER_LATENCY_TTFT,
    checks::SERVER_LATENCY_TPOT,
    checks::SERVER_LATENCY_E2EL,
    checks::SERVER_LATENCY_ITL,
    checks::SERVER_LATENCY_BASELINE,
    checks::SERVER_LATENCY_ERRORS,
    checks::SERVER_LATENCY_CLIENT,
    checks::SERVER_SLO,
];

/// What a shard's part holds besides the report: filled in as the run goes.
#[derive(Default)]
pub(super) struct Pieces {
    determinism: BTreeMap<String, String>,
    latency: Option<crate::chain::latency::LatencyData>,
}

/// Run the gate within its deadline (`--deadline`, else `[target] deadline_s`): past it the
/// run stops and reports exit 3, whatever the target was doing. A shard writes its part.
pub async fn run_bounded(opts: &GateOptions) -> Result<GateReport> {
    let suite = Suite::load(&opts.suite)?;
    if opts.shard.is_some() && opts.update {
        return Err(Error::input("--update accepts snapshots and the latency baseline from one whole run: run it without --shard")
            .hint("shard the gate, and accept changes with an unsharded `chatgate gate SUITE --update`"));
    }
    if opts.fail_fast && opts.update {
        return Err(Error::input("--fail-fast stops at the first broken boundary, and --update accepts a whole run's replies and latency: they cannot go together")
            .hint("accept with `chatgate gate SUITE --update`; use --fail-fast on the runs that judge"));
    }
    if opts.fail_fast && opts.shard.is_some() {
        return Err(Error::input("--fail-fast stops a whole run at its first broken boundary; a shard's part must carry its whole share for `chatgate merge`")
            .hint("drop --fail-fast from sharded runs (shard 1 runs the chain, the others only replay)"));
    }
    if opts.shard.is_some() != opts.part.is_some() {
        return Err(Error::input("--shard K/N and --part FILE go together: a shard writes the part `chatgate merge` reads"));
    }
    let deadline = opts
        .deadline_s
        .or(suite.file.target.as_ref().and_then(|t| t.deadline_s));
    let mut pieces = Pieces::default();
    let report = match deadline {
        None => run_with(opts, &mut pieces).await?,
        Some(secs) => within(opts, &suite, secs, &mut pieces).await?,
    };
    if let (Some(shard), Some(path)) = (opts.shard, &opts.part) {
        write_part(&suite, shard, &report, pieces, path)?;
    }
    Ok(report)
}

pub(super) async fn within(
    opts: &GateOptions,
    suite: &Suite,
    secs: f64,
    pieces: &mut Pieces,
) -> Result<GateReport> {
    if !(secs.is_finite() && secs > 0.0 && secs <= 86_400.0) {
        return Err(Error::input(format!(
            "--deadline must be seconds above 0 and at most 86400, got {secs}"
        )));
    }
    let started = Instant::now();
    let limit = std::time::Duration::from_secs_f64(secs);
    let mut clock = progress::PhaseClock::default();
    match tokio::time::timeout(limit, stages(opts, pieces, &mut clock)).await {
        Ok(r) => r.map(|mut report| {
            report.phases = clock.take();
            report
        }),
        Err(_) => {
            // What was measured before the deadline is not a whole shard's work: dropped.
            *pieces = Pieces::default();
            let spec = spec::resolve(opts.target.as_deref(), suite)?;
            let report = empty_report(suite, &spec);
            let mut findings = Findings::default();
            findings.push(
                Finding::new(
                    checks::SERVER_REACHABLE,
                    Severity::Error,
                    format!("the run's deadline of {secs} s passed before the gate finished: the target is too slow or stalled"),
                )
                .with("hint", "raise --deadline (or [target] deadline_s), or look at the server"),
            );
            let mut report = finish(report, findings, started, 3);
            report.phases = clock.take();
            Ok(report)
        }
    }
}

/// A shard's part: its report's findings minus those the merge recomputes, its prompt results
/// and its raw latency samples.
pub(super) fn write_part(
    suite: &Suite,
    shard: shard::Shard,
    report: &GateReport,
    pieces: Pieces,
    path: &std::path::Path,
) -> Result<()> {
    let prompts = load_prompts(suite)?
        .map(|p| p.chosen.into_iter().map(|p| p.id).collect())
        .unwrap_or_default();
    merge::Part {
        format: merge::PART_FORMAT.into(),
        chatgate: env!("CARGO_PKG_VERSION").into(),
        shard,
        suite: suite.name.clone(),
        suite_file: suite.path.clone(),
        suite_sha256: merge::suite_sha256(suite)?,
        target: report.target.clone(),
        prompts,
        findings: report
            .findings
            .0
            .iter()
            .filter(|f| !RECOMPUTED.contains(&f.check))
            .cloned()
            .collect(),
        determinism: pieces.determinism,
        results: report.prompts.clone(),
        latency: pieces.latency,
        exit_code: report.exit_code.code(),
        duration_s: report.duration_s,
    }
    .write(path)
}

/// Run the whole gate (unsharded).
pub async fn run(opts: &GateOptions) -> Result<GateReport> {
    run_with(opts, &mut Pieces::default()).await
}

/// Run the gate (or a shard of it). `Err` is bad input (exit 2); an unreachable target is a
/// report with exit code 3, so the report still says how far the run got.
pub(super) async fn run_with(opts: &GateOptions, pieces: &mut Pieces) -> Result<GateReport> {
    let mut clock = progress::PhaseClock::default();
    let mut report = stages(opts, pieces, &mut clock).await?;
    report.phases = clock.take();
    Ok(report)
}

/// The gate's stages, each timed on `clock` (the report's per-phase table).
async fn stages(
    opts: &GateOptions,
    pieces: &mut Pieces,
    clock: &mut progress::PhaseClock,
) -> Result<GateReport> {
    let started = Instant::now();
    clock.start("load: suite, target, reference, context");
    let mut suite = Suite::load(&opts.suite)?;
    if let Some(stack) = opts.stack {
        suite.file.target.get_or_insert_with(Default::default).stack = Some(stack);
    }
    crate::chain::client::sse::must_survive(&suite)?;
    let spec = spec::resolve(opts.target.as_deref(), &suite)?;
    let under_test = model_under_test(&mut suite, &spec);
    let prompts = load_prompts(&suite)?;
    let (target, reference) = open_targets(&spec, &suite).await?;
    clock.watch(target.http());
    let mut report = empty_report(&suite, &spec);
    let progress = progress::Progress::new(opts.progress);
    let mut findings = Findings::default();
    // Every shard predicts what the server feeds the model (the stack, the template's date).
    let ctx = load_context(&suite, &target).await?;
    let mut dates = dates::plan(&ctx, &target);
    // The chains run once, in shard 1: they judge the whole chain, not a share of the work.
    let determinism = if opts.shard.is_none_or(|s| s.runs_chain()) {
        findings.extend(under_test);
        // The reference renders the day the server does, so their replies compare.
        if let (Some(LoadedReference::Local(r)), Target::Http(_)) = (&reference, &target) {
            r.set_template_now(dates.local_now());
        }
        let at = Where {
            target: &target,
            reference: reference.as_ref(),
            local_now: dates.local_now(),
        };
        match chains(&ctx, at, prompts.as_ref(), &progress, clock, opts.fail_fast).await {
            Ok(Chains::Ran(f, d, seen, fail_fast)) => {
                findings.extend(f);
                dates.seen(seen);
                let later = later_stages(&suite, prompts.as_ref());
                if let Some(note) = fail_fast.and_then(|ff| ff.note(&later)) {
                    // --fail-fast: the first broken boundary is known; nothing after it runs.
                    findings.push(note);
                    progress.finish();
                    crate::chain::run::policy::apply_policy(&mut findings.0, &suite.file.server);
                    let code = if findings.has_errors() { 1 } else { 0 };
                    return Ok(finish(report, findings, started, code));
                }
                d
            }
            Ok(Chains::Stopped(f, code)) => {
                findings.extend(f);
                return Ok(finish(report, findings, started, code));
            }
            Err(e) => return Err(e),
        }
    } else {
        BTreeMap::new()
    };
    pieces.determinism = determinism
        .iter()
        .map(|(id, d)| (id.clone(), d.name().to_string()))
        .collect();

    if let Some(set) = &prompts {
        clock.start("replay");
        let replayed = replay::run(
            &suite,
            &spec,
            &target,
            set,
            &determinism,
            &dates,
            opts.update,
            opts.shard,
            &progress,
        )
        .await?;
        findings.extend(replayed.findings);
        report.prompts = replayed.prompts;
        if let Some((f, code)) = breaker_finding(&target) {
            findings.push(f);
            return Ok(finish(report, findings, started, code));
        }
        if replayed.unreachable {
            return Ok(finish(report, findings, started, 3));
        }
        if let Some(section) = &suite.file.latency {
            clock.start("latency");
            let (measured, data) = latency::run(
                &suite,
                &spec,
                &target,
                &set.chosen,
                section,
                opts.update,
                opts.shard,
                &progress,
            )
            .await?;
            pieces.latency = Some(data);
            findings.extend(measured.findings);
            report.latency = measured.rows;
            report.latency_totals = Some(measured.totals);
            if let Some(why) = measured.unreachable {
                findings.push(Finding::new(checks::SERVER_REACHABLE, Severity::Error, why));
                return Ok(finish(report, findings, started, 3));
            }
            if let Some((f, code)) = breaker_finding(&target) {
                findings.push(f);
                return Ok(finish(report, findings, started, code));
            }
        }
    }
    progress.finish();
    crate::chain::run::policy::apply_policy(&mut findings.0, &suite.file.server);
    let code = if findings.has_errors() { 1 } else { 0 };
    Ok(finish(report, findings, started, code))
}

/// What a `--fail-fast` stop after the chains leaves out: the replay and the latency stage.
fn later_stages(suite: &Suite, prompts: Option<&PromptSet>) -> Vec<String> {
    let Some(set) = prompts else {
        return Vec::new();
    };
    let mut stages = vec![format!("the replay of {} prompts", set.chosen.len())];
    if suite.file.latency.is_some() {
        stages.push("the latency stage".into());
    }
    stages
}

pub(super) enum Chains {
    /// The offline and online findings, each probed prompt's determinism class, the day
    /// the server was seen rendering (a template that prints the date), and where a
    /// `--fail-fast` run stands.
    Ran(
        Vec<Finding>,
        BTreeMap<String, crate::chain::run::probes::Determinism>,
        Option<chrono::NaiveDate>,
        Option<FailFast>,
    ),
    /// The target stopped answering (exit 3) or fell far behind its own pace (exit 1): these
    /// findings end the report, with that exit code.
    Stopped(Vec<Finding>, i32),
}

/// What the chain predicts the server feeds the model: the suite's stack, else the one the
/// server's routes reveal (llama.cpp, llama-cpp-python, TGI, vLLM/SGLang), else the model
/// format's default.
pub(super) async fn load_context(suite: &Suite, target: &Target) -> Result<Context> {
    let detected = match (target, suite.file.target.as_ref().and_then(|t| t.stack)) {
        (Target::Http(h), None) => h.introspect().await.stack(),
        _ => None,
    };
    let suite = suite.clone();
    tokio::task::spawn_blocking(move || {
        let model = crate::artifacts::ModelDir::open(&suite.model_dir)?;
        Context::load_with(suite, model, detected)
    })
    .await
    .map_err(|e| Error::input(format!("loading the suite failed: {e}")))?
}

/// The offline chain, then the online chain against a server.
pub(super) async fn chains(
    ctx: &Context,
    at: Where<'_>,
    prompts: Option<&PromptSet>,
    progress: &progress::Progress,
    clock: &mut progress::PhaseClock,
    fail_fast: bool,
) -> Result<Chains> {
    clock.start("offline chain");
    let mut findings = crate::chain::run::offline::run_offline(ctx, progress.enabled())?.0;
    let fail_fast = fail_fast.then(|| FailFast::after(&findings, &ctx.suite.file.server));
    let chosen = prompts.map(|p| p.chosen.as_slice());
    clock.start("online chain");
    let target = at.target;
    match online(ctx, at, chosen, progress, fail_fast).await {
        Ok(mut r) => {
            clock.steps(std::mem::take(&mut r.steps));
            findings.extend(r.findings);
            if let Some((f, code)) = breaker_finding(target) {
                findings.push(f);
                return Ok(Chains::Stopped(findings, code));
            }
            Ok(Chains::Ran(
                findings,
                r.determinism,
                r.server_day,
                r.fail_fast,
            ))
        }
        Err(e) if e.kind == ErrorKind::Unreachable => {
            findings.push(unreachable_finding(&e));
            Ok(Chains::Stopped(findings, 3))
        }
        Err(e) => Err(e),
    }
}

/// One model under test: `--target candle:DIR` replays DIR, so the offline chain checks DIR
/// too (against the suite's lock), not `[model] dir`.
pub(super) fn model_under_test(suite: &mut Suite, spec: &TargetSpec) -> Option<Finding> {
    let TargetSpec::Candle(dir) = spec else {
        return None;
    };
    if same_path(dir, &suite.model_dir) {
        return None;
    }
    let configured = std::mem::replace(&mut suite.model_dir, dir.clone());
    Some(
        Finding::new(
            checks::CHECKPOINT_MODEL_DIR,
            Severity::Info,
            format!(
                "the offline chain checks {} (the --target), not [model] dir {}",
                dir.display(),
                configured.display()
            ),
        )
        .with(
            "hint",
            "set [model] dir to it to make this the suite's model",
        ),
    )
}

/// A report with nothing in it yet.
pub(super) fn empty_report(suite: &Suite, spec: &TargetSpec) -> GateReport {
    GateReport {
        suite: suite.name.clone(),
        suite_file: suite.path.display().to_string(),
        target: spec.display(),
        findings: Findings::default(),
        prompts: Vec::new(),
        latency: Vec::new(),
        latency_totals: None,
        definitions: crate::latency::definitions(),
        duration_s: 0.0,
        phases: Vec::new(),
        exit_code: crate::verdict::Outcome::Pass,
    }
}

pub(super) fn finish(
    mut report: GateReport,
    mut findings: Findings,
    started: Instant,
    code: i32,
) -> GateReport {
    findings.sort();
    report.findings = findings;
    report.duration_s = started.elapsed().as_secs_f64();
    report.exit_code = crate::verdict::Outcome::from_code(code);
    report
}

/// The target stopped answering mid-run (the HTTP client's circuit breaker opened), and the
/// exit code it means: 3 for a server gone (refused, timed out, turned away), 1 for one that
/// was answering and fell far behind its own pace (a latency failure: it is reachable).
pub(super) fn breaker_finding(target: &Target) -> Option<(Finding, i32)> {
    let Target::Http(h) = target else {
        return None;
    };
    let why = h.breaker_open()?;
    Some(if h.breaker_slow() {
        let f = Finding::new(
            checks::SERVER_LATENCY,
            Severity::Error,
            format!("the server fell far behind its own pace: {why}"),
        )
        .with("target", h.base_url())
        .with("fix", "the server answers, slower than it answered the first requests: look for other load on its machine, or raise `[target] read_timeout_s` for a server this slow");
        (f, 1)
    } else {
        let f = Finding::new(
            checks::SERVER_REACHABLE,
            Severity::Error,
            format!("the server stopped answering: {why}"),
        )
        .with("target", h.base_url());
        (f, 3)
    })
}

pub(super) fn unreachable_finding(e: &Error) -> Finding {
    let mut f = Finding::new(checks::SERVER_REACHABLE, Severity::Error, e.problem.clone());
    if let Some(h) = &e.hint {
        f = f.with("hint", h);
    }
    f
}

/// The replayed prompts (after the tag filters), and every prompt id of the file: a snapshot of
/// a prompt the filters leave out is not an orphan.
pub struct PromptSet {
    pub chosen: Vec<Prompt>,
    pub all_ids: Vec<String>,
}

pub(super) fn load_prompts(suite: &Suite) -> Result<Option<PromptSet>> {
    let (Some(path), Some(section)) = (&suite.replay_prompts, &suite.file.replay) else {
        return Ok(None);
    };
    let all = prompts::load(path, section)?;
    let all_ids = all.iter().map(|p| p.id.clone()).collect();
    let chosen = prompts::selected(all, section);
    if chosen.is_empty() {
        return Err(Error::in_file(
            &suite.path,
            "the [replay] tag filters leave no prompt to replay",
        ));
    }
    Ok(Some(PromptSet { chosen, all_ids }))
}

/// The `[reference]` the fingerprint compares the server with, ready to use.
pub enum LoadedReference {
    /// The checkpoint in-process.
    Local(CandleTarget),
    /// A known-good deployment over HTTP.
    Server(ReferenceServer),
}

impl LoadedReference {
    /// The in-process reference, which the replay of an in-process target may share.
    pub fn local(&self) -> Option<&CandleTarget> {
        match self {
            LoadedReference::Local(c) => Some(c),
            LoadedReference::Server(_) => None,
        }
    }
}

/// The target, and the reference checkpoint (shared when both are the same candle model). A
/// recorded reference beside the lock stands in for either kind (the chain checks it is bound
/// to the lock); a reference server is reached only when the target is a server too.
pub(super) async fn open_targets(
    spec: &TargetSpec,
    suite: &Suite,
) -> Result<(Target, Option<LoadedReference>)> {
    let (spec2, suite2) = (spec.clone(), suite.clone());
    let (target, local) = tokio::task::spawn_blocking(move || {
        let (spec, suite) = (spec2, suite2);
        let target = Target::open(&spec, &suite)?;
        let recorded = recording::path_for(&suite.lock_path).exists();
        let reference = match (&suite.reference_model, &target) {
            (None, _) => None,
            (Some(r), Target::Candle(c)) if same_path(r, c.path()) => Some(c.clone()),
            (Some(_), _) if recorded => None,
            (Some(r), _) => Some(load_reference(r, &suite)?),
        };
        Ok::<_, Error>((target, reference))
    })
    .await
    .map_err(|e| Error::input(format!("loading the target failed: {e}")))??;
    if let Some(c) = local {
        return Ok((target, Some(LoadedReference::Local(c))));
    }
    let server = suite
        .file
        .reference
        .as_ref()
        .and_then(ServerSpec::from_section);
    let recorded = recording::path_for(&suite.lock_path).exists();
    match (server, &target) {
        (Some(s), Target::Http(_)) if !recorded => Ok((
            target,
            Some(LoadedReference::Server(ReferenceServer::connect(&s).await?)),
        )),
        _ => Ok((target, None)),
    }
}

/// What to do when the reference cannot be loaded here.
pub const REFERENCE_WAYS_OUT: &str = "three ways out: (1) record the reference once on a machine where it fits, `chatgate lock SUITE.toml --fingerprint`, and commit the recording beside the lock: the gate then needs no weights; (2) point [reference] model at a quantized GGUF of the same checkpoint (Q8_0 and below stay quantized in memory); (3) run the gate on a machine with more memory";

/// The `[reference]` checkpoint in-process, refused before loading when it cannot fit.
pub fn load_reference(path: &std::path::Path, suite: &Suite) -> Result<CandleTarget> {
    memory::ensure_fits(path, "the [reference] checkpoint", REFERENCE_WAYS_OUT)?;
    Ok(CandleTarget::load(path)
        .map_err(|e| e.hint("[reference] model is loaded locally with candle"))?
        .with_template_now(suite.template_now))
}

pub(super) fn same_path(a: &std::path::Path, b: &std::path::Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// What the online chain runs against: the target, the reference, the clock of the local
/// predictions.
#[derive(Clone, Copy)]
pub(super) struct Where<'a> {
    pub target: &'a Target,
    pub reference: Option<&'a LoadedReference>,
    pub local_now: Option<chrono::NaiveDateTime>,
}

/// The online chain, when the target is a server.
pub(super) async fn online(
    ctx: &Context,
    at: Where<'_>,
    prompts: Option<&[Prompt]>,
    progress: &progress::Progress,
    mut fail_fast: Option<FailFast>,
) -> Result<crate::chain::run::probes::OnlineResult> {
    let Where {
        target,
        reference,
        local_now,
    } = at;
    let Some(http) = target.http() else {
        let mut findings = vec![Finding::new(
            checks::SERVER_TARGET,
            Severity::Info,
            "the target runs in-process (candle): the server boundary is not exercised; point --target at a server to check it",
        )];
        if ctx.suite.client_command().is_some() {
            findings.push(Finding::new(
                checks::CLIENT_SSE,
                Severity::Info,
                "[client] command runs only against a server: point --target at one to probe the client",
            ));
        }
        return Ok(crate::chain::run::probes::OnlineResult {
            findings,
            determinism: Default::default(),
            server_day: None,
            steps: Vec::new(),
            fail_fast,
        });
    };
    let server = &ctx.suite.file.server;
    let probes = probes(ctx, prompts, server.probes.unwrap_or(4));
    progress.stage("online chain", 0);
    let reference = match (&ctx.recording, reference) {
        (Some(rec), _) => Some(Reference::Recorded(rec)),
        (None, Some(LoadedReference::Local(r))) => Some(Reference::Local(r)),
        (None, Some(LoadedReference::Server(r))) => Some(Reference::Server(r)),
        (None, None) => None,
    };
    let online = Online {
        ctx,
        http,
        model: spec::model_name(&ctx.suite),
        reference,
        settings: probe_settings(ctx),
        local_now,
    };
    let mut result = crate::chain::run::online::run(&online, &probes, fail_fast).await?;
    fail_fast = result.fail_fast.take();
    // The client boundary's checks, unless a fail-fast run stopped before it.
    let mut client_runs = |check| fail_fast.as_mut().is_none_or(|ff| ff.runs(&[check]));
    // What the recorded client sends, against what the server was just seen to do with it.
    let recording = ctx.suite.client_recording.as_ref();
    if let Some(path) = recording.filter(|_| client_runs(checks::CLIENT_FIELDS_HONOURED)) {
        let sent = crate::chain::client::fields::sent(&crate::proxy::read_recording(path)?);
        let judged = crate::chain::client::fields::judge(&sent, &result.findings);
        result.findings.extend(judged);
    }
    // The client boundary last: the suite's own client through each SSE variant.
    if ctx.suite.client_command().is_some() && client_runs(checks::CLIENT_SSE) {
        progress.stage("client: SSE variants", 0);
        result
            .findings
            .extend(crate::chain::client::sse::check(&ctx.suite, http.base_url()).await);
    }
    result.fail_fast = fail_fast;
    Ok(result)
}

/// The probe pass's requests, from the suite's `[server]`.
pub fn probe_settings(ctx: &Context) -> ProbeSettings {
    let server = &ctx.suite.file.server;
    ProbeSettings {
        max_tokens: server.max_tokens.unwrap_or(24),
        repeats: server.repeats.unwrap_or(3),
        concurrency: server.concurrency.unwrap_or(2),
        seed: 1234,
        top_logprobs: 5,
    }
}

/// Probe conversations: the replay prompts (greedy ones first), else the suite's
/// conversations cut before their last assistant turn.
pub(super) fn probes(ctx: &Context, prompts: Option<&[Prompt]>, n: usize) -> Vec<Probe> {
    if let Some(p) = prompts {
        let mut v: Vec<&Prompt> = p
            .iter()
            .filter(|p| p.settings.temperature == 0.0 && p.settings.stop.is_empty())
            .collect();
        // A prompt that offers tools is always among the probes (the last slot): without
        // one, server.tool-call-parse has nothing to judge.
        let offers_tools = |p: &&Prompt| p.tools.as_ref().is_some_and(|t| !t.is_empty());
        if let Some(at) = v
            .iter()
            .position(offers_tools)
            .filter(|&at| at >= n && n > 0)
        {
            v.swap(n - 1, at);
        }
        v.truncate(n);
        return v
            .into_iter()
            .map(|p| Probe {
                id: p.id.clone(),
                messages: p.messages.clone(),
                tools: p.tools.clone(),
            })
            .collect();
    }
    ctx.conversations
        .iter()
        .filter_map(|c| {
            let last_user = c
                .messages
                .iter()
                .rposition(|m| m.get("role").and_then(Value::as_str) == Some("user"))?;
            Some(Probe {
                id: c.id.clone(),
                messages: c.messages[..=last_user].to_vec(),
                tools: c.tools.clone(),
            })
        })
        .take(n)
        .collect()
}
