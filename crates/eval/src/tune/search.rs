//! Coordinate search: the fit of threshold-plus's parameters to replayed throughput. Each
//! step tries a handful of values of one coordinate around the current point (all of them in
//! one evaluation, so the replay grows the draft's branches for them together), moves to the
//! best if it is strictly better, and the step sizes halve after every pass over the
//! coordinates. Deterministic: ties keep the current point, then the earliest candidate.

use anyhow::Result;
use serde::Serialize;

/// Offsets tried around the current value, in units of the coordinate's step.
const OFFSETS: [f64; 8] = [-2.0, -1.0, -0.5, -0.25, 0.25, 0.5, 1.0, 2.0];

/// One accepted move.
#[derive(Clone, Debug, Serialize)]
pub struct Move {
    pub pass: usize,
    pub coordinate: usize,
    pub value: f64,
    pub objective: f64,
}

/// Where a search ended.
#[derive(Clone, Debug, Serialize)]
pub struct SearchResult {
    pub x: Vec<f64>,
    pub objective: f64,
    /// The objective at the start (the point the search improves on).
    pub start_objective: f64,
    pub moves: Vec<Move>,
    pub evaluations: usize,
}

/// Maximises `objective` (which scores a batch of points) from `start`, with first step sizes
/// `steps`, over `passes` passes.
pub fn coordinate_search(
    start: &[f64],
    steps: &[f64],
    passes: usize,
    mut objective: impl FnMut(&[Vec<f64>]) -> Result<Vec<f64>>,
) -> Result<SearchResult> {
    assert_eq!(start.len(), steps.len(), "one step size per coordinate");
    let mut x = start.to_vec();
    let mut best = objective(std::slice::from_ref(&x))?[0];
    let start_objective = best;
    let (mut moves, mut evaluations) = (Vec::new(), 1);
    for pass in 0..passes {
        let scale = 0.5f64.powi(pass as i32);
        let mut moved = false;
        for c in 0..x.len() {
            let candidates: Vec<Vec<f64>> = OFFSETS
                .iter()
                .map(|o| {
                    let mut y = x.clone();
                    y[c] += o * steps[c] * scale;
                    y
                })
                .collect();
            let scores = objective(&candidates)?;
            evaluations += candidates.len();
            let (i, &s) = scores
                .iter()
                .enumerate()
                .fold((0, &f64::NEG_INFINITY), |acc, (i, s)| if *s > *acc.1 { (i, s) } else { acc });
            if s > best {
                best = s;
                x = candidates[i].clone();
                moved = true;
                moves.push(Move { pass, coordinate: c, value: x[c], objective: s });
            }
        }
        if !moved && pass > 0 {
            break;
        }
    }
    Ok(SearchResult { x, objective: best, start_objective, moves, evaluations })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_maximum_of_a_separable_bowl_and_never_gets_worse() {
        let target = [0.7, -1.3, 0.0];
        let f = |p: &[Vec<f64>]| {
            Ok(p.iter().map(|x| -x.iter().zip(&target).map(|(a, b)| (a - b).powi(2)).sum::<f64>()).collect())
        };
        let r = coordinate_search(&[0.0, 0.0, 0.0], &[0.5, 0.5, 0.5], 6, f).unwrap();
        assert!(r.objective > -1e-3 && r.objective >= r.start_objective, "{r:?}");
        for (a, b) in r.x.iter().zip(&target) {
            assert!((a - b).abs() < 0.05, "{:?}", r.x);
        }
        // Every move improved strictly.
        assert!(r.moves.windows(2).all(|w| w[1].objective > w[0].objective));
    }

    #[test]
    fn a_flat_objective_keeps_the_start() {
        let r = coordinate_search(&[1.0, 2.0], &[1.0, 1.0], 3, |p: &[Vec<f64>]| Ok(vec![5.0; p.len()])).unwrap();
        assert_eq!(r.x, vec![1.0, 2.0]);
        assert!(r.moves.is_empty());
    }
}
