//! The unit a drafter proposes and a verifier judges: one token with the draft distribution it
//! was drawn from. Its own module so that drafters, rounds and verifiers all stand on it.

/// One proposed token.
#[derive(Clone, Debug)]
pub struct Candidate {
    pub token: u32,
    /// The warped draft distribution `q` the token was sampled from (the verifier tests
    /// against this very `q`). Empty in greedy mode, where `q` is one-hot on `token`.
    pub q: Vec<f32>,
    /// `q[token]` (1 in greedy mode).
    pub q_token: f32,
    /// The n-gram size whose match proposed it (prompt lookup), `None` from a draft model.
    pub ngram: Option<usize>,
}
