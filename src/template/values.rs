//! Template values for the JSON inputs: lists and dicts that keep insertion order and print
//! themselves as Python `repr` wherever minijinja stringifies them (`~`, `str.format`, ...).
use std::fmt;
use std::sync::Arc;

use indexmap::IndexMap;
use minijinja::value::{Enumerator, Object, ObjectExt, ObjectRepr, Value};

use super::pyrepr::py_repr;

/// A Python `list` built from a JSON array.
#[derive(Debug, Clone, Default)]
pub struct PyList(pub Vec<Value>);

impl Object for PyList {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Seq
    }

    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        self.0.get(key.as_usize()?).cloned()
    }

    fn enumerate(self: &Arc<Self>) -> Enumerator {
        Enumerator::Seq(self.0.len())
    }

    fn render(self: &Arc<Self>, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&py_repr(&Value::from_dyn_object(self.clone())))
    }
}

/// A Python `dict`, in insertion order.
#[derive(Debug, Clone, Default)]
pub struct PyDict(pub IndexMap<Value, Value>);

impl Object for PyDict {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Map
    }

    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        self.0.get(key).cloned()
    }

    fn get_value_by_str(self: &Arc<Self>, key: &str) -> Option<Value> {
        self.0.get(&Value::from(key)).cloned()
    }

    fn enumerate(self: &Arc<Self>) -> Enumerator {
        self.mapped_rev_key_value_enumerator(|this| {
            Box::new(this.0.iter().map(|(k, v)| (k.clone(), v.clone())))
        })
    }

    fn enumerator_len(self: &Arc<Self>) -> Option<usize> {
        Some(self.0.len())
    }

    fn render(self: &Arc<Self>, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&py_repr(&Value::from_dyn_object(self.clone())))
    }
}

/// Converts JSON into template values (lists → [`PyList`], objects → [`PyDict`]).
pub fn from_json(v: &serde_json::Value) -> Value {
    match v {
        serde_json::Value::Null => Value::from(()),
        serde_json::Value::Bool(b) => Value::from(*b),
        serde_json::Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Value::from(i)
            } else if let Some(u) = n.as_u64() {
                Value::from(u)
            } else {
                Value::from(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        serde_json::Value::String(s) => Value::from(s.as_str()),
        serde_json::Value::Array(items) => {
            Value::from_object(PyList(items.iter().map(from_json).collect()))
        }
        serde_json::Value::Object(map) => Value::from_object(PyDict(
            map.iter()
                .map(|(k, v)| (Value::from(k.as_str()), from_json(v)))
                .collect(),
        )),
    }
}
