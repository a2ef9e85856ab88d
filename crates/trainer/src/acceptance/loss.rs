//! SpecDec++'s weighted binary cross-entropy with soft labels, on logits.
//!
//! For labels P in [0, 1] and logits z (P_hat = sigmoid(z)):
//!   L = sum_i [ w_acc P_i (-log sigmoid(z_i)) + w_rej (1 - P_i) (-log sigmoid(-z_i)) ]
//!       / ( w_acc sum_i P_i + w_rej sum_i (1 - P_i) )
//! i.e. normalised by the total weight, as the official code does (with w_acc = 1 that is
//! w_rej sum(1-P) + sum(P)). `log sigmoid` is evaluated stably, never as log of a probability.

use burn::tensor::Tensor;
use burn::tensor::activation::log_sigmoid;

/// The weights of accepted and rejected mass.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LossWeights {
    pub w_acc: f64,
    pub w_rej: f64,
}

/// The loss as a scalar tensor (differentiable in `logits`).
pub fn weighted_bce(logits: Tensor<1>, labels: Tensor<1>, w: LossWeights) -> Tensor<1> {
    let accept = labels.clone().mul_scalar(w.w_acc);
    let reject = labels.neg().add_scalar(1.0).mul_scalar(w.w_rej);
    let per_row = accept.clone() * log_sigmoid(logits.clone()).neg() + reject.clone() * log_sigmoid(logits.neg()).neg();
    per_row.sum() / (accept.sum() + reject.sum())
}

/// The same quantity on the host in f64 (for metrics and as an independent check).
pub fn weighted_bce_host(logits: &[f32], labels: &[f32], w: LossWeights) -> f64 {
    let mut num = 0.0;
    let mut den = 0.0;
    for (&z, &p) in logits.iter().zip(labels) {
        let (z, p) = (z as f64, p as f64);
        num += w.w_acc * p * softplus(-z) + w.w_rej * (1.0 - p) * softplus(z);
        den += w.w_acc * p + w.w_rej * (1.0 - p);
    }
    num / den
}

/// ln(1 + e^x) without overflow: -log sigmoid(-x).
pub fn softplus(x: f64) -> f64 {
    if x > 0.0 { x + (-x).exp().ln_1p() } else { x.exp().ln_1p() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::TensorData;
    use specx_decoder::default_device;

    #[test]
    fn matches_a_hand_computed_value_and_is_stable_for_huge_logits() {
        // Two rows: P = 1, z = 0 -> ln 2 with weight 1; P = 0.25, z = ln 3 (P_hat = 0.75):
        //   0.25 * -ln 0.75 + 6 * 0.75 * -ln 0.25 ; total weight 1 + 0.25 + 6 * 0.75 = 5.75.
        let w = LossWeights { w_acc: 1.0, w_rej: 6.0 };
        let (logits, labels) = ([0.0f32, 3f32.ln()], [1.0f32, 0.25]);
        let want = (2f64.ln() + 0.25 * -(0.75f64.ln()) + 4.5 * -(0.25f64.ln())) / 5.75;
        assert!((weighted_bce_host(&logits, &labels, w) - want).abs() < 1e-7);
        let d = default_device();
        let t = |v: &[f32]| Tensor::<1>::from_data(TensorData::new(v.to_vec(), [v.len()]), &d);
        let got = weighted_bce(t(&logits), t(&labels), w).into_data().try_to_vec::<f32>().unwrap()[0] as f64;
        assert!((got - want).abs() < 1e-6, "{got} vs {want}");
        // Confident and wrong by 200 nats: finite, about 200 * w_rej / total weight.
        let got = weighted_bce(t(&[200.0]), t(&[0.0]), w).into_data().try_to_vec::<f32>().unwrap()[0];
        assert!(got.is_finite() && (got - 200.0).abs() < 1e-3, "{got}");
        assert!((softplus(-800.0)).abs() < 1e-300 && (softplus(800.0) - 800.0).abs() < 1e-9);
    }
}
