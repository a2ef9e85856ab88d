//! What every command and analysis of the eval crate shares, at the bottom of its layers (it
//! imports nothing above it): results rows and tables, statistics over prompts, timing-model
//! fits, the profile's data and latencies, the measured machine and its memory
//! bandwidth and RSS (sysmem.rs), the row cost `specx bench` stores for `specx decode`
//! (row_cost.rs), the suffix drafter's corpus file (suffix_corpus.rs), and PNG rendering.

pub mod costs;
pub mod curve_plot;
pub mod machine;
pub mod plot;
pub mod profile_data;
pub mod results;
pub mod row_cost;
pub mod run_rows;
pub mod stats;
pub mod suffix_corpus;
pub mod sysmem;
pub mod timing;
