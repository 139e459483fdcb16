//! Argument values typed by the tool's JSON schema, the way vLLM 0.32's engine parsers type
//! them after the family's converter has run (`ParserEngine._fix_arg_types`, `_coerce_value`;
//! `tool_parsers/utils.py` `extract_types_from_schema`, `coerce_to_schema_type`):
//! - only keys the tool's `properties` name are typed; a key the schema is silent on keeps the
//!   value the format gave it (a string for the XML families);
//! - a string value tries the schema's types in the order null, integer, number, boolean,
//!   object, array, string, and the first that reads it wins; none reads it: JSON if it parses,
//!   else the string;
//! - a value the format already typed (JSON formats) is printed as JSON and typed the same way
//!   (`5` for a string property becomes `"5"`);
//! - objects and arrays are typed inside only where the schema has `properties` / `items`.
use serde_json::{Map, Value};

/// The `properties` of tool `name`'s parameters, when the request offers it and they are given.
pub fn properties<'a>(tools: &'a [Value], name: &str) -> Option<&'a Map<String, Value>> {
    tools
        .iter()
        .map(|t| t.get("function").unwrap_or(t))
        .find(|f| f.get("name").and_then(Value::as_str) == Some(name))?
        .get("parameters")?
        .get("properties")?
        .as_object()
        .filter(|p| !p.is_empty())
}

/// Types `args` by `props` in place; returns the keys the schema was silent on.
pub fn type_arguments(args: &mut Map<String, Value>, props: &Map<String, Value>) -> Vec<String> {
    let mut silent = Vec::new();
    for (key, value) in args.iter_mut() {
        match props.get(key).filter(|s| s.is_object()) {
            Some(schema) => coerce_value(value, schema),
            None => silent.push(key.clone()),
        }
    }
    silent
}

fn coerce_value(value: &mut Value, schema: &Value) {
    match value {
        Value::String(s) => *value = coerce_str(s, &types_of(schema)),
        Value::Object(inner) => {
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                for (k, v) in inner.iter_mut() {
                    if let Some(s) = props.get(k).filter(|s| s.is_object()) {
                        coerce_value(v, s);
                    }
                }
            }
        }
        Value::Array(items) => {
            if let Some(item) = schema.get("items").filter(|s| s.is_object()) {
                for v in items.iter_mut() {
                    coerce_value(v, item);
                }
            }
        }
        other => {
            let typed = coerce_str(&other.to_string(), &types_of(schema));
            if !same_typed(&typed, other) {
                *other = typed;
            }
        }
    }
}

/// Python's `type(a) is type(b) and a == b` for JSON scalars (1 and 1.0 differ).
fn same_typed(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.is_f64() == y.is_f64() && a == b,
        _ => a == b,
    }
}

/// The types a schema allows (`type`, `enum` values' types, `anyOf`/`oneOf`/`allOf`),
/// aliases normalised; none: string.
pub fn types_of(schema: &Value) -> Vec<String> {
    let mut types = Vec::new();
    collect_types(schema, &mut types);
    if types.is_empty() {
        types.push("string".to_string());
    }
    types
}

fn collect_types(schema: &Value, out: &mut Vec<String>) {
    let Some(s) = schema.as_object() else { return };
    let mut add = |t: &str| {
        let t = alias(&t.trim().to_lowercase());
        if !out.contains(&t) {
            out.push(t);
        }
    };
    match s.get("type") {
        Some(Value::String(t)) => add(t),
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).for_each(&mut add),
        _ => {}
    }
    if let Some(Value::Array(values)) = s.get("enum") {
        for v in values {
            add(match v {
                Value::Null => "null",
                Value::Bool(_) => "boolean",
                Value::Number(n) if n.is_f64() => "number",
                Value::Number(_) => "integer",
                Value::String(_) => "string",
                Value::Array(_) => "array",
                Value::Object(_) => "object",
            });
        }
    }
    for key in ["anyOf", "oneOf", "allOf"] {
        if let Some(Value::Array(choices)) = s.get(key) {
            for c in choices {
                collect_types(c, out);
            }
        }
    }
}

fn alias(t: &str) -> String {
    match t {
        "str" | "text" | "varchar" | "char" | "enum" => "string",
        "int" | "int32" | "int64" | "uint" | "uint32" | "uint64" | "long" | "short"
        | "unsigned" => "integer",
        "float" | "float32" | "float64" | "double" => "number",
        "bool" => "boolean",
        "dict" => "object",
        "arr" | "list" | "sequence" => "array",
        other => other,
    }
    .to_string()
}

/// `coerce_to_schema_type`: the first of the allowed types, in priority order, that reads `s`.
pub fn coerce_str(s: &str, types: &[String]) -> Value {
    let allows = |t: &str| types.iter().any(|x| x == t);
    for candidate in [
        "null", "integer", "number", "boolean", "object", "array", "string",
    ] {
        if !allows(candidate) {
            continue;
        }
        let read = match candidate {
            "null" => (s.to_lowercase() == "null").then_some(Value::Null),
            "string" => return Value::String(s.to_string()),
            "integer" => python_int(s).map(Value::from),
            "number" => python_float(s)
                .filter(|f| f.is_finite())
                .map(integral_or_float),
            "boolean" => match s.trim().to_lowercase().as_str() {
                "true" | "1" => Some(Value::Bool(true)),
                "false" | "0" => Some(Value::Bool(false)),
                _ => None,
            },
            _ => serde_json::from_str::<Value>(s).ok(),
        };
        if let Some(v) = read {
            return v;
        }
    }
    serde_json::from_str::<Value>(s).unwrap_or_else(|_| Value::String(s.to_string()))
}

/// `val if val != int(val) else int(val)`.
fn integral_or_float(f: f64) -> Value {
    if f.fract() == 0.0 && f.abs() < 9.2e18 {
        Value::from(f as i64)
    } else {
        serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)
    }
}

/// Python's `int(str)`: surrounding whitespace, a sign, underscores between digits.
fn python_int(s: &str) -> Option<i64> {
    let t = s.trim();
    let digits = t.strip_prefix(['+', '-']).unwrap_or(t);
    let ok = !digits.is_empty()
        && !digits.starts_with('_')
        && !digits.ends_with('_')
        && !digits.contains("__")
        && digits.chars().all(|c| c.is_ascii_digit() || c == '_');
    ok.then(|| t.replace('_', "").parse().ok()).flatten()
}

/// Python's `float(str)`: also `inf`, `nan`, `1_000.5`, surrounding whitespace.
fn python_float(s: &str) -> Option<f64> {
    let t = s.trim();
    if t.contains("__") || t.starts_with('_') || t.ends_with('_') {
        return None;
    }
    let t = t.replace('_', "");
    let lower = t.to_lowercase();
    let body = lower.trim_start_matches(['+', '-']);
    if ["inf", "infinity", "nan"].contains(&body) {
        return Some(f64::INFINITY); // not finite: refused by the caller either way
    }
    let numeric = !body.is_empty()
        && body
            .chars()
            .all(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | '+' | '-'));
    numeric.then(|| t.parse().ok()).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn typed(raw: &str, schema: Value) -> Value {
        coerce_str(raw, &types_of(&schema))
    }

    /// The table vLLM 0.32's own `coerce_to_schema_type` gave on these inputs (run unmodified
    /// in docs/research/call-formats.md's harness).
    #[test]
    fn strings_are_typed_as_vllm_types_them() {
        let cases = [
            ("42", json!({"type": "integer"}), json!(42)),
            ("4.5", json!({"type": "integer"}), json!(4.5)),
            ("abc", json!({"type": "integer"}), json!("abc")),
            ("007", json!({"type": "integer"}), json!(7)),
            ("5.0", json!({"type": "number"}), json!(5)),
            ("1e999", json!({"type": "number"}), json!("1e999")),
            ("TRUE", json!({"type": "boolean"}), json!(true)),
            ("1", json!({"type": "boolean"}), json!(true)),
            ("yes", json!({"type": "boolean"}), json!("yes")),
            ("null", json!({"type": "string"}), json!("null")),
            ("null", json!({"type": ["string", "null"]}), Value::Null),
            ("None", json!({"type": ["string", "null"]}), json!("None")),
            ("{'k': 1}", json!({"type": "object"}), json!("{'k': 1}")),
            ("[1,2]", json!({"type": "array"}), json!([1, 2])),
            ("[1,2]", json!({"type": "string"}), json!("[1,2]")),
            ("42", json!({"type": ["integer", "string"]}), json!(42)),
            ("17", json!({}), json!("17")),
            ("2", json!({"enum": [1, 2]}), json!(2)),
            ("1_000", json!({"type": "int"}), json!(1000)),
        ];
        for (raw, schema, want) in cases {
            assert_eq!(typed(raw, schema.clone()), want, "{raw:?} as {schema}");
        }
    }

    #[test]
    fn json_values_are_retyped_and_nested_only_where_the_schema_says() {
        let props = json!({
            "s": {"type": "string"}, "i": {"type": "integer"}, "f": {"type": "integer"},
            "o": {"type": "object", "properties": {"n": {"type": "integer"}}},
            "p": {"type": "object"}, "a": {"type": "array", "items": {"type": "integer"}},
        });
        let mut args = json!({"s": 5, "i": "7", "f": 2.0, "o": {"n": "5"}, "p": {"n": "5"},
            "a": ["1", 2], "extra": "x", "t": true})
        .as_object()
        .cloned()
        .unwrap();
        let silent = type_arguments(&mut args, props.as_object().unwrap());
        assert_eq!(
            Value::Object(args),
            json!({"s": "5", "i": 7, "f": 2.0, "o": {"n": 5}, "p": {"n": "5"}, "a": [1, 2],
                "extra": "x", "t": true})
        );
        assert_eq!(silent, vec!["extra".to_string(), "t".to_string()]);
    }

    #[test]
    fn a_tool_is_found_by_name_in_either_shape() {
        let tools = vec![
            json!({"type": "function", "function": {"name": "a", "parameters": {"properties": {"x": {}}}}}),
            json!({"name": "b", "parameters": {"type": "object", "properties": {}}}),
        ];
        assert!(properties(&tools, "a").is_some());
        assert!(properties(&tools, "b").is_none(), "no properties: silent");
        assert!(properties(&tools, "c").is_none());
    }
}
