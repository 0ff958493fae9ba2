"""The safety rules, on both templates, for every input they accept; and
proof that each rule catches a template that breaks it."""

from __future__ import annotations

import pytest

import cases
import checks
import model

TOPIC = "arn:aws:sns:us-east-1:123456789012:idemq-ops"


@pytest.fixture(scope="module", params=["sam", "terraform"])
def template(request, sam, terraform):
    return {"sam": sam, "terraform": terraform}[request.param]


def test_rules_hold_for_every_accepted_input(template):
    result = cases.check_all_inputs(template)
    # Not vacuous: many inputs were checked, and the guards refused some.
    assert result.accepted >= 40, result
    assert result.refused >= 10, result
    assert result.failures == {}


def test_defaults_are_what_idemq_init_creates(template):
    d = template.deployment()
    assert d.source.max_receive_count == 6  # init's --max-receive-count default
    assert d.dlq.retention == model.DLQ_RETENTION
    assert d.source.retention == model.SQS_DEFAULT_RETENTION  # init leaves SQS's 4 days
    assert model.parse_duration(d.function["env"]["IDEMQ_MARKER_TTL"]) == 21 * model.DAY  # DEFAULT_MARKER_TTL
    assert d.table["key"] == [("pk", "HASH")] and d.table["ttl_attribute"] == "expires_at"
    assert d.esm["batch_size"] == 10 and d.esm["max_concurrency"] == 10


def test_function_role_is_exactly_what_the_code_calls(template, function_actions):
    assert checks.check_function_role(template.deployment(), function_actions) == []


def test_operator_policy_is_exactly_what_the_cli_calls(template, cli_actions):
    assert template.deployment().operator_grants is None, "the operator policy is opt-in"
    assert checks.check_operator_policy(template.with_operator(), cli_actions) == []


def test_alarms_and_dashboard(template, repo):
    assert checks.check_alarms(template.with_topic(TOPIC), repo, TOPIC) == []
    assert checks.check_alarms(template.deployment(), repo, None) == []


def _fails(t, b, repo, function_actions, cli_actions, good: bool) -> list[str]:
    """What the checks report for the rule a broken copy breaks."""
    if b.rule in model.RULES:
        if good:
            return cases.check_all_inputs(t).failures.get(b.rule, [])
        return cases.first_failure(t, b.rule)
    if b.rule == "iam":
        return checks.check_function_role(t.deployment(), function_actions)
    if b.rule == "operator":
        return checks.check_operator_policy(t.with_operator(), cli_actions)
    if b.rule == "alarms":
        return checks.check_alarms(t.with_topic(TOPIC), repo, TOPIC)
    raise AssertionError(b.rule)


@pytest.mark.parametrize("b", cases.BREAKS, ids=lambda b: b.id)
def test_a_broken_copy_fails_its_rule(b, sam, terraform, repo, function_actions, cli_actions):
    good = {"sam": sam, "terraform": terraform}[b.kind]
    assert _fails(good, b, repo, function_actions, cli_actions, True) == [], "the unbroken template must pass"
    problems = _fails(cases.broken(good, b), b, repo, function_actions, cli_actions, False)
    assert problems, f"{b.kind} broken by '{b.why}' still passes rule {b.rule}"


def test_every_rule_has_a_broken_copy_for_both_templates():
    covered = {(b.rule, b.kind) for b in cases.BREAKS}
    rules = [*model.RULES, "iam", "operator", "alarms"]
    assert {(r, k) for r in rules for k in ("sam", "terraform")} <= covered
