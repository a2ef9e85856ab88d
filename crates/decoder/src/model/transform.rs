//! A model made cheaper to run as a draft, after loading: its output head restricted to a
//! subset of the vocabulary (FR-Spec's frequency-ranked draft vocabulary) and its matrices
//! requantized to a cheaper block type. Speculative decoding stays lossless under both: the
//! verifier's rejection sampling is exact for any draft distribution q, and these only change q.

use super::Transformer;
use super::gpu_blocks::DeviceBlocks;
use super::linear::{Linear, Projection, device_blocks, upload_matrix};
use crate::gguf::GgmlType;
use crate::weights::HostTensor;
use anyhow::{Result, bail, ensure};
use burn::tensor::{Device, Tensor, TensorData};
use std::sync::Arc;

impl Transformer {
    /// The model with its output head restricted to the tokens `ids` (distinct, inside the
    /// vocabulary): the head keeps only those rows, exactly as stored, so a token's score is
    /// the full head's score bit for bit; every other token's logit is -inf, probability 0.
    /// The embedding table is untouched (any token can still be fed).
    pub fn restrict_vocab(mut self, ids: &[u32]) -> Result<Self> {
        let vocab = self.cfg.vocab_size;
        ensure!(self.vocab_subset.is_none(), "the head is already restricted to a vocabulary subset");
        ensure!(
            (1..=vocab).contains(&ids.len()),
            "a vocabulary subset of {} tokens for a vocabulary of {vocab}: need 1..={vocab}",
            ids.len()
        );
        let mut seen = vec![false; vocab];
        for &t in ids {
            ensure!((t as usize) < vocab, "token {t} of the vocabulary subset is outside the vocabulary of {vocab}");
            ensure!(!std::mem::replace(&mut seen[t as usize], true), "token {t} is twice in the vocabulary subset");
        }
        let head = &self.lm_head;
        let proj = match &head.proj {
            Projection::Native(q) => Projection::Native(Arc::new(q.select_rows(ids)?)),
            Projection::Int(q) => Projection::Int(Arc::new(q.select_rows(ids)?.into_int_layout())),
            Projection::Blocks(q) => Projection::Blocks(Arc::new(DeviceBlocks::upload(
                &q.to_host()?.select_rows(ids)?,
                &self.devices[self.head],
            )?)),
            Projection::Host { host, .. } => {
                let data = gather_rows(host.as_f32(), host.cols, ids);
                upload_matrix(
                    HostTensor { shape: vec![ids.len(), host.cols], data },
                    "lm_head subset",
                    [ids.len(), host.cols],
                    &self.devices[self.head],
                )?
            }
            Projection::Device(blocks) => {
                let cols = blocks[0].dims()[1];
                let all: Vec<f32> = blocks
                    .iter()
                    .flat_map(|b| b.clone().into_data().try_to_vec::<f32>().expect("f32 weights"))
                    .collect();
                Projection::Device(device_blocks(
                    gather_rows(&all, cols, ids),
                    [ids.len(), cols],
                    &self.devices[self.head],
                ))
            }
        };
        let bias = head.host_bias.as_ref().map(|b| ids.iter().map(|&t| b[t as usize]).collect::<Vec<f32>>());
        let device = self.devices[self.head].clone();
        self.lm_head = Linear {
            proj,
            bias: bias.as_ref().map(|b| Tensor::from_data(TensorData::new(b.clone(), [b.len()]), &device)),
            host_bias: bias.filter(|_| head.proj.on_host()),
        };
        self.vocab_subset = Some(ids.into());
        Ok(self)
    }

    /// The model scoring `n` tokens a row, `n` at least its vocabulary: the rows past it
    /// score -inf, probability 0. A draft whose target pads its head (Qwen2.5's 7B and larger
    /// score 152,064 logits, the smaller ones 151,936, with one tokenizer) then gives
    /// distributions of the target's length, zero on ids no tokenizer produces: it never
    /// proposes them, and verification's residual keeps the target's mass there, so
    /// speculative decoding stays exact.
    pub fn pad_vocab(mut self, n: usize) -> Result<Self> {
        let vocab = self.cfg.vocab_size;
        ensure!(
            n >= vocab,
            "a model of {vocab} logits cannot be padded to {n}: the target must score at least the draft's tokens"
        );
        self.padded_vocab = (n > vocab).then_some(n);
        Ok(self)
    }

    /// The number of logits of a row ([`Transformer::pad_vocab`]).
    pub fn output_vocab(&self) -> usize {
        self.padded_vocab.unwrap_or(self.cfg.vocab_size)
    }

    /// `scores` (`[b, n, vocab]`) with -inf columns up to the padded vocabulary, if any.
    pub(super) fn padded(&self, scores: Tensor<3>) -> Tensor<3> {
        let Some(total) = self.padded_vocab else { return scores };
        let [b, n, v] = scores.dims();
        let fill = Tensor::full([b, n, total - v], f32::NEG_INFINITY, &scores.device());
        Tensor::cat(vec![scores, fill], 2)
    }

    /// The token ids the head scores when it is restricted ([`Transformer::restrict_vocab`]).
    pub fn vocab_subset(&self) -> Option<&[u32]> {
        self.vocab_subset.as_deref()
    }

    /// The model with every layer matrix and the output head stored with more bits per weight
    /// than `ty` requantized to `ty` (decoded, then ggml's round-to-nearest quantizer); cheaper
    /// matrices, the embedding table and the norms are kept. Needs the GGUF blocks (on the CPU or a GPU)
    /// (`--weights native` or `q8`); integer matrices stay integer when `ty` has an integer
    /// kernel.
    pub fn requantize(mut self, ty: GgmlType) -> Result<Self> {
        let convert = |l: &mut Linear, name: &str| -> Result<()> {
            l.proj = match &l.proj {
                Projection::Native(q) => Projection::Native(Arc::new(q.requantized(ty)?)),
                Projection::Int(q) => {
                    let r = q.requantized(ty)?;
                    if r.has_int_kernel() {
                        Projection::Int(Arc::new(r.into_int_layout()))
                    } else {
                        Projection::Native(Arc::new(r))
                    }
                }
                Projection::Host { .. } => bail!(
                    "requantizing {name} needs the model's GGUF blocks: load it with --weights native or q8 (it is held in f32)"
                ),
                Projection::Blocks(q) => {
                    let device = q.device();
                    Projection::Blocks(Arc::new(DeviceBlocks::upload(&q.to_host()?.requantized(ty)?, &device)?))
                }
                Projection::Device(_) => bail!(
                    "requantizing {name} needs the model's GGUF blocks: load it with --weights native or q8 (it is held in f32)"
                ),
            };
            Ok(())
        };
        for (i, b) in self.blocks.iter_mut().enumerate() {
            for (l, what) in [
                (&mut b.attn.qkv, "q/k/v"),
                (&mut b.attn.o, "o"),
                (&mut b.mlp.gate_up, "gate/up"),
                (&mut b.mlp.down, "down"),
            ] {
                convert(l, &format!("layer {i}'s {what} projection"))?;
            }
        }
        convert(&mut self.lm_head, "the output head")?;
        Ok(self)
    }

    /// Scores of the head's subset rows `[b, n, ids]` placed into the full vocabulary
    /// `[b, n, vocab]`, -inf elsewhere.
    pub(super) fn full_vocabulary(&self, scores: Tensor<3>, ids: &[u32]) -> Tensor<3> {
        let [b, n, k] = scores.dims();
        let vocab = self.cfg.vocab_size;
        let device: Device = scores.device();
        let sub = scores.into_data().try_to_vec::<f32>().expect("f32 logits");
        let mut full = vec![f32::NEG_INFINITY; b * n * vocab];
        for (row, src) in full.chunks_exact_mut(vocab).zip(sub.chunks_exact(k)) {
            for (&t, &v) in ids.iter().zip(src) {
                row[t as usize] = v;
            }
        }
        Tensor::from_data(TensorData::new(full, [b, n, vocab]), &device)
    }
}

/// Rows `ids` (in that order) of a row-major matrix of `cols` values per row.
impl Transformer {
    /// The output head's rows of `ids` decoded to f32, `[ids, hidden]` row-major: what a
    /// feature head trains its scores with (the head it will share at run time).
    pub fn output_rows(&self, ids: &[u32]) -> Result<Vec<f32>> {
        ensure!(
            self.vocab_subset.is_none(),
            "the output head is restricted to a vocabulary subset; its rows are of the full model"
        );
        ensure!(self.lm_head.bias.is_none(), "an output head with a bias is not a plain row lookup");
        let vocab = self.cfg.vocab_size;
        if let Some(&bad) = ids.iter().find(|&&t| t as usize >= vocab) {
            bail!("token {bad} is outside the vocabulary of {vocab}");
        }
        let h = self.cfg.hidden_size;
        Ok(match &self.lm_head.proj {
            Projection::Native(q) | Projection::Int(q) => {
                let mut out = vec![0f32; ids.len() * h];
                for (row, &id) in out.chunks_exact_mut(h).zip(ids) {
                    q.decode_row(id as usize, row);
                }
                out
            }
            Projection::Host { host, .. } => gather_rows(host.as_f32(), host.cols, ids),
            Projection::Blocks(q) => {
                let q = q.to_host()?;
                let mut out = vec![0f32; ids.len() * h];
                for (row, &id) in out.chunks_exact_mut(h).zip(ids) {
                    q.decode_row(id as usize, row);
                }
                out
            }
            Projection::Device(blocks) => {
                let all: Vec<f32> = blocks
                    .iter()
                    .flat_map(|b| b.clone().into_data().try_to_vec::<f32>().expect("f32 weights"))
                    .collect();
                gather_rows(&all, h, ids)
            }
        })
    }
}

fn gather_rows(all: &[f32], cols: usize, ids: &[u32]) -> Vec<f32> {
    ids.iter().flat_map(|&t| &all[t as usize * cols..(t as usize + 1) * cols]).copied().collect()
}
