"""The queue + DLQ + table part of the SAM template (idemq.yaml), deployed through
CloudFormation on the local stack, next to what `idemq init` creates.

Runs when the local stack is up (scripts/stack.sh up); skipped otherwise.

The queues go to LocalStack's CloudFormation. The table goes to the
CloudFormation of whatever serves DynamoDB (AWS_ENDPOINT_URL_DYNAMODB): on the
host stack that is moto, because LocalStack's DynamoDB needs a jar it
downloads at run time and is not enabled there (its CloudFormation answers
"Service 'dynamodb' is not enabled"); with the Docker stack it is LocalStack.
moto's CloudFormation creates the table's keys and billing mode but ignores
TimeToLiveSpecification, PointInTimeRecoverySpecification and
SSESpecification, so the TTL is compared as the template declares it.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import time
import urllib.request
import warnings
from pathlib import Path
from typing import Any

import pytest

VOLATILE = {
    "QueueArn",
    "CreatedTimestamp",
    "LastModifiedTimestamp",
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesDelayed",
    "ApproximateNumberOfMessagesNotVisible",
}


def _stack_env(repo: Path) -> dict[str, str]:
    path = repo / ".state" / "stack.env"
    if not path.exists():
        pytest.skip("local stack not started (scripts/stack.sh up): CloudFormation deploy not checked")
    env = dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line and not line.startswith("#"))
    try:
        with urllib.request.urlopen(f"{env['AWS_ENDPOINT_URL']}/_localstack/health", timeout=2) as r:
            health = json.load(r)["services"]
    except OSError:
        pytest.skip("local stack not running (scripts/stack.sh up): CloudFormation deploy not checked")
    if health.get("cloudformation") not in ("available", "running"):
        pytest.skip("LocalStack runs without CloudFormation")
    return env


@pytest.fixture(scope="module")
def aws(repo):
    env = _stack_env(repo)
    import boto3

    session = boto3.session.Session(
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        region_name=env["AWS_DEFAULT_REGION"],
    )
    return {
        "env": env,
        "cfn_sqs": session.client("cloudformation", endpoint_url=env["AWS_ENDPOINT_URL_SQS"]),
        "cfn_ddb": session.client("cloudformation", endpoint_url=env["AWS_ENDPOINT_URL_DYNAMODB"]),
        "sqs": session.client("sqs", endpoint_url=env["AWS_ENDPOINT_URL_SQS"]),
        "ddb": session.client("dynamodb", endpoint_url=env["AWS_ENDPOINT_URL_DYNAMODB"]),
    }


@pytest.fixture(scope="module")
def idemq_bin(repo) -> Path:
    """The CLI as `cargo test` built it (scripts/test.sh runs this after);
    built here only when missing."""
    if os.environ.get("IDEMQ_BIN"):
        return Path(os.environ["IDEMQ_BIN"])
    path = repo / "target" / "debug" / "idemq"
    if not path.exists():
        subprocess.run(["cargo", "build", "--locked", "--quiet", "-p", "idemq-cli", "--bin", "idemq"], cwd=repo, check=True)
    return path


def _deploy(cfn, name: str, template: dict[str, Any], params: dict[str, str]) -> None:
    cfn.create_stack(
        StackName=name,
        TemplateBody=json.dumps(template),
        Parameters=[{"ParameterKey": k, "ParameterValue": v} for k, v in params.items()],
    )
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        stack = cfn.describe_stacks(StackName=name)["Stacks"][0]
        if not stack["StackStatus"].endswith("IN_PROGRESS"):
            break
        time.sleep(0.3)
    if stack["StackStatus"] != "CREATE_COMPLETE":
        events = cfn.describe_stack_events(StackName=name)["StackEvents"]
        reasons = [
            f"{e['LogicalResourceId']}: {e.get('ResourceStatusReason')}"
            for e in events
            if "FAILED" in e["ResourceStatus"]
        ]
        pytest.fail(f"stack {name} ended {stack['StackStatus']}: {reasons}")


def _part(sam_raw: dict[str, Any], *logical_ids: str) -> dict[str, Any]:
    """Those resources of the SAM template, as they are (CloudFormation
    resolves their intrinsics), with the parameters and mappings they use."""
    # idemq.yaml's required parameters (FunctionName, QueueName, TableName)
    # get a placeholder default; each test passes the ones its part uses.
    params = {k: {"Default": "infra-part", **v} for k, v in sam_raw["Parameters"].items()}
    return {
        "AWSTemplateFormatVersion": "2010-09-09",
        "Parameters": params,
        "Mappings": sam_raw["Mappings"],
        "Conditions": sam_raw["Conditions"],
        "Resources": {lid: sam_raw["Resources"][lid] for lid in logical_ids},
    }


def _attributes(sqs, url: str, base: str) -> dict[str, Any]:
    """A queue's attributes, with the names of `base` and `base`-dlq made
    generic and the policies compared by meaning."""
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    out: dict[str, Any] = {}
    for k, v in attrs.items():
        if k in VOLATILE:
            continue
        if k in ("RedrivePolicy", "RedriveAllowPolicy"):
            v = json.loads(v.replace(f":{base}-dlq", ":<dlq>").replace(f":{base}", ":<source>"))
            if "maxReceiveCount" in v:
                v["maxReceiveCount"] = int(v["maxReceiveCount"])
        out[k] = v
    return out


def test_queues_deploy_like_idemq_init(repo, sam, aws, idemq_bin):
    suffix = f"{os.getpid()}-{random.randrange(10**6)}"
    cfn_name, init_name = f"infra-cfn-{suffix}", f"infra-init-{suffix}"
    d = sam.deployment()  # the template's values at its defaults
    stack = f"idemq-infra-queues-{suffix}"
    created_init = False
    try:
        _deploy(aws["cfn_sqs"], stack, _part(sam.raw, "DeadLetterQueue", "SourceQueue"), {"QueueName": cfn_name})
        out = subprocess.run(
            [
                str(idemq_bin),
                "init",
                "--queue-name",
                init_name,
                "--table-name",
                init_name,
                "--max-receive-count",
                str(d.source.max_receive_count),
                "--visibility-timeout-secs",
                str(d.source.visibility),
            ],
            env={**os.environ, **aws["env"]},
            capture_output=True,
            text=True,
            timeout=120,
        )
        created_init = True
        assert out.returncode == 0, out.stderr
        init = json.loads(out.stdout)
        sqs = aws["sqs"]
        cfn_url = sqs.get_queue_url(QueueName=cfn_name)["QueueUrl"]
        cfn_dlq = sqs.get_queue_url(QueueName=f"{cfn_name}-dlq")["QueueUrl"]
        assert _attributes(sqs, cfn_url, cfn_name) == _attributes(sqs, init["queue_url"], init_name)
        assert _attributes(sqs, cfn_dlq, cfn_name) == _attributes(sqs, init["dlq_url"], init_name)
        # And what both have is what the rules want.
        attrs = sqs.get_queue_attributes(QueueUrl=cfn_dlq, AttributeNames=["All"])["Attributes"]
        assert attrs["MessageRetentionPeriod"] == "1209600"
        assert json.loads(attrs["RedriveAllowPolicy"])["redrivePermission"] == "byQueue"
    finally:
        aws["cfn_sqs"].delete_stack(StackName=stack)
        if created_init:
            for name in (init_name, f"{init_name}-dlq"):
                try:
                    aws["sqs"].delete_queue(QueueUrl=aws["sqs"].get_queue_url(QueueName=name)["QueueUrl"])
                except aws["sqs"].exceptions.QueueDoesNotExist:
                    pass
            try:
                # `idemq init` protects its table from deletion, as the templates do.
                aws["ddb"].update_table(TableName=init_name, DeletionProtectionEnabled=False)
                aws["ddb"].delete_table(TableName=init_name)
            except aws["ddb"].exceptions.ResourceNotFoundException:
                pass


def test_table_deploys_like_idemq_init(repo, sam, aws, idemq_bin):
    suffix = f"{os.getpid()}-{random.randrange(10**6)}"
    cfn_name, init_name = f"infra-cfn-{suffix}", f"infra-init-{suffix}"
    stack = f"idemq-infra-table-{suffix}"
    ddb = aws["ddb"]
    try:
        _deploy(aws["cfn_ddb"], stack, _part(sam.raw, "Table"), {"TableName": cfn_name})
        out = subprocess.run(
            [str(idemq_bin), "init", "--queue-name", init_name, "--table-name", init_name],
            env={**os.environ, **aws["env"]},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr

        def shape(name: str) -> dict[str, Any]:
            t = ddb.describe_table(TableName=name)["Table"]
            return {
                "KeySchema": t["KeySchema"],
                "AttributeDefinitions": t["AttributeDefinitions"],
                "BillingMode": t.get("BillingModeSummary", {}).get("BillingMode"),
            }

        assert shape(cfn_name) == shape(init_name)
        # The template protects its table from deletion (moto reports it).
        deployed = ddb.describe_table(TableName=cfn_name)["Table"]
        if "DeletionProtectionEnabled" in deployed:
            # moto's CloudFormation passes the parameter's string through
            # where AWS converts it to the boolean property.
            assert deployed["DeletionProtectionEnabled"] in (True, "true"), deployed["DeletionProtectionEnabled"]
        init_ttl = ddb.describe_time_to_live(TableName=init_name)["TimeToLiveDescription"]
        declared = sam.raw["Resources"]["Table"]["Properties"]["TimeToLiveSpecification"]
        assert init_ttl == {"TimeToLiveStatus": "ENABLED", "AttributeName": declared["AttributeName"]}
        assert declared["Enabled"] is True
        deployed_ttl = ddb.describe_time_to_live(TableName=cfn_name)["TimeToLiveDescription"]
        if deployed_ttl.get("TimeToLiveStatus") == "ENABLED":
            assert deployed_ttl == init_ttl
        else:
            warnings.warn(
                "this CloudFormation emulator did not apply TimeToLiveSpecification "
                f"(table TTL is {deployed_ttl}); compared as the template declares it",
                stacklevel=1,
            )
    finally:
        aws["cfn_ddb"].delete_stack(StackName=stack)
        for name in (cfn_name, init_name):
            try:
                # DeletionPolicy: Retain keeps it, and deletion protection
                # must be lifted first.
                ddb.update_table(TableName=name, DeletionProtectionEnabled=False)
                ddb.delete_table(TableName=name)
            except ddb.exceptions.ResourceNotFoundException:
                pass
        for name in (init_name, f"{init_name}-dlq"):
            try:
                aws["sqs"].delete_queue(QueueUrl=aws["sqs"].get_queue_url(QueueName=name)["QueueUrl"])
            except aws["sqs"].exceptions.QueueDoesNotExist:
                pass


@pytest.mark.parametrize("named", [False, True], ids=["no-producers", "named-producers"])
def test_source_queue_policy_deploys_as_the_rules_read_it(sam, aws, named):
    """CloudFormation resolves the policy's conditional parts (the Fn::If on
    the sender condition) into what tests/infra's rules check."""
    suffix = f"{os.getpid()}-{random.randrange(10**6)}"
    name, stack = f"infra-qp-{suffix}", f"idemq-infra-qp-{suffix}"
    producers = ["arn:aws:iam::000000000000:role/orders-api", "arn:aws:iam::000000000000:role/operators"]
    params = {"QueueName": name, "ProducerPrincipalArns": ",".join(producers) if named else ""}
    try:
        _deploy(aws["cfn_sqs"], stack, _part(sam.raw, "DeadLetterQueue", "SourceQueue", "SourceQueuePolicy"), params)
        sqs = aws["sqs"]
        url = sqs.get_queue_url(QueueName=name)["QueueUrl"]
        attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["Policy", "QueueArn"])["Attributes"]
        account = attrs["QueueArn"].split(":")[4]
        by_sid = {st["Sid"]: st for st in json.loads(attrs["Policy"])["Statement"]}
        assert by_sid["DenyInsecureTransport"]["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
        guard = by_sid["DenyOtherSenders"]["Condition"]["StringNotEquals"]
        allowed = by_sid["AllowProducers"]["Principal"]["AWS"]
        if named:
            assert guard == {"aws:PrincipalArn": producers}
            assert allowed == producers
        else:
            assert guard == {"aws:PrincipalAccount": account}
            assert allowed == f"arn:aws:iam::{account}:root"
    finally:
        try:
            aws["cfn_sqs"].delete_stack(StackName=stack)
        except aws["cfn_sqs"].exceptions.ClientError:
            # LocalStack's DeleteStack re-reads a CommaDelimitedList parameter
            # as a string and fails on the Fn::Join of HasProducers (its
            # CreateStack does not): remove the queues by hand.
            for q in (name, f"{name}-dlq"):
                try:
                    aws["sqs"].delete_queue(QueueUrl=aws["sqs"].get_queue_url(QueueName=q)["QueueUrl"])
                except aws["sqs"].exceptions.QueueDoesNotExist:
                    pass
