//! burn's wgpu runtime pinned to Vulkan: adapter listing, index checks, opening.

use super::{AdapterInfo, DeviceName};
use anyhow::{Result, anyhow, bail};
use burn::tensor::wgpu::{WgpuBackend, wgpu};
use burn::tensor::{Device, DeviceKind};
use std::collections::HashMap;
use std::sync::Mutex;

/// Devices opened so far, by adapter index (burn refuses to initialise a runtime twice),
/// with their largest buffer.
static OPENED: Mutex<Option<HashMap<usize, (Device, usize)>>> = Mutex::new(None);

/// The largest storage buffer of an adapter: what burn's wgpu runtime allocates at most
/// (it requests the adapter's own limits).
fn buffer_limit(l: &wgpu::Limits) -> u64 {
    l.max_storage_buffer_binding_size.min(l.max_buffer_size)
}

pub(super) fn max_buffer_bytes(device: &Device) -> Option<usize> {
    let opened = OPENED.lock().unwrap_or_else(|e| e.into_inner());
    opened.as_ref()?.values().find(|(d, _)| d == device).map(|&(_, limit)| limit)
}

/// Vulkan adapter infos and limits in the loader's order. wgpu's enumeration is a future
/// that native backends complete immediately, so it is polled once.
fn infos() -> Vec<(wgpu::AdapterInfo, u64)> {
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
        backends: wgpu::Backends::VULKAN,
        ..wgpu::InstanceDescriptor::new_without_display_handle()
    });
    let mut future = std::pin::pin!(instance.enumerate_adapters(wgpu::Backends::VULKAN));
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match future.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(adapters) => {
            adapters.iter().map(|a| (a.get_info(), buffer_limit(&a.limits()))).collect()
        }
        std::task::Poll::Pending => Vec::new(),
    }
}

fn kind_name(t: wgpu::DeviceType) -> &'static str {
    match t {
        wgpu::DeviceType::DiscreteGpu => "discrete GPU",
        wgpu::DeviceType::IntegratedGpu => "integrated GPU",
        wgpu::DeviceType::VirtualGpu => "virtual GPU",
        wgpu::DeviceType::Cpu => "CPU (software Vulkan)",
        wgpu::DeviceType::Other => "other",
    }
}

pub(super) fn adapters() -> Result<Vec<AdapterInfo>> {
    Ok(infos()
        .into_iter()
        .enumerate()
        .map(|(i, (a, limit))| AdapterInfo {
            device: DeviceName::Wgpu(i),
            name: a.name,
            kind: kind_name(a.device_type).into(),
            driver: format!("{} {}", a.driver, a.driver_info).trim().to_string(),
            max_buffer_bytes: limit,
        })
        .collect())
}

/// burn's selector for the `index`-th Vulkan adapter: its type and its rank among the
/// adapters of that type (how burn counts), or a clear error.
pub(super) fn adapter_kind(index: usize) -> Result<(DeviceKind, u64)> {
    let all: Vec<(wgpu::AdapterInfo, u64)> = infos();
    if all.is_empty() {
        bail!(
            "device 'wgpu:{index}': no Vulkan driver found (wgpu is pinned to Vulkan and never falls back to OpenGL). Install the GPU's driver (NVIDIA's includes Vulkan), or Mesa's software Vulkan for testing: apt-get install mesa-vulkan-drivers libvulkan1"
        );
    }
    let Some((info, limit)) = all.get(index) else {
        let list: Vec<String> = all
            .iter()
            .enumerate()
            .map(|(i, (a, _))| format!("wgpu:{i} {} ({})", a.name, kind_name(a.device_type)))
            .collect();
        bail!(
            "device 'wgpu:{index}' is out of range: this machine has {} Vulkan adapter(s): {}",
            all.len(),
            list.join(", ")
        );
    };
    let rank = all[..index].iter().filter(|(a, _)| a.device_type == info.device_type).count();
    let kind = match info.device_type {
        wgpu::DeviceType::DiscreteGpu => DeviceKind::DiscreteGpu(rank),
        wgpu::DeviceType::IntegratedGpu => DeviceKind::IntegratedGpu(rank),
        wgpu::DeviceType::VirtualGpu => DeviceKind::VirtualGpu(rank),
        wgpu::DeviceType::Cpu if rank == 0 => DeviceKind::Cpu,
        wgpu::DeviceType::Cpu => bail!(
            "device 'wgpu:{index}' is a second software (CPU) Vulkan adapter, which burn cannot address; use the first"
        ),
        wgpu::DeviceType::Other => bail!("device 'wgpu:{index}' ({}) is of no known adapter type", info.name),
    };
    Ok((kind, *limit))
}

pub(super) fn open(index: usize) -> Result<Device> {
    let mut opened = OPENED.lock().unwrap_or_else(|e| e.into_inner());
    let opened = opened.get_or_insert_with(HashMap::new);
    if let Some((d, _)) = opened.get(&index) {
        return Ok(d.clone());
    }
    let (kind, limit) = adapter_kind(index)?;
    let device = Device::wgpu_options()
        .device_kind(kind)
        .graphics_api(WgpuBackend::Vulkan)
        .init()
        .map_err(|e| anyhow!("device 'wgpu:{index}': {e}"))?;
    opened.insert(index, (device.clone(), usize::try_from(limit).unwrap_or(usize::MAX)));
    Ok(device)
}
