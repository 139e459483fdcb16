//! Sharded gate runs and their merge, for CI fleets that split a suite across runners (a GitHub
//! Actions matrix, a Kubernetes Indexed Job): no coordinator of our own, only a rule every
//! shard applies alone and a merge that needs nothing but the parts and the suite file.
//!
//! The rule: the replay prompts (in the suite's order) and the latency requests (prompt i % P,
//! repeat i / P) are dealt round-robin — item i belongs to shard `i mod N + 1`. The offline and
//! online chains run in shard 1 only: they judge the whole chain once, and splitting their
//! probes would change what they conclude. Every shard writes a part: its findings, its prompt
//! results and its raw latency samples. The merge recomputes what depends on all of them — the
//! replay verdict and every latency figure, from the union of the raw samples, never from
//! averaged percentiles — with the same functions an unsharded run uses.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::shard::Shard;
use crate::chain::latency::{self as latency_judge, LatencyData};
use crate::error::{Error, Result};
use crate::latency::client::ClientHealth;
use crate::latency::{Sample, Schedule};
use crate::suite::Suite;
use crate::verdict::{Finding, Findings};
use crate::verdict::{GateReport, PromptResult};

/// The part file's format; a merge refuses parts of another.
pub const PART_FORMAT: &str = "chatgate-gate-part/1";
/// Largest part file a merge reads (raw samples of a large latency run fit well inside).
const MAX_PART_BYTES: u64 = 512 << 20;

/// What one shard did, as the merge needs it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Part {
    pub format: String,
    /// The chatgate version that wrote it: parts of one merge come from one version.
    pub chatgate: String,
    pub shard: Shard,
    pub suite: String,
    pub suite_file: PathBuf,
    /// SHA-256 of the suite file's bytes: every shard must have run the same suite.
    pub suite_sha256: String,
    pub target: String,
    /// Every replayed prompt id, in order (the whole run's, not only this shard's).
    pub prompts: Vec<String>,
    /// Findings that are not recomputed at the merge: the offline and online chains, orphaned
    /// snapshots (shard 1), and why a shard stopped early (any shard).
    pub findings: Vec<Finding>,
    /// The online chain's determinism class per prompt id (shard 1).
    pub determinism: BTreeMap<String, String>,
    /// This shard's replayed prompts.
    pub results: Vec<PromptResult>,
    /// This shard's latency requests (None: the suite measures no latency, or the run stopped
    /// before).
    pub latency: Option<LatencyData>,
    pub exit_code: i32,
    pub duration_s: f64,
}

impl Part {
    /// Write atomically (a runner killed mid-write leaves no half part for the merge).
    pub fn write(&self, path: &Path) -> Result<()> {
        write_part(self, path)
    }

    pub fn read(path: &Path) -> Result<Part> {
        let bytes = crate::files::read_bounded(path, MAX_PART_BYTES)?;
        let part: Part = serde_json::from_slice(&bytes).map_err(|e| {
            Error::in_file(path, format!("is not a chatgate gate part: {e}"))
                .hint("pass the files `chatgate gate SUITE --shard K/N --part FILE` wrote")
        })?;
        if part.format != PART_FORMAT {
            return Err(Error::in_file(
                path,
                format!(
                    "is a part of format {:?}; this chatgate merges {PART_FORMAT:?}",
                    part.format
                ),
            ));
        }
        Ok(part)
    }
}

/// A part as JSON, redacted, written atomically (a runner killed mid-write leaves no half part
/// for the merge).
fn write_part(part: &impl Serialize, path: &Path) -> Result<()> {
    let text = serde_json::to_string(part)
        .map_err(|e| Error::input(format!("cannot serialize the part: {e}")))?;
    crate::files::write_atomic(path, crate::secrets::redact(&text).as_bytes())
}

/// SHA-256 of the suite file, as parts record it.
pub fn suite_sha256(suite: &Suite) -> Result<String> {
    let bytes = crate::files::read_bounded(&suite.path, 16 << 20)?;
    Ok(hex::encode(Sha256::digest(&bytes)))
}

/// The parts of one sharded run as one report: the verdict, findings, snapshot results and
/// latency figures an unsharded run of the same work gives. `suite` overrides the suite file
/// the parts name (the merge may run in another folder than the shards).
pub fn merge(paths: &[PathBuf], suite: Option<&Path>) -> Result<GateReport> {
    if paths.is_empty() {
        return Err(Error::input(
            "chatgate merge needs the part files of every shard",
        ));
    }
    let mut parts = Vec::new();
    for p in paths {
        parts.push((p.clone(), Part::read(p)?));
    }
    let parts = complete_set(parts)?;
    let first = &parts[0];
    let suite_path = suite.map_or_else(|| first.suite_file.clone(), Path::to_path_buf);
    let suite = Suite::load(&suite_path)?;
    if suite_sha256(&suite)? != first.suite_sha256 {
        return Err(Error::in_file(
            &suite_path,
            "is not the suite file the shards ran (its bytes changed since)",
        )
        .hint("merge with the suite file of the sharded run (--suite FILE)"));
    }

    let mut findings: Vec<Finding> = parts.iter().flat_map(|p| p.findings.clone()).collect();
    let results = merged_results(&parts);
    let mut report = GateReport {
        suite: first.suite.clone(),
        suite_file: suite_path.display().to_string(),
        target: first.target.clone(),
        findings: Findings::default(),
        prompts: Vec::new(),
        latency: Vec::new(),
        latency_totals: None,
        definitions: crate::latency::definitions(),
        duration_s: parts.iter().map(|p| p.duration_s).fold(0.0, f64::max),
        phases: Vec::new(),
        exit_code: crate::verdict::Outcome::Pass,
    };
    if !first.prompts.is_empty() {
        findings.extend(crate::chain::replay::snapshot_findings(
            &results,
            first.prompts.len(),
        ));
    }
    report.prompts = results;
    let stopped = parts.iter().any(|p| p.exit_code == 3);
    if let (Some(section), Some(data)) = (&suite.file.latency, merged_latency(&parts)) {
        let measured = latency_judge::judge(&data, section, false);
        findings.extend(measured.findings);
        report.latency = measured.rows;
        report.latency_totals = Some(measured.totals);
    }
    crate::chain::run::policy::apply_policy(&mut findings, &suite.file.server);
    let mut all = Findings(findings);
    let code = if stopped {
        3
    } else if all.has_errors() {
        1
    } else {
        0
    };
    all.sort();
    report.findings = all;
    report.exit_code = crate::verdict::Outcome::from_code(code);
    Ok(report)
}

/// A part of one sharded run, as the merge checks it.
trait ShardPart {
    fn shard(&self) -> Shard;
    /// What every part of one run shares, each with its name for the refusal.
    fn run_identity(&self) -> Vec<(&'static str, String)>;
}

impl ShardPart for Part {
    fn shard(&self) -> Shard {
        self.shard
    }
    fn run_identity(&self) -> Vec<(&'static str, String)> {
        vec![
            ("the suite file", self.suite_sha256.clone()),
            ("the target", self.target.clone()),
            ("the prompt list", self.prompts.join("\n")),
            ("the chatgate version", self.chatgate.clone()),
        ]
    }
}

/// One part per shard 1..=N of one run, in shard order; anything else is refused by name.
fn complete_set<P: ShardPart>(mut parts: Vec<(PathBuf, P)>) -> Result<Vec<P>> {
    parts.sort_by_key(|(_, p)| p.shard().k);
    let (first_path, first) = &parts[0];
    let n = first.shard().n;
    let identity = first.run_identity();
    for (path, p) in &parts {
        let differs = |what: &str| {
            Err(Error::in_file(
                path,
                format!(
                    "is a part of another run than {} ({what} differs)",
                    first_path.display()
                ),
            )
            .hint(
                "merge the parts of one sharded run: same suite, target, shard count and chatgate",
            ))
        };
        if p.shard().n != n {
            return differs("the shard count");
        }
        for ((what, want), (_, have)) in identity.iter().zip(p.run_identity()) {
            if *want != have {
                return differs(what);
            }
        }
    }
    let have: Vec<usize> = parts.iter().map(|(_, p)| p.shard().k).collect();
    let expected: Vec<usize> = (1..=n).collect();
    if have != expected {
        let missing: Vec<String> = expected
            .iter()
            .filter(|k| !have.contains(k))
            .map(|k| format!("{k}/{n}"))
            .collect();
        let twice: Vec<String> = have
            .windows(2)
            .filter(|w| w[0] == w[1])
            .map(|w| format!("{}/{n}", w[0]))
            .collect();
        return Err(Error::input(format!(
            "the parts are not shards 1..{n} of one run, each once: missing [{}], repeated [{}]",
            missing.join(", "),
            twice.join(", ")
        ))
        .hint("pass every shard's part exactly once"));
    }
    Ok(parts.into_iter().map(|(_, p)| p).collect())
}

/// Every shard's prompt results in the suite's prompt order, with shard 1's determinism
/// classes (only shard 1 probed the server).
fn merged_results(parts: &[Part]) -> Vec<PromptResult> {
    let order: BTreeMap<&str, usize> = parts[0]
        .prompts
        .iter()
        .enumerate()
        .map(|(i, id)| (id.as_str(), i))
        .collect();
    let mut results: Vec<PromptResult> = parts.iter().flat_map(|p| p.results.clone()).collect();
    results.sort_by_key(|r| order.get(r.id.as_str()).copied().unwrap_or(usize::MAX));
    for r in &mut results {
        if r.determinism.is_none() {
            r.determinism = parts[0].determinism.get(&r.id).cloned();
        }
    }
    results
}

/// The union of the shards' latency samples, in request order, with shard 1's baseline and
/// environment (every shard read the same baseline file of the same suite).
fn merged_latency(parts: &[Part]) -> Option<LatencyData> {
    let mut data = parts.iter().find_map(|p| p.latency.clone())?;
    data.samples = parts
        .iter()
        .filter_map(|p| p.latency.as_ref())
        .flat_map(|l| l.samples.clone())
        .collect();
    data.samples.sort_by_key(|s| s.index);
    data.client = crate::latency::client::ClientHealth::worst(
        parts
            .iter()
            .filter_map(|p| p.latency.as_ref()?.client.clone()),
    );
    Some(data)
}

/// The part format of a sharded `bench --mode load`; a merge refuses parts of another.
pub const BENCH_PART_FORMAT: &str = "chatgate-bench-part/1";

/// What one shard of an open-loop bench did: its requests' raw samples, and the whole run's
/// schedule (every shard generates the same one from the same flags and takes request i when
/// i mod N + 1 is its K, at the offset the whole schedule gives it).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BenchPart {
    pub format: String,
    pub chatgate: String,
    pub shard: Shard,
    pub suite: String,
    pub suite_file: PathBuf,
    pub suite_sha256: String,
    pub target: String,
    pub schedule: Schedule,
    pub warmup: usize,
    pub max_in_flight: usize,
    pub samples: Vec<Sample>,
    pub client: ClientHealth,
    /// Why this shard's client could not be trusted to time the server, if it could not.
    pub unreliable: Option<String>,
    pub duration_s: f64,
    /// When this part's schedule started, and when it was asked to (`--start-at`).
    #[serde(default)]
    pub started: Option<crate::latency::Started>,
}

/// How far a load generator may start from the others (or from `--start-at`) before
/// `chatgate merge` flags it (docs/commands/merge.md): at 200 requests/s, 20 ms is four
/// requests' worth of the schedule shifted.
pub const MAX_START_SKEW_MS: f64 = 20.0;

/// One part's start, as the merge reports it.
#[derive(Debug, Clone, Serialize)]
pub struct PartStart {
    pub shard: String,
    /// Actual − requested (ms), on the part's own clock; None without --start-at.
    pub offset_ms: Option<f64>,
    /// Actual start − the earliest part's actual start (ms).
    pub after_first_ms: f64,
    /// Beyond [`MAX_START_SKEW_MS`] either way.
    pub late: bool,
}

impl PartStart {
    /// " (+0.3 ms from --start-at)", or nothing without --start-at.
    pub fn offset_note(&self) -> String {
        self.offset_ms
            .map(|o| format!(" ({o:+.1} ms from --start-at)"))
            .unwrap_or_default()
    }
}

/// Every part's start, and a warning naming the parts that started off (None when all were
/// within the bound, or no part recorded its start).
pub fn start_skew(parts: &[BenchPart]) -> (Vec<PartStart>, Option<String>) {
    let recorded: Vec<(&BenchPart, crate::latency::Started)> = parts
        .iter()
        .filter_map(|p| p.started.map(|s| (p, s)))
        .collect();
    let Some(first) = recorded
        .iter()
        .map(|(_, s)| s.actual_unix_ms)
        .reduce(f64::min)
    else {
        return (Vec::new(), None);
    };
    let starts: Vec<PartStart> = recorded
        .iter()
        .map(|(p, s)| {
            let after_first_ms = s.actual_unix_ms - first;
            let off = s.offset_ms();
            PartStart {
                shard: p.shard.to_string(),
                offset_ms: off,
                after_first_ms,
                late: after_first_ms > MAX_START_SKEW_MS
                    || off.is_some_and(|o| o.abs() > MAX_START_SKEW_MS),
            }
        })
        .collect();
    let late: Vec<String> = starts
        .iter()
        .filter(|s| s.late)
        .map(|s| {
            format!(
                "part {} started {:.1} ms after the first{}",
                s.shard,
                s.after_first_ms,
                s.offset_note()
            )
        })
        .collect();
    let missing = parts.len() - recorded.len();
    let mut why = Vec::new();
    if !late.is_empty() {
        why.push(format!(
            "{}: beyond the {MAX_START_SKEW_MS} ms bound, the merged arrivals are not the planned schedule (start every part with the same --start-at)",
            late.join("; ")
        ));
    }
    if missing > 0 {
        why.push(format!(
            "{missing} part(s) recorded no start (written by an older chatgate): their skew is unknown"
        ));
    }
    (starts, (!why.is_empty()).then(|| why.join("; ")))
}

impl ShardPart for BenchPart {
    fn shard(&self) -> Shard {
        self.shard
    }
    fn run_identity(&self) -> Vec<(&'static str, String)> {
        vec![
            ("the suite file", self.suite_sha256.clone()),
            ("the target", self.target.clone()),
            (
                "the schedule (--requests, --rate, --arrival, --shape, --seed)",
                serde_json::to_string(&self.schedule).unwrap_or_default(),
            ),
            (
                "--warmup or --max-in-flight",
                format!("{} {}", self.warmup, self.max_in_flight),
            ),
            ("the chatgate version", self.chatgate.clone()),
        ]
    }
}

impl BenchPart {
    /// Write atomically, redacted, like a gate part.
    pub fn write(&self, path: &Path) -> Result<()> {
        write_part(self, path)
    }

    fn read(path: &Path) -> Result<BenchPart> {
        let bytes = crate::files::read_bounded(path, MAX_PART_BYTES)?;
        serde_json::from_slice(&bytes).map_err(|e| {
            Error::in_file(path, format!("is not a chatgate bench part: {e}")).hint(
                "pass the files `chatgate bench SUITE --mode load --shard K/N --part FILE` wrote",
            )
        })
    }
}

/// Which kind of part a file is: its `format` field.
pub fn part_format(path: &Path) -> Result<String> {
    #[derive(Deserialize)]
    struct Head {
        format: String,
    }
    let bytes = crate::files::read_bounded(path, MAX_PART_BYTES)?;
    let head: Head = serde_json::from_slice(&bytes).map_err(|e| {
        Error::in_file(path, format!("is not a chatgate part: {e}"))
            .hint("pass the files `chatgate gate|bench ... --shard K/N --part FILE` wrote")
    })?;
    Ok(head.format)
}

/// The bench parts of one sharded open-loop run, merged: every shard's samples in request
/// order, the client's worst health, and the longest shard's duration.
/// The parts of a sharded load run merged: the whole schedule's samples, and when each part
/// started.
pub struct MergedBench {
    pub part: BenchPart,
    pub starts: Vec<PartStart>,
    /// Parts that started off the others (or off --start-at), when some did.
    pub skew_warning: Option<String>,
}

pub fn merge_bench(paths: &[PathBuf]) -> Result<MergedBench> {
    let mut parts = Vec::new();
    for p in paths {
        parts.push((p.clone(), BenchPart::read(p)?));
    }
    let parts = complete_set(parts)?;
    let (starts, skew_warning) = start_skew(&parts);
    let mut merged = parts[0].clone();
    merged.samples = parts.iter().flat_map(|p| p.samples.clone()).collect();
    merged.samples.sort_by_key(|s| s.index);
    merged.client = ClientHealth::worst(parts.iter().map(|p| p.client.clone())).unwrap_or_default();
    merged.unreliable = parts.iter().find_map(|p| p.unreliable.clone());
    merged.duration_s = parts.iter().map(|p| p.duration_s).fold(0.0, f64::max);
    merged.shard = Shard { k: 1, n: 1 };
    merged.started = None;
    Ok(MergedBench {
        part: merged,
        starts,
        skew_warning,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_parse_and_deal_every_item_to_exactly_one() {
        let s: Shard = "2/3".parse().unwrap();
        assert_eq!(s, Shard { k: 2, n: 3 });
        for bad in ["0/3", "4/3", "1/0", "3", "a/b", "1/10001", ""] {
            assert!(bad.parse::<Shard>().is_err(), "{bad}");
        }
        for n in 1..=5 {
            for i in 0..50 {
                let owners = (1..=n).filter(|&k| Shard { k, n }.owns(i)).count();
                assert_eq!(owners, 1, "item {i} of {n} shards");
            }
        }
    }
}
