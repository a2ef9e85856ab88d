//! A weight matrix kept on the device in its GGUF blocks ([`DeviceBlocks`]) and the two kernels
//! that read it: the product `x W^T (+ bias)` for any number of rows, decoding each weight in
//! the kernel (llama.cpp's CUDA backend's dequantize-in-kernel matrix-vector product), and the
//! lookup of whole rows (the token embedding).
//!
//! The product gives each output value one cube of one, two or four warps ([`warps_for`], by
//! the row's width only). A warp's 32 units read 4 consecutive chunks at a time, 8 units a
//! chunk, each unit one quad (4 values: one 32-bit word of quants, `blocks::quad`), so a warp's
//! load covers consecutive bytes of the row (docs/internals/kernels.md has the bytes a load
//! touches against those it uses, measured by the device check from these index functions).
//! Each decoded weight is multiplied with up to 8 or 32 activation rows at once (the weight row
//! is read once per pass of rows: [`PASS_FEW`], [`PASS_MANY`]), and the units' sums fold in a
//! fixed tree. A row's result is computed the same way whatever the call's other rows are
//! (row invariance), and the bias is added in the same kernel.

use super::blocks::{CHUNK, Quad, chunk, quad, quad_scale, quad_value, quad_words};
use super::{contiguous, words, words_on};
use crate::Device;
use crate::fusion::Fused;
use crate::gguf::GgmlType;
use crate::quant::{QuantMatrix, QuantPart};
use anyhow::{Result, bail, ensure};
use burn::tensor::{DType, Int, Tensor};
use burn_cubecl::Cube;
use burn_cubecl::cubecl;
use burn_cubecl::ops::numeric::empty_device_dtype;
use burn_cubecl::tensor::CubeTensor;
use cubecl::prelude::*;

/// Units of a warp (NVIDIA's); a product cube has 1, 2 or 4 of them.
const WARP: u32 = 32;
/// Units that read one chunk together, a quad each.
const QUADS: u32 = CHUNK / 4;
/// Rows whose partial sums fold together through shared memory (a cube's shared memory holds
/// `units x FOLD_ROWS` sums, 4 KiB at most, whatever the pass).
const FOLD_ROWS: u32 = 8;
/// Activation rows multiplied with each decoded weight in one pass over the weight row: up to
/// [`PASS_FEW`] for a decode step or a verification, [`PASS_MANY`] for a longer call (a tree,
/// a prompt), which then reads the weights a quarter as often. A row's sums are the same in
/// either (each row accumulates alone, in the same order, and folds in the same tree).
const PASS_FEW: u32 = 8;
const PASS_MANY: u32 = 32;
/// Most cubes along one axis of a launch (wgpu's limit; a vocabulary has more rows).
const MAX_CUBES_X: usize = 32768;

/// Whether the device kernels read blocks of this type.
pub(crate) fn on_device(ty: GgmlType) -> bool {
    matches!(
        ty,
        GgmlType::Q8_0
            | GgmlType::Q4_0
            | GgmlType::Q5_0
            | GgmlType::Q4K
            | GgmlType::Q5K
            | GgmlType::Q6K
            | GgmlType::F16
            | GgmlType::BF16
    )
}

/// The entry of `parts` (4 words each: first row, type, byte offset, row bytes) holding `row`.
#[cube]
fn part_of(parts: &[u32], n_parts: u32, row: u32) -> u32 {
    let mut p = 0u32;
    let mut k = 1u32;
    while k < n_parts {
        if parts[(4 * k) as usize] <= row {
            p = k;
        }
        k += 1;
    }
    p
}

/// The RMSNorm factors `1 / sqrt(mean(x^2) + eps)` of the `here` input rows from `first`, into
/// `inv` (the units' sums of squares fold through `sums`, in a fixed tree).
#[cube]
#[allow(clippy::too_many_arguments)]
fn inverse_rms(
    x: &[f32],
    sums: &mut Shared<[f32]>,
    inv: &mut Shared<[f32]>,
    first: u32,
    here: u32,
    cols: u32,
    eps: f32,
    #[comptime] pass: u32,
) {
    let mut sq = Array::<f32>::new(pass as usize);
    let mut k = UNIT_POS;
    while k < cols {
        #[unroll]
        for j in 0..pass {
            if j < here {
                let v = x[((first + j) * cols + k) as usize];
                sq[j as usize] += v * v;
            }
        }
        k += CUBE_DIM;
    }
    fold(&sq, sums, inv, pass);
    if UNIT_POS < here {
        inv[UNIT_POS as usize] = 1.0f32 / f32::sqrt(inv[UNIT_POS as usize] / f32::cast_from(cols) + eps);
    }
    sync_cube();
}

/// Folds every unit's `pass` partial sums `part` into `totals[0..pass]`, [`FOLD_ROWS`] rows at
/// a time: each unit stores its own at `sums[unit FOLD_ROWS + j]`, then they halve in a fixed
/// tree (the same for every row, whatever the pass).
#[cube]
fn fold(part: &Array<f32>, sums: &mut Shared<[f32]>, totals: &mut Shared<[f32]>, #[comptime] pass: u32) {
    #[unroll]
    for b in 0..pass / FOLD_ROWS {
        #[unroll]
        for j in 0..FOLD_ROWS {
            sums[(UNIT_POS * FOLD_ROWS + j) as usize] = part[(b * FOLD_ROWS + j) as usize];
        }
        sync_cube();
        let mut active = CUBE_DIM / 2;
        while active > 0 {
            if UNIT_POS < active {
                #[unroll]
                for j in 0..FOLD_ROWS {
                    let other = sums[((UNIT_POS + active) * FOLD_ROWS + j) as usize];
                    sums[(UNIT_POS * FOLD_ROWS + j) as usize] += other;
                }
            }
            sync_cube();
            active /= 2;
        }
        if UNIT_POS < FOLD_ROWS {
            totals[(b * FOLD_ROWS + UNIT_POS) as usize] = sums[UNIT_POS as usize];
        }
        sync_cube();
    }
}

/// The dot products of row `row` of the piece with the `here` input rows from `first` (each
/// input value normalised by `inv` and `norm` when `normed`), folded into `totals[0..here]`.
/// Unit `u` reads quad `u % 8` of chunks `u / 8`, `u / 8 + units / 8`, ...: a warp reads 4
/// consecutive chunks at a time.
#[cube]
#[allow(clippy::too_many_arguments)]
fn row_dots(
    w: &[u32],
    parts: &[u32],
    x: &[f32],
    norm: &[f32],
    inv: &Shared<[f32]>,
    sums: &mut Shared<[f32]>,
    totals: &mut Shared<[f32]>,
    n_parts: u32,
    row: u32,
    first: u32,
    here: u32,
    cols: u32,
    #[comptime] normed: bool,
    #[comptime] pass: u32,
) {
    let ty = row_type(parts, n_parts, row);
    let start = row_start(parts, n_parts, row);
    let mut acc = Array::<f32>::new(pass as usize);
    let p = UNIT_POS % QUADS;
    let mut c = UNIT_POS / QUADS;
    while c < cols / CHUNK {
        let scales = chunk(w, ty, start, c);
        let scale = quad_scale(&scales, p);
        let q = quad(w, ty, start, c, p);
        #[unroll]
        for i in 0..4u32 {
            let v = quad_value(ty, &q, c, p, scale, &scales, i);
            let k = c * CHUNK + 4 * p + i;
            #[unroll]
            for j in 0..pass {
                if j < here {
                    let mut xv = x[((first + j) * cols + k) as usize];
                    if normed {
                        xv = xv * inv[j as usize] * norm[k as usize];
                    }
                    acc[j as usize] += v * xv;
                }
            }
        }
        c += CUBE_DIM / QUADS;
    }
    fold(&acc, sums, totals, pass);
}

/// Where row `row` of a piece starts (bytes), from the run table `parts`.
#[cube]
fn row_start(parts: &[u32], n_parts: u32, row: u32) -> u32 {
    let p = part_of(parts, n_parts, row);
    parts[(4 * p + 2) as usize] + (row - parts[(4 * p) as usize]) * parts[(4 * p + 3) as usize]
}

/// The type of row `row` of a piece.
#[cube]
fn row_type(parts: &[u32], n_parts: u32, row: u32) -> u32 {
    parts[(4 * part_of(parts, n_parts, row) + 1) as usize]
}

/// Output `row` of this piece (`first_out + row` of the whole output, `out_stride` wide) for
/// the `pass` input rows of pass `CUBE_POS_Z`: `sum_k x[r, k] w[row, k]`, with what is fused
/// (`Fused`): the input rows normalised first (`normed`), the bias, `silu(gate) * up` of rows
/// `row` and `row + glu_rows` (`glu`), the residual.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn block_matmul_rows(
    w: &[u32],
    parts: &[u32],
    x: &[f32],
    norm: &[f32],
    bias: &[f32],
    residual: &[f32],
    out: &mut [f32],
    n_parts: u32,
    piece_rows: u32,
    first_out: u32,
    out_stride: u32,
    cols: u32,
    m: u32,
    glu_rows: u32,
    eps: f32,
    #[comptime] normed: bool,
    #[comptime] has_bias: bool,
    #[comptime] glu: bool,
    #[comptime] has_residual: bool,
    #[comptime] pass: u32,
    #[comptime] units: u32,
) {
    let row = CUBE_POS_X + CUBE_POS_Y * CUBE_COUNT_X;
    let first = CUBE_POS_Z * pass;
    let mut sums = Shared::<[f32]>::new_slice((units * FOLD_ROWS) as usize);
    let mut dots = Shared::<[f32]>::new_slice(pass as usize);
    let mut ups = Shared::<[f32]>::new_slice(pass as usize);
    let mut inv = Shared::<[f32]>::new_slice(pass as usize);
    if row < piece_rows {
        let here = min(pass, m - first);
        if normed {
            inverse_rms(x, &mut sums, &mut inv, first, here, cols, eps, pass);
        }
        row_dots(w, parts, x, norm, &inv, &mut sums, &mut dots, n_parts, row, first, here, cols, normed, pass);
        if glu {
            row_dots(
                w,
                parts,
                x,
                norm,
                &inv,
                &mut sums,
                &mut ups,
                n_parts,
                row + glu_rows,
                first,
                here,
                cols,
                normed,
                pass,
            );
        }
        if UNIT_POS < here {
            let at = ((first + UNIT_POS) * out_stride + first_out + row) as usize;
            let mut y = dots[UNIT_POS as usize];
            if has_bias {
                y += bias[(first_out + row) as usize];
            }
            if glu {
                y = y / (1.0f32 + f32::exp(-y)) * ups[UNIT_POS as usize];
            }
            if has_residual {
                y += residual[at];
            }
            out[at] = y;
        }
    }
}

/// Row `ids[CUBE_POS]` of the matrix decoded into row `CUBE_POS` of `out`, when that row is
/// in this piece (rows `first..first + piece_rows`): unit `u` decodes quad `u % 8` of chunks
/// `u / 8`, `u / 8 + units / 8`, ..., as the product reads them.
#[cube(launch_unchecked)]
fn block_rows(
    w: &[u32],
    parts: &[u32],
    ids: &[u32],
    out: &mut [f32],
    n_parts: u32,
    first: u32,
    piece_rows: u32,
    cols: u32,
) {
    let i = CUBE_POS as u32;
    let id = ids[i as usize];
    if id >= first && id < first + piece_rows {
        let row = id - first;
        let ty = row_type(parts, n_parts, row);
        let start = row_start(parts, n_parts, row);
        let p = UNIT_POS % QUADS;
        let mut c = UNIT_POS / QUADS;
        while c < cols / CHUNK {
            let scales = chunk(w, ty, start, c);
            let scale = quad_scale(&scales, p);
            let q = quad(w, ty, start, c, p);
            #[unroll]
            for v in 0..4u32 {
                out[(i * cols + c * CHUNK + 4 * p + v) as usize] = quad_value(ty, &q, c, p, scale, &scales, v);
            }
            c += CUBE_DIM / QUADS;
        }
    }
}

/// The byte addresses one warp's units load a row's quants from, in the product's first
/// chunk pass over a row of type `ty` starting at byte 0: unit `u` writes its quad's two words
/// (`blocks::quad_words`, [`NO_WORD`](super::blocks::NO_WORD) for none) to `out[2u]` and the
/// next. The device check measures the bytes a load touches from these.
#[cube(launch)]
fn warp_quad_words(out: &mut [u32], ty: u32) {
    let at: Quad = quad_words(ty, 0u32, UNIT_POS / QUADS, UNIT_POS % QUADS);
    out[(2 * UNIT_POS) as usize] = at.low;
    out[(2 * UNIT_POS + 1) as usize] = at.high;
}

/// Warps of a product cube for rows of `cols` values: one warp for rows under 16 chunks, two
/// under 64, four from 64 (2048 values: the pair's MLP down rows, 4864 and 18,944 wide, take
/// four). Fixed by the width alone, so a row's reduction order never depends on the call.
fn warps_for(cols: usize) -> u32 {
    match cols / CHUNK as usize {
        0..16 => 1,
        16..64 => 2,
        _ => 4,
    }
}

/// [`warp_quad_words`] on `device`: the addresses each of a warp's 32 units loads a row of
/// `ty` from, as (low word, high word) pairs.
pub(crate) fn warp_quad_loads(ty: GgmlType, device: &Device) -> Vec<(u32, u32)> {
    let out = words_on(vec![0; 2 * WARP as usize], device);
    let buffer = words(&out);
    warp_quad_words::launch(
        &buffer.client,
        CubeCount::Static(1, 1, 1),
        CubeDim::new_1d(WARP),
        buffer.clone().into_buffer_arg(),
        ty.id(),
    );
    let at = out.into_data().try_to_vec::<u32>().expect("u32 addresses");
    at.chunks_exact(2).map(|a| (a[0], a[1])).collect()
}

/// Consecutive rows of one type inside a piece.
#[derive(Clone, Debug)]
struct Run {
    ty: GgmlType,
    /// First row, relative to the piece.
    first: usize,
    rows: usize,
    /// Byte offset of the first row in the piece's buffer (a multiple of 4).
    offset: usize,
    row_bytes: usize,
}

/// Rows of the matrix that fit one device buffer, with their runs as a table for the kernels.
#[derive(Clone)]
struct Piece {
    words: Tensor<1, Int>,
    table: Tensor<1, Int>,
    runs: Vec<Run>,
    first: usize,
    rows: usize,
}

/// A `[rows, cols]` matrix (HF `[out, in]` layout) on a device in its GGUF blocks, as the
/// file stores them: in one buffer, or in row pieces where the device caps a buffer (128 MiB
/// on Mesa's lavapipe, less than a vocabulary matrix).
#[derive(Clone)]
pub(crate) struct DeviceBlocks {
    pieces: Vec<Piece>,
    rows: usize,
    cols: usize,
    bytes: usize,
}

impl DeviceBlocks {
    /// `q`'s blocks on `device` (rows gathered from panels where `q` is laid out in them).
    pub(crate) fn upload(q: &QuantMatrix, device: &Device) -> Result<Self> {
        ensure!(q.cols().is_multiple_of(CHUNK as usize), "{} columns are not whole 32-value chunks", q.cols());
        let cap = crate::device::max_buffer_bytes(device).unwrap_or(usize::MAX);
        let (mut pieces, mut bytes, mut runs, mut first) = (Vec::new(), Vec::<u8>::new(), Vec::<Run>::new(), 0);
        for o in 0..q.rows() {
            let (ty, row) = q.row_blocks(o);
            if !on_device(ty) {
                bail!("{ty:?} blocks have no device kernel");
            }
            let (values, block_bytes) = ty.block();
            ensure!(
                row.len() == q.cols() / values * block_bytes,
                "a {ty:?} row of {} bytes for {} columns (the kernels read {} bytes a row)",
                row.len(),
                q.cols(),
                q.cols() / values * block_bytes
            );
            if row.len() > cap {
                bail!("a row of {} bytes does not fit the device's largest buffer ({cap} bytes)", row.len());
            }
            if o > first && bytes.len().next_multiple_of(4) + row.len() > cap {
                pieces.push(Self::piece(std::mem::take(&mut bytes), std::mem::take(&mut runs), first, o, device));
                first = o;
            }
            if runs.last().is_none_or(|r| r.ty != ty) {
                bytes.resize(bytes.len().next_multiple_of(4), 0);
                runs.push(Run { ty, first: o - first, rows: 0, offset: bytes.len(), row_bytes: row.len() });
            }
            runs.last_mut().expect("pushed above").rows += 1;
            bytes.extend_from_slice(&row);
        }
        pieces.push(Self::piece(bytes, runs, first, q.rows(), device));
        Ok(Self { pieces, rows: q.rows(), cols: q.cols(), bytes: q.byte_len() })
    }

    fn piece(mut bytes: Vec<u8>, runs: Vec<Run>, first: usize, end: usize, device: &Device) -> Piece {
        bytes.resize(bytes.len().next_multiple_of(4), 0);
        let words = bytes.chunks_exact(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        let table =
            runs.iter().flat_map(|r| [r.first, r.ty.id() as usize, r.offset, r.row_bytes].map(|v| v as u32)).collect();
        Piece { words: words_on(words, device), table: words_on(table, device), runs, first, rows: end - first }
    }

    /// Buffers the matrix takes on the device (one launch each per product).
    pub(crate) fn pieces(&self) -> usize {
        self.pieces.len()
    }

    pub(crate) fn device(&self) -> Device {
        self.pieces[0].words.device()
    }

    /// Bytes of blocks one product reads.
    pub(crate) fn byte_len(&self) -> usize {
        self.bytes
    }

    /// `x W^T (+ bias)` for `x: [b, n, cols]`: `[b, n, rows]`.
    pub(crate) fn matmul(&self, x: Tensor<3>, bias: Option<&Tensor<1>>) -> Tensor<3> {
        self.product(x, Fused { bias, ..Fused::default() })
    }

    /// `x W^T` with what `fused` asks for, in one launch per piece: `[b, n, rows]`, or
    /// `[b, n, rows / 2]` for a SwiGLU (whose gate and up halves must be in one piece).
    pub(crate) fn product(&self, x: Tensor<3>, fused: Fused) -> Tensor<3> {
        let [b, n, k] = x.dims();
        assert_eq!(k, self.cols, "activations of {k} values for a matrix of {} columns", self.cols);
        assert!(
            !fused.glu || (self.pieces.len() == 1 && fused.bias.is_none()),
            "a SwiGLU product needs one piece, no bias"
        );
        let m = b * n;
        let pass = if m > PASS_FEW as usize { PASS_MANY } else { PASS_FEW };
        let width = if fused.glu { self.rows / 2 } else { self.rows };
        let x = contiguous(x);
        let client = x.client.clone();
        let out = empty_device_dtype(client.clone(), x.device.clone(), [b, n, width].into(), x.dtype);
        let arg = |t: Option<CubeTensor>| t.unwrap_or_else(|| x.clone()).into_buffer_arg();
        let norm = fused.norm.map(|(t, _)| contiguous(t.clone()));
        let bias = fused.bias.map(|t| contiguous(t.clone()));
        let residual = fused.residual.map(contiguous);
        let len = |t: &Option<CubeTensor>| t.as_ref().map(|t| t.meta.shape().num_elements());
        // The kernel reads without bound checks (`launch_unchecked`): every index it forms is
        // checked here, from the operands' sizes (its weight reads stay inside the rows `upload`
        // checked against their type).
        assert!(
            len(&norm).is_none_or(|l| l == self.cols),
            "a norm weight of {:?} values for {} columns",
            len(&norm),
            self.cols
        );
        assert!(len(&bias).is_none_or(|l| l == self.rows), "a bias of {:?} values for {} rows", len(&bias), self.rows);
        assert!(
            len(&residual).is_none_or(|l| l == m * width),
            "a residual of {:?} values for {m} x {width}",
            len(&residual)
        );
        let units = WARP * warps_for(self.cols);
        for piece in &self.pieces {
            let rows = if fused.glu { width } else { piece.rows };
            let cx = rows.min(MAX_CUBES_X);
            let count = CubeCount::Static(cx as u32, rows.div_ceil(cx) as u32, m.div_ceil(pass as usize) as u32);
            // SAFETY: every index is in bounds: x is [m, cols] (asserted above with the fused
            // operands), out [m, width] (allocated above), the rows a cube reads are the piece's
            // (`row < piece_rows`, the table's runs cover them, each row its type's bytes for
            // `cols` columns), and the shared arrays are sized by the comptime pass and units.
            unsafe {
                block_matmul_rows::launch_unchecked(
                    &client,
                    count,
                    CubeDim::new_1d(units),
                    words(&piece.words).into_buffer_arg(),
                    words(&piece.table).into_buffer_arg(),
                    x.clone().into_buffer_arg(),
                    arg(norm.clone()),
                    arg(bias.clone()),
                    arg(residual.clone()),
                    out.clone().into_buffer_arg(),
                    piece.runs.len() as u32,
                    rows as u32,
                    piece.first as u32,
                    width as u32,
                    self.cols as u32,
                    m as u32,
                    width as u32,
                    fused.norm.map_or(0.0, |(_, eps)| eps as f32),
                    norm.is_some(),
                    bias.is_some(),
                    fused.glu,
                    residual.is_some(),
                    pass,
                    units,
                );
            }
        }
        Tensor::from_primitive::<Cube>(out)
    }

    /// Rows `ids` decoded to f32: `[ids, cols]` on the matrix's device.
    pub(crate) fn lookup(&self, ids: &[u32]) -> Tensor<2> {
        self.lookup_ids(&words_on(ids.to_vec(), &self.device()))
    }

    /// [`Self::lookup`] of ids already on the device (u32): a captured step's token buffer.
    pub(crate) fn lookup_ids(&self, ids: &Tensor<1, Int>) -> Tensor<2> {
        let index = words(ids);
        let n = ids.dims()[0];
        let client = index.client.clone();
        let out = empty_device_dtype(client.clone(), index.device.clone(), [n, self.cols].into(), DType::F32);
        for piece in &self.pieces {
            // SAFETY: cube i reads ids[i] of the n ids and writes row i of the [n, cols] output;
            // it decodes a row only when the id is one of the piece's rows.
            unsafe {
                block_rows::launch_unchecked(
                    &client,
                    CubeCount::Static(n as u32, 1, 1),
                    CubeDim::new_1d(WARP * warps_for(self.cols)),
                    words(&piece.words).into_buffer_arg(),
                    words(&piece.table).into_buffer_arg(),
                    index.clone().into_buffer_arg(),
                    out.clone().into_buffer_arg(),
                    piece.runs.len() as u32,
                    piece.first as u32,
                    piece.rows as u32,
                    self.cols as u32,
                );
            }
        }
        Tensor::from_primitive::<Cube>(out)
    }

    /// The blocks back on the host, as a matrix the CPU paths take.
    pub(crate) fn to_host(&self) -> Result<QuantMatrix> {
        let mut parts: Vec<QuantPart> = Vec::new();
        for piece in &self.pieces {
            let words = piece.words.clone().into_data().try_to_vec::<u32>().map_err(|e| anyhow::anyhow!("{e:?}"))?;
            let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
            for run in &piece.runs {
                let data = bytes[run.offset..run.offset + run.rows * run.row_bytes].to_vec();
                match parts.last_mut() {
                    Some(last) if last.ty == run.ty => {
                        last.rows += run.rows;
                        last.data.extend_from_slice(&data);
                    }
                    _ => parts.push(QuantPart::rows(run.ty, run.rows, data)),
                }
            }
        }
        QuantMatrix::new(parts, self.cols)
    }
}

/// The type tags of [`blocks`] are ggml's ids.
#[cfg(test)]
mod tests {
    use super::super::blocks;
    use super::*;

    #[test]
    fn the_kernel_tags_are_ggml_ids() {
        for (tag, ty) in [
            (blocks::F16, GgmlType::F16),
            (blocks::Q4_0, GgmlType::Q4_0),
            (blocks::Q5_0, GgmlType::Q5_0),
            (blocks::Q8_0, GgmlType::Q8_0),
            (blocks::Q4_K, GgmlType::Q4K),
            (blocks::Q5_K, GgmlType::Q5K),
            (blocks::Q6_K, GgmlType::Q6K),
            (blocks::BF16, GgmlType::BF16),
        ] {
            assert_eq!(tag, ty.id());
            assert!(on_device(ty));
        }
    }
}
