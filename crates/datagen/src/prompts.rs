//! Prompt sets in their standard formats, read from any path.

use anyhow::{bail, Context, Result};
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

/// One prompt of a prompt set: its id in the source and the raw task text (before any
/// instruction template or chat template).
#[derive(Clone, Debug, PartialEq)]
pub struct PromptRecord {
    pub id: String,
    pub text: String,
}

/// Opens a file, transparently gunzipping `*.gz`.
fn open(path: &Path) -> Result<Box<dyn Read>> {
    let f = std::fs::File::open(path).with_context(|| format!("opening prompt file {}", path.display()))?;
    Ok(if path.extension().is_some_and(|e| e == "gz") { Box::new(flate2::read::GzDecoder::new(f)) } else { Box::new(f) })
}

/// Parses a JSON-lines file (optionally gzipped); errors name the file and line.
pub fn read_jsonl(path: &Path) -> Result<Vec<serde_json::Value>> {
    let mut rows = Vec::new();
    for (i, line) in BufReader::new(open(path)?).lines().enumerate() {
        let line = line.with_context(|| format!("{}: line {}: cannot read (corrupt gzip or not UTF-8?)", path.display(), i + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        let v: serde_json::Value = serde_json::from_str(&line).with_context(|| format!("{}: line {}: malformed JSON", path.display(), i + 1))?;
        rows.push(v);
    }
    Ok(rows)
}

fn field<'a>(row: &'a serde_json::Value, key: &str, path: &Path, line: usize) -> Result<&'a str> {
    row.get(key)
        .and_then(|v| v.as_str())
        .with_context(|| format!("{}: line {line}: missing string field '{key}'", path.display()))
}

/// HumanEval (`task_id`, `prompt`) from `HumanEval.jsonl(.gz)`.
pub fn load_humaneval(path: &Path) -> Result<Vec<PromptRecord>> {
    let rows = read_jsonl(path)?;
    let mut out = Vec::with_capacity(rows.len());
    for (i, row) in rows.iter().enumerate() {
        out.push(PromptRecord { id: field(row, "task_id", path, i + 1)?.to_string(), text: field(row, "prompt", path, i + 1)?.to_string() });
    }
    if out.is_empty() {
        bail!("{}: no prompts", path.display());
    }
    Ok(out)
}

/// The default HumanEval instruction: ask the model to complete the function.
pub fn humaneval_instruction(prompt: &str) -> String {
    format!("Complete the following Python function. Reply with the completed function only.\n```python\n{prompt}```")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This crate's directory as cargo reports it when running the test (a build directory shared
    /// between checkouts can hold a binary compiled in another checkout, so the compile-time value
    /// is only the fallback).
    fn manifest_dir() -> std::path::PathBuf {
        std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(|| env!("CARGO_MANIFEST_DIR").into(), Into::into)
    }

    #[test]
    fn reads_humaneval_and_reports_bad_lines() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("he.jsonl");
        std::fs::write(&p, "{\"task_id\": \"HumanEval/0\", \"prompt\": \"def f():\\n\"}\n\n").unwrap();
        assert_eq!(load_humaneval(&p).unwrap(), vec![PromptRecord { id: "HumanEval/0".into(), text: "def f():\n".into() }]);
        std::fs::write(&p, "{\"task_id\": \"a\", \"prompt\": \"x\"}\n{oops\n").unwrap();
        let e = format!("{:#}", load_humaneval(&p).unwrap_err());
        assert!(e.contains("line 2") && e.contains("malformed JSON"), "{e}");
        std::fs::write(&p, "{\"task_id\": \"a\"}\n").unwrap();
        assert!(format!("{:#}", load_humaneval(&p).unwrap_err()).contains("'prompt'"));
        std::fs::write(&p, "").unwrap();
        assert!(format!("{:#}", load_humaneval(&p).unwrap_err()).contains("no prompts"));
    }

    #[test]
    fn reads_the_shared_gzipped_humaneval() {
        let p = manifest_dir().join("../../../shared/datasets/humaneval/HumanEval.jsonl.gz");
        let rows = load_humaneval(&p).unwrap();
        assert_eq!(rows.len(), 164);
        assert_eq!(rows[0].id, "HumanEval/0");
    }
}
