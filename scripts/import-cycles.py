#!/usr/bin/env python3
"""Import cycles between the modules of each crate: prints every cycle and exits 1 if any.

    python3 scripts/import-cycles.py [--graph]

A module is a source file (`a/mod.rs` is module `a`). An arrow A -> B means A names an item
of B: a `use crate::..`, `use super::..`, `use child::..` or an inline `crate::b::item` path, resolved to the
longest module prefix that exists. An arrow from a module to one of its ancestors is left out (a
child reading its parent's items is the tree itself, not a cycle; a parent's arrows to its
children, re-exports included, are kept), and so is code after `#[cfg(test)]`. Crates cannot import each other in a
circle (cargo refuses), so only the modules inside each crate are checked. `--graph` also
prints every arrow.
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
PATH = re.compile(r"\b(crate|super|self)((?:::\w+)+)")
USE = re.compile(r"\buse\s+([^;]+);", re.S)


def module_of(src: pathlib.Path, f: pathlib.Path) -> tuple:
    parts = list(f.relative_to(src).with_suffix("").parts)
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return tuple(parts)


def expand(tree: str) -> list:
    """`a::{b, c::{d, e}}` as ["a::b", "a::c::d", "a::c::e"] (globs and renames kept as names)."""
    tree = re.sub(r"\s+", "", tree)
    i = tree.find("{")
    if i < 0:
        return [tree]
    prefix, body = tree[:i], tree[i + 1 : tree.rfind("}")]
    items, depth, cur = [], 0, ""
    for ch in body:
        depth += ch == "{"
        depth -= ch == "}"
        if ch == "," and depth == 0:
            items.append(cur)
            cur = ""
        else:
            cur += ch
    items.append(cur)
    return [p for item in items if item for p in expand(prefix + item)]


def code_of(text: str) -> str:
    cut = re.search(r"^\s*#\[cfg\(test\)\]\s*\n\s*(pub(\(\w+\))?\s+)?mod\s", text, re.M)
    text = text[: cut.start()] if cut else text
    return "\n".join(line.split("//")[0] for line in text.splitlines())


def arrows(src: pathlib.Path) -> dict:
    files = {module_of(src, f): f for f in src.rglob("*.rs")}
    graph = {m: set() for m in files}
    for m, f in files.items():
        code = code_of(f.read_text())
        paths = [p for u in USE.findall(code) for p in expand(u)]
        paths += [a + b for a, b in PATH.findall(USE.sub("", code))]
        for p in paths:
            segs = [s for s in p.split("::") if s]
            if not segs:
                continue
            base = list(m)
            if segs[0] not in ("crate", "super", "self"):
                # A path from a child module (`use tiny::X` in the parent), else an external crate.
                if m + (segs[0],) not in files:
                    continue
            elif segs[0] == "crate":
                base, segs = [], segs[1:]
            else:
                while segs and segs[0] in ("super", "self"):
                    if segs.pop(0) == "super":
                        base = base[:-1]
            target = tuple(base + segs)
            while target and target not in files:
                target = target[:-1]
            # Unresolved, or the module itself or one of its ancestors.
            if target not in files or m[: len(target)] == target:
                continue
            graph[m].add(target)
    return graph


def cycles(graph: dict) -> list:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main() -> int:
    show = "--graph" in sys.argv[1:]
    found = 0
    for src in sorted(ROOT.glob("crates/*/src")):
        crate = src.parent.name
        graph = arrows(src)
        name = lambda m: "::".join((crate,) + m)
        if show:
            for m in sorted(graph):
                for t in sorted(graph[m]):
                    print(f"{name(m)} -> {name(t)}")
        circles = cycles(graph)
        found += len(circles)
        for comp in circles:
            print(f"cycle in {crate}: " + ", ".join(name(m) for m in comp))
            for m in comp:
                for t in sorted(graph[m] & set(comp)):
                    print(f"  {name(m)} -> {name(t)}")
        print(f"{crate}: {len(graph)} modules, {sum(map(len, graph.values()))} arrows, {len(circles)} cycles")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
