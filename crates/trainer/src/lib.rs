//! specx-trainer: the two networks specx trains with burn (autodiff + AdamW), each in its own
//! module: [`acceptance`], SpecDec++'s acceptance head on a `specx datagen` run's features and
//! labels, and [`feature`], the EAGLE-style feature head on the target's hidden states of
//! datagen text. [`schedule`] is the warmup + cosine learning rate both use.

pub mod acceptance;
pub mod feature;
pub mod schedule;
