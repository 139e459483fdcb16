//! One snapshot file: an insta-compatible header and a body that encodes a reply exactly.
//!
//! See the module documentation of `crate::snapshot` for the format and why it looks like this.
//!
//! One idea: the file's format, read and written (header, body, escapes), and its round-trip
//! tests; long because the format is exact.
use std::fmt::Write as _;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::yaml;
use crate::error::{Error, Result};
use crate::exchange::Record;
use crate::replay::{Prompt, PromptSettings};
use crate::suite::Comparator;

/// Logprobs are stored with this many decimals: enough to tell a near-tie (numeric drift)
/// from a clear preference, few enough that reruns on the same kernels produce the same file.
pub const LOGPROB_DECIMALS: usize = 3;

/// The log-probability of one generated token and its top alternatives, rounded to
/// [`LOGPROB_DECIMALS`]. `top` leaves out the chosen token itself (it is `token`/`logprob`).
#[derive(Debug, Clone, PartialEq)]
pub struct SnapshotLogprob {
    pub token: String,
    /// `f32::NEG_INFINITY` for a token the target reported as impossible.
    pub logprob: f32,
    pub top: Vec<(String, f32)>,
}

/// What a snapshot pins of a reply: everything a reviewer should see, nothing volatile
/// (no response ids, tool-call ids, timestamps, fingerprints or latencies).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SnapshotBody {
    pub text: String,
    /// Reasoning content; empty when the reply had none.
    pub reasoning: String,
    /// Tool calls without their (random) `id`.
    pub tool_calls: Vec<Value>,
    pub finish_reason: Option<String>,
    pub token_ids: Option<Vec<u32>>,
    /// Per generated token, the first `max_logprob_tokens` of them.
    pub logprobs: Option<Vec<SnapshotLogprob>>,
}

/// Round a logprob the way the file stores it, so a body built from a record equals the same
/// body read back from its file.
pub fn round_logprob(x: f32) -> f32 {
    if !x.is_finite() {
        return f32::NEG_INFINITY;
    }
    format!("{:.*}", LOGPROB_DECIMALS, x)
        .parse()
        .unwrap_or(f32::NEG_INFINITY)
}

impl SnapshotBody {
    /// The reviewable part of a record. Keeps logprobs of the first `max_logprob_tokens`
    /// tokens only (0: none), so files stay small while a token diff near the start of a reply
    /// can still report both runs' margins.
    pub fn from_record(record: &Record, max_logprob_tokens: usize) -> SnapshotBody {
        let logprobs = record
            .logprobs
            .as_ref()
            .filter(|_| max_logprob_tokens > 0)
            .map(|lps| {
                lps.iter()
                    .take(max_logprob_tokens)
                    .map(|lp| SnapshotLogprob {
                        token: lp.token.clone(),
                        logprob: round_logprob(lp.logprob),
                        top: lp
                            .top
                            .iter()
                            .filter(|t| !(t.token == lp.token && (t.id.is_none() || t.id == lp.id)))
                            .map(|t| (t.token.clone(), round_logprob(t.logprob)))
                            .collect(),
                    })
                    .collect()
            });
        SnapshotBody {
            text: record.text.clone(),
            reasoning: record.reasoning.clone(),
            tool_calls: record.tool_calls.iter().map(strip_volatile).collect(),
            finish_reason: record.finish_reason.clone(),
            token_ids: record.token_ids.clone(),
            logprobs,
        }
    }

    /// The body as stored in the file (ends with a newline).
    pub fn render(&self) -> String {
        let mut out = self.render_reviewable();
        if let Some(lps) = &self.logprobs {
            out.push_str("logprobs:\n");
            for lp in lps {
                out.push_str("  ");
                out.push_str(&render_logprob_line(lp));
                out.push('\n');
            }
        }
        out
    }

    /// The body without its logprobs: what a reviewer diffs (logprobs move with every token).
    pub fn render_reviewable(&self) -> String {
        let mut out = String::new();
        render_text_field(&mut out, "text", &self.text);
        if !self.reasoning.is_empty() {
            render_text_field(&mut out, "reasoning", &self.reasoning);
        }
        if !self.tool_calls.is_empty() {
            out.push_str("tool_calls:\n");
            for call in &self.tool_calls {
                let _ = writeln!(out, "  {call}");
            }
        }
        let finish = match &self.finish_reason {
            Some(f) => Value::String(f.clone()),
            None => Value::Null,
        };
        let _ = writeln!(out, "finish_reason: {finish}");
        if let Some(ids) = &self.token_ids {
            let ids: Vec<String> = ids.iter().map(u32::to_string).collect();
            let _ = writeln!(out, "token_ids: [{}]", ids.join(", "));
        }
        out
    }

    /// Read a body back. `first_line` is the 1-based file line the body starts on, for errors.
    pub fn parse(text: &str, path: &Path, first_line: usize) -> Result<SnapshotBody> {
        BodyParser {
            lines: text.lines().collect(),
            pos: 0,
            path,
            first_line,
        }
        .parse()
    }
}

/// Tool-call ids are minted per response (`call_8f3a…`): never stable, never reviewed.
/// A call as the snapshot keeps it: without its (random) `id` and stream `index`, and its
/// `arguments` as JSON when they parse — so a server that spaces or orders the same arguments
/// differently replays the same, and a snapshot diff shows their structure. Arguments that do
/// not parse stay the string they were.
fn strip_volatile(call: &Value) -> Value {
    let mut call = call.clone();
    if let Some(obj) = call.as_object_mut() {
        obj.shift_remove("id");
        obj.shift_remove("index");
    }
    let parsed = call["function"]["arguments"]
        .as_str()
        .and_then(|a| serde_json::from_str::<Value>(a).ok());
    if let Some(args) = parsed {
        call["function"]["arguments"] = args;
    }
    call
}

/// `key: "one line"`, or `key:` and one JSON string per line of the text (each keeps its
/// `\n`), so multi-line replies diff line by line and every byte survives.
fn render_text_field(out: &mut String, key: &str, text: &str) {
    let pieces: Vec<&str> = text.split_inclusive('\n').collect();
    if pieces.len() <= 1 {
        let _ = writeln!(out, "{key}: {}", Value::String(text.to_string()));
        return;
    }
    let _ = writeln!(out, "{key}:");
    for piece in pieces {
        let _ = writeln!(out, "  {}", Value::String(piece.to_string()));
    }
}

fn fmt_logprob(x: f32) -> String {
    if x.is_finite() {
        format!("{:.*}", LOGPROB_DECIMALS, x)
    } else {
        "null".to_string()
    }
}

/// `"tok" -0.012 ["alt", -4.500, "alt2", -5.100]` — every piece is a JSON value.
fn render_logprob_line(lp: &SnapshotLogprob) -> String {
    let mut line = format!(
        "{} {}",
        Value::String(lp.token.clone()),
        fmt_logprob(lp.logprob)
    );
    if !lp.top.is_empty() {
        let alts: Vec<String> = lp
            .top
            .iter()
            .map(|(t, l)| format!("{}, {}", Value::String(t.clone()), fmt_logprob(*l)))
            .collect();
        let _ = write!(line, " [{}]", alts.join(", "));
    }
    line
}

/// Reads the body line by line; every error names the file and the line.
struct BodyParser<'a> {
    lines: Vec<&'a str>,
    pos: usize,
    path: &'a Path,
    first_line: usize,
}

impl<'a> BodyParser<'a> {
    fn error(&self, at: usize, msg: impl std::fmt::Display) -> Error {
        Error::in_file(
            self.path,
            format!("line {}: {msg}", self.first_line + at),
        )
        .hint("the snapshot body is `text:`, optional `reasoning:`/`tool_calls:`, `finish_reason:`, optional `token_ids:` and `logprobs:`; reject the file (chatgate reject) and rerun to regenerate it")
    }

    fn parse(mut self) -> Result<SnapshotBody> {
        let mut body = SnapshotBody::default();
        let mut seen = Vec::new();
        while self.pos < self.lines.len() {
            let at = self.pos;
            let line = self.lines[at];
            self.pos += 1;
            if line.trim().is_empty() {
                continue;
            }
            let (key, rest) = match line.split_once(':') {
                Some((k, r)) if !k.starts_with(' ') => (k, r.trim()),
                _ => return Err(self.error(at, format!("expected `key: value`, found {line:?}"))),
            };
            if seen.contains(&key) {
                return Err(self.error(at, format!("`{key}` appears twice")));
            }
            seen.push(key);
            match key {
                "text" => body.text = self.text_field(at, rest)?,
                "reasoning" => body.reasoning = self.text_field(at, rest)?,
                "tool_calls" => body.tool_calls = self.json_lines(at, rest)?,
                "finish_reason" => body.finish_reason = self.json(at, rest)?,
                "token_ids" => body.token_ids = Some(self.json(at, rest)?),
                "logprobs" => body.logprobs = Some(self.logprob_lines(at, rest)?),
                other => return Err(self.error(at, format!("unknown field `{other}`"))),
            }
        }
        if !seen.contains(&"text") {
            return Err(self.error(0, "the body has no `text:` field"));
        }
        Ok(body)
    }

    fn json<T: serde::de::DeserializeOwned>(&self, at: usize, s: &str) -> Result<T> {
        serde_json::from_str(s).map_err(|e| self.error(at, format!("cannot read {s:?}: {e}")))
    }

    /// The indented lines that follow a `key:` with nothing after it.
    fn indented(&mut self) -> Vec<(usize, &'a str)> {
        let mut out = Vec::new();
        while let Some(line) = self.lines.get(self.pos) {
            match line.strip_prefix("  ") {
                Some(inner) => out.push((self.pos, inner)),
                None => break,
            }
            self.pos += 1;
        }
        out
    }

    fn text_field(&mut self, at: usize, rest: &str) -> Result<String> {
        if !rest.is_empty() {
            return self.json(at, rest);
        }
        let mut text = String::new();
        for (i, piece) in self.indented() {
            text.push_str(&self.json::<String>(i, piece)?);
        }
        Ok(text)
    }

    fn json_lines(&mut self, at: usize, rest: &str) -> Result<Vec<Value>> {
        if !rest.is_empty() {
            return self.json(at, rest);
        }
        self.indented()
            .into_iter()
            .map(|(i, s)| self.json(i, s))
            .collect()
    }

    fn logprob_lines(&mut self, at: usize, rest: &str) -> Result<Vec<SnapshotLogprob>> {
        if rest == "[]" {
            return Ok(Vec::new());
        }
        if !rest.is_empty() {
            return Err(self.error(at, "`logprobs:` takes one indented line per token"));
        }
        self.indented()
            .into_iter()
            .map(|(i, s)| parse_logprob_line(s).map_err(|m| self.error(i, m)))
            .collect()
    }
}

fn as_logprob(v: &Value) -> Option<f32> {
    match v {
        Value::Null => Some(f32::NEG_INFINITY),
        Value::Number(n) => n.as_f64().map(|x| x as f32),
        _ => None,
    }
}

/// Inverse of [`render_logprob_line`].
fn parse_logprob_line(line: &str) -> std::result::Result<SnapshotLogprob, String> {
    let values: Vec<Value> = serde_json::Deserializer::from_str(line)
        .into_iter::<Value>()
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| format!("malformed logprob line {line:?}: {e}"))?;
    let shape =
        || format!("a logprob line is `\"token\" -0.123 [\"alt\", -1.5, ...]`, found {line:?}");
    let (token, logprob) = match (values.first(), values.get(1).and_then(as_logprob)) {
        (Some(Value::String(t)), Some(l)) => (t.clone(), l),
        _ => return Err(shape()),
    };
    let top = match values.get(2) {
        None => Vec::new(),
        Some(Value::Array(alts)) if alts.len() % 2 == 0 => alts
            .chunks(2)
            .map(|pair| match (&pair[0], as_logprob(&pair[1])) {
                (Value::String(t), Some(l)) => Ok((t.clone(), l)),
                _ => Err(shape()),
            })
            .collect::<std::result::Result<_, _>>()?,
        Some(_) => return Err(shape()),
    };
    if values.len() > 3 {
        return Err(shape());
    }
    Ok(SnapshotLogprob {
        token,
        logprob,
        top,
    })
}

/// The sampling settings a reply was produced with.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct SnapshotSettings {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    pub stop: Vec<String>,
}

impl From<&PromptSettings> for SnapshotSettings {
    fn from(s: &PromptSettings) -> Self {
        SnapshotSettings {
            temperature: Some(s.temperature),
            seed: Some(s.seed),
            max_tokens: Some(s.max_tokens),
            stop: s.stop.clone(),
        }
    }
}

/// insta's free-form `info` header field: where the reply came from and what it answers.
/// Shown in review; only the question (messages, tools, settings) is compared: the gate asks
/// for a review when the prompt changed, even if the reply did not. insta compares bodies only.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct SnapshotInfo {
    pub suite: String,
    pub prompt: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// The model identity the target reported or the suite pins (name, or name@hash).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The question the reply answers: the prompt's messages and tools, as sent. With the
    /// settings they make the prompt; a snapshot of another prompt is not a pass, even when the
    /// reply happens to be the same. `None` in snapshots written before chatgate recorded it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub messages: Option<Vec<Value>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<Value>>,
    pub settings: SnapshotSettings,
    pub comparator: Comparator,
    /// The day the chat template printed in the prompt, for templates that print one: a
    /// snapshot made on another day is compared with the date set aside (not part of the
    /// question: a day passing does not change what was asked).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub template_date: Option<String>,
}

impl SnapshotInfo {
    /// The prompt as reviewable text (messages, tools, settings), or `None` when the snapshot
    /// predates prompt recording.
    pub fn question(&self) -> Option<String> {
        let messages = self.messages.as_ref()?;
        let mut map = serde_json::Map::new();
        map.insert("messages".into(), Value::from(messages.clone()));
        if let Some(tools) = &self.tools {
            map.insert("tools".into(), Value::from(tools.clone()));
        }
        if let Ok(settings) = serde_json::to_value(&self.settings) {
            map.insert("settings".into(), settings);
        }
        let mut out = String::new();
        yaml::render_mapping(&map, 0, &mut out);
        Some(out)
    }
}

/// The YAML header between the two `---` lines.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SnapshotHeader {
    /// The suite file as given on the command line (relative), insta's `source`.
    pub source: String,
    /// The prompt id, insta's `expression`.
    pub expression: String,
    /// Only in pending files (insta strips it on accept); chatgate leaves it unset.
    pub assertion_line: Option<u32>,
    pub info: SnapshotInfo,
}

impl SnapshotHeader {
    /// The header of a replayed prompt's snapshot.
    pub fn for_prompt(
        source: &str,
        suite: &str,
        prompt: &Prompt,
        target: Option<&str>,
        model: Option<&str>,
    ) -> SnapshotHeader {
        SnapshotHeader {
            source: source.to_string(),
            expression: prompt.id.clone(),
            assertion_line: None,
            info: SnapshotInfo {
                suite: suite.to_string(),
                prompt: prompt.id.clone(),
                target: target.map(str::to_string),
                model: model.map(str::to_string),
                messages: Some(prompt.messages.clone()),
                tools: prompt.tools.clone(),
                settings: SnapshotSettings::from(&prompt.settings),
                comparator: prompt.compare.clone(),
                template_date: None,
            },
        }
    }

    fn render(&self) -> String {
        let mut map = serde_json::Map::new();
        map.insert("source".into(), Value::String(self.source.clone()));
        if let Some(line) = self.assertion_line {
            map.insert("assertion_line".into(), Value::from(line));
        }
        map.insert("expression".into(), Value::String(self.expression.clone()));
        if let Ok(info) = serde_json::to_value(&self.info) {
            map.insert("info".into(), info);
        }
        let mut out = String::new();
        yaml::render_mapping(&map, 0, &mut out);
        out
    }
}

/// A whole `.snap` / `.snap.new` file.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SnapshotFile {
    pub header: SnapshotHeader,
    pub body: SnapshotBody,
}

impl SnapshotFile {
    /// The file's bytes: `---`, the header, `---`, the body.
    pub fn render(&self) -> String {
        format!("---\n{}---\n{}", self.header.render(), self.body.render())
    }

    /// Read a snapshot file; `path` names it in errors. Accepts CRLF line ends (a checkout
    /// with `core.autocrlf`) since the body escapes every `\r` of the text itself.
    pub fn parse(text: &str, path: &Path) -> Result<SnapshotFile> {
        let text = text.replace("\r\n", "\n");
        let lines: Vec<&str> = text.split('\n').collect();
        let malformed = |line: usize, msg: String| {
            Error::in_file(path, format!("line {line}: {msg}")).hint(
                "a snapshot starts with `---`, a YAML header, `---`, then the body; reject it (chatgate reject) and rerun to regenerate it",
            )
        };
        if lines.first().map(|l| l.trim_end()) != Some("---") {
            return Err(malformed(
                1,
                "not a snapshot file: it does not start with `---`".into(),
            ));
        }
        let end = lines
            .iter()
            .skip(1)
            .position(|l| l.trim_end() == "---")
            .map(|i| i + 1)
            .ok_or_else(|| malformed(1, "the header has no closing `---` line".into()))?;
        let header_text = lines[1..end].join("\n");
        let yaml = yaml::parse(&header_text).map_err(|e| malformed(e.line + 2, e.message))?;
        let header = header_from_yaml(yaml).map_err(|m| malformed(2, m))?;
        let body_text = lines[end + 1..].join("\n");
        let body = SnapshotBody::parse(&body_text, path, end + 2)?;
        Ok(SnapshotFile { header, body })
    }

    /// Read and parse a file from disk.
    pub fn read(path: &Path) -> Result<SnapshotFile> {
        let text = crate::error::read_to_string(path)?;
        SnapshotFile::parse(&text, path)
    }
}

fn header_from_yaml(yaml: Value) -> std::result::Result<SnapshotHeader, String> {
    let Value::Object(mut map) = yaml else {
        return Err("the header is not a YAML mapping".into());
    };
    let string = |v: Option<Value>| match v {
        Some(Value::String(s)) => s,
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    };
    let assertion_line = match map.remove("assertion_line") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            v.as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| format!("assertion_line must be a line number, found {v}"))?,
        ),
    };
    let info = match map.remove("info") {
        None | Some(Value::Null) => SnapshotInfo::default(),
        Some(v) => serde_json::from_value(v).map_err(|e| format!("header `info`: {e}"))?,
    };
    Ok(SnapshotHeader {
        source: string(map.remove("source")),
        expression: string(map.remove("expression")),
        assertion_line,
        info,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exchange::{TokenLogprob, TopLogprob};
    use serde_json::json;

    /// A call's arguments are kept as JSON: the same arguments spaced or ordered otherwise
    /// are the same call; arguments that are not JSON stay the string they were.
    #[test]
    fn tool_call_arguments_are_kept_as_json_without_the_id() {
        let call = |id: &str, args: &str| json!({"id": id, "index": 0, "type": "function", "function": {"name": "f", "arguments": args}});
        let a = strip_volatile(&call("call_1", r#"{"city": "Paris", "n": 1}"#));
        let b = strip_volatile(&call("call_2", r#"{"n":1,"city":"Paris"}"#));
        assert_eq!(a, b);
        assert_eq!(a["function"]["arguments"], json!({"city": "Paris", "n": 1}));
        assert!(a.get("id").is_none());
        let broken = strip_volatile(&call("call_3", "{'city': 'Paris'}"));
        assert_eq!(broken["function"]["arguments"], "{'city': 'Paris'}");
    }

    fn record(text: &str) -> Record {
        let mut r = Record::new();
        r.text = text.to_string();
        r.finish_reason = Some("stop".into());
        r.token_ids = Some(vec![5, 6, 7]);
        r.system_fingerprint = Some("fp_volatile".into());
        r.model = Some("volatile-model-name".into());
        r.logprobs = Some(vec![
            TokenLogprob {
                merged: false,
                id: Some(5),
                token: "Hi".into(),
                logprob: -0.01234,
                top: vec![
                    TopLogprob {
                        id: Some(5),
                        token: "Hi".into(),
                        logprob: -0.01234,
                    },
                    TopLogprob {
                        id: Some(9),
                        token: " Hello".into(),
                        logprob: -4.56789,
                    },
                ],
            },
            TokenLogprob {
                merged: false,
                id: Some(6),
                token: "\n".into(),
                logprob: f32::NEG_INFINITY,
                top: vec![],
            },
            TokenLogprob {
                merged: false,
                id: Some(7),
                token: "x".into(),
                logprob: -1.0,
                top: vec![],
            },
        ]);
        r
    }

    fn file(text: &str) -> SnapshotFile {
        SnapshotFile {
            header: SnapshotHeader {
                source: "suites/example.toml".into(),
                expression: "greeting".into(),
                assertion_line: None,
                info: SnapshotInfo {
                    suite: "example".into(),
                    prompt: "greeting".into(),
                    target: Some("http://127.0.0.1:8000".into()),
                    model: Some("tiny-chat".into()),
                    messages: Some(vec![
                        json!({"role": "user", "content": "Say hi.\nThen stop."}),
                    ]),
                    tools: None,
                    settings: SnapshotSettings {
                        temperature: Some(0.0),
                        seed: Some(1),
                        max_tokens: Some(32),
                        stop: vec!["\n\n".into()],
                    },
                    comparator: Comparator::Similarity(0.9),
                    template_date: None,
                },
            },
            body: SnapshotBody::from_record(&record(text), 2),
        }
    }

    #[test]
    fn tricky_texts_round_trip_exactly() {
        for text in [
            "",
            "Paris.",
            "trailing spaces   ",
            "two\n\nparagraphs\n\n",
            "---\nsource: fake header\n---\n",
            "unicode: 日本語 — ünïcødé 🦀\t tab",
            "crlf\r\nline\r\n",
            "  leading and \"quotes\" and \\ backslash",
            "\n",
        ] {
            let f = file(text);
            let rendered = f.render();
            let back = SnapshotFile::parse(&rendered, Path::new("x.snap")).unwrap();
            assert_eq!(back, f, "text {text:?} rendered as\n{rendered}");
            assert_eq!(back.body.text, text);
            assert_eq!(back.render(), rendered, "rendering is stable");
            for line in rendered.lines() {
                assert_eq!(
                    line,
                    line.trim_end(),
                    "no body line ends in whitespace: {line:?}"
                );
            }
        }
    }

    #[test]
    fn volatile_fields_never_reach_the_file() {
        let mut r = record("ok");
        r.tool_calls = vec![
            json!({"id": "call_8f3a", "type": "function", "function": {"name": "f", "arguments": "{}"}}),
        ];
        let body = SnapshotBody::from_record(&r, 8);
        let text = body.render();
        assert!(
            !text.contains("call_8f3a")
                && !text.contains("fp_volatile")
                && !text.contains("volatile-model"),
            "{text}"
        );
        assert!(
            text.contains(r#"{"type":"function","function":{"name":"f","arguments":{}}}"#),
            "{text}"
        );
    }

    #[test]
    fn logprobs_are_rounded_compact_limited_and_last() {
        let body = SnapshotBody::from_record(&record("Hi\nx"), 2);
        let text = body.render();
        assert!(
            text.ends_with("logprobs:\n  \"Hi\" -0.012 [\" Hello\", -4.568]\n  \"\\n\" null\n"),
            "{text}"
        );
        let lps = body.logprobs.as_ref().unwrap();
        assert_eq!(lps.len(), 2, "limited to max_logprob_tokens");
        assert_eq!(
            lps[0].top,
            vec![(" Hello".to_string(), -4.568)],
            "the chosen token is not repeated"
        );
        assert_eq!(lps[1].logprob, f32::NEG_INFINITY);
        assert!(SnapshotBody::from_record(&record("Hi"), 0)
            .logprobs
            .is_none());
    }

    #[test]
    fn header_is_insta_shaped() {
        let rendered = file("Paris.").render();
        assert!(
            rendered.starts_with(
                "---\nsource: suites/example.toml\nexpression: greeting\ninfo:\n  suite: example\n"
            ),
            "{rendered}"
        );
        assert!(
            rendered.contains("  comparator:\n    similarity: 0.9\n"),
            "{rendered}"
        );
        assert!(
            rendered.contains("    stop:\n      - \"\\n\\n\"\n"),
            "{rendered}"
        );
    }

    #[test]
    fn malformed_files_name_the_file_and_line() {
        let path = Path::new("snapshots/x/capital.snap");
        let e = SnapshotFile::parse("text: \"x\"\n", path).unwrap_err();
        assert!(
            e.to_string()
                .contains("capital.snap: line 1: not a snapshot file"),
            "{e}"
        );
        let e = SnapshotFile::parse("---\nsource: a\n", path).unwrap_err();
        assert!(e.to_string().contains("no closing `---`"), "{e}");
        let e = SnapshotFile::parse(
            "---\nsource: a\n---\ntext: \"ok\"\nfinish_reason: stop\n",
            path,
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("line 5: cannot read \"stop\""),
            "{e}"
        );
        let e = SnapshotFile::parse("---\nsource: a\n---\ntext:\n  \"a\n", path).unwrap_err();
        assert!(e.to_string().contains("line 5"), "{e}");
        let e =
            SnapshotFile::parse("---\nsource: a\n---\nfinish_reason: null\n", path).unwrap_err();
        assert!(e.to_string().contains("no `text:`"), "{e}");
        let e = SnapshotFile::parse(
            "---\nsource: a\n---\ntext: \"\"\nlogprobs:\n  \"a\" x\n",
            path,
        )
        .unwrap_err();
        assert!(e.to_string().contains("line 6"), "{e}");
        let e = SnapshotFile::parse(
            "---\nsource: a\ninfo:\n  settings: 3\n---\ntext: \"\"\n",
            path,
        )
        .unwrap_err();
        assert!(e.to_string().contains("header `info`"), "{e}");
    }

    #[test]
    fn the_question_round_trips_and_tells_prompts_apart() {
        let f = file("Hi");
        let back = SnapshotFile::parse(&f.render(), Path::new("x")).unwrap();
        assert_eq!(back.header.info.question(), f.header.info.question());
        let q = f.header.info.question().unwrap();
        assert!(
            q.contains("Then stop.") && q.contains("max_tokens: 32"),
            "{q}"
        );

        let mut other = f.clone();
        other.header.info.messages = Some(vec![json!({"role": "user", "content": "Say hi."})]);
        assert_ne!(other.header.info.question(), f.header.info.question());
        let mut other = f.clone();
        other.header.info.settings.seed = Some(2);
        assert_ne!(other.header.info.question(), f.header.info.question());
        let mut old = f;
        old.header.info.messages = None;
        assert_eq!(
            old.header.info.question(),
            None,
            "older snapshots record no prompt"
        );
    }

    #[test]
    fn crlf_checkouts_and_assertion_lines_are_read() {
        let f = file("a\nb ");
        let crlf = f.render().replace('\n', "\r\n");
        assert_eq!(SnapshotFile::parse(&crlf, Path::new("x")).unwrap(), f);
        let with_line = f
            .render()
            .replacen("expression:", "assertion_line: 12\nexpression:", 1);
        let parsed = SnapshotFile::parse(&with_line, Path::new("x")).unwrap();
        assert_eq!(parsed.header.assertion_line, Some(12));
    }

    #[test]
    fn the_whole_file_looks_like_the_module_doc() {
        let mut f = file("The capital of France is Paris.\n\nAnything else?  ");
        f.header.info.comparator = Comparator::Exact;
        let expected = r#"---
source: suites/example.toml
expression: greeting
info:
  suite: example
  prompt: greeting
  target: "http://127.0.0.1:8000"
  model: tiny-chat
  messages:
    - {"role":"user","content":"Say hi.\nThen stop."}
  settings:
    temperature: 0.0
    seed: 1
    max_tokens: 32
    stop:
      - "\n\n"
  comparator: exact
---
text:
  "The capital of France is Paris.\n"
  "\n"
  "Anything else?  "
finish_reason: "stop"
token_ids: [5, 6, 7]
logprobs:
  "Hi" -0.012 [" Hello", -4.568]
  "\n" null
"#;
        assert_eq!(f.render(), expected);
    }
}
