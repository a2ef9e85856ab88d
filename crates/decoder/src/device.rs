//! Device names (`cpu`, `wgpu[:N]`, `cuda[:N]`) as users write them on the command line and in
//! configs, parsed and checked before any model loads, and opened into burn devices.
//!
//! `wgpu` is burn's wgpu runtime pinned to Vulkan: `wgpu:N` is the N-th Vulkan adapter in the
//! order the Vulkan loader lists them (`specx devices` prints the list). Pinning matters: left to
//! choose, burn falls back to OpenGL when no Vulkan driver is installed, which is a different
//! compiler and a silent change of device. Names parse in every build, so a config that names a
//! GPU is checked (and fails with a clear message) in a CPU-only build too.

use anyhow::{bail, ensure, Result};
use burn::tensor::Device;
use std::fmt;
use std::str::FromStr;

/// A compute device as named by the user.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeviceName {
    /// burn-flex on the host (multi-threaded, SIMD), with specx's own few-row kernels.
    Cpu,
    /// The N-th Vulkan adapter through burn's wgpu runtime (builds with `--features wgpu`).
    Wgpu(usize),
    /// The N-th CUDA device (builds with `--features cuda`, which needs network access).
    Cuda(usize),
}

impl fmt::Display for DeviceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Cpu => f.write_str("cpu"),
            Self::Wgpu(i) => write!(f, "wgpu:{i}"),
            Self::Cuda(i) => write!(f, "cuda:{i}"),
        }
    }
}

impl FromStr for DeviceName {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> Result<Self> {
        let (kind, index) = match s.trim().split_once(':') {
            Some((kind, index)) => {
                let i = index.parse::<usize>().map_err(|_| anyhow::anyhow!("device '{s}': '{index}' is not a device index (0, 1, ...)"))?;
                (kind, Some(i))
            }
            None => (s.trim(), None),
        };
        match (kind, index) {
            ("cpu", None) => Ok(Self::Cpu),
            ("cpu", Some(_)) => bail!("device '{s}': the CPU takes no index (write 'cpu')"),
            ("wgpu", i) => Ok(Self::Wgpu(i.unwrap_or(0))),
            ("cuda", i) => Ok(Self::Cuda(i.unwrap_or(0))),
            _ => bail!("unknown device '{s}': expected 'cpu', 'wgpu[:N]' (Vulkan) or 'cuda[:N]'"),
        }
    }
}

/// Parses a list of device names (`--devices cpu,wgpu:0`, or a config array): at least one, and
/// none twice (two workers on one device would share it, not run in parallel).
pub fn parse_device_list<S: AsRef<str>>(names: &[S]) -> Result<Vec<DeviceName>> {
    ensure!(!names.is_empty(), "a device list needs at least one device");
    let mut out: Vec<DeviceName> = Vec::with_capacity(names.len());
    for name in names {
        let d: DeviceName = name.as_ref().parse()?;
        ensure!(!out.contains(&d), "device '{d}' is listed twice: each worker needs a device of its own");
        out.push(d);
    }
    Ok(out)
}

/// Checks that this build and machine can open `name`, without opening it: the backend is
/// compiled in, and for wgpu a Vulkan driver exists and the index is in range. Callers run
/// this before loading models so that a wrong device costs nothing.
pub fn check_device(name: DeviceName) -> Result<()> {
    match name {
        DeviceName::Cpu => Ok(()),
        DeviceName::Wgpu(index) => wgpu::adapter_kind(index).map(|_| ()),
        DeviceName::Cuda(_) => {
            ensure!(cfg!(feature = "cuda"), "device '{name}' needs a build with `--features cuda` (see the README's GPU section: the CUDA build needs network access; `wgpu` runs NVIDIA GPUs through Vulkan offline)");
            Ok(())
        }
    }
}

/// Opens `name` as a burn device (checked as [`check_device`] does). Opening the same wgpu
/// adapter twice returns the same device.
pub fn open_device(name: DeviceName) -> Result<Device> {
    check_device(name)?;
    match name {
        DeviceName::Cpu => Ok(Device::flex()),
        DeviceName::Wgpu(index) => wgpu::open(index),
        #[cfg(feature = "cuda")]
        DeviceName::Cuda(index) => Ok(Device::cuda(index)),
        #[cfg(not(feature = "cuda"))]
        DeviceName::Cuda(_) => unreachable!("check_device rejects cuda in this build"),
    }
}

/// The device called `name` (see [`DeviceName`]), opened.
pub fn device_from_name(name: &str) -> Result<Device> {
    open_device(name.parse()?)
}

/// The largest buffer `device` can hold (a GPU caps storage buffers; weight matrices larger
/// than this are split into row blocks), or `None` where there is no such limit (the CPU).
pub fn max_buffer_bytes(device: &Device) -> Option<usize> {
    wgpu::max_buffer_bytes(device)
}

/// One Vulkan adapter as `specx devices` lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdapterInfo {
    /// The name to pass as `--device`.
    pub device: DeviceName,
    pub name: String,
    /// Discrete, integrated, virtual GPU, CPU (a software driver such as Mesa's lavapipe) or other.
    pub kind: String,
    pub driver: String,
    /// The largest storage buffer the adapter allows, bytes.
    pub max_buffer_bytes: u64,
}

/// The Vulkan adapters of this machine, in `wgpu:N` order (empty without a Vulkan driver).
pub fn vulkan_adapters() -> Result<Vec<AdapterInfo>> {
    wgpu::adapters()
}

#[cfg(feature = "wgpu")]
mod wgpu {
    use super::{AdapterInfo, DeviceName};
    use anyhow::{anyhow, bail, Result};
    use burn::tensor::wgpu::{wgpu, WgpuBackend};
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
        let instance = wgpu::Instance::new(wgpu::InstanceDescriptor { backends: wgpu::Backends::VULKAN, ..wgpu::InstanceDescriptor::new_without_display_handle() });
        let mut future = std::pin::pin!(instance.enumerate_adapters(wgpu::Backends::VULKAN));
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match future.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(adapters) => adapters.iter().map(|a| (a.get_info(), buffer_limit(&a.limits()))).collect(),
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
            let list: Vec<String> = all.iter().enumerate().map(|(i, (a, _))| format!("wgpu:{i} {} ({})", a.name, kind_name(a.device_type))).collect();
            bail!("device 'wgpu:{index}' is out of range: this machine has {} Vulkan adapter(s): {}", all.len(), list.join(", "));
        };
        let rank = all[..index].iter().filter(|(a, _)| a.device_type == info.device_type).count();
        let kind = match info.device_type {
            wgpu::DeviceType::DiscreteGpu => DeviceKind::DiscreteGpu(rank),
            wgpu::DeviceType::IntegratedGpu => DeviceKind::IntegratedGpu(rank),
            wgpu::DeviceType::VirtualGpu => DeviceKind::VirtualGpu(rank),
            wgpu::DeviceType::Cpu if rank == 0 => DeviceKind::Cpu,
            wgpu::DeviceType::Cpu => bail!("device 'wgpu:{index}' is a second software (CPU) Vulkan adapter, which burn cannot address; use the first"),
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
        let device = Device::wgpu_options().device_kind(kind).graphics_api(WgpuBackend::Vulkan).init().map_err(|e| anyhow!("device 'wgpu:{index}': {e}"))?;
        opened.insert(index, (device.clone(), usize::try_from(limit).unwrap_or(usize::MAX)));
        Ok(device)
    }
}

#[cfg(not(feature = "wgpu"))]
mod wgpu {
    use super::AdapterInfo;
    use anyhow::{bail, Result};

    const NOT_BUILT: &str = "this build has no wgpu backend: rebuild with `--features wgpu` (see the README's GPU section)";

    pub(super) fn adapters() -> Result<Vec<AdapterInfo>> {
        bail!("{NOT_BUILT}")
    }

    pub(super) fn adapter_kind(index: usize) -> Result<()> {
        bail!("device 'wgpu:{index}': {NOT_BUILT}")
    }

    pub(super) fn max_buffer_bytes(_: &burn::tensor::Device) -> Option<usize> {
        None
    }

    pub(super) fn open(index: usize) -> Result<burn::tensor::Device> {
        bail!("device 'wgpu:{index}': {NOT_BUILT}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_and_print_back() {
        for (text, name) in [("cpu", DeviceName::Cpu), ("wgpu", DeviceName::Wgpu(0)), ("wgpu:2", DeviceName::Wgpu(2)), ("cuda:1", DeviceName::Cuda(1))] {
            assert_eq!(text.parse::<DeviceName>().unwrap(), name);
            assert_eq!(name.to_string().parse::<DeviceName>().unwrap(), name);
        }
        for bad in ["gpu", "cpu:0", "wgpu:x", "wgpu:-1", "vulkan", ""] {
            assert!(bad.parse::<DeviceName>().is_err(), "{bad} parsed");
        }
    }

    #[test]
    fn lists_reject_duplicates_and_emptiness() {
        assert_eq!(parse_device_list(&["cpu", "wgpu:0"]).unwrap(), vec![DeviceName::Cpu, DeviceName::Wgpu(0)]);
        let e = parse_device_list(&["wgpu", "wgpu:0"]).unwrap_err().to_string();
        assert!(e.contains("'wgpu:0' is listed twice"), "{e}");
        assert!(parse_device_list::<&str>(&[]).is_err());
    }

    #[test]
    fn devices_this_build_lacks_are_named_in_the_error() {
        #[cfg(not(feature = "cuda"))]
        assert!(check_device(DeviceName::Cuda(0)).unwrap_err().to_string().contains("--features cuda"));
        #[cfg(not(feature = "wgpu"))]
        assert!(check_device(DeviceName::Wgpu(0)).unwrap_err().to_string().contains("--features wgpu"));
        // An index far past any machine's adapters is out of range (or there is no driver).
        #[cfg(feature = "wgpu")]
        {
            let e = check_device(DeviceName::Wgpu(999)).unwrap_err().to_string();
            assert!(e.contains("out of range") || e.contains("no Vulkan driver"), "{e}");
        }
    }
}
