//! What a probed forward records of one layer's attention: the record the layers fill and
//! EasySpec's fuzzy probe ([`super::fuzzy`]) compares.

use burn::tensor::Tensor;

/// One layer's attention on the last new row: the hidden state it read (before its norm),
/// its query, key and value (after RoPE; all heads, flattened) and its output (after the
/// output projection). Recorded by [`super::Transformer::probe_fuzzy`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AttentionProbe {
    pub input: Vec<f32>,
    pub q: Vec<f32>,
    pub k: Vec<f32>,
    pub v: Vec<f32>,
    pub out: Vec<f32>,
}

/// The last row of the first sequence of `[b, n, w]`, on the host.
pub(super) fn last_row(t: Tensor<3>) -> Vec<f32> {
    let [_, n, w] = t.dims();
    t.slice([0..1, n - 1..n, 0..w]).into_data().try_into_vec::<f32>().expect("f32 activations")
}
