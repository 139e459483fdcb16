//! The JUnit XML report of a gate run, for CI systems that show test results (GitLab, Jenkins,
//! GitHub test-report actions).
//!
//! Each boundary of the chain becomes a `<testsuite name="chatgate.<boundary>">` in chain order,
//! so a CI's test view lists the first broken link first; each finding is a test case (errors
//! fail, warnings and info pass with their text in `system-out`). Replayed prompts and latency
//! metrics get their own suites, `chatgate.replay` and `chatgate.latency`, because they are what
//! a reviewer clicks through after a failure. Serialisation is quick-junit's, which escapes and
//! strips characters XML cannot hold.
use crate::verdict::Outcome;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use quick_junit::{NonSuccessKind, Property, Report, TestCase, TestCaseStatus, TestSuite};

use crate::error::{Error, Result};
use crate::verdict::{Boundary, Finding, Severity};

use super::summary::{
    clip, failure_reasons, fmt_ms, is_regression, totals_lines, verdict, MAX_VALUE_CHARS,
};
use crate::verdict::{GateReport, LatencyRow, PromptResult, PromptStatus};

/// Longest message suffix used to tell repeated checks apart (chars).
const NAME_SUFFIX_CHARS: usize = 60;

/// Render the JUnit XML report of a gate run.
pub fn render(report: &GateReport) -> Result<String> {
    let mut junit = Report::new(format!("chatgate {}", report.suite));
    junit.set_time(secs(report.duration_s));
    let mut suites: BTreeMap<Boundary, TestSuite> = BTreeMap::new();
    for (b, cases) in finding_cases(report) {
        boundary_suite(&mut suites, b, report).add_test_cases(cases);
    }
    if !report.prompts.is_empty() {
        let suite = boundary_suite(&mut suites, Boundary::Replay, report);
        suite.add_test_cases(report.prompts.iter().map(prompt_case));
    }
    junit.add_test_suites(suites.into_values());
    if !report.latency.is_empty() || report.latency_totals.is_some() {
        junit.add_test_suite(latency_suite(report));
    }
    if !report.passed() && junit.failures == 0 && junit.errors == 0 {
        junit.add_test_suite(verdict_suite(report));
    }
    junit.to_string().map_err(|e| {
        Error::input(format!("cannot write the JUnit report: {e}"))
            .hint("this is a chatgate bug; please report it with the output of `--format json`")
    })
}

/// A failed gate must never look green in a CI's test view: when no case carries the failure
/// (an unreachable target, a failure outside the findings), one case states the verdict.
fn verdict_suite(report: &GateReport) -> TestSuite {
    let mut suite = new_suite("chatgate.gate", report);
    let reasons = failure_reasons(report);
    let message = if reasons.is_empty() {
        format!("the gate failed with exit code {}", report.exit_code)
    } else {
        format!("the gate failed on: {}", reasons.join(", "))
    };
    let kind = if report.exit_code == Outcome::Unreachable {
        NonSuccessKind::Error
    } else {
        NonSuccessKind::Failure
    };
    let mut status = TestCaseStatus::non_success(kind);
    status.set_message(message).set_type("gate.verdict");
    let mut case = TestCase::new("gate.verdict", status);
    case.set_classname("gate");
    suite.add_test_case(case);
    suite
}

fn secs(s: f64) -> Duration {
    Duration::try_from_secs_f64(s).unwrap_or_default()
}

/// The suite of boundary `b`, created on first use with the run's facts as properties.
fn boundary_suite<'a>(
    suites: &'a mut BTreeMap<Boundary, TestSuite>,
    b: Boundary,
    report: &GateReport,
) -> &'a mut TestSuite {
    suites
        .entry(b)
        .or_insert_with(|| new_suite(&format!("chatgate.{}", b.name()), report))
}

fn new_suite(name: &str, report: &GateReport) -> TestSuite {
    let mut suite = TestSuite::new(name);
    let (_, word) = verdict(report);
    suite.add_properties([
        Property::new("suite", &report.suite),
        Property::new("suite_file", &report.suite_file),
        Property::new("target", &report.target),
        Property::new("verdict", word),
    ]);
    suite
}

/// One test case per finding, grouped by boundary in the findings' order.
fn finding_cases(report: &GateReport) -> Vec<(Boundary, Vec<TestCase>)> {
    let first = report.findings.first_broken();
    let mut per_check: HashMap<(Boundary, &str), usize> = HashMap::new();
    for f in &report.findings.0 {
        *per_check.entry((f.boundary, f.check.id)).or_default() += 1;
    }
    let mut names = UniqueNames::default();
    let mut out: Vec<(Boundary, Vec<TestCase>)> = Vec::new();
    for f in &report.findings.0 {
        let repeated = per_check[&(f.boundary, f.check.id)] > 1;
        let name = names.claim(f.boundary, case_name(f, repeated));
        let case = finding_case(f, name, first);
        match out.last_mut() {
            Some((b, cases)) if *b == f.boundary => cases.push(case),
            _ => out.push((f.boundary, vec![case])),
        }
    }
    out
}

/// The check id, plus the start of the message when the check reports several times.
fn case_name(f: &Finding, repeated: bool) -> String {
    if !repeated {
        return f.check.to_string();
    }
    let first_line = f.message.lines().next().unwrap_or("");
    format!("{} — {}", f.check, clip(first_line, NAME_SUFFIX_CHARS))
}

/// Hands out names unique within a suite, numbering true duplicates (`name #2`).
#[derive(Default)]
struct UniqueNames(HashMap<(Boundary, String), usize>);

impl UniqueNames {
    fn claim(&mut self, b: Boundary, name: String) -> String {
        let n = self.0.entry((b, name.clone())).or_default();
        *n += 1;
        if *n == 1 {
            name
        } else {
            format!("{name} #{n}")
        }
    }
}

fn finding_case(f: &Finding, name: String, first: Option<&Finding>) -> TestCase {
    let body = evidence_text(f);
    let status = if f.severity == Severity::Error {
        let mut s = TestCaseStatus::non_success(NonSuccessKind::Failure);
        let summary = one_line(&f.message);
        // Parsers normalise newlines in attributes away, so a multi-line message also goes
        // into the body whole.
        let full = if summary == f.message {
            String::new()
        } else {
            format!("message:\n{}\n", f.message)
        };
        s.set_message(summary).set_type(f.check.id);
        s.set_description(keep_layout(&format!(
            "{}{full}{body}",
            blame_line(f, first)
        )));
        s
    } else {
        TestCaseStatus::success()
    };
    let mut case = TestCase::new(name, status);
    case.set_classname(f.boundary.name());
    if f.severity != Severity::Error {
        let label = match f.severity {
            Severity::Pass => "pass",
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Error => "error",
        };
        case.set_system_out(keep_layout(&format!("{label}: {}\n{body}", f.message)));
    }
    case
}

/// A message attribute on one line: XML parsers turn newlines and tabs in attributes into
/// spaces anyway, so say it the same way everywhere.
fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Text for an element body with its layout intact: quick-junit strips control characters,
/// tabs and carriage returns included, which would glue words and lines together.
fn keep_layout(s: &str) -> String {
    s.replace("\r\n", "\n")
        .replace(['\r'], "\n")
        .replace('\t', "    ")
}

/// Whether this error is the first broken link or a downstream symptom of it.
fn blame_line(f: &Finding, first: Option<&Finding>) -> String {
    match first {
        Some(first) if first.boundary == f.boundary => {
            format!(
                "first broken boundary: {} ({})\n",
                f.boundary.name(),
                first.check.id
            )
        }
        Some(first) => format!(
            "downstream of the first broken boundary {} ({}): it may explain this\n",
            first.boundary.name(),
            first.check.id
        ),
        None => String::new(),
    }
}

/// Evidence as `key: value` lines; a multi-line value starts on its own line, indented, so
/// its first line does not look like part of the key.
fn evidence_text(f: &Finding) -> String {
    f.evidence
        .iter()
        .map(|(k, v)| {
            let v = clip(v, MAX_VALUE_CHARS);
            if v.contains('\n') {
                let body: String = v.lines().map(|l| format!("    {l}\n")).collect();
                format!("{k}:\n{body}")
            } else {
                format!("{k}: {v}\n")
            }
        })
        .collect()
}

/// A replayed prompt: changed/new fail with the diff, a target error is an `<error>`.
fn prompt_case(p: &PromptResult) -> TestCase {
    let mut about = format!("comparator: {}\n", p.comparator);
    if let Some(d) = &p.determinism {
        about.push_str(&format!("determinism: {d}\n"));
    }
    let status = match p.status {
        PromptStatus::Pass => TestCaseStatus::success(),
        PromptStatus::Changed | PromptStatus::New | PromptStatus::Error => {
            let kind = if p.status == PromptStatus::Error {
                NonSuccessKind::Error
            } else {
                NonSuccessKind::Failure
            };
            let mut s = TestCaseStatus::non_success(kind);
            let word = super::summary::status_word(p.status);
            s.set_message(one_line(&format!("{word}: {}", p.detail)))
                .set_type(word);
            s.set_description(keep_layout(&format!(
                "{about}{}",
                p.diff.as_deref().unwrap_or("")
            )));
            s
        }
    };
    let mut case = TestCase::new(&p.id, status);
    case.set_classname("replay.prompt");
    if p.status == PromptStatus::Pass {
        case.set_system_out(keep_layout(&format!("{about}{}\n", p.detail)));
    }
    case
}

/// One test case per latency metric (a regression fails), with the run totals as suite output.
fn latency_suite(report: &GateReport) -> TestSuite {
    let mut suite = new_suite("chatgate.latency", report);
    suite.add_test_cases(report.latency.iter().map(latency_case));
    if let Some(t) = &report.latency_totals {
        let text: String = totals_lines(t)
            .into_iter()
            .map(|(k, v)| format!("{k}: {v}\n"))
            .collect();
        suite.set_system_out(text);
    }
    suite
}

fn latency_case(r: &LatencyRow) -> TestCase {
    let stats = format!(
        "n={} p50={} p90={} p95={} p99={} mean={} std={} min={} max={} (ms)\nbaseline p50: {}\nverdict: {}\n",
        r.n,
        fmt_ms(r.p50),
        fmt_ms(r.p90),
        fmt_ms(r.p95),
        fmt_ms(r.p99),
        fmt_ms(r.mean),
        fmt_ms(r.std),
        fmt_ms(r.min),
        fmt_ms(r.max),
        r.baseline_p50.map(|b| format!("{} ms", fmt_ms(b))).unwrap_or_else(|| "none".into()),
        r.verdict
    );
    let status = if is_regression(r) {
        let mut s = TestCaseStatus::non_success(NonSuccessKind::Failure);
        let base = r
            .baseline_p50
            .map(|b| format!(" vs baseline {} ms", fmt_ms(b)))
            .unwrap_or_default();
        s.set_message(format!(
            "{} p50 {} ms{base}: {}",
            r.metric.to_uppercase(),
            fmt_ms(r.p50),
            r.verdict
        ))
        .set_type("latency.regression")
        .set_description(stats.clone());
        s
    } else {
        TestCaseStatus::success()
    };
    let mut case = TestCase::new(&r.metric, status);
    case.set_classname("latency");
    if !is_regression(r) {
        case.set_system_out(stats);
    }
    case
}
