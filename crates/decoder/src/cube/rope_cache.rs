//! The attention's input stage as one kernel: the fused projection's rows split into q, k and
//! v, RoPE applied to q and k (rotate-half layout), k and v written into the layer's cache and
//! q written out. burn's tensor form is about sixteen launches (slices, a negation, a
//! concatenation, two products and a sum per rotated tensor, two cache writes).

use super::{contiguous, units_for};
use burn::tensor::{Int, Tensor};
use burn_cubecl::Cube;
use burn_cubecl::cubecl;
use burn_cubecl::ops::numeric::empty_device_dtype;
use burn_cubecl::tensor::CubeTensor;
use cubecl::prelude::*;

/// One cube per (sequence, row) of `qkv` (`[batch, rows, (heads + 2 kv_heads) head_dim]`);
/// each unit strides over the row's values. A q or k value becomes `x cos + partner sin`, its
/// partner the value half a head away (negated in the first half); v values are copied. q goes
/// to `[batch, heads, rows, head_dim]`, k and v to `[batch, kv_heads, capacity, head_dim]` at
/// position `past + row`, `past` read from `step[0]` (a device buffer, not a launch argument, so
/// that a recorded launch serves every position). Every value is computed from its own row
/// alone.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn rope_qkv_rows(
    qkv: &[f32],
    cos: &[f32],
    sin: &[f32],
    q: &mut [f32],
    keys: &mut [f32],
    values: &mut [f32],
    rows: u32,
    heads: u32,
    kv_heads: u32,
    head_dim: u32,
    step: &[u32],
    capacity: u32,
) {
    let past = step[0];
    let cube = CUBE_POS as u32;
    let (seq, row) = (cube / rows, cube % rows);
    let width = (heads + 2 * kv_heads) * head_dim;
    let half = head_dim / 2;
    let src = cube * width;
    let mut e = UNIT_POS;
    while e < width {
        let head = e / head_dim;
        let j = e % head_dim;
        let x = qkv[(src + e) as usize];
        if head < heads + kv_heads {
            let partner = if j < half { -qkv[(src + e + half) as usize] } else { qkv[(src + e - half) as usize] };
            let t = (row * head_dim + j) as usize;
            let rotated = x * cos[t] + partner * sin[t];
            if head < heads {
                q[(((seq * heads + head) * rows + row) * head_dim + j) as usize] = rotated;
            } else {
                let at = ((seq * kv_heads + head - heads) * capacity + past + row) * head_dim + j;
                keys[at as usize] = rotated;
            }
        } else {
            let at = ((seq * kv_heads + head - heads - kv_heads) * capacity + past + row) * head_dim + j;
            values[at as usize] = x;
        }
        e += CUBE_DIM;
    }
}

/// `t` as a contiguous CubeCL tensor no other tensor shares, so a kernel may write it in place
/// (a copy when it is shared or strided: what burn's in-place writes do).
pub(crate) fn writable<const D: usize>(t: Tensor<D>) -> CubeTensor {
    let t = t.try_into_primitive::<Cube>().expect("a tensor on a CubeCL device");
    let t = if t.can_mut() { t } else { t.copy() };
    if t.is_contiguous_buffer() { t } else { burn_cubecl::kernel::into_contiguous(t) }
}

/// RoPE'd q `[b, heads, n, head_dim]` of the fused `qkv: [b, n, (heads + 2 kv_heads) head_dim]`,
/// with the rotated keys and the values written into `keys` and `values` (`[b, kv_heads,
/// capacity, head_dim]`) at positions `past..past + n`, `step` holding `past` on the device
/// ([`super::step_buffer`]). `cos` and `sin` are `[n, head_dim]`.
pub(crate) fn rope_qkv(
    qkv: Tensor<3>,
    (cos, sin): (&Tensor<2>, &Tensor<2>),
    [heads, kv_heads, head_dim]: [usize; 3],
    (keys, values): (&mut Tensor<4>, &mut Tensor<4>),
    (past, step): (usize, &Tensor<1, Int>),
) -> Tensor<4> {
    let [b, n, width] = qkv.dims();
    assert_eq!(width, (heads + 2 * kv_heads) * head_dim, "qkv rows of {width} values");
    let capacity = keys.dims()[2];
    assert!(past + n <= capacity, "{n} rows after {past} in a cache of {capacity}");
    let qkv = contiguous(qkv);
    let (cos, sin) = (contiguous(cos.clone()), contiguous(sin.clone()));
    let (k, v) = (writable(keys.extract()), writable(values.extract()));
    let units = units_for(&qkv, width);
    let client = qkv.client.clone();
    let q = empty_device_dtype(client.clone(), qkv.device.clone(), [b, heads, n, head_dim].into(), qkv.dtype);
    rope_qkv_rows::launch(
        &client,
        CubeCount::Static((b * n) as u32, 1, 1),
        CubeDim::new_1d(units),
        qkv.into_buffer_arg(),
        cos.into_buffer_arg(),
        sin.into_buffer_arg(),
        q.clone().into_buffer_arg(),
        k.clone().into_buffer_arg(),
        v.clone().into_buffer_arg(),
        n as u32,
        heads as u32,
        kv_heads as u32,
        head_dim as u32,
        super::words(step).into_buffer_arg(),
        capacity as u32,
    );
    *keys = Tensor::from_primitive::<Cube>(k);
    *values = Tensor::from_primitive::<Cube>(v);
    Tensor::from_primitive::<Cube>(q)
}
