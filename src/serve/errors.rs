//! OpenAI-shaped errors: `{"error": {"message", "type", "param", "code"}}` with the HTTP
//! status a client can act on. Client mistakes are 4xx, never 500.
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// OpenAI's `type`: "invalid_request_error", "not_found_error", "server_error".
    pub kind: &'static str,
    pub param: Option<String>,
    pub code: Option<&'static str>,
}

impl ApiError {
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            kind: "invalid_request_error",
            param: None,
            code: None,
        }
    }
    /// A field has the wrong type or value.
    pub fn invalid(param: &str, message: impl Into<String>) -> ApiError {
        ApiError::bad_request(message)
            .param(param)
            .code("invalid_value")
    }
    pub fn missing(param: &str) -> ApiError {
        ApiError::bad_request(format!("'{param}' is a required property"))
            .param(param)
            .code("missing_required_parameter")
    }
    pub fn malformed_json(detail: impl std::fmt::Display) -> ApiError {
        ApiError::bad_request(format!(
            "We could not parse the JSON body of your request: {detail}"
        ))
        .code("invalid_json")
    }
    pub fn unsupported(param: &str, message: impl Into<String>) -> ApiError {
        ApiError::bad_request(message)
            .param(param)
            .code("unsupported_value")
    }
    pub fn model_not_found(name: &str) -> ApiError {
        ApiError {
            status: StatusCode::NOT_FOUND,
            message: format!("The model `{name}` does not exist."),
            kind: "invalid_request_error",
            param: Some("model".into()),
            code: Some("model_not_found"),
        }
    }
    pub fn route_not_found(method: &str, path: &str) -> ApiError {
        ApiError {
            status: StatusCode::NOT_FOUND,
            message: format!("No route for {method} {path}"),
            kind: "not_found_error",
            param: None,
            code: Some("not_found"),
        }
    }
    pub fn method_not_allowed(method: &str, path: &str) -> ApiError {
        ApiError {
            status: StatusCode::METHOD_NOT_ALLOWED,
            message: format!("Method {method} is not allowed on {path}"),
            kind: "invalid_request_error",
            param: None,
            code: Some("method_not_allowed"),
        }
    }
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: message.into(),
            kind: "server_error",
            param: None,
            code: Some("internal_error"),
        }
    }
    pub fn param(mut self, param: &str) -> ApiError {
        self.param = Some(param.to_string());
        self
    }
    pub fn code(mut self, code: &'static str) -> ApiError {
        self.code = Some(code);
        self
    }
    pub fn body(&self) -> Value {
        json!({"error": {
            "message": self.message,
            "type": self.kind,
            "param": self.param,
            "code": self.code,
        }})
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.status.as_u16(), self.message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(self.body())).into_response()
    }
}
