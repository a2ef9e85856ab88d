//! `specx bench-suffix`: what one SuffixDecoding speculation costs against the size of the
//! corpus of earlier outputs it matches (1 to 100,000 outputs), with the tree's build time,
//! nodes and memory. The outputs are synthetic, drawn from a seeded generator with the
//! repetition that makes cross-request drafting work: each output strings together phrases
//! from a shared pool (popular phrases recur across outputs, Zipf-distributed) with single
//! tokens between them, over a Zipf-distributed vocabulary. Patterns are the texts of new
//! outputs from the same generator (not in the corpus), cut at random positions.
//!
//! The reference measured in the same run is the scan the suffix tree replaced: every
//! occurrence of the pattern's suffixes found by reading the whole corpus, the tree grown from
//! their continuations ([`scan_score`]). The table counts the patterns both give the same best
//! score (they may differ only where equal-scored branches tie and the node budget takes one of
//! them: the tree breaks such ties by its children's order, the scan by first occurrence); the
//! scan's time grows with the corpus, the tree's should not.

use anyhow::{Result, ensure};
use clap::Args;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use specx_decoder::report::markdown_table;
use specx_decoder::speculative::suffix_tree::SuffixTree;
use specx_decoder::speculative::{SuffixParams, speculate_in};
use std::time::Instant;

#[derive(Args, Clone, Debug)]
pub struct SuffixBenchArgs {
    /// Corpus sizes in outputs, one row each.
    #[arg(long, value_delimiter = ',', default_value = "1,10,100,1000,10000,100000")]
    pub outputs: Vec<usize>,
    /// Tokens per output.
    #[arg(long, default_value_t = 128)]
    pub output_len: usize,
    /// Speculations timed per run.
    #[arg(long, default_value_t = 2000)]
    pub patterns: usize,
    /// Timed runs per corpus size (the table shows their median and range).
    #[arg(long, default_value_t = 5)]
    pub runs: usize,
    /// The drafter's nodes per matched token (SuffixDecoding's max_spec_factor).
    #[arg(long, default_value_t = 4.0)]
    pub alpha: f64,
    /// The generator's seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Time the scan reference up to this many outputs (it reads the whole corpus a
    /// speculation).
    #[arg(long, default_value_t = 10_000)]
    pub scan_up_to: usize,
}

/// The best speculation score after `pattern` found by scanning `texts` (the suffix drafter's
/// algorithm before its suffix tree): every occurrence of the pattern's last token, the length
/// of the suffix match ending there, and for each match length the tree of the continuations
/// grown best score first. The same frequencies, bounds and choice as the tree's.
fn scan_score(texts: &[Vec<u32>], pattern: &[u32], params: &SuffixParams, max_depth: usize) -> f64 {
    let Some(&last) = pattern.last() else { return 0.0 };
    let limit = (params.max_depth - 1).min(pattern.len());
    let mut ends: Vec<(usize, usize, usize)> = Vec::new();
    for (t, text) in texts.iter().enumerate() {
        for j in 1..=text.len() {
            if text[j - 1] == last {
                let l = (1..=limit.min(j)).take_while(|&l| text[j - l] == pattern[pattern.len() - l]).count();
                ends.push((t, j, l));
            }
        }
    }
    let longest = ends.iter().filter(|&&(t, j, _)| j < texts[t].len()).map(|&(_, _, l)| l).max().unwrap_or(0);
    let mut best = 0.0f64;
    for p in (1..=longest).rev() {
        let occurrences: Vec<(usize, usize)> =
            ends.iter().filter(|&&(_, _, l)| l >= p).map(|&(t, j, _)| (t, j)).collect();
        let depth = (params.max_depth - p).min(max_depth);
        let budget = params.budget(p);
        let total = occurrences.len() as f64;
        // Frontier entries: (score, level, the occurrences continuing so).
        let mut frontier: Vec<(f64, usize, Vec<(usize, usize)>)> = Vec::new();
        let expand = |level: usize, from: &[(usize, usize)], frontier: &mut Vec<(f64, usize, Vec<(usize, usize)>)>| {
            if level >= depth {
                return;
            }
            let mut by_token: Vec<(u32, Vec<(usize, usize)>)> = Vec::new();
            for &(text, j) in from {
                let Some(&t) = texts[text].get(j + level) else { continue };
                match by_token.iter_mut().find(|(tok, _)| *tok == t) {
                    Some((_, v)) => v.push((text, j)),
                    None => by_token.push((t, vec![(text, j)])),
                }
            }
            frontier.extend(by_token.into_iter().map(|(_, v)| (v.len() as f64 / total, level, v)));
        };
        expand(0, &occurrences, &mut frontier);
        let (mut score, mut nodes) = (0.0, 0);
        while nodes < budget {
            let Some(b) = (0..frontier.len()).reduce(|a, b| if frontier[b].0 > frontier[a].0 { b } else { a }) else {
                break;
            };
            if frontier[b].0 < params.min_token_prob {
                break;
            }
            let (s, level, from) = frontier.remove(b);
            score += s;
            nodes += 1;
            expand(level + 1, &from, &mut frontier);
        }
        best = best.max(score);
    }
    best
}

/// Draws synthetic outputs (see the module docs).
struct Outputs {
    rng: StdRng,
    phrases: Vec<Vec<u32>>,
    phrase_cdf: Vec<f64>,
    token_cdf: Vec<f64>,
}

const VOCAB: usize = 32_000;
const PHRASES: usize = 20_000;

fn zipf_cdf(n: usize, s: f64) -> Vec<f64> {
    let mut acc = 0.0;
    let mut cdf: Vec<f64> = (1..=n)
        .map(|r| {
            acc += 1.0 / (r as f64).powf(s);
            acc
        })
        .collect();
    cdf.iter_mut().for_each(|c| *c /= acc);
    cdf
}

fn draw(rng: &mut StdRng, cdf: &[f64]) -> usize {
    let u: f64 = rng.random();
    cdf.partition_point(|&c| c < u).min(cdf.len() - 1)
}

impl Outputs {
    fn new(seed: u64) -> Self {
        let mut rng = StdRng::seed_from_u64(seed);
        let token_cdf = zipf_cdf(VOCAB, 1.1);
        let phrases = (0..PHRASES)
            .map(|_| {
                let len = rng.random_range(3..=12);
                (0..len).map(|_| draw(&mut rng, &token_cdf) as u32).collect()
            })
            .collect();
        Self { rng, phrases, phrase_cdf: zipf_cdf(PHRASES, 1.0), token_cdf }
    }

    fn next(&mut self, len: usize) -> Vec<u32> {
        let mut out = Vec::with_capacity(len + 12);
        while out.len() < len {
            let p = draw(&mut self.rng, &self.phrase_cdf);
            out.extend_from_slice(&self.phrases[p]);
            if self.rng.random_bool(0.2) {
                out.push(draw(&mut self.rng, &self.token_cdf) as u32);
            }
        }
        out.truncate(len);
        out
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 }
}

pub fn run(a: SuffixBenchArgs) -> Result<()> {
    ensure!(!a.outputs.is_empty() && a.runs >= 1 && a.patterns >= 1, "--outputs, --runs and --patterns need values");
    ensure!(a.output_len >= 32, "--output-len must be at least 32 (patterns are cut at 24 or more tokens)");
    let params = SuffixParams { alpha: a.alpha, ..Default::default() };
    params.check()?;
    let mut sizes = a.outputs.clone();
    sizes.sort_unstable();
    sizes.dedup();
    // The patterns: new outputs cut at random positions, the same for every corpus size.
    let mut patterns_source = Outputs::new(a.seed ^ 0x5eed);
    let mut cut = StdRng::seed_from_u64(a.seed ^ 0xc07);
    let patterns: Vec<Vec<u32>> = (0..a.patterns)
        .map(|_| {
            let text = patterns_source.next(a.output_len);
            let end = cut.random_range(24..=text.len());
            text[end.saturating_sub(64)..end].to_vec()
        })
        .collect();
    let mut source = Outputs::new(a.seed);
    let mut tree = SuffixTree::new(params.max_depth);
    // The corpus as texts, for the scan reference.
    let mut texts: Vec<Vec<u32>> = Vec::new();
    let mut build_s = 0.0;
    let mut rows = Vec::new();
    let mut reference = None;
    let mut medians = Vec::new();
    eprintln!(
        "bench-suffix: {} patterns x {} runs per corpus size, outputs of {} tokens, alpha {}",
        a.patterns, a.runs, a.output_len, a.alpha
    );
    for &n in &sizes {
        // The corpus grows to n outputs (the timing of each size adds to the last's).
        let started = Instant::now();
        while tree.texts() < n {
            let text = source.next(a.output_len);
            tree.insert(&text);
            if n <= a.scan_up_to {
                texts.push(text);
            }
        }
        build_s += started.elapsed().as_secs_f64();
        // The scan: one run, its scores against the tree's.
        let scan = (n <= a.scan_up_to).then(|| {
            let started = Instant::now();
            let scores: Vec<f64> = patterns.iter().map(|p| scan_score(&texts, p, &params, params.max_depth)).collect();
            (started.elapsed().as_secs_f64() * 1e6 / patterns.len() as f64, scores)
        });
        let mut per_call_us = Vec::with_capacity(a.runs);
        let (mut nodes, mut matched) = (0usize, 0usize);
        for _ in 0..a.runs {
            let started = Instant::now();
            let (mut n_nodes, mut n_matched) = (0, 0);
            for p in &patterns {
                let s = speculate_in(&tree, &params, p, params.max_depth);
                n_nodes += s.tree.len();
                n_matched += usize::from(!s.tree.is_empty());
            }
            per_call_us.push(started.elapsed().as_secs_f64() * 1e6 / patterns.len() as f64);
            (nodes, matched) = (n_nodes, n_matched);
        }
        let scan_cell = match &scan {
            None => "- (not run)".to_string(),
            Some((us, scores)) => {
                let same = patterns
                    .iter()
                    .zip(scores)
                    .filter(|&(p, &want)| {
                        (speculate_in(&tree, &params, p, params.max_depth).score() - want).abs() < 1e-9
                    })
                    .count();
                format!("{us:.1}; {same}/{}", patterns.len())
            }
        };
        let (lo, hi) = per_call_us.iter().fold((f64::MAX, 0f64), |(l, h), &x| (l.min(x), h.max(x)));
        let med = median(&mut per_call_us);
        if n == 100 {
            reference = Some(med);
        }
        medians.push(med);
        eprintln!("bench-suffix: {n} outputs: {med:.1} us a speculation");
        rows.push(vec![
            n.to_string(),
            tree.tokens().to_string(),
            tree.nodes().to_string(),
            format!("{:.0}", tree.bytes() as f64 / (1 << 20) as f64),
            format!("{build_s:.2}"),
            format!("{med:.2} ({lo:.2}-{hi:.2})"),
            String::new(),
            format!("{:.2}", nodes as f64 / patterns.len() as f64),
            format!("{:.2}", matched as f64 / patterns.len() as f64),
            scan_cell,
        ]);
    }
    for (row, med) in rows.iter_mut().zip(&medians) {
        row[6] = reference.map_or("- (100 not measured)".to_string(), |r| format!("{:.2}", med / r));
    }
    print!(
        "{}",
        markdown_table(
            &[
                "outputs",
                "tokens",
                "nodes",
                "MiB",
                "build (s, cumulative)",
                "speculate (us, median (range))",
                "vs 100 outputs",
                "nodes a speculation",
                "share with a speculation",
                "scan reference (us; patterns with the same score)",
            ],
            &rows
        )
    );
    Ok(())
}
