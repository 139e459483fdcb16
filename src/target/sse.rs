//! An incremental Server-Sent Events reader (the WHATWG event-stream format).
