//! `specx decode`'s method flags: a paper's method as a preset of the three parts, any part
//! overridden by `--drafter`, `--policy`, `--scheduler`, and each part's parameters. A flag
//! the chosen method does not use is an error, never silently dropped.

use super::models::DEFAULT_HEAD;
use super::spec::{DrafterSpec, MethodSpec, PAPER_BOUNDS, PolicySpec, SchedulerSpec, Setting};
use anyhow::{Context, Result, ensure};
use clap::{Args, ValueEnum};
use specx_decoder::speculative::{Calibration, Compat};
use specx_decoder::{DeviceName, DraftTransform, Placement, parse_device_list, parse_placement_list};
use std::path::PathBuf;

/// The papers' methods, each a default drafter x policy x scheduler.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Preset {
    /// Autoregressive decoding with the target alone (the reference).
    Ar,
    /// SpecDec: plain drafter, fixed K, sequential.
    Specdec,
    /// SpecDec++: plain drafter, the acceptance head's stop rule (--head, default the head that
    /// ships), sequential.
    Specdecpp,
    /// Plain drafter, stop when the draft's confidence in its token falls below --threshold
    /// (HF transformers' confidence criterion, its defaults 0.4 and [1, 20]).
    Confidence,
    /// DSI: plain drafter, fixed blocks of --k drafts, DSI's scheduler with --servers workers.
    Dsi,
    /// The stop rule that ships (checkpoints/adaptive/rule.json): the best rule when every
    /// rule's setting is chosen on tuning prompts and judged on others, at the setting chosen
    /// at CPU prices with --device cpu and at GPU prices otherwise; plain drafter, sequential.
    Adaptive,
    /// EasySpec: the layer-parallel drafter with bonus calibration, under the head's rule with
    /// --head, the confidence rule with --threshold alone, fixed K otherwise; DSI's scheduler
    /// with --servers or --devices, sequential otherwise.
    Easyspec,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DrafterKind {
    /// The draft model decoding autoregressively.
    Plain,
    /// EasySpec's layer-parallel ("fuzzy") draft.
    Easyspec,
    /// Prompt lookup: copies the continuation of an earlier occurrence of the text's last n
    /// tokens (--ngram-min, --ngram-max); no draft model runs. Policies: fixed, dynamic, bandit,
    /// matchrate.
    Lookup,
    /// Prompt lookup when the text's last n tokens occurred before, else the draft model.
    Hybrid,
    /// An EAGLE-style feature head on the target's hidden states (--feature-head); no draft
    /// model runs.
    Feature,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PolicyKind {
    /// Always --k candidates.
    Fixed,
    /// SpecDec++'s acceptance head (--head, --threshold, --min, --max).
    Head,
    /// SpecDec++'s rule on the newest head prediction alone (--head, --threshold, --min, --max).
    HeadToken,
    /// HF's confidence criterion (--threshold [0.4], --min [1], --max [20]): the low-confidence
    /// token is kept.
    Confidence,
    /// SpecDec++'s product rule on the draft's confidence (--threshold [0.5], --min [1], --max
    /// [20]): stop when the chance that some candidate so far is rejected passes the threshold.
    ConfidenceProduct,
    /// HF's confidence criterion with its online ROC threshold (--threshold: the initial one
    /// [0.4], --max [20]).
    Roc,
    /// llama.cpp's p_min (--threshold: p_min [0.75], --max: n_max [16]): the low-confidence
    /// token is dropped.
    Pmin,
    /// HF's dynamic schedule (--k: the initial K [5], --max: its cap [64]).
    Dynamic,
    /// SVIP's entropy rule (--threshold [0.3], --max [40]).
    Svip,
    /// AdaEDL's entropy bound (--threshold: the initial lambda [0.7], --max [16]).
    Adaedl,
    /// A UCB bandit over K (--arms [1,2,3,4]).
    Bandit,
    /// Threshold-plus: the confidence threshold moved by depth and this request's recent
    /// acceptance, with the fitted parameters of --threshold-plus FILE (`specx eval tune`).
    ThresholdPlus,
    /// A calibrated acceptance model (logistic regression on the draft's statistics and depth)
    /// under the per-token or the product rule, with the fitted parameters of --calibrated
    /// FILE (`specx eval tune`).
    Calibrated,
    /// For prompt lookup: draft while the estimated chance that every candidate so far is
    /// accepted (a match: this request's acceptance of its n-gram size; a draft model's
    /// token: its confidence) is at least --threshold [0.3]; --max [16]; with the hybrid
    /// drafter, --k makes its draft-model rounds draft K.
    Matchrate,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SchedulerKind {
    /// Draft, verify, commit, repeat.
    Sequential,
    /// DSI's speculation parallelism (--servers, --devices).
    Dsi,
}

/// The method of one decode.
#[derive(Args, Clone, Debug)]
pub struct MethodArgs {
    /// A paper's method: a preset drafter x stop policy x scheduler (see --drafter, --policy,
    /// --scheduler to change one part).
    #[arg(long, value_enum, default_value = "specdec")]
    pub method: Preset,
    /// The drafter, instead of the preset's.
    #[arg(long, value_enum)]
    pub drafter: Option<DrafterKind>,
    /// The stop policy, instead of the preset's.
    #[arg(long, value_enum)]
    pub policy: Option<PolicyKind>,
    /// The scheduler, instead of the preset's.
    #[arg(long, value_enum)]
    pub scheduler: Option<SchedulerKind>,
    /// Candidates per round of the fixed-K policy (under DSI: draft tokens per verification
    /// task) [default: 4].
    #[arg(long)]
    pub k: Option<usize>,
    /// DSI's target workers (threads, each with its own KV cache) [default: 2, or the number
    /// of --devices].
    #[arg(long)]
    pub servers: Option<usize>,
    /// DSI's target workers on devices, one worker per device (`cpu,wgpu:0`): the target is
    /// loaded on each (the --device copy is reused); a worker written `cuda:0+cuda:1` spans
    /// both, the target's layers split over them. The drafter runs on --device.
    #[arg(long, value_delimiter = ',')]
    pub devices: Vec<String>,
    /// EasySpec's attention layers on devices (`cpu,wgpu:0`): the draft's layer i keeps its
    /// attention and cache on the (i mod N)-th device, so each layer group's attentions run on
    /// different devices at once, one thread per device (--workers is then not used). The
    /// draft's embeddings, MLPs and head stay on --device.
    #[arg(long, value_delimiter = ',')]
    pub draft_devices: Vec<String>,
    /// The head policy's acceptance head: a checkpoint directory (specx train), `default`
    /// for the head that ships with specx (checkpoints/specdecpp-default, trained for the
    /// Qwen2.5-Coder 0.5B/1.5B pair), or `random[:SEED]` for an untrained head (pipeline
    /// testing only) [default: default].
    #[arg(long)]
    pub head: Option<String>,
    /// Stop threshold: the head policy stops when the predicted chance of a rejection exceeds
    /// it [default: 0.7, the paper's best]; the confidence policy stops when the draft's
    /// probability of its token falls below it [default: 0.4, HF's].
    #[arg(long)]
    pub threshold: Option<f64>,
    /// Fewest candidates per round of the head and confidence policies [default: 2 for the head
    /// (the SpecDec++ paper's bounds are [2, 20]; its rule never stops after one candidate, so
    /// 1 acts as 2 there), 1 for the confidence policy (HF's)].
    #[arg(long)]
    pub min: Option<usize>,
    /// Most candidates per round of the head and confidence policies [default: 20]; of the
    /// training-free rules (see --policy for each one's default).
    #[arg(long)]
    pub max: Option<usize>,
    /// The bandit's arms: the round lengths it chooses from [default: 1,2,3,4].
    #[arg(long, value_delimiter = ',')]
    pub arms: Vec<usize>,
    /// Threshold-plus's fitted parameters: a JSON file as `specx eval tune` writes them
    /// (OUT/threshold-plus/SET-COSTS.json).
    #[arg(long)]
    pub threshold_plus: Option<PathBuf>,
    /// The calibrated model's fitted parameters: a JSON file as `specx eval tune` writes them
    /// (OUT/calibrated/SET-COSTS-RULE.json).
    #[arg(long)]
    pub calibrated: Option<PathBuf>,
    /// EasySpec's layer-parallel strategy: a preset `lp1`..`lp5` (the paper's Table 6) or the
    /// paper's notation, e.g. `0,1-3,4-7,8-11,12-15,16-19,20-22,23` [default: lp4].
    #[arg(long)]
    pub strategy: Option<String>,
    /// When EasySpec recomputes the draft cache entries its fuzzy forwards wrote: `never`,
    /// `prefill_only`, `every_round` (the paper's description) or `every_mismatch` (the
    /// reference code's default) [default: every_round].
    #[arg(long)]
    pub calibration: Option<Calibration>,
    /// Threads running each of EasySpec's layer groups' attentions (timing only: the tokens
    /// never depend on it) [default: 1].
    #[arg(long)]
    pub workers: Option<usize>,
    /// `reference` picks EasySpec's candidates as the reference code does (the argmax of q,
    /// tested with min(1, p/q)): NOT lossless at temperature > 0, for demonstrating that only
    /// [default: lossless].
    #[arg(long)]
    pub compat: Option<Compat>,
    /// Prompt lookup's (and the hybrid drafter's) shortest n-gram to match [default: 1].
    #[arg(long)]
    pub ngram_min: Option<usize>,
    /// Prompt lookup's longest n-gram to match, tried first [default: 3].
    #[arg(long)]
    pub ngram_max: Option<usize>,
    /// The feature drafter's head: a directory written by `specx train-feature-head`, or
    /// `default` for checkpoints/feature-head of this source tree [default: default].
    #[arg(long)]
    pub feature_head: Option<String>,
    #[command(flatten)]
    pub draft: DraftArgs,
}

/// A cheaper draft (any drafter, policy and scheduler; lossless either way).
#[derive(Args, Clone, Debug, Default)]
pub struct DraftArgs {
    /// FR-Spec: the draft's output head restricted to the N most frequent tokens of the
    /// frequency table (special tokens always in); q is the softmax over them [default: the
    /// whole vocabulary].
    #[arg(long, value_name = "N")]
    pub draft_vocab: Option<usize>,
    /// The token frequency table of --draft-vocab (`specx token-freq` writes one) [default:
    /// datasets/token-frequencies/ of this source tree].
    #[arg(long, value_name = "PATH")]
    pub draft_vocab_table: Option<std::path::PathBuf>,
    /// Requantize the draft's layer matrices and head to this block type after loading:
    /// q4_0, q5_0 or q8_0 (matrices already as cheap are kept) [default: as stored].
    #[arg(long, value_name = "TYPE")]
    pub draft_weights: Option<String>,
}

impl DraftArgs {
    pub fn given(&self) -> bool {
        self.draft_vocab.is_some() || self.draft_vocab_table.is_some() || self.draft_weights.is_some()
    }

    /// The transform these flags describe (checked: the table exists and fits N).
    pub fn transform(&self) -> Result<DraftTransform> {
        ensure!(
            self.draft_vocab_table.is_none() || self.draft_vocab.is_some(),
            "--draft-vocab-table needs --draft-vocab N"
        );
        let weights = self.draft_weights.as_deref().map(str::parse).transpose()?;
        let t = DraftTransform { vocab: self.draft_vocab, vocab_table: self.draft_vocab_table.clone(), weights };
        t.check()?;
        Ok(t)
    }
}

impl MethodArgs {
    /// DSI's worker placements and EasySpec's attention devices, parsed.
    pub fn device_lists(&self) -> Result<(Vec<Placement>, Vec<DeviceName>)> {
        let workers = if self.devices.is_empty() { Vec::new() } else { parse_placement_list(&self.devices)? };
        let draft = if self.draft_devices.is_empty() { Vec::new() } else { parse_device_list(&self.draft_devices)? };
        Ok((workers, draft))
    }

    /// The method these flags describe, checked: every flag given is used by it.
    /// `on_cpu`: the decode runs on the CPU (the shipped adaptive rule has a setting for CPU
    /// prices and one for GPU prices).
    pub fn setting(&self, on_cpu: bool) -> Result<Setting> {
        let unused = |given: bool, flag: &str, needs: &str| -> Result<()> {
            ensure!(!given, "{flag} is not used by this method: it needs {needs}");
            Ok(())
        };
        if self.method == Preset::Ar && self.drafter.is_none() && self.policy.is_none() && self.scheduler.is_none() {
            let any = self.k.is_some()
                || self.servers.is_some()
                || !self.devices.is_empty()
                || !self.draft_devices.is_empty()
                || self.head.is_some()
                || self.threshold.is_some();
            let more = self.min.is_some()
                || self.max.is_some()
                || self.strategy.is_some()
                || self.calibration.is_some()
                || self.workers.is_some()
                || self.compat.is_some()
                || !self.arms.is_empty();
            let more = more
                || self.ngram_min.is_some()
                || self.ngram_max.is_some()
                || self.threshold_plus.is_some()
                || self.calibrated.is_some();
            ensure!(
                !any && !more && !self.draft.given(),
                "--method ar runs the target alone: it takes no drafter, policy, scheduler or draft flag"
            );
            return Ok(Setting::Ar);
        }
        let dsi_flags = self.servers.is_some() || !self.devices.is_empty();
        let drafter = self.drafter.unwrap_or(if self.method == Preset::Easyspec {
            DrafterKind::Easyspec
        } else {
            DrafterKind::Plain
        });
        let policy = self.policy.unwrap_or(match self.method {
            Preset::Specdecpp => PolicyKind::Head,
            Preset::Confidence => PolicyKind::Confidence,
            Preset::Easyspec if self.head.is_some() => PolicyKind::Head,
            Preset::Easyspec if self.threshold.is_some() => PolicyKind::Confidence,
            _ => PolicyKind::Fixed,
        });
        let scheduler = self.scheduler.unwrap_or(match self.method {
            Preset::Dsi => SchedulerKind::Dsi,
            Preset::Easyspec if dsi_flags => SchedulerKind::Dsi,
            _ => SchedulerKind::Sequential,
        });

        let shipped = self.method == Preset::Adaptive && self.policy.is_none();
        if shipped {
            let given = self.k.is_some()
                || self.threshold.is_some()
                || self.min.is_some()
                || self.max.is_some()
                || self.head.is_some();
            ensure!(
                !given,
                "--method adaptive runs the shipped rule at its shipped setting: --k, --threshold, --min, --max and --head set a --policy of your own"
            );
        }

        let fuzzy_flags = [
            ("--strategy", self.strategy.is_some()),
            ("--calibration", self.calibration.is_some()),
            ("--workers", self.workers.is_some()),
            ("--compat", self.compat.is_some()),
            ("--draft-devices", !self.draft_devices.is_empty()),
        ];
        if !matches!(drafter, DrafterKind::Lookup | DrafterKind::Hybrid) {
            unused(
                self.ngram_min.is_some() || self.ngram_max.is_some(),
                "--ngram-min/--ngram-max",
                "the lookup or hybrid drafter (--drafter lookup|hybrid)",
            )?;
        }
        let (ngram_min, ngram_max) = (self.ngram_min.unwrap_or(1), self.ngram_max.unwrap_or(3));
        if drafter != DrafterKind::Feature {
            unused(self.feature_head.is_some(), "--feature-head", "the feature drafter (--drafter feature)")?;
        }
        let drafter = match drafter {
            DrafterKind::Feature => {
                for (flag, given) in fuzzy_flags {
                    unused(given, flag, "the easyspec drafter (--drafter easyspec or --method easyspec)")?;
                }
                DrafterSpec::Feature {
                    head: self.feature_head.clone().unwrap_or_else(|| crate::method::models::DEFAULT_HEAD.into()),
                }
            }
            DrafterKind::Plain | DrafterKind::Lookup | DrafterKind::Hybrid => {
                for (flag, given) in fuzzy_flags {
                    unused(given, flag, "the easyspec drafter (--drafter easyspec or --method easyspec)")?;
                }
                match drafter {
                    DrafterKind::Lookup => DrafterSpec::Lookup { ngram_min, ngram_max },
                    DrafterKind::Hybrid => DrafterSpec::Hybrid { ngram_min, ngram_max },
                    _ => DrafterSpec::Plain,
                }
            }
            DrafterKind::Easyspec => DrafterSpec::EasySpec {
                strategy: self.strategy.clone().unwrap_or_else(|| "lp4".into()),
                calibration: self.calibration.unwrap_or(Calibration::EveryRound),
                workers: self.workers.unwrap_or(1),
                compat: self.compat.unwrap_or_default(),
            },
        };
        let [lo, hi] = PAPER_BOUNDS;
        let (min, max) = (self.min.unwrap_or(lo), self.max.unwrap_or(hi));
        let threshold = |default: f64| self.threshold.unwrap_or(default);
        let max_or = |default: usize| self.max.unwrap_or(default);
        unused(!self.arms.is_empty() && policy != PolicyKind::Bandit, "--arms", "the bandit policy")?;
        unused(
            self.threshold_plus.is_some() && policy != PolicyKind::ThresholdPlus,
            "--threshold-plus",
            "the threshold-plus policy",
        )?;
        unused(self.calibrated.is_some() && policy != PolicyKind::Calibrated, "--calibrated", "the calibrated policy")?;
        if !matches!(
            policy,
            PolicyKind::Head | PolicyKind::HeadToken | PolicyKind::Confidence | PolicyKind::ConfidenceProduct
        ) {
            unused(self.head.is_some(), "--head", "the head policy")?;
            unused(self.min.is_some(), "--min", "the head or confidence policy")?;
        }
        if !matches!(policy, PolicyKind::Fixed | PolicyKind::Dynamic | PolicyKind::Matchrate) {
            unused(self.k.is_some(), "--k", "the fixed-K, dynamic or matchrate policy")?;
        }
        let policy = if shipped {
            super::adaptive::shipped_policy(if on_cpu {
                super::adaptive::Hardware::Cpu
            } else {
                super::adaptive::Hardware::Gpu
            })?
        } else {
            match policy {
                PolicyKind::Fixed => {
                    unused(self.threshold.is_some(), "--threshold", "a policy with a threshold")?;
                    unused(self.max.is_some(), "--max", "a policy with a bound")?;
                    PolicySpec::Fixed { k: self.k.unwrap_or(4) }
                }
                PolicyKind::Head | PolicyKind::HeadToken => {
                    unused(self.k.is_some(), "--k", "the fixed-K policy")?;
                    let head = self.head.clone().unwrap_or_else(|| DEFAULT_HEAD.to_string());
                    if policy == PolicyKind::Head {
                        PolicySpec::Head { head, threshold: threshold(0.7), min, max }
                    } else {
                        PolicySpec::HeadToken { head, threshold: threshold(0.7), min, max }
                    }
                }
                PolicyKind::ConfidenceProduct => {
                    unused(self.k.is_some(), "--k", "the fixed-K policy")?;
                    unused(self.head.is_some(), "--head", "the head policy")?;
                    PolicySpec::ConfidenceProduct { threshold: threshold(0.5), min: self.min.unwrap_or(1), max }
                }
                PolicyKind::Confidence => {
                    unused(self.k.is_some(), "--k", "the fixed-K policy")?;
                    unused(self.head.is_some(), "--head", "the head policy")?;
                    // HF transformers' defaults: assistant_confidence_threshold 0.4, 1..20 tokens.
                    PolicySpec::Confidence { threshold: threshold(0.4), min: self.min.unwrap_or(1), max }
                }
                PolicyKind::Roc => PolicySpec::Roc { threshold: threshold(0.4), max: max_or(20) },
                PolicyKind::Pmin => PolicySpec::PMin { p_min: threshold(0.75), n_max: max_or(16) },
                PolicyKind::Dynamic => {
                    unused(self.threshold.is_some(), "--threshold", "a policy with a threshold")?;
                    PolicySpec::Dynamic { initial: self.k.unwrap_or(5), cap: max_or(64) }
                }
                PolicyKind::Svip => PolicySpec::Svip { threshold: threshold(0.3), max: max_or(40) },
                PolicyKind::Adaedl => PolicySpec::AdaEdl { lambda: threshold(0.7), gamma: 0.2, max: max_or(16) },
                PolicyKind::Matchrate => {
                    PolicySpec::MatchRate { threshold: threshold(0.3), max: max_or(16), model_k: self.k }
                }
                PolicyKind::ThresholdPlus => {
                    unused(
                        self.threshold.is_some() || self.max.is_some(),
                        "--threshold/--max",
                        "a policy without fitted parameters (threshold-plus's are in its file)",
                    )?;
                    let file = self
                        .threshold_plus
                        .as_deref()
                        .context("--policy threshold-plus needs --threshold-plus FILE (fitted by specx eval tune)")?;
                    PolicySpec::fitted_threshold_plus(file)?
                }
                PolicyKind::Calibrated => {
                    unused(
                        self.threshold.is_some() || self.max.is_some(),
                        "--threshold/--max",
                        "a policy without fitted parameters (the calibrated model's are in its file)",
                    )?;
                    let file = self
                        .calibrated
                        .as_deref()
                        .context("--policy calibrated needs --calibrated FILE (fitted by specx eval tune)")?;
                    PolicySpec::fitted_calibrated(file)?
                }
                PolicyKind::Bandit => {
                    unused(self.threshold.is_some(), "--threshold", "a policy with a threshold")?;
                    unused(self.max.is_some(), "--max", "a policy with a bound")?;
                    PolicySpec::Bandit { arms: if self.arms.is_empty() { vec![1, 2, 3, 4] } else { self.arms.clone() } }
                }
            }
        };
        let scheduler = match scheduler {
            SchedulerKind::Sequential => {
                unused(dsi_flags, "--servers/--devices", "DSI's scheduler (--scheduler dsi or --method dsi)")?;
                SchedulerSpec::Sequential
            }
            SchedulerKind::Dsi => {
                let n = self.devices.len();
                ensure!(
                    n == 0 || self.servers.is_none_or(|s| s == n),
                    "--servers {} and --devices with {n} devices disagree (one worker per device)",
                    self.servers.unwrap_or(0)
                );
                SchedulerSpec::Dsi { servers: if n > 0 { n } else { self.servers.unwrap_or(2) } }
            }
        };
        let setting = Setting::Speculative(MethodSpec { drafter, draft: self.draft.transform()?, policy, scheduler });
        setting.check_runnable()?;
        Ok(setting)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        m: MethodArgs,
    }

    fn key(args: &str) -> Result<String> {
        let cli = Cli::try_parse_from(std::iter::once("x").chain(args.split_whitespace()))?;
        Ok(cli.m.setting(true)?.key())
    }

    #[test]
    fn presets_give_the_papers_methods_and_flags_override_a_part() {
        assert_eq!(key("").unwrap(), "specdec K=4");
        assert_eq!(key("--method ar").unwrap(), "ar");
        assert_eq!(key("--method dsi --k 5").unwrap(), "dsi SP=2 k=5");
        assert_eq!(key("--method specdecpp --head random:3").unwrap(), "specdecpp random:3 h=0.7 [2,20]");
        assert_eq!(key("--method specdecpp").unwrap(), "specdecpp default h=0.7 [2,20]");
        assert_eq!(key("--method confidence --threshold 0.4 --max 8").unwrap(), "confidence 0.4 [1,8]");
        assert_eq!(key("--method easyspec --calibration never").unwrap(), "easyspec lp4 never | specdec K=4");
        // EasySpec with a head and servers keeps the head (it used to be dropped silently).
        assert_eq!(
            key("--method easyspec --head h --servers 3").unwrap(),
            "easyspec lp4 every_round | dsi SP=3 specdecpp h h=0.7 [2,20]"
        );
        assert_eq!(key("--method dsi --devices cpu,wgpu:0").unwrap(), "dsi SP=2 k=4");
        assert_eq!(key("--method specdecpp --head h --scheduler dsi").unwrap(), "dsi SP=2 specdecpp h h=0.7 [2,20]");
        assert_eq!(
            key("--policy confidence --drafter easyspec --strategy lp2").unwrap(),
            "easyspec lp2 every_round | confidence 0.4 [1,20]"
        );
        // The training-free rules with their published defaults, and with flags.
        assert_eq!(key("--policy roc").unwrap(), "roc 0.4 [1,20]");
        assert_eq!(key("--policy pmin").unwrap(), "pmin 0.75 n_max=16");
        assert_eq!(key("--policy pmin --threshold 0 --max 3").unwrap(), "pmin 0 n_max=3");
        assert_eq!(key("--policy dynamic").unwrap(), "dynamic K0=5 cap=64");
        assert_eq!(key("--policy svip --threshold 0.4").unwrap(), "svip 0.4 [1,40]");
        assert_eq!(key("--policy adaedl").unwrap(), "adaedl lambda=0.7 gamma=0.2 [1,16]");
        assert_eq!(key("--policy bandit --arms 2,4,6").unwrap(), "bandit K=2,4,6");
        // The shipped rule: its CPU setting on the CPU, its GPU setting elsewhere; its setting
        // is not changed by flags, while a drafter or scheduler still can be.
        let shipped = super::super::adaptive::ShippedRule::read(&super::super::adaptive::shipped_rule_file()).unwrap();
        let spec = |policy: PolicySpec| {
            Setting::Speculative(MethodSpec {
                drafter: DrafterSpec::Plain,
                draft: Default::default(),
                policy,
                scheduler: SchedulerSpec::Sequential,
            })
            .key()
        };
        assert_eq!(key("--method adaptive").unwrap(), spec(shipped.cpu.clone()));
        let on_gpu = Cli::try_parse_from(["x", "--method", "adaptive"]).unwrap().m.setting(false).unwrap().key();
        assert_eq!(on_gpu, spec(shipped.gpu.clone()));
        assert!(key("--method adaptive --threshold 0.3").unwrap_err().to_string().contains("shipped setting"));
        assert!(key("--method adaptive --scheduler dsi").unwrap().starts_with("dsi SP=2"));
        // Prompt lookup under the policies that apply to it.
        assert_eq!(key("--drafter lookup --k 8").unwrap(), "lookup n=1..3 | specdec K=8");
        assert_eq!(
            key("--drafter lookup --ngram-min 2 --ngram-max 4 --policy dynamic").unwrap(),
            "lookup n=2..4 | dynamic K0=5 cap=64"
        );
        assert_eq!(key("--drafter lookup --method dsi").unwrap(), "lookup n=1..3 | dsi SP=2 k=4");
        assert_eq!(
            key("--drafter hybrid --policy matchrate --threshold 0.2").unwrap(),
            "lookup+draft n=1..3 | matchrate 0.2 [1,16]"
        );
        assert_eq!(
            key("--drafter hybrid --policy matchrate --threshold 0.2 --k 4").unwrap(),
            "lookup+draft n=1..3 | matchrate 0.2 [1,16] model K=4"
        );
        assert_eq!(
            key("--drafter hybrid --ngram-min 2 --draft-weights q4_0").unwrap(),
            "lookup+draft n=2..3 | specdec K=4 [draft q4_0]"
        );
    }

    #[test]
    fn a_flag_the_method_does_not_use_is_an_error() {
        let e = |args: &str| format!("{:#}", key(args).unwrap_err());
        assert!(e("--method specdec --head h").contains("--head is not used"), "{}", e("--method specdec --head h"));
        assert!(e("--method specdec --servers 2").contains("needs DSI's scheduler"));
        assert!(e("--method dsi --strategy lp2").contains("needs the easyspec drafter"));
        assert!(e("--method specdecpp --head h --k 3").contains("--k is not used"));
        assert!(e("--method ar --k 3").contains("runs the target alone"));
        assert!(e("--method easyspec --devices cpu --servers 2").contains("disagree"));
        assert!(e("--k 0").contains("k >= 1"));
        assert!(e("--policy svip --k 3").contains("--k is not used"));
        assert!(e("--policy roc --min 2").contains("--min is not used"));
        assert!(e("--arms 1,2").contains("--arms is not used"));
        assert!(e("--policy bandit --max 4").contains("--max is not used"));
        assert!(e("--ngram-max 4").contains("needs the lookup or hybrid drafter"));
        assert!(e("--drafter lookup --method confidence").contains("use fixed, dynamic, bandit or matchrate"));
        assert!(e("--drafter lookup --draft-weights q4_0").contains("runs no draft model"));
        assert!(e("--drafter lookup --policy matchrate --k 4").contains("only the hybrid drafter has"));
        // The feature head: named in the key; no draft-model policies, no cheaper draft.
        assert_eq!(key("--drafter feature --k 4").unwrap(), "feature default | specdec K=4");
        assert_eq!(
            key("--drafter feature --feature-head runs/fh --method confidence --threshold 0.3").unwrap(),
            "feature fh | confidence 0.3 [1,20]"
        );
        assert_eq!(key("--drafter feature --method dsi").unwrap(), "feature default | dsi SP=2 k=4");
        assert!(e("--feature-head x").contains("needs the feature drafter"));
        assert!(e("--drafter feature --method specdecpp").contains("does not have"));
        assert!(e("--drafter feature --draft-weights q4_0").contains("runs no draft model"));
        // A cheaper draft: named in the key; bad sizes and types refused before any model loads.
        assert_eq!(key("--draft-vocab 32768 --draft-weights q4_0").unwrap(), "specdec K=4 [draft v32768+q4_0]");
        assert_eq!(key("--method confidence --draft-weights q5_0").unwrap(), "confidence 0.4 [1,20] [draft q5_0]");
        assert!(e("--method ar --draft-vocab 100").contains("no drafter, policy, scheduler or draft flag"));
        assert!(e("--draft-weights q3_k").contains("unknown draft weight type 'q3_k'"));
        assert!(e("--draft-vocab 0").contains("need 1..="), "{}", e("--draft-vocab 0"));
        assert!(e("--draft-vocab 999999").contains("the tokenizer's vocabulary"));
        assert!(e("--draft-vocab-table t.tsv").contains("needs --draft-vocab"));
        assert!(e("--draft-vocab 100 --draft-vocab-table no-such.tsv").contains("no-such.tsv"));
        // Labels parse back to the transform they name.
        for label in ["full", "v32768", "q4_0", "v16384+q4_0"] {
            assert_eq!(label.parse::<DraftTransform>().unwrap().label(), label);
        }
    }
}
