//! The method grid of a config, expanded once into settings: what each results row was run
//! with. The papers' sections (`[methods.specdec]`, `.specdecpp`, `.confidence`, `.dsi`,
//! `.easyspec`) are shorthands for their grids; `[[methods.grid]]` is any product of axes.

use super::axes::drafts_or_loaded;
use super::methods::MethodsConfig;
use crate::method::drafter::EasySpec;
use crate::method::policy::head::HeadPolicies;
use crate::method::policy::{Fixed, Oracle, PolicySpec};
use crate::method::{DrafterSpec, MethodSpec, SchedulerSpec, Setting};
use anyhow::{Result, ensure};
use specx_decoder::speculative::Compat;

pub use crate::method::head_name;

/// Every setting of the grid, AR first, in a fixed order (the order rows are run and written):
/// the papers' sections, then each `[[methods.grid]]` product, then the oracle. A setting
/// named twice is an error.
pub fn expand(m: &MethodsConfig) -> Result<Vec<Setting>> {
    let mut specs: Vec<MethodSpec> = Vec::new();
    specs.extend(m.specdec.iter().flat_map(|g| g.k.iter().map(|&k| MethodSpec::plain(Fixed { k }))));
    specs.extend(m.specdecpp.iter().flat_map(|g| g.settings::<false>()).map(MethodSpec::plain));
    specs.extend(m.confidence.iter().flat_map(|g| g.settings::<false>()).map(MethodSpec::plain));
    if let Some(g) = &m.dsi {
        // Eq. 1's lookahead per server count, from the profile's TPOTs.
        let eq1 =
            g.profile.as_deref().map(|p| crate::common::profile_data::latencies_from_profile(p, 128)).transpose()?;
        for &servers in &g.servers {
            let mut ks: Vec<usize> = g.lookaheads.clone();
            if let Some(l) = &eq1 {
                ks.push(specx_decoder::speculative::lookahead_for(servers, l.target_tpot, l.draft_tpot));
            }
            ks.sort_unstable();
            ks.dedup();
            specs.extend(
                ks.into_iter().map(|k| MethodSpec {
                    scheduler: SchedulerSpec::Dsi { servers },
                    ..MethodSpec::plain(Fixed { k })
                }),
            );
        }
    }
    if let Some(g) = &m.easyspec {
        let head_policies =
            HeadPolicies { heads: g.heads.clone(), thresholds: g.thresholds.clone(), bounds: g.bounds.clone() }
                .settings::<false>()
                .into_iter()
                .map(PolicySpec::from)
                .collect::<Vec<_>>();
        for strategy in &g.strategies {
            for &calibration in &g.calibrations {
                let drafter: DrafterSpec = EasySpec {
                    strategy: strategy.clone(),
                    calibration,
                    workers: g.workers.unwrap_or(1),
                    compat: Compat::Lossless,
                }
                .into();
                let fuzzy = |policy, scheduler| MethodSpec {
                    drafter: drafter.clone(),
                    draft: Default::default(),
                    policy,
                    scheduler,
                };
                specs.extend(g.k.iter().map(|&k| fuzzy(Fixed { k }.into(), SchedulerSpec::Sequential)));
                specs.extend(head_policies.iter().map(|p| fuzzy(p.clone(), SchedulerSpec::Sequential)));
                for &servers in &g.servers {
                    specs.extend(g.k.iter().map(|&k| fuzzy(Fixed { k }.into(), SchedulerSpec::Dsi { servers })));
                }
            }
        }
    }
    // The papers' sections run with every draft of `[methods] drafts`.
    let specs: Vec<MethodSpec> = specs
        .into_iter()
        .flat_map(|s| drafts_or_loaded(&m.drafts).into_iter().map(move |draft| MethodSpec { draft, ..s.clone() }))
        .collect();
    for s in &specs {
        s.check()?;
    }
    let mut specs = specs;
    for g in &m.grid {
        specs.extend(g.expand()?);
    }
    if m.oracle {
        specs.push(MethodSpec::plain(Oracle {}));
    }
    let mut out = vec![Setting::Ar];
    out.extend(specs.into_iter().map(Setting::Speculative));
    let mut seen = std::collections::BTreeSet::new();
    for s in &out {
        ensure!(
            seen.insert(s.key()),
            "the method grid has '{}' twice (two heads with the same directory name, or a setting in two sections?)",
            s.key()
        );
    }
    Ok(out)
}
