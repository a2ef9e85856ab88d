//! llama.cpp as the reference measured in the same run: `llama-bench`'s prefill and decode
//! speed (with weight repacking off and on) and llama.cpp's own speculative decoding
//! (`llama-speculative-simple`) on the prompts specx decodes. scripts/bench-llamacpp.sh builds
//! both binaries side by side.

use anyhow::{Context, Result, bail, ensure};
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
    if specx_eval::common::machine::cpu_has_flag("amx_int8") { "AMX+REPACK" } else { "REPACK" }
}

/// llama.cpp's figures from one `llama-bench` call per model and path: those that ran, and
/// for each that did not, why (a report prints the reason where the figure would be).
#[derive(Debug, Default, serde::Serialize)]
pub struct LlamaCppRuns {
    pub runs: Vec<LlamaCppBench>,
    /// `role path: reason` of every path that did not run.
    pub failed: Vec<String>,
}

/// Runs `llama-bench` on each model (prompt processing of `prompt_tokens`, then generation of
/// `decode_tokens` after a context of `prompt_tokens`, as specx measures them) and reads its
/// JSON, once for each of llama.cpp's CPU paths (`--repack 0`, then `1`). A path that fails
/// (llama.cpp 0.3.36's AMX path crashes in some VMs that expose AMX-INT8) is reported in
/// [`LlamaCppRuns::failed`] and the other path's figures are kept; no path at all is an error.
pub fn run_llama_bench(
    bin: &Path,
    models: &[(&str, &PathBuf)],
    threads: usize,
    prompt_tokens: usize,
    decode_tokens: usize,
) -> Result<LlamaCppRuns> {
    ensure!(bin.is_file(), "--llamacpp {}: no such file (build it with scripts/bench-llamacpp.sh)", bin.display());
    let mut out = LlamaCppRuns::default();
    for (role, path) in models {
        eprintln!("llama-bench on the {role} ({threads} threads)...");
        let run = |repack: bool, args: &[String]| -> Result<(f64, f64)> {
            let o = Command::new(bin)
                .arg("-m")
                .arg(path)
                .args(["-t", &threads.to_string(), "-r", "3", "-o", "json", "--repack", if repack { "1" } else { "0" }])
                .args(args)
                .output()
                .with_context(|| format!("running {}", bin.display()))?;
            if !o.status.success() {
                let last = tail(&String::from_utf8_lossy(&o.stderr), 1);
                bail!(
                    "{} exited with {} on {} ({})",
                    bin.display(),
                    exit_words(&o.status),
                    path.display(),
                    if last.is_empty() { "no message" } else { &last }
                );
            }
            let v: serde_json::Value = serde_json::from_slice(&o.stdout)
                .with_context(|| format!("{}: output is not llama-bench JSON", bin.display()))?;
            let t = v.as_array().and_then(|tests| tests.first()).context("llama-bench JSON without a test")?;
            let num =
                |k: &str| t.get(k).and_then(|x| x.as_f64()).with_context(|| format!("llama-bench JSON without {k}"));
            Ok((num("avg_ts")?, num("stddev_ts")?))
        };
        for (repack, name) in [(false, "plain"), (true, extra_buffers_path())] {
            // Prefill, then (if it ran) decode after a context of the prompt's length.
            let figures =
                run(repack, &["-p".into(), prompt_tokens.to_string(), "-n".into(), "0".into()]).and_then(|pp| {
                    Ok((
                        pp,
                        run(
                            repack,
                            &[
                                "-p".into(),
                                "0".into(),
                                "-n".into(),
                                decode_tokens.to_string(),
                                "-d".into(),
                                prompt_tokens.to_string(),
                            ],
                        )?,
                    ))
                });
            match figures {
                Ok(((prefill, prefill_sd), (decode, decode_sd))) => out.runs.push(LlamaCppBench {
                    role: role.to_string(),
                    path: name.into(),
                    prefill_tokens_per_sec: prefill,
                    prefill_sd,
                    decode_tokens_per_sec: decode,
                    decode_sd,
                }),
                Err(e) => {
                    eprintln!("llama-bench's {name} path failed on the {role}; its figures are left out: {e:#}");
                    out.failed.push(format!("{role} {name}: {e:#}"));
                }
            }
        }
        ensure!(
            out.runs.iter().any(|r| r.role == *role),
            "llama-bench ran on no path for the {role}: {}",
            out.failed.join("; ")
        );
    }
    Ok(out)
}

/// The signal that ended the process, if one did (a crash, not an error it reported).
fn signal(status: &std::process::ExitStatus) -> Option<i32> {
    #[cfg(unix)]
    return std::os::unix::process::ExitStatusExt::signal(status);
    #[cfg(not(unix))]
    return None;
}

/// An exit status in words: the code, or the signal that ended the process.
fn exit_words(status: &std::process::ExitStatus) -> String {
    if let Some(signal) = signal(status) {
        let name = match signal {
            11 => " (segmentation fault)",
            6 => " (abort)",
            9 => " (killed)",
            4 => " (illegal instruction)",
            _ => "",
        };
        return format!("signal {signal}{name}");
    }
    status.code().map_or("no exit code".into(), |c| format!("exit code {c}"))
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
    /// Why the run went without weight repacking (`--no-repack`), if it did: the default
    /// path crashed on the first prompt.
    pub no_repack: Option<String>,
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
        // `no_repack` is the whole run's, set by `run_speculative`.
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
/// both models; one process per prompt (each loads the models; loading is not timed). If the
/// first prompt's process is killed by a signal (llama.cpp 0.3.36's AMX path segfaults in
/// VMs that expose AMX-INT8), every prompt runs again with `--no-repack`, and the result says
/// so ([`LlamaCppSpeculative::no_repack`]).
pub fn run_speculative(
    bin: &Path,
    draft: &Path,
    target: &Path,
    prompts: &[String],
    k: usize,
    max_new_tokens: usize,
    threads: usize,
) -> Result<LlamaCppSpeculative> {
    let mut sum = LlamaCppSpeculative {
        k,
        prompts: 0,
        prompt_tokens: 0,
        generated: 0,
        seconds: 0.0,
        prefill_seconds: 0.0,
        drafted: 0,
        accepted: 0,
        no_repack: None,
    };
    let t = threads.to_string();
    let run = |prompt: &str, no_repack: bool| {
        Command::new(bin)
            .arg("-m")
            .arg(target)
            .arg("-md")
            .arg(draft)
            .args([
                "--spec-type",
                "draft-simple",
                "--spec-draft-n-max",
                &k.to_string(),
                "--spec-draft-n-min",
                "0",
                "--spec-draft-p-min",
                "0",
            ])
            .args(["--temp", "0", "-n", &max_new_tokens.to_string(), "-c", "4096", "-t", &t, "-td", &t, "-p", prompt])
            .args(if no_repack { &["--no-repack"][..] } else { &[] })
            .output()
            .with_context(|| format!("running {}", bin.display()))
    };
    for (i, prompt) in prompts.iter().enumerate() {
        let mut o = run(prompt, sum.no_repack.is_some())?;
        if i == 0 && signal(&o.status).is_some() {
            let why = format!("{} exited with {} with weight repacking on", bin.display(), exit_words(&o.status));
            eprintln!("{why}; running every prompt with --no-repack");
            sum.no_repack = Some(why);
            o = run(prompt, true)?;
        }
        let log = String::from_utf8_lossy(&o.stderr);
        ensure!(
            o.status.success(),
            "{} failed ({}) on prompt {} (K = {k}): {}",
            bin.display(),
            exit_words(&o.status),
            i + 1,
            tail(&log, 5)
        );
        let mut one = parse_speculative_log(&log)
            .with_context(|| format!("{} on prompt {} (K = {k}): {}", bin.display(), i + 1, tail(&log, 5)))?;
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
    let words = |key: &str| -> Option<Vec<&str>> {
        log.lines().find_map(|l| l.find(key).map(|i| l[i + key.len()..].split_whitespace().collect()))
    };
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
    Ok(LlamaCppSpeculative {
        k: 0,
        prompts: 1,
        prompt_tokens,
        generated,
        seconds: encode_s + decode_s,
        prefill_seconds: encode_s,
        drafted: count("n_drafted")?,
        accepted: count("n_accept")?,
        no_repack: None,
    })
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

    /// An executable shell script `name` in `dir` running `body`: a stand-in llama.cpp binary.
    #[cfg(unix)]
    fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let bin = dir.join(name);
        std::fs::write(&bin, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        bin
    }

    /// A stand-in `llama-bench`: JSON of one test for `--repack 0`; for `--repack 1` a crash
    /// (`crash_repack`) or the same JSON.
    #[cfg(unix)]
    fn fake_llama_bench(dir: &Path, crash_repack: bool) -> PathBuf {
        let crash = if crash_repack {
            r#"case "$*" in *"--repack 1"*) echo "Segmentation fault in ggml_backend_amx" >&2; kill -SEGV $$;; esac"#
        } else {
            ""
        };
        script(dir, "llama-bench", &format!("{crash}\necho '[{{\"avg_ts\": 42.5, \"stddev_ts\": 1.5}}]'"))
    }

    #[cfg(unix)]
    #[test]
    fn a_path_that_crashes_is_reported_and_the_other_kept() {
        let dir = tempfile::tempdir().unwrap();
        let model = dir.path().join("model.gguf");
        let runs = run_llama_bench(&fake_llama_bench(dir.path(), true), &[("target", &model)], 2, 16, 4).unwrap();
        assert_eq!(runs.runs.len(), 1, "{runs:?}");
        assert_eq!(
            (runs.runs[0].path.as_str(), runs.runs[0].prefill_tokens_per_sec, runs.runs[0].decode_sd),
            ("plain", 42.5, 1.5)
        );
        assert_eq!(runs.failed.len(), 1);
        let why = &runs.failed[0];
        assert!(
            why.starts_with("target ")
                && why.contains("signal 11 (segmentation fault)")
                && why.contains("ggml_backend_amx"),
            "{why}"
        );
        // Both paths run: both kept, nothing failed.
        let both = run_llama_bench(&fake_llama_bench(dir.path(), false), &[("target", &model)], 2, 16, 4).unwrap();
        assert_eq!((both.runs.len(), both.failed.len()), (2, 0));
    }

    #[cfg(unix)]
    #[test]
    fn speculative_runs_again_without_repacking_when_the_default_path_crashes() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log.txt");
        std::fs::write(&log, LOG).unwrap();
        let bin = script(
            dir.path(),
            "llama-speculative-simple",
            &format!("case \"$*\" in *--no-repack*) cat {} >&2;; *) kill -SEGV $$;; esac", log.display()),
        );
        let m = dir.path().join("m.gguf");
        let r = run_speculative(&bin, &m, &m, &["a".into(), "b".into()], 4, 128, 2).unwrap();
        assert_eq!((r.prompts, r.generated, r.k), (2, 266, 4));
        let why = r.no_repack.expect("the crash is recorded");
        assert!(why.contains("signal 11 (segmentation fault)"), "{why}");
    }

    #[test]
    fn the_summary_of_a_real_log_is_read() {
        let r = parse_speculative_log(LOG).unwrap();
        assert_eq!((r.prompt_tokens, r.generated, r.drafted, r.accepted, r.prompts), (40, 133, 118, 103, 1));
        assert!((r.seconds - 7.785).abs() < 1e-9 && r.prefill_seconds == 0.608, "{} {}", r.seconds, r.prefill_seconds);
        assert!((r.acceptance() - 103.0 / 118.0).abs() < 1e-12);
    }

    #[test]
    fn a_log_without_its_summary_is_an_error_naming_the_line() {
        for (cut, missing) in [
            ("0.09.859.694", "encoded"),
            ("0.09.859.713", "decoded"),
            ("0.09.859.766", "n_drafted"),
            ("0.09.859.779", "n_accept"),
        ] {
            let log: String = LOG.lines().filter(|l| !l.starts_with(cut)).map(|l| format!("{l}\n")).collect();
            let e = parse_speculative_log(&log).unwrap_err().to_string();
            assert!(e.contains(missing), "{e}");
        }
    }
}
