//! The targets that tell a launch-bound GPU path from a bandwidth-bound one: the kernel
//! launches a layer takes, and the fraction of the GPU's memory bound a decode step reaches
//! (the bytes it must read, over its time, against the peak bandwidth `bandwidth.py` read).

use super::target::{Target, target};
use serde_json::Value;
use specx_eval::profile::Profile;

/// At most this many kernel launches a layer, in a decode step and in a 5-row call.
pub(super) const LAUNCHES_PER_LAYER_TARGET: u64 = 6;
/// At least this fraction of the memory bound in a one-row decode step.
pub(super) const MEMORY_BOUND_TARGET: f64 = 0.30;

/// The target model's most launches in a layer, per counted row count, on `profile`'s device.
pub(super) fn launches(profile: Option<&Profile>) -> Target {
    let judged = profile.and_then(|p| {
        let m = p.models.iter().find(|m| m.role == "target")?;
        let worst: Vec<(usize, u64)> =
            m.launches.iter().map(|c| (c.rows, c.per_layer().into_iter().max().unwrap_or(0))).collect();
        let most = worst.iter().map(|w| w.1).max()?;
        let said: Vec<String> =
            worst.iter().map(|(r, n)| format!("{n} at {r} row{}", if *r == 1 { "" } else { "s" })).collect();
        Some((format!("{} a layer", said.join(", ")), most <= LAUNCHES_PER_LAYER_TARGET))
    });
    target(
        &format!("at most {LAUNCHES_PER_LAYER_TARGET} kernel launches a layer, one row and 5 rows (1.5B shape, cuda)"),
        judged,
        "profile-cuda.json missing or written without launch counts",
    )
}

/// A one-row step's bytes over its median time, against `bandwidth.json`'s peak.
pub(super) fn memory_bound(profile: Option<&Profile>, bandwidth: Option<&Value>) -> Target {
    let name =
        format!("at least {:.0}% of the memory bound at one row (1.5B shape, cuda)", MEMORY_BOUND_TARGET * 100.0);
    let Some(peak) = bandwidth.and_then(|b| b["peak_gb_s"].as_f64()) else {
        let why = bandwidth
            .and_then(|b| b["error"].as_str().or(b["peak_source"].as_str()).map(str::to_string))
            .unwrap_or_else(|| "bandwidth.json missing".into());
        return target(&name, None, &format!("no peak bandwidth: {why}"));
    };
    let judged = profile.and_then(|p| {
        let m = p.models.iter().find(|m| m.role == "target")?;
        let c = m.launches.iter().find(|c| c.rows == 1)?;
        let secs = m.forward.iter().find(|f| f.context == c.context)?.seconds.first().copied()?;
        let gb_s = c.bytes_read as f64 / secs / 1e9;
        let fraction = gb_s / peak;
        Some((
            format!(
                "{:.1}% ({:.0} MB in {:.2} ms after {} tokens: {gb_s:.0} of {peak:.0} GB/s)",
                fraction * 100.0,
                c.bytes_read as f64 / 1e6,
                secs * 1e3,
                c.context
            ),
            fraction >= MEMORY_BOUND_TARGET,
        ))
    });
    target(&name, judged, "profile-cuda.json missing or written without bytes read")
}
