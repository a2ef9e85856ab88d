//! What choosing on the test traces themselves would have reported: from an earlier replay of
//! the test traces that holds the candidates (`in_sample` in the config), each family's best
//! setting picked on the test prompts, against the setting the tuning traces picked. The gap is
//! the optimism of in-sample tuning, rule by rule.

use super::bootstrap::{UnitCounts, throughput};
use super::{CostResult, SetResult};
use crate::common::run_rows::{Row, read_rows};
use anyhow::Result;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

fn counts(r: &Row) -> UnitCounts {
    UnitCounts { n: r.n, draft_calls: r.draft_calls, target_calls: r.target_calls, rows: r.rows_verified() }
}

/// Per (set, setting key): the replayed greedy counts per prompt id.
pub struct InSample {
    by: HashMap<(String, String), HashMap<String, UnitCounts>>,
}

impl InSample {
    pub fn read(dir: &Path) -> Result<Self> {
        let mut by: HashMap<(String, String), HashMap<String, UnitCounts>> = HashMap::new();
        for r in read_rows(dir)?.iter().filter(|r| r.replayed && r.sampling == "greedy") {
            by.entry((r.dataset.clone(), r.setting.clone())).or_default().insert(r.prompt_id.clone(), counts(r));
        }
        Ok(Self { by })
    }

    /// A setting's counts on exactly `prompts`, if the replay holds every one of them.
    fn test_counts(&self, set: &str, setting: &str, prompts: &[String]) -> Option<Vec<UnitCounts>> {
        let rows = self.by.get(&(set.to_string(), setting.to_string()))?;
        prompts.iter().map(|p| rows.get(p).copied()).collect()
    }

    /// Per family at `c`: the best candidate on the test prompts (setting, test throughput)
    /// among those the replay holds, and how many of the family's candidates it holds.
    pub fn best(
        &self,
        s: &SetResult,
        c: &CostResult,
        candidates: &BTreeMap<String, Vec<String>>,
    ) -> BTreeMap<String, (String, f64, usize)> {
        let mut out = BTreeMap::new();
        for (family, keys) in candidates {
            let found: Vec<(&String, f64)> = keys
                .iter()
                .filter_map(|k| self.test_counts(&s.dataset, k, &s.test_prompts).map(|u| (k, throughput(&u, &c.costs))))
                .collect();
            if let Some((k, tps)) = found.iter().max_by(|a, b| a.1.total_cmp(&b.1)) {
                out.insert(family.clone(), ((*k).clone(), *tps, found.len()));
            }
        }
        out
    }
}
