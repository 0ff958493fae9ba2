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
REPLAY_WINDOW = DAY  # src/config/mod.rs REPLAY_WINDOW
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
    kms_key: str = ""  # KmsMasterKeyId ("" = SQS-managed SSE or none)


@dataclass
class Alarm:
    name: str
    metrics: list[tuple[str, str, dict[str, str]]]  # (namespace, metric, dimensions)
    expression: str | None
    comparison: str
    threshold: float
    actions: list[str]
    evaluation_periods: int = 1
    ok_actions: list[str] = field(default_factory=list)


@dataclass
class Statement:
    """One policy statement, normalised: lists everywhere."""

    effect: str
    actions: list[str]
    resources: list[str]
    condition: dict[str, dict[str, list[str]]]  # operator -> key -> values
    principals: dict[str, list[str]] | str | None = None  # {"AWS": [..]} or "*"
    not_actions: list[str] = field(default_factory=list)  # a Deny of all but these


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
    role_statements: list[Statement] = field(default_factory=list)
    role_arn: str = ""
    operator_statements: list[Statement] | None = None
    bootstrap_grants: list[tuple[str, str]] | None = None
    bootstrap_statements: list[Statement] | None = None
    # queue name -> the statements of its queue policy (absent: no policy)
    queue_policies: dict[str, list[Statement]] = field(default_factory=dict)
    producers: list[str] = field(default_factory=list)  # the producer principals asked for
    kms_key: str = ""  # the customer managed key asked for ("" = AWS managed)
    # What the deployer is refused before anything is created (SAM Rules,
    # Terraform preconditions), as sentences: a rule may rely on them.
    refusals: list[str] = field(default_factory=list)
    # The deployer's grants for the handler's own resources (effect tables,
    # follow-up queues, extra statements), and the managed policies attached
    # (their contents unknown here): checked only against idemq's resources.
    extra_grants: list[tuple[str, str]] = field(default_factory=list)
    extra_managed: list[str] = field(default_factory=list)


# Inline policies of the function role that hold the deployer's grants.
EXTRA_POLICY_NAMES = {"effect-tables", "follow-up-queues", "handler"}


def arn_key(arn: str) -> tuple[str, str]:
    """An ARN as (kind, name): ("sqs", q), ("table", t), ("log-group", g),
    ("function", f), ("*", "*")."""
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
    # A function, or any of its versions and aliases ("function:NAME:*").
    m = re.fullmatch(r"arn:aws:lambda:[^:]+:[^:]+:function:([^:*]+)(:\*)?", arn)
    if m:
        return ("function", m.group(1))
    return ("other", arn)


def _listed(v: Any) -> list[Any]:
    return [v] if isinstance(v, (str, int, bool)) else list(v or [])


def policy_statements(doc: Any) -> list[Statement]:
    if isinstance(doc, str):
        doc = json.loads(doc)
    statements = doc.get("Statement", [])
    if isinstance(statements, dict):
        statements = [statements]
    out = []
    for st in statements:
        principal = st.get("Principal")
        if isinstance(principal, dict):
            principal = {k: [str(x) for x in _listed(v)] for k, v in principal.items()}
        out.append(
            Statement(
                effect=st.get("Effect", "Allow"),
                actions=_listed(st.get("Action")),
                resources=_listed(st.get("Resource")),
                condition={
                    op: {
                        k: [str(x).lower() if isinstance(x, bool) else str(x) for x in _listed(v)]
                        for k, v in kv.items()
                    }
                    for op, kv in (st.get("Condition") or {}).items()
                },
                principals=principal,
                not_actions=_listed(st.get("NotAction")),
            )
        )
    return out


def _policy_grants(doc: Any) -> tuple[list[tuple[str, str]], list[str]]:
    if isinstance(doc, str):
        doc = json.loads(doc)
    grants, problems = [], []
    statements = doc.get("Statement", [])
    if isinstance(statements, dict):
        statements = [statements]
    for st in statements:
        for key in ("NotAction", "NotResource", "NotPrincipal"):
            # A Deny of all but some actions is a guard, read as such (an
            # Allow of all but some would grant what nobody listed).
            if key in st and not (key == "NotAction" and st.get("Effect") == "Deny"):
                problems.append(f"statement uses {key}")
    for st in policy_statements(doc):
        if st.effect != "Allow":
            continue
        for a in st.actions:
            for r in st.resources:
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


class _Stacks:
    """A stack and the stacks nested in it, read as one: resources by
    logical id (unique across them), each resolved in its own stack."""

    def __init__(self, top: cfn_eval.Stack):
        self.top = top
        self.owner: dict[str, cfn_eval.Stack] = {}
        for st in top.stacks():
            for lid in st.resources:
                if lid in self.owner:
                    raise AssertionError(f"logical id {lid} is in two stacks")
                self.owner[lid] = st

    def of_type(self, type_: str) -> dict[str, dict[str, Any]]:
        return {k: v for st in self.top.stacks() for k, v in st.of_type(type_).items()}

    def props(self, lid: str) -> dict[str, Any]:
        return self.owner[lid].props(lid)

    def ref(self, lid: str) -> Any:
        return self.owner[lid]._ref(lid)

    def stack_of(self, type_: str) -> cfn_eval.Stack:
        """The one stack that has resources of this type (the idemq stack)."""
        owners = {id(self.owner[lid]): self.owner[lid] for lid in self.of_type(type_)}
        if len(owners) != 1:
            raise AssertionError(f"{type_} in {len(owners)} stacks")
        return next(iter(owners.values()))


def from_sam(
    template: dict[str, Any],
    params: dict[str, str],
    nested: dict[str, tuple[dict[str, Any], dict[str, str]]] | None = None,
) -> Deployment:
    """`template` is the translated (plain CloudFormation) template; `nested`
    the templates of its nested stacks, with parameter overrides."""
    s = _Stacks(cfn_eval.Stack(template, params, nested))
    idemq = s.stack_of("AWS::SQS::Queue")
    queues: dict[str, Queue] = {}
    for lid in s.of_type("AWS::SQS::Queue"):
        p = s.props(lid)
        q = Queue(
            name=p["QueueName"],
            visibility=int(p.get("VisibilityTimeout", SQS_DEFAULT_VISIBILITY)),
            retention=int(p.get("MessageRetentionPeriod", SQS_DEFAULT_RETENTION)),
            sse=str(p.get("SqsManagedSseEnabled", "false")).lower() == "true" or "KmsMasterKeyId" in p,
            kms_key=p.get("KmsMasterKeyId", ""),
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

    functions = {s.ref(lid): lid for lid in s.of_type("AWS::Lambda::Function")}
    fn_id = functions[esm["function"]]
    fp = s.props(fn_id)
    function = {
        "name": esm["function"],
        "timeout": int(fp.get("Timeout", 3)),
        "memory": int(fp.get("MemorySize", 128)),
        "runtime": fp.get("Runtime"),
        "package_type": fp.get("PackageType", "Zip"),
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
            "kms_key": p.get("SSESpecification", {}).get("KMSMasterKeyId", ""),
            "deletion_protection": str(p.get("DeletionProtectionEnabled", "false")).lower() == "true",
        }

    # Everything the function's role may do: its inline policies, and any
    # policy resource attached to it. The policies for the handler's own
    # resources (EXTRA_POLICY_NAMES) and the managed policies attached
    # (ExtraPolicyArns) are the deployer's: kept apart.
    role_arn = fp["Role"]
    role_id = role_arn.rsplit("/", 1)[-1]
    grants: list[tuple[str, str]] = []
    extra: list[tuple[str, str]] = []
    unreadable: list[str] = []
    role_statements: list[Statement] = []
    rp = s.props(role_id)
    for pol in rp.get("Policies", []):
        g, problems = _policy_grants(pol["PolicyDocument"])
        if pol["PolicyName"] in EXTRA_POLICY_NAMES:
            extra += g
        else:
            grants += g
        unreadable += problems
        role_statements += policy_statements(pol["PolicyDocument"])
    managed = [a for a in rp.get("ManagedPolicyArns", []) if a]
    # The CLI's two opt-in policies, attached to nothing (the deployer
    # attaches them): OperatorPolicy and BootstrapPolicy.
    unattached: dict[str, tuple[list[tuple[str, str]], list[Statement]]] = {}
    for type_ in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
        for lid in s.of_type(type_):
            p = s.props(lid)
            g, problems = _policy_grants(p["PolicyDocument"])
            if role_id in p.get("Roles", []):
                grants += g
                unreadable += problems
                role_statements += policy_statements(p["PolicyDocument"])
            elif not p.get("Roles") and not p.get("Users") and not p.get("Groups"):
                unattached[lid] = (g, policy_statements(p["PolicyDocument"]))
    others = sorted(set(unattached) - {"OperatorPolicy", "BootstrapPolicy"})
    if others:
        raise AssertionError(f"unattached policies other than OperatorPolicy/BootstrapPolicy: {others}")
    operator, operator_st = unattached.get("OperatorPolicy", (None, None))
    bootstrap, bootstrap_st = unattached.get("BootstrapPolicy", (None, None))

    queue_policies: dict[str, list[Statement]] = {}
    for lid in s.of_type("AWS::SQS::QueuePolicy"):
        p = s.props(lid)
        for url in p["Queues"]:
            queue_policies.setdefault(url.rsplit("/", 1)[-1], []).extend(policy_statements(p["PolicyDocument"]))
    producers = [x for x in _listed(idemq.params.get("ProducerPrincipalArns", "").split(",")) if x]

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
                evaluation_periods=int(p["EvaluationPeriods"]),
                ok_actions=list(p.get("OKActions", [])),
            )
        )
    dashboards = s.of_type("AWS::CloudWatch::Dashboard")
    dashboard = json.loads(s.props(next(iter(dashboards)))["DashboardBody"]) if dashboards else None

    d = Deployment(queues, None, None, table, function, esm, grants, unreadable, operator, alarms, dashboard)
    d.role_statements, d.role_arn = role_statements, role_arn
    d.extra_grants, d.extra_managed = extra, managed
    d.operator_statements, d.bootstrap_grants, d.bootstrap_statements = operator_st, bootstrap, bootstrap_st
    d.queue_policies, d.producers = queue_policies, producers
    d.kms_key = idemq.params.get("KmsKeyArn", "")
    d.refusals = cfn_eval.rule_refusals(idemq.t, idemq.params)
    return _finish(d)


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
            sse=m.arg(b, "sqs_managed_sse_enabled", False) is True or bool(m.arg(b, "kms_master_key_id")),
            kms_key=m.arg(b, "kms_master_key_id") or "",
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
        "package_type": m.arg(fb, "package_type", "Zip"),
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
            "kms_key": (m.arg(sse[0], "kms_key_arn") or "") if sse else "",
            "deletion_protection": m.arg(b, "deletion_protection_enabled", False) is True,
        }

    role_arn = m.arg(fb, "role")
    role_name = role_arn.rsplit("/", 1)[-1]
    grants: list[tuple[str, str]] = []
    unreadable: list[str] = []
    role_statements: list[Statement] = []
    for b in m.resources_of("aws_iam_role").values():
        if m.arg(b, "name") == role_name:
            unreadable += [f"managed policy {a}" for a in m.arg(b, "managed_policy_arns", []) or []]
            for ip in b.sub("inline_policy"):
                g, problems = _policy_grants(m.arg(ip, "policy"))
                grants += g
                unreadable += problems
                role_statements += policy_statements(m.arg(ip, "policy"))
    extra: list[tuple[str, str]] = []
    for b in m.resources_of("aws_iam_role_policy").values():
        if m.arg(b, "role") == role_name:
            g, problems = _policy_grants(m.arg(b, "policy"))
            if m.arg(b, "name") in EXTRA_POLICY_NAMES:
                extra += g
            else:
                grants += g
            unreadable += problems
            role_statements += policy_statements(m.arg(b, "policy"))
    managed: list[str] = []
    for b in m.resources_of("aws_iam_role_policy_attachment").values():
        for i in range(m.count(b)):
            m.count_index = i
            if m.arg(b, "role") == role_name:
                managed.append(str(m.arg(b, "policy_arn")))
        m.count_index = 0
    # The CLI's two opt-in policies: aws_iam_policy.operator and .bootstrap.
    unattached: dict[str, tuple[list[tuple[str, str]], list[Statement]]] = {}
    for name, b in m.resources_of("aws_iam_policy").items():
        g, _ = _policy_grants(m.arg(b, "policy"))
        unattached[name] = (g, policy_statements(m.arg(b, "policy")))
    others = sorted(set(unattached) - {"operator", "bootstrap"})
    if others:
        raise AssertionError(f"aws_iam_policy resources other than operator/bootstrap: {others}")
    operator, operator_st = unattached.get("operator", (None, None))
    bootstrap, bootstrap_st = unattached.get("bootstrap", (None, None))

    queue_policies: dict[str, list[Statement]] = {}
    for b in m.resources_of("aws_sqs_queue_policy").values():
        url = m.arg(b, "queue_url")
        queue_policies.setdefault(url.rsplit("/", 1)[-1], []).extend(policy_statements(m.arg(b, "policy")))

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
                evaluation_periods=int(m.arg(b, "evaluation_periods")),
                ok_actions=list(m.arg(b, "ok_actions", []) or []),
            )
        )
    dashboards = m.resources_of("aws_cloudwatch_dashboard")
    dashboard = json.loads(m.arg(next(iter(dashboards.values())), "dashboard_body")) if dashboards else None

    d = Deployment(queues, None, None, table, function, esm, grants, unreadable, operator, alarms, dashboard)
    d.role_statements, d.role_arn = role_statements, role_arn
    d.operator_statements, d.bootstrap_grants, d.bootstrap_statements = operator_st, bootstrap, bootstrap_st
    d.queue_policies = queue_policies
    d.extra_grants, d.extra_managed = extra, managed
    d.producers = list(m.vars.get("producer_principal_arns") or [])
    d.kms_key = m.vars.get("kms_key_arn") or ""
    d.refusals = m.failed_preconditions()
    return _finish(d)


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
    image = d.function.get("package_type") == "Image"
    if (not image and d.function["runtime"] != "provided.al2023") or d.function["architectures"] != ["arm64"]:
        out.append(f"function is {d.function['runtime']} {d.function['architectures']}, not provided.al2023 arm64")
    env = d.function["env"]
    # The table layout and the Deny on idemq's reserved keys assume idemq's
    # defaults for these.
    for var in ("IDEMQ_KEY_PREFIX", "IDEMQ_ATTR_PK", "IDEMQ_ATTR_EXPIRES_AT"):
        if var in env:
            out.append(f"the function sets {var}={env[var]}, which the table and the role's guard do not follow")
    if env.get("IDEMQ_ENVELOPE", "none") not in ("", "none", "sns", "eventbridge"):
        out.append(f"IDEMQ_ENVELOPE {env['IDEMQ_ENVELOPE']!r} is none of none, sns, eventbridge")
    if env.get("IDEMQ_JOB_ID_POINTER", "") not in ("",) and not env["IDEMQ_JOB_ID_POINTER"].startswith("/"):
        out.append(f"IDEMQ_JOB_ID_POINTER {env['IDEMQ_JOB_ID_POINTER']!r} is not a JSON pointer")
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


def rule_reserved_keys(d: Deployment) -> list[str]:
    """The function role may not Update or Delete idemq's own items (markers
    and failure records are only ever Put), and still may Put and read them."""
    prefix = d.function["env"].get("IDEMQ_KEY_PREFIX", "idemq#")
    want = {"ForAnyValue:StringLike": {"dynamodb:LeadingKeys": [f"{prefix}*"]}}
    table = d.table.get("name")
    guarded: set[str] = set()
    out = []
    for st in d.role_statements:
        on_table = any(arn_key(r) == ("table", table) for r in st.resources)
        if st.effect != "Deny" or not on_table:
            continue
        if st.condition == want:
            guarded |= set(st.actions)
        blocked = {"dynamodb:PutItem", "dynamodb:GetItem", "dynamodb:ConditionCheckItem"} & set(st.actions)
        if blocked:
            out.append(
                f"function role denies {sorted(blocked)} on {table} ({st.condition}): markers could not be written"
            )
    missing = {"dynamodb:UpdateItem", "dynamodb:DeleteItem"} - guarded
    if missing:
        out.append(
            f"function role does not deny {sorted(missing)} on {table} for keys {prefix}* (markers could be rewritten)"
        )
    return out


ACCOUNT = "123456789012"  # cfn_eval.ACCOUNT, tf_eval.ACCOUNT


def _everyone(principals: Any) -> bool:
    return principals == "*" or principals == {"AWS": ["*"]} or principals == {"*": ["*"]}


def rule_queue_policy(d: Deployment) -> list[str]:
    """Both queues: TLS only, and SendMessage only by the named producers (and
    the function, on the DLQ); none named = this account only."""
    if e := _queues_found(d):
        return e
    out = []
    for q, extra in ((d.source, []), (d.dlq, [d.role_arn])):
        arn = f"arn:aws:sqs:us-east-1:{ACCOUNT}:{q.name}"
        sts = d.queue_policies.get(q.name)
        if not sts:
            out.append(f"queue {q.name} has no queue policy")
            continue
        on_q = [st for st in sts if st.resources == [arn]]
        if len(on_q) != len(sts):
            out.append(f"queue {q.name}: a statement of its policy names another resource")
        tls = {"Bool": {"aws:SecureTransport": ["false"]}}
        if not any(
            st.effect == "Deny"
            and _everyone(st.principals)
            and set(st.actions) & {"sqs:*", "*"}
            and st.condition == tls
            for st in on_q
        ):
            out.append(f"queue {q.name}: no Deny of sqs:* to everyone when aws:SecureTransport is false")
        if d.producers:
            senders = {"StringNotEquals": {"aws:PrincipalArn": sorted({*d.producers, *extra})}}
            allowed = sorted(d.producers)
        else:
            senders = {"StringNotEquals": {"aws:PrincipalAccount": [ACCOUNT]}}
            allowed = [f"arn:aws:iam::{ACCOUNT}:root"]
        guard = [
            st
            for st in on_q
            if st.effect == "Deny"
            and _everyone(st.principals)
            and set(st.actions) & {"sqs:SendMessage", "sqs:*", "*"}
            and st.condition != tls
        ]
        if not any(
            {op: {k: sorted(v) for k, v in kv.items()} for op, kv in st.condition.items()} == senders for st in guard
        ):
            out.append(
                f"queue {q.name}: SendMessage is not denied to all but {senders} "
                f"(found {[st.condition for st in guard]})"
            )
        for st in on_q:
            if st.effect != "Allow":
                continue
            who = st.principals.get("AWS", []) if isinstance(st.principals, dict) else st.principals
            if _everyone(st.principals) or sorted(who) != allowed or st.actions != ["sqs:SendMessage"]:
                out.append(f"queue {q.name}: allows {st.actions} to {st.principals}, not SendMessage to {allowed}")
    return out


def rule_kms_key(d: Deployment) -> list[str]:
    """A customer managed key, when given, encrypts both queues and the
    table; without one, SQS-managed SSE and the AWS managed table key."""
    if e := _queues_found(d):
        return e
    out = []
    for q in (d.source, d.dlq):
        if q.kms_key != d.kms_key:
            out.append(
                f"queue {q.name} is encrypted with {q.kms_key or 'SQS-managed SSE'}, not {d.kms_key or 'SQS-managed SSE'}"
            )
    if d.table.get("kms_key", "") != d.kms_key:
        out.append(
            f"table {d.table.get('name')} uses key {d.table.get('kms_key') or 'AWS managed'}, not {d.kms_key or 'AWS managed'}"
        )
    return out


def backoff_cap(d: Deployment) -> int:
    """The function's IDEMQ_BACKOFF_CAP in seconds (src/backoff.rs default 15 min)."""
    raw = d.function["env"].get("IDEMQ_BACKOFF_CAP")
    return 15 * 60 if raw is None else parse_duration(raw)


def rule_retries_fit_retention(d: Deployment) -> list[str]:
    """maxReceiveCount x (visibility timeout + backoff cap) <= half the source
    retention: SQS deletes a message at retention expiry, in flight or not,
    and never dead-letters it."""
    if e := _queues_found(d):
        return e
    m, v, r, cap = d.source.max_receive_count or 0, d.source.visibility, d.source.retention, backoff_cap(d)
    span = m * (v + cap)
    if 2 * span > r:
        return [
            f"maxReceiveCount {m} x (visibility timeout {v}s + backoff cap {cap}s) = {span}s of retries "
            f"does not fit in half the source retention {r}s"
        ]
    return []


RULES: dict[str, Callable[[Deployment], list[str]]] = {
    "visibility_timeout": rule_visibility_timeout,
    "max_receive_count": rule_max_receive_count,
    "dlq_retention": rule_dlq_retention,
    "redrive_allow_policy": rule_redrive_allow_policy,
    "marker_ttl": rule_marker_ttl,
    "encryption": rule_encryption,
    "pitr": rule_pitr,
    "function_contract": rule_function_contract,
    "reserved_keys": rule_reserved_keys,
    "queue_policy": rule_queue_policy,
    "kms_key": rule_kms_key,
    "retries_fit_retention": rule_retries_fit_retention,
}


def settings(d: Deployment) -> dict[str, Any]:
    """What the two templates must agree on, for the same inputs: the
    table's and the queues' settings."""
    t = d.table
    queue = lambda q: {  # noqa: E731
        "visibility": q.visibility,
        "retention": q.retention,
        "sse": q.sse,
        "kms_key": q.kms_key,
        "max_receive_count": q.max_receive_count,
        "redrive_permission": q.redrive_permission,
        "policy": sorted(
            json.dumps([st.effect, sorted(st.actions), st.condition, st.principals], sort_keys=True).replace(
                d.role_arn, "<function role>"
            )
            for st in d.queue_policies.get(q.name, [])
        ),
    }
    return {
        "table": {
            k: t.get(k)
            for k in (
                "billing",
                "key",
                "attributes",
                "ttl_attribute",
                "ttl_enabled",
                "pitr",
                "sse",
                "kms_key",
                "deletion_protection",
            )
        },
        "source": queue(d.source) if d.source else None,
        "dlq": queue(d.dlq) if d.dlq else None,
        "backoff_cap": backoff_cap(d),
    }


def differences(a: Deployment, b: Deployment) -> list[str]:
    sa, sb = settings(a), settings(b)
    out = []
    for part in sa:
        if isinstance(sa[part], dict) and isinstance(sb[part], dict):
            for k in sa[part]:
                if sa[part][k] != sb[part].get(k):
                    out.append(f"{part}.{k}: {sa[part][k]} / {sb[part].get(k)}")
        elif sa[part] != sb[part]:
            out.append(f"{part}: {sa[part]} / {sb[part]}")
    return out


def violations(d: Deployment) -> dict[str, list[str]]:
    return {name: v for name, rule in RULES.items() if (v := rule(d))}
