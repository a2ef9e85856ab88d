//! Prompt sets in their standard formats, read from any path, and the instruction templates
//! that turn a row into the text a model sees.

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

/// One prompt of a prompt set: its id in the source, the raw task text (before any instruction
/// or chat template), every string field of the row (for templates), and the user turns that
/// follow the first in a multi-turn row (MT-bench, Spec-Bench: `turns`), as written.
#[derive(Clone, Debug, PartialEq)]
pub struct PromptRecord {
    pub id: String,
    pub text: String,
    pub fields: BTreeMap<String, String>,
    pub follow_ups: Vec<String>,
}

impl PromptRecord {
    fn new(id: String, text: String, fields: BTreeMap<String, String>) -> Self {
        Self { id, text, fields, follow_ups: Vec::new() }
    }
}

/// The standard prompt-set formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PromptFormat {
    /// Alpaca JSON: an array of `{instruction, input, output}` objects.
    Alpaca,
    /// GSM8K JSON lines: `{question, answer}`.
    Gsm8k,
    /// HumanEval JSON lines, optionally gzipped: `{task_id, prompt, ...}`.
    Humaneval,
    /// Generic JSON lines: `{id, prompt}` or MT-bench / Spec-Bench style `{question_id,
    /// turns: [...]}` (the first turn is the prompt, the others follow it in one conversation).
    Jsonl,
}

impl PromptFormat {
    /// The instruction template used when a config does not give one. `{name}` is replaced by
    /// the row's field `name` (see [`PromptRecord::fields`]).
    pub fn default_template(self) -> &'static str {
        match self {
            // `input_line` is "\nInput: <input>" when the row has an input, else empty.
            Self::Alpaca => "{instruction}{input_line}",
            Self::Gsm8k => {
                "Solve the following math problem step by step. Give the final answer after \"####\".\n\n{question}"
            }
            Self::Humaneval => {
                "Complete the following Python function. Reply with the completed function only.\n```python\n{prompt}```"
            }
            Self::Jsonl => "{prompt}",
        }
    }
}

/// A copy-heavy prompt set over HumanEval's rows: each function complete (its prompt and
/// canonical solution) with an instruction to add type hints and a docstring, so most of the
/// answer repeats the prompt (the work prompt lookup is made for). Set a HumanEval prompt set's
/// `template` to this to get it; `specx bench-decode --set humaneval-edit` uses it.
pub const HUMANEVAL_EDIT_TEMPLATE: &str = "Rewrite the following Python code with type hints on every function signature and a docstring in every function. Keep everything else unchanged. Reply with the complete code only.\n```python\n{prompt}{canonical_solution}```";

/// Opens a file, transparently gunzipping `*.gz`.
fn open(path: &Path) -> Result<Box<dyn Read>> {
    let f = std::fs::File::open(path).with_context(|| format!("opening prompt file {}", path.display()))?;
    Ok(if path.extension().is_some_and(|e| e == "gz") {
        Box::new(flate2::read::GzDecoder::new(f))
    } else {
        Box::new(f)
    })
}

/// Parses a JSON-lines file (optionally gzipped); errors name the file and line. Returns each
/// row with its 1-based line number.
pub fn read_jsonl(path: &Path) -> Result<Vec<(usize, serde_json::Value)>> {
    let mut rows = Vec::new();
    for (i, line) in BufReader::new(open(path)?).lines().enumerate() {
        let line = line
            .with_context(|| format!("{}: line {}: cannot read (corrupt gzip or not UTF-8?)", path.display(), i + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        let v: serde_json::Value = serde_json::from_str(&line)
            .with_context(|| format!("{}: line {}: malformed JSON", path.display(), i + 1))?;
        rows.push((i + 1, v));
    }
    Ok(rows)
}

/// Where a row came from, for error messages.
fn at(path: &Path, what: &str) -> String {
    format!("{}: {what}", path.display())
}

fn field<'a>(row: &'a serde_json::Value, key: &str, path: &Path, place: &str) -> Result<&'a str> {
    row.get(key).and_then(|v| v.as_str()).with_context(|| format!("{}: missing string field '{key}'", at(path, place)))
}

/// Every string-valued field of an object row.
fn string_fields(row: &serde_json::Value) -> BTreeMap<String, String> {
    row.as_object()
        .map(|o| o.iter().filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string()))).collect())
        .unwrap_or_default()
}

/// Loads the prompt set at `path` in `format`. An empty set is an error.
pub fn load(format: PromptFormat, path: &Path) -> Result<Vec<PromptRecord>> {
    let resolved = specx_decoder::hub::resolve(path)?;
    let path = resolved.as_path();
    let rows = match format {
        PromptFormat::Alpaca => load_alpaca(path)?,
        PromptFormat::Gsm8k => load_lines(path, |row, place| {
            let q = field(row, "question", path, place)?;
            field(row, "answer", path, place)?;
            Ok((None, q.to_string(), Vec::new()))
        })?,
        PromptFormat::Humaneval => load_lines(path, |row, place| {
            let id = field(row, "task_id", path, place)?.to_string();
            Ok((Some(id), field(row, "prompt", path, place)?.to_string(), Vec::new()))
        })?,
        PromptFormat::Jsonl => load_lines(path, |row, place| generic_row(row, path, place))?,
    };
    if rows.is_empty() {
        bail!("{}: no prompts in this {format:?} file", path.display());
    }
    Ok(rows)
}

/// `{id, prompt}` or `{question_id, turns}`: (id, first turn, the turns after it).
fn generic_row(row: &serde_json::Value, path: &Path, place: &str) -> Result<Parsed> {
    let id = ["id", "question_id"].iter().find_map(|k| row.get(*k)).map(|v| match v {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    });
    if let Some(p) = row.get("prompt").and_then(|v| v.as_str()) {
        return Ok((id, p.to_string(), Vec::new()));
    }
    if let Some(turns) = row.get("turns").and_then(|t| t.as_array()).filter(|t| !t.is_empty()) {
        let mut texts = Vec::with_capacity(turns.len());
        for (i, t) in turns.iter().enumerate() {
            let text = t.as_str().with_context(|| format!("{}: turn {} is not a string", at(path, place), i + 1))?;
            texts.push(text.to_string());
        }
        let first = texts.remove(0);
        return Ok((id, first, texts));
    }
    bail!("{}: neither a string 'prompt' nor a non-empty 'turns' list", at(path, place))
}

/// A JSON-lines row as read: its id if the format has one, the prompt text, the turns after it.
type Parsed = (Option<String>, String, Vec<String>);

/// JSON-lines sets: `parse` gives each row as [`Parsed`]; rows without an id get `line-N`.
fn load_lines(path: &Path, parse: impl Fn(&serde_json::Value, &str) -> Result<Parsed>) -> Result<Vec<PromptRecord>> {
    let mut out = Vec::new();
    for (line, row) in read_jsonl(path)? {
        let place = format!("line {line}");
        let (id, text, follow_ups) = parse(&row, &place)?;
        let mut fields = string_fields(&row);
        fields.entry("prompt".into()).or_insert_with(|| text.clone());
        let record = PromptRecord::new(id.unwrap_or_else(|| format!("line-{line}")), text, fields);
        out.push(PromptRecord { follow_ups, ..record });
    }
    Ok(out)
}

/// Alpaca's JSON array. Ids are the row index (`alpaca-N`, 0-based), stable for a file.
fn load_alpaca(path: &Path) -> Result<Vec<PromptRecord>> {
    let mut text = String::new();
    open(path)?.read_to_string(&mut text).with_context(|| format!("{}: not UTF-8 text", path.display()))?;
    let rows: Vec<serde_json::Value> = serde_json::from_str(&text)
        .with_context(|| format!("{}: malformed Alpaca JSON (expected an array of objects)", path.display()))?;
    let mut out = Vec::with_capacity(rows.len());
    for (i, row) in rows.iter().enumerate() {
        let place = format!("row {i}");
        let instruction = field(row, "instruction", path, &place)?;
        let input = row.get("input").and_then(|v| v.as_str()).unwrap_or("");
        let mut fields = string_fields(row);
        fields.insert("input".into(), input.to_string());
        fields.insert(
            "input_line".into(),
            if input.trim().is_empty() { String::new() } else { format!("\nInput: {input}") },
        );
        out.push(PromptRecord::new(format!("alpaca-{i}"), instruction.to_string(), fields));
    }
    Ok(out)
}

/// Fills `{name}` placeholders from the record's fields; `{{` and `}}` are literal braces.
/// A placeholder the row lacks is an error naming it and what the row has.
pub fn apply_template(template: &str, record: &PromptRecord) -> Result<String> {
    let mut out = String::with_capacity(template.len() + record.text.len());
    let mut rest = template;
    while let Some(i) = rest.find(['{', '}']) {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        if tail.starts_with("{{") || tail.starts_with("}}") {
            out.push_str(&tail[..1]);
            rest = &tail[2..];
            continue;
        }
        if tail.starts_with('}') {
            bail!("template {template:?}: unmatched '}}' (write '}}}}' for a literal brace)");
        }
        let end = tail.find('}').with_context(|| format!("template {template:?}: unclosed '{{'"))?;
        let name = &tail[1..end];
        let value = record.fields.get(name).with_context(|| {
            format!(
                "template placeholder {{{name}}} is not a field of prompt {} (fields: {:?})",
                record.id,
                record.fields.keys().collect::<Vec<_>>()
            )
        })?;
        out.push_str(value);
        rest = &tail[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
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

    fn shared(rel: &str) -> std::path::PathBuf {
        manifest_dir().join("../../../shared/datasets").join(rel)
    }

    fn err(r: Result<Vec<PromptRecord>>) -> String {
        format!("{:#}", r.unwrap_err())
    }

    #[test]
    fn reads_humaneval_and_reports_bad_lines() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("he.jsonl");
        std::fs::write(&p, "{\"task_id\": \"HumanEval/0\", \"prompt\": \"def f():\\n\"}\n\n").unwrap();
        let rows = load(PromptFormat::Humaneval, &p).unwrap();
        assert_eq!((rows[0].id.as_str(), rows[0].text.as_str()), ("HumanEval/0", "def f():\n"));
        std::fs::write(&p, "{\"task_id\": \"a\", \"prompt\": \"x\"}\n{oops\n").unwrap();
        let e = err(load(PromptFormat::Humaneval, &p));
        assert!(e.contains("he.jsonl: line 2") && e.contains("malformed JSON"), "{e}");
        std::fs::write(&p, "{\"task_id\": \"a\"}\n").unwrap();
        assert!(err(load(PromptFormat::Humaneval, &p)).contains("line 1: missing string field 'prompt'"));
        std::fs::write(&p, "").unwrap();
        assert!(err(load(PromptFormat::Humaneval, &p)).contains("no prompts"));
    }

    #[test]
    fn reads_every_shared_set() {
        let he = load(PromptFormat::Humaneval, &shared("humaneval/HumanEval.jsonl.gz")).unwrap();
        assert_eq!((he.len(), he[0].id.as_str()), (164, "HumanEval/0"));
        let alpaca = load(PromptFormat::Alpaca, &shared("alpaca/alpaca_5000.json")).unwrap();
        assert_eq!(alpaca.len(), 5000);
        let with_input = alpaca.iter().find(|r| !r.fields["input"].is_empty()).unwrap();
        let text = apply_template(PromptFormat::Alpaca.default_template(), with_input).unwrap();
        assert_eq!(text, format!("{}\nInput: {}", with_input.text, with_input.fields["input"]));
        let without = alpaca.iter().find(|r| r.fields["input"].is_empty()).unwrap();
        assert_eq!(apply_template(PromptFormat::Alpaca.default_template(), without).unwrap(), without.text);
        let gsm = load(PromptFormat::Gsm8k, &shared("gsm8k/test.jsonl")).unwrap();
        assert_eq!((gsm.len(), gsm[0].id.as_str()), (1319, "line-1"));
        assert!(apply_template(PromptFormat::Gsm8k.default_template(), &gsm[0]).unwrap().ends_with(&gsm[0].text));
        assert_eq!(load(PromptFormat::Gsm8k, &shared("gsm8k/train.jsonl")).unwrap().len(), 7473);
    }

    #[test]
    fn generic_jsonl_takes_prompt_or_turns() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("g.jsonl");
        std::fs::write(
            &p,
            "{\"id\": \"a\", \"prompt\": \"hello\"}\n{\"question_id\": 81, \"turns\": [\"first\", \"second\"]}\n",
        )
        .unwrap();
        let rows = load(PromptFormat::Jsonl, &p).unwrap();
        assert_eq!((rows[0].id.as_str(), rows[0].text.as_str()), ("a", "hello"));
        assert_eq!((rows[1].id.as_str(), rows[1].text.as_str()), ("81", "first"));
        assert_eq!((rows[0].follow_ups.len(), rows[1].follow_ups.as_slice()), (0, &["second".to_string()][..]));
        std::fs::write(&p, "{\"id\": 1, \"turns\": []}\n").unwrap();
        assert!(err(load(PromptFormat::Jsonl, &p)).contains("line 1: neither"));
        std::fs::write(&p, "{\"id\": 1, \"turns\": [\"a\", 2]}\n").unwrap();
        assert!(err(load(PromptFormat::Jsonl, &p)).contains("line 1: turn 2 is not a string"));
    }

    #[test]
    fn malformed_alpaca_and_templates_are_explained() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.json");
        std::fs::write(&p, "[{\"instruction\": \"x\"}, {\"input\": \"y\"}]").unwrap();
        assert!(err(load(PromptFormat::Alpaca, &p)).contains("row 1: missing string field 'instruction'"));
        std::fs::write(&p, "[{\"instruction\": \"x\"},").unwrap();
        assert!(err(load(PromptFormat::Alpaca, &p)).contains("malformed Alpaca JSON"));
        std::fs::write(&p, "[]").unwrap();
        assert!(err(load(PromptFormat::Alpaca, &p)).contains("no prompts"));
        std::fs::write(&p, "[{\"instruction\": \"x\"}]").unwrap();
        let r = &load(PromptFormat::Alpaca, &p).unwrap()[0];
        assert_eq!(apply_template("Q: {instruction} {{literal}}", r).unwrap(), "Q: x {literal}");
        let e = format!("{:#}", apply_template("{question}", r).unwrap_err());
        assert!(e.contains("{question}") && e.contains("instruction"), "{e}");
        assert!(apply_template("{instruction", r).is_err());
    }
}
