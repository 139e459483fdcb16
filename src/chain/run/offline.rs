//! The offline chain's driver: every boundary's offline checks, in chain order (`chatgate
//! check`, and the first stage of `gate`).
use crate::chain::run::context::Context;
use crate::chain::run::{policy, sft_stream};
use crate::chain::{checkpoint, client, generation, template, tokenizer};
use crate::error::Result;
use crate::verdict::Findings;

/// Run every offline boundary in chain order. The SFT rows are streamed once, in parallel, for
/// the per-row checks of the tokenizer, template and generation boundaries; `progress` shows
/// a bar for that pass on a terminal.
pub fn run_offline(ctx: &Context, progress: bool) -> Result<Findings> {
    let mut findings = Findings::default();
    findings.extend(checkpoint::check(ctx)?);
    findings.extend(checkpoint::gguf::check(ctx));
    let rows = sft_stream::tally(ctx, progress)?;
    findings.extend(tokenizer::check(ctx, &rows.reencode)?);
    findings.extend(template::check(
        ctx,
        &rows.template,
        &rows.degenerate_masks,
        &rows.shapes_used,
    )?);
    findings.extend(generation::check(ctx, &rows.generation)?);
    findings.extend(client::check(ctx)?);
    policy::apply_policy(&mut findings.0, &ctx.suite.file.server);
    findings.sort();
    Ok(findings)
}
