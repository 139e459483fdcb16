//! A GGUF header reader written by hand: it reads any GGUF v2/v3 (little-endian) header,
//! whatever its tensor types, with every allocation bounded by the file's size.
//!
//! Layout: magic "GGUF", u32 version, u64 tensor count, u64 metadata count, the metadata
//! (key string, u32 value type, value), then per tensor: name string, u32 dimension count,
//! u64 dimensions, u32 ggml type, u64 offset into the data section (which starts at the next
//! multiple of `general.alignment`, default 32, after the tensor table).
use std::collections::{BTreeMap, HashSet};
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};

use indexmap::IndexMap;
use serde::Serialize;
use serde_json::{Number, Value};

use super::{GgufInfo, WeightFile, WeightFormat};
use crate::error::{Error, Result};

/// Arrays nested deeper than this are rejected (real files nest at most one level).
pub const MAX_NESTING: usize = 8;
/// ggml's GGML_MAX_DIMS.
pub const MAX_DIMS: u32 = 4;
/// Upper bounds that keep a corrupted header in a large file from exhausting memory: the
/// values decoded from all metadata together (a 1M-token vocabulary with scores, types and
/// merges is about 4M), one string (a whole tokenizer.json embedded as a string is ~30 MB),
/// metadata entries and tensors.
pub const MAX_METADATA_VALUES: u64 = 1 << 24;
pub const MAX_STRING_BYTES: u64 = 256 << 20;
pub const MAX_METADATA_ENTRIES: u64 = 1 << 20;
pub const MAX_TENSORS: u64 = 1 << 22;
const DEFAULT_ALIGNMENT: u64 = 32;

/// One entry of the tensor table.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct GgufTensor {
    pub name: String,
    /// Dimensions as ggml stores them (fastest-moving first).
    pub dims: Vec<u64>,
    pub ggml_type: u32,
    /// The ggml type's name ("F16", "Q4_K", ...), or "type_N" for an id this reader does not know.
    pub type_name: String,
    /// Offset from the start of the data section.
    pub offset: u64,
}

impl GgufTensor {
    pub fn elements(&self) -> u64 {
        self.dims.iter().product()
    }
}

/// (name, elements per block, bytes per block) by ggml type id; None for ids without a type.
fn ggml_type(id: u32) -> Option<(&'static str, u64, u64)> {
    Some(match id {
        0 => ("F32", 1, 4),
        1 => ("F16", 1, 2),
        2 => ("Q4_0", 32, 18),
        3 => ("Q4_1", 32, 20),
        6 => ("Q5_0", 32, 22),
        7 => ("Q5_1", 32, 24),
        8 => ("Q8_0", 32, 34),
        9 => ("Q8_1", 32, 36),
        10 => ("Q2_K", 256, 84),
        11 => ("Q3_K", 256, 110),
        12 => ("Q4_K", 256, 144),
        13 => ("Q5_K", 256, 176),
        14 => ("Q6_K", 256, 210),
        15 => ("Q8_K", 256, 292),
        16 => ("IQ2_XXS", 256, 66),
        17 => ("IQ2_XS", 256, 74),
        18 => ("IQ3_XXS", 256, 98),
        19 => ("IQ1_S", 256, 50),
        20 => ("IQ4_NL", 32, 18),
        21 => ("IQ3_S", 256, 110),
        22 => ("IQ2_S", 256, 82),
        23 => ("IQ4_XS", 256, 136),
        24 => ("I8", 1, 1),
        25 => ("I16", 1, 2),
        26 => ("I32", 1, 4),
        27 => ("I64", 1, 8),
        28 => ("F64", 1, 8),
        29 => ("IQ1_M", 256, 56),
        30 => ("BF16", 1, 2),
        31 => ("Q4_0_4_4", 32, 18),
        32 => ("Q4_0_4_8", 32, 18),
        33 => ("Q4_0_8_8", 32, 18),
        34 => ("TQ1_0", 256, 54),
        35 => ("TQ2_0", 256, 66),
        36 => ("IQ4_NL_4_4", 32, 18),
        37 => ("IQ4_NL_4_8", 32, 18),
        38 => ("IQ4_NL_8_8", 32, 18),
        39 => ("MXFP4", 32, 17),
        _ => return None,
    })
}

/// The name of a ggml type id ("Q4_K"), or "type_N".
pub fn ggml_type_name(id: u32) -> String {
    match ggml_type(id) {
        Some((name, _, _)) => name.to_string(),
        None => format!("type_{id}"),
    }
}

/// Bytes of tensor data, for the types whose layout is known.
pub fn tensor_bytes(t: &GgufTensor) -> Option<u64> {
    let (_, block_elems, block_bytes) = ggml_type(t.ggml_type)?;
    let elements = t.dims.iter().try_fold(1u64, |a, &d| a.checked_mul(d))?;
    (elements / block_elems).checked_mul(block_bytes)
}

/// Value type ids of GGUF metadata.
mod vt {
    pub const U8: u32 = 0;
    pub const I8: u32 = 1;
    pub const U16: u32 = 2;
    pub const I16: u32 = 3;
    pub const U32: u32 = 4;
    pub const I32: u32 = 5;
    pub const F32: u32 = 6;
    pub const BOOL: u32 = 7;
    pub const STRING: u32 = 8;
    pub const ARRAY: u32 = 9;
    pub const U64: u32 = 10;
    pub const I64: u32 = 11;
    pub const F64: u32 = 12;
}

/// The smallest encoded size of one value of this type (to bound array counts).
fn min_size(ty: u32) -> Option<u64> {
    Some(match ty {
        vt::U8 | vt::I8 | vt::BOOL => 1,
        vt::U16 | vt::I16 => 2,
        vt::U32 | vt::I32 | vt::F32 => 4,
        vt::U64 | vt::I64 | vt::F64 => 8,
        vt::STRING => 8,
        vt::ARRAY => 12,
        _ => return None,
    })
}

struct Reader {
    inner: BufReader<File>,
    pos: u64,
    size: u64,
    path: PathBuf,
    /// Metadata values still allowed (see MAX_METADATA_VALUES).
    budget: u64,
}

impl Reader {
    fn remaining(&self) -> u64 {
        self.size.saturating_sub(self.pos)
    }

    fn corrupt(&self, problem: impl Into<String>) -> Error {
        Error::in_file(&self.path, problem.into())
            .hint("the GGUF file is truncated or corrupted; download or convert it again")
    }

    fn bytes(&mut self, n: u64, what: &str) -> Result<Vec<u8>> {
        if n > self.remaining() {
            return Err(self.corrupt(format!(
                "truncated GGUF header: {what} at byte {} needs {n} bytes but the file ends after {}",
                self.pos,
                self.remaining()
            )));
        }
        // n <= remaining file size, so the allocation is bounded by the file.
        let mut buf = vec![0u8; n as usize];
        self.inner
            .read_exact(&mut buf)
            .map_err(|e| Error::io(&self.path, e))?;
        self.pos += n;
        Ok(buf)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        if (N as u64) > self.remaining() {
            return Err(self.corrupt(format!(
                "truncated GGUF header: the file ends at byte {} while reading {what}",
                self.size
            )));
        }
        let mut buf = [0u8; N];
        self.inner
            .read_exact(&mut buf)
            .map_err(|e| Error::io(&self.path, e))?;
        self.pos += N as u64;
        Ok(buf)
    }

    fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array::<4>(what)?))
    }

    fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array::<8>(what)?))
    }

    fn string(&mut self, what: &str) -> Result<String> {
        let at = self.pos;
        let len = self.u64(what)?;
        if len > MAX_STRING_BYTES {
            return Err(self.corrupt(format!(
                "{what} at byte {at} claims a length of {len} bytes, more than the {MAX_STRING_BYTES}-byte limit for one string"
            )));
        }
        if len > self.remaining() {
            return Err(self.corrupt(format!(
                "{what} at byte {at} claims a length of {len} bytes, more than the {} bytes left in the file",
                self.remaining()
            )));
        }
        let bytes = self.bytes(len, what)?;
        Ok(match String::from_utf8(bytes) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        })
    }

    fn value(&mut self, ty: u32, depth: usize, key: &str) -> Result<Value> {
        if self.budget == 0 {
            return Err(self.corrupt(format!(
                "metadata `{key}`: the header holds more than {MAX_METADATA_VALUES} values, which no real GGUF does"
            )));
        }
        self.budget -= 1;
        Ok(match ty {
            vt::U8 => Value::from(self.array::<1>(key)?[0]),
            vt::I8 => Value::from(i8::from_le_bytes(self.array::<1>(key)?)),
            vt::U16 => Value::from(u16::from_le_bytes(self.array::<2>(key)?)),
            vt::I16 => Value::from(i16::from_le_bytes(self.array::<2>(key)?)),
            vt::U32 => Value::from(u32::from_le_bytes(self.array::<4>(key)?)),
            vt::I32 => Value::from(i32::from_le_bytes(self.array::<4>(key)?)),
            vt::U64 => Value::from(u64::from_le_bytes(self.array::<8>(key)?)),
            vt::I64 => Value::from(i64::from_le_bytes(self.array::<8>(key)?)),
            vt::F32 => float(f32::from_le_bytes(self.array::<4>(key)?) as f64),
            vt::F64 => float(f64::from_le_bytes(self.array::<8>(key)?)),
            vt::BOOL => {
                let b = self.array::<1>(key)?[0];
                if b > 1 {
                    return Err(self.corrupt(format!(
                        "metadata `{key}`: boolean byte {b} is neither 0 nor 1"
                    )));
                }
                Value::Bool(b == 1)
            }
            vt::STRING => Value::String(self.string(&format!("metadata `{key}`"))?),
            vt::ARRAY => {
                if depth >= MAX_NESTING {
                    return Err(self.corrupt(format!(
                        "metadata `{key}`: arrays nested more than {MAX_NESTING} deep"
                    )));
                }
                let at = self.pos;
                let elem = self.u32(key)?;
                let count = self.u64(key)?;
                let Some(each) = min_size(elem) else {
                    return Err(self.corrupt(format!(
                        "metadata `{key}`: array element type {elem} is not a GGUF value type"
                    )));
                };
                if count > self.budget {
                    return Err(self.corrupt(format!(
                        "metadata `{key}` at byte {at}: an array of {count} elements is more than the {MAX_METADATA_VALUES}-value limit"
                    )));
                }
                if count.checked_mul(each).is_none_or(|n| n > self.remaining()) {
                    return Err(self.corrupt(format!(
                        "metadata `{key}` at byte {at}: an array of {count} elements cannot fit in the {} bytes left in the file",
                        self.remaining()
                    )));
                }
                // count is bounded by the value budget and by the bytes left in the file.
                let mut items = Vec::with_capacity(count.min(1 << 16) as usize);
                for _ in 0..count {
                    items.push(self.value(elem, depth + 1, key)?);
                }
                Value::Array(items)
            }
            other => {
                return Err(self.corrupt(format!(
                    "metadata `{key}` has value type {other}, which is not a GGUF value type"
                )))
            }
        })
    }
}

fn float(f: f64) -> Value {
    Number::from_f64(f)
        .map(Value::Number)
        .unwrap_or(Value::Null)
}

/// Read a GGUF file's header (metadata and tensor table; no tensor data).
pub fn read_gguf(path: &Path) -> Result<GgufInfo> {
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    let size = file.metadata().map_err(|e| Error::io(path, e))?.len();
    let mut r = Reader {
        inner: BufReader::with_capacity(1 << 20, file),
        pos: 0,
        size,
        path: path.to_path_buf(),
        budget: MAX_METADATA_VALUES,
    };

    if size < 4 {
        return Err(Error::in_file(
            path,
            format!("is {size} bytes long, too short to be a GGUF file"),
        )
        .hint("the file is truncated; download or convert it again"));
    }
    let magic = r.array::<4>("the magic")?;
    match &magic {
        b"GGUF" => {}
        b"FUGG" => {
            return Err(Error::in_file(path, "is a big-endian GGUF; chatgate reads little-endian GGUF only")
                .hint("convert the model again without --bigendian"))
        }
        b"lmgg" | b"fmgg" | b"tjgg" => {
            return Err(Error::in_file(path, "is a legacy GGML/GGJT file, not GGUF")
                .hint("convert it to GGUF with a current llama.cpp"))
        }
        _ => {
            return Err(Error::in_file(
                path,
                format!("does not start with the GGUF magic (found bytes {magic:02x?}), so it is not a GGUF file"),
            )
            .hint("check the path; a GGUF file starts with the bytes \"GGUF\""))
        }
    }
    let version = r.u32("the version")?;
    match version {
        2 | 3 => {}
        1 => {
            return Err(
                Error::in_file(path, "is GGUF version 1, which chatgate does not read")
                    .hint("convert the model again with a current llama.cpp (GGUF v3)"),
            )
        }
        v if v.swap_bytes() <= 3 && v.swap_bytes() > 0 => {
            return Err(Error::in_file(
                path,
                format!(
                    "is a big-endian GGUF (version {}); chatgate reads little-endian GGUF only",
                    v.swap_bytes()
                ),
            )
            .hint("convert the model again without --bigendian"))
        }
        v => {
            return Err(Error::in_file(
                path,
                format!("has GGUF version {v}; chatgate reads versions 2 and 3"),
            )
            .hint(
                "the file is corrupted or from a newer format; check it with llama.cpp's gguf-dump",
            ))
        }
    }
    let tensor_count = r.u64("the tensor count")?;
    let kv_count = r.u64("the metadata count")?;
    // Smallest metadata entry: 8-byte key length + 4-byte type + 1-byte value.
    if kv_count > MAX_METADATA_ENTRIES || kv_count.checked_mul(13).is_none_or(|n| n > r.remaining())
    {
        return Err(r.corrupt(format!(
            "declares {kv_count} metadata entries, more than the file can hold"
        )));
    }
    // Smallest tensor entry: name length 8 + dims count 4 + type 4 + offset 8.
    if tensor_count > MAX_TENSORS
        || tensor_count
            .checked_mul(24)
            .is_none_or(|n| n > r.remaining())
    {
        return Err(r.corrupt(format!(
            "declares {tensor_count} tensors, more than the file can hold"
        )));
    }

    let mut metadata = IndexMap::with_capacity(kv_count.min(4096) as usize);
    for i in 0..kv_count {
        let key = r.string(&format!("metadata key #{i}"))?;
        let ty = r.u32(&key)?;
        let value = r.value(ty, 0, &key)?;
        if metadata.insert(key.clone(), value).is_some() {
            return Err(r.corrupt(format!("metadata key `{key}` appears twice")));
        }
    }

    let mut tensors = Vec::with_capacity(tensor_count.min(65536) as usize);
    let mut names = HashSet::new();
    for i in 0..tensor_count {
        let name = r.string(&format!("tensor name #{i}"))?;
        let n_dims = r.u32(&name)?;
        if n_dims > MAX_DIMS {
            return Err(r.corrupt(format!(
                "tensor `{name}` has {n_dims} dimensions; ggml allows at most {MAX_DIMS}"
            )));
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for _ in 0..n_dims {
            dims.push(r.u64(&name)?);
        }
        if dims
            .iter()
            .try_fold(1u64, |a, &d| a.checked_mul(d))
            .is_none()
        {
            return Err(r.corrupt(format!(
                "tensor `{name}` has dimensions {dims:?} whose product overflows"
            )));
        }
        let ggml_type = r.u32(&name)?;
        let offset = r.u64(&name)?;
        if !names.insert(name.clone()) {
            return Err(r.corrupt(format!("tensor `{name}` appears twice in the tensor table")));
        }
        tensors.push(GgufTensor {
            name,
            dims,
            ggml_type,
            type_name: ggml_type_name(ggml_type),
            offset,
        });
    }

    let alignment = match metadata.get("general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some(v) => match v.as_u64() {
            Some(a) if a > 0 && a.is_power_of_two() => a,
            _ => {
                return Err(r.corrupt(format!("`general.alignment` is {v}, not a power of two")));
            }
        },
    };
    let data_start = r.pos.div_ceil(alignment).saturating_mul(alignment);
    for t in &tensors {
        if let Some(nbytes) = tensor_bytes(t) {
            let end = data_start.saturating_add(t.offset).saturating_add(nbytes);
            if end > size {
                return Err(Error::in_file(
                    path,
                    format!(
                        "truncated GGUF: tensor `{}` ({}, {:?}) ends at byte {end} but the file is {size} bytes",
                        t.name, t.type_name, t.dims
                    ),
                )
                .hint("the download is incomplete; fetch the file again"));
            }
        }
    }

    Ok(GgufInfo {
        path: path.to_path_buf(),
        version,
        metadata,
        tensor_count,
        tensors,
        data_offset: data_start,
        file_size: size,
    })
}

/// The weight-file entry for a GGUF.
pub fn weight_file(h: &GgufInfo, name: &str) -> WeightFile {
    let mut dtypes: BTreeMap<String, usize> = BTreeMap::new();
    let mut parameters = 0u64;
    for t in &h.tensors {
        *dtypes.entry(t.type_name.clone()).or_default() += 1;
        parameters = parameters.saturating_add(t.elements());
    }
    WeightFile {
        path: h.path.clone(),
        name: name.to_string(),
        format: WeightFormat::Gguf,
        size: h.file_size,
        tensors: h.tensors.len(),
        dtypes,
        parameters,
        data_offset: Some(h.data_offset),
    }
}

/// Which boundary a GGUF metadata key belongs to.
pub fn metadata_group(key: &str) -> &'static str {
    if key.starts_with("tokenizer.chat_template") {
        "template"
    } else if key.starts_with("tokenizer.ggml.")
        && (key.ends_with("_token_id")
            || key.ends_with("_token_ids")
            || key.starts_with("tokenizer.ggml.add_"))
    {
        "special-ids"
    } else if key.starts_with("tokenizer.") {
        "tokenizer"
    } else if key.starts_with("general.") {
        "general"
    } else {
        "model"
    }
}

/// sha256 per metadata group over "key\tvalue-json\n" lines in file order.
pub fn metadata_hashes(info: &GgufInfo) -> BTreeMap<String, String> {
    use sha2::{Digest, Sha256};
    let mut groups: BTreeMap<&str, Sha256> = BTreeMap::new();
    for g in ["tokenizer", "template", "special-ids", "general", "model"] {
        groups.insert(g, Sha256::new());
    }
    for (k, v) in &info.metadata {
        if let Some(h) = groups.get_mut(metadata_group(k)) {
            h.update(k.as_bytes());
            h.update(b"\t");
            h.update(v.to_string().as_bytes());
            h.update(b"\n");
        }
    }
    groups
        .into_iter()
        .map(|(g, h)| (g.to_string(), hex::encode(h.finalize())))
        .collect()
}

impl GgufInfo {
    /// A metadata string.
    pub fn get_str(&self, key: &str) -> Option<&str> {
        self.metadata.get(key).and_then(Value::as_str)
    }

    /// A metadata unsigned integer.
    pub fn get_u64(&self, key: &str) -> Option<u64> {
        self.metadata.get(key).and_then(Value::as_u64)
    }

    /// A metadata boolean.
    pub fn get_bool(&self, key: &str) -> Option<bool> {
        self.metadata.get(key).and_then(Value::as_bool)
    }

    /// `general.architecture`.
    pub fn architecture(&self) -> Option<&str> {
        self.get_str("general.architecture")
    }

    /// The text of the token `tokenizer.ggml.<which>` points at, e.g. `token_text("bos_token_id")`.
    pub fn token_text(&self, id_key: &str) -> Option<String> {
        let id = self.get_u64(&format!("tokenizer.ggml.{id_key}"))?;
        let tokens = self.metadata.get("tokenizer.ggml.tokens")?.as_array()?;
        tokens
            .get(usize::try_from(id).ok()?)?
            .as_str()
            .map(str::to_string)
    }
}

impl GgufInfo {
    /// Metadata keys llama.cpp needs to load this file that it lacks (llama.cpp's `llama_model_loader`
    /// reads them): the architecture's hyper-parameters and the tokenizer. Only the keys common to
    /// llama-style architectures are checked; an empty list is not a guarantee.
    pub fn missing_llama_cpp_keys(&self) -> Vec<String> {
        let mut missing = Vec::new();
        let Some(arch) = self.architecture().map(str::to_string) else {
            return vec!["general.architecture".to_string()];
        };
        let mut want: Vec<String> = [
            "context_length",
            "embedding_length",
            "block_count",
            "feed_forward_length",
            "attention.head_count",
        ]
        .iter()
        .map(|k| format!("{arch}.{k}"))
        .collect();
        if arch == "llama" {
            want.push(format!("{arch}.attention.layer_norm_rms_epsilon"));
        }
        want.push("tokenizer.ggml.model".into());
        want.push("tokenizer.ggml.tokens".into());
        if self.get_str("tokenizer.ggml.model") == Some("gpt2") {
            want.push("tokenizer.ggml.merges".into());
        }
        for key in want {
            if !self.metadata.contains_key(&key) {
                missing.push(key);
            }
        }
        missing
    }
}
