"""A user's own deployment (a project's deploy/, as `idemq new` writes it)
checked as the ledger's is: its tools (cfn-lint, terraform fmt) and the
rules that hold for any deployment (project.py).

    scripts/infra_test.sh --project DIR     this file, on DIR
    scripts/infra_test.sh                   everything, this file on a
                                            project `idemq new` writes
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import project

CFN_LINT = str(Path(sys.executable).parent / "cfn-lint")
KINDS = ["sam", "terraform"]


@pytest.fixture(scope="module")
def proj(project_dir, repo) -> project.Project:
    return project.Project(project_dir, repo)


@pytest.mark.parametrize("check", list(project.CHECKS))
@pytest.mark.parametrize("kind", KINDS)
def test_project(proj, kind, check):
    found = project.CHECKS[check](proj, kind)
    assert found == [], "\n".join(found)


def test_project_sam_and_terraform_agree(proj):
    found = project.check_agreement(proj)
    assert found == [], "\n".join(found)


def test_cfn_lint_on_the_projects_sam_templates(project_dir):
    sam = project_dir / "deploy" / "sam"
    out = subprocess.run(
        [CFN_LINT, str(sam / "template.yaml"), str(sam / "idemq.yaml")], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_terraform_fmt_on_the_project(project_dir):
    terraform = shutil.which("terraform")
    if terraform is None:
        pytest.skip("terraform is not installed: `terraform fmt -check` not run on the project")
    out = subprocess.run(
        [terraform, "fmt", "-check", "-recursive", "-diff", str(project_dir / "deploy" / "terraform")],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_terraform_validate_on_the_project(project_dir):
    """Only where `terraform init` has already installed the AWS provider
    in the project (validate needs its schema; nothing here downloads it)."""
    terraform = shutil.which("terraform")
    root = project_dir / "deploy" / "terraform"
    if terraform is None:
        pytest.skip("terraform is not installed: `terraform validate` not run on the project")
    if not (root / ".terraform" / "providers").is_dir():
        pytest.skip(
            "`terraform validate` not run: it needs the hashicorp/aws provider, which `terraform init` "
            f"downloads into {root}/.terraform (not done; no download here). The evaluator's checks stand in"
        )
    out = subprocess.run([terraform, "validate", "-no-color"], cwd=root, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
