//! EasySpec's layer parallelism across devices: the attention layers of a draft model (their
//! weights, input norms and KV cache) placed round-robin on several devices, so that the
//! attentions of a fuzzy group run on different devices at once (the paper's Figure 1). The
//! embeddings, MLPs, final norm and head stay on the model's own device, where each attention's
//! output returns; the paper instead runs a copy of every MLP on every device to save that
//! transfer, which changes where the numbers are computed, not which.

use super::Transformer;
use super::gpu_blocks::{DeviceBlocks, on_device};
use super::layers::{Attention, RmsNorm};
use super::linear::{Linear, Projection, upload_matrix};
use crate::quant::QuantMatrix;
use crate::weights::HostTensor;
use anyhow::{Result, ensure};
use burn::tensor::Device;
use std::sync::Arc;

impl Linear {
    /// The same map on `device`, as [`Transformer::load`] would have stored it there: GGUF
    /// blocks stay blocks (the CPU's native kernel, or a GPU's), f32 stays f32. A map already
    /// on the CPU device stays as it is when moved to the CPU device.
    fn to_device(&self, device: &Device) -> Result<Linear> {
        let to_host = *device == Device::flex();
        if self.proj.on_host() && to_host {
            return Ok(self.clone());
        }
        let proj = match &self.proj {
            Projection::Native(q) | Projection::Int(q) => blocks_on(q.as_ref().clone(), device)?,
            Projection::Blocks(q) => blocks_on(q.to_host()?, device)?,
            Projection::Host { host, .. } => f32_on(host.rows, host.as_f32().to_vec(), device)?,
            Projection::Device(blocks) => {
                let rows = blocks.iter().map(|b| b.dims()[0]).sum();
                let data = blocks
                    .iter()
                    .flat_map(|b| b.clone().into_data().try_into_vec::<f32>().expect("f32 weights"))
                    .collect();
                f32_on(rows, data, device)?
            }
        };
        let bias = self.bias.as_ref().map(|b| b.clone().to_device(device));
        let host_bias = match proj.on_host() {
            true => bias.as_ref().map(|b| b.clone().into_data().try_into_vec::<f32>().expect("f32 bias")),
            false => None,
        };
        Ok(Linear { proj, bias, host_bias })
    }
}

/// GGUF blocks on `device`: the native kernel's on the CPU, a GPU's where it reads every type,
/// else f32.
fn blocks_on(q: QuantMatrix, device: &Device) -> Result<Projection> {
    if *device == Device::flex() {
        return Ok(Projection::Native(Arc::new(q)));
    }
    if q.parts().iter().all(|p| on_device(p.ty)) {
        return Ok(Projection::Blocks(Arc::new(DeviceBlocks::upload(&q, device)?)));
    }
    f32_on(q.rows(), q.to_f32(), device)
}

/// An f32 matrix of `rows` rows on `device`.
fn f32_on(rows: usize, data: Vec<f32>, device: &Device) -> Result<Projection> {
    let cols = data.len() / rows;
    upload_matrix(HostTensor { shape: vec![rows, cols], data }, "placed projection", [rows, cols], device)
}

impl Attention {
    fn to_device(&self, device: &Device) -> Result<Attention> {
        Ok(Attention {
            qkv: self.qkv.to_device(device)?,
            o: self.o.to_device(device)?,
            heads: self.heads,
            kv_heads: self.kv_heads,
            head_dim: self.head_dim,
            qk_norm: self.qk_norm.as_ref().map(|(q, k)| (q.to_device(device), k.to_device(device))),
        })
    }
}

impl RmsNorm {
    fn to_device(&self, device: &Device) -> RmsNorm {
        RmsNorm { weight: self.weight.clone().to_device(device), eps: self.eps }
    }
}

impl Transformer {
    /// Places layer `i`'s attention (input norm, projections and its cache in
    /// [`Transformer::new_cache`]) on `devices[i % devices.len()]`: any `devices.len()`
    /// consecutive layers, so every fuzzy group no longer than the list, have their
    /// attentions on different devices, whatever the layer strategy. Caches made before the
    /// call no longer fit the model.
    pub fn place_attention(mut self, devices: &[Device]) -> Result<Self> {
        ensure!(!devices.is_empty(), "placing attention layers needs at least one device");
        ensure!(
            !self.is_split(),
            "EasySpec's attention placement needs a model on one device; this one is split in layer ranges over several"
        );
        for (i, block) in self.blocks.iter_mut().enumerate() {
            let device = &devices[i % devices.len()];
            let index = match self.devices.iter().position(|d| d == device) {
                Some(index) => index,
                None => {
                    self.devices.push(device.clone());
                    self.devices.len() - 1
                }
            };
            if index != block.device {
                block.attn = block.attn.to_device(device)?;
                block.attn_norm = block.attn_norm.to_device(device);
                block.device = index;
            }
        }
        Ok(self)
    }

    /// Whether some attention layer lives on another device than the model
    /// ([`Transformer::place_attention`]).
    pub fn is_placed(&self) -> bool {
        self.blocks.iter().any(|b| b.device != 0)
    }
}
