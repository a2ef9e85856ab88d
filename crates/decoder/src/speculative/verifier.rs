//! Verification: which candidates the target accepts, and the token that follows them.

use super::drafter::Candidate;
use crate::sampling::{argmax, sample_from, SamplingConfig};
use rand::rngs::StdRng;
use rand::RngExt;

/// Outcome of verifying one round.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    /// Candidates accepted (a prefix of the proposal).
    pub accepted: usize,
    /// The correction after a rejection, or the bonus token when all were accepted.
    pub next: u32,
}

/// Decides acceptance from the target's logits at the candidates' positions.
pub trait Verifier {
    /// `target_logits[i]` scores the token after candidate `i - 1` (index 0: the first
    /// candidate's position); there are `candidates.len() + 1` of them.
    fn verify(&mut self, candidates: &[Candidate], target_logits: &[Vec<f32>], sampling: &SamplingConfig, rng: &mut StdRng) -> Verdict;
}

/// Greedy verification: accept while the candidate is the target's argmax; the first
/// mismatch is replaced by the argmax. Reproduces greedy decoding of the target exactly.
pub struct ExactMatch;

impl Verifier for ExactMatch {
    fn verify(&mut self, candidates: &[Candidate], target_logits: &[Vec<f32>], _: &SamplingConfig, _: &mut StdRng) -> Verdict {
        for (i, c) in candidates.iter().enumerate() {
            let best = argmax(&target_logits[i]);
            if c.token != best {
                return Verdict { accepted: i, next: best };
            }
        }
        Verdict { accepted: candidates.len(), next: argmax(&target_logits[candidates.len()]) }
    }
}

/// The residual distribution `norm(max(p - q, 0))` sampled after a rejection. Falls back to
/// `p` if the residual has no mass (only possible when p == q up to rounding, where a
/// rejection has probability ~0).
pub fn residual_distribution(p: &[f32], q: &[f32]) -> Vec<f32> {
    let mut r: Vec<f32> = p.iter().zip(q).map(|(a, b)| (a - b).max(0.0)).collect();
    let sum: f64 = r.iter().map(|&x| x as f64).sum();
    if sum <= 0.0 {
        return p.to_vec();
    }
    let inv = (1.0 / sum) as f32;
    r.iter_mut().for_each(|x| *x *= inv);
    r
}

/// Speculative sampling (Leviathan et al.; Chen et al.): accept candidate `y` with
/// probability `min(1, p(y) / q(y))`, both warped identically; on the first rejection sample
/// from `norm(max(p - q, 0))`; if all pass, sample the bonus from `p`. The output is
/// distributed exactly as sampling from the warped target, for any `q`, provided each `y`
/// was drawn from the `q` it is tested against.
pub struct RejectionSampler;

impl Verifier for RejectionSampler {
    fn verify(&mut self, candidates: &[Candidate], target_logits: &[Vec<f32>], sampling: &SamplingConfig, rng: &mut StdRng) -> Verdict {
        if sampling.is_greedy() {
            return ExactMatch.verify(candidates, target_logits, sampling, rng);
        }
        for (i, c) in candidates.iter().enumerate() {
            let p = sampling.probabilities(&target_logits[i]);
            let (py, qy) = (p[c.token as usize] as f64, c.q_token as f64);
            let r: f64 = rng.random::<f64>();
            if r * qy >= py {
                // Rejected: r >= p/q.
                let next = sample_from(&residual_distribution(&p, &c.q), rng);
                return Verdict { accepted: i, next };
            }
        }
        let p = sampling.probabilities(&target_logits[candidates.len()]);
        Verdict { accepted: candidates.len(), next: sample_from(&p, rng) }
    }
}
