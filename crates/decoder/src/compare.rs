//! NaN-aware comparisons for numeric checks. `f32::max` ignores NaN (`0f32.max(f32::NAN)` is
//! 0), so a worst difference folded with it lets rows of NaN pass; these propagate NaN
//! instead, and a `worst <= tolerance` check then fails.

/// The larger of two values, or NaN if either is NaN.
pub fn nan_max(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() { f32::NAN } else { a.max(b) }
}

/// [`nan_max`] for f64.
pub fn nan_max64(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() { f64::NAN } else { a.max(b) }
}

/// Largest |a_i - b_i| (0 for empty slices). Equal values count 0, equal infinities too (a
/// masked logit of -inf on both sides); NaN if any value is NaN or only one side is infinite.
/// Panics when the lengths differ.
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "comparing {} values with {}", a.len(), b.len());
    a.iter().zip(b).fold(0.0, |worst, (&x, &y)| {
        let d = if x == y {
            0.0
        } else if x.is_finite() && y.is_finite() {
            (x - y).abs()
        } else {
            f32::NAN
        };
        nan_max(worst, d)
    })
}

/// Largest |a_i| (0 for an empty slice); NaN if any value is NaN or infinite.
pub fn max_abs(a: &[f32]) -> f32 {
    a.iter().fold(0.0, |worst, &x| nan_max(worst, if x.is_finite() { x.abs() } else { f32::NAN }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nan_and_one_sided_infinities_are_never_within_a_tolerance() {
        let nan_row = [0.0, f32::NAN, 1.0];
        let ok_row = [0.0, 0.0, 1.0];
        // The fold these replace lets NaN through: this is the bug they exist for.
        let folded = nan_row.iter().zip(&ok_row).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max);
        assert!(folded <= 1e-6, "f32::max ignores NaN: {folded}");
        assert!(!(max_abs_diff(&nan_row, &ok_row) <= 1e-6));
        assert!(!(max_abs_diff(&ok_row, &nan_row) <= 1e-6));
        assert!(!(max_abs_diff(&[f32::INFINITY], &[1.0]) <= 1e6));
        assert!(!(max_abs(&[1.0, f32::NEG_INFINITY]) <= 1e6));
        assert!(nan_max(f32::NAN, 1.0).is_nan() && nan_max(1.0, f32::NAN).is_nan());
        assert!(nan_max64(f64::NAN, 1.0).is_nan() && nan_max64(1.0, f64::NAN).is_nan());
    }

    #[test]
    fn finite_rows_and_matching_masks_compare_as_numbers() {
        assert_eq!(max_abs_diff(&[1.0, -2.0, 3.5], &[1.5, -2.0, 3.0]), 0.5);
        assert_eq!(max_abs_diff(&[f32::NEG_INFINITY, 1.0], &[f32::NEG_INFINITY, 1.25]), 0.25);
        assert_eq!(max_abs_diff(&[], &[]), 0.0);
        assert_eq!(max_abs(&[-3.0, 2.0]), 3.0);
        assert_eq!(nan_max(1.0, 2.0), 2.0);
    }

    #[test]
    #[should_panic(expected = "comparing 2 values with 1")]
    fn different_lengths_are_refused() {
        max_abs_diff(&[1.0, 2.0], &[1.0]);
    }
}
