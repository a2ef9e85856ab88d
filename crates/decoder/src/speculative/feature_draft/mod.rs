//! The feature-level drafter in the manner of EAGLE-1: [`network`] is the head (a decoder
//! layer that predicts the target's next hidden state), [`drafter`] drafts a chain with it, and
//! [`tap`] hands it the target's hidden states. Not to be confused with the acceptance head
//! ([`crate::speculative::AcceptanceHead`]), which only scores another drafter's candidates.

pub mod drafter;
pub mod network;
pub mod tap;

pub use drafter::{FeatureDraft, FeatureHeadDrafter};
pub use network::{
    FEATURE_HEAD_DIM, FeatureHead, FeatureHeadCache, FeatureHeadSpec, causal_mask_after, packed_causal_mask,
};
