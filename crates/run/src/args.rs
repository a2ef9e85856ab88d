//! The command-line arguments every run command shares (`specx datagen`, `specx eval`), as one
//! clap `Args` struct that each command flattens into its own.

use crate::part::Part;
use anyhow::{Context, Result};
use clap::Args;
use std::path::{Path, PathBuf};

#[derive(Args, Debug, Default, Clone)]
pub struct RunArgs {
    /// Experiment config (TOML): models, prompts, settings, seeds and output; see configs/ and
    /// docs/reference/config.md.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Run directory, instead of the config's [output] dir. Rerunning the same command into
    /// the same directory resumes; a directory holding another setup is refused.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Run only part I of N (`I/N`, 0-based): the run's units u with u % N == I (datagen's
    /// shards of prompts; eval's prompt x sampling setting x seed units). Run each part into
    /// its own directory, then merge them with the command's `merge`.
    #[arg(long, value_name = "I/N")]
    pub shard: Option<Part>,
    /// Several devices at once, instead of the config's [models] devices (`cpu,wgpu:0`: part 0
    /// of 2 on the CPU, part 1 on the first Vulkan adapter): part I runs on the I-th device in
    /// OUT/parts/I, side by side, then the parts are merged into OUT. Run the same command
    /// again to resume.
    #[arg(long, value_delimiter = ',')]
    pub devices: Vec<String>,
    /// Use only the first N prompts (of the split, or of each prompt set after its seeded
    /// sample), instead of the config's limit.
    #[arg(long)]
    pub limit: Option<usize>,
    /// Log a line per unit of work instead of drawing progress bars.
    #[arg(long)]
    pub no_progress: bool,
}

impl RunArgs {
    /// The config file, or an error naming the command that needs one.
    pub fn config_path(&self, command: &str) -> Result<&Path> {
        self.config.as_deref().with_context(|| format!("specx {command} needs --config FILE (see configs/)"))
    }

    /// `--out`, resolved against the working directory.
    pub fn out_dir(&self) -> Result<Option<PathBuf>> {
        self.out.as_deref().map(crate::paths::resolve_from_cwd).transpose()
    }

    /// `--shard`, its range checked.
    pub fn part(&self) -> Result<Option<Part>> {
        self.shard.map(|p| p.check().map(|()| p)).transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        run: RunArgs,
    }

    #[test]
    fn shared_arguments_parse_and_a_bad_shard_is_refused() {
        let c = Cmd::try_parse_from([
            "x",
            "--config",
            "c.toml",
            "--shard",
            "1/4",
            "--devices",
            "cpu,wgpu:0",
            "--limit",
            "3",
        ])
        .unwrap();
        assert_eq!(c.run.part().unwrap(), Some(Part { index: 1, count: 4 }));
        assert_eq!(c.run.devices, ["cpu", "wgpu:0"]);
        assert_eq!(c.run.config_path("eval").unwrap(), Path::new("c.toml"));
        assert!(Cmd::try_parse_from(["x", "--shard", "1-4"]).is_err());
        let out_of_range = Cmd::try_parse_from(["x", "--shard", "4/4"]).unwrap();
        assert!(out_of_range.run.part().is_err());
        let e = RunArgs::default().config_path("datagen").unwrap_err().to_string();
        assert!(e.contains("specx datagen needs --config"), "{e}");
    }
}
