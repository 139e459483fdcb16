//! Dates in chat templates: which templates print one, what they print, and on which day a
//! golden row or a server rendered its prompt.
//!
//! A template that calls `strftime_now` (Llama-3.2, SmolLM3, gpt-oss) prints the day it is
//! rendered; one that reads `date_string` (Llama-3.x) prints what the caller passes, or its own
//! default ("26 Jul 2024"), and llama-server always passes today's. So a prompt rendered
//! yesterday differs from today's in the date alone. The suite pins the day offline checks
//! render with (`[model] template_date`); rows and servers on another day are compared at their
//! own day, found here, and the report says so instead of calling it a regression.
use chrono::{Duration, NaiveDate, NaiveDateTime};
use serde_json::{json, Value};

use crate::chain::run::context::Pipeline;
use crate::error::Result;

/// How a template uses dates.
#[derive(Debug, Clone, Default)]
pub struct TemplateDates {
    /// The formats it calls `strftime_now` with.
    pub clock_formats: Vec<String>,
    /// It reads a `date_string` variable.
    pub date_string: bool,
    /// Renders under two clocks differ: the prompt changes with the day.
    pub varies: bool,
    /// What it prints for `date_string` at the pipeline's clock: the value a server must be
    /// sent to render the same prompt (None when it prints none, or prints it twice).
    pub date_string_value: Option<String>,
    /// With that `date_string` given, the render no longer depends on the clock (Llama-3.2
    /// calls `strftime_now` only when no `date_string` is given): sending it pins the server.
    pub pinned_by_date_string: bool,
}

impl TemplateDates {
    /// Render the probe conversations at the pipeline's clock and at another one far from it.
    pub fn of(p: &Pipeline) -> TemplateDates {
        let at = p.now.unwrap_or_else(crate::clock::now);
        let other = at + Duration::days(400) + Duration::minutes(13 * 60 + 37);
        let mut out = TemplateDates {
            date_string: p.template.reads_date_string(),
            ..TemplateDates::default()
        };
        for messages in probes() {
            let (Ok(a), Ok(b)) = (
                p.render_at(&messages, None, true, Some(at)),
                p.render_at(&messages, None, true, Some(other)),
            ) else {
                continue;
            };
            for f in a.clock_formats.iter().chain(&b.clock_formats) {
                if !out.clock_formats.contains(f) {
                    out.clock_formats.push(f.clone());
                }
            }
            out.varies |= a.text != b.text;
            if out.date_string && out.date_string_value.is_none() {
                out.date_string_value = date_string_value(p, &messages, &a.text, at);
            }
        }
        if let Some(v) = &out.date_string_value {
            let with = |t: NaiveDateTime| {
                probes()
                    .into_iter()
                    .map(|m| render_with_date_string(p, &m, v, t).unwrap_or_default())
                    .collect::<Vec<_>>()
            };
            out.pinned_by_date_string = with(at) == with(other);
        }
        out
    }

    /// The prompt depends on a date (the clock's, or a `date_string` a server may pass).
    pub fn prints_date(&self) -> bool {
        self.varies || self.date_string
    }

    /// How the report names what the template does with dates.
    pub fn describe(&self) -> String {
        let mut parts: Vec<String> = self
            .clock_formats
            .iter()
            .map(|f| format!("strftime_now({f:?})"))
            .collect();
        if self.date_string {
            parts.push("date_string".into());
        }
        parts.join(" and ")
    }
}

/// Conversations that reach a template's date line: with and without a system message (some
/// templates print the date only in the system header they add themselves).
fn probes() -> Vec<Vec<Value>> {
    vec![
        vec![json!({"role": "user", "content": "Hi"})],
        vec![
            json!({"role": "system", "content": "Be brief."}),
            json!({"role": "user", "content": "Hi"}),
        ],
    ]
}

fn render_with_date_string(
    p: &Pipeline,
    messages: &[Value],
    value: &str,
    at: NaiveDateTime,
) -> Option<String> {
    let mut req = crate::template::RenderRequest {
        messages: messages.to_vec(),
        add_generation_prompt: true,
        special_tokens: p.special.clone(),
        now: Some(at),
        ..Default::default()
    };
    req.extra.insert("date_string".into(), json!(value));
    p.template.render(&req).ok().map(|r| r.text)
}

/// The text the template prints where `date_string` goes: render again with a sentinel as
/// `date_string`; what stands in its place in the plain render is the value.
fn date_string_value(
    p: &Pipeline,
    messages: &[Value],
    plain: &str,
    at: NaiveDateTime,
) -> Option<String> {
    const SENTINEL: &str = "\u{1}chatgate-date\u{1}";
    let marked = render_with_date_string(p, messages, SENTINEL, at)?;
    let first = marked.find(SENTINEL)?;
    let last = marked.rfind(SENTINEL)?;
    if first != last {
        return None;
    }
    let (before, after) = (&marked[..first], &marked[first + SENTINEL.len()..]);
    if plain.len() < before.len() + after.len()
        || !plain.starts_with(before)
        || !plain.ends_with(after)
    {
        return None;
    }
    Some(plain[before.len()..plain.len() - after.len()].to_string())
}

/// A render at another day than the pipeline's: the day, the ids and the text.
#[derive(Debug, Clone)]
pub struct Dated {
    pub at: NaiveDateTime,
    pub ids: Vec<u32>,
    pub text: String,
}

/// The day a golden row was rendered on, when it is not the pipeline's: among the dates its
/// decoded text shows in the template's formats, the render that agrees with `golden` longest
/// (equal, or diverging later than the pinned render does). None when no date does better.
pub fn row_date(
    p: &Pipeline,
    dates: &TemplateDates,
    messages: &[Value],
    tools: Option<&[Value]>,
    golden: &[u32],
    pinned_ids: &[u32],
) -> Result<Option<Dated>> {
    if !dates.varies || golden == pinned_ids {
        return Ok(None);
    }
    let default = p.now.unwrap_or_else(crate::clock::now);
    let text = p.tokenizer.decode(golden, false).unwrap_or_default();
    let mut candidates: Vec<NaiveDateTime> = Vec::new();
    for f in &dates.clock_formats {
        for t in crate::template::strftime::dates_in(f, &text, &default) {
            if !candidates.contains(&t) && Some(t) != p.now {
                candidates.push(t);
            }
        }
    }
    let mut best: Option<Dated> = None;
    let mut best_len = common_prefix(golden, pinned_ids);
    for at in candidates.into_iter().take(8) {
        let Ok(r) = p.render_at(messages, tools, false, Some(at)) else {
            continue;
        };
        let ids = p.ids(&r.text)?;
        let agree = common_prefix(golden, &ids);
        if agree > best_len {
            best_len = agree;
            let done = ids == golden;
            best = Some(Dated {
                at,
                ids,
                text: r.text,
            });
            if done {
                break;
            }
        }
    }
    Ok(best)
}

/// The day a server rendered a prompt on, when it is not the pipeline's: the first day a server
/// may be on now ([`crate::clock::days_a_server_may_render`]) whose render gives exactly
/// `server_ids` (or, with only a count to go by, exactly `server_count` ids).
pub fn server_day(
    p: &Pipeline,
    dates: &TemplateDates,
    messages: &[Value],
    tools: Option<&[Value]>,
    server_ids: Option<&[u32]>,
    server_count: Option<usize>,
    tried: Option<NaiveDateTime>,
) -> Option<Dated> {
    if !dates.varies {
        return None;
    }
    let tried = tried.or(p.now);
    let time = tried.unwrap_or_else(crate::clock::now).time();
    for day in crate::clock::days_a_server_may_render() {
        if Some(day) == tried.map(|t| t.date()) {
            continue;
        }
        let at = day.and_time(time);
        let Ok(r) = p.render_at(messages, tools, true, Some(at)) else {
            continue;
        };
        let Ok(ids) = p.ids(&r.text) else { continue };
        let matches = match (server_ids, server_count) {
            (Some(s), _) => s == ids.as_slice(),
            (None, Some(n)) => n == ids.len(),
            (None, None) => false,
        };
        if matches {
            return Some(Dated {
                at,
                ids,
                text: r.text,
            });
        }
    }
    None
}

/// The date as the template's first format prints it ("25 Nov 2026"), else ISO.
pub fn show_day(dates: &TemplateDates, at: &NaiveDateTime) -> String {
    match dates.clock_formats.first() {
        Some(f) => crate::template::strftime::py_strftime(at, f),
        None => at.format("%Y-%m-%d").to_string(),
    }
}

/// The day as ISO `YYYY-MM-DD`.
pub fn iso(day: NaiveDate) -> String {
    day.format("%Y-%m-%d").to_string()
}

fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}
