//! The method grid of a config, expanded into settings: what each results row was run with.

use super::config::MethodsConfig;
use crate::methods::{FuzzySpec, Method, MethodKind};
use anyhow::{ensure, Result};
use serde::{Deserialize, Serialize};
use specx_decoder::layer_groups::LayerGroups;
use specx_decoder::speculative::{AcceptanceHead, Calibration, Compat, ConfidencePolicy, HeadRule};
use std::collections::BTreeMap;

/// One point of the grid. Fields a method does not use are `None`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Setting {
    pub method: MethodKind,
    pub k: Option<usize>,
    /// Head name (its checkpoint directory's name) for `specdecpp`.
    pub head: Option<String>,
    pub threshold: Option<f64>,
    pub min: Option<usize>,
    pub max: Option<usize>,
    /// Target workers for `dsi` (whose lookahead is `k`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub servers: Option<usize>,
    /// EasySpec's layer-parallel strategy (`lp4` or the paper's notation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration: Option<Calibration>,
    /// Threads per EasySpec layer group (1 when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers: Option<usize>,
}

impl Setting {
    pub fn ar() -> Self {
        Self { method: MethodKind::Ar, k: None, head: None, threshold: None, min: None, max: None, servers: None, strategy: None, calibration: None, workers: None }
    }

    /// The stop policy and scheduler of an `easyspec` setting, as the plain-drafter setting
    /// with the same fields: the head policy with a head, the confidence rule with a threshold
    /// alone, fixed K otherwise; DSI's scheduler with target workers.
    fn easyspec_base(&self) -> Setting {
        let method = match (&self.head, self.threshold, self.servers) {
            (_, _, Some(_)) => MethodKind::Dsi,
            (Some(_), _, None) => MethodKind::Specdecpp,
            (None, Some(_), None) => MethodKind::Confidence,
            (None, None, None) => MethodKind::Specdec,
        };
        Setting { method, strategy: None, calibration: None, workers: None, ..self.clone() }
    }

    /// A short unique name: `ar`, `specdec K=4`, `specdecpp w6d3 h=0.7 [2,20]`,
    /// `confidence 0.5 [2,20]`.
    pub fn key(&self) -> String {
        let bounds = || format!("[{},{}]", self.min.unwrap_or(0), self.max.unwrap_or(0));
        match self.method {
            MethodKind::Ar => "ar".into(),
            MethodKind::Specdec => format!("specdec K={}", self.k.unwrap_or(0)),
            MethodKind::Specdecpp => format!("specdecpp {} h={} {}", self.head.as_deref().unwrap_or("?"), self.threshold.unwrap_or(0.0), bounds()),
            MethodKind::Confidence => format!("confidence {} {}", self.threshold.unwrap_or(0.0), bounds()),
            MethodKind::Dsi => format!("dsi SP={} k={}", self.servers.unwrap_or(0), self.k.unwrap_or(0)),
            MethodKind::Easyspec => {
                let workers = self.workers.filter(|&w| w > 1).map_or(String::new(), |w| format!(" x{w}"));
                let calibration = self.calibration.map_or("?", Calibration::name);
                format!("easyspec {} {calibration}{workers} | {}", self.strategy.as_deref().unwrap_or("?"), self.easyspec_base().key())
            }
            MethodKind::Oracle => "oracle".into(),
        }
    }

    /// The method family for grouping (`ar`, `specdec`, `specdecpp`, `confidence`, `dsi`,
    /// `easyspec`, `oracle`).
    pub fn family(&self) -> &'static str {
        match self.method {
            MethodKind::Ar => "ar",
            MethodKind::Specdec => "specdec",
            MethodKind::Specdecpp => "specdecpp",
            MethodKind::Confidence => "confidence",
            MethodKind::Dsi => "dsi",
            MethodKind::Easyspec => "easyspec",
            MethodKind::Oracle => "oracle",
        }
    }

    /// The runnable method; `heads` maps head names to loaded heads, `draft_layers` is the
    /// draft model's depth (an EasySpec strategy must cover it).
    pub fn method(&self, heads: &BTreeMap<String, AcceptanceHead>, draft_layers: usize) -> Result<Method> {
        let (min, max) = (self.min.unwrap_or(HeadRule::PAPER_MIN), self.max.unwrap_or(HeadRule::PAPER_MAX));
        Ok(match self.method {
            MethodKind::Ar => Method::Autoregressive,
            MethodKind::Specdec => Method::SpecDec { k: self.k.unwrap_or(1) },
            MethodKind::Specdecpp => {
                let name = self.head.as_deref().unwrap_or_default();
                let head = heads.get(name).ok_or_else(|| anyhow::anyhow!("head '{name}' is not loaded"))?;
                Method::SpecDecPP { head: head.clone(), rule: HeadRule::new(self.threshold.unwrap_or(0.7), min, max) }
            }
            MethodKind::Confidence => {
                Method::Confidence(ConfidencePolicy { threshold: self.threshold.unwrap_or(0.5) as f32, min_candidates: min, max_candidates: max })
            }
            MethodKind::Dsi => Method::Dsi { servers: self.servers.unwrap_or(1), lookahead: self.k.unwrap_or(1) },
            MethodKind::Easyspec => {
                let strategy = self.strategy.as_deref().unwrap_or("lp4");
                let fuzzy = FuzzySpec {
                    groups: LayerGroups::parse(strategy, draft_layers)?,
                    calibration: self.calibration.unwrap_or(Calibration::EveryRound),
                    workers: self.workers.unwrap_or(1),
                    compat: Compat::Lossless,
                };
                Method::EasySpec { fuzzy, base: Box::new(self.easyspec_base().method(heads, draft_layers)?) }
            }
            MethodKind::Oracle => anyhow::bail!("the oracle needs the AR output in advance: it can only be replayed (specx eval replay)"),
        })
    }
}

/// Head name of a checkpoint directory: its last path component.
pub fn head_name(dir: &std::path::Path) -> String {
    dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| dir.display().to_string())
}

/// Every setting of the grid, AR first, in a fixed order (the order rows are run and written).
pub fn expand(m: &MethodsConfig) -> Result<Vec<Setting>> {
    let mut out = vec![Setting::ar()];
    if let Some(g) = &m.specdec {
        out.extend(g.k.iter().map(|&k| Setting { method: MethodKind::Specdec, k: Some(k), ..Setting::ar() }));
    }
    if let Some(g) = &m.specdecpp {
        for h in &g.heads {
            for &t in &g.thresholds {
                for &[lo, hi] in &g.bounds {
                    out.push(Setting { method: MethodKind::Specdecpp, head: Some(head_name(h)), threshold: Some(t), min: Some(lo), max: Some(hi), ..Setting::ar() });
                }
            }
        }
    }
    if let Some(g) = &m.confidence {
        for &t in &g.thresholds {
            for &[lo, hi] in &g.bounds {
                out.push(Setting { method: MethodKind::Confidence, threshold: Some(t), min: Some(lo), max: Some(hi), ..Setting::ar() });
            }
        }
    }
    if let Some(g) = &m.dsi {
        // Eq. 1's lookahead per server count, from the profile's TPOTs.
        let eq1 = g.profile.as_deref().map(|p| crate::dsi::online_run::latencies_from_profile(p, 128)).transpose()?;
        for &sp in &g.servers {
            let mut ks: Vec<usize> = g.lookaheads.clone();
            if let Some(l) = &eq1 {
                ks.push(specx_decoder::speculative::lookahead_for(sp, l.target_tpot, l.draft_tpot));
            }
            ks.sort_unstable();
            ks.dedup();
            out.extend(ks.into_iter().map(|k| Setting { method: MethodKind::Dsi, k: Some(k), servers: Some(sp), ..Setting::ar() }));
        }
    }
    if let Some(g) = &m.easyspec {
        for strategy in &g.strategies {
            for &calibration in &g.calibrations {
                let fuzzy = Setting { method: MethodKind::Easyspec, strategy: Some(strategy.clone()), calibration: Some(calibration), workers: g.workers, ..Setting::ar() };
                out.extend(g.k.iter().map(|&k| Setting { k: Some(k), ..fuzzy.clone() }));
                for h in &g.heads {
                    for &t in &g.thresholds {
                        for &[lo, hi] in &g.bounds {
                            out.push(Setting { head: Some(head_name(h)), threshold: Some(t), min: Some(lo), max: Some(hi), ..fuzzy.clone() });
                        }
                    }
                }
                for &sp in &g.servers {
                    out.extend(g.k.iter().map(|&k| Setting { k: Some(k), servers: Some(sp), ..fuzzy.clone() }));
                }
            }
        }
    }
    if m.oracle {
        out.push(Setting { method: MethodKind::Oracle, ..Setting::ar() });
    }
    let mut seen = std::collections::BTreeSet::new();
    for s in &out {
        ensure!(seen.insert(s.key()), "the method grid has '{}' twice (two heads with the same directory name?)", s.key());
    }
    Ok(out)
}
