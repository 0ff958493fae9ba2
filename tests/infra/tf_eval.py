"""A small evaluator for the Terraform the idemq module is written in.

python-hcl2 parses the files (the real HCL2 grammar); this walks its parse
tree and evaluates expressions for a given set of input variables, so the
rules can be checked on the values Terraform would send to AWS, for every
input the module's validations accept.

It covers the HCL the module uses (literals, templates, arithmetic,
comparisons, conditionals, references, a handful of functions). Anything
else raises `Unsupported`, loudly: a new construct in the module must be
taught here rather than silently skipped. Values only known after apply
(ARNs, URLs) are synthesised from the resource's name the way AWS forms
them, which is what the rules compare.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hcl2
from lark import Token, Tree

REGION = "us-east-1"
ACCOUNT = "123456789012"


class Unsupported(Exception):
    """An HCL construct or function this evaluator does not know."""


@dataclass(frozen=True)
class Unknown:
    """A value Terraform only knows after apply (e.g. a file hash)."""

    what: str

    def __str__(self) -> str:
        return f"(known after apply: {self.what})"


# ---------------------------------------------------------------------------
# Blocks
# ---------------------------------------------------------------------------


@dataclass
class Block:
    type: str
    labels: list[str]
    attributes: dict[str, Tree] = field(default_factory=dict)
    blocks: list["Block"] = field(default_factory=list)

    def sub(self, type_: str) -> list["Block"]:
        return [b for b in self.blocks if b.type == type_]


def _trees(node: Tree) -> list[Tree]:
    return [c for c in node.children if isinstance(c, Tree) and c.data != "new_line_or_comment"]


def _name(node: Tree | Token) -> str:
    """The text of an identifier, keyword or label."""
    if isinstance(node, Token):
        return str(node)
    if node.data in ("identifier", "keyword", "literal_value"):
        return str(node.children[0])
    if node.data == "string":
        parts = [c for c in node.children if isinstance(c, Tree)]
        text = ""
        for p in parts:
            (child,) = p.children
            if not isinstance(child, Token):
                raise Unsupported("interpolation in a block label")
            text += str(child)
        return text
    if node.data == "expr_term":
        return _name(_trees(node)[0])
    raise Unsupported(f"name from {node.data}")


def _body(body: Tree, into: Block) -> Block:
    for item in _trees(body):
        if item.data == "attribute":
            key, expr = _trees(item)
            into.attributes[_name(key)] = expr
        elif item.data == "block":
            parts = _trees(item)
            head, rest = parts[0], parts[1:]
            *labels, inner = rest
            into.blocks.append(_body(inner, Block(_name(head), [_name(lbl) for lbl in labels])))
    return into


def parse_dir(path: Path) -> Block:
    """All *.tf files of a directory as one top-level block."""
    root = Block("module", [str(path)])
    for tf in sorted(path.glob("*.tf")):
        tree = hcl2.parses_to_tree(tf.read_text())
        (body,) = _trees(tree)
        _body(body, root)
    return root


def parse_text(text: str) -> Block:
    tree = hcl2.parses_to_tree(text)
    (body,) = _trees(tree)
    return _body(body, Block("module", ["<text>"]))


# ---------------------------------------------------------------------------
# Strings
# ---------------------------------------------------------------------------

_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\"}


def _unescape(s: str) -> str:
    out, i = [], 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s) and s[i + 1] in _ESCAPES:
            out.append(_ESCAPES[s[i + 1]])
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out).replace("$${", "${").replace("%%{", "%{")


def _stringify(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    if isinstance(v, Unknown):
        return str(v)
    if isinstance(v, (int, float, str)):
        return str(v)
    raise Unsupported(f"cannot interpolate {type(v).__name__}")


def _to_json(v: Any) -> Any:
    if isinstance(v, Unknown):
        return str(v)
    if isinstance(v, dict):
        return {k: _to_json(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_to_json(x) for x in v]
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v


# ---------------------------------------------------------------------------
# Evaluation
# ---------------------------------------------------------------------------


class Module:
    """A parsed module plus its input variables: evaluates anything in it."""

    def __init__(self, root: Block, inputs: dict[str, Any], path_module: str = "."):
        self.root = root
        self.path_module = path_module
        self.variables = {b.labels[0]: b for b in root.sub("variable")}
        self.locals: dict[str, Tree] = {}
        for b in root.sub("locals"):
            self.locals.update(b.attributes)
        self.resources = {(b.labels[0], b.labels[1]): b for b in root.sub("resource")}
        self.data = {(b.labels[0], b.labels[1]): b for b in root.sub("data")}
        unknown = set(inputs) - set(self.variables)
        if unknown:
            raise KeyError(f"no such variable(s): {sorted(unknown)}")
        self.vars: dict[str, Any] = {}
        for name, block in self.variables.items():
            if name in inputs:
                self.vars[name] = inputs[name]
            elif "default" in block.attributes:
                self.vars[name] = self.eval(block.attributes["default"])
            else:
                self.vars[name] = Unknown(f"var.{name} (required)")
        self._local_cache: dict[str, Any] = {}
        # count.index while reading one instance of a counted resource.
        self.count_index = 0

    # -- validations -------------------------------------------------------

    def invalid_inputs(self) -> list[str]:
        """The variables whose validation blocks reject the current inputs."""
        bad = []
        for name, block in self.variables.items():
            for v in block.sub("validation"):
                try:
                    ok = self.eval(v.attributes["condition"])
                except (ValueError, TypeError, re.error):
                    ok = False
                if ok is not True:
                    bad.append(name)
        return bad + self.failed_preconditions()

    def failed_preconditions(self) -> list[str]:
        """The error messages of the resources' lifecycle preconditions that
        fail for the current inputs (Terraform stops the plan on each)."""
        out = []
        for (type_, name), block in self.resources.items():
            if self.count(block) == 0:
                continue
            for lc in block.sub("lifecycle"):
                for pre in lc.sub("precondition"):
                    if self.eval(pre.attributes["condition"]) is not True:
                        out.append(f"{type_}.{name}: {self.eval(pre.attributes['error_message'])}")
        return out

    # -- resources ---------------------------------------------------------

    def count(self, block: Block) -> int:
        if "count" not in block.attributes:
            return 1
        return int(self.eval(block.attributes["count"]))

    def resource(self, type_: str, name: str) -> Block:
        return self.resources[(type_, name)]

    def resources_of(self, type_: str) -> dict[str, Block]:
        return {n: b for (t, n), b in self.resources.items() if t == type_ and self.count(b) > 0}

    def arg(self, block: Block, name: str, default: Any = None) -> Any:
        if name in block.attributes:
            return self.eval(block.attributes[name])
        return default

    def _resource_attr(self, type_: str, name: str, attr: str) -> Any:
        block = self.resources.get((type_, name))
        if block is None:
            raise Unsupported(f"reference to undeclared resource {type_}.{name}")
        if attr in block.attributes:
            return self.eval(block.attributes[attr])
        own_name = lambda key="name": self.arg(block, key)  # noqa: E731
        computed = {
            ("aws_sqs_queue", "arn"): lambda: f"arn:aws:sqs:{REGION}:{ACCOUNT}:{own_name()}",
            ("aws_sqs_queue", "id"): lambda: f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/{own_name()}",
            ("aws_sqs_queue", "url"): lambda: f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/{own_name()}",
            ("aws_dynamodb_table", "arn"): lambda: f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{own_name()}",
            ("aws_dynamodb_table", "id"): own_name,
            # Terraform's log group ARN has no ":*" suffix (CloudFormation's has).
            ("aws_cloudwatch_log_group", "arn"): lambda: f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:{own_name()}",
            ("aws_iam_role", "arn"): lambda: f"arn:aws:iam::{ACCOUNT}:role/{own_name()}",
            ("aws_iam_role", "id"): own_name,
            ("aws_iam_policy", "arn"): lambda: f"arn:aws:iam::{ACCOUNT}:policy/{own_name()}",
            ("aws_lambda_function", "arn"): lambda: (
                f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{own_name('function_name')}"
            ),
        }
        fn = computed.get((type_, attr))
        if fn is None:
            return Unknown(f"{type_}.{name}.{attr}")
        return fn()

    def _data_attr(self, type_: str, name: str, attr: str) -> Any:
        if type_ == "aws_region" and attr in ("name", "region"):
            return REGION
        if type_ == "aws_caller_identity" and attr == "account_id":
            return ACCOUNT
        if type_ == "aws_partition" and attr == "partition":
            return "aws"
        if type_ == "aws_iam_policy_document" and attr == "json":
            return json.dumps(self.policy_document(self.data[(type_, name)]))
        raise Unsupported(f"data.{type_}.{name}.{attr}")

    def policy_document(self, block: Block) -> dict[str, Any]:
        """An aws_iam_policy_document data source as the JSON policy it renders."""
        statements = []
        # Statements merged in from other documents come first.
        for doc in self.arg(block, "source_policy_documents", []) or []:
            statements += json.loads(doc)["Statement"]
        for st in block.sub("statement"):
            for unsupported in ("not_resources", "not_principals"):
                if unsupported in st.attributes or st.sub(unsupported):
                    raise Unsupported(f"policy statement with {unsupported}")
            s: dict[str, Any] = {"Effect": self.arg(st, "effect", "Allow")}
            if "sid" in st.attributes:
                s["Sid"] = self.arg(st, "sid")
            if "not_actions" in st.attributes:
                s["NotAction"] = self.arg(st, "not_actions")
            else:
                s["Action"] = self.arg(st, "actions", [])
            if "resources" in st.attributes:
                s["Resource"] = self.arg(st, "resources")
            principals = st.sub("principals")
            if principals:
                # type "*" with identifiers ["*"] renders as Principal "*".
                kinds = {self.arg(p_, "type"): self.arg(p_, "identifiers") for p_ in principals}
                s["Principal"] = "*" if kinds == {"*": ["*"]} else kinds
            conditions = st.sub("condition")
            if conditions:
                cond: dict[str, dict[str, Any]] = {}
                for c in conditions:
                    cond.setdefault(self.arg(c, "test"), {})[self.arg(c, "variable")] = self.arg(c, "values")
                s["Condition"] = cond
            statements.append(s)
        return {"Version": "2012-10-17", "Statement": statements}

    # -- expressions -------------------------------------------------------

    def eval(self, node: Tree | Token) -> Any:
        if isinstance(node, Token):
            raise Unsupported(f"bare token {node.type}")
        method = getattr(self, f"_e_{node.data}", None)
        if method is None:
            raise Unsupported(f"HCL construct {node.data!r}")
        return method(node)

    def _e_expr_term(self, node: Tree) -> Any:
        (inner,) = _trees(node)
        return self.eval(inner)

    def _e_int_lit(self, node: Tree) -> Any:
        return int(str(node.children[0]))

    def _e_float_lit(self, node: Tree) -> Any:
        return float(str(node.children[0]))

    def _e_literal_value(self, node: Tree) -> Any:
        return {"true": True, "false": False, "null": None}[str(node.children[0])]

    def _e_string(self, node: Tree) -> Any:
        parts: list[Any] = []
        for part in [c for c in node.children if isinstance(c, Tree)]:
            (child,) = part.children
            if isinstance(child, Token):
                if child.type in ("STRING_CHARS", "ESCAPED_INTERPOLATION", "ESCAPED_DIRECTIVE"):
                    parts.append(_unescape(str(child)))
                    continue
                raise Unsupported(f"string part {child.type}")
            if child.data == "interpolation":
                (expr,) = _trees(child)
                parts.append(self.eval(expr))
            else:
                raise Unsupported(f"template directive {child.data}")
        if len(parts) == 1 and not isinstance(parts[0], str):
            return parts[0]  # "${x}" keeps x's type, as in Terraform
        return "".join(_stringify(p) for p in parts)

    def _e_tuple(self, node: Tree) -> Any:
        return [self.eval(e) for e in _trees(node)]

    def _e_object(self, node: Tree) -> Any:
        out = {}
        for elem in _trees(node):
            key_node, value = _trees(elem)
            (key,) = _trees(key_node)
            inner = _trees(key)[0] if key.data == "expr_term" else key
            if inner.data in ("identifier", "keyword"):
                k = _name(inner)
            else:
                k = self.eval(key)
            out[_stringify(k)] = self.eval(value)
        return out

    def _e_identifier(self, node: Tree) -> Any:
        raise Unsupported(f"bare reference {_name(node)!r}")

    def _e_conditional(self, node: Tree) -> Any:
        cond, then, other = _trees(node)
        c = self.eval(cond)
        if isinstance(c, Unknown):
            return c
        return self.eval(then) if c else self.eval(other)

    def _e_unary_op(self, node: Tree) -> Any:
        op = str(node.children[0])
        (value,) = _trees(node)
        v = self.eval(value)
        return -v if op == "-" else (not v)

    def _e_binary_op(self, node: Tree) -> Any:
        left, term = _trees(node)
        op_node, right = _trees(term)
        op = str(op_node.children[0])
        a = self.eval(left)
        if op == "&&" and a is False:
            return False
        if op == "||" and a is True:
            return True
        b = self.eval(right)
        if isinstance(a, Unknown) or isinstance(b, Unknown):
            return a if isinstance(a, Unknown) else b
        ops = {
            "+": lambda: a + b,
            "-": lambda: a - b,
            "*": lambda: a * b,
            "/": lambda: a / b,
            "%": lambda: a % b,
            "==": lambda: a == b,
            "!=": lambda: a != b,
            "<": lambda: a < b,
            ">": lambda: a > b,
            "<=": lambda: a <= b,
            ">=": lambda: a >= b,
            "&&": lambda: bool(a and b),
            "||": lambda: bool(a or b),
        }
        return ops[op]()

    def _e_function_call(self, node: Tree) -> Any:
        parts = _trees(node)
        name = _name(parts[0])
        args_node = parts[1] if len(parts) > 1 else None
        arg_nodes = _trees(args_node) if args_node is not None else []
        if name == "can":
            try:
                self.eval(arg_nodes[0])
                return True
            except (ValueError, TypeError, re.error, KeyError):
                return False
        args = [self.eval(a) for a in arg_nodes]
        if any(isinstance(a, Unknown) for a in args) and name not in ("jsonencode",):
            return Unknown(f"{name}(...)")
        funcs = {
            "jsonencode": lambda: json.dumps(_to_json(args[0]), separators=(",", ":")),
            "tostring": lambda: _stringify(args[0]),
            "tonumber": lambda: float(args[0]) if "." in str(args[0]) else int(args[0]),
            "max": lambda: max(args),
            "min": lambda: min(args),
            "floor": lambda: math.floor(args[0]),
            "ceil": lambda: math.ceil(args[0]),
            "length": lambda: len(args[0]),
            "concat": lambda: [x for a in args for x in a],
            "keys": lambda: sorted(args[0]),
            "merge": lambda: {k: v for a in args for k, v in a.items()},
            "contains": lambda: args[1] in args[0],
            "setintersection": lambda: sorted(set(args[0]).intersection(*map(set, args[1:]))),
            "regex": lambda: _regex(args[0], args[1]),
            "filebase64sha256": lambda: Unknown(f"filebase64sha256({args[0]})"),
            # The first argument that is neither null nor an empty string
            # (https://developer.hashicorp.com/terraform/language/functions/coalesce);
            # Terraform fails when there is none, and so does this.
            "coalesce": lambda: next(a for a in args if a is not None and a != ""),
        }
        if name not in funcs:
            raise Unsupported(f"function {name}()")
        return funcs[name]()

    def _e_get_attr_expr_term(self, node: Tree) -> Any:
        return self._reference(node)

    def _e_index_expr_term(self, node: Tree) -> Any:
        return self._reference(node)

    def _reference(self, node: Tree) -> Any:
        """var.x, local.x, path.module, count.index, TYPE.NAME[i].attr, data.TYPE.NAME.attr."""
        path: list[Any] = []
        cur: Tree = node
        while cur.data in ("get_attr_expr_term", "index_expr_term"):
            base, step = _trees(cur)
            if step.data == "get_attr":
                path.append(_name(_trees(step)[0]))
            elif step.data == "short_index":
                path.append(int(str(step.children[-1])))
            elif step.data == "braces_index":
                path.append(self.eval(_trees(step)[0]))
            else:
                raise Unsupported(step.data)
            cur = base
            if cur.data == "expr_term":
                (cur,) = _trees(cur)
        if cur.data != "identifier":
            value = self.eval(cur)
            for step in reversed(path):
                value = value[step]
            return value
        path.append(_name(cur))
        path.reverse()
        head = path[0]
        if head == "var":
            value, rest = self.vars[path[1]], path[2:]
        elif head == "local":
            value, rest = self._local(path[1]), path[2:]
        elif head == "path" and path[1] == "module":
            value, rest = self.path_module, path[2:]
        elif head == "count" and path[1] == "index":
            value, rest = self.count_index, path[2:]
        elif head == "data":
            value, rest = self._data_attr(path[1], path[2], path[3]), path[4:]
        else:
            type_, name, rest = path[0], path[1], path[2:]
            if rest and isinstance(rest[0], int):
                rest = rest[1:]  # a counted resource: [0] is the one instance
            if not rest:
                raise Unsupported(f"whole-resource reference {type_}.{name}")
            value, rest = self._resource_attr(type_, name, rest[0]), rest[1:]
        for step in rest:
            value = value[step]
        return value

    def _local(self, name: str) -> Any:
        if name not in self._local_cache:
            if name not in self.locals:
                raise Unsupported(f"undeclared local.{name}")
            self._local_cache[name] = self.eval(self.locals[name])
        return self._local_cache[name]


def _regex(pattern: str, s: str) -> str:
    m = re.search(pattern, s)
    if m is None:
        raise ValueError(f"no match for {pattern!r}")
    return m.group(0)
