"""The templates as their own tools see them: cfn-lint, terraform fmt, and
what `sam build` will compile."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import cfn_eval

# The pinned cfn-lint, from the venv this runs in (it has no `python -m` entry).
CFN_LINT = str(Path(sys.executable).parent / "cfn-lint")


def test_cfn_lint_is_clean_on_the_sam_templates(repo):
    # The CLI (not the API), so this is exactly what `make lint-infra` runs:
    # the user's template and idemq.yaml, nested in it.
    out = subprocess.run(
        [CFN_LINT, str(repo / "infra" / "sam" / "template.yaml"), str(repo / "infra" / "sam" / "idemq.yaml")],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_cfn_lint_catches_a_broken_template(repo, tmp_path):
    """cfn-lint really reads the SAM resources: a typo in one is reported."""
    text = (repo / "infra" / "sam" / "template.yaml").read_text()
    assert text.count("      Handler: bootstrap\n") == 1
    (tmp_path / "idemq.yaml").write_text((repo / "infra" / "sam" / "idemq.yaml").read_text())
    bad = tmp_path / "template.yaml"
    bad.write_text(text.replace("      Handler: bootstrap\n", "      Handlr: bootstrap\n"))
    out = subprocess.run([CFN_LINT, str(bad)], capture_output=True, text=True)
    assert out.returncode != 0 and "Handlr" in out.stdout, out.stdout


def test_terraform_fmt(repo):
    terraform = shutil.which("terraform")
    if terraform is None:
        pytest.skip("terraform is not installed: `terraform fmt -check` not run")
    out = subprocess.run(
        [terraform, "fmt", "-check", "-recursive", "-diff", str(repo / "infra" / "terraform")],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_sam_builds_the_ledger_example(repo, sam):
    """SAM's rust-cargolambda runs `cargo lambda build --bin <Binary>` in
    CodeUri: that package's one binary must be examples/ledger.rs."""
    fn = sam.parent_raw["Resources"]["LedgerFunction"]
    assert fn["Metadata"]["BuildMethod"] == "rust-cargolambda"
    binary = fn["Metadata"]["BuildProperties"]["Binary"]
    package = (repo / "infra" / "sam" / fn["Properties"]["CodeUri"]).resolve()
    manifest = tomllib.loads((package / "Cargo.toml").read_text())
    bins = {b["name"]: (package / b["path"]).resolve() for b in manifest["bin"]}
    assert bins == {binary: repo / "examples" / "ledger.rs"}
    assert "workspace" in manifest, "its own workspace, or cargo looks for one above it"
    assert fn["Properties"]["Runtime"] == "provided.al2023" and fn["Properties"]["Architectures"] == ["arm64"]


def test_sam_function_package_builds_what_make_test_tests(repo):
    """The same dependency requirements as the root manifest. (`make deploy`
    copies the root Cargo.lock into the package before `sam build`, so the
    versions are the tested ones too.)"""
    package = repo / "infra" / "sam" / "function"
    root = tomllib.loads((repo / "Cargo.toml").read_text())["dependencies"]
    mine = tomllib.loads((package / "Cargo.toml").read_text())["dependencies"]
    # The deployed function is Lambda only: no worker, no CLI.
    assert mine.pop("idemq") == {"path": "../../..", "default-features": False, "features": ["lambda"]}
    for name, spec in mine.items():
        assert spec == root.get(name), f"{name}: {spec} here, {root.get(name)} in the root Cargo.toml"
    # And it lists every crate examples/ledger.rs names, or `sam build` fails.
    import re

    import sdk_calls

    code = sdk_calls.strip_comments_and_literals((repo / "examples" / "ledger.rs").read_text())
    # A path's first segment; `.parse::<T>()` (a method's turbofish) is none.
    named = set(re.findall(r"(?<![\w:.])([a-z_][a-z0-9_]*)::", code))
    builtin = {
        "std",
        "core",
        "alloc",
        "crate",
        "self",
        "super",
        "str",
        "u8",
        "u16",
        "u32",
        "u64",
        "i32",
        "i64",
        "usize",
        "f64",
    }
    listed = {n.replace("-", "_") for n in [*mine, "idemq"]}
    assert named - builtin <= listed, (
        f"examples/ledger.rs uses {sorted(named - builtin - listed)}: add them to {package / 'Cargo.toml'}"
    )


def test_samconfig(repo, sam):
    cfg = tomllib.loads((repo / "infra" / "sam" / "samconfig.toml").read_text())
    deploy = cfg["default"]["deploy"]["parameters"]
    assert "CAPABILITY_IAM" in deploy["capabilities"]
    assert deploy["confirm_changeset"] is True
    # SAM's cache hashes CodeUri only; the function's code lives outside it.
    assert cfg["default"]["build"]["parameters"]["cached"] is False
    # Overrides name real parameters.
    names = set(sam.parent_raw["Parameters"])
    for pair in deploy.get("parameter_overrides", "").split():
        assert pair.split("=", 1)[0] in names, pair
    assert (
        cfn_eval.rejected_parameters(
            sam.parent_raw,
            {
                **cfn_eval.parameter_defaults(sam.parent_raw),
                **dict(p.split("=", 1) for p in deploy.get("parameter_overrides", "").split()),
            },
        )
        == []
    )


def test_every_alarm_links_to_its_runbook_section(repo):
    """Each alarm's description names a section of docs/operations.md that exists."""
    import re

    doc = (repo / "docs" / "operations.md").read_text()
    anchors = {
        re.sub(r"[^a-z0-9 -]", "", h.lower()).strip().replace(" ", "-") for h in re.findall(r"^#+ (.+)$", doc, re.M)
    }
    texts = [(repo / "infra" / "sam" / "idemq.yaml").read_text()]
    texts += [p.read_text() for p in (repo / "infra" / "terraform" / "modules" / "idemq").glob("*.tf")]
    links = [a for t in texts for a in re.findall(r"docs/operations\.md#([\w-]+)", t)]
    assert len(links) == 16, links  # 8 alarms x 2 templates
    assert set(links) <= anchors, set(links) - anchors
