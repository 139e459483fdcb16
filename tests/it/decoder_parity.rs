//! chatgate's own llama-family decoder (src/endpoint/candle/llama_family.rs) against the models
//! it replaced, candle-transformers' `quantized_llama`, `quantized_qwen2` and `quantized_qwen3`,
//! on the same stand-in GGUFs: the logits after a prompt and after each token fed through the
//! KV cache. Float weights must give the same logits (only the order of additions may differ);
//! Q8_0 weights wide enough for candle's int8 tiles (`int8_tiles.rs`) differ by how the input
//! is rounded (per 256 values instead of per 32): measured from the float model's logits on
//! these stand-ins, 1.0–2.1× as far as candle-transformers' Q8_0 (0.8–2.6 against 0.7–1.6, the
//! logits spanning ~120), so they are held to 3× and the float model's greedy choice.
//!
//! Phi-3 (`phi3` GGUFs: fused QKV and gate-up matrices, part of each head rotated, LongRoPE)
//! had no quantized model of candle's to compare with that runs it right, so its float GGUF is
//! held to candle-transformers' `phi3` on the stand-in's own safetensors, and its LongRoPE file
//! to real llama.cpp (llama-cpp-python) on the same GGUF; SmolLM3, Granite, OLMo-2 and GLM-4
//! stand-ins (candle has no quantized model of them) to llama.cpp on their GGUF and to
//! transformers on their safetensors. The real-weights comparisons against llama.cpp
//! are tests/it/fingerprint_real.rs.
use std::path::{Path, PathBuf};

use candle_core::quantized::{gguf_file, GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use candle_transformers::models::{quantized_llama, quantized_qwen2, quantized_qwen3};
use chatgate::endpoint::candle::CandleModel;
use chatgate::standin::{build, requantize_gguf, rewrite_gguf, GgufParts, Options};
use serde_json::{json, Value};

use crate::common::families::Family;
use crate::common::llama_server;

/// (family, the GGUF architecture its stand-in has).
const CASES: &[(Family, &str)] = &[
    (
        Family::corpus("TinyLlama-1.1B-Chat-v1.0", "TinyLlama-1.1B-Chat-v1.0"),
        "llama",
    ),
    (
        Family::corpus("Qwen2.5-0.5B-Instruct", "Qwen2.5-0.5B-Instruct"),
        "qwen2",
    ),
    (
        Family {
            name: "Qwen3 architecture, Qwen2.5 tokenizer",
            model: "Qwen2.5-0.5B-Instruct",
            arch: Some("qwen3"),
            template: None,
        },
        "qwen3",
    ),
];

const PROMPT: [u32; 7] = [11, 400, 29, 7, 1000, 52, 3];
const CONTINUATION: [u32; 3] = [90, 13, 777];

fn standin(family: &Family, out: &Path, hidden: usize, head_dim: usize) -> PathBuf {
    let tmp = out.with_extension("source");
    let built = build(&Options {
        from: family.source(&tmp),
        out: out.to_path_buf(),
        seed: 7,
        layers: 2,
        hidden,
        head_dim,
        real_shape: false,
        force: false,
        reply: None,
    })
    .unwrap_or_else(|e| panic!("{}: {e}", family.name));
    built.out.join("model.gguf")
}

/// A stand-in of `family` (64 wide, 16-wide heads) with `seed` and `layers`, built into `out`.
fn standin_of(family: &Family, out: &Path, seed: u64, layers: usize) -> chatgate::standin::Built {
    build(&Options {
        from: family.source(&out.with_extension("source")),
        out: out.to_path_buf(),
        seed,
        layers,
        hidden: 64,
        head_dim: 16,
        real_shape: false,
        force: false,
        reply: None,
    })
    .unwrap_or_else(|e| panic!("{}: {e}", family.name))
}

/// Twenty short lines, ~200 tokens: a prompt long enough for a cache and a window to matter.
fn lamp_lines() -> String {
    (0..20)
        .map(|i| format!("Line {i}: the lamp is {}. ", ["on", "off", "dim"][i % 3]))
        .collect()
}

/// One of candle-transformers' quantized models: ids at a position in, last logits out.
type Forward = Box<dyn FnMut(&Tensor, usize) -> Tensor>;

/// candle-transformers' logits for `PROMPT` then each of `CONTINUATION`, through its own cache.
fn candle_logits(gguf: &Path, arch: &str) -> Vec<Vec<f32>> {
    let mut f = std::fs::File::open(gguf).unwrap();
    let ct = gguf_file::Content::read(&mut f).unwrap();
    let cpu = &Device::Cpu;
    let mut forward: Forward = match arch {
        "llama" => {
            let mut m = quantized_llama::ModelWeights::from_gguf(ct, &mut f, cpu).unwrap();
            Box::new(move |x, pos| m.forward(x, pos).unwrap())
        }
        "qwen2" => {
            let mut m = quantized_qwen2::ModelWeights::from_gguf(ct, &mut f, cpu).unwrap();
            Box::new(move |x, pos| m.forward(x, pos).unwrap())
        }
        _ => {
            let mut m = quantized_qwen3::ModelWeights::from_gguf(ct, &mut f, cpu).unwrap();
            Box::new(move |x, pos| m.forward(x, pos).unwrap())
        }
    };
    let ids = |ids: &[u32]| Tensor::new(ids, cpu).unwrap().unsqueeze(0).unwrap();
    let flat = |t: Tensor| t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    let mut out = vec![flat(forward(&ids(&PROMPT), 0))];
    for (k, &id) in CONTINUATION.iter().enumerate() {
        out.push(flat(forward(&ids(&[id]), PROMPT.len() + k)));
    }
    out
}

/// The greedy choice and its margin over the runner-up.
fn greedy(v: &[f32]) -> (usize, f32) {
    let best = (0..v.len()).max_by(|&a, &b| v[a].total_cmp(&v[b])).unwrap();
    let second = (0..v.len())
        .filter(|&i| i != best)
        .map(|i| v[i])
        .fold(f32::MIN, f32::max);
    (best, v[best] - second)
}

/// The largest |Δ| between two logit vectors, and the logits' spread (max − min) in `a`.
fn gap(a: &[f32], b: &[f32]) -> (f32, f32) {
    let d = a
        .iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max);
    let hi = a.iter().copied().fold(f32::MIN, f32::max);
    let lo = a.iter().copied().fold(f32::MAX, f32::min);
    (d, hi - lo)
}

#[test]
fn the_own_decoder_gives_candle_transformers_logits_on_float_weights() {
    let dir = tempfile::tempdir().unwrap();
    for (family, arch) in CASES {
        let gguf = standin(family, &dir.path().join(arch), 64, 16);
        let theirs = candle_logits(&gguf, arch);
        let mut ours = CandleModel::load(&gguf).unwrap();
        assert_eq!(ours.architecture(), format!("gguf-{arch}"));
        let mine = ours.cached_logits(&PROMPT, &CONTINUATION).unwrap();
        assert_eq!(mine.len(), theirs.len());
        for (step, (m, t)) in mine.iter().zip(&theirs).enumerate() {
            let (d, spread) = gap(t, m);
            assert!(
                d <= 1e-4 * spread.max(1.0),
                "{}: step {step}: logits differ by {d} (spread {spread})",
                family.name
            );
        }
    }
}

#[test]
fn q8_0_weights_through_the_int8_tiles_stay_as_close_to_the_float_model_as_candle_transformers() {
    let dir = tempfile::tempdir().unwrap();
    // The tiles do not depend on the architecture: the llama stand-in has the smallest
    // vocabulary (32k; Qwen's 151k at this width is a 230 MB file to requantize).
    for (family, arch) in &CASES[..1] {
        // 384 wide: rows padded to 512 for the tiles, as SmolLM2's 576 are to 768.
        let float = standin(family, &dir.path().join(arch), 384, 64);
        let exact = CandleModel::load(&float)
            .unwrap()
            .cached_logits(&PROMPT, &CONTINUATION)
            .unwrap();
        let q8 = float.with_file_name("model-q8_0.gguf");
        requantize_gguf(&float, &q8, GgmlDType::Q8_0).unwrap();
        std::fs::rename(&q8, &float).unwrap();
        let theirs = candle_logits(&float, arch);
        let mine = CandleModel::load(&float)
            .unwrap()
            .cached_logits(&PROMPT, &CONTINUATION)
            .unwrap();
        for (step, e) in exact.iter().enumerate() {
            let (ours, _) = gap(e, &mine[step]);
            let (candle, spread) = gap(e, &theirs[step]);
            eprintln!(
                "{}: step {step}: from the float model, ours {ours:.3}, candle {candle:.3} (spread {spread:.1})",
                family.name
            );
            assert!(
                ours <= 3.0 * candle + 0.01 * spread,
                "{}: step {step}: Q8_0 through the tiles is {ours} from the float model, candle-transformers {candle} (spread {spread})",
                family.name
            );
            // The greedy choice is kept wherever the float model's margin is wider than both.
            let (choice, margin) = greedy(e);
            if margin > 2.0 * ours.max(candle) {
                assert_eq!(
                    greedy(&mine[step]).0,
                    choice,
                    "{}: step {step}",
                    family.name
                );
            }
        }
    }
}

/// On a CPU without int8 tiles (an AVX2-only x86; here `MISTRALRS_FORCE_AVX2=1`, which candle
/// and chatgate both read) candle multiplies a Q4_0 or Q8_0 matrix a row at a time: fast for
/// one input row (decode), slow for many (prefill). So each such matrix also gets an F32 copy
/// (`candle/int8_tiles.rs`, `Linear::wide`, whose unit test shows which rows take which path)
/// that inputs of more than one row go through. Each step's logits end in the output head on
/// one row, the quantized kernel's: the input rounded to 8 bits per 32 values, so near the F32
/// file's and never equal to them (equal would mean the copy ran for decode too, at F32's
/// memory traffic).
#[test]
fn without_int8_tiles_prefill_runs_in_f32_and_decode_on_the_quantized_rows() {
    // Set before candle or chatgate reads it: each test is a process of its own (nextest).
    std::env::set_var("MISTRALRS_FORCE_AVX2", "1");
    let dir = tempfile::tempdir().unwrap();
    let (family, arch) = &CASES[0];
    let float = standin(family, &dir.path().join(arch), 64, 16);
    for dtype in [GgmlDType::Q4_0, GgmlDType::Q8_0] {
        let quantized = dir.path().join(format!("{dtype:?}.gguf"));
        requantize_gguf(&float, &quantized, dtype).unwrap();
        let dequantized = dir.path().join(format!("{dtype:?}-as-f32.gguf"));
        requantize_gguf(&quantized, &dequantized, GgmlDType::F32).unwrap();
        let logits = |file: &Path| {
            CandleModel::load(file)
                .unwrap()
                .cached_logits(&PROMPT, &CONTINUATION)
                .unwrap()
        };
        let (ours, as_f32) = (logits(&quantized), logits(&dequantized));
        // candle-transformers' model on the same file: the quantized kernels for every row.
        let theirs = candle_logits(&quantized, arch);
        for (step, exact) in as_f32.iter().enumerate() {
            let (mine, _) = gap(exact, &ours[step]);
            let (candle, spread) = gap(exact, &theirs[step]);
            eprintln!(
                "{dtype:?}: step {step}: from the F32 file, ours {mine:.4}, candle {candle:.4}"
            );
            // Each step ends in the output head on one row: the quantized kernel, never exact.
            assert!(
                mine > 0.0 && mine <= 1.5 * candle + 1e-3 * spread,
                "{dtype:?}: step {step}: ours is {mine} from the F32 file, candle-transformers {candle} (spread {spread})"
            );
        }
        // And the estimate counts the F32 copies on top of the quantized matrices.
        let estimate = chatgate::endpoint::candle::memory::estimate(&quantized).unwrap();
        let kept = chatgate::endpoint::candle::memory::estimate(&dequantized).unwrap();
        assert!(
            estimate.bytes > kept.bytes,
            "{dtype:?}: {estimate:?} against {kept:?}"
        );
    }
}

/// The most two stacks may differ by on the same F32 file, in nats (mean, max |Δlogprob|):
/// llama.cpp keeps its KV cache in F16. Measured at a fifth of it or less; every
/// architectural slip tried (below) drifts by a tenth of a nat to several nats.
const FLOAT_NOISE: (f32, f32) = (0.02, 0.1);

/// Fails unless chatgate (`ours`) and llama.cpp (`theirs`), serving one F32 file as `model`,
/// give the completions of `prompts` the same logprobs up to `FLOAT_NOISE`.
async fn within_float_noise(
    what: &str,
    theirs: &str,
    ours: &str,
    model: &str,
    prompts: &[(&str, u32)],
) {
    let s = crate::fingerprint_real::drift(theirs, ours, model, prompts, 4).await;
    assert!(
        s.mean <= FLOAT_NOISE.0 && s.max <= FLOAT_NOISE.1,
        "in-process {what} is not llama.cpp's on the same F32 file: mean {:.4}, p95 {:.4}, max {:.4} at {}",
        s.mean,
        s.quantile,
        s.max,
        s.max_at
    );
}

/// `theirs` (a GGUF) on llama-cpp-python and `ours` (the same weights) in `chatgate serve`,
/// both serving it as `name`: their completions of `prompts` within `FLOAT_NOISE`.
async fn in_process_agrees_with_llama_cpp(
    py: &Path,
    theirs: &Path,
    ours: &Path,
    what: &str,
    name: &str,
    prompts: &[(&str, u32)],
) {
    let llama = llama_server::start(py, theirs, name, &[]);
    let served = crate::common::gate_workspace::serve_with(chatgate::serve::ServeOptions {
        model: ours.to_path_buf(),
        model_name: Some(name.into()),
        ..Default::default()
    })
    .await;
    within_float_noise(what, &llama.url, &served.url(), name, prompts).await;
    served.stop().await.expect("stop the server");
}

/// The phi3 architecture on the Phi-3 mini tokenizer.
const PHI3: Family = Family {
    name: "phi3 architecture, Phi-3 mini tokenizer",
    model: "Phi-3-mini-4k-instruct",
    arch: Some("phi3"),
    template: None,
};

/// Edits the stand-in's config.json, then writes its model.gguf again from the same weights,
/// as llama.cpp's converter would from the edited folder.
fn reconfigure(folder: &Path, edit: impl FnOnce(&mut Value)) {
    let path = folder.join("config.json");
    let mut config: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    edit(&mut config);
    std::fs::write(&path, serde_json::to_vec_pretty(&config).unwrap()).unwrap();
    rewrite_gguf(folder).unwrap_or_else(|e| panic!("{}: {e}", folder.display()));
}

#[test]
fn a_phi3_gguf_gives_the_checkpoints_logits_with_whole_and_partial_rotation() {
    let dir = tempfile::tempdir().unwrap();
    let gguf = standin(&PHI3, &dir.path().join("phi3"), 64, 16);
    let folder = gguf.parent().unwrap();
    // Phi-3 mini rotates whole heads; Phi-4-mini 3/4 of each (here half: 8 of 16).
    for partial in [None, Some(0.5)] {
        if let Some(p) = partial {
            reconfigure(folder, |c| c["partial_rotary_factor"] = json!(p));
        }
        // The folder loads its safetensors into candle-transformers' `phi3`.
        let mut checkpoint = CandleModel::load(folder).unwrap();
        assert_eq!(checkpoint.architecture(), "phi3");
        let theirs = checkpoint.cached_logits(&PROMPT, &CONTINUATION).unwrap();
        let mut ours = CandleModel::load(&gguf).unwrap();
        assert_eq!(ours.architecture(), "gguf-phi3");
        let mine = ours.cached_logits(&PROMPT, &CONTINUATION).unwrap();
        for (step, (m, t)) in mine.iter().zip(&theirs).enumerate() {
            let (d, spread) = gap(t, m);
            assert!(
                d <= 1e-4 * spread.max(1.0),
                "partial rotary {partial:?}: step {step}: logits differ by {d} (spread {spread})"
            );
        }
    }
}

/// Phi-4-mini's shape of Phi-3 (3/4 of each head rotated; LongRoPE: 131,072 positions from
/// 4,096, short and long frequency factors, cos and sin scaled by √(1 + ln 32 / ln 4096)) in
/// `chatgate serve`, against llama-cpp-python on the same F32 GGUF: both must use the short
/// factors and the attention factor (llama.cpp does below the original context; its default
/// here is 2,048), so the logprobs differ by float noise only (llama.cpp keeps the KV cache in
/// F16). Measured: 0.0024 and 0.0028 mean nats on the two prompts, 0.012 at most. Taking the
/// long factors instead drifts 0.16 and 1.3 mean, leaving the attention factor out 0.96 and
/// 1.3, and rotating whole heads parts the texts at the first token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_rope_phi3_gguf_in_process_agrees_with_llama_cpp() {
    let Some(py) = llama_server::python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let gguf = standin(&PHI3, &dir.path().join("phi4-mini-shape"), 64, 16);
    reconfigure(gguf.parent().unwrap(), |c| {
        c["partial_rotary_factor"] = json!(0.75);
        c["max_position_embeddings"] = json!(131072);
        c["original_max_position_embeddings"] = json!(4096);
        c["rope_scaling"] = json!({
            "type": "longrope",
            "short_factor": [1.0, 1.1, 1.5, 2.4, 3.9, 6.0],
            "long_factor": [1.0, 1.9, 4.2, 9.5, 17.0, 31.0],
        });
    });
    let llama = llama_server::start(&py, &gguf, "phi3", &[]);
    let ours = crate::common::gate_workspace::serve_with(chatgate::serve::ServeOptions {
        model: gguf.clone(),
        model_name: Some("phi3".into()),
        ..Default::default()
    })
    .await;
    let text: String = (0..30)
        .map(|i| format!("Step {i} moves the box {} metres north. ", i * 7 % 11))
        .collect();
    let prompts = [("The capital of France is", 8), (text.as_str(), 8)];
    let what = "Phi-3 (LongRoPE, partial rotary)";
    within_float_noise(what, &llama.url, &ours.url(), "phi3", &prompts).await;
    ours.stop().await.expect("stop the server");
}

/// What becomes of each tensor of the llama file: itself, renamed, or more tensors.
type Retensor = fn(&str, QTensor) -> Vec<(String, QTensor)>;

/// `src` with its architecture renamed to `arch` (`general.architecture` and every `llama.` key),
/// `extra` keys added and each tensor through `retensor`: for architectures whose converter
/// writes a llama file's layout with other keys (Mistral 3, YaRN), and files broken on purpose.
fn relabel(
    src: &Path,
    dst: &Path,
    arch: &str,
    extra: &[(&str, gguf_file::Value)],
    retensor: Retensor,
) {
    relabel_from(src, dst, "llama", arch, extra, retensor)
}

/// [`relabel`] from a file of architecture `from`.
fn relabel_from(
    src: &Path,
    dst: &Path,
    from: &str,
    arch: &str,
    extra: &[(&str, gguf_file::Value)],
    retensor: Retensor,
) {
    let mut parts = GgufParts::read(src).unwrap();
    let prefix = format!("{from}.");
    for (k, v) in parts.metadata.iter_mut() {
        if let Some(rest) = k.strip_prefix(prefix.as_str()) {
            *k = format!("{arch}.{rest}");
        } else if k == "general.architecture" {
            *v = gguf_file::Value::String(arch.into());
        }
    }
    // An extra key replaces the file's own of that name (a GGUF names each key once).
    let extra: Vec<(String, gguf_file::Value)> = extra
        .iter()
        .map(|(k, v)| (format!("{arch}.{k}"), v.clone()))
        .collect();
    parts
        .metadata
        .retain(|(k, _)| extra.iter().all(|(e, _)| e != k));
    parts.metadata.extend(extra);
    parts.tensors = std::mem::take(&mut parts.tensors)
        .into_iter()
        .flat_map(|(name, t)| retensor(&name, t))
        .collect();
    parts.write(dst).unwrap();
}

/// The same tensors.
fn unchanged(name: &str, t: QTensor) -> Vec<(String, QTensor)> {
    vec![(name.to_string(), t)]
}

/// Llama with YaRN and Mistral 3 (Llama's graph, YaRN whose magnitude its graph cancels) in
/// `chatgate serve`, against llama-cpp-python on the same F32 GGUF: a four-layer TinyLlama
/// stand-in relabelled as each. Float noise only is allowed, as for Phi-3 above.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn yarn_and_mistral3_ggufs_in_process_agree_with_llama_cpp() {
    let Some(py) = llama_server::python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let built = standin_of(&CASES[0].0, &dir.path().join("llama"), 11, 4);
    let llama = built.out.join("model.gguf");
    use gguf_file::Value as V;
    // YaRN over a 4,096-token original context: on these 8-pair heads pairs 0–2 keep their
    // frequency, 3–5 blend and 6–7 are divided by the factor (ggml's correction dims 2 and 6).
    let yarn = |factor: f32| {
        vec![
            ("rope.scaling.type", V::String("yarn".into())),
            ("rope.scaling.factor", V::F32(factor)),
            ("rope.scaling.original_context_length", V::U32(4096)),
        ]
    };
    // Mistral 3 as its converter writes Ministral 3: YaRN (factor 16), mscale_all_dim 1 as
    // `yarn_log_multiplier` (llama.cpp's magnitude 1 + 0.1 ln 16 over 1 + 0.1·1·ln 16: 1), and
    // Llama 4's query temperature from the original context on.
    let mut mistral3 = yarn(16.0);
    mistral3.extend([
        ("rope.scaling.yarn_log_multiplier", V::F32(1.0)),
        ("attention.temperature_scale", V::F32(0.1)),
        ("attention.temperature_length", V::U32(16384)),
    ]);
    // Llama with YaRN (a long-context config converted), cos and sin × 1 + 0.1 ln 8.
    let cases = [("llama", yarn(8.0)), ("mistral3", mistral3)];
    let text = lamp_lines();
    let prompts = [("Once upon a time", 8), (text.as_str(), 8)];
    for (arch, extra) in cases {
        let gguf = dir.path().join(format!("{arch}.gguf"));
        relabel(&llama, &gguf, arch, &extra, unchanged);
        in_process_agrees_with_llama_cpp(&py, &gguf, &gguf, arch, arch, &prompts).await;
    }
}

/// SmolLM3 (Llama with every fourth layer unrotated), Granite (Llama with embedding, residual,
/// attention and logit multipliers), OLMo-2 (norms after attention and the MLP instead of
/// before, Q and K normed across heads, NEOX rotation), GLM-4 (norms before and after, biases
/// on Q, K and V, gate and up fused, half of each head rotated in adjacent pairs) and LFM2
/// (blocks 0 and 2 a gated short convolution whose state the decode carries, 1 and 3 attention
/// with per-head Q and K norms, the head tied) as
/// `chatgate standin` builds them — four layers, so SmolLM3's fourth is unrotated; the norms
/// near 1 and each its own — from a corpus tokenizer whose config.json is labelled with the
/// architecture. Each runs three ways on the same weights: transformers' own modeling code on
/// the HF folder, llama-cpp-python on the GGUF, and `chatgate serve` on the GGUF. The in-process
/// model must give transformers' logprobs to 1e-3 nats (both float32: the order of additions
/// only) and llama.cpp's within float noise (its KV cache is F16). So the GGUF is the
/// safetensors as each family's converter writes them (Q and K rows permuted for SmolLM3 and
/// Granite only, the multipliers renamed, GLM-4's norms mapped), and the decoder runs each
/// architecture as both reference stacks do. Measured against llama.cpp on stand-ins relabelled
/// from a llama file (before `standin` built these): smollm3 0.007 and 0.006 mean nats, 0.044 at
/// most; granite 0.00001; olmo2 0.003 and 0.002; glm4 0.005 and 0.008. Rotating SmolLM3's
/// fourth layer anyway drifts 1.5 and 1.7 mean, Granite without its multipliers 3.7, GLM-4 in
/// NEOX pairs 1.6, and OLMo-2 with NORM pairs or without its post-norms fails too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smollm3_granite_olmo2_glm4_and_lfm2_standins_agree_with_transformers_and_llama_cpp() {
    let (Some(py), Some(exe)) = (
        llama_server::python(),
        crate::common::transformers_serve::executable(),
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let text = lamp_lines();
    let prompts = [("Once upon a time", 8), (text.as_str(), 8)];
    // SmolLM3's and Granite's converters write a SentencePiece vocabulary (they are
    // LlamaModels), OLMo-2's, GLM-4's and LFM2's a byte-level BPE one: each on a tokenizer of
    // that kind.
    for (arch, model) in [
        ("smollm3", "TinyLlama-1.1B-Chat-v1.0"),
        ("granite", "TinyLlama-1.1B-Chat-v1.0"),
        ("olmo2", "Qwen2.5-0.5B-Instruct"),
        ("glm4", "Qwen2.5-0.5B-Instruct"),
        ("lfm2", "Qwen2.5-0.5B-Instruct"),
    ] {
        let source = labelled(model, arch, &dir.path().join(format!("{arch}-source")));
        let built = build(&Options {
            from: source,
            out: dir.path().join(arch),
            seed: 11,
            layers: 4,
            hidden: 64,
            head_dim: 16,
            real_shape: false,
            force: false,
            reply: None,
        })
        .unwrap_or_else(|e| panic!("{arch}: {e}"));
        assert_eq!(built.model_type, arch, "{:?}", built.notes);
        assert_eq!(
            built.gguf_architecture.as_deref(),
            Some(arch),
            "{:?}",
            built.notes
        );
        let gguf = built.out.join("model.gguf");
        if arch == "glm4" {
            // Glm4Model.set_vocab makes `<|endoftext|>` (151643 in Qwen2.5's vocabulary) the
            // unknown token where nothing else named one.
            let info = chatgate::artifacts::read_gguf(&gguf).unwrap();
            assert_eq!(
                info.get_u64("tokenizer.ggml.unknown_token_id"),
                Some(151643)
            );
        }
        let ours = crate::common::gate_workspace::serve_with(chatgate::serve::ServeOptions {
            model: gguf.clone(),
            model_name: Some(arch.into()),
            ..Default::default()
        })
        .await;
        crate::fingerprint_real::agrees_with_transformers(
            &exe,
            &built.out,
            &ours.url(),
            arch,
            &prompts,
        )
        .await;
        let llama = llama_server::start(&py, &gguf, arch, &[]);
        within_float_noise(arch, &llama.url, &ours.url(), arch, &prompts).await;
        ours.stop().await.expect("stop the server");
    }
}

/// A copy of corpus model `model`'s files in `dir` whose config.json names `arch` as its
/// `model_type` (and nothing else of that architecture: the stand-in's config gives the rest).
fn labelled(model: &str, arch: &str, dir: &Path) -> PathBuf {
    let from = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus/models")
        .join(model);
    crate::common::gate_workspace::copy_dir(&from, dir);
    let path = dir.join("config.json");
    // (The corpus's Qwen2.5 has tokenizer files only.)
    let mut config: Value = std::fs::read(&path)
        .map(|b| serde_json::from_slice(&b).unwrap())
        .unwrap_or_else(|_| json!({}));
    config["model_type"] = json!(arch);
    config["architectures"] = Value::Null;
    std::fs::write(&path, serde_json::to_vec_pretty(&config).unwrap()).unwrap();
    dir.to_path_buf()
}

/// LFM2 (`lfm2`: Liquid's LFM2 and LFM2.5 text models) in `chatgate serve` against
/// llama-cpp-python on the same F32 GGUF: a four-layer TinyLlama stand-in rewritten as LFM2's
/// converter writes one — blocks 0 and 2 convolve (`attention.head_count_kv` 0 there, a
/// three-token `shortconv`), blocks 1 and 3 attend with per-head Q and K norms, NEOX pairs,
/// and the final norm named `token_embd_norm`. The prompts are prefilled at once and the
/// replies decoded a token at a time, so the convolution's carried state is what the second
/// half compares.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_lfm2_gguf_with_convolving_blocks_in_process_agrees_with_llama_cpp() {
    let Some(py) = llama_server::python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let built = standin_of(&CASES[0].0, &dir.path().join("llama"), 13, 4);
    let llama = built.out.join("model.gguf");
    let kv_heads = GgufParts::read(&llama)
        .unwrap()
        .metadata
        .iter()
        .find(|(k, _)| k == "llama.attention.head_count_kv")
        .and_then(|(_, v)| v.to_u32().ok())
        .expect("the stand-in's head_count_kv");
    use gguf_file::Value as V;
    let per_block = (0..4)
        .map(|i| {
            V::U32(if LFM2_CONVOLVES.contains(&i) {
                0
            } else {
                kv_heads
            })
        })
        .collect();
    let extra = [
        ("attention.head_count_kv", V::Array(per_block)),
        ("shortconv.l_cache", V::U32(3)),
        ("rope.freq_base", V::F32(1_000_000.0)),
    ];
    let gguf = dir.path().join("lfm2.gguf");
    relabel(&llama, &gguf, "lfm2", &extra, lfm2_tensors);
    let text = lamp_lines();
    let prompts = [("Once upon a time", 8), (text.as_str(), 8)];
    in_process_agrees_with_llama_cpp(&py, &gguf, &gguf, "lfm2", "lfm2", &prompts).await;
}

/// The blocks of the LFM2 case that convolve.
const LFM2_CONVOLVES: [u32; 2] = [0, 2];

/// LFM2's tensors from a 64-wide llama file's: a convolving block's attention becomes
/// `shortconv.in_proj` (B, C and x, 192 × 64), `shortconv.conv` (three taps a channel) and
/// `shortconv.out_proj` (the old output projection); an attending block gains per-head Q and K
/// norms (16 wide, weights near 1); `output_norm` is named `token_embd_norm`, as llama.cpp's
/// converter names LFM2's last norm.
fn lfm2_tensors(name: &str, t: QTensor) -> Vec<(String, QTensor)> {
    // Deterministic, varied values of a given size around `scale`.
    let wave = |n: usize, scale: f32, phase: f32| -> Vec<f32> {
        (0..n)
            .map(|i| scale * ((i as f32) * 0.7311 + phase).sin() * ((i as f32) * 0.1377).cos())
            .collect()
    };
    if name == "output_norm.weight" {
        return vec![("token_embd_norm.weight".into(), t)];
    }
    let Some((block, rest)) = name
        .strip_prefix("blk.")
        .and_then(|r| r.split_once('.'))
        .map(|(b, rest)| (b.parse::<u32>().unwrap(), rest))
    else {
        return unchanged(name, t);
    };
    let named = |what: &str| format!("blk.{block}.{what}.weight");
    let embd = 64;
    if LFM2_CONVOLVES.contains(&block) {
        return match rest {
            "attn_q.weight" => vec![
                (
                    named("shortconv.in_proj"),
                    f32_tensor(wave(3 * embd * embd, 0.25, block as f32), &[3 * embd, embd]),
                ),
                (
                    named("shortconv.conv"),
                    f32_tensor(wave(embd * 3, 0.8, 1.0 + block as f32), &[embd, 3]),
                ),
            ],
            "attn_k.weight" | "attn_v.weight" => vec![],
            "attn_output.weight" => vec![(named("shortconv.out_proj"), t)],
            _ => unchanged(name, t),
        };
    }
    let norm = |which: &str| {
        let w: Vec<f32> = (0..16)
            .map(|i| 1.0 + 0.3 * (i as f32 + block as f32).sin())
            .collect();
        (named(&format!("attn_{which}_norm")), f32_tensor(w, &[16]))
    };
    match rest {
        "attn_q.weight" => vec![(name.to_string(), t), norm("q")],
        "attn_k.weight" => vec![(name.to_string(), t), norm("k")],
        _ => unchanged(name, t),
    }
}

/// Gemma 3 from safetensors (`gemma3_text`) in-process against real llama.cpp on the GGUF the
/// stand-in writer converts from the same folder (every norm `1 + w`, per-head Q and K norms,
/// `gemma3.attention.sliding_window`): six layers, so one is global, with the window cut to 32
/// positions and a prompt of ~200 tokens, so five layers in six look back 32 tokens and the
/// sixth at everything. Both the writer's file and the in-process decoder are held to
/// llama.cpp, within float noise. (The real weights are held to transformers in
/// tests/it/fingerprint_real.rs.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gemma3_checkpoint_in_process_agrees_with_llama_cpp_on_its_gguf() {
    let Some(py) = llama_server::python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let family = crate::common::families::GEMMA3;
    let built = standin_of(&family, &dir.path().join("gemma3"), 5, 6);
    reconfigure(&built.out, |c| c["sliding_window"] = json!(32));
    let text = lamp_lines();
    let prompts = [("Once upon a time", 8), (text.as_str(), 8)];
    in_process_agrees_with_llama_cpp(
        &py,
        &built.out.join("model.gguf"),
        &built.out,
        "gemma3_text",
        "gemma3",
        &prompts,
    )
    .await;
}

/// Experts in a mixture-of-experts file made from a dense block's MLP: four of each matrix, every one
/// the dense matrix with each weight scaled by its own wave (so the experts differ and none is
/// zero), stacked into llama.cpp's 3-D `ffn_*_exps` tensors, and a router (`ffn_gate_inp`,
/// four rows as wide as the embedding) whose logits spread a few nats, so tokens go to
/// different experts.
fn qwen3moe_tensors(name: &str, t: QTensor) -> Vec<(String, QTensor)> {
    const EXPERTS: usize = 4;
    let Some(kind) = ["ffn_gate", "ffn_up", "ffn_down"]
        .into_iter()
        .find(|k| name.ends_with(&format!(".{k}.weight")))
    else {
        return unchanged(name, t);
    };
    let w = t.dequantize(&Device::Cpu).unwrap();
    let (rows, k) = w.dims2().unwrap();
    let wave =
        |e: usize, i: usize| 1.0 + 0.6 * ((0.37 * i as f32) * (e + 1) as f32 + e as f32).sin();
    let experts: Vec<Tensor> = (0..EXPERTS)
        .map(|e| {
            let m: Vec<f32> = (0..rows * k).map(|i| wave(e, i)).collect();
            (&w * Tensor::from_vec(m, (rows, k), &Device::Cpu).unwrap()).unwrap()
        })
        .collect();
    let stacked = Tensor::stack(&experts, 0).unwrap();
    let block = name.trim_end_matches(&format!(".{kind}.weight"));
    let mut out = vec![(
        format!("{block}.{kind}_exps.weight"),
        QTensor::quantize(&stacked, GgmlDType::F32).unwrap(),
    )];
    if kind == "ffn_gate" {
        let router: Vec<f32> = (0..EXPERTS * k)
            .map(|i| 0.4 * (0.3 * i as f32 + 1.7 * (i / k) as f32).sin())
            .collect();
        let router = Tensor::from_vec(router, (EXPERTS, k), &Device::Cpu).unwrap();
        out.push((
            format!("{block}.ffn_gate_inp.weight"),
            QTensor::quantize(&router, GgmlDType::F32).unwrap(),
        ));
    }
    out
}

/// A mixture of experts in-process against llama-cpp-python on the same F32 file: Qwen3-MoE
/// (`qwen3moe`: Qwen3's attention, experts for each MLP) from a Qwen3 stand-in relabelled, and
/// Mixtral's layout (a `llama` file with experts) from a TinyLlama stand-in; each block's MLP
/// made four experts of which the router picks two per token (`qwen3moe_tensors`). Float noise
/// only is allowed. Leaving the chosen two's weights unnormalized drifts 0.13 nats mean, 0.91
/// at most, on Qwen3-MoE.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixture_of_experts_ggufs_in_process_agree_with_llama_cpp() {
    let Some(py) = llama_server::python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let text = lamp_lines();
    let prompts = [("Once upon a time", 8), (text.as_str(), 8)];
    for ((family, from), arch) in [(&CASES[2], "qwen3moe"), (&CASES[0], "llama")] {
        let built = standin_of(family, &dir.path().join(from), 3, 2);
        let ff = built.hidden * 2;
        use gguf_file::Value as V;
        let gguf = dir.path().join(format!("{arch}-moe.gguf"));
        relabel_from(
            &built.out.join("model.gguf"),
            &gguf,
            from,
            arch,
            &[
                ("expert_count", V::U32(4)),
                ("expert_used_count", V::U32(2)),
                ("expert_feed_forward_length", V::U32(ff as u32)),
            ],
            qwen3moe_tensors,
        );
        in_process_agrees_with_llama_cpp(&py, &gguf, &gguf, arch, "moe", &prompts).await;
    }
}

/// A LongRoPE factor table one value short (llama.cpp's loader wants `n_rot / 2`).
fn short_factors(name: &str, t: QTensor) -> Vec<(String, QTensor)> {
    if name != "rope_factors_short.weight" {
        return unchanged(name, t);
    }
    let mut v = t
        .dequantize(&Device::Cpu)
        .unwrap()
        .to_vec1::<f32>()
        .unwrap();
    v.pop();
    vec![(name.to_string(), f32_tensor(v, &[t.shape().dims()[0] - 1]))]
}

/// Block 0's fused QKV matrix without its last 16 rows (V's last head).
fn qkv_short(name: &str, t: QTensor) -> Vec<(String, QTensor)> {
    if name != "blk.0.attn_qkv.weight" {
        return unchanged(name, t);
    }
    let (rows, cols) = (t.shape().dims()[0], t.shape().dims()[1]);
    let mut v = t.dequantize(&Device::Cpu).unwrap().flatten_all().unwrap();
    v = v.narrow(0, 0, (rows - 16) * cols).unwrap();
    let kept = v.to_vec1::<f32>().unwrap();
    vec![(name.to_string(), f32_tensor(kept, &[rows - 16, cols]))]
}

/// An F32 GGUF tensor of `values` in `dims` (a fresh buffer: candle quantizes a view's whole
/// storage).
fn f32_tensor(values: Vec<f32>, dims: &[usize]) -> QTensor {
    let t = Tensor::from_vec(values, dims, &Device::Cpu).unwrap();
    QTensor::quantize(&t, GgmlDType::F32).unwrap()
}

#[test]
fn a_phi3_gguf_whose_tensors_do_not_fit_its_header_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let gguf = standin(&PHI3, &dir.path().join("phi3"), 64, 16);
    reconfigure(gguf.parent().unwrap(), |c| {
        c["max_position_embeddings"] = json!(131072);
        c["original_max_position_embeddings"] = json!(4096);
        c["rope_scaling"] = json!({
            "type": "longrope",
            "short_factor": [1.0, 1.1, 1.5, 2.4, 3.9, 6.0, 7.0, 8.0],
            "long_factor": [1.0, 1.9, 4.2, 9.5, 17.0, 31.0, 40.0, 50.0],
        });
    });
    CandleModel::load(&gguf).expect("the healthy file loads");
    let cases: [(&str, Retensor, &str); 2] = [
        (
            "factors",
            short_factors,
            "the rotary frequency factors have 7 values; rope.dimension_count 16 needs 8",
        ),
        (
            "qkv",
            qkv_short,
            "blk.0.attn_qkv.weight has shape [176, 64]",
        ),
    ];
    for (what, retensor, says) in cases {
        let broken = dir.path().join(format!("{what}.gguf"));
        relabel(&gguf, &broken, "phi3", &[], retensor);
        let err = match CandleModel::load(&broken) {
            Ok(_) => panic!("{what}: a file whose tensors do not fit its header loaded"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains(says), "{what}: {err}");
        assert!(err.contains(&broken.display().to_string()), "{what}: {err}");
    }
}

/// Rotations the in-process model would run wrong are refused by name, with the file: a
/// scaling kind llama.cpp does not know, YaRN in Gemma 3 (whose decoder rotates linearly
/// only), and a vision GLM's M-RoPE sections.
#[test]
fn rotations_the_in_process_model_cannot_run_are_refused_by_name() {
    use gguf_file::Value as V;
    let dir = tempfile::tempdir().unwrap();
    // The stand-ins other tests build too (cached under target/standins).
    let llama = CASES[0].0.standin().0.join("model.gguf");
    let gemma3 = crate::common::families::GEMMA3
        .standin()
        .0
        .join("model.gguf");
    let yarn = || {
        vec![
            ("rope.scaling.type", V::String("yarn".into())),
            ("rope.scaling.factor", V::F32(4.0)),
        ]
    };
    // (source, its architecture, relabelled as, keys added, what the refusal says)
    type Case<'a> = (&'a Path, &'a str, &'a str, Vec<(&'a str, V)>, &'a str);
    let cases: [Case; 3] = [
        (
            &llama,
            "llama",
            "llama",
            vec![("rope.scaling.type", V::String("dynamic".into()))],
            "llama.rope.scaling.type is \"dynamic\"; llama.cpp and the in-process model know none, linear, yarn and longrope",
        ),
        (
            &gemma3,
            "gemma3",
            "gemma3",
            yarn(),
            "gemma3.rope.scaling.type is \"yarn\": the in-process gemma3 model does not rotate by YaRN",
        ),
        (
            &llama,
            "llama",
            "glm4",
            vec![(
                "rope.dimension_sections",
                V::Array(vec![V::I32(4), V::I32(2), V::I32(2), V::I32(0)]),
            )],
            "glm4.rope.dimension_sections is set (M-RoPE",
        ),
    ];
    for (src, from, arch, extra, says) in cases {
        let broken = dir.path().join(format!("{arch}-{from}.gguf"));
        relabel_from(src, &broken, from, arch, &extra, unchanged);
        let err = match CandleModel::load(&broken) {
            Ok(_) => panic!("{arch}: {extra:?} loaded"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains(says), "{arch}: {err}");
        assert!(err.contains(&broken.display().to_string()), "{arch}: {err}");
        assert!(err.contains("server target"), "{arch}: {err}");
    }
}
