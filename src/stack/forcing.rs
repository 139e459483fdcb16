//! The stacks that can serve as a *reference server* for the checkpoint fingerprint: they
//! teacher-force a continuation over HTTP (exact ids in, the logprob of given tokens and the
//! alternatives out). The requests each takes are in `endpoint/reference.rs`.
use std::fmt;

/// The stacks that can teacher-force, by how they are asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForcingStack {
    Vllm,
    Sglang,
    Tgi,
    LlamaServer,
}

impl ForcingStack {
    pub fn name(self) -> &'static str {
        match self {
            ForcingStack::Vllm => "vLLM",
            ForcingStack::Sglang => "SGLang",
            ForcingStack::Tgi => "TGI",
            ForcingStack::LlamaServer => "llama-server",
        }
    }

    /// How the stack teacher-forces, for the report.
    pub fn method(self) -> &'static str {
        match self {
            ForcingStack::Vllm => "POST /v1/completions with token-id prompts and prompt_logprobs",
            ForcingStack::Sglang => {
                "POST /generate with input_ids, return_logprob and logprob_start_len"
            }
            ForcingStack::Tgi => {
                "POST /generate with decoder_input_details (text in, the prefill ids checked)"
            }
            ForcingStack::LlamaServer => {
                "POST /completion with token-id prompts and n_probs, one request per token"
            }
        }
    }

    /// `[reference] stack` as the suite spells it.
    pub fn parse(s: &str) -> Option<ForcingStack> {
        match s.to_ascii_lowercase().as_str() {
            "vllm" => Some(ForcingStack::Vllm),
            "sglang" => Some(ForcingStack::Sglang),
            "tgi" | "text-generation-inference" => Some(ForcingStack::Tgi),
            "llama-server" | "llama.cpp" | "llamacpp" => Some(ForcingStack::LlamaServer),
            _ => None,
        }
    }
}

impl fmt::Display for ForcingStack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a stack cannot teacher-force, in its own terms.
pub fn cannot_force(stack_seen: &str) -> String {
    format!("{stack_seen} cannot teacher-force a continuation over HTTP (llama-cpp-python's server takes text prompts only; transformers serve returns no logprobs), so it cannot be the reference: a fingerprint from its greedy text alone would pass a checkpoint that merely agrees on the argmax")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stacks_are_named_as_users_name_them() {
        assert_eq!(ForcingStack::parse("vLLM"), Some(ForcingStack::Vllm));
        assert_eq!(
            ForcingStack::parse("llama-server"),
            Some(ForcingStack::LlamaServer)
        );
        assert_eq!(ForcingStack::parse("transformers"), None);
    }
}
