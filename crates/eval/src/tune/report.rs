//! The tables of `specx eval tune`: per cost model, every family's tuned setting judged on the
//! test traces against the tuned fixed K and plain decoding, threshold-plus against the tuned
//! confidence threshold and against the training-free rule the tuning traces pick, each with
//! a per-prompt bootstrap interval; the fitted parameters as JSON.

use super::acceptance_model;
use super::bootstrap::{Interval, speedup, speedup_over_ar, throughput};
use super::calibrate::{Calibration, ModelFit};
use super::config::TuneConfig;
use super::in_sample::InSample;
use super::{CONFIDENCE, CostResult, ORACLE, REFERENCE, RuleResult, SetResult, THRESHOLD_PLUS};
use crate::method::drafter::DrafterKind;
use anyhow::{Context, Result};
use specx_decoder::fsutil::write_atomic;
use specx_decoder::report::markdown_table;
use specx_decoder::speculative::CalibratedParams;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Families fitted to data: the heads, threshold-plus and the calibrated model's rules.
pub(super) fn learned(family: &str) -> bool {
    family == THRESHOLD_PLUS || family.starts_with("specdecpp") || family.starts_with(acceptance_model::TOKEN)
}

/// Families that are not stop rules to pick from: the reference, the oracle, the learned ones,
/// and the drafters other than the draft model's chain.
fn training_free(family: &str) -> bool {
    ![REFERENCE, ORACLE].contains(&family) && !learned(family) && !DrafterKind::names_a_drafter(family)
}

/// Every drafter family other than the draft model's chain (prompt lookup, the tree drafters,
/// ...) on the test traces against the chain's training-free rule the tuning traces rank first.
fn drafters_table(md: &mut String, ci: usize, sets: &[SetResult], b: usize, seed: u64) -> Result<()> {
    let mut families: Vec<&str> = sets
        .iter()
        .flat_map(|s| s.results[ci].rules.iter().map(|r| r.family.as_str()))
        .filter(|f| DrafterKind::names_a_drafter(f))
        .collect();
    if families.is_empty() {
        return Ok(());
    }
    families.sort();
    families.dedup();
    writeln!(
        md,
        "\nEvery other drafter on the test traces against the draft model's training-free stop rule the tuning traces rank first (named in the header):\n"
    )?;
    let best: Vec<Option<&RuleResult>> = sets.iter().map(|s| best_training_free(&s.results[ci])).collect();
    let header: Vec<String> = ["drafter".to_string()]
        .into_iter()
        .chain(
            sets.iter().zip(&best).map(|(s, r)| format!("{}: vs {}", s.dataset, r.map_or("-", |r| r.family.as_str()))),
        )
        .collect();
    let rows: Vec<Vec<String>> = families
        .iter()
        .map(|f| {
            let cells = sets.iter().zip(&best).map(|(s, chain)| {
                let c = &s.results[ci];
                match (rule(c, f), chain) {
                    (Some(r), Some(chain)) => speedup(&r.test, &chain.test, &c.costs, b, seed).percent(),
                    _ => "-".into(),
                }
            });
            [f.to_string()].into_iter().chain(cells).collect()
        })
        .collect();
    md.push_str(&markdown_table(&header.iter().map(String::as_str).collect::<Vec<_>>(), &rows));
    Ok(())
}

/// Every learned family on the test traces against the training-free rule the tuning traces
/// rank first, and the share of the oracle's headroom each closes.
fn learned_table(md: &mut String, ci: usize, sets: &[SetResult], b: usize, seed: u64) -> Result<()> {
    if !sets.iter().any(|s| s.results[ci].rules.iter().any(|r| learned(&r.family))) {
        return Ok(());
    }
    writeln!(
        md,
        "\nEvery learned rule on the test traces against the training-free rule the tuning traces rank first (named in the header), and the share of the oracle's headroom over fixed K each closes:\n"
    )?;
    let best: Vec<Option<&RuleResult>> = sets.iter().map(|s| best_training_free(&s.results[ci])).collect();
    let header: Vec<String> = ["rule".to_string()]
        .into_iter()
        .chain(sets.iter().zip(&best).flat_map(|(s, r)| {
            [
                format!("{}: vs {}", s.dataset, r.map_or("-", |r| r.family.as_str())),
                format!("{}: headroom closed", s.dataset),
            ]
        }))
        .collect();
    let mut families: Vec<&str> = sets
        .iter()
        .flat_map(|s| s.results[ci].rules.iter().map(|r| r.family.as_str()))
        .filter(|f| learned(f))
        .collect();
    families.sort();
    families.dedup();
    let mut rows = Vec::new();
    for f in [None].into_iter().chain(families.into_iter().map(Some)) {
        let mut row = vec![f.map_or_else(|| "(the training-free rule itself)".to_string(), str::to_string)];
        for (s, best) in sets.iter().zip(&best) {
            let c = &s.results[ci];
            let r = match f {
                Some(f) => rule(c, f),
                None => *best,
            };
            let vs = match (r, best, f) {
                (Some(r), Some(t), Some(_)) => speedup(&r.test, &t.test, &c.costs, b, seed).percent(),
                _ => "-".into(),
            };
            row.push(vs);
            row.push(r.and_then(|r| headroom_closed(c, r)).map_or("-".into(), |x| format!("{:.0}%", 100.0 * x)));
        }
        rows.push(row);
    }
    md.push_str(&markdown_table(&header.iter().map(String::as_str).collect::<Vec<_>>(), &rows));
    Ok(())
}

/// The calibrated model's fit per set: held-out calibration of the draft's probability, the
/// regression, and the regression with its temperatures; then the weights and temperatures.
fn model_tables(md: &mut String, sets: &[SetResult]) -> Result<()> {
    let fits: Vec<(&str, &ModelFit)> =
        sets.iter().filter_map(|s| s.acceptance_model.as_ref().map(|m| (s.dataset.as_str(), m))).collect();
    if fits.is_empty() {
        return Ok(());
    }
    writeln!(md, "\n## The calibrated acceptance model\n")?;
    let target = if fits.iter().any(|(_, m)| m.weights.len() == specx_decoder::speculative::calibrated::FEATURES) {
        " and the target's top-1 probability and entropy at the round's last committed token"
    } else {
        ""
    };
    writeln!(
        md,
        "A logistic regression on the draft's ln p and ln(1 - p) of its token, entropy, top-2 margin and depth{target}, fitted on the tuning traces' trunk positions (label: the draft's token is the target's, given the round's earlier candidates were), with one temperature per depth fitted on held-out tuning prompts. Held-out fit (log loss in nats, Brier score, expected calibration error over 10 bins) of the draft's own probability read as a chance of acceptance, of the regression, and of the regression with its temperatures:\n"
    )?;
    let cal = |c: &Calibration| format!("{:.4} / {:.4} / {:.3}", c.log_loss, c.brier, c.ece);
    let rows: Vec<Vec<String>> = fits
        .iter()
        .map(|(d, m)| {
            vec![
                d.to_string(),
                format!("{} / {}", m.fit_samples, m.holdout_samples),
                format!("{:.3}", m.holdout_rate),
                cal(&m.draft_probability),
                cal(&m.uncalibrated),
                cal(&m.calibrated),
            ]
        })
        .collect();
    md.push_str(&markdown_table(
        &["set", "positions: fit / held out", "held-out acceptance", "draft probability", "regression", "calibrated"],
        &rows,
    ));
    writeln!(md, "\nWeights and temperatures (depth 1, then the depth buckets):\n")?;
    let names = CalibratedParams::feature_names(fits.iter().map(|(_, m)| m.weights.len()).max().unwrap_or(0));
    let header: Vec<String> =
        ["set".to_string()].into_iter().chain(names).chain(["temperatures".to_string()]).collect();
    let rows: Vec<Vec<String>> = fits
        .iter()
        .map(|(d, m)| {
            let t = m.temperatures.iter().map(|t| format!("{t:.2}")).collect::<Vec<_>>().join(", ");
            [d.to_string()].into_iter().chain(m.weights.iter().map(|w| format!("{w:+.3}"))).chain([t]).collect()
        })
        .collect();
    md.push_str(&markdown_table(&header.iter().map(String::as_str).collect::<Vec<_>>(), &rows));
    Ok(())
}

fn rule<'a>(c: &'a CostResult, family: &str) -> Option<&'a RuleResult> {
    c.rules.iter().find(|r| r.family == family)
}

/// The training-free family with the highest tuning throughput (chosen on tuning, like
/// everything else).
pub fn best_training_free(c: &CostResult) -> Option<&RuleResult> {
    c.rules
        .iter()
        .filter(|r| training_free(&r.family))
        .max_by(|a, b| a.tuning_throughput.total_cmp(&b.tuning_throughput))
}

/// Share of the oracle's headroom over fixed K that `rule` closes on the test traces.
fn headroom_closed(c: &CostResult, r: &RuleResult) -> Option<f64> {
    let (k, o) = (rule(c, REFERENCE)?, rule(c, ORACLE)?);
    let tp = |x: &RuleResult| throughput(&x.test, &c.costs);
    Some((tp(r) - tp(k)) / (tp(o) - tp(k)))
}

/// Per cost model: each family's test speedup over fixed K when both were chosen on the tuning
/// traces, and when both were chosen on the test traces (as a comparison that tunes on its
/// test data reports it).
fn in_sample_table(
    md: &mut String,
    ci: usize,
    sets: &[SetResult],
    inside: &InSample,
    candidates: &BTreeMap<String, Vec<String>>,
) -> Result<()> {
    writeln!(
        md,
        "\nChosen on the tuning traces (out of sample) against chosen on the test traces themselves (in sample, from the earlier replay of every candidate), each over the fixed K chosen the same way; candidates the replay holds in brackets:\n"
    )?;
    let header: Vec<String> = ["rule".to_string()]
        .into_iter()
        .chain(sets.iter().flat_map(|s| [format!("{}: out of sample", s.dataset), format!("{}: in sample", s.dataset)]))
        .collect();
    let best: Vec<BTreeMap<String, (String, f64, usize)>> =
        sets.iter().map(|s| inside.best(s, &s.results[ci], candidates)).collect();
    let mut rows = Vec::new();
    for f in candidates.keys().filter(|f| f.as_str() != REFERENCE) {
        let mut row = vec![f.clone()];
        for (s, b) in sets.iter().zip(&best) {
            let c = &s.results[ci];
            let out = match (rule(c, f), rule(c, REFERENCE)) {
                (Some(r), Some(k)) => {
                    format!("{:+.1}%", 100.0 * (throughput(&r.test, &c.costs) / throughput(&k.test, &c.costs) - 1.0))
                }
                _ => "-".into(),
            };
            let inn = match (b.get(f), b.get(REFERENCE)) {
                (Some((setting, tps, n)), Some((_, k, _))) => {
                    format!("{:+.1}% ({setting}; {n})", 100.0 * (tps / k - 1.0))
                }
                _ => "-".into(),
            };
            row.extend([out, inn]);
        }
        rows.push(row);
    }
    md.push_str(&markdown_table(&header.iter().map(String::as_str).collect::<Vec<_>>(), &rows));
    Ok(())
}

fn page(cfg: &TuneConfig, sets: &[SetResult], candidates: &BTreeMap<String, Vec<String>>) -> Result<String> {
    let inside = cfg.in_sample.as_deref().map(InSample::read).transpose()?;
    let (b, seed) = (cfg.bootstrap, cfg.seed);
    let mut md = String::new();
    writeln!(md, "# Stop rules judged out of sample\n")?;
    let cwd = std::env::current_dir()?;
    let shown = |p: &std::path::Path| p.strip_prefix(&cwd).unwrap_or(p).display().to_string();
    writeln!(
        md,
        "Every setting below was chosen on the tuning traces (`{}`) per prompt set and cost model, then replayed once on the test traces (`{}`). Speedups are throughput ratios on the test prompts (ratio of sums), with 95% percentile intervals over {b} bootstrap resamples of the prompts (seed {seed}).\n",
        shown(&cfg.tuning),
        shown(&cfg.test)
    )?;
    writeln!(md, "| set | tuning prompts | test prompts |\n| --- | --- | --- |")?;
    for s in sets {
        writeln!(md, "| {} | {} | {} |", s.dataset, s.tuning_prompts.len(), s.test_prompts.len())?;
    }
    for (ci, costs) in cfg.costs.iter().enumerate() {
        writeln!(md, "\n## {}\n", costs.name)?;
        let ms = |t: f64| format!("{:.2} ms", 1e3 * t);
        let source = costs.profile.as_deref().map_or(String::new(), |p| format!(" (from `{}`)", shown(p)));
        writeln!(
            md,
            "A draft forward {}, a target call of r rows {} + {} x r{source}.\n",
            ms(costs.t_draft),
            ms(costs.t_target),
            ms(costs.t_row)
        )?;
        let families: Vec<String> = {
            let mut f: Vec<String> =
                sets.iter().flat_map(|s| s.results[ci].rules.iter().map(|r| r.family.clone())).collect();
            f.sort();
            f.dedup();
            f
        };
        let header: Vec<String> = ["rule".to_string()]
            .into_iter()
            .chain(
                sets.iter().flat_map(|s| [format!("{}: vs tuned fixed K", s.dataset), format!("{}: vs AR", s.dataset)]),
            )
            .collect();
        let mut rows = Vec::new();
        for f in &families {
            let mut row = vec![f.clone()];
            for s in sets {
                let c = &s.results[ci];
                match (rule(c, f), rule(c, REFERENCE)) {
                    (Some(r), Some(k)) => {
                        row.push(speedup(&r.test, &k.test, costs, b, seed).percent());
                        row.push(speedup_over_ar(&r.test, costs, b, seed).times());
                    }
                    _ => row.extend(["-".into(), "-".into()]),
                }
            }
            rows.push(row);
        }
        md.push_str(&markdown_table(&header.iter().map(String::as_str).collect::<Vec<_>>(), &rows));
        learned_table(&mut md, ci, sets, b, seed)?;
        drafters_table(&mut md, ci, sets, b, seed)?;
        if let Some(inside) = &inside {
            in_sample_table(&mut md, ci, sets, inside, candidates)?;
        }
        writeln!(
            md,
            "\nThe settings the tuning traces chose (tuning throughput in tokens/s at these costs; candidates tried):\n"
        )?;
        let header: Vec<String> =
            ["rule".to_string()].into_iter().chain(sets.iter().map(|s| s.dataset.clone())).collect();
        let rows: Vec<Vec<String>> = families
            .iter()
            .map(|f| {
                let cells = sets.iter().map(|s| {
                    rule(&s.results[ci], f)
                        .map_or("-".into(), |r| format!("{} ({:.2}; {})", r.setting, r.tuning_throughput, r.candidates))
                });
                [f.clone()].into_iter().chain(cells).collect()
            })
            .collect();
        md.push_str(&markdown_table(&header.iter().map(String::as_str).collect::<Vec<_>>(), &rows));
        if sets.iter().any(|s| s.results[ci].threshold_plus.is_some()) {
            writeln!(
                md,
                "\nThreshold-plus on the test traces against the tuned confidence threshold (its starting point) and against the training-free rule the tuning traces rank first; the share of the oracle's headroom over fixed K it closes:\n"
            )?;
            let header = [
                "set",
                "vs confidence",
                "best training-free (on tuning)",
                "vs it",
                "headroom closed: threshold-plus / that rule",
                "tuning: start -> fitted tok/s",
            ]
            .map(String::from)
            .to_vec();
            let mut rows = Vec::new();
            for s in sets {
                let c = &s.results[ci];
                let (Some(tp), Some(fit)) = (rule(c, THRESHOLD_PLUS), &c.threshold_plus) else { continue };
                let conf =
                    rule(c, CONFIDENCE).map_or("-".into(), |r| speedup(&tp.test, &r.test, costs, b, seed).percent());
                let best = best_training_free(c);
                let vs = best.map_or("-".into(), |r| speedup(&tp.test, &r.test, costs, b, seed).percent());
                let closed = |r: Option<&RuleResult>| {
                    r.and_then(|r| headroom_closed(c, r)).map_or("-".into(), |x| format!("{:.0}%", 100.0 * x))
                };
                rows.push(vec![
                    s.dataset.clone(),
                    conf,
                    best.map_or("-".into(), |r| r.family.clone()),
                    vs,
                    format!("{} / {}", closed(Some(tp)), closed(best)),
                    format!("{:.3} -> {:.3}", fit.start_throughput, fit.fitted_throughput),
                ]);
            }
            md.push_str(&markdown_table(&header.iter().map(String::as_str).collect::<Vec<_>>(), &rows));
            writeln!(
                md,
                "\nFitted parameters (log-confidence thresholds in nats; `threshold-plus/<set>-<cost>.json`):\n"
            )?;
            let names = specx_decoder::speculative::ThresholdPlusParams::coordinate_names();
            let header: Vec<String> = ["set".to_string()].into_iter().chain(names).collect();
            let rows: Vec<Vec<String>> = sets
                .iter()
                .filter_map(|s| {
                    s.results[ci].threshold_plus.as_ref().map(|f| {
                        [s.dataset.clone()]
                            .into_iter()
                            .chain(f.params.coordinates().iter().map(|x| format!("{x:+.3}")))
                            .collect()
                    })
                })
                .collect();
            md.push_str(&markdown_table(&header.iter().map(String::as_str).collect::<Vec<_>>(), &rows));
        }
    }
    model_tables(&mut md, sets)?;
    Ok(md)
}

/// A file-name slug of a cost model's name.
pub fn slug(name: &str) -> String {
    let s: String =
        name.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' }).collect();
    s.split('-').filter(|p| !p.is_empty()).collect::<Vec<_>>().join("-")
}

/// Writes `OUT/tuning.md` of a run that chose its settings without replaying the test traces:
/// each family's chosen setting and its tuning throughput over the tuned fixed K's (in sample,
/// so at most what the rule could show on the test traces), and the calibrated model's fit.
pub fn write_tuning(cfg: &TuneConfig, sets: &[SetResult]) -> Result<()> {
    let mut md = String::new();
    let cwd = std::env::current_dir()?;
    let shown = |p: &std::path::Path| p.strip_prefix(&cwd).unwrap_or(p).display().to_string();
    writeln!(md, "# Stop rules on the tuning traces only\n")?;
    writeln!(
        md,
        "Every setting below was chosen on the tuning traces (`{}`) per prompt set and cost model; the test traces were not replayed. Each family's tuning throughput is shown over the tuned fixed K's on the same traces: both were chosen there, so this is in sample, and a family that does not lead here has no reason to lead on the test traces.\n",
        shown(&cfg.tuning)
    )?;
    writeln!(md, "| set | tuning prompts | target rows forwarded | their seconds |\n| --- | --- | --- | --- |")?;
    for s in sets {
        let (rows, secs) = match s.target_pass {
            None => ("-".into(), "-".into()),
            // Every trace's statistics came from the cache: nothing was forwarded.
            Some(p) if p.rows == 0 => ("cached".into(), "-".into()),
            Some(p) => (p.rows.to_string(), format!("{:.0}", p.seconds)),
        };
        writeln!(md, "| {} | {} | {rows} | {secs} |", s.dataset, s.tuning_prompts.len())?;
    }
    for (ci, costs) in cfg.costs.iter().enumerate() {
        writeln!(md, "\n## {}\n", costs.name)?;
        let mut families: Vec<String> =
            sets.iter().flat_map(|s| s.results[ci].rules.iter().map(|r| r.family.clone())).collect();
        families.sort();
        families.dedup();
        let header: Vec<String> = ["rule".to_string()]
            .into_iter()
            .chain(
                sets.iter()
                    .flat_map(|s| [format!("{}: setting", s.dataset), format!("{}: vs tuned fixed K", s.dataset)]),
            )
            .collect();
        let rows: Vec<Vec<String>> = families
            .iter()
            .map(|f| {
                let mut row = vec![f.clone()];
                for s in sets {
                    let c = &s.results[ci];
                    match (rule(c, f), rule(c, REFERENCE)) {
                        (Some(r), Some(k)) if k.tuning_throughput > 0.0 => row.extend([
                            r.setting.clone(),
                            format!("{:+.1}%", 100.0 * (r.tuning_throughput / k.tuning_throughput - 1.0)),
                        ]),
                        (Some(r), _) => row.extend([r.setting.clone(), "-".into()]),
                        _ => row.extend(["-".into(), "-".into()]),
                    }
                }
                row
            })
            .collect();
        md.push_str(&markdown_table(&header.iter().map(String::as_str).collect::<Vec<_>>(), &rows));
    }
    model_tables(&mut md, sets)?;
    std::fs::create_dir_all(&cfg.out).with_context(|| format!("creating {}", cfg.out.display()))?;
    write_atomic(&cfg.out.join("tuning.md"), md.as_bytes())?;
    eprintln!("{} sets chosen on the tuning traces: {}", sets.len(), cfg.out.join("tuning.md").display());
    Ok(())
}

/// Writes `OUT/tune.md`, `OUT/tune.json` (every interval) and the fitted parameters.
pub fn write(cfg: &TuneConfig, sets: &[SetResult], candidates: &BTreeMap<String, Vec<String>>) -> Result<()> {
    let md = page(cfg, sets, candidates)?;
    write_atomic(&cfg.out.join("tune.md"), md.as_bytes())?;
    let dir = cfg.out.join("threshold-plus");
    let mut summary = Vec::new();
    for s in sets {
        for c in &s.results {
            if let Some(f) = &c.threshold_plus {
                std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
                write_atomic(
                    &dir.join(format!("{}-{}.json", s.dataset, slug(&c.costs.name))),
                    serde_json::to_string_pretty(&f.params)?.as_bytes(),
                )?;
            }
            for ch in &c.calibrated {
                let dir = cfg.out.join("calibrated");
                std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
                write_atomic(
                    &dir.join(format!("{}-{}-{}.json", s.dataset, slug(&c.costs.name), ch.family)),
                    serde_json::to_string_pretty(&ch.params)?.as_bytes(),
                )?;
            }
            let k = rule(c, REFERENCE);
            for r in &c.rules {
                let vs_k: Option<Interval> = k.map(|k| speedup(&r.test, &k.test, &c.costs, cfg.bootstrap, cfg.seed));
                summary.push(serde_json::json!({
                    "set": s.dataset, "costs": c.costs.name, "family": r.family, "setting": r.setting,
                    "tuning_throughput": r.tuning_throughput, "test_throughput": throughput(&r.test, &c.costs),
                    "test_vs_fixed_k": vs_k, "test_vs_ar": speedup_over_ar(&r.test, &c.costs, cfg.bootstrap, cfg.seed),
                }));
            }
        }
    }
    write_atomic(&cfg.out.join("tune.json"), serde_json::to_string_pretty(&summary)?.as_bytes())?;
    print!("{md}");
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn slugs_are_file_names() {
        assert_eq!(super::slug("A100 (paper)"), "a100-paper");
        assert_eq!(super::slug("CPU (this machine)"), "cpu-this-machine");
    }
}
