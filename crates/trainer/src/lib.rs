//! specx-trainer: trains SpecDec++'s acceptance head ([`specx_decoder::speculative::head`]) on the
//! features and labels a `specx datagen` run wrote, with burn (autodiff + AdamW).
//!
//! [`data`] loads labelled rows and batches them by seed, [`loss`] is the weighted soft-label
//! BCE on logits, [`metrics`] the evaluation quantities (weighted loss, binary KL, AUROC, ECE
//! with a reliability table), [`schedule`] the warmup + cosine learning rate, [`train`] the
//! resumable loop with the best-dev checkpoint. [`feature_train`] trains an EAGLE-style feature
//! head ([`specx_decoder::speculative::FeatureHead`]) on the target's hidden states of datagen
//! text ([`feature_data`]), configured by [`feature_config`].

pub mod cli;
pub mod config;
pub mod data;
pub mod feature_cli;
pub mod feature_config;
pub mod feature_data;
pub mod feature_train;
pub mod loss;
pub mod metrics;
pub mod schedule;
pub mod train;
