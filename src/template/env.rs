//! The minijinja environment configured like transformers' jinja2 environment.
//!
//! transformers 5 renders with `ImmutableSandboxedEnvironment(trim_blocks=True,
//! lstrip_blocks=True, extensions=[AssistantTracker, loopcontrols])`, a `tojson` override,
//! `raise_exception`, `strftime_now`, and v5's `dict`/`namespace`. Everything else is a jinja2
//! default: lenient undefined, no autoescape, no trailing newline kept, Python `str()` printing.
use std::cell::RefCell;
use std::io;
use std::sync::Arc;

use indexmap::IndexMap;
use minijinja::syntax::SyntaxConfig;
use minijinja::value::{Kwargs, Object, ObjectRepr, Rest, Value, ValueKind, ValueOrKwargs};
use minijinja::{AutoEscape, Environment, Error, ErrorKind, Output, State, UndefinedBehavior};

use super::generation::GENERATION_FILTER;
use super::pymethods::{py_capitalize, py_pad, py_splitlines, py_strip, unknown_method_callback};
use super::pyops;
use super::pyrepr::{py_repr, py_str};
use super::tojson::{py_type_name, split_kwargs, tojson_filter};
use super::values::PyDict;
use super::RenderLimits;

/// Per-render bookkeeping shared by the output writer, the formatter and the template
/// functions. Rendering is synchronous, so it lives in a thread-local for one render.
#[derive(Debug, Default)]
pub(crate) struct RenderState {
    /// Code points written to the top-level output so far (Python `len` of the output).
    pub chars_out: usize,
    /// Bytes written to the top-level output so far.
    pub bytes_out: usize,
    pub max_output_bytes: usize,
    /// Bytes formatted by `{{ … }}` anywhere, captured blocks included.
    pub formatted_bytes: usize,
    pub max_formatted_bytes: usize,
    /// `{% generation %}` spans, in code points.
    pub spans: Vec<(usize, usize)>,
    /// The message of the last `raise_exception` call.
    pub raised: Option<String>,
    /// Set when a size limit stopped the render.
    pub limit: Option<String>,
    /// The clock `strftime_now` reads in this render (None: [`crate::clock::now`]).
    pub now: Option<chrono::NaiveDateTime>,
    /// The formats `strftime_now` was called with, in call order, each once.
    pub clock_formats: Vec<String>,
}

thread_local! {
    static RENDER_STATE: RefCell<Option<RenderState>> = const { RefCell::new(None) };
}

/// Installs a fresh [`RenderState`] for the current thread until dropped.
pub(crate) struct RenderStateGuard {
    previous: Option<RenderState>,
}

impl RenderStateGuard {
    pub fn install(limits: &RenderLimits, now: Option<chrono::NaiveDateTime>) -> RenderStateGuard {
        let state = RenderState {
            max_output_bytes: limits.max_output_bytes,
            max_formatted_bytes: limits.max_output_bytes.saturating_mul(4),
            now,
            ..RenderState::default()
        };
        let previous = RENDER_STATE.with(|s| s.borrow_mut().replace(state));
        RenderStateGuard { previous }
    }

    /// Takes the state collected so far.
    pub fn take(&self) -> RenderState {
        RENDER_STATE
            .with(|s| s.borrow_mut().take())
            .unwrap_or_default()
    }
}

impl Drop for RenderStateGuard {
    fn drop(&mut self) {
        let previous = self.previous.take();
        RENDER_STATE.with(|s| *s.borrow_mut() = previous);
    }
}

fn with_state<R>(f: impl FnOnce(&mut RenderState) -> R) -> Option<R> {
    RENDER_STATE.with(|s| s.borrow_mut().as_mut().map(f))
}

/// Largest string an operator or method may build in the current render.
pub(crate) fn max_string_len() -> usize {
    with_state(|st| st.max_formatted_bytes).unwrap_or(100_000_000)
}

/// An error for a size bound, recorded so the render reports `TemplateError::Limit`.
pub(crate) fn limit_error(msg: &str) -> Error {
    with_state(|st| st.limit = Some(msg.to_string()));
    Error::new(ErrorKind::InvalidOperation, msg.to_string())
}

/// The top-level output sink: counts code points (for generation spans) and enforces the
/// output size limit.
pub(crate) struct LimitedWriter {
    pub buf: Vec<u8>,
}

impl io::Write for LimitedWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let over = with_state(|st| {
            st.bytes_out += data.len();
            st.chars_out += data.iter().filter(|b| (**b & 0xC0) != 0x80).count();
            if st.bytes_out > st.max_output_bytes {
                st.limit = Some(format!("output exceeds {} bytes", st.max_output_bytes));
                true
            } else {
                false
            }
        })
        .unwrap_or(false);
        if over {
            return Err(io::Error::other("output size limit exceeded"));
        }
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn err(msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidOperation, msg.into())
}

/// Prints values the way jinja2 does: Python `str()`.
fn formatter(out: &mut Output, _state: &mut State, value: &Value) -> Result<(), Error> {
    if value.kind() == ValueKind::Invalid {
        return Err(err(value.to_string()));
    }
    let owned;
    let text: &str = match value.as_str() {
        Some(s) if value.kind() == ValueKind::String => s,
        _ => {
            owned = py_str(value);
            &owned
        }
    };
    let over = with_state(|st| {
        st.formatted_bytes += text.len();
        if st.formatted_bytes > st.max_formatted_bytes {
            st.limit = Some(format!(
                "formatted output exceeds {} bytes",
                st.max_formatted_bytes
            ));
            true
        } else {
            false
        }
    })
    .unwrap_or(false);
    if over {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            "output size limit exceeded",
        ));
    }
    out.write_str(text).map_err(Error::from)
}

/// `raise_exception(message)`: jinja2's `TemplateError(message)`.
fn raise_exception(args: Rest<ValueOrKwargs>) -> Result<Value, Error> {
    let args = args.into_values();
    let (positional, kwargs) = split_kwargs(&args)?;
    let message = match (positional.first(), &kwargs) {
        (Some(m), _) => py_str(m),
        (None, Some(kw)) if kw.has("message") => py_str(&kw.peek::<Value>("message")?),
        _ => {
            return Err(err(
                "raise_exception() missing 1 required positional argument: 'message'",
            ))
        }
    };
    with_state(|st| st.raised = Some(message.clone()));
    Err(Error::new(ErrorKind::InvalidOperation, message))
}

/// Python `dict(*args, **kwargs)`.
fn make_dict(args: &[Value]) -> Result<Value, Error> {
    let (positional, kwargs) = split_kwargs(args)?;
    if positional.len() > 1 {
        return Err(err(format!(
            "dict expected at most 1 argument, got {}",
            positional.len()
        )));
    }
    let mut map: IndexMap<Value, Value> = IndexMap::new();
    if let Some(source) = positional.first() {
        match source.kind() {
            ValueKind::Undefined => {}
            ValueKind::Map => {
                if let Some(iter) = source.as_object().and_then(|o| o.try_iter_pairs()) {
                    map.extend(iter);
                }
            }
            ValueKind::Seq | ValueKind::Iterable | ValueKind::String => {
                for (idx, item) in source.try_iter()?.enumerate() {
                    let pair: Vec<Value> = match item.kind() {
                        ValueKind::Seq | ValueKind::Iterable | ValueKind::String => item.try_iter()?.collect(),
                        _ => {
                            return Err(err(format!(
                                "cannot convert dictionary update sequence element #{idx} to a sequence"
                            )))
                        }
                    };
                    if pair.len() != 2 {
                        return Err(err(format!(
                            "dictionary update sequence element #{idx} has length {}; 2 is required",
                            pair.len()
                        )));
                    }
                    map.insert(pair[0].clone(), pair[1].clone());
                }
            }
            _ => {
                return Err(err(format!(
                    "'{}' object is not iterable",
                    py_type_name(source)
                )))
            }
        }
    }
    if let Some(kwargs) = kwargs {
        for name in kwargs.args() {
            map.insert(Value::from(name), kwargs.peek::<Value>(name)?);
        }
    }
    Ok(Value::from_object(PyDict(map)))
}

/// transformers 5's `TemplateDict`: callable like `dict`, plus `dict.fromkeys`.
#[derive(Debug)]
struct DictGlobal;

impl Object for DictGlobal {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Plain
    }

    fn call(self: &Arc<Self>, _state: &mut State<'_, '_>, args: &[Value]) -> Result<Value, Error> {
        make_dict(args)
    }

    fn call_method(
        self: &Arc<Self>,
        _state: &mut State<'_, '_>,
        method: &str,
        args: &[Value],
    ) -> Result<Value, Error> {
        if method != "fromkeys" {
            return Err(Error::from(ErrorKind::UnknownMethod));
        }
        let (positional, _) = split_kwargs(args)?;
        let keys = positional.first().cloned().unwrap_or_default();
        let fill = positional
            .get(1)
            .cloned()
            .unwrap_or_else(|| Value::from(()));
        let mut map: IndexMap<Value, Value> = IndexMap::new();
        for key in keys.try_iter()? {
            map.insert(key, fill.clone());
        }
        Ok(Value::from_object(PyDict(map)))
    }
}

/// transformers 5's `TemplateNamespace`: a jinja2 namespace that rejects `_`-prefixed names.
fn namespace(args: Rest<ValueOrKwargs>) -> Result<Value, Error> {
    let attrs = make_dict(&args.into_values())?;
    if let Some(iter) = attrs.as_object().and_then(|o| o.try_iter_pairs()) {
        for (key, _) in iter {
            if key.as_str().is_some_and(|k| k.starts_with('_')) {
                return Err(err(format!(
                    "Chat templates cannot store underscore-prefixed attributes on a namespace, but got {}. \
                     Please rename the attribute.",
                    py_repr(&key)
                )));
            }
        }
    }
    minijinja::functions::namespace(Some(attrs.into()))
}

/// The `{% generation %}` filter: records the span, returns the body unchanged.
fn generation_filter(value: Value) -> Value {
    let len = value.as_str().map(|s| s.chars().count()).unwrap_or(0);
    with_state(|st| st.spans.push((st.chars_out, st.chars_out + len)));
    value
}

/// jinja2 `|length` / `|count`: `len(value)`, 0 for undefined.
/// Python's recursion limit is 1000 frames; pformat uses several per level.
const PPRINT_MAX_DEPTH: usize = 300;

/// How deeply lists and maps nest in `v`, counted up to `cap`.
fn nesting_depth(v: &Value, cap: usize) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(v.clone(), 0usize)];
    while let Some((v, d)) = stack.pop() {
        deepest = deepest.max(d);
        if deepest >= cap {
            return deepest;
        }
        if matches!(v.kind(), ValueKind::Seq | ValueKind::Map) {
            if let Ok(items) = v.try_iter() {
                for item in items {
                    let child = if v.kind() == ValueKind::Map {
                        v.get_item(&item).unwrap_or_default()
                    } else {
                        item
                    };
                    stack.push((child, d + 1));
                }
            }
        }
    }
    deepest
}

/// A filter's result as a jinja2 generator: iterable, always true, not sized, not JSON
/// (`range` stays sized: only these results are generators).
#[derive(Debug)]
pub struct Generator(Vec<Value>);

impl Object for Generator {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Iterable
    }
    fn enumerate(self: &Arc<Self>) -> minijinja::value::Enumerator {
        minijinja::value::Enumerator::Values(self.0.clone())
    }
    fn enumerator_len(self: &Arc<Self>) -> Option<usize> {
        // Known for loop.length (jinja2 materialises the iterator for it); `length` refuses.
        Some(self.0.len())
    }
    fn is_true(self: &Arc<Self>) -> bool {
        true
    }
}

fn generator(items: Vec<Value>) -> Value {
    Value::from_object(Generator(items))
}

pub fn is_generator(v: &Value) -> bool {
    v.downcast_object_ref::<Generator>().is_some()
}

fn length_filter(value: &Value) -> Result<Value, Error> {
    if value.is_undefined() {
        return Ok(Value::from(0));
    }
    if is_generator(value) {
        return Err(err("object of type 'generator' has no len()"));
    }
    minijinja::filters::length(value).map(Value::from)
}

/// Python `int(s, base)` for strings (whitespace, sign, underscores, base prefixes).
fn parse_py_int(s: &str, base: u32) -> Option<i128> {
    let t = py_strip(s, None, true, true);
    let (neg, t) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let lower = t.to_ascii_lowercase();
    let (base, digits) = match base {
        0 => match lower.get(..2) {
            Some("0x") => (16, &t[2..]),
            Some("0o") => (8, &t[2..]),
            Some("0b") => (2, &t[2..]),
            _ => {
                if t.len() > 1 && t.starts_with('0') && t.chars().any(|c| c != '0' && c != '_') {
                    return None;
                }
                (10, t)
            }
        },
        16 if lower.starts_with("0x") => (16, &t[2..]),
        8 if lower.starts_with("0o") => (8, &t[2..]),
        2 if lower.starts_with("0b") => (2, &t[2..]),
        b => (b, t),
    };
    if !(2..=36).contains(&base)
        || digits.is_empty()
        || digits.starts_with('_')
        || digits.ends_with('_')
        || digits.contains("__")
    {
        return None;
    }
    let v = i128::from_str_radix(&digits.replace('_', ""), base).ok()?;
    Some(if neg { -v } else { v })
}

/// Python `float(s)` for strings.
fn parse_py_float(s: &str) -> Option<f64> {
    let t = py_strip(s, None, true, true);
    let lower = t.to_ascii_lowercase();
    let body = lower.trim_start_matches(['+', '-']);
    if matches!(body, "inf" | "infinity" | "nan") {
        return lower.parse::<f64>().ok();
    }
    if t.starts_with('_')
        || t.ends_with('_')
        || t.contains("__")
        || !t
            .chars()
            .all(|c| c.is_ascii_digit() || "+-.eE_".contains(c))
    {
        return None;
    }
    t.replace('_', "").parse::<f64>().ok()
}

/// jinja2 `|int(default=0, base=10)`.
fn int_filter(value: &Value, default: Option<Value>, base: Option<i64>) -> Value {
    let default = default.unwrap_or_else(|| Value::from(0));
    let base = base.unwrap_or(10);
    match value.kind() {
        ValueKind::String => {
            let s = value.as_str().unwrap_or_default();
            if let Some(v) = u32::try_from(base).ok().and_then(|b| parse_py_int(s, b)) {
                return Value::from(v);
            }
            match parse_py_float(s) {
                Some(f) if f.is_finite() => Value::from(f.trunc() as i128),
                _ => default,
            }
        }
        ValueKind::Bool => Value::from(i64::from(value.is_true())),
        ValueKind::Number if value.is_integer() => value.clone(),
        ValueKind::Number => match f64::try_from(value.clone()) {
            Ok(f) if f.is_finite() => Value::from(f.trunc() as i128),
            _ => default,
        },
        _ => default,
    }
}

/// jinja2 `|float(default=0.0)`.
fn float_filter(value: &Value, default: Option<Value>) -> Value {
    let default = default.unwrap_or_else(|| Value::from(0.0));
    match value.kind() {
        ValueKind::String => parse_py_float(value.as_str().unwrap_or_default())
            .map(Value::from)
            .unwrap_or(default),
        ValueKind::Bool => Value::from(if value.is_true() { 1.0 } else { 0.0 }),
        ValueKind::Number => f64::try_from(value.clone())
            .map(Value::from)
            .unwrap_or(default),
        _ => default,
    }
}

/// jinja2 `|items`: pairs of a mapping; nothing for undefined.
fn items_filter(value: &Value) -> Result<Value, Error> {
    if value.is_undefined() {
        return Ok(Value::from(Vec::<Value>::new()));
    }
    if value.kind() != ValueKind::Map {
        return Err(err("Can only get item pairs from a mapping."));
    }
    minijinja::filters::items(value)
}

/// jinja2 `|replace(old, new, count=None)`: `str(s).replace(old, new, count)`.
fn replace_filter(
    value: &Value,
    old: Value,
    new: Value,
    count: Option<Value>,
) -> Result<Value, Error> {
    let s = py_str(value);
    let (old, new) = (py_str(&old), py_str(&new));
    let count = match count {
        None => -1,
        Some(c) if c.is_none() => -1,
        Some(c) => i64::try_from(c).map_err(|_| err("replace count must be an integer"))?,
    };
    let estimate = if old.is_empty() {
        s.chars().count() + 1
    } else {
        s.matches(old.as_str()).count()
    };
    if new.len().saturating_mul(estimate) > 100_000_000 {
        return Err(limit_error(
            "|replace built a string over 100,000,000 bytes",
        ));
    }
    Ok(Value::from(if count < 0 {
        s.replace(&old, &new)
    } else {
        s.replacen(&old, &new, count as usize)
    }))
}

fn not_iterable(value: &Value) -> Result<(), Error> {
    if value.is_none() {
        return Err(err("'NoneType' object is not iterable"));
    }
    Ok(())
}

/// jinja2's `cycler(*items)`.
#[derive(Debug)]
struct Cycler {
    items: Vec<Value>,
    pos: std::sync::Mutex<usize>,
}

impl Object for Cycler {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Plain
    }

    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        match key.as_str()? {
            "current" => {
                let pos = *self.pos.lock().ok()?;
                self.items.get(pos).cloned()
            }
            _ => None,
        }
    }

    fn call_method(
        self: &Arc<Self>,
        _state: &mut State<'_, '_>,
        method: &str,
        _args: &[Value],
    ) -> Result<Value, Error> {
        let mut pos = self.pos.lock().map_err(|_| err("cycler state poisoned"))?;
        match method {
            "next" => {
                let rv = self.items.get(*pos).cloned().unwrap_or_default();
                *pos = (*pos + 1) % self.items.len().max(1);
                Ok(rv)
            }
            "reset" => {
                *pos = 0;
                Ok(Value::from(()))
            }
            _ => Err(Error::from(ErrorKind::UnknownMethod)),
        }
    }
}

/// jinja2's `joiner(sep=', ')`: returns "" the first time, then `sep`.
#[derive(Debug)]
struct Joiner {
    sep: Value,
    used: std::sync::atomic::AtomicBool,
}

impl Object for Joiner {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Plain
    }

    fn call(self: &Arc<Self>, _state: &mut State<'_, '_>, _args: &[Value]) -> Result<Value, Error> {
        if self.used.swap(true, std::sync::atomic::Ordering::Relaxed) {
            Ok(self.sep.clone())
        } else {
            Ok(Value::from(""))
        }
    }
}

/// jinja2 `|format(*args, **kwargs)`: `str(value) % (kwargs or args)`.
fn format_filter(value: &Value, args: Rest<ValueOrKwargs>) -> Result<Value, Error> {
    let args = args.into_values();
    let (positional, kwargs) = split_kwargs(&args)?;
    let operand = match kwargs {
        Some(kw) if !positional.is_empty() => {
            let _ = kw;
            return Err(err(
                "can't handle positional and keyword arguments at the same time",
            ));
        }
        Some(kw) => {
            let mut map: IndexMap<Value, Value> = IndexMap::new();
            for name in kw.args() {
                map.insert(Value::from(name), kw.peek::<Value>(name)?);
            }
            Value::from_object(PyDict(map))
        }
        None => Value::from(minijinja::value::Tuple::from(positional.to_vec())),
    };
    pyops::py_mod(&Value::from(py_str(value)), &operand)
}

/// jinja2 `|string`: Python `str()`.
fn string_filter(value: &Value) -> Value {
    if value.kind() == ValueKind::String {
        return value.clone();
    }
    Value::from(py_str(value))
}

/// jinja2's `make_attrgetter`: dotted path, integer parts index.
fn get_path(item: &Value, path: &Value) -> Result<Value, Error> {
    if let Some(p) = path.as_str() {
        let mut cur = item.clone();
        for part in p.split('.') {
            cur = match part.parse::<i64>() {
                Ok(i) => cur.get_item(&Value::from(i))?,
                Err(_) => cur.get_attr(part)?,
            };
        }
        Ok(cur)
    } else {
        item.get_item(path)
    }
}

/// jinja2 `|join(d='', attribute=None)`: `str(d).join(map(str, value))`.
fn join_filter(value: &Value, args: Rest<ValueOrKwargs>) -> Result<Value, Error> {
    let args = args.into_values();
    let (positional, kwargs) = split_kwargs(&args)?;
    let mut sep = positional.first().cloned();
    let mut attribute = positional.get(1).cloned();
    if let Some(kw) = &kwargs {
        for name in kw.args() {
            match name {
                "d" => sep = Some(kw.peek::<Value>(name)?),
                "attribute" => attribute = Some(kw.peek::<Value>(name)?),
                _ => {
                    return Err(err(format!(
                        "join() got an unexpected keyword argument '{name}'"
                    )))
                }
            }
        }
    }
    let sep = sep.map(|s| py_str(&s)).unwrap_or_default();
    if value.is_undefined() {
        return Ok(Value::from(""));
    }
    not_iterable(value)?;
    let mut out = String::new();
    for (idx, item) in value.try_iter()?.enumerate() {
        if idx > 0 {
            out.push_str(&sep);
        }
        let item = match &attribute {
            Some(attr) if !attr.is_none() => get_path(&item, attr)?,
            _ => item,
        };
        out.push_str(&py_str(&item));
    }
    Ok(Value::from(out))
}

/// jinja2 `|trim(chars=None)`: Python `str.strip`.
fn trim_filter(value: &Value, chars: Option<Value>) -> Value {
    let s = py_str(value);
    let chars = chars
        .filter(|c| !c.is_none() && !c.is_undefined())
        .map(|c| py_str(&c));
    Value::from(py_strip(&s, chars.as_deref(), true, true))
}

/// jinja2 `|indent(width=4, first=False, blank=False)`.
fn indent_filter(value: &Value, args: Rest<ValueOrKwargs>) -> Result<Value, Error> {
    let args = args.into_values();
    let (positional, kwargs) = split_kwargs(&args)?;
    let mut slots: [Option<Value>; 3] = [
        positional.first().cloned(),
        positional.get(1).cloned(),
        positional.get(2).cloned(),
    ];
    if let Some(kw) = &kwargs {
        for name in kw.args() {
            let idx = match name {
                "width" => 0,
                "first" => 1,
                "blank" => 2,
                _ => {
                    return Err(err(format!(
                        "do_indent() got an unexpected keyword argument '{name}'"
                    )))
                }
            };
            slots[idx] = Some(kw.peek::<Value>(name)?);
        }
    }
    let Some(s) = value.as_str().filter(|_| value.kind() == ValueKind::String) else {
        return Err(err(format!(
            "unsupported operand type(s) for +=: '{}' and 'str'",
            py_type_name(value)
        )));
    };
    let indention = match &slots[0] {
        None => "    ".to_string(),
        Some(w) if w.kind() == ValueKind::String => py_str(w),
        Some(w) => {
            let n = i64::try_from(w.clone())
                .map_err(|_| err("indent width must be an integer or a string"))?;
            if n > 10_000 {
                return Err(err("indent width is too large"));
            }
            " ".repeat(n.max(0) as usize)
        }
    };
    let first = slots[1].as_ref().is_some_and(Value::is_true);
    let blank = slots[2].as_ref().is_some_and(Value::is_true);
    let s = format!("{s}\n");
    let lines = py_splitlines(&s, false);
    let mut rv = String::new();
    if blank {
        rv = lines.join(&format!("\n{indention}"));
    } else {
        let mut iter = lines.into_iter();
        rv.push_str(&iter.next().unwrap_or_default());
        let rest: Vec<String> = iter
            .map(|line| {
                if line.is_empty() {
                    line
                } else {
                    format!("{indention}{line}")
                }
            })
            .collect();
        if !rest.is_empty() {
            rv.push('\n');
            rv.push_str(&rest.join("\n"));
        }
    }
    if first {
        rv = format!("{indention}{rv}");
    }
    Ok(if value.is_safe() {
        Value::from_safe_string(rv)
    } else {
        Value::from(rv)
    })
}

/// markupsafe's `escape`.
pub(crate) fn html_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\'' => out.push_str("&#39;"),
            '"' => out.push_str("&#34;"),
            c => out.push(c),
        }
    }
    out
}

fn escape_filter(value: &Value) -> Value {
    if value.is_safe() {
        return value.clone();
    }
    Value::from_safe_string(html_escape(&py_str(value)))
}

fn forceescape_filter(value: &Value) -> Value {
    Value::from_safe_string(html_escape(&py_str(value)))
}

/// Python's `round(x, n)` for floats: correctly rounded, ties to even.
fn py_round(x: f64, digits: i64) -> f64 {
    if !x.is_finite() {
        return x;
    }
    if digits >= 0 {
        let digits = digits.min(330) as usize;
        format!("{x:.digits$}").parse().unwrap_or(x)
    } else {
        let p = 10f64.powi((-digits).min(330) as i32);
        let q = x / p;
        let r = q.round();
        let r = if (q - q.trunc()).abs() == 0.5 {
            2.0 * (q / 2.0).round()
        } else {
            r
        };
        r * p
    }
}

/// jinja2 `|round(precision=0, method='common')`.
fn round_filter(value: &Value, args: Rest<ValueOrKwargs>) -> Result<Value, Error> {
    let args = args.into_values();
    let (positional, kwargs) = split_kwargs(&args)?;
    let mut precision = positional.first().cloned();
    let mut method = positional.get(1).cloned();
    if let Some(kw) = &kwargs {
        for name in kw.args() {
            match name {
                "precision" => precision = Some(kw.peek::<Value>(name)?),
                "method" => method = Some(kw.peek::<Value>(name)?),
                _ => {
                    return Err(err(format!(
                        "do_round() got an unexpected keyword argument '{name}'"
                    )))
                }
            }
        }
    }
    let precision = match precision {
        None => 0,
        Some(p) => i64::try_from(p).map_err(|_| err("round precision must be an integer"))?,
    };
    let method = method
        .map(|m| py_str(&m))
        .unwrap_or_else(|| "common".to_string());
    if !value.is_number() && value.kind() != ValueKind::Bool {
        return Err(err(format!(
            "type {} doesn't define __round__ method",
            py_type_name(value)
        )));
    }
    let x = f64::try_from(value.clone()).unwrap_or(0.0);
    match method.as_str() {
        "common" => {
            if value.is_integer() || value.kind() == ValueKind::Bool {
                if precision >= 0 {
                    return Ok(value.clone());
                }
                return Ok(Value::from(py_round(x, precision) as i64));
            }
            Ok(Value::from(py_round(x, precision)))
        }
        "ceil" | "floor" => {
            let p = 10f64.powi(precision.clamp(-330, 330) as i32);
            let y = if method == "ceil" {
                (x * p).ceil()
            } else {
                (x * p).floor()
            };
            Ok(Value::from(y / p))
        }
        _ => Err(err("method must be common, ceil or floor")),
    }
}

/// jinja2 `|center(width=80)`.
fn center_filter(value: &Value, width: Option<i64>) -> Result<Value, Error> {
    py_pad("center", &py_str(value), width.unwrap_or(80), ' ').map(Value::from)
}

/// jinja2 `|capitalize`.
fn capitalize_filter(value: &Value) -> Value {
    Value::from(py_capitalize(&py_str(value)))
}

/// jinja2 `|title`: split on runs of `-`, whitespace and opening brackets.
fn title_filter(value: &Value) -> Value {
    let s = py_str(value);
    let is_sep = |c: char| {
        c == '-'
            || c == '('
            || c == '{'
            || c == '['
            || c == '<'
            || c.is_whitespace()
            || ('\u{1c}'..='\u{1f}').contains(&c)
    };
    let mut out = String::with_capacity(s.len());
    let mut at_word_start = true;
    for c in s.chars() {
        if is_sep(c) {
            out.push(c);
            at_word_start = true;
        } else if at_word_start {
            out.extend(c.to_uppercase());
            at_word_start = false;
        } else {
            out.extend(c.to_lowercase());
        }
    }
    Value::from(out)
}

/// jinja2 `|wordcount`: `len(re.findall(r"\w+", s))`.
fn wordcount_filter(value: &Value) -> usize {
    let s = py_str(value);
    let mut count = 0;
    let mut in_word = false;
    for c in s.chars() {
        let w = c.is_alphanumeric() || c == '_';
        if w && !in_word {
            count += 1;
        }
        in_word = w;
    }
    count
}

/// jinja2 `|truncate(length=255, killwords=False, end='...', leeway=5)`.
fn truncate_filter(value: &Value, args: Rest<ValueOrKwargs>) -> Result<Value, Error> {
    let args = args.into_values();
    let (positional, kwargs) = split_kwargs(&args)?;
    let mut slots: [Option<Value>; 4] = Default::default();
    for (i, v) in positional.iter().take(4).enumerate() {
        slots[i] = Some(v.clone());
    }
    if let Some(kw) = &kwargs {
        for name in kw.args() {
            let idx = match name {
                "length" => 0,
                "killwords" => 1,
                "end" => 2,
                "leeway" => 3,
                _ => {
                    return Err(err(format!(
                        "do_truncate() got an unexpected keyword argument '{name}'"
                    )))
                }
            };
            slots[idx] = Some(kw.peek::<Value>(name)?);
        }
    }
    let int = |v: &Option<Value>, d: i64| -> Result<i64, Error> {
        match v {
            None => Ok(d),
            Some(v) => {
                i64::try_from(v.clone()).map_err(|_| err("truncate arguments must be integers"))
            }
        }
    };
    let length = int(&slots[0], 255)?;
    let killwords = slots[1].as_ref().is_some_and(Value::is_true);
    let end = slots[2]
        .as_ref()
        .map(py_str)
        .unwrap_or_else(|| "...".to_string());
    let leeway = int(&slots[3], 5)?;
    let end_len = end.chars().count() as i64;
    if length < end_len {
        return Err(err(format!("expected length >= {end_len}, got {length}")));
    }
    if leeway < 0 {
        return Err(err(format!("expected leeway >= 0, got {leeway}")));
    }
    let s = py_str(value);
    let chars: Vec<char> = s.chars().collect();
    if chars.len() as i64 <= length + leeway {
        return Ok(Value::from(s));
    }
    let head: String = chars[..(length - end_len) as usize].iter().collect();
    if killwords {
        return Ok(Value::from(format!("{head}{end}")));
    }
    let cut = head
        .rsplit_once(' ')
        .map(|(a, _)| a.to_string())
        .unwrap_or(head);
    Ok(Value::from(format!("{cut}{end}")))
}

/// jinja2 `is sequence`: `len(value)` and `value.__getitem__` exist.
fn is_sequence(value: &Value) -> bool {
    matches!(
        value.kind(),
        ValueKind::String
            | ValueKind::Seq
            | ValueKind::Map
            | ValueKind::Bytes
            | ValueKind::Undefined
    )
}

/// jinja2 `is iterable`.
fn is_iterable(value: &Value) -> bool {
    matches!(
        value.kind(),
        ValueKind::String
            | ValueKind::Seq
            | ValueKind::Map
            | ValueKind::Bytes
            | ValueKind::Iterable
            | ValueKind::Undefined
    )
}

/// jinja2 `is number`: `isinstance(value, numbers.Number)` (booleans included).
fn is_number(value: &Value) -> bool {
    value.is_number() || value.kind() == ValueKind::Bool
}

/// jinja2 `is integer`: ints but not booleans.
fn is_integer(value: &Value) -> bool {
    value.is_integer() && value.kind() == ValueKind::Number
}

/// Builds the environment for one template.
pub(crate) fn build(limits: &RenderLimits) -> Result<Environment<'static>, Error> {
    let mut env = Environment::new();
    env.set_syntax(
        SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .keep_trailing_newline(false)
            .build()?,
    );
    env.set_undefined_behavior(UndefinedBehavior::Lenient);
    env.set_auto_escape_callback(|_| AutoEscape::None);
    env.set_debug(false);
    env.set_fuel(Some(limits.fuel));
    env.set_recursion_limit(limits.max_recursion);
    env.set_formatter(formatter);
    env.set_unknown_method_callback(unknown_method_callback);

    env.remove_global("debug");
    env.add_function("raise_exception", raise_exception);
    env.add_function("strftime_now", |fmt: Value| {
        let fmt = py_str(&fmt);
        let now = with_state(|st| {
            if !st.clock_formats.contains(&fmt) {
                st.clock_formats.push(fmt.clone());
            }
            st.now
        })
        .flatten()
        .unwrap_or_else(crate::clock::now);
        Value::from(super::strftime::strftime_now(&fmt, &now))
    });
    env.add_global("dict", Value::from_object(DictGlobal));
    env.add_function("namespace", namespace);
    env.add_function("cycler", |items: Rest<Value>| {
        Value::from_object(Cycler {
            items: items.0,
            pos: std::sync::Mutex::new(0),
        })
    });
    env.add_function("joiner", |sep: Option<Value>| {
        Value::from_object(Joiner {
            sep: sep.unwrap_or_else(|| Value::from(", ")),
            used: std::sync::atomic::AtomicBool::new(false),
        })
    });
    env.add_function(pyops::MUL_FN, |a: Value, b: Value| pyops::py_mul(&a, &b));
    env.add_function(pyops::ADD_FN, |a: Value, b: Value| pyops::py_add(&a, &b));
    env.add_function(pyops::MOD_FN, |a: Value, b: Value| pyops::py_mod(&a, &b));
    env.add_function(pyops::CONCAT_FN, |a: Value, b: Value| {
        pyops::py_concat(&a, &b)
    });
    env.add_function(pyops::ITER_FN, |a: Value| pyops::py_iter(&a));

    env.add_filter("tojson", |value: &Value, args: Rest<ValueOrKwargs>| {
        tojson_filter(value, &args.into_values())
    });
    // jinja2's map/select/reject/selectattr/rejectattr return generators: iterable, joinable,
    // listable, but `tojson` raises "Object of type generator is not JSON serializable" and
    // `length` raises (llama.cpp's DeepSeek-R1 template writes `tools | map(...) | tojson`).
    env.add_filter(
        "map",
        |state: &mut State, value: Value, args: Rest<ValueOrKwargs>| {
            minijinja::filters::map(state, value, args).map(generator)
        },
    );
    env.add_filter(
        "select",
        |state: &mut State,
         value: Value,
         test: Option<std::borrow::Cow<'_, str>>,
         args: Rest<ValueOrKwargs>| {
            minijinja::filters::select(state, value, test, args).map(generator)
        },
    );
    env.add_filter(
        "reject",
        |state: &mut State,
         value: Value,
         test: Option<std::borrow::Cow<'_, str>>,
         args: Rest<ValueOrKwargs>| {
            minijinja::filters::reject(state, value, test, args).map(generator)
        },
    );
    env.add_filter(
        "selectattr",
        |state: &mut State,
         value: Value,
         attr: std::borrow::Cow<'_, str>,
         test: Option<std::borrow::Cow<'_, str>>,
         args: Rest<ValueOrKwargs>| {
            minijinja::filters::selectattr(state, value, attr, test, args).map(generator)
        },
    );
    env.add_filter(
        "rejectattr",
        |state: &mut State,
         value: Value,
         attr: std::borrow::Cow<'_, str>,
         test: Option<std::borrow::Cow<'_, str>>,
         args: Rest<ValueOrKwargs>| {
            minijinja::filters::rejectattr(state, value, attr, test, args).map(generator)
        },
    );
    // minijinja's pprint costs depth³ on deep nesting (1,500 levels hung past the fuel):
    // refuse what Python's pformat also refuses (it recurses once per level).
    env.add_filter("pprint", |value: &Value| -> Result<Value, Error> {
        if nesting_depth(value, PPRINT_MAX_DEPTH + 1) > PPRINT_MAX_DEPTH {
            return Err(err(
                "maximum recursion depth exceeded while calling a Python object (pprint)",
            ));
        }
        Ok(Value::from(minijinja::filters::pprint(value)))
    });
    env.add_filter("string", string_filter);
    env.add_filter("length", length_filter);
    env.add_filter("int", int_filter);
    env.add_filter("format", format_filter);
    env.add_filter("list", |state: &State, value: Value| {
        not_iterable(&value)?;
        minijinja::filters::list(state, value)
    });
    env.add_filter("first", |value: Value| {
        not_iterable(&value)?;
        minijinja::filters::first(&value)
    });
    env.add_filter("last", |value: Value| {
        not_iterable(&value)?;
        minijinja::filters::last(value)
    });
    env.add_filter("reverse", |value: Value| {
        not_iterable(&value)?;
        minijinja::filters::reverse(&value)
    });
    env.add_filter("sort", |state: &State, value: Value, kwargs: Kwargs| {
        not_iterable(&value)?;
        minijinja::filters::sort(state, value, kwargs)
    });
    env.add_filter("unique", |state: &State, value: Value, kwargs: Kwargs| {
        not_iterable(&value)?;
        minijinja::filters::unique(state, value, kwargs)
    });
    env.add_filter("min", |state: &State, value: Value, kwargs: Kwargs| {
        not_iterable(&value)?;
        minijinja::filters::min(state, value, kwargs)
    });
    env.add_filter("max", |state: &State, value: Value, kwargs: Kwargs| {
        not_iterable(&value)?;
        minijinja::filters::max(state, value, kwargs)
    });
    env.add_filter("items", items_filter);
    env.add_filter("replace", replace_filter);
    env.add_filter("float", float_filter);
    env.add_filter("count", length_filter);
    env.add_filter("join", join_filter);
    env.add_filter("trim", trim_filter);
    env.add_filter("indent", indent_filter);
    env.add_filter("escape", escape_filter);
    env.add_filter("e", escape_filter);
    env.add_filter("forceescape", forceescape_filter);
    env.add_filter("round", round_filter);
    env.add_filter("center", center_filter);
    env.add_filter("capitalize", capitalize_filter);
    env.add_filter("title", title_filter);
    env.add_filter("wordcount", wordcount_filter);
    env.add_filter("truncate", truncate_filter);
    env.add_filter(GENERATION_FILTER, generation_filter);

    // minijinja extras that jinja2 does not have: a template using them fails in transformers.
    for name in ["split", "lines", "bool", "chain", "zip"] {
        env.remove_filter(name);
    }
    for name in ["safe", "startingwith", "endingwith", "int"] {
        env.remove_test(name);
    }
    env.add_test("sequence", is_sequence);
    env.add_test("iterable", is_iterable);
    env.add_test("number", is_number);
    env.add_test("integer", is_integer);
    Ok(env)
}
