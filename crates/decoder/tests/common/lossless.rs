//! Losslessness helpers shared by the schedulers' and drafters' tests: the exact distribution of
//! short continuations under the warped target, chi-square tests of sampled counts and of
//! whole sampled sequences against it, what a run of requests went through, and a broken
//! sibling rule for the tests to catch.

use rand::RngExt;
use rand::rngs::StdRng;
use specx_decoder::Transformer;
use specx_decoder::sampling::SamplingConfig;
use specx_decoder::sampling::sample_from;
use specx_decoder::speculative::{
    Candidate, Choice, Generation, RejectionSampler, SpecConfig, Verdict, Verifier, point_mass_residual,
};
use std::collections::HashMap;

pub const SMALL_VOCAB: usize = 6;
pub const STEPS: usize = 3;

/// Exact probability of every 3-token continuation under the warped target.
pub fn exact_distribution(target: &Transformer, prompt: &[u32], s: &SamplingConfig) -> HashMap<Vec<u32>, f64> {
    fn rec(
        t: &Transformer,
        seq: &mut Vec<u32>,
        depth: usize,
        p: f64,
        s: &SamplingConfig,
        out: &mut HashMap<Vec<u32>, f64>,
        plen: usize,
    ) {
        if depth == STEPS {
            out.insert(seq[plen..].to_vec(), p);
            return;
        }
        let mut c = t.new_cache(1);
        let logits = specx_decoder::generate::last_logits(&t.forward(seq, &mut c).unwrap());
        let probs = s.probabilities(&logits);
        for (tok, &q) in probs.iter().enumerate() {
            if q > 0.0 {
                seq.push(tok as u32);
                rec(t, seq, depth + 1, p * q as f64, s, out, plen);
                seq.pop();
            }
        }
    }
    let mut out = HashMap::new();
    rec(target, &mut prompt.to_vec(), 0, 1.0, s, &mut out, prompt.len());
    out
}

/// Pearson chi-square p-value (Wilson-Hilferty approximation), cells with expected < 5
/// pooled into one.
pub fn chi_square_p(counts: &HashMap<Vec<u32>, usize>, exact: &HashMap<Vec<u32>, f64>, n: usize) -> f64 {
    let (mut stat, mut cells, mut pool_e, mut pool_o) = (0.0, 0usize, 0.0, 0.0);
    for (k, &p) in exact {
        let e = p * n as f64;
        let o = *counts.get(k).unwrap_or(&0) as f64;
        if e < 5.0 {
            pool_e += e;
            pool_o += o;
        } else {
            stat += (o - e) * (o - e) / e;
            cells += 1;
        }
    }
    let unseen: usize = counts.iter().filter(|(k, _)| !exact.contains_key(*k)).map(|(_, c)| c).sum();
    assert_eq!(unseen, 0, "sampled a sequence of probability 0");
    if pool_e > 0.0 {
        stat += (pool_o - pool_e) * (pool_o - pool_e) / pool_e;
        cells += 1;
    }
    assert!(cells >= 3, "too few cells ({cells}) for a meaningful test");
    chi_square_upper_tail(stat, (cells - 1) as f64)
}

/// Complementary error function (Numerical Recipes' erfc, relative error < 1.2e-7).
fn libm_erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let r = t
        * (-z * z - 1.26551223
            + t * (1.00002368
                + t * (0.37409196
                    + t * (0.09678418
                        + t * (-0.18628806
                            + t * (0.27886807
                                + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277)))))))))
            .exp();
    if x >= 0.0 { r } else { 2.0 - r }
}

pub fn sample_counts(n: usize, mut run: impl FnMut(u64) -> Vec<u32>) -> HashMap<Vec<u32>, usize> {
    let mut counts = HashMap::new();
    for seed in 0..n as u64 {
        *counts.entry(run(seed)).or_insert(0) += 1;
    }
    counts
}

/// Tokens generated per request in the many-round tests: with candidates of 1-4 tokens, every
/// request runs several rounds.
pub const LONG: usize = 10;

/// A goodness-of-fit test of whole sampled sequences, valid for any length (an exact table of
/// every sequence is out of reach beyond a few tokens). At each position `t` the sampled token
/// should be distributed as `p_t`, the warped target's distribution given the prompt and the
/// sampled tokens before it. Per position, the token counts minus their conditional
/// expectations, `O - E = Σ_samples (onehot(x_t) - p_t)`, are a sum of martingale differences
/// with conditional covariance `V = Σ (diag p_t - p_t p_tᵀ)`; `(O - E)ᵀ V⁻¹ (O - E)` is then
/// asymptotically chi-square with one degree of freedom per category kept (categories with an
/// expected count under 5, and the largest, form the remainder), and increments at different
/// positions are uncorrelated, so the sum over positions is chi-square with the summed degrees
/// of freedom. One target forward per distinct sequence gives every `p_t` (the forward is row
/// invariant, so each row equals a one-token step). Returns the p-value, or 0 when a sample
/// holds a token the warped target gives probability 0 (impossible under the target).
pub fn sequence_chi_square_p(target: &Transformer, prompt: &[u32], s: &SamplingConfig, samples: &[Vec<u32>]) -> f64 {
    let len = samples[0].len();
    assert!(samples.iter().all(|x| x.len() == len), "samples of different lengths");
    let mut probs: HashMap<&[u32], Vec<Vec<f32>>> = HashMap::new();
    for x in samples {
        probs.entry(x.as_slice()).or_insert_with(|| {
            let mut input = prompt.to_vec();
            input.extend_from_slice(&x[..len - 1]);
            let mut c = target.new_cache(1);
            let out = target.forward(&input, &mut c).unwrap();
            out.logits_tail(len).iter().map(|l| s.probabilities(l)).collect()
        });
    }
    let (mut stat, mut df) = (0.0, 0usize);
    for t in 0..len {
        let vocab = probs.values().next().unwrap()[t].len();
        let mut expected = vec![0.0f64; vocab];
        for x in samples {
            let p = &probs[x.as_slice()][t];
            if p[x[t] as usize] <= 0.0 {
                eprintln!("sampled a token of probability 0 at position {t}: {x:?}");
                return 0.0;
            }
            expected.iter_mut().zip(p).for_each(|(e, &q)| *e += q as f64);
        }
        let largest = (0..vocab).max_by(|&a, &b| expected[a].total_cmp(&expected[b])).unwrap();
        let kept: Vec<usize> = (0..vocab).filter(|&j| j != largest && expected[j] >= 5.0).collect();
        if kept.is_empty() {
            continue;
        }
        let n = kept.len();
        let mut d = vec![0.0f64; n];
        let mut v = vec![vec![0.0f64; n]; n];
        for x in samples {
            let p = &probs[x.as_slice()][t];
            for (a, &j) in kept.iter().enumerate() {
                d[a] += f64::from(u8::from(x[t] as usize == j)) - p[j] as f64;
                for (b, &k) in kept.iter().enumerate() {
                    v[a][b] += if j == k { p[j] as f64 } else { 0.0 } - p[j] as f64 * p[k] as f64;
                }
            }
        }
        stat += quadratic_form_inverse(v, d);
        df += n;
    }
    assert!(df >= 3, "too few degrees of freedom ({df}) for a meaningful test");
    chi_square_upper_tail(stat, df as f64)
}

/// `dᵀ V⁻¹ d` for a symmetric positive definite `V`, by Cholesky.
fn quadratic_form_inverse(mut v: Vec<Vec<f64>>, d: Vec<f64>) -> f64 {
    let n = d.len();
    for j in 0..n {
        for k in 0..j {
            let l = v[j][k];
            for i in j..n {
                v[i][j] -= v[i][k] * l;
            }
        }
        assert!(v[j][j] > 0.0, "conditional covariance not positive definite");
        let r = v[j][j].sqrt();
        for i in j..n {
            v[i][j] /= r;
        }
    }
    // Solve L y = d; dᵀ V⁻¹ d = |y|².
    let mut y = vec![0.0; n];
    for i in 0..n {
        y[i] = (d[i] - (0..i).map(|k| v[i][k] * y[k]).sum::<f64>()) / v[i][i];
    }
    y.iter().map(|x| x * x).sum()
}

/// Upper tail of the chi-square distribution (Wilson-Hilferty approximation).
fn chi_square_upper_tail(stat: f64, df: f64) -> f64 {
    let z = ((stat / df).powf(1.0 / 3.0) - (1.0 - 2.0 / (9.0 * df))) / (2.0 / (9.0 * df)).sqrt();
    0.5 * libm_erfc(z / std::f64::consts::SQRT_2)
}

/// What the requests of a run generated, and what kinds of rounds they went through.
#[derive(Default)]
pub struct Run {
    pub samples: Vec<Vec<u32>>,
    pub rounds: usize,
    /// Rounds with a rejected candidate.
    pub rejected: usize,
    /// Rounds whose every candidate (at least one) was accepted.
    pub full: usize,
    /// Fully accepted rounds followed by more tokens: the next one is the bonus.
    pub bonus: usize,
}

impl Run {
    pub fn of(n: usize, mut generate: impl FnMut(u64) -> Generation) -> Run {
        let mut run = Run::default();
        for seed in 0..n as u64 {
            let g = generate(seed);
            let m = &g.metrics;
            let rounds: Vec<(usize, usize)> =
                m.drafted_per_round.iter().copied().zip(m.accepted_per_round.iter().copied()).collect();
            run.rounds += rounds.len();
            run.rejected += rounds.iter().filter(|(k, a)| a < k).count();
            run.full += rounds.iter().filter(|(k, a)| a == k && *k > 0).count();
            run.bonus += rounds.iter().rev().skip(1).filter(|(k, a)| a == k && *k > 0).count();
            run.samples.push(g.tokens);
        }
        run
    }

    /// Asserts that the run went through several rounds per request, and that at least one
    /// request in `1/share` had a rejection, a fully accepted round and (`bonus`) a bonus token.
    pub fn assert_exercised(&self, what: &str, share: usize, bonus: bool) {
        let n = self.samples.len();
        assert!(self.rounds >= 2 * n, "{what}: {} rounds in {n} requests", self.rounds);
        let enough = (n / share).max(1);
        assert!(
            self.rejected >= enough && self.full >= enough,
            "{what}: {} rejected and {} fully accepted rounds in {n} requests",
            self.rejected,
            self.full
        );
        assert!(!bonus || self.bonus >= enough, "{what}: {} bonus tokens in {n} requests", self.bonus);
    }

    pub fn summary(&self) -> String {
        let per = |x: usize| x as f64 / self.samples.len() as f64;
        format!(
            "{:.2} rounds, {:.2} with a rejection, {:.2} fully accepted, {:.2} bonus tokens per request",
            per(self.rounds),
            per(self.rejected),
            per(self.full),
            per(self.bonus)
        )
    }
}

/// Samples per short chi-square test, and the significance level: 6000 samples of 3-token
/// continuations over a 6-token vocabulary, with a draft that disagrees with the target as
/// much as two random models do, let any broken variant shift the distribution far beyond
/// what chance allows.
pub const SAMPLES: usize = 6000;
pub const ALPHA: f64 = 1e-3;

/// The set-up of a short chi-square test: the prompt `[1, 4, 2]`, the sampling, and the
/// target's exact distribution of its `STEPS`-token continuations.
pub struct Short {
    pub prompt: Vec<u32>,
    pub sampling: SamplingConfig,
    pub exact: HashMap<Vec<u32>, f64>,
}

impl Short {
    /// At temperature 1, no top-k or top-p.
    pub fn at_t1(target: &Transformer) -> Self {
        Self::at(target, SamplingConfig { temperature: 1.0, top_k: None, top_p: None })
    }

    pub fn at(target: &Transformer, sampling: SamplingConfig) -> Self {
        let prompt = vec![1u32, 4, 2];
        let exact = exact_distribution(target, &prompt, &sampling);
        Self { prompt, sampling, exact }
    }

    /// The generation of `STEPS` tokens with `seed`.
    pub fn cfg(&self, seed: u64) -> SpecConfig {
        SpecConfig { max_new_tokens: STEPS, sampling: self.sampling.clone(), seed }
    }

    /// The chi-square p-value of [`SAMPLES`] runs of `run` (seeds `0..`) against the exact
    /// distribution.
    pub fn p(&self, run: impl FnMut(u64) -> Vec<u32>) -> f64 {
        chi_square_p(&sample_counts(SAMPLES, run), &self.exact, SAMPLES)
    }
}

/// The sibling rule with one of two faults: `keep_rejected` tests each child against the
/// residual but never removes a rejected child from it; otherwise each child is tested against
/// the target's `p` (the rejected ones removed only from the final draw), so a twin of a
/// rejected child can still be accepted.
pub struct BrokenSiblings {
    pub keep_rejected: bool,
}

impl Verifier for BrokenSiblings {
    fn decide(&mut self, c: &Candidate, logits: &[f32], s: &SamplingConfig, rng: &mut StdRng) -> Verdict {
        RejectionSampler.decide(c, logits, s, rng)
    }

    fn decides_siblings(&self) -> bool {
        true
    }

    fn decide_among(
        &mut self,
        children: &[&Candidate],
        logits: &[f32],
        s: &SamplingConfig,
        rng: &mut StdRng,
    ) -> Choice {
        let p = s.probabilities(logits);
        let mut residual = p.clone();
        for (i, c) in children.iter().enumerate() {
            let tested = if self.keep_rejected { &residual } else { &p };
            if rng.random::<f64>() < tested[c.token as usize] as f64 {
                return Choice::Accept(i);
            }
            if !self.keep_rejected {
                residual = point_mass_residual(&residual, c.token);
            }
        }
        Choice::Reject(sample_from(&residual, rng))
    }
}
