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


def grid() -> Iterator[dict[str, Any]]:
    """Timeout x window together (the visibility rule joins them); the others one at a time."""
    for t, w in itertools.product(GRID["function_timeout"], GRID["batching_window"]):
        yield {"function_timeout": t, "batching_window": w}
    for key in ("max_receive_count", "source_retention_days"):
        for v in GRID[key]:
            yield {key: v}


class Sam:
    kind = "sam"
    NAMES = {
        "function_timeout": "FunctionTimeoutSeconds",
        "batching_window": "MaximumBatchingWindowSeconds",
        "max_receive_count": "MaxReceiveCount",
        "source_retention_days": "SourceRetentionDays",
    }

    def __init__(self, path: Path, text: str | None = None):
        self.path = path
        self.text = path.read_text() if text is None else text
        self.raw = cfn_eval.load_sam(text=self.text)
        self.cfn = cfn_eval.translate(self.raw)

    def with_text(self, text: str) -> "Sam":
        return Sam(self.path, text)

    def params(self, inputs: dict[str, Any], extra: dict[str, str] | None = None) -> dict[str, str]:
        p = cfn_eval.parameter_defaults(self.raw)
        p.update({self.NAMES[k]: str(v) for k, v in inputs.items()})
        p.update(extra or {})
        return p

    def accepts(self, inputs: dict[str, Any]) -> bool:
        return not cfn_eval.rejected_parameters(self.raw, self.params(inputs))

    def deployment(self, inputs: dict[str, Any] | None = None, **extra: str) -> model.Deployment:
        return model.from_sam(self.cfn, self.params(inputs or {}, extra))

    # What the checks pass for "an alarm topic" and "the operator policy on".
    def with_topic(self, topic: str) -> model.Deployment:
        return self.deployment(AlarmTopicArn=topic)

    def with_operator(self) -> model.Deployment:
        return self.deployment(CreateOperatorPolicy="true")


class Terraform:
    kind = "terraform"
    NAMES = {
        "function_timeout": "function_timeout",
        "batching_window": "maximum_batching_window",
        "max_receive_count": "max_receive_count",
        "source_retention_days": "source_retention_days",
    }

    def __init__(self, root: Path, overrides: dict[str, str] | None = None):
        """`overrides`: module file name -> replacement text (a broken copy)."""
        self.root = root
        self.example = root / "examples" / "ledger"
        self.overrides = overrides or {}
        source, self.base_inputs = model.terraform_inputs_from_example(self.example, "ledger")
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
        return Terraform(self.root, {**self.overrides, name: text})

    def _module(self, inputs: dict[str, Any], extra: dict[str, Any] | None = None) -> tf_eval.Module:
        values = dict(self.base_inputs)
        values.update({self.NAMES[k]: v for k, v in inputs.items()})
        values.update(extra or {})
        return tf_eval.Module(self.module, values)

    def accepts(self, inputs: dict[str, Any]) -> bool:
        return not self._module(inputs).invalid_inputs()

    def deployment(self, inputs: dict[str, Any] | None = None, **extra: Any) -> model.Deployment:
        return model.from_terraform(self._module(inputs or {}, extra))

    def with_topic(self, topic: str) -> model.Deployment:
        return self.deployment(alarm_topic_arn=topic)

    def with_operator(self) -> model.Deployment:
        return self.deployment(create_operator_policy=True)


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
        if t.accepts(inputs):
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

    @property
    def id(self) -> str:
        return f"{self.kind}-{self.rule}-{self.why.split(':')[0]}"


BREAKS = [
    # visibility timeout >= 6 x timeout + window
    Break(
        "visibility_timeout",
        "sam",
        "template.yaml",
        '"30": { Seconds: 240 }',
        '"30": { Seconds: 180 }',
        "mapping row below 6 x 30 s + window",
    ),
    Break(
        "visibility_timeout",
        "terraform",
        "main.tf",
        "6 * var.function_timeout",
        "5 * var.function_timeout",
        "5 x instead of 6 x",
    ),
    # maxReceiveCount >= 5
    Break(
        "max_receive_count",
        "sam",
        "template.yaml",
        "MinValue: 5\n",
        "MinValue: 1\n",
        "guard lowered: 4 receives accepted",
    ),
    Break(
        "max_receive_count",
        "terraform",
        "variables.tf",
        "var.max_receive_count >= 5",
        "var.max_receive_count >= 1",
        "guard lowered: 4 receives accepted",
    ),
    # DLQ retention 14 d and > source
    Break(
        "dlq_retention",
        "sam",
        "template.yaml",
        "MessageRetentionPeriod: 1209600",
        "MessageRetentionPeriod: 345600",
        "DLQ keeps 4 days",
    ),
    Break(
        "dlq_retention",
        "terraform",
        "main.tf",
        "dlq_retention_days  = 14",
        "dlq_retention_days  = 4 ",
        "DLQ keeps 4 days",
    ),
    # RedriveAllowPolicy byQueue naming only the source
    Break(
        "redrive_allow_policy",
        "sam",
        "template.yaml",
        "redrivePermission: byQueue",
        "redrivePermission: allowAll",
        "allowAll",
    ),
    Break(
        "redrive_allow_policy",
        "terraform",
        "main.tf",
        "[aws_sqs_queue.source.arn]\n  })",
        "[aws_sqs_queue.source.arn, aws_sqs_queue.dlq.arn]\n  })",
        "a second source",
    ),
    # marker TTL >= source + DLQ retention + replay window
    Break(
        "marker_ttl",
        "sam",
        "template.yaml",
        '"4": { Seconds: 345600, MarkerTtl: 21d }',
        '"4": { Seconds: 345600, MarkerTtl: 14d }',
        "14 days for 4 d of source retention",
    ),
    Break(
        "marker_ttl",
        "terraform",
        "function.tf",
        '"${local.marker_ttl_days}d"',
        '"${local.marker_ttl_days}h"',
        "hours instead of days",
    ),
    # encryption at rest
    Break(
        "encryption",
        "sam",
        "template.yaml",
        "      SqsManagedSseEnabled: true\n      RedrivePolicy:",
        "      SqsManagedSseEnabled: false\n      RedrivePolicy:",
        "source queue unencrypted",
    ),
    Break(
        "encryption",
        "terraform",
        "main.tf",
        "server_side_encryption {\n    enabled = true",
        "server_side_encryption {\n    enabled = false",
        "table unencrypted",
    ),
    # point-in-time recovery
    Break(
        "pitr",
        "sam",
        "template.yaml",
        "PointInTimeRecoveryEnabled: true",
        "PointInTimeRecoveryEnabled: false",
        "PITR off",
    ),
    Break(
        "pitr",
        "terraform",
        "main.tf",
        "point_in_time_recovery {\n    enabled = true",
        "point_in_time_recovery {\n    enabled = false",
        "PITR off",
    ),
    # the batch contract / table layout
    Break(
        "function_contract",
        "sam",
        "template.yaml",
        "FunctionResponseTypes: [ReportBatchItemFailures]",
        "FunctionResponseTypes: []",
        "no partial batch responses",
    ),
    Break(
        "function_contract",
        "terraform",
        "main.tf",
        'attribute_name = "expires_at"',
        'attribute_name = "ttl"',
        "TTL on the wrong attribute",
    ),
    # least privilege (the function role)
    Break(
        "iam",
        "sam",
        "template.yaml",
        "                  - sqs:GetQueueUrl\n                Resource: !GetAtt SourceQueue.Arn",
        "                  - sqs:GetQueueUrl\n                  - sqs:PurgeQueue\n                Resource: !GetAtt SourceQueue.Arn",
        "extra action: PurgeQueue",
    ),
    Break(
        "iam",
        "sam",
        "template.yaml",
        "                Resource: !GetAtt Table.Arn\n        - PolicyName: logs",
        '                Resource: "*"\n        - PolicyName: logs',
        "wildcard resource on the table actions",
    ),
    Break(
        "iam",
        "sam",
        "template.yaml",
        "                  - sqs:ChangeMessageVisibility\n                  - sqs:GetQueueAttributes\n                  - sqs:GetQueueUrl\n                Resource: !GetAtt SourceQueue.Arn",
        "                  - sqs:GetQueueAttributes\n                  - sqs:GetQueueUrl\n                Resource: !GetAtt SourceQueue.Arn",
        "missing action: ChangeMessageVisibility",
    ),
    Break(
        "iam",
        "terraform",
        "function.tf",
        '"sqs:SendMessage",\n      "sqs:GetQueueAttributes",',
        '"sqs:SendMessage",\n      "sqs:Get*",\n      "sqs:GetQueueAttributes",',
        "wildcard action: sqs:Get*",
    ),
    Break(
        "iam",
        "terraform",
        "function.tf",
        "resources = [aws_sqs_queue.dlq.arn]\n  }\n\n  # TransactWriteItems",
        "resources = [aws_sqs_queue.source.arn]\n  }\n\n  # TransactWriteItems",
        "SendMessage on the source instead of the DLQ",
    ),
    Break(
        "iam",
        "terraform",
        "function.tf",
        '      "dynamodb:ConditionCheckItem",\n      "dynamodb:GetItem",\n    ]\n    resources = [aws_dynamodb_table.idemq.arn]',
        '      "dynamodb:GetItem",\n    ]\n    resources = [aws_dynamodb_table.idemq.arn]',
        "missing action: ConditionCheckItem",
    ),
    # the operator policy follows the CLI's code too
    Break("operator", "sam", "template.yaml", "              - dynamodb:Scan\n", "", "missing action: Scan"),
    Break(
        "operator",
        "terraform",
        "operator.tf",
        '      "dynamodb:Scan",\n',
        '      "dynamodb:Scan",\n      "dynamodb:DeleteTable",\n',
        "extra action: DeleteTable",
    ),
    # alarms
    Break(
        "alarms",
        "sam",
        "template.yaml",
        "MetricName: JobsConflict\n",
        "MetricName: JobsConflicts\n",
        "conflict alarm on a metric nobody emits",
    ),
    Break(
        "alarms",
        "terraform",
        "alarms.tf",
        "dimensions          = { QueueName = aws_sqs_queue.dlq.name }",
        "dimensions          = { QueueName = aws_sqs_queue.source.name }",
        "DLQ-depth alarm watching the source",
    ),
]


def broken(t: Sam | Terraform, b: Break) -> Sam | Terraform:
    text = t.text if isinstance(t, Sam) else t.text(b.file)
    count = text.count(b.old)
    if count != 1:
        raise AssertionError(f"broken copy {b.id}: the text to replace occurs {count} times (must be once)")
    new_text = text.replace(b.old, b.new)
    return t.with_text(new_text) if isinstance(t, Sam) else t.with_text(b.file, new_text)
