//! Training loops: next-token pretraining on a packed token stream, and SFT on
//! ChatML conversations with the loss on assistant tokens only.

use crate::data::Rng;
use crate::model::Model;
use anyhow::Result;
use candle_core::{Device, Tensor, D};
use candle_nn::{AdamW, Optimizer, ParamsAdamW};
use std::time::Instant;

#[derive(Clone, Debug)]
pub struct Hyper {
    pub steps: usize,
    pub batch: usize,
    pub seq: usize,
    pub lr: f64,
    pub min_lr_frac: f64,
    pub warmup: usize,
    pub weight_decay: f64,
    pub clip: f64,
}

fn lr_at(h: &Hyper, step: usize) -> f64 {
    if step < h.warmup {
        return h.lr * (step + 1) as f64 / h.warmup as f64;
    }
    let p = (step - h.warmup) as f64 / (h.steps - h.warmup).max(1) as f64;
    let min = h.lr * h.min_lr_frac;
    min + 0.5 * (h.lr - min) * (1.0 + (std::f64::consts::PI * p).cos())
}

fn optimizer(model: &Model, h: &Hyper) -> Result<AdamW> {
    Ok(AdamW::new(
        model.vars(),
        ParamsAdamW {
            lr: h.lr,
            beta1: 0.9,
            beta2: 0.95,
            eps: 1e-8,
            weight_decay: h.weight_decay,
        },
    )?)
}

/// Masked mean cross-entropy. logits (B, T, V), targets (B, T) u32, weights (B, T) f32.
fn masked_ce(logits: &Tensor, targets: &Tensor, weights: &Tensor) -> Result<Tensor> {
    let (b, t, v) = logits.dims3()?;
    let logp = candle_nn::ops::log_softmax(&logits.reshape((b * t, v))?, D::Minus1)?;
    let picked = logp
        .gather(&targets.reshape((b * t, 1))?, 1)?
        .reshape(b * t)?;
    let w = weights.reshape(b * t)?;
    let denom = w.sum_all()?.to_scalar::<f32>()?.max(1.0) as f64;
    Ok(((picked * w)?.sum_all()?.neg()? / denom)?)
}

/// One optimizer step with global-norm gradient clipping.
fn step(opt: &mut AdamW, model: &Model, loss: &Tensor, clip: f64) -> Result<f64> {
    let mut grads = loss.backward()?;
    let mut sq = 0f64;
    let vars = model.vars();
    for v in &vars {
        if let Some(g) = grads.get(v.as_tensor()) {
            sq += g.sqr()?.sum_all()?.to_scalar::<f32>()? as f64;
        }
    }
    let norm = sq.sqrt();
    if norm > clip {
        let s = clip / norm;
        for v in &vars {
            if let Some(g) = grads.get(v.as_tensor()) {
                let g = (g * s)?;
                grads.insert(v.as_tensor(), g);
            }
        }
    }
    opt.step(&grads)?;
    Ok(norm)
}

/// Pretraining: random windows of `seq + 1` tokens from the packed stream.
pub fn pretrain(
    model: &Model,
    stream: &[u32],
    h: &Hyper,
    rng: &mut Rng,
    dev: &Device,
) -> Result<f64> {
    let mut opt = optimizer(model, h)?;
    let t0 = Instant::now();
    let mut avg = 0.0;
    for s in 0..h.steps {
        opt.set_learning_rate(lr_at(h, s));
        let mut inp = Vec::with_capacity(h.batch * h.seq);
        let mut tgt = Vec::with_capacity(h.batch * h.seq);
        for _ in 0..h.batch {
            let st = rng.below(stream.len() - h.seq - 1);
            inp.extend_from_slice(&stream[st..st + h.seq]);
            tgt.extend_from_slice(&stream[st + 1..st + h.seq + 1]);
        }
        let inp = Tensor::from_vec(inp, (h.batch, h.seq), dev)?;
        let tgt = Tensor::from_vec(tgt, (h.batch, h.seq), dev)?;
        let logits = model.forward(&inp)?;
        let w = Tensor::ones((h.batch, h.seq), candle_core::DType::F32, dev)?;
        let loss = masked_ce(&logits, &tgt, &w)?;
        let l = loss.to_scalar::<f32>()? as f64;
        step(&mut opt, model, &loss, h.clip)?;
        avg = if s == 0 { l } else { 0.98 * avg + 0.02 * l };
        if s % 100 == 0 || s + 1 == h.steps {
            eprintln!(
                "  base step {s:5}  loss {l:.4}  avg {avg:.4}  lr {:.2e}  {:.1}s",
                lr_at(h, s),
                t0.elapsed().as_secs_f64()
            );
        }
    }
    Ok(avg)
}

/// SFT on (input_ids, assistant_mask) rows: each batch is `batch` random rows,
/// right-padded with <|endoftext|> (weight 0). Loss only where the *target* token is
/// an assistant token (assistant content + <|im_end|>).
pub fn sft(
    model: &Model,
    rows: &[(Vec<u32>, Vec<u8>)],
    h: &Hyper,
    rng: &mut Rng,
    dev: &Device,
    pad: u32,
) -> Result<f64> {
    let mut opt = optimizer(model, h)?;
    let t0 = Instant::now();
    let mut avg = 0.0;
    // Epoch-style sampling: shuffle the row order, walk it, reshuffle at the end.
    let mut order: Vec<usize> = (0..rows.len()).collect();
    rng.shuffle(&mut order);
    let mut cursor = 0;
    for s in 0..h.steps {
        opt.set_learning_rate(lr_at(h, s));
        let mut pick = Vec::with_capacity(h.batch);
        for _ in 0..h.batch {
            if cursor == order.len() {
                rng.shuffle(&mut order);
                cursor = 0;
            }
            pick.push(order[cursor]);
            cursor += 1;
        }
        let t = pick.iter().map(|&i| rows[i].0.len() - 1).max().unwrap();
        let mut inp = vec![pad; h.batch * t];
        let mut tgt = vec![pad; h.batch * t];
        let mut w = vec![0f32; h.batch * t];
        for (bi, &ri) in pick.iter().enumerate() {
            let (ids, mask) = &rows[ri];
            for j in 0..ids.len() - 1 {
                inp[bi * t + j] = ids[j];
                tgt[bi * t + j] = ids[j + 1];
                w[bi * t + j] = mask[j + 1] as f32;
            }
        }
        let inp = Tensor::from_vec(inp, (h.batch, t), dev)?;
        let tgt = Tensor::from_vec(tgt, (h.batch, t), dev)?;
        let w = Tensor::from_vec(w, (h.batch, t), dev)?;
        let logits = model.forward(&inp)?;
        let loss = masked_ce(&logits, &tgt, &w)?;
        let l = loss.to_scalar::<f32>()? as f64;
        step(&mut opt, model, &loss, h.clip)?;
        avg = if s == 0 { l } else { 0.98 * avg + 0.02 * l };
        if s % 100 == 0 || s + 1 == h.steps {
            eprintln!(
                "  chat step {s:5}  loss {l:.4}  avg {avg:.4}  lr {:.2e}  {:.1}s",
                lr_at(h, s),
                t0.elapsed().as_secs_f64()
            );
        }
    }
    Ok(avg)
}
