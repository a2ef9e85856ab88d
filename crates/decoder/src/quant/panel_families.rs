//! What the x86 panel kernel sets ([`super::panel_x86`], [`super::panel_avx2`]) share: the
//! dispatch from a weight type to its family's kernel, and the size check every pass makes
//! before it reads through raw pointers.

use super::act::{Q8KRows, Q80Rows};
use super::int_x86_blocks::{Q4_0, Q4K, Q5_0, Q5K, Q6K, Q8_0};
use super::panel::PANEL;
use crate::gguf::GgmlType;

/// A kernel set's two families, each generic over the weight type (`T`: one of
/// [`super::int_x86_blocks`]' constants): the K family (Q4_K, Q5_K, Q6_K) on Q8_K
/// activations and the 32-wide one (Q4_0, Q5_0, Q8_0) on Q8_0 activations.
pub trait PanelFamilies {
    /// # Safety
    /// The set's instructions.
    unsafe fn k<const T: u8>(panel: &[u8], x: &Q8KRows, r0: usize, out: &mut [[f32; PANEL]]);
    /// # Safety
    /// The set's instructions.
    unsafe fn b32<const T: u8>(panel: &[u8], x: &Q80Rows, r0: usize, out: &mut [[f32; PANEL]]);
}

/// One pass's inputs: a panel of weight type `ty`, and the activations from row `r0` (Q8_K
/// rows for the K family, Q8_0 rows for the 32-wide one).
#[derive(Clone, Copy)]
pub struct PanelPass<'a> {
    pub ty: GgmlType,
    pub panel: &'a [u8],
    pub k: Option<&'a Q8KRows>,
    pub b32: Option<&'a Q80Rows>,
    pub r0: usize,
}

/// The kernel of `F` for the pass's type, inlined into the caller (whose instruction set its
/// intrinsics then inline under).
///
/// # Safety
/// `F`'s instructions.
#[inline(always)]
pub unsafe fn by_type<F: PanelFamilies>(pass: PanelPass, out: &mut [[f32; PANEL]]) {
    let PanelPass { ty, panel, k, b32, r0 } = pass;
    // SAFETY: as the caller's; the kernels check what they read (`check_pass`).
    unsafe {
        match ty {
            GgmlType::Q4K => F::k::<Q4K>(panel, k.expect("Q8_K input"), r0, out),
            GgmlType::Q5K => F::k::<Q5K>(panel, k.expect("Q8_K input"), r0, out),
            GgmlType::Q6K => F::k::<Q6K>(panel, k.expect("Q8_K input"), r0, out),
            GgmlType::Q4_0 => F::b32::<Q4_0>(panel, b32.expect("Q8_0 input"), r0, out),
            GgmlType::Q5_0 => F::b32::<Q5_0>(panel, b32.expect("Q8_0 input"), r0, out),
            GgmlType::Q8_0 => F::b32::<Q8_0>(panel, b32.expect("Q8_0 input"), r0, out),
            _ => unreachable!("{ty:?} has no panel kernel"),
        }
    }
}

/// Panics unless `panel` holds `blocks` blocks of `block_bytes` for each of its rows and
/// activation rows `r0..r0 + m` lie among the `rows` there are: what makes every pointer a
/// pass reads lie inside its buffer.
pub fn check_pass(panel: &[u8], blocks: usize, block_bytes: usize, r0: usize, m: usize, rows: usize) {
    assert!(
        panel.len() == blocks * PANEL * block_bytes && r0 + m <= rows,
        "a panel of {} bytes for {blocks} blocks, rows {r0}..{} of {rows}",
        panel.len(),
        r0 + m,
    );
}
