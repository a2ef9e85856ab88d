//! The documentation hangs together: every relative link in README.md and docs/ points at a
//! file that exists (anchors aside), and every page under docs/ can be reached from README.md
//! by following links, so no page is orphaned.

use std::collections::{BTreeSet, VecDeque};
use std::path::{Component, Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// `base/rel` with `.` and `..` folded, without touching the file system.
fn join(base: &Path, rel: &str) -> PathBuf {
    let mut out = PathBuf::new();
    for c in base.join(rel).components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// The targets of a Markdown file's inline links `[text](target)` and images, outside code.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_code = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        let mut rest = line;
        while let Some(i) = rest.find("](") {
            let after = &rest[i + 2..];
            let Some(j) = after.find(')') else { break };
            out.push(after[..j].to_string());
            rest = &after[j..];
        }
    }
    out
}

fn md_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            md_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "md") {
            out.push(p);
        }
    }
}

#[test]
fn every_docs_link_resolves_and_every_page_is_reachable_from_the_readme() {
    let root = root();
    let mut broken = Vec::new();
    let mut seen = BTreeSet::new();
    let mut queue = VecDeque::from([root.join("README.md")]);
    while let Some(page) = queue.pop_front() {
        if !seen.insert(page.clone()) {
            continue;
        }
        let text = std::fs::read_to_string(&page).unwrap();
        for target in links(&text) {
            if target.contains("://") || target.starts_with('#') || target.starts_with("mailto:") {
                continue;
            }
            let file = target.split('#').next().unwrap();
            let path = join(page.parent().unwrap(), file);
            if !path.exists() {
                broken.push(format!("{}: {target}", page.strip_prefix(&root).unwrap().display()));
            } else if path.extension().is_some_and(|x| x == "md") && path.starts_with(&root) {
                queue.push_back(path);
            }
        }
    }
    assert!(broken.is_empty(), "links to files that do not exist:\n{}", broken.join("\n"));
    let mut pages = Vec::new();
    md_files(&root.join("docs"), &mut pages);
    let orphans: Vec<String> = pages
        .iter()
        .filter(|p| !seen.contains(*p))
        .map(|p| p.strip_prefix(&root).unwrap().display().to_string())
        .collect();
    assert!(orphans.is_empty(), "pages under docs/ that no link from README.md reaches:\n{}", orphans.join("\n"));
}

#[test]
fn the_link_reader_finds_links_and_skips_code() {
    let text = "see [a](x.md) and ![b](img/y.png#z)\n```\n[c](not-a-link.md)\n```\n[d](../e.md#f)";
    assert_eq!(links(text), ["x.md", "img/y.png#z", "../e.md#f"]);
    assert_eq!(join(Path::new("/r/docs/guide"), "../reference/cli.md"), PathBuf::from("/r/docs/reference/cli.md"));
}
