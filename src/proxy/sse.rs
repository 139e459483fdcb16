//! An incremental, spec-correct server-sent-events parser (WHATWG HTML §9.2.6).
//!
//! The proxy needs the upstream's events twice: to record the `data` payloads of a stream, and
//! to re-frame them as hostile-but-legal SSE. Both must see exactly what a correct client sees,
//! so this follows the spec rather than the common `strip_prefix("data: ")` shortcut: any of
//! CRLF, LF or CR ends a line (also when CR and LF arrive in different reads), a leading BOM is
//! dropped, comments are ignored, one space after the colon is optional, several `data:` lines
//! join with `\n`, and a blank line with no data dispatches nothing.

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    /// The `event:` field of this block, when it had one.
    pub event: Option<String>,
    /// The `id:` field of this block, when it had one.
    pub id: Option<String>,
    /// The data payload (the `data:` lines joined with `\n`).
    pub data: String,
}

/// Feed bytes with [`SseParser::push`] in whatever pieces they arrive; complete events come out.
#[derive(Debug, Default)]
pub struct SseParser {
    /// Bytes of the current, unfinished line.
    line: Vec<u8>,
    /// The previous read ended in CR: an LF at the start of the next read belongs to it.
    skip_lf: bool,
    /// Whether the start of the stream (and a possible BOM) has been handled.
    started: bool,
    data: String,
    event: Option<String>,
    id: Option<String>,
}

const BOM: &[u8] = b"\xEF\xBB\xBF";

impl SseParser {
    pub fn new() -> SseParser {
        SseParser::default()
    }

    /// Parse the next piece of the stream; returns the events it completed.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<SseEvent> {
        let mut out = Vec::new();
        for &b in bytes {
            if !self.started {
                // Hold back the stream's first bytes until we know whether they are a BOM.
                self.line.push(b);
                if BOM.starts_with(&self.line) && self.line.len() < BOM.len() {
                    continue;
                }
                self.started = true;
                let held = std::mem::take(&mut self.line);
                let rest = if held == BOM { &[][..] } else { &held[..] };
                for &h in rest {
                    self.byte(h, &mut out);
                }
                continue;
            }
            self.byte(b, &mut out);
        }
        out
    }

    fn byte(&mut self, b: u8, out: &mut Vec<SseEvent>) {
        if std::mem::take(&mut self.skip_lf) && b == b'\n' {
            return;
        }
        match b {
            b'\r' => {
                self.skip_lf = true;
                self.end_line(out);
            }
            b'\n' => self.end_line(out),
            _ => self.line.push(b),
        }
    }

    fn end_line(&mut self, out: &mut Vec<SseEvent>) {
        let line = std::mem::take(&mut self.line);
        if line.is_empty() {
            if let Some(ev) = self.dispatch() {
                out.push(ev);
            }
            return;
        }
        let text = String::from_utf8_lossy(&line);
        if text.starts_with(':') {
            return;
        }
        let (field, value) = match text.find(':') {
            Some(i) => {
                let v = &text[i + 1..];
                (&text[..i], v.strip_prefix(' ').unwrap_or(v))
            }
            None => (&text[..], ""),
        };
        match field {
            "data" => {
                self.data.push_str(value);
                self.data.push('\n');
            }
            "event" => self.event = Some(value.to_string()),
            "id" if !value.contains('\0') => self.id = Some(value.to_string()),
            _ => {}
        }
    }

    /// A blank line: dispatch the block's event if it carried data, and start a new block.
    fn dispatch(&mut self) -> Option<SseEvent> {
        let event = self.event.take();
        let id = self.id.take();
        if self.data.is_empty() {
            return None;
        }
        let mut data = std::mem::take(&mut self.data);
        data.pop();
        Some(SseEvent { event, id, data })
    }

    /// Bytes received after the last complete line (an unterminated tail at end of stream).
    pub fn pending(&self) -> &[u8] {
        &self.line
    }
}

/// Parse a whole stream at once.
pub fn parse_all(bytes: &[u8]) -> Vec<SseEvent> {
    SseParser::new().push(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn datas(evs: &[SseEvent]) -> Vec<&str> {
        evs.iter().map(|e| e.data.as_str()).collect()
    }

    #[test]
    fn line_endings_comments_and_optional_space() {
        let s = b"\xEF\xBB\xBF: hi\r\ndata:{\"a\":1}\r\n\r\ndata: x\rdata:  y\r\r\n\n: c\nid: 7\nevent: e\ndata: z\n\n";
        let evs = parse_all(s);
        assert_eq!(datas(&evs), vec!["{\"a\":1}", "x\n y", "z"]);
        assert_eq!(evs[2].id.as_deref(), Some("7"));
        assert_eq!(evs[2].event.as_deref(), Some("e"));
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
        assert!(p
            .push(b"\n\nid: 1\n\n: only a comment\n\ndata: tail")
            .is_empty());
        assert_eq!(p.pending(), b"data: tail");
    }
}
