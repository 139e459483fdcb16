//! What bounds one render, and the per-render state that enforces it: the limits a template
//! gets, the thread-local bookkeeping (output size, generation spans, the clock and the formats
//! `strftime_now` was called with), and the size-bounded output writer. The ground of the
//! engine: the Python-semantics modules report their size errors through it.
use std::cell::RefCell;
use std::io;

use minijinja::{Error, ErrorKind};

/// Bounds that keep a hostile template from hanging or exhausting the tool.
#[derive(Debug, Clone, Copy)]
pub struct RenderLimits {
    pub fuel: u64,
    pub max_recursion: usize,
    pub max_output_bytes: usize,
}

impl Default for RenderLimits {
    fn default() -> Self {
        RenderLimits {
            fuel: 5_000_000,
            max_recursion: 200,
            max_output_bytes: 16 << 20,
        }
    }
}

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

pub(crate) fn with_state<R>(f: impl FnOnce(&mut RenderState) -> R) -> Option<R> {
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

/// An engine error for an operation Python would refuse.
pub(crate) fn err(msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidOperation, msg.into())
}
