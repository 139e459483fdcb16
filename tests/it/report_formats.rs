//! The gate's CI reports (JUnit, Markdown, HTML) on hand-built gate results: a passing run and a
//! failing one whose template breaks first, with downstream server and replay errors, a changed
//! prompt with a diff, and latency rows with samples.
//!
//! Set `CHATGATE_DUMP_REPORTS=/some/dir` to also write the rendered files there for a look.
use chatgate::report::{gate_terminal, html, junit, markdown};
use chatgate::verdict::checks;
use chatgate::verdict::{Finding, Findings, Severity};
use chatgate::verdict::{
    GateReport, LatencyRow, LatencyTotals, PhaseTime, PromptResult, PromptStatus,
};
use proptest::prelude::*;
use quick_junit::{NonSuccessKind, Report, TestCaseStatus, TestSuite};

const SCRIPT: &str = "<script>alert('x')</script>";

fn row(metric: &str, samples: Vec<f64>, baseline: Vec<f64>, verdict: &str) -> LatencyRow {
    let mut s = samples.clone();
    s.sort_by(f64::total_cmp);
    let q = |p: f64| {
        if s.is_empty() {
            return 0.0;
        }
        let h = (s.len() - 1) as f64 * p;
        let (lo, hi) = (h.floor() as usize, h.ceil() as usize);
        s[lo] + (h - h.floor()) * (s[hi] - s[lo])
    };
    let mut b = baseline.clone();
    b.sort_by(f64::total_cmp);
    let n = s.len().max(1) as f64;
    let mean = s.iter().sum::<f64>() / n;
    LatencyRow {
        metric: metric.into(),
        n: s.len(),
        p50: q(0.5),
        p90: q(0.9),
        p95: q(0.95),
        p99: q(0.99),
        mean,
        std: (s.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n).sqrt(),
        min: s.first().copied().unwrap_or(0.0),
        max: s.last().copied().unwrap_or(0.0),
        baseline_p50: b.get(b.len() / 2).copied(),
        verdict: verdict.parse().expect("a verdict label"),
        samples,
        baseline_samples: baseline,
    }
}

/// Deterministic, skewed latency samples around `centre` ms.
fn samples(n: usize, centre: f64, spread: f64) -> Vec<f64> {
    (0..n)
        .map(|i| {
            let u = ((i * 7919) % n) as f64 / n as f64;
            centre + spread * (u * u * 3.0 - 0.5)
        })
        .collect()
}

fn definitions() -> Vec<(String, String)> {
    [
        ("TTFT", "t_1 − t_send"),
        ("TPOT", "(E2EL − TTFT) / (N_out − 1), only when N_out > 1"),
        (
            "E2EL",
            "t_K − t_send (stream-close time reported separately)",
        ),
        (
            "ITL",
            "token-weighted gaps: a gap covering m tokens counts as m samples of gap/m",
        ),
    ]
    .into_iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect()
}

fn passing() -> GateReport {
    let findings = Findings(vec![
        Finding::pass(checks::CHECKPOINT_WEIGHTS_HASH, "weights match the lock"),
        Finding::pass(checks::TOKENIZER_FINGERPRINT, "same tokenizer"),
        Finding::pass(checks::TEMPLATE_PARITY, "ids equal the SFT ids"),
        Finding::new(
            checks::GENERATION_DEFAULTS,
            Severity::Info,
            "temperature 0.7 from generation_config.json",
        ),
        Finding::pass(checks::SERVER_SSE_FRAMING, "SSE framing is well formed"),
    ]);
    GateReport {
        suite: "tiny-chat".into(),
        suite_file: "suites/tiny.toml".into(),
        target: "http://127.0.0.1:8000/v1".into(),
        findings,
        prompts: vec![PromptResult {
            id: "greeting".into(),
            status: PromptStatus::Pass,
            comparator: "exact".into(),
            determinism: Some("deterministic".into()),
            detail: "identical".into(),
            diff: None,
        }],
        latency: vec![row(
            "ttft",
            samples(20, 40.0, 8.0),
            samples(20, 41.0, 8.0),
            "ok",
        )],
        latency_totals: Some(LatencyTotals {
            requests: 20,
            errors: 0,
            duration_s: 3.2,
            output_throughput: 412.5,
            goodput: None,
            slo_attainment: None,
            n_out_estimated: false,
            client_overhead_us_per_event: 3.4,
            unreliable: None,
        }),
        definitions: definitions(),
        duration_s: 4.1,
        phases: Vec::new(),
        exit_code: chatgate::verdict::Outcome::Pass,
    }
}

const DIFF: &str = "--- accepted\n+++ new\n@@ -1,2 +1,2 @@\n The capital of France is\n-Paris.\n+Paris.<|im_end|><|im_start|>user\n";

fn failing() -> GateReport {
    let findings = Findings(vec![
        Finding::pass(checks::CHECKPOINT_WEIGHTS_HASH, "weights match the lock"),
        Finding::pass(checks::TOKENIZER_FINGERPRINT, "same tokenizer"),
        Finding::new(
            checks::TEMPLATE_SERVER_IDS,
            Severity::Error,
            "the server's prompt ids differ from the SFT ids at token 14 | expected <|im_end|>",
        )
        .with("sft ids", "[151644, 872, 198, 9707]")
        .with("server ids", "[151644, 872, 198, 151645]")
        .with(
            "rendered",
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
        ),
        Finding::new(
            checks::TEMPLATE_LOCK,
            Severity::Warning,
            "stop set lacks <|im_end|>",
        ),
        Finding::new(
            checks::SERVER_STOP,
            Severity::Error,
            "reply 1 ran to max_tokens",
        ),
        Finding::new(
            checks::SERVER_STOP,
            Severity::Error,
            "reply 2 ran to max_tokens",
        ),
        Finding::new(
            checks::SERVER_BAD_REQUESTS,
            Severity::Error,
            format!("error body echoed {SCRIPT}"),
        )
        .with("body", SCRIPT),
        Finding::new(
            checks::REPLAY_SNAPSHOTS,
            Severity::Error,
            "1 of 3 prompts changed",
        ),
    ]);
    GateReport {
        suite: "tiny-chat".into(),
        suite_file: "suites/tiny.toml".into(),
        target: "http://127.0.0.1:8000/v1".into(),
        findings,
        prompts: vec![
            PromptResult {
                id: "capital".into(),
                status: PromptStatus::Changed,
                comparator: "exact".into(),
                determinism: Some("deterministic".into()),
                detail: "first divergent token 6: `<|im_end|>` vs `\\n`".into(),
                diff: Some(DIFF.into()),
            },
            PromptResult {
                id: "greeting".into(),
                status: PromptStatus::Pass,
                comparator: "similarity ≥ 0.9".into(),
                determinism: Some("sampled".into()),
                detail: "similarity 0.97".into(),
                diff: None,
            },
            PromptResult {
                id: "tools|weather".into(),
                status: PromptStatus::Error,
                comparator: "json-schema".into(),
                determinism: None,
                detail: "HTTP 500 from the target".into(),
                diff: None,
            },
        ],
        latency: vec![
            row(
                "ttft",
                samples(40, 55.0, 12.0),
                samples(40, 41.0, 8.0),
                "regression",
            ),
            row(
                "e2el",
                samples(40, 900.0, 150.0),
                samples(40, 880.0, 140.0),
                "inconclusive (±6.10 ms)",
            ),
            row("tpot", vec![12.0], vec![11.0], "no baseline"),
            row("itl", vec![], vec![], "no baseline"),
        ],
        latency_totals: Some(LatencyTotals {
            requests: 40,
            errors: 1,
            duration_s: 12.5,
            output_throughput: 288.0,
            goodput: Some(2.9),
            slo_attainment: Some(0.925),
            n_out_estimated: true,
            client_overhead_us_per_event: 5.2,
            unreliable: Some(
                "the client's event loop ran 12.0 ms late (p99; worst 30.0 ms, limit 5 ms)".into(),
            ),
        }),
        definitions: definitions(),
        duration_s: 14.0,
        phases: Vec::new(),
        exit_code: chatgate::verdict::Outcome::Regression,
    }
}

/// Write a rendered report for a human look when asked to.
fn dump(name: &str, text: &str) {
    if let Some(dir) = std::env::var_os("CHATGATE_DUMP_REPORTS") {
        std::fs::write(std::path::Path::new(&dir).join(name), text).expect("dump report");
    }
}

fn parse_junit(xml: &str) -> Report {
    Report::deserialize_from_str(xml)
        .unwrap_or_else(|e| panic!("JUnit output is not well-formed: {e:?}\n{xml}"))
}

fn suite<'a>(r: &'a Report, name: &str) -> &'a TestSuite {
    r.test_suites
        .iter()
        .find(|s| s.name.as_str() == name)
        .unwrap_or_else(|| panic!("no suite {name}"))
}

fn kind(s: &TestCaseStatus) -> Option<NonSuccessKind> {
    match s {
        TestCaseStatus::NonSuccess { kind, .. } => Some(*kind),
        _ => None,
    }
}

fn description(s: &TestCaseStatus) -> String {
    match s {
        TestCaseStatus::NonSuccess { description, .. } => description
            .as_ref()
            .map(|d| d.as_str().to_string())
            .unwrap_or_default(),
        _ => String::new(),
    }
}

// ---------------------------------------------------------------------------------------------
// JUnit

#[test]
fn junit_of_a_passing_run_has_no_failures() {
    let xml = junit::render(&passing()).expect("renders");
    dump("pass.xml", &xml);
    let r = parse_junit(&xml);
    assert_eq!(r.failures, 0);
    assert_eq!(r.errors, 0);
    // 5 findings + 1 prompt + 1 latency row.
    assert_eq!(r.tests, 7);
    let info = &suite(&r, "chatgate.generation-config").test_cases[0];
    let out = info.system_out.as_ref().expect("info text in system-out");
    assert!(out.as_str().contains("temperature 0.7"), "{out:?}");
}

#[test]
fn junit_suites_follow_the_chain_and_fail_where_the_gate_failed() {
    let xml = junit::render(&failing()).expect("renders");
    dump("fail.xml", &xml);
    let r = parse_junit(&xml);
    let names: Vec<&str> = r.test_suites.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "chatgate.checkpoint",
            "chatgate.tokenizer",
            "chatgate.template",
            "chatgate.server",
            "chatgate.replay",
            "chatgate.latency"
        ]
    );
    // Findings: template 1, server 3, replay 1; prompts: 1 changed; latency: 1 regression.
    assert_eq!(r.failures, 7);
    // The prompt the target failed on is an error, not a failure.
    assert_eq!(r.errors, 1);

    let template = suite(&r, "chatgate.template");
    assert_eq!(template.failures, 1);
    let broken = &template.test_cases[0];
    assert_eq!(broken.name.as_str(), "template.server-ids");
    assert_eq!(
        broken.classname.as_ref().map(|c| c.as_str()),
        Some("template")
    );
    let body = description(&broken.status);
    assert!(
        body.starts_with("first broken boundary: template (template.server-ids)\n"),
        "{body}"
    );
    assert!(
        body.contains("server ids: [151644, 872, 198, 151645]\nrendered:\n    <|im_start|>user\n    Hi<|im_end|>\n"),
        "{body}"
    );
    let warning = &template.test_cases[1];
    assert_eq!(kind(&warning.status), None, "a warning passes");
    assert!(warning
        .system_out
        .as_ref()
        .unwrap()
        .as_str()
        .starts_with("warning: stop set lacks"));
}

#[test]
fn junit_names_repeated_checks_apart_and_blames_the_first_break() {
    let r = parse_junit(&junit::render(&failing()).expect("renders"));
    let server = suite(&r, "chatgate.server");
    let names: Vec<&str> = server.test_cases.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "server.stop — reply 1 ran to max_tokens",
            "server.stop — reply 2 ran to max_tokens",
            "server.bad-requests"
        ]
    );
    for c in &server.test_cases {
        let body = description(&c.status);
        assert!(
            body.contains("downstream of the first broken boundary template (template.server-ids)"),
            "{body}"
        );
    }
    // User text survives the XML round trip exactly, markup and all.
    match &server.test_cases[2].status {
        TestCaseStatus::NonSuccess { message, .. } => assert_eq!(
            message.as_ref().map(|m| m.as_str()),
            Some(format!("error body echoed {SCRIPT}").as_str())
        ),
        s => panic!("expected a failure, got {s:?}"),
    }
}

#[test]
fn junit_replay_and_latency_cases() {
    let r = parse_junit(&junit::render(&failing()).expect("renders"));
    let replay = suite(&r, "chatgate.replay");
    let case = |name: &str| {
        replay
            .test_cases
            .iter()
            .find(|c| c.name.as_str() == name)
            .unwrap_or_else(|| panic!("no case {name}"))
    };
    assert_eq!(
        case("replay.snapshots")
            .classname
            .as_ref()
            .unwrap()
            .as_str(),
        "replay"
    );
    let changed = case("capital");
    assert_eq!(kind(&changed.status), Some(NonSuccessKind::Failure));
    assert!(description(&changed.status).contains("+Paris.<|im_end|><|im_start|>user"));
    assert_eq!(kind(&case("greeting").status), None);
    assert_eq!(
        kind(&case("tools|weather").status),
        Some(NonSuccessKind::Error)
    );

    let latency = suite(&r, "chatgate.latency");
    assert_eq!(latency.tests, 4);
    assert_eq!(latency.failures, 1);
    let ttft = &latency.test_cases[0];
    match &ttft.status {
        TestCaseStatus::NonSuccess { message, .. } => {
            let m = message.as_ref().unwrap().as_str();
            assert!(
                m.starts_with("TTFT p50 ") && m.contains("vs baseline"),
                "{m}"
            );
        }
        s => panic!("TTFT regression should fail, got {s:?}"),
    }
    let totals = latency.system_out.as_ref().expect("totals").as_str();
    assert!(totals.contains("SLO attainment: 92.5 %"), "{totals}");
}

#[test]
fn junit_of_an_unreachable_target_is_not_green() {
    let mut report = passing();
    report.findings = Findings::default();
    report.prompts.clear();
    report.latency.clear();
    report.latency_totals = None;
    report.exit_code = chatgate::verdict::Outcome::Unreachable;
    let r = parse_junit(&junit::render(&report).expect("renders"));
    assert_eq!(r.errors, 1, "a failed gate needs a failing case");
    let case = &suite(&r, "chatgate.gate").test_cases[0];
    match &case.status {
        TestCaseStatus::NonSuccess { message, .. } => assert_eq!(
            message.as_ref().map(|m| m.as_str()),
            Some("the gate failed on: the target was unreachable")
        ),
        s => panic!("expected an error, got {s:?}"),
    }
    // And a failing run whose cases already fail gets no extra verdict case.
    let r = parse_junit(&junit::render(&failing()).expect("renders"));
    assert!(r
        .test_suites
        .iter()
        .all(|s| s.name.as_str() != "chatgate.gate"));
}

// ---------------------------------------------------------------------------------------------
// Markdown

#[test]
fn markdown_of_a_passing_run_leads_with_the_verdict() {
    let md = markdown::render(&passing());
    dump("pass.md", &md);
    assert!(
        md.starts_with("## ✅ chatgate gate: PASS — tiny-chat\n"),
        "{md}"
    );
    assert!(md.contains("No boundary is broken."));
    assert!(!md.contains("First broken boundary"));
    assert!(md.contains("| greeting |") || md.contains("| `greeting` |"));
    assert!(md.contains("- **goodput**: — (no SLOs set)"), "{md}");
}

/// Where a gate's time went, stage by stage and, in the online chain, check by check: the
/// terminal's slow steps slowest first (what a slow server slows), and every step in the
/// Markdown table.
#[test]
fn the_report_says_where_the_time_went_step_by_step() {
    let step = |phase: &str, seconds: f64, requests: u64| PhaseTime {
        phase: phase.into(),
        seconds,
        requests: Some(requests),
        steps: Vec::new(),
    };
    let mut r = passing();
    r.phases = vec![
        step("load: suite, target, reference, context", 9.3, 0),
        PhaseTime {
            steps: vec![
                step("probe pass", 54.1, 45),
                step("request-field probes", 0.4, 2),
                step("server.long-prompt", 22.8, 2),
            ],
            ..step("online chain", 88.0, 79)
        },
        step("replay", 6.0, 6),
    ];
    let text = gate_terminal(&r, false);
    assert!(
        text.contains("time: load 9.3 s, online chain 88.0 s (79 requests), replay 6.0 s (6 requests)\n  online chain: probe pass 54.1 s (45 requests), server.long-prompt 22.8 s (2 requests)\n"),
        "{text}"
    );
    let md = markdown::render(&r);
    dump("time.md", &md);
    for row in [
        "| online chain | 88.0 | 79 |",
        "| · probe pass | 54.1 | 45 |",
        "| · request-field probes | 0.4 | 2 |",
    ] {
        assert!(md.contains(row), "{row} in {md}");
    }
}

#[test]
fn markdown_names_the_first_broken_boundary_and_its_symptoms() {
    let md = markdown::render(&failing());
    dump("fail.md", &md);
    assert!(
        md.starts_with("## ❌ chatgate gate: FAIL — tiny-chat\n"),
        "{md}"
    );
    let first = md.find("First broken boundary: **template** (`template.server-ids`) — the server's prompt ids differ from the SFT ids at token 14 \\| expected &lt;\\|im\\_end\\|&gt;");
    let symptoms = md.find("Downstream symptoms it may explain:");
    let boundaries = md.find("### Boundaries");
    assert!(first.is_some(), "{md}");
    assert!(
        first < symptoms && symptoms < boundaries,
        "order: verdict, first break, symptoms, table"
    );
    assert!(md.contains("- **server** (`server.stop`) — reply 1 ran to max\\_tokens\n"));
    assert!(md.contains("- **replay** (`replay.snapshots`) — 1 of 3 prompts changed\n"));
    assert!(md.contains("| template | ❌ | 0 | 0 | 1 | 1 |"), "{md}");
}

#[test]
fn markdown_escapes_user_text() {
    let md = markdown::render(&failing());
    // Markup shows up raw only inside code spans, where it is displayed, not interpreted.
    assert_eq!(
        md.matches("<script>").count(),
        md.matches("`<script>").count(),
        "raw HTML from a message leaked:\n{md}"
    );
    assert!(md.contains("  - body: `<script>alert('x')</script>`\n"));
    assert!(md.contains("error body echoed &lt;script&gt;alert('x')&lt;/script&gt;"));
    // In a table cell a pipe inside a code span is escaped so the row keeps its columns.
    assert!(md.contains("| `tools\\|weather` | 💥 error |"), "{md}");
    // Every table row has as many unescaped pipes as its header.
    for line in md.lines().filter(|l| l.starts_with("| `capital`")) {
        let cells = line.replace("\\|", "").matches('|').count();
        assert_eq!(cells, 6, "{line}");
    }
    // Multi-line evidence becomes a fenced block, not a broken list item.
    assert!(
        md.contains("    ```text\n    <|im_start|>user\n    Hi<|im_end|>\n"),
        "{md}"
    );
}

#[test]
fn markdown_replay_diffs_and_latency() {
    let md = markdown::render(&failing());
    assert!(md.contains("### Replay — 3 prompts: 1 pass, 1 changed, 1 error"));
    assert!(md.contains(
        "<details>\n<summary>diff of <code>capital</code> (accepted → new)</summary>\n\n```diff\n--- accepted\n"
    ));
    assert!(md.contains("| TTFT | 40 |"), "{md}");
    // A metric without samples shows dashes, not zeros.
    assert!(
        md.contains("| ITL | 0 | — | — | — | — | ➖ no baseline |"),
        "{md}"
    );
    assert!(md.contains("| ❌ regression |"), "{md}");
    assert!(md.contains("➖ inconclusive (±6.10 ms) |"), "{md}");
    assert!(md.contains("- **SLO attainment**: 92.5 %"));
    assert!(md.contains("N\\_out estimated"), "{md}");
    // A client that fell behind: its figures are marked unreliable, with the reason.
    assert!(
        md.contains("- **client kept up**: NO — these figures are unreliable:")
            && md.contains("event loop ran 12.0 ms late"),
        "{md}"
    );
    assert!(markdown::render(&passing()).contains("- **client kept up**: yes"));
    let text = chatgate::report::gate_terminal(&failing(), false);
    assert!(text.contains("UNRELIABLE: the client"), "{text}");
    assert!(md.contains("<details>\n<summary>Metric definitions</summary>"));
    assert!(md.contains("| TPOT | (E2EL − TTFT) / (N\\_out − 1), only when N\\_out &gt; 1 |"));
}

#[test]
fn markdown_stays_under_the_step_summary_limit() {
    let mut report = failing();
    let huge: String = (0..20_000)
        .map(|i| format!("+a long generated line number {i} that never stops\n"))
        .collect();
    report.prompts = (0..100)
        .map(|i| PromptResult {
            id: format!("p{i}"),
            status: PromptStatus::Changed,
            comparator: "exact".into(),
            determinism: None,
            detail: "changed".into(),
            diff: Some(huge.clone()),
        })
        .collect();
    let md = markdown::render(&report);
    assert!(
        md.len() <= markdown::GITHUB_SUMMARY_LIMIT,
        "{} bytes",
        md.len()
    );
    assert!(md.contains("diff truncated: showing 400 of 20000 lines"));
    // Later diffs lose their body once the room is used up, but keep their block and note.
    assert_eq!(md.matches("<summary>diff of").count(), 100);
    assert!(md.contains("showing 0 of 20000 lines"));
    // The end of the document is intact.
    assert!(md.trim_end().ends_with("</details>"));
}

#[test]
fn html_keeps_huge_diffs_openable() {
    let mut report = failing();
    let huge: String = (0..5_000)
        .map(|i| format!("-old line {i}\n+new line {i}\n"))
        .collect();
    report.prompts[0].diff = Some(huge);
    let page = html::render(&report);
    assert!(page.contains("diff truncated: showing 2000 of 10000 lines"));
    assert_eq!(page.matches("<span class=\"del\">").count(), 1000);
}

// ---------------------------------------------------------------------------------------------
// HTML

#[test]
fn html_is_self_contained_and_escapes_user_text() {
    let page = html::render(&failing());
    dump("fail.html", &page);
    dump("pass.html", &html::render(&passing()));
    assert!(page.starts_with("<!DOCTYPE html>"));
    for needle in ["src=", "href=", "<link", "@import", "url(", "<script"] {
        assert!(!page.contains(needle), "HTML references {needle}");
    }
    assert!(page.contains("error body echoed &lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;"));
    assert!(page.contains(
        "First broken boundary: <strong>template</strong> (<code>template.server-ids</code>)"
    ));
    assert!(page.contains("<span class=\"link error first\">template</span>"));
    assert!(
        page.contains("<span class=\"add\">+Paris.&lt;|im_end|&gt;&lt;|im_start|&gt;user</span>")
    );
    for tag in ["details", "table", "svg", "section", "dl", "pre", "figure"] {
        assert_eq!(
            page.matches(&format!("<{tag}")).count(),
            page.matches(&format!("</{tag}>")).count(),
            "unbalanced <{tag}>"
        );
    }
}

#[test]
fn html_plots_one_cdf_per_metric_with_samples() {
    let page = html::render(&failing());
    // ttft and e2el have samples; tpot has one sample, itl none.
    assert_eq!(page.matches("<svg").count(), 2);
    assert!(page.contains("aria-label=\"TTFT empirical CDF\""));
    assert!(page.contains("aria-label=\"E2EL empirical CDF\""));
    assert!(!page.contains("aria-label=\"TPOT empirical CDF\""));
    // Two step lines (run and baseline) and both markers in each plot.
    assert_eq!(page.matches("<path class=\"run\"").count(), 2);
    assert_eq!(page.matches("<path class=\"base\"").count(), 2);
    let markers = |p: &str| {
        page.lines()
            .filter(|l| l.contains("class=\"mark\"") && l.contains(&format!(">{p} ")))
            .count()
    };
    assert_eq!(markers("p50"), 2);
    assert_eq!(markers("p99"), 2);
    assert!(page.contains("latency (ms)"));
}

#[test]
fn html_of_a_passing_run() {
    let page = html::render(&passing());
    assert!(page.contains("<header class=\"verdict pass\">"));
    assert!(page.contains("No boundary is broken."));
    assert!(page.contains("<span class=\"link idle\">client</span>"));
    // No replay finding, but the replayed prompt passed: the link is green.
    assert!(page.contains("<span class=\"link ok\">replay</span>"));
    assert_eq!(page.matches("<svg").count(), 1);
}

// ---------------------------------------------------------------------------------------------
// Properties: any message text keeps every format intact.

fn with_message(msg: &str) -> GateReport {
    let mut r = failing();
    r.findings.0[2].message = msg.to_string();
    r.prompts[0].detail = msg.to_string();
    r
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn junit_round_trips_any_message(msg in "[ -~\\u{a0}-\\u{2fff}\\n\\t]{0,80}") {
        let xml = junit::render(&with_message(&msg)).expect("renders");
        let r = parse_junit(&xml);
        let case = &suite(&r, "chatgate.template").test_cases[0];
        match &case.status {
            TestCaseStatus::NonSuccess { message, .. } => {
                // The attribute is a one-line summary; the whole text is in the body.
                let one_line = msg.split_whitespace().collect::<Vec<_>>().join(" ");
                prop_assert_eq!(message.as_ref().map(|m| m.as_str()).unwrap_or(""), one_line.as_str());
                if one_line != msg {
                    // Tabs become spaces (quick-junit would drop them as control characters).
                    let whole = format!("message:\n{}\n", msg.replace('\t', "    "));
                    prop_assert!(description(&case.status).contains(&whole));
                }
            }
            s => prop_assert!(false, "expected failure, got {:?}", s),
        }
    }

    #[test]
    fn markdown_cells_never_leak_pipes_or_markup(msg in "[ -~\\n]{0,80}") {
        let md = markdown::render(&with_message(&msg));
        let row = md.lines().find(|l| l.starts_with("| `capital`")).expect("replay row");
        prop_assert_eq!(row.replace("\\|", "").matches('|').count(), 6, "{}", row);
        let text = chatgate::escape::md_text(&msg);
        prop_assert!(!text.replace("<br>", "").contains('<'));
        prop_assert!(!text.contains('\n'));
    }

    #[test]
    fn html_never_leaks_markup(msg in "[ -~]{0,80}") {
        let page = html::render(&with_message(&msg));
        let esc = chatgate::escape::html(&msg);
        prop_assert!(!esc.contains('<') && !esc.contains('"'));
        prop_assert!(page.contains(&esc));
    }
}

/// One run, every format: `--report FORMAT=FILE` writes each file (the old flags are its
/// aliases), `--report FORMAT` alone is stdout, and two reports for stdout are refused (exit 2).
#[test]
fn report_flag_writes_every_format_from_one_run() {
    let ws = crate::common::gate_workspace::Workspace::new();
    let dir = ws.path("");
    let (code, out, err) = crate::common::cli::chatgate_in(
        &[
            "gate",
            "suites/smoke.toml",
            "--no-progress",
            "--report",
            "junit=r.xml",
            "--report",
            "markdown=r.md",
            "--report",
            "html=r.html",
            "--report",
            "sarif=r.sarif",
            "--report",
            "json=r.json",
            "--report",
            "text=r.txt",
            "--junit",
            "alias.xml",
            "--report",
            "json",
        ],
        &dir,
    );
    assert_eq!(code, 0, "{out}{err}");
    let stdout: serde_json::Value = serde_json::from_str(&out).expect("stdout is the JSON report");
    assert_eq!(stdout["exit_code"], 0);
    let read =
        |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
    assert!(read("r.xml").starts_with("<?xml"));
    assert_eq!(read("r.xml"), read("alias.xml"));
    assert!(read("r.md").starts_with("## ✅ chatgate gate: PASS"));
    assert!(read("r.html").starts_with("<!DOCTYPE html>"));
    let sarif: serde_json::Value = serde_json::from_str(&read("r.sarif")).expect("SARIF is JSON");
    assert_eq!(sarif["version"], "2.1.0");
    let json: serde_json::Value = serde_json::from_str(&read("r.json")).expect("JSON");
    assert_eq!(json["suite"], stdout["suite"]);
    assert!(
        read("r.txt").contains("PASS"),
        "the text report, without colour codes"
    );
    assert!(!read("r.txt").contains('\u{1b}'));

    let (code, _, err) = crate::common::cli::chatgate_in(
        &[
            "gate",
            "suites/smoke.toml",
            "--report",
            "json",
            "--report",
            "markdown",
        ],
        &dir,
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("one report goes to stdout"), "{err}");
    let (code, _, err) = crate::common::cli::chatgate_in(
        &["gate", "suites/smoke.toml", "--report", "pdf=x.pdf"],
        &dir,
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("unknown report format \"pdf\""), "{err}");
}
