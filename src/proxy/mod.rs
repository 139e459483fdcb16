//! The client boundary: `chatgate proxy` sits between a real client and the server, records
//! both sides, and can serve hostile-but-legal SSE to test the client's stream handling.
