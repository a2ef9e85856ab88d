//! llama.cpp as the reference measured in the same run: `llama-bench`'s prefill and decode
//! speed (with weight repacking off and on) and llama.cpp's own speculative decoding
//! (`llama-speculative-simple`) on the prompts specx decodes. scripts/bench-llamacpp.sh builds
//! both binaries side by side.

use anyhow::{bail, ensure, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// llama.cpp's figures for one model, from `llama-bench` in the same run.
#[derive(Debug, serde::Serialize)]
pub struct LlamaCppBench {
    pub role: String,
    /// Which of llama.cpp's CPU paths ran: `plain` (`--repack 0`: weights as stored, one
    /// `vec_dot` per row pair), `REPACK` (`--repack 1`: its extra buffer types, interleaved
    /// Q4_0 / Q4_K rows), or `AMX+REPACK` (`--repack 1` on a CPU with AMX-INT8, whose AMX
    /// buffer takes the types it supports first).
    pub path: String,
    pub prefill_tokens_per_sec: f64,
    pub prefill_sd: f64,
    pub decode_tokens_per_sec: f64,
    pub decode_sd: f64,
}

/// The name of llama.cpp's `--repack 1` path on this CPU (see [`LlamaCppBench::path`]).
fn extra_buffers_path() -> &'static str {
    if crate::common::machine::cpu_has_flag("amx_int8") { "AMX+REPACK" } else { "REPACK" }
}

/// Runs `llama-bench` on each model (prompt processing of `prompt_tokens`, then generation of
/// `decode_tokens` after a context of `prompt_tokens`, as specx measures them) and reads its JSON.
pub fn run_llama_bench(bin: &Path, models: &[(&str, &PathBuf)], threads: usize, prompt_tokens: usize, decode_tokens: usize) -> Result<Vec<LlamaCppBench>> {
    ensure!(bin.is_file(), "--llamacpp {}: no such file (build it with scripts/bench-llamacpp.sh)", bin.display());
    let mut out = Vec::new();
    for (role, path) in models {
        eprintln!("llama-bench on the {role} ({threads} threads)...");
        let run = |args: &[String]| -> Result<serde_json::Value> {
            let o = Command::new(bin)
                .arg("-m")
                .arg(path)
                // Weight repacking off and on: both of llama.cpp's CPU paths in one call.
                .args(["-t", &threads.to_string(), "-r", "3", "-o", "json", "--repack", "0,1"])
                .args(args)
                .output()
                .with_context(|| format!("running {}", bin.display()))?;
            ensure!(o.status.success(), "{} failed on {}: {}", bin.display(), path.display(), String::from_utf8_lossy(&o.stderr).trim());
            serde_json::from_slice(&o.stdout).with_context(|| format!("{}: output is not llama-bench JSON", bin.display()))
        };
        // Tokens/s (mean, sd) of the test with `--repack` = `repack`.
        let speed = |v: &serde_json::Value, repack: bool| -> Result<(f64, f64)> {
            let t = v
                .as_array()
                .and_then(|tests| tests.iter().find(|t| t.get("repack").and_then(|r| r.as_bool()) == Some(repack)))
                .with_context(|| format!("llama-bench JSON without a test of repack = {repack}"))?;
            let num = |k: &str| t.get(k).and_then(|x| x.as_f64()).with_context(|| format!("llama-bench JSON without {k}"));
            Ok((num("avg_ts")?, num("stddev_ts")?))
        };
        let pp = run(&["-p".into(), prompt_tokens.to_string(), "-n".into(), "0".into()])?;
        let tg = run(&["-p".into(), "0".into(), "-n".into(), decode_tokens.to_string(), "-d".into(), prompt_tokens.to_string()])?;
        for (repack, path) in [(false, "plain"), (true, extra_buffers_path())] {
            let ((prefill, prefill_sd), (decode, decode_sd)) = (speed(&pp, repack)?, speed(&tg, repack)?);
            out.push(LlamaCppBench { role: role.to_string(), path: path.into(), prefill_tokens_per_sec: prefill, prefill_sd, decode_tokens_per_sec: decode, decode_sd });
        }
    }
    Ok(out)
}

/// llama.cpp's own speculative decoding of a set of prompts with one draft length, summed over
/// the prompts (`llama-speculative-simple`: greedy, the draft model proposes exactly `k`
/// tokens per round, `--spec-draft-p-min 0` so no confidence stop cuts a round short).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LlamaCppSpeculative {
    pub k: usize,
    pub prompts: usize,
    /// Prompt tokens as llama.cpp's tokenizer counted them.
    pub prompt_tokens: usize,
    /// Generated tokens (llama.cpp may go a few past `-n`: it stops after the round that
    /// passes it).
    pub generated: usize,
    /// Prefill ("encoded") plus decode seconds, model loading excluded, like specx's request
    /// times.
    pub seconds: f64,
    /// The prefill's part of `seconds` (both models' prompt processing).
    pub prefill_seconds: f64,
    pub drafted: usize,
    pub accepted: usize,
}

impl LlamaCppSpeculative {
    pub fn tokens_per_sec(&self) -> f64 {
        self.generated as f64 / self.seconds
    }

    /// Accepted draft tokens over drafted ones (specx's acceptance rate).
    pub fn acceptance(&self) -> f64 {
        self.accepted as f64 / self.drafted.max(1) as f64
    }

    fn add(&mut self, o: &Self) {
        self.prompts += o.prompts;
        self.prompt_tokens += o.prompt_tokens;
        self.generated += o.generated;
        self.seconds += o.seconds;
        self.prefill_seconds += o.prefill_seconds;
        self.drafted += o.drafted;
        self.accepted += o.accepted;
    }
}

/// The `llama-speculative-simple` that scripts/bench-llamacpp.sh builds beside `llama_bench`.
pub fn speculative_binary(llama_bench: &Path) -> Result<PathBuf> {
    let bin = llama_bench.with_file_name("llama-speculative-simple");
    ensure!(
        bin.is_file(),
        "no llama-speculative-simple beside {} (llama.cpp's own speculative decoding, the reference of `bench-decode --llamacpp`): run scripts/bench-llamacpp.sh again, it builds both",
        llama_bench.display()
    );
    Ok(bin)
}

/// Runs llama.cpp's speculative decoding on every prompt (the model input text, chat template
/// applied) with draft length `k`, `max_new_tokens` per prompt, greedy, `threads` threads for
/// both models; one process per prompt (each loads the models; loading is not timed).
pub fn run_speculative(bin: &Path, draft: &Path, target: &Path, prompts: &[String], k: usize, max_new_tokens: usize, threads: usize) -> Result<LlamaCppSpeculative> {
    let mut sum = LlamaCppSpeculative { k, prompts: 0, prompt_tokens: 0, generated: 0, seconds: 0.0, prefill_seconds: 0.0, drafted: 0, accepted: 0 };
    let t = threads.to_string();
    for (i, prompt) in prompts.iter().enumerate() {
        let o = Command::new(bin)
            .arg("-m")
            .arg(target)
            .arg("-md")
            .arg(draft)
            .args(["--spec-type", "draft-simple", "--spec-draft-n-max", &k.to_string(), "--spec-draft-n-min", "0", "--spec-draft-p-min", "0"])
            .args(["--temp", "0", "-n", &max_new_tokens.to_string(), "-c", "4096", "-t", &t, "-td", &t, "-p", prompt])
            .output()
            .with_context(|| format!("running {}", bin.display()))?;
        let log = String::from_utf8_lossy(&o.stderr);
        ensure!(o.status.success(), "{} failed on prompt {} (K = {k}): {}", bin.display(), i + 1, tail(&log, 5));
        let mut one = parse_speculative_log(&log).with_context(|| format!("{} on prompt {} (K = {k}): {}", bin.display(), i + 1, tail(&log, 5)))?;
        one.k = k;
        sum.add(&one);
    }
    Ok(sum)
}

/// The last `n` lines of a log.
fn tail(log: &str, n: usize) -> String {
    let lines: Vec<&str> = log.trim().lines().collect();
    lines[lines.len().saturating_sub(n)..].join(" | ")
}

/// Reads the summary `llama-speculative-simple` prints at its end: `encoded N tokens in S
/// seconds`, `decoded N tokens in S seconds`, `n_drafted = N`, `n_accept = N`.
pub fn parse_speculative_log(log: &str) -> Result<LlamaCppSpeculative> {
    // The words after `key` on the line that has it, whitespace-separated.
    let words = |key: &str| -> Option<Vec<&str>> { log.lines().find_map(|l| l.find(key).map(|i| l[i + key.len()..].split_whitespace().collect())) };
    // `encoded|decoded N tokens in S seconds`: (N, S).
    let timed = |key: &str| -> Result<(usize, f64)> {
        match words(key).as_deref() {
            Some([n, "tokens", "in", s, "seconds,", ..]) => Ok((n.parse()?, s.parse()?)),
            _ => bail!("no '{key} N tokens in S seconds' line"),
        }
    };
    let count = |key: &str| -> Result<usize> {
        match words(key).as_deref() {
            Some(["=", n, ..]) => Ok(n.parse()?),
            _ => bail!("no '{key} = N' line"),
        }
    };
    let (prompt_tokens, encode_s) = timed("encoded")?;
    let (generated, decode_s) = timed("decoded")?;
    Ok(LlamaCppSpeculative { k: 0, prompts: 1, prompt_tokens, generated, seconds: encode_s + decode_s, prefill_seconds: encode_s, drafted: count("n_drafted")?, accepted: count("n_accept")? })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The end of a real run's log (llama.cpp of llama-cpp-python 0.3.36, Qwen2.5-Coder 1.5B
    /// with its 0.5B draft).
    const LOG: &str = "0.03.225.216 I cmn          init: llama threadpool init, n_threads = 2
0.09.859.694 I encoded   40 tokens in    0.608 seconds, speed:   65.799 t/s
0.09.859.713 I decoded  133 tokens in    7.177 seconds, speed:   18.530 t/s
0.09.859.730 I
0.09.859.740 I n_draft   = 4
0.09.859.753 I n_predict = 133
0.09.859.766 I n_drafted = 118
0.09.859.779 I n_accept  = 103
0.09.859.792 I accept    = 87.288%
";

    #[test]
    fn the_summary_of_a_real_log_is_read() {
        let r = parse_speculative_log(LOG).unwrap();
        assert_eq!((r.prompt_tokens, r.generated, r.drafted, r.accepted, r.prompts), (40, 133, 118, 103, 1));
        assert!((r.seconds - 7.785).abs() < 1e-9 && r.prefill_seconds == 0.608, "{} {}", r.seconds, r.prefill_seconds);
        assert!((r.acceptance() - 103.0 / 118.0).abs() < 1e-12);
    }

    #[test]
    fn a_log_without_its_summary_is_an_error_naming_the_line() {
        for (cut, missing) in [("0.09.859.694", "encoded"), ("0.09.859.713", "decoded"), ("0.09.859.766", "n_drafted"), ("0.09.859.779", "n_accept")] {
            let log: String = LOG.lines().filter(|l| !l.starts_with(cut)).map(|l| format!("{l}\n")).collect();
            let e = parse_speculative_log(&log).unwrap_err().to_string();
            assert!(e.contains(missing), "{e}");
        }
    }
}
