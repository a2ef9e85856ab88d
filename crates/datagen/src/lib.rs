//! specx-datagen: prompt sets and their templates, and (next) the token-mixing acceptance
//! datasets of SpecDec++ §4.4.

pub mod prompts;
