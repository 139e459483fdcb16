//! The SSE reader against the WHATWG event-stream rules: properties over generated streams
//! (any split into reads, any line terminator, UTF-8 split anywhere, garbage never panics)
//! and worked examples for the cases servers actually get wrong.
use chatgate::endpoint::sse::{Incomplete, SseEvent, SseParser};
use proptest::prelude::*;

/// Everything a parse produced: events, comment count, what was left incomplete.
#[derive(Debug, PartialEq)]
struct Outcome {
    events: Vec<SseEvent>,
    comments: usize,
    incomplete: Option<Incomplete>,
}

fn parse_reads(reads: &[&[u8]]) -> Outcome {
    let mut p = SseParser::new();
    let mut events = Vec::new();
    for r in reads {
        events.extend(p.push(r));
    }
    events.extend(p.finish());
    Outcome {
        events,
        comments: p.comments(),
        incomplete: p.incomplete().cloned(),
    }
}

fn parse(bytes: &[u8]) -> Outcome {
    parse_reads(&[bytes])
}

/// Split `bytes` at the given cut points (taken modulo the length, sorted).
fn split<'a>(bytes: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    cuts.sort_unstable();
    let mut out = Vec::new();
    let mut last = 0;
    for c in cuts {
        out.push(&bytes[last..c]);
        last = c;
    }
    out.push(&bytes[last..]);
    out
}

fn data_of(o: &Outcome) -> Vec<&str> {
    o.events
        .iter()
        .filter_map(|e| match e {
            SseEvent::Message { data, .. } => Some(data.as_str()),
            SseEvent::Comment(_) => None,
        })
        .collect()
}

/// One block of a generated stream.
#[derive(Debug, Clone)]
enum Block {
    Event {
        name: Option<String>,
        lines: Vec<String>,
    },
    Comment(String),
}

/// Field text: any characters (multi-byte included) except line terminators.
fn text() -> impl Strategy<Value = String> {
    "[^\r\n]{0,12}"
}

fn block() -> impl Strategy<Value = Block> {
    prop_oneof![
        (
            proptest::option::of("[a-z]{1,8}"),
            proptest::collection::vec(text(), 1..4)
        )
            .prop_map(|(name, lines)| Block::Event { name, lines }),
        text().prop_map(Block::Comment),
    ]
}

fn render(blocks: &[Block], eol: &str) -> String {
    let mut s = String::new();
    for b in blocks {
        match b {
            Block::Event { name, lines } => {
                if let Some(n) = name {
                    s.push_str(&format!("event: {n}{eol}"));
                }
                for l in lines {
                    s.push_str(&format!("data: {l}{eol}"));
                }
                s.push_str(eol);
            }
            Block::Comment(c) => s.push_str(&format!(":{c}{eol}")),
        }
    }
    s
}

/// The events a block list must produce.
fn expected(blocks: &[Block]) -> Vec<SseEvent> {
    blocks
        .iter()
        .map(|b| match b {
            Block::Event { name, lines } => SseEvent::Message {
                event: name.clone(),
                data: lines.join("\n"),
                id: None,
            },
            Block::Comment(c) => SseEvent::Comment(c.clone()),
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn any_split_gives_the_same_events(
        blocks in proptest::collection::vec(block(), 0..12),
        eol in prop_oneof![Just("\n"), Just("\r\n"), Just("\r")],
        cuts in proptest::collection::vec(any::<usize>(), 0..20),
    ) {
        let stream = render(&blocks, eol);
        let whole = parse(stream.as_bytes());
        prop_assert_eq!(&whole.events, &expected(&blocks));
        prop_assert_eq!(whole.incomplete.as_ref(), None);
        let pieces = split(stream.as_bytes(), &cuts);
        prop_assert_eq!(parse_reads(&pieces), whole);
    }

    #[test]
    fn line_terminators_are_equivalent(blocks in proptest::collection::vec(block(), 0..12)) {
        let lf = parse(render(&blocks, "\n").as_bytes());
        prop_assert_eq!(&parse(render(&blocks, "\r\n").as_bytes()), &lf);
        prop_assert_eq!(&parse(render(&blocks, "\r").as_bytes()), &lf);
    }

    #[test]
    fn one_byte_reads_decode_multibyte_characters_whole(
        lines in proptest::collection::vec("[😀é中ß\u{10FFFF}a-z ]{1,10}", 1..6),
    ) {
        let blocks = vec![Block::Event { name: None, lines }];
        let stream = render(&blocks, "\n");
        let bytes: Vec<&[u8]> = stream.as_bytes().chunks(1).collect();
        let o = parse_reads(&bytes);
        prop_assert_eq!(o.events, expected(&blocks));
    }

    #[test]
    fn garbage_never_panics_and_splits_agree(
        bytes in proptest::collection::vec(any::<u8>(), 0..400),
        cuts in proptest::collection::vec(any::<usize>(), 0..10),
    ) {
        let whole = parse(&bytes);
        prop_assert_eq!(parse_reads(&split(&bytes, &cuts)), whole);
    }

    #[test]
    fn garbage_biased_to_sse_syntax(
        bytes in proptest::collection::vec(
            prop_oneof![Just(b'\r'), Just(b'\n'), Just(b':'), Just(b' '), Just(0xEF), Just(0xBB),
                        Just(0xBF), Just(0xF0), Just(0x9F), Just(b'd'), Just(b'a'), Just(b't'),
                        any::<u8>()],
            0..300),
        cuts in proptest::collection::vec(any::<usize>(), 0..10),
    ) {
        let whole = parse(&bytes);
        prop_assert_eq!(parse_reads(&split(&bytes, &cuts)), whole);
    }
}

#[test]
fn comments_are_reported_and_counted() {
    let o = parse(b": keep-alive\n\ndata: a\n\n:\n: ping\r\ndata: b\n\n");
    assert_eq!(data_of(&o), ["a", "b"]);
    assert_eq!(o.comments, 3);
    let comments: Vec<_> = o
        .events
        .iter()
        .filter_map(|e| match e {
            SseEvent::Comment(c) => Some(c.as_str()),
            SseEvent::Message { .. } => None,
        })
        .collect();
    assert_eq!(comments, [" keep-alive", "", " ping"]);
}

#[test]
fn multi_line_data_is_joined_and_one_space_stripped() {
    let o = parse(b"data: one\ndata:two\ndata:  three\ndata\n\n");
    assert_eq!(data_of(&o), ["one\ntwo\n three\n"]);
}

#[test]
fn event_id_and_retry_fields() {
    let mut p = SseParser::new();
    let ev = p.push(b"retry: 1500\nid: 7\nevent: delta\ndata: x\n\ndata: y\n\nretry: 12a\n");
    assert_eq!(
        ev,
        [
            SseEvent::Message {
                event: Some("delta".into()),
                data: "x".into(),
                id: Some("7".into())
            },
            // The id persists; the event type does not.
            SseEvent::Message {
                event: None,
                data: "y".into(),
                id: Some("7".into())
            },
        ]
    );
    assert_eq!(p.retry(), Some(1500), "a non-numeric retry is ignored");
    assert_eq!(p.last_event_id(), Some("7"));
}

#[test]
fn blocks_without_data_are_not_dispatched() {
    let o = parse(b"event: ping\n\nid: 3\n\nunknown: field\n\n");
    assert!(o.events.is_empty());
    // `data:` with an empty value is data: an event with empty data is dispatched.
    assert_eq!(data_of(&parse(b"data:\n\n")), [""]);
}

#[test]
fn missing_final_blank_line_is_discarded_but_recorded() {
    let o = parse(b"data: {\"a\":1}\n\ndata: {\"b\":2}\n");
    assert_eq!(data_of(&o), ["{\"a\":1}"]);
    assert_eq!(
        o.incomplete,
        Some(Incomplete {
            data: "{\"b\":2}".into(),
            partial_line: false
        })
    );
    // No terminator at all on the last line.
    let o = parse(b"data: a\n\ndata: [DO");
    assert_eq!(data_of(&o), ["a"]);
    assert_eq!(
        o.incomplete,
        Some(Incomplete {
            data: "data: [DO".into(),
            partial_line: true
        })
    );
    // A clean end records nothing.
    assert_eq!(parse(b"data: a\n\n").incomplete, None);
}

#[test]
fn bom_at_start_only() {
    let o = parse("\u{FEFF}data: a\n\n".as_bytes());
    assert_eq!(data_of(&o), ["a"]);
    // A second BOM is content: the line's field name is then not `data`.
    let o = parse("\u{FEFF}\u{FEFF}data: a\n\n".as_bytes());
    assert!(data_of(&o).is_empty());
}

#[test]
fn invalid_utf8_becomes_replacement_characters() {
    let o = parse(b"data: a\xFFb\xE2\x82\n\n");
    assert_eq!(data_of(&o), ["a\u{FFFD}b\u{FFFD}"]);
}

#[test]
fn emoji_split_across_reads() {
    let s = "data: hi 😀!\n\n".as_bytes();
    let at = s.iter().position(|&b| b == 0xF0).expect("emoji") + 2;
    let o = parse_reads(&[&s[..at], &s[at..]]);
    assert_eq!(data_of(&o), ["hi 😀!"]);
}
