//! What transformers 5 does to the inputs before and after rendering
//! (`apply_chat_template` + `render_jinja_template`).
use serde_json::{Map, Value as Json};

use super::pymethods::py_strip;
use super::TemplateError;

/// Names a message's reasoning is passed under; the first is the one templates read.
pub const REASONING_FIELDS: [&str; 3] = ["reasoning_content", "thinking", "reasoning"];

/// The tag transformers appends to the message being continued.
pub const CONTINUE_TAG: &str = "CONTINUE_FINAL_MESSAGE_TAG ";

/// Error message transformers raises for `continue_final_message` + `add_generation_prompt`.
pub const CFM_WITH_AGP: &str = "continue_final_message and add_generation_prompt are not compatible. Use \
continue_final_message when you want the model to continue the final message, and add_generation_prompt when you \
want to add a header that will prompt it to start a new assistant message instead.";

/// Template keyword arguments that `extra` may not override.
pub const RESERVED: [&str; 4] = ["messages", "tools", "documents", "add_generation_prompt"];

fn input(msg: impl Into<String>) -> TemplateError {
    TemplateError::Input(msg.into())
}

/// Python `repr` of a JSON value, for error messages.
fn json_repr(v: &Json) -> String {
    super::pyrepr::py_repr(&super::values::from_json(v))
}

/// v5: drop `None`-valued keys of every message (`{k: v for k, v in msg.items() if v is not None}`).
pub fn drop_none_keys(messages: &[Json]) -> Result<Vec<Map<String, Json>>, TemplateError> {
    messages
        .iter()
        .map(|m| match m {
            Json::Object(map) => Ok(map
                .iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()),
            other => Err(input(format!(
                "Chat messages should be dicts, dataclasses or pydantic models, but got {}.",
                json_repr(other)
            ))),
        })
        .collect()
}

/// v5 `_alias_reasoning_fields`: `{"thinking": r, **message, "reasoning_content": r}` where `r`
/// is the first non-None of `reasoning_content`, `thinking`, `reasoning`.
pub fn alias_reasoning_fields(message: Map<String, Json>) -> Map<String, Json> {
    let reasoning = REASONING_FIELDS
        .iter()
        .find_map(|k| message.get(*k).filter(|v| !v.is_null()).cloned());
    let Some(reasoning) = reasoning else {
        return message;
    };
    let mut out = Map::new();
    out.insert("thinking".to_string(), reasoning.clone());
    for (k, v) in message {
        out.insert(k, v);
    }
    out.insert("reasoning_content".to_string(), reasoning);
    out
}

/// Validates `tools` like `render_jinja_template` (each must be a JSON-schema dict).
pub fn check_tools(tools: &Option<Json>) -> Result<Option<Json>, TemplateError> {
    match tools {
        None | Some(Json::Null) => Ok(None),
        Some(Json::Array(items)) => {
            if items.iter().all(Json::is_object) {
                Ok(Some(Json::Array(items.clone())))
            } else {
                Err(input(
                    "Tools should either be a JSON schema, or a callable function with type hints and a docstring \
                     suitable for auto-conversion to a schema.",
                ))
            }
        }
        Some(Json::Object(_)) | Some(Json::String(_)) => Err(input(
            "Tools should either be a JSON schema, or a callable function with type hints and a docstring suitable \
             for auto-conversion to a schema.",
        )),
        Some(other) => Err(input(format!("'{}' object is not iterable", json_type(other)))),
    }
}

/// Validates `documents` like `render_jinja_template` (each must be a dict).
pub fn check_documents(documents: &Option<Json>) -> Result<Option<Json>, TemplateError> {
    match documents {
        None | Some(Json::Null) => Ok(None),
        Some(Json::Array(items)) if items.iter().all(Json::is_object) => {
            Ok(Some(Json::Array(items.clone())))
        }
        Some(_) => Err(input(
            "Documents should be a list of dicts with 'title' and 'text' keys!",
        )),
    }
}

fn json_type(v: &Json) -> &'static str {
    match v {
        Json::Null => "NoneType",
        Json::Bool(_) => "bool",
        Json::Number(n) if n.is_f64() => "float",
        Json::Number(_) => "int",
        Json::String(_) => "str",
        Json::Array(_) => "list",
        Json::Object(_) => "dict",
    }
}

/// Appends the continuation tag to the final message, as transformers does for
/// `continue_final_message=True` (field `"content"`). Returns the text to look for afterwards.
pub fn tag_final_message(
    chat: &mut [Map<String, Json>],
    template_source: &str,
) -> Result<String, TemplateError> {
    let field = "content";
    let Some(last) = chat.last_mut() else {
        return Err(input(
            "continue_final_message is set but the conversation is empty!",
        ));
    };
    let Some(final_message) = last.get_mut(field) else {
        return Err(input(format!(
            "continue_final_message is set but the final message has no \"{field}\" to continue!"
        )));
    };
    if !template_source.contains(field) {
        return Err(input(format!(
            "continue_final_message is set to \"{field}\" but this is not an accepted field in the chat_template"
        )));
    }
    match final_message {
        Json::Array(blocks) => {
            for block in blocks.iter_mut().rev() {
                let has_text = match block {
                    Json::Object(map) => map.contains_key("text"),
                    Json::String(s) => s.contains("text"),
                    Json::Array(items) => items.iter().any(|i| i.as_str() == Some("text")),
                    other => {
                        return Err(input(format!(
                            "argument of type '{}' is not iterable",
                            json_type(other)
                        )))
                    }
                };
                if !has_text {
                    continue;
                }
                let Json::Object(map) = block else {
                    return Err(input(format!(
                        "{} indices must be integers or slices, not str",
                        json_type(block)
                    )));
                };
                return match map.get_mut("text") {
                    Some(Json::String(text)) => {
                        let original = text.clone();
                        text.push_str(CONTINUE_TAG);
                        Ok(original)
                    }
                    Some(other) => Err(input(format!(
                        "unsupported operand type(s) for +: '{}' and 'str'",
                        json_type(other)
                    ))),
                    None => Err(input(
                        "continue_final_message could not find the text block",
                    )),
                };
            }
            Err(input(
                "continue_final_message is set but we could not find any text to continue in the final message!",
            ))
        }
        Json::String(text) => {
            let original = text.clone();
            text.push_str(CONTINUE_TAG);
            Ok(original)
        }
        other => Err(input(format!(
            "unsupported operand type(s) for +: '{}' and 'str'",
            json_type(other)
        ))),
    }
}

/// Cuts the render at the continuation tag (transformers' post-processing).
pub fn cut_at_tag(rendered: &str, final_message: &str) -> Result<String, TemplateError> {
    let needle = py_strip(final_message, None, true, true);
    let tag = CONTINUE_TAG.trim_end();
    if !rendered.contains(needle) || !rendered.contains(tag) {
        return Err(TemplateError::Render(format!(
            "continue_final_message is set but the final message does not appear in the chat after applying the \
             chat template! This can happen if the chat template deletes portions of the final message. Please \
             verify the chat template and final message in your chat to ensure they are compatible.Final message \
             to continue: {needle}\nRendered chat:\n{rendered}"
        )));
    }
    let tag_loc = rendered.rfind(tag).unwrap_or(rendered.len());
    if rendered[tag_loc..].starts_with(CONTINUE_TAG) {
        Ok(rendered[..tag_loc].to_string())
    } else {
        Ok(py_strip(&rendered[..tag_loc], None, false, true).to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Json) -> Map<String, Json> {
        match v {
            Json::Object(m) => m,
            _ => Map::new(),
        }
    }

    #[test]
    fn aliasing_order_and_precedence() {
        let m = alias_reasoning_fields(obj(
            json!({"role": "assistant", "reasoning": "r", "content": "c"}),
        ));
        assert_eq!(
            Json::Object(m).to_string(),
            json!({"thinking": "r", "role": "assistant", "reasoning": "r", "content": "c", "reasoning_content": "r"})
                .to_string()
        );
        let m = alias_reasoning_fields(obj(
            json!({"thinking": "t", "role": "a", "reasoning_content": "rc"}),
        ));
        assert_eq!(
            Json::Object(m).to_string(),
            json!({"thinking": "t", "role": "a", "reasoning_content": "rc"}).to_string()
        );
        let m = alias_reasoning_fields(obj(
            json!({"role": "a", "reasoning_content": "", "thinking": "t"}),
        ));
        assert_eq!(
            Json::Object(m).to_string(),
            json!({"thinking": "t", "role": "a", "reasoning_content": ""}).to_string()
        );
    }

    #[test]
    fn cut_keeps_or_strips() {
        assert_eq!(
            cut_at_tag("A: hi CONTINUE_FINAL_MESSAGE_TAG </s>", "hi").unwrap(),
            "A: hi "
        );
        assert_eq!(
            cut_at_tag("A: hi CONTINUE_FINAL_MESSAGE_TAG</s>", "hi").unwrap(),
            "A: hi"
        );
        assert!(cut_at_tag("A: </s>", "hi").is_err());
    }
}
