//! `specx reproduce <paper>`: the tables and figures of a paper's reproduction, assembled from
//! finished runs (eval, replay, train sweeps). Nothing is run here: the runs are resumable
//! commands of their own, and this step only reads what they wrote, so a write-up can be
//! regenerated in seconds whenever a run grows.

pub mod adaptive;
pub mod specdecpp;
