//! `chatgate client-probe`: run the user's own client through each hostile SSE variant and name
//! the ones that break it.
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::proxy::{VariantList, VariantsParser};
use super::Format;
use crate::error::Result;
use crate::proxy::probe::{self, ClientRun, ProbeOptions, ProbeReport};

#[derive(Args)]
#[command(
    after_help = "Examples:\n  \
chatgate serve --model models/tiny-chat --port 8000 &\n  \
chatgate client-probe --upstream http://127.0.0.1:8000 -- python app.py\n  \
chatgate client-probe --upstream http://127.0.0.1:8000 --variants ids,keep-alive -- node app.mjs\n  \
chatgate client-probe --upstream $STAGING_URL --format json --record-dir probe/ -- ./smoke-client",
    after_long_help = "Run YOUR client command through `chatgate proxy` against --upstream: once on the plain \
stream, once per hostile-but-legal SSE variant alone, then all of them at once — and name each variant that \
breaks it, with the event-stream rule the client gets wrong and the public reports of clients that broke \
the same way.\n\n\
The client finds the proxy in the variables the common SDKs read: OPENAI_BASE_URL and OPENAI_API_BASE \
(http://127.0.0.1:PORT/v1); CHATGATE_PROBE_URL holds the URL without /v1 and CHATGATE_PROBE_VARIANT the \
run's name. OPENAI_API_KEY is passed through, or set to a placeholder when unset. The command must stream \
at least once (stream=True) and exit 0 on the plain stream.\n\n\
A run breaks the client when it exits non-zero, outlives --timeout, or prints something else than on the \
plain stream (a reader that silently drops or mangles a chunk). The plain run goes twice: when the two \
outputs differ (a client that prints response ids, times or sampled text), only exit status and time are \
judged, and the report says so; --ignore-output turns the comparison off. When all at once break the client, the variants that pass alone are \
tried together, and when they break it too, the smallest combination of them that still does is found by \
delta debugging and named (an `id:` field and a later blank line, say).\n\n\
Exit 0: no variant breaks the client; 1: some do; 2: the command fails on the plain stream, never \
streams, or cannot start; 3: the upstream is unreachable.\n\n\
In a suite, [client] command = [\"python\", \"app.py\"] and sse_variants = [\"all\"] make `chatgate gate` \
run this probe against its --target and fail at the client boundary (check client.sse) when a variant the \
deployment must survive breaks the client."
)]
pub struct ClientProbeArgs {
    /// The server the client's requests go to (base URL).
    #[arg(long, value_name = "URL")]
    pub upstream: String,
    /// The variants to run: `all` (the default) or a comma-separated list.
    #[arg(long, value_name = "VARIANTS", default_value = "all", value_parser = VariantsParser)]
    pub variants: VariantList,
    /// Seconds one run of the client may take before it is killed.
    #[arg(long, value_name = "S", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub timeout: u64,
    /// Do not compare the client's output with the plain run's (only its exit status counts).
    #[arg(long)]
    pub ignore_output: bool,
    /// Keep each run's recording of the exchanges here (RUN.jsonl, `chatgate proxy --record`'s format).
    #[arg(long, value_name = "DIR")]
    pub record_dir: Option<PathBuf>,
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
    /// The client command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

pub fn run(a: ClientProbeArgs) -> Result<i32> {
    crate::secrets::register_url_credentials(&a.upstream);
    let opts = ProbeOptions {
        upstream: a.upstream,
        command: a.command,
        variants: a.variants.0,
        combined: true,
        timeout: Duration::from_secs(a.timeout),
        compare_output: !a.ignore_output,
        record_dir: a.record_dir,
        cwd: None,
        focus: Vec::new(),
        api_key: None,
    };
    let report = super::runtime()?.block_on(probe::probe(&opts))?;
    match a.format {
        Format::Json => println!(
            "{}",
            crate::secrets::redact(&serde_json::to_string_pretty(&report).unwrap_or_default())
        ),
        Format::Text => print!("{}", crate::secrets::redact(&text(&report))),
    }
    Ok(if report.broken().is_empty() { 0 } else { 1 })
}

/// The human report: one line per run, then what each breaking variant relies on.
pub fn text(r: &ProbeReport) -> String {
    let mut out = format!(
        "client-probe: {}\n  {:<26} {}\n",
        r.command.join(" "),
        "plain",
        run_line(&r.plain)
    );
    for run in r.runs.iter().chain(r.combined.as_ref()) {
        out.push_str(&format!("  {:<26} {}\n", run.label, run_line(run)));
    }
    if let Some(note) = &r.output_note {
        out.push_str(&format!("\nnote: {note}\n"));
    }
    if let Some(c) = &r.culprit {
        out.push_str(&format!(
            "\nvariants that pass alone break the client together; the smallest such combination: {}\n",
            c.join(" + ")
        ));
    }
    let mut named: Vec<&str> = r
        .runs
        .iter()
        .filter(|run| run.broke())
        .flat_map(|run| run.variants.clone())
        .collect();
    named.extend(r.culprit.iter().flatten().copied());
    for name in named {
        let Some(info) = crate::proxy::VARIANTS.iter().find(|i| i.name == name) else {
            continue;
        };
        out.push_str(&format!(
            "\n{}: {}\n  rule: {}\n",
            info.name, info.does, info.rule
        ));
        for report in info.reports {
            out.push_str(&format!("  reported: {report}\n"));
        }
    }
    let broken = r.broken().len();
    out.push_str(&format!(
        "\n{}\n",
        if broken == 0 {
            "the client read every variant".to_string()
        } else {
            format!(
                "{broken} of {} hostile runs broke the client",
                r.runs.len() + r.combined.iter().count()
            )
        }
    ));
    out
}

fn run_line(run: &ClientRun) -> String {
    let verdict = if run.broke() { "BREAKS" } else { "ok" };
    let mut line = format!(
        "{verdict:<7}{:>6.1} s  {} request(s), {} streamed",
        run.elapsed_ms as f64 / 1e3,
        run.exchanges,
        run.streamed
    );
    if run.broke() {
        line.push_str(&format!("  — {}", run.why()));
    }
    line
}
