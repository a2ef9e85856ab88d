//! The MLP's activation as one kernel: `silu(gate) * up` of the fused gate-up projection's
//! rows. burn's tensor form (two slices, the sigmoid's steps, two products) is several
//! launches.

use super::{contiguous, units_for};
use burn::tensor::Tensor;
use burn_cubecl::Cube;
use burn_cubecl::cubecl;
use burn_cubecl::ops::numeric::empty_device_dtype;
use cubecl::prelude::*;

/// One cube per row of `gate_up` (`2 inter` values: gate, then up); each unit strides over
/// the row's `inter` outputs, `g / (1 + exp(-g)) * u`.
#[cube(launch)]
fn swiglu_rows(gate_up: &[f32], out: &mut [f32], inter: u32) {
    let row = CUBE_POS as u32;
    let mut i = UNIT_POS;
    while i < inter {
        let g = gate_up[(row * 2 * inter + i) as usize];
        let u = gate_up[(row * 2 * inter + inter + i) as usize];
        out[(row * inter + i) as usize] = g / (1.0f32 + f32::exp(-g)) * u;
        i += CUBE_DIM;
    }
}

/// `silu(gate) * up` of `gate_up: [b, n, 2 inter]` (gate columns first): `[b, n, inter]`.
pub(crate) fn swiglu(gate_up: Tensor<3>) -> Tensor<3> {
    let [b, n, width] = gate_up.dims();
    assert!(width % 2 == 0, "gate-up rows of {width} values");
    let inter = width / 2;
    let gate_up = contiguous(gate_up);
    let units = units_for(&gate_up, inter);
    let client = gate_up.client.clone();
    let out = empty_device_dtype(client.clone(), gate_up.device.clone(), [b, n, inter].into(), gate_up.dtype);
    swiglu_rows::launch(
        &client,
        CubeCount::Static((b * n) as u32, 1, 1),
        CubeDim::new_1d(units),
        gate_up.into_buffer_arg(),
        out.clone().into_buffer_arg(),
        inter as u32,
    );
    Tensor::from_primitive::<Cube>(out)
}
