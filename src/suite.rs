//! The suite manifest (TOML): which model directory is served, what the SFT format was, which
//! conversations to render, which generation settings are expected, and where the lock lives.
//! `suites/example.toml` documents every key. Unknown keys and wrong types are errors that name
//! the line and the key (serde `deny_unknown_fields` + the toml crate's spans).
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{Error, Result};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SuiteFile {
    /// A short name for reports and snapshot folders; defaults to the file stem.
    pub name: Option<String>,
    pub model: ModelSection,
    pub sft: Option<SftSection>,
    #[serde(default)]
    pub conversations: Vec<ConversationEntry>,
    pub conversations_file: Option<PathBuf>,
    #[serde(default)]
    pub generation: GenerationSection,
    #[serde(default)]
    pub lock: LockSection,
    /// What `chatgate gate` replays against (overridden by `--target`).
    pub target: Option<TargetSection>,
    /// The checkpoint the server should be serving, run locally as the reference.
    pub reference: Option<ReferenceSection>,
    /// The server boundary's probes.
    #[serde(default)]
    pub server: ServerSection,
    /// Replayed prompts and their reviewed snapshots.
    pub replay: Option<ReplaySection>,
    /// Latency measurement and its baseline.
    pub latency: Option<LatencySection>,
    /// The client boundary: what the application is supposed to send.
    pub client: Option<ClientSection>,
}

/// Where the gate sends requests.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetSection {
    /// `candle:DIR` (in-process) or the base URL of an OpenAI-compatible server
    /// (`http://127.0.0.1:8000`; a trailing `/v1` is optional). Default: `[model] dir`
    /// in-process.
    pub url: Option<String>,
    /// The `model` field sent in requests (default: the served model directory's name).
    pub model: Option<String>,
    /// The serving stack, which decides the tokenizer, template, BOS handling and stop set the
    /// chain predicts: "transformers" (vLLM, SGLang, transformers serve), "tokenizers" (TGI),
    /// "llama.cpp" (llama-server), "llama-cpp-python". Default: detected from the server's
    /// introspection online; offline, "llama.cpp" for a .gguf file, else "transformers".
    pub stack: Option<crate::stack::Stack>,
    /// The environment variable that holds the API key (sent as a Bearer token; never printed).
    pub api_key_env: Option<String>,
    /// Seconds to wait for a connection (default 5).
    pub connect_timeout_s: Option<f64>,
    /// Seconds to wait for the next bytes of a response (default 30).
    pub read_timeout_s: Option<f64>,
    /// Seconds one request may take in all (default 120).
    pub total_timeout_s: Option<f64>,
    /// Seconds the whole gate run may take (default: unbounded, each request has its own
    /// timeouts and the circuit breaker stops a stalled target); `--deadline` overrides it.
    pub deadline_s: Option<f64>,
    /// The largest non-streamed reply read, in MiB (default 16): a larger one is a protocol
    /// failure, and memory stays bounded against a server that never stops sending.
    pub max_body_mb: Option<u64>,
    /// The most one stream may carry, in MiB (default 32; an SSE line may hold 4 MiB, or an
    /// eighth of this when larger).
    pub max_stream_mb: Option<u64>,
    /// The most all requests in flight may hold together, in MiB (default 64): an open-loop
    /// bench against a server that never stops sending stays bounded however many are open.
    pub max_in_flight_mb: Option<u64>,
    /// Fields merged into every request body (server-specific, e.g. `repeat_penalty = 1.0` for
    /// llama-cpp-python, whose default is 1.1).
    #[serde(default)]
    pub extra_body: serde_json::Map<String, Value>,
}

/// The reference checkpoint: the behavioural fingerprint compares the server's greedy tokens
/// and logprobs with the checkpoint's own, run locally (`model`) or on a known-good deployment
/// that teacher-forces over HTTP (`url`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReferenceSection {
    /// A model directory or .gguf file (relative to the suite file), run in-process with candle.
    pub model: Option<PathBuf>,
    /// A reference *server*: the base URL of a deployment of the same checkpoint that can
    /// teacher-force (vLLM, SGLang, TGI launched with `--enable-prefill-logprobs`,
    /// llama-server). Takes the place of `model`.
    pub url: Option<String>,
    /// The reference server's stack: "vllm", "sglang", "tgi" or "llama-server" (default:
    /// detected from its routes).
    pub stack: Option<String>,
    /// The `model` field sent to the reference server (default: the first id its
    /// `/v1/models` lists).
    pub served_model: Option<String>,
    /// The environment variable holding the reference server's API key.
    pub api_key_env: Option<String>,
    /// The quantization the reference server runs (a GGUF type name such as "Q8_0"; default:
    /// float weights): its tolerance. An in-process `model` reads it from the weights.
    pub quantization: Option<String>,
    /// Largest 95th percentile of |server logprob − reference logprob| over the compared positions
    /// (the chosen token and the top-k alternatives both report) still counted as the same
    /// checkpoint (default: the reference kind's — 0.3 nats for float weights, 1.0 for Q8_0, more
    /// below; docs/checkpoint-at-scale.md).
    pub logprob_tolerance: Option<f32>,
    /// Largest mean of the same gaps (default: the reference kind's — 0.1 nats for float
    /// weights, 0.5 for Q8_0, more below).
    pub mean_logprob_tolerance: Option<f32>,
    /// Tokens of the long reply the fingerprint judges window by window (default
    /// 256, clamped to the context the prompt leaves; 0: no long reply). A server whose output
    /// degrades after N tokens (a KV cache that loses precision) passes 16-token probes.
    pub long_reply_tokens: Option<usize>,
    /// The long reply's prompt (default: a request for a long story, which a chat model
    /// answers at length on a server that takes no `ignore_eos`).
    pub long_reply_prompt: Option<String>,
}

/// Probes of the server boundary.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSection {
    /// Repeats of each probe at temperature 0 for the determinism check (default 3).
    pub repeats: Option<usize>,
    /// Concurrent requests for the under-load determinism check (default 2).
    pub concurrency: Option<usize>,
    /// How many replay prompts probe the server (default 4; greedy prompts without stop strings).
    pub probes: Option<usize>,
    /// An open-ended prompt for the sampling probe (temperature 0 must not follow the seed).
    pub sampling_prompt: Option<String>,
    /// max_tokens of the probes (default 24).
    pub max_tokens: Option<u32>,
    /// The context the long prompt fills (`server.long-prompt`; default the checkpoint's, at
    /// most 4,096 tokens; 0: no long prompt).
    pub long_prompt_tokens: Option<usize>,
    /// Sampled requests through the reasoning and tool-call parsers (`server.sampled-parse`,
    /// default 20; 0: none).
    pub sampled_runs: Option<usize>,
    /// The share of sampled replies whose parse may fail (default 0.2): the check fails when
    /// the 95% interval's lower bound is above it, and is inconclusive when the interval
    /// straddles it.
    pub sampled_allowance: Option<f64>,
    /// Check ids whose warnings fail the gate here (e.g. `["server.include-usage"]`):
    /// informative quirks only fail a suite that asks for it. Any check id, offline or online.
    #[serde(default)]
    pub strict: Vec<String>,
    /// Check ids to skip entirely (a known quirk this deployment accepts). Any check id; a
    /// skipped request-field check also sends no probe (chain/online/fields.rs).
    #[serde(default)]
    pub skip: Vec<String>,
}

impl ServerSection {
    /// Whether the suite skips `check` (its probes, where it has its own, are then not sent).
    pub fn skips(&self, check: &crate::verdict::checks::Check) -> bool {
        self.skip.iter().any(|s| s == check.id)
    }
}

/// Replay: stable prompts against the target, diffed with reviewed snapshots.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplaySection {
    /// JSONL of prompts (relative to the suite file); see `replay::prompts`.
    pub prompts: PathBuf,
    /// Where the reviewed snapshots live (default: `snapshots/<suite name>` beside the suite).
    pub snapshots: Option<PathBuf>,
    /// The comparator of prompts that name none (default "exact").
    pub comparator: Option<Comparator>,
    /// Defaults for prompts that do not set their own.
    pub temperature: Option<f64>,
    pub max_tokens: Option<u32>,
    pub seed: Option<u64>,
    /// Ask for this many top logprobs per token (default 2), so a token diff can tell numeric
    /// drift from a behaviour change.
    pub top_logprobs: Option<u8>,
    /// Replay only prompts with one of these tags (default: all).
    #[serde(default)]
    pub tags: Vec<String>,
    /// Leave out prompts with one of these tags (e.g. `["sampled"]` on a server whose sampler
    /// differs from the reference's).
    #[serde(default)]
    pub exclude_tags: Vec<String>,
}

/// Latency: closed-loop smoke measurement, compared with a stored baseline.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LatencySection {
    /// Measured repeats of every prompt (default 3; docs/design/METRICS.md asks for at least 3).
    pub repeats: Option<usize>,
    /// Requests in flight (closed loop; default 1).
    pub concurrency: Option<usize>,
    /// Unmeasured requests first (default 1).
    pub warmup: Option<usize>,
    /// Relative tolerance: a regression needs median_new > median_base × (1 + tolerance)
    /// (default 1.0, i.e. twice as slow).
    pub tolerance: Option<f64>,
    /// Absolute floor in ms per metric, so a tiny model's sub-millisecond figures do not flag
    /// scheduler noise (defaults: ttft 50, tpot 10, e2el 100).
    pub min_regression_ms: Option<MetricMs>,
    /// Confidence of the bootstrap interval of the median difference (default 0.95).
    pub confidence: Option<f64>,
    /// Bootstrap resamples (default 2000).
    pub bootstrap: Option<usize>,
    /// Service-level objectives in ms; goodput counts requests meeting all of them.
    pub slo: Option<MetricMs>,
    /// Fail the gate when less than this fraction of requests meets the SLOs (0..1). Also the
    /// share a `bench --mode capacity` step must meet (default there 0.9).
    pub min_slo_attainment: Option<f64>,
    /// `bench --mode capacity --baseline`: the capacity drop allowed against the saved search
    /// (default 0.1: a capacity 10 % lower still passes).
    pub capacity_drop: Option<f64>,
    /// What an INCONCLUSIVE comparison does (its interval straddles the threshold): `warn`
    /// (default: reported, exit 0) or `fail` (exit 1). Never a silent pass either way.
    pub inconclusive: Option<Inconclusive>,
    /// The baseline's name under `<snapshots>/latency/` (default: the target kind, `candle` or
    /// `http`): servers of different kinds keep different baselines.
    pub baseline: Option<String>,
}

/// What an INCONCLUSIVE latency or capacity comparison does to the gate.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Inconclusive {
    /// A warning: reported with how many more runs would decide, exit 0.
    #[default]
    Warn,
    /// An error: exit 1 until more runs decide it.
    Fail,
}

/// Milliseconds per metric.
#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct MetricMs {
    pub ttft: Option<f64>,
    pub tpot: Option<f64>,
    pub e2el: Option<f64>,
}

/// The client boundary's contract: what the application should send.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientSection {
    /// A recording made with `chatgate proxy --record FILE` (relative to the suite file).
    pub recording: Option<PathBuf>,
    /// The endpoint path the client must call (default "/v1/chat/completions").
    pub endpoint: Option<String>,
    /// The model name the client must send (default: the target's model).
    pub model: Option<String>,
    /// Request fields that must have exactly these values (e.g. `temperature = 0.2`).
    #[serde(default)]
    pub params: serde_json::Map<String, Value>,
    /// Fields the client must send (e.g. `["max_tokens"]`).
    #[serde(default)]
    pub required: Vec<String>,
    /// Fields the client must not send.
    #[serde(default)]
    pub forbidden: Vec<String>,
    /// Whether the client must stream (unset: either).
    pub stream: Option<bool>,
    /// What the client relies on of the server's reasoning and tool-call handling
    /// ([`CLIENT_FEATURES`]): a server that breaks one of these fails the gate, one that breaks
    /// another is a warning. Unset: `reasoning` and `tool_calls` (a server that mangles the
    /// model's output breaks any client that reads it), not the request fields.
    pub relies_on: Option<Vec<String>>,
    /// The reply field the client reads reasoning from: `reasoning_content` (DeepSeek's API,
    /// vLLM before its rename, SGLang, llama-server) or `reasoning` (vLLM since). A server that
    /// writes the other one fails `server.reasoning-split`: the client gets no reasoning.
    pub reasoning_field: Option<String>,
    /// The client itself, as a command run from the suite's folder (e.g. `["python",
    /// "smoke_client.py"]`): against an HTTP target the gate runs it through `chatgate
    /// client-probe` — the plain stream, then each hostile-but-legal SSE variant — and fails
    /// `client.sse` when a variant in `sse_variants` breaks it.
    pub command: Option<Vec<String>>,
    /// The SSE variants the deployment must survive (`chatgate proxy --help` lists them):
    /// `["all"]` (the default) or names such as `["keep-alive", "ids"]`. A variant not listed
    /// that breaks the client is a warning.
    pub sse_variants: Option<Vec<String>>,
    /// Seconds one run of the client command may take (default 60).
    pub command_timeout_s: Option<u64>,
}

/// What `[client] relies_on` may name.
pub const CLIENT_FEATURES: &[&str] = &[
    "reasoning",
    "tool_calls",
    "tool_choice",
    "max_completion_tokens",
    "chat_template_kwargs",
    "response_format",
    "responses",
];

/// The serving side: the model directory the server loads, and how it renders and tokenizes.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSection {
    /// The model directory (or .gguf file) the server serves. Relative to the suite file.
    pub dir: PathBuf,
    /// Serve this template file instead of the directory's own (what `--chat-template` does).
    pub chat_template: Option<PathBuf>,
    /// Which named template to use when the directory ships several ("default", "tool_use", ...).
    pub template_name: Option<String>,
    /// Whether the server adds the tokenizer's special tokens when it tokenizes the rendered
    /// prompt: false for vLLM/SGLang/TGI chat (transformers' `apply_chat_template`), true for
    /// llama.cpp and for clients that send rendered text to a completions endpoint.
    #[serde(default)]
    pub add_special_tokens: bool,
    /// The date (`YYYY-MM-DD`, or `YYYY-MM-DDTHH:MM[:SS]`) the chat template's clock reads
    /// (`strftime_now`, the `date_string` it prints): what the golden rows and snapshots were
    /// made with. `chatgate init` writes the day it ran; unset, templates read today.
    pub template_date: Option<String>,
}

/// The format the model was fine-tuned on.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SftSection {
    /// JSONL of golden conversations: {"messages": [...], "input_ids": [...], "assistant_mask": [...]}.
    pub golden: Option<PathBuf>,
    /// Or: the template the SFT pipeline rendered with…
    pub template: Option<PathBuf>,
    /// …and the tokenizer it used (a tokenizer.json or a model directory). Defaults to the
    /// serving model's tokenizer.
    pub tokenizer: Option<PathBuf>,
    /// Special tokens for the SFT template; default to the serving model's.
    pub bos_token: Option<String>,
    pub eos_token: Option<String>,
    /// Whether the SFT pipeline tokenized with special tokens added (TRL: false for
    /// conversational data).
    #[serde(default)]
    pub add_special_tokens: bool,
}

/// One conversation to render through both pipelines.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConversationEntry {
    pub id: Option<String>,
    pub messages: Vec<Value>,
    pub tools: Option<Vec<Value>>,
}

/// The generation settings the suite expects the serving defaults to have.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GenerationSection {
    /// Extra token ids the server is known to stop on (added to generation_config eos ∪ tokenizer eos).
    #[serde(default)]
    pub extra_stop_token_ids: Vec<u32>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<i64>,
    pub min_p: Option<f64>,
    pub repetition_penalty: Option<f64>,
    pub do_sample: Option<bool>,
    pub max_new_tokens: Option<u64>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockSection {
    /// The lock file; default `<suite file stem>.lock.json` beside the suite.
    pub path: Option<PathBuf>,
}

/// How a prompt's reply is compared with its accepted snapshot (the comparing itself is
/// `snapshot::compare`).
/// One comparator per prompt. In TOML/JSON: `"exact"`, `"exact-tokens"`,
/// `"normalized-whitespace"`, `{ prefix-tokens = 8 }`, `{ similarity = 0.9 }`,
/// `{ contains = "Paris" }`, `{ regex = "^\\d+$" }`, `{ json-schema = {...} }`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Comparator {
    /// Same text and finish reason (and the same token ids when both sides have them).
    #[default]
    Exact,
    /// Same token ids (falls back to the text when a side has no ids).
    ExactTokens,
    /// The first N tokens agree.
    PrefixTokens(usize),
    /// Same text after collapsing whitespace runs and trimming.
    NormalizedWhitespace,
    /// Token edit ratio (1 − edit distance / longer length) at least this.
    Similarity(f64),
    /// The reply contains this string.
    Contains(String),
    /// The reply matches this regular expression.
    Regex(String),
    /// The reply parses as JSON and validates against this schema.
    JsonSchema(Value),
}

/// A loaded suite with every path resolved against the suite file's folder.
#[derive(Debug, Clone)]
pub struct Suite {
    pub path: PathBuf,
    pub name: String,
    pub file: SuiteFile,
    pub model_dir: PathBuf,
    pub chat_template: Option<PathBuf>,
    pub sft_golden: Option<PathBuf>,
    pub sft_template: Option<PathBuf>,
    pub sft_tokenizer: Option<PathBuf>,
    pub conversations_file: Option<PathBuf>,
    pub lock_path: PathBuf,
    /// The folder holding this suite's reviewed snapshots and latency baselines.
    pub snapshot_dir: PathBuf,
    pub replay_prompts: Option<PathBuf>,
    pub reference_model: Option<PathBuf>,
    pub client_recording: Option<PathBuf>,
    /// `[model] template_date`, parsed: the clock chat templates read offline.
    pub template_now: Option<chrono::NaiveDateTime>,
}

impl Suite {
    /// `[client] command`: the suite's own client, run through the SSE variants.
    pub fn client_command(&self) -> Option<&[String]> {
        self.file.client.as_ref()?.command.as_deref()
    }

    /// Whether the client relies on `feature` (one of [`CLIENT_FEATURES`]): the checks of it
    /// are then errors, else warnings.
    pub fn client_relies_on(&self, feature: &str) -> bool {
        match self.file.client.as_ref().and_then(|c| c.relies_on.as_ref()) {
            Some(list) => list.iter().any(|f| f == feature),
            None => matches!(feature, "reasoning" | "tool_calls"),
        }
    }

    pub fn load(path: &Path) -> Result<Suite> {
        let text = crate::error::read_to_string(path)?;
        let file: SuiteFile = toml::from_str(&text).map_err(|e| {
            Error::in_file(path, format!("invalid suite: {}", e.to_string().trim_end()))
                .hint("see suites/example.toml for every key and its type")
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        let resolve = |p: &PathBuf| {
            if p.is_absolute() {
                p.clone()
            } else {
                base.join(p)
            }
        };
        let stem = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("suite")
            .to_string();
        if let Some(sft) = &file.sft {
            match (&sft.golden, &sft.template) {
                (None, None) => {
                    return Err(Error::in_file(path, "[sft] needs `golden` (a JSONL of SFT ids) or `template` (the SFT chat template)"))
                }
                (Some(_), Some(_)) => {
                    return Err(Error::in_file(path, "[sft] takes either `golden` or `template`, not both")
                        .hint("a golden JSONL already carries the ids the SFT template produced"))
                }
                _ => {}
            }
        }
        validate(&file).map_err(|e| {
            Error::in_file(path, e).hint("see suites/example.toml for every key and its range")
        })?;
        for (key, ids) in [("strict", &file.server.strict), ("skip", &file.server.skip)] {
            for id in ids {
                crate::verdict::checks::known(id)
                    .map_err(|e| Error::in_file(path, format!("[server] {key}: {e}")))?;
            }
        }
        let template_now = match &file.model.template_date {
            None => None,
            Some(v) => Some(crate::clock::parse_pin(v).ok_or_else(|| {
                Error::in_file(path, format!("[model] template_date {v:?} is not a date"))
                    .hint("write it as \"YYYY-MM-DD\" (or \"YYYY-MM-DDTHH:MM:SS\", local time)")
            })?),
        };
        let sft = file.sft.as_ref();
        Ok(Suite {
            template_now,
            path: path.to_path_buf(),
            name: file.name.clone().unwrap_or_else(|| stem.clone()),
            model_dir: resolve(&file.model.dir),
            chat_template: file.model.chat_template.as_ref().map(resolve),
            sft_golden: sft.and_then(|s| s.golden.as_ref()).map(resolve),
            sft_template: sft.and_then(|s| s.template.as_ref()).map(resolve),
            sft_tokenizer: sft.and_then(|s| s.tokenizer.as_ref()).map(resolve),
            conversations_file: file.conversations_file.as_ref().map(resolve),
            lock_path: file
                .lock
                .path
                .as_ref()
                .map(resolve)
                .unwrap_or_else(|| base.join(format!("{stem}.lock.json"))),
            snapshot_dir: file
                .replay
                .as_ref()
                .and_then(|r| r.snapshots.as_ref())
                .map(resolve)
                .unwrap_or_else(|| {
                    base.join("snapshots")
                        .join(file.name.clone().unwrap_or_else(|| stem.clone()))
                }),
            replay_prompts: file.replay.as_ref().map(|r| resolve(&r.prompts)),
            reference_model: file
                .reference
                .as_ref()
                .and_then(|r| r.model.as_ref())
                .map(resolve),
            client_recording: file
                .client
                .as_ref()
                .and_then(|c| c.recording.as_ref())
                .map(resolve),
            file,
        })
    }
}

/// Values that name files or size work are checked before anything is built from them: a
/// suite name or baseline name becomes a folder or file name (never a path that escapes the
/// suite's folder), and counts and durations are finite, positive and within sane bounds (an
/// absurd repeat count or timeout must be an error, not an allocation abort or a panic).
fn validate(file: &SuiteFile) -> std::result::Result<(), String> {
    if let Some(r) = &file.reference {
        validate_reference(r)?;
    }
    let relies_on = file.client.as_ref().and_then(|c| c.relies_on.as_ref());
    if let Some(unknown) = relies_on
        .into_iter()
        .flatten()
        .find(|f| !CLIENT_FEATURES.contains(&f.as_str()))
    {
        return Err(format!(
            "[client] relies_on names {unknown:?}; it takes {}",
            CLIENT_FEATURES.join(", ")
        ));
    }
    let field = file
        .client
        .as_ref()
        .and_then(|c| c.reasoning_field.as_deref());
    if let Some(f) = field.filter(|f| !["reasoning_content", "reasoning"].contains(f)) {
        return Err(format!(
            "[client] reasoning_field is {f:?}; it takes \"reasoning_content\" or \"reasoning\""
        ));
    }
    if let Some(c) = &file.client {
        if c.command
            .as_ref()
            .is_some_and(|c| c.is_empty() || c[0].trim().is_empty())
        {
            return Err("[client] command is empty; give the program and its arguments, e.g. [\"python\", \"smoke_client.py\"]".into());
        }
        // The variant names are checked where they are known (chain::client_sse::validate),
        // when the gate starts, before anything runs.
        if c.command_timeout_s.is_some_and(|t| t == 0 || t > 3600) {
            return Err("[client] command_timeout_s must be 1 to 3600 seconds".into());
        }
        if c.command.is_none() && (c.sse_variants.is_some() || c.command_timeout_s.is_some()) {
            return Err("[client] sse_variants and command_timeout_s need [client] command: the client to run through them".into());
        }
    }
    let name_ok = |key: &str, v: &str| {
        if crate::files::valid_id(v) {
            Ok(())
        } else {
            Err(format!(
                "{key} {v:?} must be 1-100 letters, digits, '-', '_' or '.', not starting with '.' (it becomes a folder or file name)"
            ))
        }
    };
    if let Some(n) = &file.name {
        name_ok("name", n)?;
    }
    if let Some(b) = file.latency.as_ref().and_then(|l| l.baseline.as_ref()) {
        name_ok("[latency] baseline", b)?;
    }
    let seconds = |key: &str, v: Option<f64>| match v {
        Some(x) if !(x.is_finite() && x > 0.0 && x <= 86_400.0) => Err(format!(
            "[target] {key} must be a number of seconds above 0 and at most 86400, got {x}"
        )),
        _ => Ok(()),
    };
    if let Some(t) = &file.target {
        seconds("connect_timeout_s", t.connect_timeout_s)?;
        seconds("read_timeout_s", t.read_timeout_s)?;
        seconds("total_timeout_s", t.total_timeout_s)?;
        seconds("deadline_s", t.deadline_s)?;
        for (key, v) in [
            ("max_body_mb", t.max_body_mb),
            ("max_stream_mb", t.max_stream_mb),
            ("max_in_flight_mb", t.max_in_flight_mb),
        ] {
            if let Some(m) = v.filter(|m| !(1..=4096).contains(m)) {
                return Err(format!(
                    "[target] {key} must be between 1 and 4096 MiB, got {m}"
                ));
            }
        }
    }
    let count = |key: &str, v: Option<usize>, min: usize, max: usize| match v {
        Some(n) if n < min || n > max => {
            Err(format!("{key} must be between {min} and {max}, got {n}"))
        }
        _ => Ok(()),
    };
    let server = &file.server;
    count("[server] repeats", server.repeats, 1, 1_000)?;
    count("[server] concurrency", server.concurrency, 1, 10_000)?;
    count("[server] probes", server.probes, 0, 1_000)?;
    count("[server] sampled_runs", server.sampled_runs, 0, 10_000)?;
    count(
        "[server] long_prompt_tokens",
        server.long_prompt_tokens,
        0,
        10_000_000,
    )?;
    if let Some(a) = server
        .sampled_allowance
        .filter(|a| !(a.is_finite() && (0.0..1.0).contains(a)))
    {
        return Err(format!(
            "[server] sampled_allowance is the share of sampled parses allowed to fail: at least 0 and below 1, got {a}"
        ));
    }
    if let Some(r) = &file.reference {
        count(
            "[reference] long_reply_tokens",
            r.long_reply_tokens,
            0,
            1_000_000,
        )?;
    }
    if let Some(l) = &file.latency {
        count("[latency] repeats", l.repeats, 1, 100_000)?;
        count("[latency] concurrency", l.concurrency, 1, 100_000)?;
        count("[latency] warmup", l.warmup, 0, 100_000)?;
        count("[latency] bootstrap", l.bootstrap, 100, 1_000_000)?;
        let fraction = |key: &str, v: Option<f64>, open: bool| match v {
            Some(x) if !((0.0..=1.0).contains(&x) && (!open || (x > 0.0 && x < 1.0))) => {
                Err(format!("[latency] {key} must be between 0 and 1, got {x}"))
            }
            _ => Ok(()),
        };
        fraction("confidence", l.confidence, true)?;
        fraction("min_slo_attainment", l.min_slo_attainment, false)?;
        fraction("capacity_drop", l.capacity_drop, true)?;
        if let Some(t) = l
            .tolerance
            .filter(|t| !(t.is_finite() && *t >= 0.0 && *t <= 1_000.0))
        {
            return Err(format!(
                "[latency] tolerance must be between 0 and 1000, got {t}"
            ));
        }
        for ms in [l.min_regression_ms, l.slo].into_iter().flatten() {
            for v in [ms.ttft, ms.tpot, ms.e2el].into_iter().flatten() {
                if !(v.is_finite() && v >= 0.0) {
                    return Err(format!(
                        "[latency] milliseconds must be finite and ≥ 0, got {v}"
                    ));
                }
            }
        }
    }
    Ok(())
}

/// A golden SFT row: what the training pipeline fed the model.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GoldenRow {
    pub id: Option<String>,
    pub messages: Vec<Value>,
    pub tools: Option<Vec<Value>>,
    pub input_ids: Vec<u32>,
    pub assistant_mask: Option<Vec<u8>>,
}

/// Read extra conversations: a JSONL of {"id"?, "messages", "tools"?} rows.
pub fn read_conversations(path: &Path) -> Result<Vec<ConversationEntry>> {
    let text = crate::error::read_to_string(path)?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        out.push(serde_json::from_str(line).map_err(|e| {
            Error::in_file(path, format!("line {}: not a conversation: {e}", i + 1))
                .hint("each line is {\"id\": \"...\", \"messages\": [...], \"tools\": [...]} (id and tools optional)")
        })?);
    }
    Ok(out)
}

/// `[reference]` names one reference: a local `model` or a server `url`, with what each takes.
fn validate_reference(r: &ReferenceSection) -> std::result::Result<(), String> {
    use crate::stack::forcing::ForcingStack;
    match (&r.model, &r.url) {
        (None, None) => {
            return Err("[reference] needs `model` (a checkpoint run in-process) or `url` (a reference server that teacher-forces)".into())
        }
        (Some(_), Some(_)) => {
            return Err("[reference] takes either `model` or `url`, not both".into())
        }
        (Some(_), None) => {
            for (key, set) in [
                ("stack", r.stack.is_some()),
                ("served_model", r.served_model.is_some()),
                ("api_key_env", r.api_key_env.is_some()),
                ("quantization", r.quantization.is_some()),
            ] {
                if set {
                    return Err(format!("[reference] {key} is for a reference server (`url`); an in-process `model` reads what it needs from its files"));
                }
            }
        }
        (None, Some(url)) => {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(format!("[reference] url {url:?} is not an http(s) URL"));
            }
            if url.contains('@') {
                return Err("[reference] url carries credentials: put the key in an environment variable and name it with [reference] api_key_env".into());
            }
            if let Some(s) = &r.stack {
                if ForcingStack::parse(s).is_none() {
                    return Err(format!("[reference] stack {s:?} cannot teacher-force: it must be \"vllm\", \"sglang\", \"tgi\" or \"llama-server\" ({})", crate::stack::forcing::cannot_force("llama-cpp-python or transformers serve")));
                }
            }
        }
    }
    Ok(())
}
