//! How a replayed reply is compared with its accepted snapshot.
use serde_json::Value;

use super::file::SnapshotBody;

use super::divergence::*;
use crate::suite::Comparator;

/// The outcome of comparing a new reply with its accepted snapshot.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    pub pass: bool,
    /// One line for reports: why it passed or failed.
    pub detail: String,
    /// Where the token sequences first part, when they do (also on a pass, e.g. a similarity
    /// comparator that tolerated the change).
    pub divergence: Option<TokenDivergence>,
}

impl Comparator {
    /// The comparator as reports print it: `exact`, `similarity ≥ 0.9`, …
    pub fn describe(&self) -> String {
        match self {
            Comparator::Exact => "exact".into(),
            Comparator::ExactTokens => "exact-tokens".into(),
            Comparator::PrefixTokens(n) => format!("prefix-tokens {n}"),
            Comparator::NormalizedWhitespace => "normalized-whitespace".into(),
            Comparator::Similarity(x) => format!("similarity ≥ {x}"),
            Comparator::Contains(s) => format!("contains {}", Value::String(s.clone())),
            Comparator::Regex(r) => format!("regex /{r}/"),
            Comparator::JsonSchema(_) => "json-schema".into(),
        }
    }

    /// Whether the comparator reads token ids (which some servers report only with logprobs).
    pub fn reads_ids(&self) -> bool {
        matches!(self, Comparator::ExactTokens | Comparator::PrefixTokens(_))
    }

    /// Check the comparator's own arguments (a regex that compiles, a similarity in 0..=1, a
    /// schema this subset understands), so a bad one is bad input naming the prompt before
    /// anything runs.
    pub fn validate(&self, prompt_id: &str) -> crate::error::Result<()> {
        let bad = |msg: String| {
            crate::error::Error::input(format!("prompt {prompt_id:?}: {msg}"))
                .hint("fix the prompt's `compare` (or the suite's [replay] comparator)")
        };
        match self {
            Comparator::Regex(r) => regex::Regex::new(r)
                .map(|_| ())
                .map_err(|e| bad(format!("invalid regex {r:?}: {e}"))),
            Comparator::Similarity(x) if !(0.0..=1.0).contains(x) => {
                Err(bad(format!("similarity {x} is outside 0..1")))
            }
            Comparator::JsonSchema(s) => {
                super::schema::check_schema(s).map_err(|e| bad(format!("json-schema: {e}")))
            }
            _ => Ok(()),
        }
    }

    /// Compare a new reply with the accepted one (numeric-drift threshold
    /// [`NUMERIC_DRIFT_MARGIN`]).
    pub fn compare(&self, accepted: &SnapshotBody, new: &SnapshotBody) -> Comparison {
        self.compare_with_margin(accepted, new, NUMERIC_DRIFT_MARGIN)
    }

    /// [`Comparator::compare`] with an explicit numeric-drift threshold in nats.
    pub fn compare_with_margin(
        &self,
        accepted: &SnapshotBody,
        new: &SnapshotBody,
        drift_margin: f32,
    ) -> Comparison {
        let (pass, detail) = match self {
            Comparator::Exact => exact(accepted, new),
            Comparator::ExactTokens => exact_tokens(accepted, new),
            Comparator::PrefixTokens(n) => prefix_tokens(*n, accepted, new),
            Comparator::NormalizedWhitespace => normalized_whitespace(accepted, new),
            Comparator::Similarity(x) => similarity(*x, accepted, new),
            Comparator::Contains(s) => contains(s, new),
            Comparator::Regex(r) => regex_match(r, new),
            Comparator::JsonSchema(s) => json_schema(s, new),
        };
        let relative = !matches!(
            self,
            Comparator::Contains(_) | Comparator::Regex(_) | Comparator::JsonSchema(_)
        );
        let divergence = if relative {
            divergence(accepted, new, drift_margin)
        } else {
            None
        };
        Comparison {
            pass,
            detail,
            divergence,
        }
    }
}

fn show(s: &str) -> String {
    let v = Value::String(s.to_string()).to_string();
    if v.chars().count() > 60 {
        format!("{}…\"", v.chars().take(57).collect::<String>())
    } else {
        v
    }
}

/// Where two texts first differ, as "line L col C: "…" vs "…"".
fn first_text_difference(a: &str, b: &str) -> String {
    let at = a
        .char_indices()
        .zip(b.chars())
        .find(|((_, ca), cb)| ca != cb)
        .map(|((i, _), _)| i)
        .unwrap_or_else(|| a.len().min(b.len()));
    let at = (0..=at)
        .rev()
        .find(|i| a.is_char_boundary(*i) && b.is_char_boundary(*i))
        .unwrap_or(0);
    let line = a[..at].matches('\n').count() + 1;
    let col = a[..at]
        .rfind('\n')
        .map(|p| a[p + 1..at].chars().count())
        .unwrap_or(a[..at].chars().count())
        + 1;
    let snip = |s: &str| show(&s[at..].chars().take(24).collect::<String>());
    format!(
        "text differs at line {line} col {col}: accepted {} vs new {}",
        snip(a),
        snip(b)
    )
}

fn opt(s: &Option<String>) -> String {
    s.clone().unwrap_or_else(|| "none".into())
}

fn exact(a: &SnapshotBody, b: &SnapshotBody) -> (bool, String) {
    if a.text != b.text {
        return (false, first_text_difference(&a.text, &b.text));
    }
    if a.finish_reason != b.finish_reason {
        return (
            false,
            format!(
                "same text, but finish_reason {} → {}",
                opt(&a.finish_reason),
                opt(&b.finish_reason)
            ),
        );
    }
    if a.reasoning != b.reasoning {
        return (
            false,
            format!(
                "same text, but reasoning differs ({})",
                first_text_difference(&a.reasoning, &b.reasoning)
            ),
        );
    }
    if a.tool_calls != b.tool_calls {
        return (false, "same text, but the tool calls differ".into());
    }
    if let (Some(x), Some(y)) = (&a.token_ids, &b.token_ids) {
        if x != y {
            let i = x
                .iter()
                .zip(y)
                .position(|(p, q)| p != q)
                .unwrap_or(x.len().min(y.len()));
            return (
                false,
                format!("same text, but token ids differ from token {i} (a tokenization change)"),
            );
        }
        return (true, "identical text, finish reason and token ids".into());
    }
    (true, "identical text and finish reason".into())
}

fn exact_tokens(a: &SnapshotBody, b: &SnapshotBody) -> (bool, String) {
    match (&a.token_ids, &b.token_ids) {
        (Some(x), Some(y)) if x == y => (true, format!("identical {} token ids", x.len())),
        (Some(x), Some(y)) => {
            let i = x
                .iter()
                .zip(y)
                .position(|(p, q)| p != q)
                .unwrap_or(x.len().min(y.len()));
            (
                false,
                format!(
                    "token ids differ from token {i} ({} vs {} tokens)",
                    x.len(),
                    y.len()
                ),
            )
        }
        _ => {
            let same = a.text == b.text;
            let why = if same {
                "identical text".to_string()
            } else {
                first_text_difference(&a.text, &b.text)
            };
            (
                same,
                format!("{why} (no token ids on both sides: compared the text)"),
            )
        }
    }
}

fn words(s: &str) -> Vec<&str> {
    s.split_whitespace().collect()
}

fn prefix_tokens(n: usize, a: &SnapshotBody, b: &SnapshotBody) -> (bool, String) {
    fn check<T: PartialEq>(n: usize, x: &[T], y: &[T], unit: &str) -> (bool, String) {
        let (px, py) = (&x[..n.min(x.len())], &y[..n.min(y.len())]);
        if px == py {
            return (true, format!("the first {} {unit} agree", px.len()));
        }
        let i = px
            .iter()
            .zip(py)
            .position(|(p, q)| p != q)
            .unwrap_or(px.len().min(py.len()));
        (false, format!("{unit} differ at {i} within the first {n}"))
    }
    match (&a.token_ids, &b.token_ids) {
        (Some(x), Some(y)) => check(n, x, y, "tokens"),
        _ => {
            let (pass, d) = check(n, &words(&a.text), &words(&b.text), "words");
            (
                pass,
                format!("{d} (no token ids on both sides: compared whitespace-separated words)"),
            )
        }
    }
}

fn normalized_whitespace(a: &SnapshotBody, b: &SnapshotBody) -> (bool, String) {
    let (x, y) = (words(&a.text).join(" "), words(&b.text).join(" "));
    if x == y {
        (true, "same text up to whitespace".into())
    } else {
        (
            false,
            format!(
                "after collapsing whitespace, {}",
                first_text_difference(&x, &y)
            ),
        )
    }
}

/// Levenshtein distance over two sequences (two rows, O(n·m) time, O(m) memory).
pub(crate) fn levenshtein<T: PartialEq>(a: &[T], b: &[T]) -> usize {
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, x) in a.iter().enumerate() {
        cur[0] = i + 1;
        for (j, y) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(x != y);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

/// 1 − distance / longer length (1.0 for two empty sequences).
fn edit_ratio<T: PartialEq>(a: &[T], b: &[T]) -> (f64, usize, usize) {
    let longest = a.len().max(b.len());
    if longest == 0 {
        return (1.0, 0, 0);
    }
    let d = levenshtein(a, b);
    (1.0 - d as f64 / longest as f64, d, longest)
}

fn similarity(min: f64, a: &SnapshotBody, b: &SnapshotBody) -> (bool, String) {
    let (ratio, d, longest, unit) = match (&a.token_ids, &b.token_ids) {
        (Some(x), Some(y)) => {
            let (r, d, l) = edit_ratio(x, y);
            (r, d, l, "tokens")
        }
        _ => {
            let (r, d, l) = edit_ratio(&words(&a.text), &words(&b.text));
            (r, d, l, "words")
        }
    };
    let pass = ratio >= min;
    let cmp = if pass { "≥" } else { "<" };
    (
        pass,
        format!("similarity {ratio:.3} {cmp} {min} (edit distance {d} of {longest} {unit})"),
    )
}

fn contains(needle: &str, b: &SnapshotBody) -> (bool, String) {
    if b.text.contains(needle) {
        (true, format!("the reply contains {}", show(needle)))
    } else {
        (
            false,
            format!("the reply does not contain {}", show(needle)),
        )
    }
}

fn regex_match(pattern: &str, b: &SnapshotBody) -> (bool, String) {
    match regex::Regex::new(pattern) {
        Ok(re) if re.is_match(&b.text) => (true, format!("the reply matches /{pattern}/")),
        Ok(_) => (false, format!("the reply does not match /{pattern}/")),
        Err(e) => (false, format!("invalid regex /{pattern}/: {e}")),
    }
}

fn json_schema(schema: &Value, b: &SnapshotBody) -> (bool, String) {
    let value: Value = match serde_json::from_str(b.text.trim()) {
        Ok(v) => v,
        Err(e) => return (false, format!("the reply is not JSON: {e}")),
    };
    let errors = super::schema::validate(schema, &value);
    if errors.is_empty() {
        return (
            true,
            "the reply is JSON that validates against the schema".into(),
        );
    }
    let shown: Vec<&str> = errors.iter().take(3).map(String::as_str).collect();
    let more = if errors.len() > 3 {
        format!(" (+{} more)", errors.len() - 3)
    } else {
        String::new()
    };
    (
        false,
        format!("schema violations: {}{more}", shown.join("; ")),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::file::SnapshotLogprob;
    use serde_json::json;

    fn body(text: &str, ids: Option<Vec<u32>>) -> SnapshotBody {
        SnapshotBody {
            text: text.into(),
            finish_reason: Some("stop".into()),
            token_ids: ids,
            ..SnapshotBody::default()
        }
    }

    fn lp(token: &str, logprob: f32, top: &[(&str, f32)]) -> SnapshotLogprob {
        SnapshotLogprob {
            token: token.into(),
            logprob,
            top: top.iter().map(|(t, l)| (t.to_string(), *l)).collect(),
        }
    }

    #[test]
    fn serde_shape_is_kept() {
        let c: Comparator = serde_json::from_value(json!({"similarity": 0.9})).unwrap();
        assert_eq!(c, Comparator::Similarity(0.9));
        let c: Comparator = serde_json::from_value(json!("exact-tokens")).unwrap();
        assert_eq!(c, Comparator::ExactTokens);
        assert_eq!(
            serde_json::to_value(Comparator::PrefixTokens(8)).unwrap(),
            json!({"prefix-tokens": 8})
        );
    }

    #[test]
    fn exact() {
        let a = body("Paris.", Some(vec![1, 2]));
        assert!(Comparator::Exact.compare(&a, &a.clone()).pass);
        let c = Comparator::Exact.compare(&a, &body("Paris!", Some(vec![1, 3])));
        assert!(!c.pass && c.detail.contains("line 1 col 6"), "{}", c.detail);
        let mut stopped = a.clone();
        stopped.finish_reason = Some("length".into());
        let c = Comparator::Exact.compare(&a, &stopped);
        assert!(
            !c.pass && c.detail.contains("stop → length"),
            "{}",
            c.detail
        );
        let c = Comparator::Exact.compare(&a, &body("Paris.", Some(vec![1, 4, 2])));
        assert!(
            !c.pass && c.detail.contains("token ids differ from token 1"),
            "{}",
            c.detail
        );
        assert!(
            Comparator::Exact.compare(&a, &body("Paris.", None)).pass,
            "ids only compared when both have them"
        );
    }

    #[test]
    fn exact_tokens() {
        let a = body("Paris.", Some(vec![1, 2]));
        assert!(
            Comparator::ExactTokens
                .compare(&a, &body("different text", Some(vec![1, 2])))
                .pass
        );
        assert!(
            !Comparator::ExactTokens
                .compare(&a, &body("Paris.", Some(vec![1])))
                .pass
        );
        let c = Comparator::ExactTokens.compare(&body("x", None), &body("x", Some(vec![1])));
        assert!(
            c.pass && c.detail.contains("compared the text"),
            "{}",
            c.detail
        );
        assert!(
            !Comparator::ExactTokens
                .compare(&body("x", None), &body("y", None))
                .pass
        );
    }

    #[test]
    fn prefix_tokens() {
        let a = body("", Some(vec![1, 2, 3, 4]));
        assert!(
            Comparator::PrefixTokens(3)
                .compare(&a, &body("", Some(vec![1, 2, 3, 9])))
                .pass
        );
        let c = Comparator::PrefixTokens(3).compare(&a, &body("", Some(vec![1, 9, 3])));
        assert!(
            !c.pass && c.detail.contains("tokens differ at 1"),
            "{}",
            c.detail
        );
        assert!(
            !Comparator::PrefixTokens(3)
                .compare(&a, &body("", Some(vec![1, 2])))
                .pass,
            "a shorter reply is not a prefix match"
        );
        let c = Comparator::PrefixTokens(2)
            .compare(&body("the cat sat", None), &body("the  cat ran", None));
        assert!(
            c.pass && c.detail.contains("whitespace-separated words"),
            "{}",
            c.detail
        );
        assert!(
            !Comparator::PrefixTokens(3)
                .compare(&body("the cat sat", None), &body("the cat ran", None))
                .pass
        );
    }

    #[test]
    fn normalized_whitespace() {
        let a = body("a  b\n c ", None);
        assert!(
            Comparator::NormalizedWhitespace
                .compare(&a, &body(" a b c", None))
                .pass
        );
        assert!(
            !Comparator::NormalizedWhitespace
                .compare(&a, &body("a b d", None))
                .pass
        );
    }

    #[test]
    fn similarity() {
        assert_eq!(levenshtein(&[1, 2, 3], &[1, 3]), 1);
        assert_eq!(levenshtein::<u8>(&[], &[1, 2]), 2);
        assert_eq!(
            levenshtein(
                &["k", "i", "t", "t", "e", "n"],
                &["s", "i", "t", "t", "i", "n", "g"]
            ),
            3
        );
        let a = body("", Some((0..10).collect()));
        let mut ids: Vec<u32> = (0..10).collect();
        ids[4] = 99;
        let c = Comparator::Similarity(0.9).compare(&a, &body("", Some(ids)));
        assert!(c.pass && c.detail.contains("0.900"), "{}", c.detail);
        let c = Comparator::Similarity(0.95).compare(&a, &body("", Some(vec![0, 1])));
        assert!(
            !c.pass && c.detail.contains("edit distance 8 of 10 tokens"),
            "{}",
            c.detail
        );
        let c = Comparator::Similarity(0.5).compare(
            &body("one two three four", None),
            &body("one two five four", None),
        );
        assert!(c.pass && c.detail.contains("words"), "{}", c.detail);
        assert!(
            Comparator::Similarity(1.0)
                .compare(&body("", None), &body("", None))
                .pass
        );
    }

    #[test]
    fn contains_and_regex() {
        let a = body("ignored", None);
        assert!(
            Comparator::Contains("Paris".into())
                .compare(&a, &body("It is Paris.", None))
                .pass
        );
        assert!(
            !Comparator::Contains("Paris".into())
                .compare(&a, &body("It is Lyon.", None))
                .pass
        );
        assert!(
            Comparator::Regex(r"^\d+$".into())
                .compare(&a, &body("42", None))
                .pass
        );
        assert!(
            !Comparator::Regex(r"^\d+$".into())
                .compare(&a, &body("42!", None))
                .pass
        );
        let bad = Comparator::Regex("(".into());
        let c = bad.compare(&a, &body("x", None));
        assert!(!c.pass && c.detail.contains("invalid regex"));
        let e = bad.validate("capital").unwrap_err();
        assert!(
            e.to_string().contains("prompt \"capital\": invalid regex"),
            "{e}"
        );
        assert_eq!(e.exit_code(), 2);
        assert!(Comparator::Similarity(1.5).validate("p").is_err());
        assert!(Comparator::JsonSchema(json!({"type": "nope"}))
            .validate("p")
            .is_err());
        assert!(Comparator::Exact.validate("p").is_ok());
    }

    #[test]
    fn json_schema() {
        let schema = json!({"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}}, "required": ["n"], "additionalProperties": false});
        let c = Comparator::JsonSchema(schema.clone());
        let a = body("", None);
        assert!(c.compare(&a, &body(" {\"n\": 3}\n", None)).pass);
        let r = c.compare(&a, &body("{\"n\": 0, \"x\": 1}", None));
        assert!(
            !r.pass
                && r.detail.contains("below the minimum")
                && r.detail.contains("`x` is not allowed"),
            "{}",
            r.detail
        );
        let r = c.compare(&a, &body("n = 3", None));
        assert!(!r.pass && r.detail.contains("not JSON"), "{}", r.detail);
    }

    #[test]
    fn describe() {
        assert_eq!(Comparator::Exact.describe(), "exact");
        assert_eq!(Comparator::Similarity(0.9).describe(), "similarity ≥ 0.9");
        assert_eq!(Comparator::PrefixTokens(8).describe(), "prefix-tokens 8");
        assert_eq!(
            Comparator::Contains("Paris".into()).describe(),
            "contains \"Paris\""
        );
        assert_eq!(Comparator::Regex("^a$".into()).describe(), "regex /^a$/");
    }

    #[test]
    fn a_near_tie_is_numeric_drift() {
        let mut a = body("The cat", Some(vec![1, 2]));
        a.logprobs = Some(vec![
            lp("The", -0.01, &[]),
            lp(" cat", -0.70, &[(" dog", -0.74)]),
        ]);
        let mut b = body("The dog", Some(vec![1, 3]));
        b.logprobs = Some(vec![
            lp("The", -0.01, &[]),
            lp(" dog", -0.69, &[(" cat", -0.72)]),
        ]);
        let c = Comparator::Exact.compare(&a, &b);
        assert!(!c.pass);
        let d = c.divergence.unwrap();
        assert_eq!(d.index, 1);
        assert!(d.by_ids);
        assert_eq!((d.accepted_id, d.new_id), (Some(2), Some(3)));
        assert_eq!(d.accepted_token.as_deref(), Some(" cat"));
        assert_eq!(d.new_token.as_deref(), Some(" dog"));
        assert_eq!(d.accepted_logprob_of_new, Some(-0.74));
        assert_eq!(d.new_logprob_of_accepted, Some(-0.72));
        assert!((d.accepted_margin.unwrap().nats - 0.04).abs() < 1e-4);
        assert!((d.new_margin.unwrap().nats - 0.03).abs() < 1e-4);
        assert_eq!(d.class, DivergenceClass::NumericDrift);
        assert!(d.describe().contains("numeric-drift"), "{}", d.describe());
        let strict = Comparator::Exact.compare_with_margin(&a, &b, 0.01);
        assert_eq!(
            strict.divergence.unwrap().class,
            DivergenceClass::BehaviourChange
        );
    }

    #[test]
    fn a_clear_preference_is_a_behaviour_change() {
        let mut a = body("Yes", None);
        a.logprobs = Some(vec![lp("Yes", -0.05, &[("No", -3.0)])]);
        let mut b = body("No", None);
        b.logprobs = Some(vec![lp("No", -0.02, &[("Maybe", -5.0)])]);
        let d = Comparator::Similarity(0.0)
            .compare(&a, &b)
            .divergence
            .unwrap();
        assert!(!d.by_ids, "no ids: decoded logprob tokens are compared");
        assert_eq!(d.index, 0);
        assert!((d.accepted_margin.unwrap().nats - 2.95).abs() < 1e-4);
        let new_margin = d.new_margin.unwrap();
        assert!(
            new_margin.at_least,
            "\"Yes\" is not in the new run's top list: a lower bound"
        );
        assert_eq!(d.class, DivergenceClass::BehaviourChange);
    }

    #[test]
    fn no_divergence_when_tokens_agree_or_nothing_to_compare() {
        let a = body("x", Some(vec![1]));
        assert!(Comparator::Exact
            .compare(&a, &a.clone())
            .divergence
            .is_none());
        assert!(Comparator::Exact
            .compare(&body("x", None), &body("y", None))
            .divergence
            .is_none());
        let d = Comparator::Exact
            .compare(&a, &body("x y", Some(vec![1, 2])))
            .divergence
            .unwrap();
        assert_eq!((d.index, d.accepted_token.clone()), (1, None));
        assert_eq!(d.class, DivergenceClass::Unknown);
        assert!(Comparator::Contains("x".into())
            .compare(&a, &body("x y", Some(vec![1, 2])))
            .divergence
            .is_none());
    }
}
