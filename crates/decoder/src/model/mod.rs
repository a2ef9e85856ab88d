//! One Llama-family decoder (RMSNorm, RoPE, grouped-query attention, SwiGLU, optional q/k/v
//! bias, tied or untied head) written against burn's backend-agnostic tensor API. It covers
//! Qwen2/2.5 and Llama/SmolLM. The model holds no state: the caller passes a [`KvCache`].
//!
//! This file holds the model and its one layer loop; [`linear`] the weight storage and kernel
//! choice, [`layers`] the layers, [`load`] the loading, [`ragged`] the batched ragged forward,
//! [`fuzzy`] EasySpec's fuzzy forward, [`placement`] its attention placement on devices and
//! [`tree`] the tree call of token-tree verification.

use crate::cache::{KvCache, LayerSlot};
use crate::config::ModelConfig;
use crate::layer_groups::LayerGroups;
use anyhow::{Result, bail, ensure};
use burn::tensor::{Device, Tensor};
use std::sync::Arc;

#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod captured;
mod fuzzy;
mod gpu_blocks;
mod greedy;
mod layers;
mod linear;
mod load;
mod moves;
mod placement;
mod probe;
mod ragged;
mod swiglu;
mod transform;
mod tree;

use crate::tree_mask::TreeMask;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub use captured::{CapturedDecode, RECORDED_ROWS_MAX, replays};
pub use fuzzy::ProbedLayer;
use layers::{Block, Embedding, RmsNorm, RowMask, rope_tables, rope_tables_at};
pub use linear::HOST_KERNEL_MAX_ROWS;
use linear::{Linear, Projection};
pub use load::{WeightMode, layer_ranges};
pub use moves::DeviceMoves;
pub use probe::AttentionProbe;
pub use tree::TreeRows;

/// Forwards running in this process ([`Transformer::hidden_states_until`]).
static FORWARDS_RUNNING: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// One running forward, counted while it lives; `.0`: no other forward was running when it
/// entered.
struct AloneForward(bool);

impl AloneForward {
    fn enter() -> Self {
        Self(FORWARDS_RUNNING.fetch_add(1, std::sync::atomic::Ordering::AcqRel) == 0)
    }
}

impl Drop for AloneForward {
    fn drop(&mut self) {
        FORWARDS_RUNNING.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// What one forward pass returns, for all `n` new positions of every sequence.
pub struct ForwardOutput {
    /// `[batch, n, vocab]` unnormalised scores of the next token.
    pub logits: Tensor<3>,
    /// `[batch, n, hidden]` final hidden states after the last RMSNorm (the acceptance head
    /// reads these).
    pub hidden: Tensor<3>,
}

/// The last `k` positions of a `[1, n, d]` tensor as host rows.
fn tail_rows(t: &Tensor<3>, k: usize) -> Vec<Vec<f32>> {
    let [b, n, d] = t.dims();
    assert!(b == 1 && k <= n, "tail of {k} rows from a [{b}, {n}, {d}] tensor");
    host_rows(t.clone().slice([0..1, n - k..n, 0..d]).reshape([k, d]))
}

/// Blocks until the device has computed `t` (reads it back): what a timer around queued GPU
/// work needs. The whole tensor (a timed forward's hidden rows, a few KB) is read: a slice of
/// it would launch a copy kernel, which a launch count would see as the forward's.
fn wait_for(t: &Tensor<3>) {
    let _ = t.clone().into_data();
}

/// The rows of a `[rows, d]` tensor as host vectors.
fn host_rows(t: Tensor<2>) -> Vec<Vec<f32>> {
    let d = t.dims()[1];
    let flat = t.into_data().try_to_vec::<f32>().expect("f32 model outputs");
    flat.chunks_exact(d).map(<[f32]>::to_vec).collect()
}

impl ForwardOutput {
    /// Logits of the last `k` positions (single sequence), one host vector per position.
    pub fn logits_tail(&self, k: usize) -> Vec<Vec<f32>> {
        tail_rows(&self.logits, k)
    }

    /// Hidden states of the last `k` positions (single sequence), one host vector each.
    pub fn hidden_tail(&self, k: usize) -> Vec<Vec<f32>> {
        tail_rows(&self.hidden, k)
    }

    /// The last position's logits and hidden state (single sequence): what a draft step reads.
    pub fn last_position(&self) -> (Vec<f32>, Vec<f32>) {
        (tail_rows(&self.logits, 1).remove(0), tail_rows(&self.hidden, 1).remove(0))
    }

    /// The greedy token (`sampling::argmax`) of each of the last `rows` positions (single
    /// sequence) where the logits are on a GPU: the argmax runs on the device and `rows`
    /// numbers come back instead of `rows` vocabulary rows. `None` on the CPU, whose callers
    /// read the rows ([`crate::generate::greedy_token`]).
    pub fn device_argmax(&self, rows: usize) -> Option<Vec<u32>> {
        Some(self.device_top_k(rows, 1)?.into_iter().map(|best| best[0].0).collect())
    }

    /// The `k` best tokens of each of the last `rows` positions with their logits, best first
    /// (`sampling::top_k`), where the logits are on a GPU: `2 k` numbers a row come back
    /// instead of a vocabulary row. `None` on the CPU.
    pub fn device_top_k(&self, rows: usize, k: usize) -> Option<Vec<Vec<(u32, f32)>>> {
        #[cfg(any(feature = "wgpu", feature = "cuda"))]
        if self.logits.device() != Device::flex() {
            return Some(crate::cube::top_k_tail(&self.logits, rows, k));
        }
        let _ = (rows, k);
        None
    }

    /// The vocabulary size of the logits.
    pub fn vocab(&self) -> usize {
        self.logits.dims()[2]
    }
}

/// Wall times of one forward's sublayers ([`Transformer::forward_timed`]).
#[derive(Clone, Debug, Default)]
pub struct LayerTimes {
    /// Per layer: attention (norm, projections, cache write, attention, and its residual add
    /// where the layer is not in a fuzzy group of several) and MLP (norm, MLP, residual add;
    /// a fuzzy group's attention residual adds count here).
    pub attn: Vec<std::time::Duration>,
    pub mlp: Vec<std::time::Duration>,
    pub lm_head: std::time::Duration,
    /// The kernels each sublayer launched, when a [`crate::LaunchCounter`] was running (a GPU
    /// forward); `None` otherwise.
    pub launches: Option<LayerLaunches>,
}

/// Kernel launches of one forward's sublayers, split as [`LayerTimes`] splits its time.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LayerLaunches {
    pub attn: Vec<u64>,
    pub mlp: Vec<u64>,
    /// The output head (and the restriction of its vocabulary, if any).
    pub lm_head: u64,
    /// The whole forward: the layers, the head, and what surrounds them (embedding lookup,
    /// position tables, final norm).
    pub total: u64,
}

impl LayerLaunches {
    /// Each layer's launches: its attention's and its MLP's.
    pub fn per_layer(&self) -> Vec<u64> {
        self.attn.iter().zip(&self.mlp).map(|(a, m)| a + m).collect()
    }
}

/// What one sublayer cost: its wall time and, while a launch counter runs, the kernels it
/// launched (exact for a group of one layer; the counter is process-wide, so the attentions
/// of a layer-parallel group running on several threads would count each other's).
struct SublayerCost {
    time: std::time::Duration,
    launches: Option<u64>,
}

/// Launches issued since `before` (a reading of [`crate::device::launches::issued`]).
fn launched_since(before: Option<u64>) -> Option<u64> {
    Some(crate::device::launches::issued()? - before?)
}

/// The decoder.
#[derive(Clone)]
pub struct Transformer {
    cfg: ModelConfig,
    embed: Embedding,
    blocks: Vec<Block>,
    norm: RmsNorm,
    /// Shares `embed`'s memory when the head is tied.
    lm_head: Linear,
    /// Every layer its own group: the strategy of the exact forward.
    sequential: LayerGroups,
    /// The model's device (first: embeddings, and unless split the MLPs, norms and head) and
    /// the other devices that hold attention layers ([`Transformer::place_attention`]) or layer
    /// ranges ([`Transformer::load_split`]).
    devices: Vec<Device>,
    /// Index into `devices` of the final norm's and the head's device (the last range's).
    head: usize,
    /// The token ids of `lm_head`'s rows when the head is restricted to a subset of the
    /// vocabulary ([`Transformer::restrict_vocab`]): logits elsewhere are -inf.
    vocab_subset: Option<Arc<[u32]>>,
    /// The number of logits a row has when it is more than the model's vocabulary: the
    /// target's, for a draft of a pair whose target pads its head ([`Transformer::pad_vocab`]).
    padded_vocab: Option<usize>,
    /// Tensors moved between `devices` so far ([`Transformer::device_moves`]).
    moves: Arc<moves::MoveCounter>,
}

/// RoPE tables and the row mask of one forward, on one device.
type PositionTables = ((Tensor<2>, Tensor<2>), RowMask);

impl Transformer {
    /// Every linear map a decoded token applies: each layer's four projections, then the head.
    fn linears(&self) -> impl Iterator<Item = &Linear> {
        self.blocks.iter().flat_map(|b| [&b.attn.qkv, &b.attn.o, &b.mlp.gate_up, &b.mlp.down]).chain([&self.lm_head])
    }

    /// Bytes of weights one decoded token reads, as stored: every layer's projections (GGUF
    /// blocks on the native path, f32 otherwise), norms and biases, the final norm and the
    /// output head (the embedding lookup reads one row and is left out).
    pub fn weight_bytes_per_token(&self) -> usize {
        // Two norms per layer and the final norm, f32 of the hidden size each.
        let norms = (2 * self.blocks.len() + 1) * self.cfg.hidden_size * 4;
        self.linears().map(Linear::weight_bytes).sum::<usize>() + norms
    }

    /// Whether any weight matrix runs from its GGUF blocks ([`WeightMode::Native`] or `Q8`, on
    /// the CPU or a GPU).
    pub fn is_native(&self) -> bool {
        matches!(self.embed, Embedding::Native(_) | Embedding::DeviceBlocks(_))
            || self
                .linears()
                .any(|l| matches!(l.proj, Projection::Native(_) | Projection::Int(_) | Projection::Blocks(_)))
    }

    /// Whether any weight matrix takes integer dot products on 8-bit activations
    /// ([`WeightMode::Q8`]); false when q8 was asked for but no matrix type has such a kernel.
    pub fn runs_integer(&self) -> bool {
        self.linears().any(|l| matches!(l.proj, Projection::Int(_)))
    }

    /// Whether a greedy decode step of this model can be recorded and replayed
    /// (`CapturedDecode`): on one GPU, the embedding in GGUF blocks (looked up from a device
    /// buffer of ids), the full vocabulary, and no q/k norm (Qwen3's norms run as tensor
    /// operations that the recorded-call check does not cover yet).
    pub fn can_capture(&self) -> bool {
        self.devices.len() == 1
            && !self.cfg.qk_norm
            && *self.device() != Device::flex()
            && matches!(self.embed, Embedding::DeviceBlocks(_))
            && self.vocab_subset.is_none()
    }

    pub fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    pub fn device(&self) -> &Device {
        &self.devices[0]
    }

    /// A fresh cache for `batch` sequences, each layer on the device of its attention.
    pub fn new_cache(&self, batch: usize) -> KvCache {
        KvCache::on_devices(&self.cfg, batch, &self.layer_devices())
    }

    /// The device of each layer's attention and cache.
    pub fn layer_devices(&self) -> Vec<Device> {
        self.blocks.iter().map(|b| self.devices[b.device].clone()).collect()
    }

    /// The RoPE tables of positions `past..past + n` (a tree's rows: `past` + their depths)
    /// and the row mask, on every device of the model (index as [`Transformer::devices`]).
    fn position_tables(&self, past: usize, n: usize, tree: Option<&Arc<TreeMask>>) -> Vec<PositionTables> {
        let heads_per_kv = self.cfg.num_attention_heads / self.cfg.num_key_value_heads;
        let freqs = self.cfg.rope_inv_freqs();
        let rope = match tree {
            Some(t) => {
                let base = past - t.cached();
                rope_tables_at(&(0..n).map(|i| base + t.depth(i)).collect::<Vec<_>>(), &freqs, self.device())
            }
            None => rope_tables(past, n, &freqs, self.device()),
        };
        let mask = RowMask::new(past, n, tree, heads_per_kv, self.device());
        let mut tables = vec![(rope, mask)];
        for device in &self.devices[1..] {
            let ((cos, sin), mask) = &tables[0];
            tables.push(((cos.clone().to_device(device), sin.clone().to_device(device)), mask.to_device(device)));
            self.count_tables_moved();
        }
        tables
    }

    /// Whether the layers are split in ranges over several devices ([`Transformer::load_split`]).
    pub fn is_split(&self) -> bool {
        self.head != 0
    }

    /// Layer `i`'s attention sublayer (input norm, attention, output projection) of `x`, plus
    /// `x` itself when `residual` (the residual stream after the sublayer; the add is then
    /// fused into the output projection where its product can do it); runs on the layer's
    /// attention device and returns on its home device (where its residual stream and MLP are).
    fn attention(
        &self,
        i: usize,
        x: Tensor<3>,
        slot: &mut LayerSlot,
        tables: &[PositionTables],
        probe: Option<&mut AttentionProbe>,
        residual: bool,
    ) -> Tensor<3> {
        let block = &self.blocks[i];
        let (rope, mask) = &tables[block.device];
        if block.device == block.home {
            let x = self.on_device(x, block.home);
            let stream = residual.then(|| x.clone());
            return block.attn.forward(x, &block.attn_norm, slot, rope, mask, probe, stream);
        }
        let h = block.attn.forward(
            self.move_hidden(x.clone(), &self.devices[block.device]),
            &block.attn_norm,
            slot,
            rope,
            mask,
            probe,
            None,
        );
        let h = self.move_hidden(h, &self.devices[block.home]);
        if residual { self.on_device(x, block.home) + h } else { h }
    }

    /// Forwards `tokens` (n >= 1 new tokens of one sequence) after what `cache` holds, and
    /// appends their keys and values to it.
    pub fn forward(&self, tokens: &[u32], cache: &mut KvCache) -> Result<ForwardOutput> {
        self.forward_batch(&[tokens], cache)
    }

    /// A verification's forward: `tokens` after what `cache` holds, with the logits of the last
    /// `rows` positions only (the rows decided on; for a prefill, the last), giving up between
    /// layers once `cancel` is set (DSI's preemption of a verification whose prefix was
    /// rejected): `Ok(None)` then, with the cache's length unchanged (keys already written past
    /// it are never read).
    pub fn forward_scores(
        &self,
        tokens: &[u32],
        cache: &mut KvCache,
        rows: usize,
        cancel: Option<&std::sync::atomic::AtomicBool>,
    ) -> Result<Option<Vec<Vec<f32>>>> {
        Ok(self.forward_scores_hidden(tokens, cache, rows, cancel, false)?.map(|(scores, _)| scores))
    }

    /// [`Transformer::forward_scores`], and with `hidden` the final hidden states of every
    /// forwarded position, `[tokens, hidden]` row-major (what a feature-level drafter reads).
    pub fn forward_scores_hidden(
        &self,
        tokens: &[u32],
        cache: &mut KvCache,
        rows: usize,
        cancel: Option<&std::sync::atomic::AtomicBool>,
        hidden: bool,
    ) -> Result<Option<(Vec<Vec<f32>>, Vec<f32>)>> {
        ensure!((1..=tokens.len()).contains(&rows), "scores of {rows} rows from a forward of {} tokens", tokens.len());
        let Some(states) = self.hidden_states_until(&[tokens], cache, None, cancel, &self.sequential, 1, None, None)?
        else {
            return Ok(None);
        };
        let [b, n, h] = states.dims();
        let scores = tail_rows(&self.logits(states.clone().slice([0..b, n - rows..n, 0..h])), rows);
        let states =
            if hidden { states.into_data().try_to_vec::<f32>().expect("f32 model outputs") } else { Vec::new() };
        Ok(Some((scores, states)))
    }

    /// Forwards several sequences of equal length at once (`cache.batch()` of them).
    pub fn forward_batch(&self, tokens: &[&[u32]], cache: &mut KvCache) -> Result<ForwardOutput> {
        let hidden = self.hidden_states(tokens, cache, None)?;
        let logits = self.logits(hidden.clone());
        Ok(ForwardOutput { logits, hidden })
    }

    /// Like [`Transformer::forward`] but computes logits for the last position only (prefill
    /// of a long prompt, where the other positions' logits are not needed).
    pub fn forward_last(&self, tokens: &[u32], cache: &mut KvCache) -> Result<ForwardOutput> {
        let hidden = self.hidden_states(&[tokens], cache, None)?;
        let [b, n, h] = hidden.dims();
        let last = hidden.slice([0..b, n - 1..n, 0..h]);
        Ok(ForwardOutput { logits: self.logits(last.clone()), hidden: last })
    }

    /// Output-head scores for hidden states `[batch, n, hidden]`.
    pub fn logits(&self, hidden: Tensor<3>) -> Tensor<3> {
        let scores = self.lm_head.forward(hidden);
        let scores = match &self.vocab_subset {
            None => scores,
            Some(ids) => self.full_vocabulary(scores, ids),
        };
        self.padded(scores)
    }

    /// The embedding table's rows of `tokens`, `[tokens, hidden]` (a feature head's token
    /// input: the target's embedding, shared).
    pub fn embedding_rows(&self, tokens: &[u32]) -> Result<Tensor<2>> {
        self.embed_tokens(&[tokens])
    }

    /// Embeddings of the tokens of `seqs`, one after another: `[total tokens, hidden]`. Token
    /// ids outside the vocabulary are an error.
    fn embed_tokens(&self, seqs: &[&[u32]]) -> Result<Tensor<2>> {
        let ids = self.embeddable(seqs.iter().flat_map(|t| t.iter().copied()))?;
        Ok(self.embed.lookup(&ids, self.device()))
    }

    /// `tokens` as rows of the embedding table. Ids past the vocabulary are an error, except
    /// a padded draft's ([`Transformer::pad_vocab`]): its target's padded ids, which no
    /// tokenizer produces but a target sampling at T > 0 may draw with a tiny probability,
    /// read id 0's row. The draft's proposals after one are then a guess like any other, and
    /// verification keeps the output exact.
    pub(super) fn embeddable(&self, tokens: impl IntoIterator<Item = u32>) -> Result<Vec<u32>> {
        let (vocab, outputs) = (self.cfg.vocab_size as u32, self.output_vocab() as u32);
        tokens
            .into_iter()
            .map(|t| match t {
                t if t < vocab => Ok(t),
                t if t < outputs => Ok(0),
                bad => bail!("token id {bad} is outside the vocabulary of {outputs}"),
            })
            .collect()
    }

    /// [`Transformer::forward`] of one sequence that also times each layer's attention and
    /// MLP and the LM head (`specx profile`). The CPU backend computes eagerly, so each time
    /// is the sublayer's own; the results equal those of `forward`.
    pub fn forward_timed(&self, tokens: &[u32], cache: &mut KvCache) -> Result<(ForwardOutput, LayerTimes)> {
        let mut times = LayerTimes::default();
        let start = crate::device::launches::issued();
        if start.is_some() {
            times.launches = Some(LayerLaunches::default());
        }
        let hidden = self.hidden_states(&[tokens], cache, Some(&mut times))?;
        let t = std::time::Instant::now();
        let head_start = crate::device::launches::issued();
        let logits = self.logits(hidden.clone());
        if let Some(l) = times.launches.as_mut() {
            l.lm_head = launched_since(head_start).unwrap_or(0);
            l.total = launched_since(start).unwrap_or(0);
        }
        let _ = logits.clone().into_data(); // materialise before stopping the clock
        times.lm_head = t.elapsed();
        Ok((ForwardOutput { logits, hidden }, times))
    }

    /// The kernels a forward of `tokens` launches after what `cache` holds, per sublayer, and
    /// per kernel name (most first); `None` in a build without a GPU backend. A warm-up call of
    /// the same shape runs first (autotuning launches kernels of its own on a shape's first
    /// call); the cache is cut back after each call.
    pub fn forward_counted(
        &self,
        tokens: &[u32],
        cache: &mut KvCache,
    ) -> Result<Option<(LayerLaunches, Vec<(String, u64)>)>> {
        let past = cache.len();
        self.forward_timed(tokens, cache)?;
        cache.truncate(past);
        let Some(counter) = crate::LaunchCounter::start() else { return Ok(None) };
        let (_, times) = self.forward_timed(tokens, cache)?;
        cache.truncate(past);
        let by_kernel = counter.by_kernel();
        let launches = times.launches.expect("a running counter counts the forward");
        Ok(Some((launches, by_kernel)))
    }

    fn hidden_states(
        &self,
        tokens: &[&[u32]],
        cache: &mut KvCache,
        times: Option<&mut LayerTimes>,
    ) -> Result<Tensor<3>> {
        Ok(self
            .hidden_states_until(tokens, cache, times, None, &self.sequential, 1, None, None)?
            .expect("no cancel flag, never cancelled"))
    }

    /// The layer loop, group by group (`self.sequential` for the exact forward); `None` when
    /// `cancel` was set before a group (the cache not advanced). `times` and `probes` collect
    /// per-layer measurements when given; with `tree`, the rows are a tree call's.
    ///
    /// On the CPU, when no other forward is running, the loop runs on a worker of rayon's
    /// pool: the kernels' parallel loops then start on the calling worker, where from any other
    /// thread each of them (about 140 a forward) parks the caller on a latch and wakes it when
    /// the loop ends (a one-row target step: 5.6x fewer context switches, 7% less time on a
    /// Zen 4). Concurrent forwards (DSI's instances) and layer-parallel attention (which
    /// blocks on threads of its own) stay on their threads, so no forward can be run nested
    /// inside another's wait.
    #[allow(clippy::too_many_arguments)]
    fn hidden_states_until(
        &self,
        tokens: &[&[u32]],
        cache: &mut KvCache,
        times: Option<&mut LayerTimes>,
        cancel: Option<&std::sync::atomic::AtomicBool>,
        groups: &LayerGroups,
        workers: usize,
        probes: Option<&mut Vec<ProbedLayer>>,
        tree: Option<&Arc<TreeMask>>,
    ) -> Result<Option<Tensor<3>>> {
        let run = || self.layer_loop(tokens, cache, times, cancel, groups, workers, probes, tree);
        let on_cpu = self.devices.iter().all(|d| *d == Device::flex());
        if workers > 1 || !on_cpu || rayon::current_thread_index().is_some() {
            return run();
        }
        let alone = AloneForward::enter();
        if alone.0 { rayon::join(run, || ()).0 } else { run() }
    }

    /// [`Transformer::hidden_states_until`] on the calling thread.
    #[allow(clippy::too_many_arguments)]
    fn layer_loop(
        &self,
        tokens: &[&[u32]],
        cache: &mut KvCache,
        times: Option<&mut LayerTimes>,
        cancel: Option<&std::sync::atomic::AtomicBool>,
        groups: &LayerGroups,
        workers: usize,
        probes: Option<&mut Vec<ProbedLayer>>,
        tree: Option<&Arc<TreeMask>>,
    ) -> Result<Option<Tensor<3>>> {
        let b = tokens.len();
        ensure!(b > 0 && b == cache.batch(), "{b} sequences given to a cache for {}", cache.batch());
        let n = tokens[0].len();
        ensure!(n > 0, "forward needs at least one token");
        ensure!(tokens.iter().all(|t| t.len() == n), "batched sequences must have equal length");
        ensure!(
            groups.layers() == self.blocks.len(),
            "layer strategy '{groups}' is for {} layers, the model has {}",
            groups.layers(),
            self.blocks.len()
        );
        let past = cache.len();
        self.cfg.check_positions(past + n)?;
        let x = self.embed_tokens(tokens)?.reshape([b, n, self.cfg.hidden_size]);
        cache.reserve(n);
        if let Some(t) = tree {
            ensure!(b == 1 && t.len() == n, "a tree of {} rows given {b} sequences of {n} tokens", t.len());
            ensure!(t.cached() <= past, "a tree continuing {} cached rows after {past} positions", t.cached());
        }
        let tables = self.position_tables(past, n, tree);
        self.run_layers(x, cache, &tables, n, times, cancel, groups, workers, probes)
    }

    /// The layers over embedded rows `x` (`[b, n, hidden]`) after what `cache` holds (room
    /// reserved for them), with the call's position `tables`: [`Transformer::layer_loop`]
    /// after its inputs are made, and a captured step's forward over inputs it keeps on the
    /// device.
    #[allow(clippy::too_many_arguments)]
    fn run_layers(
        &self,
        mut x: Tensor<3>,
        cache: &mut KvCache,
        tables: &[PositionTables],
        n: usize,
        mut times: Option<&mut LayerTimes>,
        cancel: Option<&std::sync::atomic::AtomicBool>,
        groups: &LayerGroups,
        workers: usize,
        mut probes: Option<&mut Vec<ProbedLayer>>,
    ) -> Result<Option<Tensor<3>>> {
        // Per-layer times on a device that queues work wait for each sublayer to finish.
        let sync = times.is_some() && self.devices.iter().any(|d| *d != Device::flex());
        for group in groups.groups() {
            if cancel.is_some_and(|c| c.load(std::sync::atomic::Ordering::Relaxed)) {
                return Ok(None);
            }
            // Every attention of the group reads the group's input.
            // A lone attention adds its residual itself (fused into its output projection where
            // that can); a fuzzy group's attentions all read the group's input, added below.
            let residual = group.len() == 1 && probes.is_none();
            let attended =
                self.attend_group(group.clone(), &x, cache, tables, workers, probes.is_some(), sync, residual);
            for (i, (h, attn_cost, fuzzy)) in group.clone().zip(attended) {
                if let (Some(probes), Some(fuzzy)) = (probes.as_deref_mut(), fuzzy) {
                    let leading = i == group.start;
                    let precise = if leading { fuzzy.clone() } else { self.precise_attention(i, &x, cache, tables) };
                    probes.push(ProbedLayer { fuzzy, precise, leading });
                }
                let block = &self.blocks[i];
                let t_mlp = std::time::Instant::now();
                let mlp_start = crate::device::launches::issued();
                x = if residual { h } else { self.on_device(x, block.home) + h };
                x = block.mlp.with_residual(x, &block.mlp_norm, Linear::forward);
                let mlp_launches = launched_since(mlp_start);
                if sync {
                    wait_for(&x);
                }
                if let Some(times) = times.as_deref_mut() {
                    times.attn.push(attn_cost.time);
                    times.mlp.push(t_mlp.elapsed());
                    if let Some(l) = times.launches.as_mut() {
                        l.attn.push(attn_cost.launches.unwrap_or(0));
                        l.mlp.push(mlp_launches.unwrap_or(0));
                    }
                }
            }
        }
        cache.advance(n, groups.first_fuzzy_layer());
        Ok(Some(self.norm.forward(self.on_device(x, self.head))))
    }
}
