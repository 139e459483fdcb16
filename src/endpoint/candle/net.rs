//! The networks candle runs, one variant per architecture, behind one forward pass and a
//! per-request cache reset.
use super::*;

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
    Gemma2(gemma2::Model),
    Gguf(quantized_llama::ModelWeights),
    GgufLlamaFamily(Box<super::llama_family::LlamaFamily>),
    Gemma3(Box<super::gemma3::Gemma3>),
}

impl Net {
    /// Forget every cached key/value: the next forward starts a new sequence.
    pub(super) fn reset(&mut self) {
        match self {
            Net::Llama { fresh, live, .. } => *live = Some(fresh.clone()),
            Net::Mistral(m) => m.clear_kv_cache(),
            Net::Qwen2(m) => m.clear_kv_cache(),
            Net::Qwen3(m) => m.clear_kv_cache(),
            Net::Phi3(m) => m.clear_kv_cache(),
            Net::Gemma2(m) => m.clear_kv_cache(),
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
            Net::Gemma2(m) => m.forward(&input, pos)?,
            Net::Gguf(m) => m.forward(&input, pos)?,
            Net::GgufLlamaFamily(m) => m.forward(&input, pos)?,
            Net::Gemma3(m) => m.forward(&input, pos)?,
        };
        logits.flatten_all()?.to_dtype(DType::F32)?.to_vec1::<f32>()
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
