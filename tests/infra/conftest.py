"""Shared setup for the infra checks (run by scripts/infra_test.sh)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import cases  # noqa: E402
import project  # noqa: E402
import sdk_calls  # noqa: E402

REPO = HERE.parent.parent


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def function_actions() -> dict[str, str]:
    return sdk_calls.function_needs(REPO).actions


@pytest.fixture(scope="session")
def cli_actions() -> dict[str, str]:
    return sdk_calls.cli_needs(REPO).actions


@pytest.fixture(scope="session")
def operator_actions() -> dict[str, str]:
    return sdk_calls.operator_needs(REPO).actions


@pytest.fixture(scope="session")
def bootstrap_actions() -> dict[str, str]:
    return sdk_calls.bootstrap_needs(REPO).actions


@pytest.fixture(scope="session")
def sam() -> cases.Sam:
    return cases.Sam(REPO / "infra" / "sam" / "template.yaml")


@pytest.fixture(scope="session")
def terraform() -> cases.Terraform:
    return cases.Terraform(REPO / "infra" / "terraform")


@pytest.fixture(scope="session")
def project_dir(tmp_path_factory) -> Path:
    """The project whose deploy files test_project.py checks: the one
    `scripts/infra_test.sh --project DIR` names ($IDEMQ_INFRA_PROJECT), or,
    without it, one `idemq new` writes now (with the idemq binary already
    built; skipped without it)."""
    given = os.environ.get(project.ENV)
    if given:
        directory = Path(given).resolve()
        if not (directory / "deploy").is_dir():
            pytest.fail(f"{directory} has no deploy/ (what `idemq new` writes: deploy/sam, deploy/terraform)")
        return directory
    if project.idemq_binary(REPO) is None:
        pytest.skip("target/debug/idemq is not built (cargo build --bin idemq): no generated project to check")
    return project.generate(REPO, tmp_path_factory.mktemp("project"))
