"""The Powertools peer of idemq's peer benchmark (bench/peers/).

The ledger job of examples/ledger.rs, written the way the Powertools for AWS
Lambda (Python) documentation combines its two utilities: BatchProcessor for
the partial batch response, and idempotent_function with the DynamoDB
persistence layer around each record's work.

Per job, on success, that is three DynamoDB requests: the idempotency record
is written INPROGRESS (PutItem with a condition), the effect is applied (the
same two writes as idemq's ledger and the plain Rust consumer, in one
TransactWriteItems), and the record is updated to COMPLETED with the result
(UpdateItem). A redelivered job finds its record with the first PutItem
(ReturnValuesOnConditionCheckFailure=ALL_OLD) and returns the stored result.

With BENCH_SHAPE=item the job is the one-item job of the other peers: the
entry alone, one PutItem between the idempotency record's two writes.

Environment: IDEMQ_TABLE (the effect's table, key `pk`, like idemq's),
POWERTOOLS_IDEMPOTENCY_TABLE (Powertools' own table, key `id`), BENCH_SHAPE
(`ledger`, the default, or `item`).
"""

from __future__ import annotations

import json
import os

import boto3
from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    process_partial_response,
)
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent_function,
)

TABLE = os.environ["IDEMQ_TABLE"]
ITEM_ONLY = os.environ.get("BENCH_SHAPE", "ledger") == "item"

# One client, built at init like idemq's, shared by the effect and the
# persistence layer (one connection pool).
dynamodb = boto3.client("dynamodb")
persistence = DynamoDBPersistenceLayer(
    table_name=os.environ["POWERTOOLS_IDEMPOTENCY_TABLE"], boto3_client=dynamodb
)
# The job id is the idempotency key, as idemq's `idemq-job-id`; a job id
# reused with another payload fails validation instead of being acknowledged
# (idemq's "conflict"). Neither adds a request.
config = IdempotencyConfig(
    event_key_jmespath="transfer_id",
    payload_validation_jmespath="[account, amount]",
    raise_on_no_idempotency_key=True,
)
processor = BatchProcessor(event_type=EventType.SQS)


class NotPositive(ValueError):
    pass


@idempotent_function(data_keyword_argument="transfer", config=config, persistence_store=persistence)
def apply_transfer(transfer: dict) -> dict:
    if transfer["amount"] <= 0:
        raise NotPositive(f"amount {transfer['amount']} is not positive")
    amount = {"N": str(transfer["amount"])}
    entry = {
        "pk": {"S": f"entry#{transfer['transfer_id']}"},
        "account": {"S": transfer["account"]},
        "amount": amount,
    }
    if ITEM_ONLY:
        dynamodb.put_item(TableName=TABLE, Item=entry)
        return {"transfer_id": transfer["transfer_id"]}
    dynamodb.transact_write_items(
        TransactItems=[
            {
                "Update": {
                    "TableName": TABLE,
                    "Key": {"pk": {"S": f"account#{transfer['account']}"}},
                    "UpdateExpression": "ADD balance :amount",
                    "ExpressionAttributeValues": {":amount": amount},
                }
            },
            {"Put": {"TableName": TABLE, "Item": entry}},
        ]
    )
    return {"transfer_id": transfer["transfer_id"]}


def record_handler(record: SQSRecord) -> dict:
    return apply_transfer(transfer=json.loads(record.body))


def lambda_handler(event: dict, context) -> dict:
    config.register_lambda_context(context)
    return process_partial_response(
        event=event, record_handler=record_handler, processor=processor, context=context
    )
