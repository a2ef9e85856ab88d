//! Greedy decisions where they are computed: a verification whose verifier and stop policy
//! read nothing but the target's greedy token at each row (greedy decoding under an exact
//! verifier) needs those tokens, not the rows. On a GPU the argmax runs on the device and the
//! token ids come back (4 bytes a row instead of a vocabulary row: 0.6 MB for the Qwen pair);
//! on the CPU it is the host argmax of the rows, as before.

use super::{ForwardOutput, Transformer};
use crate::cache::KvCache;
use anyhow::{Result, ensure};
use std::sync::atomic::AtomicBool;

impl ForwardOutput {
    /// The greedy token (`sampling::argmax`, the first on ties) of each of the last `rows`
    /// positions (single sequence): [`ForwardOutput::device_argmax`] on a GPU, the host rows'
    /// argmax on the CPU.
    pub fn best_tokens(&self, rows: usize) -> Vec<u32> {
        self.device_argmax(rows)
            .unwrap_or_else(|| self.logits_tail(rows).iter().map(|r| crate::sampling::argmax(r)).collect())
    }
}

impl Transformer {
    /// The greedy token after each of the last `rows` positions of `tokens`, forwarded after
    /// what `cache` holds: the argmax of each row [`Transformer::forward_scores`] returns,
    /// without reading the rows back from a GPU. `None` if `cancel` was set during the
    /// forward (checked between layers, as [`Transformer::forward_scores`] does).
    pub fn forward_best(
        &self,
        tokens: &[u32],
        cache: &mut KvCache,
        rows: usize,
        cancel: Option<&AtomicBool>,
    ) -> Result<Option<Vec<u32>>> {
        ensure!((1..=tokens.len()).contains(&rows), "the best tokens of {rows} rows of {} tokens", tokens.len());
        let Some(states) = self.hidden_states_until(&[tokens], cache, None, cancel, &self.sequential, 1, None, None)?
        else {
            return Ok(None);
        };
        let [b, n, h] = states.dims();
        let logits = self.logits(states.clone().slice([0..b, n - rows..n, 0..h]));
        Ok(Some(ForwardOutput { logits, hidden: states }.best_tokens(rows)))
    }
}
