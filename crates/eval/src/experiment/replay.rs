//! Replay of greedy runs: exact counts for any stop policy from a greedy AR output and the
//! draft alone (the target is never run).
//!
//! A greedy speculative run commits exactly the AR output, so a round that starts after `L`
//! committed tokens accepts the draft's candidates while they equal the AR tokens and then
//! commits one more AR token: where rounds start depends only on the draft's greedy tokens
//! along the AR output. What the draft proposes after a mismatch (its *branch*) only changes
//! how many candidates a round drafts (the stop policy and draft EOS act there); branches are
//! computed lazily, with the draft alone, as deep as some policy needs them.
//!
//! The draft runs as [`specx_decoder::spec::PlainDrafter`] does: the first forward takes the
//! prompt and the first AR token together, then one token per forward; a branch continues
//! from a copy of the cache at its position. Stop decisions use the same rules as live runs
//! ([`HeadRule::stop`], [`ConfidencePolicy::stop`], fixed K).

use super::grid::Setting;
use crate::methods::MethodKind;
use anyhow::{ensure, Context, Result};
use specx_decoder::sampling::{argmax, top_probability};
use specx_decoder::spec::{AcceptanceHead, ConfidencePolicy, HeadRule, RequestMetrics};
use specx_decoder::{KvCache, Transformer};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// What the draft proposes at one position: its greedy token, the softmax probability of
/// that token, and each head's acceptance probability for the hidden state of the input
/// token (the token before the proposal).
#[derive(Clone, Debug)]
struct Look {
    token: u32,
    confidence: f32,
    head_probs: Vec<f64>,
}

/// The draft after a mismatch at AR index `p`: its cache holds the prompt and `ar[..p]`;
/// `next` is the token to feed next (the mismatching proposal, then each branch token).
struct Branch {
    cache: KvCache,
    next: u32,
    looks: Vec<Look>,
}

/// A stop policy as a pure rule over looks (the replay counterpart of the live policies).
#[derive(Clone, Debug)]
pub enum ReplayPolicy {
    Fixed(usize),
    /// SpecDec++ rule with the index of its head in the trace's head list.
    Head(HeadRule, usize),
    Confidence(ConfidencePolicy),
}

impl ReplayPolicy {
    /// The replay policy of a setting; `head_index` maps head names to trace head indices.
    pub fn of(s: &Setting, head_index: &HashMap<String, usize>) -> Result<Option<Self>> {
        let (min, max) = (s.min.unwrap_or(HeadRule::PAPER_MIN), s.max.unwrap_or(HeadRule::PAPER_MAX));
        Ok(match s.method {
            MethodKind::Ar => None,
            MethodKind::Specdec => Some(Self::Fixed(s.k.unwrap_or(1))),
            MethodKind::Specdecpp => {
                let name = s.head.as_deref().unwrap_or_default();
                let i = *head_index.get(name).with_context(|| format!("head '{name}' is not loaded"))?;
                Some(Self::Head(HeadRule::new(s.threshold.unwrap_or(0.7), min, max), i))
            }
            MethodKind::Confidence => {
                Some(Self::Confidence(ConfidencePolicy { threshold: s.threshold.unwrap_or(0.5) as f32, min_candidates: min, max_candidates: max }))
            }
        })
    }

    fn max_candidates(&self) -> usize {
        match self {
            Self::Fixed(k) => *k,
            Self::Head(r, _) => r.max_candidates,
            Self::Confidence(c) => c.max_candidates,
        }
    }
}

/// The draft's behaviour along one greedy AR output, with lazily computed branches.
pub struct DraftTrace<'a> {
    draft: &'a Transformer,
    heads: &'a [AcceptanceHead],
    eos: &'a [u32],
    ar: Vec<u32>,
    max_new_tokens: usize,
    /// `path[j]` (1 <= j < ar.len()): the draft's look after the prompt and `ar[..j]`.
    path: Vec<Option<Look>>,
    branches: HashMap<usize, Branch>,
    /// Draft forwards run so far, and their time.
    pub forwards: usize,
    pub draft_time: Duration,
}

impl<'a> DraftTrace<'a> {
    /// Runs the draft along `ar` (the AR output of `prompt`, generated with a budget of
    /// `max_new_tokens`).
    pub fn new(draft: &'a Transformer, heads: &'a [AcceptanceHead], eos: &'a [u32], prompt: &[u32], ar: Vec<u32>, max_new_tokens: usize) -> Result<Self> {
        ensure!(!prompt.is_empty(), "empty prompt");
        let mut t = Self { draft, heads, eos, max_new_tokens, path: vec![None; ar.len()], branches: HashMap::new(), forwards: 0, draft_time: Duration::ZERO, ar };
        if t.ar.len() < 2 {
            return Ok(t);
        }
        let mut cache = draft.new_cache(1);
        let mut input: Vec<u32> = prompt.to_vec();
        input.push(t.ar[0]);
        for j in 1..t.ar.len() {
            let look = t.step(&input, &mut cache)?;
            if look.token != t.ar[j] {
                t.branches.insert(j, Branch { cache: cache.clone(), next: look.token, looks: Vec::new() });
            }
            t.path[j] = Some(look);
            input = vec![t.ar[j]];
        }
        Ok(t)
    }

    fn step(&mut self, input: &[u32], cache: &mut KvCache) -> Result<Look> {
        let t = Instant::now();
        let out = self.draft.forward(input, cache)?;
        let logits = out.logits_tail(1).remove(0);
        let hidden = out.hidden_tail(1).remove(0);
        let token = argmax(&logits);
        let head_probs = self.heads.iter().map(|h| h.accept_probability(&hidden)).collect::<Result<Vec<f64>>>()?;
        self.forwards += 1;
        self.draft_time += t.elapsed();
        Ok(Look { token, confidence: top_probability(&logits, token), head_probs })
    }

    /// The `depth`-th token the draft proposes after its mismatch at AR index `p` (1-based).
    fn branch_look(&mut self, p: usize, depth: usize) -> Result<Look> {
        let mut b = self.branches.remove(&p).expect("branches exist at every mismatch");
        let result = (|| {
            while b.looks.len() < depth {
                let look = self.step(&[b.next], &mut b.cache)?;
                b.next = look.token;
                b.looks.push(look);
            }
            Ok(b.looks[depth - 1].clone())
        })();
        self.branches.insert(p, b);
        result
    }

    /// Counts of a greedy speculative run with `policy` (timings zero).
    pub fn replay(&mut self, policy: &ReplayPolicy) -> Result<RequestMetrics> {
        let n = self.ar.len();
        let mut c = RequestMetrics { n_generated: n, n_target_calls: usize::from(n > 0), ..Default::default() };
        let mut l = 1; // committed response tokens (the first comes from the target's prefill)
        while l < n {
            let max = (self.max_new_tokens - l).min(policy.max_candidates());
            let mut product = 1.0f64;
            let mut mismatch: Option<usize> = None; // AR index of the first mismatch
            let mut k = 0;
            loop {
                let i = k + 1;
                let look = match mismatch {
                    None => self.path[l + k].clone().context("AR output shorter than a matched draft")?,
                    Some(p) => self.branch_look(p, l + k - p)?,
                };
                if mismatch.is_none() && look.token != self.ar[l + k] {
                    mismatch = Some(l + k);
                }
                k = i;
                let stop = match policy {
                    ReplayPolicy::Fixed(kk) => i >= *kk,
                    ReplayPolicy::Head(rule, h) => {
                        if i >= 2 {
                            product *= look.head_probs[*h];
                        }
                        rule.stop(i, product)
                    }
                    ReplayPolicy::Confidence(cp) => cp.stop(i, look.confidence),
                };
                if stop || self.eos.contains(&look.token) || i >= max {
                    break;
                }
            }
            let a = mismatch.map_or(k, |p| p - l);
            c.n_target_calls += 1;
            c.n_draft_calls += k;
            c.n_drafted += k;
            c.n_accepted += a;
            c.n_verified += if a < k { a + 1 } else { k };
            c.accepted_per_round.push(a);
            c.drafted_per_round.push(k);
            l = (l + a + 1).min(n);
        }
        Ok(c)
    }
}
