//! The minijinja environment configured like transformers' jinja2 environment.
//!
//! transformers 5 renders with `ImmutableSandboxedEnvironment(trim_blocks=True,
//! lstrip_blocks=True, extensions=[AssistantTracker, loopcontrols])`, a `tojson` override,
//! `raise_exception`, `strftime_now`, and v5's `dict`/`namespace`. Everything else is a jinja2
//! default: lenient undefined, no autoescape, no trailing newline kept, Python `str()` printing.

use minijinja::syntax::SyntaxConfig;
use minijinja::value::{Kwargs, Rest, Value, ValueKind, ValueOrKwargs};
use minijinja::{AutoEscape, Environment, Error, ErrorKind, Output, State, UndefinedBehavior};

use super::filters::*;
use super::generation::GENERATION_FILTER;
use super::globals::*;
use super::limits::*;
use super::pymethods::unknown_method_callback;
use super::pyops;
use super::pyrepr::py_str;
use super::tojson::tojson_filter;

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
