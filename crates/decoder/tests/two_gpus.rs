//! Two GPUs on a machine with one Vulkan adapter: `SPECX_WGPU_DEVICES_PER_ADAPTER=2` lists the
//! adapter twice, each copy an independent logical device (its own queue, memory and compiled
//! kernels), and the multi-device check runs on `wgpu:0` and `wgpu:1`
//! (`specx_decoder::device_check::run_two_device_check`: a layer split, EasySpec's placement
//! and DSI with a target on each, bit for bit against `wgpu:0` alone, the moves per call
//! counted, DSI's workers busy at once). scripts/test-wgpu.sh runs it on lavapipe in CI.
//! It is its own test binary because the variable must be set before any device opens.
#![cfg(feature = "wgpu")]

use specx_decoder::device::{DeviceName, vulkan_adapters};
use specx_decoder::device_check::run_two_device_check;
use specx_decoder::device_from_name;

#[test]
fn two_logical_devices_compute_as_one_and_dsi_workers_overlap() {
    // SAFETY: the only test of this binary, and no other thread runs yet.
    unsafe { std::env::set_var("SPECX_WGPU_DEVICES_PER_ADAPTER", "2") };
    let adapters = vulkan_adapters().expect("listing Vulkan adapters");
    assert!(adapters.len() >= 2, "one adapter listed twice should give two devices: {adapters:?}");
    assert_eq!((adapters[0].device, adapters[1].device), (DeviceName::Wgpu(0), DeviceName::Wgpu(1)));
    assert!(adapters[1].name.contains("logical device 1 of 2"), "{}", adapters[1].name);
    let a = device_from_name("wgpu:0").unwrap_or_else(|e| panic!("{e:#}"));
    let b = device_from_name("wgpu:1").unwrap_or_else(|e| panic!("{e:#}"));
    assert!(a != b, "wgpu:0 and wgpu:1 opened as the same device");
    assert!(device_from_name("wgpu:0").unwrap() == a, "opening wgpu:0 again gives the same device");
    let dir = tempfile::tempdir().unwrap();
    let c = run_two_device_check(&a, &b, dir.path());
    eprintln!("two_devices: worst {:?}: {}", c.worst_abs_diff, c.detail);
    assert!(c.passed, "{}", c.detail);
}
