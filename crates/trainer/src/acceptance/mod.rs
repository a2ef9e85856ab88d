//! SpecDec++'s acceptance head ([`specx_decoder::speculative::AcceptanceHead`]) trained on the
//! features and labels a `specx datagen` run wrote: [`data`] loads labelled rows and batches
//! them by seed, [`loss`] is the weighted soft-label BCE on logits, [`metrics`] the evaluation
//! quantities (weighted loss, binary KL, AUROC, ECE with a reliability table), [`train`] the
//! resumable loop with the best-dev checkpoint, [`cli`] `specx train [--sweep]`.

pub mod cli;
pub mod config;
pub mod data;
pub mod loss;
pub mod metrics;
pub mod train;
