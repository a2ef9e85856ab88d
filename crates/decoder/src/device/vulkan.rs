//! burn's wgpu runtime pinned to Vulkan: adapter listing, index checks, opening.
//!
//! `SPECX_WGPU_DEVICES_PER_ADAPTER=N` lists every adapter N times, each copy opened as an
//! independent logical device (its own queue, memory and compiled kernels). It exists to run
//! the multi-device code (a layer split, DSI's workers, EasySpec's placement) on a machine
//! with one adapter, such as CI's software Vulkan (lavapipe): two copies behave as two GPUs
//! that happen to share silicon. Every copy is then opened from wgpu handles specx creates
//! itself (burn addresses adapters by type and rank, so it cannot open one adapter twice).

use super::{AdapterInfo, DeviceName};
use anyhow::{Result, anyhow, bail, ensure};
use burn::tensor::wgpu::{WgpuBackend, WgpuSetup, wgpu};
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
    poll_once(instance.enumerate_adapters(wgpu::Backends::VULKAN))
        .map(|adapters| adapters.iter().map(|a| (a.get_info(), buffer_limit(&a.limits()))).collect())
        .unwrap_or_default()
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

/// The environment variable that lists each adapter several times (see the module's doc).
pub const DEVICES_PER_ADAPTER_VAR: &str = "SPECX_WGPU_DEVICES_PER_ADAPTER";

/// Copies per adapter: `SPECX_WGPU_DEVICES_PER_ADAPTER`, 1 when unset.
fn devices_per_adapter() -> Result<usize> {
    match std::env::var(DEVICES_PER_ADAPTER_VAR) {
        Err(_) => Ok(1),
        Ok(v) => match v.trim().parse::<usize>() {
            Ok(n @ 1..=16) => Ok(n),
            _ => bail!("{DEVICES_PER_ADAPTER_VAR}='{v}': expected a number of logical devices per adapter, 1 to 16"),
        },
    }
}

/// `wgpu:index` as (physical adapter index, copy) when adapters are listed `per` times.
fn physical(index: usize, per: usize) -> (usize, usize) {
    (index / per, index % per)
}

pub(super) fn adapters() -> Result<Vec<AdapterInfo>> {
    let per = devices_per_adapter()?;
    Ok(infos()
        .into_iter()
        .flat_map(|info| std::iter::repeat_n(info, per))
        .enumerate()
        .map(|(i, (a, limit))| AdapterInfo {
            device: DeviceName::Wgpu(i),
            name: if per == 1 {
                a.name
            } else {
                format!("{} (logical device {} of {per}, {DEVICES_PER_ADAPTER_VAR})", a.name, i % per)
            },
            kind: kind_name(a.device_type).into(),
            driver: format!("{} {}", a.driver, a.driver_info).trim().to_string(),
            max_buffer_bytes: limit,
        })
        .collect())
}

/// Checks `wgpu:index` without opening it: a driver exists and the index is in range.
pub(super) fn check(index: usize) -> Result<()> {
    let per = devices_per_adapter()?;
    if per == 1 {
        return adapter_kind(index).map(|_| ());
    }
    let count = infos().len();
    ensure!(count > 0, "device 'wgpu:{index}': no Vulkan driver found ({NO_DRIVER_HINT})");
    ensure!(
        index < count * per,
        "device 'wgpu:{index}' is out of range: {DEVICES_PER_ADAPTER_VAR}={per} lists this machine's {count} Vulkan adapter(s) as wgpu:0 to wgpu:{}",
        count * per - 1
    );
    Ok(())
}

const NO_DRIVER_HINT: &str = "wgpu is pinned to Vulkan and never falls back to OpenGL. Install the GPU's driver (NVIDIA's includes Vulkan), or Mesa's software Vulkan for testing: apt-get install mesa-vulkan-drivers libvulkan1";

/// burn's selector for the `index`-th Vulkan adapter: its type and its rank among the
/// adapters of that type (how burn counts), or a clear error.
fn adapter_kind(index: usize) -> Result<(DeviceKind, u64)> {
    let all: Vec<(wgpu::AdapterInfo, u64)> = infos();
    if all.is_empty() {
        bail!("device 'wgpu:{index}': no Vulkan driver found ({NO_DRIVER_HINT})");
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
    let per = devices_per_adapter()?;
    if per > 1 {
        check(index)?;
        let (adapter, _) = physical(index, per);
        let (device, limit) = open_logical(adapter).map_err(|e| anyhow!("device 'wgpu:{index}': {e:#}"))?;
        opened.insert(index, (device.clone(), limit));
        return Ok(device);
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

/// A new logical device on the `adapter`-th Vulkan adapter, registered with burn as its own
/// runtime, and its largest buffer. The device is requested as burn requests its own (every
/// feature the adapter has but mappable primary buffers, the adapter's limits, memory hints
/// for usage), so kernels compile and run as on a device burn opened.
fn open_logical(adapter: usize) -> Result<(Device, usize)> {
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
        backends: wgpu::Backends::VULKAN,
        ..wgpu::InstanceDescriptor::new_without_display_handle()
    });
    let adapter = poll_once(instance.enumerate_adapters(wgpu::Backends::VULKAN))
        .and_then(|mut all| (adapter < all.len()).then(|| all.swap_remove(adapter)))
        .ok_or_else(|| anyhow!("Vulkan adapter {adapter} is gone"))?;
    let limit = usize::try_from(buffer_limit(&adapter.limits())).unwrap_or(usize::MAX);
    let (device, queue) = poll_once(adapter.request_device(&wgpu::DeviceDescriptor {
        label: Some("specx logical device"),
        required_features: adapter.features().difference(wgpu::Features::MAPPABLE_PRIMARY_BUFFERS),
        required_limits: adapter.limits(),
        memory_hints: wgpu::MemoryHints::MemoryUsage,
        ..Default::default()
    }))
    .ok_or_else(|| anyhow!("requesting a logical device did not complete at once"))?
    .map_err(|e| anyhow!("requesting a logical device: {e}"))?;
    let setup = WgpuSetup { instance, adapter, device, queue, backend: wgpu::Backend::Vulkan };
    let device = Device::wgpu_options().setup(setup).init().map_err(|e| anyhow!("{e}"))?;
    Ok((device, limit))
}

/// The value of a future that native wgpu completes immediately, or `None` if it did not.
fn poll_once<T>(future: impl std::future::Future<Output = T>) -> Option<T> {
    let mut future = std::pin::pin!(future);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match future.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(v) => Some(v),
        std::task::Poll::Pending => None,
    }
}
