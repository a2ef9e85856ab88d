//! EasySpec's fuzzy forward (Algorithm 2) and its probe (Table 5): the attentions of a layer
//! group all read the group's input, on several threads or devices; placement.rs puts them on
//! devices.

use super::probe::{AttentionProbe, last_row};
use super::{ForwardOutput, PositionTables, SublayerCost, Transformer};
use crate::cache::{KvCache, LayerSlot};
use crate::layer_groups::LayerGroups;
use anyhow::Result;
use burn::tensor::Tensor;

/// A layer's attention as a fuzzy forward computed it and as the precise model would have.
#[derive(Clone, Debug, PartialEq)]
pub struct ProbedLayer {
    pub fuzzy: AttentionProbe,
    pub precise: AttentionProbe,
    /// Whether the layer leads its group (reads the running state: both records identical).
    pub leading: bool,
}

impl Transformer {
    /// EasySpec's fuzzy forward (Algorithm 2): within each group of `groups` every attention
    /// reads the group's input hidden state and writes its own layer of the cache, then the
    /// group's MLPs run in layer order. Groups of one layer compute exactly as
    /// [`Transformer::forward`] (bitwise: the exact strategy is the same code path). The cache
    /// records which layers' new entries are exact ([`KvCache::precise_len`]).
    pub fn forward_fuzzy(
        &self,
        tokens: &[u32],
        cache: &mut KvCache,
        groups: &LayerGroups,
        workers: usize,
    ) -> Result<ForwardOutput> {
        let hidden = self
            .hidden_states_until(&[tokens], cache, None, None, groups, workers, None, None)?
            .expect("no cancel flag, never cancelled");
        let logits = self.logits(hidden.clone());
        Ok(ForwardOutput { logits, hidden })
    }

    /// [`Transformer::forward_fuzzy`] that also records every layer's attention on the last row
    /// twice (EasySpec's Table 5): as the fuzzy forward computed it from the group's input, and
    /// as the precise model would have from the running hidden state at that layer (the state
    /// after the layers before it, against the same cache). A group's leading layer reads the
    /// running state, so its two records are identical by construction. The output and the
    /// cache are the fuzzy forward's.
    pub fn probe_fuzzy(
        &self,
        tokens: &[u32],
        cache: &mut KvCache,
        groups: &LayerGroups,
    ) -> Result<(ForwardOutput, Vec<ProbedLayer>)> {
        let mut probes = Vec::with_capacity(self.blocks.len());
        let hidden = self
            .hidden_states_until(&[tokens], cache, None, None, groups, 1, Some(&mut probes), None)?
            .expect("no cancel flag, never cancelled");
        let logits = self.logits(hidden.clone());
        Ok((ForwardOutput { logits, hidden }, probes))
    }

    /// Layer `i`'s attention of the hidden state `x` against a copy of `cache` (the cache keeps
    /// what the fuzzy forward wrote), recorded.
    pub(super) fn precise_attention(
        &self,
        i: usize,
        x: &Tensor<3>,
        cache: &KvCache,
        tables: &[PositionTables],
    ) -> AttentionProbe {
        let mut scratch = cache.clone();
        let mut p = AttentionProbe { input: last_row(x.clone()), ..Default::default() };
        self.attention(i, x.clone(), &mut scratch.slot(i), tables, Some(&mut p), false);
        p
    }

    /// The attentions of the layers `group`, all reading `input`, each writing its own layer of
    /// the cache. On one device they run on up to `workers` threads (contiguous shares of the
    /// group); on a model whose attentions are placed on several devices, one thread per device
    /// (`workers` is then not used). The caller's thread runs the first share. Each attention
    /// is the same computation on whichever thread runs it, so the results never depend on
    /// `workers`. Returns each output, in layer order, with its time and, with `probe`, its
    /// record; with `sync`, each time waits for the device to finish the attention (a GPU
    /// queues work, so a time without it is the launch's).
    #[allow(clippy::too_many_arguments)] // one group's whole context, called from one place
    pub(super) fn attend_group(
        &self,
        group: std::ops::Range<usize>,
        input: &Tensor<3>,
        cache: &mut KvCache,
        tables: &[PositionTables],
        workers: usize,
        probe: bool,
        sync: bool,
        residual: bool,
    ) -> Vec<(Tensor<3>, SublayerCost, Option<AttentionProbe>)> {
        type Attended = (usize, (Tensor<3>, SublayerCost, Option<AttentionProbe>));
        let attend = |(i, mut slot): (usize, LayerSlot)| -> Attended {
            let t = std::time::Instant::now();
            let start = crate::device::launches::issued();
            let mut record = probe.then(|| AttentionProbe { input: last_row(input.clone()), ..Default::default() });
            let out = self.attention(i, input.clone(), &mut slot, tables, record.as_mut(), residual);
            let launches = super::launched_since(start);
            if sync {
                super::wait_for(&out);
            }
            (i, (out, SublayerCost { time: t.elapsed(), launches }, record))
        };
        let mut jobs: Vec<(usize, LayerSlot)> = group.clone().zip(cache.slots(group)).collect();
        let mut shares: Vec<Vec<(usize, LayerSlot)>> = Vec::new();
        if self.devices.len() > 1 {
            for job in jobs {
                match shares.iter_mut().find(|s| self.blocks[s[0].0].device == self.blocks[job.0].device) {
                    Some(share) => share.push(job),
                    None => shares.push(vec![job]),
                }
            }
        } else {
            let threads = workers.clamp(1, jobs.len().max(1));
            let share = jobs.len().div_ceil(threads);
            while !jobs.is_empty() {
                let rest = jobs.split_off(share.min(jobs.len()));
                shares.push(std::mem::replace(&mut jobs, rest));
            }
        }
        let mut out: Vec<Attended> = if shares.len() == 1 {
            shares.pop().expect("one share").into_iter().map(attend).collect()
        } else {
            let mut shares = shares.into_iter();
            let first = shares.next().expect("a group has layers");
            std::thread::scope(|scope| {
                let attend = &attend;
                let others: Vec<_> = shares
                    .map(|share| scope.spawn(move || share.into_iter().map(attend).collect::<Vec<_>>()))
                    .collect();
                let mut out: Vec<_> = first.into_iter().map(attend).collect();
                for worker in others {
                    out.extend(worker.join().expect("an attention worker panicked"));
                }
                out
            })
        };
        out.sort_by_key(|(i, _)| *i);
        out.into_iter().map(|(_, r)| r).collect()
    }
}
