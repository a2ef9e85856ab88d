//! Checks that a device computes what the CPU path computes, on tiny synthetic models written
//! to a scratch directory: logits, KV rollback, greedy speculative decoding, the acceptance
//! head, DSI with one worker on the CPU and one on the device, EasySpec with attentions placed
//! on the device, one model's layers split over the CPU and the device, and a token tree's
//! verification call with the accepted path kept; the GPU path's fused kernels and its GGUF
//! block products against a host reference, row-invariant and with a broken call caught; the kernel launches per layer,
//! against a bound ([`LAUNCH_BOUND_PER_LAYER`]); and a recorded decode step replayed against the plain forward. The wgpu tests (lavapipe in CI) and `specx gpu-check` (a real GPU,
//! where no Rust toolchain exists) run the same code, so what CI checks is what a GPU run checks.
//!
//! Each check returns its largest measured difference next to its tolerance; an error or a
//! panic inside a check is a failed check with the message, so one broken kernel does not hide
//! the others.

#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod attention;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod blocks;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod captured;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod head;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod kernels;
mod launches;
mod tiny;
mod tree;
mod two_devices;

pub use crate::synthetic::TINY_VOCAB;
pub use launches::LAUNCH_BOUND_PER_LAYER;
pub use tiny::{max_abs_diff, noisy_draft, tokens};

use crate::Device;
use anyhow::Result;
use serde::Serialize;
use std::path::Path;

/// One check's outcome.
#[derive(Clone, Debug, Serialize)]
pub struct Check {
    pub name: String,
    pub passed: bool,
    /// The largest |device - reference| logit (or probability) difference, where the check
    /// compares numbers; `None` for checks that compare tokens.
    pub worst_abs_diff: Option<f64>,
    pub tolerance: Option<f64>,
    /// What was compared, and on failure what went wrong.
    pub detail: String,
}

/// The checks by name, in the order they run.
pub const CHECKS: [&str; 12] = [
    "logits",
    "kv_rollback",
    "speculative_fixed_k",
    "acceptance_head",
    "dsi_cpu_and_device",
    "easyspec_placed",
    "split_layers",
    "tree_call",
    "kernels",
    "gguf_blocks",
    "launches",
    "captured_decode",
];

/// Runs check `name` on `device` against the CPU with logit tolerance `tol`, using `dir` for
/// the tiny models. Never panics: failures and errors come back as a failed [`Check`].
pub fn run_check(name: &str, device: &Device, dir: &Path, tol: f32) -> Check {
    let dir = dir.join(name);
    guarded(name, || {
        std::fs::create_dir_all(&dir)?;
        match name {
            "logits" => tiny::logits(device, &dir, tol),
            "kv_rollback" => tiny::kv_rollback(device, &dir, tol),
            "speculative_fixed_k" => tiny::speculative_fixed_k(device, &dir),
            "acceptance_head" => tiny::acceptance_head(device, &dir),
            "dsi_cpu_and_device" => tiny::dsi_cpu_and_device(device, &dir),
            "easyspec_placed" => tiny::easyspec_placed(device, &dir, tol),
            "split_layers" => tiny::split_layers(device, &dir, tol),
            "tree_call" => tree::tree_call(device, &dir, tol),
            "kernels" => fused_kernels(device, tol),
            "gguf_blocks" => gguf_blocks(device, &dir, tol),
            "launches" => launches::launches(device, &dir),
            "captured_decode" => captured_decode(device, &dir),
            _ => anyhow::bail!("unknown check '{name}' (known: {})", CHECKS.join(", ")),
        }
    })
}

/// The multi-device check (`two_devices`): a layer split over `a` and `b`, EasySpec's
/// attentions placed on `b` and DSI with a target on each give the numbers of `a` alone bit
/// for bit, with the tensors moved per call counted and DSI's workers busy at once. `a` and
/// `b` are two devices of one kind: two GPUs, or two logical devices of one adapter
/// (`SPECX_WGPU_DEVICES_PER_ADAPTER=2`). Never panics, as [`run_check`].
pub fn run_two_device_check(a: &Device, b: &Device, dir: &Path) -> Check {
    let dir = dir.join("two_devices");
    guarded("two_devices", || {
        std::fs::create_dir_all(&dir)?;
        two_devices::two_devices(a, b, &dir)
    })
}

/// `check()`'s outcome, with an error or a panic turned into a failed check named `name`.
fn guarded(name: &str, check: impl FnOnce() -> Result<Check>) -> Check {
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(check));
    let failed =
        |detail: String| Check { name: name.into(), passed: false, worst_abs_diff: None, tolerance: None, detail };
    match outcome {
        Ok(Ok(check)) => check,
        Ok(Err(e)) => failed(format!("error: {e:#}")),
        Err(panic) => failed(format!(
            "panicked: {}",
            panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or(panic.downcast_ref::<&str>().copied())
                .unwrap_or("(no message)")
        )),
    }
}

/// The fused kernels' check, in a build that has them.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn fused_kernels(device: &Device, tol: f32) -> Result<Check> {
    let attention = attention::attention_check(device)?;
    kernels::kernels(device, tol, attention, &head::head_check(device)?)
}

#[cfg(not(any(feature = "wgpu", feature = "cuda")))]
fn fused_kernels(_: &Device, _: f32) -> Result<Check> {
    anyhow::bail!("this build has no GPU kernels (build with --features wgpu or cuda)")
}

/// The GGUF blocks' check, in a build that has the device kernels.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn gguf_blocks(device: &Device, dir: &Path, tol: f32) -> Result<Check> {
    blocks::gguf_blocks(device, dir, tol)
}

#[cfg(not(any(feature = "wgpu", feature = "cuda")))]
fn gguf_blocks(_: &Device, _: &Path, _: f32) -> Result<Check> {
    anyhow::bail!("this build has no GPU kernels (build with --features wgpu or cuda)")
}

/// The recorded decode step's check, in a build that has the device kernels.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn captured_decode(device: &Device, dir: &Path) -> Result<Check> {
    captured::captured_decode(device, dir)
}

#[cfg(not(any(feature = "wgpu", feature = "cuda")))]
fn captured_decode(_: &Device, _: &Path) -> Result<Check> {
    anyhow::bail!("this build has no GPU kernels (build with --features wgpu or cuda)")
}

/// Every check in [`CHECKS`] order.
pub fn run_all(device: &Device, dir: &Path, tol: f32) -> Vec<Check> {
    CHECKS.iter().map(|name| run_check(name, device, dir, tol)).collect()
}
