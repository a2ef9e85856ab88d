//! `specx bench` (placeholder during bring-up).
use anyhow::Result;
#[derive(clap::Args)]
pub struct BenchArgs {}
pub fn run(_a: BenchArgs) -> Result<()> { Ok(()) }
