//! The globals jinja2 and transformers give a chat template: `raise_exception`, `dict` (with
//! `dict.fromkeys`), `namespace` (rejecting `_`-prefixed names), `cycler` and `joiner`.
use std::sync::Arc;

use indexmap::IndexMap;
use minijinja::value::{Object, ObjectRepr, Rest, Value, ValueKind, ValueOrKwargs};
use minijinja::{Error, ErrorKind, State};

use super::limits::*;
use super::pyrepr::{py_repr, py_str};
use super::tojson::{py_type_name, split_kwargs};
use super::values::PyDict;

/// `raise_exception(message)`: jinja2's `TemplateError(message)`.
pub(super) fn raise_exception(args: Rest<ValueOrKwargs>) -> Result<Value, Error> {
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
pub(super) fn make_dict(args: &[Value]) -> Result<Value, Error> {
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
pub(super) struct DictGlobal;

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
pub(super) fn namespace(args: Rest<ValueOrKwargs>) -> Result<Value, Error> {
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

/// jinja2's `cycler(*items)`.
#[derive(Debug)]
pub(super) struct Cycler {
    pub(super) items: Vec<Value>,
    pub(super) pos: std::sync::Mutex<usize>,
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
pub(super) struct Joiner {
    pub(super) sep: Value,
    pub(super) used: std::sync::atomic::AtomicBool,
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
