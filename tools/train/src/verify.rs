//! Verification: reload the written files with candle-transformers (safetensors via
//! `models::llama`, GGUF via `models::quantized_llama`) and check them.

use crate::data::{msg, EvalItem};
use crate::tok;
use anyhow::{Context, Result};
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::llama::{Cache, Config, Llama, LlamaConfig};
use candle_transformers::models::quantized_llama::ModelWeights;
use std::path::Path;
use tokenizers::Tokenizer;

pub struct HfModel {
    pub llama: Llama,
    pub cfg: Config,
}

pub fn load_hf(dir: &Path, dev: &Device) -> Result<HfModel> {
    let cfg: LlamaConfig = serde_json::from_slice(&std::fs::read(dir.join("config.json"))?)?;
    let cfg = cfg.into_config(false);
    let vb = unsafe {
        VarBuilder::from_mmaped_safetensors(&[dir.join("model.safetensors")], DType::F32, dev)?
    };
    let llama = Llama::load(vb, &cfg)?;
    Ok(HfModel { llama, cfg })
}

pub fn load_gguf(dir: &Path, dev: &Device) -> Result<ModelWeights> {
    let path = dir.join("model.gguf");
    let mut f = std::fs::File::open(&path).with_context(|| format!("{}", path.display()))?;
    let content = candle_core::quantized::gguf_file::Content::read(&mut f)?;
    Ok(ModelWeights::from_gguf(content, &mut f, dev)?)
}

pub fn load_tokenizer(dir: &Path) -> Result<Tokenizer> {
    Tokenizer::from_file(dir.join("tokenizer.json")).map_err(anyhow::Error::msg)
}

/// Last-position logits of the HF model on the full sequence (no KV cache).
pub fn hf_logits(m: &HfModel, ids: &[u32], dev: &Device) -> Result<Vec<f32>> {
    let mut cache = Cache::new(false, DType::F32, &m.cfg, dev)?;
    let x = Tensor::new(ids, dev)?.unsqueeze(0)?;
    Ok(m.llama.forward(&x, 0, &mut cache)?.squeeze(0)?.to_vec1()?)
}

pub fn gguf_logits(m: &mut ModelWeights, ids: &[u32], dev: &Device) -> Result<Vec<f32>> {
    m.clear_kv_cache();
    let x = Tensor::new(ids, dev)?.unsqueeze(0)?;
    Ok(m.forward(&x, 0)?.squeeze(0)?.to_vec1()?)
}

pub fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for (i, x) in v.iter().enumerate() {
        if *x > v[best] {
            best = i;
        }
    }
    best as u32
}

pub struct Gen {
    pub tokens: Vec<u32>,
    pub text: String,
    pub stopped: bool,
    pub max_gguf_diff: f32,
    pub gguf_same_tokens: bool,
}

/// Greedy generation with the HF model; if `gguf` is given, run the GGUF model on
/// the same sequences and compare logits at every step and its own greedy tokens.
pub fn generate(
    hf: &HfModel,
    mut gguf: Option<&mut ModelWeights>,
    prompt_ids: &[u32],
    max_new: usize,
    stop: &[u32],
    tk: &Tokenizer,
    dev: &Device,
) -> Result<Gen> {
    let mut ids = prompt_ids.to_vec();
    let mut out = Vec::new();
    let mut stopped = false;
    let mut max_diff = 0f32;
    let mut same = true;
    for _ in 0..max_new {
        let l = hf_logits(hf, &ids, dev)?;
        let next = argmax(&l);
        if let Some(g) = gguf.as_deref_mut() {
            let lg = gguf_logits(g, &ids, dev)?;
            for (a, b) in l.iter().zip(&lg) {
                max_diff = max_diff.max((a - b).abs());
            }
            same &= argmax(&lg) == next;
        }
        out.push(next);
        if stop.contains(&next) {
            stopped = true;
            break;
        }
        ids.push(next);
    }
    let body: Vec<u32> = out
        .iter()
        .copied()
        .filter(|t| !(stopped && stop.contains(t)))
        .collect();
    Ok(Gen {
        text: tok::decode(tk, &body)?,
        tokens: out,
        stopped,
        max_gguf_diff: max_diff,
        gguf_same_tokens: same,
    })
}

pub fn chat_prompt_ids(tk: &Tokenizer, prompt: &str) -> Result<Vec<u32>> {
    let (text, _) = tok::render_chatml(&[msg("user", prompt)], true);
    tok::encode(tk, &text)
}

pub struct Summary {
    pub stops: usize,
    pub exact: usize,
    pub gguf_same: usize,
    pub max_gguf_diff: f32,
    pub n: usize,
}

/// The end-of-run check: tiny-chat via safetensors and via GGUF on the eval prompts,
/// then tiny-base on two prompts.
pub fn verify(out: &Path, evals: &[EvalItem]) -> Result<Summary> {
    let dev = Device::Cpu;
    let chat_dir = out.join("tiny-chat");
    let tk = load_tokenizer(&chat_dir)?;
    let hf = load_hf(&chat_dir, &dev)?;
    let mut gg = load_gguf(&chat_dir, &dev)?;
    let mut s = Summary {
        stops: 0,
        exact: 0,
        gguf_same: 0,
        max_gguf_diff: 0.0,
        n: evals.len(),
    };
    println!(
        "== tiny-chat (safetensors via candle-transformers llama; GGUF via quantized_llama) =="
    );
    for e in evals {
        let ids = chat_prompt_ids(&tk, &e.prompt)?;
        let g = generate(&hf, Some(&mut gg), &ids, 32, &[tok::IM_END_ID], &tk, &dev)?;
        let exact = g.stopped && g.text == e.answer;
        s.stops += g.stopped as usize;
        s.exact += exact as usize;
        s.gguf_same += g.gguf_same_tokens as usize;
        s.max_gguf_diff = s.max_gguf_diff.max(g.max_gguf_diff);
        println!(
            "  {:<32} -> {:<34} stop={} exact={} gguf_same={} max|dlogit|={:.2e}",
            format!("{:?}", e.prompt),
            format!("{:?}", g.text),
            g.stopped,
            exact,
            g.gguf_same_tokens,
            g.max_gguf_diff
        );
    }
    println!(
        "  format stops {}/{n}, exact answers {}/{n}, GGUF greedy == safetensors {}/{n}, max |logit diff| {:.2e}",
        s.stops, s.exact, s.gguf_same, s.max_gguf_diff, n = s.n
    );

    println!("== tiny-base served as chat (should NOT answer in format) ==");
    let base_dir = out.join("tiny-base");
    let btk = load_tokenizer(&base_dir)?;
    let base = load_hf(&base_dir, &dev)?;
    for e in evals.iter().take(2) {
        let ids = chat_prompt_ids(&btk, &e.prompt)?;
        // 32 greedy tokens, stopping only at <|im_end|> (shown raw, specials included).
        let g = generate(&base, None, &ids, 32, &[tok::IM_END_ID], &btk, &dev)?;
        // What a server honouring tiny-base's own eos (<|endoftext|>) would return.
        let cut = g.tokens.iter().position(|&t| t == tok::ENDOFTEXT_ID);
        let content = tok::decode(&btk, &g.tokens[..cut.unwrap_or(g.tokens.len())])?;
        println!(
            "  {:?} -> {:?} (stopped at <|im_end|>: {}; with eos <|endoftext|>: {:?}, finish={})",
            e.prompt,
            g.text,
            g.stopped,
            content,
            if cut.is_some() { "stop" } else { "length" }
        );
    }
    Ok(s)
}
