//! An incremental Server-Sent Events reader (the WHATWG event-stream format).
//!
//! Servers frame streamed chat replies as SSE, and the ways they get the framing wrong (CR-only
//! line ends, keep-alive comments, a stream cut before its final blank line, UTF-8 split across
//! TCP reads) are exactly what the server boundary checks. So the reader follows the spec to
//! the letter and *reports* what a lenient reader would silently paper over: comments are
//! counted and an event left incomplete at end of stream is recorded (and, as the spec says,
//! not dispatched).
//!
//! Bytes are buffered until a whole line is available and only then decoded (lossily: invalid
//! UTF-8 becomes U+FFFD, never a panic), so a character split between reads is decoded whole.
//! Lines that arrive inside a single read are parsed straight from the caller's slice without
//! copying; the only allocations are the event payloads handed back.

/// One thing the stream dispatched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SseEvent {
    /// A dispatched event (a blank line ended a block that had at least one `data:` field).
    Message {
        /// The `event:` field; `None` means the default type, `message`.
        event: Option<String>,
        /// The `data:` fields joined with `\n`.
        data: String,
        /// The last event id seen so far (`id:`), if any was ever set to a non-empty value.
        id: Option<String>,
    },
    /// A comment line (`: keep-alive`): the text after the colon, verbatim.
    Comment(String),
}

/// What was pending when the stream closed: an event that never got its final blank line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Incomplete {
    /// The `data:` fields collected so far (joined with `\n`), plus the text of an
    /// unterminated last line.
    pub data: String,
    /// The last line had no line terminator.
    pub partial_line: bool,
}

const BOM: [u8; 3] = [0xEF, 0xBB, 0xBF];

/// The incremental parser. Feed it reads with [`SseParser::push`], then call
/// [`SseParser::finish`] when the stream closes.
#[derive(Debug, Default)]
pub struct SseParser {
    /// Bytes of the current, not yet terminated line.
    line: Vec<u8>,
    /// The previous read ended with `\r`: a `\n` at the start of the next read belongs to it.
    skip_lf: bool,
    /// The BOM check at stream start is over.
    started: bool,
    /// BOM bytes matched so far while not `started`.
    bom_len: usize,
    data: String,
    /// At least one `data:` field in the current block (data may be empty yet present).
    has_data: bool,
    event: Option<String>,
    last_id: Option<String>,
    retry: Option<u64>,
    comments: usize,
    dispatched: usize,
    bytes: u64,
    incomplete: Option<Incomplete>,
    finished: bool,
    invalid_utf8: usize,
}

impl SseParser {
    pub fn new() -> SseParser {
        SseParser::default()
    }

    /// Feed one read; returns the events it completed.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<SseEvent> {
        let mut out = Vec::new();
        self.push_into(bytes, &mut out);
        out
    }

    /// Like [`SseParser::push`], appending to a caller-owned buffer (no allocation per read).
    /// Bytes held for a line not terminated yet, plus the data of an event not dispatched yet.
    pub fn pending_line_len(&self) -> usize {
        self.line.len() + self.data.len()
    }

    pub fn push_into(&mut self, bytes: &[u8], out: &mut Vec<SseEvent>) {
        self.bytes += bytes.len() as u64;
        let rest = self.strip_bom(bytes, out);
        self.feed(rest, out);
    }

    /// The stream closed. Per the spec an event without its final blank line is discarded;
    /// it is recorded in [`SseParser::incomplete`] so callers can report it. Returns the
    /// events still dispatched at close (always none under the spec; kept for symmetry).
    pub fn finish(&mut self) -> Vec<SseEvent> {
        let mut out = Vec::new();
        if self.finished {
            return out;
        }
        self.finished = true;
        if !self.started && self.bom_len > 0 {
            // A stream shorter than a BOM that began like one: those bytes are content.
            self.started = true;
            let held = BOM[..self.bom_len].to_vec();
            self.feed(&held, &mut out);
        }
        let partial_line = !self.line.is_empty();
        if partial_line || self.has_data || self.event.is_some() {
            let mut data = std::mem::take(&mut self.data);
            if partial_line {
                data.push_str(&String::from_utf8_lossy(&self.line));
                self.line.clear();
            } else if data.ends_with('\n') {
                data.pop();
            }
            self.incomplete = Some(Incomplete { data, partial_line });
        }
        self.has_data = false;
        self.event = None;
        out
    }

    /// `data:` lines that were not valid UTF-8 (decoded with U+FFFD, as the SSE spec says; a
    /// server that cuts a multi-byte character between two events sends such lines).
    pub fn invalid_utf8_lines(&self) -> usize {
        self.invalid_utf8
    }

    /// Comment lines seen so far.
    pub fn comments(&self) -> usize {
        self.comments
    }

    /// Events dispatched so far (comments excluded).
    pub fn dispatched(&self) -> usize {
        self.dispatched
    }

    /// Bytes fed so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The last `retry:` value (the server's reconnection time in ms).
    pub fn retry(&self) -> Option<u64> {
        self.retry
    }

    /// The last event id (`id:`).
    pub fn last_event_id(&self) -> Option<&str> {
        self.last_id.as_deref()
    }

    /// After [`SseParser::finish`]: the event the stream closed in the middle of, if any.
    pub fn incomplete(&self) -> Option<&Incomplete> {
        self.incomplete.as_ref()
    }

    /// Drop one UTF-8 BOM at stream start, even when it is split across reads.
    fn strip_bom<'a>(&mut self, bytes: &'a [u8], out: &mut Vec<SseEvent>) -> &'a [u8] {
        if self.started {
            return bytes;
        }
        let mut i = 0;
        while i < bytes.len() && self.bom_len < 3 {
            if bytes[i] != BOM[self.bom_len] {
                // Not a BOM after all: the bytes held back are ordinary content.
                self.started = true;
                let held = self.bom_len;
                self.bom_len = 0;
                self.feed(&BOM[..held], out);
                return &bytes[i..];
            }
            self.bom_len += 1;
            i += 1;
        }
        if self.bom_len == 3 {
            self.started = true;
            self.bom_len = 0;
        }
        &bytes[i..]
    }

    /// Split into lines (CRLF, LF or CR) and interpret each.
    fn feed(&mut self, bytes: &[u8], out: &mut Vec<SseEvent>) {
        let mut rest = bytes;
        if self.skip_lf && !rest.is_empty() {
            self.skip_lf = false;
            if rest[0] == b'\n' {
                rest = &rest[1..];
            }
        }
        while let Some(i) = rest.iter().position(|&b| b == b'\n' || b == b'\r') {
            if self.line.is_empty() {
                self.line_done(&rest[..i], out);
            } else {
                self.line.extend_from_slice(&rest[..i]);
                let line = std::mem::take(&mut self.line);
                self.line_done(&line, out);
                self.line = line;
                self.line.clear();
            }
            let cr = rest[i] == b'\r';
            rest = &rest[i + 1..];
            if cr {
                match rest.first() {
                    None => self.skip_lf = true,
                    Some(b'\n') => rest = &rest[1..],
                    Some(_) => {}
                }
            }
        }
        self.line.extend_from_slice(rest);
    }

    /// Interpret one complete line (without its terminator).
    fn line_done(&mut self, line: &[u8], out: &mut Vec<SseEvent>) {
        if line.is_empty() {
            self.dispatch(out);
            return;
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(0) => {
                self.comments += 1;
                out.push(SseEvent::Comment(
                    String::from_utf8_lossy(&line[1..]).into_owned(),
                ));
                return;
            }
            Some(c) => {
                let v = &line[c + 1..];
                (&line[..c], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &line[..0]),
        };
        match field {
            b"data" => {
                let text = String::from_utf8_lossy(value);
                if matches!(text, std::borrow::Cow::Owned(_)) {
                    self.invalid_utf8 += 1;
                }
                self.data.push_str(&text);
                self.data.push('\n');
                self.has_data = true;
            }
            b"event" => self.event = Some(String::from_utf8_lossy(value).into_owned()),
            b"id" if !value.contains(&0) => {
                self.last_id = if value.is_empty() {
                    None
                } else {
                    Some(String::from_utf8_lossy(value).into_owned())
                };
            }
            b"retry" if !value.is_empty() && value.iter().all(u8::is_ascii_digit) => {
                self.retry = std::str::from_utf8(value).ok().and_then(|s| s.parse().ok());
            }
            _ => {}
        }
    }

    /// A blank line: dispatch the block if it had data, then reset the block.
    fn dispatch(&mut self, out: &mut Vec<SseEvent>) {
        let event = self.event.take();
        if !self.has_data {
            self.data.clear();
            return;
        }
        self.has_data = false;
        let mut data = std::mem::take(&mut self.data);
        if data.ends_with('\n') {
            data.pop();
        }
        self.dispatched += 1;
        out.push(SseEvent::Message {
            event,
            data,
            id: self.last_id.clone(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(events: &[SseEvent]) -> Vec<&str> {
        events
            .iter()
            .filter_map(|e| match e {
                SseEvent::Message { data, .. } => Some(data.as_str()),
                SseEvent::Comment(_) => None,
            })
            .collect()
    }

    #[test]
    fn cr_at_end_of_read_then_lf() {
        let mut p = SseParser::new();
        let mut ev = p.push(b"data: a\r");
        ev.extend(p.push(b"\n\r\n"));
        assert_eq!(data(&ev), ["a"]);
    }

    #[test]
    fn bom_split_and_false_bom() {
        let mut p = SseParser::new();
        let mut ev = p.push(&[0xEF]);
        ev.extend(p.push(&[0xBB, 0xBF]));
        ev.extend(p.push(b"data: x\n\n"));
        assert_eq!(data(&ev), ["x"]);
        let mut p = SseParser::new();
        let mut ev = p.push(&[0xEF, 0xBB]);
        ev.extend(p.push(b"data: y\n\n"));
        // The held bytes were not a BOM: they start the line, so the field is not `data`.
        assert!(data(&ev).is_empty());
    }
}
