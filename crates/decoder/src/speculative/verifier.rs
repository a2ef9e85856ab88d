//! Verification: whether the target accepts a candidate, and the token that replaces it if not.
//! A verifier decides one position at a time, with that position's random stream, so that a
//! token does not depend on how drafting was cut into rounds or blocks.

use super::candidate::Candidate;
use super::tree::DraftTree;
use crate::coupling::{Draws, coupled_pick};
use crate::sampling::{SamplingConfig, argmax, sample_from};
use anyhow::{Result, ensure};
use rand::RngExt;
use rand::rngs::StdRng;

/// The decision on one candidate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Accept,
    /// Rejected; the target's token there instead.
    Reject(u32),
}

/// The decision among the children of one tree node (proposals for the same position).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice {
    /// The child at this index (of those given) is accepted.
    Accept(usize),
    /// All rejected; the target's token there instead.
    Reject(u32),
}

impl Choice {
    /// The choice among one child, from its verdict.
    fn of_only(verdict: Verdict) -> Self {
        match verdict {
            Verdict::Accept => Choice::Accept(0),
            Verdict::Reject(token) => Choice::Reject(token),
        }
    }
}

/// Decides candidates against the target's logits at their positions.
pub trait Verifier {
    /// Decides `candidate` from `target_logits`, the target's scores of the token at the
    /// candidate's position; `rng` is that position's verification stream.
    fn decide(
        &mut self,
        candidate: &Candidate,
        target_logits: &[f32],
        sampling: &SamplingConfig,
        rng: &mut StdRng,
    ) -> Verdict;

    /// How the request's draws are made: the drafters draw their candidates, and the
    /// schedulers hand out streams, to match.
    fn draws(&self) -> Draws {
        Draws::Independent
    }

    /// Whether, under `sampling`, every decision is the target's greedy token: accept the
    /// child that is the row's argmax, else replace by it ([`child_with`] of the argmax). A
    /// scheduler may then decide from the rows' argmaxes alone, computed on the device.
    fn decides_by_argmax(&self, sampling: &SamplingConfig) -> bool {
        let _ = sampling;
        false
    }

    /// Whether [`Verifier::decide_among`] can decide between siblings (a token tree's
    /// branches); a verifier of chains decides one candidate per position.
    fn decides_siblings(&self) -> bool {
        false
    }

    /// Refuses a tree this verifier cannot decide under `sampling`, before the target runs:
    /// siblings for a verifier of chains (and, for [`RejectionSampler`], siblings drawn from a
    /// draft distribution under sampling).
    fn check_tree(&self, tree: &DraftTree, sampling: &SamplingConfig) -> Result<()> {
        let _ = sampling;
        ensure!(
            tree.is_chain() || self.decides_siblings(),
            "the drafter proposed a tree; this verifier decides chains only"
        );
        Ok(())
    }

    /// Decides among `children`, the proposals for one position in the order they are tried,
    /// from the target's scores there and that position's stream. Without
    /// [`Verifier::decides_siblings`] there is one child, decided as [`Verifier::decide`].
    fn decide_among(
        &mut self,
        children: &[&Candidate],
        target_logits: &[f32],
        sampling: &SamplingConfig,
        rng: &mut StdRng,
    ) -> Choice {
        assert_eq!(children.len(), 1, "a chain verifier decides one candidate per position");
        Choice::of_only(self.decide(children[0], target_logits, sampling, rng))
    }
}

/// The child of `children` whose token is `token`, else `token` itself as the replacement:
/// how a verifier that knows the position's token (greedy, coupled draws) decides a tree node.
pub(crate) fn child_with(children: &[&Candidate], token: u32) -> Choice {
    children.iter().position(|c| c.token == token).map_or(Choice::Reject(token), Choice::Accept)
}

/// Greedy verification: accept the candidate if it is the target's argmax, else replace it
/// by the argmax. Reproduces greedy decoding of the target exactly.
pub struct ExactMatch;

impl Verifier for ExactMatch {
    fn decides_by_argmax(&self, _: &SamplingConfig) -> bool {
        true
    }

    fn decide(&mut self, candidate: &Candidate, target_logits: &[f32], _: &SamplingConfig, _: &mut StdRng) -> Verdict {
        let best = argmax(target_logits);
        if candidate.token == best { Verdict::Accept } else { Verdict::Reject(best) }
    }

    fn decides_siblings(&self) -> bool {
        true
    }

    /// The child that is the target's argmax, if any: the branch greedy decoding follows.
    fn decide_among(
        &mut self,
        children: &[&Candidate],
        target_logits: &[f32],
        _: &SamplingConfig,
        _: &mut StdRng,
    ) -> Choice {
        child_with(children, argmax(target_logits))
    }
}

/// The residual distribution `norm(max(p - q, 0))` sampled after a rejection. Falls back to
/// `p` if the residual has no mass (only possible when p == q up to rounding, where a
/// rejection has probability ~0).
pub fn residual_distribution(p: &[f32], q: &[f32]) -> Vec<f32> {
    // Rows of different lengths would drop the target's mass past the shorter one: a draft
    // must be padded to its target's vocabulary (`loader::pair_up`).
    assert_eq!(p.len(), q.len(), "target and draft distributions of different vocabularies");
    renormalized(p.iter().zip(q).map(|(a, b)| (a - b).max(0.0)).collect(), p)
}

/// The residual of a point-mass proposal (`q` one-hot on `token`, a lookup draft's):
/// `norm(max(p - q, 0))` is `p` without `token`, renormalised; `p` itself if `token` held all
/// the mass (then a rejection has probability 0).
pub fn point_mass_residual(p: &[f32], token: u32) -> Vec<f32> {
    let mut r = p.to_vec();
    r[token as usize] = 0.0;
    renormalized(r, p)
}

/// `r` scaled to sum to 1, or `p` when `r` has no mass.
fn renormalized(mut r: Vec<f32>, p: &[f32]) -> Vec<f32> {
    let sum: f64 = r.iter().map(|&x| x as f64).sum();
    if sum <= 0.0 {
        return p.to_vec();
    }
    let inv = (1.0 / sum) as f32;
    r.iter_mut().for_each(|x| *x *= inv);
    r
}

/// Speculative sampling (Leviathan et al.; Chen et al.): accept candidate `y` with
/// probability `min(1, p(y) / q(y))`, both warped identically; on a rejection sample from
/// `norm(max(p - q, 0))`. The token at the position is then distributed exactly as sampling
/// from the warped target, for any `q`, provided `y` was drawn from the `q` it is tested
/// against. An empty `q` is a point mass on the candidate ([`point_mass_residual`]). Greedy
/// settings decide as [`ExactMatch`].
pub struct RejectionSampler;

impl Verifier for RejectionSampler {
    fn decides_by_argmax(&self, sampling: &SamplingConfig) -> bool {
        sampling.is_greedy()
    }

    fn decide(&mut self, c: &Candidate, target_logits: &[f32], sampling: &SamplingConfig, rng: &mut StdRng) -> Verdict {
        if sampling.is_greedy() {
            return ExactMatch.decide(c, target_logits, sampling, rng);
        }
        // A point mass (no q) puts all its probability on its token: accepting it with p/q
        // for any q_token below 1 would favour it over the target's p.
        assert!(!c.q.is_empty() || c.q_token == 1.0, "a point-mass candidate must have q_token 1 (got {})", c.q_token);
        let p = sampling.probabilities(target_logits);
        let (py, qy) = (p[c.token as usize] as f64, c.q_token as f64);
        let r: f64 = rng.random::<f64>();
        if r * qy < py {
            Verdict::Accept
        } else {
            // Rejected: r >= p/q.
            let residual =
                if c.q.is_empty() { point_mass_residual(&p, c.token) } else { residual_distribution(&p, &c.q) };
            Verdict::Reject(sample_from(&residual, rng))
        }
    }

    fn decides_siblings(&self) -> bool {
        true
    }

    fn check_tree(&self, tree: &DraftTree, sampling: &SamplingConfig) -> Result<()> {
        if sampling.is_greedy() {
            return Ok(());
        }
        for parent in std::iter::once(None).chain((0..tree.len()).map(Some)) {
            let children = tree.children(parent);
            ensure!(
                children.len() < 2 || children.iter().all(|&i| tree.node(i).candidate.q.is_empty()),
                "the drafter proposed siblings drawn from its distribution (node {}); sampled siblings need recursive rejection sampling, and the rejection sampler decides siblings only when they are point masses (lookup, suffix or greedily chosen tokens)",
                children[0]
            );
        }
        Ok(())
    }

    /// One child: [`Verifier::decide`]. Several: each must be a point mass (a looked-up or
    /// deterministically chosen token, `q` empty), and they are tried in order as SpecInfer's
    /// multi-round test does for point masses: child y is accepted with probability `r(y)` of
    /// the current residual `r` (at first the target's `p`); on a rejection y is removed from
    /// `r`, which is renormalised; after the last child the token is drawn from `r`. The
    /// committed token is distributed as `p` whatever the children are ([`point_mass_residual`]
    /// at each step; a sibling repeating a rejected token has residual probability 0).
    fn decide_among(
        &mut self,
        children: &[&Candidate],
        target_logits: &[f32],
        sampling: &SamplingConfig,
        rng: &mut StdRng,
    ) -> Choice {
        if sampling.is_greedy() {
            return ExactMatch.decide_among(children, target_logits, sampling, rng);
        }
        if let [only] = children {
            return Choice::of_only(self.decide(only, target_logits, sampling, rng));
        }
        assert!(
            children.iter().all(|c| c.q.is_empty()),
            "siblings drawn from a draft distribution need recursive rejection sampling; point masses only here"
        );
        let mut residual = sampling.probabilities(target_logits);
        for (i, c) in children.iter().enumerate() {
            if rng.random::<f64>() < residual[c.token as usize] as f64 {
                return Choice::Accept(i);
            }
            residual = point_mass_residual(&residual, c.token);
        }
        Choice::Reject(sample_from(&residual, rng))
    }
}

/// Drafter-invariant verification ([`crate::coupling`]): the target draws its token at the
/// position with the position's shared noise, which the draft's candidate was drawn with too;
/// the candidate is accepted when it is that token, else replaced by it. The token at every
/// position is the target's own draw, so the output is plain sampling's with the same seed,
/// for any drafter. Greedy settings decide as [`ExactMatch`].
pub struct CoupledSampler;

impl Verifier for CoupledSampler {
    fn decides_by_argmax(&self, sampling: &SamplingConfig) -> bool {
        sampling.is_greedy()
    }

    fn decide(&mut self, c: &Candidate, target_logits: &[f32], sampling: &SamplingConfig, rng: &mut StdRng) -> Verdict {
        if sampling.is_greedy() {
            return ExactMatch.decide(c, target_logits, sampling, rng);
        }
        let token = coupled_pick(&sampling.probabilities(target_logits), rng);
        if c.token == token { Verdict::Accept } else { Verdict::Reject(token) }
    }

    fn draws(&self) -> Draws {
        Draws::Coupled
    }

    fn decides_siblings(&self) -> bool {
        true
    }

    /// The child that is the target's own draw at the position, if any.
    fn decide_among(
        &mut self,
        children: &[&Candidate],
        target_logits: &[f32],
        sampling: &SamplingConfig,
        rng: &mut StdRng,
    ) -> Choice {
        if sampling.is_greedy() {
            return ExactMatch.decide_among(children, target_logits, sampling, rng);
        }
        child_with(children, coupled_pick(&sampling.probabilities(target_logits), rng))
    }
}
