//! Integer dot products of GGUF weight blocks with 8-bit activation rows (`--weights q8`).
//!
//! **The arithmetic** (defined here by the portable path; the SIMD paths reproduce it bit for
//! bit). A (weight row, activation row) pair keeps one f32 accumulator, starting at 0. For each
//! block b, in order:
//! 1. an exact integer `t_b`: K family, the sum over the block's 256 values of `q * x * sc`
//!    (`sc` the value's 16-value scale), minus (Q6_K) the offset term `m_b`; B32 family, the
//!    sum of `q * x` over the 32 values minus `offset * (sum of the 32 activations)`. K family
//!    offsets: `m_b = sum over the 16 groups of mn[g] * bsum[g]`.
//! 2. float: `acc = fma(d_w * d_x, t_b as f32, acc)`; Q4_K/Q5_K then
//!    `acc = fma(-(dmin_w * d_x), m_b as f32, acc)`.
//!
//! Integers are exact whatever instructions compute them and in whatever order (|t_b| < 2^31:
//! at most 256 * 128 * 63 * 127), and the float steps are two per block in block order, so
//! every path gives the same bits, and a row's result depends on that row alone (row
//! invariance). One scalar per output is what lets a kernel hold 16 weight rows in the lanes
//! of one register ([`super::panel`]): the float steps then serve 16 outputs per instruction.

use super::QuantMatrix;
use super::act::{Q8KRows, Q80Rows, QK_K, QK8_0, QuantizedInput};
use super::unpack::{Family, UnpackedRow};
use crate::gguf::GgmlType;
use rayon::prelude::*;

pub use super::path::{IntPath, runtime_kernels};

/// Reference: block `b` of a K-family weight row with block `b` of activation row `r`: the
/// exact `t_b` (Q6_K's offset term included) and `m_b`.
pub fn block_k(w: &UnpackedRow, x: &Q8KRows, r: usize, b: usize, float_mins: bool) -> (i32, i32) {
    let (_, xq, bsums) = x.block(r, b);
    let q = &w.q[b * QK_K..(b + 1) * QK_K];
    let sc = &w.sc[b * 16..b * 16 + 16];
    let mn = &w.mn[b * 16..b * 16 + 16];
    let t: i32 = (0..QK_K).map(|e| q[e] as i32 * xq[e] as i32 * sc[e / 16] as i32).sum();
    let m: i32 = (0..16).map(|g| mn[g] as i32 * bsums[g] as i32).sum();
    if float_mins { (t, m) } else { (t - m, 0) }
}

/// Reference: a K-family weight row with activation row `r`.
pub fn dot_k_portable(w: &UnpackedRow, x: &Q8KRows, r: usize, float_mins: bool) -> f32 {
    let mut acc = 0f32;
    for b in 0..w.blocks {
        let (t, m) = block_k(w, x, r, b, float_mins);
        let dx = x.d[r * x.blocks + b];
        acc = (w.d[b] * dx).mul_add(t as f32, acc);
        if float_mins {
            acc = (-(w.dmin[b] * dx)).mul_add(m as f32, acc);
        }
    }
    acc
}

/// Reference: a B32-family weight row with activation row `r`.
pub fn dot_b32_portable(w: &UnpackedRow, x: &Q80Rows, r: usize, offset: i32) -> f32 {
    let mut acc = 0f32;
    for b in 0..w.blocks {
        let (dx, xq, _) = x.block(r, b);
        let q = &w.q[b * QK8_0..(b + 1) * QK8_0];
        let t: i32 = (0..QK8_0).map(|e| q[e] as i32 * xq[e] as i32).sum::<i32>() - offset * x.sums[r * x.blocks + b];
        acc = (w.d[b] * dx).mul_add(t as f32, acc);
    }
    acc
}

/// Dot products of one weight row (whole blocks of `ty`) with every activation row (`out[r]`
/// for row r). The portable path unpacks the row into `w` first (the reference); the x86 paths
/// read the blocks as stored.
fn row_dots(path: IntPath, ty: GgmlType, row: &[u8], w: &mut UnpackedRow, x: &QuantizedInput, out: &mut [f32]) {
    match path {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `matmul` checked once that the CPU supports the path.
        IntPath::Avx512Vnni | IntPath::AvxVnni | IntPath::Avx2 => unsafe {
            super::int_x86::row_dots(path, ty, row, x, out)
        },
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

/// Weight rows per parallel task: one panel.
const ROWS_PER_TASK: usize = super::panel::PANEL;

thread_local! {
    /// Per-thread unpacked weight row of the portable path, reused across calls.
    static UNPACKED: std::cell::RefCell<UnpackedRow> = std::cell::RefCell::new(UnpackedRow::default());
    /// Per-thread panel results of one pass (a panel's 16 outputs per activation row), reused
    /// across tasks: no zeroing of a whole pass's tile for one-row calls.
    static TILE: std::cell::RefCell<Vec<[f32; super::panel::PANEL]>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// `x W^T` through the integer kernels of `path`: `x` is `[m, cols]`, `out` `[m, rows]`. Every
/// part of `q` must have an integer family ([`family`]). Parts stored as panels run the panel
/// kernels on AVX-512 VNNI ([`super::panel_x86`]) and AVX2 ([`super::panel_avx2`]); on the
/// portable path their rows are gathered back.
pub fn matmul(q: &QuantMatrix, x: &[f32], m: usize, out: &mut [f32], path: IntPath) {
    let (n, k) = (q.rows(), q.cols());
    assert_eq!(x.len(), m * k, "x is not [m, k]");
    assert_eq!(out.len(), m * n, "out is not [m, n]");
    assert!(path.supported(), "the integer path {} is not supported on this CPU", path.name());
    let input = QuantizedInput::new(q, x, m);
    #[cfg(target_arch = "x86_64")]
    if path.has_panels() && q.parts().iter().all(|p| p.panels) {
        return panels_into(q, &input, m, out, path);
    }
    crate::kernels::by_weight_rows(n, m, out, |out_t| {
        // Tasks of 16 weight rows counted from each part's first row (a panel each).
        let mut tasks: Vec<(usize, usize, &mut [f32])> =
            Vec::with_capacity(n.div_ceil(ROWS_PER_TASK) + q.parts().len());
        let mut rest = out_t;
        for (i, (p, &start)) in q.parts().iter().zip(q.part_starts()).enumerate() {
            let (mine, tail) = std::mem::take(&mut rest).split_at_mut(p.rows * m);
            rest = tail;
            for (c, chunk) in mine.chunks_mut(ROWS_PER_TASK * m).enumerate() {
                tasks.push((i, start + c * ROWS_PER_TASK, chunk));
            }
        }
        tasks.into_par_iter().for_each(|(part, start, chunk)| {
            let p = &q.parts()[part];
            #[cfg(target_arch = "x86_64")]
            if p.panels && path.has_panels() {
                return panel_task(p, (start - q.part_starts()[part]) / ROWS_PER_TASK, &input, m, path, |r, dots| {
                    for (j, &v) in dots.iter().enumerate() {
                        chunk[j * m + r] = v;
                    }
                });
            }
            rows_task(q, path, start, &input, m, chunk);
        })
    });
}

/// `out` (`[m, n]`) of a matrix whose every part is stored as panels, written in place:
/// each task owns 16 output columns, so no `[n, m]` buffer is filled and transposed (for the
/// 151,936-row heads that was an allocation of n * m values and a strided copy per call).
#[cfg(target_arch = "x86_64")]
fn panels_into(q: &QuantMatrix, input: &QuantizedInput, m: usize, out: &mut [f32], path: IntPath) {
    use super::panel::PANEL;
    /// The output, shared by tasks that write disjoint columns.
    #[derive(Clone, Copy)]
    struct Out(*mut f32);
    // SAFETY: every task writes only its own columns (below), so no element is written twice
    // and none is read.
    unsafe impl Send for Out {}
    unsafe impl Sync for Out {}
    let (n, dst) = (q.rows(), Out(out.as_mut_ptr()));
    let tasks: Vec<(usize, usize)> =
        q.parts().iter().enumerate().flat_map(|(i, p)| (0..p.rows.div_ceil(PANEL)).map(move |k| (i, k))).collect();
    tasks.into_par_iter().for_each(|(part, index)| {
        // Captures the whole Send wrapper, not its raw-pointer field (which is not Send).
        #[allow(clippy::redundant_locals)]
        let dst = dst;
        let (p, start) = (&q.parts()[part], q.part_starts()[part] + index * PANEL);
        let rows_here = (p.rows - index * PANEL).min(PANEL);
        panel_task(p, index, input, m, path, |r, dots| {
            debug_assert!(dots.len() == rows_here && r < m);
            // SAFETY: columns start..start + rows_here (<= n) of row r (< m) lie inside `out`;
            // this task is the only one writing them.
            unsafe { std::ptr::copy_nonoverlapping(dots.as_ptr(), dst.0.add(r * n + start), rows_here) };
        });
    });
}

/// One task on panels (AVX-512 VNNI, AVX-VNNI or AVX2): panel `index` of part `p` with every activation
/// row, in passes of up to the path's rows per pass; `put(r, dots)` receives activation row
/// r's dot products with the panel's real weight rows, in order (one contiguous run of an
/// `[m, n]` output row).
#[cfg(target_arch = "x86_64")]
fn panel_task(
    p: &super::QuantPart,
    index: usize,
    input: &QuantizedInput,
    m: usize,
    path: IntPath,
    mut put: impl FnMut(usize, &[f32]),
) {
    use super::panel::PANEL;
    use super::{panel_avx2, panel_x86};
    let panel_bytes = p.data.len() / p.rows.div_ceil(PANEL);
    let panel = &p.data[index * panel_bytes..(index + 1) * panel_bytes];
    let rows_here = (p.rows - index * PANEL).min(PANEL);
    let pass = if path == IntPath::Avx512Vnni { panel_x86::MAX_ROWS } else { panel_avx2::MAX_ROWS };
    let (k, b32) = (input.k.as_ref(), input.b32.as_ref());
    let pass_at = |r0| super::panel_families::PanelPass { ty: p.ty, panel, k, b32, r0 };
    TILE.with(|cell| {
        let mut tile = cell.borrow_mut();
        let need = pass.min(m);
        if tile.len() < need {
            tile.resize(need, [0f32; PANEL]);
        }
        for r0 in (0..m).step_by(pass) {
            let mr = (m - r0).min(pass);
            // SAFETY: the caller checked that the CPU supports `path`, which has panel kernels.
            unsafe {
                match path {
                    IntPath::Avx512Vnni => panel_x86::panel_dots(pass_at(r0), &mut tile[..mr]),
                    _ => panel_avx2::panel_dots(pass_at(r0), &mut tile[..mr], path == IntPath::AvxVnni),
                }
            }
            for (r, dots) in tile[..mr].iter().enumerate() {
                put(r0 + r, &dots[..rows_here]);
            }
        }
    })
}

/// One task on rows in GGUF order: weight rows `start..` (`chunk.len() / m` of them).
fn rows_task(q: &QuantMatrix, path: IntPath, start: usize, input: &QuantizedInput, m: usize, chunk: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if path != IntPath::Portable
        && let Some((ty, rows, row_bytes)) = q.row_span(start, start + chunk.len() / m)
    {
        // SAFETY: `path` is supported (checked by `matmul`).
        unsafe { super::int_x86::rows_dots(path, ty, rows, row_bytes, input, chunk) };
        return;
    }
    UNPACKED.with(|cell| {
        let mut w = cell.borrow_mut();
        for (j, dots) in chunk.chunks_exact_mut(m).enumerate() {
            let (ty, row) = q.row_blocks(start + j);
            row_dots(path, ty, &row, &mut w, input, dots);
        }
    })
}
