//! The latency library against METRICS.md: metric definitions on hand-built records, bootstrap
//! comparison, baselines on disk, schedules, and the load generators on a real tokio runtime.
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chatgate::exchange::{OutputEvent, OutputKind, Record, Usage};
use chatgate::latency::{
    closed_loop, compare, compare_baseline, definitions, latency_row, open_loop, scenario_samples,
    Arrival, Baseline, CompareOptions, Environment, ItlBasis, Metric, NOutSource, RequestMetrics,
    RunSummary, Schedule, Settings, Slo, Status, Summary,
};
use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_distr::{Distribution, Normal};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-6
}

/// A record sent at t0 + `send` ms, with events at the given ms offsets from t0.
fn record(t0: Instant, send: u64, events: &[(u64, OutputKind, Option<u32>)], end: u64) -> Record {
    let mut r = Record::new();
    r.timing.t_sched = t0;
    r.timing.t_send = t0 + ms(send);
    r.timing.t_headers = Some(t0 + ms(send + 1));
    r.timing.events = events
        .iter()
        .map(|&(at, kind, tokens)| OutputEvent {
            at: t0 + ms(at),
            kind,
            tokens,
        })
        .collect();
    r.timing.t_end = t0 + ms(end);
    r
}

fn usage(completion: u64) -> Option<Usage> {
    Some(Usage {
        prompt_tokens: Some(12),
        completion_tokens: Some(completion),
        total_tokens: Some(12 + completion),
    })
}

fn no_tokenizer(_: &str) -> Option<usize> {
    None
}

#[test]
fn ttft_counts_from_send_and_ttfc_skips_reasoning() {
    let t0 = Instant::now();
    // Scheduled at 0, sent at 5: TTFT counts from the send, TTFT_sched from the schedule.
    let mut r = record(
        t0,
        5,
        &[
            (25, OutputKind::Reasoning, Some(1)),
            (35, OutputKind::Reasoning, Some(1)),
            (45, OutputKind::Content, Some(1)),
            (55, OutputKind::Content, Some(1)),
        ],
        60,
    );
    r.usage = usage(4);
    let m = RequestMetrics::from_record(&r, no_tokenizer);
    assert!(close(m.ttft.unwrap(), 20.0), "ttft {:?}", m.ttft);
    assert!(close(m.ttfc.unwrap(), 40.0), "ttfc {:?}", m.ttfc);
    assert!(close(m.ttft_sched.unwrap(), 25.0));
    assert!(close(m.queue, 5.0));
    assert!(close(m.e2el.unwrap(), 50.0));
    assert!(close(m.close, 55.0), "stream close is t_end − t_send");
    assert!(close(m.headers.unwrap(), 1.0));
    // TPOT = (50 − 20) / (4 − 1) = 10; NTPOT = 50 / 4 = 12.5.
    assert!(close(m.tpot.unwrap(), 10.0));
    assert!(close(m.ntpot.unwrap(), 12.5));
    assert_eq!(m.n_out, Some(4));
    assert_eq!(m.n_out_source, NOutSource::Usage);
    assert!(!m.n_out_estimated);
    assert_eq!(m.n_in, Some(12));
    assert_eq!(m.icl, vec![10.0, 10.0, 10.0]);
    assert!(close(m.tokens_per_event.unwrap(), 1.0));
}

#[test]
fn tpot_is_undefined_for_a_single_token() {
    let t0 = Instant::now();
    let mut r = record(t0, 0, &[(30, OutputKind::Content, None)], 31);
    r.usage = usage(1);
    let m = RequestMetrics::from_record(&r, no_tokenizer);
    assert!(close(m.ttft.unwrap(), 30.0));
    assert_eq!(m.tpot, None, "TPOT needs N_out > 1");
    assert!(close(m.ntpot.unwrap(), 30.0));
    assert!(m.icl.is_empty() && m.itl.is_empty());
    assert_eq!(m.itl_basis, ItlBasis::NoGaps);
}

#[test]
fn a_reply_without_output_events_has_no_ttft() {
    let t0 = Instant::now();
    let r = record(t0, 0, &[], 40);
    let m = RequestMetrics::from_record(&r, |_| panic!("nothing to tokenize"));
    assert_eq!(m.ttft, None);
    assert_eq!(m.e2el, None);
    assert_eq!(m.tpot, None);
    assert!(close(m.close, 40.0));
    assert_eq!(m.samples(Metric::Ttft), Vec::<f64>::new());
}

#[test]
fn itl_weights_gaps_by_tokens() {
    let t0 = Instant::now();
    // Gaps: 10 ms covering 1 token, 30 ms covering 3 tokens, then an empty-token event after
    // 5 ms whose wait is carried into the next 15 ms gap covering 2 tokens → (5 + 15) / 2.
    let r = record(
        t0,
        0,
        &[
            (10, OutputKind::Content, Some(1)),
            (20, OutputKind::Content, Some(1)),
            (50, OutputKind::Content, Some(3)),
            (55, OutputKind::Content, Some(0)),
            (70, OutputKind::Content, Some(2)),
        ],
        70,
    );
    let m = RequestMetrics::from_record(&r, no_tokenizer);
    assert_eq!(m.itl_basis, ItlBasis::Reported);
    assert_eq!(m.icl, vec![10.0, 30.0, 5.0, 15.0]);
    assert_eq!(m.itl, vec![10.0, 10.0, 10.0, 10.0, 10.0, 10.0]);
    // Without usage, N_out is the sum of the reported per-event counts (not an estimate).
    assert_eq!(m.n_out, Some(7));
    assert_eq!(m.n_out_source, NOutSource::Events);
    assert!(!m.n_out_estimated);
}

#[test]
fn itl_spreads_n_out_evenly_when_events_do_not_say() {
    let t0 = Instant::now();
    // 3 events, 6 tokens by usage → 2 tokens per event: gaps 20 and 40 → 2×10 and 2×20.
    let mut r = record(
        t0,
        0,
        &[
            (10, OutputKind::Content, None),
            (30, OutputKind::Content, None),
            (70, OutputKind::Content, None),
        ],
        70,
    );
    r.usage = usage(6);
    let m = RequestMetrics::from_record(&r, no_tokenizer);
    assert_eq!(m.itl_basis, ItlBasis::EvenlyDistributed);
    assert_eq!(m.itl, vec![10.0, 10.0, 20.0, 20.0]);
    assert!(close(m.tokens_per_event.unwrap(), 2.0));
}

#[test]
fn n_out_falls_back_to_one_tokenizer_call_on_the_whole_text() {
    let t0 = Instant::now();
    let mut r = record(
        t0,
        0,
        &[
            (10, OutputKind::Reasoning, None),
            (20, OutputKind::Content, None),
            (30, OutputKind::Content, None),
        ],
        30,
    );
    r.reasoning = "think ".into();
    r.text = "Hello world".into();
    let calls = AtomicUsize::new(0);
    let m = RequestMetrics::from_record(&r, |text| {
        calls.fetch_add(1, Ordering::SeqCst);
        assert_eq!(text, "think Hello world", "the whole generated text, once");
        Some(text.split_whitespace().count())
    });
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(m.n_out, Some(3));
    assert!(m.n_out_estimated);
    assert_eq!(m.n_out_source, NOutSource::Tokenizer);

    // Usage wins over the tokenizer, which is then not called at all.
    r.usage = usage(5);
    let m = RequestMetrics::from_record(&r, |_| panic!("usage was reported"));
    assert_eq!(m.n_out, Some(5));
    assert!(!m.n_out_estimated);

    // Neither: N_out unknown, TPOT undefined, ITL falls back to one token per event.
    r.usage = None;
    let m = RequestMetrics::from_record(&r, no_tokenizer);
    assert_eq!(m.n_out, None);
    assert_eq!(m.tpot, None);
    assert_eq!(m.itl_basis, ItlBasis::OnePerEvent);
    assert_eq!(m.itl, m.icl);
}

#[test]
fn client_overhead_is_reported_per_event() {
    let t0 = Instant::now();
    let mut r = record(
        t0,
        0,
        &[
            (10, OutputKind::Content, Some(1)),
            (20, OutputKind::Content, Some(1)),
        ],
        20,
    );
    r.timing.client_overhead = Duration::from_micros(30);
    let m = RequestMetrics::from_record(&r, no_tokenizer);
    assert!(close(m.client_overhead, 0.03));
    assert!(close(m.client_overhead_us_per_event.unwrap(), 15.0));
}

#[test]
fn summary_percentiles_follow_numpy() {
    // numpy.percentile(range(1, 11), [50, 90, 95, 99]) with h = 9p:
    // p50 h=4.5 → 5.5; p90 h=8.1 → 9.1; p95 h=8.55 → 9.55; p99 h=8.91 → 9.91.
    // mean 5.5; population var = (Σx² / n) − mean² = 38.5 − 30.25 = 8.25 → std 2.8723.
    let x: Vec<f64> = (1..=10).map(f64::from).collect();
    let s = Summary::from_samples(&x).unwrap();
    assert!(close(s.p50, 5.5) && close(s.p90, 9.1) && close(s.p95, 9.55) && close(s.p99, 9.91));
    assert!(close(s.mean, 5.5));
    assert!(close(s.std, 8.25f64.sqrt()));
    assert_eq!((s.n, s.min, s.max), (10, 1.0, 10.0));
}

fn noisy(n: usize, center: f64, sd: f64, seed: u64) -> Vec<f64> {
    let mut rng = StdRng::seed_from_u64(seed);
    let dist = Normal::new(center, sd).unwrap();
    (0..n).map(|_| dist.sample(&mut rng)).collect()
}

fn opts(tolerance: f64, floor_ms: f64) -> CompareOptions {
    CompareOptions {
        tolerance,
        floor_ms,
        ..CompareOptions::default()
    }
}

#[test]
fn a_two_fold_slowdown_with_small_noise_is_a_regression() {
    let base = noisy(20, 100.0, 2.0, 1);
    let new = noisy(20, 200.0, 2.0, 2);
    let v = compare(&base, &new, &opts(0.5, 10.0));
    assert_eq!(v.status, Status::Regression, "{}", v.reason);
    assert!(v.regression);
    assert!(
        v.ci_low.unwrap() > 90.0 && v.ci_high.unwrap() < 110.0,
        "{v:?}"
    );
    assert!((v.ratio.unwrap() - 2.0).abs() < 0.1);
    assert_eq!(v.row_verdict().to_string(), "regression");
}

#[test]
fn identical_distributions_are_not_a_regression() {
    let base = noisy(20, 100.0, 5.0, 3);
    let v = compare(&base, &base, &opts(0.5, 0.0));
    assert_eq!(v.status, Status::Ok, "{}", v.reason);
    assert!(!v.regression);
    assert!(v.noise_band.unwrap() > 0.0);
    // With no allowance at all, the same distribution straddles it: not a pass, not a failure.
    let v = compare(&base, &base, &opts(0.0, 0.0));
    assert_eq!(v.status, Status::Inconclusive, "{}", v.reason);
}

#[test]
fn a_small_shift_in_large_noise_is_inconclusive() {
    // Median moves ~10 % while single requests scatter ±50 %: above a 5 % tolerance, but the
    // CI of the difference of medians includes zero.
    let base = noisy(8, 100.0, 50.0, 4);
    let new: Vec<f64> = noisy(8, 100.0, 50.0, 5);
    let mb = chatgate::latency::stats::median(&base).unwrap();
    let mn = chatgate::latency::stats::median(&new).unwrap();
    let shift = mb * 1.1 - mn;
    let new: Vec<f64> = new.iter().map(|x| x + shift).collect();
    let v = compare(&base, &new, &opts(0.05, 0.0));
    assert_eq!(v.status, Status::Inconclusive, "{}", v.reason);
    assert!(!v.regression);
    let limit = v.threshold_ms.unwrap();
    assert!(v.ci_low.unwrap() <= limit && v.ci_high.unwrap() > limit);
    assert!(v.reason.contains("straddles the allowed"), "{}", v.reason);
    assert!(v.row_verdict().to_string().starts_with("inconclusive (±"));
    // More samples of the same spread would decide it: the verdict says how many.
    let decide = v.to_decide.as_deref().unwrap();
    assert!(decide.contains("more samples per side (8 → "), "{decide}");
}

#[test]
fn the_floor_keeps_tiny_figures_from_flagging() {
    // 0.2 ms → 0.6 ms is 3× slower and certain, but far below a 10 ms floor.
    let base = noisy(20, 0.2, 0.01, 6);
    let new = noisy(20, 0.6, 0.01, 7);
    assert_eq!(compare(&base, &new, &opts(1.0, 10.0)).status, Status::Ok);
    assert_eq!(
        compare(&base, &new, &opts(1.0, 0.0)).status,
        Status::Regression
    );
}

#[test]
fn fewer_than_three_samples_give_no_verdict() {
    let v = compare(&[100.0, 101.0], &[500.0, 510.0, 520.0], &opts(0.1, 0.0));
    assert_eq!(v.status, Status::Insufficient);
    assert!(!v.regression);
    assert_eq!(v.ci_low, None);
    assert!(v.reason.contains("no verdict"), "{}", v.reason);
    let v = compare(&[], &[1.0], &CompareOptions::default());
    assert_eq!(v.status, Status::Insufficient);
    assert_eq!(v.median_base, None);
}

#[test]
fn the_bootstrap_is_deterministic_for_a_seed() {
    let base = noisy(15, 100.0, 20.0, 8);
    let new = noisy(15, 115.0, 20.0, 9);
    let o = opts(0.05, 0.0);
    let a = compare(&base, &new, &o);
    let b = compare(&base, &new, &o);
    assert_eq!(a, b);
    let other = compare(&base, &new, &CompareOptions { seed: 99, ..o });
    assert_ne!(
        (a.ci_low, a.ci_high),
        (other.ci_low, other.ci_high),
        "another seed resamples differently"
    );
}

#[test]
fn compare_options_reject_nonsense() {
    assert!(CompareOptions::default().validate().is_ok());
    let bad = CompareOptions {
        confidence: 1.5,
        ..CompareOptions::default()
    };
    let e = bad.validate().unwrap_err();
    assert_eq!(e.exit_code(), 2);
    assert!(e.to_string().contains("confidence"), "{e}");
}

fn sample_baseline() -> Baseline {
    let mut scenarios = chatgate::latency::Scenarios::new();
    for (id, center) in [("greeting", 100.0), ("math", 200.0)] {
        let mut s = chatgate::latency::ScenarioSamples::new();
        s.insert(Metric::Ttft, noisy(5, center, 3.0, 10));
        s.insert(Metric::Tpot, noisy(5, 10.0, 0.5, 11));
        s.insert(Metric::E2el, noisy(5, center * 3.0, 5.0, 12));
        s.insert(Metric::Itl, noisy(40, 10.0, 0.5, 13));
        scenarios.insert(id.to_string(), s);
    }
    Baseline::new(
        Environment::current("http://127.0.0.1:8000", Some("tiny-chat".into())),
        Settings {
            repeats: 5,
            concurrency: 1,
            warmup: 1,
            max_tokens: Some(32),
        },
        scenarios,
    )
}

#[test]
fn a_baseline_round_trips_through_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = Baseline::path(dir.path(), "http://127.0.0.1:8000");
    assert_eq!(
        path,
        dir.path()
            .join("latency")
            .join("http___127.0.0.1_8000.json")
    );
    assert_eq!(Baseline::read(&path).unwrap(), None, "no baseline yet");
    let b = sample_baseline();
    b.write(&path).unwrap();
    let back = Baseline::read(&path).unwrap().expect("written");
    assert_eq!(
        (&back.environment, &back.settings, &back.created),
        (&b.environment, &b.settings, &b.created)
    );
    for (id, metrics) in &b.scenarios {
        for (metric, samples) in metrics {
            let read = &back.scenarios[id][metric];
            assert_eq!(read.len(), samples.len());
            for (a, b) in read.iter().zip(samples) {
                assert!(
                    (a - b).abs() <= 0.0005,
                    "{id}/{metric}: {a} vs {b} (µs resolution)"
                );
            }
        }
    }
    // What was read back writes back byte for byte.
    let first = std::fs::read_to_string(&path).unwrap();
    back.write(&path).unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), first);
    assert_eq!(Baseline::read(&path).unwrap().unwrap(), back);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("\n  \"version\": 1"), "pretty JSON:\n{text}");
    assert!(chrono::DateTime::parse_from_rfc3339(&back.created).is_ok());
    // Nothing but the baseline is left in the folder (the temp file was renamed).
    let entries = std::fs::read_dir(path.parent().unwrap()).unwrap().count();
    assert_eq!(entries, 1);
}

#[test]
fn a_malformed_baseline_names_the_file_and_says_how_to_fix_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.json");
    std::fs::write(&path, "{\"version\": 1, \"created\": ").unwrap();
    let e = Baseline::read(&path).unwrap_err();
    assert_eq!(e.exit_code(), 2);
    let msg = e.to_string();
    assert!(
        msg.contains("bad.json") && msg.contains("malformed latency baseline"),
        "{msg}"
    );
    assert!(msg.contains("--update"), "{msg}");

    let mut other = serde_json::to_value(sample_baseline()).unwrap();
    other["version"] = 99.into();
    std::fs::write(&path, other.to_string()).unwrap();
    let msg = Baseline::read(&path).unwrap_err().to_string();
    assert!(
        msg.contains("version 99") && msg.contains("--update"),
        "{msg}"
    );
}

#[test]
fn compare_baseline_pools_shared_scenarios() {
    let base = sample_baseline();
    let mut new = base.scenarios.clone();
    // TTFT doubles everywhere; a scenario the baseline never saw is ignored.
    for s in new.values_mut() {
        for x in s.get_mut(&Metric::Ttft).unwrap() {
            *x *= 2.0;
        }
    }
    let mut unseen = chatgate::latency::ScenarioSamples::new();
    unseen.insert(Metric::Ttft, vec![1e6; 5]);
    new.insert("unseen".into(), unseen);
    let verdicts = compare_baseline(&base, &new, |_| opts(0.5, 0.0), true);
    let pooled: Vec<_> = verdicts.iter().filter(|v| v.scenario.is_none()).collect();
    assert_eq!(pooled.len(), 4);
    let status = |m: Metric| {
        pooled
            .iter()
            .find(|v| v.metric == m)
            .unwrap()
            .verdict
            .status
    };
    assert_eq!(status(Metric::Ttft), Status::Regression);
    assert_eq!(status(Metric::Tpot), Status::Ok);
    assert_eq!(status(Metric::E2el), Status::Ok);
    assert_eq!(status(Metric::Itl), Status::Ok);
    let ttft = pooled.iter().find(|v| v.metric == Metric::Ttft).unwrap();
    assert_eq!(ttft.verdict.n_new, 10, "the unseen scenario is not pooled");
    let per: Vec<_> = verdicts.iter().filter(|v| v.scenario.is_some()).collect();
    assert_eq!(per.len(), 8);
    assert!(per
        .iter()
        .filter(|v| v.metric == Metric::Ttft)
        .all(|v| v.verdict.regression));
}

#[test]
fn scenario_samples_collect_the_gated_metrics() {
    let t0 = Instant::now();
    let mut r = record(
        t0,
        0,
        &[
            (10, OutputKind::Content, Some(1)),
            (30, OutputKind::Content, Some(2)),
        ],
        30,
    );
    r.usage = usage(3);
    let m = RequestMetrics::from_record(&r, no_tokenizer);
    let s = scenario_samples([&m, &m]);
    assert_eq!(
        s.keys().copied().collect::<Vec<_>>(),
        Metric::GATED.to_vec()
    );
    assert_eq!(s[&Metric::Ttft], vec![10.0, 10.0]);
    assert_eq!(s[&Metric::Itl], vec![10.0, 10.0, 10.0, 10.0]);
}

#[test]
fn schedules_hit_their_rate_and_repeat_for_a_seed() {
    for arrival in [
        Arrival::Constant,
        Arrival::Poisson,
        Arrival::Gamma { shape: 0.5 },
        Arrival::Gamma { shape: 4.0 },
    ] {
        let s = Schedule::generate(10_000, 50.0, arrival, 42).unwrap();
        assert_eq!(s.len(), 10_000);
        assert_eq!(s.offsets[0], Duration::ZERO);
        assert!(s.offsets.windows(2).all(|w| w[0] <= w[1]), "{arrival:?}");
        let rate = (s.len() - 1) as f64 / s.span().as_secs_f64();
        assert!(
            (rate - 50.0).abs() / 50.0 < 0.04,
            "{arrival:?}: rate {rate}"
        );
        assert_eq!(s, Schedule::generate(10_000, 50.0, arrival, 42).unwrap());
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(serde_json::from_str::<Schedule>(&json).unwrap(), s);
    }
    let a = Schedule::generate(100, 50.0, Arrival::Poisson, 1).unwrap();
    let b = Schedule::generate(100, 50.0, Arrival::Poisson, 2).unwrap();
    assert_ne!(a.offsets, b.offsets);
}

#[test]
fn gamma_with_small_shape_is_burstier_than_poisson() {
    // CV of Γ(k) gaps is 1/√k: shape 0.25 → 2, Poisson (k = 1) → 1.
    let cv = |arrival| {
        let s = Schedule::generate(10_000, 20.0, arrival, 7).unwrap();
        let gaps: Vec<f64> = s
            .offsets
            .windows(2)
            .map(|w| (w[1] - w[0]).as_secs_f64())
            .collect();
        let sum = Summary::from_samples(&gaps).unwrap();
        sum.std / sum.mean
    };
    let poisson = cv(Arrival::Poisson);
    let bursty = cv(Arrival::Gamma { shape: 0.25 });
    assert!((poisson - 1.0).abs() < 0.05, "{poisson}");
    assert!((bursty - 2.0).abs() < 0.15, "{bursty}");
}

#[test]
fn bad_schedule_parameters_are_input_errors() {
    assert_eq!(
        Schedule::generate(10, 0.0, Arrival::Poisson, 1)
            .unwrap_err()
            .exit_code(),
        2
    );
    let e = Schedule::generate(10, 5.0, Arrival::Gamma { shape: -1.0 }, 1).unwrap_err();
    assert!(e.to_string().contains("shape"), "{e}");
}

/// A fake request: records its own timing, sleeping `ms` before its one output event.
async fn fake_request(t_sched: Instant, sleep_ms: u64) -> Result<Record, String> {
    let mut r = Record::new();
    r.timing.t_sched = t_sched;
    r.timing.t_send = Instant::now();
    tokio::time::sleep(ms(sleep_ms)).await;
    r.timing.events.push(OutputEvent {
        at: Instant::now(),
        kind: OutputKind::Content,
        tokens: Some(1),
    });
    r.usage = usage(1);
    r.timing.t_end = Instant::now();
    Ok(r)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_loop_respects_concurrency_and_excludes_warmup() {
    let in_flight = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let calls = Arc::new(AtomicUsize::new(0));
    let outcomes = closed_loop(12, 3, 2, |i, t_sched| {
        let (in_flight, peak, calls) = (in_flight.clone(), peak.clone(), calls.clone());
        async move {
            calls.fetch_add(1, Ordering::SeqCst);
            let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            peak.fetch_max(now, Ordering::SeqCst);
            let r = fake_request(t_sched, 30 + (i as u64 % 3) * 10).await;
            in_flight.fetch_sub(1, Ordering::SeqCst);
            r
        }
    })
    .await;
    assert_eq!(calls.load(Ordering::SeqCst), 14, "12 measured + 2 warm-up");
    assert_eq!(outcomes.len(), 12);
    assert_eq!(
        outcomes.iter().map(|o| o.index).collect::<Vec<_>>(),
        (0..12).collect::<Vec<_>>()
    );
    assert_eq!(
        peak.load(Ordering::SeqCst),
        3,
        "never above, and reaches, 3"
    );
    let s = RunSummary::from(&outcomes, None, no_tokenizer);
    assert_eq!((s.requests, s.errors), (12, 0));
    assert_eq!(s.n_out_total, 12);
    assert!(s.duration_s > 0.0 && s.throughput > 0.0);
    assert!(s.metrics.contains_key(&Metric::Ttft));
    assert!(
        !s.metrics.contains_key(&Metric::Tpot),
        "N_out = 1 everywhere"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_loop_does_not_wait_for_earlier_requests() {
    // Request 0 takes 400 ms; the others are scheduled 20 ms apart and take 1 ms. In an open
    // loop they start on schedule and finish long before request 0 does.
    let schedule = Schedule::generate(5, 50.0, Arrival::Constant, 0).unwrap();
    let finished = Arc::new(Mutex::new(Vec::new()));
    let warm = Arc::new(AtomicUsize::new(0));
    let outcomes = open_loop(&schedule, 1, 0, |i, t_sched| {
        let finished = finished.clone();
        let warm = warm.clone();
        warm.fetch_add(1, Ordering::SeqCst);
        async move {
            let r = fake_request(t_sched, if i == 0 { 400 } else { 1 }).await;
            finished.lock().unwrap().push(i);
            r
        }
    })
    .await;
    assert_eq!(
        warm.load(Ordering::SeqCst),
        6,
        "1 warm-up + 5 measured calls"
    );
    assert_eq!(outcomes.len(), 5, "the warm-up is excluded");
    let order = finished.lock().unwrap().clone();
    // Warm-up (index 0, 400 ms) finished first, before the run; then 1..4 before 0.
    assert_eq!(order[0], 0);
    assert_eq!(&order[1..5], &[1, 2, 3, 4]);
    assert_eq!(order[5], 0);
    // Every request started after its scheduled instant, and t_sched is the schedule's.
    let start = outcomes[0].t_sched;
    for (o, offset) in outcomes.iter().zip(&schedule.offsets) {
        assert_eq!(o.t_sched, start + *offset);
        let rec = o.result.as_ref().unwrap();
        assert_eq!(rec.timing.t_sched, o.t_sched);
        assert!(rec.timing.t_send >= o.t_sched);
    }
    // Request 4 (offset 80 ms) was sent well before request 0 (400 ms) ended.
    let r0 = outcomes[0].result.as_ref().unwrap();
    let r4 = outcomes[4].result.as_ref().unwrap();
    assert!(r4.timing.t_send < r0.timing.t_end);
    let s = RunSummary::from(&outcomes, None, no_tokenizer);
    assert_eq!(s.drift.unwrap().n, 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capped_open_loop_reports_the_drift_it_causes() {
    // At most one in flight, each taking 60 ms, scheduled 10 ms apart: the cap holds requests
    // back, and the lateness shows as drift and in TTFT from the schedule, not hidden.
    let schedule = Schedule::generate(4, 100.0, Arrival::Constant, 0).unwrap();
    let outcomes = open_loop(&schedule, 0, 1, |_, t_sched| fake_request(t_sched, 60)).await;
    let last = &outcomes[3];
    assert!(last.drift_ms() >= 100.0, "drift {}", last.drift_ms());
    let m = RequestMetrics::from_record(last.result.as_ref().unwrap(), no_tokenizer);
    assert!(m.ttft_sched.unwrap() > m.ttft.unwrap() + 100.0);
    let s = RunSummary::from(&outcomes, None, no_tokenizer);
    assert!(s.drift_warning.is_some(), "{s:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn goodput_counts_errors_as_misses() {
    // Four requests: two fast, one slow, one error. SLO TTFT ≤ 150 ms → 2 of 4 attain.
    let outcomes = closed_loop(4, 4, 0, |i, t_sched| async move {
        match i {
            3 => Err("connection refused".to_string()),
            2 => fake_request(t_sched, 300).await,
            _ => fake_request(t_sched, 1).await,
        }
    })
    .await;
    let slo = Slo {
        ttft: Some(150.0),
        tpot: None,
        e2el: None,
    };
    let s = RunSummary::from(&outcomes, Some(&slo), no_tokenizer);
    assert_eq!((s.requests, s.errors), (3, 1));
    assert!(close(s.slo_attainment.unwrap(), 0.5));
    assert!(close(s.goodput.unwrap(), 2.0 / s.duration_s));
    let totals = s.totals();
    assert_eq!(totals.errors, 1);
    assert_eq!(totals.goodput, s.goodput);
    assert!(RunSummary::from(&outcomes, None, no_tokenizer)
        .goodput
        .is_none());
}

/// METRICS.md's table, copied verbatim (design/METRICS.md lives outside the repository).
const METRICS_MD_TABLE: &str = "\
| TTFT | t_1 − t_send |
| TTFC | first *content* (non-reasoning) event − t_send |
| E2EL | t_K − t_send (stream-close time reported separately as t_end − t_send) |
| TPOT | (E2EL − TTFT) / (N_out − 1), only when N_out > 1 |
| ICL | the gaps t_k − t_(k−1) between output events (a distribution over all events) |
| ITL | token-weighted gaps: a gap covering m tokens counts as m samples of gap/m |
| NTPOT | E2EL / N_out (normalised latency; never call it TPOT) |
| throughput | Σ N_out / D, with D = last t_end − first t_send of the run |
| goodput | requests meeting every SLO (TTFT, TPOT, E2EL limits) / D; errors count as misses |
";

#[test]
fn definitions_are_metrics_md_verbatim() {
    let rows: Vec<String> = definitions()
        .iter()
        .map(|(name, def)| format!("| {name} | {def} |"))
        .collect();
    assert_eq!(rows.join("\n"), METRICS_MD_TABLE.trim_end());
}

#[test]
fn report_rows_and_suite_options() {
    let base = [10.0, 11.0, 12.0];
    let new = [30.0, 31.0, 32.0, 33.0];
    let v = compare(&base, &new, &opts(0.5, 0.0));
    let row = latency_row(Metric::Ttft, &new, Some(&base), Some(&v)).unwrap();
    assert_eq!(row.metric, "ttft");
    assert_eq!(row.n, 4);
    assert!(close(row.p50, 31.5));
    assert_eq!(row.baseline_p50, Some(11.0));
    assert_eq!(row.verdict.to_string(), "regression");
    assert_eq!(row.baseline_samples, base.to_vec());
    let row = latency_row(Metric::Itl, &new, None, None).unwrap();
    assert_eq!(row.verdict.to_string(), "no baseline");
    assert!(latency_row(Metric::Tpot, &[], None, None).is_none());

    let section: chatgate::suite::LatencySection =
        toml::from_str("tolerance = 0.25\nmin_regression_ms = { tpot = 3.0 }\nbootstrap = 500")
            .unwrap();
    let o = CompareOptions::for_metric(Some(&section), Metric::Itl);
    assert_eq!((o.tolerance, o.floor_ms, o.resamples), (0.25, 3.0, 500));
    let o = CompareOptions::for_metric(Some(&section), Metric::Ttft);
    assert_eq!(o.floor_ms, 50.0, "the TTFT default floor");
    assert_eq!(
        CompareOptions::for_metric(None, Metric::E2el).floor_ms,
        100.0
    );
}

#[test]
fn environment_differences_are_listed() {
    let a = Environment::current("candle:models/tiny-chat", None);
    assert!(a.differences(&a).is_empty());
    let mut b = a.clone();
    b.cpus += 2;
    b.model = Some("other".into());
    let d = b.differences(&a);
    assert_eq!(d.len(), 2, "{d:?}");
    assert!(d[0].starts_with("cpus: baseline"), "{d:?}");
}
