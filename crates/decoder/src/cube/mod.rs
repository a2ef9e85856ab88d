//! The GPU path's own kernels, written once in CubeCL for CUDA and Vulkan: each fuses what
//! burn's tensor operations launch as several kernels (a launch-bound path is slow whatever its
//! kernels do). Each is row-invariant by construction: one cube per row, reductions in a fixed
//! order that depends on the row's width only, never on how many rows the call has.
//! `device_check::kernels` tests each on the device against an f64 reference computed on the
//! host, with a broken call caught.

mod attention;
mod block_matmul;
mod blocks;
mod rms_norm;
mod rope_cache;
mod swiglu;
mod top_k;

pub(crate) use attention::attention;
/// Keys one attention cube takes: a context past it is split over cubes and merged.
pub(crate) const ATTENTION_CHUNK: usize = attention::CHUNK as usize;
pub(crate) use block_matmul::{DeviceBlocks, on_device, warp_quad_loads};
pub(crate) use blocks::NO_WORD;
pub(crate) use rms_norm::rms_norm;
pub(crate) use rope_cache::{rope_qkv, writable};
pub(crate) use swiglu::swiglu;
pub(crate) use top_k::{launch_top_k, read_picks, top_k_tail};

use burn::tensor::{DType, Int, Tensor, TensorData};
use burn_cubecl::Cube;
use burn_cubecl::cubecl;
use burn_cubecl::tensor::CubeTensor;

/// `t` as a contiguous CubeCL tensor (copied only when it is a strided view). Panics when `t`
/// is not on a CubeCL device: callers route CPU tensors elsewhere.
fn contiguous<const D: usize>(t: Tensor<D>) -> CubeTensor {
    let t = t.try_into_primitive::<Cube>().expect("a tensor on a CubeCL device");
    // Both: a permuted view (q after `swap_dims`) fills its buffer but is not row-major.
    if t.is_contiguous() && t.is_contiguous_buffer() { t } else { burn_cubecl::kernel::into_contiguous(t) }
}

/// What a forward's kernels read of its position from the device rather than as launch
/// arguments: `[past]`, the cached positions before the call (u32). One per forward, so that a
/// recorded launch can serve every position its shape covers.
pub(crate) fn step_buffer(past: usize, device: &crate::Device) -> Tensor<1, Int> {
    words_on(vec![u32::try_from(past).expect("a cache length that fits u32")], device)
}

/// A u32 tensor on `device` (a captured step's token buffer, a matrix's blocks as words).
pub(crate) fn words_on(words: Vec<u32>, device: &crate::Device) -> Tensor<1, Int> {
    let len = words.len();
    Tensor::from_data(TensorData::new(words, [len]), (device, DType::U32))
}

/// A u32 tensor as the CubeCL tensor behind it.
fn words(t: &Tensor<1, Int>) -> CubeTensor {
    t.clone().try_into_primitive::<Cube>().expect("a tensor on a CubeCL device")
}

/// The whole buffer behind `t` as a kernel argument. A view (the cache's first positions)
/// reads its storage at the storage's strides, past its own shape: an argument made from the
/// view would declare only the view's length, which checked launches enforce, and its handle
/// ends where the view's last element does, which a recorded launch would keep while the
/// cache fills (so the tail the view leaves is bound too).
fn whole_buffer(t: CubeTensor) -> cubecl::prelude::BufferArg {
    let mut handle = t.handle.clone();
    handle.offset_end = None;
    let len = handle.size_in_used() as usize / t.elem_size();
    // SAFETY: the length is the handle's own, in elements of the tensor's type.
    unsafe { cubecl::prelude::BufferArg::from_raw_parts_binding(handle.binding(), len) }
}

/// Units of a cube that reduces one row of `cols` values: a power of two, at most 256 and at
/// most what the device allows; fixed per width, so a row's reduction order never changes.
fn units_for(t: &CubeTensor, cols: usize) -> u32 {
    let cap = t.client.properties().hardware.max_units_per_cube.clamp(1, 256);
    let cap = if cap.is_power_of_two() { cap } else { cap.next_power_of_two() / 2 };
    (cols.next_power_of_two() as u32).clamp(1, cap)
}
