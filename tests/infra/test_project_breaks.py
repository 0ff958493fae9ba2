"""Proof that the project checks fail: a project `idemq new` writes passes
them, and each broken copy of it fails the check it breaks, for that
reason; and `scripts/infra_test.sh --project` exits non-zero on one.

Needs the idemq binary already built (target/debug/idemq); skipped without it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import project

IDEMQ_TABLE_ARN = "arn:aws:dynamodb:us-east-1:123456789012:table/shop-orders-idemq"


@dataclass(frozen=True)
class Break:
    file: str  # under the project's deploy/
    old: str  # must occur exactly once
    new: str
    check: str  # the key of project.problems that must fail
    expect: str  # a part of what it must say
    why: str

    @property
    def id(self) -> str:
        return f"{self.check}:{self.why}"


BREAKS = [
    Break(
        "sam/template.yaml",
        "        EffectTableArns: !GetAtt OrdersTable.Arn\n",
        "",
        "sam/own_tables",
        "is not granted dynamodb:PutItem on arn:aws:dynamodb:us-east-1:123456789012:table/",
        "EffectTableArns left out: the handler cannot write its orders",
    ),
    Break(
        "terraform/main.tf",
        "  effect_table_arns = [aws_dynamodb_table.orders.arn]\n",
        "",
        "terraform/own_tables",
        "is not granted dynamodb:UpdateItem on arn:aws:dynamodb:us-east-1:123456789012:table/shop-orders-orders",
        "effect_table_arns left out",
    ),
    Break(
        "sam/template.yaml",
        "          ORDERS_TABLE: !Ref OrdersTable\n",
        "",
        "sam/environment",
        "the handler reads ORDERS_TABLE, which the function is not given",
        "ORDERS_TABLE not passed: the handler falls back to a table that does not exist",
    ),
    Break(
        "sam/template.yaml",
        "          IDEMQ_MARKER_TTL: !GetAtt Idemq.Outputs.MarkerTtl\n",
        "",
        "sam/rules",
        "marker_ttl: IDEMQ_MARKER_TTL is not passed",
        "the marker TTL left to its default",
    ),
    Break(
        "terraform/main.tf",
        "  environment       = { ORDERS_TABLE = aws_dynamodb_table.orders.name }\n",
        '  environment       = { ORDERS_TABLE = aws_dynamodb_table.orders.name, IDEMQ_KEY_PREFIX = "app#" }\n',
        "terraform/accepted",
        "refuses the project's own inputs: environment",
        "the environment moves idemq's reserved keys",
    ),
    # A grant of everything on idemq's table passes the role's guard only
    # once the guard is gone (with the guard, see the test below).
    Break(
        "terraform/modules/idemq/function.tf",
        '    sid    = "TableOnlyWhatIdemqCalls"\n    effect = "Deny"\n',
        '    sid    = "TableOnlyWhatIdemqCalls"\n    effect = "Allow"\n',
        "terraform/function_role",
        "no Deny of all but idemq's actions on the table",
        "the module copy's table guard turned into an Allow",
    ),
    Break(
        "sam/idemq.yaml",
        "                  - sqs:GetQueueUrl\n                Resource: !GetAtt SourceQueue.Arn",
        "                  - sqs:GetQueueUrl\n                  - sqs:PurgeQueue\n                Resource: !GetAtt SourceQueue.Arn",
        "sam/function_role",
        "grants sqs:PurgeQueue on the source, which nothing in the code calls",
        "idemq.yaml's copy grants PurgeQueue",
    ),
    Break(
        "sam/idemq.yaml",
        "          Expression: visible + inflight\n",
        "          Expression: visible\n",
        "sam/alarms",
        "no alarm on DLQ depth counting letters being read",
        "DLQ alarm on visible letters only",
    ),
    Break(
        "sam/template.yaml",
        "    Description: The function's own table.\n",
        "",
        "sam/outputs",
        "output OrdersTableName has no Description",
        "an output without a description",
    ),
    Break(
        "terraform/main.tf",
        '  table_name   = "shop-orders-idemq"\n',
        '  table_name   = "shop-orders-idemq"\n  max_receive_count = 10\n',
        "agreement",
        "source.max_receive_count: 6 / 10",
        "Terraform retries more often than SAM",
    ),
]


@pytest.fixture(scope="module")
def fresh(repo, tmp_path_factory) -> Path:
    if project.idemq_binary(repo) is None:
        pytest.skip("target/debug/idemq is not built (cargo build --bin idemq): no project to break")
    return project.generate(repo, tmp_path_factory.mktemp("fresh"))


def edited(fresh: Path, into: Path, file: str, old: str, new: str) -> Path:
    copy = into / fresh.name
    shutil.copytree(fresh, copy)
    path = copy / "deploy" / file
    text = path.read_text()
    count = text.count(old)
    assert count == 1, f"{file}: the text to replace occurs {count} times (must be once): has `idemq new` changed?"
    path.write_text(text.replace(old, new))
    return copy


def test_a_generated_project_passes(fresh, repo):
    p = project.Project(fresh, repo)
    assert project.problems(p) == {}
    # Not vacuous: the handler's needs and its table were read.
    assert set(p.handler.table_actions) == {"dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:GetItem"}
    assert p.handler.env == ["ORDERS_TABLE"]
    assert len(p.own_tables("sam")) == 1 and len(p.own_tables("terraform")) == 1
    assert {"sqs:SendMessage", "dynamodb:ConditionCheckItem"} <= set(p.function_actions)


@pytest.mark.parametrize("b", BREAKS, ids=lambda b: b.id)
def test_a_broken_project_fails(b, fresh, repo, tmp_path):
    found = project.problems(project.Project(edited(fresh, tmp_path, b.file, b.old, b.new), repo))
    assert b.check in found, f"broken by '{b.why}', yet {b.check} passes (found: {found})"
    assert any(b.expect in x for x in found[b.check]), f"'{b.why}' fails {b.check}, but not for that: {found[b.check]}"


def test_extra_grants_on_idemqs_table_are_held_by_the_guard(fresh, repo, tmp_path):
    """`dynamodb:*` on idemq's table through the module's extra statements:
    the role's guard leaves only what idemq calls, so the check passes;
    without the guard, it fails for that grant."""
    grant = (
        "  extra_policy_statements = [\n"
        f'    {{ Effect = "Allow", Action = ["dynamodb:*"], Resource = ["{IDEMQ_TABLE_ARN}"] }},\n'
        "  ]\n"
    )
    anchor = "  effect_table_arns = [aws_dynamodb_table.orders.arn]\n"
    held = edited(fresh, tmp_path / "held", "terraform/main.tf", anchor, anchor + grant)
    p = project.Project(held, repo)
    assert ("dynamodb:*", IDEMQ_TABLE_ARN) in p.terraform.deployment().extra_grants
    assert project.check_function_role(p, "terraform") == []

    open_ = edited(
        held,
        tmp_path / "open",
        "terraform/modules/idemq/function.tf",
        '    sid    = "TableOnlyWhatIdemqCalls"\n    effect = "Deny"\n',
        '    sid    = "TableOnlyWhatIdemqCalls"\n    effect = "Allow"\n',
    )
    found = project.check_function_role(project.Project(open_, repo), "terraform")
    assert any("grants ['dynamodb:*'] on idemq's table" in x for x in found), found


def test_cfn_lint_fails_a_broken_project(fresh, tmp_path):
    broken = edited(fresh, tmp_path, "sam/template.yaml", "      Handler: bootstrap\n", "      Handlr: bootstrap\n")
    sam = broken / "deploy" / "sam"
    cfn_lint = str(Path(sys.executable).parent / "cfn-lint")
    out = subprocess.run([cfn_lint, str(sam / "template.yaml"), str(sam / "idemq.yaml")], capture_output=True, text=True)
    assert out.returncode != 0 and "Handlr" in out.stdout, out.stdout


def test_the_project_run_fails_on_a_broken_project(fresh, repo, tmp_path):
    """What `scripts/infra_test.sh --project DIR` runs, on a project whose
    template leaves EffectTableArns out: it fails, and says why."""
    b = BREAKS[0]
    broken = edited(fresh, tmp_path, b.file, b.old, b.new)
    out = subprocess.run(
        [sys.executable, "-m", "pytest", str(Path(__file__).with_name("test_project.py")), "-p", "no:cacheprovider", "-q"],
        cwd=repo,
        env={**os.environ, project.ENV: str(broken), "PYTHONDONTWRITEBYTECODE": "1"},
        capture_output=True,
        text=True,
    )
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-3000:]
    assert "FAILED tests/infra/test_project.py::test_project[sam-own_tables]" in out.stdout, out.stdout[-3000:]
    assert b.expect in out.stdout, out.stdout[-3000:]
    # Only that check fails.
    assert out.stdout.count("FAILED ") == 1, out.stdout[-3000:]
