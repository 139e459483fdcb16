//! The networks candle runs, one variant per architecture, behind one forward pass and a
//! per-request cache reset.
use super::*;

/// The longest stretch of a prompt one forward pass takes. Attention over the whole prompt at
/// once materialises `heads × seq × seq` scores per layer (and as many again for the mask, the
/// softcap and the softmax): at 4,096 tokens that is gigabytes of fresh pages, most of the
/// work being the masked upper triangle. In chunks the scores are `heads × 512 × kv_len` and
/// the masked part is one chunk's triangle: a 4,096-token prompt on the Gemma-2 stand-in took
/// 5.9 s in one pass.
const PREFILL_CHUNK: usize = 512;

/// The network and its per-request state.
pub(super) enum Net {
    Llama {
        model: llama::Llama,
        /// A cache with nothing in it; cloned per request (the rope tables are shared).
        fresh: llama::Cache,
        live: Option<llama::Cache>,
    },
    Mistral(mistral::Model),
    Qwen2(qwen2::ModelForCausalLM),
    Qwen3(qwen3::ModelForCausalLM),
    Phi3(phi3::Model),
    /// candle's Gemma-2 built without its final soft-cap, which [`Net::forward`] applies
    /// ([`Net::gemma2`]).
    Gemma2 {
        model: gemma2::Model,
        soft_cap: Option<f32>,
    },
    Gguf(quantized_llama::ModelWeights),
    GgufLlamaFamily(Box<super::llama_family::LlamaFamily>),
    Gemma3(Box<super::gemma3::Gemma3>),
}

impl Net {
    /// candle's Gemma-2 from `config` (by `build`), its final logit soft-cap taken out of the
    /// network and applied to the logits vector instead ([`super::sampling::soft_cap`]): the
    /// same function, vectorised, where candle's three tensor passes with libm's `tanh` per
    /// value were 30 % of a token's time on a 256k vocabulary.
    pub(super) fn gemma2<E>(
        config: &gemma2::Config,
        build: impl FnOnce(&gemma2::Config) -> std::result::Result<gemma2::Model, E>,
    ) -> std::result::Result<Net, E> {
        let mut uncapped = config.clone();
        let soft_cap = uncapped.final_logit_softcapping.take().map(|c| c as f32);
        Ok(Net::Gemma2 {
            model: build(&uncapped)?,
            soft_cap,
        })
    }

    /// Forget every cached key/value: the next forward starts a new sequence.
    pub(super) fn reset(&mut self) {
        match self {
            Net::Llama { fresh, live, .. } => *live = Some(fresh.clone()),
            Net::Mistral(m) => m.clear_kv_cache(),
            Net::Qwen2(m) => m.clear_kv_cache(),
            Net::Qwen3(m) => m.clear_kv_cache(),
            Net::Phi3(m) => m.clear_kv_cache(),
            Net::Gemma2 { model, .. } => model.clear_kv_cache(),
            Net::Gguf(m) => m.clear_kv_cache(),
            Net::GgufLlamaFamily(m) => m.clear_kv_cache(),
            Net::Gemma3(m) => m.clear_kv_cache(),
        }
    }

    /// Feed `ids` at positions `pos..`, extending the cache; logits of the last position.
    pub(super) fn forward(&mut self, ids: &[u32], pos: usize) -> candle_core::Result<Vec<f32>> {
        let input = Tensor::new(ids, &Device::Cpu)?.unsqueeze(0)?;
        let logits = match self {
            Net::Llama { model, fresh, live } => {
                let cache = live.get_or_insert_with(|| fresh.clone());
                model.forward(&input, pos, cache)?
            }
            Net::Mistral(m) => m.forward(&input, pos)?,
            Net::Qwen2(m) => m.forward(&input, pos)?,
            Net::Qwen3(m) => m.forward(&input, pos)?,
            Net::Phi3(m) => m.forward(&input, pos)?,
            Net::Gemma2 { model, .. } => model.forward(&input, pos)?,
            Net::Gguf(m) => m.forward(&input, pos)?,
            Net::GgufLlamaFamily(m) => m.forward(&input, pos)?,
            Net::Gemma3(m) => m.forward(&input, pos)?,
        };
        let mut logits = logits
            .flatten_all()?
            .to_dtype(DType::F32)?
            .to_vec1::<f32>()?;
        if let Net::Gemma2 {
            soft_cap: Some(cap),
            ..
        } = self
        {
            super::sampling::soft_cap(&mut logits, *cap);
        }
        Ok(logits)
    }

    /// Feed a whole prompt from position 0, [`PREFILL_CHUNK`] tokens at a time through the
    /// cache; logits of its last position. A prompt of one chunk or less is one forward, as
    /// before; a longer one gives the same logits up to float rounding: candle-transformers'
    /// networks mask a query at `pos + i` to keys `..= pos + i` and are built without a window
    /// (the context is capped to it, `hyper.rs`), and the own decoders mask by position,
    /// windows included (`attention::attention_mask`). target_candle checks each kind.
    pub(super) fn prefill(&mut self, ids: &[u32]) -> candle_core::Result<Vec<f32>> {
        let mut logits = Vec::new();
        for (k, chunk) in ids.chunks(PREFILL_CHUNK).enumerate() {
            logits = self.forward(chunk, k * PREFILL_CHUNK)?;
        }
        Ok(logits)
    }

    /// A full forward over `ids` that neither reads nor keeps a cache.
    pub(super) fn forward_uncached(&mut self, ids: &[u32]) -> candle_core::Result<Vec<f32>> {
        match self {
            Net::Llama { model, fresh, .. } => {
                let input = Tensor::new(ids, &Device::Cpu)?.unsqueeze(0)?;
                let mut cache = fresh.clone();
                cache.use_kv_cache = false;
                model
                    .forward(&input, 0, &mut cache)?
                    .flatten_all()?
                    .to_dtype(DType::F32)?
                    .to_vec1::<f32>()
            }
            _ => {
                self.reset();
                let out = self.forward(ids, 0);
                self.reset();
                out
            }
        }
    }
}
