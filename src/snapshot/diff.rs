//! Line diffs of two snapshot bodies (or texts) for the terminal and Markdown reports.
//!
//! Plain output is a standard unified diff (`--- accepted` / `+++ new`, 3 lines of context),
//! which renders as a diff block in Markdown and pastes into issues. With colour on, changed
//! lines are red/green and, where a removed line is paired with an added one, the words that
//! actually changed are highlighted — a one-token change in a long reply is then visible at a
//! glance.
use similar::{ChangeTag, DiffOp, TextDiff};

const CONTEXT: usize = 3;

/// A unified, line-based diff (empty when the texts are equal).
pub fn diff_text(accepted: &str, new: &str) -> String {
    if accepted == new {
        return String::new();
    }
    TextDiff::from_lines(accepted, new)
        .unified_diff()
        .context_radius(CONTEXT)
        .header("accepted", "new")
        .to_string()
}

/// [`diff_text`], or with `colour` an ANSI-coloured diff with changed words highlighted.
pub fn render_diff(accepted: &str, new: &str, colour: bool) -> String {
    if !colour || accepted == new {
        return diff_text(accepted, new);
    }
    let diff = TextDiff::from_lines(accepted, new);
    let mut out = String::from("\x1b[1m--- accepted\n+++ new\x1b[0m\n");
    for group in diff.grouped_ops(CONTEXT) {
        out.push_str(&format!("\x1b[36m{}\x1b[0m\n", hunk_header(&group)));
        for op in &group {
            render_op(&diff, op, &mut out);
        }
    }
    out
}

fn hunk_header(group: &[DiffOp]) -> String {
    let (first, last) = match (group.first(), group.last()) {
        (Some(f), Some(l)) => (f, l),
        _ => return "@@".into(),
    };
    let old = first.old_range().start..last.old_range().end;
    let new = first.new_range().start..last.new_range().end;
    format!(
        "@@ -{},{} +{},{} @@",
        old.start + 1,
        old.len(),
        new.start + 1,
        new.len()
    )
}

fn render_op(diff: &TextDiff<'_, '_, str>, op: &DiffOp, out: &mut String) {
    let changes: Vec<_> = diff.iter_changes(op).collect();
    let deleted: Vec<&str> = changes
        .iter()
        .filter(|c| c.tag() == ChangeTag::Delete)
        .map(|c| c.value())
        .collect();
    let inserted: Vec<&str> = changes
        .iter()
        .filter(|c| c.tag() == ChangeTag::Insert)
        .map(|c| c.value())
        .collect();
    if let DiffOp::Replace { .. } = op {
        // Pair removed and added lines in order and highlight the words that differ.
        for i in 0..deleted.len().max(inserted.len()) {
            match (deleted.get(i), inserted.get(i)) {
                (Some(d), Some(n)) => {
                    let (old_line, new_line) = highlight_words(d, n);
                    push_line(out, "31", '-', &old_line);
                    push_line(out, "32", '+', &new_line);
                }
                (Some(d), None) => push_line(out, "31", '-', d),
                (None, Some(n)) => push_line(out, "32", '+', n),
                (None, None) => {}
            }
        }
        return;
    }
    for c in changes {
        match c.tag() {
            ChangeTag::Equal => push_line(out, "2", ' ', c.value()),
            ChangeTag::Delete => push_line(out, "31", '-', c.value()),
            ChangeTag::Insert => push_line(out, "32", '+', c.value()),
        }
    }
}

fn push_line(out: &mut String, colour: &str, sign: char, line: &str) {
    let line = line.strip_suffix('\n').unwrap_or(line);
    out.push_str(&format!("\x1b[{colour}m{sign}{line}\x1b[0m\n"));
}

/// The two lines with their differing words in reverse video (the line colour resumes after).
fn highlight_words(old: &str, new: &str) -> (String, String) {
    let words = TextDiff::from_unicode_words(old, new);
    let (mut a, mut b) = (String::new(), String::new());
    for change in words.iter_all_changes() {
        let v = change.value();
        match change.tag() {
            ChangeTag::Equal => {
                a.push_str(v);
                b.push_str(v);
            }
            ChangeTag::Delete => a.push_str(&format!("\x1b[7m{v}\x1b[27m")),
            ChangeTag::Insert => b.push_str(&format!("\x1b[7m{v}\x1b[27m")),
        }
    }
    (a, b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unified_diff_names_both_sides_and_the_changed_line() {
        let d = diff_text("a\nb\nc\n", "a\nB\nc\n");
        assert!(d.starts_with("--- accepted\n+++ new\n"), "{d}");
        assert!(d.contains("-b\n+B\n"), "{d}");
        assert!(d.contains(" a\n"), "{d}");
        assert_eq!(diff_text("same\n", "same\n"), "");
    }

    #[test]
    fn colour_highlights_only_the_changed_word() {
        let d = render_diff("the cat sat\n", "the dog sat\n", true);
        assert!(
            d.contains("\x1b[31m-the \x1b[7mcat\x1b[27m sat\x1b[0m"),
            "{d:?}"
        );
        assert!(
            d.contains("\x1b[32m+the \x1b[7mdog\x1b[27m sat\x1b[0m"),
            "{d:?}"
        );
        let plain = render_diff("the cat sat\n", "the dog sat\n", false);
        assert!(!plain.contains('\x1b'));
        assert!(plain.contains("-the cat sat\n+the dog sat\n"));
    }

    #[test]
    fn a_pure_insertion_is_green_and_context_is_dim() {
        let d = render_diff("a\nb\n", "a\nx\nb\n", true);
        assert!(d.contains("\x1b[32m+x\x1b[0m"), "{d:?}");
        assert!(d.contains("\x1b[2m a\x1b[0m"), "{d:?}");
        assert!(d.contains("@@ -1,2 +1,3 @@"), "{d:?}");
    }
}
