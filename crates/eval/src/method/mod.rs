//! A decoding method as a combination of the decoder's parts, drafter x stop policy x
//! scheduler, from its description (a config's grid, `specx decode`'s flags, a results row) to
//! a generation: [`spec`] describes, [`flags`] parses the command line, [`models`] loads what
//! the methods run on, [`build`] makes the parts and runs them.

pub mod adaptive;
pub mod build;
pub mod flags;
pub mod models;
pub mod spec;

pub use build::{HeadBinding, Heads, RunModels, generate};
pub use flags::MethodArgs;
pub use models::{ModelPlan, Models, load_head};
pub use spec::{DrafterSpec, MethodSpec, PAPER_BOUNDS, PolicySpec, SchedulerSpec, Setting, head_name};
