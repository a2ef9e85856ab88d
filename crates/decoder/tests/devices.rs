//! Devices this build or machine lacks are refused by name, before anything loads, in every
//! build: scripts/test.sh runs this without GPU features and scripts/test-wgpu.sh with `wgpu`
//! and `cuda`, where (on a machine without NVIDIA's driver, as CI) CUDA must say there is no
//! driver rather than fail inside the runtime.

use specx_decoder::{DeviceName, Placement, check_device};

#[test]
fn devices_this_build_lacks_are_named_in_the_error() {
    #[cfg(not(feature = "cuda"))]
    assert!(check_device(DeviceName::Cuda(0)).unwrap_err().to_string().contains("--features cuda"));
    // With the feature: a machine without a driver or GPU says so; an index far past any
    // machine's GPUs is out of range, and the error lists the GPUs there are.
    #[cfg(feature = "cuda")]
    {
        let e = check_device(DeviceName::Cuda(999)).unwrap_err().to_string();
        assert!(e.starts_with("device 'cuda:999'"), "{e}");
        assert!(e.contains("out of range") || e.contains("no CUDA driver") || e.contains("found no GPU"), "{e}");
        let listed = specx_decoder::device::cuda_devices();
        assert_eq!(listed.is_err(), e.contains("no CUDA driver"), "{e}");
        eprintln!(
            "cuda here: {}",
            match &listed {
                Ok(d) => format!("{} device(s)", d.len()),
                Err(e) => e.to_string(),
            }
        );
    }
    #[cfg(not(feature = "wgpu"))]
    assert!(check_device(DeviceName::Wgpu(0)).unwrap_err().to_string().contains("--features wgpu"));
    // An index far past any machine's adapters is out of range (or there is no driver).
    #[cfg(feature = "wgpu")]
    {
        let e = check_device(DeviceName::Wgpu(999)).unwrap_err().to_string();
        assert!(e.contains("out of range") || e.contains("no Vulkan driver"), "{e}");
    }
}

#[test]
fn a_placement_with_a_device_that_cannot_open_is_refused_by_name() {
    let p: Placement = "cpu+cuda:999".parse().unwrap();
    let e = p.check().unwrap_err().to_string();
    assert!(e.contains("cuda:999"), "{e}");
    assert!(p.open().is_err());
}
