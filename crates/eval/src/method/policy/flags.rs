//! `specx decode`'s stop-policy flags. Each family's file says which it takes and their
//! defaults ([`PolicyFamily::FLAGS`], [`PolicyFamily::from_flags`]); a flag the chosen policy
//! does not take is an error naming the policies that do, never silently dropped.

use super::{PolicyFamily, PolicyKind};
use crate::method::family::unused_flag;
use anyhow::Result;
use clap::Args;
use std::cell::Cell;
use std::path::{Path, PathBuf};

/// One policy flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flag {
    K,
    Head,
    Threshold,
    Min,
    Max,
    Arms,
    ThresholdPlus,
    Calibrated,
    RowCost,
    DraftCost,
}

impl Flag {
    pub const ALL: [Flag; 10] = [
        Flag::K,
        Flag::Head,
        Flag::Threshold,
        Flag::Min,
        Flag::Max,
        Flag::Arms,
        Flag::ThresholdPlus,
        Flag::Calibrated,
        Flag::RowCost,
        Flag::DraftCost,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Flag::K => "--k",
            Flag::Head => "--head",
            Flag::Threshold => "--threshold",
            Flag::Min => "--min",
            Flag::Max => "--max",
            Flag::Arms => "--arms",
            Flag::ThresholdPlus => "--threshold-plus",
            Flag::Calibrated => "--calibrated",
            Flag::RowCost => "--row-cost",
            Flag::DraftCost => "--draft-cost",
        }
    }

    fn bit(self) -> u16 {
        1 << self as u16
    }
}

/// The stop policy's flags as given. Families read them through the accessors, which note
/// what was read: reading a flag a family does not declare is a bug its tests catch.
#[derive(Args, Clone, Debug, Default)]
pub struct PolicyFlags {
    /// Candidates per round of the fixed-K policy (under DSI: draft tokens per verification
    /// task) [default: 4; with --drafter suffix, the tree's own depth bound, --suffix-depth];
    /// the dynamic schedule's initial K [default: 5]; the hybrid's draft-model rounds under
    /// matchrate; the tree-price policy's depth bound [default: 4, or --suffix-depth].
    #[arg(long)]
    k: Option<usize>,
    /// The head policy's acceptance head: a checkpoint directory (specx train), `default`
    /// for the head that ships with specx (checkpoints/specdecpp-default, trained for the
    /// Qwen2.5-Coder 0.5B/1.5B pair), or `random[:SEED]` for an untrained head (pipeline
    /// testing only) [default: default].
    #[arg(long)]
    head: Option<String>,
    /// Stop threshold: the head policy stops when the predicted chance of a rejection exceeds
    /// it [default: 0.7, the paper's best]; the confidence policy stops when the draft's
    /// probability of its token falls below it [default: 0.4, HF's]; see --policy for the
    /// others' meaning and default.
    #[arg(long)]
    threshold: Option<f64>,
    /// Fewest candidates per round of the head and confidence policies [default: 2 for the head
    /// (the SpecDec++ paper's bounds are [2, 20]; its rule never stops after one candidate, so
    /// 1 acts as 2 there), 1 for the confidence policies (HF's)].
    #[arg(long)]
    min: Option<usize>,
    /// Most candidates per round of the head and confidence policies [default: 20]; of the
    /// training-free rules (see --policy for each one's default).
    #[arg(long)]
    max: Option<usize>,
    /// The bandit's arms: the round lengths it chooses from [default: 1,2,3,4].
    #[arg(long, value_delimiter = ',')]
    arms: Vec<usize>,
    /// Threshold-plus's fitted parameters: a JSON file as `specx eval tune` writes them
    /// (OUT/threshold-plus/SET-COSTS.json).
    #[arg(long)]
    threshold_plus: Option<PathBuf>,
    /// The calibrated model's fitted parameters: a JSON file as `specx eval tune` writes them
    /// (OUT/calibrated/SET-COSTS-RULE.json).
    #[arg(long)]
    calibrated: Option<PathBuf>,
    /// The tree-price policy's cost of a verification row, in one-row target calls (a 17-row
    /// call costs 2.8 one-row calls on two cores of a Xeon: 0.11; on a GPU nearly 0) [default:
    /// this machine's figure for the target, device and weights as `specx bench` stored it,
    /// else 0.11].
    #[arg(long)]
    row_cost: Option<f64>,
    /// The tree-price policy's cost of a draft level, in one-row target calls (the tree
    /// drafter's draft call; 0 for the suffix drafter, which runs no model) [default: 0].
    #[arg(long)]
    draft_cost: Option<f64>,
    #[arg(skip)]
    read: Cell<u16>,
}

impl PolicyFlags {
    fn note(&self, flag: Flag) {
        self.read.set(self.read.get() | flag.bit());
    }

    /// These flags with `--k` set to `k` where it was not given.
    pub fn with_default_k(&self, k: usize) -> Self {
        Self { k: self.k.or(Some(k)), ..self.clone() }
    }

    /// These flags with `--row-cost` set to `cost` where it was not given.
    pub fn with_default_row_cost(&self, cost: f64) -> Self {
        Self { row_cost: self.row_cost.or(Some(cost)), ..self.clone() }
    }

    pub fn k(&self) -> Option<usize> {
        self.note(Flag::K);
        self.k
    }
    pub fn head(&self) -> Option<&str> {
        self.note(Flag::Head);
        self.head.as_deref()
    }
    pub fn threshold(&self) -> Option<f64> {
        self.note(Flag::Threshold);
        self.threshold
    }
    pub fn min(&self) -> Option<usize> {
        self.note(Flag::Min);
        self.min
    }
    pub fn max(&self) -> Option<usize> {
        self.note(Flag::Max);
        self.max
    }
    pub fn arms(&self) -> &[usize] {
        self.note(Flag::Arms);
        &self.arms
    }
    pub fn threshold_plus(&self) -> Option<&Path> {
        self.note(Flag::ThresholdPlus);
        self.threshold_plus.as_deref()
    }
    pub fn calibrated(&self) -> Option<&Path> {
        self.note(Flag::Calibrated);
        self.calibrated.as_deref()
    }
    pub fn row_cost(&self) -> Option<f64> {
        self.note(Flag::RowCost);
        self.row_cost
    }
    pub fn draft_cost(&self) -> Option<f64> {
        self.note(Flag::DraftCost);
        self.draft_cost
    }

    fn is_given(&self, flag: Flag) -> bool {
        match flag {
            Flag::K => self.k.is_some(),
            Flag::Head => self.head.is_some(),
            Flag::Threshold => self.threshold.is_some(),
            Flag::Min => self.min.is_some(),
            Flag::Max => self.max.is_some(),
            Flag::Arms => !self.arms.is_empty(),
            Flag::ThresholdPlus => self.threshold_plus.is_some(),
            Flag::Calibrated => self.calibrated.is_some(),
            Flag::RowCost => self.row_cost.is_some(),
            Flag::DraftCost => self.draft_cost.is_some(),
        }
    }

    /// The flags given, in `--help`'s order.
    pub fn given(&self) -> Vec<Flag> {
        Flag::ALL.into_iter().filter(|&f| self.is_given(f)).collect()
    }

    /// Any flag given that a policy taking `takes` does not use is an error.
    pub(super) fn refuse_unused(&self, takes: &[Flag]) -> Result<()> {
        for flag in self.given() {
            if !takes.contains(&flag) {
                return Err(unused_flag(flag.name(), &PolicyKind::names_taking(flag), "policy"));
            }
        }
        Ok(())
    }

    /// `T::from_flags(self)`, checked to read only the flags `T` declares.
    pub(super) fn reading<T: PolicyFamily>(&self) -> Result<T> {
        self.read.set(0);
        let out = T::from_flags(self);
        let undeclared: Vec<&str> = Flag::ALL
            .into_iter()
            .filter(|f| self.read.get() & f.bit() != 0 && !T::FLAGS.contains(f))
            .map(Flag::name)
            .collect();
        assert!(undeclared.is_empty(), "{} reads {undeclared:?} without declaring them in FLAGS", T::NAME);
        out
    }
}
