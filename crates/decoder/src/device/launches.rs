//! Counting the kernels a GPU forward launches: the figure a launch-bound path is judged by
//! (`specx profile --device wgpu|cuda` prints it per layer; a test on Vulkan pins its bound).
//!
//! CubeCL tells a process-wide observer of every kernel issued, on the issuing thread, before
//! it is submitted. [`LaunchCounter::start`] installs one for as long as the counter lives;
//! [`issued`] reads the running total from anywhere (the layer loop reads it at sublayer
//! boundaries). Without burn's fusion every tensor operation launches when it is called, so a
//! count taken around a sublayer is that sublayer's. Counted launches are issued, not
//! finished: a sublayer's count is exact whether or not the device has run them yet.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The launches seen since a [`LaunchCounter`] started: in all, and per kernel name.
#[derive(Default)]
struct Tally {
    total: AtomicU64,
    by_kernel: Mutex<BTreeMap<&'static str, u64>>,
}

/// The installed counter's tally, for [`issued`] (one slot: counters do not nest).
static ACTIVE: Mutex<Option<Arc<Tally>>> = Mutex::new(None);
/// Whether a counter runs: what [`issued`] reads first, so that a forward with no counter (every
/// ordinary one, on any device) takes no lock at its sublayer boundaries.
static COUNTING: AtomicBool = AtomicBool::new(false);

/// Counts every kernel launched on any GPU device while it lives. `None` from
/// [`LaunchCounter::start`] in a build without a GPU backend (the CPU path launches nothing).
pub struct LaunchCounter {
    tally: Arc<Tally>,
    #[cfg(any(feature = "wgpu", feature = "cuda"))]
    _observation: cubecl_runtime::logging::LaunchObservation,
}

#[cfg(any(feature = "wgpu", feature = "cuda"))]
struct Observer(Arc<Tally>);

#[cfg(any(feature = "wgpu", feature = "cuda"))]
impl cubecl_runtime::logging::LaunchObserver for Observer {
    fn launched(&self, kernel: &'static str) {
        self.0.total.fetch_add(1, Ordering::Relaxed);
        *self.0.by_kernel.lock().expect("launch tally").entry(kernel).or_default() += 1;
    }
}

impl LaunchCounter {
    /// Starts counting, or `None` where this build has no GPU backend. Panics if a counter is
    /// already running: two would each see the other's launches.
    pub fn start() -> Option<Self> {
        #[cfg(any(feature = "wgpu", feature = "cuda"))]
        {
            let tally = Arc::new(Tally::default());
            let mut active = ACTIVE.lock().expect("launch counter slot");
            assert!(active.is_none(), "a launch counter is already running");
            *active = Some(tally.clone());
            COUNTING.store(true, Ordering::Release);
            let observation = cubecl_runtime::logging::LaunchObservation::new(Arc::new(Observer(tally.clone())));
            Some(Self { tally, _observation: observation })
        }
        #[cfg(not(any(feature = "wgpu", feature = "cuda")))]
        None
    }

    /// Launches since the counter started, per kernel name as CubeCL names it, most first.
    pub fn by_kernel(&self) -> Vec<(String, u64)> {
        let mut v: Vec<(String, u64)> =
            self.tally.by_kernel.lock().expect("launch tally").iter().map(|(k, &n)| (k.to_string(), n)).collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        v
    }
}

impl Drop for LaunchCounter {
    fn drop(&mut self) {
        COUNTING.store(false, Ordering::Release);
        *ACTIVE.lock().expect("launch counter slot") = None;
    }
}

/// The running counter's total, or `None` when none is running.
pub fn issued() -> Option<u64> {
    if !COUNTING.load(Ordering::Acquire) {
        return None;
    }
    ACTIVE.lock().expect("launch counter slot").as_ref().map(|t| t.total.load(Ordering::Relaxed))
}
