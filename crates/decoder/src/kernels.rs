//! CPU kernel for `x W^T` with few rows of `x`: the decode and verification hot path.
//!
//! Decoding reads every weight once per token, so it is bound by memory bandwidth. burn-flex
//! hands `[1, k] x [k, n]` to a general gemm that runs single-threaded below ~7M
//! multiply-adds and reaches about 40% of this machine's read bandwidth (`specx bench`). This
//! kernel streams each weight row once for all rows of `x`, on all cores.
//!
//! Every output element is accumulated in the same order whatever the number of rows, so a
//! forward of n tokens gives bit-identical projections to n single-token forwards: greedy
//! speculative decoding then reproduces greedy decoding exactly.

use rayon::prelude::*;

/// Output rows per parallel task (a multiple of [`BLOCK`]).
const ROWS_PER_TASK: usize = 32;
/// Weight rows processed together: each row of `x` is multiplied with a block of weight rows
/// that stays in L1/L2 while every row of `x` passes over it.
const BLOCK: usize = 4;

/// Rows of `x` multiplied together with one block of weight rows: each weight vector loaded
/// into registers serves this many rows, which is what keeps many-row products compute-bound
/// instead of load-bound.
const X_TILE: usize = 3;

/// Dot products of `R` rows `xs` with the weight rows `ws`, through the widest SIMD path this
/// CPU has. Every (weight row, x row) pair gets the same arithmetic whatever the tile size or
/// the number of rows, so its rounding depends only on the two vectors.
#[inline(always)]
fn dots<const R: usize>(ws: [&[f32]; BLOCK], xs: [&[f32]; R]) -> [[f32; BLOCK]; R] {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU supports AVX-512F (checked above); lengths are checked inside.
            return unsafe { x86::dots_avx512(ws, xs) };
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
            // AVX2 has 16 registers: one x row at a time fills them.
            // SAFETY: the CPU supports AVX2 and FMA (checked above).
            return xs.map(|x| unsafe { x86::dots_avx2(ws, x) });
        }
    }
    xs.map(|x| ws.map(|w| dot_portable(w, x)))
}

/// Portable fallback: independent lane accumulators and a fixed pairwise reduction.
fn dot_portable(w: &[f32], x: &[f32]) -> f32 {
    const LANES: usize = 16;
    let (wc, wt) = w.as_chunks::<LANES>();
    let (xc, xt) = x.as_chunks::<LANES>();
    let mut acc = [0f32; LANES];
    for (a, b) in wc.iter().zip(xc) {
        for l in 0..LANES {
            acc[l] += a[l] * b[l];
        }
    }
    let mut width = LANES;
    while width > 1 {
        width /= 2;
        for l in 0..width {
            acc[l] += acc[l + width];
        }
    }
    acc[0] + wt.iter().zip(xt).map(|(a, b)| a * b).sum::<f32>()
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::BLOCK;
    use std::arch::x86_64::*;

    /// Two 16-lane FMA accumulators per (x row, weight row) pair over 32-value steps, then
    /// a scalar tail. Each loaded weight vector is used for all `R` rows of `x`.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn dots_avx512<const R: usize>(ws: [&[f32]; BLOCK], xs: [&[f32]; R]) -> [[f32; BLOCK]; R] {
        let k = ws[0].len();
        for v in ws.iter().chain(xs.iter()) {
            assert_eq!(v.len(), k);
        }
        let body = k / 32 * 32;
        let mut a0 = [[_mm512_setzero_ps(); BLOCK]; R];
        let mut a1 = [[_mm512_setzero_ps(); BLOCK]; R];
        let mut i = 0;
        while i < body {
            // SAFETY: i + 32 <= body <= k for every weight row and every x row.
            unsafe {
                let w0: [__m512; BLOCK] = std::array::from_fn(|r| _mm512_loadu_ps(ws[r].as_ptr().add(i)));
                for j in 0..R {
                    let x0 = _mm512_loadu_ps(xs[j].as_ptr().add(i));
                    for r in 0..BLOCK {
                        a0[j][r] = _mm512_fmadd_ps(w0[r], x0, a0[j][r]);
                    }
                }
                let w1: [__m512; BLOCK] = std::array::from_fn(|r| _mm512_loadu_ps(ws[r].as_ptr().add(i + 16)));
                for j in 0..R {
                    let x1 = _mm512_loadu_ps(xs[j].as_ptr().add(i + 16));
                    for r in 0..BLOCK {
                        a1[j][r] = _mm512_fmadd_ps(w1[r], x1, a1[j][r]);
                    }
                }
            }
            i += 32;
        }
        let mut out = [[0f32; BLOCK]; R];
        for j in 0..R {
            for r in 0..BLOCK {
                let mut s = _mm512_reduce_add_ps(_mm512_add_ps(a0[j][r], a1[j][r]));
                for t in body..k {
                    s += ws[r][t] * xs[j][t];
                }
                out[j][r] = s;
            }
        }
        out
    }

    /// Two 8-lane FMA accumulators per weight row over 16-value steps; scalar tail.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn dots_avx2(ws: [&[f32]; BLOCK], x: &[f32]) -> [f32; BLOCK] {
        let k = x.len();
        for w in &ws {
            assert_eq!(w.len(), k);
        }
        let body = k / 16 * 16;
        let mut a0 = [_mm256_setzero_ps(); BLOCK];
        let mut a1 = [_mm256_setzero_ps(); BLOCK];
        let mut i = 0;
        while i < body {
            // SAFETY: i + 16 <= body <= k for x and every weight row.
            unsafe {
                let x0 = _mm256_loadu_ps(x.as_ptr().add(i));
                let x1 = _mm256_loadu_ps(x.as_ptr().add(i + 8));
                for r in 0..BLOCK {
                    a0[r] = _mm256_fmadd_ps(_mm256_loadu_ps(ws[r].as_ptr().add(i)), x0, a0[r]);
                    a1[r] = _mm256_fmadd_ps(_mm256_loadu_ps(ws[r].as_ptr().add(i + 8)), x1, a1[r]);
                }
            }
            i += 16;
        }
        let mut out = [0f32; BLOCK];
        for r in 0..BLOCK {
            let v = _mm256_add_ps(a0[r], a1[r]);
            let v = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
            let v = _mm_add_ps(v, _mm_movehl_ps(v, v));
            let v = _mm_add_ss(v, _mm_shuffle_ps(v, v, 1));
            let mut s = _mm_cvtss_f32(v);
            for j in body..k {
                s += ws[r][j] * x[j];
            }
            out[r] = s;
        }
        out
    }
}

/// Where the kernel's weight rows come from: borrowed f32 rows, or rows decoded on the fly
/// from a compact storage (ggml blocks, see [`crate::quant`]) into a per-task scratch buffer.
/// The multiply is the same either way, so a decoded row gives bit-identical results to the
/// same values stored in f32.
pub trait WeightRows: Sync {
    /// Number of rows (outputs).
    fn rows(&self) -> usize;
    /// Values per row (inputs).
    fn cols(&self) -> usize;
    /// Whether [`WeightRows::row`] writes into its scratch buffer (false: rows are borrowed).
    const DECODES: bool;
    /// Row `o` as f32 values: borrowed where they are stored as f32, else decoded into
    /// `scratch` (`cols()` long) and returned from there.
    fn row<'a>(&'a self, o: usize, scratch: &'a mut [f32]) -> &'a [f32];
}

/// A row-major f32 matrix `[n, k]` in HF `[out, in]` layout.
pub struct F32Rows<'a> {
    pub data: &'a [f32],
    pub n: usize,
    pub k: usize,
}

impl WeightRows for F32Rows<'_> {
    fn rows(&self) -> usize {
        self.n
    }

    fn cols(&self) -> usize {
        self.k
    }

    const DECODES: bool = false;

    #[inline(always)]
    fn row<'a>(&'a self, o: usize, _scratch: &'a mut [f32]) -> &'a [f32] {
        &self.data[o * self.k..(o + 1) * self.k]
    }
}

/// `out[r * n + o] = sum_i x[r * k + i] * w[o * k + i]` for `r < m`, `o < n`: `x` is `[m, k]`,
/// `w` is `[n, k]` (HF `[out, in]` layout), `out` is `[m, n]`.
pub fn matmul_wt(x: &[f32], m: usize, w: &[f32], n: usize, k: usize, out: &mut [f32]) {
    assert_eq!(w.len(), n * k, "w is not [n, k]");
    matmul_rows(x, m, &F32Rows { data: w, n, k }, out);
}

/// `x W^T` for any [`WeightRows`]: `x` is `[m, k]`, `out` is `[m, n]`. Each weight row is
/// obtained once per call and multiplied with every row of `x`, so decoding compact rows is
/// paid once for all `m` rows.
pub fn matmul_rows<W: WeightRows>(x: &[f32], m: usize, w: &W, out: &mut [f32]) {
    let (n, k) = (w.rows(), w.cols());
    assert_eq!(x.len(), m * k, "x is not [m, k]");
    assert_eq!(out.len(), m * n, "out is not [m, n]");
    by_weight_rows(n, m, out, |out_t| rows_into(x, m, w, out_t));
}

/// Lets `fill` write the products weight row by weight row (`[n, m]`: each weight row's `m`
/// dot products together, so a parallel task over weight rows writes one contiguous chunk),
/// then lays them out as `out` (`[m, n]`). With one row both layouts agree and `fill` writes
/// `out` itself.
pub(crate) fn by_weight_rows(n: usize, m: usize, out: &mut [f32], fill: impl FnOnce(&mut [f32])) {
    if m == 1 {
        fill(out);
        return;
    }
    let mut out_t = vec![0f32; n * m];
    fill(&mut out_t);
    for (o, vals) in out_t.chunks_exact(m).enumerate() {
        for (r, v) in vals.iter().enumerate() {
            out[r * n + o] = *v;
        }
    }
}

thread_local! {
    /// Per-thread buffer for decoded weight rows, reused across calls (no allocation or
    /// zeroing on the hot path).
    static SCRATCH: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Fills `out_t` (`[n, m]`: for each weight row, its dot products with the m rows of `x`).
fn rows_into<W: WeightRows>(x: &[f32], m: usize, w: &W, out_t: &mut [f32]) {
    let k = w.cols();
    out_t.par_chunks_mut(ROWS_PER_TASK * m).enumerate().for_each(|(task, chunk)| {
        SCRATCH.with(|cell| {
            let mut scratch = cell.borrow_mut();
            let need = if W::DECODES { BLOCK * k } else { 0 };
            if scratch.len() < need {
                scratch.resize(need, 0.0);
            }
            let first = task * ROWS_PER_TASK;
            let rows = chunk.len() / m;
            for b in (0..rows).step_by(BLOCK) {
                // A short last block repeats its last row; the extra results are dropped.
                let mut parts = scratch[..need].chunks_exact_mut(k.max(1));
                let ws: [&[f32]; BLOCK] = std::array::from_fn(|j| {
                    let part = parts.next().unwrap_or_default();
                    w.row(first + (b + j).min(rows - 1), part)
                });
                let mut write = |r: usize, d: &[f32; BLOCK]| {
                    for j in 0..BLOCK.min(rows - b) {
                        chunk[(b + j) * m + r] = d[j];
                    }
                };
                let mut r = 0;
                while r + X_TILE <= m {
                    let d = dots::<X_TILE>(ws, std::array::from_fn(|t| &x[(r + t) * k..(r + t + 1) * k]));
                    for (t, dt) in d.iter().enumerate() {
                        write(r + t, dt);
                    }
                    r += X_TILE;
                }
                for r in r..m {
                    let [d] = dots::<1>(ws, [&x[r * k..(r + 1) * k]]);
                    write(r, &d);
                }
            }
        })
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(x: &[f32], m: usize, w: &[f32], n: usize, k: usize) -> Vec<f32> {
        let mut out = vec![0f32; m * n];
        for r in 0..m {
            for o in 0..n {
                out[r * n + o] = (0..k).map(|i| x[r * k + i] as f64 * w[o * k + i] as f64).sum::<f64>() as f32;
            }
        }
        out
    }

    #[test]
    fn matches_naive_and_is_independent_of_row_count() {
        let (n, k) = (70, 101); // odd sizes exercise the tails
        let w: Vec<f32> = (0..n * k).map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0).collect();
        let x: Vec<f32> = (0..7 * k).map(|i| ((i * 13 % 89) as f32 - 44.0) / 44.0).collect();
        let mut all = vec![0f32; 7 * n];
        matmul_wt(&x, 7, &w, n, k, &mut all);
        let want = naive(&x, 7, &w, n, k);
        for (a, b) in all.iter().zip(&want) {
            assert!((a - b).abs() < 1e-4, "{a} vs {b}");
        }
        for r in 0..7 {
            let mut one = vec![0f32; n];
            matmul_wt(&x[r * k..(r + 1) * k], 1, &w, n, k, &mut one);
            assert_eq!(&one[..], &all[r * n..(r + 1) * n], "row {r} differs bitwise");
        }
    }
}
