//! A practical subset of JSON Schema for the `json-schema` comparator.
//!
//! Replies that must be JSON (structured output, tool arguments) need shape checks, not full
//! draft-2020 semantics: `type` (one or a list), `properties`, `required`, `items`, `enum`,
//! `const`, `additionalProperties: false` (or a schema), `minimum`/`maximum`,
//! `minLength`/`maxLength`, `minItems`/`maxItems`. A keyword outside the subset is rejected by
//! [`check_schema`] up front rather than silently ignored, so a suite never believes a
//! constraint is checked when it is not. (A full validator crate such as `jsonschema` pulls in
//! a large dependency tree for features a reply gate does not need.)
use serde_json::{Map, Value};

const KEYWORDS: &[&str] = &[
    "type",
    "properties",
    "required",
    "items",
    "enum",
    "const",
    "additionalProperties",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    // Annotations: carry no constraint.
    "$schema",
    "$id",
    "title",
    "description",
    "default",
    "examples",
];

const TYPES: &[&str] = &[
    "object", "array", "string", "number", "integer", "boolean", "null",
];

/// Reject schemas this subset cannot honour (unknown keywords, unknown types, wrong shapes).
pub fn check_schema(schema: &Value) -> Result<(), String> {
    check_at(schema, "#")
}

fn check_at(schema: &Value, at: &str) -> Result<(), String> {
    let obj = match schema {
        Value::Bool(_) => return Ok(()),
        Value::Object(o) => o,
        _ => return Err(format!("{at}: a schema is an object or a boolean")),
    };
    for (key, value) in obj {
        if !KEYWORDS.contains(&key.as_str()) {
            return Err(format!(
                "{at}: keyword `{key}` is not supported (supported: {})",
                KEYWORDS[..13].join(", ")
            ));
        }
        check_keyword(key, value, &format!("{at}/{key}"))?;
    }
    Ok(())
}

fn check_keyword(key: &str, value: &Value, at: &str) -> Result<(), String> {
    match key {
        "type" => {
            let names: Vec<&Value> = match value {
                Value::Array(a) => a.iter().collect(),
                v => vec![v],
            };
            for n in names {
                match n.as_str() {
                    Some(t) if TYPES.contains(&t) => {}
                    _ => return Err(format!("{at}: unknown type {n}")),
                }
            }
        }
        "properties" => {
            let props = value
                .as_object()
                .ok_or_else(|| format!("{at}: must be an object"))?;
            for (name, sub) in props {
                check_at(sub, &format!("{at}/{name}"))?;
            }
        }
        "items" | "additionalProperties" => check_at(value, at)?,
        "required"
            if !value
                .as_array()
                .is_some_and(|a| a.iter().all(Value::is_string)) =>
        {
            return Err(format!("{at}: must be a list of property names"));
        }
        "enum" if !value.is_array() => return Err(format!("{at}: must be a list")),
        "minimum" | "maximum" if !value.is_number() => {
            return Err(format!("{at}: must be a number"))
        }
        "minLength" | "maxLength" | "minItems" | "maxItems" if !value.is_u64() => {
            return Err(format!("{at}: must be a non-negative integer"))
        }
        _ => {}
    }
    Ok(())
}

/// Validate `value` against `schema`; every violation as "path: problem" (empty when valid).
pub fn validate(schema: &Value, value: &Value) -> Vec<String> {
    let mut errors = Vec::new();
    validate_at(schema, value, "$", &mut errors);
    errors
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn type_matches(expected: &str, v: &Value) -> bool {
    let actual = type_name(v);
    expected == actual
        || (expected == "number" && actual == "integer")
        || (expected == "integer" && v.as_f64().is_some_and(|f| f.fract() == 0.0))
}

fn validate_at(schema: &Value, value: &Value, at: &str, errors: &mut Vec<String>) {
    let obj = match schema {
        Value::Bool(true) => return,
        Value::Bool(false) => {
            errors.push(format!("{at}: no value is allowed here"));
            return;
        }
        Value::Object(o) => o,
        _ => return,
    };
    if let Some(t) = obj.get("type") {
        let expected: Vec<&str> = match t {
            Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
            v => v.as_str().into_iter().collect(),
        };
        if !expected.iter().any(|e| type_matches(e, value)) {
            errors.push(format!(
                "{at}: expected {}, found {}",
                expected.join(" or "),
                type_name(value)
            ));
            return;
        }
    }
    if let Some(Value::Array(options)) = obj.get("enum") {
        if !options.contains(value) {
            errors.push(format!(
                "{at}: {value} is not one of {}",
                Value::Array(options.clone())
            ));
        }
    }
    if let Some(c) = obj.get("const") {
        if c != value {
            errors.push(format!("{at}: expected {c}, found {value}"));
        }
    }
    match value {
        Value::Object(map) => validate_object(obj, map, at, errors),
        Value::Array(items) => validate_array(obj, items, at, errors),
        Value::String(s) => validate_string(obj, s, at, errors),
        Value::Number(n) => validate_number(obj, n.as_f64().unwrap_or(f64::NAN), at, errors),
        _ => {}
    }
}

fn validate_object(
    schema: &Map<String, Value>,
    map: &Map<String, Value>,
    at: &str,
    errors: &mut Vec<String>,
) {
    let props = schema.get("properties").and_then(Value::as_object);
    if let Some(Value::Array(required)) = schema.get("required") {
        for name in required.iter().filter_map(Value::as_str) {
            if !map.contains_key(name) {
                errors.push(format!("{at}: missing required property `{name}`"));
            }
        }
    }
    for (key, v) in map {
        let path = format!("{at}.{key}");
        match (
            props.and_then(|p| p.get(key)),
            schema.get("additionalProperties"),
        ) {
            (Some(sub), _) => validate_at(sub, v, &path, errors),
            (None, Some(Value::Bool(false))) => {
                errors.push(format!("{at}: property `{key}` is not allowed"))
            }
            (None, Some(extra)) => validate_at(extra, v, &path, errors),
            (None, None) => {}
        }
    }
}

fn validate_array(
    schema: &Map<String, Value>,
    items: &[Value],
    at: &str,
    errors: &mut Vec<String>,
) {
    if let Some(item_schema) = schema.get("items") {
        for (i, item) in items.iter().enumerate() {
            validate_at(item_schema, item, &format!("{at}[{i}]"), errors);
        }
    }
    bound(
        schema,
        "minItems",
        "maxItems",
        items.len(),
        "items",
        at,
        errors,
    );
}

fn validate_string(schema: &Map<String, Value>, s: &str, at: &str, errors: &mut Vec<String>) {
    bound(
        schema,
        "minLength",
        "maxLength",
        s.chars().count(),
        "characters",
        at,
        errors,
    );
}

fn bound(
    schema: &Map<String, Value>,
    min_key: &str,
    max_key: &str,
    len: usize,
    unit: &str,
    at: &str,
    errors: &mut Vec<String>,
) {
    if let Some(min) = schema.get(min_key).and_then(Value::as_u64) {
        if (len as u64) < min {
            errors.push(format!("{at}: {len} {unit}, fewer than {min_key} {min}"));
        }
    }
    if let Some(max) = schema.get(max_key).and_then(Value::as_u64) {
        if (len as u64) > max {
            errors.push(format!("{at}: {len} {unit}, more than {max_key} {max}"));
        }
    }
}

fn validate_number(schema: &Map<String, Value>, n: f64, at: &str, errors: &mut Vec<String>) {
    if let Some(min) = schema.get("minimum").and_then(Value::as_f64) {
        if n < min {
            errors.push(format!("{at}: {n} is below the minimum {min}"));
        }
    }
    if let Some(max) = schema.get("maximum").and_then(Value::as_f64) {
        if n > max {
            errors.push(format!("{at}: {n} is above the maximum {max}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "city": {"type": "string", "minLength": 2, "maxLength": 20},
                "temp": {"type": "number", "minimum": -90, "maximum": 60},
                "unit": {"enum": ["C", "F"]},
                "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
                "count": {"type": "integer"}
            },
            "required": ["city", "temp"],
            "additionalProperties": false
        })
    }

    #[test]
    fn a_conforming_value_has_no_violations() {
        let v = json!({"city": "Paris", "temp": 21.5, "unit": "C", "tags": ["a"], "count": 3});
        assert_eq!(validate(&schema(), &v), Vec::<String>::new());
    }

    #[test]
    fn every_keyword_reports_its_violation() {
        let v = json!({"city": "P", "temp": 100, "unit": "K", "tags": ["a", 1, "c"], "count": 1.5, "extra": true});
        let errors = validate(&schema(), &v).join("\n");
        for expected in [
            "$.city: 1 characters, fewer than minLength 2",
            "$.temp: 100 is above the maximum 60",
            "$.unit: \"K\" is not one of",
            "$.tags[1]: expected string, found integer",
            "$.tags: 3 items, more than maxItems 2",
            "$.count: expected integer, found number",
            "$: property `extra` is not allowed",
        ] {
            assert!(
                errors.contains(expected),
                "missing {expected:?} in\n{errors}"
            );
        }
        let missing = validate(&schema(), &json!({"city": "Paris"})).join("\n");
        assert!(
            missing.contains("missing required property `temp`"),
            "{missing}"
        );
        assert_eq!(
            validate(&schema(), &json!([1])),
            vec!["$: expected object, found array"]
        );
    }

    #[test]
    fn unsupported_keywords_are_rejected_up_front() {
        assert!(check_schema(&schema()).is_ok());
        let e = check_schema(&json!({"type": "object", "properties": {"a": {"pattern": "x"}}}))
            .unwrap_err();
        assert!(
            e.contains("#/properties/a: keyword `pattern` is not supported"),
            "{e}"
        );
        assert!(check_schema(&json!({"type": "decimal"})).is_err());
        assert!(check_schema(&json!({"required": "a"})).is_err());
        assert!(check_schema(&json!("string")).is_err());
    }
}
