//! The layers of `src/` and the one direction imports take (docs/architecture.md): every module
//! sits on a floor, and a module may name only modules on lower floors — never one beside it,
//! never one above. The top-level modules are floors; inside the chain, so are its parts: what
//! every boundary reads (`chain::run`'s shared modules), then each boundary in chain order (a
//! boundary may read an earlier one: the server's parsers read the template's framing), then
//! the drivers that call them all. A new module gets a floor here (and a line in `src/lib.rs`),
//! or this test fails.
//!
//! Every file is parsed (syn): each `use` tree, and each path written out in code, resolved from
//! the file's own module (`super::`, `self::`, `crate::`), must point down.
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use syn::visit::Visit;

/// Every module and its floor, bottom up. A path belongs to the longest entry it starts with.
const FLOORS: &[(&str, u16)] = &[
    // The ground: errors, then what every layer shares.
    ("error", 0),
    ("clock", 1),
    ("secrets", 1),
    ("verdict", 1),
    ("exchange", 1),
    ("escape", 1),
    ("files", 2),
    ("allocator", 2),
    ("template", 2),
    // The links at rest: a checkpoint's files, what each stack feeds the model, the suite.
    ("artifacts", 3),
    ("stack", 4),
    ("suite", 5),
    ("replay", 6),
    // The model under test, in-process or over HTTP, and what stands in for it or beside it.
    ("endpoint", 7),
    ("serve", 8),
    ("standin", 8),
    ("proxy", 9),
    // Snapshot files and latency statistics, which the judges use.
    ("snapshot", 10),
    ("latency", 10),
    // The judges: what every boundary reads, the boundaries in chain order, the drivers.
    ("chain::run", 11),
    ("chain::checkpoint", 12),
    ("chain::tokenizer", 13),
    ("chain::template", 14),
    ("chain::generation", 15),
    ("chain::server", 16),
    ("chain::client", 17),
    ("chain::replay", 18),
    ("chain::latency", 18),
    ("chain::run::offline", 19),
    ("chain::run::online", 19),
    ("chain::run::sft_stream", 18),
    ("chain", 19),
    // Renderers and drivers, then the face.
    ("report", 20),
    ("history", 20),
    ("init", 20),
    ("example", 20),
    ("gate", 21),
    ("cli", 22),
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// A file's module path: `src/chain/server/fields.rs` → `chain::server::fields`.
fn module_of(file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src()).unwrap();
    let mut parts: Vec<String> = rel
        .iter()
        .map(|c| c.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The floor entry a module path belongs to (the longest prefix in FLOORS).
fn unit(path: &[String]) -> Option<(&'static str, u16)> {
    FLOORS
        .iter()
        .filter(|(m, _)| {
            let m: Vec<&str> = m.split("::").collect();
            m.len() <= path.len() && m.iter().zip(path).all(|(a, b)| a == b)
        })
        .max_by_key(|(m, _)| m.split("::").count())
        .copied()
}

/// A path as written in module `from` (its segments), made absolute; None when it does not
/// name this crate (`std::`, a dependency, a local item).
fn absolute(from: &[String], segs: &[String]) -> Option<Vec<String>> {
    let mut base: Vec<String> = from.to_vec();
    let mut rest = segs;
    match rest.first().map(String::as_str) {
        Some("crate") => {
            base.clear();
            rest = &rest[1..];
        }
        Some("super") | Some("self") => {
            while let Some(s) = rest.first() {
                match s.as_str() {
                    "super" => {
                        base.pop();
                    }
                    "self" => {}
                    _ => break,
                }
                rest = &rest[1..];
            }
        }
        _ => return None,
    }
    base.extend(rest.iter().cloned());
    Some(base)
}

/// Every path a file names: its `use` trees (flattened) and the paths written in code.
#[derive(Default)]
struct Paths {
    found: Vec<(Vec<String>, usize)>,
    /// `mod tests { use super::*; }`: paths inside an inline module are relative to it.
    inline: Vec<String>,
}

impl Paths {
    fn tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree, line: usize) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.tree(prefix, &p.tree, line);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                let mut full = prefix.clone();
                if n.ident != "self" {
                    full.push(n.ident.to_string());
                }
                self.push(full, line);
            }
            syn::UseTree::Rename(r) => {
                let mut full = prefix.clone();
                if r.ident != "self" {
                    full.push(r.ident.to_string());
                }
                self.push(full, line);
            }
            syn::UseTree::Glob(_) => self.push(prefix.clone(), line),
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.tree(prefix, t, line);
                }
            }
        }
    }

    fn push(&mut self, segs: Vec<String>, line: usize) {
        let mut full = segs;
        // Inside `mod tests { … }`, `super` is the file's module, `self` the inline one.
        if !self.inline.is_empty()
            && matches!(full.first().map(String::as_str), Some("super" | "self"))
        {
            let mut prefix: Vec<String> = Vec::new();
            for _ in &self.inline {
                prefix.push("self".into());
            }
            // One `super` per inline level is absorbed by the inline module itself.
            let mut supers = 0;
            while full.get(supers).is_some_and(|s| s == "super") {
                supers += 1;
            }
            if supers >= self.inline.len() {
                full.drain(..self.inline.len());
                full.insert(0, "self".into());
            } else {
                return; // a path inside the inline module: the file's own
            }
        }
        self.found.push((full, line));
    }
}

impl<'ast> Visit<'ast> for Paths {
    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        let line = u.use_token.span.start().line;
        self.tree(&mut Vec::new(), &u.tree, line);
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        let segs: Vec<String> = p.segments.iter().map(|s| s.ident.to_string()).collect();
        if matches!(segs.first().map(String::as_str), Some("crate" | "super")) {
            let line = p.segments[0].ident.span().start().line;
            self.push(segs, line);
        }
        syn::visit::visit_path(self, p);
    }

    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if m.content.is_some() {
            self.inline.push(m.ident.to_string());
            syn::visit::visit_item_mod(self, m);
            self.inline.pop();
        }
    }
}

/// Each path a module names that does not point down: (file:line, what).
fn upward_imports() -> Vec<String> {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let mut up = Vec::new();
    for file in &files {
        let from = module_of(file);
        if from.is_empty() {
            continue; // lib.rs and main.rs: the crate root names every module
        }
        let (from_unit, from_floor) =
            unit(&from).unwrap_or_else(|| panic!("src/{} has no floor in FLOORS", from.join("/")));
        let text = std::fs::read_to_string(file).unwrap();
        let ast = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let mut paths = Paths::default();
        paths.visit_file(&ast);
        for (segs, line) in paths.found {
            let Some(to) = absolute(&from, &segs) else {
                continue;
            };
            let Some((to_unit, to_floor)) = unit(&to) else {
                continue;
            };
            if to_unit == from_unit {
                continue;
            }
            if to_floor >= from_floor {
                up.push(format!(
                    "{}:{line}: `{}` (floor {from_floor}, {from_unit}) names `crate::{}` (floor {to_floor}, {to_unit})",
                    file.strip_prefix(src()).unwrap().display(),
                    from.join("::"),
                    to.join("::")
                ));
            }
        }
    }
    up
}

#[test]
fn imports_only_point_down() {
    let up = upward_imports();
    assert!(
        up.is_empty(),
        "imports that do not point down (move the shared piece to the lower module):\n{}",
        up.join("\n")
    );
}

/// The test sees an upward import inside the chain: a copy of the tree with one planted (the
/// tokenizer boundary naming the server's, a later one) fails, the real tree passes.
#[test]
fn a_planted_upward_import_inside_the_chain_is_caught() {
    let from = vec!["chain".to_string(), "tokenizer".to_string()];
    let segs: Vec<String> = ["crate", "chain", "server", "fields"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let to = absolute(&from, &segs).unwrap();
    let (_, from_floor) = unit(&from).unwrap();
    let (_, to_floor) = unit(&to).unwrap();
    assert!(
        to_floor >= from_floor,
        "the tokenizer boundary sits below the server's"
    );
    // And parsed from source, as the test reads files: the planted line is found.
    let planted = "use crate::chain::server::fields::FieldReplies;\nfn f() { let _ = super::server::ONLINE; }\n";
    let ast = syn::parse_file(planted).unwrap();
    let mut paths = Paths::default();
    paths.visit_file(&ast);
    let named: Vec<Vec<String>> = paths
        .found
        .iter()
        .filter_map(|(s, _)| absolute(&from, s))
        .collect();
    assert!(
        named
            .iter()
            .any(|p| p.starts_with(&["chain".into(), "server".into()])),
        "{named:?}"
    );
    assert!(
        named
            .iter()
            .filter(|p| unit(p).is_some_and(|(_, f)| f >= from_floor))
            .count()
            >= 2,
        "both the `use` and the path in code are upward: {named:?}"
    );
}

/// `src/lib.rs` declares exactly the top-level modules that have a floor, in floor order (it is
/// the map).
#[test]
fn lib_rs_lists_the_layers_in_order() {
    let lib = std::fs::read_to_string(src().join("lib.rs")).unwrap();
    let declared: Vec<&str> = lib
        .lines()
        .filter_map(|l| l.strip_prefix("pub mod "))
        .map(|l| l.trim_end_matches(';'))
        .collect();
    let have: BTreeSet<&str> = declared.iter().copied().collect();
    let want: BTreeSet<&str> = FLOORS
        .iter()
        .map(|(m, _)| m.split("::").next().unwrap())
        .collect();
    assert_eq!(have, want, "src/lib.rs's modules and this test's floors");
    let floors: Vec<u16> = declared
        .iter()
        .map(|m| unit(&[m.to_string()]).unwrap().1)
        .collect();
    let mut sorted = floors.clone();
    sorted.sort_unstable();
    assert_eq!(
        floors, sorted,
        "src/lib.rs lists the modules bottom up: {declared:?}"
    );
}

/// Every folder and file of the chain belongs to a floor entry of its own part of the chain:
/// a new boundary folder gets its line here.
#[test]
fn every_part_of_the_chain_has_a_floor() {
    let mut files = Vec::new();
    rust_files(&src().join("chain"), &mut files);
    for f in files {
        let m = module_of(&f);
        let (u, _) = unit(&m).unwrap();
        assert!(
            m.len() <= 1 || u != "chain" || m == ["chain".to_string(), "run".to_string()],
            "{}: no floor entry of its own (add `chain::{}` to FLOORS)",
            f.display(),
            m.get(1).map(String::as_str).unwrap_or_default()
        );
    }
}

/// Every test belongs to exactly one group of .config/test-budget.toml (the boundary it tests,
/// the matrices, or the command line), and `.cargo/config.toml` has one `cargo test-<group>`
/// alias per group selecting exactly its modules.
#[test]
fn each_boundary_alias_selects_its_groups_modules() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let budget = std::fs::read_to_string(root.join(".config/test-budget.toml")).unwrap();
    let budget: toml::Table = budget.parse().unwrap();
    let aliases = std::fs::read_to_string(root.join(".cargo/config.toml")).unwrap();
    let aliases: toml::Table = aliases.parse().unwrap();
    let aliases = aliases["alias"].as_table().unwrap();
    let groups = budget["group"].as_array().unwrap();
    let mut seen = BTreeSet::new();
    for g in groups {
        let name = g["name"].as_str().unwrap();
        let modules: Vec<&str> = g["modules"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m.as_str().unwrap())
            .collect();
        for m in &modules {
            assert!(seen.insert(m.to_string()), "module {m} is in two groups");
        }
        let want = format!("test(/^({})::/)", modules.join("|"));
        let alias = aliases
            .get(&format!("test-{name}"))
            .unwrap_or_else(|| panic!("no `cargo test-{name}` alias in .cargo/config.toml"));
        let args: Vec<&str> = alias
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        assert_eq!(
            args,
            ["nextest", "run", "--release", "-E", want.as_str()],
            "test-{name}"
        );
    }
    assert_eq!(aliases.len(), groups.len(), "one alias per group, no other");
    // Every integration test file is one group's module.
    for e in std::fs::read_dir(root.join("tests/it")).unwrap() {
        let p = e.unwrap().path();
        let Some(stem) = p.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        if p.extension().is_some_and(|x| x == "rs") && stem != "main" {
            assert!(
                seen.contains(stem),
                "tests/it/{stem}.rs belongs to no group"
            );
        }
    }
}

/// Every judge that files a finding at an earlier boundary than its check's (`.blaming(`) is
/// listed in `fail_fast::BLAMES_EARLIER`, so `gate --fail-fast` never leaves it out while that
/// earlier boundary could still be the first broken one.
#[test]
fn every_judge_that_blames_an_earlier_boundary_is_known_to_fail_fast() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let mut calls = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        for (n, line) in text.lines().enumerate() {
            if line.contains(".blaming(") && !line.trim_start().starts_with("//") {
                calls.push(format!("{}:{}", f.display(), n + 1));
            }
        }
    }
    let listed = chatgate::chain::run::fail_fast::BLAMES_EARLIER;
    assert!(
        !calls.is_empty() && calls.len() <= listed.len(),
        "{} `.blaming(` call(s) in src/ ({}) and {} check(s) in fail_fast::BLAMES_EARLIER: list the \
         check of each judge that blames an earlier boundary there",
        calls.len(),
        calls.join(", "),
        listed.len()
    );
    for (id, boundary) in listed {
        let check = chatgate::verdict::checks::find(id)
            .unwrap_or_else(|| panic!("BLAMES_EARLIER names {id}, which is no check"));
        assert!(
            *boundary < check.boundary,
            "{id} blames {boundary:?}, not an earlier boundary"
        );
    }
}
