//! Hostile-but-legal SSE: the same payloads a server sent, framed the way a spec-correct client
//! must accept but a naive one (split on `\n\n`, `strip_prefix("data: ")`, decode every read as
//! UTF-8) breaks on.
//!
//! Only framing that preserves every `data` payload is used: `: keep-alive` comments between
//! events, `id:` fields, LF / CRLF / CR line endings in turn, `data:` with and without the
//! optional space, extra blank lines, and reads of a few bytes each that split multi-byte UTF-8
//! characters (and CRLF pairs). Multi-line `data:` is only used where the payload itself holds
//! a `\n`, because splitting a line would change the payload.
use crate::endpoint::sse::SseEvent;

/// How hostile the framing is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostileSse {
    /// The size of every read the client gets (at least 1).
    pub chunk_bytes: usize,
}

impl Default for HostileSse {
    fn default() -> Self {
        HostileSse { chunk_bytes: 1 }
    }
}

/// The line ending of the `k`-th event: LF, CRLF and CR in turn.
fn eol(k: usize) -> &'static str {
    ["\n", "\r\n", "\r"][k % 3]
}

/// The `(event, id, data)` of a dispatched message; `None` for a comment, which is not re-framed.
fn fields(ev: &SseEvent) -> Option<(Option<&str>, Option<&str>, &str)> {
    match ev {
        SseEvent::Message { event, data, id } => Some((event.as_deref(), id.as_deref(), data)),
        SseEvent::Comment(_) => None,
    }
}

/// The `k`-th event (0-based) of a stream, framed hostilely. Every framing choice rotates with
/// `k`, so any stream of a few events exercises all of them. A comment frames to nothing (the
/// framing adds its own).
pub fn frame_event(ev: &SseEvent, k: usize) -> Vec<u8> {
    let Some((event, id, data)) = fields(ev) else {
        return Vec::new();
    };
    let nl = eol(k);
    let mut out = String::new();
    out.push_str(": keep-alive");
    out.push_str(nl);
    if k % 2 == 1 {
        out.push_str(": chatgate hostile-sse");
        out.push_str(nl);
    }
    if let Some(event) = event {
        out.push_str(&format!("event: {event}{nl}"));
    }
    match id {
        Some(id) => out.push_str(&format!("id: {id}{nl}")),
        None if k % 2 == 0 => out.push_str(&format!("id: {k}{nl}")),
        None => {}
    }
    for (j, line) in data.split('\n').enumerate() {
        // Without the space only when that cannot change the value: the spec strips one
        // leading space, so a payload line that starts with a space keeps the `data: ` form.
        let bare = (k + j) % 2 == 1 && !line.starts_with(' ');
        out.push_str(if bare { "data:" } else { "data: " });
        out.push_str(line);
        out.push_str(nl);
    }
    out.push_str(nl);
    if k % 4 == 3 {
        out.push_str(nl);
    }
    out.into_bytes()
}

/// Where to cut `bytes` into reads: every `chunk` bytes, plus inside every multi-byte UTF-8
/// character that no regular cut already splits.
pub fn cut_points(bytes: &[u8], chunk: usize) -> Vec<usize> {
    let chunk = chunk.max(1);
    let mut cuts: Vec<usize> = (chunk..bytes.len()).step_by(chunk).collect();
    let mut i = 0;
    while i < bytes.len() {
        let len = utf8_len(bytes[i]);
        if len > 1 && i + len <= bytes.len() {
            let split = cuts.iter().any(|&c| c > i && c < i + len);
            if !split {
                cuts.push(i + 1);
            }
        }
        i += len.max(1);
    }
    cuts.sort_unstable();
    cuts.dedup();
    cuts
}

/// The length of the UTF-8 sequence a lead byte starts (1 for ASCII and stray bytes).
fn utf8_len(lead: u8) -> usize {
    match lead {
        0xC0..=0xDF => 2,
        0xE0..=0xEF => 3,
        0xF0..=0xF7 => 4,
        _ => 1,
    }
}

/// `bytes` as the reads a hostile server sends.
pub fn split_reads(bytes: &[u8], chunk: usize) -> Vec<Vec<u8>> {
    let mut reads = Vec::new();
    let mut from = 0;
    for cut in cut_points(bytes, chunk) {
        reads.push(bytes[from..cut].to_vec());
        from = cut;
    }
    if from < bytes.len() {
        reads.push(bytes[from..].to_vec());
    }
    reads
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::endpoint::sse::SseParser;

    fn ev(data: &str) -> SseEvent {
        SseEvent::Message {
            event: None,
            data: data.into(),
            id: None,
        }
    }

    /// The data payloads of the messages (comments skipped, as the proxy skips them).
    fn datas(evs: &[SseEvent]) -> Vec<&str> {
        evs.iter().filter_map(fields).map(|(_, _, d)| d).collect()
    }

    fn parse_all(bytes: &[u8]) -> Vec<SseEvent> {
        SseParser::new().push(bytes)
    }

    // What the proxy relies on from the shared reader (these were the old proxy parser's tests).

    #[test]
    fn line_endings_comments_and_optional_space() {
        let s = b"\xEF\xBB\xBF: hi\r\ndata:{\"a\":1}\r\n\r\ndata: x\rdata:  y\r\r\n\n: c\nid: 7\nevent: e\ndata: z\n\n";
        let evs = parse_all(s);
        assert_eq!(datas(&evs), vec!["{\"a\":1}", "x\n y", "z"]);
        let (event, id, _) = evs.iter().filter_map(fields).nth(2).unwrap();
        assert_eq!(id, Some("7"));
        assert_eq!(event, Some("e"));
    }

    #[test]
    fn byte_by_byte_equals_whole() {
        let s = "data: héllo 日本\r\n\r\n: keep-alive\rdata: [DONE]\r\r".as_bytes();
        let mut p = SseParser::new();
        let mut evs = Vec::new();
        for b in s {
            evs.extend(p.push(std::slice::from_ref(b)));
        }
        assert_eq!(evs, parse_all(s));
        assert_eq!(datas(&evs), vec!["héllo 日本", "[DONE]"]);
    }

    #[test]
    fn blank_blocks_and_unterminated_tail_dispatch_nothing() {
        let mut p = SseParser::new();
        let evs = p.push(b"\n\nid: 1\n\n: only a comment\n\ndata: tail");
        assert!(datas(&evs).is_empty());
        assert!(p.finish().is_empty());
        assert!(p.incomplete().is_some_and(|i| i.partial_line));
    }

    /// The shared reader reports the last event id (as a client's `lastEventId`), not the
    /// block's own `id:` line, so an upstream id is re-framed on every later event too.
    #[test]
    fn an_upstream_id_carries_to_later_events() {
        let evs = parse_all(b"id: 7\ndata: a\n\ndata: b\n\n");
        let framed = String::from_utf8(frame_event(&evs[1], 2)).unwrap();
        assert!(framed.contains("id: 7\r"), "{framed:?}");
    }

    #[test]
    fn a_comment_frames_to_nothing() {
        assert!(frame_event(&SseEvent::Comment(" keep-alive".into()), 0).is_empty());
    }

    #[test]
    fn reframed_reads_reassemble_to_the_same_payloads() {
        let events = [
            ev("{\"x\":\"héllo 日本 🎉\"}"),
            ev(" leading space\nsecond line"),
            ev(""),
            ev("{\"y\":2}"),
            ev("[DONE]"),
        ];
        for chunk in [1, 2, 3, 7, 64] {
            let mut p = SseParser::new();
            let mut got = Vec::new();
            for (k, e) in events.iter().enumerate() {
                for read in split_reads(&frame_event(e, k), chunk) {
                    assert!(!read.is_empty() && read.len() <= chunk);
                    got.extend(p.push(&read));
                }
            }
            assert_eq!(datas(&got), datas(&events), "chunk {chunk}");
        }
    }

    #[test]
    fn every_multibyte_character_is_split() {
        let s = "aé日🎉b".as_bytes();
        let reads = split_reads(s, 64);
        assert!(reads.len() >= 4, "{reads:?}");
        for r in &reads[..reads.len() - 1] {
            assert!(
                std::str::from_utf8(r).is_err() || r.len() == 1,
                "read {r:?} does not end mid-character"
            );
        }
        assert_eq!(reads.concat(), s);
    }

    #[test]
    fn framing_uses_comments_ids_and_all_line_endings() {
        let all: Vec<u8> = (0..4).flat_map(|k| frame_event(&ev("{}"), k)).collect();
        let text = String::from_utf8(all).unwrap();
        assert!(text.contains(": keep-alive\n"));
        assert!(text.contains("\r\n"));
        assert!(text.contains("}\r\r"));
        assert!(text.contains("id: 0\n"));
        assert!(text.contains("data:{}"));
    }
}
