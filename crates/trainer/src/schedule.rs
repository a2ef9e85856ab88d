//! The learning-rate schedule of the paper's training (HF Trainer's "cosine" with warmup):
//! linear warmup from 0 to `base` over `warmup` steps, then half a cosine down to 0 at `total`.

/// Learning rate at optimiser step `step` (0-based) of `total`.
pub fn warmup_cosine(base: f64, step: usize, warmup: usize, total: usize) -> f64 {
    if step < warmup {
        return base * step as f64 / warmup as f64;
    }
    let progress = (step - warmup) as f64 / (total - warmup).max(1) as f64;
    base * 0.5 * (1.0 + (std::f64::consts::PI * progress.min(1.0)).cos())
}

#[cfg(test)]
mod tests {
    use super::warmup_cosine;

    #[test]
    fn warms_up_linearly_then_decays_to_zero() {
        assert_eq!(warmup_cosine(1.0, 0, 10, 110), 0.0);
        assert!((warmup_cosine(1.0, 5, 10, 110) - 0.5).abs() < 1e-12);
        assert!((warmup_cosine(1.0, 10, 10, 110) - 1.0).abs() < 1e-12);
        assert!((warmup_cosine(1.0, 60, 10, 110) - 0.5).abs() < 1e-12);
        assert!(warmup_cosine(1.0, 110, 10, 110).abs() < 1e-12);
        assert!((warmup_cosine(2.0, 0, 0, 4) - 2.0).abs() < 1e-12);
    }
}
