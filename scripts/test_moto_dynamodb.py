#!/usr/bin/env python3
"""Self-test of scripts/moto_dynamodb.py (run with the moto venv's python).

Starts the same serialised app that `stack.sh up` serves, in-process on an
ephemeral loopback port, and checks through boto3 that:
  - a cancelled TransactWriteItems leaves every named item as it was (new Put,
    overwriting Put, Update, Delete; hash-only and hash+range tables; stream
    records), and a successful one applies everything;
  - CancellationReasons carry the old Item with ReturnValuesOnConditionCheckFailure=ALL_OLD;
  - 8 threads racing the same 100 marker+counter transactions leave every
    counter at exactly 1 (the reason requests are serialised).
The rollback checks run twice, with the item-level rollback patch and with
moto's own whole-table copy, so the patch is held to upstream's behaviour.
Finally it prints per-transaction times on a ~2,000-item table with and
without the patch (informational, no assertion).

Usage: .state/venv-moto/bin/python scripts/test_moto_dynamodb.py
       .state/venv-moto/bin/python scripts/test_moto_dynamodb.py --endpoint http://127.0.0.1:4567
       (the second form runs the functional checks against a running server)
Last line: "N passed, M failed"; exit status 1 if anything failed.
"""

from __future__ import annotations

import os
import random
import sys
import threading
import time
import traceback
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import boto3  # noqa: E402
from botocore.config import Config  # noqa: E402
from botocore.exceptions import ClientError  # noqa: E402
from moto.backends import get_backend  # noqa: E402
from moto.core import DEFAULT_ACCOUNT_ID  # noqa: E402
from werkzeug.serving import make_server  # noqa: E402

import moto_dynamodb  # noqa: E402

REGION = "us-east-1"


def start_server() -> tuple[str, object]:
    server = make_server(
        "127.0.0.1", 0, moto_dynamodb.make_app(), threaded=True,
        request_handler=moto_dynamodb.QuietRequestHandler,
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_port}", server


def client(endpoint: str):
    return boto3.client(
        "dynamodb", endpoint_url=endpoint, region_name=REGION,
        aws_access_key_id="test", aws_secret_access_key="test",
        config=Config(max_pool_connections=16, retries={"max_attempts": 1}),
    )


def backend():
    return get_backend("dynamodb")[DEFAULT_ACCOUNT_ID][REGION]


def new_table(ddb, range_key: bool = False, stream: bool = False) -> str:
    name = f"t-{uuid.uuid4().hex[:10]}"
    keys = [{"AttributeName": "pk", "KeyType": "HASH"}]
    attrs = [{"AttributeName": "pk", "AttributeType": "S"}]
    if range_key:
        keys.append({"AttributeName": "sk", "KeyType": "RANGE"})
        attrs.append({"AttributeName": "sk", "AttributeType": "N"})
    extra = {}
    if stream:
        extra["StreamSpecification"] = {"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"}
    ddb.create_table(TableName=name, KeySchema=keys, AttributeDefinitions=attrs,
                     BillingMode="PAY_PER_REQUEST", **extra)
    return name


def get(ddb, table, **key):
    k = {n: ({"N": str(v)} if isinstance(v, int) else {"S": v}) for n, v in key.items()}
    return ddb.get_item(TableName=table, Key=k, ConsistentRead=True).get("Item")


def cancelled(ddb, items) -> list[dict]:
    """Run a transaction that must be cancelled; return its CancellationReasons."""
    try:
        ddb.transact_write_items(TransactItems=items)
    except ClientError as e:
        assert e.response["Error"]["Code"] == "TransactionCanceledException", e.response["Error"]
        return e.response["CancellationReasons"]
    raise AssertionError("transaction was not cancelled")


FAIL_ON_B = {"ConditionCheck": {"Key": {"pk": {"S": "B"}},
                                "ConditionExpression": "attribute_not_exists(pk)"}}


def fail_on_b(table):
    return {"ConditionCheck": dict(FAIL_ON_B["ConditionCheck"], TableName=table)}


# ---- rollback / commit checks ------------------------------------------------

def test_put_new_item_rolled_back(ddb):
    t = new_table(ddb)
    ddb.put_item(TableName=t, Item={"pk": {"S": "B"}})
    reasons = cancelled(ddb, [
        {"Put": {"TableName": t, "Item": {"pk": {"S": "A"}, "v": {"N": "1"}}}},
        fail_on_b(t),
    ])
    assert [r["Code"] for r in reasons] == ["None", "ConditionalCheckFailed"], reasons
    assert get(ddb, t, pk="A") is None, "new item from a cancelled Put survived"
    assert get(ddb, t, pk="B") == {"pk": {"S": "B"}}


def test_put_overwrite_rolled_back(ddb):
    t = new_table(ddb)
    ddb.put_item(TableName=t, Item={"pk": {"S": "A"}, "v": {"N": "1"}, "keep": {"S": "x"}})
    ddb.put_item(TableName=t, Item={"pk": {"S": "B"}})
    cancelled(ddb, [
        {"Put": {"TableName": t, "Item": {"pk": {"S": "A"}, "v": {"N": "2"}}}},
        fail_on_b(t),
    ])
    assert get(ddb, t, pk="A") == {"pk": {"S": "A"}, "v": {"N": "1"}, "keep": {"S": "x"}}


def test_update_rolled_back(ddb):
    t = new_table(ddb)
    ddb.put_item(TableName=t, Item={"pk": {"S": "A"}, "n": {"N": "5"}, "l": {"L": [{"S": "a"}]}})
    ddb.put_item(TableName=t, Item={"pk": {"S": "B"}})
    cancelled(ddb, [
        {"Update": {"TableName": t, "Key": {"pk": {"S": "A"}},
                    "UpdateExpression": "ADD n :one SET l = list_append(l, :x), z = :z",
                    "ExpressionAttributeValues": {":one": {"N": "1"}, ":x": {"L": [{"S": "b"}]},
                                                  ":z": {"S": "new"}}}},
        fail_on_b(t),
    ])
    assert get(ddb, t, pk="A") == {"pk": {"S": "A"}, "n": {"N": "5"}, "l": {"L": [{"S": "a"}]}}


def test_update_creating_item_rolled_back(ddb):
    t = new_table(ddb)
    ddb.put_item(TableName=t, Item={"pk": {"S": "B"}})
    cancelled(ddb, [
        {"Update": {"TableName": t, "Key": {"pk": {"S": "A"}}, "UpdateExpression": "ADD n :one",
                    "ExpressionAttributeValues": {":one": {"N": "1"}}}},
        fail_on_b(t),
    ])
    assert get(ddb, t, pk="A") is None


def test_delete_rolled_back(ddb):
    t = new_table(ddb)
    ddb.put_item(TableName=t, Item={"pk": {"S": "A"}, "v": {"N": "1"}})
    ddb.put_item(TableName=t, Item={"pk": {"S": "B"}})
    cancelled(ddb, [
        {"Delete": {"TableName": t, "Key": {"pk": {"S": "A"}}}},
        fail_on_b(t),
    ])
    assert get(ddb, t, pk="A") == {"pk": {"S": "A"}, "v": {"N": "1"}}


def test_range_table_and_two_tables_rolled_back(ddb):
    t1 = new_table(ddb, range_key=True)
    t2 = new_table(ddb)
    ddb.put_item(TableName=t1, Item={"pk": {"S": "A"}, "sk": {"N": "1"}, "v": {"N": "1"}})
    ddb.put_item(TableName=t1, Item={"pk": {"S": "A"}, "sk": {"N": "2"}, "v": {"N": "2"}})
    ddb.put_item(TableName=t2, Item={"pk": {"S": "B"}})
    cancelled(ddb, [
        {"Put": {"TableName": t1, "Item": {"pk": {"S": "A"}, "sk": {"N": "3"}}}},
        {"Delete": {"TableName": t1, "Key": {"pk": {"S": "A"}, "sk": {"N": "1"}}}},
        {"Update": {"TableName": t1, "Key": {"pk": {"S": "A"}, "sk": {"N": "2"}},
                    "UpdateExpression": "SET v = :v", "ExpressionAttributeValues": {":v": {"N": "9"}}}},
        {"Put": {"TableName": t2, "Item": {"pk": {"S": "C"}}}},
        fail_on_b(t2),
    ])
    rows = ddb.query(TableName=t1, KeyConditionExpression="pk = :a",
                     ExpressionAttributeValues={":a": {"S": "A"}})["Items"]
    assert rows == [{"pk": {"S": "A"}, "sk": {"N": "1"}, "v": {"N": "1"}},
                    {"pk": {"S": "A"}, "sk": {"N": "2"}, "v": {"N": "2"}}], rows
    assert get(ddb, t2, pk="C") is None
    assert ddb.scan(TableName=t2)["Count"] == 1


def test_same_item_twice_rolled_back(ddb):
    # moto raises ValidationException at the 2nd entry, after the 1st was applied.
    t = new_table(ddb)
    try:
        ddb.transact_write_items(TransactItems=[
            {"Put": {"TableName": t, "Item": {"pk": {"S": "A"}}}},
            {"Update": {"TableName": t, "Key": {"pk": {"S": "A"}}, "UpdateExpression": "SET v = :v",
                        "ExpressionAttributeValues": {":v": {"N": "1"}}}},
        ])
    except ClientError as e:
        assert e.response["Error"]["Code"] == "ValidationException", e.response["Error"]
    else:
        raise AssertionError("expected ValidationException")
    assert get(ddb, t, pk="A") is None


def test_stream_records_rolled_back(ddb):
    t = new_table(ddb, stream=True)
    ddb.put_item(TableName=t, Item={"pk": {"S": "B"}})
    shard = backend().get_table(t).stream_shard
    before = len(shard.items)
    cancelled(ddb, [{"Put": {"TableName": t, "Item": {"pk": {"S": "A"}}}}, fail_on_b(t)])
    assert len(backend().get_table(t).stream_shard.items) == before
    ddb.transact_write_items(TransactItems=[{"Put": {"TableName": t, "Item": {"pk": {"S": "A"}}}}])
    assert len(backend().get_table(t).stream_shard.items) == before + 1


def test_commit_applies_all(ddb):
    t = new_table(ddb)
    ddb.put_item(TableName=t, Item={"pk": {"S": "U"}, "n": {"N": "1"}})
    ddb.put_item(TableName=t, Item={"pk": {"S": "D"}})
    ddb.transact_write_items(TransactItems=[
        {"Put": {"TableName": t, "Item": {"pk": {"S": "P"}}, "ConditionExpression": "attribute_not_exists(pk)"}},
        {"Update": {"TableName": t, "Key": {"pk": {"S": "U"}}, "UpdateExpression": "ADD n :one",
                    "ExpressionAttributeValues": {":one": {"N": "1"}}}},
        {"Delete": {"TableName": t, "Key": {"pk": {"S": "D"}}, "ConditionExpression": "attribute_exists(pk)"}},
        {"ConditionCheck": {"TableName": t, "Key": {"pk": {"S": "X"}},
                            "ConditionExpression": "attribute_not_exists(pk)"}},
    ])
    assert get(ddb, t, pk="P") == {"pk": {"S": "P"}}
    assert get(ddb, t, pk="U") == {"pk": {"S": "U"}, "n": {"N": "2"}}
    assert get(ddb, t, pk="D") is None


def test_cancellation_reasons_all_old(ddb):
    t = new_table(ddb)
    ddb.put_item(TableName=t, Item={"pk": {"S": "m#1"}, "state": {"S": "done"}})
    reasons = cancelled(ddb, [
        {"Update": {"TableName": t, "Key": {"pk": {"S": "c#1"}}, "UpdateExpression": "ADD n :one",
                    "ExpressionAttributeValues": {":one": {"N": "1"}}}},
        {"Put": {"TableName": t, "Item": {"pk": {"S": "m#1"}, "state": {"S": "new"}},
                 "ConditionExpression": "attribute_not_exists(pk)",
                 "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}},
    ])
    assert reasons[0]["Code"] == "None", reasons
    assert reasons[1]["Code"] == "ConditionalCheckFailed", reasons
    assert reasons[1]["Item"] == {"pk": {"S": "m#1"}, "state": {"S": "done"}}, reasons
    assert get(ddb, t, pk="c#1") is None


def test_eight_threads_race_marker_counter(ddb):
    t = new_table(ddb)
    jobs = 100
    committed = []
    errors = []

    def worker(seed):
        rnd = random.Random(seed)
        order = list(range(jobs))
        rnd.shuffle(order)
        for j in order:
            try:
                ddb.transact_write_items(TransactItems=[
                    {"Put": {"TableName": t, "Item": {"pk": {"S": f"m#{j}"}},
                             "ConditionExpression": "attribute_not_exists(pk)"}},
                    {"Update": {"TableName": t, "Key": {"pk": {"S": f"c#{j}"}},
                                "UpdateExpression": "ADD n :one",
                                "ExpressionAttributeValues": {":one": {"N": "1"}}}},
                ])
                committed.append(j)
            except ClientError as e:
                if e.response["Error"]["Code"] != "TransactionCanceledException":
                    errors.append(e.response["Error"])
            except Exception as e:  # connection trouble etc.
                errors.append(repr(e))

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors[:3]
    assert sorted(committed) == list(range(jobs)), f"{len(committed)} commits for {jobs} jobs"
    bad = [j for j in range(jobs) if (get(ddb, t, pk=f"c#{j}") or {}).get("n") != {"N": "1"}]
    assert not bad, f"{len(bad)} counters not exactly 1: {bad[:10]}"


TESTS = [
    test_put_new_item_rolled_back,
    test_put_overwrite_rolled_back,
    test_update_rolled_back,
    test_update_creating_item_rolled_back,
    test_delete_rolled_back,
    test_range_table_and_two_tables_rolled_back,
    test_same_item_twice_rolled_back,
    test_stream_records_rolled_back,
    test_commit_applies_all,
    test_cancellation_reasons_all_old,
    test_eight_threads_race_marker_counter,
]


def time_transactions(ddb, items: int = 2000, n: int = 40) -> float:
    """Mean seconds per marker+counter transaction on a table holding `items` items."""
    t = new_table(ddb)
    pad = "x" * 200
    for start in range(0, items, 25):
        ddb.batch_write_item(RequestItems={t: [
            {"PutRequest": {"Item": {"pk": {"S": f"seed#{i}"}, "pad": {"S": pad}, "n": {"N": str(i)}}}}
            for i in range(start, min(start + 25, items))
        ]})
    began = time.perf_counter()
    for j in range(n):
        ddb.transact_write_items(TransactItems=[
            {"Put": {"TableName": t, "Item": {"pk": {"S": f"m#{j}"}},
                     "ConditionExpression": "attribute_not_exists(pk)"}},
            {"Update": {"TableName": t, "Key": {"pk": {"S": f"c#{j}"}}, "UpdateExpression": "ADD n :one",
                        "ExpressionAttributeValues": {":one": {"N": "1"}}}},
        ])
    return (time.perf_counter() - began) / n


def run(tests, ddb, label: str) -> tuple[int, int]:
    passed = failed = 0
    for test in tests:
        try:
            test(ddb)
        except Exception:
            failed += 1
            print(f"FAIL [{label}] {test.__name__}")
            traceback.print_exc()
        else:
            passed += 1
            print(f"ok   [{label}] {test.__name__}")
    return passed, failed


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--endpoint":
        # Against a running server (e.g. the one `stack.sh up` started): the
        # checks that need no access to moto's in-process state.
        tests = [t for t in TESTS if t is not test_stream_records_rolled_back]
        ddb = client(sys.argv[2])
        passed, failed = run(tests, ddb, sys.argv[2])
        per_tx = time_transactions(ddb)
        print(f"timing [{sys.argv[2]}] {per_tx * 1000:.1f} ms per TransactWriteItems on a 2,000-item table")
        print(f"{passed} passed, {failed} failed")
        return 1 if failed else 0
    if len(sys.argv) != 1:
        print("usage: test_moto_dynamodb.py [--endpoint http://127.0.0.1:4567]", file=sys.stderr)
        return 2

    endpoint, server = start_server()
    ddb = client(endpoint)
    passed = failed = 0
    for mode in ("patched", "upstream"):
        if mode == "patched":
            moto_dynamodb.apply_rollback_patch()
        else:
            moto_dynamodb.remove_rollback_patch()
        p, f = run(TESTS, ddb, mode)
        passed += p
        failed += f

    # Informational timing (no assertion): the cost the patch removes.
    for mode in ("upstream", "patched"):
        if mode == "patched":
            moto_dynamodb.apply_rollback_patch()
        else:
            moto_dynamodb.remove_rollback_patch()
        per_tx = time_transactions(ddb)
        print(f"timing [{mode}] {per_tx * 1000:.1f} ms per TransactWriteItems on a 2,000-item table")
    server.shutdown()
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
