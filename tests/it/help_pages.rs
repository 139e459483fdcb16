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

/// The flags several subcommands share: each row is a flag, the subcommands that must take it
/// and the ones that may not, with why — so a flag one subcommand takes and a sibling refuses
/// (issue 47: `check --no-progress`) is either fixed or a reviewed exception.
/// A shared flag: its name, who must take it, who must not (and why).
type Shared = (
    &'static str,
    &'static [&'static str],
    &'static [(&'static str, &'static str)],
);

const SHARED: &[Shared] = &[
    (
        "--no-progress",
        &["check", "gate", "bench"],
        &[],
    ),
    (
        "--format",
        &[
            "render", "inspect", "check", "gate", "merge", "bench", "history", "client-probe",
            "standin", "init", "parse-reply",
        ],
        &[
            ("serve", "a server: it logs, it does not report"),
            ("proxy", "a proxy: it logs, it does not report"),
            ("review", "interactive: one diff at a time on a terminal"),
            ("accept", "prints the snapshot files it moved, nothing to parse"),
            ("reject", "prints the snapshot files it deleted, nothing to parse"),
            ("lock", "the lock file it writes is the machine-readable output"),
            ("example", "writes a project; prints the commands to try"),
        ],
    ),
    (
        "--stack",
        &["render", "check", "gate", "init"],
        &[(
            "bench",
            "latency only: the stack predicts what the server feeds the model, which bench does not judge",
        )],
    ),
    ("--update", &["gate", "lock", "bench"], &[]),
    ("--commit", &["gate", "merge", "bench"], &[]),
];

/// The long flags a `--help` page lists, each with its help text (to the next flag).
fn flags(help: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for line in help.lines() {
        let t = line.trim_start();
        let t = t.strip_prefix("-h, ").unwrap_or(t);
        let t = match t.find("--") {
            Some(0) => t,
            Some(n) if t[..n].starts_with('-') && t[..n].ends_with(", ") => &t[n..],
            _ => {
                if let Some(last) = out.last_mut() {
                    last.1.push_str(line.trim());
                    last.1.push(' ');
                }
                continue;
            }
        };
        let name: String = t
            .chars()
            .take_while(|c| !c.is_whitespace() && *c != '=' && *c != '<')
            .collect();
        out.push((name, String::new()));
    }
    out
}

#[test]
fn shared_flags_are_taken_by_every_subcommand_they_make_sense_for_with_one_meaning() {
    let tmp = tempfile::tempdir().unwrap();
    let subs: Vec<String> = command()
        .get_subcommands()
        .map(|s| s.get_name().to_string())
        .collect();
    let pages: Vec<(String, Vec<(String, String)>)> = subs
        .iter()
        .map(|name| {
            let (code, out, err) = chatgate_in(&[name, "--help"], tmp.path());
            assert_eq!(code, 0, "{name} --help: {err}");
            (name.clone(), flags(&out))
        })
        .collect();
    let takes = |sub: &str, flag: &str| {
        pages
            .iter()
            .find(|(n, _)| n == sub)
            .unwrap_or_else(|| panic!("no subcommand {sub}"))
            .1
            .iter()
            .any(|(f, _)| f == flag)
    };
    let mut wrong = Vec::new();
    for (flag, must, exempt) in SHARED {
        for sub in *must {
            if !takes(sub, flag) {
                wrong.push(format!("`chatgate {sub}` refuses {flag}"));
            }
        }
        for (sub, why) in *exempt {
            assert!(!why.is_empty());
            if takes(sub, flag) {
                wrong.push(format!(
                    "`chatgate {sub}` takes {flag}: drop it from the exceptions"
                ));
            }
        }
        // Every subcommand is on one side or the other: a new subcommand is decided, not missed.
        for (sub, _) in &pages {
            let decided = must.contains(&sub.as_str()) || exempt.iter().any(|(s, _)| s == sub);
            if takes(sub, flag) && !decided {
                wrong.push(format!(
                    "`chatgate {sub}` takes {flag} and SHARED does not list it"
                ));
            }
        }
        // One meaning: the same help text wherever a flag means the same thing.
        let texts: std::collections::BTreeSet<&str> = pages
            .iter()
            .filter(|(sub, _)| must.contains(&sub.as_str()))
            .filter_map(|(_, fl)| fl.iter().find(|(f, _)| f == flag))
            .map(|(_, text)| text.as_str())
            .collect();
        if *flag == "--no-progress" && texts.len() > 1 {
            wrong.push(format!(
                "{flag} is explained {} ways: {texts:?}",
                texts.len()
            ));
        }
    }
    // A flag pair: --commit names the commit of a --history record.
    for (sub, _) in &pages {
        if takes(sub, "--history") != takes(sub, "--commit") {
            wrong.push(format!(
                "`chatgate {sub}`: --history and --commit come together"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
