//! A greedy one-row decode step recorded once and replayed: a CUDA graph on `cuda` (one
//! dispatch for the whole step), CubeCL's software graph on `wgpu` (the launches re-encoded
//! from state resolved at recording). A step of the 1.5B target issues 172 launches (6 a
//! layer, the embedding lookup, the final norm, the head and the argmax); a replay issues none
//! of them from the host.
//!
//! A recording keeps the kernels' launch arguments and buffers, so every input that changes
//! from step to step lives in a device buffer the step owns and is rewritten before each
//! replay: the token, the RoPE angles of its position, and the cached length (which the RoPE
//! and cache-write kernel and attention read: `cube::step_buffer`). What a recording cannot
//! follow starts a new one: the cache growing (its storage moves) and attention's number of
//! 256-key chunks (its launch's size), so a step is recorded again every 256 positions at most.

use super::layers::{RowMask, rope_tables};
use super::{PositionTables, Transformer};
use crate::cache::KvCache;
use anyhow::{Context, Result, ensure};
use burn::tensor::{Int, Tensor};
use burn_cubecl::Cube;
use burn_cubecl::cubecl::bytes::Bytes;
use burn_cubecl::cubecl::client::Graph;
use burn_cubecl::tensor::CubeTensor;

/// What a recording was made for: the cache (its identity and capacity) and attention's
/// chunks of keys.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Shape {
    cache: u64,
    capacity: usize,
    chunks: usize,
}

/// The step's inputs on the device, rewritten before each replay.
struct Inputs {
    token: Tensor<1, Int>,
    rope: (Tensor<2>, Tensor<2>),
    mask: RowMask,
}

/// One recording and the buffers it reads and writes.
struct Recording {
    graph: Graph,
    shape: Shape,
    inputs: Inputs,
    /// The argmax of the step's logits (value, column), where the replay leaves it.
    picked: Tensor<1>,
}

/// Greedy decode steps of one model and one cache, recorded and replayed
/// ([`CapturedDecode::next`]).
pub struct CapturedDecode {
    recording: Option<Recording>,
    /// Recordings made so far (the first, then one per cache growth or new attention chunk).
    pub recordings: usize,
    /// Replays without their inputs rewritten: a broken step, for the device check to catch.
    pub(crate) stale_inputs: bool,
}

impl Transformer {
    /// The forward of one row from the device buffers of `inputs`, through the exact
    /// (sequential) layer loop, then the head and its argmax, left on the device.
    fn step_from(&self, inputs: &Inputs, cache: &mut KvCache) -> Result<Tensor<1>> {
        let super::layers::Embedding::DeviceBlocks(table) = &self.embed else {
            anyhow::bail!("a captured step looks its token up from GGUF blocks on the device");
        };
        let x = table.lookup_ids(&inputs.token).reshape([1, 1, self.cfg.hidden_size]);
        let tables: Vec<PositionTables> = vec![(inputs.rope.clone(), inputs.mask.clone())];
        let hidden = self
            .run_layers(x, cache, &tables, 1, None, None, &self.sequential, 1, None)?
            .expect("no cancel flag, never cancelled");
        Ok(crate::cube::launch_top_k(&self.logits(hidden), 1, 1))
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

fn f32_bytes(t: Tensor<2>) -> Vec<u8> {
    t.into_data().try_to_vec::<f32>().expect("f32 tables").iter().flat_map(|v| v.to_le_bytes()).collect()
}

impl Default for CapturedDecode {
    fn default() -> Self {
        Self::new()
    }
}

impl CapturedDecode {
    pub fn new() -> Self {
        Self { recording: None, recordings: 0, stale_inputs: false }
    }

    /// Forwards `token` after what `cache` holds (one row, appended to the cache) and returns
    /// the greedy token after it: what `generate::greedy_token` of `model.forward(&[token],
    /// cache)` returns, from a replay of a recorded step. Records first where no recording
    /// fits this cache, its capacity and attention's chunks. Replays write into the cache's
    /// storage, which its clones share until they write themselves: clone it only between
    /// uses of this.
    pub fn next(&mut self, model: &Transformer, token: u32, cache: &mut KvCache) -> Result<u32> {
        ensure!(model.can_capture(), "this model's decode step cannot be recorded");
        ensure!(cache.batch() == 1, "a captured step decodes one sequence");
        let past = cache.len();
        cache.reserve(1);
        let chunks = (past + 1).div_ceil(crate::cube::ATTENTION_CHUNK);
        let shape = Shape { cache: cache.id(), capacity: cache.capacity(), chunks };
        if self.recording.as_ref().is_none_or(|r| r.shape != shape) {
            // The old recording's buffers (the cache's former storage among them) go first.
            self.recording = None;
            self.recording = Some(record(model, cache, shape)?);
            self.recordings += 1;
        }
        let r = self.recording.as_ref().expect("recorded above");
        let cfg = model.config();
        let (cos, sin) = rope_tables(past, 1, cfg.head_dim, cfg.rope_theta, &crate::Device::flex());
        if !self.stale_inputs {
            overwrite(cube!(r.inputs.token), token.to_le_bytes().to_vec());
            overwrite(cube!(r.inputs.rope.0), f32_bytes(cos));
            overwrite(cube!(r.inputs.rope.1), f32_bytes(sin));
            overwrite(cube!(r.inputs.mask.step_tensor()), (past as u32).to_le_bytes().to_vec());
        }
        // SAFETY: every buffer the recording reads or writes is alive: its inputs and output are
        // held in `r`, the cache's storage (same capacity, so not moved) by `cache`, the weights by
        // `model`, and the intermediates by the graph itself; the writes above, the replay and
        // the read below are issued from this thread's stream, in that order.
        unsafe { r.graph.replay() }.map_err(|e| anyhow::anyhow!("replaying the recorded decode step: {e:?}"))?;
        cache.advance(1, None);
        let picked = crate::cube::read_picks(r.picked.clone(), 1);
        Ok(picked[0][0].0)
    }
}

/// Records a step of `model` after what `cache` holds (room for it reserved), for `shape`: a
/// warm-up forward first (the memory pools then hold every buffer the recorded one asks for;
/// its cache writes are the replays' to redo), then the recorded one, which runs nothing.
fn record(model: &Transformer, cache: &mut KvCache, shape: Shape) -> Result<Recording> {
    let past = cache.len();
    let cfg = model.config();
    let device = model.device();
    let groups = cfg.num_attention_heads / cfg.num_key_value_heads;
    let inputs = Inputs {
        token: crate::cube::words_on(vec![0], device),
        rope: rope_tables(past, 1, cfg.head_dim, cfg.rope_theta, device),
        mask: RowMask::new(past, 1, None, groups, device),
    };
    let client = cube!(inputs.token).client;
    fn failed(what: &'static str) -> impl Fn(burn_cubecl::cubecl::server::ServerError) -> anyhow::Error {
        move |e| anyhow::anyhow!("{what} a decode step: {e:?}")
    }
    client.graph_prepare().map_err(failed("preparing to record"))?;
    let warm = model.step_from(&inputs, cache);
    cache.truncate(past);
    warm.context("the warm-up forward of a recorded decode step")?;
    client.start_capture().map_err(failed("starting to record"))?;
    let picked = model.step_from(&inputs, cache);
    cache.truncate(past);
    let graph = client.stop_capture().map_err(failed("recording"))?;
    Ok(Recording { graph, shape, inputs, picked: picked? })
}
