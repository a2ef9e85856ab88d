//! `configs/eval/smoke.toml` on the real Qwen pair (fetched by scripts/fetch-models.sh, prompt
//! sets by scripts/fetch-datasets.sh), run by the `specx` binary as `scripts/run.sh` runs it,
//! with 1 prompt per set (`--limit 1`) and 16 new tokens to stay within CI time (the full config
//! takes 6-15 minutes on a 2-core machine), with the acceptance head that ships in
//! `checkpoints/specdecpp-default`, and one more optional prompt set whose file is missing.
//!
//! Checks the run (rows of every set, sampling setting and method; audit passed; plots written),
//! that replaying the greedy units gives exactly the counts of the real runs, and that the
//! quick start's output shown in README.md and docs/getting-started.md still looks like what
//! the code prints: every shown line has the shape of a printed line (see [`shape`]), and the
//! lines of `scripts/run.sh` itself are among the ones it prints.

mod common;
use common::*;
use specx_eval::experiment::replay_run::{ReplayConfig, replay};
use specx_run::RunManifest;
use std::path::{Path, PathBuf};

/// The smoke config as shipped, with the shipped `head` given as an absolute path, its run
/// directory in `out`, 16 new tokens, and an optional prompt set whose file does not exist in
/// the dataset cache (so that the run prints the line a machine without Alpaca or GSM8K prints).
fn smoke_config(out: &Path, head: &Path) -> PathBuf {
    let text = std::fs::read_to_string(repo().join("configs/eval/smoke.toml")).unwrap();
    let edits = [
        ("\"../../checkpoints/specdecpp-default\"", format!("{:?}", s(head))),
        ("dir = \"../../runs/eval-smoke\"", format!("dir = {:?}", s(&out.join("eval")))),
        ("max_new_tokens = 128", "max_new_tokens = 16".to_string()),
    ];
    let mut text = text;
    for (from, to) in edits {
        assert!(text.contains(from), "configs/eval/smoke.toml no longer has {from}");
        text = text.replace(from, &to);
    }
    text.push_str("\n[[prompts]]\nname = \"missing\"\nformat = \"alpaca\"\npath = \"$SPECX_DATASETS/specx-test-missing/alpaca_5000.json\"\noptional = true\n");
    let path = out.join("smoke.toml");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn smoke_config_on_the_real_pair() {
    let models = specx_decoder::loader::model_cache_dir();
    assert!(
        models.join("qwen2.5-coder-1.5b-instruct/model.gguf").is_file(),
        "the real pair is missing: run scripts/fetch-models.sh"
    );
    let tmp = tempfile::tempdir().unwrap();
    let head = repo().join("checkpoints/specdecpp-default").canonicalize().unwrap();
    let config = smoke_config(tmp.path(), &head);
    let (ok, stdout, stderr) = run_specx(&["eval", "--config", &s(&config), "--limit", "1", "--no-progress"]);
    assert!(ok, "specx eval failed:\n{stderr}");
    let run = tmp.path().join("eval");
    let manifest = specx_eval::experiment::manifest::EvalManifest::read(&run).unwrap();
    assert!(manifest.complete);
    // 3 sets x 1 prompt x 2 sampling settings x 6 settings (AR, fixed K, head, confidence,
    // lookup, suffix trees).
    assert_eq!(untimed_rows(&run).len(), 3 * 2 * 6);
    let summary = std::fs::read_to_string(run.join("summary.md")).unwrap();
    for needle in [
        "Losslessness audit: passed",
        "## alpaca, greedy",
        "## gsm8k, qwen-t0.7",
        "## humaneval, greedy",
        "specdecpp specdecpp-default h=0.7 [2,20]",
        "confidence 0.5 [2,20]",
        r"lookup n=2..4 \| matchrate 0.2 [1,16]",
        r"suffix a=2 p>=0.1 cached=16 \| specdec K=24",
        "Timing model",
        "## Fastest setting per prompt set",
        "- humaneval, greedy: ",
    ] {
        assert!(summary.contains(needle), "summary.md lacks '{needle}':\n{summary}");
    }
    for set in ["alpaca", "gsm8k", "humaneval"] {
        for sampling in ["greedy", "qwen-t0.7"] {
            assert!(run.join(format!("plots/frontier_{set}_{sampling}.png")).is_file());
        }
    }
    eprintln!("{stderr}{stdout}");

    // The quick start's shown output against what was printed.
    let printed: Vec<String> = stderr.lines().chain(stdout.lines()).map(shape).collect();
    let steps = run_sh_lines();
    for page in ["README.md", "docs/getting-started.md"] {
        let shown = shown_output(&repo().join(page));
        let mut unmatched = Vec::new();
        for line in shown.iter().filter(|l| l.trim() != "...") {
            let found = if line.starts_with("==> ") || line.starts_with("run.sh: ") {
                steps.iter().any(|t| glob(t, line))
            } else {
                printed.iter().any(|p| same_shape(&shape(line), p))
            };
            if !found {
                unmatched.push(line.clone());
            }
        }
        assert!(
            unmatched.is_empty(),
            "{page}: the quick start's output shows lines that neither specx eval nor scripts/run.sh prints any more (update it from a run of scripts/run.sh):\n{}",
            unmatched.join("\n")
        );
    }

    // Replayed counts equal real counts for every setting that ran for real, on the real pair.
    let grid = tmp.path().join("grid.toml");
    std::fs::write(&grid, format!("[methods]\nspecdec = {{ k = [1, 2, 3, 4, 6] }}\nspecdecpp = {{ heads = [{:?}], thresholds = [0.3, 0.7], bounds = [[2, 20]] }}\nconfidence = {{ thresholds = [0.5] }}\n", s(&head))).unwrap();
    let r = replay(&run, &ReplayConfig::load(&grid).unwrap(), "grid", false).unwrap();
    assert!(r.mismatches.is_empty(), "{:#?}", r.mismatches);
    // Per set's greedy unit: fixed K = 4, the head at 0.7 and confidence 0.5.
    assert_eq!(r.compared, 3 * 3);
}

/// The lines of the ```text block that follows the page's `<!-- run.sh output` marker.
fn shown_output(page: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(page).unwrap();
    let at = text.find("<!-- run.sh output").unwrap_or_else(|| {
        panic!("{}: no '<!-- run.sh output' marker before the quick start's output", page.display())
    });
    let block = text[at..].split_once("```text\n").unwrap().1.split_once("```").unwrap().0;
    block.lines().map(str::to_string).collect()
}

/// What `scripts/run.sh` prints of its own, as patterns with `*` where the shell fills in a
/// value: its step headers (`==> [Ns] TEXT`) and its `run.sh: ...` lines.
fn run_sh_lines() -> Vec<String> {
    let script = std::fs::read_to_string(repo().join("scripts/run.sh")).unwrap();
    let mut out = Vec::new();
    for line in script.lines().map(str::trim) {
        if let Some(text) = line.strip_prefix("step \"").and_then(|l| l.strip_suffix('"')) {
            out.push(format!("==> [*s] {text}"));
        } else if let Some(text) = line.strip_prefix("echo \"run.sh: ").and_then(|l| l.strip_suffix('"')) {
            out.push(format!("run.sh: {}", shell_pattern(text)));
        }
    }
    assert!(out.len() >= 5, "scripts/run.sh: too few steps and messages found: {out:?}");
    out
}

/// A double-quoted shell string as a pattern: each `$(...)`, `${...}` and `$name` becomes `*`,
/// escaped characters stand for themselves.
fn shell_pattern(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let (mut out, mut i) = (String::new(), 0);
    while i < chars.len() {
        match chars[i] {
            '\\' if i + 1 < chars.len() => {
                out.push(chars[i + 1]);
                i += 2;
            }
            '$' if i + 1 < chars.len() && (chars[i + 1] == '(' || chars[i + 1] == '{') => {
                let (open, close) = if chars[i + 1] == '(' { ('(', ')') } else { ('{', '}') };
                let mut depth = 0;
                while i < chars.len() {
                    depth += (chars[i] == open) as i32 - (chars[i] == close) as i32;
                    i += 1;
                    if depth == 0 && chars[i - 1] == close {
                        break;
                    }
                }
                out.push('*');
            }
            '$' => {
                i += 1;
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
                out.push('*');
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

/// Whether `line` matches `pattern`, whose `*` stands for any text.
fn glob(pattern: &str, line: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if parts.len() == 1 {
        return line == pattern;
    }
    if !line.starts_with(first) || !line.ends_with(last) || line.len() < first.len() + last.len() {
        return false;
    }
    let mut rest = &line[first.len()..line.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part) {
            Some(i) => rest = &rest[i + part.len()..],
            None => return false,
        }
    }
    true
}

/// Whether a shown line's shape is a printed line's: equal, or a prefix where the page cut the
/// line short with `...`.
fn same_shape(shown: &str, printed: &str) -> bool {
    match shown.strip_suffix("...") {
        Some(prefix) => printed.starts_with(prefix.trim_end()),
        None => shown == printed,
    }
}

/// A line as its form, without what differs from run to run and machine to machine: numbers
/// become `#`, paths (words with a `/`) `PATH`, quoted names `'*'`; the fastest setting a
/// progress line names and the machine a summary names become `*`; runs of spaces and of
/// table dashes count as one.
fn shape(line: &str) -> String {
    let mut line = line.trim().to_string();
    if let (Some(i), Some(j)) = (line.find(", best "), line.rfind(' '))
        && j > i + 6
    {
        line = format!("{}, best *{}", &line[..i], &line[j..]);
    }
    // A summary's last lines: which setting was fastest, and whether any beat AR, vary by run.
    for verdict in [": fastest: ", ": no setting beat AR; the closest: "] {
        if let (Some(i), Some(j)) = (line.find(verdict), line.rfind(" at "))
            && j > i
        {
            line = format!("{}: *{}", &line[..i], &line[j..]);
            break;
        }
    }
    if let Some(i) = line.find("machine: ") {
        let end = line[i..].find(" (").map_or(line.len(), |j| i + j);
        line = format!("{}machine: *{}", &line[..i], &line[end..]);
    }
    let mut quoted = String::new();
    let mut inside = false;
    for c in line.chars() {
        if c == '\'' {
            if !inside {
                quoted.push_str("'*");
            } else {
                quoted.push('\'');
            }
            inside = !inside;
        } else if !inside {
            quoted.push(c);
        }
    }
    let words: Vec<String> =
        quoted.split_whitespace().map(|w| if w.contains('/') { "PATH".to_string() } else { w.to_string() }).collect();
    let mut out = String::new();
    let chars: Vec<char> = words.join(" ").chars().collect();
    let mut i = 0;
    while i < chars.len() {
        if chars[i].is_ascii_digit() {
            while i < chars.len()
                && (chars[i].is_ascii_digit()
                    || (chars[i] == '.' && i + 1 < chars.len() && chars[i + 1].is_ascii_digit()))
            {
                i += 1;
            }
            out.push('#');
            continue;
        }
        if chars[i] == '-' && out.ends_with('-') {
            i += 1;
            continue;
        }
        out.push(chars[i]);
        i += 1;
    }
    out
}

#[test]
fn the_shape_of_a_line_drops_what_varies_between_runs() {
    let a = shape(
        "[1/6] humaneval HumanEval/47 greedy s0: AR 32 tokens in 8.7 s, best specdecpp specdecpp-default h=0.7 [2,20] 1.18x",
    );
    let b = shape("[3/7] humaneval HumanEval/105 greedy s0: AR 16 tokens in 12.0 s, best specdec K=4 0.91x");
    assert_eq!(a, b);
    assert_ne!(a, shape("[1/6] humaneval HumanEval/47 greedy s0: AR 32 tokens in 8.7 s"));
    assert_eq!(shape("| ar    | 3 | 2.98 ± 0.76 |"), shape("| ar | 12 | 10.1 ± 1.5 |"));
    assert_eq!(shape("|-----|---|"), shape("|--|-------|"));
    assert_eq!(
        shape(
            "- gsm8k, greedy: fastest: lookup n=2..4 | matchrate 0.2 [1,16] at 1.04x AR (mean over 3 prompts, 0.96-1.11)"
        ),
        shape(
            "- gsm8k, greedy: no setting beat AR; the closest: specdec K=4 at 0.97x AR (mean over 1 prompts, 0.97-0.97)"
        )
    );
    assert_ne!(
        shape("- gsm8k, greedy: fastest: specdec K=4 at 1.04x AR (mean over 3 prompts, 0.96-1.11)"),
        shape("- alpaca, greedy: fastest: specdec K=4 at 1.04x AR (mean over 3 prompts, 0.96-1.11)")
    );
    assert_eq!(
        shape("eval: optional prompt set 'alpaca' skipped: /x/alpaca.json does not exist"),
        shape("eval: optional prompt set 'missing' skipped: ~/y/z.json does not exist")
    );
    assert!(same_shape(&shape("| setting | prompts | ..."), &shape("| setting | prompts | tokens/s |")));
    assert!(!same_shape(&shape("| setting | tokens | ..."), &shape("| setting | prompts | tokens/s |")));
    assert_eq!(
        shell_pattern(r#"done in $(( ($(date +%s) - start) / 60 )) min; specx is installed as $specx"#),
        "done in * min; specx is installed as *"
    );
    assert!(glob("run.sh: done in * min; specx is *", "run.sh: done in 12 min; specx is /root/.cargo/bin/specx"));
    assert!(!glob("run.sh: done in * min", "run.sh: done in 12 s"));
}
