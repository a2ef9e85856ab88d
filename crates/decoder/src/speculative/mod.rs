//! Speculative decoding as a composition of parts, so that the papers' methods are
//! combinations rather than separate loops:
//!
//! - a [`Drafter`] proposes candidates with the draft distributions `q` they were sampled from
//!   and the draft hidden states ([`PlainDrafter`]; EasySpec's layer-parallel
//!   [`FuzzyDrafter`] with bonus [`Calibration`]; [`PromptLookupDrafter`], no draft model;
//!   [`HybridDrafter`], lookup else the draft model; token trees from [`SuffixDrafter`] and
//!   EAGLE-2's [`DynamicTreeDrafter`]);
//! - a [`StopPolicy`] decides after each candidate whether to stop drafting (and hears how
//!   each round went): [`FixedK`], SpecDec++'s [`HeadPolicy`], and the training-free rules
//!   (HF's [`ConfidencePolicy`], [`RocThreshold`] and [`DynamicK`], llama.cpp's [`PMinPolicy`],
//!   [`SvipPolicy`], [`AdaEdlPolicy`], [`BanditK`]), and for prompt lookup
//!   [`MatchRatePolicy`] (this request's acceptance of matches by n-gram size);
//! - a [`Verifier`] decides each candidate against the target distribution `p` at its
//!   position ([`RejectionSampler`], lossless for any `q`; [`ExactMatch`] for greedy decoding),
//!   and among siblings when a drafter proposes a [`DraftTree`];
//! - the round ([`round`]): what drafting works from ([`DraftRound`]), the random [`Streams`]
//!   keyed by position, and the committed sequence with the one rule that extends it;
//! - a target scorer ([`scorer`]): the verification forward, with a cache that keeps its
//!   longest common prefix with the next request;
//! - a [`scheduler`] runs rounds: [`generate_speculative`] drafts, verifies and commits in
//!   turn; [`generate_dsi`] (DSI's speculation parallelism) verifies on several target
//!   workers while drafting goes on. Both give the same tokens for the same seed.
//!
//! Cache invariant: each model's KV cache holds a prefix of the committed tokens (and, for
//! DSI, of the speculative chain); a round first feeds whatever tokens its cache lacks, and
//! after verification both caches are cut back to the positions whose tokens were committed.

mod acceptance_head;
mod candidate;
mod drafter;
mod dynamic_tree;
mod easyspec;
pub mod feature_draft;
mod hybrid;
mod lookup;
mod metrics;
mod policy;
pub mod round;
pub mod scheduler;
pub(crate) mod scorer;
pub use scorer::target_rows_read;
mod suffix;
mod suffix_corpus;
pub mod suffix_tree;
mod tree;
mod verifier;

pub use acceptance_head::{AcceptanceHead, HeadSpec};
pub use candidate::Candidate;
pub use drafter::{Drafter, PlainDrafter, draft_rows_read};
pub use dynamic_tree::{DynamicTreeDrafter, DynamicTreeParams};
pub use easyspec::{Calibration, Compat, FuzzyDrafter};
pub use feature_draft::{
    FEATURE_HEAD_DIM, FeatureHead, FeatureHeadCache, FeatureHeadSpec, causal_mask_after, packed_causal_mask,
};
pub use feature_draft::{FeatureDraft, FeatureHeadDrafter};
pub use hybrid::HybridDrafter;
pub use lookup::PromptLookupDrafter;
pub use metrics::RequestMetrics;
pub use policy::calibrated;
pub use policy::{
    AcceptanceModel, AdaEdlParams, AdaEdlPolicy, BanditK, CalibratedParams, CalibratedPolicy, CalibratedRule,
    ConfidencePolicy, ConfidenceProductPolicy, Decision, DraftStats, DraftStep, DynamicK, FixedK, HEAD_STAT_INPUTS,
    HeadPolicy, HeadRule, HiddenState, LazyStats, MatchRatePolicy, PMinPolicy, PrecomputedHead, RocThreshold,
    RoundOutcome, StopPolicy, SvipPolicy, ThresholdPlusParams, ThresholdPlusPolicy, TreePricePolicy,
};
pub use round::{DraftRound, Generation, SpecConfig, Streams};
pub use scheduler::{
    DsiConfig, DsiGeneration, DsiStats, generate_autoregressive, generate_autoregressive_drawn, generate_dsi,
    generate_speculative, lookahead_for,
};
pub use suffix::{Speculation, SuffixDrafter, SuffixParams, speculate_in};
pub use suffix_corpus::{CorpusBound, SharedCorpus, SuffixCorpus};
pub use tree::{DraftTree, TreeNode};
pub use verifier::{
    Choice, CoupledSampler, ExactMatch, RejectionSampler, Verdict, Verifier, point_mass_residual, residual_distribution,
};
