#!/usr/bin/env python3
"""Serve moto's DynamoDB on 127.0.0.1:4567 for idemq's local tests.

LocalStack's own DynamoDB needs DynamoDB Local, a jar it downloads from the
internet at run time (not reachable on our machines), so the host stack serves
DynamoDB from moto instead and the tests select it with
AWS_ENDPOINT_URL_DYNAMODB.  Two changes to stock `moto_server`:

1. Requests are served ONE AT A TIME.  moto's TransactWriteItems is not
   isolated under concurrent requests: it applies the items one by one and, on
   a failed condition, "rolls back" by putting back a copy of the whole table,
   which also wipes out whatever another thread wrote in between.  Measured:
   8 threads racing marker+counter transactions left 38-55 of 300 jobs with 0
   or 2+ effects; serialising every request made 300/300 exact.  idemq's whole
   point is effectively-once processing, so the emulator must not invent
   duplicates.  The lock covers the whole request, including consuming the
   response iterable, so no other request can observe a half-done one.

2. (moto 5.2.5 only) TransactWriteItems saves and restores only the items
   named in the transaction instead of deep-copying every table it touches.
   The deep copy runs on every transaction, successful or not, and costs
   ~98 ms per transaction at ~2,000 items (vs ~2.4 ms with the item-level
   snapshot); with requests serialised that cost would throttle every test.
   The patch is guarded by moto's version and by a hash of the upstream
   function's source, so a different moto fails loudly at start-up instead of
   silently running a stale copy.  IDEMQ_MOTO_ROLLBACK_PATCH=0 disables it.

Usage: python scripts/moto_dynamodb.py [--host 127.0.0.1] [--port 4567]
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import inspect
import os
import signal
import sys
import threading
from typing import Any, Callable, Iterable

import moto
import moto.dynamodb.models as ddb_models
from moto.dynamodb.models import DynamoDBBackend
from moto.dynamodb.models.dynamo_type import DynamoType
from moto.server import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import run_simple

# --------------------------------------------------------------------------
# 1. One request at a time
# --------------------------------------------------------------------------


class SerializedApp:
    """WSGI wrapper that runs the wrapped app under one global lock.

    The response body is fully consumed (and the iterable closed) while the
    lock is held, because WSGI apps may do work lazily while their body is
    iterated; only the finished bytes are handed back to the server thread.
    """

    def __init__(self, app: Callable[..., Iterable[bytes]]):
        self.app = app
        self.lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        with self.lock:
            result = self.app(environ, start_response)
            try:
                return [b"".join(result)]
            finally:
                close = getattr(result, "close", None)
                if close is not None:
                    close()


class QuietRequestHandler(MotoRequestHandler):
    """moto's request handler without the per-request access-log line.

    Test suites send tens of thousands of requests; a line each would only grow
    .state/logs/moto.log.  Errors are still logged.  IDEMQ_MOTO_ACCESS_LOG=1
    turns the access log back on.
    """

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        if os.environ.get("IDEMQ_MOTO_ACCESS_LOG") == "1":
            super().log_request(code, size)


def make_app() -> SerializedApp:
    """The moto server app (all services; the stack only sends DynamoDB here), serialised."""
    return SerializedApp(DomainDispatcherApplication(create_backend_app))


# --------------------------------------------------------------------------
# 2. Item-level rollback for TransactWriteItems (moto 5.2.5)
# --------------------------------------------------------------------------

PATCHED_MOTO_VERSION = "5.2.5"
# sha256 of inspect.getsource(DynamoDBBackend.transact_write_items) in moto 5.2.5.
# _transact_write_items below is that function with only the "backup" and the
# two "rollback" blocks changed (marked PATCH); everything else is verbatim.
UPSTREAM_SOURCE_SHA256 = "81db2cb7d94e39c90b3a2077e1f4bb41a449c558ef9b1b1e2910fdaa39978ad4"

_UPSTREAM = DynamoDBBackend.transact_write_items

# The names the upstream body uses, taken from moto's own module so that the
# exception classes are the very ones moto's response layer catches.
ConditionalCheckFailed = ddb_models.ConditionalCheckFailed
MockValidationException = ddb_models.MockValidationException
MultipleTransactionsException = ddb_models.MultipleTransactionsException
TooManyTransactionsException = ddb_models.TooManyTransactionsException
TransactionCanceledException = ddb_models.TransactionCanceledException
TransactWriteSingleOpException = ddb_models.TransactWriteSingleOpException
get_filter_expression = ddb_models.get_filter_expression


class _ItemSnapshot:
    """The items a transaction names, as they were before it ran.

    Every write in a transaction goes to an item named by one of its entries
    (Put: the key inside Item; Update/Delete/ConditionCheck: Key), so saving
    those items (a deep copy, since Update mutates the stored Item in place) or
    their absence is enough to undo it.  Stream records the transaction
    appended are undone too, as the upstream whole-table copy did.
    """

    def __init__(self, backend: DynamoDBBackend, transact_items: list[dict[str, Any]]):
        self.items: dict[tuple[int, DynamoType, DynamoType | None], tuple[Any, Any]] = {}
        self.streams: dict[int, tuple[Any, list[Any]]] = {}
        for entry in transact_items:
            try:
                op_type, op = next(iter(entry.items()))
                table = backend.get_table(op["TableName"])
                if op_type == "Put":
                    attrs = op["Item"]
                    hash_key = DynamoType(attrs[table.hash_key_attr])
                    range_key = (
                        DynamoType(attrs[table.range_key_attr])
                        if table.range_key_attr is not None
                        else None
                    )
                else:
                    hash_key, range_key = backend.get_keys_value(table, op["Key"])
            except Exception:
                # No table, or a key moto cannot parse: the upstream loop fails
                # this entry in the same way before it writes anything.
                continue
            slot = (id(table), hash_key, range_key)
            if slot not in self.items:
                current = table.get_item(hash_key, range_key)
                self.items[slot] = (table, copy.deepcopy(current))
            if table.stream_shard is not None and id(table) not in self.streams:
                self.streams[id(table)] = (table, list(table.stream_shard.items))

    def restore(self) -> None:
        for (_, hash_key, range_key), (table, saved) in self.items.items():
            # Same layout as moto's Table.put_item / delete_item.
            if table.range_key_attr is not None:
                bucket = table.items[hash_key]
                if saved is None:
                    bucket.pop(range_key, None)
                else:
                    bucket[range_key] = saved
            elif saved is None:
                table.items.pop(hash_key, None)
            else:
                table.items[hash_key] = saved
        for table, records in self.streams.values():
            if table.stream_shard is not None:
                table.stream_shard.items = records


def _transact_write_items(self: DynamoDBBackend, transact_items: list[dict[str, Any]]) -> None:
    if len(transact_items) > 100:
        raise TooManyTransactionsException()
    # PATCH: save only the named items instead of deep-copying whole tables.
    snapshot = _ItemSnapshot(self, transact_items)

    target_items: set[tuple[str, str]] = set()

    def check_unicity(table_name: str, key: dict[str, Any]) -> None:
        item = (str(table_name), str(dict(sorted(key.items()))))
        if item in target_items:
            raise MultipleTransactionsException()
        target_items.add(item)

    errors: list[
        tuple[str, str, dict[str, Any]] | tuple[None, None, None]
    ] = []  # [(Code, Message, Item), ..]
    for item in transact_items:
        original_item: dict[str, Any] | None = None
        # Check transact writes are not performing multiple operations on the same item
        if len(list(item.keys())) > 1:
            raise TransactWriteSingleOpException

        try:
            op_type, op = next(iter(item.items()))
            if op_type not in {"ConditionCheck", "Put", "Delete", "Update"}:
                raise ValueError("Unsupported transaction operation")

            table_name = op["TableName"]
            condition_expression = op.get("ConditionExpression")
            expression_attribute_names = op.get("ExpressionAttributeNames")
            expression_attribute_values = op.get("ExpressionAttributeValues")
            return_values_on_condition_check_failure = op.get(
                "ReturnValuesOnConditionCheckFailure"
            )

            if op_type == "Put":
                attrs = op["Item"]
                table = self.get_table(table_name)
                key = {table.hash_key_attr: attrs[table.hash_key_attr]}
                if table.range_key_attr is not None:
                    key[table.range_key_attr] = attrs[table.range_key_attr]
            else:
                key = op["Key"]

            check_unicity(table_name, key)

            current = self.get_item(table_name, key)
            if condition_expression is not None:
                condition_op = get_filter_expression(
                    condition_expression,
                    expression_attribute_names,
                    expression_attribute_values,
                )
                if not condition_op.expr(current):
                    if (
                        return_values_on_condition_check_failure == "ALL_OLD"
                        and current
                    ):
                        original_item = current.to_json()["Attributes"]
                    raise ConditionalCheckFailed(item=original_item)

            if op_type == "Put":
                attrs = op["Item"]
                self.put_item(
                    table_name,
                    attrs,
                    condition_expression=condition_expression,
                    expression_attribute_names=expression_attribute_names,
                    expression_attribute_values=expression_attribute_values,
                )
            elif op_type == "Delete":
                self.delete_item(
                    table_name,
                    key,
                    condition_expression=condition_expression,
                    expression_attribute_names=expression_attribute_names,
                    expression_attribute_values=expression_attribute_values,
                )
            elif op_type == "Update":
                update_expression = op["UpdateExpression"]
                self.update_item(
                    table_name,
                    key,
                    update_expression=update_expression,
                    condition_expression=condition_expression,
                    expression_attribute_names=expression_attribute_names,
                    expression_attribute_values=expression_attribute_values,
                )
            errors.append((None, None, None))
        except (MultipleTransactionsException, MockValidationException):
            # Rollback to the original state, and reraise the error
            snapshot.restore()  # PATCH
            raise
        except ConditionalCheckFailed as e:
            errors.append(("ConditionalCheckFailed", str(e.message), original_item))  # type: ignore
        except Exception as e:  # noqa: E722 Do not use bare except
            # For other exceptions, capture their details
            errors.append((type(e).__name__, str(e), original_item))  # type: ignore

    if any(code is not None for code, _, _ in errors):
        # Rollback to the original state, and reraise the errors
        snapshot.restore()  # PATCH
        raise TransactionCanceledException(errors)


def apply_rollback_patch() -> None:
    """Install the item-level rollback; raise if moto is not the version it was written for."""
    upstream_sha = hashlib.sha256(inspect.getsource(_UPSTREAM).encode()).hexdigest()
    if moto.__version__ != PATCHED_MOTO_VERSION or upstream_sha != UPSTREAM_SOURCE_SHA256:
        raise RuntimeError(
            f"moto_dynamodb.py: the TransactWriteItems rollback patch was written for "
            f"moto {PATCHED_MOTO_VERSION}, but moto {moto.__version__} is installed "
            f"(transact_write_items source sha256 {upstream_sha}). Re-check the patch "
            f"against the new moto source, or set IDEMQ_MOTO_ROLLBACK_PATCH=0."
        )
    DynamoDBBackend.transact_write_items = _transact_write_items  # type: ignore[method-assign]


def remove_rollback_patch() -> None:
    """Back to moto's own whole-table copy (used by the self-test to compare timings)."""
    DynamoDBBackend.transact_write_items = _UPSTREAM  # type: ignore[method-assign]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=4567)
    args = parser.parse_args(argv)

    # moto builds some URLs from MOTO_PORT; keep them pointing at this server.
    os.environ.setdefault("MOTO_PORT", str(args.port))
    if os.environ.get("IDEMQ_MOTO_ROLLBACK_PATCH", "1") != "0":
        apply_rollback_patch()
        print("moto_dynamodb: item-level TransactWriteItems rollback enabled", flush=True)
    # `stack.sh down` sends SIGTERM. All state is in memory and meant to be
    # thrown away, so exit at once (sys.exit here took ~2 s to unwind werkzeug
    # and moto's exit hooks), without a traceback.
    def _terminate(*_: Any) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)

    signal.signal(signal.SIGTERM, _terminate)

    run_simple(
        args.host,
        args.port,
        make_app(),
        threaded=True,
        request_handler=QuietRequestHandler,
    )


if __name__ == "__main__":
    main()
