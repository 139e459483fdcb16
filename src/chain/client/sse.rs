//! `client.sse`: the suite's own client (`[client] command`) run through `chatgate
//! client-probe` against the server under test — the plain stream, then each hostile-but-legal
//! SSE variant alone, then all at once. The serving stack can be healthy while the application
//! that reads it breaks on framing the spec allows (a gateway's keep-alives, `id:` fields, CRLF):
//! this check names the variant, the rule the client gets wrong and the public reports.
//!
//! A variant in `[client] sse_variants` (default: all) that breaks the client is an error; one
//! the deployment need not survive is a warning.
use crate::verdict::checks;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::proxy::probe::{probe, ClientRun, ProbeOptions, ProbeReport};
use crate::proxy::{Variant, VARIANTS};
use crate::suite::Suite;
use crate::verdict::{Finding, Severity};

/// The variants `[client] sse_variants` names (default: all), or the error that names the
/// suite file and the unknown name.
pub fn must_survive(suite: &Suite) -> Result<Vec<Variant>> {
    let names = suite
        .file
        .client
        .as_ref()
        .and_then(|c| c.sse_variants.clone())
        .unwrap_or_else(|| vec!["all".into()]);
    Variant::parse_list(&names.join(","))
        .map_err(|e| Error::in_file(&suite.path, format!("[client] sse_variants: {e}")))
}

/// Run the probe when the suite names a client command; nothing otherwise.
pub async fn check(suite: &Suite, upstream: &str) -> Vec<Finding> {
    let (Some(c), Some(command)) = (&suite.file.client, suite.client_command()) else {
        return Vec::new();
    };
    // Checked when the gate started (`must_survive`).
    let must = must_survive(suite).unwrap_or_else(|_| Variant::all());
    let opts = ProbeOptions {
        upstream: upstream.to_string(),
        command: command.to_vec(),
        variants: Variant::all(),
        combined: true,
        timeout: Duration::from_secs(c.command_timeout_s.unwrap_or(60)),
        compare_output: true,
        record_dir: None,
        focus: must.clone(),
        // The target's key, when the suite names one: the client must get past its auth.
        api_key: suite
            .file
            .target
            .as_ref()
            .and_then(|t| t.api_key_env.as_deref())
            .and_then(|var| std::env::var(var).ok()),
        // The suite's folder ("" for a suite named without one: the current folder).
        cwd: suite
            .path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .map(|p| p.to_path_buf()),
    };
    match probe(&opts).await {
        Ok(report) => judge(&report, &must),
        Err(e) => vec![Finding::new(
            checks::CLIENT_SSE,
            Severity::Error,
            format!("the client command could not be probed: {e}"),
        )
        .with("command", command.join(" "))],
    }
}

/// One finding per breaking run (or one pass).
pub fn judge(report: &ProbeReport, must: &[Variant]) -> Vec<Finding> {
    let command = report.command.join(" ");
    let mut out = Vec::new();
    for run in report.runs.iter().filter(|r| r.broke()) {
        let required = run
            .variants
            .iter()
            .all(|n| must.iter().any(|v| v.name() == *n));
        out.push(broken(run, &run.variants, required, &command));
    }
    if let (Some(all), Some(culprit)) = (&report.combined, &report.culprit) {
        let required = culprit.iter().all(|n| must.iter().any(|v| v.name() == *n));
        out.push(broken(all, culprit, required, &command));
    }
    if let Some(note) = &report.output_note {
        out = out.into_iter().map(|f| f.with("output", note)).collect();
    }
    if out.is_empty() {
        out.push(
            Finding::pass(
                checks::CLIENT_SSE,
                format!(
                    "the client read the plain stream and every hostile SSE variant ({} runs)",
                    report.runs.len() + report.combined.iter().count()
                ),
            )
            .with("command", command)
            .with(
                "output",
                report
                    .output_note
                    .as_deref()
                    .unwrap_or("compared with the plain run's"),
            ),
        );
    }
    out
}

fn broken(run: &ClientRun, names: &[&str], required: bool, command: &str) -> Finding {
    let severity = if required {
        Severity::Error
    } else {
        Severity::Warning
    };
    let combination = names.join(" + ");
    let mut f = Finding::new(
        checks::CLIENT_SSE,
        severity,
        format!(
            "the client breaks on the legal SSE framing `{combination}` ({}); a server or gateway that frames its stream this way breaks the application though the model and server are healthy",
            run.why()
        ),
    )
    .with("command", command);
    for name in names {
        if let Some(info) = VARIANTS.iter().find(|i| i.name == *name) {
            f = f.with(&format!("{name}: what the stream does"), info.does);
            f = f.with(&format!("{name}: the rule"), info.rule);
            if !info.reports.is_empty() {
                f = f.with(&format!("{name}: reported"), info.reports.join("; "));
            }
        }
    }
    if !run.stderr_tail.is_empty() {
        f = f.with("client stderr (last lines)", run.stderr_tail.join("\n"));
    }
    let hint = if required {
        "fix or upgrade the client's SSE reader (the rule above), or take the variant out of [client] sse_variants if no server or gateway in front of this deployment sends it"
    } else {
        "the deployment need not survive it ([client] sse_variants); listed so a gateway added later does not surprise you"
    };
    f.with("hint", hint)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(label: &str, variants: Vec<&'static str>, exit: i32) -> ClientRun {
        ClientRun {
            label: label.into(),
            variants,
            exit: Some(exit),
            timed_out: false,
            output_differs: false,
            stderr_tail: if exit == 0 {
                vec![]
            } else {
                vec!["FAILED stream: JSONDecodeError: Expecting value".into()]
            },
            stdout: String::new(),
            exchanges: 3,
            streamed: 2,
            recording: None,
            elapsed_ms: 900,
        }
    }

    fn report(culprit: Option<Vec<&'static str>>) -> ProbeReport {
        ProbeReport {
            command: vec!["python".into(), "app.py".into()],
            output_compared: true,
            output_note: None,
            plain: run("plain", vec![], 0),
            runs: vec![
                run("retry", vec!["retry"], 1),
                run("ids", vec!["ids"], 0),
                run("keep-alive", vec!["keep-alive"], 0),
            ],
            combined: Some(run("all", vec!["retry", "ids", "keep-alive"], 1)),
            culprit,
        }
    }

    #[test]
    fn a_break_is_an_error_only_for_what_the_deployment_must_survive() {
        let fs = judge(
            &report(Some(vec!["ids", "keep-alive"])),
            &[Variant::Retry, Variant::Ids],
        );
        assert_eq!(fs.len(), 2);
        assert_eq!(fs[0].severity, Severity::Error);
        assert!(fs[0].message.contains("`retry`") && fs[0].message.contains("JSONDecodeError"));
        assert!(fs[0].evidence["retry: reported"].contains("openai/openai-python#2722"));
        // keep-alive is not listed: the pair is a warning.
        assert_eq!(fs[1].severity, Severity::Warning);
        assert!(fs[1].message.contains("`ids + keep-alive`"));
        let all = judge(&report(Some(vec!["ids", "keep-alive"])), &Variant::all());
        assert!(all.iter().all(|f| f.severity == Severity::Error));
    }

    #[test]
    fn a_client_that_reads_everything_passes() {
        let mut r = report(None);
        r.runs[0] = run("retry", vec!["retry"], 0);
        r.combined = Some(run("all", vec![], 0));
        let fs = judge(&r, &Variant::all());
        assert_eq!(fs.len(), 1);
        assert_eq!(fs[0].severity, Severity::Pass);
        assert!(fs[0].message.contains("(4 runs)"), "{}", fs[0].message);
    }
}
