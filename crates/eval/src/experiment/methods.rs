//! `[methods]` of an eval config: the papers' sections (`specdec`, `specdecpp`, `confidence`,
//! `dsi`, `easyspec`), shorthands for their grids, and `[[methods.grid]]` products of axes.

use super::axes::MethodGrid;
use crate::method::policy::confidence::ConfidencePolicies;
use crate::method::policy::fixed::FixedPolicies;
use crate::method::policy::head::{HeadPolicies, check_head_dirs, paper_bounds};
use anyhow::{Context, Result, ensure};
use serde::{Deserialize, Serialize};
use specx_decoder::speculative::Calibration;
use std::path::PathBuf;

impl MethodsConfig {
    /// The heads and every path the grids name, relative to the config until resolved.
    pub fn paths_mut(&mut self) -> Vec<&mut PathBuf> {
        let mut out: Vec<&mut PathBuf> = self.specdecpp.iter_mut().flat_map(|g| &mut g.heads).collect();
        out.extend(self.easyspec.iter_mut().flat_map(|g| &mut g.heads));
        out.extend(self.grid.iter_mut().flat_map(MethodGrid::paths_mut));
        out
    }

    /// Every head checkpoint directory the grid names (SpecDec++'s and EasySpec's), each head
    /// name (its directory's name, what settings refer to) once, in order.
    pub fn head_dirs(&self) -> Vec<&PathBuf> {
        let mut seen = std::collections::BTreeSet::new();
        let all = self
            .specdecpp
            .iter()
            .flat_map(|g| &g.heads)
            .chain(self.easyspec.iter().flat_map(|g| &g.heads))
            .chain(self.grid.iter().flat_map(|g| g.head_dirs()));
        all.filter(|d| seen.insert(crate::method::head_name(d))).collect()
    }
}

/// The grid of methods. AR always runs first for every prompt: it is the reference of the
/// speedups and of the losslessness audit.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MethodsConfig {
    pub specdec: Option<SpecDecGrid>,
    pub specdecpp: Option<SpecDecPPGrid>,
    pub confidence: Option<ConfidenceGrid>,
    /// DSI, run for real (threads on this machine's cores).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dsi: Option<DsiGrid>,
    /// EasySpec's layer-parallel drafter, run for real.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub easyspec: Option<EasySpecGrid>,
    /// The drafts every method of the papers' sections runs with (each method once per draft):
    /// `{}` as loaded, or made cheaper with `vocab` (the N most frequent tokens of
    /// `vocab_table`, default the shipped table) and `weights` (`q4_0`, `q5_0`, `q8_0`).
    /// `[[methods.grid]]` products have their own `drafts`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drafts: Vec<specx_decoder::DraftTransform>,
    /// Products of axes (drafters x policies x schedulers, see [`super::axes`]), after the
    /// papers' sections.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub grid: Vec<MethodGrid>,
    /// The oracle of SpecDec++ Theorem 4.1 (replay grids only: it needs the AR output).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub oracle: bool,
    /// A greedy *trace run*: AR only, this many prompts decoded at once (ragged batches,
    /// outputs bitwise those of one stream; times are shares of batched steps), as input for
    /// `specx eval replay`. No other method may be listed, and every sampling must be greedy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ar_batch: Option<usize>,
}

/// `[methods.specdec]`: fixed K for each K (the fixed policy's axis).
pub type SpecDecGrid = FixedPolicies;
/// `[methods.specdecpp]`: SpecDec++, every head x threshold x bounds (the head policy's axis).
pub type SpecDecPPGrid = HeadPolicies;
/// `[methods.confidence]`: the confidence baseline, every threshold x bounds.
pub type ConfidenceGrid = ConfidencePolicies;

/// EasySpec: every strategy x calibration policy, each under fixed K for every `k`, under
/// every head x threshold x bounds, and under DSI with every server count x `k`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EasySpecGrid {
    /// Layer-parallel strategies: `lp1`..`lp5` (the paper's Table 6 presets) or the paper's
    /// notation, e.g. `"0,1-3,4-7,8-11,12-15,16-19,20-22,23"`.
    pub strategies: Vec<String>,
    /// Calibration policies: `never`, `prefill_only`, `every_round`, `every_mismatch`.
    pub calibrations: Vec<Calibration>,
    #[serde(default)]
    pub k: Vec<usize>,
    /// Head checkpoint directories for SpecDec++'s stop rule on the fuzzy draft.
    #[serde(default)]
    pub heads: Vec<PathBuf>,
    #[serde(default)]
    pub thresholds: Vec<f64>,
    #[serde(default = "paper_bounds")]
    pub bounds: Vec<[usize; 2]>,
    /// Target workers: also run every strategy x calibration x `k` under DSI.
    #[serde(default)]
    pub servers: Vec<usize>,
    /// Threads running a group's attentions (timing only: the numerics never depend on it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers: Option<usize>,
    /// Devices of the draft's attention layers (`["cpu", "wgpu:0"]`): layer i's attention and
    /// cache on the (i mod len)-th, so a group's attentions run on different devices at once,
    /// one thread per device (`workers` is then not used). The EasySpec settings get a copy of
    /// the draft placed so; its embeddings, MLPs and head stay on the [models] device.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<String>,
}

/// DSI: every server count x lookahead (fixed blocks).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DsiGrid {
    /// Target workers (speculation-parallelism degrees).
    pub servers: Vec<usize>,
    /// Devices of the target workers, one worker per device (`["cpu", "wgpu:0"]`): the target
    /// is loaded on each (the [models] device's copy is reused), and `servers` must be the
    /// list's length. DSI-scheduled EasySpec settings with that many servers use them too.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<String>,
    /// Draft tokens per verification task.
    #[serde(default)]
    pub lookaheads: Vec<usize>,
    /// A `specx profile` JSON: adds the paper's Eq. 1 lookahead for each server count (from
    /// the target and draft TPOT).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<PathBuf>,
}

impl MethodsConfig {
    /// Ranges, and the files the sections name (checked before any model is loaded).
    pub fn validate(&self) -> Result<()> {
        let m = self;
        if let Some(g) = &m.specdec {
            ensure!(!g.k.is_empty() && g.k.iter().all(|&k| k >= 1), "[methods.specdec] k needs values >= 1");
        }
        if let Some(g) = &m.specdecpp {
            ensure!(
                !g.heads.is_empty() && !g.thresholds.is_empty() && !g.bounds.is_empty(),
                "[methods.specdecpp] needs heads, thresholds and bounds"
            );
            check_head_dirs(g.heads.iter().map(PathBuf::as_path), "[methods.specdecpp]")?;
            check_bounds(&g.bounds, "specdecpp")?;
            ensure!(
                g.thresholds.iter().all(|t| (0.0..=1.0).contains(t)),
                "[methods.specdecpp] thresholds must be in [0, 1]"
            );
        }
        ensure!(
            !m.oracle,
            "[methods] oracle can only be replayed (specx eval replay RUN_DIR --config GRID): it needs the AR output in advance"
        );
        if let Some(g) = &m.confidence {
            ensure!(
                !g.thresholds.is_empty() && !g.bounds.is_empty(),
                "[methods.confidence] needs thresholds and bounds"
            );
            check_bounds(&g.bounds, "confidence")?;
            ensure!(
                g.thresholds.iter().all(|t| (0.0..=1.0).contains(t)),
                "[methods.confidence] thresholds must be in [0, 1]"
            );
        }
        if let Some(g) = &m.dsi {
            ensure!(
                !g.servers.is_empty() && g.servers.iter().all(|&s| s >= 1),
                "[methods.dsi] servers needs values >= 1"
            );
            ensure!(g.lookaheads.iter().all(|&k| k >= 1), "[methods.dsi] lookaheads must be >= 1");
            ensure!(
                !g.lookaheads.is_empty() || g.profile.is_some(),
                "[methods.dsi] give lookaheads, or a profile for Eq. 1's lookahead"
            );
            if let Some(p) = &g.profile {
                ensure!(
                    p.is_file(),
                    "[methods.dsi] profile {} does not exist (`specx profile` writes it)",
                    p.display()
                );
            }
            if !g.devices.is_empty() {
                let workers = specx_decoder::parse_placement_list(&g.devices).context("[methods.dsi] devices")?;
                workers.iter().try_for_each(specx_decoder::Placement::check).context("[methods.dsi] devices")?;
                ensure!(
                    g.servers.iter().all(|&s| s == g.devices.len()),
                    "[methods.dsi] devices gives one worker per device: servers must be [{}]",
                    g.devices.len()
                );
            }
        }
        for g in &m.grid {
            g.validate()?;
        }
        if let Some(g) = &m.easyspec {
            ensure!(
                !g.strategies.is_empty() && !g.calibrations.is_empty(),
                "[methods.easyspec] needs strategies and calibrations"
            );
            for s in &g.strategies {
                // The layer count is checked against the draft once it is loaded.
                specx_decoder::layer_groups::LayerGroups::check_syntax(s)
                    .with_context(|| format!("[methods.easyspec] strategy '{s}'"))?;
            }
            ensure!(g.k.iter().chain(&g.servers).all(|&v| v >= 1), "[methods.easyspec] k and servers need values >= 1");
            ensure!(
                !g.k.is_empty() || !g.heads.is_empty(),
                "[methods.easyspec] give k (fixed K) or heads and thresholds (SpecDec++'s stop rule)"
            );
            ensure!(
                g.heads.is_empty() == g.thresholds.is_empty(),
                "[methods.easyspec] heads and thresholds go together"
            );
            check_head_dirs(g.heads.iter().map(PathBuf::as_path), "[methods.easyspec]")?;
            check_bounds(&g.bounds, "easyspec")?;
            ensure!(g.workers != Some(0), "[methods.easyspec] workers must be at least 1");
            if !g.devices.is_empty() {
                let devices = specx_decoder::parse_device_list(&g.devices).context("[methods.easyspec] devices")?;
                devices.into_iter().try_for_each(specx_decoder::check_device).context("[methods.easyspec] devices")?;
            }
        }
        Ok(())
    }
}

fn check_bounds(bounds: &[[usize; 2]], what: &str) -> Result<()> {
    for &[lo, hi] in bounds {
        crate::method::policy::check_bounds(lo, hi).map_err(|e| anyhow::anyhow!("[methods.{what}] {e}"))?;
    }
    Ok(())
}
