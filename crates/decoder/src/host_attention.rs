//! Scaled dot-product attention in host memory, for models on the CPU device.
//!
//! Each query row's scores, softmax and weighted sum of values are computed in one fixed
//! order that depends on that row alone, so a verification of K + 1 rows gives each row the
//! bits of a one-row step (the runtime's row invariance). burn's matmul blocks its reductions
//! by the number of rows: ~1e-5 apart on f32 activations, and through `--weights q8`'s 8-bit
//! activation quantization whole quanta apart (measured: logits up to 0.28 apart).

use crate::tree_mask::TreeMask;
use rayon::prelude::*;

/// Shapes of one attention call.
#[derive(Clone, Copy, Debug)]
pub struct AttentionShape {
    pub batch: usize,
    pub heads: usize,
    pub kv_heads: usize,
    /// New (query) rows per sequence.
    pub rows: usize,
    /// Cached positions including the new rows.
    pub keys: usize,
    pub head_dim: usize,
}

/// Lanes of the dot products' partial sums (fixed, so the order never depends on the CPU).
const LANES: usize = 16;

/// Attention calls with fewer score products (`batch * heads * rows * keys * head_dim`) than
/// this run on the calling thread.
const SERIAL_BELOW: usize = 1 << 19;

/// `sum a_i b_i` in [`LANES`] partial sums (lane l takes the products of i = l mod 16, each
/// rounded, then added), folded in a fixed order. Whole chunks are fixed-size arrays so the
/// compiler makes one vector multiply and add of them; a shorter tail takes the same per-lane
/// steps.
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; LANES];
    let (whole_a, tail_a) = a.as_chunks::<LANES>();
    let (whole_b, tail_b) = b[..a.len()].as_chunks::<LANES>();
    for (ca, cb) in whole_a.iter().zip(whole_b) {
        for l in 0..LANES {
            acc[l] += ca[l] * cb[l];
        }
    }
    for (l, (x, y)) in tail_a.iter().zip(tail_b).enumerate() {
        acc[l] += x * y;
    }
    acc.iter().fold(0.0, |s, v| s + v)
}

/// Keys scored together by [`dots16`].
const KEY_BLOCK: usize = 16;

/// `[dot(q, k_j)]` for the 16 keys `ks` (`16 x d`, `d` a multiple of [`LANES`]), bit for bit,
/// or `None` without AVX-512. Each key's lane sums are one vector; a 16 x 16 transpose puts key
/// j in lane j, so the 16 folds run side by side (the same adds in the same order as
/// [`dot`]'s fold). A key alone folds its lanes in a chain of 15 dependent scalar adds, which
/// bounded the scores at long contexts.
fn dots16(q: &[f32], ks: &[f32], d: usize) -> Option<[f32; KEY_BLOCK]> {
    assert!(d.is_multiple_of(LANES) && q.len() == d && ks.len() == KEY_BLOCK * d, "16 keys of {d} values");
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        // SAFETY: AVX-512F is present (checked); the lengths are checked above.
        return Some(unsafe { x86::dots16(q, ks, d) });
    }
    None
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{KEY_BLOCK, LANES};
    use std::arch::x86_64::*;

    /// [`super::dots16`] on AVX-512F.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn dots16(q: &[f32], ks: &[f32], d: usize) -> [f32; KEY_BLOCK] {
        let mut acc = [_mm512_setzero_ps(); KEY_BLOCK];
        for c in (0..d).step_by(LANES) {
            // SAFETY: c + 16 <= d and every key has d values (the caller checked the lengths).
            unsafe {
                let qc = _mm512_loadu_ps(q.as_ptr().add(c));
                for (j, a) in acc.iter_mut().enumerate() {
                    // Rounded product, then rounded add: `dot`'s two steps (no fused multiply-add).
                    *a = _mm512_add_ps(*a, _mm512_mul_ps(qc, _mm512_loadu_ps(ks.as_ptr().add(j * d + c))));
                }
            }
        }
        // Rows (keys) of acc to columns (lanes): pairs of floats, of doubles, then 128-bit
        // lanes; afterwards column 4k + m is the 128-bit lane k of the four u[4i + m].
        let t: [__m512; 16] = std::array::from_fn(|r| {
            let (a, b) = (acc[r & !1], acc[r | 1]);
            if r % 2 == 0 { _mm512_unpacklo_ps(a, b) } else { _mm512_unpackhi_ps(a, b) }
        });
        let u: [__m512; 16] = std::array::from_fn(|r| {
            let (i, m) = (r / 4, r % 4);
            let (a, b) = (_mm512_castps_pd(t[4 * i + m / 2]), _mm512_castps_pd(t[4 * i + 2 + m / 2]));
            _mm512_castpd_ps(if m % 2 == 0 { _mm512_unpacklo_pd(a, b) } else { _mm512_unpackhi_pd(a, b) })
        });
        let mut sum = _mm512_setzero_ps();
        let mut cols = [_mm512_setzero_ps(); LANES];
        for m in 0..4 {
            let v: [__m512; 4] = std::array::from_fn(|i| u[4 * i + m]);
            let x0 = _mm512_shuffle_f32x4::<0x44>(v[0], v[1]);
            let x1 = _mm512_shuffle_f32x4::<0xee>(v[0], v[1]);
            let x2 = _mm512_shuffle_f32x4::<0x44>(v[2], v[3]);
            let x3 = _mm512_shuffle_f32x4::<0xee>(v[2], v[3]);
            cols[m] = _mm512_shuffle_f32x4::<0x88>(x0, x2);
            cols[4 + m] = _mm512_shuffle_f32x4::<0xdd>(x0, x2);
            cols[8 + m] = _mm512_shuffle_f32x4::<0x88>(x1, x3);
            cols[12 + m] = _mm512_shuffle_f32x4::<0xdd>(x1, x3);
        }
        // `dot`'s fold: 0 + lane 0 + lane 1 + ... + lane 15, for the 16 keys at once.
        for c in cols {
            sum = _mm512_add_ps(sum, c);
        }
        let mut out = [0f32; KEY_BLOCK];
        // SAFETY: 16 f32 stored into a 16-f32 array.
        unsafe { _mm512_storeu_ps(out.as_mut_ptr(), sum) };
        out
    }
}

/// `o = sum_j w_j v_j` over the value rows `row(0), row(1), ...` (`d` values each), in
/// registers chunk by chunk of `o` (the same adds in the same order as one row at a time into
/// memory).
fn weighted_sum<'a>(w: &[f32], row: impl Fn(usize) -> &'a [f32], d: usize, o: &mut [f32]) {
    const CHUNK: usize = 8 * LANES;
    for (at, oc) in (0..d).step_by(CHUNK).zip(o.chunks_mut(CHUNK)) {
        if oc.len() == CHUNK {
            let mut acc = [0f32; CHUNK];
            for (j, &wj) in w.iter().enumerate() {
                let v: &[f32; CHUNK] = row(j)[at..][..CHUNK].try_into().expect("a whole chunk");
                for x in 0..CHUNK {
                    acc[x] += wj * v[x];
                }
            }
            oc.copy_from_slice(&acc);
        } else {
            for (j, &wj) in w.iter().enumerate() {
                oc.iter_mut().zip(&row(j)[at..]).for_each(|(o, v)| *o += wj * v);
            }
        }
    }
}

/// Which keys each query row of a call sees.
#[derive(Clone, Copy, Debug)]
pub enum Visible<'a> {
    /// Every key.
    All,
    /// Row i: the cache and the call's rows `0..=i`.
    Causal,
    /// Row i: the cache and its path in the tree (its ancestors and itself), in depth order.
    Tree(&'a TreeMask),
}

impl Visible<'_> {
    /// Row `i` of `rows` after `past` cached keys: how many keys from 0 on it sees in one
    /// contiguous run, and the keys it sees after them as offsets from a base key (the tree's
    /// first row), with that base.
    fn keys_of(&self, i: usize, past: usize, rows: usize) -> (usize, &[usize], usize) {
        match self {
            Self::All => (past + rows, &[], past),
            Self::Causal => (past + i + 1, &[], past),
            Self::Tree(tree) => {
                let base = past - tree.cached();
                let run = tree.contiguous_prefix(i);
                (base + run, &tree.path(i)[run..], base)
            }
        }
    }
}

/// Attention of `q` (`[batch, heads, rows, d]`, RoPE applied) over `keys` and `values`
/// (`[batch, kv_heads, keys, d]`); query heads share kv head `head / (heads / kv_heads)`.
/// Row i sees the keys `visible` gives it: scores, softmax and weighted sum run over them in
/// the order cache first, then the call's rows in depth order, which is the order of a chain
/// call of the row's path (a tree row's bits equal that chain's; each key's score has the same
/// bits whether scored in a block of 16 or alone). Returns `[batch, rows, heads * d]`.
pub fn attend(q: &[f32], keys: &[f32], values: &[f32], s: AttentionShape, visible: Visible) -> Vec<f32> {
    let AttentionShape { batch, heads, kv_heads, rows, keys: t, head_dim: d } = s;
    assert!(heads % kv_heads == 0 && rows <= t, "attention shape {s:?}");
    assert_eq!(q.len(), batch * heads * rows * d, "q is not [batch, heads, rows, d]");
    assert_eq!(keys.len(), batch * kv_heads * t * d, "keys are not [batch, kv_heads, keys, d]");
    assert_eq!(values.len(), keys.len(), "values differ from keys in shape");
    let groups = heads / kv_heads;
    let scale = (1.0 / (d as f64).sqrt()) as f32;
    let past = t - rows;
    // One task per (sequence, head): its rows x d outputs.
    let head = |bh: usize| {
        let (b, h) = (bh / heads, bh % heads);
        let kv = b * kv_heads + h / groups;
        let ks = &keys[kv * t * d..(kv + 1) * t * d];
        let vs = &values[kv * t * d..(kv + 1) * t * d];
        let mut out = vec![0f32; rows * d];
        let mut p = vec![0f32; t];
        for i in 0..rows {
            let qi = &q[(bh * rows + i) * d..(bh * rows + i + 1) * d];
            let (run, extra, base) = visible.keys_of(i, past, rows);
            let seen = run + extra.len();
            // The key behind score j: the contiguous run, then the tree rows of `extra`.
            let key = |j: usize| if j < run { j } else { base + extra[j - run] };
            // Blocks of 16 keys where the CPU has the wide path, the rest key by key.
            let mut blocked = 0;
            while d % LANES == 0 && blocked + KEY_BLOCK <= run {
                let Some(scores) = dots16(qi, &ks[blocked * d..(blocked + KEY_BLOCK) * d], d) else { break };
                for (pj, s) in p[blocked..blocked + KEY_BLOCK].iter_mut().zip(scores) {
                    *pj = s * scale;
                }
                blocked += KEY_BLOCK;
            }
            for (j, pj) in p[..seen].iter_mut().enumerate().skip(blocked) {
                let k = key(j);
                *pj = dot(qi, &ks[k * d..(k + 1) * d]) * scale;
            }
            let max = p[..seen].iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
            let mut sum = 0f32;
            for pj in &mut p[..seen] {
                *pj = (*pj - max).exp();
                sum += *pj;
            }
            for pj in &mut p[..seen] {
                *pj /= sum;
            }
            weighted_sum(&p[..seen], |j| &vs[key(j) * d..(key(j) + 1) * d], d, &mut out[i * d..(i + 1) * d]);
        }
        out
    };
    // A decode step's attention is a few hundred thousand multiply-adds, tens of
    // microseconds: it stays on the calling thread. Either way each head is computed alone,
    // so the results are the same (a test crosses the threshold).
    let per_head: Vec<Vec<f32>> = if batch * heads * rows * t * d < SERIAL_BELOW {
        (0..batch * heads).map(head).collect()
    } else {
        (0..batch * heads).into_par_iter().map(head).collect()
    };
    let mut out = vec![0f32; batch * rows * heads * d];
    for (bh, block) in per_head.iter().enumerate() {
        let (b, h) = (bh / heads, bh % heads);
        for i in 0..rows {
            let at = ((b * rows + i) * heads + h) * d;
            out[at..at + d].copy_from_slice(&block[i * d..(i + 1) * d]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(n: usize, seed: u32) -> Vec<f32> {
        (0..n as u32)
            .map(|i| ((i.wrapping_mul(2654435761).wrapping_add(seed) >> 8) % 2001) as f32 / 1000.0 - 1.0)
            .collect()
    }

    /// Straightforward f64 attention for one (sequence, head, row).
    fn reference(q: &[f32], k: &[f32], v: &[f32], d: usize, seen: usize) -> Vec<f64> {
        let sc: Vec<f64> = (0..seen)
            .map(|j| (0..d).map(|x| q[x] as f64 * k[j * d + x] as f64).sum::<f64>() / (d as f64).sqrt())
            .collect();
        let m = sc.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = sc.iter().map(|s| (s - m).exp()).collect();
        let z: f64 = e.iter().sum();
        (0..d).map(|x| (0..seen).map(|j| e[j] / z * v[j * d + x] as f64).sum()).collect()
    }

    #[test]
    fn a_parallel_call_gives_each_row_the_bits_of_a_serial_one_row_call() {
        // 4 rows run in parallel (above SERIAL_BELOW), each row alone serially (below it).
        let (heads, kv_heads, d, t, rows) = (8, 2, 128, 160, 4);
        assert!(heads * rows * t * d >= SERIAL_BELOW && heads * t * d < SERIAL_BELOW);
        let (keys, values) = (data(kv_heads * t * d, 4), data(kv_heads * t * d, 5));
        let q = data(heads * rows * d, 6);
        let all = attend(
            &q,
            &keys,
            &values,
            AttentionShape { batch: 1, heads, kv_heads, rows, keys: t, head_dim: d },
            Visible::Causal,
        );
        for i in 0..rows {
            let seen = t - rows + i + 1;
            let cut = |x: &[f32]| -> Vec<f32> { x.chunks(t * d).flat_map(|c| c[..seen * d].to_vec()).collect() };
            let qi: Vec<f32> = q.chunks(rows * d).flat_map(|c| c[i * d..(i + 1) * d].to_vec()).collect();
            let alone = attend(
                &qi,
                &cut(&keys),
                &cut(&values),
                AttentionShape { batch: 1, heads, kv_heads, rows: 1, keys: seen, head_dim: d },
                Visible::Causal,
            );
            let r = &all[i * heads * d..(i + 1) * heads * d];
            assert!(alone.iter().zip(r).all(|(x, y)| x.to_bits() == y.to_bits()), "row {i}");
        }
    }

    #[test]
    fn a_tree_row_has_the_bits_of_a_chain_call_of_its_path() {
        // d = 128 and 40 cached keys: the chain's 16-key blocks run into the new rows, where
        // the tree row scores its (non-contiguous) ancestors one by one.
        let (heads, kv_heads, d, past) = (4, 2, 128, 40);
        let parents = [None, Some(0), Some(0), Some(2), Some(1), Some(3), Some(5)];
        let tree = TreeMask::new(&parents).unwrap();
        let n = parents.len();
        let t = past + n;
        let (keys, values, q) = (data(kv_heads * t * d, 13), data(kv_heads * t * d, 14), data(heads * n * d, 15));
        let got = attend(
            &q,
            &keys,
            &values,
            AttentionShape { batch: 1, heads, kv_heads, rows: n, keys: t, head_dim: d },
            Visible::Tree(&tree),
        );
        for i in 0..n {
            let path = tree.path(i);
            // The chain of the path: the cache, then the path's keys and queries in depth order.
            let pick = |x: &[f32]| -> Vec<f32> {
                x.chunks(t * d)
                    .flat_map(|c| {
                        let mut rows = c[..past * d].to_vec();
                        path.iter().for_each(|&r| rows.extend_from_slice(&c[(past + r) * d..(past + r + 1) * d]));
                        rows
                    })
                    .collect()
            };
            let qs: Vec<f32> =
                q.chunks(n * d).flat_map(|c| path.iter().flat_map(|&r| c[r * d..(r + 1) * d].to_vec())).collect();
            let rows = path.len();
            let shape = AttentionShape { batch: 1, heads, kv_heads, rows, keys: past + rows, head_dim: d };
            let chain = attend(&qs, &pick(&keys), &pick(&values), shape, Visible::Causal);
            let (want, row) =
                (&chain[(rows - 1) * heads * d..rows * heads * d], &got[i * heads * d..(i + 1) * heads * d]);
            assert!(want.iter().zip(row).all(|(a, b)| a.to_bits() == b.to_bits()), "tree row {i}, path {path:?}");
        }
        // A row shown its sibling's key besides its own path is caught.
        let wrong = TreeMask::new(&[None, Some(0), Some(1), Some(2), Some(1), Some(3), Some(5)]).unwrap();
        let broken = attend(
            &q,
            &keys,
            &values,
            AttentionShape { batch: 1, heads, kv_heads, rows: n, keys: t, head_dim: d },
            Visible::Tree(&wrong),
        );
        assert_ne!(
            bits_of(&broken[2 * heads * d..3 * heads * d]),
            bits_of(&got[2 * heads * d..3 * heads * d]),
            "row 2 under a wrong parent"
        );
    }

    fn bits_of(x: &[f32]) -> Vec<u32> {
        x.iter().map(|v| v.to_bits()).collect()
    }

    #[test]
    fn sixteen_keys_at_once_give_each_key_the_bits_of_dot() {
        for d in [16, 64, 128] {
            let (q, ks) = (data(d, 9), data(KEY_BLOCK * d, 10));
            let Some(got) = dots16(&q, &ks, d) else {
                eprintln!("no AVX-512: the per-key path is the only one");
                return;
            };
            for (j, g) in got.iter().enumerate() {
                assert_eq!(g.to_bits(), dot(&q, &ks[j * d..(j + 1) * d]).to_bits(), "key {j} of 16, d = {d}");
            }
        }
    }

    #[test]
    fn the_weighted_sum_in_registers_adds_in_the_order_of_one_row_at_a_time() {
        for d in [40, 64, 128, 256] {
            let (w, vs) = (data(37, 11), data(37 * d, 12));
            let mut want = vec![0f32; d];
            for (j, wj) in w.iter().enumerate() {
                want.iter_mut().zip(&vs[j * d..]).for_each(|(o, v)| *o += wj * v);
            }
            let mut got = vec![0f32; d];
            weighted_sum(&w, |j| &vs[j * d..(j + 1) * d], d, &mut got);
            assert!(got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()), "d = {d}");
        }
    }

    #[test]
    fn dot_takes_the_per_lane_steps_of_its_definition() {
        // Lane l adds the rounded products of i = l mod 16 in order; lanes fold left to right.
        for n in [1, 5, 16, 17, 40, 128, 130] {
            let (a, b) = (data(n, 7), data(n, 8));
            let mut acc = [0f32; LANES];
            for i in 0..n {
                acc[i % LANES] += a[i] * b[i];
            }
            let want = acc.iter().fold(0.0f32, |s, v| s + v);
            assert_eq!(dot(&a, &b).to_bits(), want.to_bits(), "length {n}");
        }
    }

    #[test]
    fn matches_the_exact_attention_and_each_row_equals_a_one_row_call() {
        let (batch, heads, kv_heads, d, t) = (2, 4, 2, 40, 9);
        let shape = |rows| AttentionShape { batch, heads, kv_heads, rows, keys: t, head_dim: d };
        let (keys, values) = (data(batch * kv_heads * t * d, 1), data(batch * kv_heads * t * d, 2));
        let rows = 4;
        let q = data(batch * heads * rows * d, 3);
        let all = attend(&q, &keys, &values, shape(rows), Visible::Causal);
        for b in 0..batch {
            for h in 0..heads {
                let kv = b * kv_heads + h / 2;
                for i in 0..rows {
                    let qi = &q[((b * heads + h) * rows + i) * d..][..d];
                    let want = reference(qi, &keys[kv * t * d..], &values[kv * t * d..], d, t - rows + i + 1);
                    let got = &all[((b * rows + i) * heads + h) * d..][..d];
                    for (g, w) in got.iter().zip(&want) {
                        assert!((*g as f64 - w).abs() < 1e-5, "b{b} h{h} row {i}: {g} vs {w}");
                    }
                }
            }
        }
        // Row i alone (its own causal prefix: keys 0..=t - rows + i) gives the same bits.
        for i in 0..rows {
            let seen = t - rows + i + 1;
            let cut = |x: &[f32]| -> Vec<f32> { x.chunks(t * d).flat_map(|c| c[..seen * d].to_vec()).collect() };
            let qi: Vec<f32> = q.chunks(rows * d).flat_map(|c| c[i * d..(i + 1) * d].to_vec()).collect();
            let alone = attend(
                &qi,
                &cut(&keys),
                &cut(&values),
                AttentionShape { rows: 1, keys: seen, ..shape(1) },
                Visible::Causal,
            );
            for b in 0..batch {
                let a = &alone[b * heads * d..(b + 1) * heads * d];
                let r = &all[(b * rows + i) * heads * d..(b * rows + i + 1) * heads * d];
                assert!(a.iter().zip(r).all(|(x, y)| x.to_bits() == y.to_bits()), "row {i} of sequence {b}");
            }
        }
    }
}
