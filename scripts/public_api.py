#!/usr/bin/env python3
"""The idemq crate's public API, one item a line, read from its rustdoc.

Reads target/doc/idemq (built by `cargo doc --no-deps` with the features
docs.rs documents): every item rustdoc lists (modules' structs, enums,
traits, functions, type aliases, constants, macros) and, on each item's
page, its public fields, enum variants, inherent methods, and a trait's
required and provided methods and associated items. Trait
implementations (`Clone`, `Display`, …) are not listed: they follow from
the derives, and a change to them shows in the code.

    scripts/public_api.py                 print the listing
    scripts/public_api.py --check FILE    exit 1 if it differs from FILE
    scripts/public_api.py --write FILE    rewrite FILE

`make test` runs `--check docs/public-api.txt`, so that a change to the
crate's public surface is a change to that file, seen in review.
"""
import difflib
import html
import pathlib
import re
import sys

DOC = pathlib.Path("target/doc/idemq")
ITEM = re.compile(r'<li><a href="([^"]+)">([^<]+)</a></li>')
KIND = {"struct", "enum", "trait", "fn", "type", "constant", "macro", "union", "static", "traitalias"}
# Sections of an item's page whose members are the item's own.
OWN = re.compile(r'id="(structfield|variant|method|tymethod|associatedtype|associatedconstant)\.([A-Za-z0-9_]+)"')
# Where an item's page stops listing its own members: trait impls and the
# blanket and auto-trait impls rustdoc adds.
FOREIGN = re.compile(
    r'id="(trait-implementations|synthetic-implementations|blanket-implementations|implementors|dyn-compatibility)"'
)


def listing() -> list[str]:
    all_html = DOC / "all.html"
    if not all_html.is_file():
        sys.exit(f"{all_html} is missing: run cargo doc --no-deps --features testing,postgres,ops first")
    out = []
    for href, name in ITEM.findall(all_html.read_text()):
        kind = href.rsplit("/", 1)[-1].split(".", 1)[0]
        if kind not in KIND:
            continue
        path = "idemq::" + html.unescape(name)
        out.append(f"{kind} {path}")
        page = (DOC / href).read_text()
        cut = FOREIGN.search(page)
        own = page[: cut.start()] if cut else page
        seen = set()
        for member, ident in OWN.findall(own):
            if (member, ident) in seen:
                continue
            seen.add((member, ident))
            out.append(f"{member} {path}::{ident}")
    return sorted(set(out))


def main() -> int:
    args = sys.argv[1:]
    lines = listing()
    if not args:
        print("\n".join(lines))
        return 0
    if len(args) != 2 or args[0] not in ("--check", "--write"):
        print(__doc__.strip().splitlines()[-6], file=sys.stderr)
        return 2
    target = pathlib.Path(args[1])
    text = "\n".join(lines) + "\n"
    if args[0] == "--write":
        target.write_text(text)
        print(f"public_api: {len(lines)} public items written to {target}")
        return 0
    committed = target.read_text() if target.is_file() else ""
    if committed == text:
        print(f"public_api: {len(lines)} public items, as in {target}")
        return 0
    diff = difflib.unified_diff(
        committed.splitlines(), lines, fromfile=str(target), tofile="the code", lineterm=""
    )
    print("\n".join(diff))
    print(
        f"public_api: the crate's public surface differs from {target}; if the change is meant, "
        f"run scripts/public_api.py --write {target} and commit it"
    )
    return 1


if __name__ == "__main__":
    sys.exit(main())
