//! Fixtures the workspace's integration tests share, so that each test file holds its test and
//! not another copy of the set-up: where the repository and the prompt sets beside it are
//! ([`paths`]), a tiny synthetic model pair with an untrained head ([`pair`]), a tiny datagen
//! run ([`datagen`]), the `[models]` and `[[prompts]]` tables of eval configs ([`config`]) and a
//! tree copy ([`files`]). The tiny models themselves are written by
//! `specx_decoder::synthetic`, which `specx device-check` also runs on.

pub mod config;
pub mod datagen;
pub mod files;
pub mod pair;
pub mod paths;
