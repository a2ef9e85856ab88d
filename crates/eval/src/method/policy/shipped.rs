//! The stop rule that ships: the rule that came out best when every rule's setting was chosen
//! on tuning traces and judged once on the test traces (`specx eval tune`,
//! docs/reproductions/adaptive-drafting.md#out-of-sample), with one setting for GPU-like prices
//! (a verification costs about the same for any number of rows) and one for CPU prices (each
//! row adds to it). `specx decode --method adaptive` and `policies.adaptive` in a grid use it.

use super::{PolicySpec, Reads};
use anyhow::{Context, Result, ensure};
use clap::ValueEnum;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Which of the shipped settings: the one chosen at GPU prices or at CPU prices.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Hardware {
    /// Chosen at the SpecDec++ paper's A100 times (no per-row cost).
    Gpu,
    /// Chosen at a CPU's profiled `q8` times (each verified row costs a third of a call).
    Cpu,
}

/// `policies.adaptive = { hardware = ["gpu", "cpu"] }`: the shipped rule at the settings
/// chosen for these price models.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdaptivePolicies {
    pub hardware: Vec<Hardware>,
}

/// `checkpoints/adaptive/rule.json`: the two settings and where they come from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShippedRule {
    pub gpu: PolicySpec,
    pub cpu: PolicySpec,
    /// How the settings were chosen (for the reader of the file).
    pub chosen: String,
}

/// Where the shipped rule lives: `checkpoints/adaptive/rule.json` of the source tree this
/// binary was built from.
pub fn shipped_rule_file() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../checkpoints/adaptive/rule.json")
}

impl ShippedRule {
    pub fn read(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading the shipped stop rule {} (it ships in the specx repository this binary was built from; choose a --policy instead)", path.display()))?;
        let rule: Self =
            serde_json::from_str(&text).with_context(|| format!("{}: not a shipped stop rule", path.display()))?;
        for p in [&rule.gpu, &rule.cpu] {
            ensure!(
                !matches!(p.reads(), Reads::DraftHiddenState | Reads::ArOutput),
                "{}: a shipped rule must need no model of its own (no head, no oracle)",
                path.display()
            );
        }
        Ok(rule)
    }

    pub fn policy(&self, h: Hardware) -> PolicySpec {
        match h {
            Hardware::Gpu => self.gpu.clone(),
            Hardware::Cpu => self.cpu.clone(),
        }
    }
}

/// The shipped rule's setting for `h`.
pub fn shipped_policy(h: Hardware) -> Result<PolicySpec> {
    Ok(ShippedRule::read(&shipped_rule_file())?.policy(h))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_rule_reads_and_checks() {
        let r = ShippedRule::read(&shipped_rule_file()).unwrap();
        assert_ne!(r.gpu, r.cpu, "the two price models chose the same setting: one entry would do");
        let dir = tempfile::tempdir().unwrap();
        let bad = dir.path().join("rule.json");
        std::fs::write(&bad, r#"{"gpu": {"kind": "oracle"}, "cpu": {"kind": "fixed", "k": 2}, "chosen": ""}"#).unwrap();
        assert!(ShippedRule::read(&bad).unwrap_err().to_string().contains("no model of its own"));
        assert!(
            format!("{:#}", ShippedRule::read(&dir.path().join("none.json")).unwrap_err())
                .contains("choose a --policy")
        );
    }
}
