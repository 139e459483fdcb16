//! Latency baselines: the reviewed distributions a run is compared with, one JSON file per
//! target label at `<snapshot dir>/latency/<label>.json`.
//!
//! A baseline keeps the raw samples (not just medians) because the noise-aware test bootstraps
//! them, and the environment it was measured on, because a latency figure means nothing on
//! other hardware. It is user-accepted data: `write` replaces it atomically and is only for an
//! explicit `--update`; a normal gate run reads it and never touches it.
use std::path::{Path, PathBuf};

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

use super::compare::{compare, compare_stratified, CompareOptions, Verdict};
use super::metrics::{Metric, RequestMetrics};
use crate::error::{Error, Result};

type SerResult<T, E> = std::result::Result<T, E>;

/// The file format's version; a different one is rejected with a hint to re-record.
pub const BASELINE_VERSION: u32 = 1;

const REHINT: &str =
    "re-record the latency baseline with `chatgate gate --update` (after checking the \
     environment matches the one the baseline should describe)";

/// Per metric, the samples of one scenario (prompt id), in ms.
pub type ScenarioSamples = IndexMap<Metric, Vec<f64>>;

/// Per scenario (prompt id), its samples.
pub type Scenarios = IndexMap<String, ScenarioSamples>;

/// Where and on what the baseline was measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Environment {
    pub os: String,
    pub arch: String,
    pub cpus: usize,
    pub chatgate_version: String,
    /// The target label (`candle:DIR` or the URL, without credentials).
    pub target: String,
    /// The served model's name, when known.
    pub model: Option<String>,
    /// The CPU's model name (absent in baselines of chatgate before 0.2, and off Linux).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_model: Option<String>,
    /// Milliseconds of the calibration workload on this machine (`latency::calibrate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration_ms: Option<f64>,
}

impl Environment {
    /// This machine and this build of chatgate, for `target` / `model`.
    pub fn current(target: impl Into<String>, model: Option<String>) -> Environment {
        Environment {
            os: std::env::consts::OS.to_string(),
            arch: std::env::consts::ARCH.to_string(),
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            chatgate_version: env!("CARGO_PKG_VERSION").to_string(),
            target: target.into(),
            model,
            cpu_model: super::calibrate::cpu_model(),
            calibration_ms: Some(super::calibrate::calibration_ms()),
        }
    }

    /// How much slower this machine (`now`) is than the baseline's on the calibration
    /// workload: > 1 slower, < 1 faster. `None` when either side was not calibrated.
    pub fn speed_ratio(&self, now: &Environment) -> Option<f64> {
        match (self.calibration_ms, now.calibration_ms) {
            (Some(b), Some(n)) if b > 0.0 && n > 0.0 => Some(n / b),
            _ => None,
        }
    }

    /// Differences that make a comparison with this baseline dubious (for a report warning).
    pub fn differences(&self, other: &Environment) -> Vec<String> {
        let mut out = Vec::new();
        let mut check = |what: &str, a: String, b: String| {
            if a != b {
                out.push(format!("{what}: baseline {a}, now {b}"));
            }
        };
        check("os", self.os.clone(), other.os.clone());
        check("arch", self.arch.clone(), other.arch.clone());
        check("cpus", self.cpus.to_string(), other.cpus.to_string());
        if let (Some(a), Some(b)) = (&self.cpu_model, &other.cpu_model) {
            check("cpu", a.clone(), b.clone());
        }
        check("target", self.target.clone(), other.target.clone());
        check(
            "model",
            self.model.clone().unwrap_or_default(),
            other.model.clone().unwrap_or_default(),
        );
        if let Some(r) = self.speed_ratio(other) {
            if !super::calibrate::same_speed(r) {
                out.push(format!(
                    "calibration workload: baseline {:.1} ms, now {:.1} ms ({r:.2}x)",
                    self.calibration_ms.unwrap_or_default(),
                    other.calibration_ms.unwrap_or_default()
                ));
            }
        }
        out
    }
}

/// How the samples were taken (a change here also makes a comparison dubious).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settings {
    pub repeats: usize,
    pub concurrency: usize,
    pub warmup: usize,
    pub max_tokens: Option<u32>,
}

/// One target's latency baseline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Baseline {
    pub version: u32,
    /// RFC 3339 time of recording.
    pub created: String,
    pub environment: Environment,
    pub settings: Settings,
    /// Prompt id → metric → samples (ms), stored at microsecond resolution (finer digits are
    /// clock noise, and short decimals read back exactly).
    #[serde(serialize_with = "serialize_rounded")]
    pub scenarios: Scenarios,
}

/// Samples rounded to 0.001 ms on the way out.
fn serialize_rounded<S: serde::Serializer>(
    scenarios: &Scenarios,
    s: S,
) -> SerResult<S::Ok, S::Error> {
    let rounded: IndexMap<&String, IndexMap<&Metric, Vec<f64>>> = scenarios
        .iter()
        .map(|(id, metrics)| {
            let m = metrics
                .iter()
                .map(|(k, v)| (k, v.iter().map(|x| (x * 1e3).round() / 1e3).collect()))
                .collect();
            (id, m)
        })
        .collect();
    rounded.serialize(s)
}

impl Baseline {
    /// A new baseline stamped with the current time.
    pub fn new(environment: Environment, settings: Settings, scenarios: Scenarios) -> Baseline {
        Baseline {
            version: BASELINE_VERSION,
            created: chrono::Utc::now().to_rfc3339(),
            environment,
            settings,
            scenarios,
        }
    }

    /// `<snapshot_dir>/latency/<label>.json`. Characters of the label outside
    /// `[A-Za-z0-9._-]` (a URL's `:` and `/`) become `_`, so any target label is a file name.
    pub fn path(snapshot_dir: &Path, label: &str) -> PathBuf {
        let name: String = label
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let name = name.trim_matches('.');
        let name = if name.is_empty() { "target" } else { name };
        snapshot_dir.join("latency").join(format!("{name}.json"))
    }

    /// Read a baseline; `Ok(None)` when there is none yet. A malformed file or another format
    /// version is an input error naming the file, with a hint to re-record.
    pub fn read(path: &Path) -> Result<Option<Baseline>> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io(path, e)),
        };
        let baseline: Baseline = serde_json::from_str(&text).map_err(|e| {
            Error::in_file(path, format!("malformed latency baseline: {e}")).hint(REHINT)
        })?;
        if baseline.version != BASELINE_VERSION {
            return Err(Error::in_file(
                path,
                format!(
                    "latency baseline format version {} (this chatgate reads version {BASELINE_VERSION})",
                    baseline.version
                ),
            )
            .hint(REHINT));
        }
        Ok(Some(baseline))
    }

    /// Write the baseline as pretty JSON, atomically (a temp file in the same folder, then
    /// renamed over the old one), creating the folder if needed. Only for an explicit
    /// `--update`: callers must never write a baseline as a side effect of a gate run.
    pub fn write(&self, path: &Path) -> Result<()> {
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let fail = |e: std::io::Error| {
            Error::in_file(path, format!("cannot write the latency baseline: {e}"))
                .hint("check that the snapshot folder is writable")
        };
        std::fs::create_dir_all(dir).map_err(fail)?;
        let mut json = serde_json::to_string_pretty(self)
            .map_err(|e| Error::in_file(path, format!("cannot serialise the baseline: {e}")))?;
        json.push('\n');
        crate::files::write_atomic(path, json.as_bytes())
    }
}

/// Collect the gated metrics' samples of one scenario's requests.
pub fn scenario_samples<'a>(
    requests: impl IntoIterator<Item = &'a RequestMetrics>,
) -> ScenarioSamples {
    let mut out: ScenarioSamples = Metric::GATED.iter().map(|&m| (m, Vec::new())).collect();
    for r in requests {
        for (metric, samples) in out.iter_mut() {
            samples.extend(r.samples(*metric));
        }
    }
    out
}

/// One metric's verdict, pooled over all scenarios (`scenario: None`) or for one scenario.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricVerdict {
    pub metric: Metric,
    pub scenario: Option<String>,
    pub verdict: Verdict,
}

/// Compare a run with a baseline, metric by metric (`Metric::GATED` order). Samples are pooled
/// over the scenarios present in *both* (a prompt added or removed since the baseline must not
/// shift the pooled distribution) and bootstrapped per scenario (`compare_stratified`); with
/// `per_scenario`, one verdict per shared scenario and
/// metric follows the pooled ones. `opts` gives each metric its options (its floor differs).
pub fn compare_baseline(
    base: &Baseline,
    new: &Scenarios,
    opts: impl Fn(Metric) -> CompareOptions,
    per_scenario: bool,
) -> Vec<MetricVerdict> {
    let shared: Vec<&String> = base
        .scenarios
        .keys()
        .filter(|id| new.contains_key(*id))
        .collect();
    let samples = |side: &Scenarios, id: &str, m: Metric| -> Vec<f64> {
        side.get(id)
            .and_then(|s| s.get(&m))
            .cloned()
            .unwrap_or_default()
    };
    let mut out = Vec::new();
    for metric in Metric::GATED {
        let o = opts(metric);
        let strata = |side: &Scenarios| -> Vec<Vec<f64>> {
            shared.iter().map(|id| samples(side, id, metric)).collect()
        };
        let (b, n) = (strata(&base.scenarios), strata(new));
        out.push(MetricVerdict {
            metric,
            scenario: None,
            verdict: compare_stratified(&slices(&b), &slices(&n), &o),
        });
    }
    if per_scenario {
        for id in &shared {
            for metric in Metric::GATED {
                let o = opts(metric);
                out.push(MetricVerdict {
                    metric,
                    scenario: Some((*id).clone()),
                    verdict: compare(
                        &samples(&base.scenarios, id, metric),
                        &samples(new, id, metric),
                        &o,
                    ),
                });
            }
        }
    }
    out
}

impl Baseline {
    /// The baseline as it would read on a machine `ratio` times slower: every sample scaled.
    pub fn scaled(&self, ratio: f64) -> Baseline {
        let mut b = self.clone();
        for samples in b.scenarios.values_mut().flat_map(|s| s.values_mut()) {
            for x in samples.iter_mut() {
                *x *= ratio;
            }
        }
        b
    }
}

/// Borrow each stratum as a slice.
fn slices(v: &[Vec<f64>]) -> Vec<&[f64]> {
    v.iter().map(Vec::as_slice).collect()
}
