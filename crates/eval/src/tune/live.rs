//! Candidates whose drafter is not the draft model's plain chain (prompt lookup, the hybrid,
//! the suffix and tree drafters, EasySpec's fuzzy drafter), tuned and judged like the stop
//! rules: each runs live along every trace's AR output with the draft model the traces were
//! made with, which gives a greedy run's exact counts ([`replay_unit`]). A plain drafter's
//! proposals are the trace's, so its rules replay from the traces instead.
//!
//! A live replay runs draft forwards of its own (a tree drafter's, an hour of both cores for 313
//! traces on a 2-core CPU), so each setting's counts on a split are computed once and reused at
//! every cost model, unless its policy learns from the time its rounds took.

use super::bootstrap::UnitCounts;
use crate::common::costs::Costs;
use crate::common::results::UnitFile;
use crate::experiment::drafter_replay::{check_live, replay_unit};
use crate::experiment::earlier::EarlierOutputs;
use crate::method::policy::Heads;
use crate::method::{DrafterSpec, MethodSpec};
use anyhow::{Context, Result, ensure};
use indicatif::ProgressBar;
use specx_decoder::Transformer;
use std::collections::HashMap;

/// Refuses, before any forward runs, a live candidate that cannot be replayed from the draft
/// model and the traces alone.
pub fn check(m: &MethodSpec, draft: &Transformer, heads: &Heads) -> Result<()> {
    ensure!(
        !matches!(m.drafter, DrafterSpec::Feature(_)),
        "{}: the feature head reads the target's states, which a tune replay does not load; replay it with specx eval replay",
        m.key()
    );
    check_live(m, draft, heads)
}

/// The live candidates' counts on one split of one prompt set, each computed once.
pub struct LiveCounts<'a> {
    draft: &'a Transformer,
    heads: &'a Heads,
    eos: &'a [u32],
    /// The split's traces of this prompt set, in run order.
    units: &'a [&'a UnitFile],
    /// The earlier outputs of the whole run the split comes from.
    earlier: &'a EarlierOutputs<'a>,
    done: HashMap<String, Vec<UnitCounts>>,
    /// Where long replays say how far they are.
    progress: ProgressBar,
}

impl<'a> LiveCounts<'a> {
    pub fn new(
        draft: &'a Transformer,
        heads: &'a Heads,
        eos: &'a [u32],
        units: &'a [&'a UnitFile],
        earlier: &'a EarlierOutputs<'a>,
        progress: ProgressBar,
    ) -> Self {
        Self { draft, heads, eos, units, earlier, done: HashMap::new(), progress }
    }

    /// Each unit's counts under `m`, its rounds priced at `c` for a policy that learns from them.
    pub fn counts(&mut self, m: &MethodSpec, c: &Costs) -> Result<Vec<UnitCounts>> {
        let key = match m.policy.learns_from_time() {
            true => format!("{} @ {}", m.key(), c.name),
            false => m.key(),
        };
        if let Some(done) = self.done.get(&key) {
            return Ok(done.clone());
        }
        let rc = super::replay_costs(c);
        let mut out = Vec::with_capacity(self.units.len());
        for (i, u) in self.units.iter().enumerate() {
            self.progress.set_message(format!("{}: trace {}/{} live", m.key(), i + 1, self.units.len()));
            let (earlier, _) = self.earlier.for_unit(&u.unit)?;
            let metrics = replay_unit(m, self.draft, self.heads, &earlier, u, self.eos, &rc)
                .with_context(|| format!("replaying {} {} under {}", u.unit.dataset, u.unit.prompt_id, m.key()))?;
            out.push(UnitCounts::of(&metrics));
        }
        self.done.insert(key, out.clone());
        Ok(out)
    }
}
