//! specx-datagen: prompt sets and their templates, and the token-mixing acceptance datasets
//! of SpecDec++ §4.4 (`specx datagen`).
//!
//! A run: [`config`] (TOML) -> [`prompts`] + [`split`] select and template the prompts ->
//! [`generation`] runs the target and draft passes in batches and computes [`labels`] and
//! token mixing -> [`shard`] writes Parquet token tables and safetensors features ->
//! [`manifest`] records everything with checksums. [`run`] drives it (resumable, `--shard
//! i/n`), [`merge`] joins parts, [`devices`] runs one part per device at once, [`summary`]
//! prints what a run holds.

pub mod cli;
pub mod config;
pub mod devices;
pub mod generation;
pub mod labels;
pub mod manifest;
pub mod merge;
pub mod prompts;
pub mod run;
pub mod shard;
pub mod split;
pub mod summary;
