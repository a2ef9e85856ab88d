//! `specx slurm` refuses what cannot run before anything is queued, naming the part at fault,
//! and the merges its job runs name the part that is missing or unfinished. Nothing here
//! reaches sbatch (the arrays themselves run on a real Slurm cluster in slurm_cluster.rs).

mod common;
use common::*;

#[test]
fn a_dry_run_prints_the_array_and_the_merge_with_the_resources_and_writes_nothing() {
    let t = tiny();
    let slurm = "[slurm]\nshards = 2\npartition = \"cpu\"\nmem = \"4G\"\nsetup = [\"module load specx-test\"]\n";
    let cfg = datagen_config(&t, "datagen.toml", 16, slurm);
    let out = t.root.join("run");
    let (cfg_arg, out_arg) = (s(&cfg), s(&out));
    let dry_run = |more: &[&str]| {
        let args = ["slurm", "datagen", "--config", &cfg_arg, "--out", &out_arg, "--dry-run"];
        run_specx(&[&args[..], more].concat())
    };
    let (ok, script, err) = dry_run(&["--gres", "gpu:1", "--", "--weights", "f32"]);
    assert!(ok, "{err}");
    for want in [
        "#SBATCH --array=0-1\n",
        "#SBATCH --partition=cpu\n",
        "#SBATCH --mem=4G\n",
        "#SBATCH --gres=gpu:1\n",
        "#SBATCH --requeue\n",
        "module load specx-test\n",
        "--shard \"$part/2\" --no-progress --weights f32 &\n",
        &format!("datagen merge --out {} {}/parts/0 {}/parts/1 &\n", s(&out), s(&out), s(&out)),
    ] {
        assert!(script.contains(want), "missing {want:?} in\n{script}");
    }
    assert!(script.contains("--dependency=afterok:") && script.contains("--kill-on-invalid-dep=yes"), "{script}");
    // The flag wins over [slurm].
    let (ok, script, err) = dry_run(&["--shards", "3", "--partition", "big"]);
    assert!(ok, "{err}");
    assert!(script.contains("#SBATCH --array=0-2\n") && script.contains("#SBATCH --partition=big\n"), "{script}");
    assert!(!out.exists(), "a dry run wrote into {}", out.display());
}

#[test]
fn parts_of_another_config_or_another_split_are_refused_by_name() {
    let t = tiny();
    let cfg = datagen_config(&t, "datagen.toml", 40, "");
    let out = t.root.join("run");
    let submit = |shards: &str| {
        run_specx(&["slurm", "datagen", "--config", &s(&cfg), "--out", &s(&out), "--shards", shards, "--dry-run"])
    };
    let (ok, _, err) = run_specx(&["slurm", "datagen", "--config", &s(&cfg), "--out", &s(&out), "--dry-run"]);
    assert!(!ok && err.contains("--shards"), "{err}");

    let part2 = out.join("parts/2");
    finish(
        &[
            "datagen",
            "--config",
            &s(&cfg),
            "--shard",
            "2/4",
            "--out",
            &s(&part2),
            "--max-new-tokens",
            "8",
            "--no-progress",
        ]
        .map(String::from),
    );
    let (ok, _, err) = submit("4");
    assert!(!ok && err.contains(&s(&part2)) && err.contains("max_new_tokens"), "{err}");

    std::fs::remove_dir_all(&part2).unwrap();
    let part1 = out.join("parts/1");
    finish(
        &["datagen", "--config", &s(&cfg), "--shard", "1/3", "--out", &s(&part1), "--no-progress"].map(String::from),
    );
    let (ok, _, err) = submit("4");
    assert!(!ok && err.contains(&s(&part1)) && err.contains("part 1 of 3"), "{err}");
    let (ok, _, err) = submit("1");
    assert!(!ok && err.contains(&s(&part1)), "{err}");
    // With the split it was made with, the part is accepted and only the others would run.
    let (ok, script, err) = submit("3");
    assert!(ok, "{err}");
    assert!(script.contains("#SBATCH --array=0,2\n"), "{script}");
    // `[slurm]` is not part of a run's identity: the same config with resources accepts the part.
    let with_slurm = datagen_config(&t, "datagen-slurm.toml", 40, "[slurm]\nshards = 3\npartition = \"long\"\n");
    let (ok, script, err) =
        run_specx(&["slurm", "datagen", "--config", &s(&with_slurm), "--out", &s(&out), "--dry-run"]);
    assert!(ok, "{err}");
    assert!(script.contains("#SBATCH --array=0,2\n") && script.contains("#SBATCH --partition=long\n"), "{script}");
}

#[test]
fn merges_name_the_missing_or_unfinished_part() {
    let t = tiny();
    let cfg = datagen_config(&t, "datagen.toml", 40, "");
    let out = t.root.join("run");
    let parts: Vec<String> = (0..4).map(|i| s(&out.join(format!("parts/{i}")))).collect();
    for (i, p) in parts.iter().enumerate().take(3) {
        finish(
            &["datagen", "--config", &s(&cfg), "--shard", &format!("{i}/4"), "--out", p, "--no-progress"]
                .map(String::from),
        );
    }
    let merge = |parts: &[String]| {
        let mut args = vec!["datagen", "merge", "--out", "/nonexistent/merged"];
        args.extend(parts.iter().map(String::as_str));
        run_specx(&args)
    };
    let (ok, _, err) = merge(&parts);
    assert!(!ok && err.contains(&parts[3]), "a missing part: {err}");
    finish(
        &["datagen", "--config", &s(&cfg), "--shard", "3/4", "--out", &parts[3], "--max-shards", "1", "--no-progress"]
            .map(String::from),
    );
    let (ok, _, err) = merge(&parts);
    assert!(!ok && err.contains(&parts[3]) && err.contains("unfinished"), "a merge before its part finished: {err}");
    let (ok, _, err) = merge(&parts[..3]);
    assert!(!ok && err.contains("part 3 of 4"), "a part left out: {err}");

    let ecfg = eval_config(&t);
    let eparts = [s(&t.root.join("eval/parts/0")), s(&t.root.join("eval/parts/1"))];
    finish(&["eval", "--config", &s(&ecfg), "--shard", "0/2", "--out", &eparts[0], "--no-progress"].map(String::from));
    finish(
        &["eval", "--config", &s(&ecfg), "--shard", "1/2", "--out", &eparts[1], "--max-units", "1", "--no-progress"]
            .map(String::from),
    );
    let (ok, _, err) = run_specx(&["eval", "merge", "--out", &s(&t.root.join("eval/merged")), &eparts[0], &eparts[1]]);
    assert!(!ok && err.contains(&eparts[1]) && err.contains("incomplete"), "{err}");
}

#[test]
fn an_eval_run_with_more_parts_than_units_or_several_devices_is_refused() {
    let t = tiny();
    let cfg = eval_config(&t); // 3 prompts x (greedy + 2 seeds at T = 1): 9 units
    let (ok, _, err) = run_specx(&["slurm", "eval", "--config", &s(&cfg), "--shards", "10", "--dry-run"]);
    assert!(!ok && err.contains("at most 9"), "{err}");
    let (ok, script, err) = run_specx(&["slurm", "eval", "--config", &s(&cfg), "--shards", "9", "--dry-run"]);
    assert!(ok && script.contains("#SBATCH --array=0-8\n") && script.contains(" eval merge --out "), "{err}");
    let text =
        std::fs::read_to_string(&cfg).unwrap().replacen("[[prompts]]", "devices = [\"cpu\", \"cpu\"]\n[[prompts]]", 1);
    std::fs::write(&cfg, text).unwrap();
    let (ok, _, err) = run_specx(&["slurm", "eval", "--config", &s(&cfg), "--shards", "2", "--dry-run"]);
    assert!(!ok && err.contains("[models] devices"), "{err}");
}

#[test]
fn status_reads_only_a_run_that_specx_slurm_submitted() {
    let t = tiny();
    let (ok, _, err) = run_specx(&["slurm", "status", &s(&t.root)]);
    assert!(!ok && err.contains("jobs.json") && err.contains(&s(&t.root)), "{err}");
}

#[test]
fn the_paper_scale_config_is_the_committed_4000_prompt_one_at_40000_prompts_in_100_parts() {
    use specx_datagen::config::DatagenConfig;
    let configs = repo().join("configs");
    let big = DatagenConfig::load(&configs.join("datagen-qwen-alpaca-40000.toml")).unwrap();
    let mut small = DatagenConfig::load(&configs.join("datagen-qwen-alpaca-4000.toml")).unwrap();
    assert!(big.prompts.path.ends_with("alpaca/alpaca_data.json") && big.prompts.limit == Some(40000));
    assert_eq!(big.prompts.split_sizes.iter().sum::<usize>(), 52002, "the full Alpaca data has 52,002 rows");
    (small.prompts, small.output.dir, small.slurm) = (big.prompts.clone(), big.output.dir.clone(), big.slurm.clone());
    assert_eq!(small, big, "only the prompts, the output and [slurm] differ");
    let out = tempfile::tempdir().unwrap();
    let (ok, script, err) = run_specx(&[
        "slurm",
        "datagen",
        "--config",
        &s(&configs.join("datagen-qwen-alpaca-40000.toml")),
        "--out",
        &s(out.path()),
        "--dry-run",
    ]);
    assert!(ok, "{err}");
    assert!(script.contains("#SBATCH --array=0-99\n") && script.contains("--shard \"$part/100\""), "{script}");
}
