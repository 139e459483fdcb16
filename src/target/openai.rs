//! TEMPORARY STUB (replaced by the real HTTP target on merge).
use std::time::Duration;

use serde_json::{Map, Value};

use crate::replay::{ChatRequest, Record};

#[derive(Debug, Clone)]
pub struct HttpOptions {
    pub base_url: String,
    pub model: String,
    pub api_key_env: Option<String>,
    pub connect_timeout: Duration,
    pub read_timeout: Duration,
    pub total_timeout: Duration,
    pub extra_body: Map<String, Value>,
}
#[derive(Clone)]
pub struct HttpTarget;
pub struct RawResponse {
    pub status: u16,
    pub content_type: Option<String>,
    pub body: Vec<u8>,
    pub json: Option<Value>,
    pub elapsed: Duration,
}
#[derive(Debug)]
pub enum CallError {
    Connect { url: String, detail: String },
    Timeout { url: String, phase: &'static str, after: Duration },
    Status { url: String, status: u16, body: String },
    Protocol { url: String, detail: String },
    Interrupted { url: String, detail: String, partial: Box<Record> },
}
impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self:?}")
    }
}
impl CallError {
    pub fn unreachable(&self) -> bool {
        matches!(self, CallError::Connect { .. } | CallError::Timeout { .. })
    }
}
impl HttpTarget {
    pub fn new(_o: HttpOptions) -> crate::error::Result<HttpTarget> {
        Ok(HttpTarget)
    }
    pub async fn chat(&self, _r: &ChatRequest) -> Result<Record, CallError> {
        todo!()
    }
    pub async fn get(&self, _p: &str) -> Result<RawResponse, CallError> {
        todo!()
    }
    pub async fn post_json(&self, _p: &str, _b: &Value) -> Result<RawResponse, CallError> {
        todo!()
    }
    pub async fn post_bytes(&self, _p: &str, _b: Vec<u8>, _c: &str) -> Result<RawResponse, CallError> {
        todo!()
    }
    pub async fn tokenize_chat(&self, _m: &[Value], _t: Option<&[Value]>, _a: bool) -> Result<Option<Vec<u32>>, CallError> {
        todo!()
    }
}
