//! Results rows of eval and replay runs read back from `results.parquet`, and their sums per
//! (dataset, sampling, setting).

use anyhow::Result;
use std::collections::BTreeMap;
use std::path::Path;

/// Rows of the heads a `head_families` entry names take that entry's family (family name ->
/// head names), e.g. heads that read more than the paper's, so that the paper's rule is
/// judged on the paper's heads.
pub fn move_head_families(rows: &mut [Row], families: &BTreeMap<String, Vec<String>>) {
    for r in rows {
        if let Some((family, _)) = families.iter().find(|(_, heads)| r.head.as_ref().is_some_and(|h| heads.contains(h)))
        {
            r.family = head_family(&r.family, family);
        }
    }
}

/// The family of a head rule's row whose head is in head family `family`: SpecDec++'s rule
/// takes the family's name, the per-token rule its `-token` variant.
pub fn head_family(rule_family: &str, family: &str) -> String {
    if rule_family == "head-token" { format!("{family}-token") } else { family.to_string() }
}

/// The columns of a results row this report uses.
#[derive(Clone, Debug)]
pub struct Row {
    pub dataset: String,
    pub sampling: String,
    pub prompt_id: String,
    pub family: String,
    pub setting: String,
    pub head: Option<String>,
    pub threshold: Option<f64>,
    pub k: Option<u64>,
    pub min: Option<u64>,
    pub replayed: bool,
    pub n: f64,
    pub discarded: f64,
    pub target_calls: f64,
    pub draft_calls: f64,
    /// Candidates verified (a rule's dropped tokens are draft calls, not candidates).
    pub drafted: f64,
    pub time_s: f64,
    pub batch: u64,
}

impl Row {
    /// Rows the target checked in verifications: each round's candidates and one more (the
    /// prefill's call, the first of the row's target calls, is not a verification).
    pub fn rows_verified(&self) -> f64 {
        self.drafted + (self.target_calls - 1.0).max(0.0)
    }
}

/// Every row of `dir/results.parquet`.
pub fn read_rows(dir: &Path) -> Result<Vec<Row>> {
    let t = crate::common::results::ResultsTable::read(dir)?;
    let (dataset, sampling, prompt_id, family, setting, head) = (
        t.strs("dataset")?,
        t.strs("sampling")?,
        t.strs("prompt_id")?,
        t.strs("method")?,
        t.strs("setting")?,
        t.strs("head")?,
    );
    let (threshold, k, min, replayed) = (t.f64s("threshold")?, t.u64s("k")?, t.u64s("min")?, t.bools("replayed")?);
    let (n, disc, tgt, drf, time) = (
        t.u64s("n_generated")?,
        t.u64s("n_discarded")?,
        t.u64s("n_target_calls")?,
        t.u64s("n_draft_calls")?,
        t.f64s("total_time_s")?,
    );
    let drafted = t.u64s("n_drafted")?;
    // Runs written before trace runs existed have no batch column: single streams.
    let batch = if t.has("batch") { t.u64s("batch")? } else { vec![Some(1); t.height()] };
    let num = |v: Option<u64>| v.unwrap_or(0) as f64;
    Ok((0..t.height())
        .map(|i| Row {
            dataset: dataset[i].clone().unwrap_or_default(),
            sampling: sampling[i].clone().unwrap_or_default(),
            prompt_id: prompt_id[i].clone().unwrap_or_default(),
            family: family[i].clone().unwrap_or_default(),
            setting: setting[i].clone().unwrap_or_default(),
            head: head[i].clone(),
            threshold: threshold[i],
            k: k[i],
            min: min[i],
            replayed: replayed[i].unwrap_or(false),
            n: num(n[i]),
            discarded: num(disc[i]),
            target_calls: num(tgt[i]),
            draft_calls: num(drf[i]),
            drafted: num(drafted[i]),
            time_s: time[i].unwrap_or(f64::NAN),
            batch: batch[i].unwrap_or(1),
        })
        .collect())
}

/// The rows of one (dataset, sampling, setting), with their sums.
#[derive(Clone, Debug)]
pub struct Group {
    pub first: Row,
    pub rows: Vec<Row>,
}

impl Group {
    pub fn n(&self) -> f64 {
        self.rows.iter().map(|r| r.n).sum()
    }
    pub fn discarded(&self) -> f64 {
        self.rows.iter().map(|r| r.discarded).sum()
    }
    pub fn target_calls(&self) -> f64 {
        self.rows.iter().map(|r| r.target_calls).sum()
    }
    pub fn draft_calls(&self) -> f64 {
        self.rows.iter().map(|r| r.draft_calls).sum()
    }
    /// [`Row::rows_verified`], summed.
    pub fn rows_verified(&self) -> f64 {
        self.rows.iter().map(Row::rows_verified).sum()
    }
    /// Discard rate and verification rate as ratios of sums (the Figure 3 coordinates).
    pub fn rates(&self) -> (f64, f64) {
        (self.discarded() / self.n(), self.target_calls() / self.n())
    }
    /// Eq. 5.1 throughput at forward times `t` = (draft, target): ratio of sums over prompts.
    pub fn eq51(&self, t: (f64, f64)) -> f64 {
        crate::common::timing::predicted_throughput(self.n(), self.discarded(), self.target_calls(), t.0, t.1)
    }
    /// Eq. 5.1 throughput per prompt, averaged over prompts.
    pub fn eq51_mean(&self, t: (f64, f64)) -> f64 {
        let v: Vec<f64> = self
            .rows
            .iter()
            .filter(|r| r.n > 0.0)
            .map(|r| crate::common::timing::predicted_throughput(r.n, r.discarded, r.target_calls, t.0, t.1))
            .collect();
        v.iter().sum::<f64>() / v.len().max(1) as f64
    }
    /// Measured tokens per second, ratio of sums (real single-stream rows only).
    pub fn measured(&self) -> Option<f64> {
        (!self.first.replayed && self.first.batch == 1)
            .then(|| self.n() / self.rows.iter().map(|r| r.time_s).sum::<f64>())
    }
}

/// Rows grouped by (dataset, sampling) and then setting key.
pub fn groups(rows: &[Row]) -> BTreeMap<(String, String), BTreeMap<String, Group>> {
    let mut out: BTreeMap<(String, String), BTreeMap<String, Group>> = BTreeMap::new();
    for r in rows {
        out.entry((r.dataset.clone(), r.sampling.clone()))
            .or_default()
            .entry(r.setting.clone())
            .or_insert_with(|| Group { first: r.clone(), rows: Vec::new() })
            .rows
            .push(r.clone());
    }
    out
}
