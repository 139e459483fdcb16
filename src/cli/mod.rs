//! The command line: one file per subcommand; this file holds the clap definitions and maps
//! outcomes to the exit-code contract (0 pass, 1 regression, 2 bad input, 3 unreachable).
pub mod bench;
pub mod capacity;
mod check;
pub mod client_probe;
pub mod docs;
mod example;
pub mod gate;
pub mod history;
mod init;
mod inspect;
pub mod merge;
mod output;
pub mod proxy;
pub mod parse_reply;
pub mod render;
mod serve;
pub mod snapshots;
mod standin;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::error::Result;

#[derive(Parser)]
#[command(
    name = "chatgate",
    version,
    about = "A pre-deploy gate for chat models: tests the serving chain one boundary at a time",
    long_about = "chatgate tests the chain a served chat model runs through — checkpoint → tokenizer → \
chat template → generation config — one boundary at a time, and names the FIRST boundary that broke.\n\n\
Exit codes: 0 pass, 1 a regression was found, 2 bad input (the message names the file), 3 target unreachable.",
    after_help = "Start here:\n  chatgate example demo                            a suite, a tiny model and its snapshots\n  \
chatgate gate demo/suites/smoke.toml             the whole gate on them\n  \
chatgate init my.toml --model DIR --target URL   a suite for your own model and server\n  \
chatgate inspect DIR                             what a model directory ships\n  \
chatgate render --model DIR --messages chat.json show exactly what the model is fed\n\n\
Docs: https://github.com/chatgate/chatgate/tree/main/docs (each subcommand's --help names its page)"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Render a conversation with a chat template exactly as transformers' apply_chat_template does, and tokenize it.
    #[command(
        long_about = "Render a conversation exactly as transformers' `apply_chat_template(tokenize=False)` does \
(transformers 5 semantics), then tokenize the text with tokenizer.json and add_special_tokens=false — the ids a \
vLLM/SGLang chat endpoint feeds the model.\n\n\
The messages file is a JSON list of messages, or an object {\"messages\": [...], \"tools\": [...]}.\n\
A template that fails to parse, raises (raise_exception) or runs out of fuel exits 2 with the template's own message."
    )]
    Render(RenderArgs),
    /// Read a completion as a correct server must: reasoning, content and typed tool calls, by the template's own framing.
    #[command(
        name = "parse-reply",
        long_about = "Read a completion — the text the model wrote after the generation prompt, special tokens spelled out — the way a correct OpenAI-compatible server must turn it into a message: the reasoning split off, the tool calls read in the framing the chat template writes them (Hermes JSON, Llama 3.x JSON, Mistral's [TOOL_CALLS] array and [ARGS] forms, Qwen3-Coder XML, GLM arg_key/arg_value, Kimi-K2, DeepSeek V3/V3.1/V3.2, MiniMax-M2, Gemma 4, gpt-oss harmony), their arguments typed by the tools' JSON schemas the way the family's reference parser types them.\n\nThe framing comes from the template (its markers and a render of a probe call), never from the model's name.\n\nPrints {\"content\", \"reasoning_content\", \"tool_calls\": [{\"name\", \"arguments\"}]} with --format json, plus how it read it and notes (where the schema was silent, a call cut off by the token limit).\n\nExit 0: read. Exit 1: part of the completion cannot be read (where and why are printed). Exit 2: bad input.",
        after_help = "Example:\n  chatgate parse-reply --model DIR --text reply.txt --tools tools.json --format json\n  \
printf '<tool_call>\\n{\"name\": \"f\", \"arguments\": {}}\\n</tool_call>' | chatgate parse-reply --template t.jinja --text -"
    )]
    ParseReply(ParseReplyArgs),
    /// Show what a model directory (or GGUF file) ships: weights identity, tokenizer, templates, generation config.
    #[command(
        long_about = "Show what a model directory (Hugging Face layout) or a GGUF file ships: content hashes of \
the weights (per file and in total), a config summary, the tokenizer (file hash, semantic fingerprint over a fixed probe \
corpus, vocab size, special tokens with ids, model type, pre-tokenizer), which chat template wins and what it can do, the \
generation config, and consistency findings across the files."
    )]
    Inspect(InspectArgs),
    /// Run the offline chain of a suite: checkpoint → tokenizer → template → generation config.
    #[command(
        long_about = "Run the offline boundaries of a suite (see suites/example.toml) and print the findings in \
chain order, each with a check id, severity, message and evidence.\n\n\
Exit 0: no error finding. Exit 1: at least one error finding (the report names the first broken boundary). Exit 2: bad input."
    )]
    Check(CheckArgs),
    /// Pin the identity of the suite's checkpoint, tokenizer and template in its lock file.
    #[command(
        long_about = "Hash the weights, fingerprint the tokenizer and hash the serving template, and write them to \
the suite's lock file (default: <suite>.lock.json beside the suite). The write is atomic. An existing lock that differs \
is only replaced with --update; the differences are printed either way.\n\n\
With --fingerprint it also records the reference once, where it fits: the suite's [reference] model (else its \
[model] dir) answers the gate's probes in-process, and its prompt ids, greedy replies and top-5 logprobs go to \
<suite>.fingerprint.json beside the lock, bound to the lock's hashes. Commit it: the gate then fingerprints a \
server against the recording, and the machine that runs the gate needs no weights at all (a model directory \
with only config, tokenizer and template files). A recording that no longer matches the lock is refused."
    )]
    Lock(LockArgs),
    /// Serve the model over an OpenAI-compatible HTTP API, optionally with faults injected on purpose.
    #[command(
        long_about = "Serve a model directory (or .gguf file) with the in-process candle model over an \
OpenAI-compatible HTTP API: GET /health, GET /v1/models, POST /v1/chat/completions and POST /v1/completions \
(plain and SSE-streamed, with stream_options.include_usage, logprobs and vLLM's return_token_ids), and vLLM's \
POST /tokenize and POST /detokenize. Binds 127.0.0.1:8000 unless told otherwise; --port 0 picks a free port. \
Once ready it prints one line `listening on http://HOST:PORT` to stdout. SIGINT/SIGTERM shut it down gracefully.\n\n\
Requests without sampling fields get OpenAI's neutral defaults (temperature 1.0, top_p 1.0), not \
generation_config.json's; max_tokens defaults to the remaining context. Bad requests get 4xx with an OpenAI \
error body. One request generates at a time; the others queue.\n\n\
--fault NAME reproduces a server-side class of the bug zoo on purpose, so a gate can prove it catches it; \
each fault changes exactly what it says and nothing else.",
        after_help = crate::serve::FAULTS_HELP
    )]
    Serve(serve::ServeArgs),
    /// The pre-deploy gate: offline chain, online chain, replay against snapshots, latency; one report.
    #[command(
        long_about = "Run a suite's whole gate and print one report ordered by boundary:
  1. the offline chain (checkpoint → tokenizer → template → generation config, as `chatgate check`);
  2. the online chain when the target is a server: what it says it serves and a behavioural fingerprint against the [reference] checkpoint, its own prompt ids vs the local render, stops and sampling as it applies them, and its API (schemas, SSE and [DONE], usage, stream parity, determinism alone and under load, max_tokens, stop, bad requests);
  3. the replay: [replay] prompts against the target, compared with the reviewed snapshots under snapshots/<suite>/ (a change is written as .snap.new beside the accepted file, never over it);
  4. latency ([latency]): TTFT, TPOT, ITL, E2EL… as docs/design/METRICS.md defines them, against the stored baseline, noise-aware.

The report names the FIRST broken boundary and the downstream symptoms it may explain.
Exit 0 pass, 1 regression, 2 bad input, 3 target unreachable or timed out.",
        after_help = "Examples:
  chatgate gate suites/smoke.toml                                   the embedded model in-process
  chatgate gate suites/smoke.toml --target http://127.0.0.1:8000    a running server
  chatgate gate suites/smoke.toml --markdown \"$GITHUB_STEP_SUMMARY\" --junit gate.xml
  chatgate review suites/smoke.toml                                 then review what changed
  chatgate gate suites/smoke.toml --history runs                   a record per run; then chatgate history runs
  chatgate gate suites/smoke.toml --format sarif > gate.sarif       for code scanning (upload-sarif)
  chatgate gate suites/smoke.toml --fail-fast                       a red build sooner: stop at the first broken boundary
  chatgate gate suites/smoke.toml --shard 2/3 --part part-2.json    one runner's share; then chatgate merge"
    )]
    Gate(gate::GateArgs),
    /// Merge the parts of a sharded gate run into the report one unsharded run gives.
    #[command(
        long_about = "Merge the parts `chatgate gate SUITE --shard K/N --part FILE` wrote on N runners into one \
report: the same verdict, findings, snapshot results and latency figures an unsharded run of the same work gives. \
The replay verdict and every latency percentile and verdict are recomputed from all shards' prompt results and raw \
samples (never averaged percentiles); the offline and online chains come from shard 1, which ran them.\n\n\
Every shard 1..N must be there exactly once, from one run (same suite file bytes, target, prompts and chatgate \
version); anything else is refused by name (exit 2). The suite file the parts name is read for its [latency] and \
[server] settings (--suite when the merge runs elsewhere). Exit codes as for gate.\n\n\
The parts of a sharded `bench --mode load --shard K/N --part FILE` merge the same way into bench's own output \
(--format text or json): the whole schedule's figures from every shard's raw samples.",
        after_help = "Example (a CI matrix of 3 runners, then one merge job):\n  \
chatgate gate suites/smoke.toml --shard 1/3 --part part-1.json   # on runner 1 (2/3, 3/3 on the others)\n  \
chatgate merge part-*.json --junit gate.xml --markdown \"$GITHUB_STEP_SUMMARY\"\n\n\
Workflows: .github/workflows/chatgate-sharded.yml, examples/k8s/chatgate-indexed-job.yaml"
    )]
    Merge(merge::MergeArgs),
    /// Latency on its own: smoke (closed loop vs the baseline) or load (open loop, seeded arrivals).
    #[command(
        long_about = "Measure latency as docs/design/METRICS.md defines it (TTFT, TTFC, TPOT, ITL, ICL, E2EL, NTPOT, \
throughput, goodput; numpy-linear percentiles), with the client's own overhead reported.\n\n\
--mode smoke: the suite's [replay] prompts, streamed, in a closed loop at [latency] concurrency, R repeats \
after a warm-up, compared noise-aware with the baseline in snapshots/<suite>/latency/<target kind>.json \
(--update records it). Exit 1 on a regression.\n\n\
--mode load: an open loop — request i starts at its scheduled time whatever the earlier ones are doing \
(constant, Poisson or gamma gaps at --rate, seeded, the schedule saved with --save). TTFT is also measured \
from the scheduled time (ttft_sched), and the drift between scheduled and actual sends is reported, so a \
client that falls behind cannot hide server latency. Exit 1 when requests fail or SLO attainment is below \
[latency] min_slo_attainment.\n\n\
--mode capacity: the highest open-loop rate at which [latency] min_slo_attainment (default 0.9) of the \
requests meet every [latency] slo. Doubles the rate from --rate while steps pass, bisects the bracket to \
--resolution, runs both ends --repeats times, all within --budget seconds; a step whose latency climbs \
through it (a growing queue) is saturated and fails. Reports the capacity as an interval, the knee of \
latency vs rate, and the server's own /metrics (queue, running, KV cache, counts) beside the client's. \
--save keeps the search; --baseline compares with a saved one: PASS, REGRESSION (exit 1) or INCONCLUSIVE \
(the intervals straddle [latency] capacity_drop; [latency] inconclusive = \"fail\" makes it exit 1), \
with what would decide it. --html draws the curves.",
        after_help = "Examples:\n  chatgate bench suites/smoke.toml --target http://127.0.0.1:8000\n  \
chatgate bench suites/smoke.toml --target http://127.0.0.1:8000 --mode load --rate 20 --arrival gamma --shape 0.5 --save load.json\n  \
chatgate bench suites/smoke.toml --target URL --mode load --rate 400 --requests 20000 --shard 2/4 --part load-2.json   # one of 4 load generators\n  \
chatgate merge load-*.json                                            # the whole schedule's figures\n  \
chatgate bench suites/smoke.toml --target URL --mode capacity --arrival constant --save capacity.json --html capacity.html\n  \
chatgate bench suites/smoke.toml --target URL --mode capacity --arrival constant --baseline capacity.json   # PASS, REGRESSION or INCONCLUSIVE"
    )]
    Bench(bench::BenchArgs),
    /// Results over time: the runs a history folder holds, latency trends, the first run each check failed in.
    #[command(
        long_about = "Read the records that `chatgate gate`, `chatgate merge` and `chatgate bench` appended with \
--history DIR (one line per run in DIR/<suite>.jsonl: verdict, each check's outcome, latency percentiles, the lock's \
identities, the commit) and print, per suite: the runs (time, commit, verdict, first broken boundary, TTFT and E2EL \
medians), how each latency median moved from the first run shown to the last, and for every check that failed the \
FIRST run it failed in and whether it is failing still — and since which run.\n\n\
Keep DIR where runs outlive the CI job: a cache keyed per branch, or a branch of its own. Records are only ever \
appended (one write per record), so concurrent jobs and killed runs never lose earlier ones. A damaged line is an \
error naming the file and line (exit 2), never skipped in silence.\n\n\
--html FILE writes a self-contained page (no network): latency over runs (a point per run, its commit and time \
in the point's tooltip) and the table of checks with their first failing run.",
        after_help = "Examples:\n  chatgate gate suites/smoke.toml --history .chatgate-history\n  \
chatgate history .chatgate-history                         the trend of every suite\n  \
chatgate history .chatgate-history --suite smoke --last 20 --html trend.html\n  \
chatgate history .chatgate-history --format json            for dashboards"
    )]
    History(history::HistoryArgs),
    /// Review pending snapshots one by one: accept, reject or skip, with a coloured diff.
    Review(snapshots::ReviewArgs),
    /// Accept pending snapshots (.snap.new → .snap), all of a suite's or the named prompts'.
    Accept(snapshots::AcceptArgs),
    /// Reject pending snapshots (delete .snap.new), all of a suite's or the named prompts'.
    Reject(snapshots::RejectArgs),
    /// Sit between a real client and the server: record both sides, or send the client hostile-but-legal SSE.
    Proxy(proxy::ProxyArgs),
    /// Run your own client through each hostile-but-legal SSE variant and name the ones that break it.
    ClientProbe(client_probe::ClientProbeArgs),
    /// Build a tiny random-weight model that carries a real model's tokenizer, templates and special tokens.
    #[command(
        long_about = "Build a stand-in: a tiny model with random weights (default 2 layers, 64 wide; the same \
seed gives the same bytes) that carries the real model's exact tokenizer, chat templates, special tokens and \
generation config, so the whole serving chain — tokenizer, template, special tokens, stop set, API — can be gated \
on any CPU in seconds, before a GPU deploy.\n\n\
From DIR (tokenizer.json required; config.json, tokenizer_config.json, chat_template.jinja, \
special_tokens_map.json, generation_config.json used when present) it writes OUT with those files copied byte \
for byte, a tiny config.json (the source's model_type: llama, mistral, qwen2, qwen3, phi3, gemma2, gemma3_text, smollm3, \
granite, olmo2 or glm4; another \
model_type stands in as the first of these for which transformers picks the same tokenizer class, and the report \
says so), model.safetensors, and \
model.gguf — the same weights with the tokenizer metadata llama.cpp's converter writes for the real model \
(tokens, types, merges or scores, pre-tokenizer, bos/eos ids, add_bos, chat template), for llama.cpp servers.\n\n\
The weights are shaped so greedy replies are words and some end with the template's turn terminator.",
        after_help = "Examples:\n  chatgate standin --from ~/models/Qwen2.5-0.5B-Instruct --out target/standins/qwen\n  \
chatgate serve --model target/standins/qwen --port 8000        then gate it like the real model"
    )]
    Standin(standin::StandinArgs),
    /// Write a working suite for a model: the suite file, replay prompts, SFT golden rows and the lock.
    #[command(
        long_about = "Write a suite that gates MODEL beside SUITE.toml: the suite (every key commented), \
<name>.prompts.jsonl (the SFT file's first user turns, else a built-in set: single and multi-turn, a system prompt \
when the template takes one, a stop string, a seeded sampled prompt), <name>.sft.jsonl (your trainer's rows when \
--sft carries input_ids; otherwise rendered the way transformers renders them, and the suite says so), and \
<name>.lock.json. Then `chatgate gate SUITE.toml --update` records snapshots and the latency baseline, and \
`chatgate gate SUITE.toml` gates. An existing suite is never overwritten.",
        after_help = "Examples:\n  chatgate init suites/qwen.toml --model ~/models/Qwen2.5-0.5B-Instruct\n  \
chatgate init suites/qwen.toml --model ~/models/qwen --target http://127.0.0.1:8000 --sft train.jsonl"
    )]
    Init(init::InitArgs),
    /// Write a working example project (suite, tiny model, lock, reviewed snapshots) to try the gate on.
    #[command(
        long_about = "Write the smoke suite chatgate's own CI gates, with everything it reads, into DIR: \
suites/smoke.toml with its lock and prompts, the tiny trained chat model models/tiny-chat (safetensors and GGUF \
weights, tokenizer, chat template, its SFT rows), and its reviewed snapshots and latency baseline under \
snapshots/smoke. The files are carried inside the binary, so an install from a wheel, crates.io or a release \
archive can run a whole gate without a clone. Nothing is written when any of the files already exists.",
        after_help = "Example:\n  chatgate example demo\n  chatgate gate demo/suites/smoke.toml\n  \
chatgate serve --model demo/models/tiny-chat --port 8000 &\n  \
chatgate gate demo/suites/smoke.toml --target http://127.0.0.1:8000"
    )]
    Example(ExampleArgs),
}

#[derive(Args)]
pub struct ExampleArgs {
    /// Where to write the example project (created if missing; existing files are never replaced).
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
}

#[derive(Clone, Copy, Debug, Default, ValueEnum, PartialEq, Eq)]
pub enum Format {
    /// Human-readable (colour only on a terminal).
    #[default]
    Text,
    /// One JSON document on stdout.
    Json,
}

#[derive(Args)]
pub struct RenderArgs {
    /// Model directory (or .gguf file): its chat template, special tokens and tokenizer.
    #[arg(long, value_name = "DIR", required_unless_present = "template")]
    pub model: Option<PathBuf>,
    /// Render this template file instead of the model's.
    #[arg(long, value_name = "FILE.jinja")]
    pub template: Option<PathBuf>,
    /// The conversation: a list of messages, or {"messages": [...], "tools": [...]}.
    #[arg(long, value_name = "FILE.json")]
    pub messages: PathBuf,
    /// Append the prompt that starts an assistant reply.
    #[arg(long)]
    pub add_generation_prompt: bool,
    /// Leave the final (assistant) message open so a reply continues it.
    #[arg(long, conflicts_with = "add_generation_prompt")]
    pub continue_final_message: bool,
    /// The template's bos_token (default: the model directory's).
    #[arg(long, value_name = "S")]
    pub bos_token: Option<String>,
    /// The template's eos_token (default: the model directory's).
    #[arg(long, value_name = "S")]
    pub eos_token: Option<String>,
    /// The serving stack whose ids to predict: `transformers` (vLLM, SGLang, transformers
    /// serve, TRL: transformers 5 tokenizer semantics), `tokenizers` (raw tokenizer.json: TGI,
    /// mistral.rs), `llama.cpp` (the GGUF's tokenizer, template and special tokens; a template
    /// BOS deduplicated), `llama-cpp-python` (the GGUF's, no BOS added).
    #[arg(long, value_enum, default_value = "transformers")]
    pub stack: crate::stack::Stack,
    /// Extra template variables, as a JSON object: what a server's `chat_template_kwargs` or
    /// apply_chat_template's keyword arguments pass, e.g. '{"enable_thinking": false}',
    /// '{"reasoning_effort": "high"}'.
    #[arg(long, value_name = "JSON", value_parser = parse_template_kwargs)]
    pub template_kwargs: Option<serde_json::Map<String, serde_json::Value>>,
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

/// `--template-kwargs`: a JSON object.
fn parse_template_kwargs(
    s: &str,
) -> std::result::Result<serde_json::Map<String, serde_json::Value>, String> {
    match serde_json::from_str(s) {
        Ok(serde_json::Value::Object(m)) => Ok(m),
        Ok(other) => Err(format!("a JSON object of variables is needed, not {other}")),
        Err(e) => Err(format!("not JSON: {e}")),
    }
}

#[derive(Args)]
pub struct ParseReplyArgs {
    /// Model directory (or .gguf file): its serving chat template and special tokens.
    #[arg(long, value_name = "DIR", required_unless_present = "template")]
    pub model: Option<PathBuf>,
    /// Read with this template file instead of the model's.
    #[arg(long, value_name = "FILE.jinja")]
    pub template: Option<PathBuf>,
    /// The completion as the model wrote it, special tokens spelled out (`-`: standard input).
    #[arg(long, value_name = "FILE")]
    pub text: PathBuf,
    /// The request's tools: a JSON list of OpenAI tool objects, or {"tools": [...]}. Their
    /// schemas type the arguments; without them values stay as the format writes them.
    #[arg(long, value_name = "FILE.json")]
    pub tools: Option<PathBuf>,
    /// The template's bos_token (default: the model directory's).
    #[arg(long, value_name = "S")]
    pub bos_token: Option<String>,
    /// The template's eos_token (default: the model directory's; templates that write it after
    /// each turn need it to render a call).
    #[arg(long, value_name = "S")]
    pub eos_token: Option<String>,
    /// The request's chat_template_kwargs, e.g. '{"enable_thinking": false}': they decide
    /// whether the generation prompt opened a think block.
    #[arg(long, value_name = "JSON", value_parser = parse_template_kwargs)]
    pub template_kwargs: Option<serde_json::Map<String, serde_json::Value>>,
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

#[derive(Args)]
pub struct InspectArgs {
    /// A model directory (Hugging Face layout) or a .gguf file.
    pub dir: PathBuf,
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

#[derive(Args)]
pub struct CheckArgs {
    /// The suite manifest (TOML).
    pub suite: PathBuf,
    /// The serving stack the chain predicts (overrides the suite's [target] stack), as `gate
    /// --stack` does.
    #[arg(long, value_enum, value_name = "STACK")]
    pub stack: Option<crate::stack::Stack>,
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
    #[command(flatten)]
    pub progress: ProgressFlag,
}

/// `--no-progress`, taken by every command that can draw a progress bar (check, gate, bench),
/// so a script passes the same flags to each.
#[derive(Args, Clone, Copy, Debug, Default)]
pub struct ProgressFlag {
    /// No progress bar (one is only ever drawn on a terminal, and never beside a machine
    /// format on stdout).
    #[arg(long)]
    pub no_progress: bool,
}

impl ProgressFlag {
    /// Whether to draw the bar, given that stdout carries human text.
    pub fn wanted(self, text_on_stdout: bool) -> bool {
        !self.no_progress && text_on_stdout
    }
}

#[derive(Args)]
pub struct LockArgs {
    /// The suite manifest (TOML).
    pub suite: PathBuf,
    /// Replace an existing lock (and recording) that differs (the explicit accept).
    #[arg(long)]
    pub update: bool,
    /// Also record the reference's behaviour beside the lock (<suite>.fingerprint.json).
    #[arg(long)]
    pub fingerprint: bool,
}

/// Resolves on SIGINT or SIGTERM (the servers' graceful shutdown).
pub(crate) async fn shutdown_signal(who: &str) {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    eprintln!("chatgate {who}: shutting down");
}

/// The async runtime of the networked commands.
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| crate::error::Error::input(format!("cannot start the async runtime: {e}")))
}

/// Run the CLI; returns the process exit code.
pub fn run(cli: Cli) -> i32 {
    if !matches!(cli.command, Command::Serve(_) | Command::Proxy(_)) {
        crate::files::clean_up_on_signals();
    }
    let result: Result<i32> = match cli.command {
        Command::Render(a) => render::run(a),
        Command::ParseReply(a) => parse_reply::run(a),
        Command::Inspect(a) => inspect::run(a),
        Command::Check(a) => check::run_check(a),
        Command::Lock(a) => check::run_lock(a),
        Command::Serve(a) => serve::run(a),
        Command::Gate(a) => gate::run(a),
        Command::Merge(a) => merge::run(a),
        Command::Bench(a) => bench::run(a),
        Command::History(a) => history::run(a),
        Command::Review(a) => snapshots::run_review(a),
        Command::Accept(a) => snapshots::run_accept(a),
        Command::Reject(a) => snapshots::run_reject(a),
        Command::Proxy(a) => proxy::run(a),
        Command::ClientProbe(a) => client_probe::run(a),
        Command::Standin(a) => standin::run(a),
        Command::Init(a) => init::run(a),
        Command::Example(a) => example::run(a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!(
                "chatgate: error: {}",
                crate::secrets::redact(&e.to_string())
            );
            e.exit_code()
        }
    }
}
