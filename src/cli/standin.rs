//! `chatgate standin`: see `crate::standin`.
use std::path::PathBuf;

use clap::Args;

use super::Format;
use crate::error::Result;

#[derive(Args)]
pub struct StandinArgs {
    /// The real model's directory (tokenizer.json required).
    #[arg(long, value_name = "DIR")]
    pub from: PathBuf,
    /// Where to write the stand-in (created; must be empty unless --force).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// The random seed: the same seed gives the same weights.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Transformer layers (1-8).
    #[arg(long, default_value_t = 2)]
    pub layers: usize,
    /// Hidden width (a multiple of 16, 16-512).
    #[arg(long, default_value_t = 64)]
    pub hidden: usize,
    /// Width of one attention head (16, 32 or 64, dividing --hidden). vLLM's CPU attention
    /// takes 32 and up only.
    #[arg(long, default_value_t = 16)]
    pub head_dim: usize,
    /// Replace the stand-in's files in an OUT that already holds files.
    #[arg(long)]
    pub force: bool,
    /// Script the reply: every greedy reply is TEXT, then the turn terminator (e.g. a
    /// `<tool_call>` block, to test a server's tool-call parser with the family's real framing).
    #[arg(long, value_name = "TEXT")]
    pub reply: Option<String>,
    /// Keep the real model's exact dimensions (its config.json) with random bf16 weights, as
    /// the real checkpoint ships: what a model of that size costs (memory, load, decode) and a
    /// checkpoint boundary at real size, without downloading it. --layers, --hidden and
    /// --head-dim are then the source's; no model.gguf is written.
    #[arg(long, conflicts_with_all = ["reply", "layers", "hidden", "head_dim"])]
    pub real_shape: bool,
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

pub fn run(a: StandinArgs) -> Result<i32> {
    let built = crate::standin::build(&crate::standin::Options {
        from: a.from,
        out: a.out,
        seed: a.seed,
        layers: a.layers,
        hidden: a.hidden,
        head_dim: a.head_dim,
        real_shape: a.real_shape,
        force: a.force,
        reply: a.reply,
    })?;
    match a.format {
        Format::Json => println!(
            "{}",
            serde_json::to_string_pretty(&built).unwrap_or_default()
        ),
        Format::Text => {
            println!(
                "stand-in written to {}: {} ({} layers × {} wide, vocabulary {})",
                built.out.display(),
                built.model_type,
                built.layers,
                built.hidden,
                built.vocab_size
            );
            if let (Some(arch), Some((model, pre))) =
                (&built.gguf_architecture, &built.gguf_tokenizer)
            {
                println!("model.gguf: general.architecture {arch}, tokenizer.ggml.model {model}, pre {pre}");
            }
            if let Some((id, text)) = &built.turn_terminator {
                println!(
                    "turn terminator {text:?} (id {id}): {} of {} greedy replies end with it",
                    built.replies_ending.0, built.replies_ending.1
                );
            }
            println!("files: {}", built.files.join(", "));
            for n in &built.notes {
                println!("note: {n}");
            }
        }
    }
    Ok(0)
}
