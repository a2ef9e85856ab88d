//! Integer dot products of GGUF weight blocks with 8-bit activation rows (`--weights q8`).
//!
//! **The arithmetic** (defined here by the portable path; the SIMD paths reproduce it bit for
//! bit). A (weight row, activation row) pair keeps 16 f32 lanes. For each block:
//! 1. integer lanes (exact i32): the block's values in chunks of 32; chunk `c` feeds lanes
//!    `8 * (c % 2) + l`, lane `l` taking the products of values `4l..4l+4` of the chunk (the
//!    lane `vpdpbusd` / `vpmaddubsw`+`vpmaddwd` put them in). K family: each product times its
//!    16-value scale `sc`; B32 family: one chunk per block, chunk index = block index, minus
//!    `offset * (sum of the four activations)`.
//! 2. K family offsets: `corr[j] = mn[2j] * bsum[2j] + mn[2j+1] * bsum[2j+1]` (8 lanes); Q6_K
//!    subtracts them from lanes 0..8 in integers.
//! 3. float: `acc[i] = fma(d_w * d_x, lanes[i] as f32, acc[i])` for the lanes the block fed;
//!    Q4_K/Q5_K then `acc[j] = fma(-(dmin_w * d_x), corr[j] as f32, acc[j])` for j < 8.
//!
//! The result is `((a[0..8] + a[8..16]) folded 8 -> 4 -> 2 -> 1)` (see [`reduce16`]). Integer
//! lanes are exact whatever instructions compute them, and every float operation happens in
//! the same order on every path, so every path gives the same bits, and a row's result depends
//! on that row alone (row invariance).

use super::act::{Q80Rows, Q8KRows, QK8_0, QK_K};
use super::unpack::{family, Family, UnpackedRow};
use super::QuantMatrix;
use crate::gguf::GgmlType;
use rayon::prelude::*;
use std::sync::OnceLock;

/// Which implementation of the integer arithmetic runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum IntPath {
    /// AVX-512 (BW) with VNNI: `vpdpbusd` / `vpdpwssd` on 64-byte vectors.
    Avx512Vnni,
    /// AVX2: `vpmaddubsw` + `vpmaddwd` on 32-byte vectors.
    Avx2,
    /// Plain Rust (the reference).
    Portable,
}

impl IntPath {
    pub fn name(self) -> &'static str {
        match self {
            Self::Avx512Vnni => "avx512-vnni",
            Self::Avx2 => "avx2",
            Self::Portable => "portable",
        }
    }

    /// Whether this CPU can run the path.
    pub fn supported(self) -> bool {
        match self {
            Self::Portable => true,
            #[cfg(target_arch = "x86_64")]
            Self::Avx2 => super::int_x86::avx2_available(),
            #[cfg(target_arch = "x86_64")]
            Self::Avx512Vnni => super::int_x86::avx512_available(),
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// Every path this CPU can run, fastest first.
    pub fn all_supported() -> Vec<Self> {
        [Self::Avx512Vnni, Self::Avx2, Self::Portable].into_iter().filter(|p| p.supported()).collect()
    }

    /// The path the runtime uses: `SPECX_INT_PATH` (avx512-vnni | avx2 | portable) when set
    /// and supported, else the fastest supported one. Decided once per process.
    pub fn active() -> Self {
        static ACTIVE: OnceLock<IntPath> = OnceLock::new();
        *ACTIVE.get_or_init(|| {
            let best = Self::all_supported()[0];
            match std::env::var("SPECX_INT_PATH") {
                Ok(name) => match Self::all_supported().into_iter().find(|p| p.name() == name) {
                    Some(p) => p,
                    None => {
                        eprintln!("specx: SPECX_INT_PATH={name} is not a supported integer path here; using {}", best.name());
                        best
                    }
                },
                Err(_) => best,
            }
        })
    }
}

/// The fixed reduction of 16 lanes: 16 -> 8 (i + 8), 8 -> 4 (i + 4), 4 -> 2 (i + 2), 2 -> 1.
#[inline(always)]
pub fn reduce16(a: &[f32; 16]) -> f32 {
    let t8: [f32; 8] = std::array::from_fn(|i| a[i] + a[i + 8]);
    let t4: [f32; 4] = std::array::from_fn(|i| t8[i] + t8[i + 4]);
    let t2 = [t4[0] + t4[2], t4[1] + t4[3]];
    t2[0] + t2[1]
}

/// Reference: a K-family weight row with activation row `r`.
pub fn dot_k_portable(w: &UnpackedRow, x: &Q8KRows, r: usize, float_mins: bool) -> f32 {
    let mut acc = [0f32; 16];
    for b in 0..w.blocks {
        let (dx, xq, bsums) = x.block(r, b);
        let q = &w.q[b * QK_K..(b + 1) * QK_K];
        let sc = &w.sc[b * 16..b * 16 + 16];
        let mn = &w.mn[b * 16..b * 16 + 16];
        let mut lanes = [0i32; 16];
        for e in 0..QK_K {
            let lane = 8 * ((e / 32) % 2) + (e % 32) / 4;
            lanes[lane] += q[e] as i32 * xq[e] as i32 * sc[e / 16] as i32;
        }
        let corr: [i32; 8] = std::array::from_fn(|j| mn[2 * j] as i32 * bsums[2 * j] as i32 + mn[2 * j + 1] as i32 * bsums[2 * j + 1] as i32);
        if !float_mins {
            for j in 0..8 {
                lanes[j] -= corr[j];
            }
        }
        let dd = w.d[b] * dx;
        for i in 0..16 {
            acc[i] = dd.mul_add(lanes[i] as f32, acc[i]);
        }
        if float_mins {
            let dm = -(w.dmin[b] * dx);
            for j in 0..8 {
                acc[j] = dm.mul_add(corr[j] as f32, acc[j]);
            }
        }
    }
    reduce16(&acc)
}

/// Reference: a B32-family weight row with activation row `r`.
pub fn dot_b32_portable(w: &UnpackedRow, x: &Q80Rows, r: usize, offset: i32) -> f32 {
    let mut acc = [0f32; 16];
    for b in 0..w.blocks {
        let (dx, xq, sums4) = x.block(r, b);
        let q = &w.q[b * QK8_0..(b + 1) * QK8_0];
        let dd = w.d[b] * dx;
        for l in 0..8 {
            let s: i32 = (0..4).map(|t| q[4 * l + t] as i32 * xq[4 * l + t] as i32).sum::<i32>() - offset * sums4[l];
            let i = 8 * (b % 2) + l;
            acc[i] = dd.mul_add(s as f32, acc[i]);
        }
    }
    reduce16(&acc)
}

/// The activation rows of one call, quantized in the formats the matrix's parts need.
pub struct QuantizedInput {
    pub k: Option<Q8KRows>,
    pub b32: Option<Q80Rows>,
}

impl QuantizedInput {
    pub fn new(q: &QuantMatrix, x: &[f32], m: usize) -> Self {
        let fams: Vec<Family> = q.parts().iter().filter_map(|p| family(p.ty)).collect();
        let cols = q.cols();
        Self {
            k: fams.iter().any(|f| matches!(f, Family::K { .. })).then(|| Q8KRows::quantize(x, m, cols)),
            b32: fams.iter().any(|f| matches!(f, Family::B32 { .. })).then(|| Q80Rows::quantize(x, m, cols)),
        }
    }
}

/// Dot products of one weight row (whole blocks of `ty`) with every activation row (`out[r]`
/// for row r). The portable path unpacks the row into `w` first (the reference); the x86 paths
/// read the blocks as stored.
fn row_dots(path: IntPath, ty: GgmlType, row: &[u8], w: &mut UnpackedRow, x: &QuantizedInput, out: &mut [f32]) {
    match path {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `matmul` checked once that the CPU supports the path.
        IntPath::Avx512Vnni | IntPath::Avx2 => unsafe { super::int_x86::row_dots(path, ty, row, x, out) },
        _ => {
            w.unpack(ty, row);
            for (r, o) in out.iter_mut().enumerate() {
                *o = match w.family.expect("an unpacked row") {
                    Family::K { float_mins } => dot_k_portable(w, x.k.as_ref().expect("Q8_K input"), r, float_mins),
                    Family::B32 { offset } => dot_b32_portable(w, x.b32.as_ref().expect("Q8_0 input"), r, offset),
                };
            }
        }
    }
}

/// Weight rows per parallel task.
const ROWS_PER_TASK: usize = 16;

thread_local! {
    /// Per-thread unpacked weight row of the portable path, reused across calls.
    static UNPACKED: std::cell::RefCell<UnpackedRow> = std::cell::RefCell::new(UnpackedRow::default());
}

/// `x W^T` through the integer kernels of `path`: `x` is `[m, cols]`, `out` `[m, rows]`. Every
/// part of `q` must have an integer family ([`family`]).
pub fn matmul(q: &QuantMatrix, x: &[f32], m: usize, out: &mut [f32], path: IntPath) {
    let (n, k) = (q.rows(), q.cols());
    assert_eq!(x.len(), m * k, "x is not [m, k]");
    assert_eq!(out.len(), m * n, "out is not [m, n]");
    assert!(path.supported(), "the integer path {} is not supported on this CPU", path.name());
    let input = QuantizedInput::new(q, x, m);
    crate::kernels::by_weight_rows(n, m, out, |out_t| {
        out_t.par_chunks_mut(ROWS_PER_TASK * m).enumerate().for_each(|(task, chunk)| {
            let start = task * ROWS_PER_TASK;
            #[cfg(target_arch = "x86_64")]
            if path != IntPath::Portable {
                if let Some((ty, rows, row_bytes)) = q.row_span(start, start + chunk.len() / m) {
                    // SAFETY: `path` is supported (checked above).
                    unsafe { super::int_x86::rows_dots(path, ty, rows, row_bytes, &input, chunk) };
                    return;
                }
            }
            UNPACKED.with(|cell| {
                let mut w = cell.borrow_mut();
                for (j, dots) in chunk.chunks_exact_mut(m).enumerate() {
                    let (ty, row) = q.row_blocks(task * ROWS_PER_TASK + j);
                    row_dots(path, ty, row, &mut w, &input, dots);
                }
            })
        })
    });
}
