//! Every subcommand's `--help` names its page of the book, and every named page exists.
use std::path::Path;

use chatgate::cli::docs::{command, page, BOOK, PAGES};

use crate::common::cli::chatgate_in;

const REPO: &str = env!("CARGO_MANIFEST_DIR");

#[test]
fn every_subcommand_has_a_page_that_exists() {
    let cmd = command();
    let mut missing = Vec::new();
    for sub in cmd.get_subcommands() {
        match page(sub.get_name()) {
            None => missing.push(format!(
                "{}: no page in src/cli/docs.rs PAGES",
                sub.get_name()
            )),
            Some(p) if !Path::new(REPO).join("docs").join(p).is_file() => {
                missing.push(format!("{}: docs/{p} does not exist", sub.get_name()))
            }
            Some(_) => {}
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
    // And the table names no subcommand that is gone.
    for (name, _) in PAGES {
        assert!(
            cmd.get_subcommands().any(|s| s.get_name() == *name),
            "PAGES names `{name}`, which is not a subcommand"
        );
    }
}

#[test]
fn the_help_of_a_subcommand_ends_with_its_page() {
    let tmp = tempfile::tempdir().unwrap();
    for (name, long) in [
        ("gate", "--help"),
        ("gate", "-h"),
        ("example", "--help"),
        ("accept", "--help"),
    ] {
        let (code, out, err) = chatgate_in(&[name, long], tmp.path());
        assert_eq!(code, 0, "{err}");
        let want = format!("Docs: {BOOK}/{}", page(name).unwrap());
        assert!(
            out.trim_end().ends_with(&want),
            "`chatgate {name} {long}` does not end with {want}:\n{out}"
        );
    }
    // The examples a subcommand's help already had are kept above the page.
    let (_, out, _) = chatgate_in(&["gate", "--help"], tmp.path());
    assert!(
        out.contains("Examples:") && out.contains("chatgate merge"),
        "{out}"
    );
}
