//! SpecDec++'s timing model (§5.2, eq. 3.1 and 5.1): a request's time is
//! `T = t_draft N_draft + t_target N_target`; least squares over a method family's requests
//! gives the per-forward times and R². On a CPU a verification's cost grows with the rows it
//! checks, so a second fit adds the rows verified as a term.

use super::results::ResultRow;
use serde::Serialize;

/// The SpecDec++ paper's A100 forward times (§5.2): draft 7B 0.0234 s, target 70B 0.112 s.
pub const PAPER_TIMES: (f64, f64) = (0.0234, 0.112);

/// A least-squares fit without intercept.
#[derive(Clone, Debug, Serialize)]
pub struct Fit {
    pub coefficients: Vec<f64>,
    /// Centred R² (1 - SSE / SST around the mean of T); NaN when T does not vary.
    pub r2: f64,
    pub n: usize,
}

/// Requests a fit needs for each fitted time: with fewer, the fit follows the noise of a few
/// requests (and a smoke run's 3 prompts give 3 requests a family).
pub const MIN_REQUESTS_PER_TERM: usize = 5;

impl Fit {
    /// Why the fit's times cannot be read as forward times, if they cannot: too few requests
    /// for its terms, a time <= 0 (too alike requests, prefill dominating short outputs), or a
    /// centred R² <= 0 (the terms explain T no better than its mean). Such a fit is reported
    /// as missing, never printed as times.
    pub fn unusable(&self) -> Option<String> {
        let terms = self.coefficients.len();
        if self.n < MIN_REQUESTS_PER_TERM * terms {
            return Some(format!(
                "none: {} requests for {terms} times (a fit needs {} a time)",
                self.n, MIN_REQUESTS_PER_TERM
            ));
        }
        if !self.has_positive_times() {
            return Some(format!("none: a fitted time <= 0 over {} requests (too alike)", self.n));
        }
        if !(self.r2 > 0.0) {
            return Some(format!("none: R² {:.2} over {} requests (no better than the mean time)", self.r2, self.n));
        }
        None
    }

    /// Every fitted time is positive (the times can be used at all; see [`Self::unusable`]
    /// for whether they can be printed as a measurement).
    pub fn has_positive_times(&self) -> bool {
        self.coefficients.iter().all(|c| *c > 0.0)
    }

    pub fn is_usable(&self) -> bool {
        self.unusable().is_none()
    }

    /// The coefficients with R², or why there are none.
    pub fn describe(fit: Option<&Fit>) -> String {
        match fit {
            None => "none: the counts cannot separate the times (too few requests, or a count always 0)".into(),
            Some(f) => f.unusable().unwrap_or_else(|| {
                format!(
                    "{} (R² {:.4})",
                    f.coefficients.iter().map(|c| format!("{c:.4}")).collect::<Vec<_>>().join(", "),
                    f.r2
                )
            }),
        }
    }
}

/// Least squares of `y` on the columns of `x` (no intercept) by the normal equations.
pub fn least_squares(x: &[Vec<f64>], y: &[f64]) -> Option<Fit> {
    let p = x.first()?.len();
    if x.len() < p + 1 {
        return None;
    }
    let mut a = vec![vec![0.0; p + 1]; p];
    for (row, &yi) in x.iter().zip(y) {
        for i in 0..p {
            for j in 0..p {
                a[i][j] += row[i] * row[j];
            }
            a[i][p] += row[i] * yi;
        }
    }
    // Gaussian elimination with partial pivoting.
    for c in 0..p {
        let piv = (c..p).max_by(|&i, &j| a[i][c].abs().total_cmp(&a[j][c].abs()))?;
        if a[piv][c].abs() < 1e-12 {
            return None;
        }
        a.swap(c, piv);
        for r in 0..p {
            if r != c {
                let f = a[r][c] / a[c][c];
                for k in c..=p {
                    a[r][k] -= f * a[c][k];
                }
            }
        }
    }
    let coefficients: Vec<f64> = (0..p).map(|i| a[i][p] / a[i][i]).collect();
    let mean = y.iter().sum::<f64>() / y.len() as f64;
    let sst: f64 = y.iter().map(|v| (v - mean).powi(2)).sum();
    let sse: f64 = x
        .iter()
        .zip(y)
        .map(|(row, &yi)| (yi - row.iter().zip(&coefficients).map(|(a, b)| a * b).sum::<f64>()).powi(2))
        .sum();
    Some(Fit { coefficients, r2: if sst > 1e-12 * y.len() as f64 { 1.0 - sse / sst } else { f64::NAN }, n: y.len() })
}

/// Eq. 5.1: tokens per second predicted from the counts and the forward times.
pub fn predicted_throughput(n: f64, n_discarded: f64, n_target: f64, t_draft: f64, t_target: f64) -> f64 {
    let latency = t_draft + t_draft * n_discarded / n + (t_target - t_draft) * n_target / n;
    1.0 / latency
}

/// The timing model of one method family's rows (real runs only).
#[derive(Clone, Debug, Serialize)]
pub struct TimingModel {
    /// T on (N_draft, N_target).
    pub paper: Option<Fit>,
    /// T on (N_draft, N_target, rows verified).
    pub with_rows: Option<Fit>,
}

pub fn fit_family(rows: &[&ResultRow]) -> TimingModel {
    let real: Vec<&&ResultRow> = rows.iter().filter(|r| !r.replayed).collect();
    let y: Vec<f64> = real.iter().map(|r| r.total_time_s).collect();
    let x2: Vec<Vec<f64>> = real.iter().map(|r| vec![r.n_draft_calls as f64, r.n_target_calls as f64]).collect();
    let x3: Vec<Vec<f64>> =
        real.iter().map(|r| vec![r.n_draft_calls as f64, r.n_target_calls as f64, rows_verified(r) as f64]).collect();
    TimingModel { paper: least_squares(&x2, &y), with_rows: least_squares(&x3, &y) }
}

/// Rows the target checked in verification calls: K + 1 per round.
pub fn rows_verified(r: &ResultRow) -> usize {
    r.n_drafted + r.drafted_per_round.len()
}

/// Standalone target time per token: T = t N over single-stream AR rows.
pub fn standalone_target(rows: &[&ResultRow]) -> Option<Fit> {
    let ar: Vec<&&ResultRow> =
        rows.iter().filter(|r| r.setting.family() == "ar" && !r.replayed && r.batch == 1).collect();
    least_squares(
        &ar.iter().map(|r| vec![r.n_target_calls as f64]).collect::<Vec<_>>(),
        &ar.iter().map(|r| r.total_time_s).collect::<Vec<_>>(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recovers_exact_coefficients() {
        let x: Vec<Vec<f64>> = (0..10).map(|i| vec![i as f64, (i * i % 7) as f64 + 1.0]).collect();
        let y: Vec<f64> = x.iter().map(|r| 0.02 * r[0] + 0.1 * r[1]).collect();
        let f = least_squares(&x, &y).unwrap();
        assert!(
            (f.coefficients[0] - 0.02).abs() < 1e-9
                && (f.coefficients[1] - 0.1).abs() < 1e-9
                && (f.r2 - 1.0).abs() < 1e-9
        );
        // Eq. 5.1 with no drafting is AR: one target call per token.
        assert!((predicted_throughput(10.0, 0.0, 10.0, 0.02, 0.1) - 10.0).abs() < 1e-9);
        assert!(f.is_usable() && Fit::describe(Some(&f)).starts_with("0.0200, 0.1000"));
    }

    /// Times that only a negative draft time explains give no printed times.
    #[test]
    fn a_negative_time_is_reported_as_none() {
        let x: Vec<Vec<f64>> = (1..12).map(|i| vec![i as f64, (i % 3) as f64 + 1.0]).collect();
        let y: Vec<f64> = x.iter().map(|r| -0.05 * r[0] + 0.5 * r[1]).collect();
        let f = least_squares(&x, &y).unwrap();
        assert!(f.coefficients[0] < 0.0 && !f.has_positive_times());
        let text = Fit::describe(Some(&f));
        assert!(text.starts_with("none:") && !text.contains("-0.05"), "{text}");
    }

    /// A fit over fewer requests than it needs, or one that explains T worse than its mean,
    /// gives no printed times either.
    #[test]
    fn too_few_requests_or_a_negative_r2_are_reported_as_none() {
        let x: Vec<Vec<f64>> = (1..6).map(|i| vec![i as f64, (i % 3) as f64 + 1.0]).collect();
        let y: Vec<f64> = x.iter().map(|r| 0.02 * r[0] + 0.1 * r[1]).collect();
        let f = least_squares(&x, &y).unwrap();
        assert!(f.has_positive_times() && !f.is_usable());
        assert!(Fit::describe(Some(&f)).contains("5 requests for 2 times"), "{}", Fit::describe(Some(&f)));
        // T nearly constant while the counts grow: a positive slope with R² below 0.
        let x: Vec<Vec<f64>> = (1..12).map(|i| vec![i as f64]).collect();
        let y: Vec<f64> = (1..12).map(|i| 1.0 + 0.001 * (i % 2) as f64).collect();
        let f = least_squares(&x, &y).unwrap();
        assert!(f.coefficients[0] > 0.0 && f.r2 < 0.0, "{f:?}");
        assert!(Fit::describe(Some(&f)).starts_with("none: R²"), "{}", Fit::describe(Some(&f)));
    }
}
