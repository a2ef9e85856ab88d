//! RMSNorm as one kernel: burn's tensor form (square, mean, add, sqrt, reciprocal, two
//! products) is seven launches.

use super::{contiguous, units_for};
use burn::tensor::Tensor;
use burn_cubecl::Cube;
use burn_cubecl::cubecl;
use burn_cubecl::ops::numeric::empty_device_dtype;
use cubecl::prelude::*;

/// Row `CUBE_POS` of `x` (`cols` wide) scaled by the reciprocal root of its mean square (plus
/// `eps`), times `weight`. Each unit sums the squares of the columns it strides over, in order;
/// the units' sums are folded in a fixed tree.
#[cube(launch)]
fn rms_norm_rows(x: &[f32], weight: &[f32], out: &mut [f32], eps: f32, cols: u32, #[comptime] units: usize) {
    let base = CUBE_POS * cols as usize;
    let mut partial = Shared::<[f32]>::new_slice(units);
    let mut sum = 0.0f32;
    let mut i = UNIT_POS;
    while i < cols {
        let v = x[base + i as usize];
        sum += v * v;
        i += CUBE_DIM;
    }
    partial[UNIT_POS as usize] = sum;
    sync_cube();
    let mut active = CUBE_DIM / 2;
    while active > 0 {
        if UNIT_POS < active {
            let other = partial[(UNIT_POS + active) as usize];
            partial[UNIT_POS as usize] += other;
        }
        sync_cube();
        active /= 2;
    }
    let inv = 1.0f32 / f32::sqrt(partial[0] / f32::cast_from(cols) + eps);
    let mut j = UNIT_POS;
    while j < cols {
        let at = base + j as usize;
        out[at] = x[at] * inv * weight[j as usize];
        j += CUBE_DIM;
    }
}

/// `x * weight / sqrt(mean(x^2) + eps)` over the last dimension of `x: [b, n, h]`.
pub(crate) fn rms_norm(x: Tensor<3>, weight: &Tensor<1>, eps: f64) -> Tensor<3> {
    let [b, n, h] = x.dims();
    let (x, weight) = (contiguous(x), contiguous(weight.clone()));
    let units = units_for(&x, h);
    let out = empty_device_dtype(x.client.clone(), x.device.clone(), x.meta.shape().clone(), x.dtype);
    let client = x.client.clone();
    rms_norm_rows::launch(
        &client,
        CubeCount::Static((b * n) as u32, 1, 1),
        CubeDim::new_1d(units),
        x.into_buffer_arg(),
        weight.into_buffer_arg(),
        out.clone().into_buffer_arg(),
        eps as f32,
        h as u32,
        units as usize,
    );
    Tensor::from_primitive::<Cube>(out)
}
