//! train_tiny: builds the tiny fixture models for chatgate.
//!
//!   cargo run --release -- --out DIR [--steps-base N] [--steps-chat N] [--seed S] [--threads T]
//!
//! Writes DIR/tiny-base and DIR/tiny-chat (HF layout + model.gguf; tiny-chat also
//! sft.jsonl) and DIR/eval.json (the 8 fixed evaluation prompts with expected answers),
//! then reloads both with candle-transformers and prints a verification.
//!
//! Determinism: all randomness (data, init, batches) comes from one seeded SplitMix64.
//! The program runs candle single-threaded by default (it sets RAYON_NUM_THREADS and
//! CANDLE_NUM_THREADS to `--threads`, default 1, before any candle call); a 2-layer,
//! 64-wide model also trains faster on one thread than on two.

mod data;
mod export;
mod model;
mod tok;
mod train;
mod verify;

use anyhow::{bail, ensure, Context, Result};
use candle_core::{Device, Tensor};
use data::Rng;
use export::Flavor;
use model::{Cfg, Model};
use serde_json::json;
use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;
use train::Hyper;

struct Args {
    out: PathBuf,
    steps_base: usize,
    steps_chat: usize,
    seed: u64,
    threads: usize,
}

fn parse_args() -> Result<Args> {
    let mut a = Args {
        out: PathBuf::new(),
        steps_base: 1500,
        steps_chat: 1500,
        seed: 42,
        threads: 1,
    };
    let mut out = None;
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut val = || it.next().with_context(|| format!("{k} needs a value"));
        match k.as_str() {
            "--out" => out = Some(PathBuf::from(val()?)),
            "--steps-base" => a.steps_base = val()?.parse()?,
            "--steps-chat" => a.steps_chat = val()?.parse()?,
            "--seed" => a.seed = val()?.parse()?,
            "--threads" => a.threads = val()?.parse()?,
            "-h" | "--help" => {
                println!("usage: train_tiny --out DIR [--steps-base N] [--steps-chat N] [--seed S] [--threads T]");
                std::process::exit(0);
            }
            _ => bail!("unknown argument {k:?} (try --help)"),
        }
    }
    a.out = out.context("--out DIR is required")?;
    ensure!(a.threads >= 1, "--threads must be >= 1");
    Ok(a)
}

pub fn config() -> Cfg {
    Cfg {
        vocab: 512,
        hidden: 64,
        layers: 2,
        heads: 4,
        kv_heads: 4,
        inter: 256,
        max_pos: 256,
        eps: 1e-5,
        theta: 10000.0,
    }
}

/// candle allocates fresh output buffers for every op; with glibc's default dynamic
/// mmap/trim thresholds the ~1-2 MB activations of each step are mapped and unmapped
/// again, and page faults took ~35% of the run time. Keep freed memory in the heap.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn tune_malloc() {
    extern "C" {
        fn mallopt(param: i32, value: i32) -> i32;
    }
    const M_TRIM_THRESHOLD: i32 = -1;
    const M_TOP_PAD: i32 = -2;
    const M_MMAP_THRESHOLD: i32 = -3;
    // SAFETY: mallopt only changes glibc allocator tunables; called before any threads start.
    unsafe {
        mallopt(M_MMAP_THRESHOLD, 32 << 20);
        mallopt(M_TRIM_THRESHOLD, 1 << 30);
        mallopt(M_TOP_PAD, 64 << 20);
    }
}
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn tune_malloc() {}

fn main() -> Result<()> {
    tune_malloc();
    let args = parse_args()?;
    // Must happen before candle builds its thread pools (first tensor op).
    std::env::set_var("RAYON_NUM_THREADS", args.threads.to_string());
    std::env::set_var("CANDLE_NUM_THREADS", args.threads.to_string());
    let t_all = Instant::now();
    let dev = Device::Cpu;
    let cfg = config();
    let seed = args.seed;

    // ---- data ----
    let mut data_rng = Rng::new(seed);
    let docs = data::base_documents(&mut data_rng, 1800);
    let convs = data::sft_conversations(&mut data_rng, 80);
    let evals = data::eval_items();
    let rendered: Vec<String> = convs
        .iter()
        .map(|c| tok::render_chatml(c, false).0)
        .collect();
    for e in &evals {
        let in_set = convs.iter().any(|c| {
            c.len() == 2
                && (c[0].role.as_str(), c[0].content.as_str()) == ("user", e.prompt.as_str())
                && (c[1].role.as_str(), c[1].content.as_str()) == ("assistant", e.answer.as_str())
        });
        ensure!(in_set, "eval prompt {:?} not in SFT set", e.prompt);
    }

    // ---- tokenizer ----
    let t0 = Instant::now();
    let mut tok_texts = docs.clone();
    tok_texts.extend(rendered.iter().cloned());
    let tokenizer_json = tok::train_tokenizer(&tok_texts, cfg.vocab)?;
    let tk = tok::load_tokenizer(&tokenizer_json)?;
    for t in tok_texts.iter().chain(rendered.iter()) {
        let ids = tok::encode(&tk, t)?;
        ensure!(tok::decode(&tk, &ids)? == *t, "round trip failed for {t:?}");
    }
    let mut stream = Vec::new();
    for d in &docs {
        stream.extend(tok::encode(&tk, d)?);
        stream.push(tok::ENDOFTEXT_ID);
    }
    let rows: Vec<(Vec<u32>, Vec<u8>)> = convs
        .iter()
        .map(|c| tok::encode_with_mask(&tk, c))
        .collect::<Result<_>>()?;
    let max_row = rows.iter().map(|r| r.0.len()).max().unwrap_or(0);
    ensure!(max_row <= cfg.max_pos, "SFT row too long: {max_row}");
    eprintln!(
        "data: {} docs ({} KB, {} tokens), {} SFT conversations ({} tokens, longest {}), tokenizer {} tokens in {:.2}s",
        docs.len(),
        docs.iter().map(|d| d.len() + 1).sum::<usize>() / 1024,
        stream.len(),
        rows.len(),
        rows.iter().map(|r| r.0.len()).sum::<usize>(),
        max_row,
        tk.get_vocab_size(true),
        t0.elapsed().as_secs_f64()
    );

    // ---- base pretraining ----
    let mut init_rng = Rng::new(seed ^ 0x1111);
    let model = Model::new(cfg.clone(), &mut init_rng, &dev)?;
    let hb = Hyper {
        steps: args.steps_base,
        batch: 16,
        seq: 64,
        lr: 3e-3,
        min_lr_frac: 0.1,
        warmup: 100,
        weight_decay: 0.01,
        clip: 1.0,
    };
    let t0 = Instant::now();
    eprintln!("pretraining tiny-base: {hb:?}");
    let base_loss = train::pretrain(&model, &stream, &hb, &mut Rng::new(seed ^ 0x2222), &dev)?;
    let t_base = t0.elapsed().as_secs_f64();
    let base_tensors = model.tensors()?;
    let out = &args.out;
    std::fs::create_dir_all(out)?;
    let base_flavor = Flavor {
        name: "tiny-base",
        eos_id: tok::ENDOFTEXT_ID,
        eos: tok::ENDOFTEXT,
        gen_eos: vec![tok::ENDOFTEXT_ID],
    };
    export::write_model_dir(
        &out.join("tiny-base"),
        &cfg,
        &base_tensors,
        &tokenizer_json,
        &base_flavor,
    )?;

    // ---- chat fine-tune ----
    let hc = Hyper {
        steps: args.steps_chat,
        batch: 16,
        seq: 0,
        lr: 2e-3,
        min_lr_frac: 0.1,
        warmup: 50,
        weight_decay: 0.01,
        clip: 1.0,
    };
    let t0 = Instant::now();
    eprintln!("fine-tuning tiny-chat (loss on assistant tokens only): {hc:?}");
    let chat_loss = train::sft(
        &model,
        &rows,
        &hc,
        &mut Rng::new(seed ^ 0x3333),
        &dev,
        tok::ENDOFTEXT_ID,
    )?;
    let t_chat = t0.elapsed().as_secs_f64();
    let chat_tensors = model.tensors()?;
    let chat_dir = out.join("tiny-chat");
    let chat_flavor = Flavor {
        name: "tiny-chat",
        eos_id: tok::IM_END_ID,
        eos: tok::IM_END,
        gen_eos: vec![tok::IM_END_ID, tok::ENDOFTEXT_ID],
    };
    export::write_model_dir(
        &chat_dir,
        &cfg,
        &chat_tensors,
        &tokenizer_json,
        &chat_flavor,
    )?;
    let mut f = std::io::BufWriter::new(std::fs::File::create(chat_dir.join("sft.jsonl"))?);
    for (c, (ids, mask)) in convs.iter().zip(&rows) {
        serde_json::to_writer(
            &mut f,
            &json!({"messages": c, "input_ids": ids, "assistant_mask": mask}),
        )?;
        f.write_all(b"\n")?;
    }
    f.flush()?;
    drop(f);
    export::write_json(&out.join("eval.json"), &json!(evals))?;

    // ---- trainer == candle-transformers ----
    let hf = verify::load_hf(&chat_dir, &dev)?;
    let probe = verify::chat_prompt_ids(&tk, &evals[0].prompt)?;
    let mine = model.forward(&Tensor::new(probe.as_slice(), &dev)?.unsqueeze(0)?)?;
    let mine: Vec<f32> = mine.squeeze(0)?.get(probe.len() - 1)?.to_vec1()?;
    let theirs = verify::hf_logits(&hf, &probe, &dev)?;
    let d = mine
        .iter()
        .zip(&theirs)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    eprintln!("trainer vs candle-transformers llama: max |logit diff| {d:.2e}");
    ensure!(
        d < 1e-3,
        "trained model and reloaded safetensors disagree ({d})"
    );

    // ---- verification ----
    let s = verify::verify(out, &evals)?;
    let total = t_all.elapsed().as_secs_f64();
    println!(
        "summary: seed {seed}, threads {}, base {} steps {:.0}s (loss {:.3}), chat {} steps {:.0}s (loss {:.3}), total {:.0}s; stops {}/{}, exact {}/{}, gguf==safetensors {}/{} (max diff {:.1e})",
        args.threads, hb.steps, t_base, base_loss, hc.steps, t_chat, chat_loss, total, s.stops, s.n, s.exact, s.n, s.gguf_same, s.n, s.max_gguf_diff
    );
    ensure!(
        s.gguf_same == s.n && s.max_gguf_diff < 1e-3,
        "GGUF and safetensors disagree"
    );
    Ok(())
}
