//! Weight panels: 16 rows of a matrix part interleaved so that one 64-byte vector holds four
//! consecutive quantized values of each of the 16 rows, the layout of the integer kernels of
//! [`super::panel_x86`].
//!
//! **Why.** With a row per register, an integer kernel pays its float steps (block scale
//! times activation scale, conversion, fused multiply-add) once per block, weight row and
//! activation row, and a 16-lane horizontal sum at the end: more instructions than the
//! products themselves for the 32-wide formats. With the 16 rows in the 16 lanes, one
//! `vpdpbusd` against four activation bytes broadcast to every lane computes 64 products for
//! 16 outputs, and every float step serves 16 outputs. This is the VNNI layout of oneDNN's
//! int8 GEMMs and of llama.cpp's repacked `block_q4_Kx8` (there 8 rows).
//!
//! **Same bytes, different order.** A panel holds exactly the bytes of its 16 rows' GGUF
//! blocks, permuted ([`position`]), so any row can be read back in GGUF order ([`gather_row`])
//! for the embedding lookup, the native decoder and the reference path, and the repacking is
//! done in place ([`repack`]). A part whose row count is not a multiple of 16 gets zero rows to
//! fill its last panel; their outputs are never read.
//!
//! Per block, the panel holds (offsets in the panel block of `16 * block_bytes` bytes; "a
//! vector of k-byte groups" is 16 rows x k bytes, row r at `k * r`):
//! - Q8_0 (34): `d` (16 x 2), then 8 vectors, vector t the four values `4t..4t+4` of each row.
//! - Q4_0 (18): `d`, then 4 vectors, vector v the four bytes `4v..4v+4` of each row's `qs`:
//!   low nibbles values `4v..`, high nibbles values `16 + 4v..`.
//! - Q5_0 (22): `d`, then `qh` (one 4-byte group per row), then `qs` as Q4_0's.
//! - Q4_K (144): `d`, `dmin`, the 12 scale bytes as 3 vectors, then `qs` as 32 vectors:
//!   vector `8p + v` holds bytes `32p + 4v..+4` (low nibbles: sub-block 2p, values 4v..; high:
//!   sub-block 2p + 1).
//! - Q5_K (176): Q4_K's `d`, `dmin` and scales, then `qh` as 8 vectors (vector v: bytes
//!   `4v..+4`, whose bit j is the fifth bit of sub-block j's values 4v..), then `qs` as Q4_K's:
//!   all in the order the kernel reads them.
//! - Q6_K (210): the 16 scales as 4 vectors, then for half h and v < 8 three vectors: `ql`
//!   bytes `64h + 4v..+4` and `64h + 32 + 4v..+4`, `qh` bytes `32h + 4v..+4` (the kernel reads
//!   them in this order: interleaved regions of `ql` and `qh` defeated the hardware
//!   prefetcher and halved one-row speed from memory), then `d`.
//!
//! Every kernel reads its panel block in ascending order, so a panel streams from memory like
//! a row.

use crate::gguf::GgmlType;

/// Weight rows per panel: the 16 i32 lanes of a 64-byte vector.
pub const PANEL: usize = 16;

/// Whether `ty` has a panel layout (and panel kernels).
pub fn has_panel(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::Q4K | GgmlType::Q5K | GgmlType::Q6K | GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0)
}

/// Where byte `i` of a block of row `r` (< 16) goes in the panel block.
pub fn position(ty: GgmlType, r: usize, i: usize) -> usize {
    // Byte j of a 4-byte group of vector `vec` starting at `base`.
    let group = |base: usize, vec: usize, j: usize| base + 64 * vec + 4 * r + j;
    match ty {
        // `d`, then the values (Q8_0) or nibble bytes (Q4_0) in 4-byte groups.
        GgmlType::Q8_0 | GgmlType::Q4_0 => {
            if i < 2 {
                2 * r + i
            } else {
                group(32, (i - 2) / 4, (i - 2) % 4)
            }
        }
        GgmlType::Q5_0 => match i {
            0..2 => 2 * r + i,
            2..6 => 32 + 4 * r + (i - 2),
            _ => group(96, (i - 6) / 4, (i - 6) % 4),
        },
        GgmlType::Q4K => match i {
            0..2 => 2 * r + i,
            2..4 => 32 + 2 * r + (i - 2),
            4..16 => group(64, (i - 4) / 4, (i - 4) % 4),
            _ => group(256, (i - 16) / 4, (i - 16) % 4),
        },
        GgmlType::Q5K => match i {
            0..2 => 2 * r + i,
            2..4 => 32 + 2 * r + (i - 2),
            4..16 => group(64, (i - 4) / 4, (i - 4) % 4),
            16..48 => group(256, (i - 16) / 4, (i - 16) % 4),
            _ => group(768, (i - 48) / 4, (i - 48) % 4),
        },
        GgmlType::Q6K => match i {
            0..128 => group(256, 3 * (8 * (i / 64) + (i % 32) / 4) + (i % 64) / 32, i % 4),
            128..192 => group(256, 3 * (8 * ((i - 128) / 32) + ((i - 128) % 32) / 4) + 2, i % 4),
            192..208 => group(0, (i - 192) / 4, i % 4),
            _ => 3328 + 2 * r + (i - 208),
        },
        _ => unreachable!("{ty:?} has no panel layout"),
    }
}

/// Byte runs of a block of row `r` that stay contiguous in the panel: `(from, to, len)`.
fn runs(ty: GgmlType, r: usize) -> Vec<(usize, usize, usize)> {
    let mut out: Vec<(usize, usize, usize)> = Vec::new();
    for i in 0..ty.block().1 {
        let to = position(ty, r, i);
        match out.last_mut() {
            Some((from, at, len)) if *from + *len == i && *at + *len == to => *len += 1,
            _ => out.push((i, to, 1)),
        }
    }
    out
}

/// Copies byte runs (`(from, to, len)`: `dst[to..]` from `src[from..]`); the 4-byte groups
/// that make up most of a block as single moves.
#[inline]
fn copy_runs(src: &[u8], dst: &mut [u8], runs: &[(usize, usize, usize)], forward: bool) {
    for &(from, to, len) in runs {
        let (s, d) = if forward { (from, to) } else { (to, from) };
        if len == 4 {
            dst[d..d + 4].copy_from_slice(&src[s..s + 4]);
        } else {
            dst[d..d + len].copy_from_slice(&src[s..s + len]);
        }
    }
}

/// Rearranges `rows` rows of `ty` (`row_bytes` each, GGUF order) in `data` into panels, in
/// place (a panel takes exactly the bytes of its 16 rows), after padding with zero rows to a
/// multiple of 16; panels in parallel. In place, so loading a model never holds a matrix
/// twice.
pub fn repack(ty: GgmlType, data: &mut Vec<u8>, rows: usize, row_bytes: usize) {
    use rayon::prelude::*;
    let size = ty.block().1;
    let runs: Vec<_> = (0..PANEL).map(|r| runs(ty, r)).collect();
    assert_eq!(data.len(), rows * row_bytes, "{rows} rows of {row_bytes} bytes");
    data.resize(rows.div_ceil(PANEL) * PANEL * row_bytes, 0);
    data.par_chunks_mut(PANEL * row_bytes).for_each(|panel| {
        let rows16 = panel.to_vec();
        for (row, row_runs) in rows16.chunks_exact(row_bytes).zip(&runs) {
            for (src, dst) in row.chunks_exact(size).zip(panel.chunks_exact_mut(PANEL * size)) {
                copy_runs(src, dst, row_runs, true);
            }
        }
    });
}

/// Bytes ahead of the block being read that few-row calls prefetch: a one-row pass is bound
/// by memory, and Intel's hardware streamers stop at every 4 KB page.
#[cfg(target_arch = "x86_64")]
const PREFETCH_AHEAD: usize = 4096;
/// Calls of at most this many activation rows prefetch, where prefetching is on.
#[cfg(target_arch = "x86_64")]
const PREFETCH_MAX_ROWS: usize = 2;

/// The panel kernels, as far as the prefetch policy is concerned.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kernels {
    Avx512,
    Avx2,
}

/// Whether few-row passes of `kernels` prefetch ahead, decided once per process from what was
/// measured: on for the AVX-512 kernels on Intel CPUs (one-row target steps 12-15% faster on
/// an Emerald Rapids Xeon), off on AMD (slower one-row calls of every panel type on a Zen 4,
/// AVX-512 and AVX2 alike) and off for the AVX2 kernels elsewhere (a Zen 3 measured an
/// earlier prefetch slower; no Intel AVX2 CPU measured yet). `SPECX_PREFETCH=1` or `0`
/// overrides, to measure it.
#[cfg(target_arch = "x86_64")]
pub fn prefetching(kernels: Kernels) -> bool {
    static INTEL: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let intel = *INTEL.get_or_init(|| {
        // Leaf 0: the vendor string, on every x86_64 CPU.
        let id = std::arch::x86_64::__cpuid(0);
        (id.ebx, id.edx, id.ecx)
            == (u32::from_le_bytes(*b"Genu"), u32::from_le_bytes(*b"ineI"), u32::from_le_bytes(*b"ntel"))
    });
    forced_prefetch().unwrap_or(intel && kernels == Kernels::Avx512)
}

/// The prefetch policy `SPECX_PREFETCH` sets (`0`: off, anything else: on), if set; read once.
#[cfg(target_arch = "x86_64")]
pub fn forced_prefetch() -> Option<bool> {
    static FORCED: std::sync::OnceLock<Option<bool>> = std::sync::OnceLock::new();
    *FORCED.get_or_init(|| std::env::var("SPECX_PREFETCH").ok().map(|v| v != "0"))
}

/// Whether a pass of `rows` activation rows with `kernels` prefetches ([`prefetch_ahead`]).
#[cfg(target_arch = "x86_64")]
pub fn prefetches(kernels: Kernels, rows: usize) -> bool {
    rows <= PREFETCH_MAX_ROWS && prefetching(kernels)
}

/// Prefetches the `len` bytes `PREFETCH_AHEAD` past panel block `block` (past the panel's
/// end too: a prefetch never faults, and the next panel is usually the next task of this
/// thread).
#[cfg(target_arch = "x86_64")]
#[inline]
pub fn prefetch_ahead(block: *const u8, len: usize) {
    use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
    for at in (0..len).step_by(64) {
        // SAFETY: SSE is part of every x86_64 CPU, and a prefetch reads nothing.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(block.wrapping_add(PREFETCH_AHEAD + at).cast()) };
    }
}

/// Row `o` of panels of `ty` back in GGUF order (`row_bytes` bytes into `out`).
pub fn gather_row(ty: GgmlType, panels: &[u8], row_bytes: usize, o: usize, out: &mut Vec<u8>) {
    let size = ty.block().1;
    let blocks = row_bytes / size;
    let (p, r) = (o / PANEL, o % PANEL);
    let row_runs = runs(ty, r);
    out.clear();
    out.resize(row_bytes, 0);
    for (b, dst) in out.chunks_exact_mut(size).enumerate() {
        copy_runs(&panels[(p * blocks + b) * PANEL * size..][..PANEL * size], dst, &row_runs, false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_layout_is_a_permutation_and_rows_come_back() {
        for ty in [GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q5_0, GgmlType::Q4K, GgmlType::Q5K, GgmlType::Q6K] {
            let size = ty.block().1;
            let mut seen = vec![false; PANEL * size];
            for r in 0..PANEL {
                for i in 0..size {
                    let at = position(ty, r, i);
                    assert!(!seen[at], "{ty:?}: two bytes map to {at}");
                    seen[at] = true;
                }
            }
            // 37 rows of 2 blocks: three panels, the last with 5 rows.
            let row_bytes = 2 * size;
            let data: Vec<u8> = (0..37 * row_bytes).map(|k| (k * 131 % 251) as u8).collect();
            let mut panels = data.clone();
            repack(ty, &mut panels, 37, row_bytes);
            assert_eq!(panels.len(), 48 * row_bytes);
            let mut row = Vec::new();
            for o in 0..37 {
                gather_row(ty, &panels, row_bytes, o, &mut row);
                assert_eq!(row, data[o * row_bytes..(o + 1) * row_bytes], "{ty:?} row {o}");
            }
        }
    }
}
