"""Which AWS API calls a binary of this crate can make, read from the Rust code.

The IAM checks compare the templates' policies with this, so the action list
is never kept by hand. How:

1. The operation names come from the AWS SDK crates themselves (one folder
   per operation under `src/operation/` of aws-sdk-sqs and aws-sdk-dynamodb,
   at the versions Cargo.lock pins).
2. Every `fn` of the crate (src/, and the binary's own entry file) is found,
   with the functions it calls: `name(..)`, `path::name(..)`, `Type::name(..)`
   and `.name(..)` (a method call may reach any method of that name whose
   arity fits; no type inference, so this over-approximates, never misses).
3. From an entry point (`main` of examples/ledger.rs for the Lambda function,
   `main` of cli/src/main.rs for the CLI) the reachable functions are followed;
   every `.operation()` they contain is an SDK call.

Function-level rather than module-level, because modules mix both sides:
src/init.rs is the CLI's `idemq init` but also has `retention()`, which the
function uses; src/store/dynamodb/failure_table.rs writes failure records for
the function and reads them in bulk for `idemq dlq`.

A method call is matched by its name (and whether it takes arguments), not by
its receiver's type, so a trait object's method is followed to every method of
that name: give the batch's own trait methods names no other type uses (a
`.run(..)` in the batch once reached `idemq dlq redrive`'s `run`).
"""

from __future__ import annotations

import os
import re
import subprocess
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

# ---------------------------------------------------------------------------
# SDK operations and their IAM actions
# ---------------------------------------------------------------------------


def sdk_crates(repo: Path) -> dict[str, str]:
    """The AWS SDK crates the library or the CLI depends on -> their IAM
    service prefix (aws-sdk-sqs -> sqs, aws-sdk-dynamodb -> dynamodb)."""
    names = set()
    for manifest in (repo / "Cargo.toml", repo / CLI_SRC.parent / "Cargo.toml"):
        names |= set(tomllib.loads(manifest.read_text()).get("dependencies", {}))
    return {name: name.removeprefix("aws-sdk-") for name in sorted(names) if name.startswith("aws-sdk-")}


def _registry_dirs() -> list[Path]:
    home = Path(os.environ.get("CARGO_HOME", Path.home() / ".cargo"))
    return sorted((home / "registry" / "src").glob("*"))


def sdk_operations(repo: Path) -> dict[str, str]:
    """operation snake_case name -> service prefix, from the pinned SDK crates."""
    services = sdk_crates(repo)
    lock = tomllib.loads((repo / "Cargo.lock").read_text())
    versions = {p["name"]: p["version"] for p in lock["package"] if p["name"] in services}
    missing = set(services) - set(versions)
    if missing:
        raise RuntimeError(f"Cargo.lock has no {sorted(missing)}")

    def crate_dir(name: str) -> Path | None:
        for reg in _registry_dirs():
            d = reg / f"{name}-{versions[name]}"
            if (d / "src" / "operation").is_dir():
                return d
        return None

    if any(crate_dir(n) is None for n in services):
        # A fresh machine that has not built yet: fetch the sources (no build).
        subprocess.run(["cargo", "fetch", "--locked", "--quiet"], cwd=repo, check=True)
    ops: dict[str, str] = {}
    for crate, service in services.items():
        d = crate_dir(crate)
        if d is None:
            raise RuntimeError(f"{crate} {versions[crate]} sources not found under {_registry_dirs()}")
        for op in (d / "src" / "operation").iterdir():
            if op.is_dir():
                # An operation two SDKs share (SNS's and DynamoDB's
                # tag_resource) cannot be told apart by its method name:
                # marked, and refused only if code calls it (`needs`).
                ops[op.name] = AMBIGUOUS if op.name in ops else service
    return ops


AMBIGUOUS = "?"


def _pascal(snake: str) -> str:
    return "".join(w.capitalize() for w in snake.split("_"))


# Where one API call is authorised by other actions. Sources:
# - DynamoDB developer guide, "Using IAM with DynamoDB transactions": the
#   Put/Update/Delete of a transaction need PutItem/UpdateItem/DeleteItem, its
#   ConditionCheck needs dynamodb:ConditionCheckItem; TransactGetItems needs
#   GetItem. There is no TransactWriteItems action.
# - SQS developer guide, "Amazon SQS batch actions": SendMessageBatch,
#   DeleteMessageBatch and ChangeMessageVisibilityBatch are authorised by
#   SendMessage, DeleteMessage and ChangeMessageVisibility.
SPECIAL_ACTIONS = {
    "dynamodb:TransactWriteItems": [
        "dynamodb:PutItem",
        "dynamodb:UpdateItem",
        "dynamodb:DeleteItem",
        "dynamodb:ConditionCheckItem",
    ],
    "dynamodb:TransactGetItems": ["dynamodb:GetItem"],
    "sqs:SendMessageBatch": ["sqs:SendMessage"],
    "sqs:DeleteMessageBatch": ["sqs:DeleteMessage"],
    "sqs:ChangeMessageVisibilityBatch": ["sqs:ChangeMessageVisibility"],
    # SNS developer guide, "Publishing messages in batches": PublishBatch is
    # authorised by sns:Publish.
    "sns:PublishBatch": ["sns:Publish"],
}


def iam_actions(op: str, service: str) -> list[str]:
    api = f"{service}:{_pascal(op)}"
    return SPECIAL_ACTIONS.get(api, [api])


# ---------------------------------------------------------------------------
# Reading Rust
# ---------------------------------------------------------------------------


def strip_comments_and_literals(src: str) -> str:
    """Blanks out comments, string and char literals (keeping offsets and
    newlines), so braces and names inside them are not read as code."""
    out = list(src)
    i, n = 0, len(src)

    def blank(a: int, b: int) -> None:
        for k in range(a, min(b, n)):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            blank(i, j)
            i = j
        elif src.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            blank(i, j)
            i = j
        elif (m := re.match(r'b?r(#*)"', src[i:])) and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            close = '"' + m.group(1)
            j = src.find(close, i + m.end())
            j = n if j < 0 else j + len(close)
            blank(i + 1, j)
            i = j
        elif c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            blank(i + 1, j)
            i = j + 1
        elif c == "'":
            # A char literal ('a', '\n', '\u{1F600}'), not a lifetime ('a).
            m = re.match(r"'(\\u\{[0-9a-fA-F]+\}|\\.|[^\\'])'", src[i:])
            if m:
                blank(i + 1, i + m.end() - 1)
                i += m.end()
            else:
                i += 1
        else:
            i += 1
    return "".join(out)


def _match_close(text: str, open_at: int, open_ch: str = "{", close_ch: str = "}") -> int:
    depth = 0
    for k in range(open_at, len(text)):
        if text[k] == open_ch:
            depth += 1
        elif text[k] == close_ch:
            depth -= 1
            if depth == 0:
                return k
    raise ValueError("unbalanced")


def strip_test_modules(text: str) -> str:
    """Removes `#[cfg(test)] mod x { ... }` blocks (their calls are not shipped)."""
    while m := re.search(r"#\[cfg\(test\)\]\s*(pub(\([^)]*\))?\s+)?mod\s+\w+\s*\{", text):
        end = _match_close(text, m.end() - 1)
        text = text[: m.start()] + " " * (end + 1 - m.start()) + text[end + 1 :]
    return text


# The operator CLI's own package (the `idemq` binary).
CLI_SRC = Path("cli", "src")


@dataclass
class Fn:
    module: str  # e.g. "queue", "dead_letter", "bin:idemq", "example:ledger"
    owner: str | None  # the impl/trait type for methods, None for free fns
    name: str
    params: int  # parameters other than self
    body: str
    file: Path

    @property
    def label(self) -> str:
        return f"{self.module}::{self.owner + '::' if self.owner else ''}{self.name}"


@dataclass
class Crate:
    fns: list[Fn] = field(default_factory=list)
    # module -> {local name -> full path of what `use` brings in}
    imports: dict[str, dict[str, str]] = field(default_factory=dict)
    # module -> submodules it declares
    submodules: dict[str, set[str]] = field(default_factory=dict)


def _module_of(path: Path, src: Path, examples: Path) -> str:
    if path.is_relative_to(examples):
        return f"example:{path.stem}"
    cli = src.parent / CLI_SRC
    if path.is_relative_to(cli):
        # The operator CLI's package: cli/src/main.rs -> bin:idemq ;
        # cli/src/send.rs -> bin:idemq::send ; cli/src/dlq/mod.rs -> bin:idemq::dlq
        parts = list(path.relative_to(cli).with_suffix("").parts)
        rest = [p for p in parts if p not in ("main", "mod")]
        return "::".join(["bin:idemq", *rest])
    rel = path.relative_to(src)
    parts = list(rel.with_suffix("").parts)
    if parts[-1] in ("mod", "lib"):
        parts = parts[:-1]
    return "::".join(parts) if parts else "crate"


def _params(sig: str) -> int:
    # The parameter list ends at the parenthesis that closes the first one,
    # not at the last one: a return type may hold tuples.
    open_at, depth, close_at = sig.find("("), 0, len(sig)
    for i in range(open_at, len(sig)):
        depth += {"(": 1, ")": -1}.get(sig[i], 0)
        if depth == 0:
            close_at = i
            break
    inner = sig[open_at + 1 : close_at]
    depth, count, cur = 0, 0, ""
    for ch in inner + ",":
        if ch in "<([":
            depth += 1
        elif ch in ">)]":
            depth -= 1
        if ch == "," and depth == 0:
            if cur.strip() and not re.fullmatch(r"\s*(&\s*('\w+\s+)?)?(mut\s+)?self(\s*:.*)?\s*", cur):
                count += 1
            cur = ""
        else:
            cur += ch
    return count


def _parse_uses(text: str, module: str) -> dict[str, str]:
    """`use a::b::{c, d as e, f::g}` -> {c: a::b::c, e: a::b::d, g: a::b::f::g}."""
    out: dict[str, str] = {}

    def expand(prefix: str, tree: str) -> None:
        tree = tree.strip()
        if not tree:
            return
        m = re.match(r"^([\w:]*?)::\{(.*)\}$", tree, re.S)
        if m:
            base = m.group(1)
            depth, cur = 0, ""
            for ch in m.group(2) + ",":
                if ch == "{":
                    depth += 1
                elif ch == "}":
                    depth -= 1
                if ch == "," and depth == 0:
                    expand(f"{prefix}{base}::", cur)
                    cur = ""
                else:
                    cur += ch
            return
        alias = None
        if " as " in tree:
            tree, alias = (s.strip() for s in tree.split(" as "))
        full = f"{prefix}{tree}"
        last = full.rsplit("::", 1)[-1]
        if last == "self":
            full = full.rsplit("::", 1)[0]
            last = full.rsplit("::", 1)[-1]
        if last != "*":
            out[alias or last] = full

    for m in re.finditer(r"\buse\s+([^;]+);", text):
        expand("", " ".join(m.group(1).split()))
    return out


def _parent(module: str) -> str:
    return module.rsplit("::", 1)[0] if "::" in module else "crate"


def _join(module: str, child: str) -> str:
    return child if module == "crate" else f"{module}::{child}"


def gated_modules(repo: Path) -> dict[str, str]:
    """Modules that the crate compiles only with a feature: module path ->
    feature (`#[cfg(feature = "sns")] pub mod topic;` in lib.rs gives
    `topic`; `#[cfg(feature = "postgres")] pub mod postgres;` in
    src/store/mod.rs gives `store::postgres`)."""
    src = repo / "src"
    gated = {}
    for path in [src / "lib.rs", *sorted(src.rglob("mod.rs"))]:
        parent = "" if path == src / "lib.rs" else "::".join(path.parent.relative_to(src).parts)
        for m in re.finditer(r'#\[cfg\(feature = "(\w+)"\)\]\s*pub mod (\w+)\s*;', path.read_text()):
            gated[f"{parent}::{m.group(2)}" if parent else m.group(2)] = m.group(1)
    return gated


def _gated_by(module: str, gated: dict[str, str]) -> str | None:
    """The feature that gates `module` or a module it is inside of."""
    parts = module.split("::")
    for i in range(1, len(parts) + 1):
        feature = gated.get("::".join(parts[:i]))
        if feature:
            return feature
    return None


def read_crate(repo: Path, extra_files: list[Path], without: tuple[str, ...] = ()) -> Crate:
    """The crate's fns (and those of `extra_files`), leaving out the
    modules of the features in `without`: a build without them does not
    compile them, so their calls cannot be made."""
    src, examples = repo / "src", repo / "examples"
    crate = Crate()
    gated = gated_modules(repo)
    files = sorted(src.rglob("*.rs")) + sorted((repo / CLI_SRC).rglob("*.rs")) + list(extra_files)
    for path in files:
        module = _module_of(path, src, examples)
        if _gated_by(module, gated) in without or ("bin" in without and module.startswith("bin:")):
            continue
        text = strip_test_modules(strip_comments_and_literals(path.read_text()))
        crate.imports[module] = _parse_uses(text, module)
        crate.submodules[module] = set(re.findall(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", text, re.M))
        _collect_fns(text, module, path, crate)
    return crate


def _collect_fns(text: str, module: str, path: Path, crate: Crate) -> None:
    """Free fns at module level, and methods of `impl`/`trait` blocks."""

    def scan(start: int, end: int, owner: str | None) -> None:
        i = start
        pat = re.compile(r"\b(impl|trait|fn)\b")
        while (m := pat.search(text, i, end)) is not None:
            kw = m.group(1)
            if kw == "fn" and re.match(r"\s*[A-Za-z_]", text[m.end() : m.end() + 40]) is None:
                i = m.end()  # a fn-pointer type, `fn(u32) -> u32`
                continue
            brace = text.find("{", m.end(), end)
            semi = text.find(";", m.end(), end)
            if brace < 0 or (0 <= semi < brace and kw == "fn"):
                i = (semi + 1) if semi >= 0 else end  # a declaration without body
                continue
            header = text[m.end() : brace]
            close = _match_close(text, brace)
            if kw in ("impl", "trait"):
                h = re.sub(r"<[^<>]*(<[^<>]*>[^<>]*)*>", "", header)  # drop generics
                h = h.split(" where ")[0]
                target = h.split(" for ")[-1] if kw == "impl" else h
                names = re.findall(r"[A-Za-z_]\w*", target.replace("dyn ", ""))
                scan(brace + 1, close, names[-1] if names else None)
            else:
                name = re.match(r"\s*(\w+)", header).group(1)  # type: ignore[union-attr]
                crate.fns.append(Fn(module, owner, name, _params(header), text[brace + 1 : close], path))
            i = close + 1

    scan(0, len(text), None)


# ---------------------------------------------------------------------------
# Reachability
# ---------------------------------------------------------------------------


def _chain_end(body: str, at: int) -> tuple[int, list[str]]:
    """From just after a call, the method names chained on it (`.a(..)`,
    `.b::<T>(..)`, `?`, `.await`) and where the chain ends."""
    names = []
    i, n = at, len(body)
    while True:
        j = i
        while j < n and body[j].isspace():
            j += 1
        if j < n and body[j] == "?":
            i = j + 1
            continue
        m = re.match(r"\.\s*([a-z_]\w*)\s*(?:::<[^>]*>)?\s*", body[j:])
        if not m:
            return i, names
        k = j + m.end()
        if k < n and body[k] == "(":
            names.append(m.group(1))
            i = _match_close(body, k, "(", ")") + 1
        else:  # a field or `.await`
            i = k
        if m.group(1) == "await":
            continue


def _is_sent(body: str, start: int, end: int) -> bool:
    """Is the builder made by the call at body[start:end] sent?"""
    _, chain = _chain_end(body, end)
    if "send" in chain:
        return True
    # `let [mut] name = receiver.op()...;` and later `name.send()` (or a
    # reassignment chain that sends it: `name = name.x(..)` then `name.send()`).
    stmt_start = max(body.rfind(";", 0, start), body.rfind("{", 0, start), body.rfind("}", 0, start)) + 1
    m = re.match(r"\s*let\s+(?:mut\s+)?([a-z_]\w*)\s*(?::[^=]+)?=", body[stmt_start:start])
    if m is None:
        return False
    name = m.group(1)
    for use in re.finditer(rf"(?<![\w.]){name}\b(?=\s*\.)", body[end:]):
        _, chain = _chain_end(body, end + use.end())
        if "send" in chain:
            return True
    return False


@dataclass
class Reach:
    ops: dict[str, list[str]]  # operation -> call path that reaches it (entry first)
    fns: set[str]


class CallGraph:
    def __init__(self, crate: Crate, sdk_ops: dict[str, str]):
        self.crate = crate
        self.sdk_ops = sdk_ops
        # Every definition of a free fn: a `#[cfg(feature = ...)]` pair of
        # variants shares one name, and a build may compile either.
        self.free: dict[tuple[str, str], list[Fn]] = {}
        self.methods: dict[str, list[Fn]] = {}
        self.by_owner: dict[tuple[str, str], list[Fn]] = {}
        for f in crate.fns:
            if f.owner is None:
                self.free.setdefault((f.module, f.name), []).append(f)
            else:
                self.methods.setdefault(f.name, []).append(f)
                self.by_owner.setdefault((f.owner, f.name), []).append(f)
        self.modules = set(crate.imports)

    def _module_path(self, segs: list[str], module: str, depth: int = 0) -> str | None:
        """A module path as written in `module` -> the module's key, or None
        for another crate (std, aws_sdk_sqs, ...)."""
        if not segs:
            return module
        first, rest = segs[0], segs[1:]
        imports = self.crate.imports.get(module, {})
        if first in ("crate", "idemq"):
            # `crate::` in a binary is the binary's own root.
            base = module.split("::")[0] if module.startswith(("bin:", "example:")) and first == "crate" else "crate"
        elif first == "super":
            base = _parent(module)
        elif first == "self":
            base = module
        elif first in self.crate.submodules.get(module, ()):
            base = _join(module, first)
        elif first in imports and depth < 8 and imports[first].split("::")[0] != first:
            return self._module_path(imports[first].split("::") + rest, module, depth + 1)
        else:
            return None
        for seg in rest:
            base = _join(base, seg)
        return base

    def _resolve_path(self, path: str, module: str, depth: int = 0) -> list[Fn]:
        """`a::b::name`, `Type::name` or `name` as seen from `module` -> the fns it may name."""
        segs = path.split("::")
        name, prefix = segs[-1], segs[:-1]
        if prefix and (prefix[-1][:1].isupper()):
            return self.by_owner.get((prefix[-1], name), [])
        if not prefix:
            if (module, name) in self.free:
                return self.free[(module, name)]
            target = self.crate.imports.get(module, {}).get(name)
            if target is not None and target != name and depth < 8:
                return self._resolve_path(target, module, depth + 1)
            return []
        mod = self._module_path(prefix, module)
        if mod is None:
            return []
        if (mod, name) in self.free:
            return self.free[(mod, name)]
        # A re-export, e.g. `pub use record::DeadLetters` in dlq/mod.rs.
        target = self.crate.imports.get(mod, {}).get(name)
        if target is not None and depth < 8:
            return self._resolve_path(target, mod, depth + 1)
        return []

    def callees(self, f: Fn) -> list[Fn]:
        out: list[Fn] = []
        body = f.body
        imports = self.crate.imports.get(f.module, {})
        # path calls and path mentions: a::b::name / Type::name (with or without call)
        for m in re.finditer(r"\b((?:[A-Za-z_]\w*::)+)([a-z_]\w*)\b", body):
            out += self._resolve_path(m.group(1) + m.group(2), f.module)
        # bare calls and fn items passed as values: name( / .map(name)
        for m in re.finditer(r"(?<![\w.:])([a-z_]\w*)\b(?!\s*::)", body):
            name = m.group(1)
            if (f.module, name) in self.free or name in imports:
                out += self._resolve_path(name, f.module)
        # method calls: .name( ... ) with a fitting arity class
        for m in re.finditer(r"\.\s*([a-z_]\w*)\s*(?:::<[^>]*>)?\s*\(", body):
            name = m.group(1)
            empty = re.match(r"\s*\)", body[m.end() :]) is not None
            for cand in self.methods.get(name, []):
                if (cand.params == 0) == empty:
                    out.append(cand)
        if f.owner:  # Self::x and self.x inside an impl
            for m in re.finditer(r"\bSelf::([a-z_]\w*)", body):
                out += self.by_owner.get((f.owner, m.group(1)), [])
        return out

    def sdk_calls_in(self, f: Fn) -> list[str]:
        """The `.operation()` calls in `f` that are SDK calls.

        A name alone does not tell: the CLI has its own `scan()` method, and
        `scan` is also a DynamoDB operation. An SDK call makes a fluent
        builder that is sent: `.send()` follows in its method chain, or is
        called on the `let` binding that holds it. A `.name()` that is never
        sent is the crate's own method when the crate has a method of that
        name taking no arguments; any other is still counted, so an unusual
        builder use over-grants rather than goes missing.
        """
        out = []
        for m in re.finditer(r"\.\s*([a-z_]\w*)\s*\(\s*\)", f.body):
            op = m.group(1)
            if op not in self.sdk_ops:
                continue
            if _is_sent(f.body, m.start(), m.end()) or not any(c.params == 0 for c in self.methods.get(op, [])):
                out.append(op)
        return out

    def runtime_callees(self, f: Fn) -> list[Fn]:
        """What a runtime calls once our code hands it a value: a type's
        `tower::Service::call` (and `poll_ready`) is reached when the type is
        built (`new`, `from_*`), since `lambda_runtime::run(service)` calls
        them, not idemq's code. Only constructors count: a method call such
        as `.clone()` is matched by name and may be another type's."""
        if f.owner is None or not (f.name == "new" or f.name.startswith("from_")):
            return []
        return [g for name in ("call", "poll_ready") for g in self.by_owner.get((f.owner, name), [])]

    def reach(self, entry_module: str, entry_fn: str = "main", skip: tuple[str, ...] = ()) -> Reach:
        """What `entry_module::entry_fn` can reach, not going through the
        functions labelled in `skip`."""
        starts = self.free.get((entry_module, entry_fn))
        if not starts:
            raise RuntimeError(f"no fn {entry_fn} in {entry_module}")
        start = starts[0]
        missing = [s for s in skip if not any(f.label == s for f in self.crate.fns)]
        if missing:
            raise RuntimeError(f"no fn {missing} to leave out")
        seen: dict[int, list[str]] = {id(start): [start.label]}
        seen.update({id(f): [f.label] for f in self.crate.fns if f.label in skip})
        queue = [start]
        ops: dict[str, list[str]] = {}
        while queue:
            f = queue.pop(0)
            if f.label in skip:
                continue
            trail = seen[id(f)]
            for op in self.sdk_calls_in(f):
                ops.setdefault(op, trail)
            for g in self.callees(f) + self.runtime_callees(f):
                if id(g) not in seen:
                    seen[id(g)] = [*trail, g.label]
                    queue.append(g)
        return Reach(ops, {t[-1] for t in seen.values()})


@dataclass
class Needs:
    """IAM actions a binary needs, each with why (the call path to the SDK call)."""

    actions: dict[str, str]


def needs(
    repo: Path,
    entry: Path,
    entry_module: str,
    entry_fn: str = "main",
    skip: tuple[str, ...] = (),
    without: tuple[str, ...] = (),
) -> Needs:
    ops = sdk_operations(repo)
    graph = CallGraph(read_crate(repo, [] if entry.is_relative_to(repo / "src") or entry.is_relative_to(repo / CLI_SRC) else [entry], without), ops)
    r = graph.reach(entry_module, entry_fn, skip)
    actions: dict[str, str] = {}
    for op, trail in sorted(r.ops.items()):
        if ops[op] == AMBIGUOUS:
            raise RuntimeError(f".{op}() via {' -> '.join(trail)}: the operation exists in two SDKs")
        for a in iam_actions(op, ops[op]):
            actions.setdefault(a, f".{op}() via {' -> '.join(trail)}")
    return Needs(actions)


def function_needs(repo: Path) -> Needs:
    """The Lambda function: examples/ledger.rs `main` (idemq::run -> lambda host),
    built as infra/sam/function builds it: `features = ["lambda"]`, so the
    SNS publisher (feature `sns`) and the test kit are not in it, and
    neither is the `idemq` binary ("bin"), nor the PostgreSQL store (feature
    `postgres`: the templates deploy a DynamoDB consumer)."""
    return needs(
        repo,
        repo / "examples" / "ledger.rs",
        "example:ledger",
        without=("sns", "testing", "bin", "postgres"),
    )


CLI_MAIN = ("cli", "src", "main.rs")
# `idemq init`: the one subcommand that creates and changes resources.
INIT_ENTRY = "run_init"


def cli_needs(repo: Path) -> Needs:
    """The whole operator CLI: cli/src/main.rs `main`."""
    return needs(repo, repo.joinpath(*CLI_MAIN), "bin:idemq", without=CLI_WITHOUT)


# The `idemq` binary is built with the default features: the test kit
# (feature `testing`) and the PostgreSQL store (feature `postgres`) are
# not in it.
CLI_WITHOUT = ("testing", "postgres")
# `idemq send --topic-arn` publishes to the user's own SNS topic: the
# templates create no topic, so their operator policy grants no sns:Publish;
# the producer's role needs it on that topic (README, "Jobs that arrive
# through SNS or EventBridge").
TOPIC_SEND = "topic::TopicProducer::send_batch"


def bootstrap_needs(repo: Path) -> Needs:
    """`idemq init` alone: what the bootstrap policy grants."""
    return needs(repo, repo.joinpath(*CLI_MAIN), "bin:idemq", INIT_ENTRY, without=CLI_WITHOUT)


def operator_needs(repo: Path) -> Needs:
    """Every other subcommand (`send`, `dlq ...`): what the operator policy
    grants. `init`'s own calls are left out unless another command makes
    them too."""
    return needs(
        repo,
        repo.joinpath(*CLI_MAIN),
        "bin:idemq",
        skip=(f"bin:idemq::{INIT_ENTRY}", TOPIC_SEND),
        without=CLI_WITHOUT,
    )
