//! What loading a checkpoint in-process will cost, read from the weight headers before a byte of
//! tensor data is read — so a model that cannot fit is refused with its estimate instead of the
//! process being killed by the kernel half way through.
//!
//! candle's CPU loading (0.11, read in its source; docs/research/reference-at-scale.md):
//! safetensors tensors are copied onto the heap and widened to F32 (`VarBuilder` converts
//! them; there is no BF16 matmul on the CPU), so the steady cost is 4 bytes per parameter plus
//! the largest tensor in its file dtype while it converts. A GGUF keeps quantized tensors as
//! they are, dequantizes F32/F16/BF16 tensors to F32, and dequantizes the token embedding to F32
//! beside its quantized copy; a gemma2 GGUF is dequantized whole (candle has no quantized
//! Gemma-2). Measured (benches/fingerprint.rs, the process's anonymous resident memory after
//! loading, docs/checkpoint-at-scale.md): a quantized GGUF holds its quantized bytes about twice
//! — each tensor is read into a buffer and copied into its quantized storage, and the allocator
//! keeps the freed buffers (most tensors are under glibc's mmap threshold) — so Llama-3.2-3B's
//! Q8_0 took 8.7 GB where the tensors alone are 5.5: the estimate counts them twice.
use std::io::Read;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::artifacts::{
    gguf_tensor_bytes, read_gguf, SAFETENSORS_MAX_HEADER_BYTES as MAX_HEADER_BYTES,
};
use crate::error::{Error, Result};

/// Beyond the weights: tokenizer, rope tables, KV cache and activations of the short prompts
/// chatgate runs, and the allocator's slack.
const RUNTIME_OVERHEAD: u64 = 512 << 20;

/// What loading a checkpoint with candle needs.
#[derive(Debug, Clone, PartialEq)]
pub struct Estimate {
    pub bytes: u64,
    pub parameters: u64,
    /// How the weights are held: "F32 (widened from BF16)", "GGUF Q8_0 kept quantized", ...
    pub held_as: String,
    /// The quantized type that holds most of the weights (a GGUF type name: "Q8_0", "Q4_K");
    /// None for float weights. The fingerprint's tolerance follows it.
    pub quantization: Option<String>,
}

/// The estimate for a model directory or a .gguf file, from headers alone; None when there is
/// nothing this can read (the loader then says what is wrong with the files).
pub fn estimate(path: &Path) -> Option<Estimate> {
    let files = weight_files(path);
    let ggufs: Vec<&PathBuf> = files.iter().filter(|p| has_ext(p, "gguf")).collect();
    let safetensors: Vec<&PathBuf> = files.iter().filter(|p| has_ext(p, "safetensors")).collect();
    if !safetensors.is_empty() {
        return safetensors_estimate(&safetensors);
    }
    match ggufs.as_slice() {
        [one] => gguf_estimate(one),
        _ => None,
    }
}

fn has_ext(p: &Path, ext: &str) -> bool {
    p.extension().is_some_and(|e| e.eq_ignore_ascii_case(ext))
}

fn weight_files(path: &Path) -> Vec<PathBuf> {
    if path.is_file() {
        return vec![path.to_path_buf()];
    }
    let Ok(entries) = std::fs::read_dir(path) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && (has_ext(p, "safetensors") || has_ext(p, "gguf")))
        .collect();
    out.sort();
    out
}

/// Every tensor widened to F32, plus the largest one in its file dtype while it converts.
fn safetensors_estimate(files: &[&PathBuf]) -> Option<Estimate> {
    let (mut parameters, mut largest_bytes) = (0u64, 0u64);
    let mut dtypes = std::collections::BTreeSet::new();
    for f in files {
        for (dtype, elements) in safetensors_tensors(f)? {
            parameters = parameters.saturating_add(elements);
            largest_bytes = largest_bytes.max(elements.saturating_mul(dtype_bytes(&dtype)));
            dtypes.insert(dtype);
        }
    }
    let from: Vec<String> = dtypes.into_iter().collect();
    Some(Estimate {
        bytes: parameters
            .saturating_mul(4)
            .saturating_add(largest_bytes)
            .saturating_add(RUNTIME_OVERHEAD),
        parameters,
        held_as: format!("F32 (the files hold {})", from.join(", ")),
        quantization: None,
    })
}

fn dtype_bytes(dtype: &str) -> u64 {
    match dtype {
        "F64" | "I64" | "U64" => 8,
        "F32" | "I32" | "U32" => 4,
        "F16" | "BF16" | "I16" | "U16" => 2,
        _ => 1,
    }
}

/// (dtype, elements) of each tensor a safetensors header declares. Only the header is read, and
/// its offsets are not checked against the file: a header-only or truncated file still says what
/// loading it would take (the loader reports the truncation when it fits).
fn safetensors_tensors(path: &Path) -> Option<Vec<(String, u64)>> {
    let mut file = std::fs::File::open(path).ok()?;
    let mut len = [0u8; 8];
    file.read_exact(&mut len).ok()?;
    let len = u64::from_le_bytes(len);
    if len > MAX_HEADER_BYTES {
        return None;
    }
    let mut header = vec![0u8; len as usize];
    file.read_exact(&mut header).ok()?;
    let Value::Object(entries) = serde_json::from_slice(&header).ok()? else {
        return None;
    };
    entries
        .iter()
        .filter(|(name, _)| name.as_str() != "__metadata__")
        .map(|(_, info)| {
            let dtype = info.get("dtype")?.as_str()?.to_string();
            let elements = info
                .get("shape")?
                .as_array()?
                .iter()
                .try_fold(1u64, |a, d| a.checked_mul(d.as_u64()?))?;
            Some((dtype, elements))
        })
        .collect()
}

/// Quantized tensors twice (their storage, and the read buffers the allocator keeps); float
/// tensors, the token embedding's second copy and every tensor of a gemma2 file as F32.
fn gguf_estimate(path: &Path) -> Option<Estimate> {
    let info = read_gguf(path).ok()?;
    let dequantize_all = info.architecture() == Some("gemma2");
    // Our own decoders (candle/gemma3.rs, candle/llama_family.rs) re-encode matrices for the
    // int8 tiles; a mixture-of-experts llama file runs in candle's `quantized_llama`.
    let moe = info
        .tensors
        .iter()
        .any(|t| t.name == "blk.0.ffn_gate_inp.weight");
    let tiles = matches!(
        info.architecture(),
        Some(
            "gemma3"
                | "llama"
                | "qwen2"
                | "qwen3"
                | "phi3"
                | "smollm3"
                | "granite"
                | "olmo2"
                | "mistral3"
                | "glm4"
                | "lfm2"
        )
    ) && !moe;
    let mut tile_budget = super::int8_tiles::MAX_TILED_BYTES;
    // Q4_1 and Q5_1 matrices are widened to F32 (candle/gguf.rs `widen`) when they fit its cap: 4 bytes a weight, held twice while
    // loading.
    let scalar_only =
        |t: &crate::artifacts::GgufTensor| super::gguf::widened_here_named(&t.type_name);
    let widened: u64 = info
        .tensors
        .iter()
        .filter(|t| scalar_only(t))
        .map(|t| t.elements().saturating_mul(4))
        .sum();
    // Only for candle's own model: ours hold them as Q8_0 integers and block offsets.
    let widens =
        !dequantize_all && !tiles && widened > 0 && widened <= super::gguf::MAX_WIDENED_BYTES;
    let (mut bytes, mut parameters) = (0u64, 0u64);
    let mut kinds = std::collections::BTreeSet::new();
    // Elements per quantized type: the one holding most of them names the reference's kind.
    let mut quantized = std::collections::BTreeMap::<String, u64>::new();
    for t in &info.tensors {
        let elements = t.elements();
        parameters = parameters.saturating_add(elements);
        let f32_bytes = elements.saturating_mul(4);
        let float = matches!(t.type_name.as_str(), "F32" | "F16" | "BF16");
        let held = if float || dequantize_all {
            f32_bytes
        } else if widens && scalar_only(t) {
            f32_bytes.saturating_mul(2)
        } else {
            gguf_tensor_bytes(t).unwrap_or(f32_bytes).saturating_mul(2)
        };
        bytes = bytes.saturating_add(held);
        if t.name == "token_embd.weight" && !float && !dequantize_all {
            bytes = bytes.saturating_add(f32_bytes);
        }
        // Q4_0, Q5_0, Q8_0, Q4_1 and Q5_1 matrices are re-encoded for candle's int8 tiles
        // (candle/int8_tiles.rs) while they fit its cap, or, on a CPU without the tiles, get an
        // F32 copy for prefill; the tied output head is one more.
        if tiles && t.dims.len() == 2 && !t.name.ends_with("norm.weight") {
            let (k, rows) = (t.dims[0] as usize, t.dims[1] as usize);
            let tied_head = t.name == "token_embd.weight"
                && !info.tensors.iter().any(|o| o.name == "output.weight");
            if t.name != "token_embd.weight" || tied_head {
                let name = t.type_name.as_str();
                // Q4_1 and Q5_1: a minimum per block, kept as an F32 offset.
                if matches!(name, "Q4_1" | "Q5_1") {
                    bytes = bytes.saturating_add(elements / 32 * 4);
                }
                match super::int8_tiles::tiled_bytes(name, rows, k) {
                    Some(b) if b <= tile_budget => {
                        tile_budget -= b;
                        bytes = bytes.saturating_add(b);
                    }
                    _ => {
                        if matches!(name, "Q5_0" | "Q4_1" | "Q5_1") {
                            bytes = bytes.saturating_add(elements / 32 * 34);
                        }
                        let wide = super::int8_tiles::wide_bytes(name, rows, k);
                        if let Some(b) = wide.filter(|&b| b <= tile_budget) {
                            tile_budget -= b;
                            bytes = bytes.saturating_add(b);
                        }
                    }
                }
            }
        }
        kinds.insert(t.type_name.clone());
        if !float {
            *quantized.entry(t.type_name.clone()).or_default() += elements;
        }
    }
    let quantization = quantized
        .into_iter()
        .max_by_key(|(_, n)| *n)
        .map(|(name, _)| name);
    let kinds: Vec<String> = kinds.into_iter().collect();
    Some(Estimate {
        bytes: bytes.saturating_add(RUNTIME_OVERHEAD),
        parameters,
        held_as: if dequantize_all {
            format!(
                "F32 (a gemma2 GGUF is dequantized whole; it holds {})",
                kinds.join(", ")
            )
        } else {
            format!(
                "GGUF {} (quantized tensors kept, float ones as F32)",
                kinds.join(", ")
            )
        },
        quantization,
    })
}

/// Memory this process may still use: `CHATGATE_MEMORY_AVAILABLE` (e.g. `16G`, for a runner
/// whose limit the kernel does not show), else the smaller of the kernel's MemAvailable and the
/// cgroup's room (a container's limit).
pub fn available() -> Option<u64> {
    if let Ok(v) = std::env::var("CHATGATE_MEMORY_AVAILABLE") {
        return parse_size(&v);
    }
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok().and_then(|t| {
        t.lines()
            .find_map(|l| l.strip_prefix("MemAvailable:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kb| kb * 1024)
    });
    let cgroup = cgroup_room();
    match (meminfo, cgroup) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// cgroup v2: memory.max − memory.current of this process's group, when it has a limit.
fn cgroup_room() -> Option<u64> {
    let rel = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let rel = rel.lines().find_map(|l| l.strip_prefix("0::"))?.trim();
    let dir = Path::new("/sys/fs/cgroup").join(rel.trim_start_matches('/'));
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).ok();
    let max: u64 = read("memory.max")?.trim().parse().ok()?; // "max": no limit
    let current: u64 = read("memory.current")?.trim().parse().ok()?;
    Some(max.saturating_sub(current))
}

/// `16G`, `512M`, `2048K`, or bytes.
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().last()? {
        (i, 'G' | 'g') => (&s[..i], 1u64 << 30),
        (i, 'M' | 'm') => (&s[..i], 1 << 20),
        (i, 'K' | 'k') => (&s[..i], 1 << 10),
        _ => (s, 1),
    };
    let n: f64 = num.trim().parse().ok()?;
    (n.is_finite() && n >= 0.0).then_some((n * mult as f64) as u64)
}

/// Bytes as GB with one decimal (powers of 1000, as disks and runners are sold).
pub fn show(bytes: u64) -> String {
    format!("{:.1} GB", bytes as f64 / 1e9)
}

/// Refuse (exit 2) to load `path` when its estimate exceeds the memory available, with the
/// estimate, what is available and `ways_out`; a model whose cost cannot be estimated is left
/// to the loader.
pub fn ensure_fits(path: &Path, role: &str, ways_out: &str) -> Result<()> {
    let (Some(need), Some(have)) = (estimate(path), available()) else {
        return Ok(());
    };
    if need.bytes <= have {
        return Ok(());
    }
    Err(Error::in_file(
        path,
        format!(
            "{role} would need about {} to load in-process ({} parameters held as {}), and this machine has {} available: refused before loading",
            show(need.bytes),
            need.parameters,
            need.held_as,
            show(have),
        ),
    )
    .hint(ways_out.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_like_a_user_writes_them() {
        assert_eq!(parse_size("16G"), Some(16 << 30));
        assert_eq!(parse_size("512m"), Some(512 << 20));
        assert_eq!(parse_size("1.5G"), Some(3 << 29));
        assert_eq!(parse_size("1000"), Some(1000));
        assert_eq!(parse_size("lots"), None);
        assert_eq!(parse_size("-1G"), None);
    }
}
