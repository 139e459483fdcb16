//! docs/checks.md's tables, written from the check registry (`verdict::checks`): what each
//! check judges, by stage, and every check's usual cause and fix. `tests/it/checks_doc.rs` keeps
//! the page equal to this (`CHATGATE_BLESS=1` rewrites it), so the page cannot drift from the
//! checks the gate runs.
use crate::verdict::checks::{Check, Stage, ALL};
use crate::verdict::Boundary;

/// A table's block in docs/checks.md: its markers and its Markdown.
pub struct Block {
    pub start: &'static str,
    pub end: &'static str,
    pub markdown: String,
}

/// The page's generated blocks, in page order.
pub fn blocks() -> Vec<Block> {
    vec![
        Block {
            start: "<!-- checks:offline:start -->",
            end: "<!-- checks:offline:end -->",
            markdown: stage_table(&[Stage::Offline]),
        },
        Block {
            start: "<!-- checks:online:start -->",
            end: "<!-- checks:online:end -->",
            markdown: stage_table(&[Stage::Online, Stage::Latency, Stage::Replay]),
        },
        Block {
            start: "<!-- checks:causes:start -->",
            end: "<!-- checks:causes:end -->",
            markdown: cause_tables(),
        },
    ]
}

/// A Markdown table cell: pipes escaped, one line.
fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

/// The boundary as the tables name it.
fn boundary_name(b: Boundary) -> &'static str {
    match b {
        Boundary::GenerationConfig => "generation config",
        b => b.name(),
    }
}

fn stage_table(stages: &[Stage]) -> String {
    let mut out = String::from("| boundary | check id | fails (error) when |\n|---|---|---|\n");
    for c in ALL.iter().filter(|c| stages.contains(&c.stage)) {
        out.push_str(&format!(
            "| {} | `{}` | {} |\n",
            boundary_name(c.boundary),
            c.id,
            cell(c.fails)
        ));
    }
    out
}

/// Which checks a cause-and-fix table holds.
type Member = fn(&Check) -> bool;

/// One table per boundary group: each row anchored at the check's id (reports link there).
fn cause_tables() -> String {
    let groups: [(&str, Member); 7] = [
        ("checkpoint", |c| c.boundary == Boundary::Checkpoint),
        ("tokenizer", |c| c.boundary == Boundary::Tokenizer),
        ("template", |c| c.boundary == Boundary::Template),
        ("generation config", |c| {
            c.boundary == Boundary::GenerationConfig
        }),
        ("server", |c| {
            c.boundary == Boundary::Server && !c.id.starts_with("latency.")
        }),
        ("client", |c| c.boundary == Boundary::Client),
        ("replay and latency", |c| {
            c.boundary == Boundary::Replay || c.id.starts_with("latency.")
        }),
    ];
    let mut out = String::new();
    for (title, member) in groups {
        out.push_str(&format!(
            "### {title}\n\n| check id | usual cause | fix |\n|---|---|---|\n"
        ));
        for c in ALL.iter().filter(|c| member(c)) {
            out.push_str(&format!(
                "| <a id=\"{}\"></a>`{}` | {} | {} |\n",
                c.id,
                c.id,
                cell(c.cause),
                cell(c.fix)
            ));
        }
        out.push('\n');
    }
    out.trim_end().to_string() + "\n"
}

/// `page` with every block replaced by the registry's; Err names a block whose markers are
/// missing.
pub fn regenerate(page: &str) -> Result<String, String> {
    let mut text = page.to_string();
    for b in blocks() {
        let a = text
            .find(b.start)
            .ok_or_else(|| format!("no {} in the page", b.start))?
            + b.start.len();
        let z = a + text[a..]
            .find(b.end)
            .ok_or_else(|| format!("no {} after {}", b.end, b.start))?;
        text.replace_range(a..z, &format!("\n{}", b.markdown));
    }
    Ok(text)
}
