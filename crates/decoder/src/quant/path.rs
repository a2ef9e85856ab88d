//! Which implementation of the integer arithmetic ([`super::int`]) runs: the paths, what
//! this CPU supports, the one the runtime picks (or `SPECX_INT_PATH` forces), and the words
//! benchmarks print for it.

use std::sync::OnceLock;

/// Which implementation of the integer arithmetic runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum IntPath {
    /// AVX-512 (BW) with VNNI: `vpdpbusd` / `vpdpwssd` on 64-byte vectors.
    Avx512Vnni,
    /// AVX2 with AVX-VNNI (Intel's client cores since Alder Lake; a CPU that also has
    /// AVX-512 VNNI takes that path): the AVX2 panels with the 256-bit `vpdpbusd` in place of
    /// `vpmaddubsw` + `vpaddw` + `vpmaddwd`.
    AvxVnni,
    /// AVX2: `vpmaddubsw` + `vpmaddwd` on 32-byte vectors.
    Avx2,
    /// Plain Rust (the reference).
    Portable,
}

impl IntPath {
    pub fn name(self) -> &'static str {
        match self {
            Self::Avx512Vnni => "avx512-vnni",
            Self::AvxVnni => "avx-vnni",
            Self::Avx2 => "avx2",
            Self::Portable => "portable",
        }
    }

    /// Whether this CPU can run the path.
    pub fn supported(self) -> bool {
        match self {
            Self::Portable => true,
            #[cfg(target_arch = "x86_64")]
            Self::Avx2 => avx2_available(),
            #[cfg(target_arch = "x86_64")]
            Self::AvxVnni => avx_vnni_available(),
            #[cfg(target_arch = "x86_64")]
            Self::Avx512Vnni => avx512_available(),
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// Whether the path has kernels on weight panels ([`super::panel`]): the layout
    /// [`QuantMatrix::into_int_layout`] stores for it.
    pub fn has_panels(self) -> bool {
        matches!(self, Self::Avx512Vnni | Self::AvxVnni | Self::Avx2)
    }

    /// Every path this CPU can run, fastest first.
    pub fn all_supported() -> Vec<Self> {
        [Self::Avx512Vnni, Self::AvxVnni, Self::Avx2, Self::Portable].into_iter().filter(|p| p.supported()).collect()
    }

    /// The path the runtime uses: `SPECX_INT_PATH` (avx512-vnni | avx-vnni | avx2 | portable) when set
    /// and supported, else the fastest supported one. Decided once per process.
    pub fn active() -> Self {
        static ACTIVE: OnceLock<IntPath> = OnceLock::new();
        *ACTIVE.get_or_init(|| {
            let best = Self::all_supported()[0];
            match std::env::var("SPECX_INT_PATH") {
                Ok(name) => match Self::all_supported().into_iter().find(|p| p.name() == name) {
                    Some(p) => p,
                    None => {
                        eprintln!(
                            "specx: SPECX_INT_PATH={name} is not a supported integer path here; using {}",
                            best.name()
                        );
                        best
                    }
                },
                Err(_) => best,
            }
        })
    }
}

/// The runtime's integer kernels in words, for benchmark output: the path, the weight layout,
/// and whether `SPECX_INT_PATH` forced a path other than this CPU's fastest (figures measured
/// on a forced path say so).
pub fn runtime_kernels() -> String {
    let active = IntPath::active();
    let panels = super::panels_in_use();
    let layout = if panels { "weight panels" } else { "rows" };
    let best = IntPath::all_supported()[0];
    let forced = if active != best {
        format!(", forced by SPECX_INT_PATH (this CPU's fastest: {})", best.name())
    } else {
        String::new()
    };
    let prefetch = if panels { prefetch_words(active) } else { "" };
    format!("{} on {layout}{forced}{prefetch}", active.name())
}

/// Whether few-row calls prefetch the panels of `path` ([`super::panel::prefetching`]), in
/// words for [`runtime_kernels`] (empty where nothing is prefetched by default).
#[cfg(target_arch = "x86_64")]
fn prefetch_words(path: IntPath) -> &'static str {
    use super::panel::{Kernels, forced_prefetch, prefetching};
    let kernels = if path == IntPath::Avx512Vnni { Kernels::Avx512 } else { Kernels::Avx2 };
    match (prefetching(kernels), forced_prefetch().is_some()) {
        (true, false) => ", one- and two-row calls prefetch",
        (true, true) => ", one- and two-row calls prefetch (SPECX_PREFETCH)",
        (false, true) => ", no prefetch (SPECX_PREFETCH)",
        (false, false) => "",
    }
}

/// No panel kernels, so no prefetch, off x86.
#[cfg(not(target_arch = "x86_64"))]
fn prefetch_words(_path: IntPath) -> &'static str {
    ""
}

/// AVX2 with FMA and F16C: what every x86 kernel needs, as the block decoders do.
#[cfg(target_arch = "x86_64")]
fn avx2_available() -> bool {
    super::avx2::available()
}

/// AVX2 with the 256-bit VNNI instructions (`vpdpbusd` in its VEX encoding).
#[cfg(target_arch = "x86_64")]
fn avx_vnni_available() -> bool {
    avx2_available() && is_x86_feature_detected!("avxvnni")
}

/// AVX-512 F/BW/VL with VNNI.
#[cfg(target_arch = "x86_64")]
fn avx512_available() -> bool {
    avx2_available()
        && is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vl")
        && is_x86_feature_detected!("avx512vnni")
}
