//! The candle target's other loaders, checked against the fixture's Llama: the same weights
//! saved as a Mistral or Qwen2 checkpoint (mathematically the same network when the Qwen2
//! biases are zero), sharded safetensors, F16/BF16 safetensors and an F16 GGUF.
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::quantized::{gguf_file, GgmlDType, QTensor};
use candle_core::{DType, Device, Tensor};
use chatgate::endpoint::candle::CandleModel;
use chatgate::endpoint::GenerateRequest;
use serde_json::{json, Value};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-chatml")
}

fn load(path: &Path) -> CandleModel {
    CandleModel::load(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn tensors() -> HashMap<String, Tensor> {
    candle_core::safetensors::load(fixture().join("model.safetensors"), &Device::Cpu)
        .expect("fixture weights")
}

fn config() -> Value {
    serde_json::from_str(&std::fs::read_to_string(fixture().join("config.json")).expect("read"))
        .expect("json")
}

/// The fixture's tokenizer files, `config`, and `weights` (None: the fixture's own file).
fn make_dir(dir: &Path, config: &Value, weights: Option<&HashMap<String, Tensor>>) {
    for entry in std::fs::read_dir(fixture()).expect("fixture") {
        let p = entry.expect("entry").path();
        let name = p.file_name().expect("name").to_string_lossy().into_owned();
        if name == "config.json" || name.ends_with(".safetensors") {
            continue;
        }
        std::fs::copy(&p, dir.join(&name)).expect("copy");
    }
    std::fs::write(
        dir.join("config.json"),
        serde_json::to_string_pretty(config).expect("json"),
    )
    .expect("write");
    match weights {
        Some(w) => candle_core::safetensors::save(w, dir.join("model.safetensors")).expect("save"),
        None => {
            std::fs::copy(
                fixture().join("model.safetensors"),
                dir.join("model.safetensors"),
            )
            .expect("copy");
        }
    }
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn prompts(model: &CandleModel) -> Vec<Vec<u32>> {
    ["What is 2+2?", "Name a prime number."]
        .iter()
        .map(|t| {
            model
                .render_chat(&[json!({"role": "user", "content": t})], None, true)
                .expect("render")
                .1
        })
        .collect()
}

fn greedy_ids(model: &mut CandleModel, prompt: &[u32], n: usize) -> Vec<u32> {
    let req = GenerateRequest {
        prompt_ids: prompt.to_vec(),
        max_tokens: n,
        ignore_eos: true,
        ..Default::default()
    };
    model.generate(&req, &mut |_| true).expect("generate").ids
}

/// Same greedy tokens as the reference and logits within `tol` along the path (cached), and
/// the model's own cache agrees with its full forward.
fn assert_matches(reference: &mut CandleModel, other: &mut CandleModel, tol: f32) -> f32 {
    let mut worst = 0.0f32;
    for p in prompts(reference) {
        let ids = greedy_ids(reference, &p, 12);
        let a = reference.cached_logits(&p, &ids[..11]).expect("reference");
        let b = other.cached_logits(&p, &ids[..11]).expect("other");
        for (x, y) in a.iter().zip(&b) {
            worst = worst.max(max_abs_diff(x, y));
        }
        let mut prefix = p.clone();
        prefix.extend_from_slice(&ids[..11]);
        let full = other.last_logits_uncached(&prefix).expect("full");
        assert!(max_abs_diff(&b[11], &full) <= 1e-4, "cache vs full");
        if tol <= 1e-4 {
            assert_eq!(greedy_ids(other, &p, 12), ids);
        }
    }
    assert!(worst <= tol, "logits differ by {worst} (tolerance {tol})");
    worst
}

#[test]
fn mistral_checkpoint_equals_the_llama() {
    let tmp = tempfile::tempdir().expect("tmp");
    let mut cfg = config();
    cfg["model_type"] = json!("mistral");
    cfg["architectures"] = json!(["MistralForCausalLM"]);
    cfg["sliding_window"] = json!(null);
    cfg["hidden_act"] = json!("silu");
    make_dir(tmp.path(), &cfg, None);
    let mut llama = load(&fixture());
    let mut mistral = load(tmp.path());
    assert_eq!(mistral.architecture(), "mistral");
    assert_eq!(mistral.context_length(), 512);
    let d = assert_matches(&mut llama, &mut mistral, 1e-4);
    eprintln!("mistral vs llama: max |Δlogit| = {d:e}");

    // A sliding window caps the context (candle applies it only within one prefill).
    cfg["sliding_window"] = json!(128);
    let tmp2 = tempfile::tempdir().expect("tmp");
    make_dir(tmp2.path(), &cfg, None);
    assert_eq!(load(tmp2.path()).context_length(), 128);
}

#[test]
fn qwen2_checkpoint_equals_the_llama_with_zero_biases() {
    let mut cfg = config();
    cfg["model_type"] = json!("qwen2");
    cfg["architectures"] = json!(["Qwen2ForCausalLM"]);
    cfg["use_sliding_window"] = json!(false);
    cfg["sliding_window"] = json!(4096);
    cfg["max_window_layers"] = json!(2);
    cfg["hidden_act"] = json!("silu");
    let mut w = tensors();
    let layers = cfg["num_hidden_layers"].as_u64().expect("layers");
    for l in 0..layers {
        for proj in ["q_proj", "k_proj", "v_proj"] {
            let weight = &w[&format!("model.layers.{l}.self_attn.{proj}.weight")];
            let out = weight.dims2().expect("2d").0;
            let bias = Tensor::zeros(out, DType::F32, &Device::Cpu).expect("zeros");
            w.insert(format!("model.layers.{l}.self_attn.{proj}.bias"), bias);
        }
    }
    let tmp = tempfile::tempdir().expect("tmp");
    make_dir(tmp.path(), &cfg, Some(&w));
    let mut llama = load(&fixture());
    let mut qwen = load(tmp.path());
    assert_eq!(qwen.architecture(), "qwen2");
    let d = assert_matches(&mut llama, &mut qwen, 1e-4);
    eprintln!("qwen2 (zero biases) vs llama: max |Δlogit| = {d:e}");

    // Non-zero biases change the network; the cache must still match a full forward.
    for (name, t) in w.iter_mut() {
        if name.ends_with(".bias") {
            *t = Tensor::randn(0f32, 0.5, t.dims1().expect("1d"), &Device::Cpu).expect("randn");
        }
    }
    let tmp = tempfile::tempdir().expect("tmp");
    make_dir(tmp.path(), &cfg, Some(&w));
    let mut biased = load(tmp.path());
    let p = &prompts(&biased)[0];
    let ids = greedy_ids(&mut biased, p, 10);
    let cached = biased.cached_logits(p, &ids[..9]).expect("cached");
    let mut prefix = p.clone();
    prefix.extend_from_slice(&ids[..9]);
    let full = biased.last_logits_uncached(&prefix).expect("full");
    assert!(max_abs_diff(&cached[9], &full) <= 1e-4);
    let plain = llama.last_logits_uncached(p).expect("llama");
    assert!(
        max_abs_diff(&cached[0], &plain) > 1e-3,
        "the biases are used"
    );

    // Missing biases are a clean error.
    let mut no_bias = w.clone();
    no_bias.remove("model.layers.0.self_attn.k_proj.bias");
    let tmp = tempfile::tempdir().expect("tmp");
    make_dir(tmp.path(), &cfg, Some(&no_bias));
    let e = match CandleModel::load(tmp.path()) {
        Ok(_) => panic!("expected an error"),
        Err(e) => e,
    };
    assert!(e.problem.contains("k_proj.bias"), "{e}");
}

#[test]
fn sharded_safetensors_load_through_the_index() {
    let w = tensors();
    let mut names: Vec<&String> = w.keys().collect();
    names.sort();
    let (first, second) = names.split_at(names.len() / 2);
    let tmp = tempfile::tempdir().expect("tmp");
    make_dir(tmp.path(), &config(), None);
    std::fs::remove_file(tmp.path().join("model.safetensors")).expect("rm");
    let mut weight_map = serde_json::Map::new();
    for (shard, part) in [
        ("model-00001-of-00002.safetensors", first),
        ("model-00002-of-00002.safetensors", second),
    ] {
        let sub: HashMap<String, Tensor> =
            part.iter().map(|n| ((*n).clone(), w[*n].clone())).collect();
        candle_core::safetensors::save(&sub, tmp.path().join(shard)).expect("save");
        for n in part {
            weight_map.insert((*n).clone(), json!(shard));
        }
    }
    std::fs::write(
        tmp.path().join("model.safetensors.index.json"),
        serde_json::to_string(&json!({"metadata": {}, "weight_map": weight_map})).expect("json"),
    )
    .expect("write");
    let mut llama = load(&fixture());
    let mut sharded = load(tmp.path());
    assert_matches(&mut llama, &mut sharded, 1e-6);

    // A shard named in the index but missing from disk is an error naming the index.
    std::fs::remove_file(tmp.path().join("model-00002-of-00002.safetensors")).expect("rm");
    assert!(CandleModel::load(tmp.path()).is_err());
}

#[test]
fn half_precision_weights_are_converted_to_f32() {
    let mut llama = load(&fixture());
    for dtype in [DType::F16, DType::BF16] {
        let w: HashMap<String, Tensor> = tensors()
            .into_iter()
            .map(|(k, t)| (k, t.to_dtype(dtype).expect("cast")))
            .collect();
        let tmp = tempfile::tempdir().expect("tmp");
        make_dir(tmp.path(), &config(), Some(&w));
        let mut half = load(tmp.path());
        // Rounding the weights to 8 (bf16) or 11 (f16) significant bits moves these logits
        // by well under 0.05.
        let d = assert_matches(&mut llama, &mut half, 0.05);
        eprintln!("{dtype:?} safetensors vs F32: max |Δlogit| = {d:e}");
    }
}

#[test]
fn f16_gguf_loads_and_tracks_f32() {
    let cfg = config();
    let n = |k: &str| cfg[k].as_u64().expect(k) as u32;
    let heads = n("num_attention_heads") as usize;
    use gguf_file::Value as V;
    let meta: Vec<(&str, V)> = vec![
        ("general.architecture", V::String("llama".into())),
        ("llama.context_length", V::U32(n("max_position_embeddings"))),
        ("llama.embedding_length", V::U32(n("hidden_size"))),
        ("llama.block_count", V::U32(n("num_hidden_layers"))),
        ("llama.feed_forward_length", V::U32(n("intermediate_size"))),
        (
            "llama.attention.head_count",
            V::U32(n("num_attention_heads")),
        ),
        (
            "llama.attention.head_count_kv",
            V::U32(n("num_key_value_heads")),
        ),
        (
            "llama.rope.dimension_count",
            V::U32(n("hidden_size") / n("num_attention_heads")),
        ),
        ("llama.attention.layer_norm_rms_epsilon", V::F32(1e-5)),
        ("llama.rope.freq_base", V::F32(10000.0)),
    ];
    let permute = |w: &Tensor, h: usize| -> Tensor {
        let (o, i) = w.dims2().expect("2d");
        w.reshape((h, 2, o / h / 2, i))
            .and_then(|t| t.transpose(1, 2))
            .and_then(|t| t.contiguous())
            .and_then(|t| t.reshape((o, i)))
            .expect("permute")
    };
    let w = tensors();
    let mut out: Vec<(String, QTensor)> = Vec::new();
    let mut put = |name: String, t: &Tensor| {
        let dt = if t.rank() == 1 {
            GgmlDType::F32
        } else {
            GgmlDType::F16
        };
        out.push((name, QTensor::quantize(t, dt).expect("quantize")));
    };
    put("token_embd.weight".into(), &w["model.embed_tokens.weight"]);
    put("output_norm.weight".into(), &w["model.norm.weight"]);
    put("output.weight".into(), &w["lm_head.weight"]);
    for l in 0..n("num_hidden_layers") {
        let g = |s: &str| w[&format!("model.layers.{l}.{s}.weight")].clone();
        put(format!("blk.{l}.attn_norm.weight"), &g("input_layernorm"));
        put(
            format!("blk.{l}.ffn_norm.weight"),
            &g("post_attention_layernorm"),
        );
        put(
            format!("blk.{l}.attn_q.weight"),
            &permute(&g("self_attn.q_proj"), heads),
        );
        put(
            format!("blk.{l}.attn_k.weight"),
            &permute(&g("self_attn.k_proj"), heads),
        );
        put(format!("blk.{l}.attn_v.weight"), &g("self_attn.v_proj"));
        put(
            format!("blk.{l}.attn_output.weight"),
            &g("self_attn.o_proj"),
        );
        put(format!("blk.{l}.ffn_gate.weight"), &g("mlp.gate_proj"));
        put(format!("blk.{l}.ffn_up.weight"), &g("mlp.up_proj"));
        put(format!("blk.{l}.ffn_down.weight"), &g("mlp.down_proj"));
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let path = tmp.path().join("model-f16.gguf");
    let meta_refs: Vec<(&str, &V)> = meta.iter().map(|(k, v)| (*k, v)).collect();
    let tensor_refs: Vec<(&str, &QTensor)> = out.iter().map(|(k, t)| (k.as_str(), t)).collect();
    let mut f = std::fs::File::create(&path).expect("create");
    gguf_file::write(&mut f, &meta_refs, &tensor_refs).expect("write");
    drop(f);
    let mut llama = load(&fixture());
    let mut gguf = CandleModel::load_with_tokenizer_dir(&path, &fixture()).expect("load");
    let d = assert_matches(&mut llama, &mut gguf, 0.01);
    eprintln!("F16 GGUF vs F32: max |Δlogit| = {d:e}");
}

fn small_llama_config(vocab: usize) -> candle_transformers::models::llama::Config {
    candle_transformers::models::llama::Config {
        hidden_size: 32,
        intermediate_size: 64,
        vocab_size: vocab,
        num_hidden_layers: 2,
        num_attention_heads: 4,
        num_key_value_heads: 2,
        use_flash_attn: false,
        rms_norm_eps: 1e-5,
        rope_theta: 10_000.0,
        bos_token_id: None,
        eos_token_id: None,
        rope_scaling: None,
        max_position_embeddings: 64,
        tie_word_embeddings: true,
    }
}

#[test]
fn a_llama_from_a_varbuilder_with_gqa_and_tied_embeddings() {
    let varmap = candle_nn::VarMap::new();
    let vb = candle_nn::VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu);
    let dir = chatgate::artifacts::ModelDir::open(&fixture()).expect("dir");
    let mut m =
        CandleModel::from_llama_varbuilder(dir, small_llama_config(512), vb).expect("random llama");
    assert_eq!(m.context_length(), 64);
    let p = prompts(&m)[0].clone();
    let ids = greedy_ids(&mut m, &p, 8);
    let cached = m.cached_logits(&p, &ids[..7]).expect("cached");
    let mut prefix = p.clone();
    prefix.extend_from_slice(&ids[..7]);
    let full = m.last_logits_uncached(&prefix).expect("full");
    assert!(max_abs_diff(&cached[7], &full) <= 1e-4);

    // A VarBuilder without a layer's tensors: an error, not a panic escaping candle.
    let mut partial = HashMap::new();
    partial.insert(
        "model.embed_tokens.weight".to_string(),
        Tensor::zeros((512, 32), DType::F32, &Device::Cpu).expect("zeros"),
    );
    partial.insert(
        "model.norm.weight".to_string(),
        Tensor::ones(32, DType::F32, &Device::Cpu).expect("ones"),
    );
    let vb = candle_nn::VarBuilder::from_tensors(partial, DType::F32, &Device::Cpu);
    let dir = chatgate::artifacts::ModelDir::open(&fixture()).expect("dir");
    let e = match CandleModel::from_llama_varbuilder(dir, small_llama_config(512), vb) {
        Ok(_) => panic!("expected an error"),
        Err(e) => e,
    };
    eprintln!("error as shown: {e}");
    assert!(e.problem.contains("cannot build the Llama"), "{e}");
}
