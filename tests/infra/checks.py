"""Least privilege and alarm coverage, checked against what the code does.

The IAM *actions* come from the Rust code (sdk_calls.py). What is kept here
by hand is only where each action may apply (SCOPE): that is policy intent,
which no parser can infer. An action the code starts calling that has no
scope yet fails the check with the call path that needs it.
"""

from __future__ import annotations

import re
from fnmatch import fnmatchcase
from pathlib import Path

from model import ACCOUNT, Alarm, Deployment, arn_key

# Lambda's event source mapping polls with the function's role: AWS Lambda
# developer guide, "Lambda execution role for Amazon SQS" (the managed policy
# AWSLambdaSQSQueueExecutionRole grants these three).
ESM_ACTIONS = {
    "sqs:ReceiveMessage": "the event source mapping polls the source queue",
    "sqs:DeleteMessage": "the event source mapping deletes what the function acknowledged",
    "sqs:GetQueueAttributes": "the event source mapping reads the source queue",
}
# The log group is created by the template, so only streams and events.
LOG_ACTIONS = {
    "logs:CreateLogStream": "Lambda writes the function's logs (and idemq's EMF metrics)",
    "logs:PutLogEvents": "Lambda writes the function's logs (and idemq's EMF metrics)",
}

# Where each action may be granted: "source", "dlq", "table", "log_group".
FUNCTION_SCOPE: dict[str, set[str]] = {
    "sqs:ReceiveMessage": {"source"},
    "sqs:DeleteMessage": {"source"},
    "sqs:ChangeMessageVisibility": {"source"},  # backoff, on the source only
    "sqs:GetQueueAttributes": {"source", "dlq"},  # discover; DLQ retention for the TTL check
    "sqs:GetQueueUrl": {"source", "dlq"},  # url_of_arn for both
    "sqs:SendMessage": {"dlq"},  # permanent failures, never back to the source
    "dynamodb:PutItem": {"table"},
    "dynamodb:UpdateItem": {"table"},
    "dynamodb:DeleteItem": {"table"},
    "dynamodb:ConditionCheckItem": {"table"},
    "dynamodb:GetItem": {"table"},  # one marker, after a cancelled transaction
    "dynamodb:BatchGetItem": {"table"},  # the batch's look-up before its handlers
    "logs:CreateLogStream": {"log_group"},
    "logs:PutLogEvents": {"log_group"},
}

# The SQS-side actions a customer managed key adds (AWS SQS developer guide,
# "Amazon SQS Key management", Configuring AWS KMS permissions: a producer
# needs kms:GenerateDataKey and kms:Decrypt, a consumer kms:Decrypt;
# https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-key-management.html).
# For the table, the key policy AWS documents for DynamoDB lets the table's
# callers use the key through DynamoDB (kms:ViaService); idemq's roles get
# kms:Decrypt for it ("How Amazon DynamoDB uses AWS KMS",
# https://docs.aws.amazon.com/kms/latest/developerguide/services-dynamodb.html).
KMS_SCOPE = {"kms:Decrypt": {"kms_key"}, "kms:GenerateDataKey": {"kms_key"}}


def kms_needs(d: Deployment, actions: dict[str, str]) -> dict[str, str]:
    """The kms actions on the deployment's customer managed key that these
    SQS/DynamoDB actions need (none without a key)."""
    if not d.kms_key:
        return {}
    out: dict[str, str] = {}
    if "sqs:SendMessage" in actions:
        out["kms:GenerateDataKey"] = "SendMessage to a queue encrypted with the key"
        out["kms:Decrypt"] = "SendMessage to a queue encrypted with the key"
    if "sqs:ReceiveMessage" in actions:
        out.setdefault("kms:Decrypt", "ReceiveMessage from a queue encrypted with the key")
    if any(a in actions for a in ("dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:PutItem")):
        out.setdefault("kms:Decrypt", "items of the table encrypted with the key")
    return out


# Actions IAM cannot scope to a resource: a policy grants them on "*".
# https://docs.aws.amazon.com/service-authorization/latest/reference/list_awslambda.html
# (ListEventSourceMappings: no resource type);
# https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazoncloudwatch.html
# (GetMetricData: no resource type).
UNSCOPED = {"lambda:ListEventSourceMappings", "cloudwatch:GetMetricData"}

OPERATOR_SCOPE: dict[str, set[str]] = {
    "sqs:GetQueueUrl": {"source", "dlq"},
    "sqs:GetQueueAttributes": {"source", "dlq"},
    "sqs:SendMessage": {"source", "dlq"},  # send/redrive to the source; import may restore the DLQ
    "sqs:ReceiveMessage": {"dlq"},
    "sqs:ChangeMessageVisibility": {"dlq"},
    "sqs:DeleteMessage": {"dlq"},
    "sqs:ListDeadLetterSourceQueues": {"dlq"},
    "sqs:StartMessageMoveTask": {"dlq"},
    "sqs:ListMessageMoveTasks": {"dlq"},
    "sqs:CancelMessageMoveTask": {"dlq"},
    # Failure records only: a dynamodb:LeadingKeys condition (below).
    "dynamodb:GetItem": {"table"},
    "dynamodb:BatchGetItem": {"table"},
    # `idemq dlq --function`: the consumer's settings from its
    # configuration, its DLQ through its SQS event source.
    "lambda:GetFunctionConfiguration": {"function"},
    "lambda:ListEventSourceMappings": {"*"},
    # `idemq console`: retries and the oldest message's age.
    "cloudwatch:GetMetricData": {"*"},
    **KMS_SCOPE,
}

# `idemq init` alone. Its SetQueueAttributes writes the DLQ's
# RedriveAllowPolicy; the source queue is created with its attributes and
# never changed. The last three are what init may call to turn on
# point-in-time recovery and deletion protection: granted only
# once the code calls them.
BOOTSTRAP_SCOPE: dict[str, set[str]] = {
    "sqs:CreateQueue": {"source", "dlq"},
    "sqs:GetQueueUrl": {"source", "dlq"},
    "sqs:GetQueueAttributes": {"source", "dlq"},
    "sqs:SetQueueAttributes": {"dlq"},
    "dynamodb:CreateTable": {"table"},
    "dynamodb:DescribeTable": {"table"},
    "dynamodb:DescribeTimeToLive": {"table"},
    "dynamodb:UpdateTimeToLive": {"table"},
    "dynamodb:DescribeContinuousBackups": {"table"},
    "dynamodb:UpdateContinuousBackups": {"table"},
    "dynamodb:UpdateTable": {"table"},
}

FUNCTION_SCOPE.update(KMS_SCOPE)


def _role_of(resource: str, d: Deployment) -> str:
    kind, name = arn_key(resource)
    if kind == "sqs" and d.source and name == d.source.name:
        return "source"
    if kind == "sqs" and d.dlq and name == d.dlq.name:
        return "dlq"
    if kind == "table" and name == d.table.get("name"):
        return "table"
    if kind == "log-group" and name == d.function.get("log_group"):
        return "log_group"
    if kind == "function" and name == d.function.get("name"):
        return "function"
    if kind == "*":
        return "*"
    if d.kms_key and resource == d.kms_key:
        return "kms_key"
    return f"other resource {resource}"


def check_grants(
    d: Deployment,
    grants: list[tuple[str, str]],
    needed: dict[str, str],
    scope: dict[str, set[str]],
    who: str,
) -> list[str]:
    """`grants` must be exactly {(a, r) : a needed, r in scope[a]}: nothing
    missing, nothing more, no wildcard."""
    problems = []
    granted: set[tuple[str, str]] = set()
    for action, resource in grants:
        if "*" in action:
            problems.append(f"{who}: wildcard action {action}")
        # The wildcards allowed: a log group's streams ("log-group:NAME:*"),
        # whose names Lambda makes up at run time; a function's versions and
        # aliases ("function:NAME:*"); "*" for an action that takes no
        # resource (UNSCOPED).
        kind = arn_key(resource)[0]
        if "*" in resource and kind not in ("log-group", "function") and not (
            resource == "*" and action in UNSCOPED
        ):
            problems.append(f"{who}: wildcard resource {resource}")
        granted.add((action, _role_of(resource, d)))
    expected: set[tuple[str, str]] = set()
    for action, why in sorted(needed.items()):
        if action not in scope:
            problems.append(
                f"{who}: the code now calls {action} ({why}); decide which resource it needs, "
                f"add it to the scope in tests/infra/checks.py and to both templates"
            )
            continue
        expected |= {(action, r) for r in scope[action]}
    for action, role in sorted(expected - granted):
        problems.append(f"{who}: {action} on the {role} is not granted (needed: {needed.get(action)})")
    for action, role in sorted(granted - expected):
        if action not in needed:
            problems.append(f"{who}: grants {action} on the {role}, which nothing in the code calls")
        else:
            problems.append(
                f"{who}: grants {action} on the {role}; it is only needed on {sorted(scope.get(action, []))}"
            )
    return problems


def check_function_role(d: Deployment, code_actions: dict[str, str]) -> list[str]:
    needed = {**ESM_ACTIONS, **LOG_ACTIONS, **code_actions}
    needed.update(kms_needs(d, needed))
    problems = [f"function role: {u} (its permissions cannot be checked)" for u in d.role_unreadable]
    problems += check_grants(d, d.role_grants, needed, FUNCTION_SCOPE, "function role")
    return problems + check_guards(d, needed)


# idemq's own resources that the deployer's grants must not reach beyond
# what idemq calls.
GUARDED = ("table", "source", "dlq")


def _arn_of(role: str, d: Deployment) -> str:
    if role == "table":
        return f"arn:aws:dynamodb:us-east-1:{ACCOUNT}:table/{d.table.get('name')}"
    q = d.source if role == "source" else d.dlq
    return f"arn:aws:sqs:us-east-1:{ACCOUNT}:{q.name if q else '?'}"


def check_guards(d: Deployment, needed: dict[str, str]) -> list[str]:
    """The function role denies, on idemq's table and both queues, every
    action but what idemq calls there (a Deny with NotAction), so the
    deployer's grants (EffectTableArns, FollowUpQueueArns, extra statements,
    any managed policy, whose contents are unknown here and so taken as `*`
    on `*`) can add nothing on them. Checked both ways: the guards are
    exact, and what each extra grant lets through on each guarded resource
    is within what idemq calls."""
    problems = []
    expected = {r: {a for a in needed if r in FUNCTION_SCOPE.get(a, set())} for r in GUARDED}
    guards: dict[str, set[str]] = {}
    for st in d.role_statements:
        if st.effect == "Deny" and st.not_actions and not st.condition:
            for res in st.resources:
                guards.setdefault(_role_of(res, d), set()).update(st.not_actions)
    for r in GUARDED:
        if r not in guards:
            problems.append(f"function role: no Deny of all but idemq's actions on the {r} (an extra grant could reach it)")
        elif guards[r] != expected[r]:
            problems.append(
                f"function role: the guard on the {r} lets through {sorted(guards[r])}, not exactly {sorted(expected[r])}"
            )
    candidates = [(a, r, "extra grant") for a, r in d.extra_grants]
    candidates += [("*", "*", f"managed policy {arn}") for arn in d.extra_managed]
    for action, resource, source in candidates:
        for r in GUARDED:
            if not fnmatchcase(_arn_of(r, d), resource):
                continue
            # Through the guard: the actions it does not deny that the grant names.
            through = {a for a in guards[r] if fnmatchcase(a, action)} if r in guards else {action}
            beyond = sorted(through - expected[r])
            if beyond:
                problems.append(
                    f"function role: {source} ({action} on {resource}) grants {beyond} on idemq's {r}, "
                    f"beyond what idemq calls"
                )
    return problems


def key_prefix(d: Deployment) -> str:
    """The reserved key prefix the function uses (IDEMQ_KEY_PREFIX, default
    src/config/layout.rs `idemq#`)."""
    return d.function["env"].get("IDEMQ_KEY_PREFIX", "idemq#")


# Fine-grained access: dynamodb:LeadingKeys is the partition key of the items
# a request names; ForAllValues: every item of a BatchGetItem must match.
# DynamoDB developer guide, "Using IAM policy conditions for fine-grained
# access control":
# https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/specifying-conditions.html
def reserved_keys_condition(d: Deployment, quantifier: str) -> dict[str, dict[str, list[str]]]:
    return {f"{quantifier}:StringLike": {"dynamodb:LeadingKeys": [f"{key_prefix(d)}*"]}}


def check_operator_policy(d: Deployment, cli_actions: dict[str, str]) -> list[str]:
    if d.operator_grants is None or d.operator_statements is None:
        return ["no operator policy although it was asked for"]
    needed = {**cli_actions, **kms_needs(d, cli_actions)}
    problems = check_grants(d, d.operator_grants, needed, OPERATOR_SCOPE, "operator policy")
    # The operator reads failure records, never the ledger's own items (which
    # may hold payload data): every table read is limited to the reserved keys.
    want = reserved_keys_condition(d, "ForAllValues")
    for st in d.operator_statements:
        reads = [a for a in st.actions if a.startswith("dynamodb:")]
        if st.effect == "Allow" and reads and st.condition != want:
            problems.append(
                f"operator policy: {reads} allowed with condition {st.condition}, not only on the reserved keys {want}"
            )
    return problems


def check_bootstrap_policy(d: Deployment, init_actions: dict[str, str]) -> list[str]:
    if d.bootstrap_grants is None:
        return ["no bootstrap policy although it was asked for"]
    return check_grants(d, d.bootstrap_grants, init_actions, BOOTSTRAP_SCOPE, "bootstrap policy")


# ---------------------------------------------------------------------------
# Metrics and alarms
# ---------------------------------------------------------------------------


def emitted_metrics(repo: Path) -> tuple[str, str, set[str]]:
    """(namespace, dimension, metric names) as src/metrics.rs emits them."""
    src = (repo / "src" / "metrics.rs").read_text()
    namespace = re.search(r'pub const NAMESPACE: &str = "([^"]+)"', src).group(1)  # type: ignore[union-attr]
    dimension = re.search(r'pub const QUEUE_DIMENSION: &str = "([^"]+)"', src).group(1)  # type: ignore[union-attr]
    names = set(re.findall(r'\("(\w+)",\s*self\.\w+\)', src))
    names |= set(re.findall(r'const JOB_DURATION: &str = "(\w+)"', src))
    if not {"JobsDeadLettered", "JobsRetried", "JobsConflict", "BatchSize"} <= names:
        raise AssertionError(f"could not read the metric names from src/metrics.rs (found {sorted(names)})")
    return namespace, dimension, names


def _has(alarm: Alarm, ns: str, metric: str, dims: dict[str, str]) -> bool:
    return any(m == (ns, metric, dims) for m in alarm.metrics)


def _sums(expression: str, alarm: Alarm) -> bool:
    """The expression adds its two metric ids (visible + in flight)."""
    ids = re.findall(r"[a-z_][a-z0-9_]*", expression)
    return "+" in expression and len(set(ids)) >= 2 and "-" not in expression


def check_alarms(d: Deployment, repo: Path, topic: str | None) -> list[str]:
    ns, dim, names = emitted_metrics(repo)
    if d.source is None or d.dlq is None:
        return ["no source queue / DLQ to alarm on"]
    q = {dim: d.source.name}  # QueueInfo.name: the queue's name, not its URL
    fn = {"FunctionName": d.function["name"]}
    required = {
        "dead-letter rate": lambda a: (
            _has(a, ns, "JobsDeadLettered", q) and _has(a, ns, "BatchSize", q) and bool(a.expression)
        ),
        "retry rate": lambda a: _has(a, ns, "JobsRetried", q) and _has(a, ns, "BatchSize", q) and bool(a.expression),
        "payload conflicts > 0": lambda a: (
            _has(a, ns, "JobsConflict", q) and a.comparison == "GreaterThanThreshold" and a.threshold == 0
        ),
        # One job failed by the deployment means every job fails alike:
        # the first one alarms, within one period.
        "deployment errors >= 1": lambda a: (
            _has(a, ns, "JobsMisconfigured", q)
            and a.evaluation_periods == 1
            and (
                (a.comparison == "GreaterThanOrEqualToThreshold" and a.threshold <= 1)
                or (a.comparison == "GreaterThanThreshold" and a.threshold < 1)
            )
        ),
        # Visible + in flight: `idemq dlq` reads letters by receiving them,
        # which takes them out of ApproximateNumberOfMessagesVisible; an
        # alarm on that alone goes OK while the letters are still there.
        "DLQ depth > 0": lambda a: (
            _has(a, "AWS/SQS", "ApproximateNumberOfMessagesVisible", {"QueueName": d.dlq.name})
            and a.comparison == "GreaterThanThreshold"
            and a.threshold == 0
        ),
        "DLQ depth counting letters being read": lambda a: (
            _has(a, "AWS/SQS", "ApproximateNumberOfMessagesVisible", {"QueueName": d.dlq.name})
            and _has(a, "AWS/SQS", "ApproximateNumberOfMessagesNotVisible", {"QueueName": d.dlq.name})
            and bool(a.expression)
            and _sums(a.expression, a)
        ),
        "oldest message age": lambda a: _has(
            a, "AWS/SQS", "ApproximateAgeOfOldestMessage", {"QueueName": d.source.name}
        ),
        "function errors": lambda a: _has(a, "AWS/Lambda", "Errors", fn),
        "function throttles": lambda a: _has(a, "AWS/Lambda", "Throttles", fn),
    }
    problems = [f"no alarm on {what}" for what, ok in required.items() if not any(ok(a) for a in d.alarms)]
    for a in d.alarms:
        for m_ns, metric, _ in a.metrics:
            if m_ns == ns and metric not in names:
                problems.append(f"alarm {a.name} watches {ns}/{metric}, which src/metrics.rs never emits")
        for what, got in (("alarm", a.actions), ("OK", a.ok_actions)):
            if topic is not None and got != [topic]:
                problems.append(f"alarm {a.name} notifies {got} on {what}, not the topic {topic}")
            if topic is None and got:
                problems.append(f"alarm {a.name} has {what} actions {got} although no topic was given")
    # The dashboard shows the same series.
    series: set[tuple[str, ...]] = set()
    for w in (d.dashboard or {}).get("widgets", []):
        for row in w.get("properties", {}).get("metrics", []):
            plain = [x for x in row if isinstance(x, str)]
            if len(plain) >= 4:
                series.add(tuple(plain[:4]))
    wanted = [
        (ns, n, dim, d.source.name)
        for n in (
            "JobsSucceeded",
            "JobsDuplicate",
            "JobsRetried",
            "JobsDeadLettered",
            "JobsConflict",
            "JobsMisconfigured",
            "BatchSize",
            "JobDuration",
        )
    ]
    wanted += [
        ("AWS/SQS", "ApproximateAgeOfOldestMessage", "QueueName", d.source.name),
        ("AWS/SQS", "ApproximateNumberOfMessagesVisible", "QueueName", d.dlq.name),
        ("AWS/SQS", "ApproximateNumberOfMessagesNotVisible", "QueueName", d.dlq.name),
        ("AWS/Lambda", "Errors", "FunctionName", d.function["name"]),
        ("AWS/Lambda", "Throttles", "FunctionName", d.function["name"]),
    ]
    problems += [f"dashboard lacks {'/'.join(s[:2])} for {s[3]}" for s in wanted if s not in series]
    problems += [
        f"dashboard shows {s[0]}/{s[1]}, which src/metrics.rs never emits"
        for s in series
        if s[0] == ns and s[1] not in names
    ]
    return problems
