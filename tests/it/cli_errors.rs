//! Bad input exits 2 with the file named and a readable message — never a panic, never a hang.
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use assert_cmd::Command;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-chatml")
}

fn chatgate(args: &[&str]) -> (i32, String, String) {
    let out = Command::cargo_bin("chatgate")
        .unwrap()
        .args(args)
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// Exit 2, the message names `needle` (a file), and nothing panicked.
fn assert_bad_input(args: &[&str], needle: &str) -> String {
    let (code, stdout, stderr) = chatgate(args);
    assert_eq!(code, 2, "args {args:?}\nstdout: {stdout}\nstderr: {stderr}");
    assert!(
        stderr.contains(needle),
        "the message does not name {needle:?}: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    stderr
}

fn model_copy() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("model");
    fs::create_dir(&model).unwrap();
    for e in fs::read_dir(fixture()).unwrap() {
        let e = e.unwrap();
        fs::copy(e.path(), model.join(e.file_name())).unwrap();
    }
    (dir, model)
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_string()
}

#[test]
fn missing_suite_file() {
    assert_bad_input(
        &["check", "/nonexistent/suite.toml"],
        "/nonexistent/suite.toml",
    );
}

#[test]
fn suite_with_unknown_key_names_line_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let s = write(
        dir.path(),
        "s.toml",
        "[model]\ndir = \"m\"\ntemprature = 0.7\n",
    );
    let err = assert_bad_input(&["check", &s], "s.toml");
    assert!(
        err.contains("temprature") && err.contains("line 3"),
        "{err}"
    );
}

#[test]
fn suite_with_wrong_type_names_line_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let s = write(
        dir.path(),
        "s.toml",
        "[model]\ndir = \"m\"\n\n[generation]\ntemperature = \"hot\"\n",
    );
    let err = assert_bad_input(&["check", &s], "s.toml");
    assert!(
        err.contains("line 5") && err.contains("temperature"),
        "{err}"
    );
}

#[test]
fn suite_pointing_at_a_missing_model_dir() {
    let dir = tempfile::tempdir().unwrap();
    let s = write(dir.path(), "s.toml", "[model]\ndir = \"no-such-model\"\n");
    assert_bad_input(&["check", &s], "no-such-model");
}

#[test]
fn malformed_json_in_the_model_dir() {
    let (dir, model) = model_copy();
    fs::write(
        model.join("generation_config.json"),
        "{\"eos_token_id\": [3,",
    )
    .unwrap();
    let s = write(dir.path(), "s.toml", "[model]\ndir = \"model\"\n");
    assert_bad_input(&["check", &s], "generation_config.json");
}

#[test]
fn malformed_golden_jsonl_names_the_line() {
    let (dir, _model) = model_copy();
    let g = write(
        dir.path(),
        "golden.jsonl",
        "{\"messages\": [], \"input_ids\": [1]}\n{\"messages\": \"oops\"}\n",
    );
    let s = write(
        dir.path(),
        "s.toml",
        &format!("[model]\ndir = \"model\"\n[sft]\ngolden = \"{g}\"\n"),
    );
    let err = assert_bad_input(&["check", &s], "golden.jsonl");
    assert!(err.contains("line 2"), "{err}");
}

#[test]
fn serving_template_with_a_syntax_error() {
    let (dir, model) = model_copy();
    fs::write(
        model.join("chat_template.jinja"),
        "{% for m in messages %}{{ m.content }",
    )
    .unwrap();
    let s = write(dir.path(), "s.toml", "[model]\ndir = \"model\"\n");
    let err = assert_bad_input(&["check", &s], "chat_template.jinja");
    assert!(err.contains("syntax"), "{err}");
}

#[test]
fn render_with_a_template_syntax_error() {
    let dir = tempfile::tempdir().unwrap();
    let t = write(dir.path(), "bad.jinja", "{% if messages %}unclosed");
    let m = write(
        dir.path(),
        "m.json",
        "[{\"role\": \"user\", \"content\": \"hi\"}]",
    );
    assert_bad_input(&["render", "--template", &t, "--messages", &m], "bad.jinja");
}

#[test]
fn render_with_a_template_that_loops_forever_stops_quickly() {
    let dir = tempfile::tempdir().unwrap();
    let t = write(dir.path(), "loop.jinja", "{% for a in range(100000) %}{% for b in range(100000) %}{% for c in range(100000) %}x{% endfor %}{% endfor %}{% endfor %}");
    let m = write(
        dir.path(),
        "m.json",
        "[{\"role\": \"user\", \"content\": \"hi\"}]",
    );
    let start = Instant::now();
    assert_bad_input(
        &["render", "--template", &t, "--messages", &m],
        "loop.jinja",
    );
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "took {:?}",
        start.elapsed()
    );
}

#[test]
fn render_with_a_recursive_macro_stops() {
    let dir = tempfile::tempdir().unwrap();
    let t = write(
        dir.path(),
        "rec.jinja",
        "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
    );
    let m = write(
        dir.path(),
        "m.json",
        "[{\"role\": \"user\", \"content\": \"hi\"}]",
    );
    assert_bad_input(&["render", "--template", &t, "--messages", &m], "rec.jinja");
}

#[test]
fn render_raise_exception_carries_the_templates_message() {
    let dir = tempfile::tempdir().unwrap();
    let t = write(dir.path(), "r.jinja", "{% if messages[0]['role'] != 'user' %}{{ raise_exception('Conversation roles must alternate user/assistant') }}{% endif %}ok");
    let m = write(
        dir.path(),
        "m.json",
        "[{\"role\": \"assistant\", \"content\": \"hi\"}]",
    );
    let err = assert_bad_input(&["render", "--template", &t, "--messages", &m], "r.jinja");
    assert!(
        err.contains("Conversation roles must alternate user/assistant"),
        "{err}"
    );
}

#[test]
fn render_with_malformed_messages() {
    let dir = tempfile::tempdir().unwrap();
    let m = write(dir.path(), "m.json", "{\"messages\": 3}");
    let model = fixture();
    assert_bad_input(
        &[
            "render",
            "--model",
            model.to_str().unwrap(),
            "--messages",
            &m,
        ],
        "m.json",
    );
    let m = write(dir.path(), "m2.json", "[{\"role\": \"user\"");
    assert_bad_input(
        &[
            "render",
            "--model",
            model.to_str().unwrap(),
            "--messages",
            &m,
        ],
        "m2.json",
    );
}

#[test]
fn inspect_a_missing_directory() {
    assert_bad_input(&["inspect", "/nonexistent/model"], "/nonexistent/model");
}

/// Templates on which minijinja 3.0.5 itself panics: exit 2 naming the file, no panic message,
/// from `render` and from `check` (the serving template of a model directory).
#[test]
fn templates_that_panic_the_engine_are_bad_input() {
    for (name, source) in [
        (
            "cycle.jinja",
            "{% for m in messages %}{{ loop.cycle() }}{% endfor %}",
        ),
        ("divisible.jinja", "{{ 10 is divisibleby 0 }}"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let t = write(dir.path(), name, source);
        let m = write(
            dir.path(),
            "m.json",
            "[{\"role\": \"user\", \"content\": \"hi\"}]",
        );
        let err = assert_bad_input(&["render", "--template", &t, "--messages", &m], name);
        assert!(err.contains("template engine failed"), "{err}");

        let (dir, model) = model_copy();
        fs::write(model.join("chat_template.jinja"), source).unwrap();
        // With SFT rows to compare against, `check` renders the serving template.
        let s = write(
            dir.path(),
            "s.toml",
            "[model]\ndir = \"model\"\n[sft]\ngolden = \"model/sft.jsonl\"\n",
        );
        assert_bad_input(&["check", &s], "chat_template.jinja");
    }
}

/// A suite value that would escape the suite's folder, abort an allocation or panic a timer is
/// refused at load with the key named (exit 2), before anything runs.
#[test]
fn absurd_suite_values_are_refused_with_the_key_named() {
    let (dir, _model) = model_copy();
    for (extra, key) in [
        ("name = \"../../x\"\n", "name"),
        ("name = \"/abs/path\"\n", "name"),
        ("[target]\nread_timeout_s = inf\n", "read_timeout_s"),
        ("[target]\nconnect_timeout_s = nan\n", "connect_timeout_s"),
        ("[target]\ntotal_timeout_s = -1.0\n", "total_timeout_s"),
        ("[latency]\nbootstrap = 10000000000000\n", "bootstrap"),
        ("[latency]\nrepeats = 4294967295\n", "repeats"),
        ("[latency]\nbaseline = \"../escape\"\n", "baseline"),
        ("[server]\nconcurrency = 0\n", "concurrency"),
        ("[server]\nsampled_allowance = 5.0\n", "sampled_allowance"),
        ("[server]\nsampled_allowance = -0.1\n", "sampled_allowance"),
        ("[server]\nsampled_runs = 99999999\n", "sampled_runs"),
        ("[latency]\ncapacity_drop = 1.5\n", "capacity_drop"),
        ("[latency]\ninconclusive = \"ignore\"\n", "inconclusive"),
        ("[client]\nrelies_on = [\"tools\"]\n", "relies_on"),
        (
            "[client]\nreasoning_field = \"thoughts\"\n",
            "reasoning_field",
        ),
        ("[client]\ncommand = []\n", "command"),
        ("[client]\ncommand = [\"  \"]\n", "command"),
        (
            "[client]\ncommand = [\"python\"]\ncommand_timeout_s = 0\n",
            "command_timeout_s",
        ),
        (
            "[client]\nsse_variants = [\"ids\"]\n",
            "need [client] command",
        ),
    ] {
        let (top, section) = if extra.starts_with('[') {
            ("", extra)
        } else {
            (extra, "")
        };
        let s = write(
            dir.path(),
            "s.toml",
            &format!("{top}[model]\ndir = \"model\"\n{section}"),
        );
        let err = assert_bad_input(&["check", &s], "s.toml");
        assert!(err.contains(key), "{extra}: {err}");
    }
}

/// An SSE variant the proxy does not know is refused when the gate starts, naming the suite,
/// the key and the variants there are.
#[test]
fn an_unknown_sse_variant_is_refused_by_the_gate() {
    let dir = tempfile::tempdir().unwrap();
    let s = write(
        dir.path(),
        "s.toml",
        "[model]\ndir = \"model\"\n[client]\ncommand = [\"python\", \"app.py\"]\nsse_variants = [\"ids\", \"pings\"]\n",
    );
    let err = assert_bad_input(&["gate", &s], "s.toml");
    assert!(
        err.contains("sse_variants") && err.contains("\"pings\"") && err.contains("keep-alive"),
        "{err}"
    );
}

/// `bench` flags that would abort an allocation or never finish are bad input.
#[test]
fn absurd_bench_flags_are_refused() {
    let suite = concat!(env!("CARGO_MANIFEST_DIR"), "/suites/smoke.toml");
    for (flags, needle) in [
        (&["--requests", "100000000000"][..], "--requests"),
        (&["--rate", "1e-9"][..], "--rate"),
        (&["--rate", "inf"][..], "--rate"),
        (&["--shape", "nan"][..], "--shape"),
        (&["--start-at", "tomorrow"][..], "RFC 3339"),
        (&["--start-at", "4102444800"][..], "at most 24 hours ahead"),
    ] {
        let mut args = vec!["bench", suite, "--mode", "load"];
        args.extend_from_slice(flags);
        let (code, _, stderr) = chatgate(&args);
        assert_eq!(code, 2, "{flags:?}: {stderr}");
        assert!(stderr.contains(needle), "{flags:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

/// Credentials in a target URL are refused, and their values appear in no output.
#[test]
fn credentials_in_a_target_url_are_refused_without_being_printed() {
    let suite = Path::new(env!("CARGO_MANIFEST_DIR")).join("suites/smoke.toml");
    let suite = suite.to_str().unwrap();
    for url in [
        "http://127.0.0.1:9?api_key=sk-canary-query-1234",
        "http://user:sk-canary-pass-5678@127.0.0.1:9",
    ] {
        let (code, stdout, stderr) = chatgate(&["gate", suite, "--target", url]);
        assert_eq!(code, 2, "{url}: {stderr}");
        assert!(stderr.contains("carries credentials"), "{stderr}");
        for secret in ["sk-canary-query-1234", "sk-canary-pass-5678"] {
            assert!(
                !stderr.contains(secret) && !stdout.contains(secret),
                "{stderr}"
            );
        }
    }
}

/// A GGUF with a tokenizer and no chat template (a base model's, as llama.cpp converts it) is
/// refused for what it lacks — the template, and how to add one — not for a tokenizer it has.
#[test]
fn init_on_a_gguf_without_a_template_names_the_template_not_the_tokenizer() {
    // SmolLM2's corpus copy has tokenizer.json and no chat template.
    let (standin, _) =
        crate::common::families::Family::corpus("SmolLM2", "SmolLM2-135M-Instruct").standin();
    let tmp = tempfile::tempdir().unwrap();
    let suite = tmp.path().join("s.toml");
    for model in [standin.join("model.gguf"), standin.clone()] {
        let err = assert_bad_input(
            &[
                "init",
                suite.to_str().unwrap(),
                "--model",
                model.to_str().unwrap(),
            ],
            "has no chat template",
        );
        assert!(!err.contains("has no tokenizer"), "{err}");
        if model.is_file() {
            assert!(
                err.contains("gguf-new-metadata --chat-template-file"),
                "{err}"
            );
            // What the stacks fall back to, as their sources say (context.rs).
            for fallback in [
                "llama-server renders ChatML",
                "llama-cpp-python formats as Llama 2",
                "vLLM refuses the chat",
            ] {
                assert!(err.contains(fallback), "{fallback} in {err}");
            }
        }
        assert!(!suite.exists());
    }
}
