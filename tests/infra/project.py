"""A user's own deployment, as `idemq new` writes it, read and checked.

A project is a function crate with its deploy files:

    DIR/src/main.rs                      the handler (`idemq::run(..)`)
    DIR/deploy/sam/template.yaml         the function, its own tables, and
    DIR/deploy/sam/idemq.yaml            idemq.yaml nested in it
    DIR/deploy/terraform/main.tf         a root module calling
    DIR/deploy/terraform/modules/idemq/  idemq's module

The rules that hold for any deployment run on both, at the inputs the
project itself passes (its defaults): the same model and rules as the
ledger's (model.py, checks.py), plus what only a project has, a handler of
its own: the tables it writes reachable by the function's role, and the
environment it reads set. The ledger's walk over every accepted input, its
broken copies, and the opt-in operator and bootstrap policies (which follow
the CLI's code, not the project's) stay with the default run
(test_rules.py): a project passes fixed inputs.

Scope of the reading: the handler is src/main.rs; modules it declares in
other files are not followed. The SDK calls counted for the function role
are those reached from its `main` (through `idemq::run`); an SDK client the
handler calls itself needs grants on its own resources, which this does not
derive.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import tomllib
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, Callable

import cases
import checks
import model
import sdk_calls
import tf_eval

# Where `scripts/infra_test.sh --project DIR` tells the checks to look.
ENV = "IDEMQ_INFRA_PROJECT"

TOPIC = "arn:aws:sns:us-east-1:123456789012:shop-ops"

# The variables idemq.yaml's outputs and the module give the function; the
# rules read some of them (IDEMQ_TABLE, IDEMQ_MARKER_TTL, IDEMQ_BACKOFF_CAP).
IDEMQ_ENV = (
    "IDEMQ_TABLE",
    "IDEMQ_MARKER_TTL",
    "IDEMQ_NAMESPACE",
    "IDEMQ_LEGACY_MARKERS",
    "IDEMQ_CONCURRENCY",
    "IDEMQ_BACKOFF_CAP",
    "IDEMQ_ENVELOPE",
)

# What each `Write` of an effect asks of its table (src/store/dynamodb/
# effect.rs): the commit sends it as that item action, alone or in a
# TransactWriteItems (which DynamoDB authorises item by item). A fused
# marker (`marked_by`) is also read back where it was written, to tell a
# duplicate from a conflict (commit.rs `read_item`: GetItem).
WRITE_ACTIONS = {
    "put": "dynamodb:PutItem",
    "update": "dynamodb:UpdateItem",
    "delete": "dynamodb:DeleteItem",
    "condition_check": "dynamodb:ConditionCheckItem",
}
MARKED_BY_ACTION = "dynamodb:GetItem"


@dataclass
class Handler:
    """What the handler's code asks of its deployment."""

    # IAM action -> why (the Write or marked_by call that needs it)
    table_actions: dict[str, str]
    # environment variables it reads
    env: list[str]


def handler_sources(project: Path) -> list[Path]:
    main = project / "src" / "main.rs"
    if not main.is_file():
        raise FileNotFoundError(f"{main}: a project's handler is its src/main.rs")
    return [main]


def read_handler(project: Path) -> Handler:
    actions: dict[str, str] = {}
    env: list[str] = []
    for path in handler_sources(project):
        raw = path.read_text()
        code = sdk_calls.strip_test_modules(sdk_calls.strip_comments_and_literals(raw))
        for m in re.finditer(r"\bWrite\s*::\s*(\w+)\s*\(", code):
            if m.group(1) in WRITE_ACTIONS:
                actions.setdefault(WRITE_ACTIONS[m.group(1)], f"Write::{m.group(1)} in {path.name}")
        if re.search(r"\.\s*marked_by\s*\(", code):
            actions.setdefault(MARKED_BY_ACTION, f"marked_by in {path.name} (the marker is read back)")
        # Names are literals, which `code` has blanked: read them from the
        # text at the offsets the code keeps (comments and tests excluded).
        for m in re.finditer(r"\benv\s*::\s*var(?:_os)?\s*\(\s*\"", code):
            name = re.match(r'"([^"]*)"', raw[m.end() - 1 :])
            if name and name.group(1) not in env:
                env.append(name.group(1))
    return Handler(actions, env)


def idemq_features_off(project: Path, repo: Path) -> tuple[str, ...]:
    """The idemq features the project's build leaves out (its
    [dependencies] entry, not the dev-dependencies' test kit), and the
    `idemq` binary's code ("bin"), which no function build contains."""
    manifest = tomllib.loads((project / "Cargo.toml").read_text())
    dep = manifest.get("dependencies", {}).get("idemq", {})
    dep = {} if isinstance(dep, str) else dep
    features = tomllib.loads((repo / "Cargo.toml").read_text())["features"]
    want = list(dep.get("features", []))
    if dep.get("default-features", True):
        want.append("default")
    on: set[str] = set()
    while want:
        f = want.pop()
        if f in features and f not in on:
            on.add(f)
            want += [x for x in features[f] if not x.startswith("dep:") and "/" not in x]
    return (*sorted(set(features) - on - {"default"}), "bin")


# (repo, the handler's text, features left out) -> its needs: copies of one
# project (test_project_breaks.py) read the crate once.
_needs: dict[tuple[Path, str, tuple[str, ...]], dict[str, str]] = {}


def function_needs(project: Path, repo: Path) -> dict[str, str]:
    """The IAM actions the function needs: what the handler's `main`
    reaches through idemq, as sdk_calls.py reads it for the ledger. The
    reader takes the entry from the crate's examples/, so it is given a
    view of this repository whose examples/ holds the handler."""
    main = handler_sources(project)[0]
    without = idemq_features_off(project, repo)
    key = (repo, main.read_text(), without)
    if key in _needs:
        return dict(_needs[key])
    view = Path(tempfile.mkdtemp(prefix="idemq-project-view-"))
    try:
        for name in ("src", "cli", "Cargo.toml", "Cargo.lock"):
            (view / name).symlink_to(repo / name)
        (view / "examples").mkdir()
        entry = view / "examples" / "handler.rs"
        entry.symlink_to(main)
        _needs[key] = dict(sdk_calls.needs(view, entry, "example:handler", without=without).actions)
        return dict(_needs[key])
    finally:
        shutil.rmtree(view)


def own_tables_sam(sam: cases.Sam) -> dict[str, str]:
    """The DynamoDB tables the user's template itself creates: name -> ARN."""
    top = sam._stack({})
    return {
        top._ref(lid): top._get_att([lid, "Arn"]) for lid in top.of_type("AWS::DynamoDB::Table")
    }


def own_tables_terraform(tf: cases.Terraform) -> dict[str, str]:
    """The DynamoDB tables the root module itself creates: name -> ARN."""
    root = tf_eval.Module(tf_eval.parse_dir(tf.example), {}, path_module=str(tf.example))
    out = {}
    for name in root.resources_of("aws_dynamodb_table"):
        out[root._resource_attr("aws_dynamodb_table", name, "name")] = root._resource_attr(
            "aws_dynamodb_table", name, "arn"
        )
    return out


def outputs_without_description_sam(sam: cases.Sam) -> list[str]:
    return [
        f"{where}: output {k} has no Description"
        for where, raw in (("template.yaml", sam.parent_raw), ("idemq.yaml", sam.raw))
        for k, v in (raw.get("Outputs") or {}).items()
        if not v.get("Description")
    ]


def outputs_without_description_terraform(tf: cases.Terraform) -> list[str]:
    out = []
    for directory in (tf.example, tf.module_dir):
        for o in tf_eval.parse_dir(directory).sub("output"):
            if "description" not in o.attributes:
                out.append(f"{directory.name}: output {o.labels[0]} has no description")
    return out


class Project:
    """A project's two deployments and what its code needs, read once."""

    def __init__(self, directory: Path, repo: Path):
        self.dir = directory.resolve()
        self.repo = repo
        deploy = self.dir / "deploy"
        self.sam = cases.Sam(deploy / "sam" / "template.yaml")
        tf_root = deploy / "terraform"
        self.terraform = cases.Terraform(tf_root, example=tf_root, call=self._module_call(tf_root))
        self.handler = read_handler(self.dir)
        self.function_actions = function_needs(self.dir, repo)

    @staticmethod
    def _module_call(root: Path) -> str:
        """The root module's call of idemq's module (source .../modules/idemq)."""
        parsed = tf_eval.parse_dir(root)
        m = tf_eval.Module(parsed, {}, path_module=str(root))
        calls = [
            b.labels[0]
            for b in parsed.sub("module")
            if str(m.arg(b, "source")).rstrip("/").endswith("modules/idemq")
        ]
        if len(calls) != 1:
            raise AssertionError(f"{root}: {len(calls)} module calls with source .../modules/idemq, not one")
        return calls[0]

    def template(self, kind: str) -> cases.Sam | cases.Terraform:
        return {"sam": self.sam, "terraform": self.terraform}[kind]

    def own_tables(self, kind: str) -> dict[str, str]:
        return own_tables_sam(self.sam) if kind == "sam" else own_tables_terraform(self.terraform)


# ---------------------------------------------------------------------------
# The checks: each takes the project and a kind ("sam" or "terraform") and
# returns what it finds wrong, as sentences.
# ---------------------------------------------------------------------------


def check_accepted(p: Project, kind: str) -> list[str]:
    """The template accepts what the project passes it (SAM: parameters and
    Rules; Terraform: validations and preconditions)."""
    bad = p.template(kind).refused({})
    return [f"the template refuses the project's own inputs: {b}" for b in bad]


def check_rules(p: Project, kind: str) -> list[str]:
    """Every rule of model.py (queues, table, retries, the function's
    contract and reserved keys, queue policies, keys)."""
    return [f"{rule}: {x}" for rule, xs in model.violations(p.template(kind).deployment()).items() for x in xs]


def check_function_role(p: Project, kind: str) -> list[str]:
    """Least privilege against what the handler's `main` reaches, and the
    guards that keep the project's own grants off idemq's table and queues."""
    t = p.template(kind)
    out = checks.check_function_role(t.deployment(), p.function_actions)
    # With a customer managed key too: the role's KMS grants follow it.
    with_key = t.deployment({"kms_key": cases.KMS_KEY})
    out += [f"{x} (with a customer managed key)" for x in checks.check_function_role(with_key, p.function_actions)]
    return out


def check_own_tables(p: Project, kind: str) -> list[str]:
    """Each table the project creates for its handler is named to the
    function (an environment variable) and reachable by the function's role
    for every item action the handler's effects need (Write::put → PutItem,
    ..., marked_by → GetItem)."""
    d = p.template(kind).deployment()
    tables = p.own_tables(kind)
    out = []
    if p.handler.table_actions and not tables:
        out.append(
            f"the handler's effects need {sorted(p.handler.table_actions)} on a table of its own, "
            "and the template creates none"
        )
    env_values = set(d.function["env"].values())
    for name, arn in sorted(tables.items()):
        if name not in env_values:
            out.append(f"table {name}: the function is not given its name (no environment variable holds it)")
        for action, why in sorted(p.handler.table_actions.items()):
            if not any(fnmatchcase(action, a) and fnmatchcase(arn, r) for a, r in d.extra_grants):
                how = f" (managed policies {d.extra_managed} cannot be read here)" if d.extra_managed else ""
                out.append(f"table {name}: the function's role is not granted {action} on {arn} (needed: {why}){how}")
    return out


def check_environment(p: Project, kind: str) -> list[str]:
    """The variables the handler reads and those idemq's deployment passes
    the function are set."""
    env = p.template(kind).deployment().function["env"]
    out = [
        f"the handler reads {v}, which the function is not given"
        for v in p.handler.env
        if not env.get(v)
    ]
    out += [f"the function is not given {v} (idemq's deployment provides it)" for v in IDEMQ_ENV if not env.get(v)]
    return out


def check_alarms(p: Project, kind: str) -> list[str]:
    """The alarms (the DLQ's on visible + in-flight letters) and the
    dashboard on what src/metrics.rs emits; notifications to the topic
    when one is given, none otherwise."""
    t = p.template(kind)
    out = checks.check_alarms(t.deployment(), p.repo, None)
    out += [f"{x} (with a topic)" for x in checks.check_alarms(t.with_topic(TOPIC), p.repo, TOPIC)]
    return out


def check_outputs(p: Project, kind: str) -> list[str]:
    """Every output, the project's and idemq's, is described."""
    if kind == "sam":
        return outputs_without_description_sam(p.sam)
    return outputs_without_description_terraform(p.terraform)


CHECKS: dict[str, Callable[[Project, str], list[str]]] = {
    "accepted": check_accepted,
    "rules": check_rules,
    "function_role": check_function_role,
    "own_tables": check_own_tables,
    "environment": check_environment,
    "alarms": check_alarms,
    "outputs": check_outputs,
}


def _env_agreement(sam: dict[str, str], tf: dict[str, str]) -> list[str]:
    """idemq's variables that do not depend on names: the same in both."""
    out = []
    for v in ("IDEMQ_MARKER_TTL", "IDEMQ_BACKOFF_CAP"):
        a, b = sam.get(v), tf.get(v)
        if a and b and model.parse_duration(a) != model.parse_duration(b):
            out.append(f"{v}: {a} / {b}")
    for v in ("IDEMQ_LEGACY_MARKERS", "IDEMQ_CONCURRENCY", "IDEMQ_ENVELOPE"):
        if sam.get(v) != tf.get(v):
            out.append(f"{v}: {sam.get(v)} / {tf.get(v)}")
    return out


def check_agreement(p: Project) -> list[str]:
    """The project's SAM and Terraform deployments set up the same table,
    queues and idemq settings (they differ only in names). Compared at the
    batching window SAM's visibility mapping assumes (its maximum, 60 s),
    as the ledger's are (test_rules.py `agreement`)."""
    window = {"batching_window": 60}
    s, t = p.sam.deployment(window), p.terraform.deployment(window)
    return model.differences(s, t) + _env_agreement(s.function["env"], t.function["env"])


def problems(p: Project) -> dict[str, list[str]]:
    """Every check on both deployments: "kind/check" -> what it found."""
    out: dict[str, list[str]] = {}
    for kind in ("sam", "terraform"):
        for name, check in CHECKS.items():
            if found := check(p, kind):
                out[f"{kind}/{name}"] = found
    if found := check_agreement(p):
        out["agreement"] = found
    return out


# ---------------------------------------------------------------------------
# Making a project to check: `idemq new`, with the binary already built.
# ---------------------------------------------------------------------------


def idemq_binary(repo: Path) -> Path | None:
    target = Path(os.environ.get("CARGO_TARGET_DIR", repo / "target"))
    binary = target / "debug" / "idemq"
    return binary if binary.is_file() and os.access(binary, os.X_OK) else None


def generate(repo: Path, into: Path, name: str = "shop-orders") -> Path:
    """`idemq new INTO/NAME --idemq-path REPO`; the project's directory."""
    binary = idemq_binary(repo)
    if binary is None:
        raise FileNotFoundError("target/debug/idemq is not built (cargo build --bin idemq)")
    directory = into / name
    subprocess.run(
        [str(binary), "new", str(directory), "--idemq-path", str(repo)],
        check=True,
        capture_output=True,
        text=True,
    )
    return directory

