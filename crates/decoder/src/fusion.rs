//! What a GPU matrix product can do around the product itself, in the same kernel, so that a
//! layer launches fewer kernels: the RMSNorm of its input rows, the bias, the SwiGLU of a fused
//! gate-up matrix, the residual add.

use burn::tensor::Tensor;

/// The steps fused into one product `x W^T`; the default fuses nothing. (Only the GPU
/// kernels read it: a build without a GPU backend never makes such a product.)
#[derive(Default)]
#[cfg_attr(not(any(feature = "wgpu", feature = "cuda")), allow(dead_code))]
pub(crate) struct Fused<'a> {
    /// Each input row RMS-normalised (`x / sqrt(mean(x^2) + eps) * weight`) before the product.
    pub(crate) norm: Option<(&'a Tensor<1>, f64)>,
    /// Added to each output row.
    pub(crate) bias: Option<&'a Tensor<1>>,
    /// The matrix is `[gate; up]` (two halves of its rows): the output is `silu(gate) * up`,
    /// half as wide.
    pub(crate) glu: bool,
    /// Added to the output (the residual stream), of the output's shape.
    pub(crate) residual: Option<Tensor<3>>,
}
