//! Hostile-but-legal SSE: the same payloads a server sent, framed the way a spec-correct client
//! must accept but a naive one (split on `\n\n`, `strip_prefix("data: ")`, decode every read as
//! UTF-8, dispatch on every blank line) breaks on.
//!
//! Each framing feature is a named [`Variant`], so a client that breaks can be told *which*
//! legal feature it cannot read (`chatgate client-probe` runs one variant at a time). Every
//! variant preserves every `data` payload byte for byte and every dispatched event: only the
//! framing around them changes (comments, ids, retry, blank lines, line endings, where the reads
//! are cut). Multi-line `data:` is only used where the payload itself holds a `\n`, because
//! splitting a line would change the payload. The rules quoted are the WHATWG HTML standard's
//! "Interpreting an event stream" (§9.2.6); the reports are public ones of real clients.
use std::time::Duration;

use crate::endpoint::sse::SseEvent;

/// One legal framing feature a client's SSE reader must accept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Variant {
    /// Every read is one byte.
    Bytes1,
    /// Reads of odd sizes (3, 5, 7, 11, 13 bytes in turn), cut anywhere.
    OddReads,
    /// CRLF line endings with every CR and its LF in different reads.
    CrlfSplit,
    /// Every multi-byte UTF-8 character split across two reads.
    Utf8Split,
    /// CRLF line endings.
    Crlf,
    /// Bare CR line endings.
    Cr,
    /// LF, CRLF and CR line endings in turn, event by event.
    MixedEol,
    /// A comment block before the first event (as OpenRouter's `: OPENROUTER PROCESSING`).
    CommentFirst,
    /// A `: keep-alive` comment block between events.
    KeepAlive,
    /// A one-second pause after the first event, filled with keep-alive comments.
    KeepAlivePause,
    /// A comment line inside an event's block.
    InlineComment,
    /// An `id:` field on every event.
    Ids,
    /// A `retry:` field in a block of its own before the first event.
    Retry,
    /// `data:` without the optional space.
    NoSpace,
    /// An extra blank line after every event.
    BlankLines,
    /// A UTF-8 byte order mark at the start of the stream.
    Bom,
    /// A field name the spec says to ignore, on every event.
    UnknownField,
    /// `event: message` on every event (the default type, spelt out).
    EventMessage,
}

/// What a variant is, the rule that makes it legal, and who was reported to break on it.
#[derive(Debug, Clone, Copy)]
pub struct VariantInfo {
    pub variant: Variant,
    /// The name on the command line and in reports.
    pub name: &'static str,
    /// What the framing does.
    pub does: &'static str,
    /// The spec rule a client relies on to read it.
    pub rule: &'static str,
    /// Public reports of clients that broke on it, or servers and gateways that send it.
    pub reports: &'static [&'static str],
}

/// Every variant, in the order reports list them.
pub const VARIANTS: &[VariantInfo] = &[
    VariantInfo {
        variant: Variant::Bytes1,
        name: "bytes-1",
        does: "every read is one byte",
        rule: "the stream is a sequence of lines, whatever the network reads: a parser buffers until a line ends",
        reports: &[
            "hand-rolled readers that parse each read: brave/brave-browser#52830, spiceai/spiceai#12588, ai-forever/gigachat-js#14",
        ],
    },
    VariantInfo {
        variant: Variant::OddReads,
        name: "odd-reads",
        does: "reads of 3, 5, 7, 11 and 13 bytes in turn, cut anywhere",
        rule: "the stream is a sequence of lines, whatever the network reads: a parser buffers until a line ends",
        reports: &[
            "brainlid/langchain#540: OpenAI's own Responses stream began splitting `event:`/`data:` lines across TCP reads",
        ],
    },
    VariantInfo {
        variant: Variant::CrlfSplit,
        name: "crlf-split",
        does: "CRLF line endings, every CR and its LF in different reads",
        rule: "a CRLF pair is one line ending even when a read ends between the CR and the LF",
        reports: &[
            "rexxars/eventsource-parser#17: a CRLF split across reads gave two events (fixed in 3.0.4)",
            "Effect-TS/effect#6954, openai/openai-agents-python#4215: a split CRLF dispatched a spurious event",
        ],
    },
    VariantInfo {
        variant: Variant::Utf8Split,
        name: "utf8-split",
        does: "every multi-byte UTF-8 character split across two reads",
        rule: "the stream is decoded as UTF-8 as a whole, not read by read",
        reports: &[
            "decoding each read on its own gives U+FFFD: api7/aisix#111, librefang/librefang#3448, danielmiessler/Fabric#2203 (TextDecoder without {stream: true})",
        ],
    },
    VariantInfo {
        variant: Variant::Crlf,
        name: "crlf",
        does: "CRLF line endings",
        rule: "end-of-line = ( cr lf / cr / lf )",
        reports: &[
            "sse-starlette (FastAPI servers) frames with CRLF by default; ztjhz/BetterChatGPT#537 broke on it, and llama-cpp-python PR 1188 switched to LF for such clients",
            "miruamel/xuan#194: a reader that splits on \\n\\n drops every CRLF chunk",
        ],
    },
    VariantInfo {
        variant: Variant::Cr,
        name: "cr",
        does: "bare CR line endings",
        rule: "end-of-line = ( cr lf / cr / lf )",
        reports: &[
            "a2aproject/a2a-js#714: bare-CR events silently dropped",
            "openai/openai-node PR 2309: events ended by a bare CR were held until the next byte",
        ],
    },
    VariantInfo {
        variant: Variant::MixedEol,
        name: "mixed-eol",
        does: "LF, CRLF and CR line endings in turn, event by event",
        rule: "end-of-line = ( cr lf / cr / lf ), each line on its own",
        reports: &[
            "EventSource/eventsource#326: mixed CRLF and LF line endings dropped events",
        ],
    },
    VariantInfo {
        variant: Variant::CommentFirst,
        name: "comment-first",
        does: "a comment block before the first event",
        rule: "a line that starts with a colon is ignored; a blank line with no data dispatches nothing",
        reports: &[
            "OpenRouter sends `: OPENROUTER PROCESSING` comments; openai/openai-go PR 621 (v3.43.0) fixed the Go SDK, which dispatched them as empty events (issue 556)",
        ],
    },
    VariantInfo {
        variant: Variant::KeepAlive,
        name: "keep-alive",
        does: "a `: keep-alive` comment block between events",
        rule: "a line that starts with a colon is ignored; a blank line with no data dispatches nothing",
        reports: &[
            "sse-starlette and llama-cpp-python send `: ping - <time>` every 15 s, llama.cpp's server `:` pings (ollama/ollama#16443 broke on them)",
            "openai/openai-go PR 621: comment blocks dispatched as empty events before v3.43.0",
        ],
    },
    VariantInfo {
        variant: Variant::KeepAlivePause,
        name: "keep-alive-pause",
        does: "a one-second pause after the first event, with a keep-alive comment block every 200 ms",
        rule: "a line that starts with a colon is ignored; a blank line with no data dispatches nothing",
        reports: &[
            "theopenco/llmgateway PR 2334: `: ping` every 15 s during slow streams (with `id:` fields) crashed the OpenAI Python SDK 16 s in",
        ],
    },
    VariantInfo {
        variant: Variant::InlineComment,
        name: "inline-comment",
        does: "a comment line inside each event's block",
        rule: "a line that starts with a colon is ignored, wherever it is",
        reports: &[
        ],
    },
    VariantInfo {
        variant: Variant::Ids,
        name: "ids",
        does: "an `id:` field on every event",
        rule: "`id` sets the last event id, which is not reset between events and does not make a blank line dispatch an event with no data",
        reports: &[
            "openai/openai-python: its decoder never resets the last event id and dispatches an empty event on any later blank line once one was seen (PR 3839, closed unmerged; theopenco/llmgateway PR 2334 hit it); httpx-sse has the same bug (florimondmanca/httpx-sse#35)",
        ],
    },
    VariantInfo {
        variant: Variant::Retry,
        name: "retry",
        does: "a `retry: 3000` field in a block of its own before the first event",
        rule: "`retry` sets the reconnection time; a block with no data dispatches nothing",
        reports: &[
            "openai/openai-python#2722 and #3833: a block with only `retry:` dispatches an empty event and the stream dies with JSONDecodeError",
            "openai/openai-go issue 556, fixed by PR 621",
        ],
    },
    VariantInfo {
        variant: Variant::NoSpace,
        name: "no-space",
        does: "`data:` without the optional space after the colon",
        rule: "if the value starts with a space, remove that one space: the space is optional",
        reports: &[
            "openai/openai-python#498 (0.x SDK, fixed in PR 559); readers that match `data: ` literally: tashfeenahmed/freellmapi#1087, nullclaw/nullclaw#509",
        ],
    },
    VariantInfo {
        variant: Variant::BlankLines,
        name: "blank-lines",
        does: "an extra blank line after every event",
        rule: "a blank line with an empty data buffer dispatches nothing",
        reports: &[
            "openai/openai-go before PR 621 dispatched every blank line; the OpenAI Python SDK does once an `id:` was seen",
        ],
    },
    VariantInfo {
        variant: Variant::Bom,
        name: "bom",
        does: "a UTF-8 byte order mark at the start of the stream",
        rule: "one leading U+FEFF BYTE ORDER MARK is stripped",
        reports: &[
            "openai/openai-python PR 3819 (open): the first event after a BOM is silently dropped (its field reads `\\u{feff}data`); openai-node 4.x dropped it too",
        ],
    },
    VariantInfo {
        variant: Variant::UnknownField,
        name: "unknown-field",
        does: "a field the spec does not name (`x-chatgate: N`) on every event",
        rule: "a field with any other name is ignored",
        reports: &[
        ],
    },
    VariantInfo {
        variant: Variant::EventMessage,
        name: "event-message",
        does: "`event: message` on every event (the default type, spelt out)",
        rule: "an event whose type is empty gets the type `message`: `event: message` is the same event",
        reports: &[
            "openai-python before 1.97.2 and openai-node before 5.10.3 wrapped named events as {event, data}: chat chunks lost their choices",
        ],
    },
];

impl Variant {
    pub fn info(self) -> &'static VariantInfo {
        VARIANTS
            .iter()
            .find(|i| i.variant == self)
            .expect("every variant is in VARIANTS")
    }

    pub fn name(self) -> &'static str {
        self.info().name
    }

    /// Every variant.
    pub fn all() -> Vec<Variant> {
        VARIANTS.iter().map(|i| i.variant).collect()
    }

    /// `all`, or a comma-separated list of names.
    pub fn parse_list(s: &str) -> Result<Vec<Variant>, String> {
        let mut out = Vec::new();
        for name in s.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            if name == "all" {
                out.extend(Variant::all());
                continue;
            }
            match VARIANTS.iter().find(|i| i.name == name) {
                Some(i) => out.push(i.variant),
                None => {
                    return Err(format!(
                        "unknown SSE variant {name:?}; the variants are all, {}",
                        VARIANTS
                            .iter()
                            .map(|i| i.name)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ))
                }
            }
        }
        if out.is_empty() {
            return Err(
                "no SSE variant named; give `all` or a list such as `ids,keep-alive`".into(),
            );
        }
        out.sort_unstable();
        out.dedup();
        Ok(out)
    }

    /// Names joined with " + " (a combination in a report).
    pub fn join(vs: &[Variant]) -> String {
        vs.iter().map(|v| v.name()).collect::<Vec<_>>().join(" + ")
    }
}

/// The read sizes of `odd-reads`, in turn.
const ODD_READS: [usize; 5] = [3, 5, 7, 11, 13];

/// `keep-alive-pause`: how long the stream holds after its first event, and how often a
/// keep-alive comment is sent meanwhile.
pub const PAUSE: Duration = Duration::from_millis(1000);
pub const PAUSE_EVERY: Duration = Duration::from_millis(200);

/// Which variants the proxy applies, and an optional fixed read size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostileSse {
    /// Sorted, without repeats.
    pub variants: Vec<Variant>,
    /// Every read this many bytes (`--chunk-bytes`), instead of what the variants say.
    pub chunk_bytes: Option<usize>,
}

impl Default for HostileSse {
    /// Every variant at once.
    fn default() -> Self {
        HostileSse::only(&Variant::all())
    }
}

impl HostileSse {
    pub fn only(variants: &[Variant]) -> HostileSse {
        let mut variants = variants.to_vec();
        variants.sort_unstable();
        variants.dedup();
        HostileSse {
            variants,
            chunk_bytes: None,
        }
    }

    pub fn has(&self, v: Variant) -> bool {
        self.variants.binary_search(&v).is_ok()
    }

    /// The variants' names, for messages.
    pub fn describe(&self) -> String {
        if self.variants == Variant::all() {
            "all variants".to_string()
        } else {
            Variant::join(&self.variants)
        }
    }

    /// The line ending of the `k`-th event.
    fn eol(&self, k: usize) -> &'static str {
        let crlf = self.has(Variant::Crlf) || self.has(Variant::CrlfSplit);
        let cr = self.has(Variant::Cr);
        if self.has(Variant::MixedEol) || (crlf && cr) {
            ["\n", "\r\n", "\r"][k % 3]
        } else if crlf {
            "\r\n"
        } else if cr {
            "\r"
        } else {
            "\n"
        }
    }

    /// What goes before the first event: the BOM, a `retry:` block, a comment block.
    pub fn preamble(&self) -> Vec<u8> {
        let nl = self.eol(0);
        let mut out = String::new();
        if self.has(Variant::Bom) {
            out.push('\u{FEFF}');
        }
        if self.has(Variant::Retry) {
            out.push_str(&format!("retry: 3000{nl}{nl}"));
        }
        if self.has(Variant::CommentFirst) {
            out.push_str(&format!(": chatgate hostile-sse: processing{nl}{nl}"));
        }
        out.into_bytes()
    }

    /// Whether the stream pauses (with keep-alives) after the `k`-th event.
    pub fn pauses_after(&self, k: usize) -> bool {
        k == 0 && self.has(Variant::KeepAlivePause)
    }

    /// One keep-alive comment block, sent during a pause after the `k`-th event.
    pub fn keep_alive(&self, k: usize) -> Vec<u8> {
        let nl = self.eol(k);
        format!(": keep-alive{nl}{nl}").into_bytes()
    }

    /// The `k`-th event (0-based) of a stream, framed with these variants. A comment frames to
    /// nothing (the variants add their own). An upstream's own `event` and `id` are kept.
    pub fn frame_event(&self, ev: &SseEvent, k: usize) -> Vec<u8> {
        let SseEvent::Message { event, data, id } = ev else {
            return Vec::new();
        };
        let nl = self.eol(k);
        let mut out = String::new();
        if k > 0 && self.has(Variant::KeepAlive) {
            out.push_str(&format!(": keep-alive{nl}{nl}"));
        }
        if self.has(Variant::InlineComment) {
            out.push_str(&format!(": chatgate hostile-sse{nl}"));
        }
        match event {
            Some(e) => out.push_str(&format!("event: {e}{nl}")),
            None if self.has(Variant::EventMessage) => out.push_str(&format!("event: message{nl}")),
            None => {}
        }
        match id {
            Some(id) => out.push_str(&format!("id: {id}{nl}")),
            None if self.has(Variant::Ids) => out.push_str(&format!("id: {k}{nl}")),
            None => {}
        }
        if self.has(Variant::UnknownField) {
            out.push_str(&format!("x-chatgate: {k}{nl}"));
        }
        for line in data.split('\n') {
            // Without the space only when that cannot change the value: the spec strips one
            // leading space, so a payload line that starts with a space keeps the `data: ` form.
            let bare = self.has(Variant::NoSpace) && !line.starts_with(' ');
            out.push_str(if bare { "data:" } else { "data: " });
            out.push_str(line);
            out.push_str(nl);
        }
        out.push_str(nl);
        if self.has(Variant::BlankLines) {
            out.push_str(nl);
        }
        out.into_bytes()
    }

    /// `bytes` (one framed piece) cut into the reads the client gets.
    pub fn reads(&self, bytes: &[u8]) -> Vec<Vec<u8>> {
        let mut cuts = Vec::new();
        match self.chunk_bytes {
            Some(n) => cuts.extend((n.max(1)..bytes.len()).step_by(n.max(1))),
            None if self.has(Variant::Bytes1) => cuts.extend(1..bytes.len()),
            None => {}
        }
        if self.chunk_bytes.is_none() && self.has(Variant::OddReads) {
            let mut at = 0;
            for size in ODD_READS.iter().cycle() {
                at += size;
                if at >= bytes.len() {
                    break;
                }
                cuts.push(at);
            }
        }
        if self.has(Variant::Utf8Split) {
            cuts.extend(utf8_cuts(bytes, &cuts));
        }
        if self.has(Variant::CrlfSplit) {
            cuts.extend(
                bytes
                    .windows(2)
                    .enumerate()
                    .filter(|(_, w)| w == b"\r\n")
                    .map(|(i, _)| i + 1),
            );
        }
        split_at(bytes, cuts)
    }
}

/// A cut inside every multi-byte UTF-8 character of `bytes` that no cut in `existing` splits
/// (a binary search per character: a large event read a byte at a time has a cut per byte).
fn utf8_cuts(bytes: &[u8], existing: &[usize]) -> Vec<usize> {
    let mut sorted = existing.to_vec();
    sorted.sort_unstable();
    let mut cuts = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let len = utf8_len(bytes[i]);
        if len > 1 && i + len <= bytes.len() {
            let next = sorted.partition_point(|&c| c <= i);
            if sorted.get(next).is_none_or(|&c| c >= i + len) {
                cuts.push(i + 1);
            }
        }
        i += len.max(1);
    }
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

/// `bytes` cut at `cuts` (any order, repeats allowed; 0 and the end are no cuts).
fn split_at(bytes: &[u8], mut cuts: Vec<usize>) -> Vec<Vec<u8>> {
    cuts.retain(|&c| c > 0 && c < bytes.len());
    cuts.sort_unstable();
    cuts.dedup();
    let mut reads = Vec::with_capacity(cuts.len() + 1);
    let mut from = 0;
    for cut in cuts {
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

    /// The data payloads and event types of the dispatched messages.
    fn messages(evs: &[SseEvent]) -> Vec<(String, Option<String>)> {
        evs.iter()
            .filter_map(|e| match e {
                SseEvent::Message { event, data, .. } => {
                    Some((data.clone(), event.clone().filter(|e| e != "message")))
                }
                SseEvent::Comment(_) => None,
            })
            .collect()
    }

    /// A stream of `events` framed with `h`, as the reads the client gets.
    fn hostile_reads(h: &HostileSse, events: &[SseEvent]) -> Vec<Vec<u8>> {
        let mut reads = h.reads(&h.preamble());
        for (k, e) in events.iter().enumerate() {
            reads.extend(h.reads(&h.frame_event(e, k)));
            if h.pauses_after(k) {
                reads.extend(h.reads(&h.keep_alive(k)));
            }
        }
        reads
    }

    fn stream() -> Vec<SseEvent> {
        vec![
            ev(r#"{"x":"héllo 日本 🎉"}"#),
            ev(" leading space\nsecond line"),
            ev(""),
            ev(r#"{"y":2}"#),
            ev("[DONE]"),
        ]
    }

    /// The proof the issue asks for: every variant alone, and all of them at once, read by a
    /// spec-correct reader, dispatches exactly the events of the original stream.
    #[test]
    fn every_variant_carries_the_same_events() {
        let plain: Vec<u8> = stream()
            .iter()
            .flat_map(|e| match e {
                SseEvent::Message { data, .. } => data
                    .split('\n')
                    .map(|l| format!("data: {l}\n"))
                    .chain(["\n".to_string()])
                    .collect::<Vec<_>>(),
                SseEvent::Comment(_) => vec![],
            })
            .collect::<String>()
            .into_bytes();
        let want = messages(&SseParser::new().push(&plain));
        assert_eq!(want.len(), 5);
        let mut cases: Vec<HostileSse> = Variant::all()
            .iter()
            .map(|v| HostileSse::only(&[*v]))
            .collect();
        cases.push(HostileSse::default());
        for h in cases {
            let mut p = SseParser::new();
            let mut got = Vec::new();
            for read in hostile_reads(&h, &stream()) {
                assert!(!read.is_empty(), "{}: an empty read", h.describe());
                got.extend(p.push(&read));
            }
            got.extend(p.finish());
            assert_eq!(messages(&got), want, "{}", h.describe());
            assert!(p.incomplete().is_none(), "{}", h.describe());
        }
    }

    /// Each variant changes the bytes, the way its name says.
    #[test]
    fn each_variant_shows_in_the_bytes() {
        let text = |v: Variant| -> (String, Vec<Vec<u8>>) {
            let h = HostileSse::only(&[v]);
            let reads = hostile_reads(&h, &stream());
            (String::from_utf8_lossy(&reads.concat()).into_owned(), reads)
        };
        let (_, r) = text(Variant::Bytes1);
        assert!(r.iter().all(|r| r.len() == 1));
        let (_, r) = text(Variant::OddReads);
        assert!(r.iter().any(|r| r.len() == 3) && r.iter().any(|r| r.len() == 13));
        let (t, r) = text(Variant::CrlfSplit);
        assert!(t.contains("\r\n"));
        assert!(r.iter().any(|r| r.ends_with(b"\r")) && r.iter().any(|r| r.starts_with(b"\n")));
        let (_, r) = text(Variant::Utf8Split);
        assert!(r.iter().filter(|r| std::str::from_utf8(r).is_err()).count() >= 4);
        assert!(text(Variant::Crlf).0.contains("}\r\n\r\n"));
        let (t, _) = text(Variant::Cr);
        assert!(t.contains("}\r\r") && !t.contains('\n'));
        let (t, _) = text(Variant::MixedEol);
        assert!(t.contains("}\n\n") && t.contains("\r\n\r\n") && t.contains("\r\r"));
        assert!(text(Variant::CommentFirst).0.starts_with(": "));
        let (t, _) = text(Variant::KeepAlive);
        assert!(!t.starts_with(':') && t.contains("\n\n: keep-alive\n\ndata: "));
        assert!(text(Variant::InlineComment)
            .0
            .contains(": chatgate hostile-sse\ndata: "));
        assert!(text(Variant::Ids).0.contains("id: 4\ndata: [DONE]"));
        assert!(text(Variant::Retry).0.starts_with("retry: 3000\n\ndata: "));
        let (t, _) = text(Variant::NoSpace);
        assert!(t.contains("data:{") && t.contains("data:  leading space"));
        assert!(text(Variant::BlankLines).0.contains("}\n\n\ndata: "));
        assert!(text(Variant::Bom).0.starts_with('\u{FEFF}'));
        assert!(text(Variant::UnknownField).0.contains("x-chatgate: 1\n"));
        assert!(text(Variant::EventMessage)
            .0
            .contains("event: message\ndata: "));
        let h = HostileSse::only(&[Variant::KeepAlivePause]);
        assert!(h.pauses_after(0) && !h.pauses_after(1));
        assert!(!HostileSse::only(&[Variant::KeepAlive]).pauses_after(0));
    }

    #[test]
    fn a_fixed_read_size_overrides_the_variants() {
        let h = HostileSse {
            chunk_bytes: Some(4),
            ..HostileSse::default()
        };
        let framed = h.frame_event(&ev(r#"{"x":"日本"}"#), 1);
        let reads = h.reads(&framed);
        assert!(reads.iter().all(|r| r.len() <= 4));
        assert_eq!(reads.concat(), framed);
    }

    #[test]
    fn lists_parse_and_unknown_names_are_refused() {
        assert_eq!(
            Variant::parse_list("keep-alive, ids,ids").unwrap(),
            vec![Variant::KeepAlive, Variant::Ids]
        );
        assert_eq!(Variant::parse_list("all").unwrap(), Variant::all());
        let e = Variant::parse_list("ids,chunky").unwrap_err();
        assert!(e.contains("\"chunky\"") && e.contains("keep-alive"), "{e}");
        assert!(Variant::parse_list(" , ").is_err());
        assert_eq!(
            Variant::join(&[Variant::Ids, Variant::KeepAlive]),
            "ids + keep-alive"
        );
        assert_eq!(VARIANTS.len(), Variant::all().len());
        for (i, v) in VARIANTS.iter().enumerate() {
            assert_eq!(v.variant.name(), v.name);
            assert!(VARIANTS[..i].iter().all(|o| o.name != v.name));
        }
    }

    #[test]
    fn an_upstream_id_and_event_are_kept() {
        let evs = SseParser::new().push(b"id: 7\nevent: delta\ndata: a\n\ndata: b\n\n");
        let h = HostileSse::only(&[Variant::Crlf]);
        let framed = String::from_utf8(h.frame_event(&evs[0], 0)).unwrap();
        assert_eq!(framed, "event: delta\r\nid: 7\r\ndata: a\r\n\r\n");
        // The reader reports the last id seen, so it carries to the next event too.
        assert!(String::from_utf8(h.frame_event(&evs[1], 1))
            .unwrap()
            .contains("id: 7\r\n"));
    }

    #[test]
    fn a_comment_frames_to_nothing() {
        let h = HostileSse::default();
        assert!(h
            .frame_event(&SseEvent::Comment(" keep-alive".into()), 0)
            .is_empty());
    }

    #[test]
    fn every_multibyte_character_is_split() {
        let s = "aé日🎉b".as_bytes();
        let reads = HostileSse::only(&[Variant::Utf8Split]).reads(s);
        assert_eq!(reads.len(), 4, "{reads:?}");
        for r in &reads[..reads.len() - 1] {
            assert!(
                std::str::from_utf8(r).is_err(),
                "read {r:?} does not end mid-character"
            );
        }
        assert_eq!(reads.concat(), s);
    }
}
