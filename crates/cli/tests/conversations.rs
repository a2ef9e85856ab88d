//! Multi-turn prompts and the Spec-Bench export, as a user runs them: `specx eval` over the
//! committed two-turn conversations (Spec-Bench's question format) runs both turns of each in
//! AR and every method, greedy outputs identical turn by turn, turn 2's prompt being turn 1's,
//! the setting's own answer and the second question; `specx eval export --format spec-bench`
//! writes one answer file per setting with Spec-Bench's fields, its counts the rows' own.

mod common;
use common::{repo, s};
use specx_decoder::speculative::{SpecConfig, generate_autoregressive};
use specx_decoder::synthetic::write_tiny_char_pair;
use specx_eval::common::results::UnitFile;
use std::process::Command;

fn specx(args: &[&str]) -> std::process::Output {
    let out = Command::new(env!("CARGO_BIN_EXE_specx")).args(args).output().unwrap();
    assert!(out.status.success(), "specx {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
    out
}

#[test]
fn conversations_run_every_turn_and_export_to_spec_bench() {
    let tmp = tempfile::tempdir().unwrap();
    let (draft, target) = write_tiny_char_pair(tmp.path(), 7, 0.35).unwrap();
    let questions = repo().join("datasets/conversations/two-turn.jsonl");
    let dir = tmp.path().join("run");
    let config = tmp.path().join("conversations.toml");
    let text = format!(
        r#"seeds = [0, 1]
[models]
draft = {:?}
target = {:?}
weights = "f32"
[[prompts]]
name = "two-turn"
format = "jsonl"
path = {:?}
chat_template = "chatml"
[[sampling]]
name = "greedy"
[[sampling]]
name = "t1"
temperature = 1.0
[budget]
max_new_tokens = 10
[methods]
specdec = {{ k = [3] }}
[[methods.grid]]
drafters.suffix = {{ alphas = [2.0] }}
policies.fixed = {{ k = [8] }}
[output]
dir = {:?}
"#,
        s(&draft),
        s(&target),
        s(&questions),
        s(&dir)
    );
    std::fs::write(&config, text).unwrap();
    let out = specx(&["eval", "--config", &s(&config), "--limit", "3", "--no-progress"]);
    let summary = String::from_utf8_lossy(&out.stdout);
    assert!(summary.contains("Losslessness audit: passed"), "{summary}");

    // Every row has both turns; greedy rows give AR's answers turn by turn.
    let lm =
        specx_decoder::load_model_as(&target, None, &specx_decoder::default_device(), specx_decoder::WeightMode::F32)
            .unwrap();
    let follow_up = |id: &str| {
        let text = std::fs::read_to_string(&questions).unwrap();
        let v: serde_json::Value = text
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .find(|v| v["question_id"].as_u64() == id.parse().ok())
            .unwrap();
        specx_decoder::ChatTemplate::ChatMl { system: None }.next_turn(v["turns"][1].as_str().unwrap()).unwrap()
    };
    let units: Vec<UnitFile> = specx_eval::experiment::merge::unit_files(&dir)
        .unwrap()
        .iter()
        .map(|f| UnitFile::read_path(f).unwrap())
        .collect();
    assert_eq!(units.len(), 3 * 3, "3 conversations x (greedy + 2 sampled seeds)");
    for u in &units {
        assert!(u.is_conversation());
        let ar = &u.rows[0];
        for r in &u.rows {
            assert_eq!(r.turns.len(), 2, "{} {}", u.unit.prompt_id, r.setting.key());
            assert_eq!(r.n_generated, r.turns.iter().map(|t| t.n_generated).sum::<usize>());
            assert_eq!(r.accepted_per_round.len(), r.turns.iter().map(|t| t.rounds).sum::<usize>());
            if r.greedy() {
                assert!(r.identical_to_ar, "{} {}", u.unit.prompt_id, r.setting.key());
                let turns = |r: &specx_eval::common::results::ResultRow| {
                    r.turns.iter().map(|t| (t.prompt_tokens, t.tokens.clone())).collect::<Vec<_>>()
                };
                assert_eq!(turns(r), turns(ar), "{} {}: turn by turn", u.unit.prompt_id, r.setting.key());
            }
        }
        // Turn 2's prompt is turn 1's, AR's answer (its EOS left out) and the next question;
        // AR's turn-2 answer is the target's own greedy continuation of it.
        let first = &ar.turns[0];
        let answer = match first.tokens.split_last() {
            Some((last, rest)) if lm.eos_ids.contains(last) => rest,
            _ => &first.tokens[..],
        };
        let mut prompt = u.prompt.clone();
        prompt.extend_from_slice(answer);
        prompt.extend(lm.tokenizer.encode(&follow_up(&u.unit.prompt_id)).unwrap());
        assert_eq!(ar.turns[1].prompt_tokens, prompt.len());
        if ar.greedy() {
            let spec = SpecConfig {
                max_new_tokens: ar.turns[1].max_new_tokens,
                sampling: specx_decoder::SamplingConfig::greedy(),
                seed: 0,
            };
            let again = generate_autoregressive(&lm.model, &prompt, &spec, &lm.eos_ids).unwrap().tokens;
            assert_eq!(again, ar.turns[1].tokens, "{}: turn 2", u.unit.prompt_id);
        }
    }

    // The export: one file per sampling x setting, a line per question, seeds as choices.
    let export = tmp.path().join("spec-bench");
    specx(&["eval", "export", &s(&dir), "--format", "spec-bench", "--out", &s(&export)]);
    let mut names: Vec<String> =
        std::fs::read_dir(&export).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "greedy-ar.jsonl",
            "greedy-specdec_K_3.jsonl",
            "greedy-suffix_a_2_p_0.1_specdec_K_8.jsonl",
            "t1-ar.jsonl",
            "t1-specdec_K_3.jsonl",
            "t1-suffix_a_2_p_0.1_specdec_K_8.jsonl"
        ]
    );
    let lines = |name: &str| -> Vec<serde_json::Value> {
        std::fs::read_to_string(export.join(name)).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    };
    let ar = lines("greedy-ar.jsonl");
    assert_eq!(ar.len(), 3);
    assert_eq!((ar[0]["question_id"].as_u64(), ar[0]["category"].as_str()), (Some(1), Some("writing")));
    let unit = units.iter().find(|u| u.unit.prompt_id == "1" && u.unit.sampling == "greedy").unwrap();
    let choice = &ar[0]["choices"][0];
    let turns: Vec<String> = unit.rows[0].turns.iter().map(|t| lm.tokenizer.decode(&t.tokens).unwrap()).collect();
    assert_eq!(choice["turns"], serde_json::json!(turns));
    let new_tokens: Vec<usize> = unit.rows[0].turns.iter().map(|t| t.n_generated).collect();
    assert_eq!(choice["new_tokens"], serde_json::json!(new_tokens));
    assert_eq!(choice["accept_lengths"].as_array().unwrap().len(), new_tokens.iter().sum::<usize>(), "AR: 1 a step");
    let spec = lines("greedy-specdec_K_3.jsonl");
    let row = &unit.rows[1];
    let lengths: Vec<usize> = row.accepted_per_round.iter().map(|a| a + 1).collect();
    assert_eq!(spec[0]["choices"][0]["accept_lengths"], serde_json::json!(lengths));
    assert_eq!(spec[0]["choices"][0]["turns"], serde_json::json!(turns), "greedy answers are AR's");
    let steps: Vec<usize> = row.turns.iter().map(|t| t.n_target_calls).collect();
    assert_eq!(spec[0]["choices"][0]["decoding_steps"], serde_json::json!(steps));
    let sampled = lines("t1-specdec_K_3.jsonl");
    assert_eq!(sampled[0]["choices"].as_array().unwrap().len(), 2, "two seeds, two choices");
    assert_eq!(sampled[0]["choices"][1]["index"], 1);
}
