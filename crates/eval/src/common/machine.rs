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

/// The first `field: value` line of Linux's /proc/cpuinfo with that field, its value.
pub fn cpuinfo(field: &str) -> Option<String> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    let line = info.lines().find(|l| l.split(':').next().is_some_and(|k| k.trim() == field))?;
    line.split_once(':').map(|(_, v)| v.trim().to_string())
}

/// Whether the kernel lists `flag` (as /proc/cpuinfo spells it, e.g. `amx_int8`) for this
/// CPU; false where there is no /proc/cpuinfo.
pub fn cpu_has_flag(flag: &str) -> bool {
    cpuinfo("flags").is_some_and(|f| f.split_whitespace().any(|x| x == flag))
}

impl Machine {
    pub fn measure() -> Self {
        let cpu = cpuinfo("model name").unwrap_or_else(|| std::env::consts::ARCH.to_string());
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Self { cpu, cores, bandwidth_gb_s: super::sysmem::read_bandwidth(512 << 20, 3) / 1e9 }
    }
}

#[cfg(all(test, target_os = "linux", target_arch = "x86_64"))]
mod tests {
    use super::*;

    #[test]
    fn cpuinfo_fields_and_flags_are_read() {
        // Every x86-64 CPU has an FPU and a model name; no CPU has this flag.
        assert!(cpuinfo("model name").is_some_and(|m| !m.is_empty()));
        assert!(cpu_has_flag("fpu"));
        assert!(!cpu_has_flag("fp"), "a prefix of a flag is not a flag");
        assert!(!cpu_has_flag("specx_no_such_flag"));
    }
}
