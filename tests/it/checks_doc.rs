//! docs/checks.md's tables are the check registry's (`src/verdict/checks.rs`): a check added,
//! renamed or reworded there without the page fails here. `CHATGATE_BLESS=1` rewrites the page's
//! generated blocks (review the diff), as the matrices do.
use std::path::Path;

const PAGE: &str = "docs/checks.md";

#[test]
fn the_checks_page_is_generated_from_the_registry() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(PAGE);
    let page = std::fs::read_to_string(&path).expect("docs/checks.md");
    let want =
        chatgate::report::checks_doc::regenerate(&page).unwrap_or_else(|e| panic!("{PAGE}: {e}"));
    if page == want {
        return;
    }
    if std::env::var_os("CHATGATE_BLESS").is_some_and(|v| v == "1") {
        let tmp = path.with_extension("md.bless-tmp");
        std::fs::write(&tmp, &want).expect("write");
        std::fs::rename(&tmp, &path).expect("rename");
        eprintln!("{PAGE} rewritten from the registry (CHATGATE_BLESS=1)");
        return;
    }
    let first = page
        .lines()
        .zip(want.lines())
        .position(|(a, b)| a != b)
        .unwrap_or(page.lines().count().min(want.lines().count()));
    panic!(
        "{PAGE} is not the registry's (src/verdict/checks.rs): first difference at line {}:\n  page:     {}\n  registry: {}\nrerun with CHATGATE_BLESS=1 to rewrite the generated tables, then review the diff",
        first + 1,
        page.lines().nth(first).unwrap_or(""),
        want.lines().nth(first).unwrap_or("")
    );
}

/// Every check in the registry is one the source files at least once: a check no code judges
/// any more must leave the registry (and the page) with it.
#[test]
fn every_registered_check_is_judged_somewhere() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut text = String::new();
    read_all(&src, &mut text);
    let unused: Vec<&str> = chatgate::verdict::checks::ALL
        .iter()
        .filter(|c| c.stage != chatgate::verdict::checks::Stage::Name)
        .filter(|c| {
            let name = c.id.to_uppercase().replace(['.', '-'], "_");
            !text.contains(&format!("checks::{name}"))
        })
        .map(|c| c.id)
        .collect();
    assert!(unused.is_empty(), "registered but never judged: {unused:?}");
}

fn read_all(dir: &Path, out: &mut String) {
    for e in std::fs::read_dir(dir).expect("src") {
        let p = e.expect("entry").path();
        if p.is_dir() {
            read_all(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") && !p.ends_with("verdict/checks.rs") {
            out.push_str(&std::fs::read_to_string(&p).expect("source"));
        }
    }
}
