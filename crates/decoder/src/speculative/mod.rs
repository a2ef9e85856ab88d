//! Speculative decoding as a composition of parts, so that the papers' methods are
//! combinations rather than separate loops:
//!
//! - a [`Drafter`] proposes candidates with the draft distributions `q` they were sampled from
//!   and the draft hidden states ([`PlainDrafter`]; EasySpec's layer-parallel
//!   [`FuzzyDrafter`] with bonus [`Calibration`]);
//! - a [`StopPolicy`] decides after each candidate whether to stop drafting ([`FixedK`],
//!   SpecDec++'s [`HeadPolicy`], the training-free [`ConfidencePolicy`]);
//! - a [`Verifier`] checks the candidates against the target distributions `p`
//!   ([`RejectionSampler`], lossless for any `q`; [`ExactMatch`] for greedy decoding);
//! - a scheduler runs rounds: [`generate_speculative`] is the sequential draft-then-verify
//!   scheduler, [`generate_dsi`] DSI's speculation-parallel one (verifications on several
//!   target workers while drafting goes on).
//!
//! Cache invariant: each model's KV cache holds a prefix of the committed tokens; a round
//! first feeds whatever committed tokens its cache lacks, and after verification both caches
//! are truncated to the positions whose tokens were committed.

mod drafter;
mod dsi;
mod engine;
mod fuzzy;
mod head;
mod metrics;
mod policy;
mod verifier;

pub use drafter::{Candidate, DraftRound, Drafter, PlainDrafter};
pub use dsi::{generate_dsi, generate_dsi_on, lookahead_for, DsiConfig, DsiGeneration, DsiStats};
pub use engine::{generate_autoregressive, generate_speculative, Generation, SpecConfig};
pub use fuzzy::{Calibration, Compat, FuzzyDrafter};
pub use head::{AcceptanceHead, HeadSpec};
pub use metrics::RequestMetrics;
pub use policy::{AcceptanceModel, ConfidencePolicy, DraftStep, FixedK, HeadPolicy, HeadRule, StopPolicy};
pub use verifier::{residual_distribution, ExactMatch, RejectionSampler, Verdict, Verifier};
