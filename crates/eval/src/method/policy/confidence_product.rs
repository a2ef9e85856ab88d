//! SpecDec++'s product rule on the draft's confidence: stop when 1 - the product of the round's
//! confidences passes `threshold` (the token is kept; [`super::confidence`] holds the rule for
//! both).

/// The confidence rule on the round's product.
pub type ConfidenceProduct = super::confidence::ConfidenceRule<true>;
