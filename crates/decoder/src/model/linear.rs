//! Linear maps and where their products run: the weight storage chosen once at load (f32
//! shared with burn on the CPU, GGUF blocks for the native and integer kernels, row blocks on
//! another device, or GGUF blocks on a GPU) and, per call, the kernel of [`crate::kernels`],
//! the integer kernels of [`crate::quant::int`], a device kernel or a gemm.

use super::gpu_blocks::DeviceBlocks;
use crate::fusion::Fused;
use crate::kernels::{F32Rows, WeightRows};
use crate::quant::{QuantMatrix, QuantPart};
use crate::weights::{HostTensor, WeightSource};
use anyhow::{Context, Result, bail};
use burn::tensor::{AllocationProperty, Bytes, DType, Device, Tensor, TensorData};
use std::sync::Arc;

/// Most rows of `x` for which [`Linear`] uses the CPU kernel of [`crate::kernels`]; longer
/// inputs (prompt prefill) are compute-bound and go to burn's gemm.
pub const HOST_KERNEL_MAX_ROWS: usize = 32;

/// Rows per kernel call in row-invariant (ragged, batched) forwards: each call reads every
/// weight once, and the kernel's register tiles keep many rows compute-efficient.
pub(super) const ROW_INVARIANT_CHUNK: usize = 64;

/// An f32 matrix in host memory that a burn tensor on the CPU device shares without copying.
#[derive(Clone)]
pub(super) struct HostMatrix {
    pub(super) bytes: bytes::Bytes,
    pub(super) rows: usize,
    pub(super) cols: usize,
}

/// Owns the f32 buffer behind a [`HostMatrix`] and lends it out as bytes.
pub(super) struct F32Buffer(Vec<f32>);

/// The bytes of f32 values (what a burn tensor sharing the buffer reads).
pub(super) fn f32_bytes(v: &[f32]) -> &[u8] {
    // SAFETY: f32 has no padding and any byte pattern is a valid u8.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
}

impl AsRef<[u8]> for F32Buffer {
    fn as_ref(&self) -> &[u8] {
        f32_bytes(&self.0)
    }
}

/// A decoded f32 copy of a native matrix for one long (prefill) call. Its buffer goes back to a
/// small pool when the burn tensor sharing it is dropped, so the next call of the same size
/// writes into memory that is already mapped instead of faulting in fresh pages (which cost
/// more than decoding does).
pub(super) struct PooledF32(Vec<f32>);

/// Idle decode buffers, reused by exact length (a model's matrices come in a few shapes).
pub(super) static DECODE_POOL: std::sync::Mutex<Vec<Vec<f32>>> = std::sync::Mutex::new(Vec::new());
/// Most bytes of idle buffers the pool keeps (larger buffers are freed, not pooled).
pub(super) const DECODE_POOL_BYTES: usize = 512 << 20;

impl PooledF32 {
    /// A buffer of `len` values whose contents the caller overwrites entirely.
    pub(super) fn take(len: usize) -> Self {
        let mut pool = DECODE_POOL.lock().unwrap_or_else(|e| e.into_inner());
        match pool.iter().position(|v| v.len() == len) {
            Some(i) => Self(pool.swap_remove(i)),
            None => Self(vec![0f32; len]),
        }
    }
}

impl Drop for PooledF32 {
    fn drop(&mut self) {
        let buf = std::mem::take(&mut self.0);
        let mut pool = DECODE_POOL.lock().unwrap_or_else(|e| e.into_inner());
        let held: usize = pool.iter().map(|v| v.len() * 4).sum();
        if held + buf.len() * 4 <= DECODE_POOL_BYTES {
            pool.push(buf);
        }
    }
}

impl AsRef<[u8]> for PooledF32 {
    fn as_ref(&self) -> &[u8] {
        f32_bytes(&self.0)
    }
}

/// The f32 matrix of `q` as a burn tensor on `device` (the CPU), decoded into a pooled buffer
/// that the tensor shares without copying.
pub(super) fn decoded_tensor(q: &QuantMatrix, device: &Device) -> Tensor<2> {
    let mut buf = PooledF32::take(q.rows() * q.cols());
    q.decode_into(&mut buf.0);
    let shared = Bytes::from_shared(bytes::Bytes::from_owner(buf), AllocationProperty::Native);
    Tensor::from_data(TensorData::from_bytes(shared, [q.rows(), q.cols()], DType::F32), device)
}

impl HostMatrix {
    pub(super) fn as_f32(&self) -> &[f32] {
        // SAFETY: the bytes come from an F32Buffer (a Vec<f32>), so they are 4-byte aligned
        // and a whole number of f32 values.
        unsafe { std::slice::from_raw_parts(self.bytes.as_ptr().cast::<f32>(), self.rows * self.cols) }
    }

    /// The matrix as the kernel's weight rows.
    pub(super) fn weight_rows(&self) -> F32Rows<'_> {
        F32Rows { data: self.as_f32(), n: self.rows, k: self.cols }
    }
}

/// How a linear map's weights are stored and multiplied; chosen once, at load.
#[derive(Clone)]
pub(super) enum Projection {
    /// f32 in host memory shared with a burn tensor on the CPU device: the few-row kernel of
    /// [`crate::kernels`] for up to [`HOST_KERNEL_MAX_ROWS`] rows, burn's gemm for longer inputs
    /// (prompt prefill), which burn-flex runs at full speed through a transposed view.
    Host { weight: Tensor<2>, host: HostMatrix },
    /// GGUF blocks on the CPU ([`crate::quant`]): the kernel decodes each weight row once per
    /// call; inputs longer than [`HOST_KERNEL_MAX_ROWS`] (outside row-invariant forwards) get
    /// the matrix decoded for the call and burn's gemm, exactly as the f32 path.
    Native(Arc<QuantMatrix>),
    /// GGUF blocks on the CPU multiplied by the integer kernels ([`crate::quant::int`]): every
    /// activation row quantized to 8 bits, integer dot products, any number of rows (each
    /// row's result independent of the others).
    Int(Arc<QuantMatrix>),
    /// Any other device: burn's matmul, over row blocks of the matrix that each fit in one
    /// device buffer (a GPU caps a storage buffer: 128 MiB on Mesa's lavapipe, less than the
    /// 0.5B model's 544 MB vocabulary matrix). Usually a single block. f32 weights (`--weights
    /// f32`, HF safetensors models).
    Device(Vec<Tensor<2>>),
    /// GGUF blocks on a GPU, decoded inside the product's kernel ([`DeviceBlocks`]), the bias
    /// added in the same kernel: any number of rows, each row's result independent of the
    /// others.
    Blocks(Arc<DeviceBlocks>),
}

impl Projection {
    /// Whether the weights live in host memory (the CPU paths, with a host copy of the bias).
    pub(super) fn on_host(&self) -> bool {
        matches!(self, Self::Host { .. } | Self::Native(_) | Self::Int(_))
    }
}

/// A linear map stored in HF layout `[out, in]` and applied as `x W^T (+ bias)`.
#[derive(Clone)]
pub(super) struct Linear {
    pub(super) proj: Projection,
    pub(super) bias: Option<Tensor<1>>,
    /// Host copy of the bias for the kernel paths (added on the host: saves a device op).
    pub(super) host_bias: Option<Vec<f32>>,
}

impl Linear {
    /// Like [`Linear::forward`], but on the CPU every row goes through the kernel of
    /// [`crate::kernels`] (in chunks of at most [`ROW_INVARIANT_CHUNK`] rows), whose per-row
    /// result does not depend on the other rows: a sequence's numbers are the same whatever it
    /// is batched with. (The native path always works this way.)
    pub(super) fn forward_row_invariant(&self, x: Tensor<3>) -> Tensor<3> {
        match &self.proj {
            Projection::Host { host, .. } => self.kernel_chunks(x, &host.weight_rows()),
            Projection::Native(q) => self.kernel_chunks(x, q.as_ref()),
            Projection::Int(q) => self.kernel_int(x, q),
            Projection::Device(_) | Projection::Blocks(_) => self.forward(x),
        }
    }

    /// `residual + x W^T (+ bias)`. GGUF blocks on a GPU add the residual inside the product.
    pub(super) fn forward_plus(&self, x: Tensor<3>, residual: Tensor<3>) -> Tensor<3> {
        if let Projection::Blocks(q) = &self.proj {
            return q.product(x, Fused { bias: self.bias.as_ref(), residual: Some(residual), ..Fused::default() });
        }
        residual + self.forward(x)
    }

    pub(super) fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        let [b, n, k] = x.dims();
        let few = b * n <= HOST_KERNEL_MAX_ROWS;
        let decoded;
        let weight = match &self.proj {
            Projection::Host { host, .. } if few => return self.kernel(x, &host.weight_rows()),
            Projection::Native(q) if few => return self.kernel(x, q.as_ref()),
            Projection::Int(q) => return self.kernel_int(x, q),
            Projection::Blocks(q) => return q.matmul(x, self.bias.as_ref()),
            Projection::Native(q) => {
                // Long inputs (prefill) are compute-bound: decode the matrix for this call and
                // run the gemm the f32 path runs on the same values (bit-identical to it).
                decoded = decoded_tensor(q, &x.device());
                &decoded
            }
            Projection::Device(blocks) if blocks.len() > 1 => {
                let rows = x.reshape([b * n, k]);
                let parts: Vec<Tensor<2>> = blocks.iter().map(|w| rows.clone().matmul(w.clone().transpose())).collect();
                let y = Tensor::cat(parts, 1);
                let out = y.dims()[1];
                let y = match &self.bias {
                    Some(bias) => y + bias.clone().unsqueeze::<2>(),
                    None => y,
                };
                return y.reshape([b, n, out]);
            }
            Projection::Device(blocks) => &blocks[0],
            Projection::Host { weight, .. } => weight,
        };
        let out = weight.dims()[0];
        let y = x.reshape([b * n, k]).matmul(weight.clone().transpose());
        let y = match &self.bias {
            Some(bias) => y + bias.clone().unsqueeze::<2>(),
            None => y,
        };
        y.reshape([b, n, out])
    }

    /// The kernel over all rows of `x`, [`ROW_INVARIANT_CHUNK`] rows per call.
    pub(super) fn kernel_chunks<W: WeightRows>(&self, x: Tensor<3>, w: &W) -> Tensor<3> {
        let [b, n, k] = x.dims();
        let m = b * n;
        if m <= ROW_INVARIANT_CHUNK {
            return self.kernel(x, w);
        }
        let rows = x.reshape([m, k]);
        let chunks: Vec<Tensor<3>> = (0..m)
            .step_by(ROW_INVARIANT_CHUNK)
            .map(|start| {
                let end = (start + ROW_INVARIANT_CHUNK).min(m);
                self.kernel(rows.clone().slice([start..end, 0..k]).reshape([1, end - start, k]), w)
            })
            .collect();
        Tensor::cat(chunks, 1).reshape([b, n, w.rows()])
    }

    /// Bytes of weights one application reads: the blocks of a native matrix, else f32 values
    /// (the bias included).
    pub(super) fn weight_bytes(&self) -> usize {
        let matrix = match &self.proj {
            Projection::Native(q) | Projection::Int(q) => q.byte_len(),
            Projection::Host { host, .. } => host.rows * host.cols * 4,
            Projection::Device(blocks) => blocks.iter().map(|w| w.dims().iter().product::<usize>() * 4).sum(),
            Projection::Blocks(q) => q.byte_len(),
        };
        matrix + self.bias.as_ref().map_or(0, |b| b.dims()[0] * 4)
    }

    /// `x W^T + bias` through the CPU kernel, on host copies of the activations.
    pub(super) fn kernel<W: WeightRows>(&self, x: Tensor<3>, w: &W) -> Tensor<3> {
        self.host_product(x, w.rows(), |xs, m, y| crate::kernels::matmul_rows(xs, m, w, y))
    }

    /// `x W^T + bias` through the integer kernels.
    pub(super) fn kernel_int(&self, x: Tensor<3>, q: &QuantMatrix) -> Tensor<3> {
        self.host_product(x, q.rows(), |xs, m, y| q.matmul_int(xs, m, y))
    }

    /// `product(x, m, y)` (`y = x W^T`, `out` values per row) on host copies, plus the bias.
    pub(super) fn host_product(
        &self,
        x: Tensor<3>,
        out: usize,
        product: impl FnOnce(&[f32], usize, &mut [f32]),
    ) -> Tensor<3> {
        let [b, n, _] = x.dims();
        let device = x.device();
        let xs = x.into_data().try_to_vec::<f32>().expect("f32 activations");
        let y = self.host_rows(&xs, b * n, out, product);
        Tensor::from_data(TensorData::new(y, [b, n, out]), &device)
    }

    /// `x W^T + bias` of `m` host rows through the integer kernels, for an `Int` map (`None`
    /// for any other): a caller can chain host products with no tensor between them.
    pub(super) fn int_rows(&self, xs: &[f32], m: usize) -> Option<Vec<f32>> {
        let Projection::Int(q) = &self.proj else { return None };
        Some(self.host_rows(xs, m, q.rows(), |xs, m, y| q.matmul_int(xs, m, y)))
    }

    /// Whether this map runs on the integer kernels ([`Linear::int_rows`] applies).
    pub(super) fn is_int(&self) -> bool {
        matches!(self.proj, Projection::Int(_))
    }

    /// `product` of `m` host rows (`out` values each), plus the bias.
    fn host_rows(&self, xs: &[f32], m: usize, out: usize, product: impl FnOnce(&[f32], usize, &mut [f32])) -> Vec<f32> {
        let mut y = vec![0f32; m * out];
        product(xs, m, &mut y);
        if let Some(bias) = &self.host_bias {
            for row in y.chunks_exact_mut(out) {
                row.iter_mut().zip(bias).for_each(|(v, b)| *v += b);
            }
        }
        y
    }
}

/// An f32 matrix on a non-CPU device as row blocks that each fit in one of its buffers.
pub(super) fn device_blocks(data: Vec<f32>, [rows, cols]: [usize; 2], device: &Device) -> Vec<Tensor<2>> {
    let max_rows = crate::device::max_buffer_bytes(device).map_or(rows, |bytes| (bytes / (cols * 4)).max(1));
    if rows <= max_rows {
        return vec![Tensor::from_data(TensorData::new(data, [rows, cols]), device)];
    }
    data.chunks(max_rows * cols)
        .map(|c| Tensor::from_data(TensorData::new(c.to_vec(), [c.len() / cols, cols]), device))
        .collect()
}

/// Moves an f32 weight matrix to the device. On the CPU device the burn tensor shares the
/// host buffer, which the few-row kernel also reads; elsewhere only the device copy is kept.
pub(super) fn upload_matrix(t: HostTensor, name: &str, shape: [usize; 2], device: &Device) -> Result<Projection> {
    check_shape(&t, name, &shape)?;
    if *device != Device::flex() {
        return Ok(Projection::Device(device_blocks(t.data, shape, device)));
    }
    let host = HostMatrix { bytes: bytes::Bytes::from_owner(F32Buffer(t.data)), rows: shape[0], cols: shape[1] };
    let shared = Bytes::from_shared(host.bytes.clone(), AllocationProperty::Native);
    let weight = Tensor::from_data(TensorData::from_bytes(shared, shape, DType::F32), device);
    Ok(Projection::Host { weight, host })
}

/// The row-stacked matrices `names` (each `[rows, cols]`) in their stored block formats, or
/// `None` when one of them is not stored in a type with a native kernel (F32 tensors, or a
/// type without one, which is logged): then the whole map takes the f32 path. With `half`
/// (weights for a GPU), 16-bit float tensors of safetensors models count as F16/BF16 blocks.
pub(super) fn native_matrix(
    src: &dyn WeightSource,
    names: &[(&str, usize)],
    cols: usize,
    half: bool,
) -> Result<Option<QuantMatrix>> {
    let mut parts: Vec<QuantPart> = Vec::with_capacity(names.len());
    for &(name, rows) in names {
        let full = format!("{name}.weight");
        let load = || match src.load_blocks(&full)? {
            None if half => src.load_half(&full),
            found => Ok(found),
        };
        match load().with_context(|| format!("loading weight '{full}'"))? {
            Some((shape, part)) => {
                if shape != [rows, cols] {
                    bail!("weight '{full}' has shape {shape:?}, the config implies {:?}", [rows, cols]);
                }
                parts.push(part);
            }
            None => {
                if let Some(ty) = src.stored_type(&full).filter(|t| *t != crate::gguf::GgmlType::F32) {
                    eprintln!("specx: weight '{full}' is {ty:?}, which has no native kernel: using f32 weights for it");
                }
                return Ok(None);
            }
        }
    }
    QuantMatrix::new(parts, cols).map(Some)
}

/// Checks a host tensor's shape.
pub(super) fn check_shape(t: &HostTensor, name: &str, shape: &[usize]) -> Result<()> {
    if t.shape != shape {
        bail!("weight '{name}' has shape {:?}, the config implies {:?}", t.shape, shape);
    }
    Ok(())
}
