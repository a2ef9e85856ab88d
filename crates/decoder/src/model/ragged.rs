//! The ragged forward of batched generation and datagen: several sequences, each with its own
//! cache and length, through one pass over the weights, every row computed independently of
//! the others.

use super::layers::{RowMask, rope_tables};
use super::linear::Linear;
use super::{Transformer, host_rows};
use crate::cache::KvCache;
use anyhow::{Result, ensure};
use burn::tensor::Tensor;

impl Transformer {
    /// Forwards a *ragged* batch: several sequences, each with its own new tokens (any
    /// number >= 1) and its own single-sequence cache, possibly of different lengths. The
    /// projections and the MLP run once over all rows (one pass over the weights for the whole
    /// batch, which is what makes batched generation pay on a bandwidth-bound CPU); attention
    /// runs per sequence against its own cache. On the CPU every projection runs the
    /// row-order-independent kernel (in chunks of at most [`super::linear::ROW_INVARIANT_CHUNK`] rows), so a
    /// sequence's results are bitwise the same whatever else is in the batch. Returns the final
    /// hidden states of all new rows, `[rows, hidden]`, sequence after sequence in input order.
    pub fn forward_ragged(&self, seqs: &mut [(&[u32], &mut KvCache)]) -> Result<Tensor<2>> {
        ensure!(!seqs.is_empty(), "a ragged forward needs at least one sequence");
        ensure!(
            self.devices.len() == 1,
            "ragged forwards run on one device; this model's attentions are placed on {}",
            self.devices.len()
        );
        for (tokens, cache) in seqs.iter() {
            ensure!(!tokens.is_empty(), "forward needs at least one token per sequence");
            ensure!(cache.batch() == 1, "ragged forwards take single-sequence caches, got one for {}", cache.batch());
        }
        let hd = self.cfg.hidden_size;
        let groups = self.cfg.num_attention_heads / self.cfg.num_key_value_heads;
        let embedded = self.embed_tokens(&seqs.iter().map(|(t, _)| *t).collect::<Vec<_>>())?;
        let rows = embedded.dims()[0];
        let mut x = embedded.reshape([1, rows, hd]);
        // Per sequence: row range, RoPE tables at its own positions, its causal mask.
        let mut parts = Vec::with_capacity(seqs.len());
        let mut start = 0;
        for (tokens, cache) in seqs.iter_mut() {
            let n = tokens.len();
            let past = cache.len();
            self.cfg.check_positions(past + n)?;
            cache.reserve(n);
            let rope = rope_tables(past, n, &self.cfg.rope_inv_freqs(), self.device());
            let mask = RowMask::new(past, n, None, groups, self.device());
            parts.push((start..start + n, rope, mask));
            start += n;
        }
        for (layer, block) in self.blocks.iter().enumerate() {
            let qkv = block.attn_norm.project(x.clone(), &block.attn.qkv, Linear::forward_row_invariant);
            let width = qkv.dims()[2];
            let outs: Vec<Tensor<3>> = parts
                .iter()
                .zip(seqs.iter_mut())
                .map(|((range, rope, mask), (_, cache))| {
                    let rows_of_seq = qkv.clone().slice([0..1, range.clone(), 0..width]);
                    block.attn.attend(rows_of_seq, &mut cache.slot(layer), rope, mask, None)
                })
                .collect();
            let attended = if outs.len() == 1 { outs.into_iter().next().unwrap() } else { Tensor::cat(outs, 1) };
            x = x + block.attn.o.forward_row_invariant(attended);
            x = block.mlp.with_residual(x, &block.mlp_norm, Linear::forward_row_invariant);
        }
        for (tokens, cache) in seqs.iter_mut() {
            cache.advance(tokens.len(), None);
        }
        Ok(self.norm.forward(x).reshape([rows, hd]))
    }

    /// Output-head scores of hidden rows `[rows, hidden]`, one host vector per row, each row
    /// computed independently of the others (the companion of [`Transformer::forward_ragged`]).
    pub fn logits_ragged(&self, hidden: Tensor<2>) -> Vec<Vec<f32>> {
        let [r, h] = hidden.dims();
        let mut out = self.lm_head.forward_row_invariant(hidden.reshape([1, r, h]));
        if let Some(ids) = &self.vocab_subset {
            out = self.full_vocabulary(out, ids);
        }
        let out = self.padded(out);
        let v = out.dims()[2];
        host_rows(out.reshape([r, v]))
    }
}
