"""Shared setup for the infra checks (run by scripts/infra_test.sh)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import cases  # noqa: E402
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
