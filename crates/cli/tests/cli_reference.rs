//! docs/reference/cli.md is `specx cli-reference`'s output: this fails when a command or
//! option changed and the page was not regenerated.

use std::path::Path;
use std::process::Command;

#[test]
fn the_cli_reference_page_matches_the_binary() {
    let out =
        Command::new(env!("CARGO_BIN_EXE_specx")).arg("cli-reference").output().expect("running specx cli-reference");
    assert!(out.status.success(), "specx cli-reference failed: {}", String::from_utf8_lossy(&out.stderr));
    let generated = String::from_utf8(out.stdout).expect("utf-8");
    let page = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/reference/cli.md");
    let committed = std::fs::read_to_string(&page).unwrap_or_default();
    if generated != committed {
        let line = generated
            .lines()
            .zip(committed.lines())
            .position(|(a, b)| a != b)
            .map_or(generated.lines().count().min(committed.lines().count()), |i| i);
        panic!(
            "{} is stale (first difference at line {}): regenerate it with `specx cli-reference > docs/reference/cli.md`\n  binary:    {:?}\n  committed: {:?}",
            page.display(),
            line + 1,
            generated.lines().nth(line).unwrap_or("<end>"),
            committed.lines().nth(line).unwrap_or("<end>")
        );
    }
    // Every subcommand of the binary is on the page.
    for cmd in [
        "generate",
        "decode",
        "eval",
        "eval replay",
        "datagen",
        "train",
        "reproduce specdecpp",
        "easyspec similarity",
        "dsi online",
    ] {
        assert!(generated.contains(&format!("\n## specx {cmd}\n")), "no section for specx {cmd}");
    }
}
