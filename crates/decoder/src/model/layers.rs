//! The layers of the decoder: RMSNorm, RoPE, grouped-query attention (on the CPU in a fixed
//! order per query row, for row invariance), the SwiGLU MLP, the embedding table.

use crate::cache::LayerSlot;
use crate::host_attention::{self, AttentionShape, Visible};
use crate::quant::QuantMatrix;
use crate::tree_mask::TreeMask;
use burn::tensor::activation::silu;
use burn::tensor::{Device, Int, Tensor, TensorData};
use std::sync::Arc;

use super::linear::{Linear, Projection};
use super::probe::{AttentionProbe, last_row};
use crate::fusion::Fused;

#[derive(Clone)]
pub(super) struct RmsNorm {
    pub(super) weight: Tensor<1>,
    pub(super) eps: f64,
}

impl RmsNorm {
    pub(super) fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        // On a GPU: one fused kernel instead of seven tensor operations.
        #[cfg(any(feature = "wgpu", feature = "cuda"))]
        if x.device() != Device::flex() {
            return crate::cube::rms_norm(x, &self.weight, self.eps);
        }
        let inv_rms = x.clone().square().mean_dim(2).add_scalar(self.eps).sqrt().recip();
        x * inv_rms * self.weight.clone().unsqueeze::<3>()
    }

    /// `linear(norm(x))`, the map applied by `project`. GGUF blocks on a GPU normalise the rows
    /// inside the product (one launch instead of two).
    pub(super) fn project(
        &self,
        x: Tensor<3>,
        linear: &Linear,
        project: fn(&Linear, Tensor<3>) -> Tensor<3>,
    ) -> Tensor<3> {
        if let Projection::Blocks(q) = &linear.proj {
            return q.product(
                x,
                Fused { norm: Some((&self.weight, self.eps)), bias: linear.bias.as_ref(), ..Fused::default() },
            );
        }
        project(linear, self.forward(x))
    }
}

/// Self-attention. q, k and v are one fused projection (rows q, then k, then v): one pass over
/// the input and one kernel call instead of three.
#[derive(Clone)]
pub(super) struct Attention {
    pub(super) qkv: Linear,
    pub(super) o: Linear,
    pub(super) heads: usize,
    pub(super) kv_heads: usize,
    pub(super) head_dim: usize,
    /// Qwen3's RMSNorms of each head's query and key (over `head_dim` values), before RoPE.
    pub(super) qk_norm: Option<(RmsNorm, RmsNorm)>,
}

/// SwiGLU MLP with gate and up fused into one projection (rows gate, then up).
#[derive(Clone)]
pub(super) struct Mlp {
    pub(super) gate_up: Linear,
    pub(super) down: Linear,
    pub(super) intermediate: usize,
}

#[derive(Clone)]
pub(super) struct Block {
    pub(super) attn_norm: RmsNorm,
    pub(super) attn: Attention,
    /// Index into [`Transformer::devices`] of the device that holds `attn_norm`, `attn` and
    /// this layer's cache (0, the model's device, unless [`Transformer::place_attention`]
    /// moved them).
    pub(super) device: usize,
    /// Index into [`Transformer::devices`] of the device that holds `mlp_norm`, `mlp` and the
    /// residual stream through this layer: 0 unless the model is split in layer ranges
    /// ([`Transformer::load_split`]), where it equals `device`.
    pub(super) home: usize,
    pub(super) mlp_norm: RmsNorm,
    pub(super) mlp: Mlp,
}

/// The token embedding table.
#[derive(Clone)]
pub(super) enum Embedding {
    Dense(Tensor<2>),
    /// A table in row blocks on a device ([`super::linear::Projection::Device`]).
    Blocks(Vec<Tensor<2>>),
    /// GGUF blocks; looked-up rows are decoded to the same f32 values as the dense table.
    Native(Arc<QuantMatrix>),
    /// GGUF blocks on a GPU; looked-up rows are decoded there by a kernel.
    DeviceBlocks(Arc<super::gpu_blocks::DeviceBlocks>),
}

impl Embedding {
    /// The table's rows of `ids`, in order: `[ids, hidden]`.
    pub(super) fn lookup(&self, ids: &[u32], device: &Device) -> Tensor<2> {
        let rows = ids.len();
        let index = |ids: Vec<i64>| Tensor::<1, Int>::from_data(TensorData::new(ids.clone(), [ids.len()]), device);
        match self {
            Self::Dense(table) => table.clone().select(0, index(ids.iter().map(|&x| x as i64).collect())),
            Self::Blocks(blocks) => {
                // Each block selects its tokens' rows; one more select puts them in input order.
                let per_block = blocks[0].dims()[0];
                let (mut parts, mut order, mut found) = (Vec::new(), vec![0i64; rows], 0);
                for (b, block) in blocks.iter().enumerate() {
                    let mine: Vec<(usize, i64)> = ids
                        .iter()
                        .enumerate()
                        .filter(|&(_, &id)| id as usize / per_block == b)
                        .map(|(i, &id)| (i, (id as usize % per_block) as i64))
                        .collect();
                    if mine.is_empty() {
                        continue;
                    }
                    for (j, &(i, _)) in mine.iter().enumerate() {
                        order[i] = (found + j) as i64;
                    }
                    found += mine.len();
                    parts.push(block.clone().select(0, index(mine.into_iter().map(|(_, r)| r).collect())));
                }
                Tensor::cat(parts, 0).select(0, index(order))
            }
            Self::DeviceBlocks(q) => q.lookup(ids),
            Self::Native(q) => {
                let hd = q.cols();
                let mut out = vec![0f32; rows * hd];
                for (row, &id) in out.chunks_exact_mut(hd).zip(ids) {
                    q.decode_row(id as usize, row);
                }
                Tensor::from_data(TensorData::new(out, [rows, hd]), device)
            }
        }
    }
}

/// cos and sin of RoPE angles for positions `start..start+n`, `[n, head_dim]` each, in the
/// rotate-half layout (frequency i at columns i and i + head_dim/2), from the model's inverse
/// frequencies ([`crate::config::ModelConfig::rope_inv_freqs`], scaling applied). Computed in
/// f64.
pub(super) fn rope_tables(start: usize, n: usize, inv_freqs: &[f64], device: &Device) -> (Tensor<2>, Tensor<2>) {
    rope_tables_at(&(start..start + n).collect::<Vec<_>>(), inv_freqs, device)
}

/// [`rope_tables`] at any positions, one row each (a tree call's rows sit at their depths).
pub(super) fn rope_tables_at(positions: &[usize], inv_freqs: &[f64], device: &Device) -> (Tensor<2>, Tensor<2>) {
    let (half, n) = (inv_freqs.len(), positions.len());
    let head_dim = 2 * half;
    let mut cos = Vec::with_capacity(n * head_dim);
    let mut sin = Vec::with_capacity(n * head_dim);
    for &p in positions {
        for j in 0..head_dim {
            let angle = p as f64 * inv_freqs[j % half];
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
pub(super) fn apply_rope(x: Tensor<4>, cos: &Tensor<2>, sin: &Tensor<2>) -> Tensor<4> {
    let [b, h, n, d] = x.dims();
    let x1 = x.clone().slice([0..b, 0..h, 0..n, 0..d / 2]);
    let x2 = x.clone().slice([0..b, 0..h, 0..n, d / 2..d]);
    let rotated = Tensor::cat(vec![x2.neg(), x1], 3);
    x * cos.clone().unsqueeze::<4>() + rotated * sin.clone().unsqueeze::<4>()
}

/// The additive mask of a tree call on a GPU over the tree's own keys (`[groups * n, cached +
/// n]`, laid out for the grouped query rows `(group, query)`): row i sees its path in `tree`
/// (tree row a, cached or of this call, at column a); the keys before the tree, which every row
/// sees, are not in it, so its size and bytes never depend on the cache's length. A causal
/// call needs none: the attention kernel masks it from the cached length.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn tree_mask(tree: &TreeMask, groups: usize, device: &Device) -> Tensor<2> {
    let width = tree.cached() + tree.len();
    Tensor::from_data(TensorData::new(tree_mask_values(tree, groups), [groups * tree.len(), width]), device)
}

/// [`tree_mask`]'s values, row-major (a recorded tree call writes them over its mask).
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub(super) fn tree_mask_values(tree: &TreeMask, groups: usize) -> Vec<f32> {
    let n = tree.len();
    let width = tree.cached() + n;
    let mut m = vec![f32::NEG_INFINITY; groups * n * width];
    for g in 0..groups {
        for i in 0..n {
            let row = &mut m[(g * n + i) * width..(g * n + i + 1) * width];
            for &a in tree.path(i) {
                row[a] = 0.0;
            }
        }
    }
    m
}

/// `past` in a device buffer and, for a tree, its additive mask, on a GPU; `None` on the CPU,
/// which reads both from the host.
#[cfg_attr(not(any(feature = "wgpu", feature = "cuda")), allow(unused_variables))]
fn device_side(past: usize, tree: Option<&TreeMask>, groups: usize, device: &Device) -> Option<DeviceSide> {
    #[cfg(any(feature = "wgpu", feature = "cuda"))]
    if *device != Device::flex() {
        return Some(DeviceSide {
            step: crate::cube::step_buffer(past, device),
            tree: tree.map(|t| tree_mask(t, groups, device)),
        });
    }
    None
}

/// A row mask's buffers on a GPU: the cached length (which the RoPE-and-cache and attention
/// kernels read: `cube::step_buffer`) and a tree call's additive mask.
#[derive(Clone)]
#[cfg_attr(not(any(feature = "wgpu", feature = "cuda")), allow(dead_code))]
struct DeviceSide {
    step: Tensor<1, Int>,
    tree: Option<Tensor<2>>,
}

/// What the new rows of one call see besides the cache: the rows before them (causal), or
/// their ancestors in a tree. The host attention reads it as [`Visible`]; a GPU's kernels read
/// the cached length from a device buffer and a tree's additive mask.
#[derive(Clone)]
pub(super) struct RowMask {
    n: usize,
    tree: Option<Arc<TreeMask>>,
    groups: usize,
    /// The cached positions before the call.
    past: usize,
    #[cfg_attr(not(any(feature = "wgpu", feature = "cuda")), allow(dead_code))]
    device: Option<DeviceSide>,
}

impl RowMask {
    /// The mask of `n` rows after `past` cached positions: causal, or `tree`'s when given.
    pub(super) fn new(past: usize, n: usize, tree: Option<&Arc<TreeMask>>, groups: usize, device: &Device) -> Self {
        let device = device_side(past, tree.map(|t| &**t), groups, device);
        Self { n, tree: tree.cloned(), groups, past, device }
    }

    /// The same mask with its buffers on `device`.
    pub(super) fn to_device(&self, device: &Device) -> Self {
        Self::new(self.past, self.n, self.tree.as_ref(), self.groups, device)
    }

    /// The device buffer of the cached length (a captured step rewrites it between replays).
    #[cfg(any(feature = "wgpu", feature = "cuda"))]
    pub(super) fn step_tensor(&self) -> &Tensor<1, Int> {
        &self.device.as_ref().expect("a GPU row mask holds its step buffer").step
    }

    /// The device buffer of the cached length, checked against the cache's own count.
    #[cfg(any(feature = "wgpu", feature = "cuda"))]
    fn step(&self, cached: usize) -> &Tensor<1, Int> {
        assert_eq!(cached, self.past, "a row mask made after {} positions used after {cached}", self.past);
        self.step_tensor()
    }

    /// A tree call's additive mask on a GPU (`None`: causal).
    #[cfg(any(feature = "wgpu", feature = "cuda"))]
    pub(super) fn tree_additive(&self) -> Option<&Tensor<2>> {
        self.device.as_ref().and_then(|d| d.tree.as_ref())
    }

    /// The host attention's form of it.
    fn visible(&self) -> Visible<'_> {
        match &self.tree {
            Some(tree) => Visible::Tree(tree),
            None if self.n > 1 => Visible::Causal,
            None => Visible::All,
        }
    }
}

impl Attention {
    /// The attention of `norm(x)` (`x` the hidden state), plus `residual` when given (the add
    /// fused into the output projection where it can be); `probe`, when given, receives its q,
    /// k, v and output on the last row.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn forward(
        &self,
        x: Tensor<3>,
        norm: &RmsNorm,
        slot: &mut LayerSlot,
        rope: &(Tensor<2>, Tensor<2>),
        mask: &RowMask,
        mut probe: Option<&mut AttentionProbe>,
        residual: Option<Tensor<3>>,
    ) -> Tensor<3> {
        let qkv = norm.project(x, &self.qkv, Linear::forward);
        let out = self.attend(qkv, slot, rope, mask, probe.as_deref_mut());
        let out = match residual {
            Some(stream) => self.o.forward_plus(out, stream),
            None => self.o.forward(out),
        };
        if let Some(p) = probe {
            p.out = last_row(out.clone());
        }
        out
    }

    /// Attention of fused `qkv` rows `[b, n, q + 2 kv]` over a layer's cache `slot` (which
    /// receives the new keys and values); returns `[b, n, heads * head_dim]` before the output
    /// projection.
    pub(super) fn attend(
        &self,
        qkv: Tensor<3>,
        slot: &mut LayerSlot,
        rope: &(Tensor<2>, Tensor<2>),
        mask: &RowMask,
        probe: Option<&mut AttentionProbe>,
    ) -> Tensor<3> {
        let [b, n, _] = qkv.dims();
        let qkv_device = qkv.device();
        let (h, kvh, d) = (self.heads, self.kv_heads, self.head_dim);
        let (q, keys, values) = self.rotate_and_cache(qkv, slot, rope, mask, probe);
        if qkv_device == Device::flex() {
            // On the CPU: each row's attention in a fixed order of its own (row invariance).
            let host = |t: Tensor<4>| t.into_data().try_to_vec::<f32>().expect("f32 attention inputs");
            let shape =
                AttentionShape { batch: b, heads: h, kv_heads: kvh, rows: n, keys: keys.dims()[2], head_dim: d };
            let out = host_attention::attend(&host(q), &host(keys), &host(values), shape, mask.visible());
            return Tensor::from_data(TensorData::new(out, [b, n, h * d]), &qkv_device);
        }
        // On a GPU: scores, mask, softmax and the weighted values in one fused kernel.
        #[cfg(any(feature = "wgpu", feature = "cuda"))]
        return crate::cube::attention(q, keys.clone(), values, mask.tree_additive(), mask.step(keys.dims()[2] - n));
        #[cfg(not(any(feature = "wgpu", feature = "cuda")))]
        unreachable!("a build without a GPU backend has no device but the CPU")
    }

    /// q, k and v of fused `qkv` rows `[b, n, q + 2 kv]` with RoPE applied to q and k, and k
    /// and v written into the layer's cache `slot`: q `[b, heads, n, head_dim]` and every cached
    /// key and value `[b, kv_heads, len + n, head_dim]`. `probe`, when given, receives q, k and
    /// v of the last row.
    fn rotate_and_cache(
        &self,
        qkv: Tensor<3>,
        slot: &mut LayerSlot,
        rope: &(Tensor<2>, Tensor<2>),
        mask: &RowMask,
        probe: Option<&mut AttentionProbe>,
    ) -> (Tensor<4>, Tensor<4>, Tensor<4>) {
        let [b, n, _] = qkv.dims();
        let (h, kvh, d) = (self.heads, self.kv_heads, self.head_dim);
        #[cfg(not(any(feature = "wgpu", feature = "cuda")))]
        let _ = mask;
        // On a GPU: one fused kernel (a probe reads the tensor form's intermediate values).
        #[cfg(any(feature = "wgpu", feature = "cuda"))]
        if qkv.device() != Device::flex() && probe.is_none() && self.qk_norm.is_none() {
            return slot.write_with(n, |cache, past| {
                crate::cube::rope_qkv(qkv, (&rope.0, &rope.1), [h, kvh, d], cache, (past, mask.step(past)))
            });
        }
        let (qd, kvd) = (h * d, kvh * d);
        // `count` heads from columns `cols`, each normalised by `norm` where the model has one.
        let heads = |cols: std::ops::Range<usize>, count: usize, norm: Option<&RmsNorm>| {
            let t = qkv.clone().slice([0..b, 0..n, cols]);
            let t = match norm {
                Some(norm) => norm.forward(t.reshape([b, n * count, d])).reshape([b, n, count, d]),
                None => t.reshape([b, n, count, d]),
            };
            t.swap_dims(1, 2)
        };
        let (q_norm, k_norm) = self.qk_norm.as_ref().map(|(q, k)| (q, k)).unzip();
        let q = heads(0..qd, h, q_norm);
        let k = heads(qd..qd + kvd, kvh, k_norm);
        let v = heads(qd + kvd..qd + 2 * kvd, kvh, None);
        let q = apply_rope(q, &rope.0, &rope.1);
        let k = apply_rope(k, &rope.0, &rope.1);
        if let Some(p) = probe {
            let last = |t: &Tensor<4>| last_row(t.clone().swap_dims(1, 2).reshape([b, n, t.dims()[1] * d]));
            (p.q, p.k, p.v) = (last(&q), last(&k), last(&v));
        }
        let (keys, values) = slot.write(k, v);
        (q, keys, values)
    }
}

impl Mlp {
    /// `x + MLP(norm(x))`: the sublayer with its residual, each linear map applied by
    /// `project`. With GGUF blocks on a GPU the norm runs inside the gate-up product, SwiGLU in
    /// its output and the residual add inside the down product: two launches instead of five.
    pub(super) fn with_residual(
        &self,
        x: Tensor<3>,
        norm: &RmsNorm,
        project: fn(&Linear, Tensor<3>) -> Tensor<3>,
    ) -> Tensor<3> {
        if let (Projection::Blocks(gate_up), Projection::Blocks(down)) = (&self.gate_up.proj, &self.down.proj)
            && gate_up.pieces() == 1
            && self.gate_up.bias.is_none()
        {
            let act = gate_up
                .product(x.clone(), Fused { norm: Some((&norm.weight, norm.eps)), glu: true, ..Fused::default() });
            return down.product(act, Fused { bias: self.down.bias.as_ref(), residual: Some(x), ..Fused::default() });
        }
        x.clone() + self.forward_with(norm.forward(x), project)
    }

    /// The MLP with `project` applying each linear map. On the integer kernels (where every
    /// projection is row-invariant) the whole MLP runs on host rows with the fused activation
    /// of [`super::swiglu`]: the same values, without the tensor passes between the kernels.
    pub(super) fn forward_with(&self, x: Tensor<3>, project: fn(&Linear, Tensor<3>) -> Tensor<3>) -> Tensor<3> {
        let [b, n, h] = x.dims();
        if self.gate_up.is_int() && self.down.is_int() {
            let device = x.device();
            let xs = x.into_data().try_to_vec::<f32>().expect("f32 activations");
            let m = b * n;
            let gate_up = self.gate_up.int_rows(&xs, m).expect("an integer map");
            let act = super::swiglu::swiglu(&gate_up, m, self.intermediate);
            let out = self.down.int_rows(&act, m).expect("an integer map");
            return Tensor::from_data(TensorData::new(out, [b, n, h]), &device);
        }
        let i = self.intermediate;
        let gu = project(&self.gate_up, x);
        // On a GPU: the activation as one fused kernel.
        #[cfg(any(feature = "wgpu", feature = "cuda"))]
        if gu.device() != Device::flex() {
            return project(&self.down, crate::cube::swiglu(gu));
        }
        let gate = gu.clone().slice([0..b, 0..n, 0..i]);
        let up = gu.slice([0..b, 0..n, i..2 * i]);
        project(&self.down, silu(gate) * up)
    }
}
