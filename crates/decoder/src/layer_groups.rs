//! EasySpec's layer-parallel strategies (`../shared/papers/easyspec.txt`, Algorithm 2 and
//! Appendix B): the draft model's layers split into consecutive groups; within a group every
//! attention reads the group's input hidden state (so the attentions can run at once), and the
//! MLPs then run in layer order. A strategy is written in the paper's notation,
//! `"0,1-3,4-7,8-11,12-15,16-19,20-22,23"`; groups of one layer are exact.

use anyhow::{Context, Result, bail, ensure};
use std::ops::Range;

/// A layer-parallel strategy: consecutive groups covering layers `0..layers` in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayerGroups {
    groups: Vec<Range<usize>>,
}

impl LayerGroups {
    /// Every layer its own group: the model's exact forward.
    pub fn sequential(layers: usize) -> Self {
        Self { groups: (0..layers).map(|l| l..l + 1).collect() }
    }

    /// The paper's preset for layer-parallel size `lp` (Table 6): layer 0 and the last layer
    /// alone (the embedding approximates no other layer's input), the layers between in groups
    /// of `lp`, the first of them `min(lp, 3)` long and the last one what remains.
    pub fn preset(lp: usize, layers: usize) -> Result<Self> {
        ensure!(lp >= 1, "layer-parallel size must be at least 1");
        ensure!(layers >= 1, "a model without layers");
        if lp == 1 || layers <= 2 {
            return Ok(Self::sequential(layers));
        }
        // Layer 0 alone, then groups of growing size (one range now, more pushed below).
        #[allow(clippy::single_range_in_vec_init)]
        let mut groups = vec![0..1];
        let last = layers - 1;
        let mut start = 1;
        let mut size = lp.min(3);
        while start < last {
            let end = (start + size).min(last);
            groups.push(start..end);
            start = end;
            size = lp;
        }
        groups.push(last..layers);
        Ok(Self { groups })
    }

    /// Parses the paper's notation (`0,1-3,4-7,...`) for a model with `layers` layers, or a
    /// preset name `lp1` .. `lpN`.
    pub fn parse(s: &str, layers: usize) -> Result<Self> {
        if let Some(lp) = preset_size(s)? {
            return Self::preset(lp, layers);
        }
        let groups = parse_notation(s)?;
        let covered = groups.last().map_or(0, |g| g.end);
        if covered != layers {
            bail!("layer strategy '{s}' covers layers 0..{covered}, the model has {layers}");
        }
        Ok(Self { groups })
    }

    /// Checks `s`'s syntax before the model's depth is known (configs, command lines).
    pub fn check_syntax(s: &str) -> Result<()> {
        if preset_size(s)?.is_none() {
            parse_notation(s)?;
        }
        Ok(())
    }

    pub fn groups(&self) -> &[Range<usize>] {
        &self.groups
    }

    pub fn layers(&self) -> usize {
        self.groups.last().map_or(0, |g| g.end)
    }

    /// The largest group (the paper's LP size).
    pub fn max_size(&self) -> usize {
        self.groups.iter().map(|g| g.len()).max().unwrap_or(0)
    }

    /// Whether every group is a single layer (the exact forward).
    pub fn is_sequential(&self) -> bool {
        self.max_size() <= 1
    }

    /// The first layer whose cache entries a forward with this strategy leaves inexact: the
    /// second layer of the first multi-layer group (every layer from there on sees a stale or
    /// already approximate input). `None` for the exact strategy.
    pub fn first_fuzzy_layer(&self) -> Option<usize> {
        self.groups.iter().find(|g| g.len() > 1).map(|g| g.start + 1)
    }
}

/// The LP size of a preset name `lpN`; `None` for the paper's notation.
fn preset_size(s: &str) -> Result<Option<usize>> {
    let Some(lp) = s.strip_prefix("lp") else { return Ok(None) };
    let lp: usize = lp.parse().with_context(|| format!("layer-parallel preset '{s}': expected lp1, lp2, ..."))?;
    ensure!(lp >= 1, "layer-parallel preset '{s}': the size must be at least 1");
    Ok(Some(lp))
}

/// Groups written in the paper's notation, checked to start at layer 0 and run in order.
fn parse_notation(s: &str) -> Result<Vec<Range<usize>>> {
    let mut groups = Vec::new();
    let mut next = 0;
    for part in s.split(',').map(str::trim) {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a.trim(), b.trim()),
            None => (part, part),
        };
        let parse = |v: &str| {
            v.parse::<usize>().with_context(|| format!("layer strategy '{s}': '{part}' is not a layer or a range a-b"))
        };
        let (a, b) = (parse(a)?, parse(b)?);
        ensure!(a <= b, "layer strategy '{s}': range {a}-{b} runs backwards");
        ensure!(
            a == next,
            "layer strategy '{s}': expected a group starting at layer {next}, found {part} (groups must cover every layer once, in order)"
        );
        groups.push(a..b + 1);
        next = b + 1;
    }
    Ok(groups)
}

impl std::fmt::Display for LayerGroups {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self
            .groups
            .iter()
            .map(|g| if g.len() == 1 { g.start.to_string() } else { format!("{}-{}", g.start, g.end - 1) })
            .collect();
        f.write_str(&parts.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_reproduce_the_papers_table_6() {
        // Llama-3-8B (32 layers) and Qwen (28 layers) rows of Table 6, and ours (24 layers).
        let llama = |lp| LayerGroups::preset(lp, 32).unwrap().to_string();
        assert_eq!(
            llama(2),
            format!("0,{},31", (0..15).map(|i| format!("{}-{}", 1 + 2 * i, 2 + 2 * i)).collect::<Vec<_>>().join(","))
        );
        assert_eq!(
            llama(3),
            format!("0,{},31", (0..10).map(|i| format!("{}-{}", 1 + 3 * i, 3 + 3 * i)).collect::<Vec<_>>().join(","))
        );
        assert_eq!(llama(4), "0,1-3,4-7,8-11,12-15,16-19,20-23,24-27,28-30,31");
        assert_eq!(llama(5), "0,1-3,4-8,9-13,14-18,19-23,24-28,29-30,31");
        assert_eq!(LayerGroups::preset(4, 28).unwrap().to_string(), "0,1-3,4-7,8-11,12-15,16-19,20-23,24-26,27");
        let ours = LayerGroups::preset(4, 24).unwrap();
        assert_eq!(ours.to_string(), "0,1-3,4-7,8-11,12-15,16-19,20-22,23");
        assert_eq!((ours.max_size(), ours.first_fuzzy_layer()), (4, Some(2)));
        assert!(LayerGroups::preset(1, 24).unwrap().is_sequential());
        assert_eq!(LayerGroups::preset(1, 24).unwrap().first_fuzzy_layer(), None);
    }

    #[test]
    fn parses_the_notation_and_names_what_is_wrong() {
        let s = "0,1-3,4-7,8-11,12-15,16-19,20-22,23";
        let g = LayerGroups::parse(s, 24).unwrap();
        assert_eq!(g.to_string(), s);
        assert_eq!(g, LayerGroups::parse("lp4", 24).unwrap());
        assert_eq!(g.layers(), 24);
        for (bad, needle) in [
            ("0,1-3,5-23", "starting at layer 4"),
            ("0,1-3,4-22", "covers layers 0..23"),
            ("0,3-1", "backwards"),
            ("0,x", "not a layer"),
            ("lpx", "lp1, lp2"),
            ("0-24", "covers layers 0..25"),
        ] {
            let err = format!("{:#}", LayerGroups::parse(bad, 24).unwrap_err());
            assert!(err.contains(needle), "{bad}: {err}");
        }
        // Syntax alone (the depth unknown): ranges and order, not coverage.
        assert!(LayerGroups::check_syntax("0,1-3,4-22").is_ok() && LayerGroups::check_syntax("lp3").is_ok());
        for bad in ["0,3-1", "1-3", "lp0", "lpx", "0,,1"] {
            assert!(LayerGroups::check_syntax(bad).is_err(), "{bad}");
        }
    }
}
