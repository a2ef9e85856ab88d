//! One Llama-family decoder (RMSNorm, RoPE, grouped-query attention, SwiGLU, optional q/k/v
//! bias, tied or untied head) written against burn's backend-agnostic tensor API. It covers
//! Qwen2/2.5 and Llama/SmolLM. The model holds no state: the caller passes a [`KvCache`].

use crate::cache::{KvCache, LayerSlot};
use crate::config::ModelConfig;
use crate::host_attention::{self, AttentionShape};
use crate::layer_groups::LayerGroups;
use crate::kernels::{F32Rows, WeightRows};
use crate::quant::{QuantMatrix, QuantPart};
use crate::weights::{HostTensor, WeightSource};
use anyhow::{bail, ensure, Context, Result};
use std::sync::Arc;
use burn::tensor::activation::{silu, softmax};
use burn::tensor::{AllocationProperty, Bytes, DType, Device, Int, Tensor, TensorData};

mod placement;

/// What one forward pass returns, for all `n` new positions of every sequence.
pub struct ForwardOutput {
    /// `[batch, n, vocab]` unnormalised scores of the next token.
    pub logits: Tensor<3>,
    /// `[batch, n, hidden]` final hidden states after the last RMSNorm (the acceptance head
    /// reads these).
    pub hidden: Tensor<3>,
}

/// The last `k` positions of a `[1, n, d]` tensor as host rows.
fn tail_rows(t: &Tensor<3>, k: usize) -> Vec<Vec<f32>> {
    let [b, n, d] = t.dims();
    assert!(b == 1 && k <= n, "tail of {k} rows from a [{b}, {n}, {d}] tensor");
    host_rows(t.clone().slice([0..1, n - k..n, 0..d]).reshape([k, d]))
}

/// The rows of a `[rows, d]` tensor as host vectors.
fn host_rows(t: Tensor<2>) -> Vec<Vec<f32>> {
    let d = t.dims()[1];
    let flat = t.into_data().try_to_vec::<f32>().expect("f32 model outputs");
    flat.chunks_exact(d).map(<[f32]>::to_vec).collect()
}

impl ForwardOutput {
    /// Logits of the last `k` positions (single sequence), one host vector per position.
    pub fn logits_tail(&self, k: usize) -> Vec<Vec<f32>> {
        tail_rows(&self.logits, k)
    }

    /// Hidden states of the last `k` positions (single sequence), one host vector each.
    pub fn hidden_tail(&self, k: usize) -> Vec<Vec<f32>> {
        tail_rows(&self.hidden, k)
    }
}

/// Most rows of `x` for which [`Linear`] uses the CPU kernel of [`crate::kernels`]; longer
/// inputs (prompt prefill) are compute-bound and go to burn's gemm.
pub const HOST_KERNEL_MAX_ROWS: usize = 32;

/// Rows per kernel call in row-invariant (ragged, batched) forwards: each call reads every
/// weight once, and the kernel's register tiles keep many rows compute-efficient.
const ROW_INVARIANT_CHUNK: usize = 64;

/// An f32 matrix in host memory that a burn tensor on the CPU device shares without copying.
#[derive(Clone)]
struct HostMatrix {
    bytes: bytes::Bytes,
    rows: usize,
    cols: usize,
}

/// Owns the f32 buffer behind a [`HostMatrix`] and lends it out as bytes.
struct F32Buffer(Vec<f32>);

/// The bytes of f32 values (what a burn tensor sharing the buffer reads).
fn f32_bytes(v: &[f32]) -> &[u8] {
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
struct PooledF32(Vec<f32>);

/// Idle decode buffers, reused by exact length (a model's matrices come in a few shapes).
static DECODE_POOL: std::sync::Mutex<Vec<Vec<f32>>> = std::sync::Mutex::new(Vec::new());
/// Most bytes of idle buffers the pool keeps (larger buffers are freed, not pooled).
const DECODE_POOL_BYTES: usize = 512 << 20;

impl PooledF32 {
    /// A buffer of `len` values whose contents the caller overwrites entirely.
    fn take(len: usize) -> Self {
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
fn decoded_tensor(q: &QuantMatrix, device: &Device) -> Tensor<2> {
    let mut buf = PooledF32::take(q.rows() * q.cols());
    q.decode_into(&mut buf.0);
    let shared = Bytes::from_shared(bytes::Bytes::from_owner(buf), AllocationProperty::Native);
    Tensor::from_data(TensorData::from_bytes(shared, [q.rows(), q.cols()], DType::F32), device)
}

impl HostMatrix {
    fn as_f32(&self) -> &[f32] {
        // SAFETY: the bytes come from an F32Buffer (a Vec<f32>), so they are 4-byte aligned
        // and a whole number of f32 values.
        unsafe { std::slice::from_raw_parts(self.bytes.as_ptr().cast::<f32>(), self.rows * self.cols) }
    }

    /// The matrix as the kernel's weight rows.
    fn weight_rows(&self) -> F32Rows<'_> {
        F32Rows { data: self.as_f32(), n: self.rows, k: self.cols }
    }
}

/// How a linear map's weights are stored and multiplied; chosen once, at load.
#[derive(Clone)]
enum Projection {
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
    /// 0.5B model's 544 MB vocabulary matrix). Usually a single block.
    Device(Vec<Tensor<2>>),
}

/// A linear map stored in HF layout `[out, in]` and applied as `x W^T (+ bias)`.
#[derive(Clone)]
struct Linear {
    proj: Projection,
    bias: Option<Tensor<1>>,
    /// Host copy of the bias for the kernel paths (added on the host: saves a device op).
    host_bias: Option<Vec<f32>>,
}

impl Linear {
    /// Like [`Linear::forward`], but on the CPU every row goes through the kernel of
    /// [`crate::kernels`] (in chunks of at most [`ROW_INVARIANT_CHUNK`] rows), whose per-row
    /// result does not depend on the other rows: a sequence's numbers are the same whatever it
    /// is batched with. (The native path always works this way.)
    fn forward_row_invariant(&self, x: Tensor<3>) -> Tensor<3> {
        match &self.proj {
            Projection::Host { host, .. } => self.kernel_chunks(x, &host.weight_rows()),
            Projection::Native(q) => self.kernel_chunks(x, q.as_ref()),
            Projection::Int(q) => self.kernel_int(x, q),
            Projection::Device(_) => self.forward(x),
        }
    }

    fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        let [b, n, k] = x.dims();
        let few = b * n <= HOST_KERNEL_MAX_ROWS;
        let decoded;
        let weight = match &self.proj {
            Projection::Host { host, .. } if few => return self.kernel(x, &host.weight_rows()),
            Projection::Native(q) if few => return self.kernel(x, q.as_ref()),
            Projection::Int(q) => return self.kernel_int(x, q),
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
    fn kernel_chunks<W: WeightRows>(&self, x: Tensor<3>, w: &W) -> Tensor<3> {
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
    fn weight_bytes(&self) -> usize {
        let matrix = match &self.proj {
            Projection::Native(q) | Projection::Int(q) => q.byte_len(),
            Projection::Host { host, .. } => host.rows * host.cols * 4,
            Projection::Device(blocks) => blocks.iter().map(|w| w.dims().iter().product::<usize>() * 4).sum(),
        };
        matrix + self.bias.as_ref().map_or(0, |b| b.dims()[0] * 4)
    }

    /// `x W^T + bias` through the CPU kernel, on host copies of the activations.
    fn kernel<W: WeightRows>(&self, x: Tensor<3>, w: &W) -> Tensor<3> {
        self.host_product(x, w.rows(), |xs, m, y| crate::kernels::matmul_rows(xs, m, w, y))
    }

    /// `x W^T + bias` through the integer kernels.
    fn kernel_int(&self, x: Tensor<3>, q: &QuantMatrix) -> Tensor<3> {
        self.host_product(x, q.rows(), |xs, m, y| q.matmul_int(xs, m, y))
    }

    /// `product(x, m, y)` (`y = x W^T`, `out` values per row) on host copies, plus the bias.
    fn host_product(&self, x: Tensor<3>, out: usize, product: impl FnOnce(&[f32], usize, &mut [f32])) -> Tensor<3> {
        let [b, n, _] = x.dims();
        let m = b * n;
        let device = x.device();
        let xs = x.into_data().try_to_vec::<f32>().expect("f32 activations");
        let mut y = vec![0f32; m * out];
        product(&xs, m, &mut y);
        if let Some(bias) = &self.host_bias {
            for row in y.chunks_exact_mut(out) {
                row.iter_mut().zip(bias).for_each(|(v, b)| *v += b);
            }
        }
        Tensor::from_data(TensorData::new(y, [b, n, out]), &device)
    }
}

struct RmsNorm {
    weight: Tensor<1>,
    eps: f64,
}

impl RmsNorm {
    fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        let inv_rms = x.clone().square().mean_dim(2).add_scalar(self.eps).sqrt().recip();
        x * inv_rms * self.weight.clone().unsqueeze::<3>()
    }
}

/// Self-attention. q, k and v are one fused projection (rows q, then k, then v): one pass over
/// the input and one kernel call instead of three.
struct Attention {
    qkv: Linear,
    o: Linear,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
}

/// SwiGLU MLP with gate and up fused into one projection (rows gate, then up).
struct Mlp {
    gate_up: Linear,
    down: Linear,
    intermediate: usize,
}

struct Block {
    attn_norm: RmsNorm,
    attn: Attention,
    /// Index into [`Transformer::devices`] of the device that holds `attn_norm`, `attn` and
    /// this layer's cache (0, the model's device, unless [`Transformer::place_attention`]
    /// moved them).
    device: usize,
    mlp_norm: RmsNorm,
    mlp: Mlp,
}

/// Wall times of one forward's sublayers ([`Transformer::forward_timed`]).
#[derive(Clone, Debug, Default)]
pub struct LayerTimes {
    /// Per layer: attention (norm, projections, cache write, attention) and MLP (norm, MLP).
    pub attn: Vec<std::time::Duration>,
    pub mlp: Vec<std::time::Duration>,
    pub lm_head: std::time::Duration,
}

/// One layer's attention on the last new row: the hidden state it read (before its norm),
/// its query, key and value (after RoPE; all heads, flattened) and its output (after the
/// output projection). Recorded by [`Transformer::probe_fuzzy`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AttentionProbe {
    pub input: Vec<f32>,
    pub q: Vec<f32>,
    pub k: Vec<f32>,
    pub v: Vec<f32>,
    pub out: Vec<f32>,
}

/// A layer's attention as a fuzzy forward computed it and as the precise model would have.
#[derive(Clone, Debug, PartialEq)]
pub struct ProbedLayer {
    pub fuzzy: AttentionProbe,
    pub precise: AttentionProbe,
    /// Whether the layer leads its group (reads the running state: both records identical).
    pub leading: bool,
}

/// How a model's GGUF weight matrices are kept in memory on the CPU.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WeightMode {
    /// Dequantized to f32 on load: the reference path, and the only one for HF safetensors
    /// models and non-CPU devices.
    F32,
    /// In their GGUF block formats, decoded inside the few-row kernel ([`crate::quant`]):
    /// 4-8x fewer bytes per token, results bit-identical to the f32 path (the same values go
    /// through the same kernel, or for long prefills through the same gemm after decoding the
    /// matrix for the call). Matrices whose type has no native kernel (and F32 tensors) take the
    /// f32 path. Applies to GGUF files on the CPU device.
    #[default]
    Native,
    /// In their GGUF block formats, multiplied by integer dot products with each activation
    /// row quantized to 8 bits (Q8_K for K-quants, Q8_0 for the 32-wide formats), as llama.cpp
    /// does ([`crate::quant::int`]): not bit-identical to `f32`/`native` (the activations are
    /// rounded; README gives perplexity and KL against `native`), but row-invariant. Matrices
    /// whose type has no integer kernel take the `native` path (one log line each).
    Q8,
}

impl std::str::FromStr for WeightMode {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "f32" => Ok(Self::F32),
            "native" => Ok(Self::Native),
            "q8" => Ok(Self::Q8),
            other => bail!("unknown weight mode '{other}' (f32, native or q8)"),
        }
    }
}

impl std::fmt::Display for WeightMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::F32 => "f32",
            Self::Native => "native",
            Self::Q8 => "q8",
        })
    }
}

/// The token embedding table.
enum Embedding {
    Dense(Tensor<2>),
    /// A table in row blocks on a device ([`Projection::Device`]).
    Blocks(Vec<Tensor<2>>),
    /// GGUF blocks; looked-up rows are decoded to the same f32 values as the dense table.
    Native(Arc<QuantMatrix>),
}

/// The decoder.
pub struct Transformer {
    cfg: ModelConfig,
    embed: Embedding,
    blocks: Vec<Block>,
    norm: RmsNorm,
    /// Shares `embed`'s memory when the head is tied.
    lm_head: Linear,
    /// Every layer its own group: the strategy of the exact forward.
    sequential: LayerGroups,
    /// The model's device (first: embeddings, MLPs, norms, head) and the other devices that
    /// hold attention layers, if any ([`Transformer::place_attention`]).
    devices: Vec<Device>,
}

/// RoPE tables and the causal mask of one forward, on one device.
type PositionTables = ((Tensor<2>, Tensor<2>), Option<Tensor<2>>);

/// cos and sin of RoPE angles for positions `start..start+n`, `[n, head_dim]` each, in the
/// rotate-half layout (frequency i at columns i and i + head_dim/2). Computed in f64.
fn rope_tables(start: usize, n: usize, head_dim: usize, theta: f64, device: &Device) -> (Tensor<2>, Tensor<2>) {
    let half = head_dim / 2;
    let mut cos = Vec::with_capacity(n * head_dim);
    let mut sin = Vec::with_capacity(n * head_dim);
    for p in start..start + n {
        for j in 0..head_dim {
            let inv_freq = theta.powf(-2.0 * (j % half) as f64 / head_dim as f64);
            let angle = p as f64 * inv_freq;
            cos.push(angle.cos() as f32);
            sin.push(angle.sin() as f32);
        }
    }
    (
        Tensor::from_data(TensorData::new(cos, [n, head_dim]), device),
        Tensor::from_data(TensorData::new(sin, [n, head_dim]), device),
    )
}

/// Applies RoPE to `x: [batch, heads, n, head_dim]`.
fn apply_rope(x: Tensor<4>, cos: &Tensor<2>, sin: &Tensor<2>) -> Tensor<4> {
    let [b, h, n, d] = x.dims();
    let x1 = x.clone().slice([0..b, 0..h, 0..n, 0..d / 2]);
    let x2 = x.clone().slice([0..b, 0..h, 0..n, d / 2..d]);
    let rotated = Tensor::cat(vec![x2.neg(), x1], 3);
    x * cos.clone().unsqueeze::<4>() + rotated * sin.clone().unsqueeze::<4>()
}

/// Additive causal mask for `n` new queries after `past` cached positions, laid out for the
/// grouped query rows `(group, query)`: `[groups * n, past + n]`.
fn causal_mask(past: usize, n: usize, groups: usize, device: &Device) -> Tensor<2> {
    let total = past + n;
    let mut m = vec![0f32; groups * n * total];
    for g in 0..groups {
        for i in 0..n {
            let row = &mut m[(g * n + i) * total..(g * n + i + 1) * total];
            row[past + i + 1..].fill(f32::NEG_INFINITY);
        }
    }
    Tensor::from_data(TensorData::new(m, [groups * n, total]), device)
}

impl Attention {
    /// The attention of `x` (the normed hidden state); `probe`, when given, receives its q, k,
    /// v and output on the last row.
    fn forward(&self, x: Tensor<3>, slot: &mut LayerSlot, rope: &(Tensor<2>, Tensor<2>), mask: Option<&Tensor<2>>, mut probe: Option<&mut AttentionProbe>) -> Tensor<3> {
        let out = self.attend(self.qkv.forward(x), slot, rope, mask, probe.as_deref_mut());
        let out = self.o.forward(out);
        if let Some(p) = probe {
            p.out = last_row(out.clone());
        }
        out
    }

    /// Attention of fused `qkv` rows `[b, n, q + 2 kv]` over a layer's cache `slot` (which
    /// receives the new keys and values); returns `[b, n, heads * head_dim]` before the output
    /// projection.
    fn attend(&self, qkv: Tensor<3>, slot: &mut LayerSlot, rope: &(Tensor<2>, Tensor<2>), mask: Option<&Tensor<2>>, probe: Option<&mut AttentionProbe>) -> Tensor<3> {
        let [b, n, _] = qkv.dims();
        let qkv_device = qkv.device();
        let (h, kvh, d) = (self.heads, self.kv_heads, self.head_dim);
        let groups = h / kvh;
        let (qd, kvd) = (h * d, kvh * d);
        let q = qkv.clone().slice([0..b, 0..n, 0..qd]).reshape([b, n, h, d]).swap_dims(1, 2);
        let k = qkv.clone().slice([0..b, 0..n, qd..qd + kvd]).reshape([b, n, kvh, d]).swap_dims(1, 2);
        let v = qkv.slice([0..b, 0..n, qd + kvd..qd + 2 * kvd]).reshape([b, n, kvh, d]).swap_dims(1, 2);
        let q = apply_rope(q, &rope.0, &rope.1);
        let k = apply_rope(k, &rope.0, &rope.1);
        if let Some(p) = probe {
            let last = |t: &Tensor<4>| last_row(t.clone().swap_dims(1, 2).reshape([b, n, t.dims()[1] * d]));
            (p.q, p.k, p.v) = (last(&q), last(&k), last(&v));
        }
        let (keys, values) = slot.write(k, v);
        if qkv_device == Device::flex() {
            // On the CPU: each row's attention in a fixed order of its own (row invariance).
            let host = |t: Tensor<4>| t.into_data().try_to_vec::<f32>().expect("f32 attention inputs");
            let shape = AttentionShape { batch: b, heads: h, kv_heads: kvh, rows: n, keys: keys.dims()[2], head_dim: d };
            let out = host_attention::attend(&host(q), &host(keys), &host(values), shape, mask.is_some());
            return Tensor::from_data(TensorData::new(out, [b, n, h * d]), &qkv_device);
        }
        // Query heads sharing a kv head become extra rows: no copy of K/V per group.
        let q = q.reshape([b, kvh, groups * n, d]);
        let mut scores = q.matmul(keys.swap_dims(2, 3)).mul_scalar(1.0 / (d as f64).sqrt());
        if let Some(mask) = mask {
            scores = scores + mask.clone().unsqueeze::<4>();
        }
        let out = softmax(scores, 3).matmul(values); // [b, kvh, groups*n, d]
        out.reshape([b, h, n, d]).swap_dims(1, 2).reshape([b, n, h * d])
    }
}

impl Mlp {
    fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        self.forward_with(x, Linear::forward)
    }

    /// The MLP with `project` applying each linear map.
    fn forward_with(&self, x: Tensor<3>, project: fn(&Linear, Tensor<3>) -> Tensor<3>) -> Tensor<3> {
        let [b, n, _] = x.dims();
        let i = self.intermediate;
        let gu = project(&self.gate_up, x);
        let gate = gu.clone().slice([0..b, 0..n, 0..i]);
        let up = gu.slice([0..b, 0..n, i..2 * i]);
        project(&self.down, silu(gate) * up)
    }
}

/// The last row of the first sequence of `[b, n, w]`, on the host.
fn last_row(t: Tensor<3>) -> Vec<f32> {
    let [_, n, w] = t.dims();
    t.slice([0..1, n - 1..n, 0..w]).into_data().try_into_vec::<f32>().expect("f32 activations")
}

/// Checks a host tensor's shape.
fn check_shape(t: &HostTensor, name: &str, shape: &[usize]) -> Result<()> {
    if t.shape != shape {
        bail!("weight '{name}' has shape {:?}, the config implies {:?}", t.shape, shape);
    }
    Ok(())
}

/// Moves a small host tensor (norm weights, biases) to the device.
fn upload<const D: usize>(t: HostTensor, name: &str, shape: [usize; D], device: &Device) -> Result<Tensor<D>> {
    check_shape(&t, name, &shape)?;
    Ok(Tensor::from_data(TensorData::new(t.data, shape), device))
}

/// An f32 matrix on a non-CPU device as row blocks that each fit in one of its buffers.
fn device_blocks(data: Vec<f32>, [rows, cols]: [usize; 2], device: &Device) -> Vec<Tensor<2>> {
    let max_rows = crate::device::max_buffer_bytes(device).map_or(rows, |bytes| (bytes / (cols * 4)).max(1));
    if rows <= max_rows {
        return vec![Tensor::from_data(TensorData::new(data, [rows, cols]), device)];
    }
    data.chunks(max_rows * cols).map(|c| Tensor::from_data(TensorData::new(c.to_vec(), [c.len() / cols, cols]), device)).collect()
}

/// Moves an f32 weight matrix to the device. On the CPU device the burn tensor shares the
/// host buffer, which the few-row kernel also reads; elsewhere only the device copy is kept.
fn upload_matrix(t: HostTensor, name: &str, shape: [usize; 2], device: &Device) -> Result<Projection> {
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
/// type without one, which is logged): then the whole map takes the f32 path.
fn native_matrix(src: &dyn WeightSource, names: &[(&str, usize)], cols: usize) -> Result<Option<QuantMatrix>> {
    let mut parts: Vec<QuantPart> = Vec::with_capacity(names.len());
    for &(name, rows) in names {
        let full = format!("{name}.weight");
        match src.load_blocks(&full).with_context(|| format!("loading weight '{full}'"))? {
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

impl Transformer {
    /// Builds the model from HF-named weights, one tensor at a time. `mode` chooses how GGUF
    /// matrices are kept on the CPU device (ignored elsewhere and for sources without blocks).
    pub fn load(cfg: ModelConfig, src: &dyn WeightSource, device: &Device, mode: WeightMode) -> Result<Self> {
        cfg.validate()?;
        let native = mode != WeightMode::F32 && *device == Device::flex();
        let int = mode == WeightMode::Q8 && native;
        let (hd, inter) = (cfg.hidden_size, cfg.intermediate_size);
        let (qd, kvd) = (cfg.num_attention_heads * cfg.head_dim, cfg.num_key_value_heads * cfg.head_dim);
        let get = |name: &str| src.load(name).with_context(|| format!("loading weight '{name}'"));
        // The f32 projection of the row-wise concatenation of the named matrices.
        let dense = |names: &[(&str, usize)], inp: usize| -> Result<Projection> {
            let out: usize = names.iter().map(|(_, rows)| rows).sum();
            let mut w = HostTensor { shape: vec![out, inp], data: Vec::new() };
            for &(name, rows) in names {
                let part = get(&format!("{name}.weight"))?;
                check_shape(&part, name, &[rows, inp])?;
                if names.len() == 1 {
                    w.data = part.data; // no copy of a lone (possibly vocabulary-sized) matrix
                } else {
                    w.data.extend_from_slice(&part.data);
                }
            }
            let label = names.iter().map(|(n, _)| *n).collect::<Vec<_>>().join("+");
            upload_matrix(w, &label, [out, inp], device)
        };
        // Native blocks where possible, else f32. A q8 fallback is logged once per set of types.
        let reported = std::cell::RefCell::new(Vec::new());
        let projection = |names: &[(&str, usize)], inp: usize| -> Result<Projection> {
            match native.then(|| native_matrix(src, names, inp)).transpose()?.flatten() {
                Some(q) if int && q.has_int_kernel() => Ok(Projection::Int(Arc::new(q))),
                Some(q) => {
                    let types: Vec<_> = q.parts().iter().map(|p| p.ty).collect();
                    if int && !reported.borrow().contains(&types) {
                        eprintln!("specx: '{}' is stored as {types:?}, which has no integer kernel: using native weights for it and every other such matrix", names[0].0);
                        reported.borrow_mut().push(types);
                    }
                    Ok(Projection::Native(Arc::new(q)))
                }
                None => dense(names, inp),
            }
        };
        let linear = |names: &[(&str, usize)], inp: usize, bias: bool| -> Result<Linear> {
            let proj = projection(names, inp)?;
            if !bias {
                return Ok(Linear { proj, bias: None, host_bias: None });
            }
            let mut data = Vec::new();
            for &(name, rows) in names {
                let b = get(&format!("{name}.bias"))?;
                check_shape(&b, &format!("{name}.bias"), &[rows])?;
                data.extend_from_slice(&b.data);
            }
            let host_bias = (!matches!(proj, Projection::Device(_))).then(|| data.clone());
            let len = data.len();
            let bias = upload(HostTensor { shape: vec![len], data }, "bias", [len], device)?;
            Ok(Linear { proj, bias: Some(bias), host_bias })
        };
        let norm = |name: &str| -> Result<RmsNorm> {
            Ok(RmsNorm { weight: upload(get(name)?, name, [hd], device)?, eps: cfg.rms_norm_eps })
        };
        let embed_proj = projection(&[("model.embed_tokens", cfg.vocab_size)], hd)?;
        let embed = match &embed_proj {
            Projection::Native(q) | Projection::Int(q) => Embedding::Native(q.clone()),
            Projection::Host { weight, .. } => Embedding::Dense(weight.clone()),
            Projection::Device(blocks) if blocks.len() == 1 => Embedding::Dense(blocks[0].clone()),
            Projection::Device(blocks) => Embedding::Blocks(blocks.clone()),
        };
        let mut blocks = Vec::with_capacity(cfg.num_hidden_layers);
        for i in 0..cfg.num_hidden_layers {
            let p = format!("model.layers.{i}");
            let bias = cfg.attention_bias;
            blocks.push(Block {
                attn_norm: norm(&format!("{p}.input_layernorm.weight"))?,
                attn: Attention {
                    qkv: linear(
                        &[(&format!("{p}.self_attn.q_proj"), qd), (&format!("{p}.self_attn.k_proj"), kvd), (&format!("{p}.self_attn.v_proj"), kvd)],
                        hd,
                        bias,
                    )?,
                    o: linear(&[(&format!("{p}.self_attn.o_proj"), hd)], qd, false)?,
                    heads: cfg.num_attention_heads,
                    kv_heads: cfg.num_key_value_heads,
                    head_dim: cfg.head_dim,
                },
                device: 0,
                mlp_norm: norm(&format!("{p}.post_attention_layernorm.weight"))?,
                mlp: Mlp {
                    gate_up: linear(&[(&format!("{p}.mlp.gate_proj"), inter), (&format!("{p}.mlp.up_proj"), inter)], hd, false)?,
                    down: linear(&[(&format!("{p}.mlp.down_proj"), hd)], inter, false)?,
                    intermediate: inter,
                },
            });
        }
        let final_norm = norm("model.norm.weight")?;
        let lm_head = if cfg.tie_word_embeddings {
            Linear { proj: embed_proj, bias: None, host_bias: None }
        } else {
            linear(&[("lm_head", cfg.vocab_size)], hd, false)?
        };
        let sequential = LayerGroups::sequential(blocks.len());
        Ok(Self { cfg, embed, blocks, norm: final_norm, lm_head, sequential, devices: vec![device.clone()] })
    }

    /// Every linear map a decoded token applies: each layer's four projections, then the head.
    fn linears(&self) -> impl Iterator<Item = &Linear> {
        self.blocks.iter().flat_map(|b| [&b.attn.qkv, &b.attn.o, &b.mlp.gate_up, &b.mlp.down]).chain([&self.lm_head])
    }

    /// Bytes of weights one decoded token reads, as stored: every layer's projections (GGUF
    /// blocks on the native path, f32 otherwise), norms and biases, the final norm and the
    /// output head (the embedding lookup reads one row and is left out).
    pub fn weight_bytes_per_token(&self) -> usize {
        // Two norms per layer and the final norm, f32 of the hidden size each.
        let norms = (2 * self.blocks.len() + 1) * self.cfg.hidden_size * 4;
        self.linears().map(Linear::weight_bytes).sum::<usize>() + norms
    }

    /// Whether any weight matrix runs natively from GGUF blocks ([`WeightMode::Native`]).
    pub fn is_native(&self) -> bool {
        matches!(self.embed, Embedding::Native(_)) || self.linears().any(|l| matches!(l.proj, Projection::Native(_) | Projection::Int(_)))
    }

    /// Whether any weight matrix takes integer dot products on 8-bit activations
    /// ([`WeightMode::Q8`]); false when q8 was asked for but no matrix type has such a kernel.
    pub fn runs_integer(&self) -> bool {
        self.linears().any(|l| matches!(l.proj, Projection::Int(_)))
    }

    pub fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    pub fn device(&self) -> &Device {
        &self.devices[0]
    }

    /// A fresh cache for `batch` sequences, each layer on the device of its attention.
    pub fn new_cache(&self, batch: usize) -> KvCache {
        KvCache::on_devices(&self.cfg, batch, &self.layer_devices())
    }

    /// The device of each layer's attention and cache.
    pub fn layer_devices(&self) -> Vec<Device> {
        self.blocks.iter().map(|b| self.devices[b.device].clone()).collect()
    }

    /// The RoPE tables of positions `past..past + n` and, for n > 1, the causal mask, on
    /// every device of the model (index as [`Transformer::devices`]).
    fn position_tables(&self, past: usize, n: usize) -> Vec<PositionTables> {
        let heads_per_kv = self.cfg.num_attention_heads / self.cfg.num_key_value_heads;
        let rope = rope_tables(past, n, self.cfg.head_dim, self.cfg.rope_theta, self.device());
        let mask = (n > 1).then(|| causal_mask(past, n, heads_per_kv, self.device()));
        let mut tables = vec![(rope, mask)];
        for device in &self.devices[1..] {
            let ((cos, sin), mask) = &tables[0];
            tables.push(((cos.clone().to_device(device), sin.clone().to_device(device)), mask.clone().map(|m| m.to_device(device))));
        }
        tables
    }

    /// Layer `i`'s attention sublayer (input norm, attention, output projection) of `x`, which
    /// is on the model's device; runs on the layer's device and returns there.
    fn attention(&self, i: usize, x: Tensor<3>, slot: &mut LayerSlot, tables: &[PositionTables], probe: Option<&mut AttentionProbe>) -> Tensor<3> {
        let block = &self.blocks[i];
        let (rope, mask) = &tables[block.device];
        if block.device == 0 {
            return block.attn.forward(block.attn_norm.forward(x), slot, rope, mask.as_ref(), probe);
        }
        let x = x.to_device(&self.devices[block.device]);
        block.attn.forward(block.attn_norm.forward(x), slot, rope, mask.as_ref(), probe).to_device(self.device())
    }

    /// Forwards `tokens` (n >= 1 new tokens of one sequence) after what `cache` holds, and
    /// appends their keys and values to it.
    pub fn forward(&self, tokens: &[u32], cache: &mut KvCache) -> Result<ForwardOutput> {
        self.forward_batch(&[tokens], cache)
    }

    /// [`Transformer::forward`] that gives up between layers once `cancel` is set (DSI's
    /// preemption of a verification whose prefix was rejected): `Ok(None)` then, with the
    /// cache's length unchanged (keys already written past it are never read).
    pub fn forward_cancellable(&self, tokens: &[u32], cache: &mut KvCache, cancel: &std::sync::atomic::AtomicBool) -> Result<Option<ForwardOutput>> {
        let Some(hidden) = self.hidden_states_until(&[tokens], cache, None, Some(cancel), &self.sequential, 1, None)? else { return Ok(None) };
        let logits = self.logits(hidden.clone());
        Ok(Some(ForwardOutput { logits, hidden }))
    }

    /// A verification's forward: `tokens` after what `cache` holds, with the logits of the last
    /// `rows` positions only (the rows decided on; for a prefill, the last), giving up between
    /// layers once `cancel` is set (`Ok(None)`, as [`Transformer::forward_cancellable`]).
    pub fn forward_scores(&self, tokens: &[u32], cache: &mut KvCache, rows: usize, cancel: Option<&std::sync::atomic::AtomicBool>) -> Result<Option<Vec<Vec<f32>>>> {
        ensure!((1..=tokens.len()).contains(&rows), "scores of {rows} rows from a forward of {} tokens", tokens.len());
        let Some(hidden) = self.hidden_states_until(&[tokens], cache, None, cancel, &self.sequential, 1, None)? else { return Ok(None) };
        let [b, n, h] = hidden.dims();
        Ok(Some(tail_rows(&self.logits(hidden.slice([0..b, n - rows..n, 0..h])), rows)))
    }

    /// Forwards several sequences of equal length at once (`cache.batch()` of them).
    pub fn forward_batch(&self, tokens: &[&[u32]], cache: &mut KvCache) -> Result<ForwardOutput> {
        let hidden = self.hidden_states(tokens, cache, None)?;
        let logits = self.logits(hidden.clone());
        Ok(ForwardOutput { logits, hidden })
    }

    /// Like [`Transformer::forward`] but computes logits for the last position only (prefill
    /// of a long prompt, where the other positions' logits are not needed).
    pub fn forward_last(&self, tokens: &[u32], cache: &mut KvCache) -> Result<ForwardOutput> {
        let hidden = self.hidden_states(&[tokens], cache, None)?;
        let [b, n, h] = hidden.dims();
        let last = hidden.slice([0..b, n - 1..n, 0..h]);
        Ok(ForwardOutput { logits: self.logits(last.clone()), hidden: last })
    }

    /// Forwards a *ragged* batch: several sequences, each with its own new tokens (any
    /// number >= 1) and its own single-sequence cache, possibly of different lengths. The
    /// projections and the MLP run once over all rows (one pass over the weights for the whole
    /// batch, which is what makes batched generation pay on a bandwidth-bound CPU); attention
    /// runs per sequence against its own cache. On the CPU every projection runs the
    /// row-order-independent kernel (in chunks of at most [`ROW_INVARIANT_CHUNK`] rows), so a
    /// sequence's results are bitwise the same whatever else is in the batch. Returns the final
    /// hidden states of all new rows, `[rows, hidden]`, sequence after sequence in input order.
    pub fn forward_ragged(&self, seqs: &mut [(&[u32], &mut KvCache)]) -> Result<Tensor<2>> {
        ensure!(!seqs.is_empty(), "a ragged forward needs at least one sequence");
        ensure!(self.devices.len() == 1, "ragged forwards run on one device; this model's attentions are placed on {}", self.devices.len());
        for (tokens, cache) in seqs.iter() {
            ensure!(!tokens.is_empty(), "forward needs at least one token per sequence");
            ensure!(cache.batch() == 1, "ragged forwards take single-sequence caches, got one for {}", cache.batch());
        }
        let hd = self.cfg.hidden_size;
        let groups = self.cfg.num_attention_heads / self.cfg.num_key_value_heads;
        let embedded = self.embed_tokens(&seqs.iter().map(|(t, _)| *t).collect::<Vec<_>>())?;
        let rows = embedded.dims()[0];
        let mut x = embedded.reshape([1, rows, hd]);
        // Per sequence: row range, RoPE tables at its own positions, causal mask if n > 1.
        let mut parts = Vec::with_capacity(seqs.len());
        let mut start = 0;
        for (tokens, cache) in seqs.iter_mut() {
            let n = tokens.len();
            let past = cache.len();
            cache.reserve(n);
            let rope = rope_tables(past, n, self.cfg.head_dim, self.cfg.rope_theta, self.device());
            let mask = (n > 1).then(|| causal_mask(past, n, groups, self.device()));
            parts.push((start..start + n, rope, mask));
            start += n;
        }
        for (layer, block) in self.blocks.iter().enumerate() {
            let qkv = block.attn.qkv.forward_row_invariant(block.attn_norm.forward(x.clone()));
            let width = qkv.dims()[2];
            let outs: Vec<Tensor<3>> = parts
                .iter()
                .zip(seqs.iter_mut())
                .map(|((range, rope, mask), (_, cache))| {
                    let rows_of_seq = qkv.clone().slice([0..1, range.clone(), 0..width]);
                    block.attn.attend(rows_of_seq, &mut cache.slot(layer), rope, mask.as_ref(), None)
                })
                .collect();
            let attended = if outs.len() == 1 { outs.into_iter().next().unwrap() } else { Tensor::cat(outs, 1) };
            x = x + block.attn.o.forward_row_invariant(attended);
            x = x.clone() + block.mlp.forward_with(block.mlp_norm.forward(x), Linear::forward_row_invariant);
        }
        for (tokens, cache) in seqs.iter_mut() {
            cache.advance(tokens.len(), None);
        }
        Ok(self.norm.forward(x).reshape([rows, hd]))
    }

    /// Output-head scores of hidden rows `[rows, hidden]`, one host vector per row, each row
    /// computed independently of the others (the companion of [`Transformer::forward_ragged`]).
    pub fn logits_ragged(&self, hidden: Tensor<2>) -> Vec<Vec<f32>> {
        let [r, h] = hidden.dims();
        let out = self.lm_head.forward_row_invariant(hidden.reshape([1, r, h]));
        let v = out.dims()[2];
        host_rows(out.reshape([r, v]))
    }

    /// Output-head scores for hidden states `[batch, n, hidden]`.
    pub fn logits(&self, hidden: Tensor<3>) -> Tensor<3> {
        self.lm_head.forward(hidden)
    }

    /// Final post-norm hidden states of the new positions; advances the cache.
    /// Embeddings of the tokens of `seqs`, one after another: `[total tokens, hidden]`. Token
    /// ids outside the vocabulary are an error.
    fn embed_tokens(&self, seqs: &[&[u32]]) -> Result<Tensor<2>> {
        let vocab = self.cfg.vocab_size as u32;
        if let Some(&bad) = seqs.iter().flat_map(|t| t.iter()).find(|&&t| t >= vocab) {
            bail!("token id {bad} is outside the vocabulary of {vocab}");
        }
        let ids: Vec<u32> = seqs.iter().flat_map(|t| t.iter().copied()).collect();
        let rows = ids.len();
        let index = |ids: Vec<i64>| Tensor::<1, Int>::from_data(TensorData::new(ids.clone(), [ids.len()]), self.device());
        match &self.embed {
            Embedding::Dense(table) => Ok(table.clone().select(0, index(ids.iter().map(|&x| x as i64).collect()))),
            Embedding::Blocks(blocks) => {
                // Each block selects its tokens' rows; one more select puts them in input order.
                let per_block = blocks[0].dims()[0];
                let (mut parts, mut order, mut found) = (Vec::new(), vec![0i64; rows], 0);
                for (b, block) in blocks.iter().enumerate() {
                    let mine: Vec<(usize, i64)> = ids.iter().enumerate().filter(|&(_, &id)| id as usize / per_block == b).map(|(i, &id)| (i, (id as usize % per_block) as i64)).collect();
                    if mine.is_empty() {
                        continue;
                    }
                    for (j, &(i, _)) in mine.iter().enumerate() {
                        order[i] = (found + j) as i64;
                    }
                    found += mine.len();
                    parts.push(block.clone().select(0, index(mine.into_iter().map(|(_, r)| r).collect())));
                }
                Ok(Tensor::cat(parts, 0).select(0, index(order)))
            }
            Embedding::Native(q) => {
                let hd = q.cols();
                let mut out = vec![0f32; rows * hd];
                for (row, &id) in out.chunks_exact_mut(hd).zip(&ids) {
                    q.decode_row(id as usize, row);
                }
                Ok(Tensor::from_data(TensorData::new(out, [rows, hd]), self.device()))
            }
        }
    }

    /// [`Transformer::forward`] of one sequence that also times each layer's attention and
    /// MLP and the LM head (`specx profile`). The CPU backend computes eagerly, so each time
    /// is the sublayer's own; the results equal those of `forward`.
    pub fn forward_timed(&self, tokens: &[u32], cache: &mut KvCache) -> Result<(ForwardOutput, LayerTimes)> {
        let mut times = LayerTimes::default();
        let hidden = self.hidden_states(&[tokens], cache, Some(&mut times))?;
        let t = std::time::Instant::now();
        let logits = self.logits(hidden.clone());
        let _ = logits.clone().into_data(); // materialise before stopping the clock
        times.lm_head = t.elapsed();
        Ok((ForwardOutput { logits, hidden }, times))
    }

    fn hidden_states(&self, tokens: &[&[u32]], cache: &mut KvCache, times: Option<&mut LayerTimes>) -> Result<Tensor<3>> {
        Ok(self.hidden_states_until(tokens, cache, times, None, &self.sequential, 1, None)?.expect("no cancel flag, never cancelled"))
    }

    /// EasySpec's fuzzy forward (Algorithm 2): within each group of `groups` every attention
    /// reads the group's input hidden state and writes its own layer of the cache, then the
    /// group's MLPs run in layer order. Groups of one layer compute exactly as
    /// [`Transformer::forward`] (bitwise: the exact strategy is the same code path). The cache
    /// records which layers' new entries are exact ([`KvCache::precise_len`]).
    pub fn forward_fuzzy(&self, tokens: &[u32], cache: &mut KvCache, groups: &LayerGroups, workers: usize) -> Result<ForwardOutput> {
        let hidden = self.hidden_states_until(&[tokens], cache, None, None, groups, workers, None)?.expect("no cancel flag, never cancelled");
        let logits = self.logits(hidden.clone());
        Ok(ForwardOutput { logits, hidden })
    }

    /// [`Transformer::forward_fuzzy`] that also records every layer's attention on the last row
    /// twice (EasySpec's Table 5): as the fuzzy forward computed it from the group's input, and
    /// as the precise model would have from the running hidden state at that layer (the state
    /// after the layers before it, against the same cache). A group's leading layer reads the
    /// running state, so its two records are identical by construction. The output and the
    /// cache are the fuzzy forward's.
    pub fn probe_fuzzy(&self, tokens: &[u32], cache: &mut KvCache, groups: &LayerGroups) -> Result<(ForwardOutput, Vec<ProbedLayer>)> {
        let mut probes = Vec::with_capacity(self.blocks.len());
        let hidden = self.hidden_states_until(&[tokens], cache, None, None, groups, 1, Some(&mut probes))?.expect("no cancel flag, never cancelled");
        let logits = self.logits(hidden.clone());
        Ok((ForwardOutput { logits, hidden }, probes))
    }

    /// Layer `i`'s attention of the hidden state `x` against a copy of `cache` (the cache keeps
    /// what the fuzzy forward wrote), recorded.
    fn precise_attention(&self, i: usize, x: &Tensor<3>, cache: &KvCache, tables: &[PositionTables]) -> AttentionProbe {
        let mut scratch = cache.clone();
        let mut p = AttentionProbe { input: last_row(x.clone()), ..Default::default() };
        self.attention(i, x.clone(), &mut scratch.slot(i), tables, Some(&mut p));
        p
    }

    /// The layer loop, group by group (`self.sequential` for the exact forward); `None` when
    /// `cancel` was set before a group (the cache not advanced). `times` and `probes` collect
    /// per-layer measurements when given.
    #[allow(clippy::too_many_arguments)]
    fn hidden_states_until(
        &self,
        tokens: &[&[u32]],
        cache: &mut KvCache,
        mut times: Option<&mut LayerTimes>,
        cancel: Option<&std::sync::atomic::AtomicBool>,
        groups: &LayerGroups,
        workers: usize,
        mut probes: Option<&mut Vec<ProbedLayer>>,
    ) -> Result<Option<Tensor<3>>> {
        let b = tokens.len();
        ensure!(b > 0 && b == cache.batch(), "{b} sequences given to a cache for {}", cache.batch());
        let n = tokens[0].len();
        ensure!(n > 0, "forward needs at least one token");
        ensure!(tokens.iter().all(|t| t.len() == n), "batched sequences must have equal length");
        ensure!(groups.layers() == self.blocks.len(), "layer strategy '{groups}' is for {} layers, the model has {}", groups.layers(), self.blocks.len());
        let mut x = self.embed_tokens(tokens)?.reshape([b, n, self.cfg.hidden_size]);
        let past = cache.len();
        cache.reserve(n);
        let tables = self.position_tables(past, n);
        for group in groups.groups() {
            if cancel.is_some_and(|c| c.load(std::sync::atomic::Ordering::Relaxed)) {
                return Ok(None);
            }
            // Every attention of the group reads the group's input.
            let attended = self.attend_group(group.clone(), &x, cache, &tables, workers, probes.is_some());
            for (i, (h, t_attn, fuzzy)) in group.clone().zip(attended) {
                if let (Some(probes), Some(fuzzy)) = (probes.as_deref_mut(), fuzzy) {
                    let leading = i == group.start;
                    let precise = if leading { fuzzy.clone() } else { self.precise_attention(i, &x, cache, &tables) };
                    probes.push(ProbedLayer { fuzzy, precise, leading });
                }
                x = x + h;
                let t_mlp = std::time::Instant::now();
                let block = &self.blocks[i];
                x = x.clone() + block.mlp.forward(block.mlp_norm.forward(x));
                if let Some(times) = times.as_deref_mut() {
                    times.attn.push(t_attn);
                    times.mlp.push(t_mlp.elapsed());
                }
            }
        }
        cache.advance(n, groups.first_fuzzy_layer());
        Ok(Some(self.norm.forward(x)))
    }

    /// The attentions of the layers `group`, all reading `input`, each writing its own layer of
    /// the cache. On one device they run on up to `workers` threads (contiguous shares of the
    /// group); on a model whose attentions are placed on several devices, one thread per device
    /// (`workers` is then not used). The caller's thread runs the first share. Each attention
    /// is the same computation on whichever thread runs it, so the results never depend on
    /// `workers`. Returns each output, in layer order, with its time and, with `probe`, its
    /// record.
    fn attend_group(
        &self,
        group: std::ops::Range<usize>,
        input: &Tensor<3>,
        cache: &mut KvCache,
        tables: &[PositionTables],
        workers: usize,
        probe: bool,
    ) -> Vec<(Tensor<3>, std::time::Duration, Option<AttentionProbe>)> {
        type Attended = (usize, (Tensor<3>, std::time::Duration, Option<AttentionProbe>));
        let attend = |(i, mut slot): (usize, LayerSlot)| -> Attended {
            let t = std::time::Instant::now();
            let mut record = probe.then(|| AttentionProbe { input: last_row(input.clone()), ..Default::default() });
            let out = self.attention(i, input.clone(), &mut slot, tables, record.as_mut());
            (i, (out, t.elapsed(), record))
        };
        let mut jobs: Vec<(usize, LayerSlot)> = group.clone().zip(cache.slots(group)).collect();
        let mut shares: Vec<Vec<(usize, LayerSlot)>> = Vec::new();
        if self.devices.len() > 1 {
            for job in jobs {
                match shares.iter_mut().find(|s| self.blocks[s[0].0].device == self.blocks[job.0].device) {
                    Some(share) => share.push(job),
                    None => shares.push(vec![job]),
                }
            }
        } else {
            let threads = workers.clamp(1, jobs.len().max(1));
            let share = jobs.len().div_ceil(threads);
            while !jobs.is_empty() {
                let rest = jobs.split_off(share.min(jobs.len()));
                shares.push(std::mem::replace(&mut jobs, rest));
            }
        }
        let mut out: Vec<Attended> = if shares.len() == 1 {
            shares.pop().expect("one share").into_iter().map(attend).collect()
        } else {
            let mut shares = shares.into_iter();
            let first = shares.next().expect("a group has layers");
            std::thread::scope(|scope| {
                let attend = &attend;
                let others: Vec<_> = shares.map(|share| scope.spawn(move || share.into_iter().map(attend).collect::<Vec<_>>())).collect();
                let mut out: Vec<_> = first.into_iter().map(attend).collect();
                for worker in others {
                    out.extend(worker.join().expect("an attention worker panicked"));
                }
                out
            })
        };
        out.sort_by_key(|(i, _)| *i);
        out.into_iter().map(|(_, r)| r).collect()
    }
}
