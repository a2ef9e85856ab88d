//! `specx eval export`: a finished run's rows in another tool's format. `spec-bench` writes one
//! JSON-lines answer file per sampling setting and method setting in Spec-Bench's format
//! (`evaluation/eval.py`'s answers: `question_id`, `category`, `choices` with `turns`,
//! `decoding_steps`, `new_tokens`, `wall_time`, `accept_lengths`), which Spec-Bench's own
//! `evaluation/speed.py` reads, the AR file as its baseline.
//!
//! Counts are specx's own, written directly: `new_tokens` is a turn's generated tokens,
//! `decoding_steps` its target calls (prefill included), `accept_lengths` each verification
//! round's accepted drafts plus the target's own token (1 per AR step), `wall_time` the turn's
//! seconds (prefill included). Seeds of a sampled setting are the question's `choices`.

use super::manifest::EvalManifest;
use super::merge::unit_files;
use crate::common::results::{ResultRow, UnitFile};
use anyhow::{Context, Result, ensure};
use serde_json::{Value, json};
use specx_run::RunManifest;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The formats `specx eval export` writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ExportFormat {
    /// Spec-Bench's answer files (one per setting), for its `evaluation/speed.py`.
    SpecBench,
}

/// What an export wrote.
pub struct Exported {
    /// (file, answers, rows) per setting, the AR baseline first.
    pub files: Vec<(PathBuf, usize, usize)>,
    /// Answers written without their text: a sampled single-turn output that differs from
    /// AR's is stored as its sha256 only, so its turn is an empty string.
    pub texts_missing: usize,
}

/// One file's answers: (dataset, prompt index) -> the rows of that question, one per seed.
type Answers<'a> = BTreeMap<(String, usize), Vec<(&'a UnitFile, &'a ResultRow)>>;

/// Writes the run in `run_dir` to `out` in `format`.
pub fn export(run_dir: &Path, format: ExportFormat, out: &Path) -> Result<Exported> {
    let ExportFormat::SpecBench = format;
    let manifest = EvalManifest::read(run_dir)?;
    let units: Vec<UnitFile> = unit_files(run_dir)?.iter().map(|f| UnitFile::read_path(f)).collect::<Result<_>>()?;
    ensure!(!units.is_empty(), "{}: no finished units to export (run specx eval first)", run_dir.display());
    let cfg = &manifest.config;
    let tokenizer = specx_decoder::loader::load_tokenizer(&cfg.models.target, cfg.models.target_tokenizer.as_deref())
        .with_context(|| "the target's tokenizer (to write the answers' text)")?;
    let categories = categories(cfg);

    // Files by (sampling, setting key), in the run's setting order, AR first.
    let mut files: BTreeMap<(String, usize), (String, Answers)> = BTreeMap::new();
    for u in &units {
        for r in &u.rows {
            let order = manifest.settings.iter().position(|k| *k == r.setting.key()).unwrap_or(usize::MAX);
            let (_, answers) =
                files.entry((r.sampling.clone(), order)).or_insert_with(|| (r.setting.key(), Answers::new()));
            answers.entry((u.unit.dataset.clone(), u.unit.prompt_index)).or_default().push((u, r));
        }
    }
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let mut done = Exported { files: Vec::new(), texts_missing: 0 };
    for ((sampling, _), (key, answers)) in &files {
        let path = out.join(format!("{sampling}-{}.jsonl", file_stem(key)));
        ensure!(
            !done.files.iter().any(|(p, _, _)| *p == path),
            "two settings of the run give the file name {}: rename one sampling setting",
            path.display()
        );
        let mut text = String::new();
        let mut rows = 0;
        for ((dataset, _), seeds) in answers {
            let (u0, r0) = seeds[0];
            let mut choices = Vec::with_capacity(seeds.len());
            for (index, (u, r)) in seeds.iter().enumerate() {
                let (choice, missing) = choice(index, u, r, &tokenizer)?;
                choices.push(choice);
                done.texts_missing += missing;
                rows += 1;
            }
            let category = categories.get(&(dataset.clone(), r0.prompt_id.clone())).cloned().unwrap_or(dataset.clone());
            let line = json!({
                "question_id": question_id(&r0.prompt_id),
                "category": category,
                "answer_id": format!("{dataset}/{}", u0.unit.prompt_id),
                "model_id": key,
                "choices": choices,
                "tstamp": 0.0,
            });
            text.push_str(&serde_json::to_string(&line)?);
            text.push('\n');
        }
        specx_decoder::fsutil::write_atomic(&path, text.as_bytes())?;
        done.files.push((path, answers.len(), rows));
    }
    Ok(done)
}

/// One seed's answer: its turns' text and counts. Returns how many turns lack their text.
fn choice(index: usize, u: &UnitFile, r: &ResultRow, tokenizer: &specx_decoder::Tokenizer) -> Result<(Value, usize)> {
    let (mut turns, mut steps, mut new_tokens, mut wall_time, mut accept_lengths) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut missing = 0;
    // A single-turn row is one turn of its own counts; its answer is AR's when identical.
    let single;
    let turn_rows = if r.turns.is_empty() {
        single = [crate::common::results::TurnRow {
            prompt_tokens: r.prompt_tokens,
            max_new_tokens: r.max_new_tokens,
            n_generated: r.n_generated,
            n_target_calls: r.n_target_calls,
            rounds: r.accepted_per_round.len(),
            total_time_s: r.total_time_s,
            tokens: if r.identical_to_ar { u.ar_tokens.clone() } else { Vec::new() },
        }];
        &single[..]
    } else {
        &r.turns[..]
    };
    let mut round = 0;
    for t in turn_rows {
        if t.tokens.is_empty() && t.n_generated > 0 {
            missing += 1;
            turns.push(String::new());
        } else {
            turns.push(tokenizer.decode(&t.tokens)?);
        }
        steps.push(t.n_target_calls);
        new_tokens.push(t.n_generated);
        wall_time.push(t.total_time_s);
        if r.setting.spec().is_none() {
            accept_lengths.extend(std::iter::repeat_n(1, t.n_generated));
        } else {
            let rounds = r.accepted_per_round.get(round..round + t.rounds).context("a turn's rounds past the row's")?;
            accept_lengths.extend(rounds.iter().map(|a| a + 1));
            round += t.rounds;
        }
    }
    let choice = json!({
        "index": index,
        "turns": turns,
        "decoding_steps": steps,
        "new_tokens": new_tokens,
        "wall_time": wall_time,
        "accept_lengths": accept_lengths,
    });
    Ok((choice, missing))
}

/// Each prompt's `category` field where its set's rows have one, by (set, prompt id); a set
/// whose file cannot be read now gives none (its rows take the set's name).
fn categories(cfg: &super::config::EvalConfig) -> BTreeMap<(String, String), String> {
    let mut out = BTreeMap::new();
    for set in &cfg.prompts {
        let Ok(records) = specx_prompts::load(set.format, &set.path) else { continue };
        for r in records {
            if let Some(c) = r.fields.get("category") {
                out.insert((set.name.clone(), r.id.clone()), c.clone());
            }
        }
    }
    out
}

/// A prompt id as Spec-Bench writes its question ids: a number where it is one.
fn question_id(id: &str) -> Value {
    id.parse::<u64>().map_or_else(|_| Value::String(id.to_string()), Value::from)
}

/// A setting key as a file name: letters, digits, `.` and `-`; every other run of characters
/// one `_`.
fn file_stem(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    for c in key.chars() {
        if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
            out.push(c);
        } else if !out.ends_with('_') {
            out.push('_');
        }
    }
    out.trim_matches('_').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_become_file_names_and_ids_numbers() {
        assert_eq!(file_stem("specdec K=4"), "specdec_K_4");
        assert_eq!(file_stem("suffix a=1 p>=0.1 | fixed K=24"), "suffix_a_1_p_0.1_fixed_K_24");
        assert_eq!(file_stem("ar"), "ar");
        assert_eq!(question_id("81"), json!(81));
        assert_eq!(question_id("HumanEval/0"), json!("HumanEval/0"));
    }
}
