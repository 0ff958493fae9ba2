#!/usr/bin/env python3
"""Fails if the library's modules import each other in a circle.

Each top-level module of src/ is a node, whether it is one file
(`src/x.rs`), a file with its folder (`src/x.rs` and `src/x/`), or a folder
(`src/x/mod.rs`); and each store under the seam (`src/store/<name>/` or
`src/store/<name>.rs`) is a node of its own, `store::<name>`, apart from
the seam itself (`store`, `src/store/mod.rs`). A `crate::y` path in a
node's code outside its `#[cfg(test)]` items (and outside the files of
modules declared `#[cfg(test)] mod x;`) is an edge to `y` (or to
`store::<name>` for `crate::store::<name>`). Any strongly connected
component with more than one node is printed and makes the exit status 1.
Docs (`//` lines) do not count: an intra-doc link is not an import.

With `--whole-folders`, every top-level folder is one node, the stores
inside the seam's: a store importing anything that imports the seam is
then a circle too. scripts/test.sh runs both.

Usage: scripts/module_cycles.py [--whole-folders] [SRC_DIR]
"""
import pathlib
import re
import sys

if any(a.startswith("-") and a != "--whole-folders" for a in sys.argv[1:]):
    print(__doc__.strip().splitlines()[-1], file=sys.stderr)
    sys.exit(0 if sys.argv[1:] in (["-h"], ["--help"]) else 2)
ARGS = [a for a in sys.argv[1:] if a != "--whole-folders"]
WHOLE_FOLDERS = "--whole-folders" in sys.argv[1:]
SRC = pathlib.Path(ARGS[0] if ARGS else "src")
PATH = re.compile(r"\bcrate::(\{[^}]*\}|\w+)")
# `#[cfg(test)]` and `#[cfg(all(test, …))]`: code only tests compile.
TEST_CFG = re.compile(r"#\[cfg\((?:all\()?test\b[^\]]*\]")


def strip_tests(text: str) -> str:
    """Drops every `#[cfg(test)]` item (a `mod … { … }` block or one line)."""
    out, i = [], 0
    while True:
        j = TEST_CFG.search(text, i)
        j = j.start() if j else -1
        if j < 0:
            out.append(text[i:])
            return "".join(out)
        out.append(text[i:j])
        k = text.find("{", j)
        semi = text.find(";", j)
        if semi >= 0 and (k < 0 or semi < k):
            i = semi + 1
            continue
        depth = 0
        for m in range(k, len(text)):
            if text[m] == "{":
                depth += 1
            elif text[m] == "}":
                depth -= 1
                if depth == 0:
                    i = m + 1
                    break
        else:
            return "".join(out)


TEST_MOD = re.compile(r"#\[cfg\((?:all\()?test\b[^\]]*\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;")


def test_only_files() -> set:
    """Files of modules declared `#[cfg(test)] mod x;`: a module's unit
    tests kept in a file of their own (and everything under them)."""
    out = set()
    for f in SRC.rglob("*.rs"):
        base = f.parent if f.name in ("mod.rs", "lib.rs", "main.rs") else f.parent / f.stem
        for name in TEST_MOD.findall(f.read_text()):
            out.add(base / f"{name}.rs")
            out.update((base / name).rglob("*.rs"))
    return out


def code(text: str) -> str:
    return "\n".join(l for l in text.splitlines() if not l.lstrip().startswith("//"))


def modules():
    """(node, files) for every node, in a stable order."""
    tops = {f.stem for f in SRC.glob("*.rs")} | {d.name for d in SRC.iterdir() if (d / "mod.rs").exists()}
    tops -= {"lib", "main"}
    stores = SRC / "store"
    store_names = sorted(
        {d.name for d in stores.iterdir() if d.is_dir()} | {f.stem for f in stores.glob("*.rs")} - {"mod"}
    ) if stores.is_dir() and not WHOLE_FOLDERS else []
    for name in sorted(tops):
        files = [f for f in [SRC / f"{name}.rs"] if f.exists()]
        folder = SRC / name
        if folder.is_dir():
            for f in sorted(folder.rglob("*.rs")):
                if name == "store" and f.relative_to(folder).parts[0].removesuffix(".rs") in store_names:
                    continue
                files.append(f)
        yield name, files
    for store in store_names:
        files = [f for f in [stores / f"{store}.rs"] if f.exists()]
        if (stores / store).is_dir():
            files += sorted((stores / store).rglob("*.rs"))
        yield f"store::{store}", files


STORE_PATH = re.compile(r"\bcrate::store::(\{[^}]*\}|\w+)")


def names_in(group):
    """The first names of a path's tail: `x` or each of `{x, y::z}`."""
    inner = group.strip("{}") if group.startswith("{") else group
    return re.findall(r"(?:^|[{,]\s*)(\w+)", inner)


def edges():
    names = {name for name, _ in modules()}
    graph = {}
    tests_only = test_only_files()
    for name, files in modules():
        deps = set()
        for f in files:
            if f in tests_only:
                continue
            text = code(strip_tests(f.read_text()))
            # `crate::store::dynamodb…` is that store's node; any other
            # `crate::store::…` is the seam's.
            for m in STORE_PATH.finditer(text):
                for t in names_in(m.group(1)):
                    deps.add(f"store::{t}" if f"store::{t}" in names else "store")
            text = STORE_PATH.sub("", text)
            for m in PATH.finditer(text):
                deps.update(t for t in names_in(m.group(1)) if t in names)
        deps.discard(name)
        graph[name] = deps
    return graph


def components(graph):
    """Tarjan's strongly connected components."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

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
            out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main():
    graph = edges()
    cycles = [c for c in components(graph) if len(c) > 1]
    for c in cycles:
        print("modules importing each other in a circle: " + ", ".join(c))
        for v in c:
            print(f"  {v} -> " + ", ".join(sorted(graph[v] & set(c))))
    if cycles:
        print("Break the circle: move the shared item into a leaf module both can import.")
        return 1
    how = "whole folders" if WHOLE_FOLDERS else "each store apart from the seam"
    print(f"module_cycles: {len(graph)} modules ({how}), no circular imports")
    return 0


if __name__ == "__main__":
    sys.exit(main())
