//! `specx bench` stores the target's cost of a verification row for this machine, and
//! `specx decode --policy tree-price` prices its trees with it when no `--row-cost` is given:
//! with the figure of the same target, device and weights only, else the default, saying which.

mod common;
use common::s;
use specx_decoder::synthetic::write_tiny_char_pair;
use specx_eval::common::row_cost::read_store;
use std::path::Path;
use std::process::{Command, Output};

/// `specx ARGS` with the row-cost store in `machine`.
fn specx(machine: &Path, args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_specx")).env("SPECX_MACHINE", machine).args(args).output().unwrap();
    assert!(out.status.success(), "specx {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
    out
}

/// The decode table's `tree-price row cost` line.
fn row_cost_line(out: &Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr);
    err.lines().find(|l| l.contains("tree-price row cost")).unwrap_or_else(|| panic!("no row-cost line: {err}")).into()
}

#[test]
fn bench_stores_the_row_cost_that_tree_price_decoding_uses() {
    let tmp = tempfile::tempdir().unwrap();
    let (draft, target) = write_tiny_char_pair(tmp.path(), 7, 0.35).unwrap();
    let (d, t) = (s(&draft), s(&target));
    let machine = tmp.path().join("machine");
    let decode = |extra: &[&str]| {
        let base = ["decode", "--draft", &d, "--target", &t, "--weights", "f32", "--drafter", "suffix"];
        let prompt = ["--policy", "tree-price", "--prompt", "abcabcabc", "--max-new-tokens", "8"];
        specx(&machine, &[&base[..], &prompt, extra].concat())
    };

    let before = row_cost_line(&decode(&[]));
    assert!(before.contains("0.11 (the default") && before.contains("specx bench"), "{before}");

    let bench = ["bench", "--draft", &d, "--target", &t, "--weights", "f32", "--call-rows", "1,3,9"];
    let out = specx(
        &machine,
        &[&bench[..], &["--prompt-tokens", "16", "--decode-tokens", "4", "--bandwidth-mib", "16"]].concat(),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("row cost") && stdout.contains("stored in"), "{stdout}");
    let store = read_store(&machine.join("row-costs.json")).unwrap();
    assert_eq!(store.len(), 1, "one figure: the target's on the CPU with f32 weights");
    let stored = &store[0];
    assert_eq!((stored.key.device.as_str(), stored.key.weights.as_str()), ("cpu", "f32"));
    assert_eq!(stored.key.target, "target");
    assert!(stored.row_cost.is_finite() && stored.row_cost >= 0.0);

    let after = row_cost_line(&decode(&[]));
    assert!(after.contains(&format!("{:.3} (this machine's", stored.row_cost)), "{after}");
    let given = row_cost_line(&decode(&["--row-cost", "0.3"]));
    assert!(given.contains("0.3 (--row-cost)"), "{given}");
    // Another weight path of the same target has no figure of its own.
    let base = ["decode", "--draft", &d, "--target", &t, "--weights", "native", "--drafter", "suffix"];
    let other =
        specx(&machine, &[&base[..], &["--policy", "tree-price", "--prompt", "abc", "--max-new-tokens", "4"]].concat());
    assert!(row_cost_line(&other).contains("the default"), "{}", row_cost_line(&other));
}
