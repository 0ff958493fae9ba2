#!/usr/bin/env python3
"""Fails if the library's top-level modules import each other in a circle.

Each top-level module of src/ (a file `src/x.rs` with its folder `src/x/`)
is a node; a `crate::y` path in x's code outside its `#[cfg(test)]` items
is an edge x -> y. Any strongly connected component with more than one
module is printed and makes the exit status 1. Docs (`//` lines) do not
count: an intra-doc link is not an import.

Usage: scripts/module_cycles.py [SRC_DIR]
"""
import pathlib
import re
import sys

SRC = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "src")
PATH = re.compile(r"\bcrate::(\{[^}]*\}|\w+)")


def strip_tests(text: str) -> str:
    """Drops every `#[cfg(test)]` item (a `mod … { … }` block or one line)."""
    out, i = [], 0
    while True:
        j = text.find("#[cfg(test)]", i)
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


def code(text: str) -> str:
    return "\n".join(l for l in text.splitlines() if not l.lstrip().startswith("//"))


def modules():
    for f in sorted(SRC.glob("*.rs")):
        if f.stem in ("lib", "main"):
            continue
        files = [f] + sorted((SRC / f.stem).rglob("*.rs"))
        yield f.stem, files


def edges():
    names = {name for name, _ in modules()}
    graph = {}
    for name, files in modules():
        deps = set()
        for f in files:
            for m in PATH.finditer(code(strip_tests(f.read_text()))):
                group = m.group(1)
                targets = re.findall(r"(?:^|[{,]\s*)(\w+)", group.strip("{}") if group.startswith("{") else group)
                deps.update(t for t in targets if t in names and t != name)
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
    print(f"module_cycles: {len(graph)} modules, no circular imports")
    return 0


if __name__ == "__main__":
    sys.exit(main())
