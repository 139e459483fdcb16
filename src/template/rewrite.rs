//! Source rewrite that routes `+`, `*`, `%`, `~` and `for … in` through the Python-semantics
//! functions of `pyops.rs`.
//!
//! The template is parsed with minijinja's own parser; every `L + R` becomes
//! `__py_add(L, R)` (likewise `%` → `__py_mod`, `~` → `__py_concat`) and every loop iterable
//! `X` becomes `__py_iter(X)`. Operand text is cut out of the source by span, so everything else
//! (whitespace control, raw blocks, comments, line numbers) is untouched. minijinja's node
//! spans do not always start at the node's first token, so an operand's extent is the union of
//! the trustworthy spans in its subtree, widened until its brackets balance.
//!
//! Why a rewrite and not the engine's extension points: minijinja lets a template call
//! functions, filters, tests and unknown methods of ours (`set_unknown_method_callback`; see
//! `pymethods.rs`), and lets our own object types define their behaviour, but its binary
//! operators on built-in values (lists, strings, maps, numbers) are fixed in the VM with Rust
//! semantics and no hook. The constructs this module must handle, each a test below named
//! after it: `+` on lists and strings, chains of it, parenthesised operands, `~`, `%`
//! formatting, `*` repetition, `for … in` iteration, operators inside tests, calls, slices and
//! conditional expressions; and leaving comments and text untouched.
use minijinja::machinery::ast::{self, BinOpKind, CallArg, Expr, Stmt, UnaryOpKind};
use minijinja::machinery::{parse, tokenize, Token};
use minijinja::syntax::SyntaxConfig;

use super::pyops::{ADD_FN, CONCAT_FN, ITER_FN, MOD_FN, MUL_FN};

#[derive(Debug, Clone)]
struct Edit {
    start: usize,
    end: usize,
    text: String,
}

#[derive(Clone, Copy, PartialEq)]
enum Bracket {
    Open,
    Close,
}

struct Rewriter<'s> {
    src: &'s str,
    /// Bracket tokens: (start, end, kind, index of the matching token).
    brackets: Vec<(usize, usize, Bracket, usize)>,
}

/// jinja2 decodes string literals with Python's `unicode-escape`; minijinja lacks `\a`, `\v`,
/// `\UXXXXXXXX`, `\N{NAME}` and the backslash-newline line continuation (Python drops both
/// characters: Mistral Small 3.1's official template writes its default system prompt that
/// way). Rewrites those escapes inside string literals to forms minijinja reads.
pub fn normalize_string_escapes(source: &str, syntax: &SyntaxConfig) -> String {
    let mut edits: Vec<(usize, usize, String)> = Vec::new();
    for tok in tokenize(source, false, syntax.clone()) {
        let Ok((tok, span)) = tok else {
            return source.to_string();
        };
        if !matches!(tok, Token::Str(_) | Token::String(_)) {
            continue;
        }
        let (start, end) = (span.start_offset as usize, span.end_offset as usize);
        let Some(raw) = source.get(start..end) else {
            continue;
        };
        if !["\\a", "\\v", "\\U", "\\N{", "\\\n", "\\\r\n"]
            .iter()
            .any(|e| raw.contains(e))
        {
            continue;
        }
        let mut out = String::with_capacity(raw.len() + 8);
        let mut chars = raw.chars();
        while let Some(c) = chars.next() {
            if c != '\\' {
                out.push(c);
                continue;
            }
            match chars.next() {
                // A line continuation: the backslash and the newline (jinja2 turns CRLF into
                // LF first) are both dropped.
                Some('\n') => {}
                Some('\r') if chars.clone().next() == Some('\n') => {
                    chars.next();
                }
                Some('N') if chars.clone().next() == Some('{') => {
                    let name: String = chars.clone().skip(1).take_while(|&c| c != '}').collect();
                    match unicode_names2::character(&name) {
                        Some(ch) if chars.clone().nth(name.chars().count() + 1) == Some('}') => {
                            push_char(&mut out, ch);
                            for _ in 0..name.chars().count() + 2 {
                                chars.next();
                            }
                        }
                        // Python refuses an unknown name; leave it for minijinja to refuse.
                        _ => out.push_str("\\N"),
                    }
                }
                Some('a') => out.push_str("\\x07"),
                Some('v') => out.push_str("\\x0b"),
                Some('U') => {
                    let hex: String = chars.clone().take(8).collect();
                    match u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32) {
                        Some(ch) if hex.len() == 8 => {
                            push_char(&mut out, ch);
                            for _ in 0..8 {
                                chars.next();
                            }
                        }
                        _ => out.push_str("\\U"),
                    }
                }
                Some(other) => {
                    out.push('\\');
                    out.push(other);
                }
                None => out.push('\\'),
            }
        }
        edits.push((start, end, out));
    }
    if edits.is_empty() {
        return source.to_string();
    }
    let mut out = String::with_capacity(source.len() + 16);
    let mut pos = 0;
    for (start, end, text) in edits {
        out.push_str(&source[pos..start]);
        out.push_str(&text);
        pos = end;
    }
    out.push_str(&source[pos..]);
    out
}

/// A decoded character inside a string literal: an ASCII one as a `\xNN` escape (it may be a
/// quote or a backslash), any other as itself.
fn push_char(out: &mut String, ch: char) {
    if ch.is_ascii() {
        out.push_str(&format!("\\x{:02x}", ch as u32));
    } else {
        out.push(ch);
    }
}

/// jinja2 3.1's built-in filters plus transformers' `tojson` and our generation filter.
const JINJA2_FILTERS: &[&str] = &[
    "abs",
    "attr",
    "batch",
    "capitalize",
    "center",
    "count",
    "d",
    "default",
    "dictsort",
    "e",
    "escape",
    "filesizeformat",
    "first",
    "float",
    "forceescape",
    "format",
    "groupby",
    "indent",
    "int",
    "items",
    "join",
    "last",
    "length",
    "list",
    "lower",
    "map",
    "max",
    "min",
    "pprint",
    "random",
    "reject",
    "rejectattr",
    "replace",
    "reverse",
    "round",
    "safe",
    "select",
    "selectattr",
    "slice",
    "sort",
    "string",
    "striptags",
    "sum",
    "title",
    "tojson",
    "trim",
    "truncate",
    "unique",
    "upper",
    "urlencode",
    "urlize",
    "wordcount",
    "wordwrap",
    "xmlattr",
    super::generation::GENERATION_FILTER,
];

/// jinja2 3.1's built-in tests.
const JINJA2_TESTS: &[&str] = &[
    "!=",
    "<",
    "<=",
    "==",
    ">",
    ">=",
    "boolean",
    "callable",
    "defined",
    "divisibleby",
    "eq",
    "equalto",
    "escaped",
    "even",
    "false",
    "filter",
    "float",
    "ge",
    "greaterthan",
    "gt",
    "in",
    "integer",
    "iterable",
    "le",
    "lessthan",
    "lower",
    "lt",
    "mapping",
    "ne",
    "none",
    "number",
    "odd",
    "sameas",
    "sequence",
    "string",
    "test",
    "true",
    "undefined",
    "upper",
];

/// jinja2 refuses, at compile time, a filter or test it does not know, unless the use sits
/// directly in an `{% if %}` block or a conditional expression (there it fails only when run).
pub fn check_filter_and_test_names(
    source: &str,
    name: &str,
    syntax: &SyntaxConfig,
) -> Result<(), String> {
    let tree = parse(source, name, syntax.clone()).map_err(|e| e.to_string())?;
    let mut problem = None;
    names_stmt(&tree, false, &mut problem);
    match problem {
        Some(p) => Err(p),
        None => Ok(()),
    }
}

fn unknown(kind: &str, name: &str, line: u16, problem: &mut Option<String>) {
    if problem.is_none() {
        *problem = Some(format!("no {kind} named '{name}' (line {line})"));
    }
}

fn names_expr(e: &Expr<'_>, soft: bool, problem: &mut Option<String>) {
    let soft = soft || matches!(e, Expr::IfExpr(_));
    match e {
        Expr::Filter(f) if !soft && !JINJA2_FILTERS.contains(&f.name) => {
            unknown("filter", f.name, f.span().start_line, problem)
        }
        Expr::Test(t) if !soft && !JINJA2_TESTS.contains(&t.name) => {
            unknown("test", t.name, t.span().start_line, problem)
        }
        _ => {}
    }
    let rw = Rewriter {
        src: "",
        brackets: Vec::new(),
    };
    rw.for_children(e, &mut |child| names_expr(child, soft, problem));
}

fn names_body(stmts: &[Stmt<'_>], soft: bool, problem: &mut Option<String>) {
    for s in stmts {
        names_stmt(s, soft, problem);
    }
}

fn names_args(args: &[CallArg<'_>], soft: bool, problem: &mut Option<String>) {
    for a in args {
        match a {
            CallArg::Pos(x)
            | CallArg::Kwarg(_, x)
            | CallArg::PosSplat(x)
            | CallArg::KwargSplat(x) => names_expr(x, soft, problem),
        }
    }
}

fn names_stmt(s: &Stmt<'_>, soft: bool, problem: &mut Option<String>) {
    match s {
        Stmt::Template(t) => names_body(&t.children, soft, problem),
        Stmt::EmitExpr(e) => names_expr(&e.expr, soft, problem),
        Stmt::EmitRaw(_) | Stmt::Continue(_) | Stmt::Break(_) => {}
        Stmt::ForLoop(f) => {
            names_expr(&f.iter, soft, problem);
            if let Some(x) = &f.filter_expr {
                names_expr(x, false, problem);
            }
            names_body(&f.body, false, problem);
            names_body(&f.else_body, false, problem);
        }
        Stmt::IfCond(c) => {
            names_expr(&c.expr, true, problem);
            names_body(&c.true_body, true, problem);
            names_body(&c.false_body, true, problem);
        }
        Stmt::WithBlock(w) => {
            for (_, v) in &w.assignments {
                names_expr(v, soft, problem);
            }
            names_body(&w.body, false, problem);
        }
        Stmt::Set(x) => names_expr(&x.expr, soft, problem),
        Stmt::SetBlock(b) => {
            if let Some(f) = &b.filter {
                names_expr(f, false, problem);
            }
            names_body(&b.body, false, problem);
        }
        Stmt::AutoEscape(a) => {
            names_expr(&a.enabled, soft, problem);
            names_body(&a.body, false, problem);
        }
        Stmt::FilterBlock(b) => {
            names_expr(&b.filter, false, problem);
            names_body(&b.body, false, problem);
        }
        Stmt::Block(b) => names_body(&b.body, false, problem),
        Stmt::Import(_) | Stmt::FromImport(_) | Stmt::Extends(_) | Stmt::Include(_) => {}
        Stmt::Macro(m) => {
            for d in &m.defaults {
                names_expr(d, false, problem);
            }
            names_body(&m.body, false, problem);
        }
        Stmt::CallBlock(c) => {
            names_expr(&c.call.expr, soft, problem);
            names_args(&c.call.args, soft, problem);
            names_body(&c.macro_decl.body, false, problem);
        }
        Stmt::Do(d) => {
            // transformers' environment does not load jinja2.ext.do
            if problem.is_none() {
                *problem = Some(format!(
                    "Encountered unknown tag 'do' (line {}).",
                    d.span().start_line
                ));
            }
        }
    }
}

/// Rewrites the operators of `source`. `Ok(None)` when nothing needed rewriting.
pub fn rewrite_operators(
    source: &str,
    name: &str,
    syntax: &SyntaxConfig,
) -> Result<Option<String>, minijinja::Error> {
    let tree = parse(source, name, syntax.clone())?;
    let mut brackets: Vec<(usize, usize, Bracket, usize)> = Vec::new();
    let mut stack: Vec<usize> = Vec::new();
    for tok in tokenize(source, false, syntax.clone()) {
        let (tok, span) = tok?;
        let kind = match tok {
            Token::ParenOpen | Token::BracketOpen | Token::BraceOpen => Bracket::Open,
            Token::ParenClose | Token::BracketClose | Token::BraceClose => Bracket::Close,
            _ => continue,
        };
        let idx = brackets.len();
        brackets.push((
            span.start_offset as usize,
            span.end_offset as usize,
            kind,
            usize::MAX,
        ));
        match kind {
            Bracket::Open => stack.push(idx),
            Bracket::Close => {
                if let Some(open) = stack.pop() {
                    brackets[open].3 = idx;
                    brackets[idx].3 = open;
                }
            }
        }
    }
    let rw = Rewriter {
        src: source,
        brackets,
    };
    let mut edits = Vec::new();
    rw.stmt(&tree, &mut edits);
    if edits.is_empty() {
        return Ok(None);
    }
    edits.sort_by_key(|e| e.start);
    let (start, end) = (0, source.len());
    Ok(rw.apply(start, end, &edits))
}

impl<'s> Rewriter<'s> {
    /// `src[start..end]` with the edits (which must lie inside) applied.
    fn apply(&self, start: usize, end: usize, edits: &[Edit]) -> Option<String> {
        let mut out = String::with_capacity(end.saturating_sub(start) + 32);
        let mut pos = start;
        for e in edits {
            if e.start < pos || e.end > end || e.start > e.end {
                return None;
            }
            out.push_str(self.src.get(pos..e.start)?);
            out.push_str(&e.text);
            pos = e.end;
        }
        out.push_str(self.src.get(pos..end)?);
        Some(out)
    }

    /// The source region of an expression: trusted span starts and all span ends in its
    /// subtree, widened to balance brackets.
    fn region(&self, e: &Expr<'_>) -> (usize, usize) {
        let (mut start, mut end) = (usize::MAX, 0usize);
        self.extent(e, &mut start, &mut end);
        if start >= end {
            let sp = e.span();
            return (sp.start_offset as usize, sp.end_offset as usize);
        }
        loop {
            let mut changed = false;
            for &(s, t, _, m) in &self.brackets {
                if s >= start && t <= end && m != usize::MAX {
                    let (ms, mt, _, _) = self.brackets[m];
                    if ms < start {
                        start = ms;
                        changed = true;
                    }
                    if mt > end {
                        end = mt;
                        changed = true;
                    }
                }
            }
            if !changed {
                break;
            }
        }
        (start, end)
    }

    fn starts_with_at(&self, offset: usize, prefix: &str) -> bool {
        self.src
            .get(offset..)
            .is_some_and(|s| s.starts_with(prefix))
    }

    fn extent(&self, e: &Expr<'_>, start: &mut usize, end: &mut usize) {
        let sp = e.span();
        let (s, t) = (sp.start_offset as usize, sp.end_offset as usize);
        let trusted = match e {
            // These spans start at the token *before* the expression.
            Expr::Compare(_) | Expr::IfExpr(_) => false,
            Expr::BinOp(b) => !matches!(
                b.op,
                BinOpKind::Eq
                    | BinOpKind::Ne
                    | BinOpKind::Lt
                    | BinOpKind::Lte
                    | BinOpKind::Gt
                    | BinOpKind::Gte
                    | BinOpKind::In
            ),
            Expr::UnaryOp(u) => match u.op {
                UnaryOpKind::Not => self.starts_with_at(s, "not"),
                UnaryOpKind::Neg => true,
            },
            Expr::Tuple(_) => self.starts_with_at(s, "("),
            _ => true,
        };
        if trusted {
            *start = (*start).min(s);
        }
        *end = (*end).max(t);
        self.for_children(e, &mut |child| self.extent(child, start, end));
    }

    fn for_children<'a>(&self, e: &'a Expr<'_>, f: &mut dyn FnMut(&'a Expr<'_>)) {
        let args = |args: &'a [CallArg<'_>], f: &mut dyn FnMut(&'a Expr<'_>)| {
            for a in args {
                match a {
                    CallArg::Pos(x)
                    | CallArg::Kwarg(_, x)
                    | CallArg::PosSplat(x)
                    | CallArg::KwargSplat(x) => f(x),
                }
            }
        };
        match e {
            Expr::Var(_) | Expr::Const(_) => {}
            Expr::Slice(s) => {
                f(&s.expr);
                for x in [&s.start, &s.stop, &s.step].into_iter().flatten() {
                    f(x);
                }
            }
            Expr::UnaryOp(u) => f(&u.expr),
            Expr::BinOp(b) => {
                f(&b.left);
                f(&b.right);
            }
            Expr::Compare(c) => {
                f(&c.expr);
                for op in &c.ops {
                    f(&op.expr);
                }
            }
            Expr::IfExpr(i) => {
                f(&i.test_expr);
                f(&i.true_expr);
                if let Some(x) = &i.false_expr {
                    f(x);
                }
            }
            Expr::Filter(x) => {
                if let Some(inner) = &x.expr {
                    f(inner);
                }
                args(&x.args, f);
            }
            Expr::Test(x) => {
                f(&x.expr);
                args(&x.args, f);
            }
            Expr::GetAttr(x) => f(&x.expr),
            Expr::GetItem(x) => {
                f(&x.expr);
                f(&x.subscript_expr);
            }
            Expr::Call(x) => {
                f(&x.expr);
                args(&x.args, f);
            }
            Expr::List(x) => {
                for i in &x.items {
                    f(i);
                }
            }
            Expr::Tuple(x) => {
                for i in &x.items {
                    f(i);
                }
            }
            Expr::Map(x) => {
                for (k, v) in x.keys.iter().zip(x.values.iter()) {
                    f(k);
                    f(v);
                }
            }
        }
    }

    /// Text of an expression with its own rewrites applied.
    fn rewritten_text(&self, e: &Expr<'_>) -> Option<String> {
        let (s, t) = self.region(e);
        let mut inner = Vec::new();
        self.expr(e, &mut inner);
        inner.sort_by_key(|e| e.start);
        self.apply(s, t, &inner)
    }

    fn expr(&self, e: &Expr<'_>, out: &mut Vec<Edit>) {
        if let Expr::BinOp(b) = e {
            let func = match b.op {
                BinOpKind::Add => Some(ADD_FN),
                BinOpKind::Rem => Some(MOD_FN),
                BinOpKind::Concat => Some(CONCAT_FN),
                BinOpKind::Mul => Some(MUL_FN),
                _ => None,
            };
            if let Some(func) = func {
                if let (Some(l), Some(r)) =
                    (self.rewritten_text(&b.left), self.rewritten_text(&b.right))
                {
                    let (start, end) = self.region(e);
                    out.push(Edit {
                        start,
                        end,
                        text: format!("{func}({l}, {r})"),
                    });
                    return;
                }
            }
        }
        self.for_children(e, &mut |child| self.expr(child, out));
    }

    fn call_args(&self, args: &[CallArg<'_>], out: &mut Vec<Edit>) {
        for a in args {
            match a {
                CallArg::Pos(x)
                | CallArg::Kwarg(_, x)
                | CallArg::PosSplat(x)
                | CallArg::KwargSplat(x) => self.expr(x, out),
            }
        }
    }

    fn body(&self, stmts: &[Stmt<'_>], out: &mut Vec<Edit>) {
        for s in stmts {
            self.stmt(s, out);
        }
    }

    fn stmt(&self, s: &Stmt<'_>, out: &mut Vec<Edit>) {
        match s {
            Stmt::Template(t) => self.body(&t.children, out),
            Stmt::EmitExpr(e) => self.expr(&e.expr, out),
            Stmt::EmitRaw(_) => {}
            Stmt::ForLoop(f) => {
                match self.rewritten_text(&f.iter) {
                    Some(text) => {
                        let (start, end) = self.region(&f.iter);
                        out.push(Edit {
                            start,
                            end,
                            text: format!("{ITER_FN}({text})"),
                        });
                    }
                    None => self.expr(&f.iter, out),
                }
                if let Some(filter) = &f.filter_expr {
                    self.expr(filter, out);
                }
                self.body(&f.body, out);
                self.body(&f.else_body, out);
            }
            Stmt::IfCond(c) => {
                self.expr(&c.expr, out);
                self.body(&c.true_body, out);
                self.body(&c.false_body, out);
            }
            Stmt::WithBlock(w) => {
                for (_, value) in &w.assignments {
                    self.expr(value, out);
                }
                self.body(&w.body, out);
            }
            Stmt::Set(set) => self.expr(&set.expr, out),
            Stmt::SetBlock(b) => {
                if let Some(filter) = &b.filter {
                    self.expr(filter, out);
                }
                self.body(&b.body, out);
            }
            Stmt::AutoEscape(a) => {
                self.expr(&a.enabled, out);
                self.body(&a.body, out);
            }
            Stmt::FilterBlock(b) => {
                self.expr(&b.filter, out);
                self.body(&b.body, out);
            }
            Stmt::Block(b) => self.body(&b.body, out),
            Stmt::Import(i) => self.expr(&i.expr, out),
            Stmt::FromImport(i) => self.expr(&i.expr, out),
            Stmt::Extends(x) => self.expr(&x.name, out),
            Stmt::Include(x) => self.expr(&x.name, out),
            Stmt::Macro(m) => self.macro_decl(m, out),
            Stmt::CallBlock(c) => {
                self.expr(&c.call.expr, out);
                self.call_args(&c.call.args, out);
                self.macro_decl(&c.macro_decl, out);
            }
            Stmt::Continue(_) | Stmt::Break(_) => {}
            Stmt::Do(d) => {
                self.expr(&d.call.expr, out);
                self.call_args(&d.call.args, out);
            }
        }
    }

    fn macro_decl(&self, m: &ast::Macro<'_>, out: &mut Vec<Edit>) {
        for d in &m.defaults {
            self.expr(d, out);
        }
        self.body(&m.body, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rw(src: &str) -> String {
        let syntax = SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .expect("syntax");
        rewrite_operators(src, "t", &syntax)
            .expect("parse")
            .unwrap_or_else(|| src.to_string())
    }

    /// What a template prints, rendered through the whole engine (rewrite + pyops).
    fn render(src: &str) -> String {
        let t = super::super::ChatTemplate::new(src).expect("compiles");
        t.render(&super::super::RenderRequest {
            messages: vec![serde_json::json!({"role": "user", "content": "hi"})],
            ..Default::default()
        })
        .expect("renders")
        .text
    }

    // Each construct the rewrite must handle, named: the source it produces, and the Python
    // result the whole engine then prints (minijinja's own operators give other results or
    // errors: it has no hook for binary operators on built-in types, hence the rewrite).

    #[test]
    fn plus_on_lists_and_strings_is_python_addition() {
        assert_eq!(rw("{{ a + b }}"), "{{ __py_add(a, b) }}");
        assert_eq!(render("{{ [1] + [2, 3] }}"), "[1, 2, 3]");
        assert_eq!(render("{{ 'a' + 'b' }}"), "ab");
    }

    #[test]
    fn chained_plus_nests_left_to_right() {
        assert_eq!(
            rw("{{ 'x'|safe + t['n'] + 'y' }}"),
            "{{ __py_add(__py_add('x'|safe, t['n']), 'y') }}"
        );
    }

    #[test]
    fn parenthesised_operands_lose_only_their_outer_brackets() {
        assert_eq!(rw("{{ (a) + (b) }}"), "{{ __py_add(a, b) }}");
        assert_eq!(rw("{{ (a)|f + 1 }}"), "{{ __py_add((a)|f, 1) }}");
        assert_eq!(rw("{{ x + (1,) }}"), "{{ __py_add(x, (1,)) }}");
    }

    #[test]
    fn tilde_concatenates_python_str() {
        assert_eq!(rw("{{ x ~ (a == b) }}"), "{{ __py_concat(x, a == b) }}");
        assert_eq!(render("{{ 1 ~ none ~ true }}"), "1NoneTrue");
    }

    #[test]
    fn percent_formats_like_python() {
        assert_eq!(rw("{{ '%s' % (a, b) }}"), "{{ __py_mod('%s', (a, b)) }}");
        assert_eq!(render("{{ '%s-%03d' % ('a', 7) }}"), "a-007");
    }

    #[test]
    fn star_repeats_strings_and_lists() {
        assert_eq!(render("{{ 'ab' * 2 }}"), "abab");
        assert_eq!(render("{{ [0] * 3 }}"), "[0, 0, 0]");
    }

    #[test]
    fn for_loops_iterate_like_python() {
        assert_eq!(
            rw("{% for m in messages if m.x %}{% endfor %}"),
            "{% for m in __py_iter(messages) if m.x %}{% endfor %}"
        );
        assert_eq!(
            render("{% for k in {'b': 1, 'a': 2} %}{{ k }}{% endfor %}"),
            "ba"
        );
    }

    #[test]
    fn operators_inside_tests_calls_slices_and_conditionals() {
        assert_eq!(
            rw("{% if not a in b + c %}{% endif %}"),
            "{% if not a in __py_add(b, c) %}{% endif %}"
        );
        assert_eq!(
            rw("{{ a.b(c=1).d + e[0:2] }}"),
            "{{ __py_add(a.b(c=1).d, e[0:2]) }}"
        );
        assert_eq!(
            rw("{{ x if y else z ~ w }}"),
            "{{ x if y else __py_concat(z, w) }}"
        );
        assert_eq!(rw("{{ -a + b }}"), "{{ __py_add(-a, b) }}");
    }

    #[test]
    fn comments_and_text_are_untouched() {
        assert_eq!(rw("plain {# a + b #} text"), "plain {# a + b #} text");
    }
}
