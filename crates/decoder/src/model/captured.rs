//! Decode calls of a few rows, recorded once per row count and replayed: a CUDA graph on
//! `cuda` (one dispatch for the whole call), CubeCL's software graph on `wgpu` (the launches
//! re-encoded from state resolved at recording). A one-row step of the 1.5B target issues 173
//! launches (6 a layer, the embedding lookup, the final norm, the head and the argmax's two); a
//! replay issues none of them from the host. Three calls are recorded: the greedy one-row
//! step ([`CapturedDecode::next`], its argmax left on the device), a verification of up to
//! [`RECORDED_ROWS_MAX`] rows, a chain or a token tree ([`CapturedDecode::scores`], every row's
//! logits read back, or [`CapturedDecode::best`], every row's argmax), and a draft step
//! ([`CapturedDecode::last`], the last row's logits and hidden state read back).
//!
//! A recording keeps the kernels' launch arguments and buffers, so every input that changes
//! from call to call lives in a device buffer the recording owns and is rewritten before each
//! replay: the tokens, the RoPE angles of their positions, the cached length (which the
//! RoPE and cache-write kernel and attention read: `cube::step_buffer`; attention masks the
//! rows causally from it), and a tree call's additive mask (over the tree's own keys, so its
//! size is fixed by the tree's rows). What a recording cannot follow starts a new one: the cache's
//! storage moving (it grows, or is copied because a clone shares it) and attention's number of
//! 256-key chunks (its launch's size), so each row count is recorded again every 256 positions
//! at most.
//! The first call of a recording is the plain forward it then records: its results are that
//! call's, so recording costs no forward of its own.

use super::layers::{RowMask, rope_tables, rope_tables_at, tree_mask_values};
use super::{PositionTables, Transformer, TreeRows, tail_rows};
use crate::cache::KvCache;
use crate::tree_mask::TreeMask;
use anyhow::{Context, Result, ensure};
use burn::tensor::{Int, Tensor};
use burn_cubecl::Cube;
use burn_cubecl::cubecl::bytes::Bytes;
use burn_cubecl::cubecl::client::Graph;
use burn_cubecl::tensor::CubeTensor;
use std::sync::Arc;

/// The most rows a recorded call takes (attention's query rows per cube stay few; a longer
/// forward, a prefill, runs plainly).
pub const RECORDED_ROWS_MAX: usize = 16;

/// Replays so far in this process (a check reads it to see that recorded calls ran).
static REPLAYS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Replays of recorded calls so far in this process.
pub fn replays() -> u64 {
    REPLAYS.load(std::sync::atomic::Ordering::Relaxed)
}

/// What a call leaves for its caller: every row's greedy token, every row's logits, or the
/// last row's logits and hidden state.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Output {
    Greedy,
    Scores,
    Last,
}

/// What a recording was made for: the cache (its identity and the memory of every layer's
/// storage), the rows and their output, a tree call's cached tree rows (its mask's width is
/// those plus the rows), and attention's chunks of keys.
#[derive(Clone, PartialEq, Eq, Debug)]
struct Shape {
    cache: u64,
    storage: Vec<usize>,
    rows: usize,
    output: Output,
    tree: Option<usize>,
    chunks: usize,
}

/// The call's inputs on the device, rewritten before each replay.
struct Inputs {
    tokens: Tensor<1, Int>,
    rope: (Tensor<2>, Tensor<2>),
    mask: RowMask,
}

/// A call's results on the device.
enum Outputs {
    /// The argmax of every row's logits (value, column).
    Picked(Tensor<1>),
    /// `[1, rows, vocab]`.
    Logits(Tensor<3>),
    /// The last row's logits `[1, 1, vocab]` and final hidden state `[1, 1, hidden]`.
    Last(Tensor<3>, Tensor<3>),
}

/// What a call's results read back to the host.
enum Read {
    Tokens(Vec<u32>),
    Scores(Vec<Vec<f32>>),
    Last(Vec<f32>, Vec<f32>),
}

impl Outputs {
    fn read(&self) -> Read {
        match self {
            Outputs::Picked(p) => Read::Tokens(crate::cube::read_picks(p.clone(), 1).iter().map(|r| r[0].0).collect()),
            Outputs::Logits(l) => Read::Scores(tail_rows(l, l.dims()[1])),
            Outputs::Last(l, h) => Read::Last(tail_rows(l, 1).remove(0), tail_rows(h, 1).remove(0)),
        }
    }
}

/// One recording and the buffers it reads and writes.
struct Recording {
    graph: Graph,
    shape: Shape,
    inputs: Inputs,
    outputs: Outputs,
}

/// Recorded decode calls of one model on one cache at a time: one recording per row count and
/// output, replayed ([`CapturedDecode::next`], [`CapturedDecode::scores`],
/// [`CapturedDecode::last`]).
pub struct CapturedDecode {
    held: Vec<Recording>,
    /// Why the runtime refused to record, after which every call forwards plainly.
    refused: Option<String>,
    /// Recordings made so far (a row count's first call, then one per storage move or new
    /// attention chunk).
    pub recordings: usize,
    /// Replays without their inputs rewritten: a broken call, for the device check to catch.
    pub(crate) stale_inputs: bool,
    /// Replays into storage a clone of the cache shares: a broken call, for the device check
    /// to catch.
    pub(crate) shared_storage: bool,
    /// Treats every recording as refused, as a runtime without graph capture does: the device
    /// check runs the plain fallback on a runtime that records.
    pub(crate) refuse: bool,
}

impl Transformer {
    /// The forward of `rows` rows from the device buffers of `inputs`, through the exact
    /// (sequential) layer loop, then the head of the rows `output` reads (and for a greedy step
    /// its argmax), left on the device.
    fn call_from(&self, inputs: &Inputs, rows: usize, cache: &mut KvCache, output: Output) -> Result<Outputs> {
        let super::layers::Embedding::DeviceBlocks(table) = &self.embed else {
            anyhow::bail!("a captured call looks its tokens up from GGUF blocks on the device");
        };
        let x = table.lookup_ids(&inputs.tokens).reshape([1, rows, self.cfg.hidden_size]);
        let tables: Vec<PositionTables> = vec![(inputs.rope.clone(), inputs.mask.clone())];
        let hidden = self
            .run_layers(x, cache, &tables, rows, None, None, &self.sequential, 1, None)?
            .expect("no cancel flag, never cancelled");
        Ok(match output {
            Output::Greedy => Outputs::Picked(crate::cube::launch_top_k(&self.logits(hidden), rows, 1)),
            Output::Scores => Outputs::Logits(self.logits(hidden)),
            Output::Last => {
                let last = hidden.slice([0..1, rows - 1..rows, 0..self.cfg.hidden_size]);
                Outputs::Last(self.logits(last.clone()), last)
            }
        })
    }
}

/// `data` written over the buffer behind `t`, in place (the pointer a recording holds).
fn overwrite(t: CubeTensor, data: Vec<u8>) {
    t.client.write(&t.handle, Bytes::from_bytes_vec(data));
}

/// The CubeCL tensor behind `t`.
macro_rules! cube {
    ($t:expr) => {
        $t.clone().try_into_primitive::<Cube>().expect("a tensor on a CubeCL device")
    };
}

/// Query heads per kv head: the rows of a tree mask's groups.
fn groups(model: &Transformer) -> usize {
    let cfg = model.config();
    cfg.num_attention_heads / cfg.num_key_value_heads
}

/// The RoPE tables of a call of `rows` rows after `past` cached positions: positions `past..`,
/// or a tree's (the tree's first row's position plus each row's depth).
fn rope_of(
    model: &Transformer,
    past: usize,
    rows: usize,
    tree: Option<&TreeMask>,
    device: &crate::Device,
) -> (Tensor<2>, Tensor<2>) {
    let freqs = model.config().rope_inv_freqs();
    match tree {
        Some(t) => {
            rope_tables_at(&(0..rows).map(|i| past - t.cached() + t.depth(i)).collect::<Vec<_>>(), &freqs, device)
        }
        None => rope_tables(past, rows, &freqs, device),
    }
}

fn f32_bytes(t: Tensor<2>) -> Vec<u8> {
    t.into_data().try_to_vec::<f32>().expect("f32 tables").iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// Gives every layer of `cache` storage that no clone shares (a copy where one does). A replay
/// writes into the memory it recorded, where a plain forward copies shared storage before
/// writing it ([`crate::cube::writable`]): without this, replaying on a cache rolled back
/// below a clone's length would rewrite the clone's keys and values. The copy moves the
/// storage, so the call is recorded again.
fn own_storage(cache: &mut KvCache) {
    for t in cache.storage_mut() {
        let owned = crate::cube::writable(t.extract());
        *t = Tensor::from_primitive::<Cube>(owned);
    }
}

/// The memory of every layer's storage in `cache` (ids never reused by a later allocation).
fn storage_ids(cache: &KvCache) -> Vec<usize> {
    cache.storage().map(|t| cube!(t).handle.memory.descriptor().id.value).collect()
}

impl Default for CapturedDecode {
    fn default() -> Self {
        Self::new()
    }
}

impl CapturedDecode {
    pub fn new() -> Self {
        Self {
            held: Vec::new(),
            refused: None,
            recordings: 0,
            stale_inputs: false,
            shared_storage: false,
            refuse: false,
        }
    }

    /// Why the runtime refused to record a call (every call since forwarded plainly), if it did.
    pub fn refused(&self) -> Option<&str> {
        self.refused.as_deref()
    }

    /// Forwards `token` after what `cache` holds (one row, appended to the cache) and returns
    /// the greedy token after it: what `generate::greedy_token` of `model.forward(&[token],
    /// cache)` returns, from a replay of a recorded step.
    pub fn next(&mut self, model: &Transformer, token: u32, cache: &mut KvCache) -> Result<u32> {
        Ok(self.best(model, &[token], cache)?[0])
    }

    /// Forwards `tokens` (1 to [`RECORDED_ROWS_MAX`]) after what `cache` holds and returns the
    /// greedy token after each: the argmax of each row of `model.forward_scores(tokens, cache,
    /// tokens.len(), None)`, computed on the device (token ids come back, not rows), from a
    /// replay of the call recorded for that many rows.
    pub fn best(&mut self, model: &Transformer, tokens: &[u32], cache: &mut KvCache) -> Result<Vec<u32>> {
        match self.call(model, tokens, None, cache, Output::Greedy)? {
            Read::Tokens(t) => Ok(t),
            _ => unreachable!("a greedy call reads its tokens"),
        }
    }

    /// Forwards `tokens` (1 to [`RECORDED_ROWS_MAX`]) after what `cache` holds and returns
    /// the logits of each: what `model.forward_scores(tokens, cache, tokens.len(), None)`
    /// returns, from a replay of the call recorded for that many rows.
    pub fn scores(&mut self, model: &Transformer, tokens: &[u32], cache: &mut KvCache) -> Result<Vec<Vec<f32>>> {
        match self.call(model, tokens, None, cache, Output::Scores)? {
            Read::Scores(s) => Ok(s),
            _ => unreachable!("a verification reads its scores"),
        }
    }

    /// A tree call (`tokens` the rows of `tree`, 1 to [`RECORDED_ROWS_MAX`]) after what `cache`
    /// holds: every row's logits, or (`greedy`) every row's argmax picked on the device, as
    /// `model.forward_tree(tokens, tree, cache)` gives them, from a replay of the call recorded
    /// for that many rows and cached tree rows, its mask rewritten.
    pub fn tree(
        &mut self,
        model: &Transformer,
        tokens: &[u32],
        tree: &TreeMask,
        cache: &mut KvCache,
        greedy: bool,
    ) -> Result<TreeRows> {
        let output = if greedy { Output::Greedy } else { Output::Scores };
        Ok(match self.call(model, tokens, Some(tree), cache, output)? {
            Read::Tokens(t) => TreeRows::Best(t),
            Read::Scores(s) => TreeRows::Scores(s),
            Read::Last(..) => unreachable!("a tree call reads its rows"),
        })
    }

    /// Forwards `tokens` (1 to [`RECORDED_ROWS_MAX`]) after what `cache` holds and returns the
    /// last one's logits and final hidden state: what a drafter reads of `model.forward(tokens,
    /// cache)`, from a replay of the call recorded for that many rows.
    pub fn last(&mut self, model: &Transformer, tokens: &[u32], cache: &mut KvCache) -> Result<(Vec<f32>, Vec<f32>)> {
        match self.call(model, tokens, None, cache, Output::Last)? {
            Read::Last(logits, hidden) => Ok((logits, hidden)),
            _ => unreachable!("a draft step reads its last row"),
        }
    }

    /// The call of `tokens` for `output`: a replay of its recording, recorded first where
    /// none fits; a plain forward once the runtime has refused a recording. The cache may be
    /// cloned between calls: the clone keeps its keys and values ([`own_storage`]).
    fn call(
        &mut self,
        model: &Transformer,
        tokens: &[u32],
        tree: Option<&TreeMask>,
        cache: &mut KvCache,
        output: Output,
    ) -> Result<Read> {
        ensure!(model.can_capture(), "this model's decode calls cannot be recorded");
        ensure!(cache.batch() == 1, "a captured call decodes one sequence");
        let rows = tokens.len();
        ensure!((1..=RECORDED_ROWS_MAX).contains(&rows), "a recorded call of {rows} rows (1 to {RECORDED_ROWS_MAX})");
        ensure!(
            tree.is_none_or(|t| t.len() == rows),
            "{rows} tokens for a tree of {} rows",
            tree.map_or(0, |t| t.len())
        );
        ensure!(tree.is_none_or(|t| t.cached() <= cache.len()), "a tree's cached rows are more than the cache holds");
        let tokens = &model.embeddable(tokens.iter().copied())?;
        if self.refused.is_some() {
            return plain(model, tokens, tree, cache, output);
        }
        let past = cache.len();
        model.config().check_positions(past + rows)?;
        cache.reserve(rows);
        if !self.shared_storage {
            own_storage(cache);
        }
        let chunks = (past + rows).div_ceil(crate::cube::ATTENTION_CHUNK);
        let shape = Shape {
            cache: cache.id(),
            storage: storage_ids(cache),
            rows,
            output,
            tree: tree.map(TreeMask::cached),
            chunks,
        };
        // Recordings of another cache or storage write memory this cache no longer uses: they go
        // first (with the buffers they hold), and so does this call's own if its shape changed.
        self.held.retain(|r| r.shape.cache == shape.cache && r.shape.storage == shape.storage);
        let kind = |s: &Shape| (s.rows, s.output, s.tree);
        self.held.retain(|r| kind(&r.shape) != kind(&shape) || r.shape == shape);
        let Some(r) = self.held.iter().find(|r| r.shape == shape) else {
            let tree = tree.map(|t| Arc::new(t.clone()));
            let (recording, read) = record(model, tokens, tree.as_ref(), cache, shape)?;
            let recording = if self.refuse { Err("refused by request".to_string()) } else { recording };
            match recording {
                Ok(recording) => {
                    self.held.push(recording);
                    self.recordings += 1;
                }
                Err(why) => {
                    eprintln!("specx: the runtime refused to record a decode call ({why}); forwarding plainly");
                    self.refused = Some(why);
                }
            }
            cache.advance(rows, None);
            return Ok(read);
        };
        if !self.stale_inputs {
            let (cos, sin) = rope_of(model, past, rows, tree, &crate::Device::flex());
            overwrite(cube!(r.inputs.tokens), tokens.iter().flat_map(|t| t.to_le_bytes()).collect());
            overwrite(cube!(r.inputs.rope.0), f32_bytes(cos));
            overwrite(cube!(r.inputs.rope.1), f32_bytes(sin));
            overwrite(cube!(r.inputs.mask.step_tensor()), (past as u32).to_le_bytes().to_vec());
            if let (Some(tree), Some(mask)) = (tree, r.inputs.mask.tree_additive()) {
                overwrite(
                    cube!(mask),
                    tree_mask_values(tree, groups(model)).iter().flat_map(|v| v.to_le_bytes()).collect(),
                );
            }
        }
        // SAFETY: every buffer the recording reads or writes is alive: its inputs and outputs are
        // held in `r`, the cache's storage (the same memory, checked above) by `cache`, the
        // weights by `model`, and the intermediates by the graph itself; the writes above, the
        // replay and the read below are issued from this thread's stream, in that order.
        unsafe { r.graph.replay() }.map_err(|e| anyhow::anyhow!("replaying a recorded decode call: {e:?}"))?;
        REPLAYS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        cache.advance(rows, None);
        Ok(r.outputs.read())
    }
}

/// The call of `tokens` for `output` by the plain forward (where the runtime refused to record).
fn plain(
    model: &Transformer,
    tokens: &[u32],
    tree: Option<&TreeMask>,
    cache: &mut KvCache,
    output: Output,
) -> Result<Read> {
    if let Some(tree) = tree {
        let out = model.forward_tree(tokens, tree, cache)?;
        return Ok(match output {
            Output::Greedy => Read::Tokens(out.best_tokens(tokens.len())),
            _ => Read::Scores(out.logits_tail(tokens.len())),
        });
    }
    if output == Output::Scores {
        let scores = model.forward_scores(tokens, cache, tokens.len(), None)?.expect("no cancel flag");
        return Ok(Read::Scores(scores));
    }
    let out = model.forward(tokens, cache)?;
    Ok(match output {
        Output::Greedy => Read::Tokens(out.device_argmax(tokens.len()).expect("a model that records is on a GPU")),
        _ => {
            let (logits, hidden) = out.last_position();
            Read::Last(logits, hidden)
        }
    })
}

/// Runs the call of `tokens` after what `cache` holds (room for them reserved; the cache's
/// length left unchanged) and records it for `shape`. The plain run comes first: the memory
/// pools then hold every buffer the recorded one asks for, and its results, read back before
/// recording, are the call's. The recorded run executes nothing on CUDA; on `wgpu` it writes
/// the same keys and values again. Where the runtime refuses to record, the plain run's
/// results come back with its reason.
fn record(
    model: &Transformer,
    tokens: &[u32],
    tree: Option<&Arc<TreeMask>>,
    cache: &mut KvCache,
    shape: Shape,
) -> Result<(std::result::Result<Recording, String>, Read)> {
    let (past, rows) = (cache.len(), tokens.len());
    let device = model.device();
    let inputs = Inputs {
        tokens: crate::cube::words_on(tokens.to_vec(), device),
        rope: rope_of(model, past, rows, tree.map(|t| &**t), device),
        mask: RowMask::new(past, rows, tree, groups(model), device),
    };
    let client = cube!(inputs.tokens).client;
    let failed = |what: &str, e: burn_cubecl::cubecl::server::ServerError| format!("{what}: {e:?}");
    let prepared = client.graph_prepare().map_err(|e| failed("preparing to record", e));
    let plain = model.call_from(&inputs, rows, cache, shape.output);
    cache.truncate(past);
    let read = plain.context("the plain run of a recorded decode call")?.read();
    if let Err(why) = prepared {
        return Ok((Err(why), read));
    }
    if let Err(e) = client.start_capture() {
        return Ok((Err(failed("starting to record", e)), read));
    }
    let outputs = model.call_from(&inputs, rows, cache, shape.output);
    cache.truncate(past);
    // Capture ends whatever the forward did, so the client never stays recording.
    let graph = client.stop_capture().map_err(|e| failed("recording", e));
    let outputs = outputs.context("the recorded run of a decode call")?;
    Ok((graph.map(|graph| Recording { graph, shape, inputs, outputs }), read))
}
