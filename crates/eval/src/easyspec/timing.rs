//! What EasySpec's layer parallelism would give on N devices, from measured parts: the
//! draft's per-layer attention and MLP times and LM-head time (`specx profile`), the target's
//! time per token, and the exact counts of greedy replays (drafted, calibrating and target
//! forwards per setting). A fuzzy forward on N devices runs each group's attentions on
//! min(N, size) devices at once (the slowest attention of each wave counts), then pays one
//! communication cost per multi-layer group (gathering the attention outputs: a parameter),
//! then the group's MLPs in order; calibrating forwards run exactly (sequential layers), as do
//! the plain drafter's. Tensor parallelism and tree drafting, the other sources of the paper's
//! end-to-end numbers, are not modelled.

use super::acceptance::Point;
use anyhow::{Context, Result, ensure};
use serde::Serialize;
use specx_decoder::layer_groups::LayerGroups;
use std::collections::BTreeMap;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct TimingArgs {
    /// A `specx profile` JSON of the pair (per-layer draft times, TPOTs).
    #[arg(long)]
    pub profile: PathBuf,
    /// A replay (or eval) directory whose results.parquet has `easyspec` rows and the plain
    /// drafter's `specdec` rows with the same K.
    #[arg(long)]
    pub replay: PathBuf,
    /// Device counts to model, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8")]
    pub devices: Vec<usize>,
    /// Communication cost per multi-layer group and fuzzy forward, milliseconds (an assumption:
    /// one small all-gather; ~0.02-0.05 ms on NVLink).
    #[arg(long, default_value_t = 0.03)]
    pub comm_ms: f64,
    /// Output directory (timing.json, summary.md).
    #[arg(long, default_value = "runs/easyspec-timing")]
    pub out: PathBuf,
}

/// The draft's sublayer times (seconds), scaled so that a sequential forward takes its TPOT.
#[derive(Clone, Debug, Serialize)]
pub struct DraftParts {
    pub attention: Vec<f64>,
    pub mlp: Vec<f64>,
    /// LM head and what the per-layer timers do not see (embedding, sampling, overhead).
    pub rest: f64,
}

impl DraftParts {
    /// From a profile: per-layer timers are noisier than a whole forward, so the parts keep
    /// their shares and sum to the measured TPOT.
    pub fn from_profile(p: &crate::profile::ModelProfile) -> Result<Self> {
        ensure!(
            !p.attention_s.is_empty() && p.attention_s.len() == p.mlp_s.len(),
            "the profile has no per-layer times for {}",
            p.path.display()
        );
        let parts: f64 = p.attention_s.iter().chain(&p.mlp_s).sum::<f64>() + p.lm_head_s;
        let scale = p.tpot_s / parts;
        Ok(Self {
            attention: p.attention_s.iter().map(|t| t * scale).collect(),
            mlp: p.mlp_s.iter().map(|t| t * scale).collect(),
            rest: p.lm_head_s * scale,
        })
    }

    pub fn sequential(&self) -> f64 {
        self.attention.iter().chain(&self.mlp).sum::<f64>() + self.rest
    }

    /// One fuzzy forward with `groups` on `devices` devices, `comm` seconds per multi-layer group.
    pub fn fuzzy(&self, groups: &LayerGroups, devices: usize, comm: f64) -> f64 {
        let mut t = self.rest;
        for g in groups.groups() {
            let attn: Vec<f64> = g.clone().map(|l| self.attention[l]).collect();
            // Waves of `devices` attentions at once; each wave as slow as its slowest.
            t += attn.chunks(devices.max(1)).map(|w| w.iter().copied().fold(0.0, f64::max)).sum::<f64>();
            if g.len() > 1 && devices > 1 {
                t += comm;
            }
            t += g.clone().map(|l| self.mlp[l]).sum::<f64>();
        }
        t
    }
}

/// One modelled setting.
#[derive(Clone, Debug, Serialize)]
pub struct Modelled {
    pub dataset: String,
    pub sampling: String,
    pub strategy: String,
    pub calibration: String,
    pub k: u64,
    pub devices: usize,
    /// The paper's alpha (accepted / drafted), EasySpec's and the plain drafter's.
    pub alpha: f64,
    pub alpha_plain: f64,
    /// Draft forward speedup (a fuzzy forward vs a sequential one).
    pub forward_speedup: f64,
    /// Drafting-stage speedup per generated token (calibrations included), as the paper's "d".
    pub drafting_speedup: f64,
    /// End-to-end speedup over the plain drafter with the same K.
    pub end_to_end: f64,
}

/// Models every EasySpec point on each device count against the plain drafter's point with
/// the same prompt set, sampling and K.
pub fn model(
    parts: &DraftParts,
    t_target: f64,
    points: &[Point],
    layers: usize,
    devices: &[usize],
    comm: f64,
) -> Result<Vec<Modelled>> {
    let t_seq = parts.sequential();
    let mut out = Vec::new();
    for c in points.iter().filter(|p| p.lp > 1) {
        let plain = points
            .iter()
            .find(|p| p.lp == 1 && p.dataset == c.dataset && p.sampling == c.sampling && p.k == c.k)
            .with_context(|| {
                format!("{} {}: no plain specdec K={} rows to compare {} with", c.dataset, c.sampling, c.k, c.strategy)
            })?;
        let groups = LayerGroups::parse(&c.strategy, layers)?;
        for &n_dev in devices {
            let t_fuzzy = parts.fuzzy(&groups, n_dev, comm);
            let draft = c.calibrations * t_seq + (c.draft_calls - c.calibrations) * t_fuzzy;
            let draft_plain = plain.draft_calls * t_seq;
            let total = draft + c.target_calls * t_target;
            let total_plain = draft_plain + plain.target_calls * t_target;
            out.push(Modelled {
                dataset: c.dataset.clone(),
                sampling: c.sampling.clone(),
                strategy: c.strategy.clone(),
                calibration: c.calibration.clone(),
                k: c.k,
                devices: n_dev,
                alpha: c.alpha(),
                alpha_plain: plain.alpha(),
                forward_speedup: t_seq / t_fuzzy,
                drafting_speedup: (draft_plain / plain.generated) / (draft / c.generated),
                end_to_end: (total_plain / plain.generated) / (total / c.generated),
            });
        }
    }
    Ok(out)
}

pub fn run(a: &TimingArgs) -> Result<()> {
    let p = crate::profile::Profile::read(&a.profile)?;
    let role = |r: &str| {
        p.models.iter().find(|m| m.role == r).with_context(|| format!("{}: no {r} model", a.profile.display()))
    };
    let (draft, target) = (role("draft")?, role("target")?);
    ensure!(!a.devices.is_empty() && a.devices.iter().all(|&d| d >= 1), "--devices needs counts >= 1");
    ensure!(a.comm_ms >= 0.0, "--comm-ms must be >= 0");
    let parts = DraftParts::from_profile(draft)?;
    let points = super::acceptance::read_points(std::slice::from_ref(&a.replay))?;
    let comm = a.comm_ms / 1e3;
    let modelled = model(&parts, target.tpot_s, &points, draft.layers, &a.devices, comm)?;

    let strategies: std::collections::BTreeSet<&str> = modelled.iter().map(|m| m.strategy.as_str()).collect();
    let dev_cols: Vec<String> = a.devices.iter().map(|d| format!("N={d}")).collect();
    let forward_rows: Vec<Vec<String>> = strategies
        .iter()
        .map(|s| {
            let groups = LayerGroups::parse(s, draft.layers).expect("parsed above");
            let mut row = vec![s.to_string(), groups.to_string()];
            row.extend(a.devices.iter().map(|&d| format!("{:.3}", parts.sequential() / parts.fuzzy(&groups, d, comm))));
            row
        })
        .collect();
    let mut header = vec!["strategy".to_string(), "groups".to_string()];
    header.extend(dev_cols.iter().cloned());
    let forward_table =
        specx_decoder::report::markdown_table(&header.iter().map(String::as_str).collect::<Vec<_>>(), &forward_rows);

    let mut by: BTreeMap<(String, String, u64, String, String), Vec<&Modelled>> = BTreeMap::new();
    for m in &modelled {
        by.entry((m.dataset.clone(), m.sampling.clone(), m.k, m.strategy.clone(), m.calibration.clone()))
            .or_default()
            .push(m);
    }
    let rows: Vec<Vec<String>> = by
        .iter()
        .map(|((d, sampling, k, s, c), ms)| {
            let mut row = vec![
                d.clone(),
                sampling.clone(),
                k.to_string(),
                s.clone(),
                c.clone(),
                format!("{:.3} / {:.3}", ms[0].alpha, ms[0].alpha_plain),
            ];
            row.push(ms.iter().map(|m| format!("{:.2}", m.drafting_speedup)).collect::<Vec<_>>().join(" / "));
            row.push(ms.iter().map(|m| format!("{:.2}", m.end_to_end)).collect::<Vec<_>>().join(" / "));
            row
        })
        .collect();
    let devs = a.devices.iter().map(|d| d.to_string()).collect::<Vec<_>>().join("/");
    let settings_table = specx_decoder::report::markdown_table(
        &[
            "dataset",
            "sampling",
            "K",
            "strategy",
            "calibration",
            "α EasySpec / plain",
            &format!("drafting speedup, N = {devs}"),
            &format!("end-to-end speedup, N = {devs}"),
        ],
        &rows,
    );
    let attn: f64 = parts.attention.iter().sum();
    let summary = format!(
        "# EasySpec timing model\n\nDraft forward {:.1} ms sequential (profile {}: attention {:.1} ms = {:.0}% of it, MLPs {:.1} ms, LM head and rest {:.1} ms); target {:.1} ms per token. Communication {:.3} ms per multi-layer group and fuzzy forward (assumed). A fuzzy forward on N devices runs each group's attentions in waves of N, then the group's MLPs in order; calibrating forwards and the plain drafter's run sequentially. Counts: rows of {} (ratio of sums over prompts). Speedups are over the plain drafter with the same K on one device; tensor parallelism and tree drafting are not modelled.\n\n## Draft forward speedup (fuzzy vs sequential)\n\n{forward_table}\n## Per setting\n\n{settings_table}",
        parts.sequential() * 1e3,
        a.profile.display(),
        attn * 1e3,
        100.0 * attn / parts.sequential(),
        parts.mlp.iter().sum::<f64>() * 1e3,
        parts.rest * 1e3,
        target.tpot_s * 1e3,
        a.comm_ms,
        a.replay.display(),
    );
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let record = serde_json::json!({ "profile": a.profile, "replay": a.replay, "comm_ms": a.comm_ms, "devices": a.devices, "draft_parts": parts, "target_tpot_s": target.tpot_s, "settings": modelled });
    specx_decoder::fsutil::write_atomic(&a.out.join("timing.json"), serde_json::to_string_pretty(&record)?.as_bytes())?;
    specx_decoder::fsutil::write_atomic(&a.out.join("summary.md"), summary.as_bytes())?;
    print!("{summary}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fuzzy_forward_time_takes_the_slowest_attention_of_each_wave() {
        let parts = DraftParts { attention: vec![1.0, 2.0, 3.0, 4.0, 1.0], mlp: vec![10.0; 5], rest: 5.0 };
        assert_eq!(parts.sequential(), 11.0 + 50.0 + 5.0);
        let g = LayerGroups::parse("0,1-3,4", 5).unwrap();
        // One device: the attentions still run one after another (no communication).
        assert_eq!(parts.fuzzy(&g, 1, 0.5), parts.sequential());
        // Two devices: waves {2, 3} then {4} -> 3 + 4, plus one communication.
        assert_eq!(parts.fuzzy(&g, 2, 0.5), 5.0 + 1.0 + 3.0 + 4.0 + 0.5 + 1.0 + 50.0);
        // Enough devices: the group costs its slowest attention.
        assert_eq!(parts.fuzzy(&g, 8, 0.5), 5.0 + 1.0 + 4.0 + 0.5 + 1.0 + 50.0);
    }
}
