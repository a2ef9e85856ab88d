//! The calibrated acceptance model's statistical fit: a logistic regression by Newton's method
//! (L2 penalty on every weight but the constant) on labelled trunk positions (on the draft's
//! inputs only, or on the target's at the last committed token too), then one
//! temperature per depth bucket minimising the log loss on held-out prompts (Guo et al.'s
//! temperature scaling, per depth), so that the model's outputs are probabilities the product
//! rule can multiply.

use anyhow::{Result, ensure};
use serde::{Deserialize, Serialize};
use specx_decoder::speculative::DraftStats;
use specx_decoder::speculative::calibrated::{
    DRAFT_FEATURES, FEATURES, TEMPERATURES, depth_bucket, features, logit, sigmoid,
};

/// One labelled position: the model's inputs, its depth bucket, whether it was accepted.
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    pub x: [f64; FEATURES],
    pub bucket: usize,
    pub label: bool,
}

impl Sample {
    /// `target`: the target's statistics at the round's last committed token, for a model
    /// that reads them.
    pub fn of(stats: &DraftStats, depth: usize, label: bool, target: Option<&DraftStats>) -> Self {
        Self { x: features(stats, depth, target), bucket: depth_bucket(depth), label }
    }
}

/// Inputs a model reads: the draft's only, or the target's too.
pub fn inputs(target: bool) -> usize {
    if target { FEATURES } else { DRAFT_FEATURES }
}

/// How well a model's probabilities fit held-out labels.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    /// Mean negative log-likelihood (nats).
    pub log_loss: f64,
    pub brier: f64,
    /// Expected calibration error over 10 equal-width bins.
    pub ece: f64,
}

/// What the fit found: the weights, the temperatures, and the held-out fit before and after
/// the temperatures, against the draft's own probability read as a chance of acceptance.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelFit {
    pub weights: Vec<f64>,
    pub temperatures: Vec<f64>,
    pub fit_samples: usize,
    pub holdout_samples: usize,
    /// Held-out acceptance rate.
    pub holdout_rate: f64,
    pub draft_probability: Calibration,
    pub uncalibrated: Calibration,
    pub calibrated: Calibration,
}

impl ModelFit {
    /// The calibrated chance that `s` is accepted.
    pub fn probability(&self, s: &Sample) -> f64 {
        sigmoid(logit(&self.weights, &s.x) / self.temperatures[s.bucket])
    }
}

/// `probs` against `labels`.
pub fn calibration(probs: &[f64], labels: &[bool]) -> Calibration {
    let n = probs.len().max(1) as f64;
    let eps = 1e-12;
    let mut c = Calibration::default();
    let mut bins = [(0.0f64, 0.0f64, 0usize); 10];
    for (&p, &y) in probs.iter().zip(labels) {
        let y = f64::from(u8::from(y));
        c.log_loss -= y * p.max(eps).ln() + (1.0 - y) * (1.0 - p).max(eps).ln();
        c.brier += (p - y).powi(2);
        let b = &mut bins[((p * 10.0) as usize).min(9)];
        (b.0, b.1, b.2) = (b.0 + p, b.1 + y, b.2 + 1);
    }
    c.ece = bins.iter().map(|(p, y, _)| (p - y).abs()).sum::<f64>() / n;
    c.log_loss /= n;
    c.brier /= n;
    c
}

/// Solves `a x = b` (Gaussian elimination with partial pivoting; `a` is small and positive
/// definite here).
fn solve(mut a: Vec<Vec<f64>>, mut b: Vec<f64>) -> Vec<f64> {
    let n = b.len();
    for col in 0..n {
        let pivot = (col..n).max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs())).unwrap_or(col);
        a.swap(col, pivot);
        b.swap(col, pivot);
        for r in col + 1..n {
            let f = a[r][col] / a[col][col];
            for c in col..n {
                a[r][c] -= f * a[col][c];
            }
            b[r] -= f * b[col];
        }
    }
    let mut x = vec![0.0; n];
    for r in (0..n).rev() {
        let s: f64 = (r + 1..n).map(|c| a[r][c] * x[c]).sum();
        x[r] = (b[r] - s) / a[r][r];
    }
    x
}

/// Logistic regression weights of the first `n` inputs by Newton's method on the penalised
/// log-likelihood.
pub fn logistic(samples: &[Sample], l2: f64, n: usize) -> Result<Vec<f64>> {
    ensure!(
        samples.iter().any(|s| s.label) && samples.iter().any(|s| !s.label),
        "the acceptance model needs both accepted and rejected positions to fit ({} positions)",
        samples.len()
    );
    let mut w = vec![0.0; n];
    for _ in 0..50 {
        let mut grad = vec![0.0; n];
        let mut hess = vec![vec![0.0; n]; n];
        for s in samples {
            let p = sigmoid(logit(&w, &s.x));
            let (r, v) = (f64::from(u8::from(s.label)) - p, p * (1.0 - p));
            for i in 0..n {
                grad[i] += r * s.x[i];
                for j in 0..=i {
                    hess[i][j] += v * s.x[i] * s.x[j];
                }
            }
        }
        for i in 0..n {
            for j in 0..i {
                hess[j][i] = hess[i][j];
            }
            // A small ridge on the constant too keeps the system solvable when a depth bucket
            // has no samples.
            let pen = if i == 0 { 1e-6 } else { l2 };
            grad[i] -= pen * w[i];
            hess[i][i] += pen + 1e-9;
        }
        let step = solve(hess, grad);
        for (w, d) in w.iter_mut().zip(&step) {
            *w += d;
        }
        if step.iter().map(|d| d.abs()).fold(0.0, f64::max) < 1e-10 {
            break;
        }
    }
    ensure!(w.iter().all(|w| w.is_finite()), "the logistic regression diverged");
    Ok(w)
}

/// The temperature (on a log grid refined by golden-section search over ln T in [-3, 3]) that
/// minimises the log loss of `sigmoid(z / T)` on `(z, label)` pairs; 1 without both labels.
fn temperature(pairs: &[(f64, bool)]) -> f64 {
    if !(pairs.iter().any(|p| p.1) && pairs.iter().any(|p| !p.1)) {
        return 1.0;
    }
    let loss = |ln_t: f64| -> f64 {
        let t = ln_t.exp();
        pairs
            .iter()
            .map(|&(z, y)| {
                let p = sigmoid(z / t).clamp(1e-12, 1.0 - 1e-12);
                if y { -p.ln() } else { -(1.0 - p).ln() }
            })
            .sum()
    };
    let g = (5f64.sqrt() - 1.0) / 2.0;
    let (mut a, mut b) = (-3.0f64, 3.0f64);
    for _ in 0..80 {
        let (c, d) = (b - g * (b - a), a + g * (b - a));
        if loss(c) < loss(d) {
            b = d;
        } else {
            a = c;
        }
    }
    ((a + b) / 2.0).exp()
}

/// The draft's own probability of its token at `s`, read as a chance of acceptance.
pub fn draft_probability(s: &Sample) -> f64 {
    s.x[1].exp()
}

/// Fits the weights of the first `n` inputs on `fit` and the temperatures on `holdout`.
pub fn fit(fit: &[Sample], holdout: &[Sample], l2: f64, n: usize) -> Result<ModelFit> {
    ensure!(!holdout.is_empty(), "no held-out positions to fit the temperatures on");
    let weights = logistic(fit, l2, n)?;
    let z = |s: &Sample| logit(&weights, &s.x);
    let temperatures: Vec<f64> = (0..TEMPERATURES)
        .map(|b| temperature(&holdout.iter().filter(|s| s.bucket == b).map(|s| (z(s), s.label)).collect::<Vec<_>>()))
        .collect();
    let labels: Vec<bool> = holdout.iter().map(|s| s.label).collect();
    let raw: Vec<f64> = holdout.iter().map(|s| sigmoid(z(s))).collect();
    let draft: Vec<f64> = holdout.iter().map(draft_probability).collect();
    let mut m = ModelFit {
        weights,
        temperatures,
        fit_samples: fit.len(),
        holdout_samples: holdout.len(),
        holdout_rate: labels.iter().filter(|&&y| y).count() as f64 / labels.len() as f64,
        draft_probability: calibration(&draft, &labels),
        uncalibrated: calibration(&raw, &labels),
        calibrated: Calibration::default(),
    };
    m.calibrated = calibration(&holdout.iter().map(|s| m.probability(s)).collect::<Vec<_>>(), &labels);
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use specx_run::seed::SplitMix64;

    fn unit(rng: &mut SplitMix64) -> f64 {
        (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn stats(p: f32) -> DraftStats {
        DraftStats { token_prob: p, top1: p, margin: p / 2.0, entropy: 1.0 - p, top10_top1: p }
    }

    /// Labels drawn from a known model: the fit recovers its probabilities, and the held-out
    /// fit of the calibrated model beats the draft probability's when the truth differs.
    #[test]
    fn recovers_a_known_acceptance_curve_and_calibrates_it() {
        let mut rng = SplitMix64::new(7);
        let rng = &mut rng;
        let truth = |p: f64, depth: usize| sigmoid(1.0 + 3.0 * p.ln() - 0.5 * f64::from(u8::from(depth >= 3)));
        let draw = |rng: &mut SplitMix64, n: usize| -> Vec<Sample> {
            (0..n)
                .map(|i| {
                    let p = 0.05 + 0.95 * unit(rng);
                    let depth = 1 + i % 5;
                    Sample::of(&stats(p as f32), depth, unit(rng) < truth(p, depth), None)
                })
                .collect()
        };
        let (train, held) = (draw(rng, 40_000), draw(rng, 10_000));
        let f = fit(&train, &held, 1e-3, DRAFT_FEATURES).unwrap();
        for (depth, p) in [(1, 0.3), (2, 0.9), (3, 0.6), (5, 0.95)] {
            let got = sigmoid(
                f.weights.iter().zip(features(&stats(p as f32), depth, None)).map(|(w, x)| w * x).sum::<f64>()
                    / f.temperatures[depth_bucket(depth)],
            );
            assert!((got - truth(p, depth)).abs() < 0.03, "depth {depth}, p {p}: {got} vs {}", truth(p, depth));
        }
        assert!(f.calibrated.log_loss < f.draft_probability.log_loss, "{f:?}");
        assert!(f.calibrated.ece < 0.02, "{f:?}");
        // Temperatures stay near 1 when the regression is already calibrated.
        assert!(f.temperatures.iter().take(5).all(|t| (t - 1.0).abs() < 0.15), "{:?}", f.temperatures);
    }

    #[test]
    fn a_miscalibrated_logit_gets_its_temperature() {
        // Logits twice too confident: the fitted temperature is about 2.
        let mut rng = SplitMix64::new(3);
        let rng = &mut rng;
        let pairs: Vec<(f64, bool)> = (0..20_000)
            .map(|_| {
                let z = 6.0 * unit(rng) - 3.0;
                (2.0 * z, unit(rng) < sigmoid(z))
            })
            .collect();
        let t = temperature(&pairs);
        assert!((t - 2.0).abs() < 0.15, "{t}");
    }

    #[test]
    fn one_label_only_is_refused() {
        let s = vec![Sample::of(&stats(0.5), 1, true, None); 10];
        assert!(logistic(&s, 1.0, DRAFT_FEATURES).unwrap_err().to_string().contains("both accepted and rejected"));
    }

    /// When acceptance also depends on the target's entropy at the last committed token, the
    /// model that reads it fits held-out labels better than the draft-only model, with a
    /// negative weight on it.
    #[test]
    fn the_target_inputs_are_fitted_when_they_carry_information() {
        let mut rng = SplitMix64::new(11);
        let rng = &mut rng;
        let truth = |p: f64, h: f64| sigmoid(1.0 + 3.0 * p.ln() - 1.5 * h);
        let draw = |rng: &mut SplitMix64, n: usize, target: bool| -> Vec<Sample> {
            (0..n)
                .map(|i| {
                    let p = 0.05 + 0.95 * unit(rng);
                    let h = 2.0 * unit(rng);
                    let t = DraftStats { entropy: h as f32, top1: (0.3 + 0.4 * unit(rng)) as f32, ..stats(0.5) };
                    Sample::of(
                        &stats(p as f32),
                        1 + i % 3,
                        unit(rng) < truth(p, f64::from(h as f32)),
                        target.then_some(&t),
                    )
                })
                .collect()
        };
        let (both, draft_only) = {
            let mut r2 = SplitMix64::new(11);
            let train = draw(rng, 30_000, true);
            let held = draw(rng, 10_000, true);
            let (train2, held2) = (draw(&mut r2, 30_000, false), draw(&mut r2, 10_000, false));
            (fit(&train, &held, 1e-3, FEATURES).unwrap(), fit(&train2, &held2, 1e-3, DRAFT_FEATURES).unwrap())
        };
        assert_eq!((both.weights.len(), draft_only.weights.len()), (FEATURES, DRAFT_FEATURES));
        assert!((both.weights[FEATURES - 1] + 1.5).abs() < 0.2, "{:?}", both.weights);
        assert!(
            both.calibrated.log_loss < draft_only.calibrated.log_loss - 0.02,
            "{} vs {}",
            both.calibrated.log_loss,
            draft_only.calibrated.log_loss
        );
    }
}
