//! specx-run: what every run directory of specx has in common, whichever command made it
//! (`specx datagen`, `specx train`, `specx eval`, and the Slurm arrays that run their parts).
//!
//! - [`manifest`]: the envelope of a run's `manifest.json` ([`RunManifest`]: format version,
//!   read and write with portable paths, identity and the "same setup" check with a readable
//!   difference), and the record of a model with its checksums;
//! - [`part`]: `--shard I/N` parts and their directories; [`devices`]: parts run side by
//!   side on several devices; [`merge`]: the checks before parts merge;
//! - [`resume`]: the temporaries that killed atomic writes leave behind;
//! - [`paths`]: config paths resolved against the config's directory and the caches, and
//!   written back portably;
//! - [`config`]: reading TOML configs, and the run's own `config.toml`;
//! - [`seed`]: the seeded generator and the per-prompt seed derivation of data and splits;
//! - [`slurm`]: a config's `[slurm]` table;
//! - [`args`]: the arguments every run command shares (`--config`, `--out`, `--shard`,
//!   `--devices`, `--limit`, `--no-progress`).
//!
//! Atomic writes and checksums themselves are the runtime's ([`specx_decoder::fsutil`]): the
//! decoder writes GGUF files and heads with them too.

pub mod args;
pub mod config;
pub mod config_keys;
pub mod devices;
pub mod manifest;
pub mod merge;
pub mod part;
pub mod paths;
pub mod resume;
pub mod seed;
pub mod slurm;

pub use args::RunArgs;
pub use manifest::{ModelRecord, RunConfig, RunManifest};
pub use part::Part;
