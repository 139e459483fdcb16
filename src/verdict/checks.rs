//! Every check the gate can report, as data: one typed definition per check — its id, its
//! boundary, the stage that runs it, when it fails, its usual cause and its fix — in one
//! registry. A [`Finding`](super::Finding) names its check by reference, never by a string; the
//! id is what serde writes, what suites name in `[server] skip`/`strict`, and the anchor of its
//! row in docs/checks.md, whose tables are generated from this registry
//! (`tests/it/checks_doc.rs`; `CHATGATE_BLESS=1` rewrites them).
//!
//! Adding a check: a line here, the function that judges it in its boundary's folder, a test.
use serde::{Serialize, Serializer};

use super::Boundary;

/// Where in a gate a check runs, and so which table of docs/checks.md lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// The offline chain: `chatgate check`, and the first stage of `gate`.
    Offline,
    /// The online chain, against a server.
    Online,
    /// The replay against reviewed snapshots.
    Replay,
    /// The latency measurement against its baseline.
    Latency,
    /// A name reports and suites use (a JUnit class or failure type, a `skip` target) that no
    /// finding is filed under on its own.
    Name,
}

/// One check.
#[derive(Debug)]
pub struct Check {
    /// Stable id, `boundary.name`, e.g. `template.parity`.
    pub id: &'static str,
    /// The link of the chain a failure blames.
    pub boundary: Boundary,
    pub stage: Stage,
    /// When it fails (an error), or, for a check that never errs, what it says.
    pub fails: &'static str,
    /// What usually causes a failure.
    pub cause: &'static str,
    /// What fixes it.
    pub fix: &'static str,
}

impl Check {
    /// Its row in docs/checks.md, relative to docs/ (the id is the row's anchor).
    pub fn docs_anchor(&self) -> String {
        format!("checks.md#{}", self.id)
    }
}

impl PartialEq for Check {
    fn eq(&self, other: &Check) -> bool {
        self.id == other.id
    }
}
impl Eq for Check {}

impl PartialOrd for Check {
    fn partial_cmp(&self, other: &Check) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Check {
    fn cmp(&self, other: &Check) -> std::cmp::Ordering {
        self.id.cmp(other.id)
    }
}

impl std::hash::Hash for Check {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.id.hash(state);
    }
}

impl std::fmt::Display for Check {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.id)
    }
}

impl Serialize for Check {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.id)
    }
}

/// The registry: `pub static NAME: &Check` for each check, and [`ALL`] in chain order.
macro_rules! registry {
    ($($name:ident = $id:literal, $boundary:ident, $stage:ident,
        fails: $fails:literal, cause: $cause:literal, fix: $fix:literal;)*) => {
        $(
            #[doc = concat!("`", $id, "`: ", $fails)]
            pub static $name: &Check = &Check {
                id: $id,
                boundary: Boundary::$boundary,
                stage: Stage::$stage,
                fails: $fails,
                cause: $cause,
                fix: $fix,
            };
        )*
        /// Every check, by boundary in chain order.
        pub static ALL: &[&Check] = &[$($name),*];
    };
}

registry! {
    CHECKPOINT_WEIGHTS_PRESENT = "checkpoint.weights-present", Checkpoint, Offline,
        fails: "— (warns when there are no weight files)",
        cause: "the model directory has no weight files (fine when the reference is recorded)",
        fix: "point `[model] dir` at the served directory, or record the reference with `lock --fingerprint`";
    CHECKPOINT_SHARDS = "checkpoint.shards", Checkpoint, Offline,
        fails: "the shard index names files that are missing",
        cause: "`model.safetensors.index.json` names a shard that is missing (an interrupted download or copy)",
        fix: "copy the missing shard; re-download the checkpoint";
    CHECKPOINT_WEIGHTS_HASH = "checkpoint.weights-hash", Checkpoint, Offline,
        fails: "a weight file's sha256 differs from the lock: another checkpoint is served (warns when there is no lock)",
        cause: "another checkpoint is in the directory: a base model, an older step, a re-quantization",
        fix: "serve the checkpoint you locked, or `chatgate lock SUITE --update` after a deliberate change";
    CHECKPOINT_GGUF_METADATA = "checkpoint.gguf-metadata", Checkpoint, Offline,
        fails: "— (warns when a GGUF's metadata group changed since the lock while its tensor data did not)",
        cause: "a GGUF's architecture metadata changed while its tensor data did not",
        fix: "re-convert from the locked checkpoint, or `lock --update` when the change is deliberate";
    CHECKPOINT_MODEL_DIR = "checkpoint.model-dir", Checkpoint, Offline,
        fails: "— (info: `--target candle:DIR` checks DIR's files, not `[model] dir`)",
        cause: "info: `--target candle:DIR` checks DIR's files, not `[model] dir`",
        fix: "set `[model] dir` to DIR to make it the suite's model";
    CHECKPOINT_SERVER_IDENTITY = "checkpoint.server-identity", Checkpoint, Online,
        fails: "the server's `system_fingerprint` names other weights than the lock (warns when llama.cpp's `/props` model file is not a locked file; info when the server says nothing)",
        cause: "the server reports (`system_fingerprint`, llama.cpp `/props`) other weights than the lock",
        fix: "deploy the locked checkpoint; check the server's model path";
    CHECKPOINT_FINGERPRINT = "checkpoint.fingerprint", Checkpoint, Online,
        fails: "the server's logprobs of its own tokens and their top-5 alternatives differ from the `[reference]` checkpoint's (teacher-forced locally, or by a reference server: `[reference] url`) beyond the reference kind's bounds on the mean and 95th percentile of the gaps (float, Q8, Q5/Q6, Q4: \"The checkpoint's reference at real sizes\") — or, with a recorded reference (`lock --fingerprint`), its temperature-0 reply leaves the recorded one where the recording shows no near tie; without server logprobs, its greedy tokens differ where the reference is not nearly tied. A server whose logprobs carry token texts only (llama-cpp-python) has the reply's ids confirmed by its own tokenize route: one id per entry, each a spelling of its entry's text. The first two probes' main replies carry logprobs; later ones only while what logprobs cost the server (each main reply against its repeat) keeps them within 10 s of the probe pass, and a probe past that is listed as not compared. A reference server that cannot teacher-force (llama-cpp-python, transformers serve) gives greedy replies only: agreement with them is a warning, never a pass. A reference that teacher-forces also judges a long reply (`[reference] long_reply_tokens`, default 256; past the eos where the server takes `ignore_eos`) 32 tokens at a time against twice the bounds: a window out of them is an error naming the first token past them, though the short probes follow the reference",
        cause: "the server's logprobs are not the reference's: another checkpoint or step, another quantization than the one locked; in the long reply only, an output that degrades with length (a KV cache that loses precision, a context or position-encoding fault in the serving stack)",
        fix: "serve the locked weights; lock the quantization you serve; see [reference at real sizes](checkpoint-at-scale.md) for the bounds; for a long reply that leaves the reference, serve with a full-precision KV cache and the checkpoint's context settings";
    TOKENIZER_VOCAB_SIZE = "tokenizer.vocab-size", Tokenizer, Offline,
        fails: "the tokenizer has more tokens than config.json's `vocab_size` (a tokenizer fault: a swapped checkpoint is caught first by its hash and fingerprint)",
        cause: "the tokenizer has more tokens than the embedding (`vocab_size`): a swapped tokenizer",
        fix: "serve the checkpoint's own tokenizer";
    TOKENIZER_PRESENT = "tokenizer.present", Tokenizer, Offline,
        fails: "the model ships no tokenizer",
        cause: "no tokenizer.json (or GGUF tokenizer metadata) in the model directory",
        fix: "copy the trained tokenizer's files into the served directory";
    TOKENIZER_FILE_HASH = "tokenizer.file-hash", Tokenizer, Offline,
        fails: "— (warns when the file differs from the lock: re-saved or replaced)",
        cause: "tokenizer.json was re-saved or replaced since the lock",
        fix: "if the fingerprint still matches, re-lock; otherwise restore the trained file";
    TOKENIZER_FINGERPRINT = "tokenizer.fingerprint", Tokenizer, Offline,
        fails: "the tokenizer splits the probe corpus differently from the locked one",
        cause: "the tokenizer splits the probe corpus differently: another tokenizer, a `tokenizers`/transformers version bump, a changed pre-tokenizer",
        fix: "serve the trained tokenizer files; pin the library versions";
    TOKENIZER_ROUND_TRIP = "tokenizer.round-trip", Tokenizer, Offline,
        fails: "— (warns when `decode(encode(x)) != x` on probe strings beyond whitespace)",
        cause: "warning: `decode(encode(x)) != x` beyond whitespace (NFC-normalizing tokenizers such as Qwen's always warn)",
        fix: "usually none; `[server] skip` it for such tokenizers";
    TOKENIZER_SPECIAL_TOKENS = "tokenizer.special-tokens", Tokenizer, Offline,
        fails: "a named special token is not one token in the vocabulary, tokenizer_config.json and special_tokens_map.json disagree, added_tokens_decoder disagrees with tokenizer.json, or config/generation_config name ids the tokenizer does not have (warns on bos id mismatches)",
        cause: "a special token is not one token, or tokenizer_config.json, special_tokens_map.json, tokenizer.json and config/generation_config disagree on ids",
        fix: "make the files agree (the finding names each file and value)";
    TOKENIZER_STACK = "tokenizer.stack", Tokenizer, Offline,
        fails: "— (info: which stack's feed is predicted, why, and which tokenizer it runs)",
        cause: "info: which stack's feed was predicted, why, and which tokenizer it runs",
        fix: "set `[target] stack` if the guess is wrong ([Serving stacks](serving-stacks.md))";
    TOKENIZER_GOLDEN_REENCODE = "tokenizer.golden-reencode", Tokenizer, Offline,
        fails: "the serving stack's tokenizer does not re-encode the SFT text to the SFT ids (tokenizer version drift, or a stack that tokenizes differently from training); `space-prefix` alone is a warning, as for `template.parity`",
        cause: "the stack's tokenizer does not re-encode the SFT text to the SFT ids: library drift, or a stack that tokenizes differently from training",
        fix: "serve the tokenizer training used; `space-prefix` alone is llama.cpp's known difference (a warning)";
    TOKENIZER_LOCK = "tokenizer.lock", Tokenizer, Offline,
        fails: "— (warns when the lock has no tokenizer identity, so drift cannot be detected)",
        cause: "the lock has no tokenizer identity, so drift cannot be detected",
        fix: "`chatgate lock SUITE --update`";
    TOKENIZER_GGUF_METADATA = "tokenizer.gguf-metadata", Tokenizer, Offline,
        fails: "— (warns when a GGUF's metadata group changed since the lock while its tensor data did not)",
        cause: "the GGUF's tokenizer metadata changed since the lock",
        fix: "re-convert from the trained tokenizer, or re-lock";
    TOKENIZER_GGUF_VS_HF = "tokenizer.gguf-vs-hf", Tokenizer, Offline,
        fails: "— (warns when a directory's GGUF and its Hugging Face files disagree on the chat template, bos/eos token, or an eos id generation_config.json does not stop on; says which one the suite's stack serves)",
        cause: "a directory's GGUF and HF files disagree on the tokenizer",
        fix: "re-convert the GGUF from the HF files; the finding says which one the stack serves";
    TOKENIZER_SERVER_TOKENIZE = "tokenizer.server-tokenize", Tokenizer, Online,
        fails: "the server's own tokenize endpoint splits the probe strings differently from the suite's tokenizer: the server loaded another tokenizer",
        cause: "the server's own tokenize endpoint splits probe strings differently: the server loaded another tokenizer",
        fix: "fix the server's tokenizer path or version";
    TOKENIZER_JSON = "tokenizer.json", Tokenizer, Name,
        fails: "— (the id findings about the tokenizer file itself are filed under; `skip`/`strict` accept it)",
        cause: "the tokenizer file itself (the id findings about `tokenizer.json` are filed under; accepted by `skip`/`strict`)",
        fix: "—";
    TEMPLATE_PARITY = "template.parity", Template, Offline,
        fails: "the serving render's ids differ from the SFT ids; the report shows the first differing token, decoded context on both sides, and a class: `double-bos`, `missing-bos`, `generation-prompt`, `whitespace`, `system-prompt`, `role-format`, `special-token-split`, `other` (errors), or `space-prefix` (a warning: only llama.cpp's ▁ after special tokens differs, proven by re-tokenizing with transformers' prefix rule)",
        cause: "the serving render is not the training format: another template, whitespace, a system prompt, role markup",
        fix: "serve the SFT template; the class and first differing token say where";
    TEMPLATE_PRESENT = "template.present", Template, Offline,
        fails: "the model ships no chat template",
        cause: "no chat template in the model directory (a server then falls back to its own)",
        fix: "ship `chat_template.jinja` (or `tokenizer_config.json` `chat_template`) from training";
    TEMPLATE_LOCK = "template.lock", Template, Offline,
        fails: "— (warns when the serving template is not the locked one)",
        cause: "the serving template is not the locked one",
        fix: "restore it, or re-lock after a deliberate change";
    TEMPLATE_RENDER = "template.render", Template, Offline,
        fails: "the serving template raises on a suite conversation",
        cause: "the template raises on a suite conversation",
        fix: "fix the template; reproduce with `chatgate render`";
    TEMPLATE_MESSAGE_SHAPES = "template.message-shapes", Template, Offline,
        fails: "the serving template raises on a message shape the suite's own conversations use; it is rendered over the shapes OpenAI clients send — tool calls with dict and with string `arguments`, tool results, `content: null`, content-part lists, `reasoning_content`, no system message, a system message mid-chat, two turns of one role — and each shape that raises (with the template's message) or silently drops content is reported (warning; info for tool shapes when the template has no tool support)",
        cause: "the template raises on, or silently drops, message shapes clients send (tool calls, `content: null`, content parts, …)",
        fix: "fix the template for the shapes your clients send";
    TEMPLATE_ASSISTANT_MASK = "template.assistant-mask", Template, Offline,
        fails: "— (warns when golden rows carry all-zero or all-one assistant masks, which are then treated as absent)",
        cause: "golden rows carry all-zero or all-one masks (a template without `{% generation %}`)",
        fix: "capture masks from a template with generation blocks, or leave them out";
    TEMPLATE_BOS_COUNT = "template.bos-count", Template, Offline,
        fails: "the serving ids start with more (`double-bos`) or fewer (`missing-bos`) BOS tokens than the SFT ids (the BOS is the tokenizer's `bos_token`, else config.json's `bos_token_id`)",
        cause: "the serving ids start with more or fewer BOS than the SFT ids: the template writes BOS and the stack adds one too",
        fix: "remove the BOS from the template or stop the stack adding one (`add_bos_token`)";
    TEMPLATE_DATE = "template.date", Template, Offline,
        fails: "— (info: the template prints a date, what with — `strftime_now`, `date_string` — and the pinned day; which golden rows were made on another day and compared at their own; a warning when the template reads today's date and the suite pins none)",
        cause: "the template prints a date and the suite pins none (or rows were made on another day)",
        fix: "`[model] template_date = \"YYYY-MM-DD\"` (what `init` writes)";
    TEMPLATE_GENERATION_PROMPT = "template.generation-prompt", Template, Offline,
        fails: "the prompt the server builds before an assistant turn (`add_generation_prompt=true`) is not exactly the training context before that turn's assistant tokens (from the assistant mask, the SFT template, or at least a prefix of the SFT ids)",
        cause: "the prompt before an assistant turn is not the training context: a missing or extra generation prompt, a system prompt moved",
        fix: "fix the template's `add_generation_prompt` branch";
    TEMPLATE_GENERATION_PROMPT_SUFFIX = "template.generation-prompt-suffix", Template, Offline,
        fails: "(with an SFT template) the text the serving template appends for `add_generation_prompt` differs from the SFT template's",
        cause: "the serving template's generation-prompt text differs from the SFT template's",
        fix: "align the two templates";
    TEMPLATE_TOOL_FRAMING = "template.tool-framing", Template, Offline,
        fails: "— (info, for a template that offers tools or writes calls: how it writes a call — the text around the JSON, the arguments' key, whether parallel calls render — derived by rendering a call through it, and the parser that reads that framing: vLLM's `--tool-call-parser`, llama.cpp's `--jinja` format; says so when the template never prints a request's `tools`, as DeepSeek-R1-Distill's does)",
        cause: "info: how the template writes tool calls and which parser reads them",
        fix: "start the server with the parser it names (`--tool-call-parser …`)";
    TEMPLATE_PREFIX_STABILITY = "template.prefix-stability", Template, Offline,
        fails: "— (a warning when, in an agent's conversation rendered through the serving template, the reply or the answer rendered as history does not continue the generation prompt it was written after, or the prompt after a tool's result does not continue the reply; info when a new user message rewrites earlier turns, as Qwen3's template drops earlier reasoning; with the characters where the texts part and the prompt tokens a prefix cache can still reuse)",
        cause: "the template rewrites history: earlier reasoning dropped, a reply rendered otherwise than its generation prompt began it",
        fix: "nothing to configure (the template's design); budget the prefill, or serve with a template that keeps history as the model was trained on it";
    TEMPLATE_REASONING_FRAMING = "template.reasoning-framing", Template, Offline,
        fails: "— (info, for a reasoning template: the marks around reasoning — `<think>`/`</think>`, harmony's analysis channel — whether the generation prompt opens the block, the `chat_template_kwargs` that change it, and the parser that moves it out of `content`: vLLM's `--reasoning-parser`, llama-server's `--reasoning-format`)",
        cause: "info: the template's reasoning marks and the parser that splits them",
        fix: "start the server with the parser it names (`--reasoning-parser …`)";
    TEMPLATE_GGUF_METADATA = "template.gguf-metadata", Template, Offline,
        fails: "— (warns when a GGUF's metadata group changed since the lock while its tensor data did not)",
        cause: "the GGUF's chat template changed since the lock",
        fix: "re-convert, or re-lock";
    TEMPLATE_GGUF_VS_HF = "template.gguf-vs-hf", Template, Offline,
        fails: "— (warns when a directory's GGUF and its Hugging Face files disagree on the chat template, bos/eos token, or an eos id generation_config.json does not stop on; says which one the suite's stack serves)",
        cause: "the GGUF's template differs from the HF files'",
        fix: "re-convert the GGUF from the HF files";
    TEMPLATE_SERVER_IDS = "template.server-ids", Template, Online,
        fails: "the server's own prompt ids (vLLM `/tokenize`, TGI `/chat_tokenize`, llama.cpp `/apply-template` then `/tokenize` with the vocabulary's BOS added, as its chat path tokenizes) differ from the local render, with a class",
        cause: "the server's own prompt ids differ from the local render: wrong template on the server, double BOS, no generation prompt",
        fix: "fix the server's template (`--chat-template`) or its BOS handling; the class names it";
    TEMPLATE_PROMPT_TOKENS = "template.prompt-tokens", Template, Online,
        fails: "(no tokenize endpoint) `usage.prompt_tokens` differs from the local render's count",
        cause: "without a tokenize endpoint, `usage.prompt_tokens` differs from the local render's count",
        fix: "as for `template.server-ids`";
    TEMPLATE_SERVER_DATE = "template.server-date", Template, Online,
        fails: "— (info: a server that prints its own date rendered another day than the suite's; its prompts were compared at that day)",
        cause: "info: a server that prints its own date rendered another day (another time zone)",
        fix: "pin the server's date where it can be pinned";
    TEMPLATE_SERVER_RENDER = "template.server-render", Template, Online,
        fails: "the server refuses valid chats with a template error",
        cause: "the server refuses valid chats with a template error",
        fix: "fix the server's template or its template engine version";
    GENERATION_STOP_SET = "generation.stop-set", GenerationConfig, Offline,
        fails: "the token that closes an assistant turn in the SFT format is not in the serving stack's stop set (see [Serving stacks](serving-stacks.md); plus the suite's extra stop ids); the fix names the file the stack reads (generation_config.json, or the GGUF's eos/eot ids for llama.cpp). Harmony (gpt-oss), from the format's spec: `<|return|>` (the final answer's end) must be in the stop set and `<|end|>` (every message's end, the analysis channel's too) must not; a missing `<|call|>` (a tool call's end) warns; a template that closes the last message with `<|end|>` (the history form) does not make it a terminator",
        cause: "the token that ends an assistant turn is not in the stack's stop set (eos is `<|endoftext|>`, turns end with `<|im_end|>`)",
        fix: "add it to generation_config.json `eos_token_id` (or the GGUF's eos/eot ids); the finding names the file";
    GENERATION_TERMINATOR_TRAINED = "generation.terminator-trained", GenerationConfig, Offline,
        fails: "— (warns when the SFT mask ends before the terminator: the model was never trained to emit it)",
        cause: "the SFT mask ends before the terminator: the model never learned to emit it",
        fix: "include the terminator in the trained span";
    GENERATION_STOP_INSIDE_REPLY = "generation.stop-inside-reply", GenerationConfig, Offline,
        fails: "a stop token occurs inside an assistant reply of the SFT data (replies get cut short)",
        cause: "a stop token occurs inside SFT replies, so replies get cut",
        fix: "remove that id from the stop set";
    GENERATION_DEFAULTS = "generation.defaults", GenerationConfig, Offline,
        fails: "generation_config.json's sampling defaults differ from the suite's `[generation]` expectations",
        cause: "generation_config.json's sampling defaults differ from `[generation]`",
        fix: "fix generation_config.json, or the suite's expectation";
    GENERATION_GGUF_METADATA = "generation.gguf-metadata", GenerationConfig, Offline,
        fails: "— (warns when a GGUF's metadata group changed since the lock while its tensor data did not)",
        cause: "the GGUF's special-token ids or add-BOS/EOS flags changed since the lock",
        fix: "re-convert, or re-lock";
    GENERATION_GGUF_VS_HF = "generation.gguf-vs-hf", GenerationConfig, Offline,
        fails: "— (warns when a directory's GGUF and its Hugging Face files disagree on the chat template, bos/eos token, or an eos id generation_config.json does not stop on; says which one the suite's stack serves)",
        cause: "the GGUF's bos/eos differ from the HF files', or an eos generation_config.json does not stop on",
        fix: "re-convert the GGUF from the HF files";
    GENERATION_SERVER_STOP = "generation.server-stop", GenerationConfig, Online,
        fails: "the server runs past the point where the reference ends its turn — and, where it reports its own tokens, generated the terminator there and went on (another token there is the model leaving the reference's path, not the stop set) — or its reply contains the terminator as text; probes the server already answers differently each time are left out",
        cause: "the server runs past the reference's turn end, or returns the terminator as text",
        fix: "fix the server's stop set (generation config, `--override-generation-config`, GGUF eos)";
    GENERATION_SAMPLING_HONOURED = "generation.sampling-honoured", GenerationConfig, Online,
        fails: "at temperature 0 the reply follows the seed, or a chosen token is not the server's own most likely one; the finding names the known cause on the detected stack and the suite line that fixes it (llama-cpp-python's default `repeat_penalty` 1.1: `extra_body = { repeat_penalty = 1.0 }`)",
        cause: "temperature 0 is not greedy on the server (llama-cpp-python's `repeat_penalty` 1.1, defaults applied over the request)",
        fix: "`[target] extra_body = { repeat_penalty = 1.0 }`; the finding names the line";
    GENERATION_SERVER_DEFAULTS = "generation.server-defaults", GenerationConfig, Online,
        fails: "— (warns when `/props` defaults differ from generation_config.json)",
        cause: "`/props` defaults differ from generation_config.json",
        fix: "start the server with the model's defaults";
    SERVER_REACHABLE = "server.reachable", Server, Online,
        fails: "the server cannot be reached (exit 3)",
        cause: "refused, timed out, or turned away (429/503) three times in a row (exit 3)",
        fix: "check URL, port, key; raise `[target]` timeouts for a cold server";
    SERVER_MODELS = "server.models", Server, Online,
        fails: "the model is not listed",
        cause: "`/v1/models` does not list the requested model",
        fix: "set `[target] model` to the served name";
    SERVER_SCHEMA = "server.schema", Server, Online,
        fails: "a reply or chunk lacks OpenAI fields",
        cause: "a reply or chunk lacks OpenAI fields",
        fix: "fix or upgrade the server";
    SERVER_SSE_DONE = "server.sse-done", Server, Online,
        fails: "a stream ends without `[DONE]`",
        cause: "a stream ends without `data: [DONE]`",
        fix: "fix the server (clients wait or fail on it)";
    SERVER_SSE_FRAMING = "server.sse-framing", Server, Online,
        fails: "stream payloads are not JSON events on `text/event-stream`, or the framing is broken",
        cause: "stream payloads are not JSON, or the framing is broken",
        fix: "fix the server or the proxy in front of it";
    SERVER_RESPONDS = "server.responds", Server, Online,
        fails: "valid probe requests fail, time out or break off",
        cause: "valid probe requests fail, time out or break off",
        fix: "the server's logs for the named request";
    SERVER_USAGE = "server.usage", Server, Online,
        fails: "usage disagrees with the server's own prompt ids or generated ids (info when only the EOS is left out)",
        cause: "usage disagrees with the server's own prompt or generated ids",
        fix: "fix the server's accounting (billing and limits depend on it)";
    SERVER_STREAM_PARITY = "server.stream-parity", Server, Online,
        fails: "streamed ≠ non-streamed at temperature 0",
        cause: "streamed ≠ non-streamed at temperature 0",
        fix: "fix the server's streaming path";
    SERVER_DETERMINISM = "server.determinism", Server, Online,
        fails: "identical requests get different replies (warns when only concurrent load changes them)",
        cause: "identical requests get different replies (warning when only under load: batch variance)",
        fix: "pin the server's determinism options; classify prompts before gating on exact text";
    SERVER_MAX_TOKENS = "server.max-tokens", Server, Online,
        fails: "more tokens than `max_tokens`",
        cause: "more tokens than `max_tokens`",
        fix: "fix the server";
    SERVER_STOP = "server.stop", Server, Online,
        fails: "a stop string left in the reply",
        cause: "a stop string left in the reply",
        fix: "fix the server's stop-string handling";
    SERVER_REASONING_SPLIT = "server.reasoning-split", Server, Online,
        fails: "(a template that frames reasoning in think tags) the reasoning is left in `content` — the tags in it, or, where the generation prompt opened the block, the reply's reasoning as content — or the model reasoned (its returned token ids show it) and the reply carries no `reasoning_content`/`reasoning`; each names the layer (the server's parser, or its API) and the flag that fixes it; warns when replies end inside their reasoning (`finish_reason` length, empty `content`); its evidence names the field the reasoning came in (`reasoning_content`, or vLLM's newer `reasoning`: a client reading the other gets nothing); with `[client] reasoning_field`, a server that writes reasoning to the other field",
        cause: "no reasoning parser (reasoning in `content`), reasoning dropped, or written to the field the client does not read",
        fix: "start the server with the parser it names; `[client] reasoning_field`";
    SERVER_TOOL_CALL_PARSE = "server.tool-call-parse", Server, Online,
        fails: "(a probe offers `tools`, the template writes calls in a format chatgate reads: JSON in text, Qwen3-Coder/GLM/MiniMax XML, DeepSeek, Kimi, Mistral `[ARGS]`, Gemma 4, harmony) the model's call comes back as text in `content`, with `arguments` that are not a JSON object or without an `id`, fewer, other or reordered calls than the model wrote (its returned token ids, else the reference's reply, show them), a value the schema types stringified or of another type, a string value not kept byte for byte (whitespace stripped, cut at a closing marker inside it), streamed deltas that do not add up to the whole reply's calls, a 5xx or an empty message for a reply cut inside a call (where the reference parser reads text or a call), or every request that offers tools refused with a 4xx (vLLM without `--enable-auto-tool-choice`); an error at the template when the template never renders the tools; a warning when no reply holds a call (the model's choice: untested)",
        cause: "no tool-call parser (calls as text, or tools refused outright), another family's parser (calls lost), arguments not JSON, values stringified or stripped, a call ended at a marker inside a value, parallel calls collapsed, broken stream deltas",
        fix: "`--enable-auto-tool-choice --tool-call-parser …` (the format's parser), llama-server `--jinja`; `chatgate parse-reply` prints what a correct parser returns";
    SERVER_AGENT_ROUND_TRIP = "server.agent-round-trip", Server, Online,
        fails: "(a probe that offers `tools` got a call back) the agent's second turn — the first turn, the assistant's call with its reasoning (in the field `[client] reasoning_field` names) and a tool result — is rendered by the server (its tokenize route, else `prompt_tokens`) into another prompt than the template renders from the same history; the finding names what the server dropped or changed (the reasoning, a call's arguments, the tool result)",
        cause: "the server rewrites the request's history before its template sees it (vLLM >= 0.20 dropped `reasoning_content` from history: qwen-code#4285, vllm#42664)",
        fix: "send the reasoning back in the field the server reads (`reasoning_content` or `reasoning`), or upgrade the server; the template's render is what the model was trained on";
    SERVER_LONG_PROMPT = "server.long-prompt", Server, Online,
        fails: "a prompt rendered near the declared context (`[server] long_prompt_tokens`, default the checkpoint's, at most 4,096 — sent at 2,560 first, and whole only when the server's time over that says the whole takes at most 15 s; within the server's own `max_model_len` or `n_ctx`) — an access code on its first line, filler, a question for the code — is counted in `prompt_tokens` short of the template's count by more than 5% (the server cut it and answered); a warning when the server refuses it (its context is shorter than declared), or when the reply does not recall the code the model recalls from a short prompt; information when the server's own context is shorter than the checkpoint's and the suite declares none",
        cause: "a context shorter than the checkpoint's, truncation instead of an error (Ollama without `num_ctx` cut prompts to ~2,050 tokens and answered 200: ollama#17889), a sliding window the checkpoint does not have",
        fix: "serve with the checkpoint's context (vLLM `--max-model-len`, llama.cpp `-c`, Ollama `num_ctx`), or declare the deployment's with `[server] long_prompt_tokens`";
    SERVER_SAMPLED_PARSE = "server.sampled-parse", Server, Online,
        fails: "(the template frames calls or reasoning) of `[server] sampled_runs` requests (default 20) at the suite's sampling settings (`[generation]`, else generation_config.json, else temperature 1.0) on the tools probe (else the first probe), the share whose reasoning or call the server's parsers lose or leave as text, or answer with a 5xx, has a 95% Wilson interval whose lower bound is above `[server] sampled_allowance` (default 0.2); INCONCLUSIVE (a warning, never a pass: `[server] strict` makes it fail) when the interval straddles the allowance, with how many runs would decide",
        cause: "a parser that fails on some sampled outputs only: a malformed channel header or call the sampler sometimes writes (llama.cpp#27720 on ~4% of gpt-oss turns at temperature 1.0; vllm#51977's intermittent HarmonyError)",
        fix: "upgrade or fix the server's parser for this model's framing (the finding quotes the first failing reply); raise `sampled_runs` to decide a small rate";
    SERVER_RESPONSES_PARITY = "server.responses-parity", Server, Online,
        fails: "(the server offers `/v1/responses`) the probe that offers tools, sent there too at temperature 0, comes back with other text, reasoning or calls (arguments compared as JSON) than the chat reply, or its streamed events (text, reasoning and argument deltas) do not add up to the plain Responses reply; chat completions refuses what the Responses API answers (a warning, an error when `[client] relies_on` lists `responses`); info when the server has no `/v1/responses`",
        cause: "`/v1/responses` parses or is configured otherwise than chat completions (vLLM checks `--enable-auto-tool-choice` on chat only)",
        fix: "start the server with the parsers both APIs need; tell clients which API gives the right reply";
    SERVER_TOOL_CHOICE = "server.tool-choice", Server, Online,
        fails: "a request field accepted and ignored: calls under `tool_choice: \"none\"`, no call to the function a named `tool_choice` forces (a decoy no prompt asks for), or no call under `tool_choice: \"required\"` after a greeting (an error for what `[client] relies_on` lists, else a warning; a warning when the server refuses the field)",
        cause: "`tool_choice: \"none\"`, `\"required\"` or a named function ignored",
        fix: "fix or upgrade the server; vLLM forces named choices with `--enable-auto-tool-choice` and a parser";
    SERVER_MAX_COMPLETION_TOKENS = "server.max-completion-tokens", Server, Online,
        fails: "a request field accepted and ignored: more tokens than `max_completion_tokens` (an error for what `[client] relies_on` lists, else a warning; a warning when the server refuses the field)",
        cause: "`max_completion_tokens` accepted and ignored",
        fix: "upgrade the server, or have the client send `max_tokens`";
    SERVER_TEMPLATE_KWARGS = "server.template-kwargs", Server, Online,
        fails: "a request field accepted and ignored: a prompt that `chat_template_kwargs` did not change (an error for what `[client] relies_on` lists, else a warning; a warning when the server refuses the field)",
        cause: "`chat_template_kwargs` ignored (e.g. `enable_thinking=false`)",
        fix: "pass them at server start, or upgrade";
    SERVER_RESPONSE_FORMAT = "server.response-format", Server, Online,
        fails: "a request field accepted and ignored: a reply to a `json_schema` response format that is not JSON the schema accepts (an error for what `[client] relies_on` lists, else a warning; a warning when the server refuses the field)",
        cause: "a `json_schema` response format ignored (free text back)",
        fix: "a server with constrained decoding";
    SERVER_HEALTH = "server.health", Server, Online,
        fails: "— (info: the server has no `/health`; a warning for orchestrators that probe it)",
        cause: "info: no `/health`",
        fix: "— (a warning for orchestrators that probe it)";
    SERVER_INCLUDE_USAGE = "server.include-usage", Server, Online,
        fails: "— (warns when streams ignore `stream_options.include_usage`: no usage arrives, so token counts are estimated)",
        cause: "no usage chunk with `stream_options.include_usage`",
        fix: "token counts are then estimated; upgrade the server";
    SERVER_BAD_REQUESTS = "server.bad-requests", Server, Online,
        fails: "— (warns when a bad request gets a 5xx, or a 2xx, instead of a 4xx with an error body)",
        cause: "a bad request gets a 5xx or a 2xx instead of a 4xx with a body",
        fix: "fix the server's validation";
    SERVER_TARGET = "server.target", Server, Online,
        fails: "— (info: the target runs in-process, so the server boundary is not exercised)",
        cause: "info: the target runs in-process, so the server boundary is not exercised",
        fix: "point `--target` at a server";
    SERVER_LATENCY_TTFT = "server.latency-ttft", Server, Latency,
        fails: "TTFT regressed: the bootstrap interval of the median difference lies wholly beyond the allowance (tolerance, floor); one that straddles it is INCONCLUSIVE, a warning with how many more samples would decide (an error with `[latency] inconclusive = \"fail\"`)",
        cause: "a latency metric regressed beyond tolerance and the noise band",
        fix: "find what slowed down ([Troubleshooting: slow](troubleshooting.md#slow)); `gate --update` to accept a deliberate change";
    SERVER_SLO = "server.slo", Server, Latency,
        fails: "SLO attainment below `[latency] min_slo_attainment`",
        cause: "SLO attainment below `[latency] min_slo_attainment`",
        fix: "capacity, or the SLO";
    SERVER_LATENCY_CLIENT = "server.latency-client", Server, Latency,
        fails: "the client fell behind while it measured (event loop late, CPU saturated, send drift), or, in-process, other processes took a quarter or more of the cores the model computes on: the latency figures are marked unreliable and a regression is not judged (warning)",
        cause: "the client fell behind while measuring: figures unreliable",
        fix: "a less loaded client, lower concurrency, or `--shard`";
    SERVER_LATENCY_TPOT = "server.latency-tpot", Server, Latency,
        fails: "TPOT regressed: the bootstrap interval of the median difference lies wholly beyond the allowance (tolerance, floor); one that straddles it is INCONCLUSIVE, a warning with how many more samples would decide (an error with `[latency] inconclusive = \"fail\"`)",
        cause: "a latency metric regressed beyond tolerance and the noise band",
        fix: "find what slowed down ([Troubleshooting: slow](troubleshooting.md#slow)); `gate --update` to accept a deliberate change";
    SERVER_LATENCY_E2EL = "server.latency-e2el", Server, Latency,
        fails: "E2EL regressed: the bootstrap interval of the median difference lies wholly beyond the allowance (tolerance, floor); one that straddles it is INCONCLUSIVE, a warning with how many more samples would decide (an error with `[latency] inconclusive = \"fail\"`)",
        cause: "a latency metric regressed beyond tolerance and the noise band",
        fix: "find what slowed down ([Troubleshooting: slow](troubleshooting.md#slow)); `gate --update` to accept a deliberate change";
    SERVER_LATENCY_ITL = "server.latency-itl", Server, Latency,
        fails: "ITL regressed: the bootstrap interval of the median difference lies wholly beyond the allowance (tolerance, floor); one that straddles it is INCONCLUSIVE, a warning with how many more samples would decide (an error with `[latency] inconclusive = \"fail\"`)",
        cause: "a latency metric regressed beyond tolerance and the noise band",
        fix: "find what slowed down ([Troubleshooting: slow](troubleshooting.md#slow)); `gate --update` to accept a deliberate change";
    SERVER_LATENCY = "server.latency", Server, Latency,
        fails: "a latency metric regressed beyond tolerance and the noise band (the metric's own id when it has one)",
        cause: "a latency metric regressed beyond tolerance and the noise band",
        fix: "find what slowed down ([Troubleshooting: slow](troubleshooting.md#slow)); `gate --update` to accept a deliberate change";
    SERVER_CAPACITY = "server.capacity", Server, Latency,
        fails: "(`bench --mode capacity --baseline FILE`) the capacity under the SLOs fell by more than `[latency] capacity_drop` (default 10 %) even on the most favourable reading of both intervals; INCONCLUSIVE when the intervals straddle the allowed drop (a warning naming the resolution that would decide; an error with `[latency] inconclusive = \"fail\"`)",
        cause: "the server takes less load within the SLOs than the saved search found",
        fix: "find what slowed down ([Troubleshooting: slow](troubleshooting.md#slow)): the step table says whether the server's queue explains it; `--save` a new search to accept a deliberate change";
    SERVER_LATENCY_BASELINE = "server.latency-baseline", Server, Latency,
        fails: "— (warns when the baseline was recorded on a machine of another speed: calibration)",
        cause: "the baseline was recorded on a machine of another speed (calibration)",
        fix: "re-record with `gate --update` on the machine you gate on";
    SERVER_LATENCY_ERRORS = "server.latency-errors", Server, Latency,
        fails: "latency requests failed",
        cause: "latency requests failed",
        fix: "the server's errors under load";
    LATENCY_REGRESSION = "latency.regression", Server, Name,
        fails: "— (a latency metric's JUnit failure type)",
        cause: "a latency metric's JUnit failure type",
        fix: "as `server.latency-*`";
    CLIENT_FIELDS_HONOURED = "client.fields-honoured", Client, Online,
        fails: "(with `[client] recording`, against a server) the recorded client sends a field the server was seen in the same run not to honour — `max_completion_tokens`, `chat_template_kwargs`, `tool_choice`, `response_format`, `stream_options.include_usage`, `tools`, `stop`, `max_tokens` — named with the server check's observation (an error: the recording proves the client relies on it, though the server check alone only warns); a warning for a field the run's probes did not exercise; info for fields no check covers (`parallel_tool_calls`, `reasoning_effort`, …)",
        cause: "the application sends a field the server was seen to ignore",
        fix: "change the server, or stop relying on the field";
    CLIENT_SSE = "client.sse", Client, Online,
        fails: "(with `[client] command`, against a server) the suite's own client breaks on a hostile-but-legal SSE variant it must survive (`[client] sse_variants`), or on the smallest combination of them that does: the variant, the event-stream rule, the public reports, the client's last stderr lines (a warning for a variant not listed)",
        cause: "the application's SSE reader breaks on a legal stream variant",
        fix: "upgrade the client library ([the real-client matrix](matrices/clients.md))";
    CLIENT_RECORDING = "client.recording", Client, Online,
        fails: "`[client]` states a contract but names no recording, or the recording cannot be read",
        cause: "`[client]` states a contract but names no recording",
        fix: "record with `chatgate proxy --record client.jsonl`, set `[client] recording`";
    CLIENT_ENDPOINT = "client.endpoint", Client, Online,
        fails: "a recorded request goes to another endpoint than the `[client]` contract names",
        cause: "the application sends another endpoint, model, parameters or message shapes than the contract",
        fix: "fix the application's configuration, or the contract";
    CLIENT_MODEL = "client.model", Client, Online,
        fails: "a recorded request names another model than the contract",
        cause: "the application sends another endpoint, model, parameters or message shapes than the contract",
        fix: "fix the application's configuration, or the contract";
    CLIENT_PARAMS = "client.params", Client, Online,
        fails: "a recorded request sends parameters outside the contract",
        cause: "the application sends another endpoint, model, parameters or message shapes than the contract",
        fix: "fix the application's configuration, or the contract";
    CLIENT_REQUIRED = "client.required", Client, Online,
        fails: "a recorded request lacks a field the contract requires",
        cause: "the application sends another endpoint, model, parameters or message shapes than the contract",
        fix: "fix the application's configuration, or the contract";
    CLIENT_FORBIDDEN = "client.forbidden", Client, Online,
        fails: "a recorded request sends a field the contract forbids",
        cause: "the application sends another endpoint, model, parameters or message shapes than the contract",
        fix: "fix the application's configuration, or the contract";
    CLIENT_STREAM = "client.stream", Client, Online,
        fails: "a recorded request streams (or does not) against the contract",
        cause: "the application sends another endpoint, model, parameters or message shapes than the contract",
        fix: "fix the application's configuration, or the contract";
    CLIENT_MESSAGE_SHAPE = "client.message-shape", Client, Online,
        fails: "a recorded request sends message shapes the `[client]` contract does not allow",
        cause: "the application sends another endpoint, model, parameters or message shapes than the contract",
        fix: "fix the application's configuration, or the contract";
    CLIENT_ERRORS = "client.errors", Client, Online,
        fails: "recorded replies carry errors the client met",
        cause: "the application sends another endpoint, model, parameters or message shapes than the contract",
        fix: "fix the application's configuration, or the contract";
    REPLAY_SNAPSHOTS = "replay.snapshots", Replay, Replay,
        fails: "a reply differs from its accepted snapshot, or has none yet (a `.snap.new` waits for review)",
        cause: "a reply differs from its accepted snapshot, or has none yet",
        fix: "read the first broken boundary first; then `chatgate review` ([Snapshots](snapshots.md))";
    REPLAY_DATE = "replay.date", Replay, Replay,
        fails: "— (info: replies that differ from snapshots made on another day, on a server that prints its own date into the prompt, were not judged; how to pin that server's date)",
        cause: "info: replies from a server that prints its own date were not judged",
        fix: "pin the server's date";
    REPLAY_ORPHANS = "replay.orphans", Replay, Replay,
        fails: "— (warns when snapshots belong to no prompt of the suite)",
        cause: "snapshots belong to no prompt of the suite",
        fix: "`chatgate accept SUITE --prune-orphans`";
    REPLAY_NOT_RUN = "replay.not-run", Replay, Replay,
        fails: "— (info: `gate --fail-fast` stopped at the first broken boundary; the checks that could only fail later, the replay and the latency stage were not run)",
        cause: "info: `gate --fail-fast` stopped at the first broken boundary",
        fix: "fix the first broken boundary, or run the gate without `--fail-fast` to see every symptom";
    REPLAY_PROMPT = "replay.prompt", Replay, Name,
        fails: "— (one replayed prompt's JUnit case class)",
        cause: "one replayed prompt's result (JUnit case class)",
        fix: "as `replay.snapshots`";
}

/// The check with this id.
pub fn find(id: &str) -> Option<&'static Check> {
    ALL.iter().copied().find(|c| c.id == id)
}

/// The check with this id, or a message naming the closest ones (a suite naming an id that is
/// not here is refused at load: a typo in `skip` must not leave a quirk unsilenced, and a typo
/// in `strict` must not leave a check lenient without a word).
pub fn known(id: &str) -> Result<&'static Check, String> {
    if let Some(c) = find(id) {
        return Ok(c);
    }
    let prefix = id.split('.').next().unwrap_or(id);
    let near: Vec<&str> = ALL
        .iter()
        .map(|c| c.id)
        .filter(|c| c.starts_with(&format!("{prefix}.")))
        .collect();
    Err(if near.is_empty() {
        format!(
            "unknown check id {id:?} (ids start with checkpoint., tokenizer., template., generation., server., client., replay. or latency.)"
        )
    } else {
        format!(
            "unknown check id {id:?}; the {prefix} checks are: {}",
            near.join(", ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn ids_are_unique_and_name_their_boundary() {
        let mut seen = BTreeSet::new();
        for c in ALL {
            assert!(seen.insert(c.id), "{} twice", c.id);
            let prefix = c.id.split('.').next().unwrap();
            let boundary = match prefix {
                "generation" => "generation-config",
                "latency" => "server",
                p => p,
            };
            assert_eq!(c.boundary.name(), boundary, "{}", c.id);
            assert!(
                !c.fails.is_empty() && !c.cause.is_empty() && !c.fix.is_empty(),
                "{}",
                c.id
            );
        }
    }

    #[test]
    fn the_registry_is_in_chain_order() {
        let order: Vec<Boundary> = ALL.iter().map(|c| c.boundary).collect();
        let mut sorted = order.clone();
        sorted.sort();
        assert_eq!(
            order, sorted,
            "ALL lists the checks by boundary in chain order"
        );
    }

    #[test]
    fn unknown_ids_name_their_neighbours() {
        assert!(known("tokenizer.round-trip").is_ok());
        let e = known("tokenizer.roundtrip").unwrap_err();
        assert!(e.contains("tokenizer.round-trip"), "{e}");
        assert!(known("nonsense").unwrap_err().contains("ids start with"));
    }
}
