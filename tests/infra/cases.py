"""The two templates behind one interface, the inputs to try, and the broken copies.

A rule must hold for every input a template *accepts* (SAM: AllowedValues,
MinValue/MaxValue; Terraform: the variables' validation blocks), not only
for its defaults: so the checks walk a grid of inputs, including values just
outside each guard, skip what the template refuses, and check the rest.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import cfn_eval
import model
import tf_eval

# Inputs by meaning; each template maps them to its own parameter names.
GRID = {
    "function_timeout": [1, 3, 10, 15, 29, 30, 31, 60, 120, 300, 600, 900, 901],
    "batching_window": [0, 1, 5, 20, 30, 59, 60, 61, 120, 300, 301],
    "max_receive_count": [0, 1, 4, 5, 6, 10, 1000, 1001],
    "source_retention_days": [0, 1, 2, 4, 7, 12, 13, 14, 15],
}
# The retention rule joins receives, timeout (the visibility timeout) and
# retention: a product of values around the limits.
RETRY_GRID = {
    "max_receive_count": [5, 6, 8, 10, 12, 15, 20, 25, 30, 40, 50, 75, 100, 1000],
    "function_timeout": [10, 30, 120, 300, 600, 900],
    "source_retention_days": [1, 2, 3, 4, 7, 13],
}
KMS_KEY = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
PRODUCERS = ["arn:aws:iam::123456789012:role/orders-api", "arn:aws:iam::210987654321:role/partner-feed"]
IDEMQ_TABLE_ARN = "arn:aws:dynamodb:us-east-1:123456789012:table/idemq-ledger"
IDEMQ_DLQ_ARN = "arn:aws:sqs:us-east-1:123456789012:idemq-ledger-dlq"
TOPICS = ["arn:aws:sns:us-east-1:123456789012:ops", "arn:aws:sns:us-east-1:123456789012:pager"]

# The deployer's own inputs: extra grants (some aimed at idemq's own table
# and queues, some with wildcards), environment, envelope, job-id pointer,
# the function's code, alarm targets. Each template skips what it has no
# input for (SAM: statements and environment live in the user's template).
EXTRA_INPUTS: list[dict[str, Any]] = [
    {
        "effect_tables": ["arn:aws:dynamodb:us-east-1:123456789012:table/orders"],
        "follow_up_queues": ["arn:aws:sqs:us-east-1:123456789012:shipping"],
    },
    {"effect_tables": ["*"], "follow_up_queues": ["*"]},
    {"effect_tables": ["arn:aws:dynamodb:*:*:table/*"], "follow_up_queues": ["arn:aws:sqs:*"]},
    {"effect_tables": [IDEMQ_TABLE_ARN], "follow_up_queues": [IDEMQ_DLQ_ARN]},
    {"extra_policy_arns": ["arn:aws:iam::aws:policy/AmazonDynamoDBFullAccess"]},
    {"extra_policy_arns": ["arn:aws:iam::aws:policy/AdministratorAccess", "arn:aws:iam::123456789012:policy/orders"]},
    {"extra_statements": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]},
    {
        "extra_statements": [
            {
                "Effect": "Allow",
                "Action": ["dynamodb:BatchWriteItem", "dynamodb:DeleteTable", "sqs:PurgeQueue", "sqs:SendMessage"],
                "Resource": [IDEMQ_TABLE_ARN, "arn:aws:sqs:*:*:idemq-*"],
            }
        ]
    },
    {"environment": {"ORDERS_TABLE": "orders", "IDEMQ_LOG": "debug"}},
    {"environment": {"IDEMQ_KEY_PREFIX": "app#"}},
    {"environment": {"IDEMQ_ATTR_EXPIRES_AT": "ttl"}},
    {"environment": {"IDEMQ_TABLE": "elsewhere"}},
    *({"envelope": e} for e in ("none", "sns", "eventbridge", "kinesis")),
    *({"job_id_pointer": p} for p in ("", "/transfer_id", "transfer_id")),
    {"package_path": None, "s3_bucket": "artifacts", "s3_key": "orders/bootstrap.zip"},
    {"package_path": None, "image_uri": "123456789012.dkr.ecr.us-east-1.amazonaws.com/orders:1"},
    {"s3_bucket": "artifacts", "s3_key": "orders/bootstrap.zip"},  # and package_path: refused
    {"package_path": None},  # no code at all: refused
    {"package_path": None, "s3_bucket": "artifacts"},  # no key: refused
    {"alarm_actions": TOPICS, "ok_actions": TOPICS[:1]},
]


def grid() -> Iterator[dict[str, Any]]:
    """Timeout x window together (the visibility rule joins them); the
    others one at a time; receives x timeout x retention; a customer managed
    key and named producers."""
    # First, so that a broken copy that only fails with a key or producers
    # is found at once.
    for key, producers in itertools.product(("", KMS_KEY), ([], PRODUCERS)):
        yield {"kms_key": key, "producers": producers}
    for t, w in itertools.product(GRID["function_timeout"], GRID["batching_window"]):
        yield {"function_timeout": t, "batching_window": w}
    for key in ("max_receive_count", "source_retention_days"):
        for v in GRID[key]:
            yield {key: v}
    yield from EXTRA_INPUTS
    yield from retry_inputs()


class Sam:
    """The user's template (template.yaml: the function) with idemq.yaml
    nested in it (everything else): inputs go to whichever declares them."""

    kind = "sam"
    NAMES = {
        "function_timeout": "FunctionTimeoutSeconds",
        "batching_window": "MaximumBatchingWindowSeconds",
        "max_receive_count": "MaxReceiveCount",
        "source_retention_days": "SourceRetentionDays",
        "kms_key": "KmsKeyArn",
        "producers": "ProducerPrincipalArns",
        "envelope": "Envelope",
        "job_id_pointer": "JobIdPointer",
        "effect_tables": "EffectTableArns",
        "follow_up_queues": "FollowUpQueueArns",
        "extra_policy_arns": "ExtraPolicyArns",
        "alarm_actions": "AlarmActionArns",
        "ok_actions": "OkActionArns",
    }

    def __init__(self, path: Path, texts: dict[str, str] | None = None):
        self.path = path
        self.texts = texts or {
            "template.yaml": path.read_text(),
            "idemq.yaml": (path.parent / "idemq.yaml").read_text(),
        }
        self.parent_raw = cfn_eval.load_sam(text=self.texts["template.yaml"])
        # The nested application idemq.yaml, under whatever logical id the
        # user's template gives it (the ledger's and `idemq new`'s: Idemq).
        apps = [
            lid
            for lid, r in self.parent_raw.get("Resources", {}).items()
            if r.get("Type") == "AWS::Serverless::Application"
            and (r.get("Properties") or {}).get("Location") == "idemq.yaml"
        ]
        if len(apps) != 1:
            raise AssertionError(f"{path}: {len(apps)} nested applications with Location idemq.yaml, not one")
        self.nested_id = apps[0]
        self.cfn = cfn_eval.translate(self.parent_raw)
        # The reusable part: plain CloudFormation, no transform.
        self.raw = cfn_eval.load_sam(text=self.texts["idemq.yaml"])

    def text(self, name: str) -> str:
        return self.texts[name]

    def with_text(self, name: str, text: str) -> "Sam":
        return Sam(self.path, {**self.texts, name: text})

    def supports(self, inputs: dict[str, Any]) -> bool:
        return set(inputs) <= set(self.NAMES)

    def _split(self, inputs: dict[str, Any], extra: dict[str, str] | None) -> tuple[dict[str, str], dict[str, str]]:
        """(the user's template's parameters, overrides of what it passes idemq.yaml)."""
        parent = cfn_eval.parameter_defaults(self.parent_raw)
        nested: dict[str, str] = {}
        named = {self.NAMES[k]: ",".join(v) if isinstance(v, list) else str(v) for k, v in inputs.items()}
        for name, value in {**named, **(extra or {})}.items():
            if name in self.raw.get("Parameters", {}):
                nested[name] = value
            elif name in self.parent_raw.get("Parameters", {}):
                parent[name] = value
            else:
                raise KeyError(f"neither template has a parameter {name}")
        return parent, nested

    def _stack(self, inputs: dict[str, Any], extra: dict[str, str] | None = None) -> cfn_eval.Stack:
        parent, nested = self._split(inputs, extra)
        return cfn_eval.Stack(self.cfn, parent, {self.nested_id: (self.raw, nested)})

    def nested_params(self, inputs: dict[str, Any] | None = None, **extra: str) -> dict[str, str]:
        """What idemq.yaml is deployed with."""
        return self._stack(inputs or {}, extra).children[self.nested_id].params

    def refused(self, inputs: dict[str, Any]) -> list[str]:
        """Why the two templates refuse these inputs (none: accepted)."""
        parent, _ = self._split(inputs, None)
        out = cfn_eval.rejected_parameters(self.parent_raw, parent)
        return out or cfn_eval.rejected_parameters(self.raw, self.nested_params(inputs))

    def accepts(self, inputs: dict[str, Any]) -> bool:
        return not self.refused(inputs)

    def accepts_ignoring_retries(self, inputs: dict[str, Any]) -> bool:
        raw = {k: v for k, v in self.raw.items() if k != "Rules"}
        return not cfn_eval.rejected_parameters(raw, self.nested_params(inputs))

    def deployment(self, inputs: dict[str, Any] | None = None, **extra: str) -> model.Deployment:
        parent, nested = self._split(inputs or {}, extra)
        return model.from_sam(self.cfn, parent, {self.nested_id: (self.raw, nested)})

    # What the checks pass for "an alarm topic" and "the operator policy on".
    def with_topic(self, topic: str) -> model.Deployment:
        return self.deployment({"alarm_actions": [topic], "ok_actions": [topic]})

    def with_operator(self) -> model.Deployment:
        return self.deployment(CreateOperatorPolicy="true")

    def with_bootstrap(self) -> model.Deployment:
        return self.deployment(CreateBootstrapPolicy="true")


class Terraform:
    kind = "terraform"
    NAMES = {
        "function_timeout": "function_timeout",
        "batching_window": "maximum_batching_window",
        "max_receive_count": "max_receive_count",
        "source_retention_days": "source_retention_days",
        "kms_key": "kms_key_arn",
        "producers": "producer_principal_arns",
        "envelope": "envelope",
        "job_id_pointer": "job_id_pointer",
        "effect_tables": "effect_table_arns",
        "follow_up_queues": "follow_up_queue_arns",
        "extra_policy_arns": "extra_policy_arns",
        "extra_statements": "extra_policy_statements",
        "environment": "environment",
        "alarm_actions": "alarm_actions",
        "ok_actions": "ok_actions",
        "package_path": "package_path",
        "s3_bucket": "s3_bucket",
        "s3_key": "s3_key",
        "image_uri": "image_uri",
    }

    def supports(self, inputs: dict[str, Any]) -> bool:
        return set(inputs) <= set(self.NAMES)

    def __init__(
        self,
        root: Path,
        overrides: dict[str, str] | None = None,
        example: Path | None = None,
        call: str = "ledger",
    ):
        """`root`: infra/terraform, whose examples/ledger calls the module;
        or `example` (a root module, e.g. a project's deploy/terraform) and
        the name of its module call. `overrides`: module file name ->
        replacement text (a broken copy)."""
        self.root = root
        self.example = example or root / "examples" / "ledger"
        self.call = call
        self.overrides = overrides or {}
        source, self.base_inputs = model.terraform_inputs_from_example(self.example, call)
        self.module_dir = source
        self.module = tf_eval.Block("module", [str(source)])
        for tf in sorted(source.glob("*.tf")):
            text = self.overrides.get(tf.name, tf.read_text())
            parsed = tf_eval.parse_text(text)
            self.module.attributes.update(parsed.attributes)
            self.module.blocks += parsed.blocks

    def text(self, name: str) -> str:
        return self.overrides.get(name, (self.module_dir / name).read_text())

    def with_text(self, name: str, text: str) -> "Terraform":
        return Terraform(self.root, {**self.overrides, name: text}, self.example, self.call)

    def _module(self, inputs: dict[str, Any], extra: dict[str, Any] | None = None) -> tf_eval.Module:
        values = dict(self.base_inputs)
        values.update({self.NAMES[k]: v for k, v in inputs.items()})
        values.update(extra or {})
        return tf_eval.Module(self.module, values)

    def refused(self, inputs: dict[str, Any]) -> list[str]:
        """The variables whose validations, and the preconditions, that
        refuse these inputs (none: accepted)."""
        return self._module(inputs).invalid_inputs()

    def accepts(self, inputs: dict[str, Any]) -> bool:
        return not self.refused(inputs)

    def accepts_ignoring_retries(self, inputs: dict[str, Any]) -> bool:
        m = self._module(inputs)
        return not [p for p in m.invalid_inputs() if p not in m.failed_preconditions()]

    def deployment(self, inputs: dict[str, Any] | None = None, **extra: Any) -> model.Deployment:
        return model.from_terraform(self._module(inputs or {}, extra))

    def with_topic(self, topic: str) -> model.Deployment:
        return self.deployment({"alarm_actions": [topic], "ok_actions": [topic]})

    def with_operator(self) -> model.Deployment:
        return self.deployment(create_operator_policy=True)

    def with_bootstrap(self) -> model.Deployment:
        return self.deployment(create_bootstrap_policy=True)


def retry_inputs() -> Iterator[dict[str, Any]]:
    for m, t, r in itertools.product(*RETRY_GRID.values()):
        yield {"max_receive_count": m, "function_timeout": t, "source_retention_days": r}


def agreement_inputs() -> Iterator[dict[str, Any]]:
    for t in (10, 30, 120, 900):
        for m, r in ((6, 4), (20, 13), (8, 1)):
            yield {"function_timeout": t, "batching_window": 60, "max_receive_count": m, "source_retention_days": r}
    for key, producers in itertools.product(("", KMS_KEY), ([], PRODUCERS)):
        yield {"batching_window": 60, "kms_key": key, "producers": producers}


def variants(t: "Sam | Terraform", operator: bool = False) -> list[model.Deployment]:
    """The deployments whose permissions differ: without and with a customer
    managed key, without and with named producers."""
    sam = isinstance(t, Sam)
    out = []
    for key in ("", KMS_KEY):
        for producers in ([], PRODUCERS):
            inputs = {"kms_key": key, "producers": producers}
            extra: dict[str, Any] = {}
            if operator:
                extra = {"CreateOperatorPolicy": "true"} if sam else {"create_operator_policy": True}
            out.append(t.deployment(inputs, **extra))
    return out


@dataclass
class Checked:
    accepted: int
    refused: int
    failures: dict[str, list[str]]  # rule -> first violations found (with the inputs)


_checked: dict[int, Checked] = {}


def check_all_inputs(t: Sam | Terraform) -> Checked:
    """Every rule on every accepted input of the grid (cached per template object)."""
    if id(t) in _checked:
        return _checked[id(t)]
    accepted = refused = 0
    failures: dict[str, list[str]] = {}
    for inputs in grid():
        if not t.supports(inputs):
            continue
        if not t.accepts(inputs):
            refused += 1
            continue
        accepted += 1
        for rule, problems in model.violations(t.deployment(inputs)).items():
            failures.setdefault(rule, []).extend(f"{p} (inputs {inputs})" for p in problems[:1])
    _checked[id(t)] = result = Checked(accepted, refused, failures)
    return result


def first_failure(t: Sam | Terraform, rule: str) -> list[str]:
    """The first accepted input of the grid on which `rule` fails (a broken
    copy needs only one)."""
    for inputs in grid():
        if t.supports(inputs) and t.accepts(inputs):
            problems = model.RULES[rule](t.deployment(inputs))
            if problems:
                return [f"{p} (inputs {inputs})" for p in problems]
    return []


# ---------------------------------------------------------------------------
# Broken copies: one per rule and template. Each replaces text that must occur
# exactly once, so a broken copy cannot silently stop breaking anything.
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Break:
    rule: str
    kind: str  # "sam" or "terraform"
    file: str  # template.yaml, or the module's .tf file
    old: str
    new: str
    why: str
    # What the problems must say: a broken copy fails for its own reason.
    expect: str = ""

    @property
    def id(self) -> str:
        return f"{self.kind}-{self.rule}-{self.why.split(':')[0]}"


BREAKS = [
    # visibility timeout >= 6 x timeout + window
    Break(
        "visibility_timeout",
        "sam",
        "idemq.yaml",
        '"30": { Seconds: 240 }',
        '"30": { Seconds: 180 }',
        "mapping row below 6 x 30 s + window",
        "source queue visibility timeout 180s < 6 x function timeout 30s",
    ),
    Break(
        "visibility_timeout",
        "terraform",
        "main.tf",
        "6 * var.function_timeout",
        "5 * var.function_timeout",
        "5 x instead of 6 x",
        "< 6 x function timeout",
    ),
    # maxReceiveCount >= 5
    Break(
        "max_receive_count",
        "sam",
        "idemq.yaml",
        'AllowedValues: ["5", "6", "8",',
        'AllowedValues: ["1", "5", "6", "8",',
        "guard lowered: 1 receive accepted",
        "maxReceiveCount 1 < 5",
    ),
    Break(
        "max_receive_count",
        "terraform",
        "variables.tf",
        "var.max_receive_count >= 5",
        "var.max_receive_count >= 1",
        "guard lowered: 4 receives accepted",
        "maxReceiveCount 1 < 5",
    ),
    # DLQ retention 14 d and > source
    Break(
        "dlq_retention",
        "sam",
        "idemq.yaml",
        "MessageRetentionPeriod: 1209600",
        "MessageRetentionPeriod: 345600",
        "DLQ keeps 4 days",
        "is not 14 days",
    ),
    Break(
        "dlq_retention",
        "terraform",
        "main.tf",
        "dlq_retention_days  = 14",
        "dlq_retention_days  = 4 ",
        "DLQ keeps 4 days",
        "is not 14 days",
    ),
    # RedriveAllowPolicy byQueue naming only the source
    Break(
        "redrive_allow_policy",
        "sam",
        "idemq.yaml",
        "redrivePermission: byQueue",
        "redrivePermission: allowAll",
        "allowAll",
        "DLQ RedriveAllowPolicy is allowAll",
    ),
    Break(
        "redrive_allow_policy",
        "terraform",
        "main.tf",
        "[aws_sqs_queue.source.arn]\n  })",
        "[aws_sqs_queue.source.arn, aws_sqs_queue.dlq.arn]\n  })",
        "a second source",
        "not byQueue naming only",
    ),
    # marker TTL >= source + DLQ retention + replay window
    Break(
        "marker_ttl",
        "sam",
        "idemq.yaml",
        '"4": { Seconds: 345600, MarkerTtl: 21d }',
        '"4": { Seconds: 345600, MarkerTtl: 14d }',
        "14 days for 4 d of source retention",
        "IDEMQ_MARKER_TTL 14d",
    ),
    Break(
        "marker_ttl",
        "terraform",
        "function.tf",
        '"${local.marker_ttl_days}d"',
        '"${local.marker_ttl_days}h"',
        "hours instead of days",
        "IDEMQ_MARKER_TTL",
    ),
    # encryption at rest
    Break(
        "encryption",
        "sam",
        "idemq.yaml",
        "      SqsManagedSseEnabled: !If [HasKmsKey, !Ref AWS::NoValue, true]\n"
        "      KmsMasterKeyId: !If [HasKmsKey, !Ref KmsKeyArn, !Ref AWS::NoValue]\n      RedrivePolicy:",
        "      SqsManagedSseEnabled: !If [HasKmsKey, !Ref AWS::NoValue, false]\n"
        "      KmsMasterKeyId: !If [HasKmsKey, !Ref KmsKeyArn, !Ref AWS::NoValue]\n      RedrivePolicy:",
        "source queue unencrypted",
        "is not encrypted at rest",
    ),
    Break(
        "encryption",
        "terraform",
        "main.tf",
        "server_side_encryption {\n    enabled     = true",
        "server_side_encryption {\n    enabled     = false",
        "table unencrypted",
        "has no SSESpecification",
    ),
    # point-in-time recovery
    Break(
        "pitr",
        "sam",
        "idemq.yaml",
        "PointInTimeRecoveryEnabled: true",
        "PointInTimeRecoveryEnabled: false",
        "PITR off",
        "no point-in-time recovery",
    ),
    Break(
        "pitr",
        "terraform",
        "main.tf",
        "point_in_time_recovery {\n    enabled = true",
        "point_in_time_recovery {\n    enabled = false",
        "PITR off",
        "no point-in-time recovery",
    ),
    # the batch contract / table layout
    Break(
        "function_contract",
        "sam",
        "template.yaml",
        "FunctionResponseTypes: [ReportBatchItemFailures]",
        "FunctionResponseTypes: []",
        "no partial batch responses",
        "lacks FunctionResponseTypes ReportBatchItemFailures",
    ),
    Break(
        "function_contract",
        "terraform",
        "main.tf",
        'attribute_name = "expires_at"',
        'attribute_name = "ttl"',
        "TTL on the wrong attribute",
        "table TTL is not enabled on expires_at",
    ),
    # markers are Put only: Update/Delete denied on the reserved keys
    Break(
        "reserved_keys",
        "sam",
        "idemq.yaml",
        "              - Effect: Deny\n                Action:\n                  - dynamodb:UpdateItem\n"
        "                  - dynamodb:DeleteItem\n",
        "              - Effect: Deny\n                Action:\n                  - dynamodb:UpdateItem\n",
        "DeleteItem no longer denied",
        "does not deny ['dynamodb:DeleteItem']",
    ),
    Break(
        "reserved_keys",
        "sam",
        "idemq.yaml",
        "                  - dynamodb:DeleteItem\n                Resource: !GetAtt Table.Arn\n                Condition:",
        "                  - dynamodb:DeleteItem\n                  - dynamodb:PutItem\n"
        "                Resource: !GetAtt Table.Arn\n                Condition:",
        "PutItem denied too: no marker could be written",
        "markers could not be written",
    ),
    Break(
        "reserved_keys",
        "terraform",
        "function.tf",
        '      test     = "ForAnyValue:StringLike"',
        '      test     = "ForAllValues:StringLike"',
        "ForAllValues: a Deny that a request without the key escapes",
        "markers could be rewritten",
    ),
    # queue policies: TLS only; SendMessage by the named producers only
    Break(
        "queue_policy",
        "sam",
        "idemq.yaml",
        "Resource: !GetAtt DeadLetterQueue.Arn\n            Condition:\n              Bool:\n"
        '                aws:SecureTransport: "false"',
        "Resource: !GetAtt DeadLetterQueue.Arn\n            Condition:\n              Bool:\n"
        '                aws:SecureTransport: "true"',
        "DLQ: the TLS deny inverted",
        "no Deny of sqs:* to everyone when aws:SecureTransport is false",
    ),
    Break(
        "queue_policy",
        "sam",
        "idemq.yaml",
        "              - StringNotEquals:\n                  aws:PrincipalArn: !Ref ProducerPrincipalArns\n",
        '              - StringNotLike:\n                  aws:PrincipalArn: "arn:aws:iam::*"\n',
        "source: any IAM principal of any account may send",
        "SendMessage is not denied to all but",
    ),
    Break(
        "queue_policy",
        "terraform",
        "main.tf",
        "concat(var.producer_principal_arns, [aws_iam_role.function.arn])",
        "var.producer_principal_arns",
        "DLQ: the function may no longer dead-letter",
        "SendMessage is not denied to all but",
    ),
    Break(
        "queue_policy",
        "terraform",
        "main.tf",
        "var.producer_principal_arns : [local.account_root]",
        'var.producer_principal_arns : ["*"]',
        "everyone allowed when no producer is named",
        "allows ['sqs:SendMessage'] to",
    ),
    # the customer managed key, when given, on both queues and the table
    Break(
        "kms_key",
        "sam",
        "idemq.yaml",
        "        KMSMasterKeyId: !If [HasKmsKey, !Ref KmsKeyArn, !Ref AWS::NoValue]\n",
        "",
        "table keeps the AWS managed key",
        "uses key AWS managed, not arn:aws:kms",
    ),
    Break(
        "kms_key",
        "terraform",
        "main.tf",
        '  kms_master_key_id         = local.kms_key == "" ? null : local.kms_key\n',
        "",
        "DLQ ignores the key",
        "is encrypted with SQS-managed SSE, not arn:aws:kms",
    ),
    # retries fit in half the source retention
    Break(
        "retries_fit_retention",
        "sam",
        "idemq.yaml",
        'RuleCondition: !Equals [!Ref MaxReceiveCount, "100"]',
        'RuleCondition: !Equals [!Ref MaxReceiveCount, "101"]',
        "the rule for 100 receives never applies",
        "maxReceiveCount 100 x (visibility timeout",
    ),
    Break(
        "retries_fit_retention",
        "sam",
        "idemq.yaml",
        "    Value: 15m\n",
        "    Value: 1h\n",
        "a backoff cap the rules do not assume",
        "backoff cap 3600s",
    ),
    Break(
        "retries_fit_retention",
        "terraform",
        "main.tf",
        "condition     = 2 * local.retry_span <=",
        "condition     = 1 * local.retry_span <=",
        "the whole retention, no margin",
        "does not fit in half the source retention",
    ),
    # the two templates agree on the table's and the queues' settings
    Break(
        "templates_agree",
        "sam",
        "idemq.yaml",
        "      DeletionProtectionEnabled: !Ref TableDeletionProtection\n",
        "",
        "SAM table without deletion protection",
        "table.deletion_protection: False / True",
    ),
    Break(
        "templates_agree",
        "terraform",
        "main.tf",
        "deletion_protection_enabled = var.table_deletion_protection",
        "deletion_protection_enabled = false",
        "Terraform table without deletion protection",
        "table.deletion_protection: True / False",
    ),
    # least privilege (the function role)
    Break(
        "iam",
        "sam",
        "idemq.yaml",
        "                  - sqs:GetQueueUrl\n                Resource: !GetAtt SourceQueue.Arn",
        "                  - sqs:GetQueueUrl\n                  - sqs:PurgeQueue\n                Resource: !GetAtt SourceQueue.Arn",
        "extra action: PurgeQueue",
        "grants sqs:PurgeQueue on the source, which nothing in the code calls",
    ),
    Break(
        "iam",
        "sam",
        "idemq.yaml",
        "                  - dynamodb:GetItem\n                Resource: !GetAtt Table.Arn\n",
        '                  - dynamodb:GetItem\n                Resource: "*"\n',
        "wildcard resource on the table actions",
        "wildcard resource *",
    ),
    Break(
        "iam",
        "sam",
        "idemq.yaml",
        "                  - sqs:ChangeMessageVisibility\n                  - sqs:GetQueueAttributes\n"
        "                  - sqs:GetQueueUrl\n                Resource: !GetAtt SourceQueue.Arn",
        "                  - sqs:GetQueueAttributes\n                  - sqs:GetQueueUrl\n"
        "                Resource: !GetAtt SourceQueue.Arn",
        "missing action: ChangeMessageVisibility",
        "sqs:ChangeMessageVisibility on the source is not granted",
    ),
    Break(
        "iam",
        "sam",
        "idemq.yaml",
        "                    - kms:Decrypt\n                    - kms:GenerateDataKey\n"
        "                  Resource: !Ref KmsKeyArn",
        "                    - kms:Decrypt\n                  Resource: !Ref KmsKeyArn",
        "with a key, the function cannot send to the DLQ",
        "kms:GenerateDataKey on the kms_key is not granted",
    ),
    Break(
        "iam",
        "terraform",
        "function.tf",
        '    actions = [\n      "sqs:SendMessage",\n      "sqs:GetQueueAttributes",',
        '    actions = [\n      "sqs:SendMessage",\n      "sqs:Get*",\n      "sqs:GetQueueAttributes",',
        "wildcard action: sqs:Get*",
        "wildcard action sqs:Get*",
    ),
    Break(
        "iam",
        "terraform",
        "function.tf",
        "resources = [aws_sqs_queue.dlq.arn]\n  }\n\n  # TransactWriteItems",
        "resources = [aws_sqs_queue.source.arn]\n  }\n\n  # TransactWriteItems",
        "SendMessage on the source instead of the DLQ",
        "sqs:SendMessage on the dlq is not granted",
    ),
    Break(
        "iam",
        "terraform",
        "function.tf",
        '    actions = [\n      "dynamodb:PutItem",\n      "dynamodb:UpdateItem",\n      "dynamodb:DeleteItem",\n'
        '      "dynamodb:ConditionCheckItem",\n      "dynamodb:BatchGetItem",\n      "dynamodb:GetItem",\n    ]\n'
        "    resources = [aws_dynamodb_table.idemq.arn]",
        '    actions = [\n      "dynamodb:PutItem",\n      "dynamodb:UpdateItem",\n      "dynamodb:DeleteItem",\n'
        '      "dynamodb:BatchGetItem",\n      "dynamodb:GetItem",\n    ]\n    resources = [aws_dynamodb_table.idemq.arn]',
        "missing action: ConditionCheckItem",
        "dynamodb:ConditionCheckItem on the table is not granted",
    ),
    # the operator policy follows the CLI's code too (init's calls excluded)
    Break(
        "operator",
        "sam",
        "idemq.yaml",
        "              - dynamodb:BatchGetItem\n            Resource: !GetAtt Table.Arn\n",
        "              - dynamodb:BatchGetItem\n              - dynamodb:Scan\n            Resource: !GetAtt Table.Arn\n",
        "extra action: Scan (the CLI's own scan() is no SDK call)",
        "grants dynamodb:Scan on the table, which nothing in the code calls",
    ),
    Break(
        "operator",
        "sam",
        "idemq.yaml",
        "              - sqs:GetQueueAttributes\n              - sqs:SendMessage\n            Resource: !GetAtt SourceQueue.Arn",
        "              - sqs:GetQueueAttributes\n              - sqs:SetQueueAttributes\n              - sqs:SendMessage\n"
        "            Resource: !GetAtt SourceQueue.Arn",
        "extra action: SetQueueAttributes on the source (init's, not the operator's)",
        "grants sqs:SetQueueAttributes on the source, which nothing in the code calls",
    ),
    Break(
        "operator",
        "sam",
        "idemq.yaml",
        '            Condition:\n              ForAllValues:StringLike:\n                dynamodb:LeadingKeys: ["idemq#*"]\n',
        "",
        "failure-record reads without the LeadingKeys condition",
        "not only on the reserved keys",
    ),
    Break(
        "operator",
        "terraform",
        "operator.tf",
        '      "dynamodb:BatchGetItem",\n',
        '      "dynamodb:BatchGetItem",\n      "dynamodb:DeleteTable",\n',
        "extra action: DeleteTable",
        "grants dynamodb:DeleteTable on the table, which nothing in the code calls",
    ),
    Break(
        "operator",
        "terraform",
        "operator.tf",
        'values   = ["${local.key_prefix}*"]',
        'values   = ["*"]',
        "LeadingKeys condition on every key",
        "not only on the reserved keys",
    ),
    Break(
        "operator",
        "terraform",
        "operator.tf",
        'local.kms_key == "" ? data.aws_iam_policy_document.operator.json : data.aws_iam_policy_document.operator_kms.json',
        "data.aws_iam_policy_document.operator.json",
        "with a key, the operator cannot read the DLQ",
        "kms:Decrypt on the kms_key is not granted",
    ),
    # the bootstrap policy: exactly what `idemq init` calls
    Break(
        "bootstrap",
        "sam",
        "idemq.yaml",
        "              - dynamodb:UpdateContinuousBackups\n            Resource: !GetAtt Table.Arn\n",
        "            Resource: !GetAtt Table.Arn\n",
        "missing action: UpdateContinuousBackups (init turns on point-in-time recovery)",
        "dynamodb:UpdateContinuousBackups on the table is not granted",
    ),
    Break(
        "bootstrap",
        "terraform",
        "operator.tf",
        '      "sqs:GetQueueAttributes",\n    ]\n    resources = [aws_sqs_queue.source.arn]\n  }\n\n  # SetQueueAttributes',
        '      "sqs:GetQueueAttributes",\n      "sqs:SetQueueAttributes",\n    ]\n'
        "    resources = [aws_sqs_queue.source.arn]\n  }\n\n  # SetQueueAttributes",
        "SetQueueAttributes on the source queue",
        "grants sqs:SetQueueAttributes on the source; it is only needed on ['dlq']",
    ),
    # alarms
    Break(
        "alarms",
        "sam",
        "idemq.yaml",
        "MetricName: JobsConflict\n",
        "MetricName: JobsConflicts\n",
        "conflict alarm on a metric nobody emits",
        "which src/metrics.rs never emits",
    ),
    Break(
        "alarms",
        "sam",
        "idemq.yaml",
        "      MetricName: JobsMisconfigured\n      Dimensions: [{ Name: Queue, Value: !GetAtt SourceQueue.QueueName }]\n"
        "      Statistic: Sum\n      Period: 60\n      EvaluationPeriods: 1\n      Threshold: 1\n",
        "      MetricName: JobsMisconfigured\n      Dimensions: [{ Name: Queue, Value: !GetAtt SourceQueue.QueueName }]\n"
        "      Statistic: Sum\n      Period: 60\n      EvaluationPeriods: 1\n      Threshold: 5\n",
        "deployment-error alarm that waits for five jobs",
        "no alarm on deployment errors >= 1",
    ),
    Break(
        "alarms",
        "terraform",
        "alarms.tf",
        'metric_name         = "JobsMisconfigured"\n  dimensions          = local.queue_dimension\n'
        '  statistic           = "Sum"\n  period              = 60\n  evaluation_periods  = 1\n',
        'metric_name         = "JobsMisconfigured"\n  dimensions          = local.queue_dimension\n'
        '  statistic           = "Sum"\n  period              = 60\n  evaluation_periods  = 5\n',
        "deployment-error alarm over five periods",
        "no alarm on deployment errors >= 1",
    ),
    Break(
        "alarms",
        "terraform",
        "alarms.tf",
        'metric_name = "ApproximateNumberOfMessagesVisible"\n      dimensions  = { QueueName = aws_sqs_queue.dlq.name }',
        'metric_name = "ApproximateNumberOfMessagesVisible"\n      dimensions  = { QueueName = aws_sqs_queue.source.name }',
        "DLQ-depth alarm watching the source",
        "no alarm on DLQ depth > 0",
    ),
    # The DLQ alarm must count letters an operator is reading (in flight).
    Break(
        "alarms",
        "terraform",
        "alarms.tf",
        'metric_name = "ApproximateNumberOfMessagesNotVisible"',
        'metric_name = "ApproximateNumberOfMessagesDelayed"',
        "DLQ alarm on visible letters only: goes OK while idemq dlq reads them",
        "no alarm on DLQ depth counting letters being read",
    ),
    Break(
        "alarms",
        "sam",
        "idemq.yaml",
        "          Expression: visible + inflight\n",
        "          Expression: visible\n",
        "DLQ alarm on the visible series alone",
        "no alarm on DLQ depth counting letters being read",
    ),
    # The role's guards keep the deployer's grants off idemq's resources.
    Break(
        "iam",
        "sam",
        "idemq.yaml",
        "                  - dynamodb:GetItem\n                Resource: [!GetAtt Table.Arn]\n",
        "                  - dynamodb:GetItem\n                  - dynamodb:BatchWriteItem\n"
        "                Resource: [!GetAtt Table.Arn]\n",
        "guard lets BatchWriteItem through on the table",
        "the guard on the table lets through",
    ),
    Break(
        "iam",
        "terraform",
        "function.tf",
        '    sid    = "DeadLetterQueueOnlyWhatIdemqCalls"\n    effect = "Deny"\n',
        '    sid    = "DeadLetterQueueOnlyWhatIdemqCalls"\n    effect = "Allow"\n',
        "DLQ guard turned into an Allow",
        "no Deny of all but idemq's actions on the dlq",
    ),
    # The deployer's environment may not move the table layout.
    Break(
        "function_contract",
        "terraform",
        "variables.tf",
        '"IDEMQ_JOB_ID_POINTER", "IDEMQ_KEY_PREFIX", "IDEMQ_ATTR_PK",',
        '"IDEMQ_JOB_ID_POINTER", "IDEMQ_ATTR_PK",',
        "environment may set IDEMQ_KEY_PREFIX",
        "the function sets IDEMQ_KEY_PREFIX",
    ),
]


def broken(t: Sam | Terraform, b: Break) -> Sam | Terraform:
    text = t.text(b.file)
    count = text.count(b.old)
    if count != 1:
        raise AssertionError(f"broken copy {b.id}: the text to replace occurs {count} times (must be once)")
    return t.with_text(b.file, text.replace(b.old, b.new))
