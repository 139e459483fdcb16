//! The checkpoint boundary with a reference that fits: a quantized GGUF of the trained model
//! (Q8_0, Q5_0, Q4_0 — llama.cpp's block formats, quantized here by candle exactly as
//! `llama-quantize` lays them out) fingerprints the real `chatgate serve` of the F32 model.
//! Each kind's own rounding must stay inside its tolerance (the healthy server passes), while
//! the base model and an older step of the fine-tune — weights a fifth of the way back to the
//! base — are still caught at `checkpoint.fingerprint`. The measured agreement of every pair is
//! printed: these are the figures the kinds' bounds in `chain/online/drift.rs` come from.
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::quantized::GgmlDType;
use candle_core::{Device, Tensor};

use crate::common::cli::chatgate_in;
use crate::common::gate_workspace::{
    errors, gate, serve_tiny_chat, serve_tiny_chat_with, Workspace, REPO,
};
use chatgate::serve::{Fault, RunningServer};
use chatgate::verdict::GateReport;
use chatgate::verdict::{Finding, Severity};

/// `src` quantized to `dtype` by chatgate's own requantizer (llama.cpp's block layouts).
fn requantize(src: &Path, dst: &Path, dtype: GgmlDType) {
    chatgate::standin::requantize_gguf(src, dst, dtype).expect("requantize");
}

/// An older step of the fine-tune: every weight `alpha` of the way back from tiny-chat to the
/// base model it was trained from, in a full model directory.
fn older_step(alpha: f64, dir: &Path) {
    let models = Path::new(REPO).join("models");
    crate::common::gate_workspace::copy_dir(&models.join("tiny-chat"), dir);
    let load = |m: &str| {
        candle_core::safetensors::load(models.join(m).join("model.safetensors"), &Device::Cpu)
            .expect("weights")
    };
    let (chat, base) = (load("tiny-chat"), load("tiny-base"));
    let mixed: HashMap<String, Tensor> = chat
        .iter()
        .map(|(name, c)| {
            let b = &base[name];
            let t = ((b - c).expect("sub").affine(alpha, 0.0).expect("scale") + c).expect("add");
            (name.clone(), t)
        })
        .collect();
    candle_core::safetensors::save(&mixed, dir.join("model.safetensors")).expect("save");
}

/// The real `chatgate serve` under tiny-chat's name, generating with the weights in `dir`.
async fn serve_weights_of(dir: &Path) -> RunningServer {
    serve_tiny_chat_with(&[Fault::BaseCheckpoint], Some(dir)).await
}

fn fingerprint(r: &GateReport) -> &Finding {
    r.findings
        .0
        .iter()
        .find(|f| f.check.id == "checkpoint.fingerprint")
        .expect("a fingerprint finding")
}

fn first_error(r: &GateReport) -> Option<&Finding> {
    r.findings.0.iter().find(|f| f.severity == Severity::Error)
}

/// "… mean |Δ| 0.0040, p95 0.0100, max …" → (mean, p95).
fn agreement(f: &Finding) -> (f32, f32) {
    let a = f.evidence.get("agreement").expect("an agreement");
    let num = |key: &str| -> f32 {
        let rest = &a[a.find(key).expect(key) + key.len()..];
        rest.trim_start()
            .split([',', ' '])
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{key} in {a}"))
    };
    (num("mean |Δ|"), num("p95"))
}

/// The workspace's smoke suite with `[reference] model` pointing at `reference`.
fn with_reference(ws: &Workspace, reference: &Path) -> PathBuf {
    ws.edit_suite(
        "smoke",
        "[reference]\nmodel = \"../models/tiny-chat\"",
        &format!("[reference]\nmodel = {:?}", reference.display().to_string()),
    );
    ws.suite("smoke")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quantized_reference_passes_its_float_server_and_still_catches_other_weights() {
    let dir = tempfile::tempdir().expect("tmp");
    let older = dir.path().join("older-step");
    older_step(0.2, &older);
    let servers = [
        ("healthy", serve_tiny_chat(&[]).await),
        (
            "base model",
            serve_tiny_chat(&[Fault::BaseCheckpoint]).await,
        ),
        ("older step", serve_weights_of(&older).await),
    ];
    let chat_gguf = Path::new(REPO).join("models/tiny-chat/model.gguf");
    let kinds = [
        ("F32", None, "float"),
        ("Q8_0", Some(GgmlDType::Q8_0), "8-bit (Q8_0)"),
        ("Q5_0", Some(GgmlDType::Q5_0), "5-6-bit (Q5_0)"),
        ("Q4_0", Some(GgmlDType::Q4_0), "4-bit or below (Q4_0)"),
    ];
    let (mut table, mut wrong) = (Vec::new(), Vec::new());
    for (kind, dtype, bounds) in kinds {
        let ws = Workspace::new();
        let reference = match dtype {
            Some(d) => {
                let p = ws.path(&format!("tiny-chat-{kind}.gguf"));
                requantize(&chat_gguf, &p, d);
                p
            }
            None => chat_gguf.clone(),
        };
        let suite = with_reference(&ws, &reference);
        for (name, server) in &servers {
            let r = gate(suite.clone(), Some(server.url())).await;
            let fp = fingerprint(&r);
            let (mean, p95) = agreement(fp);
            table.push(format!(
                "| {kind} | {name} | {mean:.4} | {p95:.4} | {:?} |",
                fp.severity
            ));
            assert!(fp.evidence["bounds"].starts_with(bounds), "{fp:?}");
            let first = first_error(&r).map(|f| f.check.id);
            let expected = (*name != "healthy").then_some("checkpoint.fingerprint");
            if first != expected {
                wrong.push(format!(
                    "{kind} reference, {name} server: first error {first:?}, expected {expected:?}: {:#?}",
                    errors(&r)
                ));
            }
        }
    }
    eprintln!(
        "| reference | server | mean |Δ| | p95 |Δ| | verdict |\n|---|---|---|---|---|\n{}",
        table.join("\n")
    );
    for (_, s) in servers {
        s.stop().await.expect("stops");
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recording_made_from_a_q8_0_reference_keeps_its_kind_and_its_tolerance() {
    let ws = Workspace::new();
    let q8 = ws.path("tiny-chat-q8_0.gguf");
    requantize(
        &Path::new(REPO).join("models/tiny-chat/model.gguf"),
        &q8,
        GgmlDType::Q8_0,
    );
    with_reference(&ws, &q8);
    let (code, out, err) = chatgate_in(
        &["lock", "suites/smoke.toml", "--fingerprint"],
        &ws.path(""),
    );
    assert_eq!(code, 0, "{out}{err}");
    let rec: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(ws.path("suites/smoke.fingerprint.json")).expect("recorded"),
    )
    .expect("json");
    assert_eq!(rec["computed_by"]["quantization"], "Q8_0", "{rec}");

    let healthy = serve_tiny_chat(&[]).await;
    let r = gate(ws.suite("smoke"), Some(healthy.url())).await;
    let fp = fingerprint(&r);
    assert!(errors(&r).is_empty(), "{:#?}", errors(&r));
    assert!(fp.message.contains("recorded reference"), "{fp:?}");
    assert!(fp.evidence["bounds"].starts_with("8-bit (Q8_0)"), "{fp:?}");
    healthy.stop().await.expect("stops");

    let base = serve_tiny_chat(&[Fault::BaseCheckpoint]).await;
    let r = gate(ws.suite("smoke"), Some(base.url())).await;
    let first = first_error(&r).expect("an error");
    assert_eq!(
        first.check.id,
        "checkpoint.fingerprint",
        "{:#?}",
        errors(&r)
    );
    base.stop().await.expect("stops");
}

/// Another quantization served than the reference's is another checkpoint to the gate: a Q8_0
/// or Q4_0 GGUF of the trained weights served where the float model was locked, and a Q4_0 one
/// where a Q8_0 reference stands. Each is caught first at `checkpoint.fingerprint`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_quantization_served_is_caught_at_the_fingerprint() {
    let dir = tempfile::tempdir().expect("tmp");
    let chat_gguf = Path::new(REPO).join("models/tiny-chat/model.gguf");
    let quantized = |name: &str, dtype: GgmlDType| {
        let p = dir.path().join(format!("tiny-chat-{name}.gguf"));
        requantize(&chat_gguf, &p, dtype);
        p
    };
    let (q8, q4) = (
        quantized("Q8_0", GgmlDType::Q8_0),
        quantized("Q4_0", GgmlDType::Q4_0),
    );
    let cases = [
        ("float", None, &q8),
        ("float", None, &q4),
        ("Q8_0", Some(&q8), &q4),
    ];
    let mut wrong = Vec::new();
    for (kind, reference, served) in cases {
        let ws = Workspace::new();
        let suite = match reference {
            Some(r) => with_reference(&ws, r),
            None => ws.suite("smoke"),
        };
        let server = serve_weights_of(served).await;
        let r = gate(suite, Some(server.url())).await;
        server.stop().await.expect("stops");
        let fp = fingerprint(&r);
        let first = first_error(&r).map(|f| f.check.id);
        eprintln!(
            "{kind} reference, {} served: {:?} {}",
            served.display(),
            fp.severity,
            fp.evidence.get("agreement").map_or("", String::as_str)
        );
        if first != Some("checkpoint.fingerprint") {
            wrong.push(format!(
                "{kind} reference, {} served: first error {first:?}: {:#?}",
                served.display(),
                errors(&r)
            ));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}
