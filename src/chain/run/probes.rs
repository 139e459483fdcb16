//! The probe pass against a server: the requests each probe sends, what they return, and how a reply's ids are recovered from what the server reports.
#[allow(unused_imports)]
use crate::verdict::checks;
use std::collections::BTreeMap;

use futures_util::future::join_all;
use serde_json::{json, Value};

use crate::chain::run::context::Context;
use crate::endpoint::local::CandleTarget;
use crate::endpoint::openai::{CallError, HttpTarget, RawResponse};
use crate::error::{Error, Result};
use crate::exchange::{ChatRequest, Record};
use crate::verdict::checks::Check;
use crate::verdict::{Finding, Severity};

/// The default open-ended prompt of the sampling probe.
pub const SAMPLING_PROMPT: &str = "Write a short story about a dragon who loves tea.";

/// A conversation the server boundary probes with (a replayed prompt, or a suite conversation).
#[derive(Debug, Clone)]
pub struct Probe {
    pub id: String,
    pub messages: Vec<Value>,
    pub tools: Option<Vec<Value>>,
}

/// How a prompt behaves at temperature 0 on this server (the peers' practice: classify before gating
/// on exact text).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Determinism {
    /// The same reply alone and under concurrent load.
    Deterministic,
    /// The same reply alone, another one under concurrent load (batching changes numerics).
    BatchVariant,
    /// Different replies to identical requests sent one at a time.
    Sampled,
}

impl Determinism {
    pub fn name(self) -> &'static str {
        match self {
            Determinism::Deterministic => "deterministic",
            Determinism::BatchVariant => "batch-variant",
            Determinism::Sampled => "sampled",
        }
    }
}

/// Settings of the probe pass.
#[derive(Debug, Clone)]
pub struct ProbeSettings {
    pub max_tokens: u32,
    /// Identical requests sent one after another (the first is the main reply).
    pub repeats: usize,
    /// Identical requests sent at once.
    pub concurrency: usize,
    pub seed: u64,
    pub top_logprobs: u8,
}

impl ProbeSettings {
    /// A probe's request: temperature 0, this seed, logprobs (the fingerprint, the ids behind
    /// usage and the stop set read them).
    pub fn request(&self, probe: &Probe, seed: u64, stream: bool) -> ChatRequest {
        ChatRequest {
            messages: probe.messages.clone(),
            tools: probe.tools.clone(),
            max_tokens: Some(self.max_tokens),
            temperature: Some(0.0),
            seed: Some(seed),
            top_logprobs: Some(self.top_logprobs),
            stream,
            ..ChatRequest::default()
        }
    }

    /// The same request without logprobs, for checks that read only the reply's text and
    /// fields: logprobs are not free on every stack (llama-cpp-python sorts the whole vocabulary
    /// in Python for every token it reports them for, 0.2–0.5 s a token at 150k–260k entries).
    pub fn request_text(&self, probe: &Probe, seed: u64, stream: bool) -> ChatRequest {
        ChatRequest {
            top_logprobs: None,
            ..self.request(probe, seed, stream)
        }
    }

    /// What a recording keeps of these settings (the main reply's request).
    pub fn recorded(&self) -> crate::chain::run::recording::ProbeRequest {
        crate::chain::run::recording::ProbeRequest {
            max_tokens: self.max_tokens,
            top_logprobs: self.top_logprobs,
            seed: self.seed,
        }
    }
}

/// Everything one probe's requests returned.
pub struct ProbeRun {
    pub probe: Probe,
    /// The local serving pipeline's ids for the prompt (add_generation_prompt).
    pub local_ids: Option<Vec<u32>>,
    /// The server's own ids for the same chat, when it can tell (vLLM /tokenize, TGI
    /// /chat_tokenize, llama.cpp /apply-template + /tokenize).
    pub server_ids: Option<Vec<u32>>,
    /// Why asking the server for those ids failed, when it offers a way and the request failed.
    pub server_ids_error: Option<String>,
    /// Same-seed temperature-0 replies sent one after another; `[0]` is the main reply.
    pub plain: Vec<std::result::Result<Record, CallError>>,
    /// The same request with another seed.
    pub other_seed: Option<std::result::Result<Record, CallError>>,
    /// The main request, streamed.
    pub streamed: Option<std::result::Result<Record, CallError>>,
    /// Identical requests sent concurrently.
    pub concurrent: Vec<std::result::Result<Record, CallError>>,
    /// The reference checkpoint's greedy reply, run locally on the same chat.
    pub reference: Option<Record>,
    /// Why the main reply was asked without logprobs, when it was: the probe pass's logprob
    /// budget was spent ([`PROBE_LOGPROB_BUDGET`]).
    pub without_logprobs: Option<String>,
    /// The day the server printed in this prompt when it is not the suite's (a template that
    /// prints the date): `local_ids` are then the render at that day.
    pub server_day: Option<chrono::NaiveDateTime>,
}

impl ProbeRun {
    pub fn main(&self) -> Option<&Record> {
        self.plain.first().and_then(|r| r.as_ref().ok())
    }
    /// The prompt ids the server is known to have used: its own tokenization, else the local
    /// render when usage.prompt_tokens agrees with it.
    pub fn confirmed_prompt(&self) -> Option<&[u32]> {
        if let Some(ids) = &self.server_ids {
            return Some(ids);
        }
        let local = self.local_ids.as_deref()?;
        let reported = self.main()?.usage?.prompt_tokens?;
        (reported as usize == local.len()).then_some(local)
    }
    /// How this prompt behaves at temperature 0.
    pub fn determinism(&self) -> Option<Determinism> {
        let texts: Vec<&str> = self
            .plain
            .iter()
            .filter_map(|r| r.as_ref().ok().map(|r| r.text.as_str()))
            .collect();
        let first = *texts.first()?;
        if texts.len() < 2 {
            return None;
        }
        if texts.iter().any(|t| *t != first) {
            return Some(Determinism::Sampled);
        }
        let under_load = self
            .concurrent
            .iter()
            .filter_map(|r| r.as_ref().ok())
            .any(|r| r.text != first);
        Some(if under_load {
            Determinism::BatchVariant
        } else {
            Determinism::Deterministic
        })
    }
}

/// One online judge: the checks it reports, and the function that judges them from the probe
/// pass. Each boundary lists its judges (`ONLINE`); the online driver runs them in chain order
/// and skips a judge whose every check the suite skips (its own requests are then not sent).
pub struct Judge {
    pub checks: &'static [&'static Check],
    pub run: JudgeFn,
}

/// A judge's function: one that reads the probe pass only, or one that sends requests of its
/// own (`max_tokens 2`, a stop string, bad requests, the reference's teacher forcing).
pub enum JudgeFn {
    Reads(fn(&Online<'_>, &Observed) -> Vec<Finding>),
    Sends(for<'a, 'b> fn(&'a Online<'b>, &'a Observed) -> Sending<'a>),
}

/// What a judge that sends requests returns.
pub type Sending<'a> = std::pin::Pin<Box<dyn std::future::Future<Output = Vec<Finding>> + 'a>>;

impl Judge {
    pub async fn run(&self, online: &Online<'_>, obs: &Observed) -> Vec<Finding> {
        match self.run {
            JudgeFn::Reads(f) => f(online, obs),
            JudgeFn::Sends(f) => f(online, obs).await,
        }
    }
}

/// The server's answers to the introspection and probe requests.
pub struct Observed {
    pub models: Option<Value>,
    pub health_status: Option<u16>,
    /// llama.cpp `/props`, when the server has it.
    pub props: Option<Value>,
    pub runs: Vec<ProbeRun>,
    /// The raw JSON of the first probe's non-streamed reply (schema check).
    pub raw_reply: Option<std::result::Result<Value, CallError>>,
    /// The open-ended sampling probe at temperature 0: seed A twice, then seeds B and C.
    pub sampling: Vec<std::result::Result<Record, CallError>>,
    pub sampling_prompt: String,
    /// Probe strings as the server's text tokenize endpoint splits them (none: no endpoint).
    pub text_ids: ServerTokens,
    /// What the serving template says of reasoning and tool calls (derived once per pass).
    pub framing: Option<crate::template::framing::Framing>,
    /// The replies to the request-field probes (`max_completion_tokens`, …).
    pub fields: FieldReplies,
    /// One probe sent to `/v1/responses` too (`server.responses-parity`).
    pub responses: Option<ResponsesReply>,
}

impl Observed {
    /// The context the server says it has: `max_model_len` in `/v1/models` (vLLM, chatgate
    /// serve), llama.cpp's `/props` `n_ctx`.
    pub fn served_context(&self) -> Option<usize> {
        let listed = self.models.as_ref().and_then(|m| {
            m.get("data")?
                .as_array()?
                .first()?
                .get("max_model_len")?
                .as_u64()
        });
        let props = self.props.as_ref().and_then(|p| {
            p.get("n_ctx")
                .or_else(|| p.get("default_generation_settings")?.get("n_ctx"))?
                .as_u64()
        });
        listed.or(props).map(|n| n as usize)
    }

    /// What logprobs cost this server per generated token: each probe's main reply (with
    /// them) against its repeat (the same greedy reply without them), the median over probes.
    /// None when no probe gave both.
    pub fn logprob_cost(&self) -> Option<std::time::Duration> {
        logprob_cost(&self.runs)
    }
}

/// The probes whose main reply always carries logprobs, whatever they cost: the fingerprint
/// needs at least two, and their cost is measured on them.
const LOGPROB_PROBES_AT_LEAST: usize = 2;

/// The most the main replies' logprobs may add to the probe pass beyond those probes' (at the
/// cost measured on them). llama-cpp-python sorts its whole vocabulary in Python for every token
/// it reports logprobs for: 0.4 s a token on Gemma 3's 262k entries, 10 s a 24-token probe.
pub const PROBE_LOGPROB_BUDGET: std::time::Duration = std::time::Duration::from_secs(10);

/// The time logprobs added to a run's main reply, and its generated tokens: against its first
/// repeat (the same greedy request without them). None for a main reply asked without them.
fn logprob_extra(run: &ProbeRun) -> Option<(std::time::Duration, u64)> {
    if run.without_logprobs.is_some() {
        return None;
    }
    let with = run.main()?;
    let without = run.plain.get(1)?.as_ref().ok()?;
    let tokens = with
        .usage
        .and_then(|u| u.completion_tokens)
        .or_else(|| with.logprobs.as_ref().map(|l| l.len() as u64))
        .filter(|&n| n > 0)?;
    Some((e2e(with).saturating_sub(e2e(without)), tokens))
}

/// What logprobs cost the server per generated token over these runs ([`Observed::logprob_cost`]).
fn logprob_cost(runs: &[ProbeRun]) -> Option<std::time::Duration> {
    let mut per_token: Vec<f64> = runs
        .iter()
        .filter_map(logprob_extra)
        .map(|(extra, tokens)| extra.as_secs_f64() / tokens as f64)
        .collect();
    per_token.sort_by(f64::total_cmp);
    // The lower middle of an even count: a cold server's first reply (a graph built, a
    // kernel compiled) must not make logprobs look dear on two probes.
    let median = *per_token.get(per_token.len().saturating_sub(1) / 2)?;
    Some(std::time::Duration::from_secs_f64(median))
}

/// Why the next probe's main reply goes without logprobs, when it does: past the first
/// [`LOGPROB_PROBES_AT_LEAST`] probes, when what logprobs added to the runs so far plus one
/// more reply of `max_tokens` at their measured cost exceeds [`PROBE_LOGPROB_BUDGET`].
fn logprob_budget_spent(runs: &[ProbeRun], max_tokens: u32) -> Option<String> {
    if runs.len() < LOGPROB_PROBES_AT_LEAST {
        return None;
    }
    let spent: std::time::Duration = runs.iter().filter_map(logprob_extra).map(|(d, _)| d).sum();
    let cost = logprob_cost(runs)?;
    let next = cost * max_tokens;
    (spent + next > PROBE_LOGPROB_BUDGET).then(|| {
        format!(
            "logprobs cost this server {} ms a token: the probes before it spent {:.1} s on them, and {} more tokens' worth would pass the {} s the probe pass allows",
            cost.as_millis(),
            spent.as_secs_f64(),
            max_tokens,
            PROBE_LOGPROB_BUDGET.as_secs()
        )
    })
}

fn e2e(r: &Record) -> std::time::Duration {
    r.timing.t_end.saturating_duration_since(r.timing.t_send)
}

/// What the online pass found, plus each probe's determinism class (the replay uses it).
pub struct OnlineResult {
    pub findings: Vec<Finding>,
    pub determinism: BTreeMap<String, Determinism>,
    /// The day the server was seen printing in its prompts, when not the suite's.
    pub server_day: Option<chrono::NaiveDate>,
    /// Where the online chain's time went: the probe pass, each boundary's own probes, each
    /// check that sends requests.
    pub steps: Vec<crate::verdict::PhaseTime>,
    /// A fail-fast run's state after the online chain (`gate --fail-fast`).
    pub fail_fast: Option<crate::chain::run::fail_fast::FailFast>,
}

/// The checkpoint the server's behaviour is compared with.
#[derive(Clone, Copy)]
pub enum Reference<'a> {
    /// Loaded in-process: it teacher-forces the server's own tokens.
    Local(&'a CandleTarget),
    /// Recorded where it fitted (`chatgate lock --fingerprint`): its greedy replies and top-k.
    Recorded(&'a crate::chain::run::recording::Recording),
    /// A known-good deployment (`[reference] url`): it teacher-forces the server's own tokens
    /// over HTTP, or, where its stack cannot, gives its greedy replies.
    Server(&'a crate::endpoint::reference::ReferenceServer),
}

/// Everything the online checks read.
pub struct Online<'a> {
    pub ctx: &'a Context,
    pub http: &'a HttpTarget,
    pub model: String,
    pub reference: Option<Reference<'a>>,
    pub settings: ProbeSettings,
    /// The clock the local predictions of the server's prompts render at: the suite's day when
    /// the server was sent it, today when the server prints its own date (a template that
    /// prints the date); None: the pipeline's own.
    pub local_now: Option<chrono::NaiveDateTime>,
}

impl Online<'_> {
    /// The recording of this probe, when it was recorded with these messages and this request.
    pub fn recorded<'r>(
        &self,
        rec: &'r crate::chain::run::recording::Recording,
        probe: &Probe,
    ) -> Option<&'r crate::chain::run::recording::RecordedProbe> {
        let p = rec.probe(&probe.id)?;
        let sha =
            crate::chain::run::recording::messages_sha256(&probe.messages, probe.tools.as_deref());
        (p.messages_sha256 == sha && rec.settings == self.settings.recorded()).then_some(p)
    }

    /// A reference token's text (the terminator a finding names).
    pub fn reference_token(&self, id: u32) -> String {
        match self.reference {
            Some(Reference::Local(r)) => r.decode_token(id),
            _ => self
                .ctx
                .serving
                .as_ref()
                .and_then(|s| s.tokenizer.decode(&[id], false).ok())
                .unwrap_or_default(),
        }
    }

    /// The probe request: temperature 0, fixed seed, logprobs. (Server-specific fields such as
    /// vLLM's `return_token_ids` come from the suite's `[target] extra_body`: strict servers
    /// refuse fields they do not know.)
    pub fn request(&self, probe: &Probe, seed: u64, stream: bool) -> ChatRequest {
        self.settings.request(probe, seed, stream)
    }

    /// The probe request without logprobs ([`ProbeSettings::request_text`]).
    pub fn request_text(&self, probe: &Probe, seed: u64, stream: bool) -> ChatRequest {
        self.settings.request_text(probe, seed, stream)
    }

    /// The probe pass the checkpoint, tokenizer and template boundaries read: the server's
    /// introspection routes, each probe's prompt ids (the server's tokenization), its greedy
    /// replies one after another (the main one with logprobs) and the reference's reply, and the
    /// template's framing. What only later boundaries read — each probe streamed, under
    /// another seed and sent concurrently, the raw reply and the sampling probe — is
    /// [`Online::gather_rest`], which a fail-fast run stopped before them never sends. The
    /// boundaries' own probes (the tokenize route, request fields, `/v1/responses`) are gathered
    /// by their boundary and handed over by the online driver (`run::online`). Err only when the
    /// server cannot be reached at all (exit 3).
    pub async fn gather(&self, probes: &[Probe]) -> Result<Observed> {
        let models = match self.http.get("/v1/models").await {
            Ok(r) => r.json,
            Err(e) if e.unreachable() => {
                return Err(
                    Error::unreachable(format!("the target does not answer: {e}")).hint(
                        "is the server running, and is --target / [target] url its base URL?",
                    ),
                )
            }
            Err(_) => None,
        };
        let health_status = self.http.get("/health").await.ok().map(|r| r.status);
        let props = match self.http.get("/props").await {
            Ok(r) if r.status == 200 => r.json,
            _ => None,
        };
        let mut runs = Vec::new();
        for probe in probes {
            let without_logprobs = logprob_budget_spent(&runs, self.settings.max_tokens);
            runs.push(self.run_probe(probe, without_logprobs).await);
        }
        let framing = self
            .ctx
            .serving
            .as_ref()
            .map(|s| crate::template::framing::derive(&s.template, &s.special));
        Ok(Observed {
            framing,
            fields: FieldReplies::default(),
            responses: None,
            models,
            health_status,
            props,
            runs,
            raw_reply: None,
            sampling: Vec::new(),
            sampling_prompt: self.sampling_prompt(),
            text_ids: ServerTokens::default(),
        })
    }

    /// The rest of the probe pass, read by the generation config's and the server's checks:
    /// each probe under another seed, streamed and sent concurrently, the first probe's raw
    /// reply, and the sampling probe. (Sent after every probe's greedy replies, where they were
    /// once interleaved: each request is judged on its own text and ids, so the order changes
    /// no verdict.)
    pub async fn gather_rest(&self, obs: &mut Observed) {
        for run in &mut obs.runs {
            self.run_probe_rest(run).await;
        }
        obs.raw_reply = match obs.runs.first() {
            Some(r) => Some(self.raw_reply(&r.probe).await),
            None => None,
        };
        // Skipped (`[server] skip`), the sampling check sends no probe either.
        if !self
            .ctx
            .suite
            .file
            .server
            .skips(checks::GENERATION_SAMPLING_HONOURED)
        {
            obs.sampling = self.sampling_probe(&obs.sampling_prompt).await;
        }
    }

    /// A probe's requests that its prompt ids and greedy replies need: the server's
    /// tokenization, the same-seed replies one after another, and the reference's reply.
    async fn run_probe(&self, probe: &Probe, without_logprobs: Option<String>) -> ProbeRun {
        let seed = self.settings.seed;
        let local_ids = self.local_ids(probe);
        let (server_ids, server_ids_error) = match self
            .http
            .tokenize_chat(&probe.messages, probe.tools.as_deref(), true)
            .await
        {
            Ok(ids) => (ids, None),
            Err(e) => (None, Some(e.to_string())),
        };
        // Logprobs where a check reads them: the main reply (the fingerprint, the ids behind
        // usage and the stop set) while the pass's budget for them lasts, and the streamed one
        // only when it differs from the main (the stop set then reads its ids). Repeats, another
        // seed and concurrent copies are judged on their text.
        let mut plain = Vec::new();
        for k in 0..self.settings.repeats.max(2) {
            let req = match k {
                0 if without_logprobs.is_none() => self.request(probe, seed, false),
                _ => self.request_text(probe, seed, false),
            };
            plain.push(self.http.chat(&req).await);
        }
        let reference = match self.reference {
            Some(Reference::Local(r)) => r.chat(&self.request(probe, seed, false)).await.ok(),
            Some(Reference::Recorded(rec)) => self.recorded(rec, probe).map(|p| p.record()),
            Some(Reference::Server(r)) => {
                self.server_reference_reply(r, probe, seed, local_ids.as_deref())
                    .await
            }
            None => None,
        };
        let reported = plain
            .first()
            .and_then(|r| r.as_ref().ok())
            .and_then(|r| r.usage?.prompt_tokens)
            .map(|n| n as usize);
        let (local_ids, server_day) =
            self.at_server_day(probe, local_ids, server_ids.as_deref(), reported);
        ProbeRun {
            probe: probe.clone(),
            local_ids,
            server_day,
            server_ids,
            server_ids_error,
            plain,
            other_seed: None,
            streamed: None,
            concurrent: Vec::new(),
            reference,
            without_logprobs,
        }
    }

    /// A probe's requests that only later boundaries read: the same request under another
    /// seed, streamed, and sent concurrently.
    async fn run_probe_rest(&self, run: &mut ProbeRun) {
        let (probe, seed) = (&run.probe, self.settings.seed);
        run.other_seed = Some(
            self.http
                .chat(&self.request_text(probe, seed + 1, false))
                .await,
        );
        run.streamed = Some(self.streamed(probe, seed, run.plain.first()).await);
        let req = self.request_text(probe, seed, false);
        run.concurrent =
            join_all((0..self.settings.concurrency.max(2)).map(|_| self.http.chat(&req))).await;
    }

    /// The main request streamed: without logprobs, which cost some stacks dearly
    /// (llama-cpp-python: 0.3 s a token on a 262k vocabulary), unless it differs from the main
    /// reply. Only then does a check read its tokens (the stop set, when the stream alone ran
    /// past the terminator), so it is asked again with them.
    async fn streamed(
        &self,
        probe: &Probe,
        seed: u64,
        main: Option<&std::result::Result<Record, CallError>>,
    ) -> std::result::Result<Record, CallError> {
        let text = self.http.chat(&self.request_text(probe, seed, true)).await;
        let same = |r: &Record| {
            main.and_then(|m| m.as_ref().ok())
                .is_some_and(|m| m.text == r.text && m.finish_reason == r.finish_reason)
        };
        match text {
            Ok(r) if !same(&r) => match self.http.chat(&self.request(probe, seed, true)).await {
                Ok(with) => Ok(with),
                Err(_) => Ok(r),
            },
            other => other,
        }
    }

    /// A reference server's temperature-0 reply on the same chat: over the local prompt ids
    /// where it teacher-forces (so its prompt is exactly the one predicted), else its own chat.
    async fn server_reference_reply(
        &self,
        r: &crate::endpoint::reference::ReferenceServer,
        probe: &Probe,
        seed: u64,
        local_ids: Option<&[u32]>,
    ) -> Option<Record> {
        if !r.forces() {
            return r.chat(&self.request(probe, seed, false)).await.ok();
        }
        let texts = |ids: &[u32]| self.decode(ids);
        r.greedy(local_ids?, self.settings.max_tokens, &texts)
            .await
            .ok()
    }

    /// Ids as text with the suite's tokenizer (special tokens kept).
    pub fn decode(&self, ids: &[u32]) -> Option<String> {
        self.ctx.serving.as_ref()?.tokenizer.decode(ids, false).ok()
    }

    /// An open-ended prompt at temperature 0 with the same seed twice, then two other seeds.
    /// Greedy decoding gives one reply whatever the seed; a server that samples anyway (it
    /// applies its own temperature over the request's) gives replies that follow the seed — and
    /// an open-ended prompt, unlike a trained answer, has many likely continuations to show it.
    async fn sampling_probe(&self, prompt: &str) -> Vec<std::result::Result<Record, CallError>> {
        let probe = Probe {
            id: "sampling-probe".into(),
            messages: vec![json!({"role": "user", "content": prompt})],
            tools: None,
        };
        let seed = self.settings.seed;
        let mut out = Vec::new();
        for s in [seed, seed, seed + 1, seed + 2] {
            let mut req = self.request_text(&probe, s, false);
            req.max_tokens = Some(32);
            out.push(self.http.chat(&req).await);
        }
        out
    }

    fn sampling_prompt(&self) -> String {
        self.ctx
            .suite
            .file
            .server
            .sampling_prompt
            .clone()
            .unwrap_or_else(|| SAMPLING_PROMPT.to_string())
    }

    /// A template that prints the date, on a server that prints its own: when the server's ids
    /// (or, without them, its prompt count) differ from the local render at the suite's day,
    /// the render at the day the server is on (today by the local clock or UTC, or a day on
    /// either side) that gives exactly them. The date span is then set aside, and the template
    /// checks compare the rest.
    fn at_server_day(
        &self,
        probe: &Probe,
        local: Option<Vec<u32>>,
        server_ids: Option<&[u32]>,
        reported: Option<usize>,
    ) -> (Option<Vec<u32>>, Option<chrono::NaiveDateTime>) {
        let (Some(p), Some(ids)) = (self.ctx.serving.as_ref(), local.as_ref()) else {
            return (local, None);
        };
        let differs = match (server_ids, reported) {
            (Some(s), _) => s != ids.as_slice(),
            (None, Some(n)) => n != ids.len(),
            (None, None) => false,
        };
        if !differs {
            return (local, None);
        }
        match crate::chain::run::dates::server_day(
            p,
            &self.ctx.dates,
            &probe.messages,
            probe.tools.as_deref(),
            server_ids,
            reported.filter(|_| server_ids.is_none()),
            self.local_now,
        ) {
            Some(d) => (Some(d.ids), Some(d.at)),
            None => (local, None),
        }
    }

    /// The local serving pipeline's prompt ids for `probe` (add_generation_prompt).
    pub fn local_ids(&self, probe: &Probe) -> Option<Vec<u32>> {
        let p = self.ctx.serving.as_ref()?;
        let r = p
            .render_at(
                &probe.messages,
                probe.tools.as_deref(),
                true,
                self.local_now.or(p.now),
            )
            .ok()?;
        p.ids(&r.text).ok()
    }

    /// The first probe's reply as raw JSON, for the response-schema check.
    async fn raw_reply(&self, probe: &Probe) -> std::result::Result<Value, CallError> {
        let body = json!({
            "model": self.model,
            "messages": probe.messages,
            "max_tokens": self.settings.max_tokens,
            "temperature": 0.0,
            "seed": self.settings.seed,
        });
        let r = self.http.post_json("/v1/chat/completions", &body).await?;
        if !(200..300).contains(&r.status) {
            return Err(CallError::Status {
                url: "/v1/chat/completions".into(),
                status: r.status,
                body: String::from_utf8_lossy(&r.body).chars().take(300).collect(),
            });
        }
        r.json.ok_or_else(|| CallError::Protocol {
            url: "/v1/chat/completions".into(),
            detail: format!("HTTP {} with a body that is not JSON", r.status),
        })
    }
}

/// The generated ids of a reply as the server reports them: its token ids, else its logprob
/// entries' ids, else their token strings mapped through the vocabulary. None when nothing
/// confirms them: re-tokenizing the reply's text is never a faithful way to recover ids (a
/// normalizer maps U+FA04 to U+5B85, a merge picks another split).
pub fn reply_ids(rec: &Record, online: &Online) -> Option<Vec<u32>> {
    // Entries that are not one per token give only the first ids, not the reply's.
    if rec.token_ids.is_none() && rec.logprobs.is_some() && rec.per_token_logprobs().is_none() {
        return None;
    }
    first_reply_ids(rec, online)
}

/// The reply's first generated ids as `reply_ids` finds them, up to the first logprob entry
/// that stands for several tokens (past it the positions are unknown). Enough for a
/// fingerprint, which reads a reply's first tokens; None when not even the first is known.
pub fn first_reply_ids(rec: &Record, online: &Online) -> Option<Vec<u32>> {
    if let Some(ids) = &rec.token_ids {
        return Some(ids.clone());
    }
    let lps = rec.logprobs.as_ref()?;
    let tok = online.ctx.serving.as_ref().map(|p| &p.tokenizer);
    let ids: Option<Vec<u32>> = lps
        .iter()
        .take_while(|l| !l.merged)
        .map(|l| l.id.or_else(|| tok.and_then(|t| vocab_id(t, &l.token))))
        .collect();
    ids.filter(|i| !i.is_empty() || lps.is_empty())
}

/// A logprob entry's token string as a vocabulary id: the piece itself, else its byte-level
/// (GPT-2) spelling for a byte-level tokenizer, or its SentencePiece spelling (`▁` for spaces,
/// `<0xNN>` for a byte) otherwise. Trying both spellings on one vocabulary would be wrong: a
/// SentencePiece vocabulary may hold `ď` as a piece, which byte-level spelling makes of 0x0F.
///
/// A SentencePiece text without a leading space is ambiguous when the vocabulary also has the
/// word-start piece (`con` and `▁con`): servers that decode one token alone (the decoder drops a
/// leading space) report both as "con". Then there is no id (the probe is unconfirmed) rather
/// than a guess that would make the reference look like another checkpoint.
pub fn vocab_id(tok: &tokenizers::Tokenizer, token: &str) -> Option<u32> {
    let byte_level = tok
        .get_decoder()
        .and_then(|d| serde_json::to_string(d).ok())
        .is_some_and(|d| d.contains("\"ByteLevel\""));
    if byte_level {
        // The byte-level spelling first: a character of the Latin-1 range is also a piece of
        // its own that stands for one byte (`É` is the byte 0xC9, while the text "É" is the
        // bytes C3 89, spelled `Ãī`), so looking the text up as it is finds another token.
        let spelled: String = token.bytes().map(byte_to_unicode).collect();
        return tok.token_to_id(&spelled).or_else(|| tok.token_to_id(token));
    }
    let spelled = token.replace(' ', "\u{2581}");
    let found = tok.token_to_id(token).or_else(|| tok.token_to_id(&spelled));
    let word_start = (!token.starts_with(' ') && !token.is_empty())
        .then(|| tok.token_to_id(&format!("\u{2581}{spelled}")))
        .flatten();
    match (found, word_start) {
        (Some(a), Some(b)) if a != b => None,
        (Some(a), _) => Some(a),
        (None, Some(b)) => Some(b),
        (None, None) => match token.as_bytes() {
            [b] => tok.token_to_id(&format!("<0x{b:02X}>")),
            _ => None,
        },
    }
}

/// GPT-2's `bytes_to_unicode`: printable Latin-1 bytes stand for themselves, the others are
/// shifted to U+0100 onwards.
pub(super) fn byte_to_unicode(b: u8) -> char {
    let printable = |b: u8| (b'!'..=b'~').contains(&b) || (0xA1..=0xAC).contains(&b) || b >= 0xAE;
    if printable(b) {
        return char::from(b);
    }
    let shifted = (0..b).filter(|&x| !printable(x)).count() as u32;
    char::from_u32(0x100 + shifted).unwrap_or('?')
}

/// Whether a stream-parity error (the streamed reply parsed differently from the whole one) may
/// replace the finding the replies gave on their own: only when that finding says less — a pass,
/// or a warning where parity breaks at error severity. A broken parse already reported stays.
pub fn parity_may_replace(found: Severity, parity: Severity) -> bool {
    found == Severity::Pass || found == Severity::Warning && parity == Severity::Error
}

/// A short, single-line rendering of a reply for evidence.
pub fn show(text: &str) -> String {
    let t: String = text.chars().take(80).collect();
    if text.chars().count() > 80 {
        format!("{t:?}…")
    } else {
        format!("{t:?}")
    }
}

#[cfg(test)]
mod vocab_id_tests {
    use crate::chain::run::probes::vocab_id;
    use std::collections::HashMap;
    use std::path::Path;

    fn load(rel: &str) -> tokenizers::Tokenizer {
        tokenizers::Tokenizer::from_file(Path::new(env!("CARGO_MANIFEST_DIR")).join(rel))
            .expect("tokenizer")
    }

    /// Every token's text as a server reports it maps back to its own id, where the text is
    /// not shared with another token (then no mapping can tell them apart).
    fn maps_back(tok: &tokenizers::Tokenizer, text_of: impl Fn(u32, &str) -> String) -> usize {
        let vocab = tok.get_vocab(false);
        let texts: Vec<(u32, String)> = vocab
            .iter()
            .map(|(piece, &id)| (id, text_of(id, piece)))
            .collect();
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for (_, t) in &texts {
            *seen.entry(t.as_str()).or_default() += 1;
        }
        let mut checked = 0;
        let byte_level = tok
            .get_decoder()
            .and_then(|d| serde_json::to_string(d).ok())
            .is_some_and(|d| d.contains("\"ByteLevel\""));
        for (id, text) in &texts {
            if seen[text.as_str()] > 1 || text.contains('\u{fffd}') || text.is_empty() {
                continue;
            }
            // A SentencePiece continuation piece whose word-start twin exists is ambiguous.
            let twin = format!("\u{2581}{}", text.replace(' ', "\u{2581}"));
            if !byte_level
                && !text.starts_with(' ')
                && tok.token_to_id(&twin).is_some_and(|t| t != *id)
            {
                assert_eq!(vocab_id(tok, text), None, "{text:?} is ambiguous");
                continue;
            }
            assert_eq!(vocab_id(tok, text), Some(*id), "{text:?}");
            checked += 1;
        }
        checked
    }

    #[test]
    fn byte_level_token_texts_map_to_their_ids() {
        let tok = load("models/tiny-chat/tokenizer.json");
        let n = maps_back(&tok, |id, _| tok.decode(&[id], false).unwrap_or_default());
        assert!(n > 300, "{n}");
        // Real vocabularies, whose Latin-1 byte pieces (`É` = the byte 0xC9) look like the text
        // of other tokens (`Ãī` decodes to "É"): the whole vocabulary maps back.
        for (file, at_least) in [
            (
                "tests/corpus/models/SmolLM2-135M-Instruct/tokenizer.json",
                45_000,
            ),
            (
                "tests/corpus/models/Qwen2.5-0.5B-Instruct/tokenizer.json",
                140_000,
            ),
        ] {
            let tok = load(file);
            let n = maps_back(&tok, |id, _| tok.decode(&[id], false).unwrap_or_default());
            assert!(n > at_least, "{file}: {n}");
            let e_acute = tok.encode("É", false).unwrap().get_ids().to_vec();
            assert_eq!(e_acute.len(), 1, "{file}");
            assert_eq!(vocab_id(&tok, "É"), Some(e_acute[0]), "{file}");
        }
    }

    #[test]
    fn sentencepiece_token_texts_map_to_their_ids() {
        let tok = load("tests/corpus/models/TinyLlama-1.1B-Chat-v1.0/tokenizer.json");
        // A server reports `▁Hello` as " Hello"; byte-fallback pieces as their byte.
        let n = maps_back(&tok, |_, piece| {
            if piece.starts_with("<0x") && piece.len() == 6 {
                u8::from_str_radix(&piece[3..5], 16)
                    .ok()
                    .filter(u8::is_ascii)
                    .map(|b| char::from(b).to_string())
                    .unwrap_or_default()
            } else {
                piece.replace('\u{2581}', " ")
            }
        });
        assert!(n > 25_000, "{n}");
    }
}

// What the boundaries' own probes gathered (each boundary fills its part; the online driver
// hands them over in `Observed`).

/// A probe's reply, or why it failed.
pub type Reply = Result<Record, CallError>;

/// A `chat_template_kwargs` switch: the variable and the value sent.
pub type Switch = (String, Value);

/// The replies to the field probes.
#[derive(Default)]
pub struct FieldReplies {
    /// The first probe with `max_completion_tokens` and no `max_tokens`.
    pub max_completion: Option<(String, Reply)>,
    /// When that failed: the same budget as `max_tokens`, to tell a field the server refuses
    /// from a reply cut where the server fails whichever field cut it.
    pub max_tokens_control: Option<Reply>,
    /// The first probe with `chat_template_kwargs` set to the template's first switch.
    pub kwargs: Option<(String, Switch, Reply)>,
    /// The first probe that offers tools, with `tool_choice: "none"`.
    pub tool_choice_none: Option<(String, Reply)>,
    /// The same probe with [`NAMED`] added to its tools and named in `tool_choice`.
    pub tool_choice_named: Option<(String, Reply)>,
    /// The same probe's tools after [`GREETING`], with `tool_choice: "required"`.
    pub tool_choice_required: Option<(String, Reply)>,
    /// The first probe with `response_format` set to [`schema`].
    pub response_format: Option<(String, Reply)>,
    /// The first probe that offers tools, cut at [`TOOL_CUT_TOKENS`]: where the model calls, the
    /// reply ends inside its call (`server.tool-call-parse` reads it).
    pub tool_cut: Option<(String, Reply)>,
}

/// What `/v1/responses` answered the probe: plain, and streamed (sent only when the plain reply
/// was one to compare with).
pub struct ResponsesReply {
    pub probe: String,
    pub plain: Result<RawResponse, CallError>,
    pub streamed: Option<Result<RawResponse, CallError>>,
}

/// (text, ids the server returned) per probe string, and whether the server added special
/// tokens (llama-cpp-python's endpoint always does). Empty: the server has no endpoint.
#[derive(Debug, Default)]
pub struct ServerTokens {
    pub add_special: bool,
    pub ids: Vec<(String, Result<Vec<u32>, CallError>)>,
}

/// Probe runs built from timings, for the tests of what reads them.
#[cfg(test)]
pub(crate) mod test_runs {
    use super::*;
    use crate::exchange::Usage;
    use std::time::{Duration, Instant};

    /// A reply of `tokens` tokens that took `ms`.
    pub(crate) fn reply(ms: u64, tokens: u64) -> std::result::Result<Record, CallError> {
        let mut r = Record::new();
        let t0 = Instant::now();
        r.timing.t_send = t0;
        r.timing.t_end = t0 + Duration::from_millis(ms);
        r.usage = Some(Usage {
            completion_tokens: Some(tokens),
            ..Usage::default()
        });
        Ok(r)
    }

    /// A probe whose main reply (24 tokens) took `with_ms`, and its repeat `without_ms`.
    pub(crate) fn run(with_ms: u64, without_ms: u64) -> ProbeRun {
        ProbeRun {
            probe: Probe {
                id: "p".into(),
                messages: Vec::new(),
                tools: None,
            },
            local_ids: None,
            server_day: None,
            server_ids: None,
            server_ids_error: None,
            plain: vec![reply(with_ms, 24), reply(without_ms, 24)],
            other_seed: None,
            streamed: None,
            concurrent: Vec::new(),
            reference: None,
            without_logprobs: None,
        }
    }

    pub(crate) fn observed(runs: Vec<ProbeRun>) -> Observed {
        Observed {
            models: None,
            health_status: None,
            props: None,
            runs,
            raw_reply: None,
            sampling: Vec::new(),
            sampling_prompt: String::new(),
            text_ids: ServerTokens::default(),
            framing: None,
            fields: FieldReplies::default(),
            responses: None,
        }
    }
}

#[cfg(test)]
mod logprob_cost_tests {
    use super::test_runs::{observed, run};
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_cost_is_the_median_extra_time_per_token_of_the_reply_with_logprobs() {
        // llama-cpp-python on Gemma 3's 262k vocabulary: 24 tokens in 10.2 s with logprobs,
        // 0.8 s without; one probe disturbed by other work on the machine.
        let obs = observed(vec![run(10_200, 800), run(10_400, 1_000), run(30_000, 900)]);
        let cost = obs.logprob_cost().unwrap();
        assert_eq!(cost.as_millis(), 391, "(10400 - 1000) / 24, the median");
        // Logprobs that cost nothing (vLLM): none, never a negative figure.
        let free = observed(vec![run(800, 900)]);
        assert_eq!(free.logprob_cost(), Some(Duration::ZERO));
        // Two probes, the first slowed by a cold start: the cheaper one.
        let cold = observed(vec![run(4_000, 800), run(1_000, 900)]);
        assert_eq!(
            cold.logprob_cost().unwrap().as_millis(),
            4,
            "(1000 - 900) / 24"
        );
        // No repeat to compare with: unknown.
        let mut lone = run(10_000, 800);
        lone.plain.truncate(1);
        assert_eq!(observed(vec![lone]).logprob_cost(), None);
        // A main reply asked without logprobs tells nothing of their cost.
        let mut text_only = run(800, 900);
        text_only.without_logprobs = Some("budget".into());
        let obs = observed(vec![run(10_200, 800), text_only]);
        assert_eq!(obs.logprob_cost().unwrap().as_millis(), 391);
    }

    #[test]
    fn later_probes_go_without_logprobs_once_they_would_pass_the_budget() {
        // Gemma 3 on llama-cpp-python: 9.4 s of logprobs a probe. The first two probes carry
        // them whatever they cost; a third would bring them to 28 s.
        let dear = [run(10_200, 800), run(10_400, 1_000)];
        assert_eq!(logprob_budget_spent(&dear[..1], 24), None);
        let why = logprob_budget_spent(&dear, 24).expect("over the budget");
        assert!(
            why.starts_with("logprobs cost this server 391 ms a token: the probes before it spent 18.8 s on them"),
            "{why}"
        );
        // A 49k vocabulary on the same stack: 1.7 s a probe, four probes fit in 10 s.
        let cheap: Vec<ProbeRun> = (0..3).map(|_| run(2_500, 800)).collect();
        assert_eq!(logprob_budget_spent(&cheap, 24), None);
        // Free logprobs (vLLM) never run out.
        let free: Vec<ProbeRun> = (0..8).map(|_| run(800, 900)).collect();
        assert_eq!(logprob_budget_spent(&free, 24), None);
    }
}
