//! `chatgate init`: see `crate::init`.
use std::path::PathBuf;

use clap::Args;

use super::Format;
use crate::error::Result;

#[derive(Args)]
pub struct InitArgs {
    /// The suite file to write (its folder gets the prompts, SFT rows and lock beside it).
    pub suite: PathBuf,
    /// The model directory (Hugging Face layout) or .gguf file to gate.
    #[arg(long, value_name = "DIR")]
    pub model: PathBuf,
    /// The server's base URL (default: the model in-process).
    #[arg(long, value_name = "URL")]
    pub target: Option<String>,
    /// Your SFT data as JSONL: {"messages", "input_ids"?, "assistant_mask"?} per line. Rows with
    /// input_ids become the golden rows as they are; the first user turns become replay prompts.
    #[arg(long, value_name = "FILE.jsonl")]
    pub sft: Option<PathBuf>,
    /// The serving stack (default: detected from --target's routes, else at gate time).
    #[arg(long, value_enum)]
    pub stack: Option<crate::stack::Stack>,
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

pub fn run(a: InitArgs) -> Result<i32> {
    let (served_model, detected) = match &a.target {
        Some(url) => ask_server(url)?,
        None => (None, None),
    };
    let w = crate::init::init(&crate::init::Options {
        suite: a.suite,
        model: a.model,
        target: a.target,
        sft: a.sft,
        stack: a.stack,
        detected,
        served_model,
    })?;
    match a.format {
        Format::Json => println!("{}", serde_json::to_string_pretty(&w).unwrap_or_default()),
        Format::Text => {
            println!("wrote {}", w.suite.display());
            println!("  {} ({} prompts)", w.prompts.display(), w.prompt_count);
            println!(
                "  {} ({} SFT rows, {})",
                w.sft.display(),
                w.sft_rows,
                w.sft_origin
            );
            println!("  {}", w.lock.display());
            for n in &w.notes {
                println!("note: {n}");
            }
            if w.sft_origin == "rendered" {
                println!(
                    "hint: the SFT rows were rendered by chatgate, not captured from your trainer; capture real ones with TRL's \
apply_chat_template(messages, tokenize=True, return_dict=True) and rerun with --sft FILE"
                );
            }
            println!(
                "next: chatgate gate {} --update   (then review and commit what it recorded)",
                w.suite.display()
            );
        }
    }
    Ok(0)
}

/// The model id the server lists at `GET /v1/models` (when it lists exactly one), and the stack
/// its routes reveal (the detection `gate` uses). A server that does not answer is unreachable
/// (exit 3): a suite written against it could not be checked.
#[allow(clippy::type_complexity)]
fn ask_server(url: &str) -> Result<(Option<String>, Option<(crate::stack::Stack, String)>)> {
    use std::time::Duration;
    let target = crate::endpoint::openai::HttpTarget::new(crate::endpoint::openai::HttpOptions {
        base_url: url.to_string(),
        connect_timeout: Duration::from_secs(5),
        read_timeout: Duration::from_secs(10),
        total_timeout: Duration::from_secs(15),
        ..Default::default()
    })?;
    let rt = super::runtime()?;
    let reply = rt.block_on(target.get("/v1/models"));
    let reply = match reply {
        Ok(r) => Some(r),
        Err(e) if e.unreachable() => {
            return Err(crate::error::Error::unreachable(format!(
                "{url}: the server does not answer ({e})"
            ))
            .hint("start the server first, or leave out --target and point the suite at it later"))
        }
        Err(_) => None,
    };
    let detected = rt.block_on(target.introspect()).stack();
    let Some(reply) = reply else {
        return Ok((None, detected));
    };
    let ids: Vec<String> = reply
        .json
        .as_ref()
        .and_then(|v| v["data"].as_array())
        .into_iter()
        .flatten()
        .filter_map(|m| m["id"].as_str().map(str::to_string))
        .collect();
    let one = match ids.as_slice() {
        [one] => Some(one.clone()),
        _ => None,
    };
    Ok((one, detected))
}
