//! Writing a report file: atomically, and with any API key a server echoed redacted.
use std::path::Path;

use crate::error::Result;

/// Reports are outputs, not accepted state, but a half-written file still confuses CI: write
/// through a temporary file beside the target. A server that echoed the API key gets it into
/// findings: every report is redacted.
pub fn write(path: &Path, text: &str) -> Result<()> {
    crate::files::write_atomic(path, redact(text).as_bytes())
}

pub fn redact(text: &str) -> std::borrow::Cow<'_, str> {
    crate::secrets::redact(text)
}
