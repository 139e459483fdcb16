//! The OpenAI-compatible HTTP target (reqwest + rustls): chat and completions, plain and
//! streamed, with a monotonic timestamp per event, and server introspection where it exists.
