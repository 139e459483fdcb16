//! Quantized matrices multiplied through candle's int8 tile kernels where this CPU has them.
//!
//! candle 0.11.1 multiplies a quantized matrix one weight row and one input row at a time
//! (`k_quants::matmul`), except on x86 CPUs with VNNI (AVX512-VNNI or AVX-VNNI), where it repacks
//! a Q8_0 (or Q4_K) matrix into 16-row tiles once and multiplies with `vpdpbusd`
//! (`quantized/repack_x86.rs`) — but only when a row's length is a multiple of 256 and the row
//! count one of 16, and never for Q4_0 or Q5_0. Measured on one thread (1,536 × 576 and × 768
//! matrices, this machine, AVX512-VNNI): Q4_0 13.7 GOP/s for one input row and 18 for 64; Q8_0
//! with 576-long rows 16 and 17.5; Q8_0 with 768-long rows, tiled, 94 and 138. Small models'
//! widths are rarely multiples of 256 (SmolLM2's 576, Gemma 3 270M's 640), so without this their
//! quantized matrices never reached the tiles: llama.cpp's prefill was 5× faster on them.
//!
//! So a Q4_0, Q5_0 or Q8_0 matrix is held as Q8_0 with zero blocks appended to each row up to a
//! multiple of 256, and its input gets zero columns to match:
//! - the weights are unchanged: a Q4_0 (−8..=7) or Q5_0 (−16..=15) integer fits a byte, so each
//!   block keeps its scale and its integers, and a zero block adds nothing to a dot product;
//! - what changes is how the input is rounded: the tiles quantize it to 8 bits per 256 values
//!   (ggml's Q8_K, as llama.cpp does for K-quant matrices) where the row-at-a-time kernels, and
//!   llama.cpp for these types, round it per 32. tests/it/fingerprint_real.rs bounds the effect
//!   against llama.cpp on the same real file;
//! - the memory: 34 bytes per 32 weights (Q4_0 holds 18), the padding, and candle's tiles are a
//!   second copy. `MAX_TILED_BYTES` caps it; matrices past the cap stay as they were.
//!
//! Elsewhere (no VNNI, other architectures, `MISTRALRS_FORCE_AVX2=1` which makes candle skip its
//! Q8_0 tiles) a Q5_0 matrix still becomes Q8_0, unpadded: candle's Q5_0 dot product is scalar,
//! its Q8_0 one uses AVX2. And a Q4_0 or Q8_0 matrix is held twice there: as it is, for one
//! input row (decode: one weight row at a time is a matrix-vector product, bound by reading the
//! weights, and the quantized ones are a seventh of F32's bytes), and widened to F32 for more
//! (prefill: candle's F32 matrix product is blocked, its quantized one is not). Measured under
//! `MISTRALRS_FORCE_AVX2=1` on SmolLM2-135M Q4_0 against llama.cpp, one thread each: widened
//! whole, TTFT 306 ms and TPOT 73 ms; quantized whole, 817 and 37; each where it is fastest is
//! the pair of the better figures (docs/benchmarks.md). The copies share `MAX_TILED_BYTES`.
//!
//! Q4_1 and Q5_1 (a weight is `d·q + m`, q unsigned; candle's dot products for them are scalar)
//! are held as Q8_0 blocks of `d·(q − c)` (c = 8 or 16: the integers fit a byte) plus F32
//! offsets `m` and `c·d` per row and block, which multiply the input's block sums (rounded as
//! llama.cpp rounds them, so a decoded row is its arithmetic): the same weights in a seventh of
//! F32's bytes for decode, and the F32 copy for prefill. They used to be widened
//! to F32 whole, and decode read 4 bytes a weight (0.43× llama.cpp's throughput on SmolLM2-135M
//! Q4_1). They stay off the tiles (`copy_bytes` says why).
use std::borrow::Cow;

use candle_core::quantized::{GgmlDType, QMatMul, QStorage, QTensor};
use candle_core::{Device, Module, Result, Tensor};

/// At most this many bytes of matrices are re-encoded for the tiles (counting candle's second
/// copy): a 1B Q4_0 model fits, a 7B one keeps most of its matrices as they are.
pub(crate) const MAX_TILED_BYTES: u64 = 2 << 30;

/// Rows of candle's tiles, and the row length its tile kernels need (`repack_x86::select`).
const TILE_ROWS: usize = 16;
const TILE_K: usize = 256;

/// Bytes of one block of 32 weights: ggml's `block_q4_0` (f16 scale, 16 bytes of nibbles),
/// `block_q5_0` (f16 scale, 32 fifth bits, 16 bytes of nibbles) and `block_q8_0` (f16 scale, 32
/// signed bytes).
const Q4_0_BLOCK: usize = 18;
const Q5_0_BLOCK: usize = 22;
/// ggml's `block_q4_1` (f16 scale, f16 minimum, 16 bytes of nibbles) and `block_q5_1` (f16 scale,
/// f16 minimum, 32 fifth bits, 16 bytes of nibbles): a weight is `d·q + m`, q unsigned.
const Q4_1_BLOCK: usize = 20;
const Q5_1_BLOCK: usize = 24;
const Q8_0_BLOCK: usize = 34;

/// A matrix `[rows, k]` applied as `x · Wᵀ`, with `pad` zero columns appended to `x` first.
pub(crate) struct Linear {
    matmul: QMatMul,
    pad: usize,
    /// The same matrix in F32, for inputs of more than one row, where the CPU has no tiles.
    wide: Option<QMatMul>,
    /// A Q4_1 or Q5_1 matrix's minimum `m` per weight row and block of 32, then `c·d` per block
    /// (`[rows, 2·k / 32]`): what its Q8_0 form (`d·(q − c)`) leaves out, multiplied by the
    /// input's two block sums ([`rounded_block_sums`]).
    offsets: Option<Tensor>,
}

impl Module for Linear {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        if let Some(wide) = &self.wide {
            let k = x.dims().last().copied().unwrap_or(1).max(1);
            if x.elem_count() / k > 1 {
                return wide.forward(x);
            }
        }
        let last = x.rank() - 1;
        let y = match self.pad {
            0 => self.matmul.forward(x)?,
            pad => self.matmul.forward(&x.pad_with_zeros(last, 0, pad)?)?,
        };
        let Some(offsets) = &self.offsets else {
            return Ok(y);
        };
        y + rounded_block_sums(x)?.broadcast_matmul(&offsets.t()?)?
    }
}

/// `x`'s two sums per block of 32 along its last dimension, for a Q4_1 or Q5_1 matrix's offsets,
/// both of the block as llama.cpp rounds a Q4_1 product's input (ggml's `quantize_row_q8_1`:
/// scale `d = max|x| / 127`, integers `q = round(x / d)`):
/// - `s = d·Σq` stored as f16, which llama.cpp multiplies by the block's minimum `m`;
/// - `f16(d)·Σq`, which the Q8_0 integer part subtracted `c·d_w` times where candle rounds the
///   input per 32 too: adding it back cancels exactly.
///
/// So where candle multiplies row by row, a decoded row is ggml's `vec_dot_q4_1_q8_1`
/// arithmetic. Through candle's tiles (a Q8_0 matrix whose rows are a multiple of 256 long, on a
/// CPU with VNNI) the integer part rounds the input per 256 instead, and only the centred part
/// `d_w·Σ(q − c)·x̂` differs from llama.cpp, as for a Q4_0 matrix there; the sum of the kernel's
/// own rounding in the second term instead measured worse (0.51 mean nats from llama.cpp on the
/// real SmolLM2 Q4_1, whose 1,536-long down projections take the tiles): it adds back an
/// uncentred `c·d_w·Σ(x̂ − x)`. With the exact `Σx` for both terms, each block added
/// `(m + c·d_w)·(Σx − Σx̂)` on top of llama.cpp's arithmetic.
fn rounded_block_sums(x: &Tensor) -> Result<Tensor> {
    let mut shape = x.dims().to_vec();
    let last = shape.len() - 1;
    let blocks = shape[last] / 32;
    shape[last] = 2 * blocks;
    let values = x.flatten_all()?.to_vec1::<f32>()?;
    let mut sums = vec![0f32; values.len() / 32 * 2];
    for (row, out) in values
        .chunks_exact(blocks * 32)
        .zip(sums.chunks_exact_mut(2 * blocks))
    {
        for (b, block) in row.chunks_exact(32).enumerate() {
            let d = block.iter().fold(0f32, |m, v| m.max(v.abs())) / 127.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            let q: f32 = block.iter().map(|v| (v * id).round()).sum();
            out[b] = half::f16::from_f32(d * q).to_f32();
            out[blocks + b] = half::f16::from_f32(d).to_f32() * q;
        }
    }
    Tensor::from_vec(sums, shape, x.device())
}

/// Where a matrix goes: its `(type, rows, k)` and the bytes it would take re-encoded for the
/// tiles (candle's copy included), or None when it stays as it is.
pub(crate) fn tiled_bytes(dtype: &str, rows: usize, k: usize) -> Option<u64> {
    tile_bytes(cpu_has_int8_tiles(), dtype, rows, k)
}

/// [`tiled_bytes`] on a CPU with (`tiles`) or without the int8 tiles.
fn tile_bytes(tiles: bool, dtype: &str, rows: usize, k: usize) -> Option<u64> {
    let padded = k.div_ceil(TILE_K) * TILE_K;
    // Padding past half a row again costs more than the tiles give back on the small matrices
    // that have such rows (a 64-wide one would be multiplied 4× over).
    if !tiles
        || !matches!(dtype, "Q4_0" | "Q5_0" | "Q8_0")
        || rows % TILE_ROWS != 0
        || k % 32 != 0
        || padded - k > k / 2
    {
        return None;
    }
    Some((rows * padded / 32 * Q8_0_BLOCK) as u64 * 2)
}

/// The bytes of a matrix's F32 copy for inputs of more than one row (see the module header),
/// or None where it gets none: a CPU with tiles, another type.
pub(crate) fn wide_bytes(dtype: &str, rows: usize, k: usize) -> Option<u64> {
    copy_bytes(cpu_has_int8_tiles(), dtype, rows, k)
}

/// [`wide_bytes`] on a CPU with (`tiles`) or without the int8 tiles. Q4_1 and Q5_1 get the copy
/// everywhere: they never go through the tiles, whose input rounding (8 bits per 256 values)
/// tripled the real SmolLM2-135M Q4_1's drift from llama.cpp (mean |Δ| 0.2 → 0.58 nats against
/// a q8_0 KV cache, past the same file's bounds); one row at a time candle rounds per 32, as
/// llama.cpp does for them.
fn copy_bytes(tiles: bool, dtype: &str, rows: usize, k: usize) -> Option<u64> {
    let copied = match dtype {
        "Q4_1" | "Q5_1" => true,
        "Q4_0" | "Q5_0" | "Q8_0" => !tiles,
        _ => false,
    };
    copied.then_some((rows * k * 4) as u64)
}

impl Linear {
    /// `t` (`[rows, k]`) ready to multiply: through candle's tiles when it fits `budget` (the
    /// bytes still allowed; what it takes is subtracted), else as it is (Q5_0 as Q8_0).
    pub(crate) fn new(t: QTensor, budget: &mut u64) -> Result<Linear> {
        Linear::on(t, budget, cpu_has_int8_tiles())
    }

    /// [`Linear::new`] on a CPU with (`tiles`) or without the int8 tiles.
    fn on(t: QTensor, budget: &mut u64, tiles: bool) -> Result<Linear> {
        let (rows, k) = t.shape().dims2()?;
        let name = match t.dtype() {
            GgmlDType::Q4_0 => "Q4_0",
            GgmlDType::Q5_0 => "Q5_0",
            GgmlDType::Q8_0 => "Q8_0",
            GgmlDType::Q4_1 => "Q4_1",
            GgmlDType::Q5_1 => "Q5_1",
            _ => "other",
        };
        let offsets = offsets(&t, rows, k)?;
        let tiled = tile_bytes(tiles, name, rows, k).filter(|&b| b <= *budget);
        let Some(cost) = tiled else {
            let wide = match copy_bytes(tiles, name, rows, k).filter(|&b| b <= *budget) {
                Some(cost) => {
                    *budget -= cost;
                    Some(QMatMul::Tensor(t.dequantize(&Device::Cpu)?))
                }
                None => None,
            };
            let t = match t.dtype() {
                GgmlDType::Q5_0 | GgmlDType::Q4_1 | GgmlDType::Q5_1 => as_q8_0(&t, rows, k, k)?,
                _ => t,
            };
            return Ok(Linear {
                matmul: QMatMul::from_qtensor(t)?,
                pad: 0,
                wide,
                offsets,
            });
        };
        *budget -= cost;
        let padded = k.div_ceil(TILE_K) * TILE_K;
        Ok(Linear {
            matmul: QMatMul::from_qtensor(as_q8_0(&t, rows, k, padded)?)?,
            pad: padded - k,
            wide: None,
            offsets,
        })
    }
}

/// Whether candle multiplies Q8_0 matrices in int8 tiles on this CPU (its `repack_x86::level`
/// is not `Avx2`).
/// Read once, as candle reads its own: the environment and the CPU do not change in a process.
pub(crate) fn cpu_has_int8_tiles() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(detect_int8_tiles)
}

fn detect_int8_tiles() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        if std::env::var("MISTRALRS_FORCE_AVX2").as_deref() == Ok("1") {
            return false;
        }
        let forced_vnni = std::env::var("MISTRALRS_FORCE_AVXVNNI").as_deref() == Ok("1");
        (is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512vnni"))
            || ((forced_vnni || is_x86_feature_detected!("avxvnni"))
                && is_x86_feature_detected!("avx2"))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `t` (Q4_0, Q5_0 or Q8_0, `[rows, k]`) as Q8_0 blocks of the same numbers, each row followed
/// by zero blocks up to `padded` columns.
fn as_q8_0(t: &QTensor, rows: usize, k: usize, padded: usize) -> Result<QTensor> {
    let data = t.data()?;
    let (block, blocks) = (
        match t.dtype() {
            GgmlDType::Q4_0 => Q4_0_BLOCK,
            GgmlDType::Q5_0 => Q5_0_BLOCK,
            GgmlDType::Q8_0 => Q8_0_BLOCK,
            GgmlDType::Q4_1 => Q4_1_BLOCK,
            GgmlDType::Q5_1 => Q5_1_BLOCK,
            other => candle_core::bail!("{other:?} has no Q8_0 form"),
        },
        k / 32,
    );
    let mut out = Vec::with_capacity(rows * padded / 32 * Q8_0_BLOCK);
    for row in data.chunks_exact(block * blocks) {
        for b in row.chunks_exact(block) {
            push_as_q8_0(t.dtype(), b, &mut out);
        }
        out.resize(out.len() + (padded - k) / 32 * Q8_0_BLOCK, 0);
    }
    let storage = QStorage::from_data(Cow::Owned(out), &Device::Cpu, GgmlDType::Q8_0)?;
    QTensor::new(storage, (rows, padded))
}

/// One block as Q8_0: its f16 scale, then its 32 integers as signed bytes (ggml's
/// `dequantize_row_q4_0` / `_q5_0`, kept in integers: element j is the low nibble of byte j for
/// j < 16, else the high nibble of byte j − 16; Q5_0 adds bit j of `qh` as the fifth bit).
fn push_as_q8_0(dtype: GgmlDType, block: &[u8], out: &mut Vec<u8>) {
    let (scale, rest) = block.split_at(2);
    out.extend_from_slice(scale);
    match dtype {
        GgmlDType::Q4_0 => out.extend((0..32).map(|j| (nibble(rest, j) as i8 - 8) as u8)),
        GgmlDType::Q5_0 => out.extend(fifth_bit(rest).map(|q| (q as i8 - 16) as u8)),
        // The minimum (2 bytes) goes to `offsets`.
        GgmlDType::Q4_1 => out.extend((0..32).map(|j| (nibble(&rest[2..], j) as i8 - 8) as u8)),
        GgmlDType::Q5_1 => out.extend(fifth_bit(&rest[2..]).map(|q| (q as i8 - 16) as u8)),
        _ => out.extend_from_slice(rest),
    }
}

/// The 32 unsigned 5-bit integers of a Q5_0 or Q5_1 block after its header: 4 bytes of fifth
/// bits, then the nibbles.
fn fifth_bit(rest: &[u8]) -> impl Iterator<Item = u8> + '_ {
    let (qh, qs) = rest.split_at(4);
    let qh = u32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]]);
    (0..32).map(move |j| nibble(qs, j) | ((((qh >> j) & 1) as u8) << 4))
}

/// A Q4_1 or Q5_1 matrix's `m` per row and block, then its `c·d` (c = 8 or 16, what
/// `push_as_q8_0` subtracts from each integer): `[rows, 2·k / 32]`. None for the other types,
/// which have no minimum.
fn offsets(t: &QTensor, rows: usize, k: usize) -> Result<Option<Tensor>> {
    let (block, c) = match t.dtype() {
        GgmlDType::Q4_1 => (Q4_1_BLOCK, 8.0),
        GgmlDType::Q5_1 => (Q5_1_BLOCK, 16.0),
        _ => return Ok(None),
    };
    let f16 = |b: &[u8]| half::f16::from_le_bytes([b[0], b[1]]).to_f32();
    let data = t.data()?;
    let blocks = k / 32;
    let mut values = vec![0f32; rows * 2 * blocks];
    for (row, out) in data
        .chunks_exact(block * blocks)
        .zip(values.chunks_exact_mut(2 * blocks))
    {
        for (j, b) in row.chunks_exact(block).enumerate() {
            out[j] = f16(&b[2..4]);
            out[blocks + j] = c * f16(&b[..2]);
        }
    }
    Ok(Some(Tensor::from_vec(
        values,
        (rows, 2 * blocks),
        &Device::Cpu,
    )?))
}

fn nibble(qs: &[u8], j: usize) -> u8 {
    if j < 16 {
        qs[j] & 0x0F
    } else {
        qs[j - 16] >> 4
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `[rows, k]` matrix of varied weights, quantized to `dtype`.
    fn quantized(dtype: GgmlDType, rows: usize, k: usize) -> QTensor {
        let w: Vec<f32> = (0..rows * k)
            .map(|i| ((i * 7919 % 1000) as f32 / 500.0 - 1.0) * (1.0 + (i % 13) as f32))
            .collect();
        let w = Tensor::from_vec(w, (rows, k), &Device::Cpu).unwrap();
        QTensor::quantize(&w, dtype).unwrap()
    }

    #[test]
    fn q4_0_and_q5_0_blocks_become_the_same_numbers_in_q8_0_with_zero_padding() {
        for dtype in [GgmlDType::Q4_0, GgmlDType::Q5_0, GgmlDType::Q8_0] {
            let t = quantized(dtype, 16, 64);
            let want = t.dequantize(&Device::Cpu).unwrap();
            let q8 = as_q8_0(&t, 16, 64, 256).unwrap();
            assert_eq!(q8.dtype(), GgmlDType::Q8_0);
            let got = q8.dequantize(&Device::Cpu).unwrap();
            assert_eq!(
                got.narrow(1, 0, 64).unwrap().to_vec2::<f32>().unwrap(),
                want.to_vec2::<f32>().unwrap(),
                "{dtype:?}"
            );
            let pad = got.narrow(1, 64, 192).unwrap().abs().unwrap();
            assert_eq!(pad.sum_all().unwrap().to_scalar::<f32>().unwrap(), 0.0);
        }
    }

    #[test]
    fn q4_1_and_q5_1_blocks_are_their_q8_0_integers_plus_the_block_offset() {
        for dtype in [GgmlDType::Q4_1, GgmlDType::Q5_1] {
            let t = quantized(dtype, 16, 64);
            let want = t
                .dequantize(&Device::Cpu)
                .unwrap()
                .to_vec2::<f32>()
                .unwrap();
            let q8 = as_q8_0(&t, 16, 64, 64).unwrap();
            let ints = q8
                .dequantize(&Device::Cpu)
                .unwrap()
                .to_vec2::<f32>()
                .unwrap();
            let offsets = offsets(&t, 16, 64)
                .unwrap()
                .unwrap()
                .to_vec2::<f32>()
                .unwrap();
            for (r, row) in want.iter().enumerate() {
                for (j, w) in row.iter().enumerate() {
                    let got = ints[r][j] + offsets[r][j / 32] + offsets[r][2 + j / 32];
                    assert!(
                        (got - w).abs() <= 1e-5 * w.abs().max(1.0),
                        "{dtype:?} [{r}, {j}]: {got} against {w}"
                    );
                }
            }
        }
        assert!(offsets(&quantized(GgmlDType::Q4_0, 16, 64), 16, 64)
            .unwrap()
            .is_none());
    }

    /// `linear` on `x` against the product with its dequantized weights: (largest |Δ|, largest
    /// |value|).
    fn against_f32(linear: &Linear, exact: &Tensor, x: &Tensor) -> (f32, f32) {
        let flat = |t: Tensor| t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let ours = flat(linear.forward(x).unwrap());
        let want = flat(x.matmul(&exact.t().unwrap()).unwrap());
        let worst = ours
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        (worst, want.iter().map(|v| v.abs()).fold(0.0f32, f32::max))
    }

    #[test]
    fn q4_1_and_q5_1_matrices_multiply_like_their_weights_every_way() {
        for dtype in [GgmlDType::Q4_1, GgmlDType::Q5_1] {
            // 256 long: the tiles' shape, which these never take. (tiles, budget): quantized
            // only; with the F32 copy, on a CPU without the tiles and with them.
            for (tiles, budget) in [
                (false, 0),
                (false, MAX_TILED_BYTES),
                (true, MAX_TILED_BYTES),
            ] {
                let t = quantized(dtype, 16, 256);
                let exact = t.dequantize(&Device::Cpu).unwrap();
                let mut left = budget;
                let linear = Linear::on(t, &mut left, tiles).unwrap();
                for rows in [1, 3] {
                    let x: Vec<f32> = (0..rows * 256)
                        .map(|i| ((i * 37 % 23) as f32 - 11.0) / 9.0)
                        .collect();
                    let x = Tensor::from_vec(x, (rows, 256), &Device::Cpu).unwrap();
                    let (worst, scale) = against_f32(&linear, &exact, &x);
                    let copy = budget > 0 && rows > 1;
                    assert!(
                        if copy { worst <= 1e-4 * scale } else { worst < 0.02 * scale },
                        "{dtype:?}, tiles {tiles}, budget {budget}, {rows} rows: {worst} of {scale}"
                    );
                }
            }
        }
    }

    /// A Q4_1 row times `x` as ggml multiplies them (`ggml_vec_dot_q4_1_q8_1`, its reference
    /// loop): per block `d_w·Σ q_w·x̂ + m·s`, x̂ the input as `quantize_row_q8_1` rounds it (per
    /// 32) and `s` its sum as it keeps it (`d·Σq`, f16). Written `d_w·Σ(q_w − 8)·x̂ + 8·d_w·Σx̂ +
    /// m·s`, with the centred part's input rounded by `centred` instead.
    fn q4_1_dot(row: &[u8], x: &[f32], centred: fn(&[f32]) -> Vec<f32>) -> f32 {
        let f16 = |b: &[u8]| half::f16::from_le_bytes([b[0], b[1]]).to_f32();
        let (x_hat, x_centred) = (per_32(x), centred(x));
        row.chunks_exact(Q4_1_BLOCK)
            .enumerate()
            .map(|(i, b)| {
                let xs = &x[i * 32..][..32];
                let d = xs.iter().fold(0f32, |m, v| m.max(v.abs())) / 127.0;
                let id = if d != 0.0 { 1.0 / d } else { 0.0 };
                let q: i32 = xs.iter().map(|v| (v * id).round() as i32).sum();
                let s = half::f16::from_f32(d * q as f32).to_f32();
                let centred: f32 = (0..32)
                    .map(|j| (nibble(&b[4..], j) as f32 - 8.0) * x_centred[i * 32 + j])
                    .sum();
                let sum: f32 = x_hat[i * 32..][..32].iter().sum();
                f16(&b[..2]) * (centred + 8.0 * sum) + f16(&b[2..4]) * s
            })
            .sum()
    }

    /// ggml's `quantize_row_q8_1` per 32 values (as llama.cpp rounds a Q4_1 product's input),
    /// each value `f16(d)·q`.
    fn per_32(x: &[f32]) -> Vec<f32> {
        x.chunks_exact(32)
            .flat_map(|xs| {
                let d = xs.iter().fold(0f32, |m, v| m.max(v.abs())) / 127.0;
                let id = if d != 0.0 { 1.0 / d } else { 0.0 };
                let d16 = half::f16::from_f32(d).to_f32();
                xs.iter()
                    .map(move |v| d16 * (v * id).round())
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// ggml's `quantize_row_q8_K` per 256 values (candle's tiles), each value `d·q`.
    fn per_256(x: &[f32]) -> Vec<f32> {
        x.chunks_exact(256)
            .flat_map(|xs| {
                let max = xs
                    .iter()
                    .fold(0f32, |m, &v| if v.abs() > m.abs() { v } else { m });
                let iscale = if max == 0.0 { 0.0 } else { -127.0 / max };
                let d = if max == 0.0 { 0.0 } else { 1.0 / iscale };
                xs.iter()
                    .map(move |v| d * (iscale * v).round().clamp(-128.0, 127.0))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    #[test]
    fn a_decoded_q4_1_row_is_multiplied_with_llama_cpp_arithmetic() {
        // 160 long: candle multiplies row by row everywhere, and the product is llama.cpp's.
        // 256 long and 16 rows: on a CPU with the int8 tiles candle takes the Q8_0 integers
        // through them, the input rounded per 256; only the centred part differs from llama.cpp.
        for k in [160, 256] {
            let t = quantized(GgmlDType::Q4_1, 16, k);
            let data = t.data().unwrap().into_owned();
            let x: Vec<f32> = (0..k)
                .map(|i| ((i * 37 % 23) as f32 - 11.0) / 9.0 + 0.3)
                .collect();
            // candle's `repack_x86::select`: a Q8_0 matrix of 16-row multiples whose rows are a
            // multiple of 256 long, on a CPU with VNNI, whether this module padded it or not.
            let tiled = cpu_has_int8_tiles() && k % TILE_K == 0;
            let centred = if tiled { per_256 } else { per_32 };
            let want: Vec<f32> = data
                .chunks_exact(Q4_1_BLOCK * k / 32)
                .map(|row| q4_1_dot(row, &x, centred))
                .collect();
            let mut budget = 0;
            let linear = Linear::on(t, &mut budget, false).unwrap();
            let x = Tensor::from_vec(x, (1, k), &Device::Cpu).unwrap();
            let got = linear.forward(&x).unwrap().flatten_all().unwrap();
            for (r, (g, w)) in got.to_vec1::<f32>().unwrap().iter().zip(&want).enumerate() {
                // f32 and the order of the sums alone. With the input's exact block sums
                // (before) the 160-long row 0 was 6.900 against ggml's 6.865, 5e-3 off; taking
                // a tiled matrix's input as rounded per 32 is 4.7e-5 off (9.6283 for 9.6278).
                let close = (g - w).abs() <= 2e-5 * w.abs().max(1.0);
                assert!(close, "{k} long, row {r}: {g} against ggml's {w}");
            }
        }
    }

    #[test]
    fn a_padded_matrix_multiplies_like_the_original_up_to_input_rounding() {
        let t = quantized(GgmlDType::Q4_0, 32, 576);
        let x: Vec<f32> = (0..3 * 576)
            .map(|i| ((i % 17) as f32 - 8.0) / 8.0)
            .collect();
        let x = Tensor::from_vec(x, (1, 3, 576), &Device::Cpu).unwrap();
        let exact = x
            .broadcast_matmul(&t.dequantize(&Device::Cpu).unwrap().t().unwrap())
            .unwrap();
        let mut budget = MAX_TILED_BYTES;
        let linear = Linear::new(t, &mut budget).unwrap();
        let got = linear.forward(&x).unwrap();
        assert_eq!(got.dims(), &[1, 3, 32]);
        let err = (got - &exact).unwrap().abs().unwrap().max_all().unwrap();
        let scale = exact.abs().unwrap().max_all().unwrap();
        let (err, scale) = (
            err.to_scalar::<f32>().unwrap(),
            scale.to_scalar::<f32>().unwrap(),
        );
        assert!(err <= scale * 0.02, "max error {err} against {scale}");
        if cpu_has_int8_tiles() {
            assert_eq!(linear.pad, 192);
            assert_eq!(budget, MAX_TILED_BYTES - 2 * (32 * 768 / 32 * 34) as u64);
        } else {
            assert_eq!((linear.pad, budget), (0, MAX_TILED_BYTES));
        }
    }

    #[test]
    fn without_tiles_many_rows_go_through_the_f32_copy_and_one_row_through_the_quantized_one() {
        for dtype in [GgmlDType::Q4_0, GgmlDType::Q8_0] {
            let t = quantized(dtype, 32, 64);
            let exact = t.dequantize(&Device::Cpu).unwrap();
            let mut budget = MAX_TILED_BYTES;
            let linear = Linear::on(t, &mut budget, false).unwrap();
            assert_eq!(
                MAX_TILED_BYTES - budget,
                32 * 64 * 4,
                "{dtype:?}: the copy's bytes"
            );
            let x: Vec<f32> = (0..3 * 64)
                .map(|i| ((i * 31 % 17) as f32 - 8.0) / 7.0)
                .collect();
            let x = Tensor::from_vec(x, (3, 64), &Device::Cpu).unwrap();
            let f32_product = |x: &Tensor| x.matmul(&exact.t().unwrap()).unwrap();
            let flat = |t: Tensor| t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
            // Three rows: the F32 product, exactly.
            assert_eq!(
                flat(linear.forward(&x).unwrap()),
                flat(f32_product(&x)),
                "{dtype:?}"
            );
            // One row: the quantized kernel, which rounds the input to 8 bits per 32 values.
            let row = x.narrow(0, 0, 1).unwrap();
            let (ours, exact) = (flat(linear.forward(&row).unwrap()), flat(f32_product(&row)));
            let worst = ours
                .iter()
                .zip(&exact)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0f32, f32::max);
            let scale = exact.iter().map(|v| v.abs()).fold(0.0f32, f32::max);
            assert!(
                worst > 0.0 && worst < 0.02 * scale,
                "{dtype:?}: {worst} of {scale}"
            );
            // With the tiles' CPU, or past the budget, no copy is made.
            let mut none = 0;
            let kept = Linear::on(quantized(dtype, 32, 64), &mut none, false).unwrap();
            assert!(kept.wide.is_none());
            let mut budget = MAX_TILED_BYTES;
            let tiled = Linear::on(quantized(dtype, 32, 64), &mut budget, true).unwrap();
            assert!(tiled.wide.is_none());
        }
    }

    #[test]
    fn a_matrix_past_the_budget_or_off_the_tile_shape_stays_as_it_is() {
        let mut none = 0;
        let kept = Linear::new(quantized(GgmlDType::Q4_0, 16, 576), &mut none).unwrap();
        assert_eq!(kept.pad, 0);
        let mut budget = MAX_TILED_BYTES;
        let odd_rows = Linear::new(quantized(GgmlDType::Q8_0, 8, 64), &mut budget).unwrap();
        assert_eq!((odd_rows.pad, budget), (0, MAX_TILED_BYTES));
        assert_eq!(tiled_bytes("Q4_K", 16, 256), None);
        assert_eq!(tiled_bytes("Q4_0", 12, 256), None);
        assert_eq!(tiled_bytes("Q8_0", 16, 64), None, "padded 4× over");
    }

    #[test]
    fn every_q5_0_value_in_either_nibble_becomes_the_same_q8_0_integer() {
        // Weights -16..=15: every 5-bit value, each in a low or a high nibble slot.
        let values: Vec<i8> = (0..32).map(|j| j as i8 - 16).collect();
        let scale = [0x00u8, 0x38]; // 0.5 as an IEEE half, little-endian
        let mut qh = 0u32;
        let mut qs = [0u8; 16];
        for (j, v) in values.iter().enumerate() {
            let u = (*v + 16) as u8;
            qh |= u32::from((u >> 4) & 1) << j;
            if j < 16 {
                qs[j] |= u & 0x0F;
            } else {
                qs[j - 16] |= (u & 0x0F) << 4;
            }
        }
        let mut block = scale.to_vec();
        block.extend_from_slice(&qh.to_le_bytes());
        block.extend_from_slice(&qs);
        let storage = QStorage::from_data(Cow::Owned(block), &Device::Cpu, GgmlDType::Q5_0);
        let q5 = QTensor::new(storage.unwrap(), (1, 32)).unwrap();
        let want = q5.dequantize(&Device::Cpu).unwrap();
        let want = want.to_vec2::<f32>().unwrap();
        let q8 = as_q8_0(&q5, 1, 32, 32).unwrap();
        let got = q8.dequantize(&Device::Cpu).unwrap();
        assert_eq!(got.to_vec2::<f32>().unwrap(), want);
        assert_eq!((want[0][0], want[0][31]), (-8.0, 7.5));
    }
}
