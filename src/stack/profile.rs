//! What chatgate knows of each serving stack beyond what it feeds the model (`feed.rs`): how a
//! running server gives it away, what a suite for it must set, which request fields it passes to
//! the template, and why its temperature 0 may still sample. One entry per stack: adding a
//! serving stack is its variant and feed in `feed.rs` and its profile here.
use super::Stack;

/// A route a server answers (or a field it reports), as `chatgate` probes them once per run
/// (`endpoint::openai::introspect`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// llama-cpp-python's `POST /extras/tokenize`.
    ExtrasTokenize,
    /// llama.cpp's `POST /apply-template`.
    ApplyTemplate,
    /// llama.cpp's `GET /props` with `default_generation_settings` or `chat_template`.
    LlamaCppProps,
    /// TGI's `POST /chat_tokenize`.
    TgiChatTokenize,
    /// TGI's `GET /info` with `model_id` and `max_input_tokens`.
    TgiInfo,
    /// vLLM's and SGLang's chat `POST /tokenize` (with `messages`).
    ChatTokenize,
}

/// A serving stack's profile.
pub struct Profile {
    pub stack: Stack,
    /// The routes that give the stack away (any one of them), and the evidence in words. Stacks
    /// are tried in [`PROFILES`]' order: the more specific first.
    pub detected_by: &'static [Route],
    pub evidence: &'static str,
    /// What a suite for this stack must send with every request, and why (`chatgate init`
    /// writes it into `[target] extra_body`).
    pub extra_body: Option<(&'static str, &'static str)>,
    /// Whether its chat endpoint passes `chat_template_kwargs` to the template.
    pub takes_template_kwargs: bool,
    /// Why its temperature 0 may not be argmax, and the fix (`generation.sampling-honoured`).
    pub sampling_cause: (&'static str, &'static str),
    /// A sampler the stack applies at temperature 0 unless a request field turns it off: the
    /// field, why, and the fix (named first when the suite does not send the field).
    pub default_sampler: Option<(&'static str, &'static str, &'static str)>,
    /// How to pin the date a template prints from `date_string`, `{}` the day; None: through
    /// `chat_template_kwargs`, when it takes them.
    pub pin_date: Option<&'static str>,
}

/// Every stack's profile, in the order detection tries them.
pub static PROFILES: &[Profile] = &[
    Profile {
        stack: Stack::LlamaCppPython,
        detected_by: &[Route::ExtrasTokenize],
        evidence: "the server answers POST /extras/tokenize (llama-cpp-python)",
        extra_body: Some((
            "llama-cpp-python's default repeat_penalty is 1.1: temperature 0 is not argmax without this.",
            "{ repeat_penalty = 1.0 }",
        )),
        takes_template_kwargs: false,
        sampling_cause: (
            "llama.cpp samplers that run at temperature 0 too: repeat/presence/frequency penalties and DRY (see the server's /props default_generation_settings)",
            "set them neutral in [target] extra_body, e.g. `{ repeat_penalty = 1.0, presence_penalty = 0.0, frequency_penalty = 0.0, dry_multiplier = 0.0 }`",
        ),
        default_sampler: Some((
            "repeat_penalty",
            "llama-cpp-python applies repeat_penalty = 1.1 to every request that does not set it, temperature 0 included: the penalised argmax is not the token its logprobs rank first",
            "add `extra_body = { repeat_penalty = 1.0 }` to [target] (chatgate init writes it when it detects llama-cpp-python)",
        )),
        pin_date: Some("start llama-cpp-python with --chat_template_kwargs '{\"date_string\": \"{}\"}'"),
    },
    Profile {
        stack: Stack::LlamaCpp,
        detected_by: &[Route::ApplyTemplate, Route::LlamaCppProps],
        evidence: "the server answers GET /props or POST /apply-template (llama.cpp)",
        extra_body: Some((
            "llama-server reuses the KV cache of the previous request's common prefix (cache_prompt, on by\n# default); its README warns the logits are then not bit-for-bit identical, so the same\n# greedy prompt can get another reply. Replay needs the same reply every time.",
            "{ cache_prompt = false }",
        )),
        takes_template_kwargs: true,
        sampling_cause: (
            "llama.cpp samplers that run at temperature 0 too: repeat/presence/frequency penalties and DRY (see the server's /props default_generation_settings)",
            "set them neutral in [target] extra_body, e.g. `{ repeat_penalty = 1.0, presence_penalty = 0.0, frequency_penalty = 0.0, dry_multiplier = 0.0 }`",
        ),
        default_sampler: None,
        pin_date: None,
    },
    Profile {
        stack: Stack::Tokenizers,
        detected_by: &[Route::TgiChatTokenize, Route::TgiInfo],
        evidence: "the server answers TGI's GET /info or POST /chat_tokenize",
        extra_body: None,
        takes_template_kwargs: false,
        sampling_cause: (
            "the server applies generation_config.json's defaults (repetition_penalty, top_k) over the request",
            "send the fields in [target] extra_body (e.g. `{ repetition_penalty = 1.0 }`) or remove them from generation_config.json",
        ),
        default_sampler: None,
        pin_date: None,
    },
    Profile {
        stack: Stack::Vllm,
        detected_by: &[Route::ChatTokenize],
        evidence: "the server answers chat POST /tokenize (vLLM, SGLang)",
        extra_body: None,
        takes_template_kwargs: true,
        sampling_cause: (
            "vLLM applies generation_config.json's sampling defaults (repetition_penalty, top_k, …) to requests that omit them (vllm#15241)",
            "start vLLM with --generation-config vllm, or send the fields in [target] extra_body (e.g. `{ repetition_penalty = 1.0 }`)",
        ),
        default_sampler: None,
        pin_date: None,
    },
    Profile {
        stack: Stack::Transformers,
        detected_by: &[],
        evidence: "",
        extra_body: None,
        takes_template_kwargs: true,
        sampling_cause: (
            "the server applies generation_config.json's defaults (repetition_penalty, top_k) over the request",
            "send the fields in [target] extra_body (e.g. `{ repetition_penalty = 1.0 }`) or remove them from generation_config.json",
        ),
        default_sampler: None,
        pin_date: None,
    },
];

impl Stack {
    /// This stack's profile.
    pub fn profile(self) -> &'static Profile {
        PROFILES
            .iter()
            .find(|p| p.stack == self)
            .expect("every stack has a profile (a test keeps it so)")
    }
}

/// The stack whose routes a server answers (the first profile, in order, that any of them
/// names), with the evidence.
pub fn detect(answers: impl Fn(Route) -> bool) -> Option<(Stack, String)> {
    PROFILES
        .iter()
        .find(|p| p.detected_by.iter().any(|r| answers(*r)))
        .map(|p| (p.stack, p.evidence.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_stack_has_one_profile() {
        use clap::ValueEnum;
        for s in Stack::value_variants() {
            assert_eq!(PROFILES.iter().filter(|p| p.stack == *s).count(), 1, "{s}");
        }
    }

    #[test]
    fn the_more_specific_routes_win() {
        // llama-cpp-python also answers nothing of llama.cpp's; a server answering both
        // llama.cpp's /props and a chat /tokenize is llama.cpp.
        let both = |r: Route| matches!(r, Route::LlamaCppProps | Route::ChatTokenize);
        assert_eq!(detect(both).map(|(s, _)| s), Some(Stack::LlamaCpp));
        assert_eq!(detect(|_| false), None);
    }
}
