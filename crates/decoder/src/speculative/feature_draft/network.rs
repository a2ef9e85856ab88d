//! A feature-level draft head in the manner of EAGLE-1 (Li et al., arXiv 2401.15077): it reads
//! the target's last hidden state `f_i` (after the final norm, the LM head's input) and the
//! embedding of the next token `e(s_{i+1})`, and predicts the next hidden state `f_{i+1}`; the
//! target's own embedding and output head (shared, never copied into the head) give the token
//! input and turn a predicted state into draft scores. Chained: a predicted state and its drafted token are the
//! next step's input.
//!
//! As in EAGLE-1: `fc` maps the concatenation `[f_i ; e(s_{i+1})]` to the layer's width, one
//! decoder layer follows (attention with RoPE over the head's own cache of earlier positions,
//! then RMSNorm and a SwiGLU MLP, both residual; like EAGLE-1's first layer, no norm before the
//! attention), trained with a smooth-L1 regression on `f_{i+1}` plus 0.1 x the cross-entropy
//! to the target's next-token distribution. Deviations, made for a head trainable on two CPU
//! cores and small enough to ship: the layer runs at a narrower width than the target's (`out`
//! maps it back to the target's hidden size), and the scores cover a frequency-ranked subset
//! of the vocabulary (EAGLE-3's draft vocabulary), so the cross-entropy's target is the
//! target's distribution restricted to the subset.
//!
//! Checkpoint directory: `feature-head.json` ([`FeatureHeadSpec`]) and
//! `feature-head.safetensors` (f16 weights, or f32 for a training run's state, in PyTorch's
//! `[out, in]` layout, and `vocab.ids`, the scored token ids).

use crate::fsutil::write_atomic;
use anyhow::{Context, Result, bail, ensure};
use burn::module::{Module, Param};
use burn::nn::Linear;
use burn::tensor::activation::{silu, softmax};
use burn::tensor::{Device, Tensor, TensorData};
use safetensors::SafeTensors;
use safetensors::tensor::{Dtype, TensorView};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Width of one attention head of the layer.
pub const FEATURE_HEAD_DIM: usize = 64;

/// Architecture and provenance of a feature head (`feature-head.json`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FeatureHeadSpec {
    /// The target's hidden size (input features, predicted features).
    pub hidden_size: usize,
    /// The decoder layer's width (a multiple of [`FEATURE_HEAD_DIM`]).
    pub width: usize,
    /// The SwiGLU MLP's inner width.
    pub intermediate: usize,
    pub rope_theta: f64,
    pub rms_eps: f64,
    /// sha256 of the target model file whose features the head reads and whose head it shares.
    pub target_model_sha256: String,
    /// The vocabulary subset the head scores: the `size` most frequent tokens of the frequency
    /// table with this sha256 ([`crate::cheap_draft::frequencies::TokenFrequencies::top`]).
    pub vocab_size: usize,
    pub vocab_table_sha256: String,
    /// The training configuration and results, recorded as given.
    #[serde(default)]
    pub training: serde_json::Value,
}

/// The head (a burn `Module`, so the trainer can optimise it).
#[derive(Module, Debug)]
pub struct FeatureHead {
    fc: Linear,
    qkv: Linear,
    o: Linear,
    mlp_norm: Param<Tensor<1>>,
    gate_up: Linear,
    down: Linear,
    out: Linear,
    width: usize,
    intermediate: usize,
    rope_theta: f64,
    rms_eps: f64,
}

/// The layer's keys and values of earlier positions, `[heads, positions, head_dim]` each.
#[derive(Clone, Debug)]
pub struct FeatureHeadCache {
    pub keys: Tensor<3>,
    pub values: Tensor<3>,
}

impl FeatureHeadCache {
    pub fn len(&self) -> usize {
        self.keys.dims()[1]
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keeps the first `n` positions.
    pub fn truncate(&mut self, n: usize) {
        let [h, len, d] = self.keys.dims();
        if n < len {
            self.keys = self.keys.clone().slice([0..h, 0..n, 0..d]);
            self.values = self.values.clone().slice([0..h, 0..n, 0..d]);
        }
    }
}

/// Names and `[out, in]` shapes of the head's matrices, in file order.
fn layout(spec: &FeatureHeadSpec) -> Vec<(&'static str, [usize; 2])> {
    let (h, d, m) = (spec.hidden_size, spec.width, spec.intermediate);
    vec![
        ("fc", [d, 2 * h]),
        ("qkv", [3 * d, d]),
        ("o", [d, d]),
        ("gate_up", [2 * m, d]),
        ("down", [d, m]),
        ("out", [h, d]),
    ]
}

impl FeatureHead {
    /// A head initialised as PyTorch's `nn.Linear` weights are (uniform in +-1/sqrt(fan_in),
    /// `fc` with a bias as in EAGLE, no other biases), norm weights 1, from its own generator
    /// seeded with `seed`.
    pub fn init_seeded(spec: &FeatureHeadSpec, seed: u64, device: &Device) -> Result<Self> {
        spec.check()?;
        use rand::{RngExt, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut matrices = Vec::new();
        for (_, [out, inp]) in layout(spec) {
            let bound = 1.0 / (inp as f32).sqrt();
            matrices.push((0..out * inp).map(|_| bound * (2.0 * rng.random::<f32>() - 1.0)).collect::<Vec<f32>>());
        }
        let bound = 1.0 / (2.0 * spec.hidden_size as f32).sqrt();
        let fc_bias: Vec<f32> = (0..spec.width).map(|_| bound * (2.0 * rng.random::<f32>() - 1.0)).collect();
        Ok(Self::from_parts(spec, matrices, fc_bias, vec![1.0; spec.width], device))
    }

    fn from_parts(
        spec: &FeatureHeadSpec,
        matrices: Vec<Vec<f32>>,
        fc_bias: Vec<f32>,
        norm: Vec<f32>,
        device: &Device,
    ) -> Self {
        let mut linears = layout(spec).into_iter().zip(matrices).map(|((_, [out, inp]), w)| {
            // The file's [out, in] becomes burn's [in, out].
            let w = Tensor::<2>::from_data(TensorData::new(w, [out, inp]), device).transpose();
            Linear { weight: Param::from_tensor(w), bias: None }
        });
        let mut fc = linears.next().expect("six matrices");
        fc.bias = Some(Param::from_tensor(Tensor::<1>::from_data(TensorData::new(fc_bias, [spec.width]), device)));
        let [qkv, o, gate_up, down, out] = std::array::from_fn(|_| linears.next().expect("six matrices"));
        Self {
            fc,
            qkv,
            o,
            mlp_norm: Param::from_tensor(Tensor::<1>::from_data(TensorData::new(norm, [spec.width]), device)),
            gate_up,
            down,
            out,
            width: spec.width,
            intermediate: spec.intermediate,
            rope_theta: spec.rope_theta,
            rms_eps: spec.rms_eps,
        }
    }

    /// Parameters of the head.
    pub fn parameter_count(&self) -> usize {
        self.num_params()
    }

    fn device(&self) -> Device {
        self.o.weight.val().device()
    }

    /// Predicted next features `[n, hidden]` for inputs at `positions` (RoPE positions, one
    /// per row): `features` `[n, hidden]` (the target's, or predicted ones), `embeds` `[n,
    /// hidden]` (the embeddings of each row's next token). `mask` `[n, past + n]` is added to
    /// the attention scores (0 or -inf; `None`: every row sees every position). With `cache`,
    /// the rows attend to its positions first, and their keys and values are appended to it.
    pub fn forward(
        &self,
        features: Tensor<2>,
        embeds: Tensor<2>,
        positions: &[usize],
        mask: Option<Tensor<2>>,
        cache: Option<&mut FeatureHeadCache>,
    ) -> Tensor<2> {
        let n = positions.len();
        let (d, hd) = (self.width, FEATURE_HEAD_DIM);
        let heads = d / hd;
        let x = self.fc.forward(Tensor::cat(vec![features, embeds], 1));
        let qkv = self.qkv.forward(x.clone());
        let split = |i: usize| qkv.clone().slice([0..n, i * d..(i + 1) * d]).reshape([n, heads, hd]).swap_dims(0, 1);
        let (cos, sin) = rope(positions, hd, self.rope_theta, &self.device());
        let (q, mut k, mut v) = (rotate(split(0), &cos, &sin), rotate(split(1), &cos, &sin), split(2));
        if let Some(cache) = cache {
            if !cache.is_empty() {
                k = Tensor::cat(vec![cache.keys.clone(), k], 1);
                v = Tensor::cat(vec![cache.values.clone(), v], 1);
            }
            cache.keys = k.clone();
            cache.values = v.clone();
        }
        let mut scores = q.matmul(k.swap_dims(1, 2)).mul_scalar(1.0 / (hd as f64).sqrt());
        if let Some(mask) = mask {
            scores = scores + mask.unsqueeze::<3>();
        }
        let attended = softmax(scores, 2).matmul(v).swap_dims(0, 1).reshape([n, d]);
        let x = x + self.o.forward(attended);
        let normed = rms_norm(x.clone(), self.mlp_norm.val(), self.rms_eps);
        let gu = self.gate_up.forward(normed);
        let m = self.intermediate;
        let mlp = self.down.forward(silu(gu.clone().slice([0..n, 0..m])) * gu.slice([0..n, m..2 * m]));
        self.out.forward(x + mlp)
    }

    /// Every parameter's id, in a fixed order. Optimiser state is keyed by these ids, so a
    /// resumed training run restores them with [`FeatureHead::with_param_ids`].
    pub fn param_ids(&self) -> Vec<u64> {
        let mut ids: Vec<u64> = self.linears().iter().map(|l| l.weight.id.val()).collect();
        ids.push(self.fc.bias.as_ref().expect("fc has a bias").id.val());
        ids.push(self.mlp_norm.id.val());
        ids
    }

    /// The same head with the parameter ids `ids` (as returned by [`FeatureHead::param_ids`]).
    pub fn with_param_ids(mut self, ids: &[u64]) -> Result<Self> {
        ensure!(ids.len() == 8, "{} parameter ids for a feature head with 8 parameters", ids.len());
        for (l, &id) in [&mut self.fc, &mut self.qkv, &mut self.o, &mut self.gate_up, &mut self.down, &mut self.out]
            .into_iter()
            .zip(ids)
        {
            l.weight.id = id.into();
        }
        self.fc.bias.as_mut().expect("fc has a bias").id = ids[6].into();
        self.mlp_norm.id = ids[7].into();
        Ok(self)
    }

    fn linears(&self) -> [&Linear; 6] {
        [&self.fc, &self.qkv, &self.o, &self.gate_up, &self.down, &self.out]
    }

    /// Writes `feature-head.json` and `feature-head.safetensors` (f16) into `dir`, with the
    /// token ids of the scored subset (`vocab.ids`, ascending).
    pub fn save(&self, dir: &Path, spec: &FeatureHeadSpec, ids: &[u32]) -> Result<()> {
        self.save_as(dir, spec, ids, Dtype::F16)
    }

    /// [`FeatureHead::save`] in f32 (a training run's resumable state keeps full precision).
    pub fn save_f32(&self, dir: &Path, spec: &FeatureHeadSpec, ids: &[u32]) -> Result<()> {
        self.save_as(dir, spec, ids, Dtype::F32)
    }

    fn save_as(&self, dir: &Path, spec: &FeatureHeadSpec, ids: &[u32], dtype: Dtype) -> Result<()> {
        ensure!(ids.len() == spec.vocab_size, "{} subset ids for a head over {} tokens", ids.len(), spec.vocab_size);
        ensure!(
            spec.width == self.width
                && spec.intermediate == self.intermediate
                && spec.hidden_size == self.out.weight.val().dims()[1],
            "spec does not describe this head"
        );
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let linears = self.linears();
        let bytes = |d: TensorData| if dtype == Dtype::F16 { f16_bytes(d) } else { f32_bytes(d) };
        let mut tensors: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
        for ((name, shape), l) in layout(spec).into_iter().zip(linears) {
            tensors.push((format!("{name}.weight"), shape.to_vec(), bytes(l.weight.val().transpose().into_data())));
        }
        let fc_bias = self.fc.bias.as_ref().expect("fc has a bias").val();
        tensors.push(("fc.bias".into(), vec![self.width], bytes(fc_bias.into_data())));
        tensors.push(("mlp_norm.weight".into(), vec![self.width], bytes(self.mlp_norm.val().into_data())));
        let mut views: Vec<(String, TensorView)> = tensors
            .iter()
            .map(|(n, shape, b)| Ok((n.clone(), TensorView::new(dtype, shape.clone(), b)?)))
            .collect::<Result<_, safetensors::SafeTensorError>>()?;
        let id_bytes: Vec<u8> = ids.iter().flat_map(|v| v.to_le_bytes()).collect();
        views.push(("vocab.ids".into(), TensorView::new(Dtype::U32, vec![ids.len()], &id_bytes)?));
        write_atomic(&dir.join("feature-head.safetensors"), &safetensors::serialize(views, None)?)?;
        write_atomic(&dir.join("feature-head.json"), serde_json::to_string_pretty(spec)?.as_bytes())
    }

    /// Reads a directory written by [`FeatureHead::save`]: the head, its spec and the token ids
    /// it scores.
    pub fn load(dir: &Path, device: &Device) -> Result<(Self, FeatureHeadSpec, Vec<u32>)> {
        let spec_path = dir.join("feature-head.json");
        let text = std::fs::read_to_string(&spec_path).with_context(|| {
            format!(
                "reading {} (a feature head directory holds feature-head.json and feature-head.safetensors)",
                spec_path.display()
            )
        })?;
        let spec: FeatureHeadSpec =
            serde_json::from_str(&text).with_context(|| format!("parsing {}", spec_path.display()))?;
        spec.check().with_context(|| format!("{}", spec_path.display()))?;
        let wpath = dir.join("feature-head.safetensors");
        let bytes = std::fs::read(&wpath).with_context(|| format!("reading {}", wpath.display()))?;
        let st = SafeTensors::deserialize(&bytes)
            .map_err(|e| anyhow::anyhow!("{}: malformed safetensors: {e}", wpath.display()))?;
        let get = |name: &str, shape: &[usize]| -> Result<Vec<f32>> {
            let v = st.tensor(name).map_err(|e| anyhow::anyhow!("{}: tensor '{name}': {e}", wpath.display()))?;
            match v.dtype() {
                _ if v.shape() != shape => {
                    bail!("{}: tensor '{name}' has shape {:?}, expected {shape:?}", wpath.display(), v.shape())
                }
                Dtype::F16 => {
                    Ok(v.data().chunks_exact(2).map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32()).collect())
                }
                Dtype::F32 => {
                    Ok(v.data().chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect())
                }
                other => bail!("{}: tensor '{name}' is {other:?}, expected F16 or F32", wpath.display()),
            }
        };
        let matrices = layout(&spec)
            .into_iter()
            .map(|(name, shape)| get(&format!("{name}.weight"), &shape))
            .collect::<Result<Vec<_>>>()?;
        let fc_bias = get("fc.bias", &[spec.width])?;
        let norm = get("mlp_norm.weight", &[spec.width])?;
        let ids =
            st.tensor("vocab.ids").map_err(|e| anyhow::anyhow!("{}: tensor 'vocab.ids': {e}", wpath.display()))?;
        ensure!(
            ids.dtype() == Dtype::U32 && ids.shape() == [spec.vocab_size],
            "{}: 'vocab.ids' is {:?} {:?}, expected U32 [{}]",
            wpath.display(),
            ids.dtype(),
            ids.shape(),
            spec.vocab_size
        );
        let ids: Vec<u32> = ids.data().chunks_exact(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        ensure!(ids.windows(2).all(|w| w[0] < w[1]), "{}: 'vocab.ids' is not strictly ascending", wpath.display());
        Ok((Self::from_parts(&spec, matrices, fc_bias, norm, device), spec, ids))
    }
}

impl FeatureHeadSpec {
    pub fn check(&self) -> Result<()> {
        ensure!(
            self.width > 0 && self.width.is_multiple_of(FEATURE_HEAD_DIM),
            "the feature head's width {} is not a positive multiple of {FEATURE_HEAD_DIM}",
            self.width
        );
        ensure!(
            self.hidden_size > 0 && self.intermediate > 0 && self.vocab_size > 0,
            "the feature head's sizes must be positive"
        );
        Ok(())
    }
}

/// `x * rsqrt(mean(x^2) + eps) * weight` over the last dimension.
fn rms_norm(x: Tensor<2>, weight: Tensor<1>, eps: f64) -> Tensor<2> {
    let inv = x.clone().square().mean_dim(1).add_scalar(eps).sqrt().recip();
    x * inv * weight.unsqueeze::<2>()
}

/// RoPE's cos and sin at `positions`, `[n, head_dim]` each (rotate-half layout).
fn rope(positions: &[usize], hd: usize, theta: f64, device: &Device) -> (Tensor<2>, Tensor<2>) {
    let half = hd / 2;
    let angles: Vec<f64> = positions
        .iter()
        .flat_map(|&p| (0..hd).map(move |j| p as f64 * theta.powf(-2.0 * (j % half) as f64 / hd as f64)))
        .collect();
    let table = |f: fn(f64) -> f64| {
        Tensor::<2>::from_data(
            TensorData::new(angles.iter().map(|&a| f(a) as f32).collect::<Vec<f32>>(), [positions.len(), hd]),
            device,
        )
    };
    (table(f64::cos), table(f64::sin))
}

/// RoPE applied to `[heads, n, head_dim]`.
fn rotate(x: Tensor<3>, cos: &Tensor<2>, sin: &Tensor<2>) -> Tensor<3> {
    let [h, n, d] = x.dims();
    let half = d / 2;
    let rotated =
        Tensor::cat(vec![x.clone().slice([0..h, 0..n, half..d]).neg(), x.clone().slice([0..h, 0..n, 0..half])], 2);
    x * cos.clone().unsqueeze::<3>() + rotated * sin.clone().unsqueeze::<3>()
}

/// The additive attention mask of a training batch: sequences of `lengths` packed in one row,
/// each position seeing the positions of its own sequence up to itself.
pub fn packed_causal_mask(lengths: &[usize], device: &Device) -> Tensor<2> {
    let n: usize = lengths.iter().sum();
    let mut mask = vec![f32::NEG_INFINITY; n * n];
    let mut start = 0;
    for &len in lengths {
        for i in start..start + len {
            mask[i * n + start..i * n + i + 1].iter_mut().for_each(|m| *m = 0.0);
        }
        start += len;
    }
    Tensor::from_data(TensorData::new(mask, [n, n]), device)
}

/// The additive mask of `n` new rows after `past` cached positions: row `i` sees positions
/// `..=past + i`.
pub fn causal_mask_after(past: usize, n: usize, device: &Device) -> Tensor<2> {
    let w = past + n;
    let mask: Vec<f32> =
        (0..n).flat_map(|i| (0..w).map(move |j| if j <= past + i { 0.0 } else { f32::NEG_INFINITY })).collect();
    Tensor::from_data(TensorData::new(mask, [n, w]), device)
}

/// Little-endian bytes of f32 tensor data.
fn f32_bytes(data: TensorData) -> Vec<u8> {
    data.try_to_vec::<f32>().expect("f32 weights").iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// Little-endian f16 bytes of f32 tensor data.
fn f16_bytes(data: TensorData) -> Vec<u8> {
    data.try_to_vec::<f32>().expect("f32 weights").iter().flat_map(|v| half::f16::from_f32(*v).to_le_bytes()).collect()
}
