//! A decoding method as a combination of the decoder's parts, drafter x stop policy x
//! scheduler, from its description (a config's grid, `specx decode`'s flags, a results row) to
//! a generation: [`spec`] describes, [`policy`] holds each stop-policy family in a file of its
//! own, [`flags`] parses the command line, [`models`] loads what the methods run on, [`build`]
//! makes the parts and runs them.

pub mod build;
pub mod drafter;
pub mod family;
pub mod flags;
pub mod models;
pub mod policy;
pub mod spec;

pub use build::{RunModels, generate};
pub use family::head_name;
pub use flags::MethodArgs;
pub use models::{ModelPlan, Models, load_head};
pub use policy::{HeadBinding, Heads, PolicySpec};
pub use spec::{DrafterSpec, MethodSpec, SchedulerSpec, Setting};
