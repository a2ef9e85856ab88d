//! Device names (`cpu`, `wgpu[:N]`, `cuda[:N]`) as users write them on the command line and in
//! configs, parsed and checked before any model loads, and opened into burn devices.
//!
//! `wgpu` is burn's wgpu runtime pinned to Vulkan: `wgpu:N` is the N-th Vulkan adapter in the
//! order the Vulkan loader lists them (`specx devices` prints the list). Pinning matters: left to
//! choose, burn falls back to OpenGL when no Vulkan driver is installed, which is a different
//! compiler and a silent change of device. Names parse in every build, so a config that names a
//! GPU is checked (and fails with a clear message) in a CPU-only build too.

use anyhow::{Result, bail, ensure};
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
    /// The N-th CUDA device in the driver's order (builds with `--features cuda`).
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
                let i = index
                    .parse::<usize>()
                    .map_err(|_| anyhow::anyhow!("device '{s}': '{index}' is not a device index (0, 1, ...)"))?;
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

/// Where one model runs: one device, or several joined by `+` (`cuda:0+cuda:1`), over which
/// its layers are split in contiguous ranges (embedding with the first, head with the last:
/// [`crate::Transformer::load_split`]), for a model that does not fit one device. A DSI worker
/// list names one placement per worker, so a worker can span several devices.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Placement(Vec<DeviceName>);

impl Placement {
    /// The devices in layer order (at least one, none twice).
    pub fn devices(&self) -> &[DeviceName] {
        &self.0
    }

    /// The first device: the embedding's, and where a pair's draft and heads go.
    pub fn first(&self) -> DeviceName {
        self.0[0]
    }

    /// Whether the placement splits a model over several devices.
    pub fn is_split(&self) -> bool {
        self.0.len() > 1
    }

    /// [`check_device`] for every device.
    pub fn check(&self) -> Result<()> {
        self.0.iter().try_for_each(|&d| check_device(d))
    }

    /// Opens every device, in layer order.
    pub fn open(&self) -> Result<Vec<Device>> {
        self.0.iter().map(|&d| open_device(d)).collect()
    }
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<String> = self.0.iter().map(DeviceName::to_string).collect();
        f.write_str(&names.join("+"))
    }
}

impl FromStr for Placement {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> Result<Self> {
        let mut out: Vec<DeviceName> = Vec::new();
        for part in s.split('+') {
            let d: DeviceName = part.parse()?;
            ensure!(!out.contains(&d), "placement '{s}' names device '{d}' twice");
            out.push(d);
        }
        Ok(Self(out))
    }
}

/// Parses a list of placements (DSI's workers: `cpu,cuda:0+cuda:1`): at least one, and no
/// device in two of them.
pub fn parse_placement_list<S: AsRef<str>>(names: &[S]) -> Result<Vec<Placement>> {
    ensure!(!names.is_empty(), "a device list needs at least one device");
    let mut out: Vec<Placement> = Vec::with_capacity(names.len());
    for name in names {
        let p: Placement = name.as_ref().parse()?;
        if let Some(d) = p.devices().iter().find(|d| out.iter().any(|q| q.devices().contains(d))) {
            bail!("device '{d}' is listed twice: each worker needs devices of its own");
        }
        out.push(p);
    }
    Ok(out)
}

/// Checks that this build and machine can open `name`, without opening it: the backend is
/// compiled in, and for wgpu a Vulkan driver exists and the index is in range. Callers run
/// this before loading models so that a wrong device costs nothing.
pub fn check_device(name: DeviceName) -> Result<()> {
    match name {
        DeviceName::Cpu => Ok(()),
        DeviceName::Wgpu(index) => wgpu::check(index),
        DeviceName::Cuda(index) => cuda::check(index),
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

/// One CUDA device as `specx devices` lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaDeviceInfo {
    /// The name to pass as `--device`.
    pub device: DeviceName,
    pub name: String,
    /// major.minor (9.0 on an H100).
    pub compute_capability: String,
    pub memory_bytes: u64,
    /// The driver's CUDA version (13.0).
    pub driver: String,
}

/// The CUDA devices of this machine in `cuda:N` order; an error names why there are none to
/// ask for (no `cuda` feature in this build, no driver installed).
pub fn cuda_devices() -> Result<Vec<CudaDeviceInfo>> {
    cuda::devices()
}

pub mod launches;

#[cfg(feature = "wgpu")]
#[path = "vulkan.rs"]
mod wgpu;
#[cfg(not(feature = "wgpu"))]
#[path = "vulkan_absent.rs"]
mod wgpu;

#[cfg(feature = "cuda")]
mod cuda;
#[cfg(not(feature = "cuda"))]
#[path = "cuda_absent.rs"]
mod cuda;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_and_print_back() {
        for (text, name) in [
            ("cpu", DeviceName::Cpu),
            ("wgpu", DeviceName::Wgpu(0)),
            ("wgpu:2", DeviceName::Wgpu(2)),
            ("cuda:1", DeviceName::Cuda(1)),
        ] {
            assert_eq!(text.parse::<DeviceName>().unwrap(), name);
            assert_eq!(name.to_string().parse::<DeviceName>().unwrap(), name);
        }
        for bad in ["gpu", "cpu:0", "wgpu:x", "wgpu:-1", "vulkan", ""] {
            assert!(bad.parse::<DeviceName>().is_err(), "{bad} parsed");
        }
    }

    #[test]
    fn placements_parse_print_back_and_refuse_repeats() {
        let p: Placement = "cpu+wgpu:1".parse().unwrap();
        assert_eq!(
            (p.devices(), p.first(), p.is_split()),
            (&[DeviceName::Cpu, DeviceName::Wgpu(1)][..], DeviceName::Cpu, true)
        );
        assert_eq!(p.to_string().parse::<Placement>().unwrap(), p);
        assert!(!"cuda".parse::<Placement>().unwrap().is_split());
        assert!("cpu+cpu".parse::<Placement>().unwrap_err().to_string().contains("twice"));
        assert!("cpu+".parse::<Placement>().is_err());
        let workers = parse_placement_list(&["cpu", "cuda:0+cuda:1"]).unwrap();
        assert_eq!(workers.len(), 2);
        assert!(
            parse_placement_list(&["cuda:0+cuda:1", "cuda:1"])
                .unwrap_err()
                .to_string()
                .contains("'cuda:1' is listed twice")
        );
    }

    #[test]
    fn lists_reject_duplicates_and_emptiness() {
        assert_eq!(parse_device_list(&["cpu", "wgpu:0"]).unwrap(), vec![DeviceName::Cpu, DeviceName::Wgpu(0)]);
        let e = parse_device_list(&["wgpu", "wgpu:0"]).unwrap_err().to_string();
        assert!(e.contains("'wgpu:0' is listed twice"), "{e}");
        assert!(parse_device_list::<&str>(&[]).is_err());
    }
}
