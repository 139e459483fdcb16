//! The chat-template boundary: render Hugging Face chat templates exactly as transformers'
//! `apply_chat_template` does (transformers 5 semantics), on minijinja.
//!
//! How parity is reached (docs/architecture.md has the table of each jinja2 behaviour and its
//! bridge):
//! - `render`: `ChatTemplate`, compiled once and rendered per request;
//! - `env`: the jinja2 environment transformers builds (trim/lstrip blocks, lenient undefined,
//!   no autoescape), Python `str()` printing of every value; `globals` (`raise_exception`,
//!   `strftime_now`, v5 `dict`/`namespace`, `cycler`, `joiner`) and `filters` (jinja2 filter
//!   and test semantics where minijinja differs);
//! - `tojson`: `json.dumps` with transformers' keyword arguments;
//! - `pymethods` / `pyformat`: Python `str`/`dict`/`list` methods, `str.format`;
//! - `rewrite` + `pyops`: the template's `+ * % ~` and `for … in` are routed to Python semantics
//!   (markupsafe escaping on `'…'|safe + x`, printf `%`, iterating `None` fails); filters and
//!   tests jinja2 lacks are refused like jinja2 does;
//! - `generation`: `{% generation %}` rewritten to a filter block that records offsets exactly
//!   as transformers' `AssistantTracker` does;
//! - `inputs`: v5 preprocessing (None-dropping, reasoning aliasing) and `continue_final_message`;
//! - `limits`: bounded by fuel, recursion depth and output/string sizes.
mod env;
mod filters;
mod generation;
mod globals;
mod inputs;
mod limits;
mod pyformat;
mod pymethods;
mod pyops;
mod pyprintable;
mod pyrepr;
mod rewrite;
pub mod calls;
pub mod reply;
pub mod framing;
pub mod strftime;
mod tojson;
mod values;
/// Whether a template source contains `{% generation %}` tags (any whitespace-control form).
pub use generation::has_generation_tags as source_has_generation_tags;
pub use limits::RenderLimits;
/// Python's `repr(float)` (`1e-05`, `2.0`, `1e+16`), as templates print floats.
pub use pyrepr::float_repr as python_float_repr;

mod render;
pub use render::*;
