//! The items of cubecl-llvm 0.11.3 that cubecl-cuda 0.11.3 names, without LLVM (see Cargo.toml).
//!
//! cubecl-cuda selects its compiler at build time: with its `cpp` feature (which specx's `cuda`
//! feature enables) every kernel goes through CUDA C++ and NVRTC, and nothing here runs except
//! [`nvptx::ptx_version::PtxVersion::for_driver`], which only feeds a cache key. Were the LLVM
//! path selected anyway, [`PlironCompiler::compile`] fails with a message naming the cause.

use cubecl_core::ir::nvidia::SmArch;
use cubecl_core::prelude::KernelDefinition;
use cubecl_environment::backtrace::BackTrace;
use cubecl_runtime::compiler::CompilationError;
use cubecl_runtime::kernel::BufferIOAttr;

pub mod nvptx {
    pub mod ptx_version {
        use core::fmt;

        /// A PTX ISA version, as the real crate names it (`ptx87`).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub struct PtxVersion(u32);

        impl PtxVersion {
            /// The newest PTX version a driver (cuDriverGetVersion's number) loads: the table
            /// of NVIDIA's PTX ISA release notes, as cubecl-llvm 0.11.3 has it.
            pub fn for_driver(driver: i32) -> Option<Self> {
                const DRIVER_PTX: &[(i32, u32)] = &[
                    (13030, 93), (13020, 92), (13010, 91), (13000, 90), (12090, 88), (12080, 87),
                    (12050, 85), (12040, 84), (12030, 83), (12020, 82), (12010, 81), (12000, 80),
                    (11080, 78), (11070, 77), (11060, 76), (11050, 75), (11040, 74), (11030, 73),
                    (11020, 72), (11010, 71), (11000, 70), (10020, 65), (10010, 64), (10000, 63),
                ];
                DRIVER_PTX.iter().find(|(first, _)| driver >= *first).map(|&(_, ptx)| Self(ptx))
            }
        }

        impl fmt::Display for PtxVersion {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "ptx{}", self.0)
            }
        }
    }
}

pub mod shared {
    pub mod lowered_features {
        use cubecl_core::ir::DeviceProperties;

        /// The GPU the LLVM backend would lower for.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum GpuTarget {
            Nvptx,
        }

        /// cubecl-cuda calls this only when the LLVM backend is selected, which never happens
        /// in a build with the `cpp` feature; the C++ backend's properties are left as they are.
        pub fn restrict_features(_props: &mut DeviceProperties, _target: GpuTarget) {}
    }
}

/// Where the LLVM backend would emit code.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LlvmTarget {
    #[default]
    Cpu,
    Nvptx,
}

/// The LLVM backend's options (the fields cubecl-cuda sets).
#[derive(Clone, Debug, Default)]
pub struct PlironOptions {
    /// AMD architecture in the real crate; never set by cubecl-cuda.
    pub arch: Option<()>,
    pub sm_arch: Option<SmArch>,
    pub ptx_version: Option<nvptx::ptx_version::PtxVersion>,
    pub grid_constants: bool,
}

/// A compiled PTX module (never produced here).
#[derive(Clone, Debug)]
pub struct NvptxModule {
    pub ptx: Vec<core::ffi::c_char>,
    pub entrypoint: String,
    pub ir: String,
    pub shared_memory_size: usize,
    pub io: Vec<BufferIOAttr>,
}

/// What the LLVM backend would return.
#[derive(Clone, Debug)]
pub enum PlironArtifact {
    NvptxCode(NvptxModule),
}

/// The LLVM backend: present so cubecl-cuda's compiler enum builds, and failing if used.
#[derive(Clone, Debug)]
pub struct PlironCompiler {
    pub target: LlvmTarget,
}

impl PlironCompiler {
    pub fn compile(&mut self, _kernel: KernelDefinition, _options: &PlironOptions) -> Result<PlironArtifact, CompilationError> {
        Err(CompilationError::Generic {
            reason: "this build of cubecl-cuda has no LLVM backend (specx patches cubecl-llvm out so that the CUDA build needs no network); kernels compile through CUDA C++ and NVRTC, which specx's `cuda` feature selects".into(),
            backtrace: BackTrace::capture(),
        })
    }

    pub fn lang_tag(&self) -> &'static str {
        "llvm"
    }
}
