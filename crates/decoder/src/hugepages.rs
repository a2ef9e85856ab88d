//! Weight buffers on transparent huge pages.
//!
//! One decoded token reads every weight once: about 1 GB for the 1.5B target in GGUF blocks,
//! 250,000 pages of 4 KiB, far more than the TLB holds, so every few KiB of a matrix costs a
//! page walk. Where the kernel's transparent huge pages are `madvise`-only (a common default),
//! buffers get 2 MiB pages only when asked. [`copy_advised`] asks before the first write, so
//! the pages are faulted in huge. `SPECX_HUGEPAGES=0` turns it off (to measure the
//! difference); elsewhere than Linux it is a plain copy.

/// Buffers smaller than this gain nothing: advice covers whole 2 MiB pages inside the buffer.
const HUGE: usize = 2 << 20;

/// Whether weight buffers ask for huge pages (`SPECX_HUGEPAGES=0` says no). Decided once.
pub fn enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("SPECX_HUGEPAGES").map_or(true, |v| v != "0"))
}

/// `bytes` copied into a new buffer whose whole 2 MiB pages were advised `MADV_HUGEPAGE`
/// before the copy touched them.
pub fn copy_advised(bytes: &[u8]) -> Vec<u8> {
    let mut data: Vec<u8> = Vec::with_capacity(bytes.len());
    if enabled() && bytes.len() >= 2 * HUGE {
        advise(data.as_mut_ptr(), bytes.len());
    }
    data.extend_from_slice(bytes);
    data
}

#[cfg(target_os = "linux")]
fn advise(ptr: *mut u8, len: usize) {
    let start = (ptr as usize).next_multiple_of(HUGE);
    let end = (ptr as usize + len) / HUGE * HUGE;
    if end > start {
        // SAFETY: [start, end) lies inside the allocation of `len` bytes at `ptr`; the advice
        // changes how pages are backed, never their contents. Failure (no THP) is harmless.
        unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
    }
}

#[cfg(not(target_os = "linux"))]
fn advise(_ptr: *mut u8, _len: usize) {}

#[cfg(test)]
mod tests {
    #[test]
    fn copies_exactly() {
        for len in [0, 1, 4095, (4 << 20) + 17] {
            let src: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
            assert_eq!(super::copy_advised(&src), src);
        }
    }
}
