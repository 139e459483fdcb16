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
    /// Hidden width (a multiple of 16, 16-512); heads are 16 wide.
    #[arg(long, default_value_t = 64)]
    pub hidden: usize,
    /// Replace the stand-in's files in an OUT that already holds files.
    #[arg(long)]
    pub force: bool,
    /// Script the reply: every greedy reply is TEXT, then the turn terminator (e.g. a
    /// `<tool_call>` block, to test a server's tool-call parser with the family's real framing).
    #[arg(long, value_name = "TEXT")]
    pub reply: Option<String>,
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
