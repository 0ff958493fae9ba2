"""What a template deploys, in one shape for SAM and Terraform, and the rules.

`from_sam` and `from_terraform` read a template (for one set of inputs) into
a `Deployment`; each rule takes a Deployment and returns what it breaks, as
sentences. The same rules run on both templates, so the two cannot drift
apart on what matters.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import cfn_eval
import tf_eval

DAY = 24 * 3600
DLQ_RETENTION = 14 * DAY  # src/init.rs DLQ_RETENTION
REPLAY_WINDOW = DAY  # src/config.rs REPLAY_WINDOW
SQS_DEFAULT_VISIBILITY = 30
SQS_DEFAULT_RETENTION = 4 * DAY


# ---------------------------------------------------------------------------
# The shape
# ---------------------------------------------------------------------------


@dataclass
class Queue:
    name: str
    visibility: int
    retention: int
    sse: bool
    redrive_target: str | None = None  # DLQ name
    max_receive_count: int | None = None
    redrive_permission: str | None = None
    redrive_sources: list[str] | None = None  # source queue names


@dataclass
class Alarm:
    name: str
    metrics: list[tuple[str, str, dict[str, str]]]  # (namespace, metric, dimensions)
    expression: str | None
    comparison: str
    threshold: float
    actions: list[str]


@dataclass
class Deployment:
    queues: dict[str, Queue]
    source: Queue | None
    dlq: Queue | None
    table: dict[str, Any]
    function: dict[str, Any]
    esm: dict[str, Any]
    # (action, resource) for every Allow of every policy the function role has
    role_grants: list[tuple[str, str]]
    role_unreadable: list[str]  # attached managed policies etc.: cannot be checked
    operator_grants: list[tuple[str, str]] | None
    alarms: list[Alarm]
    dashboard: dict[str, Any] | None
    notes: list[str] = field(default_factory=list)


def arn_key(arn: str) -> tuple[str, str]:
    """An ARN as (kind, name): ("sqs", q), ("table", t), ("log-group", g), ("*", "*")."""
    if arn == "*":
        return ("*", "*")
    m = re.fullmatch(r"arn:aws:sqs:[^:]+:[^:]+:([^:]+)", arn)
    if m:
        return ("sqs", m.group(1))
    m = re.fullmatch(r"arn:aws:dynamodb:[^:]+:[^:]+:table/([^/]+)", arn)
    if m:
        return ("table", m.group(1))
    # Log streams have run-time names, so the grant names the group's streams:
    # "log-group:NAME:*" (CloudFormation's GetAtt, or Terraform's arn + ":*").
    m = re.fullmatch(r"arn:aws:logs:[^:]+:[^:]+:log-group:([^:*]+)(:\*|:log-stream:\*)?", arn)
    if m:
        return ("log-group", m.group(1))
    return ("other", arn)


def _policy_grants(doc: Any) -> tuple[list[tuple[str, str]], list[str]]:
    if isinstance(doc, str):
        doc = json.loads(doc)
    grants, problems = [], []
    statements = doc.get("Statement", [])
    if isinstance(statements, dict):
        statements = [statements]
    for st in statements:
        for key in ("NotAction", "NotResource"):
            if key in st:
                problems.append(f"statement uses {key}")
        if st.get("Effect", "Allow") != "Allow":
            continue
        actions = st.get("Action", [])
        resources = st.get("Resource", [])
        actions = [actions] if isinstance(actions, str) else actions
        resources = [resources] if isinstance(resources, str) else resources
        for a in actions:
            for r in resources:
                grants.append((a, r))
    return grants, problems


def _redrive(q: Queue, policy: Any) -> None:
    if policy in (None, ""):
        return
    if isinstance(policy, str):
        policy = json.loads(policy)
    q.redrive_target = arn_key(policy["deadLetterTargetArn"])[1]
    q.max_receive_count = int(policy["maxReceiveCount"])


def _redrive_allow(q: Queue, policy: Any) -> None:
    if policy in (None, ""):
        return
    if isinstance(policy, str):
        policy = json.loads(policy)
    q.redrive_permission = policy.get("redrivePermission")
    q.redrive_sources = [arn_key(a)[1] for a in policy.get("sourceQueueArns", [])]


def _int_or_none(v: Any) -> int | None:
    return None if v is None else int(v)


def _finish(d: Deployment) -> Deployment:
    """Finds the source queue (the event source) and its DLQ (its redrive target)."""
    source_name = arn_key(d.esm.get("queue_arn", ""))[1]
    d.source = d.queues.get(source_name)
    if d.source is not None and d.source.redrive_target:
        d.dlq = d.queues.get(d.source.redrive_target)
    return d


# ---------------------------------------------------------------------------
# SAM / CloudFormation
# ---------------------------------------------------------------------------


def from_sam(template: dict[str, Any], params: dict[str, str]) -> Deployment:
    """`template` is the translated (plain CloudFormation) template."""
    s = cfn_eval.Stack(template, params)
    queues: dict[str, Queue] = {}
    for lid in s.of_type("AWS::SQS::Queue"):
        p = s.props(lid)
        q = Queue(
            name=p["QueueName"],
            visibility=int(p.get("VisibilityTimeout", SQS_DEFAULT_VISIBILITY)),
            retention=int(p.get("MessageRetentionPeriod", SQS_DEFAULT_RETENTION)),
            sse=str(p.get("SqsManagedSseEnabled", "false")).lower() == "true" or "KmsMasterKeyId" in p,
        )
        _redrive(q, p.get("RedrivePolicy"))
        _redrive_allow(q, p.get("RedriveAllowPolicy"))
        queues[q.name] = q

    esms = s.of_type("AWS::Lambda::EventSourceMapping")
    if len(esms) != 1:
        raise AssertionError(f"expected one event source mapping, found {sorted(esms)}")
    ep = s.props(next(iter(esms)))
    esm = {
        "queue_arn": ep["EventSourceArn"],
        "function": ep["FunctionName"],
        "batch_size": int(ep.get("BatchSize", 10)),
        "window": int(ep.get("MaximumBatchingWindowInSeconds", 0)),
        "max_concurrency": _int_or_none(ep.get("ScalingConfig", {}).get("MaximumConcurrency")),
        "response_types": ep.get("FunctionResponseTypes", []),
        "enabled": ep.get("Enabled", True),
    }

    functions = {s._ref(lid): lid for lid in s.of_type("AWS::Lambda::Function")}
    fn_id = functions[esm["function"]]
    fp = s.props(fn_id)
    function = {
        "name": esm["function"],
        "timeout": int(fp.get("Timeout", 3)),
        "memory": int(fp.get("MemorySize", 128)),
        "runtime": fp.get("Runtime"),
        "architectures": fp.get("Architectures", ["x86_64"]),
        "env": {k: str(v) for k, v in fp.get("Environment", {}).get("Variables", {}).items()},
        "log_group": fp.get("LoggingConfig", {}).get("LogGroup", f"/aws/lambda/{esm['function']}"),
    }

    table_name = function["env"].get("IDEMQ_TABLE")
    table: dict[str, Any] = {}
    for lid in s.of_type("AWS::DynamoDB::Table"):
        p = s.props(lid)
        if p.get("TableName") != table_name:
            continue
        table = {
            "name": p["TableName"],
            "billing": p.get("BillingMode", "PROVISIONED"),
            "key": [(k["AttributeName"], k["KeyType"]) for k in p.get("KeySchema", [])],
            "attributes": {a["AttributeName"]: a["AttributeType"] for a in p.get("AttributeDefinitions", [])},
            "ttl_attribute": p.get("TimeToLiveSpecification", {}).get("AttributeName"),
            "ttl_enabled": p.get("TimeToLiveSpecification", {}).get("Enabled") in (True, "true"),
            "pitr": p.get("PointInTimeRecoverySpecification", {}).get("PointInTimeRecoveryEnabled") in (True, "true"),
            "sse": p.get("SSESpecification", {}).get("SSEEnabled") in (True, "true"),
        }

    # Everything the function's role may do: its inline policies, and any
    # policy resource attached to it.
    role_arn = fp["Role"]
    role_id = role_arn.rsplit("/", 1)[-1]
    grants: list[tuple[str, str]] = []
    unreadable: list[str] = []
    rp = s.props(role_id)
    for pol in rp.get("Policies", []):
        g, problems = _policy_grants(pol["PolicyDocument"])
        grants += g
        unreadable += problems
    unreadable += [f"managed policy {a}" for a in rp.get("ManagedPolicyArns", [])]
    operator: list[tuple[str, str]] | None = None
    for type_ in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
        for lid in s.of_type(type_):
            p = s.props(lid)
            g, problems = _policy_grants(p["PolicyDocument"])
            if role_id in p.get("Roles", []):
                grants += g
                unreadable += problems
            elif not p.get("Roles") and not p.get("Users") and not p.get("Groups"):
                operator = (operator or []) + g

    alarms = []
    for lid in s.of_type("AWS::CloudWatch::Alarm"):
        p = s.props(lid)
        metrics, expression = [], None
        if "MetricName" in p:
            metrics.append((p["Namespace"], p["MetricName"], {d["Name"]: d["Value"] for d in p.get("Dimensions", [])}))
        for mq in p.get("Metrics", []):
            if "Expression" in mq:
                expression = mq["Expression"]
            if "MetricStat" in mq:
                m = mq["MetricStat"]["Metric"]
                metrics.append(
                    (m["Namespace"], m["MetricName"], {d["Name"]: d["Value"] for d in m.get("Dimensions", [])})
                )
        alarms.append(
            Alarm(
                name=p.get("AlarmName", lid),
                metrics=metrics,
                expression=expression,
                comparison=p["ComparisonOperator"],
                threshold=float(p["Threshold"]),
                actions=list(p.get("AlarmActions", [])),
            )
        )
    dashboards = s.of_type("AWS::CloudWatch::Dashboard")
    dashboard = json.loads(s.props(next(iter(dashboards)))["DashboardBody"]) if dashboards else None

    return _finish(
        Deployment(queues, None, None, table, function, esm, grants, unreadable, operator, alarms, dashboard)
    )


# ---------------------------------------------------------------------------
# Terraform
# ---------------------------------------------------------------------------


def from_terraform(m: tf_eval.Module) -> Deployment:
    queues: dict[str, Queue] = {}
    for b in m.resources_of("aws_sqs_queue").values():
        q = Queue(
            name=m.arg(b, "name"),
            visibility=int(m.arg(b, "visibility_timeout_seconds", SQS_DEFAULT_VISIBILITY)),
            retention=int(m.arg(b, "message_retention_seconds", SQS_DEFAULT_RETENTION)),
            sse=m.arg(b, "sqs_managed_sse_enabled", False) is True or "kms_master_key_id" in b.attributes,
        )
        _redrive(q, m.arg(b, "redrive_policy"))
        _redrive_allow(q, m.arg(b, "redrive_allow_policy"))
        queues[q.name] = q
    for b in m.resources_of("aws_sqs_queue_redrive_allow_policy").values():
        url = m.arg(b, "queue_url")
        _redrive_allow(queues[url.rsplit("/", 1)[-1]], m.arg(b, "redrive_allow_policy"))
    for b in m.resources_of("aws_sqs_queue_redrive_policy").values():
        url = m.arg(b, "queue_url")
        _redrive(queues[url.rsplit("/", 1)[-1]], m.arg(b, "redrive_policy"))

    esms = m.resources_of("aws_lambda_event_source_mapping")
    if len(esms) != 1:
        raise AssertionError(f"expected one event source mapping, found {sorted(esms)}")
    eb = next(iter(esms.values()))
    scaling = eb.sub("scaling_config")
    esm = {
        "queue_arn": m.arg(eb, "event_source_arn"),
        "function": m.arg(eb, "function_name"),
        "batch_size": int(m.arg(eb, "batch_size", 10)),
        "window": int(m.arg(eb, "maximum_batching_window_in_seconds", 0)),
        "max_concurrency": _int_or_none(m.arg(scaling[0], "maximum_concurrency")) if scaling else None,
        "response_types": m.arg(eb, "function_response_types", []),
        "enabled": m.arg(eb, "enabled", True),
    }

    fn_name = esm["function"].rsplit(":", 1)[-1]
    fns = {m.arg(b, "function_name"): b for b in m.resources_of("aws_lambda_function").values()}
    fb = fns[fn_name]
    env_blocks = fb.sub("environment")
    logging = fb.sub("logging_config")
    function = {
        "name": fn_name,
        "timeout": int(m.arg(fb, "timeout", 3)),
        "memory": int(m.arg(fb, "memory_size", 128)),
        "runtime": m.arg(fb, "runtime"),
        "architectures": m.arg(fb, "architectures", ["x86_64"]),
        "env": {k: str(v) for k, v in (m.arg(env_blocks[0], "variables", {}) if env_blocks else {}).items()},
        "log_group": m.arg(logging[0], "log_group") if logging else f"/aws/lambda/{fn_name}",
    }

    table: dict[str, Any] = {}
    for b in m.resources_of("aws_dynamodb_table").values():
        if m.arg(b, "name") != function["env"].get("IDEMQ_TABLE"):
            continue
        ttl, pitr, sse = b.sub("ttl"), b.sub("point_in_time_recovery"), b.sub("server_side_encryption")
        key = [(m.arg(b, "hash_key"), "HASH")]
        if "range_key" in b.attributes:
            key.append((m.arg(b, "range_key"), "RANGE"))
        table = {
            "name": m.arg(b, "name"),
            "billing": m.arg(b, "billing_mode", "PROVISIONED"),
            "key": key,
            "attributes": {m.arg(a, "name"): m.arg(a, "type") for a in b.sub("attribute")},
            "ttl_attribute": m.arg(ttl[0], "attribute_name") if ttl else None,
            "ttl_enabled": bool(ttl) and m.arg(ttl[0], "enabled", False) is True,
            "pitr": bool(pitr) and m.arg(pitr[0], "enabled", False) is True,
            "sse": bool(sse) and m.arg(sse[0], "enabled", False) is True,
        }

    role_arn = m.arg(fb, "role")
    role_name = role_arn.rsplit("/", 1)[-1]
    grants: list[tuple[str, str]] = []
    unreadable: list[str] = []
    for b in m.resources_of("aws_iam_role").values():
        if m.arg(b, "name") == role_name:
            unreadable += [f"managed policy {a}" for a in m.arg(b, "managed_policy_arns", []) or []]
            for ip in b.sub("inline_policy"):
                g, problems = _policy_grants(m.arg(ip, "policy"))
                grants += g
                unreadable += problems
    for b in m.resources_of("aws_iam_role_policy").values():
        if m.arg(b, "role") == role_name:
            g, problems = _policy_grants(m.arg(b, "policy"))
            grants += g
            unreadable += problems
    attached: set[str] = set()
    for b in m.resources_of("aws_iam_role_policy_attachment").values():
        attached.add(str(m.arg(b, "policy_arn")))
        if m.arg(b, "role") == role_name:
            unreadable.append(f"attached policy {m.arg(b, 'policy_arn')}")
    operator: list[tuple[str, str]] | None = None
    for b in m.resources_of("aws_iam_policy").values():
        g, _ = _policy_grants(m.arg(b, "policy"))
        operator = (operator or []) + g

    alarms = []
    for b in m.resources_of("aws_cloudwatch_metric_alarm").values():
        metrics, expression = [], None
        if "metric_name" in b.attributes:
            metrics.append((m.arg(b, "namespace"), m.arg(b, "metric_name"), m.arg(b, "dimensions", {})))
        for mq in b.sub("metric_query"):
            if "expression" in mq.attributes:
                expression = m.arg(mq, "expression")
            for mb in mq.sub("metric"):
                metrics.append((m.arg(mb, "namespace"), m.arg(mb, "metric_name"), m.arg(mb, "dimensions", {})))
        alarms.append(
            Alarm(
                name=m.arg(b, "alarm_name"),
                metrics=metrics,
                expression=expression,
                comparison=m.arg(b, "comparison_operator"),
                threshold=float(m.arg(b, "threshold")),
                actions=list(m.arg(b, "alarm_actions", []) or []),
            )
        )
    dashboards = m.resources_of("aws_cloudwatch_dashboard")
    dashboard = json.loads(m.arg(next(iter(dashboards.values())), "dashboard_body")) if dashboards else None

    return _finish(
        Deployment(queues, None, None, table, function, esm, grants, unreadable, operator, alarms, dashboard)
    )


def terraform_inputs_from_example(example_dir: Path, module_name: str) -> tuple[Path, dict[str, Any]]:
    """The module an example root calls, and the inputs it passes."""
    root = tf_eval.parse_dir(example_dir)
    m = tf_eval.Module(root, {}, path_module=str(example_dir))
    for b in root.sub("module"):
        if b.labels[0] == module_name:
            source = (example_dir / m.arg(b, "source")).resolve()
            inputs = {k: m.arg(b, k) for k in b.attributes if k not in ("source", "version", "providers", "count")}
            return source, inputs
    raise KeyError(module_name)


# ---------------------------------------------------------------------------
# The rules
# ---------------------------------------------------------------------------

_UNITS = {
    "s": 1,
    "sec": 1,
    "secs": 1,
    "m": 60,
    "min": 60,
    "mins": 60,
    "h": 3600,
    "hr": 3600,
    "hrs": 3600,
    "hour": 3600,
    "hours": 3600,
    "d": DAY,
    "day": DAY,
    "days": DAY,
    "w": 7 * DAY,
    "week": 7 * DAY,
    "weeks": 7 * DAY,
}


def parse_duration(text: str) -> int:
    """Seconds in a humantime duration ("21d", "504h", "1d 12h"), as idemq reads IDEMQ_MARKER_TTL."""
    parts = re.findall(r"(\d+)\s*([a-z]+)", text.strip())
    if not parts or re.sub(r"(\d+)\s*([a-z]+)|\s+", "", text.strip()):
        raise ValueError(f"not a duration: {text!r}")
    total = 0
    for n, unit in parts:
        if unit not in _UNITS:
            raise ValueError(f"unknown unit {unit!r} in {text!r}")
        total += int(n) * _UNITS[unit]
    return total


def _queues_found(d: Deployment) -> list[str]:
    if d.source is None:
        return ["the event source mapping's queue is not a queue of this template"]
    if d.dlq is None:
        return [f"source queue {d.source.name} has no RedrivePolicy to a DLQ of this template"]
    return []


def rule_visibility_timeout(d: Deployment) -> list[str]:
    if e := _queues_found(d):
        return e
    need = 6 * d.function["timeout"] + d.esm["window"]
    if d.source.visibility < need:
        return [
            f"source queue visibility timeout {d.source.visibility}s < 6 x function timeout "
            f"{d.function['timeout']}s + batching window {d.esm['window']}s = {need}s"
        ]
    return []


def rule_max_receive_count(d: Deployment) -> list[str]:
    if e := _queues_found(d):
        return e
    if d.source.max_receive_count is None or d.source.max_receive_count < 5:
        return [f"maxReceiveCount {d.source.max_receive_count} < 5"]
    return []


def rule_dlq_retention(d: Deployment) -> list[str]:
    if e := _queues_found(d):
        return e
    out = []
    if d.dlq.retention != DLQ_RETENTION:
        out.append(f"DLQ retention {d.dlq.retention}s is not 14 days ({DLQ_RETENTION}s)")
    if d.dlq.retention <= d.source.retention:
        out.append(f"DLQ retention {d.dlq.retention}s is not longer than the source's {d.source.retention}s")
    return out


def rule_redrive_allow_policy(d: Deployment) -> list[str]:
    if e := _queues_found(d):
        return e
    if d.dlq.redrive_permission != "byQueue" or d.dlq.redrive_sources != [d.source.name]:
        return [
            f"DLQ RedriveAllowPolicy is {d.dlq.redrive_permission} {d.dlq.redrive_sources}, "
            f"not byQueue naming only {d.source.name}"
        ]
    return []


def rule_marker_ttl(d: Deployment) -> list[str]:
    if e := _queues_found(d):
        return e
    raw = d.function["env"].get("IDEMQ_MARKER_TTL")
    if raw is None:
        return ["IDEMQ_MARKER_TTL is not passed to the function (its default ignores this template's retentions)"]
    ttl = parse_duration(raw)
    need = d.source.retention + d.dlq.retention + REPLAY_WINDOW
    if ttl < need:
        return [
            f"IDEMQ_MARKER_TTL {raw} ({ttl}s) < source retention {d.source.retention}s + DLQ retention "
            f"{d.dlq.retention}s + replay window {REPLAY_WINDOW}s = {need}s"
        ]
    return []


def rule_encryption(d: Deployment) -> list[str]:
    if e := _queues_found(d):
        return e
    out = [f"queue {q.name} is not encrypted at rest" for q in (d.source, d.dlq) if not q.sse]
    if not d.table.get("sse"):
        out.append(f"table {d.table.get('name')} has no SSESpecification/server_side_encryption enabled")
    return out


def rule_pitr(d: Deployment) -> list[str]:
    return [] if d.table.get("pitr") else [f"table {d.table.get('name')} has no point-in-time recovery"]


def rule_function_contract(d: Deployment) -> list[str]:
    """The batch contract and the layout idemq expects (what `idemq init` creates)."""
    out = []
    if "ReportBatchItemFailures" not in (d.esm["response_types"] or []):
        out.append("event source mapping lacks FunctionResponseTypes ReportBatchItemFailures")
    if d.esm.get("max_concurrency") is None:
        out.append("event source mapping has no ScalingConfig.MaximumConcurrency")
    if d.function["runtime"] != "provided.al2023" or d.function["architectures"] != ["arm64"]:
        out.append(f"function is {d.function['runtime']} {d.function['architectures']}, not provided.al2023 arm64")
    if not d.table:
        out.append("IDEMQ_TABLE does not name this template's table")
        return out
    if d.table["key"] != [("pk", "HASH")] or d.table["attributes"].get("pk") != "S":
        out.append(f"table key is {d.table['key']} {d.table['attributes']}, not one string HASH key pk")
    if d.table["billing"] != "PAY_PER_REQUEST":
        out.append(f"table billing is {d.table['billing']}, not PAY_PER_REQUEST (as idemq init)")
    if d.table["ttl_attribute"] != "expires_at" or not d.table["ttl_enabled"]:
        out.append("table TTL is not enabled on expires_at (markers would never expire)")
    return out


RULES: dict[str, Callable[[Deployment], list[str]]] = {
    "visibility_timeout": rule_visibility_timeout,
    "max_receive_count": rule_max_receive_count,
    "dlq_retention": rule_dlq_retention,
    "redrive_allow_policy": rule_redrive_allow_policy,
    "marker_ttl": rule_marker_ttl,
    "encryption": rule_encryption,
    "pitr": rule_pitr,
    "function_contract": rule_function_contract,
}


def violations(d: Deployment) -> dict[str, list[str]]:
    return {name: v for name, rule in RULES.items() if (v := rule(d))}
