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

/// A call's bytes over its median time, against `bandwidth.json`'s peak, for each row count
/// whose launches were counted: judged at one row, the others stated beside it (a many-row
/// call reads the same weights, so its fraction shows what the extra rows cost).
pub(super) fn memory_bound(profile: Option<&Profile>, bandwidth: Option<&Value>) -> Target {
    let name = format!(
        "at least {:.0}% of the memory bound at one row (1.5B shape, cuda; other row counts beside it)",
        MEMORY_BOUND_TARGET * 100.0
    );
    let Some(peak) = bandwidth.and_then(|b| b["peak_gb_s"].as_f64()) else {
        let why = bandwidth
            .and_then(|b| b["error"].as_str().or(b["peak_source"].as_str()).map(str::to_string))
            .unwrap_or_else(|| "bandwidth.json missing".into());
        return target(&name, None, &format!("no peak bandwidth: {why}"));
    };
    let judged = profile.and_then(|p| {
        let m = p.models.iter().find(|m| m.role == "target")?;
        // (rows, fraction, bytes, seconds, context) of every counted call with a timing.
        let calls: Vec<(usize, f64, u64, f64, usize)> = m
            .launches
            .iter()
            .filter_map(|c| {
                let secs = *m.forward.iter().find(|f| f.context == c.context)?.seconds.get(c.rows.checked_sub(1)?)?;
                Some((c.rows, c.bytes_read as f64 / secs / 1e9 / peak, c.bytes_read, secs, c.context))
            })
            .collect();
        let &(_, fraction, bytes, secs, context) = calls.iter().find(|c| c.0 == 1)?;
        let others: Vec<String> =
            calls.iter().filter(|c| c.0 != 1).map(|c| format!("{:.1}% at {} rows", c.1 * 100.0, c.0)).collect();
        Some((
            format!(
                "{:.1}% ({:.0} MB in {:.2} ms after {context} tokens: {:.0} of {peak:.0} GB/s){}",
                fraction * 100.0,
                bytes as f64 / 1e6,
                secs * 1e3,
                fraction * peak,
                if others.is_empty() { String::new() } else { format!("; {}", others.join(", ")) }
            ),
            fraction >= MEMORY_BOUND_TARGET,
        ))
    });
    target(&name, judged, "profile-cuda.json missing or written without bytes read")
}
