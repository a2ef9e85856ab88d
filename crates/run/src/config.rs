//! Reading a run's TOML config, and the `config.toml` a run directory keeps. Configs deny
//! unknown keys, so a typo never silently falls back to a default; errors name the file.

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

/// The file of a run directory that repeats the run: `--config DIR/config.toml`.
pub const RUN_CONFIG: &str = "config.toml";

/// Parses a TOML config; errors name `origin` and, for unknown keys, the key.
pub fn parse_toml<T: serde::de::DeserializeOwned>(text: &str, origin: &Path) -> Result<T> {
    toml::from_str(text).with_context(|| format!("config {}", origin.display()))
}

/// Reads and parses the TOML config at `path`; returns it with the directory its relative
/// paths are relative to (the file's own, made absolute against the working directory).
pub fn read_toml<T: serde::de::DeserializeOwned>(path: &Path) -> Result<(T, PathBuf)> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading config {}", path.display()))?;
    let cfg = parse_toml(&text, path)?;
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let base = std::env::current_dir().map(|cwd| cwd.join(dir)).unwrap_or_else(|_| dir.to_path_buf());
    Ok((cfg, base))
}

/// Reads the config at `path` ([`read_toml`]) with its relative paths resolved against the
/// file's directory.
pub fn load_config<C: crate::RunConfig + serde::de::DeserializeOwned>(path: &Path) -> Result<C> {
    let (mut cfg, base): (C, PathBuf) = read_toml(path)?;
    cfg.resolve(&base);
    Ok(cfg)
}

/// Writes a run's effective config (`toml`: overrides applied, paths portable) into its run
/// directory, atomically; runs and merges of every command leave it alike.
pub fn write_run_config(dir: &Path, toml: &str) -> Result<()> {
    specx_decoder::fsutil::write_atomic(&dir.join(RUN_CONFIG), toml.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Tiny {
        seed: u64,
    }

    #[test]
    fn a_config_reads_back_and_a_typo_is_named_with_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(&path, "seed = 3\n").unwrap();
        let (t, base): (Tiny, PathBuf) = read_toml(&path).unwrap();
        assert_eq!(t.seed, 3);
        assert_eq!(base, dir.path());
        let e = format!("{:#}", parse_toml::<Tiny>("sed = 3\n", Path::new("cfg.toml")).unwrap_err());
        assert!(e.contains("cfg.toml") && e.contains("sed"), "{e}");
        let e = format!("{:#}", read_toml::<Tiny>(&dir.path().join("absent.toml")).unwrap_err());
        assert!(e.contains("absent.toml"), "{e}");
    }
}
