//! The checkpoint boundary where the reference cannot be loaded: `chatgate lock --fingerprint`
//! records the reference where its weights are, and the gate then fingerprints a server from a
//! model directory with no weights at all — against the real `chatgate serve` of the trained
//! model (passes) and of the base model of the same shape (caught at `checkpoint.fingerprint`).
//! A recording that no longer matches the lock is refused, and a reference that cannot fit in
//! memory is refused before a byte of it is loaded.
use std::path::Path;

use serde_json::Value;

use crate::common::cli::chatgate_in;
use crate::common::gate_workspace::{errors, gate, serve_tiny_chat, Workspace};
use chatgate::gate::GateOptions;
use chatgate::serve::Fault;
use chatgate::verdict::Severity;

fn finding<'a>(
    r: &'a chatgate::verdict::GateReport,
    check: &str,
) -> &'a chatgate::verdict::Finding {
    r.findings
        .0
        .iter()
        .find(|f| f.check.id == check)
        .unwrap_or_else(|| panic!("no {check} finding"))
}

/// A copy of a model directory without its weights: what a CI runner holds.
fn weightless_copy(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read dir") {
        let p = e.expect("entry").path();
        let weights = p
            .extension()
            .is_some_and(|x| x == "safetensors" || x == "gguf");
        if p.is_file() && !weights {
            std::fs::copy(&p, to.join(p.file_name().expect("name"))).expect("copy");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorded_reference_fingerprints_a_server_from_a_directory_with_no_weights() {
    let ws = Workspace::new();
    let root = ws.path("");

    // Where the weights are: record.
    let (code, out, err) = chatgate_in(&["lock", "suites/smoke.toml", "--fingerprint"], &root);
    assert_eq!(code, 0, "{out}{err}");
    let path = ws.path("suites/smoke.fingerprint.json");
    let rec: Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("the recording")).unwrap();
    let lock: Value = serde_json::from_str(
        &std::fs::read_to_string(ws.path("suites/smoke.lock.json")).expect("the lock"),
    )
    .unwrap();
    assert_eq!(
        rec["weights"], lock["weights"]["total"],
        "bound to the lock"
    );
    assert_eq!(rec["tokenizer"], lock["tokenizer"]["sha256"]);
    let probes = rec["probes"].as_array().expect("probes");
    assert!(!probes.is_empty());
    for p in probes {
        let ids = p["token_ids"].as_array().expect("ids");
        let lps = p["logprobs"].as_array().expect("logprobs");
        assert!(!ids.is_empty() && ids.len() == lps.len(), "{p}");
        assert!(lps
            .iter()
            .all(|l| l["top"].as_array().is_some_and(|t| t.len() == 5)));
        assert!(!p["prompt_ids"].as_array().expect("prompt ids").is_empty());
    }
    // Recording again changes nothing: the reference is deterministic.
    let (code, out, err) = chatgate_in(&["lock", "suites/smoke.toml", "--fingerprint"], &root);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("smoke.fingerprint.json: up to date"), "{out}");

    // Where there are none: the model's files without weights, no [reference].
    weightless_copy(
        &Path::new(crate::common::gate_workspace::REPO).join("models/tiny-chat"),
        &ws.path("bare/tiny-chat"),
    );
    ws.edit_suite(
        "smoke",
        "dir = \"../models/tiny-chat\"",
        "dir = \"../bare/tiny-chat\"",
    );
    ws.edit_suite(
        "smoke",
        "[reference]\nmodel = \"../models/tiny-chat\"\n",
        "",
    );

    let healthy = serve_tiny_chat(&[]).await;
    let r = gate(ws.suite("smoke"), Some(healthy.url())).await;
    assert!(errors(&r).is_empty(), "{:#?}", errors(&r));
    let fp = finding(&r, "checkpoint.fingerprint");
    assert_eq!(fp.severity, Severity::Pass, "{fp:?}");
    assert!(fp.message.contains("recorded reference"), "{fp:?}");
    let hash = finding(&r, "checkpoint.weights-hash");
    assert_eq!(hash.severity, Severity::Info, "{hash:?}");
    assert!(
        hash.message.contains("checked by their behaviour"),
        "{hash:?}"
    );
    healthy.stop().await.expect("stops");

    // The base model, same shape and same files, served under the trained model's name.
    let base = serve_tiny_chat(&[Fault::BaseCheckpoint]).await;
    let r = gate(ws.suite("smoke"), Some(base.url())).await;
    let first = r
        .findings
        .0
        .iter()
        .find(|f| f.severity == Severity::Error)
        .expect("an error");
    assert_eq!(
        first.check.id,
        "checkpoint.fingerprint",
        "{:#?}",
        errors(&r)
    );
    assert!(first
        .message
        .contains("another checkpoint than the recorded reference"));
    base.stop().await.expect("stops");

    // A recording made for other weights is refused, not used.
    let text = std::fs::read_to_string(&path).unwrap();
    let total = rec["weights"].as_str().unwrap();
    std::fs::write(&path, text.replace(total, &"0".repeat(total.len()))).unwrap();
    let err = chatgate::gate::run(&GateOptions {
        suite: ws.suite("smoke"),
        target: Some("http://127.0.0.1:9".into()),
        ..GateOptions::default()
    })
    .await
    .map(|r| r.exit_code)
    .expect_err("a stale recording is refused");
    assert_eq!(err.exit_code(), 2, "{err}");
    let shown = err.to_string();
    assert!(
        shown.contains("refused: it was recorded for weights 000000000000"),
        "{shown}"
    );
}

/// A safetensors file that holds only a header: Llama-3-8B's tensors (BF16), no data.
fn header_only_llama(dir: &Path, layers: u64, hidden: u64, inter: u64, vocab: u64, kv: u64) {
    let mut tensors = serde_json::Map::new();
    let mut add = |name: String, shape: Vec<u64>| {
        tensors.insert(
            name,
            serde_json::json!({"dtype": "BF16", "shape": shape, "data_offsets": [0, 0]}),
        );
    };
    add("model.embed_tokens.weight".into(), vec![vocab, hidden]);
    add("lm_head.weight".into(), vec![vocab, hidden]);
    add("model.norm.weight".into(), vec![hidden]);
    for l in 0..layers {
        let p = format!("model.layers.{l}");
        add(format!("{p}.self_attn.q_proj.weight"), vec![hidden, hidden]);
        add(format!("{p}.self_attn.k_proj.weight"), vec![kv, hidden]);
        add(format!("{p}.self_attn.v_proj.weight"), vec![kv, hidden]);
        add(format!("{p}.self_attn.o_proj.weight"), vec![hidden, hidden]);
        add(format!("{p}.mlp.gate_proj.weight"), vec![inter, hidden]);
        add(format!("{p}.mlp.up_proj.weight"), vec![inter, hidden]);
        add(format!("{p}.mlp.down_proj.weight"), vec![hidden, inter]);
        add(format!("{p}.input_layernorm.weight"), vec![hidden]);
        add(format!("{p}.post_attention_layernorm.weight"), vec![hidden]);
    }
    let header = serde_json::to_vec(&Value::Object(tensors)).unwrap();
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend(header);
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("model.safetensors"), bytes).unwrap();
    std::fs::write(
        dir.join("config.json"),
        serde_json::json!({
            "architectures": ["LlamaForCausalLM"], "model_type": "llama",
            "hidden_size": hidden, "intermediate_size": inter, "num_hidden_layers": layers,
            "num_attention_heads": hidden / 128, "num_key_value_heads": kv / 128,
            "vocab_size": vocab, "rms_norm_eps": 1e-5, "max_position_embeddings": 8192,
            "torch_dtype": "bfloat16"
        })
        .to_string(),
    )
    .unwrap();
}

#[test]
fn a_reference_that_cannot_fit_is_refused_before_loading_with_its_estimate() {
    let ws = Workspace::new();
    let root = ws.path("");
    // Llama-3-8B's shape: 8.03 B parameters, 16 GB of BF16, 32 GB once widened to F32.
    header_only_llama(&ws.path("llama-8b"), 32, 4096, 14336, 128256, 1024);
    ws.edit_suite(
        "smoke",
        "[reference]\nmodel = \"../models/tiny-chat\"",
        "[reference]\nmodel = \"../llama-8b\"",
    );
    let run = |available: Option<&str>| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_chatgate"));
        cmd.args([
            "gate",
            "suites/smoke.toml",
            "--target",
            "http://127.0.0.1:9",
            "--no-progress",
        ])
        .current_dir(&root)
        .env("NO_COLOR", "1");
        if let Some(a) = available {
            cmd.env("CHATGATE_MEMORY_AVAILABLE", a);
        }
        let out = cmd.output().expect("chatgate runs");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // A 16 GB runner.
    let (code, err) = run(Some("16G"));
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("the [reference] checkpoint would need about 33.7 GB"),
        "{err}"
    );
    assert!(
        err.contains("8030261248 parameters held as F32 (the files hold BF16)"),
        "{err}"
    );
    assert!(err.contains("17.2 GB available"), "{err}");
    // Said by the estimate from the header alone, before the loader reads a byte of data.
    assert!(err.contains("refused before loading"), "{err}");
    assert!(
        err.contains("chatgate lock SUITE.toml --fingerprint"),
        "{err}"
    );
    assert!(err.contains("quantized GGUF"), "{err}");

    // Llama-2-70B's shape on this machine as it is: no machine here holds 280 GB.
    header_only_llama(&ws.path("llama-70b"), 80, 8192, 28672, 32000, 1024);
    ws.edit_suite("smoke", "../llama-8b", "../llama-70b");
    let (code, err) = run(None);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("would need about 27"), "{err}");
}
