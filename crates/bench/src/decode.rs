//! `specx bench-decode`: a preset of `specx eval` (greedy, fixed K, the first N HumanEval
//! prompts or their copy-heavy edit, Qwen's chat template) run once per weight path, every K
//! with every drafter of `--drafters` and every draft of `--drafts`, with the speedups of all
//! paths against the first path's AR printed in one table, and with `--llamacpp` against
//! llama.cpp's `llama-bench` generation speed on the target, run in the same process after the
//! decodes.

use crate::llamacpp::{self, LlamaCppSpeculative};
use anyhow::{Result, bail, ensure};
use specx_decoder::{DraftTransform, WeightMode};
use specx_eval::common::stats::{GroupStats, grouped, mean_sd};
use specx_eval::experiment::axes::{DrafterAxis, MethodGrid, PolicyAxis};
use specx_eval::experiment::config::{BudgetConfig, EvalConfig, ModelsConfig, OutputConfig, PromptSetConfig};
use specx_eval::experiment::methods::{MethodsConfig, SpecDecGrid};
use specx_eval::experiment::run::select_sets;
use specx_eval::experiment::{EvalOptions, run as run_eval};
use specx_eval::method::drafter::feature::FeatureDrafters;
use specx_eval::method::drafter::lookup::LookupDrafters;
use specx_eval::method::drafter::suffix::SuffixDrafters;
use specx_eval::method::drafter::tree::TreeDrafters;
use specx_eval::method::models::PairArgs;
use specx_eval::method::policy::fixed::FixedPolicies;
use specx_eval::method::policy::matchrate::MatchRatePolicies;
use specx_eval::method::policy::tree_price::TreePricePolicies;
use specx_eval::report::markdown_table;
use specx_prompts::{HUMANEVAL_EDIT_TEMPLATE, PromptFormat};
use std::path::PathBuf;

/// Options of `specx bench-decode`.
#[derive(clap::Args, Debug)]
pub struct DecodeBenchArgs {
    #[command(flatten)]
    pub pair: PairArgs,
    /// HumanEval JSONL(.gz) file.
    #[arg(long, default_value = "~/.cache/specx/datasets/humaneval/HumanEval.jsonl.gz")]
    pub prompts: PathBuf,
    /// The prompt set made of the file's rows: `humaneval` (complete the function) or
    /// `humaneval-edit` (copy-heavy: the complete function with an instruction to add type hints
    /// and a docstring; the answer mostly repeats the prompt).
    #[arg(long, value_enum, default_value = "humaneval")]
    pub set: BenchSet,
    /// Number of prompts (the first N of the file).
    #[arg(long, default_value_t = 10)]
    pub n: usize,
    /// Tokens to generate per prompt.
    #[arg(long, default_value_t = 128)]
    pub max_new_tokens: usize,
    /// Candidate lengths K of fixed-K speculative decoding to compare.
    #[arg(long, value_delimiter = ',', default_value = "1,2,3,4,6,8")]
    pub k: Vec<usize>,
    /// Weight paths to compare, one after the other (`native`, `q8`, `f32`); speedups are against
    /// the autoregressive run of the same path, and of the first path listed.
    #[arg(long, value_delimiter = ',', default_value = "q8")]
    pub weights: Vec<WeightMode>,
    /// Eval run directories go here, one per weight path (resumable like any eval run).
    #[arg(long, default_value = "runs/bench-decode")]
    pub out: PathBuf,
    /// Drafts each K runs with: `full` (as loaded), `vN` (the N most frequent tokens of the
    /// shipped frequency table), `q4_0`/`q5_0`/`q8_0` (requantized), or both joined by `+`
    /// (`v16384+q4_0`).
    #[arg(long, value_delimiter = ',', default_value = "full")]
    pub drafts: Vec<DraftTransform>,
    /// Drafters each K runs with: `plain` (the draft model), `lookup` (prompt lookup, no
    /// draft model; the draft as loaded only), `hybrid` (lookup, else the draft model),
    /// `feature` (the EAGLE-style feature head of --feature-head; no draft model), `suffix`
    /// (SuffixDecoding's token trees, no draft model; at its own depth bound, not each K),
    /// `tree` (EAGLE-2's dynamic draft trees from the draft model, each K a depth).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "plain")]
    pub drafters: Vec<BenchDrafter>,
    /// The lookup and hybrid drafters' shortest n-gram to match (as `specx decode`).
    #[arg(long, default_value_t = 1)]
    pub ngram_min: usize,
    /// The lookup and hybrid drafters' longest n-gram to match, tried first (as `specx decode`).
    #[arg(long, default_value_t = 3)]
    pub ngram_max: usize,
    /// Also run the lookup and hybrid drafters under the matchrate stop rule at each of these
    /// thresholds (at most 16 candidates; the hybrid's draft-model rounds at each K of --k),
    /// beside fixed K.
    #[arg(long, value_delimiter = ',')]
    pub matchrate: Vec<f64>,
    /// The feature drafter's head directory [default: checkpoints/feature-head of this source
    /// tree].
    #[arg(long, value_name = "DIR")]
    pub feature_head: Option<PathBuf>,
    /// The suffix drafter's nodes per matched token, one run each (as `specx decode
    /// --suffix-alpha`).
    #[arg(long, value_delimiter = ',', default_value = "1")]
    pub suffix_alpha: Vec<f64>,
    /// The suffix drafter's lowest frequency probability of a node (as `specx decode`).
    #[arg(long, default_value_t = 0.1)]
    pub suffix_min_prob: f64,
    /// How many earlier prompts' outputs the suffix drafter also matches, one run each (0: the
    /// request's own text only; SuffixDecoding's cross-request tree, `cached_requests` in a
    /// grid). The prompts run in file order, so prompt i can match the outputs of those before.
    #[arg(long, value_delimiter = ',', default_value = "0")]
    pub suffix_cached: Vec<usize>,
    /// Also run the suffix drafter speculating one path a match (its likeliest continuation)
    /// beside its trees: tree against path at the same frequencies.
    #[arg(long)]
    pub suffix_paths: bool,
    /// The tree drafter's children per expanded node, one run each (as `specx decode
    /// --tree-top-k`).
    #[arg(long, value_delimiter = ',', default_value = "4")]
    pub tree_top_k: Vec<usize>,
    /// The tree drafter's most nodes of one tree, one run each (as `specx decode --tree-nodes`).
    #[arg(long, value_delimiter = ',', default_value = "16")]
    pub tree_nodes: Vec<usize>,
    /// Also run the suffix and tree drafters under the tree-price policy at each of these costs
    /// of a verification row (in one-row target calls, as `specx decode --row-cost`), beside
    /// fixed K.
    #[arg(long, value_delimiter = ',')]
    pub tree_price: Vec<f64>,
    /// The tree-price policy's cost of the tree drafter's draft level, in one-row target calls
    /// (as `specx decode --draft-cost`; the suffix drafter's is 0).
    #[arg(long, default_value_t = 0.0)]
    pub tree_draft_cost: f64,
    /// llama.cpp's `llama-bench` (scripts/bench-llamacpp.sh builds it, and
    /// `llama-speculative-simple` beside it): after the decodes, its generation speed on the
    /// target (`--max-new-tokens` tokens after a context of the runs' mean prompt length, 3
    /// repetitions, with `--repack 0` and `1`) and every method's tokens/s against the faster of
    /// the two; then llama.cpp's own speculative decoding of the same prompts with every K of
    /// `--k` (greedy, exactly K draft tokens per round; one process per prompt and K, model
    /// loading not timed). specx's and llama.cpp's speculative tokens/s include each prompt's
    /// prefill; llama-bench's tg does not.
    #[arg(long, value_name = "PATH")]
    pub llamacpp: Option<PathBuf>,
}

/// `--set`: which prompts the HumanEval rows become.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum BenchSet {
    Humaneval,
    HumanevalEdit,
}

impl BenchSet {
    fn name(self) -> &'static str {
        match self {
            Self::Humaneval => "humaneval",
            Self::HumanevalEdit => "humaneval-edit",
        }
    }
}

/// `--drafters`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum BenchDrafter {
    Plain,
    Lookup,
    Hybrid,
    Feature,
    Suffix,
    Tree,
}

/// The methods: fixed K for each drafter (the papers' `specdec` section when the draft model
/// drafts alone, as before drafters were an option), matchrate beside it for lookup and hybrid.
fn methods(a: &DecodeBenchArgs) -> MethodsConfig {
    let lookup = || Some(LookupDrafters { ngrams: vec![[a.ngram_min, a.ngram_max]] });
    let fixed = || FixedPolicies { k: a.k.clone() };
    let matchrate = |model_k: Vec<usize>| {
        (!a.matchrate.is_empty()).then(|| MatchRatePolicies { thresholds: a.matchrate.clone(), max: vec![16], model_k })
    };
    let priced = |depth: Vec<usize>, draft_cost: f64| {
        (!a.tree_price.is_empty()).then(|| TreePricePolicies {
            depth,
            row_costs: a.tree_price.clone(),
            draft_costs: vec![draft_cost],
        })
    };
    let mut m = MethodsConfig { drafts: a.drafts.clone(), ..Default::default() };
    if a.drafters.contains(&BenchDrafter::Plain) {
        m.specdec = Some(SpecDecGrid { k: a.k.clone() });
    }
    if a.drafters.contains(&BenchDrafter::Lookup) {
        // Prompt lookup runs no draft model: once, whatever --drafts lists.
        let policies = PolicyAxis { fixed: Some(fixed()), matchrate: matchrate(Vec::new()), ..Default::default() };
        m.grid.push(MethodGrid {
            drafters: DrafterAxis { lookup: lookup(), ..Default::default() },
            policies,
            ..Default::default()
        });
    }
    if a.drafters.contains(&BenchDrafter::Hybrid) {
        let policies = PolicyAxis { fixed: Some(fixed()), matchrate: matchrate(a.k.clone()), ..Default::default() };
        m.grid.push(MethodGrid {
            drafters: DrafterAxis { hybrid: lookup(), ..Default::default() },
            policies,
            drafts: a.drafts.clone(),
            ..Default::default()
        });
    }
    if a.drafters.contains(&BenchDrafter::Feature) {
        let head = a.feature_head.clone().unwrap_or_else(specx_eval::method::models::default_feature_head_dir);
        let policies = PolicyAxis { fixed: Some(fixed()), ..Default::default() };
        m.grid.push(MethodGrid {
            drafters: DrafterAxis { feature: Some(FeatureDrafters { heads: vec![head] }), ..Default::default() },
            policies,
            ..Default::default()
        });
    }
    if a.drafters.contains(&BenchDrafter::Suffix) {
        let suffix = SuffixDrafters {
            alphas: a.suffix_alpha.clone(),
            min_token_probs: vec![a.suffix_min_prob],
            cached_requests: a.suffix_cached.clone(),
            max_depth: None,
            max_nodes: None,
            offsets: vec![0.0],
            paths_only: if a.suffix_paths { vec![false, true] } else { vec![false] },
        };
        // The tree's depth is bounded by the drafter (the match plus the speculation within
        // its max_depth), so K is that bound.
        let depth = specx_decoder::speculative::SuffixParams::default().max_depth;
        let policies = PolicyAxis {
            fixed: Some(FixedPolicies { k: vec![depth] }),
            tree_price: priced(vec![depth], 0.0),
            ..Default::default()
        };
        m.grid.push(MethodGrid {
            drafters: DrafterAxis { suffix: Some(suffix), ..Default::default() },
            policies,
            ..Default::default()
        });
    }
    if a.drafters.contains(&BenchDrafter::Tree) {
        let tree = TreeDrafters { top_k: a.tree_top_k.clone(), max_nodes: a.tree_nodes.clone() };
        m.grid.push(MethodGrid {
            drafters: DrafterAxis { tree: Some(tree), ..Default::default() },
            policies: PolicyAxis {
                fixed: Some(fixed()),
                tree_price: priced(a.k.clone(), a.tree_draft_cost),
                ..Default::default()
            },
            ..Default::default()
        });
    }
    m
}

/// The eval config of one weight path.
fn preset(a: &DecodeBenchArgs, mode: WeightMode) -> Result<EvalConfig> {
    let cwd = std::env::current_dir()?;
    let abs = |p: &PathBuf| specx_run::paths::resolve_path(p, &cwd);
    let (draft, target) = a.pair.paths();
    Ok(EvalConfig {
        models: ModelsConfig {
            draft: abs(&draft),
            target: abs(&target),
            draft_tokenizer: a.pair.draft_tokenizer.as_ref().map(abs),
            target_tokenizer: a.pair.target_tokenizer.as_ref().map(abs),
            device: "cpu".into(),
            devices: Vec::new(),
            weights: mode,
        },
        prompts: vec![PromptSetConfig {
            name: a.set.name().into(),
            format: PromptFormat::Humaneval,
            path: abs(&a.prompts),
            split: "all".into(),
            split_sizes: Vec::new(),
            split_seed: 0,
            skip: 0,
            sample: None,
            sample_seed: 0,
            optional: false,
            template: (a.set == BenchSet::HumanevalEdit).then(|| HUMANEVAL_EDIT_TEMPLATE.to_string()),
            chat_template: "qwen".into(),
        }],
        sampling: vec![specx_eval::experiment::config::SamplingSetting {
            name: "greedy".into(),
            temperature: 0.0,
            top_k: None,
            top_p: None,
            draws: Default::default(),
        }],
        budget: BudgetConfig { max_new_tokens: Some(a.max_new_tokens), max_total_tokens: None },
        seeds: vec![0],
        methods: methods(a),
        audit: Default::default(),
        output: OutputConfig { dir: abs(&a.out).join(mode.to_string()) },
        slurm: None,
    })
}

/// Runs the preset for every weight path and prints the table.
pub fn run(a: DecodeBenchArgs) -> Result<()> {
    ensure!(!a.weights.is_empty(), "--weights needs at least one of native, f32");
    ensure!(a.n > 0, "--n must be at least 1");
    ensure!(!a.drafters.is_empty(), "--drafters needs at least one of plain, lookup, hybrid, feature, suffix, tree");
    let mut results = Vec::new();
    for &mode in &a.weights {
        let cfg = preset(&a, mode)?;
        cfg.validate()?;
        let out = run_eval(&cfg, &EvalOptions { limit: Some(a.n), progress: true, ..Default::default() })?;
        if !out.audit_failures.is_empty() {
            bail!("losslessness audit failed on the {mode} path: {:?}", out.audit_failures);
        }
        results.push((mode, out.rows, cfg.output.dir));
    }
    let total_ar = |rows: &[specx_eval::common::results::ResultRow]| {
        rows.iter().filter(|r| r.setting.family() == "ar").map(|r| r.total_time_s).sum::<f64>()
    };
    let first_ar = total_ar(&results[0].1);
    let ar: Vec<&specx_eval::common::results::ResultRow> =
        results[0].1.iter().filter(|r| r.setting.family() == "ar").collect();
    let specx_prompt_tokens = ar.iter().map(|r| r.prompt_tokens).sum::<usize>();
    let (llama_tg, llama_spec) = match &a.llamacpp {
        Some(bin) => {
            let spec_bin = llamacpp::speculative_binary(bin)?;
            let context = specx_prompt_tokens / ar.len().max(1);
            let (draft, target) = a.pair.paths();
            let threads = rayon::current_num_threads();
            let l =
                llamacpp::run_llama_bench(bin, &[("target", &target)], threads, context.max(1), a.max_new_tokens)?.runs;
            for p in &l {
                eprintln!(
                    "llama.cpp on the target ({}): tg{} after {context} tokens {:.2} ± {:.2} tokens/s",
                    p.path, a.max_new_tokens, p.decode_tokens_per_sec, p.decode_sd
                );
            }
            // The prompts exactly as specx decoded them (chat template applied).
            let cfg = preset(&a, a.weights[0])?;
            let prompts: Vec<String> =
                select_sets(&cfg, Some(a.n))?.into_iter().flat_map(|s| s.prompts.into_iter().map(|p| p.text)).collect();
            let mut spec = Vec::new();
            for &k in &a.k {
                eprintln!(
                    "llama.cpp's speculative decoding, K = {k}, {} prompts ({threads} threads)...",
                    prompts.len()
                );
                spec.push(llamacpp::run_speculative(
                    &spec_bin,
                    &draft,
                    &target,
                    &prompts,
                    k,
                    a.max_new_tokens,
                    threads,
                )?);
            }
            // Against llama.cpp's faster path on this CPU.
            (l.iter().map(|p| p.decode_tokens_per_sec).reduce(f64::max), spec)
        }
        None => (None, Vec::new()),
    };
    let mut table = Vec::new();
    for (mode, rows, _) in &results {
        let ar_time = total_ar(rows);
        for (key, group) in &grouped(rows)[&(a.set.name().to_string(), "greedy".to_string())] {
            let g = GroupStats::of(group);
            let mut row = vec![
                mode.to_string(),
                key.clone(),
                format!("{:.2}", g.sum_generated as f64 / g.sum_time),
                format!("{:.2}x", ar_time / g.sum_time),
                format!("{:.2}", mean_sd(&g.speedup).0),
            ];
            if results.len() > 1 {
                row.push(format!("{:.2}x", first_ar / g.sum_time));
            }
            if let Some(tg) = llama_tg {
                row.push(format!("{:.2}x", g.sum_generated as f64 / g.sum_time / tg));
            }
            row.extend([
                if g.sum_verified > 0 { format!("{:.3}", g.acceptance_sum()) } else { "-".into() },
                format!("{:.2}", g.tokens_per_call_sum()),
                format!("{:.3}", g.discard_rate_sum()),
                format!("{}/{}", g.identical, g.prompts),
            ]);
            table.push(row);
        }
    }
    println!(
        "{} {} prompts, greedy, {} new tokens; tokens/s and the first speedup are ratios of sums over prompts",
        a.n,
        a.set.name(),
        a.max_new_tokens
    );
    if let Some(tg) = llama_tg {
        println!(
            "llama.cpp's llama-bench on the target, same run: tg{} {tg:.2} tokens/s (decode only; specx's tokens/s include the prompt's prefill)",
            a.max_new_tokens
        );
    }
    println!();
    let first_label = format!("speedup vs {} AR", a.weights[0]);
    let mut header = vec!["weights", "method", "tokens/s", "speedup", "speedup (mean over prompts)"];
    if results.len() > 1 {
        header.push(&first_label);
    }
    if llama_tg.is_some() {
        header.push("vs llama.cpp tg");
    }
    header.extend(["acceptance rate", "tokens/target call", "discard rate", "same output as AR"]);
    print!("{}", markdown_table(&header, &table));
    if !llama_spec.is_empty() {
        print_llama_speculative(&llama_spec, a.set.name(), &results[0], llama_tg, specx_prompt_tokens);
    }
    for (mode, _, dir) in &results {
        eprintln!("{mode}: eval run directory {} (results.parquet, summary.md, plots)", dir.display());
    }
    Ok(())
}

/// llama.cpp's speculative decoding beside specx's: its tokens/s per K, against its own tg and
/// against specx's fastest fixed K of the first weight path.
fn print_llama_speculative(
    spec: &[LlamaCppSpeculative],
    set: &str,
    first: &(WeightMode, Vec<specx_eval::common::results::ResultRow>, PathBuf),
    llama_tg: Option<f64>,
    specx_prompt_tokens: usize,
) {
    let (mode, rows, _) = first;
    let best = grouped(rows)[&(set.to_string(), "greedy".to_string())]
        .iter()
        .filter(|(key, _)| !key.starts_with("ar"))
        .map(|(key, group)| {
            let g = GroupStats::of(group);
            (key.clone(), g.sum_generated as f64 / g.sum_time)
        })
        .max_by(|a, b| a.1.total_cmp(&b.1));
    println!();
    println!(
        "llama.cpp's own speculative decoding (llama-speculative-simple, the same pair and prompts; {} prompt tokens by its tokenizer, {specx_prompt_tokens} by specx's):",
        spec[0].prompt_tokens
    );
    println!();
    let mut header = vec!["method", "tokens/s"];
    if llama_tg.is_some() {
        header.push("vs llama.cpp tg");
    }
    let best_label = best.as_ref().map(|(key, _)| format!("specx {mode} {key} / this"));
    if let Some(l) = &best_label {
        header.push(l);
    }
    header.extend(["decode tokens/s (prefill excluded)", "prefill s", "acceptance rate", "generated tokens"]);
    let table: Vec<Vec<String>> = spec
        .iter()
        .map(|s| {
            let mut row = vec![format!("llama.cpp K={}", s.k), format!("{:.2}", s.tokens_per_sec())];
            if let Some(tg) = llama_tg {
                row.push(format!("{:.2}x", s.tokens_per_sec() / tg));
            }
            if let Some((_, tps)) = &best {
                row.push(format!("{:.2}x", tps / s.tokens_per_sec()));
            }
            row.extend([
                format!("{:.2}", s.generated as f64 / (s.seconds - s.prefill_seconds)),
                format!("{:.2}", s.prefill_seconds),
                format!("{:.3}", s.acceptance()),
                s.generated.to_string(),
            ]);
            row
        })
        .collect();
    print!("{}", markdown_table(&header, &table));
    for s in spec.iter().filter_map(|s| s.no_repack.as_ref().map(|why| (s.k, why))) {
        println!("llama.cpp K={} ran without weight repacking (--no-repack): {}", s.0, s.1);
    }
}
