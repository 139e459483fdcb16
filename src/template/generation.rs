//! `{% generation %}…{% endgeneration %}` (transformers' `AssistantTracker` extension).
//!
//! The tags are rewritten into a `{% filter %}` block, which has exactly the whitespace
//! semantics of any other block tag (`-` markers, `trim_blocks`, `lstrip_blocks`). The filter
//! returns its body unchanged and records a span the way transformers does:
//! `start = len(output rendered so far)` (Python code points, top-level output only, as
//! jinja2's `generate()` yields it) and `end = start + len(body)`. That reproduces
//! transformers' offsets even in its corner cases (generation blocks inside macros or captured
//! blocks), and the rendered text is never touched.
use regex::Regex;
use std::sync::OnceLock;

/// Name of the internal filter the tags are rewritten to.
pub const GENERATION_FILTER: &str = "__chatgate_generation";

fn open_re() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| Regex::new(r"\{%([-+]?)\s*generation\s*([-+]?)%\}").expect("static regex"))
}

fn close_re() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| Regex::new(r"\{%([-+]?)\s*endgeneration\s*([-+]?)%\}").expect("static regex"))
}

/// Whether the source has a `{% generation %}` tag (with any `-`/`+` whitespace markers).
pub fn has_generation_tags(source: &str) -> bool {
    open_re().is_match(source)
}

/// Rewrites the generation tags into filter blocks.
pub fn rewrite(source: &str) -> String {
    let opened = open_re().replace_all(source, |c: &regex::Captures<'_>| {
        format!("{{%{} filter {} {}%}}", &c[1], GENERATION_FILTER, &c[2])
    });
    close_re()
        .replace_all(&opened, |c: &regex::Captures<'_>| {
            format!("{{%{} endfilter {}%}}", &c[1], &c[2])
        })
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewrites_all_dash_variants() {
        assert_eq!(
            rewrite("{% generation %}a{%- endgeneration -%}{%-generation%}{%+ endgeneration %}"),
            "{% filter __chatgate_generation %}a{%- endfilter -%}{%- filter __chatgate_generation %}{%+ endfilter %}"
        );
        assert!(has_generation_tags("x{%- generation -%}y"));
        assert!(!has_generation_tags("{% generations %}"));
    }
}
