//! The KV cache: an explicit value owned by the caller, so that speculative decoding can
//! roll it back (`truncate`) and DSI/EasySpec can hold several per model.
//!
//! Storage is preallocated per layer as `[batch, kv_heads, capacity, head_dim]` and written in
//! place with `slice_assign`; the logical length is a counter, so truncation costs nothing and
//! stale positions past `len` are never read (attention slices `0..len`).

use crate::config::ModelConfig;
use burn::tensor::{Device, Int, Tensor, TensorData};

/// Positions are allocated in steps of this many, to grow rarely.
const GROW_STEP: usize = 256;

/// Identities of caches, one per cache and per clone ([`KvCache::id`]).
static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn next_id() -> u64 {
    NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Keys and values of every layer for `batch` sequences of equal length.
#[derive(Debug)]
pub struct KvCache {
    /// This cache's identity (a clone gets its own): what a recorded step was recorded on.
    id: u64,
    layers: Vec<(Tensor<4>, Tensor<4>)>,
    /// Per layer: positions `0..precise[l]` hold the exact forward's keys and values (a fuzzy
    /// EasySpec forward leaves the entries of its stale-input layers approximate).
    precise: Vec<usize>,
    len: usize,
    capacity: usize,
    batch: usize,
    kv_heads: usize,
    head_dim: usize,
    /// Per layer: the device that holds its keys and values (the device of the layer's
    /// attention; EasySpec places a draft's attentions on several devices).
    devices: Vec<Device>,
}

impl Clone for KvCache {
    /// The same keys and values (sharing storage until either writes), under a new identity.
    fn clone(&self) -> Self {
        Self {
            id: next_id(),
            layers: self.layers.clone(),
            precise: self.precise.clone(),
            len: self.len,
            capacity: self.capacity,
            batch: self.batch,
            kv_heads: self.kv_heads,
            head_dim: self.head_dim,
            devices: self.devices.clone(),
        }
    }
}

impl KvCache {
    /// An empty cache for `batch` sequences of a model with configuration `cfg`.
    pub fn new(cfg: &ModelConfig, batch: usize, device: &Device) -> Self {
        Self::on_devices(cfg, batch, &vec![device.clone(); cfg.num_hidden_layers])
    }

    /// An empty cache whose layer `l` lives on `devices[l]` (one device per layer).
    pub fn on_devices(cfg: &ModelConfig, batch: usize, devices: &[Device]) -> Self {
        assert_eq!(devices.len(), cfg.num_hidden_layers, "one device per layer");
        let mut cache = Self {
            id: next_id(),
            layers: Vec::with_capacity(cfg.num_hidden_layers),
            precise: vec![0; cfg.num_hidden_layers],
            len: 0,
            capacity: 0,
            batch,
            kv_heads: cfg.num_key_value_heads,
            head_dim: cfg.head_dim,
            devices: devices.to_vec(),
        };
        for device in devices {
            let empty = Tensor::zeros([batch, cache.kv_heads, 0, cache.head_dim], device);
            cache.layers.push((empty.clone(), empty));
        }
        cache
    }

    /// This cache's identity, distinct from every other cache's and clone's.
    #[cfg_attr(not(any(feature = "wgpu", feature = "cuda")), allow(dead_code))]
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// Number of cached positions.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn batch(&self) -> usize {
        self.batch
    }

    /// Drops every position from `n` on. Panics if `n > len()`: growing a cache by truncation
    /// would expose stale keys, which is always a caller bug.
    pub fn truncate(&mut self, n: usize) {
        assert!(n <= self.len, "KvCache::truncate({n}) beyond its length {}", self.len);
        self.len = n;
        for p in &mut self.precise {
            *p = (*p).min(n);
        }
    }

    /// Keeps, of the positions from `from` on, those at offsets `rows` (increasing), moved to
    /// `from, from + 1, ...`, and drops the rest: after a tree call, the accepted path's keys
    /// and values become the cache's next positions. A layer exact up to the old length is
    /// exact up to the new one.
    pub fn retain_rows(&mut self, from: usize, rows: &[usize]) {
        assert!(from <= self.len, "KvCache::retain_rows from {from} beyond its length {}", self.len);
        assert!(rows.windows(2).all(|w| w[0] < w[1]), "rows to keep must increase: {rows:?}");
        assert!(rows.last().is_none_or(|&r| from + r < self.len), "rows {rows:?} past {from} beyond {}", self.len);
        let moved: Vec<usize> = rows.iter().enumerate().filter(|&(i, &r)| i != r).map(|(i, _)| i).collect();
        if let Some(&first) = moved.first() {
            // Rows before `first` are in place already; the rest are gathered in one select.
            let ids: Vec<i64> = rows[first..].iter().map(|&r| (from + r) as i64).collect();
            let at = [0..self.batch, 0..self.kv_heads, from + first..from + rows.len(), 0..self.head_dim];
            for ((k, v), device) in self.layers.iter_mut().zip(&self.devices) {
                let index = Tensor::<1, Int>::from_data(TensorData::new(ids.clone(), [ids.len()]), device);
                for t in [k, v] {
                    let kept = t.clone().select(2, index.clone());
                    t.inplace(|t| t.slice_assign(at.clone(), kept));
                }
            }
        }
        let new_len = from + rows.len();
        for p in &mut self.precise {
            *p = if *p == self.len { new_len } else { (*p).min(from) };
        }
        self.len = new_len;
    }

    /// Positions of every layer that hold exact keys and values: the cache is exact up to
    /// here, and a calibration truncates to it and forwards the rest exactly again.
    pub fn precise_len(&self) -> usize {
        self.precise.iter().copied().min().unwrap_or(self.len)
    }

    /// Keys and values of `layer` at positions `0..len()` on the host, flattened
    /// `[batch, kv_heads, len, head_dim]` (for checks and similarity measurements).
    pub fn layer_data(&self, layer: usize) -> (Vec<f32>, Vec<f32>) {
        let r = [0..self.batch, 0..self.kv_heads, 0..self.len, 0..self.head_dim];
        let (k, v) = &self.layers[layer];
        let host = |t: &Tensor<4>| t.clone().slice(r.clone()).into_data().try_into_vec::<f32>().expect("f32 cache");
        (host(k), host(v))
    }

    /// Exact positions of each layer (the per-layer watermarks behind [`Self::precise_len`]).
    pub fn layer_precise_lens(&self) -> &[usize] {
        &self.precise
    }

    /// Every layer's key and value storage (`[batch, kv_heads, capacity, head_dim]`): what a
    /// captured step binds, so that it can tell when any of them has moved.
    #[cfg(any(feature = "wgpu", feature = "cuda"))]
    pub(crate) fn storage(&self) -> impl Iterator<Item = &Tensor<4>> {
        self.layers.iter().flat_map(|(k, v)| [k, v])
    }

    /// Every layer's key and value storage, to replace: a recorded call gives the cache
    /// storage that no clone shares.
    #[cfg(any(feature = "wgpu", feature = "cuda"))]
    pub(crate) fn storage_mut(&mut self) -> impl Iterator<Item = &mut Tensor<4>> {
        self.layers.iter_mut().flat_map(|(k, v)| [k, v])
    }

    /// Makes room for `extra` more positions than are cached now.
    pub(crate) fn reserve(&mut self, extra: usize) {
        let need = self.len + extra;
        if need <= self.capacity {
            return;
        }
        let capacity = need.max(2 * self.capacity).div_ceil(GROW_STEP) * GROW_STEP;
        let shape = [self.batch, self.kv_heads, capacity, self.head_dim];
        let keep = [0..self.batch, 0..self.kv_heads, 0..self.len, 0..self.head_dim];
        for ((k, v), device) in self.layers.iter_mut().zip(&self.devices) {
            for t in [k, v] {
                let old = t.extract().slice(keep.clone());
                *t = Tensor::zeros(shape, device).slice_assign(keep.clone(), old);
            }
        }
        self.capacity = capacity;
    }

    /// The cache of one layer, to write its new keys and values.
    pub(crate) fn slot(&mut self, layer: usize) -> LayerSlot<'_> {
        self.slots(layer..layer + 1).pop().expect("one layer")
    }

    /// The caches of `layers`, each borrowed apart from the others so that the attentions of
    /// an EasySpec layer group can write their own layers from different threads.
    pub(crate) fn slots(&mut self, layers: std::ops::Range<usize>) -> Vec<LayerSlot<'_>> {
        let (len, batch, kv_heads, head_dim) = (self.len, self.batch, self.kv_heads, self.head_dim);
        self.layers[layers]
            .iter_mut()
            .map(|(keys, values)| LayerSlot { keys, values, len, batch, kv_heads, head_dim })
            .collect()
    }

    /// Moves the length past `n` rows every layer has written. Layers before `first_fuzzy`
    /// (all of them if `None`) computed exactly; their new entries are exact if every layer up
    /// to them was exact so far (a layer's input depends on all the layers below it).
    pub(crate) fn advance(&mut self, n: usize, first_fuzzy: Option<usize>) {
        let mut exact = true;
        for (l, p) in self.precise.iter_mut().enumerate() {
            exact &= *p == self.len && first_fuzzy.is_none_or(|f| l < f);
            if exact {
                *p = self.len + n;
            }
        }
        self.len += n;
    }
}

/// One layer's keys and values, borrowed from a [`KvCache`] (see [`KvCache::slots`]).
pub(crate) struct LayerSlot<'a> {
    keys: &'a mut Tensor<4>,
    values: &'a mut Tensor<4>,
    len: usize,
    batch: usize,
    kv_heads: usize,
    head_dim: usize,
}

impl LayerSlot<'_> {
    /// Writes `k`, `v` (`[batch, kv_heads, n, head_dim]`) at positions `len..len+n` and
    /// returns views of all `len+n` cached keys and values. The cache's length counter moves
    /// only in [`KvCache::advance`], after every layer has written.
    pub(crate) fn write(&mut self, k: Tensor<4>, v: Tensor<4>) -> (Tensor<4>, Tensor<4>) {
        let n = k.dims()[2];
        let at = [0..self.batch, 0..self.kv_heads, self.len..self.len + n, 0..self.head_dim];
        let all = [0..self.batch, 0..self.kv_heads, 0..self.len + n, 0..self.head_dim];
        self.keys.inplace(|t| t.slice_assign(at.clone(), k));
        self.values.inplace(|t| t.slice_assign(at, v));
        (self.keys.clone().slice(all.clone()), self.values.clone().slice(all))
    }

    /// Lets `write(keys, values, at)` write `n` rows into the layer's whole storage
    /// (`[batch, kv_heads, capacity, head_dim]`) at positions `at..at + n` (a fused kernel
    /// that computes them in place); returns what `write` returned and views of all `len + n`
    /// cached keys and values, as [`Self::write`] does.
    #[cfg(any(feature = "wgpu", feature = "cuda"))]
    pub(crate) fn write_with<R>(
        &mut self,
        n: usize,
        write: impl FnOnce((&mut Tensor<4>, &mut Tensor<4>), usize) -> R,
    ) -> (R, Tensor<4>, Tensor<4>) {
        let written = write((&mut *self.keys, &mut *self.values), self.len);
        let all = [0..self.batch, 0..self.kv_heads, 0..self.len + n, 0..self.head_dim];
        (written, self.keys.clone().slice(all.clone()), self.values.clone().slice(all))
    }
}
