//! EasySpec's Table 5 on our draft: how close a fuzzy layer's attention comes to the precise
//! one. At sampled positions of real greedy outputs, the draft (its cache exact up to there)
//! runs one fuzzy forward per strategy with [`Transformer::probe_fuzzy`], which records every
//! layer's attention input, q, k, v and output as the fuzzy forward computed them and as the
//! precise model would have from the same running state. Averages are over positions and
//! over the non-leading layers of the groups (the approximated ones); leading layers are
//! reported apart (identical by construction, which the table checks).

use crate::common::results::UnitFile;
use crate::experiment::manifest::EvalManifest;
use crate::experiment::merge::greedy_units;
use anyhow::{Context, Result, ensure};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use specx_decoder::fsutil::write_atomic;
use specx_decoder::layer_groups::LayerGroups;
use specx_decoder::report::markdown_table;
use specx_decoder::{AttentionProbe, Transformer, device_from_name, load_model_as};
use specx_run::RunManifest;
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub struct SimilarityArgs {
    /// A finished `specx eval` run with greedy units (their prompts and AR outputs are the
    /// token sequences; its manifest names the draft model).
    #[arg(long)]
    pub run: PathBuf,
    /// Layer-parallel strategies (presets `lp2`.. or the paper's notation), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "lp2,lp3,lp4,lp5")]
    pub strategies: Vec<String>,
    /// Probe every N-th generated position of each output.
    #[arg(long, default_value_t = 4)]
    pub every: usize,
    /// At most this many units of the run (in unit order).
    #[arg(long)]
    pub limit: Option<usize>,
    /// Output directory.
    #[arg(long, default_value = "runs/easyspec-similarity")]
    pub out: PathBuf,
}

/// The five quantities of the paper's Table 5, in its column order.
const QUANTITIES: [&str; 5] = ["h", "q", "k", "v", "attn_output"];

fn parts(p: &AttentionProbe) -> [&[f32]; 5] {
    [&p.input, &p.q, &p.k, &p.v, &p.out]
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let (mut ab, mut aa, mut bb) = (0.0f64, 0.0f64, 0.0f64);
    for (&x, &y) in a.iter().zip(b) {
        let (x, y) = (x as f64, y as f64);
        ab += x * y;
        aa += x * x;
        bb += y * y;
    }
    if aa == 0.0 && bb == 0.0 { 1.0 } else { ab / (aa.sqrt() * bb.sqrt()).max(f64::MIN_POSITIVE) }
}

/// Sums of cosine similarities per layer and quantity for one strategy.
#[derive(Clone, Debug, Serialize)]
pub struct StrategySimilarity {
    pub strategy: String,
    pub groups: String,
    /// Per layer: whether it leads its group, and the mean similarity of each quantity.
    pub layers: Vec<LayerSimilarity>,
    pub positions: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct LayerSimilarity {
    pub layer: usize,
    pub leading: bool,
    pub mean: [f64; 5],
}

impl StrategySimilarity {
    /// Mean over the layers with `leading` of each quantity's mean (None if there are none).
    pub fn average(&self, leading: bool) -> Option<[f64; 5]> {
        let layers: Vec<&LayerSimilarity> = self.layers.iter().filter(|l| l.leading == leading).collect();
        (!layers.is_empty())
            .then(|| std::array::from_fn(|q| layers.iter().map(|l| l.mean[q]).sum::<f64>() / layers.len() as f64))
    }
}

/// Probes `strategies` at every `every`-th generated position of each (prompt, output).
pub fn measure(
    draft: &Transformer,
    sequences: &[(Vec<u32>, Vec<u32>)],
    strategies: &[(String, LayerGroups)],
    every: usize,
    bar: &ProgressBar,
) -> Result<Vec<StrategySimilarity>> {
    ensure!(every >= 1, "--every must be at least 1");
    let layers = draft.config().num_hidden_layers;
    let mut sums = vec![vec![[0.0f64; 5]; layers]; strategies.len()];
    let mut leading = vec![vec![false; layers]; strategies.len()];
    let mut positions = 0;
    for (prompt, output) in sequences {
        let seq: Vec<u32> = prompt.iter().chain(output).copied().collect();
        let mut cache = draft.new_cache(1);
        draft.forward(prompt, &mut cache)?;
        let mut at = prompt.len();
        while at < seq.len() {
            for (s, (_, groups)) in strategies.iter().enumerate() {
                let (_, probes) = draft.probe_fuzzy(&seq[at..at + 1], &mut cache, groups)?;
                cache.truncate(at);
                for (l, p) in probes.iter().enumerate() {
                    leading[s][l] = p.leading;
                    for (q, (a, b)) in parts(&p.precise).into_iter().zip(parts(&p.fuzzy)).enumerate() {
                        sums[s][l][q] += cosine(a, b);
                    }
                }
            }
            positions += 1;
            // The exact forward of the tokens up to the next probed position.
            let next = (at + every).min(seq.len());
            draft.forward(&seq[at..next], &mut cache)?;
            at = next;
        }
        bar.inc(1);
    }
    ensure!(positions > 0, "no position to probe: the outputs are empty");
    Ok(strategies
        .iter()
        .enumerate()
        .map(|(s, (name, groups))| StrategySimilarity {
            strategy: name.clone(),
            groups: groups.to_string(),
            layers: (0..layers)
                .map(|l| LayerSimilarity {
                    layer: l,
                    leading: leading[s][l],
                    mean: sums[s][l].map(|v| v / positions as f64),
                })
                .collect(),
            positions,
        })
        .collect())
}

/// The Table 5 analogue as markdown.
pub fn table(results: &[StrategySimilarity]) -> String {
    let mut rows = Vec::new();
    for r in results {
        for (leading, what) in [(false, "fuzzy layers"), (true, "leading layers")] {
            if let Some(avg) = r.average(leading) {
                let n = r.layers.iter().filter(|l| l.leading == leading).count();
                let mut row = vec![r.strategy.clone(), format!("{what} ({n})")];
                row.extend(avg.iter().map(|v| format!("{v:.4}")));
                rows.push(row);
            }
        }
    }
    let mut header = vec!["strategy", "layers averaged"];
    header.extend(QUANTITIES);
    markdown_table(&header, &rows)
}

fn read_units(run: &Path, limit: Option<usize>) -> Result<Vec<UnitFile>> {
    let mut units = greedy_units(run)?;
    units.retain(|u| !u.ar_tokens.is_empty());
    units.truncate(limit.unwrap_or(usize::MAX));
    ensure!(!units.is_empty(), "{}: no greedy unit with a non-empty output (within --limit)", run.display());
    Ok(units)
}

pub fn run(a: &SimilarityArgs) -> Result<()> {
    let manifest = EvalManifest::read(&a.run)?;
    let units = read_units(&a.run, a.limit)?;
    let c = &manifest.config.models;
    ensure!(c.draft.exists(), "the run's draft model {} is gone", c.draft.display());
    for s in &a.strategies {
        LayerGroups::check_syntax(s).with_context(|| format!("--strategies: '{s}'"))?;
    }
    let device = device_from_name(&c.device)?;
    let draft = load_model_as(&c.draft, c.draft_tokenizer.as_deref(), &device, c.weights)?;
    let layers = draft.model.config().num_hidden_layers;
    let strategies: Vec<(String, LayerGroups)> =
        a.strategies.iter().map(|s| Ok((s.clone(), LayerGroups::parse(s, layers)?))).collect::<Result<_>>()?;
    let sequences: Vec<(Vec<u32>, Vec<u32>)> = units.iter().map(|u| (u.prompt.clone(), u.ar_tokens.clone())).collect();
    let bar = ProgressBar::new(sequences.len() as u64);
    bar.set_style(ProgressStyle::with_template("{bar:30} {pos}/{len} outputs probed, {elapsed} elapsed, ETA {eta}")?);
    let t = std::time::Instant::now();
    let results = measure(&draft.model, &sequences, &strategies, a.every, &bar)?;
    bar.finish_and_clear();
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let record = serde_json::json!({ "run": a.run, "draft": manifest.draft, "units": units.len(), "every": a.every, "seconds": t.elapsed().as_secs_f64(), "strategies": results });
    write_atomic(&a.out.join("similarity.json"), serde_json::to_string_pretty(&record)?.as_bytes())?;
    let summary = format!(
        "# EasySpec Table 5 analogue\n\nDraft {} ({} layers); {} greedy outputs of {}, every {} generated position ({} positions), each drafted once with an exact cache (the first fuzzy step after a calibration). Mean cosine similarity between the precise and the fuzzy attention input (h), q, k, v (after RoPE for q and k) and attention output (after the output projection) of the last row; averaged over positions, then over the layers named. Leading layers of a group read the running state: identical by construction.\n\n{}",
        c.draft.display(),
        layers,
        units.len(),
        a.run.display(),
        a.every,
        results[0].positions,
        table(&results)
    );
    write_atomic(&a.out.join("summary.md"), summary.as_bytes())?;
    print!("{summary}");
    eprintln!("wrote {} and similarity.json ({:.0} s)", a.out.join("summary.md").display(), t.elapsed().as_secs_f64());
    Ok(())
}
