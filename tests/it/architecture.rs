//! The layers of `src/` and the one direction imports take (docs/architecture.md): each
//! top-level module sits on a floor, and a module may name (`crate::x`) only modules on lower
//! floors — never one beside it, never one above. A new module gets a floor here and a line in
//! `src/lib.rs`, or this test fails; an import that points up fails it with the file and line.
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Every top-level module and its floor, bottom up.
const FLOORS: &[(&str, u8)] = &[
    // The ground: errors, then what every layer shares.
    ("error", 0),
    ("clock", 1),
    ("secrets", 1),
    ("verdict", 1),
    ("exchange", 1),
    ("files", 2),
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
    // The judges.
    ("chain", 10),
    ("snapshot", 10),
    ("latency", 10),
    // Renderers and drivers, then the face.
    ("report", 11),
    ("history", 11),
    ("init", 11),
    ("example", 11),
    ("gate", 12),
    ("cli", 13),
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

fn floor(module: &str) -> Option<u8> {
    FLOORS.iter().find(|(m, _)| *m == module).map(|(_, f)| *f)
}

/// The top-level module a file belongs to (`src/chain/online/mod.rs` → `chain`).
fn module_of(file: &Path) -> String {
    let rel = file.strip_prefix(src()).unwrap();
    let first = rel
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_string_lossy();
    first.trim_end_matches(".rs").to_string()
}

#[test]
fn imports_only_point_down() {
    let re = regex::Regex::new(r"crate::([a-z_]+)").unwrap();
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let mut up = Vec::new();
    for file in &files {
        let from = module_of(file);
        if from == "lib" || from == "main" {
            continue;
        }
        let from_floor =
            floor(&from).unwrap_or_else(|| panic!("src/{from} has no floor in FLOORS"));
        let text = std::fs::read_to_string(file).unwrap();
        for (n, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue; // documentation may point anywhere
            }
            for c in re.captures_iter(line) {
                let to = &c[1];
                if to == from {
                    continue;
                }
                let Some(to_floor) = floor(to) else { continue };
                if to_floor >= from_floor {
                    up.push(format!(
                        "{}:{}: `{from}` (floor {from_floor}) names `crate::{to}` (floor {to_floor})",
                        file.strip_prefix(src()).unwrap().display(),
                        n + 1
                    ));
                }
            }
        }
    }
    assert!(
        up.is_empty(),
        "imports that do not point down (move the shared piece to the lower module):\n{}",
        up.join("\n")
    );
}

/// `src/lib.rs` declares exactly the modules that have a floor, in floor order (it is the map).
#[test]
fn lib_rs_lists_the_layers_in_order() {
    let lib = std::fs::read_to_string(src().join("lib.rs")).unwrap();
    let declared: Vec<&str> = lib
        .lines()
        .filter_map(|l| l.strip_prefix("pub mod "))
        .map(|l| l.trim_end_matches(';'))
        .collect();
    let have: BTreeSet<&str> = declared.iter().copied().collect();
    let want: BTreeSet<&str> = FLOORS.iter().map(|(m, _)| *m).collect();
    assert_eq!(have, want, "src/lib.rs's modules and this test's floors");
    let floors: Vec<u8> = declared.iter().map(|m| floor(m).unwrap()).collect();
    let mut sorted = floors.clone();
    sorted.sort_unstable();
    assert_eq!(
        floors, sorted,
        "src/lib.rs lists the modules bottom up: {declared:?}"
    );
}
