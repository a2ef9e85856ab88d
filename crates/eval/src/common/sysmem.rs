//! Machine measurements for benchmarks: memory read bandwidth and the process's peak RSS.

use std::time::Instant;

/// Sustained read bandwidth in bytes/s: every core sums its share of a buffer much larger than
/// the caches, with independent accumulators so the loop is load-bound, not add-bound. Best of
/// `passes` passes (the first touches the pages).
pub fn read_bandwidth(bytes: usize, passes: usize) -> f64 {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    read_bandwidth_threads(bytes, passes, threads)
}

/// [`read_bandwidth`] with an explicit thread count.
pub fn read_bandwidth_threads(bytes: usize, passes: usize, threads: usize) -> f64 {
    const LANES: usize = 32;
    let n = bytes / 4 / (LANES * threads) * (LANES * threads);
    let buf: Vec<f32> = (0..n).map(|i| (i % 7) as f32).collect();
    let mut best = f64::MAX;
    let mut checksum = 0f32;
    for _ in 0..passes.max(1) {
        let t = Instant::now();
        let sum: f32 = std::thread::scope(|s| {
            let handles: Vec<_> = buf
                .chunks(n / threads)
                .map(|chunk| {
                    s.spawn(move || {
                        let mut acc = [0f32; LANES];
                        for block in chunk.chunks_exact(LANES) {
                            for (a, x) in acc.iter_mut().zip(block) {
                                *a += *x;
                            }
                        }
                        acc.iter().sum::<f32>()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().expect("bandwidth thread")).sum()
        });
        best = best.min(t.elapsed().as_secs_f64());
        checksum += sum;
    }
    std::hint::black_box(checksum);
    (n * 4) as f64 / best
}

/// Peak resident set size of this process in bytes (Linux `VmHWM`), if known.
pub fn peak_rss_bytes() -> Option<u64> {
    proc_status_kib("VmHWM:").map(|k| k * 1024)
}

/// Current resident set size in bytes (Linux `VmRSS`), if known.
pub fn current_rss_bytes() -> Option<u64> {
    proc_status_kib("VmRSS:").map(|k| k * 1024)
}

fn proc_status_kib(key: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(key))?;
    line[key.len()..].trim().trim_end_matches("kB").trim().parse().ok()
}
