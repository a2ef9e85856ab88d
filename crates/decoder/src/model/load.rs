//! Building a [`Transformer`] from HF-named weights, one tensor at a time, and how GGUF
//! matrices are kept ([`WeightMode`]).

use super::Transformer;
use super::gpu_blocks::{DeviceBlocks, on_device};
use super::layers::{Attention, Block, Embedding, Mlp, RmsNorm};
use super::linear::{Linear, Projection, check_shape, native_matrix, upload_matrix};
use crate::config::ModelConfig;
use crate::layer_groups::LayerGroups;
use crate::weights::{HostTensor, WeightSource};
use anyhow::{Context, Result, bail};
use burn::tensor::{Device, Tensor, TensorData};
use std::sync::Arc;

/// How a model's GGUF weight matrices are kept in memory. On a GPU, `native` and `q8` both keep
/// the blocks on the device, decoded inside the product's kernel with f32 activations (the
/// integer activations of `q8` are a CPU path), and keep a safetensors model's F16/BF16
/// matrices in 16 bits the same way; `f32` uploads them all as f32.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WeightMode {
    /// Dequantized to f32 on load: the reference path, and on the CPU the only one for HF
    /// safetensors models (on a GPU, their F16/BF16 matrices otherwise stay 16-bit, as blocks).
    F32,
    /// In their GGUF block formats, decoded inside the few-row kernel ([`crate::quant`]):
    /// 4-8x fewer bytes per token, results bit-identical to the f32 path (the same values go
    /// through the same kernel, or for long prefills through the same gemm after decoding the
    /// matrix for the call). Matrices whose type has no native kernel (and F32 tensors) take the
    /// f32 path. Applies to GGUF files (on a GPU: blocks decoded in the device's product, see
    /// above). The choice where data must not depend on the weight path.
    Native,
    /// In their GGUF block formats, multiplied by integer dot products with each activation
    /// row quantized to 8 bits (Q8_K for K-quants, Q8_0 for the 32-wide formats), as llama.cpp
    /// does ([`crate::quant::int`]): not bit-identical to `f32`/`native` (the activations are
    /// rounded; docs/performance gives perplexity and KL against `native`), but row-invariant. Matrices
    /// whose type has no integer kernel take the `native` path (one log line each). The
    /// default: 1.8-2.7x `native`'s decode speed for +0.11% perplexity.
    #[default]
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

/// Moves a small host tensor (norm weights, biases) to the device.
pub(super) fn upload<const D: usize>(
    t: HostTensor,
    name: &str,
    shape: [usize; D],
    device: &Device,
) -> Result<Tensor<D>> {
    check_shape(&t, name, &shape)?;
    Ok(Tensor::from_data(TensorData::new(t.data, shape), device))
}

impl Transformer {
    /// Builds the model from HF-named weights, one tensor at a time. `mode` chooses how GGUF
    /// matrices are kept (ignored for sources without blocks).
    pub fn load(cfg: ModelConfig, src: &dyn WeightSource, device: &Device, mode: WeightMode) -> Result<Self> {
        Self::load_split(cfg, src, std::slice::from_ref(device), mode)
    }

    /// [`Transformer::load`] with the layers in contiguous ranges over `devices` (pipeline
    /// placement, as HF's `device_map="auto"`): range j of [`layer_ranges`] on `devices[j]`,
    /// each layer's weights and KV cache on its device, the embedding on the first device and
    /// the final norm and head on the last; the forward moves the activations from range to
    /// range. Each tensor is read once and placed directly on its device (a model too large
    /// for one device never has to fit on one).
    pub fn load_split(cfg: ModelConfig, src: &dyn WeightSource, devices: &[Device], mode: WeightMode) -> Result<Self> {
        cfg.validate()?;
        let ranges = layer_ranges(cfg.num_hidden_layers, devices.len())?;
        // Layer i on devices[range of i]: one entry per range, even where two ranges name the
        // same device (tests split over the CPU twice to exercise the bookkeeping).
        let layer_device: Vec<usize> =
            ranges.iter().enumerate().flat_map(|(j, r)| std::iter::repeat_n(j, r.len())).collect();
        let head = devices.len() - 1;
        // GGUF blocks are kept in every mode but f32: on the CPU for the native and integer
        // kernels, on a GPU for the device kernels.
        let blocks_kept = mode != WeightMode::F32;
        let int_on = |device: &Device| mode == WeightMode::Q8 && *device == Device::flex();
        let (hd, inter) = (cfg.hidden_size, cfg.intermediate_size);
        let (qd, kvd) = (cfg.num_attention_heads * cfg.head_dim, cfg.num_key_value_heads * cfg.head_dim);
        let get = |name: &str| src.load(name).with_context(|| format!("loading weight '{name}'"));
        // The f32 projection of the row-wise concatenation of the named matrices.
        let dense = |names: &[(&str, usize)], inp: usize, device: &Device| -> Result<Projection> {
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
        // Blocks where possible, else f32. A fallback is logged once per set of types.
        let reported = std::cell::RefCell::new(Vec::new());
        let projection = |names: &[(&str, usize)], inp: usize, device: &Device| -> Result<Projection> {
            let int = int_on(device);
            let q = if blocks_kept { native_matrix(src, names, inp, *device != Device::flex())? } else { None };
            match q {
                Some(q) if *device != Device::flex() => {
                    let types: Vec<_> = q.parts().iter().map(|p| p.ty).collect();
                    if types.iter().all(|&ty| on_device(ty)) {
                        return Ok(Projection::Blocks(Arc::new(DeviceBlocks::upload(&q, device)?)));
                    }
                    if !reported.borrow().contains(&types) {
                        eprintln!(
                            "specx: '{}' is stored as {types:?}, which has no device kernel: using f32 weights for it and every other such matrix",
                            names[0].0
                        );
                        reported.borrow_mut().push(types);
                    }
                    dense(names, inp, device)
                }
                Some(q) if int && q.has_int_kernel() => Ok(Projection::Int(Arc::new(q.into_int_layout()))),
                Some(q) => {
                    let types: Vec<_> = q.parts().iter().map(|p| p.ty).collect();
                    if int && !reported.borrow().contains(&types) {
                        eprintln!(
                            "specx: '{}' is stored as {types:?}, which has no integer kernel: using native weights for it and every other such matrix",
                            names[0].0
                        );
                        reported.borrow_mut().push(types);
                    }
                    Ok(Projection::Native(Arc::new(q)))
                }
                None => dense(names, inp, device),
            }
        };
        let linear = |names: &[(&str, usize)], inp: usize, bias: bool, device: &Device| -> Result<Linear> {
            let proj = projection(names, inp, device)?;
            if !bias {
                return Ok(Linear { proj, bias: None, host_bias: None });
            }
            let mut data = Vec::new();
            for &(name, rows) in names {
                let b = get(&format!("{name}.bias"))?;
                check_shape(&b, &format!("{name}.bias"), &[rows])?;
                data.extend_from_slice(&b.data);
            }
            let host_bias = proj.on_host().then(|| data.clone());
            let len = data.len();
            let bias = upload(HostTensor { shape: vec![len], data }, "bias", [len], device)?;
            Ok(Linear { proj, bias: Some(bias), host_bias })
        };
        let norm_of = |name: &str, width: usize, device: &Device| -> Result<RmsNorm> {
            Ok(RmsNorm { weight: upload(get(name)?, name, [width], device)?, eps: cfg.rms_norm_eps })
        };
        let norm = |name: &str, device: &Device| norm_of(name, hd, device);
        let embed_proj = projection(&[("model.embed_tokens", cfg.vocab_size)], hd, &devices[0])?;
        let embed = match &embed_proj {
            Projection::Native(q) | Projection::Int(q) => Embedding::Native(q.clone()),
            Projection::Host { weight, .. } => Embedding::Dense(weight.clone()),
            Projection::Device(blocks) if blocks.len() == 1 => Embedding::Dense(blocks[0].clone()),
            Projection::Device(blocks) => Embedding::Blocks(blocks.clone()),
            Projection::Blocks(q) => Embedding::DeviceBlocks(q.clone()),
        };
        let mut blocks = Vec::with_capacity(cfg.num_hidden_layers);
        for i in 0..cfg.num_hidden_layers {
            let p = format!("model.layers.{i}");
            let bias = cfg.attention_bias;
            let device = &devices[layer_device[i]];
            blocks.push(Block {
                attn_norm: norm(&format!("{p}.input_layernorm.weight"), device)?,
                attn: Attention {
                    qkv: linear(
                        &[
                            (&format!("{p}.self_attn.q_proj"), qd),
                            (&format!("{p}.self_attn.k_proj"), kvd),
                            (&format!("{p}.self_attn.v_proj"), kvd),
                        ],
                        hd,
                        bias,
                        device,
                    )?,
                    o: linear(&[(&format!("{p}.self_attn.o_proj"), hd)], qd, false, device)?,
                    heads: cfg.num_attention_heads,
                    kv_heads: cfg.num_key_value_heads,
                    head_dim: cfg.head_dim,
                    qk_norm: if cfg.qk_norm {
                        Some((
                            norm_of(&format!("{p}.self_attn.q_norm.weight"), cfg.head_dim, device)?,
                            norm_of(&format!("{p}.self_attn.k_norm.weight"), cfg.head_dim, device)?,
                        ))
                    } else {
                        None
                    },
                },
                device: layer_device[i],
                home: layer_device[i],
                mlp_norm: norm(&format!("{p}.post_attention_layernorm.weight"), device)?,
                mlp: Mlp {
                    gate_up: linear(
                        &[(&format!("{p}.mlp.gate_proj"), inter), (&format!("{p}.mlp.up_proj"), inter)],
                        hd,
                        false,
                        device,
                    )?,
                    down: linear(&[(&format!("{p}.mlp.down_proj"), hd)], inter, false, device)?,
                    intermediate: inter,
                },
            });
        }
        let last = &devices[head];
        let final_norm = norm("model.norm.weight", last)?;
        let lm_head = if cfg.tie_word_embeddings && head == 0 {
            Linear { proj: embed_proj, bias: None, host_bias: None }
        } else if cfg.tie_word_embeddings {
            // The tied table again, on the head's device (the embedding stays on the first).
            Linear {
                proj: projection(&[("model.embed_tokens", cfg.vocab_size)], hd, last)?,
                bias: None,
                host_bias: None,
            }
        } else {
            linear(&[("lm_head", cfg.vocab_size)], hd, false, last)?
        };
        let sequential = LayerGroups::sequential(blocks.len());
        Ok(Self {
            cfg,
            embed,
            blocks,
            norm: final_norm,
            lm_head,
            sequential,
            devices: devices.to_vec(),
            head,
            vocab_subset: None,
            padded_vocab: None,
            moves: Default::default(),
        })
    }
}

/// The contiguous layer ranges of a model of `layers` layers split over `parts` devices: as
/// equal as possible, the earlier ranges one layer longer where it does not divide.
pub fn layer_ranges(layers: usize, parts: usize) -> Result<Vec<std::ops::Range<usize>>> {
    if parts == 0 || parts > layers {
        bail!(
            "a model of {layers} layers cannot be split over {parts} device(s): each device needs at least one layer"
        );
    }
    let (base, extra) = (layers / parts, layers % parts);
    let mut start = 0;
    Ok((0..parts)
        .map(|j| {
            let len = base + usize::from(j < extra);
            start += len;
            start - len..start
        })
        .collect())
}
