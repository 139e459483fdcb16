//! The day the target's chat template prints, for templates that print one.
//!
//! In-process, the template reads the suite's pinned day (`[model] template_date`). A server
//! whose stack takes `chat_template_kwargs` (vLLM, SGLang, `transformers serve`, llama-server)
//! is sent the pinned `date_string` when the template reads one, so it renders the same prompt.
//! Any other server prints its own day (llama-cpp-python, and every server for a template that
//! only calls `strftime_now`): its prompt is yesterday's on the day after a snapshot was made,
//! and the replay sets such a comparison aside and says so rather than calling it a regression.
use chrono::{NaiveDate, NaiveDateTime};
use serde_json::{json, Map};

use crate::chain::run::context::{Context, StackOrigin};
use crate::chain::run::dates::TemplateDates;
use crate::endpoint::spec::Target;
use crate::stack::Stack;

/// Which day the target's template prints.
#[derive(Debug, Clone, PartialEq)]
pub enum TargetDay {
    /// The template prints no date.
    NoDate,
    /// The suite's pinned day (in-process, or `date_string` sent to the server).
    Pinned(NaiveDateTime),
    /// The server's own clock; the day, when the online probes saw it.
    Own(Option<NaiveDate>),
}

/// The target's day and how the report names it.
#[derive(Debug, Clone)]
pub struct DatePlan {
    pub day: TargetDay,
    /// What the template does with dates (`strftime_now("%d %b %Y")`, `date_string`).
    pub what: String,
    /// How to pin the server's date instead, when it prints its own.
    pub hint: Option<String>,
}

/// Stacks whose chat endpoint passes `chat_template_kwargs` to the template.
fn takes_template_kwargs(stack: Stack) -> bool {
    stack.profile().takes_template_kwargs
}

/// Decide the target's day, and send the pinned `date_string` to a server that takes it.
pub fn plan(ctx: &Context, target: &Target) -> DatePlan {
    let d: &TemplateDates = &ctx.dates;
    let what = d.describe();
    let plan = |day, hint| DatePlan {
        day,
        what: what.clone(),
        hint,
    };
    if !d.prints_date() {
        return plan(TargetDay::NoDate, None);
    }
    let pinned = ctx.serving.as_ref().and_then(|p| p.now);
    // Unpinned, the template reads today: a day of its own that the next run will not share.
    let day = pinned.map_or_else(
        || TargetDay::Own(Some(crate::clock::now().date())),
        TargetDay::Pinned,
    );
    // A stack the suite names or the server's routes reveal; a guessed default may be a
    // server that refuses fields it does not know.
    let known = !matches!(ctx.stack_origin, StackOrigin::Default);
    let mut sent = false;
    if let (Target::Http(http), Some(v)) = (target, &d.date_string_value) {
        if known && takes_template_kwargs(ctx.stack) {
            let mut kw = Map::new();
            kw.insert("date_string".into(), json!(v));
            http.set_template_kwargs(kw);
            sent = true;
        }
    }
    // Llama-3.1's template prints `date_string` or a fixed default, never the clock: only a
    // server that passes its own `date_string` (llama-server) changes it, and it was sent ours.
    if !d.varies {
        return plan(TargetDay::NoDate, None);
    }
    match target {
        Target::Candle(_) => return plan(day, None),
        Target::Http(_) if sent && d.pinned_by_date_string => return plan(day, None),
        Target::Http(_) => {}
    }
    let hint = match (&d.date_string_value, ctx.stack.profile().pin_date) {
        (Some(v), Some(how)) => Some(format!("pin the server's date: {}", how.replace("{}", v))),
        (Some(_), None) => Some(
            "pin the server's date: name the stack ([target] stack) when it takes chat_template_kwargs (vLLM, SGLang, transformers serve, llama-server)".into(),
        ),
        (None, _) => Some(
            "the template reads only the clock (strftime_now): no request can pin it; run the gate on the day the snapshots were made, or set the server's clock".into(),
        ),
    };
    plan(TargetDay::Own(None), hint)
}

impl DatePlan {
    /// The online probes saw the server render this day.
    pub fn seen(&mut self, day: Option<NaiveDate>) {
        if let (TargetDay::Own(None), Some(d)) = (&self.day, day) {
            self.day = TargetDay::Own(Some(d));
        }
    }

    /// The clock to predict the target's prompts at: the suite's day when the target renders
    /// it, today when it prints its own date; None when the template prints none.
    pub fn local_now(&self) -> Option<NaiveDateTime> {
        match &self.day {
            TargetDay::NoDate => None,
            TargetDay::Pinned(t) => Some(*t),
            TargetDay::Own(Some(d)) => Some(d.and_time(crate::clock::now().time())),
            TargetDay::Own(None) => Some(crate::clock::now()),
        }
    }

    /// The day a snapshot made now records (None: the template prints no date).
    pub fn record(&self) -> Option<String> {
        match &self.day {
            TargetDay::NoDate => None,
            TargetDay::Pinned(t) => Some(crate::clock::show_pin(t)),
            TargetDay::Own(Some(d)) => Some(crate::chain::run::dates::iso(*d)),
            TargetDay::Own(None) => Some(crate::chain::run::dates::iso(crate::clock::now().date())),
        }
    }

    /// Why a reply cannot be judged against a snapshot recorded at `recorded`: the target's
    /// prompt carries another day (or may, near midnight). None: judge it.
    pub fn aside(&self, recorded: Option<&str>) -> Option<String> {
        let recorded = recorded?;
        let day = crate::clock::parse_pin(recorded)?.date();
        match &self.day {
            TargetDay::NoDate | TargetDay::Pinned(_) => None,
            TargetDay::Own(Some(d)) if *d == day => None,
            TargetDay::Own(Some(d)) => Some(format!(
                "the server prints {} in the prompt ({}), the snapshot was made on {recorded}",
                crate::chain::run::dates::iso(*d),
                self.what
            )),
            TargetDay::Own(None) if crate::clock::is_today_everywhere(day) => None,
            TargetDay::Own(None) => Some(format!(
                "the server prints its own date in the prompt ({}): today is not {recorded}, the day the snapshot was made",
                self.what
            )),
        }
    }
}
