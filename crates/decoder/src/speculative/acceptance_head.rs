//! The SpecDec++ acceptance head, shared by the trainer and the decoder: input the draft's
//! final hidden state (beyond the paper, optionally followed by three statistics of the draft's
//! distribution the scored token was drawn from: its probability, the entropy and the top-2
//! margin, see [`HeadSpec::draft_stats`]), `depth` residual blocks `x + SiLU(W x + b)` (optionally one block's
//! weights tied across all of them, as the official code does), then a linear map to one
//! logit; `sigmoid(logit)` = predicted P(candidate accepted).
//!
//! Checkpoint directory (DESIGN.md): `head.json` ([`HeadSpec`]) and `head.safetensors` with
//! `blocks.{i}.weight` (`[out, in]`, PyTorch layout), `blocks.{i}.bias`, `out.weight`
//! (`[1, hidden]`), `out.bias` (`[1]`); tied heads store one block.

use crate::fsutil::write_atomic;
use anyhow::{Context, Result, bail, ensure};
use burn::module::{Module, Param};
use burn::nn::Linear;
use burn::tensor::activation::{sigmoid, silu};
use burn::tensor::{Device, Tensor, TensorData};
use safetensors::SafeTensors;
use safetensors::tensor::{Dtype, TensorView};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Architecture and provenance of a head (`head.json`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HeadSpec {
    pub hidden_size: usize,
    /// Residual blocks; 0 means a linear head.
    pub depth: usize,
    /// One block's weights used for all `depth` blocks.
    pub tied: bool,
    /// sha256 of the draft model file whose hidden states the head reads.
    pub draft_model_sha256: Option<String>,
    /// The draft transform it was trained with ([`crate::DraftTransform::identity`]); absent:
    /// the draft as loaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draft_transform: Option<String>,
    /// The training configuration, recorded as given.
    #[serde(default)]
    pub training: serde_json::Value,
    /// Beyond the paper: the input is the hidden state followed by
    /// [`super::DraftStats::head_inputs`] of the draft distribution the scored token was drawn
    /// from (its probability at temperature 1, the entropy in nats, the top-2 margin).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub draft_stats: bool,
}

impl HeadSpec {
    /// Width of the head's input.
    pub fn input_size(&self) -> usize {
        self.hidden_size + if self.draft_stats { super::policy::stats::HEAD_STAT_INPUTS } else { 0 }
    }
}

/// The head module (a burn `Module`, so the trainer can optimise it).
#[derive(Module, Debug)]
pub struct AcceptanceHead {
    blocks: Vec<Linear>,
    out: Linear,
    depth: usize,
    /// The draft's hidden size (the input is wider for a head that reads statistics).
    hidden: usize,
}

impl AcceptanceHead {
    /// A head initialised as PyTorch's `nn.Linear` does (weights and biases uniform in
    /// +-1/sqrt(fan_in)) from its own generator seeded with `seed`: the same seed gives the
    /// same head whatever else runs in the process (burn's device RNG is shared global state).
    pub fn init_seeded(hidden_size: usize, depth: usize, tied: bool, seed: u64, device: &Device) -> Self {
        Self::init_seeded_with_inputs(hidden_size, 0, depth, tied, seed, device)
    }

    /// [`AcceptanceHead::init_seeded`] for an input of the hidden state and `extra` more
    /// values (the draft's statistics: [`super::policy::stats::HEAD_STAT_INPUTS`]).
    pub fn init_seeded_with_inputs(
        hidden: usize,
        extra: usize,
        depth: usize,
        tied: bool,
        seed: u64,
        device: &Device,
    ) -> Self {
        let hidden_size = hidden + extra;
        use rand::{RngExt, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let bound = 1.0 / (hidden_size as f32).sqrt();
        let mut linear = |out: usize| {
            let mut uniform =
                |n: usize| (0..n).map(|_| bound * (2.0 * rng.random::<f32>() - 1.0)).collect::<Vec<f32>>();
            let w = Tensor::<2>::from_data(TensorData::new(uniform(out * hidden_size), [hidden_size, out]), device);
            let b = Tensor::<1>::from_data(TensorData::new(uniform(out), [out]), device);
            Linear { weight: Param::from_tensor(w), bias: Some(Param::from_tensor(b)) }
        };
        let n_blocks = if tied { depth.min(1) } else { depth };
        let blocks = (0..n_blocks).map(|_| linear(hidden_size)).collect();
        Self { blocks, out: linear(1), depth, hidden }
    }

    /// The draft's hidden size this head reads.
    pub fn hidden_width(&self) -> usize {
        self.hidden
    }

    pub fn depth(&self) -> usize {
        self.depth
    }

    /// Whether the blocks share one weight; heads of depth 0 or 1 are both tied and untied.
    pub fn tied(&self) -> bool {
        self.blocks.len() < self.depth
    }

    /// Width of the head's input (the draft's hidden size, plus the statistics' for a head
    /// that reads them).
    pub fn input_size(&self) -> usize {
        self.out.weight.val().dims()[0]
    }

    /// Logits `[n]` for hidden states `[n, hidden]`.
    pub fn forward(&self, x: Tensor<2>) -> Tensor<1> {
        let mut x = x;
        for i in 0..self.depth {
            let block = &self.blocks[i.min(self.blocks.len() - 1)];
            x = x.clone() + silu(block.forward(x));
        }
        let [n, _] = x.dims();
        self.out.forward(x).reshape([n])
    }

    /// Every parameter's id (blocks' weight and bias, then the output layer's), in that order.
    /// Optimiser state is keyed by these ids, so a resumed training run restores them with
    /// [`AcceptanceHead::with_param_ids`] after loading the weights.
    pub fn param_ids(&self) -> Vec<u64> {
        self.linears()
            .flat_map(|l| [l.weight.id.val(), l.bias.as_ref().expect("head linears have biases").id.val()])
            .collect()
    }

    /// The same head with the parameter ids `ids` (as returned by [`AcceptanceHead::param_ids`]).
    pub fn with_param_ids(mut self, ids: &[u64]) -> Result<Self> {
        ensure!(
            ids.len() == 2 * (self.blocks.len() + 1),
            "{} parameter ids for a head with {} parameters",
            ids.len(),
            2 * (self.blocks.len() + 1)
        );
        let mut it = ids.iter();
        for l in self.blocks.iter_mut().chain([&mut self.out]) {
            l.weight.id = (*it.next().unwrap()).into();
            l.bias.as_mut().expect("head linears have biases").id = (*it.next().unwrap()).into();
        }
        Ok(self)
    }

    fn linears(&self) -> impl Iterator<Item = &Linear> {
        self.blocks.iter().chain([&self.out])
    }

    /// Predicted acceptance probability for one input (a hidden state, and the statistics for
    /// a head that reads them).
    pub fn accept_probability(&self, hidden: &[f32]) -> Result<f64> {
        ensure!(
            hidden.len() == self.input_size(),
            "head expects inputs of width {}, got {}",
            self.input_size(),
            hidden.len()
        );
        let device = self.out.weight.val().device();
        let x = Tensor::<2>::from_data(TensorData::new(hidden.to_vec(), [1, hidden.len()]), &device);
        let p = sigmoid(self.forward(x)).into_data().try_to_vec::<f32>().map_err(|e| anyhow::anyhow!("{e:?}"))?;
        Ok(p[0] as f64)
    }

    /// Writes `head.json` and `head.safetensors` into `dir` (atomically, file by file).
    pub fn save(&self, dir: &Path, spec: &HeadSpec) -> Result<()> {
        ensure!(
            spec.hidden_size == self.hidden
                && spec.input_size() == self.input_size()
                && spec.depth == self.depth
                && (self.depth <= 1 || spec.tied == self.tied()),
            "spec does not describe this head"
        );
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut tensors: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
        let linears = self
            .blocks
            .iter()
            .enumerate()
            .map(|(i, l)| (format!("blocks.{i}"), l))
            .chain([("out".to_string(), &self.out)]);
        for (name, l) in linears {
            // burn stores [in, out]; the file uses PyTorch's [out, in].
            let w = l.weight.val().transpose();
            let b = l.bias.as_ref().expect("head linears have biases").val();
            tensors.push((format!("{name}.weight"), w.dims().to_vec(), f32_bytes(w.into_data())));
            tensors.push((format!("{name}.bias"), b.dims().to_vec(), f32_bytes(b.into_data())));
        }
        let views: Vec<(String, TensorView)> = tensors
            .iter()
            .map(|(n, shape, b)| Ok((n.clone(), TensorView::new(Dtype::F32, shape.clone(), b)?)))
            .collect::<Result<_, safetensors::SafeTensorError>>()?;
        let bytes = safetensors::serialize(views, None)?;
        write_atomic(&dir.join("head.safetensors"), &bytes)?;
        write_atomic(&dir.join("head.json"), serde_json::to_string_pretty(spec)?.as_bytes())
    }

    /// Reads a checkpoint directory written by [`AcceptanceHead::save`].
    pub fn load(dir: &Path, device: &Device) -> Result<(Self, HeadSpec)> {
        let spec_path = dir.join("head.json");
        let spec: HeadSpec = serde_json::from_str(
            &std::fs::read_to_string(&spec_path).with_context(|| format!("reading {}", spec_path.display()))?,
        )
        .with_context(|| format!("parsing {}", spec_path.display()))?;
        let wpath = dir.join("head.safetensors");
        let bytes = std::fs::read(&wpath).with_context(|| format!("reading {}", wpath.display()))?;
        let st = SafeTensors::deserialize(&bytes)
            .map_err(|e| anyhow::anyhow!("{}: malformed safetensors: {e}", wpath.display()))?;
        let h = spec.input_size();
        let get = |name: &str, shape: &[usize]| -> Result<Vec<f32>> {
            let v = st.tensor(name).map_err(|e| anyhow::anyhow!("{}: tensor '{name}': {e}", wpath.display()))?;
            if v.dtype() != Dtype::F32 || v.shape() != shape {
                bail!(
                    "{}: tensor '{name}' is {:?} {:?}, expected F32 {shape:?}",
                    wpath.display(),
                    v.dtype(),
                    v.shape()
                );
            }
            Ok(v.data().chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect())
        };
        let linear = |name: &str, out: usize| -> Result<Linear> {
            let w = get(&format!("{name}.weight"), &[out, h])?;
            let b = get(&format!("{name}.bias"), &[out])?;
            let w = Tensor::<2>::from_data(TensorData::new(w, [out, h]), device).transpose();
            let b = Tensor::<1>::from_data(TensorData::new(b, [out]), device);
            Ok(Linear { weight: Param::from_tensor(w), bias: Some(Param::from_tensor(b)) })
        };
        let n_blocks = if spec.tied { spec.depth.min(1) } else { spec.depth };
        let blocks = (0..n_blocks).map(|i| linear(&format!("blocks.{i}"), h)).collect::<Result<Vec<_>>>()?;
        let head = Self { blocks, out: linear("out", 1)?, depth: spec.depth, hidden: spec.hidden_size };
        Ok((head, spec))
    }
}

/// Little-endian bytes of f32 tensor data.
fn f32_bytes(data: TensorData) -> Vec<u8> {
    data.try_to_vec::<f32>().expect("f32 weights").iter().flat_map(|v| v.to_le_bytes()).collect()
}
