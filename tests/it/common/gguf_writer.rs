//! A tiny GGUF writer for tests (included by the artifacts_* tests with `#[path]`; it lives in
//! tests/common/ so cargo does not build it as a test target of its own).
#![allow(dead_code)]

/// A typed GGUF metadata value.
#[derive(Clone, Debug)]
pub enum V {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    Str(String),
    /// Element type id and elements.
    Arr(u32, Vec<V>),
    U64(u64),
    I64(i64),
    F64(f64),
}

impl V {
    pub fn type_id(&self) -> u32 {
        match self {
            V::U8(_) => 0,
            V::I8(_) => 1,
            V::U16(_) => 2,
            V::I16(_) => 3,
            V::U32(_) => 4,
            V::I32(_) => 5,
            V::F32(_) => 6,
            V::Bool(_) => 7,
            V::Str(_) => 8,
            V::Arr(..) => 9,
            V::U64(_) => 10,
            V::I64(_) => 11,
            V::F64(_) => 12,
        }
    }
    pub fn s(s: &str) -> V {
        V::Str(s.to_string())
    }
    pub fn strs<S: AsRef<str>>(items: &[S]) -> V {
        V::Arr(
            8,
            items
                .iter()
                .map(|s| V::Str(s.as_ref().to_string()))
                .collect(),
        )
    }
    pub fn i32s(items: &[i32]) -> V {
        V::Arr(5, items.iter().map(|&x| V::I32(x)).collect())
    }
    pub fn f32s(items: &[f32]) -> V {
        V::Arr(6, items.iter().map(|&x| V::F32(x)).collect())
    }
}

pub fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

pub fn put_value(out: &mut Vec<u8>, v: &V) {
    match v {
        V::U8(x) => out.push(*x),
        V::I8(x) => out.extend_from_slice(&x.to_le_bytes()),
        V::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        V::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        V::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        V::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        V::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        V::Bool(x) => out.push(*x as u8),
        V::Str(s) => put_str(out, s),
        V::Arr(t, items) => {
            out.extend_from_slice(&t.to_le_bytes());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for i in items {
                put_value(out, i);
            }
        }
        V::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        V::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        V::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
    }
}

/// One tensor: name, dims (ggml order), ggml type id, byte length of its data.
pub struct T<'a> {
    pub name: &'a str,
    pub dims: Vec<u64>,
    pub ggml_type: u32,
    pub nbytes: u64,
}

/// A complete GGUF v3 file: header, tensor table, 32-byte aligned data (zeros).
pub fn gguf(kvs: &[(&str, V)], tensors: &[T]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(b"GGUF");
    out.extend_from_slice(&3u32.to_le_bytes());
    out.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
    out.extend_from_slice(&(kvs.len() as u64).to_le_bytes());
    for (k, v) in kvs {
        put_str(&mut out, k);
        out.extend_from_slice(&v.type_id().to_le_bytes());
        put_value(&mut out, v);
    }
    let mut offset = 0u64;
    for t in tensors {
        put_str(&mut out, t.name);
        out.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
        for d in &t.dims {
            out.extend_from_slice(&d.to_le_bytes());
        }
        out.extend_from_slice(&t.ggml_type.to_le_bytes());
        out.extend_from_slice(&offset.to_le_bytes());
        offset += t.nbytes.div_ceil(32) * 32;
    }
    while out.len() % 32 != 0 {
        out.push(0);
    }
    for t in tensors {
        let padded = t.nbytes.div_ceil(32) * 32;
        out.extend(std::iter::repeat_n(0u8, padded as usize));
    }
    out
}
