"""The SAM template as CloudFormation would deploy it, for given parameters.

The template is parsed by cfn-lint's decoder (YAML with the short intrinsic
tags), expanded by AWS's own SAM translator (so whatever SAM would add, such
as an implicit role or policy, is in what the rules see), then every
intrinsic function is resolved for one set of parameter values. ARNs and
URLs are synthesised from resource names the way AWS forms them.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import re
from pathlib import Path
from typing import Any

from cfnlint.decode import decode, decode_str

REGION = "us-east-1"
ACCOUNT = "123456789012"
STACK = "idemq-test"

NO_VALUE = object()


class Unsupported(Exception):
    """An intrinsic function or attribute this resolver does not know."""


def _plain(node: Any) -> Any:
    """cfn-lint's decoded nodes as plain dicts and lists."""
    return json.loads(json.dumps(node))


def load_sam(path: Path | None = None, text: str | None = None) -> dict[str, Any]:
    """The SAM template, decoded (intrinsics in their long form)."""
    template, matches = decode_str(text) if text is not None else decode(str(path))
    if matches:
        raise ValueError(f"template does not parse: {[str(m) for m in matches]}")
    return _plain(template)


def translate(sam: dict[str, Any]) -> dict[str, Any]:
    """AWS::Serverless-2016-10-31 expanded into plain CloudFormation."""
    # samtranslator wants a region for ARNs it may build; it calls no AWS API
    # for this template (no managed-policy names to look up).
    os.environ.setdefault("AWS_DEFAULT_REGION", REGION)
    # Its usage-metrics hook warns on every call outside the SAM CLI.
    logging.getLogger("samtranslator").setLevel(logging.ERROR)
    from samtranslator.translator.transform import transform

    sam = copy.deepcopy(sam)
    for res in sam.get("Resources", {}).values():
        if res.get("Type") == "AWS::Serverless::Function":
            # `sam build`/`sam package` replace the local CodeUri with an S3
            # object; the translator only accepts the latter.
            res["Properties"]["CodeUri"] = "s3://bucket/function.zip"

    class NoManagedPolicies:
        def load(self) -> dict[str, str]:
            return {}

    return _plain(transform(sam, {}, NoManagedPolicies()))


def parameter_defaults(template: dict[str, Any]) -> dict[str, str]:
    return {k: str(v["Default"]) for k, v in template.get("Parameters", {}).items() if "Default" in v}


def rejected_parameters(template: dict[str, Any], params: dict[str, str]) -> list[str]:
    """The parameters CloudFormation would refuse for these values."""
    bad = []
    for name, spec in template.get("Parameters", {}).items():
        if name not in params:
            bad.append(name)
            continue
        value = params[name]
        allowed = spec.get("AllowedValues")
        if allowed is not None and value not in [str(a) for a in allowed]:
            bad.append(name)
            continue
        if spec.get("Type") == "Number":
            try:
                n = float(value)
            except ValueError:
                bad.append(name)
                continue
            if ("MinValue" in spec and n < float(spec["MinValue"])) or (
                "MaxValue" in spec and n > float(spec["MaxValue"])
            ):
                bad.append(name)
                continue
        pattern = spec.get("AllowedPattern")
        if pattern is not None and re.fullmatch(pattern, value) is None:
            bad.append(name)
    if bad:
        return bad
    return rule_refusals(template, params)


def rule_refusals(template: dict[str, Any], params: dict[str, str]) -> list[str]:
    """The AssertDescriptions of the template's Rules that fail for these
    parameters: CloudFormation refuses the stack operation on each.
    https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/rules-section-structure.html
    (rule functions: .../intrinsic-function-reference-rules.html)."""
    values = {**parameter_defaults(template), **params}

    def ev(node: Any) -> Any:
        if isinstance(node, list):
            return [ev(x) for x in node]
        if not isinstance(node, dict):
            return node
        ((key, arg),) = node.items()
        if key == "Ref":
            return values[arg]
        if key == "Fn::Equals":
            a, b = (ev(x) for x in arg)
            return str(a) == str(b)
        if key == "Fn::Not":
            return not ev(arg[0])
        if key == "Fn::And":
            return all(ev(x) for x in arg)
        if key == "Fn::Or":
            return any(ev(x) for x in arg)
        if key == "Fn::Contains":
            items, value = ev(arg[0]), ev(arg[1])
            return str(value) in [str(x) for x in items]
        raise Unsupported(f"rule function {key}")

    out = []
    for name, rule in template.get("Rules", {}).items():
        if "RuleCondition" in rule and not ev(rule["RuleCondition"]):
            continue
        for a in rule.get("Assertions", []):
            if not ev(a["Assert"]):
                out.append(f"{name}: {a.get('AssertDescription', 'assertion failed')}")
    return out


class Stack:
    """A CloudFormation template with its parameters: resolves intrinsics."""

    def __init__(
        self,
        template: dict[str, Any],
        params: dict[str, str],
        nested: dict[str, tuple[dict[str, Any], dict[str, str]]] | None = None,
        name: str = STACK,
    ):
        """`nested`: for each AWS::CloudFormation::Stack resource, the
        template it names (TemplateURL) and parameter values that override
        what this stack passes it (the inputs under test)."""
        self.t = template
        self.name = name
        self.params = {**parameter_defaults(template), **params}
        self.resources: dict[str, Any] = template.get("Resources", {})
        self.mappings: dict[str, Any] = template.get("Mappings", {})
        self._conditions: dict[str, bool] = {}
        self.children: dict[str, Stack] = {}
        for lid, (child, overrides) in (nested or {}).items():
            passed = {k: str(v) for k, v in self.props(lid).get("Parameters", {}).items()}
            self.children[lid] = Stack(child, {**passed, **overrides}, name=f"{name}-{lid}")

    def stacks(self) -> list["Stack"]:
        """This stack and every stack nested in it."""
        return [self, *(s for c in self.children.values() for s in c.stacks())]

    # -- conditions --------------------------------------------------------

    def condition(self, name: str) -> bool:
        if name not in self._conditions:
            self._conditions[name] = bool(self.resolve(self.t["Conditions"][name]))
        return self._conditions[name]

    def present(self, logical_id: str) -> bool:
        cond = self.resources[logical_id].get("Condition")
        return cond is None or self.condition(cond)

    def of_type(self, type_: str) -> dict[str, dict[str, Any]]:
        return {k: v for k, v in self.resources.items() if v["Type"] == type_ and self.present(k)}

    def props(self, logical_id: str) -> dict[str, Any]:
        """A resource's properties, fully resolved."""
        return self.resolve(self.resources[logical_id].get("Properties", {}))

    # -- intrinsics --------------------------------------------------------

    def resolve(self, node: Any) -> Any:
        if isinstance(node, list):
            items = [self.resolve(x) for x in node]
            return [x for x in items if x is not NO_VALUE]
        if not isinstance(node, dict):
            return node
        if len(node) == 1:
            ((key, arg),) = node.items()
            fn = {
                "Ref": self._ref,
                "Fn::GetAtt": self._get_att,
                "Fn::Sub": self._sub,
                "Fn::FindInMap": self._find_in_map,
                "Fn::If": self._if,
                "Fn::Equals": self._equals,
                "Fn::Not": lambda a: not self.resolve(a[0]),
                "Fn::And": lambda a: all(self.resolve(x) for x in a),
                "Fn::Or": lambda a: any(self.resolve(x) for x in a),
                "Condition": self.condition,
                "Fn::Join": lambda a: str(self.resolve(a[0])).join(str(x) for x in self.resolve(a[1])),
                "Fn::Select": lambda a: self.resolve(a[1])[int(self.resolve(a[0]))],
                "Fn::Split": lambda a: str(self.resolve(a[1])).split(self.resolve(a[0])),
            }.get(key)
            if fn is not None:
                return fn(arg)
            if key.startswith("Fn::"):
                raise Unsupported(key)
        out = {}
        for k, v in node.items():
            r = self.resolve(v)
            if r is not NO_VALUE:
                out[k] = r
        return out

    def _equals(self, arg: list[Any]) -> bool:
        a, b = (self.resolve(x) for x in arg)
        return str(a) == str(b)

    def _if(self, arg: list[Any]) -> Any:
        cond, then, other = arg
        return self.resolve(then) if self.condition(cond) else self.resolve(other)

    def _find_in_map(self, arg: list[Any]) -> Any:
        m, k1, k2 = (str(self.resolve(x)) for x in arg)
        return self.mappings[m][k1][k2]

    def _pseudo(self, name: str) -> Any:
        return {
            "AWS::Region": REGION,
            "AWS::AccountId": ACCOUNT,
            "AWS::Partition": "aws",
            "AWS::StackName": self.name,
            "AWS::URLSuffix": "amazonaws.com",
            "AWS::NoValue": NO_VALUE,
        }[name]

    def _ref(self, name: str) -> Any:
        if name.startswith("AWS::"):
            return self._pseudo(name)
        if name in self.params:
            if self.t.get("Parameters", {}).get(name, {}).get("Type") == "CommaDelimitedList":
                return self.params[name].split(",")
            return self.params[name]
        res = self.resources.get(name)
        if res is None:
            raise Unsupported(f"Ref to unknown {name}")
        t, p = res["Type"], res.get("Properties", {})
        if t == "AWS::SQS::Queue":
            return f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/{self._physical(name, 'QueueName')}"
        if t == "AWS::DynamoDB::Table":
            return self._physical(name, "TableName")
        if t == "AWS::Logs::LogGroup":
            return self.resolve(p["LogGroupName"])
        if t == "AWS::Lambda::Function":
            return self.resolve(p.get("FunctionName", name))
        if t == "AWS::CloudWatch::Dashboard":
            return self.resolve(p.get("DashboardName", name))
        if t == "AWS::IAM::ManagedPolicy":
            return f"arn:aws:iam::{ACCOUNT}:policy/{name}"
        if t == "AWS::IAM::Role":
            return name
        if t == "AWS::CloudWatch::Alarm":
            return self.resolve(p.get("AlarmName", name))
        return name

    def _physical(self, logical: str, key: str) -> str:
        """A resource's name: its name property, or, when the template
        leaves it out, the one CloudFormation makes up (stack name, logical
        id and a random suffix; here without the suffix)."""
        p = self.resources[logical].get("Properties", {})
        return self.resolve(p[key]) if key in p else f"{self.name}-{logical}"

    def _get_att(self, arg: Any) -> Any:
        logical, attr = arg.split(".", 1) if isinstance(arg, str) else arg
        res = self.resources[logical]
        t, p = res["Type"], res.get("Properties", {})
        if t == "AWS::CloudFormation::Stack" and attr.startswith("Outputs."):
            child = self.children[logical]
            return child.resolve(child.t["Outputs"][attr.split(".", 1)[1]]["Value"])
        name = lambda key: self._physical(logical, key)  # noqa: E731
        table = {
            ("AWS::SQS::Queue", "Arn"): lambda: f"arn:aws:sqs:{REGION}:{ACCOUNT}:{name('QueueName')}",
            ("AWS::SQS::Queue", "QueueName"): lambda: name("QueueName"),
            ("AWS::SQS::Queue", "QueueUrl"): lambda: self._ref(logical),
            ("AWS::DynamoDB::Table", "Arn"): lambda: f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{name('TableName')}",
            # CloudFormation's log group ARN ends in ":*".
            ("AWS::Logs::LogGroup", "Arn"): lambda: (
                f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:{name('LogGroupName')}:*"
            ),
            ("AWS::IAM::Role", "Arn"): lambda: f"arn:aws:iam::{ACCOUNT}:role/{logical}",
            ("AWS::Lambda::Function", "Arn"): lambda: (
                f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{self._ref(logical)}"
            ),
        }
        fn = table.get((t, attr))
        if fn is None:
            raise Unsupported(f"GetAtt {t}.{attr}")
        return fn()

    def _sub(self, arg: Any) -> str:
        if isinstance(arg, str):
            text, extra = arg, {}
        else:
            text, extra = arg[0], {k: self.resolve(v) for k, v in arg[1].items()}

        def one(m: re.Match[str]) -> str:
            ref = m.group(1)
            if ref.startswith("!"):
                return "${" + ref[1:] + "}"
            if ref in extra:
                return str(extra[ref])
            if "." in ref and not ref.startswith("AWS::"):
                return str(self._get_att(ref))
            return str(self._ref(ref))

        return re.sub(r"\$\{([^}]+)\}", one, text)
