//! `specx eval margins RUN_DIR`: the target's top-2 logit margin at every position of the
//! run's greedy AR outputs. Greedy speculative decoding on a device whose matmuls are not
//! row-invariant (a GPU) can depart from AR only where this margin is below the device's
//! rounding gap between a many-row and a one-row forward, so the census bounds the flip rate
//! for any gap and calibrates `[audit] near_tie`. It also counts where one teacher-forced
//! forward over prompt + output (burn's gemm, many rows at once) picks another argmax than the
//! AR run did: the same phenomenon, measured on this machine's CPU.

use super::manifest::EvalManifest;
use super::merge::greedy_units;
use anyhow::{Result, ensure};
use serde::Serialize;
use specx_decoder::fsutil::write_atomic;
use specx_decoder::{device_from_name, load_model_as};
use specx_run::RunManifest;
use std::path::Path;

/// Margins below each of these count as near-ties in the census table.
pub const THRESHOLDS: [f32; 5] = [1e-5, 1e-4, 1e-3, 1e-2, 1e-1];

/// What `margins.json` holds.
#[derive(Clone, Debug, Serialize)]
pub struct MarginCensus {
    pub units: usize,
    pub positions: usize,
    /// (threshold, positions whose margin is below it).
    pub below: Vec<(f32, usize)>,
    pub min_margin: f32,
    pub median_margin: f32,
    /// Positions where the teacher-forced many-row forward's argmax is not the AR token, with
    /// that forward's margin between the two: (unit index, position, margin).
    pub argmax_departures: Vec<(usize, usize, f32)>,
}

/// The census of the greedy units of the run in `dir` (the target loaded as the run did).
pub fn margins(dir: &Path, progress: bool) -> Result<MarginCensus> {
    let manifest = EvalManifest::read(dir)?;
    let units = greedy_units(dir)?;
    let m = &manifest.config.models;
    let device = device_from_name(m.devices.first().unwrap_or(&m.device))?;
    eprintln!("loading target {}", m.target.display());
    let target = load_model_as(&m.target, m.target_tokenizer.as_deref(), &device, m.weights)?;
    let bar = if progress { indicatif::ProgressBar::new(units.len() as u64) } else { indicatif::ProgressBar::hidden() };
    let (mut all, mut departures) = (Vec::new(), Vec::new());
    for u in &units {
        bar.inc(1);
        if u.ar_tokens.is_empty() {
            continue;
        }
        let mut seq = u.prompt.clone();
        seq.extend_from_slice(&u.ar_tokens);
        // Row i of the tail predicts ar_tokens[i]; the last row predicts past the output.
        let rows = target.model.forward(&seq, &mut target.model.new_cache(1))?.logits_tail(u.ar_tokens.len() + 1);
        for (i, (row, &tok)) in rows.iter().zip(&u.ar_tokens).enumerate() {
            let (best, margin) = top_two(row);
            ensure!((tok as usize) < row.len(), "unit {}: token {tok} outside the vocabulary", u.unit.index);
            if best != tok as usize {
                departures.push((u.unit.index, i, row[best] - row[tok as usize]));
            }
            all.push(margin);
        }
    }
    bar.finish_and_clear();
    ensure!(!all.is_empty(), "{}: the greedy units hold no generated tokens", dir.display());
    all.sort_by(f32::total_cmp);
    let census = MarginCensus {
        units: units.len(),
        positions: all.len(),
        below: THRESHOLDS.iter().map(|&t| (t, all.partition_point(|&m| m < t))).collect(),
        min_margin: all[0],
        median_margin: all[all.len() / 2],
        argmax_departures: departures,
    };
    write_atomic(&dir.join("margins.json"), serde_json::to_string_pretty(&census)?.as_bytes())?;
    Ok(census)
}

/// The argmax of `row` and its lead over the runner-up.
fn top_two(row: &[f32]) -> (usize, f32) {
    let (mut best, mut second) = (0, f32::NEG_INFINITY);
    for (i, &v) in row.iter().enumerate().skip(1) {
        if v > row[best] {
            second = row[best];
            best = i;
        } else if v > second {
            second = v;
        }
    }
    (best, row[best] - second)
}

/// The census as a Markdown table.
pub fn census_table(c: &MarginCensus) -> String {
    let mut rows: Vec<Vec<String>> = c
        .below
        .iter()
        .map(|&(t, n)| {
            vec![format!("< {t:.0e}"), n.to_string(), format!("{:.4}%", 100.0 * n as f64 / c.positions as f64)]
        })
        .collect();
    rows.push(vec!["min / median".into(), format!("{:.2e} / {:.3}", c.min_margin, c.median_margin), String::new()]);
    rows.push(vec![
        "many-row argmax != AR token".into(),
        c.argmax_departures.len().to_string(),
        format!("{:.4}%", 100.0 * c.argmax_departures.len() as f64 / c.positions as f64),
    ]);
    format!(
        "{} greedy units, {} generated positions\n\n{}",
        c.units,
        c.positions,
        specx_decoder::report::markdown_table(&["top-2 logit margin", "positions", "share"], &rows)
    )
}

#[cfg(test)]
mod tests {
    use super::top_two;

    #[test]
    fn top_two_finds_the_lead_over_the_runner_up() {
        assert_eq!(top_two(&[1.0, 3.0, 2.5, -1.0]), (1, 0.5));
        assert_eq!(top_two(&[4.0, 3.0]), (0, 1.0));
        assert_eq!(top_two(&[2.0, 2.0, 1.0]), (0, 0.0));
        assert_eq!(top_two(&[0.0, 1.0, 5.0]), (2, 4.0));
    }
}
