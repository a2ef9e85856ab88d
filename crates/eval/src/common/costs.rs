//! Forward costs that price replayed counts as seconds: what `specx eval tune` chooses
//! settings at and `specx reproduce adaptive` reports throughputs at.

use super::profile_data::Profile;
use super::run_rows::Group;
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use specx_run::paths::resolve_path;
use std::path::{Path, PathBuf};

/// Forward costs that price counts: `t_draft` per draft forward, `t_target` per target call,
/// `t_row` per row a verification checks; given as numbers, or read from a `specx profile`
/// JSON of any device (`profile`, after `context` tokens: [`Profile::call_costs`]), so a GPU's
/// measured latencies price the same replayed counts as the paper's A100 times.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Costs {
    pub name: String,
    #[serde(default)]
    pub t_draft: f64,
    #[serde(default)]
    pub t_target: f64,
    #[serde(default)]
    pub t_row: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<PathBuf>,
    /// Context of the profile's curves to read (the nearest profiled one); default 256.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<usize>,
}

impl Costs {
    /// Fills the times from `profile` where one is given (resolved against `base`); checks
    /// that every model prices something.
    pub fn resolve(&mut self, base: &Path) -> Result<()> {
        if let Some(p) = &self.profile {
            anyhow::ensure!(
                self.t_draft == 0.0 && self.t_target == 0.0 && self.t_row == 0.0,
                "[[costs]] '{}': give either a profile or the times, not both",
                self.name
            );
            let path = resolve_path(p, base);
            let profile = Profile::read(&path).with_context(|| format!("[[costs]] '{}'", self.name))?;
            (self.t_draft, self.t_target, self.t_row) = profile
                .call_costs(self.context.unwrap_or(256))
                .with_context(|| format!("[[costs]] '{}': {}", self.name, path.display()))?;
            self.profile = Some(path);
        }
        anyhow::ensure!(
            self.t_draft > 0.0 && self.t_target > 0.0 && self.t_row >= 0.0,
            "[[costs]] '{}': t_draft and t_target must be positive (or give a profile)",
            self.name
        );
        Ok(())
    }
}

impl Costs {
    /// Tokens per second of a group's summed counts.
    pub fn throughput(&self, g: &Group) -> f64 {
        g.n() / self.seconds(g.draft_calls(), g.target_calls(), g.rows_verified())
    }

    /// Seconds of `draft_calls` draft forwards and `target_calls` target calls that check
    /// `rows` rows in verifications.
    pub fn seconds(&self, draft_calls: f64, target_calls: f64, rows: f64) -> f64 {
        self.t_draft * draft_calls + self.t_target * target_calls + self.t_row * rows
    }

    /// Autoregressive decoding at these costs: one single-row target call per token.
    pub fn ar(&self) -> f64 {
        1.0 / (self.t_target + self.t_row)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn costs_come_from_a_profile_of_any_device_and_a_bad_model_is_refused() {
        use crate::common::profile_data::{ForwardCurve, ModelProfile};
        let model = |role: &str, seconds: Vec<f64>| ModelProfile {
            role: role.into(),
            path: PathBuf::new(),
            sha256: String::new(),
            layers: 1,
            forward: vec![ForwardCurve {
                context: 256,
                seconds,
                tree_seconds: Vec::new(),
                recorded_seconds: Vec::new(),
            }],
            layer_context: 256,
            attention_s: vec![],
            mlp_s: vec![],
            lm_head_s: 0.0,
            ttft_s: vec![],
            tpot_s: 0.01,
            launches: Vec::new(),
        };
        // A target whose call of r rows costs 0.02 + 0.001 r exactly; the draft's one row 0.005.
        let target: Vec<f64> = (1..=21).map(|r| 0.02 + 0.001 * r as f64).collect();
        let machine = crate::common::machine::Machine { cpu: "x".into(), cores: 1, bandwidth_gb_s: 1.0 };
        let p = Profile {
            weights: "f32".into(),
            device: "cuda:0".into(),
            machine,
            reps: 1,
            models: vec![model("draft", vec![0.005, 0.006]), model("target", target)],
        };
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("gpu.json"), serde_json::to_string(&p).unwrap()).unwrap();
        let mut c = Costs {
            name: "GPU".into(),
            t_draft: 0.0,
            t_target: 0.0,
            t_row: 0.0,
            profile: Some("gpu.json".into()),
            context: None,
        };
        c.resolve(dir.path()).unwrap();
        assert!(
            (c.t_draft - 0.005).abs() < 1e-12 && (c.t_target - 0.02).abs() < 1e-9 && (c.t_row - 0.001).abs() < 1e-9,
            "{c:?}"
        );
        let mut both = Costs { t_draft: 0.1, ..c.clone() };
        both.profile = Some("gpu.json".into());
        assert!(both.resolve(dir.path()).unwrap_err().to_string().contains("not both"));
        let mut none =
            Costs { name: "x".into(), t_draft: 0.0, t_target: 0.0, t_row: 0.0, profile: None, context: None };
        assert!(none.resolve(dir.path()).is_err());
    }
}
