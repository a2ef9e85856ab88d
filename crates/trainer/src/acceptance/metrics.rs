//! Evaluation of a head's predictions against soft labels: the weighted training loss, the
//! binary KL divergence of SpecDec++ Table 3, AUROC of "label > 0.5", and calibration (ECE and
//! its reliability table). All on the host in f64, from logits.

use crate::acceptance::loss::{LossWeights, softplus, weighted_bce_host};
use serde::{Deserialize, Serialize};

/// Calibration bins (equal width in predicted probability).
pub const ECE_BINS: usize = 10;

/// One reliability-table bin.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReliabilityBin {
    pub lo: f64,
    pub hi: f64,
    pub count: usize,
    /// None for an empty bin (JSON null; NaN would not read back).
    pub mean_predicted: Option<f64>,
    pub mean_label: Option<f64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Metrics {
    pub rows: usize,
    pub weighted_loss: f64,
    /// mean_i KL(Bernoulli(P_i) || Bernoulli(P_hat_i)), in nats.
    pub binary_kl: f64,
    /// Area under the ROC curve for the event label > 0.5, scored by the logit; None when
    /// one class is absent.
    pub auroc: Option<f64>,
    /// Expected calibration error: sum_b n_b / n |mean P_hat - mean P| over the bins.
    pub ece: f64,
    pub reliability: Vec<ReliabilityBin>,
    pub mean_label: f64,
    pub mean_predicted: f64,
}

/// `x ln(x / y)` with the convention `0 ln 0 = 0`, given `ln y`.
fn xlogx_over(x: f64, ln_y: f64) -> f64 {
    if x <= 0.0 { 0.0 } else { x * (x.ln() - ln_y) }
}

/// Computes every metric for `logits` against `labels`.
pub fn evaluate(logits: &[f32], labels: &[f32], w: LossWeights) -> Metrics {
    assert_eq!(logits.len(), labels.len(), "one logit per label");
    let n = logits.len();
    let mut kl = 0.0;
    let mut bins = vec![(0usize, 0.0f64, 0.0f64); ECE_BINS];
    let (mut sum_p, mut sum_hat) = (0.0, 0.0);
    for (&z, &p) in logits.iter().zip(labels) {
        let (z, p) = (z as f64, p as f64);
        let (ln_hat, ln_one_minus_hat) = (-softplus(-z), -softplus(z));
        kl += xlogx_over(p, ln_hat) + xlogx_over(1.0 - p, ln_one_minus_hat);
        let hat = ln_hat.exp();
        let b = ((hat * ECE_BINS as f64) as usize).min(ECE_BINS - 1);
        bins[b].0 += 1;
        bins[b].1 += hat;
        bins[b].2 += p;
        sum_p += p;
        sum_hat += hat;
    }
    let nf = n.max(1) as f64;
    let reliability: Vec<ReliabilityBin> = bins
        .iter()
        .enumerate()
        .map(|(i, &(count, hat, p))| ReliabilityBin {
            lo: i as f64 / ECE_BINS as f64,
            hi: (i + 1) as f64 / ECE_BINS as f64,
            count,
            mean_predicted: (count > 0).then(|| hat / count as f64),
            mean_label: (count > 0).then(|| p / count as f64),
        })
        .collect();
    let ece =
        reliability.iter().filter_map(|b| Some(b.count as f64 / nf * (b.mean_predicted? - b.mean_label?).abs())).sum();
    Metrics {
        rows: n,
        weighted_loss: if n > 0 { weighted_bce_host(logits, labels, w) } else { f64::NAN },
        binary_kl: kl / nf,
        auroc: auroc(logits, labels),
        ece,
        reliability,
        mean_label: sum_p / nf,
        mean_predicted: sum_hat / nf,
    }
}

/// Mann-Whitney AUROC of `label > 0.5` scored by `scores`, ties counted half.
pub fn auroc(scores: &[f32], labels: &[f32]) -> Option<f64> {
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| scores[a].total_cmp(&scores[b]));
    // Average ranks (1-based) over runs of equal scores.
    let mut rank_sum_pos = 0.0;
    let mut i = 0;
    while i < order.len() {
        let mut j = i;
        while j + 1 < order.len() && scores[order[j + 1]] == scores[order[i]] {
            j += 1;
        }
        let avg_rank = (i + j) as f64 / 2.0 + 1.0;
        rank_sum_pos += order[i..=j].iter().filter(|&&k| labels[k] > 0.5).count() as f64 * avg_rank;
        i = j + 1;
    }
    let pos = labels.iter().filter(|&&l| l > 0.5).count() as f64;
    let neg = labels.len() as f64 - pos;
    if pos == 0.0 || neg == 0.0 {
        return None;
    }
    Some((rank_sum_pos - pos * (pos + 1.0) / 2.0) / (pos * neg))
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: LossWeights = LossWeights { w_acc: 1.0, w_rej: 6.0 };

    fn logit(p: f64) -> f32 {
        (p / (1.0 - p)).ln() as f32
    }

    #[test]
    fn kl_is_zero_for_perfect_predictions_and_matches_a_hand_value() {
        let labels = [0.2f32, 0.9, 0.5];
        let logits: Vec<f32> = labels.iter().map(|&p| logit(p as f64)).collect();
        assert!(evaluate(&logits, &labels, W).binary_kl < 1e-7);
        // KL(Bern(1) || Bern(0.8)) = -ln 0.8; KL(Bern(0.5) || Bern(0.25)) = 0.5 ln 2 + 0.5 ln(2/3).
        let m = evaluate(&[logit(0.8), logit(0.25)], &[1.0, 0.5], W);
        let want = (-(0.8f64.ln()) + 0.5 * 2f64.ln() + 0.5 * (2.0f64 / 3.0).ln()) / 2.0;
        assert!((m.binary_kl - want).abs() < 1e-6, "{} vs {want}", m.binary_kl);
    }

    #[test]
    fn metrics_with_empty_reliability_bins_round_trip_through_json() {
        let m = evaluate(&[logit(0.8), logit(0.25)], &[1.0, 0.5], W);
        assert!(m.reliability.iter().any(|b| b.count == 0 && b.mean_predicted.is_none()));
        let back: Metrics = serde_json::from_str(&serde_json::to_string(&m).unwrap()).unwrap();
        assert_eq!(back.reliability, m.reliability);
    }

    #[test]
    fn auroc_counts_ordered_pairs_and_ties() {
        // Positives (label > 0.5) at scores 3, 1; negatives at 2, 0: 3 of 4 pairs ordered.
        assert_eq!(auroc(&[3.0, 1.0, 2.0, 0.0], &[0.9, 0.7, 0.1, 0.4]), Some(0.75));
        assert_eq!(auroc(&[1.0, 1.0], &[1.0, 0.0]), Some(0.5));
        assert_eq!(auroc(&[1.0, 2.0], &[1.0, 1.0]), None);
        assert_eq!(auroc(&[5.0, 1.0, 0.0], &[1.0, 0.0, 0.0]), Some(1.0));
    }

    #[test]
    fn ece_and_reliability_bins() {
        // Two rows predicted 0.25 (bin 2) with labels 0 and 1: |0.25 - 0.5| = 0.25, weight 1/2;
        // one row predicted 0.95 (bin 9) with label 0.95: 0; plus one at 0.05 with label 1:
        // |0.05 - 1| = 0.95, weight 1/4.
        let logits = [logit(0.25), logit(0.25), logit(0.95), logit(0.05)];
        let m = evaluate(&logits, &[0.0, 1.0, 0.95, 1.0], W);
        assert!((m.ece - (0.5 * 0.25 + 0.25 * 0.95)).abs() < 1e-6, "{}", m.ece);
        assert_eq!(m.reliability.iter().map(|b| b.count).collect::<Vec<_>>(), vec![1, 0, 2, 0, 0, 0, 0, 0, 0, 1]);
        assert!((m.reliability[2].mean_label.unwrap() - 0.5).abs() < 1e-12);
    }
}
