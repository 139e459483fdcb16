//! Server-sent events: `data: {json}\n\n` frames, the chunk sequence of a streamed chat or
//! completion, and the text hold-back that keeps a stream equal to the non-streamed reply when
//! stop strings are in play.
use std::collections::VecDeque;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use serde_json::{json, Value};
use tokio::sync::mpsc::UnboundedReceiver;

use super::engine::{Msg, Prepared};
use super::errors::ApiError;
use super::faults::{Fault, Faults};
use super::openai::{
    chat_logprobs, completion_logprobs, finish_reason_str, Meta, TokenStrings, Usage,
};
use crate::endpoint::parsers::{Piece, StreamReader, ToolParser};
use crate::endpoint::{Generation, TokenStep};

/// One SSE event carrying `data`.
pub fn frame(data: &str) -> Bytes {
    Bytes::from(format!("data: {data}\n\n"))
}

pub const DONE: &str = "[DONE]";

/// Emits the text of a stream as it becomes final: text that could still turn out to be the
/// beginning of a stop string is held back, and nothing from a matched stop string on is sent.
#[derive(Debug, Default)]
pub struct TextStreamer {
    stops: Vec<String>,
    raw: String,
    emitted: usize,
    stopped: bool,
}

impl TextStreamer {
    pub fn new(stops: &[String]) -> TextStreamer {
        TextStreamer {
            stops: stops.iter().filter(|s| !s.is_empty()).cloned().collect(),
            ..TextStreamer::default()
        }
    }

    /// Add a token's text; returns the text that can be sent now.
    pub fn push(&mut self, piece: &str) -> String {
        if self.stopped {
            return String::new();
        }
        self.raw.push_str(piece);
        let longest = self.stops.iter().map(String::len).max().unwrap_or(0);
        // A full match (it may start in text held back before).
        let mut from = self.emitted.saturating_sub(longest);
        while !self.raw.is_char_boundary(from) {
            from -= 1;
        }
        let hit = self
            .stops
            .iter()
            .filter_map(|s| self.raw[from..].find(s.as_str()).map(|p| p + from))
            .min();
        if let Some(cut) = hit {
            self.stopped = true;
            return self.take_to(cut);
        }
        // Hold back the longest suffix that is a proper prefix of a stop string.
        let len = self.raw.len();
        let mut hold = 0;
        for h in (1..longest.min(len + 1)).rev() {
            let start = len - h;
            if self.raw.is_char_boundary(start)
                && self.stops.iter().any(|s| s.starts_with(&self.raw[start..]))
            {
                hold = h;
                break;
            }
        }
        self.take_to(len - hold)
    }

    fn take_to(&mut self, end: usize) -> String {
        if end <= self.emitted {
            return String::new();
        }
        let out = self.raw[self.emitted..end].to_string();
        self.emitted = end;
        out
    }

    /// The text sent so far.
    pub fn sent(&self) -> &str {
        &self.raw[..self.emitted]
    }

    /// At the end: what remains of the final text after what was sent; None when what was
    /// sent is not a prefix of it (the stream can no longer match).
    pub fn finish(&mut self, final_text: &str) -> Option<String> {
        let sent = self.sent();
        if !final_text.starts_with(sent) {
            return None;
        }
        let rest = final_text[sent.len()..].to_string();
        self.raw = final_text.to_string();
        self.emitted = final_text.len();
        self.stopped = true;
        Some(rest)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Chat,
    Completion,
}

/// What a stream needs to know about its request.
pub struct StreamSpec {
    pub kind: Kind,
    pub meta: Meta,
    pub include_usage: bool,
    pub return_token_ids: bool,
    pub logprobs: bool,
    pub stop: Vec<String>,
    /// The request's own stop_token_ids (a stop on one of them is reported as stop_reason).
    pub stop_token_ids: Vec<u32>,
    pub faults: Faults,
    pub tokens: Arc<dyn TokenStrings + Send + Sync>,
    /// The reasoning and tool-call parsers (chat only): reasoning deltas go out as
    /// `reasoning_content`, calls as `tool_calls` deltas.
    pub reader: StreamReader,
}

/// vLLM's `stop_reason`: the request stop token id or stop string that ended the reply; null
/// for eos and for length.
pub fn stop_reason(
    g: &Generation,
    prepared: &Prepared,
    request_stop_ids: &[u32],
    stops: &[String],
    tokens: &dyn TokenStrings,
) -> Value {
    if g.finish_reason != crate::endpoint::FinishReason::Stop {
        return Value::Null;
    }
    if let Some(&last) = g.ids.last() {
        if request_stop_ids.contains(&last) {
            return json!(last);
        }
        if prepared.stop_ids.contains(&last) {
            return Value::Null;
        }
    }
    // A stop string: the reply's text is cut before it, so look in the decoded ids.
    match stops {
        [] => Value::Null,
        [one] => json!(one),
        _ => {
            let raw = tokens.reply_text(&g.ids);
            let tail = raw.get(g.text.len()..).unwrap_or(raw.as_str());
            stops
                .iter()
                .filter_map(|s| tail.find(s.as_str()).map(|p| (p, s)))
                .min_by_key(|(p, _)| *p)
                .map(|(_, s)| json!(s))
                .unwrap_or_else(|| json!(stops[0]))
        }
    }
}

struct StreamState {
    spec: StreamSpec,
    prepared: Prepared,
    rx: UnboundedReceiver<Msg>,
    queue: VecDeque<Bytes>,
    ended: bool,
    text: TextStreamer,
    pending: Vec<TokenStep>,
    /// Content chunks produced so far (sent or dropped).
    content_chunks: usize,
    /// Completions logprobs text_offset.
    offset: usize,
    /// Completions carry prompt_token_ids on their first chunk.
    first_chunk: bool,
}

impl StreamState {
    fn object(&self) -> &'static str {
        match self.spec.kind {
            Kind::Chat => "chat.completion.chunk",
            Kind::Completion => "text_completion",
        }
    }

    fn envelope(&self, choices: Value) -> Value {
        let m = &self.spec.meta;
        let mut v = json!({
            "id": m.id,
            "object": self.object(),
            "created": m.created,
            "model": m.model,
            "system_fingerprint": m.fingerprint,
            "choices": choices,
        });
        if self.spec.include_usage {
            v["usage"] = Value::Null;
        }
        v
    }

    fn push_json(&mut self, v: &Value) {
        self.queue.push_back(frame(&v.to_string()));
    }

    /// The role chunk a chat stream starts with.
    fn start(&mut self) {
        if self.spec.kind != Kind::Chat {
            return;
        }
        let choice = json!({
            "index": 0,
            "delta": {"role": "assistant", "content": ""},
            "logprobs": null,
            "finish_reason": null,
        });
        let mut v = self.envelope(json!([choice]));
        if self.spec.return_token_ids {
            v["prompt_token_ids"] = json!(self.prepared.prompt_ids);
        }
        self.push_json(&v);
    }

    /// A chunk for `text` (may be empty for the finish chunk) carrying the pending steps.
    fn chunk(&mut self, text: &str, finish: Option<(&str, Value)>) -> Value {
        self.chunk_of("content", text, finish)
    }

    /// A chunk whose delta carries `text` as `field` (`content`, or `reasoning_content`).
    fn chunk_of(&mut self, field: &str, text: &str, finish: Option<(&str, Value)>) -> Value {
        let steps = std::mem::take(&mut self.pending);
        let mut choice = match self.spec.kind {
            Kind::Chat => {
                let mut delta = serde_json::Map::new();
                if !text.is_empty() {
                    delta.insert(field.to_string(), json!(text));
                }
                json!({"index": 0, "delta": Value::Object(delta), "logprobs": null, "finish_reason": null})
            }
            Kind::Completion => {
                json!({"index": 0, "text": text, "logprobs": null, "finish_reason": null})
            }
        };
        if self.spec.logprobs && !steps.is_empty() {
            choice["logprobs"] = match self.spec.kind {
                Kind::Chat => json!({"content": chat_logprobs(&steps, self.spec.tokens.as_ref())}),
                Kind::Completion => {
                    let lp = completion_logprobs(&steps, self.spec.tokens.as_ref(), self.offset);
                    self.offset += steps
                        .iter()
                        .map(|s| self.spec.tokens.token_str(s.id).chars().count())
                        .sum::<usize>();
                    lp
                }
            };
        }
        if let Some((reason, stop_reason)) = finish {
            choice["finish_reason"] = json!(reason);
            choice["stop_reason"] = stop_reason;
        }
        if self.spec.return_token_ids {
            choice["token_ids"] = json!(steps.iter().map(|s| s.id).collect::<Vec<_>>());
            if self.spec.kind == Kind::Completion && self.first_chunk {
                choice["prompt_token_ids"] = json!(self.prepared.prompt_ids);
            }
        }
        self.first_chunk = false;
        self.envelope(json!([choice]))
    }

    /// Text the model produced: through the reply's parsers.
    fn produced(&mut self, text: &str) {
        for piece in self.spec.reader.push(text) {
            self.piece(piece);
        }
    }

    fn piece(&mut self, piece: Piece) {
        match piece {
            Piece::Content(text) => self.send_content(&text),
            Piece::Reasoning(text) => {
                if self.spec.faults.has(Fault::ReasoningDropped) {
                    return;
                }
                let field = self.spec.faults.reasoning_field();
                let v = self.chunk_of(field, &text, None);
                self.push_json(&v);
            }
        }
    }

    /// What the tool-call parser held when the reply ended: its calls as `tool_calls` deltas
    /// (true), or the text as content when it holds none. `cut`: the token limit ended it.
    fn flush_tools(&mut self, tools: Option<(ToolParser, String)>, cut: bool) -> bool {
        let Some((parser, held)) = tools else {
            return false;
        };
        let mut parsed = parser.parse(&held);
        super::routes::call_faults(
            &parser,
            &mut parsed.calls,
            &mut parsed.content,
            &held,
            cut,
            &self.spec.faults,
        );
        if parsed.calls.is_empty() {
            let marker = parser.marker();
            if self.spec.faults.has(Fault::UnclosedCallEmpty)
                && cut
                && !marker.is_empty()
                && held.contains(marker)
            {
                // The parser returned nothing for the cut call.
                return false;
            }
            self.send_content(&held);
            return false;
        }
        self.send_content(&parsed.content);
        for (index, call) in parsed.calls.iter().enumerate() {
            let whole = super::routes::api_call(call, &self.spec.faults);
            let args = whole["function"]["arguments"]
                .as_str()
                .unwrap_or("")
                .to_string();
            let mut head = whole.clone();
            head["index"] = json!(index);
            head["function"]["arguments"] = json!("");
            self.push_tool_delta(head);
            let mid = (0..=args.len() / 2)
                .rev()
                .find(|&i| args.is_char_boundary(i))
                .unwrap_or(0);
            for (from, to) in [(0, mid), (mid, args.len())] {
                // Under the fault, each delta carries everything so far, not the new part.
                let from = if self.spec.faults.has(Fault::ToolStreamBroken) {
                    0
                } else {
                    from
                };
                self.push_tool_delta(
                    json!({"index": index, "function": {"arguments": &args[from..to]}}),
                );
            }
        }
        true
    }

    fn push_tool_delta(&mut self, call: Value) {
        let mut v = self.chunk("", None);
        v["choices"][0]["delta"] = json!({"tool_calls": [call]});
        self.push_json(&v);
    }

    fn send_content(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        let v = self.chunk(text, None);
        self.content_chunks += 1;
        if self.content_chunks == 2 && self.spec.faults.has(Fault::StreamDropsChunk) {
            return;
        }
        self.push_json(&v);
    }

    fn step(&mut self, step: TokenStep) {
        // A step's text is final (the engine already holds back possible stop strings and
        // flushes held-back text with the stop token); the streamer is a second guard.
        let text = self.text.push(&step.text);
        self.pending.push(step);
        self.produced(&text);
    }

    fn done(&mut self, g: Generation) {
        match self.text.finish(&g.text) {
            Some(rest) => self.produced(&rest),
            None => eprintln!(
                "chatgate serve: warning: streamed text {:?} is not a prefix of the final text {:?}",
                self.text.sent(),
                g.text
            ),
        }
        let (pieces, tools) = self.spec.reader.finish();
        for piece in pieces {
            self.piece(piece);
        }
        let cut = g.finish_reason == crate::endpoint::FinishReason::Length;
        let called = self.flush_tools(tools, cut);
        let reason = if called {
            "tool_calls"
        } else {
            finish_reason_str(g.finish_reason)
        };
        let stop_reason = stop_reason(
            &g,
            &self.prepared,
            &self.spec.stop_token_ids,
            &self.spec.stop,
            self.spec.tokens.as_ref(),
        );
        let v = self.chunk("", Some((reason, stop_reason)));
        self.push_json(&v);
        if self.spec.include_usage {
            let usage = Usage {
                prompt_tokens: self.prepared.prompt_ids.len(),
                completion_tokens: g.ids.len(),
            };
            let mut v = self.envelope(json!([]));
            v["usage"] = usage.to_json(self.spec.faults.has(Fault::UsageLies));
            self.push_json(&v);
        }
        self.end();
    }

    fn fail(&mut self, e: &ApiError) {
        self.push_json(&e.body());
        self.end();
    }

    fn end(&mut self) {
        if !self.spec.faults.has(Fault::NoDone) {
            self.queue.push_back(frame(DONE));
        }
        self.ended = true;
    }

    async fn next_frame(&mut self) -> Option<Bytes> {
        loop {
            if let Some(b) = self.queue.pop_front() {
                return Some(b);
            }
            if self.ended {
                return None;
            }
            match self.rx.recv().await {
                Some(Msg::Step(s)) => self.step(s),
                Some(Msg::Done(g)) => self.done(g),
                Some(Msg::Failed(e)) | Some(Msg::Rejected(e)) => self.fail(&e),
                Some(Msg::Prepared(_)) => {}
                None => self.fail(&ApiError::internal("the generation ended without a result")),
            }
        }
    }
}

/// The streamed response: headers now, frames as the model produces them. Dropping the body
/// (the client went away) drops `rx`, which cancels the generation.
pub fn stream_response(
    spec: StreamSpec,
    prepared: Prepared,
    rx: UnboundedReceiver<Msg>,
) -> Response {
    let text = TextStreamer::new(&spec.stop);
    let mut state = StreamState {
        spec,
        prepared,
        rx,
        queue: VecDeque::new(),
        ended: false,
        text,
        pending: vec![],
        content_chunks: 0,
        offset: 0,
        first_chunk: true,
    };
    state.start();
    let stream = futures_util::stream::unfold(state, |mut st| async move {
        st.next_frame()
            .await
            .map(|b| (Ok::<Bytes, std::convert::Infallible>(b), st))
    });
    let mut resp = Response::new(Body::from_stream(stream));
    *resp.status_mut() = StatusCode::OK;
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream; charset=utf-8"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stops: &[&str], pieces: &[&str]) -> (String, bool) {
        let stops: Vec<String> = stops.iter().map(|s| s.to_string()).collect();
        let mut t = TextStreamer::new(&stops);
        let mut out = String::new();
        for p in pieces {
            out.push_str(&t.push(p));
        }
        (out, t.stopped)
    }

    #[test]
    fn no_stops_passes_everything() {
        assert_eq!(run(&[], &["a", "b", "c"]), ("abc".into(), false));
    }

    #[test]
    fn stop_string_cuts_and_holds_back() {
        assert_eq!(run(&["END"], &["ab", "E", "N", "Dxy"]), ("ab".into(), true));
        assert_eq!(run(&["END"], &["abEN"]).0, "ab");
        // A false alarm is released once it cannot be a stop any more.
        assert_eq!(run(&["END"], &["abE", "x"]), ("abEx".into(), false));
        assert_eq!(run(&["xyz", "yq"], &["ax", "y", "q"]), ("ax".into(), true));
    }

    #[test]
    fn finish_reconciles() {
        let stops = vec!["END".to_string()];
        let mut t = TextStreamer::new(&stops);
        assert_eq!(t.push("héE"), "hé");
        assert_eq!(t.finish("héE").as_deref(), Some("E"));
        let mut t = TextStreamer::new(&[]);
        t.push("abc");
        assert_eq!(t.finish("ab"), None);
    }
}
