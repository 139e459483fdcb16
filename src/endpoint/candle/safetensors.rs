//! Loading a Hugging Face directory: the shards, every tensor checked against the shapes
//! config.json implies before candle sees it.
use super::*;

impl CandleModel {
    pub(super) fn from_safetensors(dir: ModelDir) -> Result<CandleModel> {
        let root = dir.root.clone();
        let config = dir.config.clone().ok_or_else(|| {
            Error::in_file(&root, "has safetensors weights but no config.json")
                .hint("a Hugging Face checkpoint needs its config.json next to the weights")
        })?;
        let model_type = config.model_type.clone().ok_or_else(|| {
            Error::in_file(&config.path, "has no model_type")
                .hint("set model_type (llama, mistral, qwen2, qwen3, phi3, gemma2 or gemma3_text)")
        })?;
        let arch = match model_type.as_str() {
            "llama" => Arch::Llama,
            "mistral" => Arch::Mistral,
            "qwen2" => Arch::Qwen2,
            "qwen3" => Arch::Qwen3,
            "phi3" => Arch::Phi3,
            "gemma2" => Arch::Gemma2,
            "gemma3_text" => Arch::Gemma3,
            "gemma3" => {
                return Err(Error::in_file(
                    &config.path,
                    "model_type \"gemma3\" is Gemma 3 with its vision tower (Gemma3ForConditionalGeneration); the candle target runs the text model, gemma3_text",
                )
                .hint("serve this checkpoint with a server target (vLLM, transformers serve), or give the text-only checkpoint (model_type gemma3_text)"))
            }
            other => {
                return Err(Error::in_file(
                    &config.path,
                    format!("model_type \"{other}\" is not supported by the candle target"),
                )
                .hint("the candle target runs llama, mistral, qwen2, qwen3, phi3, gemma2 and gemma3_text checkpoints, and llama, qwen2, qwen3, qwen3moe, phi3, smollm3, granite, olmo2, mistral3, glm4, gemma2 and gemma3 GGUF files; use a server target for this model"))
            }
        };
        let files = shard_files(&dir)?;
        let shape = Hyper::read(&config, arch)?;
        let st = {
            // SAFETY: the files are mapped read-only; as with every mmap, changing them on disk
            // while the model is loaded is undefined behaviour (candle's own loaders do this).
            let mapped = unsafe { MmapedSafetensors::multi(&files) };
            mapped.map_err(|e| {
                let at = if files.len() == 1 {
                    files[0].clone()
                } else {
                    root.clone()
                };
                Error::in_file(
                    at,
                    format!("cannot read the safetensors weights: {}", candle_msg(&e)),
                )
            })?
        };
        let tied = check_tensors(&st, &shape, &dir)?;
        let ctx = shape.context_length();
        let vb = VarBuilder::from_backend(Box::new(st), DType::F32, Device::Cpu);
        let built = |e: candle_core::Error| {
            Error::in_file(
                &root,
                format!("cannot build the {model_type} model: {}", candle_msg(&e)),
            )
        };
        let net = match arch {
            Arch::Llama => {
                let cfg = shape.llama_config(tied);
                check_llama_shapes(&cfg).map_err(|p| Error::in_file(&config.path, p))?;
                let model = load_llama(vb, &cfg).map_err(|e| {
                    Error::in_file(&root, format!("cannot build the {model_type} model: {e}"))
                })?;
                let fresh =
                    llama::Cache::new(true, DType::F32, &cfg, &Device::Cpu).map_err(built)?;
                Net::Llama {
                    model,
                    fresh,
                    live: None,
                }
            }
            Arch::Mistral => {
                Net::Mistral(mistral::Model::new(&shape.mistral_config(), vb).map_err(built)?)
            }
            Arch::Qwen2 => {
                Net::Qwen2(qwen2::ModelForCausalLM::new(&shape.qwen2_config(), vb).map_err(built)?)
            }
            Arch::Qwen3 => {
                Net::Qwen3(qwen3::ModelForCausalLM::new(&shape.qwen3_config(), vb).map_err(built)?)
            }
            Arch::Phi3 => Net::Phi3(phi3::Model::new(&shape.phi3_config(tied), vb).map_err(built)?),
            Arch::Gemma2 => Net::gemma2(&shape.gemma2_config(), |cfg| {
                gemma2::Model::new(false, cfg, vb)
            })
            .map_err(built)?,
            // This crate's own decoder (gemma3.rs says why not candle's), as for a GGUF.
            Arch::Gemma3 => {
                let g = gemma3_shape(&config, &shape)?;
                let model = gemma3::Gemma3::build(&g, &mut gemma3::HfWeights { vb }, ctx);
                Net::Gemma3(Box::new(model.map_err(built)?))
            }
        };
        Self::assemble(dir, net, root, &model_type, shape.vocab, ctx, Vec::new())
    }
}

/// The safetensors files that hold the weights: the index's shards, else every top-level file.
pub(super) fn shard_files(dir: &ModelDir) -> Result<Vec<PathBuf>> {
    if let Some(index) = &dir.shard_index {
        if !index.missing_shards.is_empty() {
            return Err(Error::in_file(
                &index.path,
                format!(
                    "names shards that are not on disk: {}",
                    index.missing_shards.join(", ")
                ),
            ));
        }
        let names: BTreeSet<&String> = index.weight_map.values().collect();
        if names.is_empty() {
            return Err(Error::in_file(&index.path, "has an empty weight_map"));
        }
        return Ok(names.into_iter().map(|n| dir.root.join(n)).collect());
    }
    let files: Vec<PathBuf> = dir
        .weights
        .iter()
        .filter(|w| w.format == WeightFormat::Safetensors)
        .map(|w| w.path.clone())
        .collect();
    if files.is_empty() {
        return Err(Error::in_file(&dir.root, "holds no .safetensors files"));
    }
    Ok(files)
}

/// Every tensor present with the shape config.json implies and a float dtype; returns whether
/// the lm_head is tied to the embeddings (no lm_head.weight in the files).
pub(super) fn check_tensors(st: &MmapedSafetensors, hyper: &Hyper, dir: &ModelDir) -> Result<bool> {
    let file_of = |name: &str| -> PathBuf {
        if let Some(index) = &dir.shard_index {
            if let Some(f) = index.weight_map.get(name) {
                return dir.root.join(f);
            }
            return index.path.clone();
        }
        let files: Vec<&PathBuf> = dir
            .weights
            .iter()
            .filter(|w| w.format == WeightFormat::Safetensors)
            .map(|w| &w.path)
            .collect();
        match files.as_slice() {
            [one] => (*one).clone(),
            _ => dir.root.clone(),
        }
    };
    let mut tied = hyper.tie_word_embeddings;
    for (name, shape) in hyper.expected() {
        let view = match st.get(&name) {
            Ok(v) => v,
            Err(_) if name == "lm_head.weight" => {
                if hyper.tie_word_embeddings && hyper.arch != Arch::Mistral {
                    tied = true;
                    continue;
                }
                let why = if hyper.arch == Arch::Mistral {
                    "candle's Mistral has no tied embeddings"
                } else {
                    "config.json does not set tie_word_embeddings"
                };
                return Err(Error::in_file(
                    file_of(&name),
                    format!("lm_head.weight is missing ({why})"),
                ));
            }
            Err(_) => return Err(Error::in_file(
                file_of(&name),
                format!("tensor {name} is missing"),
            )
            .hint(
                "the weights do not match config.json (wrong checkpoint, or an unsupported layout)",
            )),
        };
        if view.shape() != shape.as_slice() {
            return Err(Error::in_file(
                file_of(&name),
                format!(
                    "tensor {name} has shape {:?}; config.json implies {:?}",
                    view.shape(),
                    shape
                ),
            ));
        }
        let dtype = format!("{:?}", view.dtype());
        if !matches!(dtype.as_str(), "F32" | "F16" | "BF16" | "F64") {
            return Err(Error::in_file(
                file_of(&name),
                format!("tensor {name} has dtype {dtype}; the candle target loads float weights (F32, F16, BF16)"),
            ));
        }
    }
    Ok(tied)
}
