//! Each subcommand's `--help` ends with the page of the book (docs/, an mdBook) that teaches it,
//! so the help a user already has points at the rest. `tests/it/help_pages.rs` keeps the table
//! complete and every page real.
use clap::{Command, CommandFactory, FromArgMatches};

use super::Cli;

/// Where the book's sources are read on the web (the same files as docs/ in a clone).
pub const BOOK: &str = "https://github.com/chatgate/chatgate/blob/main/docs";

/// Subcommand → its page, relative to docs/.
pub const PAGES: &[(&str, &str)] = &[
    ("render", "commands/render.md"),
    ("parse-reply", "commands/parse-reply.md"),
    ("inspect", "commands/inspect.md"),
    ("check", "commands/check.md"),
    ("lock", "commands/lock.md"),
    ("serve", "commands/serve.md"),
    ("gate", "commands/gate.md"),
    ("merge", "commands/merge.md"),
    ("bench", "commands/bench.md"),
    ("review", "commands/review.md"),
    ("accept", "commands/review.md"),
    ("reject", "commands/review.md"),
    ("proxy", "commands/proxy.md"),
    ("client-probe", "commands/client-probe.md"),
    ("standin", "commands/standin.md"),
    ("init", "commands/init.md"),
    ("example", "commands/example.md"),
    ("history", "commands/history.md"),
];

/// The page of a subcommand, if the table has one.
pub fn page(subcommand: &str) -> Option<&'static str> {
    PAGES
        .iter()
        .find(|(n, _)| *n == subcommand)
        .map(|(_, p)| *p)
}

/// The clap command with every subcommand's help ending in its page.
pub fn command() -> Command {
    let mut cmd = Cli::command();
    let names: Vec<String> = cmd
        .get_subcommands()
        .map(|s| s.get_name().to_string())
        .collect();
    for name in names {
        let Some(page) = page(&name) else { continue };
        cmd = cmd.mut_subcommand(&name, |s| {
            let docs = format!("Docs: {BOOK}/{page}");
            let short = append(s.get_after_help().map(|h| h.to_string()), &docs);
            let long = append(
                s.get_after_long_help()
                    .or(s.get_after_help())
                    .map(|h| h.to_string()),
                &docs,
            );
            s.after_help(short).after_long_help(long)
        });
    }
    cmd
}

fn append(before: Option<String>, docs: &str) -> String {
    match before {
        Some(b) if !b.trim().is_empty() => format!("{b}\n\n{docs}"),
        _ => docs.to_string(),
    }
}

/// Parse the process's arguments with the pages in the help (clap exits on --help or an error).
pub fn parse() -> Cli {
    let matches = command().get_matches();
    Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}
