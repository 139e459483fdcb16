//! Escaping user text for the markups chatgate writes — HTML (reports, the history page), and
//! GitHub-flavoured Markdown (the step summary, PR comments) — and markupsafe's escape, which
//! chat templates' `escape` filter must reproduce byte for byte. One place, so that a report, a
//! trend page and a template never escape the same text three ways.

/// Escape text for HTML element content and attribute values.
pub fn html(s: &str) -> String {
    escape_html(s, "&quot;")
}

/// markupsafe's `escape` (what Jinja2's `escape`/`e` filter gives): as [`html`], but `"` is
/// `&#34;`.
pub fn markupsafe(s: &str) -> String {
    escape_html(s, "&#34;")
}

fn escape_html(s: &str, quote: &str) -> String {
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str(quote),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Escape user text for inline Markdown (paragraphs, list items and table cells alike): HTML is
/// neutralised with entities, Markdown punctuation with backslashes, pipes so a table keeps
/// its columns, and newlines become `<br>` so a cell stays one row.
pub fn md_text(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\n' => out.push_str("<br>"),
            '\r' => {}
            '\\' | '`' | '*' | '_' | '[' | ']' | '|' | '~' | '#' | '!' | '$' => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out
}

/// A Markdown code span holding `s` literally: the fence is one backtick longer than the
/// longest run inside. In a table cell pipes are still escaped (GitHub splits cells before
/// parsing spans); newlines become spaces, as a code span would show them anyway.
pub fn md_code(s: &str, in_table: bool) -> String {
    let mut body: String = s.replace(['\r', '\n'], " ");
    if in_table {
        body = body.replace('|', "\\|");
    }
    if body.trim().is_empty() {
        return "*(empty)*".into();
    }
    let fence = "`".repeat(longest_run(&body, '`') + 1);
    let pad = if body.starts_with('`') || body.ends_with('`') {
        " "
    } else {
        ""
    };
    format!("{fence}{pad}{body}{pad}{fence}")
}

/// A Markdown code fence longer than any backtick run in `text`, so the text cannot close it.
pub fn md_fence_for(text: &str) -> String {
    "`".repeat((longest_run(text, '`') + 1).max(3))
}

fn longest_run(s: &str, ch: char) -> usize {
    let (mut best, mut cur) = (0, 0);
    for c in s.chars() {
        if c == ch {
            cur += 1;
            best = best.max(cur);
        } else {
            cur = 0;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_and_markupsafe_differ_only_in_the_quote() {
        assert_eq!(
            html(r#"<a href="x">&'"#),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
        assert_eq!(markupsafe(r#"<a href="x">"#), "&lt;a href=&#34;x&#34;&gt;");
    }

    #[test]
    fn code_span_outgrows_backticks_inside() {
        assert_eq!(md_code("a`b", false), "``a`b``");
        assert_eq!(md_code("`x`", false), "`` `x` ``");
        assert_eq!(md_code("a|b", true), "`a\\|b`");
        assert_eq!(md_code("a|b", false), "`a|b`");
        assert_eq!(md_fence_for("x ```` y"), "`````");
    }

    #[test]
    fn text_escapes_html_pipes_and_emphasis() {
        assert_eq!(
            md_text("<b>*x*</b> | y_z\nnext"),
            "&lt;b&gt;\\*x\\*&lt;/b&gt; \\| y\\_z<br>next"
        );
    }
}
