//! The envelope of a run directory's `manifest.json`, whichever command wrote it: a format
//! version checked on read, paths written portably and resolved again, an identity (what
//! must agree for a run to resume into the directory or for parts to merge) and the "same
//! setup" check that names the first difference. Also the record of a model with its
//! checksums, which every manifest carries for the pair.

use crate::part::Part;
use anyhow::{Context, Result, bail};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use specx_decoder::fsutil::write_atomic;
use std::path::{Path, PathBuf};

pub const MANIFEST: &str = "manifest.json";

/// The config a run directory's manifest records: its paths made absolute against the
/// directory after a read and written relative to the caches for a write, and the devices
/// its parts ran on.
pub trait RunConfig: Clone {
    /// Makes the config's paths absolute against `dir`.
    fn resolve(&mut self, dir: &Path);
    /// The config with its paths written relative to the caches (`$SPECX_MODELS/...`).
    fn portable(&self) -> Self;
    /// The devices the run's parts ran on side by side (`[models] devices`; empty: one).
    fn devices(&self) -> &[String];
}

/// A run directory's manifest. Implementors state their format, their config and what
/// identifies the run; reading and writing are alike for every kind of run.
pub trait RunManifest: Serialize + DeserializeOwned + Clone {
    /// The format this specx reads and writes (`specx-eval/1`): a manifest of another format
    /// is refused with both named.
    const FORMAT: &'static str;
    /// What a directory holding this manifest is, for messages (`a datagen run directory`).
    const KIND: &'static str;
    type Config: RunConfig;
    /// The format the manifest was written in.
    fn format(&self) -> &str;
    fn config(&self) -> &Self::Config;
    fn config_mut(&mut self) -> &mut Self::Config;
    /// What must agree for a run to resume into a directory or for parts to merge: settings
    /// and checksums, not where files live, the machine, the part, or the progress.
    fn identity(&self) -> Value;
    /// Which part of a `--shard I/N` run the directory holds (None: a whole or merged run).
    fn part(&self) -> Option<Part>;
    /// True when every unit the directory is responsible for is written.
    fn complete(&self) -> bool;
    /// How far the directory's run has got, for messages (`3 units done`).
    fn progress(&self) -> String;

    /// The devices the run's parts ran on side by side.
    fn devices(&self) -> &[String] {
        self.config().devices()
    }

    /// Reads `dir/manifest.json` ([`read`]).
    fn read(dir: &Path) -> Result<Self> {
        read(dir)
    }

    /// Writes `dir/manifest.json` ([`write`]).
    fn write(&self, dir: &Path) -> Result<()> {
        write(dir, self)
    }
}

/// Reads `dir/manifest.json`, checks its format and resolves its paths.
pub fn read<M: RunManifest>(dir: &Path) -> Result<M> {
    let p = dir.join(MANIFEST);
    let bytes =
        std::fs::read(&p).with_context(|| format!("reading {} (is {} {}?)", p.display(), dir.display(), M::KIND))?;
    let mut m: M = serde_json::from_slice(&bytes).with_context(|| format!("{}: malformed manifest", p.display()))?;
    if m.format() != M::FORMAT {
        bail!("{}: format '{}', this specx reads '{}'", p.display(), m.format(), M::FORMAT);
    }
    m.config_mut().resolve(dir);
    Ok(m)
}

/// Writes `dir/manifest.json` atomically, with portable paths ([`read`] resolves them again).
pub fn write<M: RunManifest>(dir: &Path, m: &M) -> Result<()> {
    let mut portable = m.clone();
    *portable.config_mut() = m.config().portable();
    write_atomic(&dir.join(MANIFEST), serde_json::to_string_pretty(&portable)?.as_bytes())
}

/// Refuses to write into `dir` when it holds a run of another setup (`old` vs `new`
/// identities) or another part of a sharded run.
pub fn ensure_same_setup(
    dir: &Path,
    what: &str,
    old: &Value,
    new: &Value,
    old_part: Option<Part>,
    new_part: Option<Part>,
) -> Result<()> {
    if old != new || old_part != new_part {
        bail!(
            "{} holds {what} with a different setup ({} differs{}); choose another output directory or delete it",
            dir.display(),
            identity_difference(old, new),
            if old_part != new_part { format!(", part {old_part:?} vs {new_part:?}") } else { String::new() }
        );
    }
    Ok(())
}

/// Names the first difference between two identities (a dotted key path, with both values
/// where they are not objects), for error messages.
pub fn identity_difference(a: &Value, b: &Value) -> String {
    fn walk(a: &Value, b: &Value, path: &str) -> Option<String> {
        match (a, b) {
            (Value::Object(x), Value::Object(y)) => {
                let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
                keys.into_iter().find_map(|k| match (x.get(k), y.get(k)) {
                    (Some(u), Some(v)) => walk(u, v, &format!("{path}.{k}")),
                    _ => Some(format!("{path}.{k}")),
                })
            }
            _ if a != b => Some(format!("{} ({} vs {})", path.trim_start_matches('.'), a, b)),
            _ => None,
        }
    }
    walk(a, b, "").unwrap_or_else(|| "nothing".into())
}

/// A model of the pair as a manifest records it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelRecord {
    pub path: PathBuf,
    pub format: String,
    /// [`specx_decoder::LoadedModel::weights_sha256`]: what a head checkpoint must match.
    pub sha256: String,
    pub files: Vec<PathBuf>,
    pub tokenizer_sha256: String,
    pub architecture: String,
    pub hidden_size: usize,
    pub layers: usize,
    pub vocab_size: usize,
    /// The transform the model ran with ([`specx_decoder::DraftTransform::identity`]):
    /// `none` for a model as loaded (and every run made before transforms existed).
    #[serde(default = "no_transform")]
    pub transform: String,
}

fn no_transform() -> String {
    "none".into()
}

impl ModelRecord {
    /// The record of a loaded model (as loaded: `transform` is `none`), its paths portable.
    pub fn of(m: &specx_decoder::LoadedModel) -> Result<Self> {
        let c = m.model.config();
        Ok(Self {
            path: crate::paths::portable_path(&m.path),
            format: format!("{:?}", m.format),
            sha256: m.weights_sha256()?,
            files: m.files.iter().map(|f| crate::paths::portable_path(f)).collect(),
            tokenizer_sha256: m.tokenizer.source_sha256()?,
            architecture: c.architecture.clone(),
            hidden_size: c.hidden_size,
            layers: c.num_hidden_layers,
            vocab_size: c.vocab_size,
            transform: no_transform(),
        })
    }

    /// What the model's outputs depend on: its weights' sha256, and its transform when it has
    /// one (hashed together). Keys the feature caches of a run.
    pub fn weights_key(&self) -> String {
        if self.transform == "none" {
            self.sha256.clone()
        } else {
            specx_decoder::fsutil::sha256_hex(format!("{} {}", self.sha256, self.transform).as_bytes())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(Clone, Debug, Serialize, Deserialize)]
    struct Toy {
        format: String,
        config: ToyConfig,
        seed: u64,
        part: Option<Part>,
    }

    #[derive(Clone, Debug, Serialize, Deserialize)]
    struct ToyConfig {
        dir: PathBuf,
    }

    impl RunConfig for ToyConfig {
        fn resolve(&mut self, dir: &Path) {
            self.dir = dir.join(&self.dir);
        }
        fn portable(&self) -> Self {
            Self { dir: PathBuf::from(".") }
        }
        fn devices(&self) -> &[String] {
            &[]
        }
    }

    impl RunManifest for Toy {
        const FORMAT: &'static str = "specx-toy/1";
        const KIND: &'static str = "a toy run directory";
        type Config = ToyConfig;
        fn format(&self) -> &str {
            &self.format
        }
        fn config(&self) -> &ToyConfig {
            &self.config
        }
        fn config_mut(&mut self) -> &mut ToyConfig {
            &mut self.config
        }
        fn identity(&self) -> Value {
            json!({ "format": self.format, "seed": self.seed })
        }
        fn part(&self) -> Option<Part> {
            self.part
        }
        fn complete(&self) -> bool {
            true
        }
        fn progress(&self) -> String {
            "done".into()
        }
    }

    #[test]
    fn a_manifest_round_trips_portably_and_another_format_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let m = Toy {
            format: Toy::FORMAT.into(),
            config: ToyConfig { dir: dir.path().to_path_buf() },
            seed: 3,
            part: None,
        };
        write(dir.path(), &m).unwrap();
        let text = std::fs::read_to_string(dir.path().join(MANIFEST)).unwrap();
        assert!(!text.contains(&*dir.path().to_string_lossy()), "written with the absolute path: {text}");
        let back: Toy = read(dir.path()).unwrap();
        assert_eq!((back.seed, back.config.dir.as_path()), (3, dir.path()));
        std::fs::write(dir.path().join(MANIFEST), text.replace("specx-toy/1", "specx-toy/0")).unwrap();
        let e = format!("{:#}", read::<Toy>(dir.path()).unwrap_err());
        assert!(e.contains("specx-toy/0") && e.contains("specx-toy/1"), "{e}");
        let e = format!("{:#}", read::<Toy>(&dir.path().join("nowhere")).unwrap_err());
        assert!(e.contains("a toy run directory"), "{e}");
    }

    #[test]
    fn the_first_difference_is_named_with_both_values() {
        let a = json!({"config": {"seed": 1, "k": 3}, "draft": "aa"});
        let b = json!({"config": {"seed": 2, "k": 3}, "draft": "aa"});
        assert_eq!(identity_difference(&a, &b), "config.seed (1 vs 2)");
        assert_eq!(identity_difference(&a, &a), "nothing");
        assert_eq!(identity_difference(&a, &json!({"config": {"seed": 1, "k": 3}})), ".draft");
        let dir = Path::new("/runs/x");
        ensure_same_setup(dir, "a run", &a, &a, None, None).unwrap();
        let e = ensure_same_setup(dir, "a run", &a, &b, None, None).unwrap_err().to_string();
        assert!(e.contains("/runs/x") && e.contains("config.seed (1 vs 2)"), "{e}");
        let part = Some(Part { index: 0, count: 2 });
        assert!(ensure_same_setup(dir, "a run", &a, &a, None, part).unwrap_err().to_string().contains("part None vs"));
    }
}
