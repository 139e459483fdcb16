//! A streamed reply read into a [`Record`] as it arrives: SSE events with their timestamps,
//! content, reasoning and tool-call deltas, and the framing kept as evidence.
use super::*;

/// The state of one streamed reply being read.
pub(super) struct StreamAcc {
    pub(super) parser: SseParser,
    pub(super) trace: StreamTrace,
    pub(super) token_ids: Option<Vec<u32>>,
    pub(super) logprobs: Option<Vec<TokenLogprob>>,
    /// Tool calls by `index`, in first-seen order.
    pub(super) tools: Vec<(u64, Value)>,
    pub(super) t_done: Option<Instant>,
}

impl StreamAcc {
    pub(super) fn new(content_type: Option<String>) -> StreamAcc {
        StreamAcc {
            parser: SseParser::new(),
            trace: StreamTrace {
                content_type,
                ..StreamTrace::default()
            },
            token_ids: None,
            logprobs: None,
            tools: Vec::new(),
            t_done: None,
        }
    }

    pub(super) fn event(&mut self, ev: SseEvent, at: Instant, rec: &mut Record) {
        let data = match ev {
            SseEvent::Comment(_) => {
                self.trace.comments += 1;
                return;
            }
            SseEvent::Message { data, .. } => data,
        };
        if self.trace.done {
            self.trace.after_done = true;
        }
        if data.trim() == "[DONE]" {
            if !self.trace.done {
                self.trace.done = true;
                self.t_done = Some(at);
            }
            return;
        }
        match serde_json::from_str::<Value>(&data) {
            Ok(v) => {
                self.chunk(&v, at, rec);
                self.trace.chunks.push(v);
            }
            Err(_) => self.trace.malformed.push(truncate(&data, KEEP_CHARS)),
        }
    }

    /// One JSON chunk: append its deltas and record an output event when it carried output.
    pub(super) fn chunk(&mut self, v: &Value, at: Instant, rec: &mut Record) {
        parse_envelope(v, rec);
        let choices = v["choices"].as_array();
        if choices.is_some_and(Vec::is_empty) && v["usage"].is_object() {
            self.trace.usage_chunk = true;
        }
        let Some(ch) = choices.and_then(|c| c.first()) else {
            return;
        };
        if let Some(f) = ch["finish_reason"].as_str() {
            rec.finish_reason = Some(f.to_string());
        }
        if let Some(ids) = id_list(&ch["prompt_token_ids"]) {
            rec.prompt_ids = Some(ids);
        }
        let ids = id_list(&ch["token_ids"]);
        let lps = ch["logprobs"]["content"]
            .as_array()
            .map(|c| chat_logprobs(c));
        let tokens = ids
            .as_ref()
            .map(Vec::len)
            .or(lps.as_ref().map(Vec::len))
            .and_then(|n| u32::try_from(n).ok());
        if let Some(ids) = ids {
            self.token_ids.get_or_insert_with(Vec::new).extend(ids);
        }
        if let Some(l) = lps {
            self.logprobs.get_or_insert_with(Vec::new).extend(l);
        }
        let kind = self.deltas(ch, rec);
        if let Some(kind) = kind {
            rec.timing.events.push(OutputEvent { at, kind, tokens });
        }
    }

    /// Append content / reasoning / tool-call deltas; the kind of output the chunk carried.
    pub(super) fn deltas(&mut self, ch: &Value, rec: &mut Record) -> Option<OutputKind> {
        let d = &ch["delta"];
        let mut kind = None;
        // Completions chunks carry `text` instead of a delta.
        let content = d["content"].as_str().or(ch["text"].as_str());
        if let Some(c) = content.filter(|c| !c.is_empty()) {
            rec.text.push_str(c);
            kind = Some(OutputKind::Content);
        }
        if let Some((field, r)) = super::reply::reasoning_of(d) {
            rec.reasoning.push_str(r);
            rec.reasoning_field = Some(field);
            kind = kind.or(Some(OutputKind::Reasoning));
        }
        if let Some(calls) = d["tool_calls"].as_array().filter(|c| !c.is_empty()) {
            for (pos, c) in calls.iter().enumerate() {
                self.tool_delta(pos, c);
            }
            kind = kind.or(Some(OutputKind::ToolCall));
        }
        kind
    }

    pub(super) fn tool_delta(&mut self, pos: usize, c: &Value) {
        let index = c["index"].as_u64().unwrap_or(pos as u64);
        let slot = match self.tools.iter().position(|(i, _)| *i == index) {
            Some(s) => s,
            None => {
                self.tools.push((
                    index,
                    json!({"id": null, "type": "function",
                        "function": {"name": "", "arguments": ""}}),
                ));
                self.tools.len() - 1
            }
        };
        let call = &mut self.tools[slot].1;
        if let Some(id) = c["id"].as_str().filter(|s| !s.is_empty()) {
            call["id"] = json!(id);
        }
        if let Some(t) = c["type"].as_str() {
            call["type"] = json!(t);
        }
        if let Some(name) = c["function"]["name"].as_str() {
            let cur = call["function"]["name"].as_str().unwrap_or_default();
            // Some servers repeat the full name in every delta: append only new text.
            if cur != name {
                call["function"]["name"] = json!(format!("{cur}{name}"));
            }
        }
        if let Some(args) = c["function"]["arguments"].as_str() {
            let cur = call["function"]["arguments"].as_str().unwrap_or_default();
            call["function"]["arguments"] = json!(format!("{cur}{args}"));
        }
    }

    /// The stream is over (closed, or dropped): move everything into the record.
    pub(super) fn close(&mut self, rec: &mut Record, now: Instant) {
        self.parser.finish();
        if let Some(inc) = self.parser.incomplete() {
            // An event the server never terminated: the spec discards it; keep it as evidence.
            self.trace.malformed.push(truncate(
                &format!("<incomplete event at end of stream> {}", inc.data),
                KEEP_CHARS,
            ));
        }
        rec.timing.t_end = self.t_done.unwrap_or(now);
        rec.token_ids = self.token_ids.take();
        rec.logprobs = self.logprobs.take();
        fill_ids_from_logprobs(rec);
        rec.tool_calls = self.tools.drain(..).map(|(_, v)| v).collect();
        rec.stream = Some(std::mem::take(&mut self.trace));
    }
}
