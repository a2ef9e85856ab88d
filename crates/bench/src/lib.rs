//! specx-bench: what measures speed rather than methods. [`runtime`] times the runtime's
//! forwards against llama.cpp's and the memory-bandwidth bound (`specx bench`), [`decode`]
//! times whole decodes per weight path (`specx bench-decode`, a preset of `specx eval`),
//! [`draft_cost`] prices every cheaper draft (`specx draft-cost`), [`suffix`] times the
//! suffix drafter's speculation against its corpus size (`specx bench-suffix`), [`gpu_check`] checks a GPU's
//! numbers and speed against its targets (`specx gpu-check`), and [`llamacpp`] runs
//! llama.cpp's own binaries as the reference measured in the same run. It stands on specx-eval
//! (the loader, the eval runs, the results tables) and nothing below imports it.

pub mod decode;
pub mod draft_cost;
pub mod gpu_check;
pub mod llamacpp;
pub mod runtime;
pub mod suffix;
