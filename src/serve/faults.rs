//! The faults `chatgate serve --fault NAME` injects on purpose: one per server-side class of
//! the bug zoo (docs/design/BUG-ZOO.md), so the gate's own tests can prove it catches each one.
//! Each fault changes exactly the thing it names and nothing else.
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// One injectable fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, clap::ValueEnum)]
pub enum Fault {
    /// Generate with another checkpoint (--fault-model DIR, default: a sibling `tiny-base`
    /// directory) while reporting the served name, root and fingerprint.
    BaseCheckpoint,
    /// Prepend the bos id to every prompt's ids (after the template's own bos) and count it in usage.
    DoubleBos,
    /// Render chats with a llama-2 `[INST]` template instead of the model's own.
    WrongTemplate,
    /// Render chats with add_generation_prompt=false.
    NoGenerationPrompt,
    /// Do not stop on the model's eos ids: every reply runs to max_tokens.
    DropEosStop,
    /// Apply generation_config.json's temperature/top_p/top_k over the request's.
    IgnoreTemperature,
    /// Silently drop the 2nd content chunk of every stream.
    StreamDropsChunk,
    /// Report completion_tokens + 3 and prompt_tokens - 1 in usage.
    UsageLies,
    /// End streams without `data: [DONE]`.
    NoDone,
    /// Sleep 300 ms before the first token.
    SlowFirstToken,
    /// Sleep 30 ms per generated token.
    SlowDecode,
    /// At temperature 0, pick the 2nd-best token at one random step per request (time-seeded).
    Nondeterministic,
    /// After 100 generated tokens, generate as if the KV cache had lost every earlier position
    /// but the last 8: the reply turns to another text mid-way (llama.cpp#23717, a q8_0 KV
    /// cache whose output turned to gibberish after 100–150 tokens).
    LongReplyDegrades,
    /// A prompt longer than half the context keeps only its last half-context of ids, and
    /// usage counts those: the start of a long prompt is lost with a 200 (Ollama without
    /// `num_ctx`, ollama#17889).
    PromptTruncated,
    /// No reasoning parser: the reasoning stays in `content`.
    ReasoningInContent,
    /// The reasoning is split out of `content` and then lost: no `reasoning_content` field.
    ReasoningDropped,
    /// The reasoning comes back in `reasoning` (vLLM's newer name), not `reasoning_content`.
    ReasoningFieldRenamed,
    /// No tool-call parser: a call the model emitted stays in `content` as text.
    ToolCallsAsText,
    /// Calls are parsed, and their `arguments` written as a Python dict, not JSON.
    ToolArgumentsBroken,
    /// Streamed calls repeat the arguments so far in every delta instead of the new part.
    ToolStreamBroken,
    /// Calls are parsed and only the first of a turn is kept: parallel calls collapse into one.
    ParallelCallsCollapsed,
    /// Calls are parsed and every argument value that is not a string comes back as one
    /// (`"days": "3"`; vLLM's gemma4 parser, vllm#47906).
    ToolValuesStringified,
    /// Calls are parsed and string argument values come back stripped of their surrounding
    /// whitespace (sglang#41317).
    ToolValuesTrimmed,
    /// A call whose argument holds the call's closing marker ends there: the value is cut at
    /// the marker and the arguments after it are lost (ollama#18659).
    ToolCallCutAtMarker,
    /// A reply the token limit cuts inside a call (no closing marker) comes back as an empty
    /// message: no content, no calls (ollama PR 17250).
    UnclosedCallEmpty,
    /// At temperature above 0, every other request's tool-call parser fails: its call stays
    /// in `content` as text (llama.cpp#27720: a malformed harmony header on ~4% of sampled
    /// turns). Greedy requests are parsed.
    SampledParseFails,
    /// Drop the reasoning (`reasoning_content`, `reasoning`) of the assistant turns in a
    /// request's history before the template renders it (vLLM >= 0.20, vllm#42664).
    HistoryReasoningDropped,
    /// Render the assistant turns' calls in a request's history with empty arguments (`{}`):
    /// the second turn's prompt is not the one the model's own call continues.
    HistoryRewritten,
    /// Accept `tool_choice` and ignore it: calls are parsed even under "none".
    ToolChoiceIgnored,
    /// Accept `max_completion_tokens` and ignore it: only `max_tokens` limits a reply.
    MaxCompletionTokensIgnored,
    /// Accept `chat_template_kwargs` and ignore them: the template renders without them.
    TemplateKwargsIgnored,
    /// Accept `response_format` and ignore it: free text to a client that asked for JSON.
    ResponseFormatIgnored,
}

impl Fault {
    pub const ALL: [Fault; 32] = [
        Fault::BaseCheckpoint,
        Fault::DoubleBos,
        Fault::WrongTemplate,
        Fault::NoGenerationPrompt,
        Fault::DropEosStop,
        Fault::IgnoreTemperature,
        Fault::StreamDropsChunk,
        Fault::UsageLies,
        Fault::NoDone,
        Fault::SlowFirstToken,
        Fault::SlowDecode,
        Fault::Nondeterministic,
        Fault::LongReplyDegrades,
        Fault::PromptTruncated,
        Fault::ReasoningInContent,
        Fault::ReasoningDropped,
        Fault::ReasoningFieldRenamed,
        Fault::ToolCallsAsText,
        Fault::ToolArgumentsBroken,
        Fault::ToolStreamBroken,
        Fault::ParallelCallsCollapsed,
        Fault::ToolValuesStringified,
        Fault::ToolValuesTrimmed,
        Fault::ToolCallCutAtMarker,
        Fault::UnclosedCallEmpty,
        Fault::SampledParseFails,
        Fault::HistoryReasoningDropped,
        Fault::HistoryRewritten,
        Fault::ToolChoiceIgnored,
        Fault::MaxCompletionTokensIgnored,
        Fault::TemplateKwargsIgnored,
        Fault::ResponseFormatIgnored,
    ];

    /// Faults of the reasoning parser: they change nothing for a model whose template has no
    /// reasoning framing.
    pub fn needs_reasoning(self) -> bool {
        matches!(
            self,
            Fault::ReasoningInContent | Fault::ReasoningDropped | Fault::ReasoningFieldRenamed
        )
    }

    /// Faults of the tool-call parser: they change nothing unless the model emits a call.
    pub fn needs_tool_calls(self) -> bool {
        matches!(
            self,
            Fault::ToolCallsAsText
                | Fault::ToolArgumentsBroken
                | Fault::ToolStreamBroken
                | Fault::ParallelCallsCollapsed
                | Fault::ToolValuesStringified
                | Fault::ToolValuesTrimmed
                | Fault::ToolCallCutAtMarker
                | Fault::UnclosedCallEmpty
                | Fault::SampledParseFails
                | Fault::HistoryReasoningDropped
                | Fault::HistoryRewritten
        )
    }

    /// Request fields the server accepts and ignores: the field is dropped from the request
    /// before it is read (what a server that does not know it does).
    pub fn ignored_field(self) -> Option<&'static str> {
        match self {
            Fault::ToolChoiceIgnored => Some("tool_choice"),
            Fault::MaxCompletionTokensIgnored => Some("max_completion_tokens"),
            Fault::TemplateKwargsIgnored => Some("chat_template_kwargs"),
            Fault::ResponseFormatIgnored => Some("response_format"),
            _ => None,
        }
    }

    /// The name `--fault` takes.
    pub fn name(self) -> &'static str {
        match self {
            Fault::BaseCheckpoint => "base-checkpoint",
            Fault::DoubleBos => "double-bos",
            Fault::WrongTemplate => "wrong-template",
            Fault::NoGenerationPrompt => "no-generation-prompt",
            Fault::DropEosStop => "drop-eos-stop",
            Fault::IgnoreTemperature => "ignore-temperature",
            Fault::StreamDropsChunk => "stream-drops-chunk",
            Fault::UsageLies => "usage-lies",
            Fault::NoDone => "no-done",
            Fault::SlowFirstToken => "slow-first-token",
            Fault::SlowDecode => "slow-decode",
            Fault::Nondeterministic => "nondeterministic",
            Fault::LongReplyDegrades => "long-reply-degrades",
            Fault::PromptTruncated => "prompt-truncated",
            Fault::ReasoningInContent => "reasoning-in-content",
            Fault::ReasoningDropped => "reasoning-dropped",
            Fault::ReasoningFieldRenamed => "reasoning-field-renamed",
            Fault::ToolCallsAsText => "tool-calls-as-text",
            Fault::ToolArgumentsBroken => "tool-arguments-broken",
            Fault::ToolStreamBroken => "tool-stream-broken",
            Fault::ParallelCallsCollapsed => "parallel-calls-collapsed",
            Fault::ToolValuesStringified => "tool-values-stringified",
            Fault::ToolValuesTrimmed => "tool-values-trimmed",
            Fault::ToolCallCutAtMarker => "tool-call-cut-at-marker",
            Fault::UnclosedCallEmpty => "unclosed-call-empty",
            Fault::SampledParseFails => "sampled-parse-fails",
            Fault::HistoryReasoningDropped => "history-reasoning-dropped",
            Fault::HistoryRewritten => "history-rewritten",
            Fault::ToolChoiceIgnored => "tool-choice-ignored",
            Fault::MaxCompletionTokensIgnored => "max-completion-tokens-ignored",
            Fault::TemplateKwargsIgnored => "template-kwargs-ignored",
            Fault::ResponseFormatIgnored => "response-format-ignored",
        }
    }

    pub fn from_name(name: &str) -> Option<Fault> {
        Fault::ALL.into_iter().find(|f| f.name() == name)
    }
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The set of active faults.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Faults(BTreeSet<Fault>);

impl Faults {
    pub fn new(faults: impl IntoIterator<Item = Fault>) -> Faults {
        Faults(faults.into_iter().collect())
    }
    pub fn has(&self, fault: Fault) -> bool {
        self.0.contains(&fault)
    }
    /// Whether a history fault is on: the request's messages are rewritten before rendering.
    pub fn rewrites_history(&self) -> bool {
        self.has(Fault::HistoryReasoningDropped) || self.has(Fault::HistoryRewritten)
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    pub fn iter(&self) -> impl Iterator<Item = Fault> + '_ {
        self.0.iter().copied()
    }
    /// The field the reasoning goes out in (vLLM's newer `reasoning` under
    /// `reasoning-field-renamed`).
    pub fn reasoning_field(&self) -> &'static str {
        if self.has(Fault::ReasoningFieldRenamed) {
            "reasoning"
        } else {
            "reasoning_content"
        }
    }
}

/// Delay before the first token under `slow-first-token`.
pub const SLOW_FIRST_TOKEN_MS: u64 = 300;
/// Delay per token under `slow-decode`.
pub const SLOW_DECODE_MS: u64 = 30;
/// `nondeterministic` perturbs one of the first this-many steps.
/// `long-reply-degrades`: the tokens generated whole, then the positions the rest still sees.
pub const DEGRADES_AFTER: usize = 100;
pub const DEGRADES_KEEPS: usize = 8;
pub const NONDETERMINISTIC_WINDOW: usize = 8;

/// The help text of `chatgate serve`: every fault, what it changes, and the boundary it
/// exercises. (A unit test checks that every fault is named here.)
pub const FAULTS_HELP: &str = "\
Faults (--fault NAME, repeatable; each changes exactly what it says and nothing else):
  base-checkpoint       generate with another checkpoint (--fault-model DIR, default: the
                        sibling directory `tiny-base` next to the served one) while /v1/models,
                        `model` and system_fingerprint still report the served one
                        [checkpoint: caught by the greedy/logprob fingerprint]
  double-bos            prepend the bos id (the tokenizer's bos_token; else <|endoftext|>; else
                        id 0) to every prompt's ids, after the template's own bos, and count it in
                        usage; /tokenize and return_token_ids show it [template/server]
  wrong-template        render chats with a llama-2 `[INST] ... [/INST]` template instead of the
                        model's own (it raises on roles that do not alternate) [template]
  no-generation-prompt  render chats with add_generation_prompt=false [template]
  drop-eos-stop         do not stop on the model's eos ids: replies run to max_tokens
                        (finish_reason \"length\") [generation config]
  ignore-temperature    apply generation_config.json's temperature/top_p/top_k over the
                        request's [generation config/server]
  stream-drops-chunk    silently drop the 2nd content chunk of every stream (its text, ids and
                        logprobs) [server: stream != non-stream]
  usage-lies            report completion_tokens + 3 and prompt_tokens - 1 (total_tokens is their
                        sum) [server: usage]
  no-done               end streams without `data: [DONE]` [server: SSE framing]
  slow-first-token      sleep 300 ms before the first token [latency: TTFT]
  slow-decode           sleep 30 ms per generated token [latency: TPOT/ITL]
  nondeterministic      at temperature 0, pick the 2nd-best token at one random step (of the first
                        8) per request, with a time-seeded RNG [server: determinism]
  long-reply-degrades   after 100 generated tokens, generate as if the KV cache had lost all but
                        the last 8 positions: the reply turns mid-way (llama.cpp#23717, a q8_0
                        KV cache) [checkpoint: fingerprint, long reply]
  prompt-truncated      a prompt longer than half the context keeps only its last half-context
                        of ids, counted so in usage, answered 200 (ollama#17889) [server: long
                        prompt]
  reasoning-in-content  no reasoning parser: a reasoning model's thinking stays in `content`
                        (vLLM without --reasoning-parser, llama-server --reasoning-format none)
                        [server: reasoning split]
  reasoning-dropped     the reasoning is cut out of `content` and then lost: no
                        `reasoning_content` in the reply or the stream [server: reasoning split]
  reasoning-field-renamed
                        the reasoning comes back in `reasoning` (vLLM's newer name), not
                        `reasoning_content` [server: reasoning split, for a client that reads
                        the old field: `[client] reasoning_field`]
  tool-calls-as-text    no tool-call parser: the call the model wrote stays in `content` as text
                        (vLLM without --enable-auto-tool-choice, llama-cpp-python's default
                        chat format) [server: tool-call parse]
  tool-arguments-broken calls are parsed and their `arguments` written as a Python dict
                        ({'city': 'Paris'}), not JSON [server: tool-call parse]
  tool-stream-broken    streamed calls repeat all the arguments so far in every delta, so the
                        deltas do not add up to the call [server: tool-call parse]
  parallel-calls-collapsed
                        calls are parsed and only the first of a turn is kept: the model's
                        other calls are lost, plain and streamed [server: tool-call parse]
  tool-values-stringified
                        calls are parsed and every argument value that is not a string comes
                        back as one (\"days\": \"3\"; vLLM's gemma4 parser, vllm#47906)
                        [server: tool-call parse, argument types against the schema]
  tool-values-trimmed   calls are parsed and string argument values come back stripped of
                        surrounding whitespace (sglang#41317) [server: tool-call parse]
  tool-call-cut-at-marker
                        a call whose argument holds the call's closing marker ends there: the
                        value is cut at the marker, later arguments and calls lost
                        (ollama#18659) [server: tool-call parse]
  unclosed-call-empty   a reply the token limit cuts inside a call comes back as an empty
                        message, no content and no calls (ollama PR 17250) [server: tool-call
                        parse]
  sampled-parse-fails   at temperature above 0, every other request's tool-call parser fails
                        and the call stays in `content` (llama.cpp#27720); greedy requests are
                        parsed [server: sampled parse]
  history-reasoning-dropped
                        drop the reasoning (`reasoning_content`, `reasoning`) of the assistant
                        turns in a request's history before the template renders it (vLLM >=
                        0.20, vllm#42664) [server: agent round trip]
  history-rewritten     render the assistant turns' calls in a request's history with empty
                        arguments ({}) [server: agent round trip]
  tool-choice-ignored   accepts `tool_choice` and ignores it: calls come back under \"none\"
                        [server: tool choice]
  max-completion-tokens-ignored
                        accepts `max_completion_tokens` and ignores it (only `max_tokens`
                        limits a reply) [server: max completion tokens]
  template-kwargs-ignored
                        accepts `chat_template_kwargs` and ignores them (the template renders
                        without them) [server: template kwargs]
  response-format-ignored
                        accepts `response_format` and ignores it: free text to a client that
                        asked for JSON (without it, json_object and json_schema are refused:
                        this server has no constrained decoding) [server: response format]

Without a fault, a model whose chat template frames reasoning in think tags (DeepSeek-R1,
Qwen3) has it split out of `content` into `reasoning_content`, as vLLM's deepseek_r1 parser
does; and when a request offers `tools` (and `tool_choice` is not \"none\"), a call the model
writes the way its template frames it comes back in `tool_calls`, read as the family's vLLM
parser reads it (`chatgate parse-reply` prints the same message): Hermes `<tool_call>` JSON,
Mistral's `[TOOL_CALLS]`, Llama's bare JSON, Qwen3-Coder's and GLM's XML, MiniMax-M2,
DeepSeek-V3.x and DSML, Kimi-K2, Gemma 4; arguments typed by the request's tool schemas.";

/// The sampler's seeded generator, seeded here from the clock and a process-wide counter so
/// two requests in the same nanosecond still differ.
pub struct Rng(crate::endpoint::candle::sampling::Rng);

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// Sampled requests seen by `sampled-parse-fails`: it fails every other one.
static SAMPLED: AtomicU64 = AtomicU64::new(0);

/// Whether `sampled-parse-fails` fails this sampled request's parse (every other one).
pub fn sampled_parse_fails_now() -> bool {
    SAMPLED.fetch_add(1, Ordering::Relaxed) % 2 == 1
}

impl Rng {
    pub fn from_time() -> Rng {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        Rng(crate::endpoint::candle::sampling::Rng::new(
            nanos ^ n.wrapping_mul(0xA076_1D64_78BD_642F),
        ))
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }
    /// Uniform in 0..n (0 when n is 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            return 0;
        }
        (self.next_u64() % n as u64) as usize
    }
}

/// A random lowercase hex id of `len` characters (for response ids).
pub fn random_hex(len: usize) -> String {
    let mut rng = Rng::from_time();
    let mut out = String::with_capacity(len);
    while out.len() < len {
        out.push_str(&format!("{:016x}", rng.next_u64()));
    }
    out.truncate(len);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_fault_is_documented_and_named_consistently() {
        for f in Fault::ALL {
            assert!(FAULTS_HELP.contains(f.name()), "{f} is not in the help");
            assert_eq!(Fault::from_name(f.name()), Some(f));
            let v = <Fault as clap::ValueEnum>::to_possible_value(&f).expect("a value");
            assert_eq!(v.get_name(), f.name());
        }
    }

    #[test]
    fn rng_differs_between_seeds() {
        let a = Rng::from_time().next_u64();
        let b = Rng::from_time().next_u64();
        assert_ne!(a, b);
        assert_eq!(random_hex(32).len(), 32);
    }
}
