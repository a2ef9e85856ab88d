//! An EAGLE-style feature head ([`specx_decoder::speculative::FeatureHead`]) trained on the
//! target's hidden states of datagen text: [`data`] reads the text and the target's states,
//! [`config`] the TOML config, [`train`] the resumable loop, [`cli`] `specx
//! train-feature-head`.

pub mod cli;
pub mod config;
pub mod data;
pub mod train;
