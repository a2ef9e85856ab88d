//! SpecDec++'s rule on the newest head prediction alone: stop when the latest scored
//! candidate's predicted chance of a rejection passes `threshold` ([`super::head`] holds the
//! rule for both).

/// The head rule on the newest prediction.
pub type HeadToken = super::head::HeadRuleSpec<true>;
