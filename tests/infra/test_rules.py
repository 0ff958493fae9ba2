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
    for d in cases.variants(template):
        assert checks.check_function_role(d, function_actions) == [], (d.kms_key, d.producers)
    # With a key, the function gets exactly Decrypt and GenerateDataKey on it.
    with_key = cases.variants(template)[2]
    assert sorted(a for a, r in with_key.role_grants if r == cases.KMS_KEY) == ["kms:Decrypt", "kms:GenerateDataKey"]


def test_templates_agree_on_table_and_queue_settings(sam, terraform):
    assert agreement(sam, terraform) == []
    # Not vacuous: the comparison saw the settings that matter.
    s = model.settings(sam.deployment())
    assert s["table"]["deletion_protection"] is True and s["table"]["pitr"] is True and s["table"]["sse"] is True
    assert s["table"]["ttl_attribute"] == "expires_at" and s["table"]["key"] == [("pk", "HASH")]
    assert len(s["source"]["policy"]) == 3 and len(s["dlq"]["policy"]) == 3


def test_the_retention_guards_are_exact_and_say_the_numbers(template):
    """Each template refuses exactly the receives x timeout x retention
    combinations that break the rule (no safe one is refused), and the
    refusal names the numbers a deployer needs."""
    checked = 0
    for inputs in cases.retry_inputs():
        d = template.deployment(inputs)
        broken = model.rule_retries_fit_retention(d) != []
        refusals = [r for r in d.refusals if "retention" in r]
        if template.accepts_ignoring_retries(inputs):
            checked += 1
            assert broken == bool(refusals), (inputs, refusals)
    assert checked >= 100
    d = template.deployment(
        {"max_receive_count": 100, "function_timeout": 900, "batching_window": 60, "source_retention_days": 13}
    )
    (message,) = [r for r in d.refusals if "retention" in r]
    assert "100" in message and "5460" in message and "900" in message, message


def test_operator_policy_is_exactly_what_the_cli_calls(template, operator_actions):
    assert template.deployment().operator_grants is None, "the operator policy is opt-in"
    assert checks.check_operator_policy(template.with_operator(), operator_actions) == []


def test_bootstrap_policy_is_exactly_what_idemq_init_calls(template, bootstrap_actions):
    assert template.deployment().bootstrap_grants is None, "the bootstrap policy is opt-in"
    assert checks.check_bootstrap_policy(template.with_bootstrap(), bootstrap_actions) == []


def test_alarms_and_dashboard(template, repo):
    assert checks.check_alarms(template.with_topic(TOPIC), repo, TOPIC) == []
    assert checks.check_alarms(template.deployment(), repo, None) == []


CODE_RULES = ["iam", "operator", "bootstrap", "alarms"]


def agreement(sam, terraform) -> list[str]:
    """Where the two templates deploy different table or queue settings for
    the same inputs. Compared at the batching window SAM's visibility mapping
    assumes (its maximum, 60 s), where both compute the same timeout."""
    out = []
    for inputs in cases.agreement_inputs():
        if sam.accepts(inputs) and terraform.accepts(inputs):
            out += [
                f"{p} (inputs {inputs})"
                for p in model.differences(sam.deployment(inputs), terraform.deployment(inputs))
            ]
    return out


def _fails(t, b, repo, actions, good: bool, other=None) -> list[str]:
    """What the checks report for the rule a broken copy breaks."""
    if b.rule == "templates_agree":
        return agreement(t, other) if t.kind == "sam" else agreement(other, t)
    if b.rule in model.RULES:
        if good:
            return cases.check_all_inputs(t).failures.get(b.rule, [])
        return cases.first_failure(t, b.rule)
    if b.rule == "iam":
        return [p for d in cases.variants(t) for p in checks.check_function_role(d, actions["function"])]
    if b.rule == "operator":
        return [
            p for d in cases.variants(t, operator=True) for p in checks.check_operator_policy(d, actions["operator"])
        ]
    if b.rule == "bootstrap":
        return checks.check_bootstrap_policy(t.with_bootstrap(), actions["bootstrap"])
    if b.rule == "alarms":
        return checks.check_alarms(t.with_topic(TOPIC), repo, TOPIC)
    raise AssertionError(b.rule)


@pytest.mark.parametrize("b", cases.BREAKS, ids=lambda b: b.id)
def test_a_broken_copy_fails_its_rule(b, sam, terraform, repo, function_actions, operator_actions, bootstrap_actions):
    good = {"sam": sam, "terraform": terraform}[b.kind]
    other = {"sam": terraform, "terraform": sam}[b.kind]
    actions = {"function": function_actions, "operator": operator_actions, "bootstrap": bootstrap_actions}
    assert _fails(good, b, repo, actions, True, other) == [], "the unbroken template must pass"
    problems = _fails(cases.broken(good, b), b, repo, actions, False, other)
    assert problems, f"{b.kind} broken by '{b.why}' still passes rule {b.rule}"
    assert any(b.expect in p for p in problems), f"{b.kind} broken by '{b.why}' fails, but not for that: {problems}"


def test_every_rule_has_a_broken_copy_for_both_templates():
    covered = {(b.rule, b.kind) for b in cases.BREAKS}
    rules = [*model.RULES, *CODE_RULES, "templates_agree"]
    assert {(r, k) for r in rules for k in ("sam", "terraform")} <= covered
    assert all(b.expect for b in cases.BREAKS), "every broken copy says what it must be caught for"


def test_extra_grants_cannot_reach_idemqs_resources(template, function_actions):
    """Whatever the deployer grants the function (its own tables and queues,
    statements, managed policies read as `*` on `*`), the role may do on
    idemq's table and queues only what the code calls; and the inputs the
    templates must refuse are refused."""
    checked = with_extras = 0
    for inputs in cases.EXTRA_INPUTS:
        if not template.supports(inputs) or not template.accepts(inputs):
            continue
        d = template.deployment(inputs)
        checked += 1
        with_extras += bool(d.extra_grants or d.extra_managed)
        assert checks.check_function_role(d, function_actions) == [], inputs
    assert checked >= (10 if template.kind == "sam" else 15) and with_extras >= 5, (checked, with_extras)
    refused = [
        {"envelope": "kinesis"},
        {"job_id_pointer": "transfer_id"},
        {"environment": {"IDEMQ_KEY_PREFIX": "app#"}},
        {"environment": {"IDEMQ_TABLE": "elsewhere"}},
        {"s3_bucket": "artifacts", "s3_key": "orders/bootstrap.zip"},
        {"package_path": None},
    ]
    for inputs in refused:
        if template.supports(inputs):
            assert not template.accepts(inputs), inputs


def test_every_output_is_described(sam, terraform):
    import tf_eval

    for raw in (sam.raw, sam.parent_raw):
        assert [k for k, v in raw["Outputs"].items() if not v.get("Description")] == []
    for directory in (terraform.module_dir, terraform.example):
        outputs = tf_eval.parse_dir(directory).sub("output")
        assert outputs and [o.labels[0] for o in outputs if "description" not in o.attributes] == []
