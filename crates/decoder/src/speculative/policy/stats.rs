//! Statistics of the draft's distribution at a drafted position, computed once and only when
//! a policy asks (a pass over the vocabulary costs ~0.2 ms next to a ~10 ms draft forward).

use std::cell::OnceCell;

/// The draft's plain softmax (temperature 1, whole vocabulary) at one position, and the
/// probability there of the token drafted at it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DraftStats {
    /// Probability of the drafted token (`top1` when the draft is greedy).
    pub token_prob: f32,
    /// Probability of the most likely token.
    pub top1: f32,
    /// `top1 - top2`.
    pub margin: f32,
    /// Shannon entropy in nats.
    pub entropy: f32,
    /// `top1` renormalised over the 10 most likely tokens (llama.cpp's draft confidence).
    pub top10_top1: f32,
}

/// How many top tokens llama.cpp's draft sampler keeps (`LLAMA_DRAFT_TOP_K`).
pub const DRAFT_TOP_K: usize = 10;

impl DraftStats {
    /// The statistics of `logits`, with `token` the token drafted there.
    pub fn of(logits: &[f32], token: u32) -> Self {
        let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        // The 10 largest logits, descending (insertion into a short sorted array).
        let mut top = [f32::NEG_INFINITY; DRAFT_TOP_K];
        let (mut z, mut zl) = (0f64, 0f64);
        for &l in logits {
            let e = ((l - max) as f64).exp();
            z += e;
            if e > 0.0 {
                // A token outside a draft's vocabulary subset has l = -inf: no mass, no term.
                zl += e * (l - max) as f64;
            }
            if l > top[DRAFT_TOP_K - 1] {
                let mut i = DRAFT_TOP_K - 1;
                while i > 0 && top[i - 1] < l {
                    top[i] = top[i - 1];
                    i -= 1;
                }
                top[i] = l;
            }
        }
        let p = |l: f32| (((l - max) as f64).exp() / z) as f32;
        let top_sum: f64 = top.iter().filter(|l| l.is_finite()).map(|&l| ((l - max) as f64).exp()).sum();
        Self {
            token_prob: p(logits[token as usize]),
            top1: p(top[0]),
            margin: p(top[0]) - if top[1].is_finite() { p(top[1]) } else { 0.0 },
            // H = ln z - E[l - max].
            entropy: (z.ln() - zl / z).max(0.0) as f32,
            top10_top1: (1.0 / top_sum) as f32,
        }
    }
}

impl DraftStats {
    /// What a head that reads the draft's statistics takes besides the hidden state: the
    /// drafted token's probability, the entropy and the top-2 margin.
    pub fn head_inputs(&self) -> [f32; 3] {
        [self.token_prob, self.entropy, self.margin]
    }
}

/// Number of [`DraftStats::head_inputs`].
pub const HEAD_STAT_INPUTS: usize = 3;

/// [`DraftStats`] computed from the logits on first use, or known already (a replay).
pub struct LazyStats<'a> {
    logits: &'a [f32],
    token: u32,
    cell: OnceCell<DraftStats>,
}

impl<'a> LazyStats<'a> {
    pub fn of_logits(logits: &'a [f32], token: u32) -> Self {
        Self { logits, token, cell: OnceCell::new() }
    }

    pub fn known(stats: DraftStats) -> Self {
        Self { logits: &[], token: 0, cell: OnceCell::from(stats) }
    }

    pub fn get(&self) -> &DraftStats {
        self.cell.get_or_init(|| DraftStats::of(self.logits, self.token))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_of_a_small_distribution() {
        // probabilities 0.5, 0.25, 0.125, 0.125
        let logits: Vec<f32> = [0.5f32, 0.25, 0.125, 0.125].iter().map(|p| p.ln() + 3.0).collect();
        let s = DraftStats::of(&logits, 2);
        assert!((s.top1 - 0.5).abs() < 1e-6 && (s.margin - 0.25).abs() < 1e-6 && (s.token_prob - 0.125).abs() < 1e-6);
        let h = -(0.5f64 * 0.5f64.ln() + 0.25 * 0.25f64.ln() + 2.0 * 0.125 * 0.125f64.ln());
        assert!((s.entropy as f64 - h).abs() < 1e-6, "{} vs {h}", s.entropy);
        assert!((s.top10_top1 - 0.5).abs() < 1e-6, "all four tokens are in the top 10");
        // 20 tokens: the top-10 renormalisation raises top1.
        let mut l = vec![0f32; 20];
        l[3] = 2.0;
        let s = DraftStats::of(&l, 3);
        let e2 = 2f64.exp();
        assert!((s.top1 as f64 - e2 / (e2 + 19.0)).abs() < 1e-6);
        assert!((s.top10_top1 as f64 - e2 / (e2 + 9.0)).abs() < 1e-6);
        assert_eq!(s.token_prob, s.top1);
        assert_eq!(LazyStats::of_logits(&l, 3).get(), &s);
    }
}
