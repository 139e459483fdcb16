//! safetensors headers (8-byte little-endian length + JSON), read without touching tensor data,
//! and model.safetensors.index.json.
use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use serde_json::Value;

use super::json::{kind, read_object};
use super::{ShardIndex, WeightFile, WeightFormat};
use crate::error::{Error, Result};

/// The largest header accepted (the `safetensors` crate's own limit).
pub const MAX_HEADER_BYTES: u64 = 100_000_000;

/// Bytes per element for the dtypes whose size is a whole number of bytes.
fn dtype_bytes(dtype: &str) -> Option<u64> {
    Some(match dtype {
        "BOOL" | "U8" | "I8" | "F8_E5M2" | "F8_E4M3" | "F8_E8M0" => 1,
        "I16" | "U16" | "F16" | "BF16" => 2,
        "I32" | "U32" | "F32" => 4,
        "I64" | "U64" | "F64" | "C64" => 8,
        _ => return None,
    })
}

fn corrupt(path: &Path, problem: impl Into<String>) -> Error {
    Error::in_file(path, problem)
        .hint("the file is truncated or corrupted; download or export it again")
}

/// Read one safetensors file's header. `name` is its path relative to the model directory.
pub fn read_header(path: &Path, name: &str) -> Result<WeightFile> {
    let mut file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let size = file.metadata().map_err(|e| Error::io(path, e))?.len();
    if size < 8 {
        return Err(corrupt(
            path,
            format!("is {size} bytes long, too short for a safetensors file (it starts with an 8-byte header length)"),
        ));
    }
    let mut len_bytes = [0u8; 8];
    file.read_exact(&mut len_bytes)
        .map_err(|e| Error::io(path, e))?;
    let header_len = u64::from_le_bytes(len_bytes);
    if header_len > MAX_HEADER_BYTES {
        return Err(corrupt(
            path,
            format!(
                "declares a {header_len}-byte safetensors header, more than the {MAX_HEADER_BYTES}-byte limit; this is not a valid safetensors file"
            ),
        ));
    }
    if header_len > size - 8 {
        return Err(corrupt(
            path,
            format!(
                "declares a {header_len}-byte safetensors header but only {} bytes follow",
                size - 8
            ),
        ));
    }
    // Bounded by MAX_HEADER_BYTES above, so the cast and the allocation are safe.
    let mut header = vec![0u8; header_len as usize];
    file.read_exact(&mut header)
        .map_err(|e| Error::io(path, e))?;
    let data_len = size - 8 - header_len;

    let doc: Value = serde_json::from_slice(&header).map_err(|e| {
        corrupt(
            path,
            format!("the safetensors header is not valid JSON: {e}"),
        )
    })?;
    let Value::Object(entries) = doc else {
        return Err(corrupt(
            path,
            format!(
                "the safetensors header is {}, not a JSON object",
                kind(&doc)
            ),
        ));
    };

    let mut dtypes: BTreeMap<String, usize> = BTreeMap::new();
    let mut tensors = 0usize;
    let mut parameters: u64 = 0;
    for (tensor, info) in &entries {
        if tensor == "__metadata__" {
            continue;
        }
        let bad = |what: String| {
            corrupt(
                path,
                format!("tensor `{tensor}` in the safetensors header: {what}"),
            )
        };
        let Value::Object(info) = info else {
            return Err(bad(format!("expected an object, found {}", kind(info))));
        };
        let dtype = match info.get("dtype") {
            Some(Value::String(s)) => s.clone(),
            other => {
                return Err(bad(format!(
                    "`dtype` should be a string, found {}",
                    other.map(kind).unwrap_or("nothing")
                )))
            }
        };
        let shape = match info.get("shape") {
            Some(Value::Array(dims)) => dims
                .iter()
                .map(|d| {
                    d.as_u64().ok_or_else(|| {
                        bad(format!("`shape` has {} where a dimension belongs", kind(d)))
                    })
                })
                .collect::<Result<Vec<u64>>>()?,
            other => {
                return Err(bad(format!(
                    "`shape` should be a list, found {}",
                    other.map(kind).unwrap_or("nothing")
                )))
            }
        };
        let (begin, end) = match info.get("data_offsets") {
            Some(Value::Array(o)) if o.len() == 2 => match (o[0].as_u64(), o[1].as_u64()) {
                (Some(b), Some(e)) => (b, e),
                _ => {
                    return Err(bad(
                        "`data_offsets` should be two non-negative integers".into()
                    ))
                }
            },
            _ => return Err(bad("`data_offsets` should be a list [begin, end]".into())),
        };
        if begin > end {
            return Err(bad(format!(
                "`data_offsets` [{begin}, {end}] runs backwards"
            )));
        }
        if end > data_len {
            return Err(corrupt(
                path,
                format!(
                    "tensor `{tensor}` ends at byte {end} of the data section, but the file holds only {data_len} bytes of data (truncated?)"
                ),
            ));
        }
        let elements = shape
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .ok_or_else(|| bad("the shape's element count overflows".into()))?;
        if let Some(width) = dtype_bytes(&dtype) {
            let need = elements.checked_mul(width);
            if need != Some(end - begin) {
                return Err(bad(format!(
                    "shape {shape:?} of {dtype} needs {} bytes but `data_offsets` span {}",
                    need.map(|n| n.to_string())
                        .unwrap_or_else(|| "too many".into()),
                    end - begin
                )));
            }
        }
        tensors += 1;
        *dtypes.entry(dtype).or_default() += 1;
        parameters = parameters.saturating_add(elements);
    }
    Ok(WeightFile {
        path: path.to_path_buf(),
        name: name.to_string(),
        format: WeightFormat::Safetensors,
        size,
        tensors,
        dtypes,
        parameters,
        data_offset: None,
    })
}

/// Read model.safetensors.index.json and check which shards it names are missing.
pub fn read_index(path: &Path, root: &Path) -> Result<ShardIndex> {
    let obj = read_object(path)?;
    let mut weight_map = BTreeMap::new();
    match obj.get("weight_map") {
        Some(Value::Object(map)) => {
            for (tensor, shard) in map {
                match shard {
                    Value::String(s) => {
                        weight_map.insert(tensor.clone(), s.clone());
                    }
                    other => {
                        return Err(Error::in_file(
                            path,
                            format!(
                                "`weight_map.{tensor}` should be a shard file name, but it is {}",
                                kind(other)
                            ),
                        )
                        .hint("each weight_map entry maps a tensor name to a shard file name"))
                    }
                }
            }
        }
        Some(other) => {
            return Err(Error::in_file(
                path,
                format!(
                    "`weight_map` should be an object, but it is {}",
                    kind(other)
                ),
            )
            .hint("weight_map maps tensor names to shard file names"))
        }
        None => {
            return Err(Error::in_file(path, "has no `weight_map`").hint(
                "a safetensors index is {\"metadata\": {...}, \"weight_map\": {tensor: shard}}",
            ))
        }
    }
    let mut shards: Vec<&String> = weight_map.values().collect();
    shards.sort();
    shards.dedup();
    let index_dir = path.parent().unwrap_or(root);
    let missing_shards = shards
        .into_iter()
        .filter(|s| !index_dir.join(s.as_str()).is_file())
        .cloned()
        .collect();
    Ok(ShardIndex {
        path: path.to_path_buf(),
        weight_map,
        missing_shards,
    })
}
