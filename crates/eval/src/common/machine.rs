//! The machine a measurement ran on: CPU, cores and the read bandwidth at the start.

use serde::{Deserialize, Serialize};

/// Where a run or a profile was measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    pub cpu: String,
    pub cores: usize,
    /// Read bandwidth measured when the run (this process) started, GB/s.
    pub bandwidth_gb_s: f64,
}

impl Machine {
    pub fn measure() -> Self {
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| s.lines().find(|l| l.starts_with("model name")).and_then(|l| l.split_once(':')).map(|(_, v)| v.trim().to_string()))
            .unwrap_or_else(|| std::env::consts::ARCH.to_string());
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Self { cpu, cores, bandwidth_gb_s: crate::sysmem::read_bandwidth(512 << 20, 3) / 1e9 }
    }
}

