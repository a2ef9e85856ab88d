//! RoPE's frequencies and how a checkpoint scales them for contexts longer than its
//! pre-training: one table of inverse frequencies per model, which every path (CPU, GPU,
//! trees, recorded calls) turns into the same cos/sin rows.

use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};

/// How a model scales RoPE's frequencies. Every variant is exact HF / llama.cpp arithmetic;
/// any other scheme (YaRN, dynamic NTK, LongRoPE, ...) is refused when the config is read.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum RopeScaling {
    /// Plain RoPE: frequency i is `theta^(-2i/head_dim)`.
    #[default]
    None,
    /// Every frequency divided by `factor` (HF `rope_type: linear`, GGUF
    /// `rope.scaling.type = linear`): positions read as `position / factor`.
    Linear { factor: f64 },
    /// Llama 3.1's piecewise scaling (HF `rope_type: llama3`): wavelengths shorter than
    /// `original_max_position_embeddings / high_freq_factor` unchanged, longer than
    /// `original_max_position_embeddings / low_freq_factor` divided by `factor`, a smooth
    /// blend between.
    Llama3 { factor: f64, low_freq_factor: f64, high_freq_factor: f64, original_max_position_embeddings: f64 },
    /// One divisor per frequency, as a GGUF stores it (`rope_freqs.weight`, which llama.cpp's
    /// converter writes for Llama 3.1+ from the llama3 parameters): frequency i is
    /// `theta^(-2i/head_dim) / factors[i]`.
    FreqFactors(Vec<f32>),
}

impl RopeScaling {
    /// The inverse frequencies of a head of `head_dim` values (`head_dim / 2` of them), in f64.
    /// Unscaled frequencies are computed exactly as before scaling existed, so a model without
    /// scaling keeps its bits.
    pub fn inv_freqs(&self, theta: f64, head_dim: usize) -> Vec<f64> {
        let half = head_dim / 2;
        (0..half)
            .map(|i| {
                let f = theta.powf(-2.0 * i as f64 / head_dim as f64);
                match self {
                    Self::None => f,
                    Self::Linear { factor } => f / factor,
                    Self::Llama3 { factor, low_freq_factor, high_freq_factor, original_max_position_embeddings } => {
                        let wavelen = 2.0 * std::f64::consts::PI / f;
                        let (low_wavelen, high_wavelen) = (
                            original_max_position_embeddings / low_freq_factor,
                            original_max_position_embeddings / high_freq_factor,
                        );
                        if wavelen < high_wavelen {
                            f
                        } else if wavelen > low_wavelen {
                            f / factor
                        } else {
                            let smooth = (original_max_position_embeddings / wavelen - low_freq_factor)
                                / (high_freq_factor - low_freq_factor);
                            (1.0 - smooth) * f / factor + smooth * f
                        }
                    }
                    Self::FreqFactors(factors) => f / factors[i] as f64,
                }
            })
            .collect()
    }

    /// Checks the parameters against a head of `head_dim` values.
    pub fn validate(&self, head_dim: usize) -> Result<()> {
        match self {
            Self::None => {}
            Self::Linear { factor } => {
                if !(*factor > 0.0 && factor.is_finite()) {
                    bail!("linear RoPE scaling needs a positive factor, got {factor}");
                }
            }
            Self::Llama3 { factor, low_freq_factor, high_freq_factor, original_max_position_embeddings } => {
                if !(*factor > 0.0 && *original_max_position_embeddings > 0.0 && high_freq_factor > low_freq_factor) {
                    bail!(
                        "llama3 RoPE scaling needs factor > 0, original_max_position_embeddings > 0 and \
                         high_freq_factor > low_freq_factor (got {factor}, {original_max_position_embeddings}, \
                         {high_freq_factor}, {low_freq_factor})"
                    );
                }
            }
            Self::FreqFactors(f) => {
                if f.len() != head_dim / 2 {
                    bail!(
                        "rope_freqs.weight has {} factors; a head of {head_dim} values needs {}",
                        f.len(),
                        head_dim / 2
                    );
                }
                if let Some(bad) = f.iter().find(|v| !(**v > 0.0 && v.is_finite())) {
                    bail!("rope_freqs.weight holds the factor {bad}; every factor must be positive");
                }
            }
        }
        Ok(())
    }

    /// A short name for tables and messages.
    pub fn describe(&self) -> String {
        match self {
            Self::None => "none".into(),
            Self::Linear { factor } => format!("linear x{factor}"),
            Self::Llama3 { factor, original_max_position_embeddings, .. } => {
                format!("llama3 x{factor} from {original_max_position_embeddings}")
            }
            Self::FreqFactors(_) => "rope_freqs factors".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Llama 3.1's scaling (x8, low 1, high 4) from an original context of `original`.
    fn llama3(original: f64) -> RopeScaling {
        RopeScaling::Llama3 {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position_embeddings: original,
        }
    }

    #[test]
    fn llama3_scaling_keeps_short_waves_divides_long_ones_and_blends_between() {
        // Llama 3.1's parameters on a 128-value head, theta 500,000.
        let s = llama3(8192.0);
        let plain = RopeScaling::None.inv_freqs(500_000.0, 128);
        let scaled = s.inv_freqs(500_000.0, 128);
        let wave = |f: f64| 2.0 * std::f64::consts::PI / f;
        let (mut kept, mut divided, mut blended) = (0, 0, 0);
        for (p, q) in plain.iter().zip(&scaled) {
            if wave(*p) < 2048.0 {
                assert_eq!(p, q);
                kept += 1;
            } else if wave(*p) > 8192.0 {
                assert!((p / q - 8.0).abs() < 1e-12);
                divided += 1;
            } else {
                assert!(q < p && q > &(p / 8.0));
                blended += 1;
            }
        }
        assert!(kept > 0 && divided > 0 && blended > 0, "{kept} {divided} {blended}");
    }

    #[test]
    fn frequency_factors_equal_the_llama3_formula_they_are_made_from() {
        // llama.cpp's converter stores 1 / ((1 - smooth) / factor + smooth) for the blend.
        let s = llama3(64.0);
        let plain = RopeScaling::None.inv_freqs(10_000.0, 16);
        let scaled = s.inv_freqs(10_000.0, 16);
        let factors: Vec<f32> = plain.iter().zip(&scaled).map(|(p, q)| (p / q) as f32).collect();
        let from_factors = RopeScaling::FreqFactors(factors).inv_freqs(10_000.0, 16);
        for (a, b) in scaled.iter().zip(&from_factors) {
            assert!((a / b - 1.0).abs() < 1e-6, "{a} {b}");
        }
    }
}
