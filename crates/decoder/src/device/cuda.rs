//! NVIDIA GPUs through burn-cuda: device listing and index checks from the CUDA driver API.
//!
//! cudarc loads libcuda at run time, so this build runs on machines without a driver; the
//! listing then says so instead of panicking inside cudarc (which it would on first use).

use super::{CudaDeviceInfo, DeviceName};
use anyhow::{Result, anyhow, bail};
use cudarc::driver::{result, sys};

/// What to install when there is no driver.
const NO_DRIVER: &str =
    "no CUDA driver on this machine (libcuda.so.1 was not found): install NVIDIA's driver, or use the CPU";

fn driver_error(what: &str, e: result::DriverError) -> anyhow::Error {
    anyhow!("CUDA driver: {what} failed: {e:?}")
}

/// The driver's version as NVIDIA prints it (13000 -> "13.0").
fn driver_version() -> Result<String> {
    let mut v = 0;
    unsafe { sys::cuDriverGetVersion(&mut v) }.result().map_err(|e| driver_error("cuDriverGetVersion", e))?;
    Ok(format!("{}.{}", v / 1000, (v % 1000) / 10))
}

pub(super) fn devices() -> Result<Vec<CudaDeviceInfo>> {
    if !unsafe { sys::is_culib_present() } {
        bail!("{NO_DRIVER}");
    }
    match result::init() {
        Ok(()) => {}
        // A driver without a GPU (a container with the library only) has no devices.
        Err(result::DriverError(sys::CUresult::CUDA_ERROR_NO_DEVICE)) => return Ok(Vec::new()),
        Err(e) => return Err(driver_error("cuInit", e)),
    }
    let driver = driver_version()?;
    let count = result::device::get_count().map_err(|e| driver_error("cuDeviceGetCount", e))?;
    (0..count)
        .map(|i| {
            let dev = result::device::get(i).map_err(|e| driver_error("cuDeviceGet", e))?;
            let name = result::device::get_name(dev).map_err(|e| driver_error("cuDeviceGetName", e))?;
            // SAFETY: `dev` came from cuDeviceGet above.
            let (memory, major, minor) = unsafe {
                let attr =
                    |a| result::device::get_attribute(dev, a).map_err(|e| driver_error("cuDeviceGetAttribute", e));
                (
                    result::device::total_mem(dev).map_err(|e| driver_error("cuDeviceTotalMem", e))?,
                    attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
                    attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
                )
            };
            Ok(CudaDeviceInfo {
                device: DeviceName::Cuda(i as usize),
                name,
                compute_capability: format!("{major}.{minor}"),
                memory_bytes: memory as u64,
                driver: driver.clone(),
            })
        })
        .collect()
}

pub(super) fn check(index: usize) -> Result<()> {
    let all = devices().map_err(|e| anyhow!("device 'cuda:{index}': {e:#}"))?;
    if all.is_empty() {
        bail!("device 'cuda:{index}': the CUDA driver found no GPU on this machine");
    }
    if index >= all.len() {
        let list: Vec<String> = all.iter().map(|d| format!("{} {}", d.device, d.name)).collect();
        bail!(
            "device 'cuda:{index}' is out of range: this machine has {} CUDA device(s): {}",
            all.len(),
            list.join(", ")
        );
    }
    Ok(())
}
