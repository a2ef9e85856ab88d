//! What an eval run directory shows: `results.parquet`, `summary.md` and the PNG plots.
//!
//! Two kinds of averages, both printed and named: "mean ± sd" is over prompts (each prompt's
//! rate, then the mean and sample standard deviation); "sum" is the ratio of sums over all
//! prompts (e.g. total discarded / total generated), which weights long responses more.

use super::manifest::EvalManifest;
use crate::common::results::{ResultRow, write_parquet};
use crate::common::stats::{GroupStats, grouped, mean_sd, pm};
use crate::common::timing::{
    Fit, MIN_REQUESTS_PER_TERM, PAPER_TIMES, fit_family, predicted_throughput, standalone_target,
};
use crate::report::markdown_table;
use anyhow::Result;
use specx_decoder::fsutil::write_atomic;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::Path;

/// Writes results.parquet, summary.md and the plots for `rows`.
pub fn write_reports(dir: &Path, manifest: &EvalManifest, rows: &[ResultRow]) -> Result<()> {
    write_parquet(&dir.join("results.parquet"), rows)?;
    write_atomic(&dir.join("summary.md"), summary_markdown(manifest, rows).as_bytes())?;
    super::plots::write_plots(&dir.join("plots"), rows)?;
    Ok(())
}

pub fn summary_markdown(manifest: &EvalManifest, rows: &[ResultRow]) -> String {
    let mut s = String::new();
    let c = &manifest.config;
    let _ = writeln!(s, "# specx eval summary\n");
    let _ = writeln!(
        s,
        "draft `{}` (sha256 {}), target `{}` (sha256 {}), weights {}, device {}; machine: {} ({} cores, {:.1} GB/s read bandwidth at start).\n",
        manifest.draft.path.display(),
        &manifest.draft.sha256[..12],
        manifest.target.path.display(),
        &manifest.target.sha256[..12],
        c.models.weights,
        c.models.device,
        manifest.machine.cpu,
        manifest.machine.cores,
        manifest.machine.bandwidth_gb_s
    );
    let _ = writeln!(
        s,
        "{} of {} units finished{}. Speedup = AR wall time / method wall time on the same prompt in the same run. \"mean ± sd\" is over prompts; \"sum\" is the ratio of sums over prompts. Discard rate = N_discarded / N, verification rate = N_target / N (SpecDec++ eq. 5.1), acceptance = accepted / candidates verified up to and including the first rejection.\n",
        manifest.units_done,
        if manifest.part.is_some() {
            format!("{} (this part's share)", manifest.units_total)
        } else {
            manifest.units_total.to_string()
        },
        if manifest.complete { "" } else { " (incomplete: run the same command again to continue)" }
    );
    if let Some(b) = rows.iter().map(|r| r.batch).max().filter(|&b| b > 1) {
        let _ = writeln!(
            s,
            "The AR rows come from a greedy trace run ({b} prompts decoded at once): their times are shares of batched steps, not single-stream times, so they give no timing fit; replayed rows use eq. 5.1 with single-forward times for the AR reference too.\n"
        );
    }
    let super::audit::Audit { failures, numerical } = super::audit::audit(rows, &manifest.config.audit);
    if failures.is_empty() && numerical.is_empty() {
        let _ = writeln!(s, "Losslessness audit: passed (every greedy speculative output equals AR's).\n");
    } else if failures.is_empty() {
        let greedy = rows.iter().filter(|r| r.greedy() && !r.replayed && r.setting.family() != "ar").count();
        let _ = writeln!(
            s,
            "Losslessness audit (numerical): passed; {} of {greedy} greedy speculative outputs differ from AR's at a near-tie of the target (|logit margin| <= {}), which the device's rounding explains:\n",
            numerical.len(),
            manifest.config.audit.near_tie
        );
        for f in &numerical {
            let _ = writeln!(s, "- {f}");
        }
        s.push('\n');
    } else {
        let _ = writeln!(s, "Losslessness audit: FAILED for {} rows:\n", failures.len());
        for f in &failures {
            let _ = writeln!(s, "- {f}");
        }
        s.push('\n');
    }
    for ((dataset, sampling), groups) in grouped(rows) {
        let _ = writeln!(s, "## {dataset}, {sampling}\n");
        let table: Vec<Vec<String>> = groups
            .iter()
            .map(|(key, rs)| {
                let g = GroupStats::of(rs);
                vec![
                    key.clone(),
                    g.prompts.to_string(),
                    pm(&g.tokens_per_s, 2),
                    pm(&g.speedup, 2),
                    format!("{:.3}", g.acceptance_sum()),
                    format!("{:.2}", g.tokens_per_call_sum()),
                    format!("{:.3}", g.discard_rate_sum()),
                    pm(&g.discard_rate, 3),
                    format!("{:.3}", g.verification_rate_sum()),
                    pm(&g.verification_rate, 3),
                    if rs.iter().all(|r| r.greedy()) {
                        format!("{}/{}", g.identical, g.prompts)
                    } else {
                        "n/a (sampled)".into()
                    },
                ]
            })
            .collect();
        s.push_str(&markdown_table(
            &[
                "setting",
                "prompts",
                "tokens/s (mean ± sd)",
                "speedup (mean ± sd)",
                "acceptance (sum)",
                "tokens/target call (sum)",
                "discard rate (sum)",
                "discard rate (mean ± sd)",
                "verification rate (sum)",
                "verification rate (mean ± sd)",
                "same output as AR",
            ],
            &table,
        ));
        s.push('\n');
        s.push_str(&dsi_markdown(&groups));
    }
    s.push_str(&timing_markdown(rows));
    s.push_str(&fastest_markdown(rows));
    s
}

/// The summary's last word: per prompt set and sampling setting, the setting with the highest
/// mean speedup over AR, or, where none beat AR, the closest.
fn fastest_markdown(rows: &[ResultRow]) -> String {
    let mut s = String::from("\n## Fastest setting per prompt set\n\n");
    for ((dataset, sampling), groups) in grouped(rows) {
        let best = groups
            .iter()
            .filter(|(_, rs)| rs.iter().all(|r| r.setting.family() != "ar"))
            .map(|(key, rs)| (key, GroupStats::of(rs)))
            .filter(|(_, g)| g.speedup.iter().all(|x| x.is_finite()) && !g.speedup.is_empty())
            .max_by(|a, b| mean_sd(&a.1.speedup).0.total_cmp(&mean_sd(&b.1.speedup).0));
        let _ = match best {
            None => writeln!(s, "- {dataset}, {sampling}: no speculative setting with a speedup"),
            Some((key, g)) => {
                let speedup = &g.speedup;
                let (m, _) = mean_sd(speedup);
                let lo = speedup.iter().copied().fold(f64::INFINITY, f64::min);
                let hi = speedup.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let verdict = if m > 1.0 { "fastest" } else { "no setting beat AR; the closest" };
                writeln!(
                    s,
                    "- {dataset}, {sampling}: {verdict}: {key} at {m:.2}x AR (mean over {} prompts, {lo:.2}-{hi:.2})",
                    g.prompts
                )
            }
        };
    }
    s
}

/// DSI's scheduler per setting, when the group ran DSI for real: how many verification tasks a
/// request submitted, how many were preempted or finished stale (sums over prompts, as shares
/// of the tasks), how often a drafted block found every worker busy, and how busy the workers
/// were (busy time over servers x wall time, mean over prompts).
fn dsi_markdown(groups: &[(String, Vec<&ResultRow>)]) -> String {
    let table: Vec<Vec<String>> = groups
        .iter()
        .filter_map(|(key, rs)| {
            let stats: Vec<(&ResultRow, &specx_decoder::speculative::DsiStats)> =
                rs.iter().filter_map(|r| r.dsi.as_ref().map(|d| (*r, d))).collect();
            if stats.is_empty() {
                return None;
            }
            let tasks: usize = stats.iter().map(|(_, d)| d.tasks).sum();
            let share = |n: usize| format!("{:.1}%", 100.0 * n as f64 / tasks.max(1) as f64);
            let per_request: Vec<f64> = stats.iter().map(|(_, d)| d.tasks as f64).collect();
            let waits: Vec<f64> = stats.iter().map(|(_, d)| d.waits as f64).collect();
            let busy: Vec<f64> = stats
                .iter()
                .map(|(r, d)| {
                    d.worker_busy_s.iter().sum::<f64>()
                        / (d.worker_busy_s.len().max(1) as f64 * r.total_time_s.max(1e-9))
                })
                .collect();
            Some(vec![
                key.clone(),
                stats.len().to_string(),
                pm(&per_request, 1),
                share(stats.iter().map(|(_, d)| d.preempted).sum()),
                share(stats.iter().map(|(_, d)| d.stale).sum()),
                pm(&waits, 1),
                pm(&busy, 2),
            ])
        })
        .collect();
    if table.is_empty() {
        return String::new();
    }
    let mut s = String::from(
        "DSI scheduler (real runs; preempted and stale are shares of the tasks, summed over prompts):\n\n",
    );
    s.push_str(&markdown_table(
        &[
            "setting",
            "requests",
            "tasks/request (mean ± sd)",
            "preempted",
            "stale",
            "waits for a worker (mean ± sd)",
            "worker busy / wall (mean ± sd)",
        ],
        &table,
    ));
    s.push('\n');
    s
}

/// The timing-model section: fits per dataset and method family, eq. 5.1 predictions with
/// the fitted times and with the paper's GPU times.
fn timing_markdown(rows: &[ResultRow]) -> String {
    let mut s = String::from("## Timing model (SpecDec++ §5.2)\n\n");
    let _ = writeln!(
        s,
        "Least squares without intercept over each request's wall time T (sequential methods; DSI overlaps its forwards and has no such model): the paper's eq. 3.1 `T = t_draft N_draft + t_target N_target`, and with the rows verified as a third term (a CPU's verification cost grows with the rows it checks). R² is centred. A fit is printed only over at least {MIN_REQUESTS_PER_TERM} requests a fitted time, with every time positive and R² above 0; otherwise the cell says why there is none. Standalone target: `T = t N` over AR requests. Eq. 5.1 throughput uses the fitted (t_draft, t_target) and the family's summed counts. The last column is a prediction, not a measurement of this run: eq. 5.1 with the family's counts at the paper's A100 times (0.0234, 0.112) s (a 7B draft and a 70B target; 0 for a drafter without a model), and the speedup over AR those times would give.\n"
    );
    let mut table = Vec::new();
    let mut by: BTreeMap<(String, &str), Vec<&ResultRow>> = BTreeMap::new();
    // DSI (alone or under EasySpec) overlaps drafting and verification, so its wall time is
    // no sum of forwards: no fit.
    for r in rows.iter().filter(|r| !r.replayed && r.setting.servers().is_none()) {
        by.entry((r.dataset.clone(), r.setting.family())).or_default().push(r);
    }
    let fmt = |f: &Option<Fit>| Fit::describe(f.as_ref());
    for ((dataset, family), rs) in &by {
        if *family == "ar" {
            let t = standalone_target(rs);
            table.push(vec![
                dataset.clone(),
                "ar (standalone target)".into(),
                fmt(&t),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
            ]);
            continue;
        }
        let model = fit_family(rs);
        let n: f64 = rs.iter().map(|r| r.n_generated as f64).sum();
        let disc: f64 = rs.iter().map(|r| r.n_discarded() as f64).sum();
        let tgt: f64 = rs.iter().map(|r| r.n_target_calls as f64).sum();
        let measured = n / rs.iter().map(|r| r.total_time_s).sum::<f64>();
        let predicted = model
            .paper
            .as_ref()
            .filter(|f| f.is_usable())
            .map(|f| predicted_throughput(n, disc, tgt, f.coefficients[0], f.coefficients[1]));
        // A drafter without a model (lookup, suffix trees) drafts for free at any price.
        let model_free = rs.iter().all(|r| r.n_draft_calls == 0);
        let (pd, pt) = if model_free { (0.0, PAPER_TIMES.1) } else { PAPER_TIMES };
        let paper = predicted_throughput(n, disc, tgt, pd, pt);
        table.push(vec![
            dataset.clone(),
            family.to_string(),
            fmt(&model.paper),
            fmt(&model.with_rows),
            format!("{measured:.2}"),
            predicted.map_or("-".into(), |p| format!("{p:.2}")),
            format!("{paper:.2} ({:.2}x)", paper * pt),
        ]);
    }
    s.push_str(&markdown_table(
        &[
            "dataset",
            "family",
            "t_draft, t_target (s)",
            "t_draft, t_target, t_row (s)",
            "measured tok/s",
            "eq. 5.1 tok/s",
            "predicted at the paper's A100 times: tok/s (speedup)",
        ],
        &table,
    ));
    s
}
