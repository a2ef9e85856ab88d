//! Writes the tiny llama model (grouped-query attention: 4 query heads, 2 key/value heads) that
//! the GGUF reader is checked against, as an HF directory: the input of
//! `scripts/reference/llama_gguf_fixture.py`, which converts it to GGUF with llama.cpp's own
//! `gguf` package and its q/k permutation.
//!
//!     cargo run --release --example tiny_llama_hf -p specx-decoder -- DIR

use specx_decoder::synthetic::{
    StDtype, TINY_LLAMA_SEED, random_weights, tiny_llama_gqa, word_tokenizer_json, write_hf_dir,
};

fn main() -> anyhow::Result<()> {
    let dir = std::env::args().nth(1).ok_or_else(|| anyhow::anyhow!("usage: tiny_llama_hf DIR"))?;
    let cfg = tiny_llama_gqa();
    write_hf_dir(
        dir.as_ref(),
        &cfg,
        &random_weights(&cfg, TINY_LLAMA_SEED),
        StDtype::F32,
        1,
        &word_tokenizer_json(cfg.vocab_size, "w"),
    )?;
    println!("wrote {dir}");
    Ok(())
}
