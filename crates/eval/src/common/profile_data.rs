//! What `specx profile` writes (each model's forward curve, per-layer times, TTFT, TPOT) and
//! the latencies the DSI and EasySpec timing models read from it.

use anyhow::{Context, Result, ensure};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

#[derive(Serialize, Deserialize)]
pub struct ForwardCurve {
    pub context: usize,
    /// Median seconds of a forward of r new rows, r = 1..=max_rows.
    pub seconds: Vec<f64>,
    /// Median seconds of a tree call of r rows (a balanced binary tree, as a verification of
    /// r - 1 speculated nodes under the last committed token), r = 1..=min(max_rows, 32);
    /// empty in profiles written before tree calls.
    #[serde(default)]
    pub tree_seconds: Vec<f64>,
    /// Median seconds of a verification of r rows replaying the call recorded for r rows
    /// (every row's logits read back), r = 1..=min(max_rows, 16), where the model records its
    /// calls (GGUF blocks on one GPU); empty elsewhere and in profiles written before them.
    #[serde(default)]
    pub recorded_seconds: Vec<f64>,
}

#[derive(Serialize, Deserialize)]
pub struct ModelProfile {
    pub role: String,
    pub path: PathBuf,
    pub sha256: String,
    pub layers: usize,
    pub forward: Vec<ForwardCurve>,
    /// One new row after `layer_context` tokens: median seconds per layer.
    pub layer_context: usize,
    pub attention_s: Vec<f64>,
    pub mlp_s: Vec<f64>,
    pub lm_head_s: f64,
    /// Prefill of `context` tokens (time to first token), median seconds, per context.
    pub ttft_s: Vec<(usize, f64)>,
    /// Seconds per output token of a greedy generation after a 128-token prompt.
    pub tpot_s: f64,
    /// Kernel launches of a one-row step and a 5-row call after `layer_context` tokens, on a
    /// GPU; empty on the CPU (which launches none) and in profiles written before the count.
    #[serde(default)]
    pub launches: Vec<LaunchCount>,
}

/// The kernels one GPU forward launched, per sublayer (`specx profile --device wgpu|cuda`).
#[derive(Serialize, Deserialize)]
pub struct LaunchCount {
    /// New rows of the forward, after `context` cached tokens.
    pub rows: usize,
    pub context: usize,
    /// Per layer: the attention sublayer's launches and the MLP sublayer's.
    pub attention: Vec<u64>,
    pub mlp: Vec<u64>,
    pub lm_head: u64,
    /// The whole forward, embedding lookup and final norm included.
    pub total: u64,
    /// Bytes the forward must read at least: every weight as stored on the device, and the
    /// keys and values of `context + rows` positions.
    pub bytes_read: u64,
    /// Launches per kernel (CubeCL's name for it), most first.
    pub by_kernel: Vec<(String, u64)>,
}

impl LaunchCount {
    /// Each layer's launches: its attention's and its MLP's.
    pub fn per_layer(&self) -> Vec<u64> {
        self.attention.iter().zip(&self.mlp).map(|(a, m)| a + m).collect()
    }
}

#[derive(Serialize, Deserialize)]
pub struct Profile {
    pub weights: String,
    /// The device the forwards ran on (`cpu`, `cuda:0`, `wgpu:0`); profiles written before
    /// the field existed were all measured on the CPU.
    #[serde(default = "cpu_device")]
    pub device: String,
    pub machine: super::machine::Machine,
    pub reps: usize,
    pub models: Vec<ModelProfile>,
}

fn cpu_device() -> String {
    "cpu".into()
}

impl Profile {
    /// Reads a `specx profile` JSON, naming the file in every error.
    pub fn read(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        serde_json::from_str(&text).with_context(|| format!("{}: not a `specx profile` JSON", path.display()))
    }

    /// Per-call costs for pricing replayed counts (eq. 5.1 with a row term), after `context`
    /// tokens (the nearest profiled context): `t_draft`, the draft's one-row forward; and the
    /// target's call of r rows as `t_target + t_row r`, the least-squares line through its
    /// r = 1..=11 forwards that passes through r = 1 exactly (so a one-row call costs what was
    /// measured). On a device whose extra rows are nearly free, `t_row` comes out near 0.
    pub fn call_costs(&self, context: usize) -> Result<(f64, f64, f64)> {
        let curve = |role: &str| -> Result<&ForwardCurve> {
            let m = self
                .models
                .iter()
                .find(|m| m.role == role)
                .with_context(|| format!("profile without a {role} model"))?;
            let c = m
                .forward
                .iter()
                .min_by_key(|c| c.context.abs_diff(context))
                .with_context(|| format!("profile without {role} forward curves"))?;
            ensure!(
                !c.seconds.is_empty() && c.seconds.iter().all(|s| s.is_finite() && *s > 0.0),
                "profile: the {role} curve after {} tokens has no positive times",
                c.context
            );
            Ok(c)
        };
        let (draft, target) = (curve("draft")?, curve("target")?);
        let s = &target.seconds[..target.seconds.len().min(11)];
        let (num, den) = s
            .iter()
            .enumerate()
            .skip(1)
            .fold((0.0, 0.0), |(n, d), (i, &t)| (n + i as f64 * (t - s[0]), d + (i * i) as f64));
        let t_row = if den > 0.0 { (num / den).max(0.0) } else { 0.0 };
        Ok((draft.seconds[0], s[0] - t_row, t_row))
    }
}

/// Forward latencies of the pair, in seconds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Latencies {
    pub draft_ttft: f64,
    pub draft_tpot: f64,
    pub target_ttft: f64,
    pub target_tpot: f64,
    /// Target forward time of r new rows relative to one row, r = 1, 2, ... (empty: every
    /// forward costs TPOT, the paper's model). Extrapolated linearly past its end.
    #[serde(default)]
    pub target_rows: Vec<f64>,
}

impl Latencies {
    /// Every latency multiplied by `s` (the row curve is relative and stays).
    pub fn scaled(&self, s: f64) -> Self {
        Self {
            draft_ttft: self.draft_ttft * s,
            draft_tpot: self.draft_tpot * s,
            target_ttft: self.target_ttft * s,
            target_tpot: self.target_tpot * s,
            target_rows: self.target_rows.clone(),
        }
    }

    /// Time of a (not first) target forward of `rows` new rows.
    pub fn target(&self, rows: usize) -> f64 {
        let curve = &self.target_rows;
        if rows <= 1 || curve.is_empty() {
            return self.target_tpot;
        }
        let n = curve.len();
        let rel = if rows <= n {
            curve[rows - 1]
        } else {
            let slope = if n >= 2 { curve[n - 1] - curve[n - 2] } else { 0.0 };
            curve[n - 1] + slope.max(0.0) * (rows - n) as f64
        };
        self.target_tpot * rel
    }
}

/// The profile's draft and target latencies at `context` (TTFT of the nearest measured prompt
/// length; the row curve at the nearest context, relative to one row).
pub fn latencies_from_profile(path: &Path, context: usize) -> Result<Latencies> {
    let p = Profile::read(path)?;
    let model = |role: &str| {
        p.models.iter().find(|m| m.role == role).with_context(|| format!("{}: no {role} model", path.display()))
    };
    let (d, t) = (model("draft")?, model("target")?);
    let nearest = |v: &[(usize, f64)]| {
        v.iter().min_by_key(|(c, _)| c.abs_diff(context)).map(|x| x.1).context("profile without TTFT")
    };
    let curve =
        t.forward.iter().min_by_key(|c| c.context.abs_diff(context)).context("profile without forward curves")?;
    ensure!(!curve.seconds.is_empty() && curve.seconds[0] > 0.0, "{}: empty forward curve", path.display());
    Ok(Latencies {
        draft_ttft: nearest(&d.ttft_s)?,
        draft_tpot: d.tpot_s,
        target_ttft: nearest(&t.ttft_s)?,
        target_tpot: t.tpot_s,
        target_rows: curve.seconds.iter().map(|s| s / curve.seconds[0]).collect(),
    })
}
