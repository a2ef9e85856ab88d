//! `specx decode`'s method flags: a paper's method as a preset of the three parts, any part
//! overridden by `--drafter`, `--policy`, `--scheduler`, and each part's parameters. A flag
//! the chosen method does not use is an error, never silently dropped.

use super::drafter::{DrafterFlags, DrafterKind, DrafterSpec};
use super::policy::shipped::{Hardware, shipped_policy};
use super::policy::{Flag, PolicyFlags, PolicyKind};
use super::spec::{MethodSpec, SchedulerSpec, Setting};
use anyhow::{Result, ensure};
use clap::{Args, ValueEnum};
use specx_decoder::{DeviceName, DraftTransform, Placement, parse_device_list, parse_placement_list};

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
    /// DSI's target workers (threads, each with its own KV cache) [default: 2, or the number
    /// of --devices].
    #[arg(long)]
    pub servers: Option<usize>,
    /// DSI's target workers on devices, one worker per device (`cpu,wgpu:0`): the target is
    /// loaded on each (the --device copy is reused); a worker written `cuda:0+cuda:1` spans
    /// both, the target's layers split over them. The drafter runs on --device.
    #[arg(long, value_delimiter = ',')]
    pub devices: Vec<String>,
    #[command(flatten)]
    pub policy_flags: PolicyFlags,
    #[command(flatten)]
    pub drafter_flags: DrafterFlags,
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
        let devices = &self.drafter_flags.draft_devices;
        let draft = if devices.is_empty() { Vec::new() } else { parse_device_list(devices)? };
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
            let any = self.servers.is_some()
                || !self.devices.is_empty()
                || !self.drafter_flags.given().is_empty()
                || !self.policy_flags.given().is_empty();
            ensure!(
                !any && !self.draft.given(),
                "--method ar runs the target alone: it takes no drafter, policy, scheduler or draft flag"
            );
            return Ok(Setting::Ar);
        }
        let dsi_flags = self.servers.is_some() || !self.devices.is_empty();
        let given = self.policy_flags.given();
        let drafter = self.drafter.unwrap_or(if self.method == Preset::Easyspec {
            DrafterKind::EasySpec
        } else {
            DrafterKind::Plain
        });
        let policy = self.policy.unwrap_or(match self.method {
            Preset::Specdecpp => PolicyKind::Head,
            Preset::Confidence => PolicyKind::Confidence,
            Preset::Easyspec if given.contains(&Flag::Head) => PolicyKind::Head,
            Preset::Easyspec if given.contains(&Flag::Threshold) => PolicyKind::Confidence,
            _ => PolicyKind::Fixed,
        });
        let scheduler = self.scheduler.unwrap_or(match self.method {
            Preset::Dsi => SchedulerKind::Dsi,
            Preset::Easyspec if dsi_flags => SchedulerKind::Dsi,
            _ => SchedulerKind::Sequential,
        });

        let shipped = self.method == Preset::Adaptive && self.policy.is_none();
        if shipped {
            ensure!(
                given.is_empty(),
                "--method adaptive runs the shipped rule at its shipped setting: {} set a --policy of your own",
                given.iter().map(|f| f.name()).collect::<Vec<_>>().join(", ")
            );
        }

        let drafter = drafter.from_flags(&self.drafter_flags)?;
        // A suffix tree is as deep as its drafter's own bound (--suffix-depth, SuffixDecoding's
        // 24) unless --k caps it: the fixed policy's K = 4 would cut every tree at 4 levels.
        let policy_flags = match &drafter {
            DrafterSpec::Suffix(s) if matches!(policy, PolicyKind::Fixed | PolicyKind::TreePrice) => {
                self.policy_flags.with_default_k(s.max_depth)
            }
            _ => self.policy_flags.clone(),
        };
        let policy = if shipped {
            shipped_policy(if on_cpu { Hardware::Cpu } else { Hardware::Gpu })?
        } else {
            policy.from_flags(&policy_flags)?
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

    /// The suffix drafter's trees keep their own depth bound under the fixed and tree-price
    /// policies unless --k caps it.
    #[test]
    fn suffix_trees_take_their_own_depth_unless_k_is_given() {
        assert!(key("--drafter suffix").unwrap().ends_with("K=24"), "{}", key("--drafter suffix").unwrap());
        assert!(key("--drafter suffix --suffix-depth 10").unwrap().ends_with("K=10"));
        assert!(key("--drafter suffix --k 6").unwrap().ends_with("K=6"));
        assert!(key("--drafter suffix --policy tree-price").unwrap().contains("K=24"));
        assert!(key("--drafter tree").unwrap().ends_with("K=4"), "the draft trees keep K = 4");
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
        let shipped =
            crate::method::policy::shipped::ShippedRule::read(&crate::method::policy::shipped::shipped_rule_file())
                .unwrap();
        let spec = |policy: crate::method::PolicySpec| {
            Setting::Speculative(MethodSpec {
                drafter: crate::method::drafter::Plain {}.into(),
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
