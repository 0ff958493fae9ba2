//! Conformance of the simulation's models (tests/sim/) to the local stack
//! and to AWS: each scenario of tests/conformance/ runs once on the models
//! and once on the local stack (LocalStack's SQS, moto's DynamoDB), and
//! what the client observed must be equal, step by step, except where the
//! emulator is known to differ: each such step is listed below with what
//! each side shows and the AWS page that decides it, and both sides are
//! pinned, so a change on either fails the test. Needs the stack: `make
//! stack-up`, then `set -a; . .state/stack.env; set +a`.
//! `CONFORMANCE_PRINT=1 … -- --nocapture` prints every step of both sides.
//!
//! Steps whose AWS behaviour no AWS page states are marked "undocumented":
//! the model's side there is an assumption this suite could not check.

mod sim;

mod common;
mod conformance;

use conformance::{Divergence, conform, dynamodb, sqs};
use serde_json::json;

const CHANGE_VISIBILITY: &str = "https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_ChangeMessageVisibility.html";
const DELETE_MESSAGE: &str =
    "https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_DeleteMessage.html";
const MESSAGE_METADATA: &str = "https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-message-metadata.html";
const BATCH_ERROR_ENTRY: &str = "https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_BatchResultErrorEntry.html";
const DLQ_REDRIVE: &str = "https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-configure-dead-letter-queue-redrive.html";
const TRANSACT_WRITE_FAILURES: &str =
    "https://repost.aws/knowledge-center/dynamodb-transactwriteitems";
const TRANSACT_WRITE: &str =
    "https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html";

#[test]
fn sqs_visibility_and_receipt_handles() {
    conform(
        "sqs visibility",
        sqs::visibility,
        &[
            // "MessageNotInflight: The specified message isn't in flight."
            // LocalStack answers OK and leaves the message visible.
            Divergence {
                step: "change after the timeout ran out",
                model: json!({"error": "MessageNotInflight"}),
                stack: json!("ok"),
                aws: CHANGE_VISIBILITY,
            },
            // Undocumented for ChangeMessageVisibility: the model lets only
            // the newest handle act, as DeleteMessage documents; LocalStack
            // accepts any handle the message ever had.
            Divergence {
                step: "change with an older handle",
                model: json!({"error": "InvalidParameterValue"}),
                stack: json!("ok"),
                aws: "undocumented",
            },
            // "You must provide the most recently received receipt handle
            // … (otherwise, the request succeeds, but the message will not
            // be deleted)" (the page now says "might not be"): the model
            // keeps the message, LocalStack deletes it. Both are allowed;
            // the model's is the one that tests at-least-once.
            Divergence {
                step: "change to 0 with the newest handle after the older handle's delete",
                model: json!("ok"),
                stack: json!({"error": "InvalidParameterValue"}),
                aws: DELETE_MESSAGE,
            },
            Divergence {
                step: "receive after the older handle's delete",
                model: json!([{"body": "c", "count": "3"}]),
                stack: json!([]),
                aws: DELETE_MESSAGE,
            },
        ],
    );
}

#[test]
fn sqs_attributes_only_when_asked() {
    conform("sqs attributes", sqs::attributes, &[]);
}

#[test]
fn sqs_redrive_and_move_tasks() {
    conform(
        "sqs redrive",
        sqs::redrive,
        &[
            // Undocumented: the model restarts the receive count in the
            // DLQ; LocalStack carries it on (2 receives + this one).
            Divergence {
                step: "the dead letter",
                model: json!([{"body": "a", "count": "1", "same MessageId": true,
                    "same SentTimestamp": true, "DeadLetterQueueSourceArn is the source": true}]),
                stack: json!([{"body": "a", "count": "3", "same MessageId": true,
                    "same SentTimestamp": true, "DeadLetterQueueSourceArn is the source": true}]),
                aws: "undocumented",
            },
            // "All redriven messages are considered new messages and are
            // assigned a new messageID": LocalStack's move task keeps the
            // MessageId and the receive count.
            Divergence {
                step: "the moved message",
                model: json!([{"body": "a", "new MessageId": true, "count": "1"}]),
                stack: json!([{"body": "a", "new MessageId": false, "count": "5"}]),
                aws: DLQ_REDRIVE,
            },
        ],
    );
}

#[test]
fn sqs_send_limits() {
    // A refused entry is the sender's fault; its code is not documented:
    // the model says `InvalidParameterValue` (the code SendMessage returns,
    // which LocalStack agrees with), LocalStack's batch entries
    // `InvalidParameterValueException`. idemq compares codes without the
    // suffix (src/dead_letter.rs, `bare_code`).
    let entry = |id: &'static str, model: &str, stack: &str, sender_fault: bool| Divergence {
        step: id,
        model: json!({"Id": &id["batch failed ".len()..], "Code": model, "SenderFault": true}),
        stack: json!({"Id": &id["batch failed ".len()..], "Code": stack, "SenderFault": sender_fault}),
        aws: BATCH_ERROR_ENTRY,
    };
    conform(
        "sqs send limits",
        sqs::send_limits,
        &[
            // "Each message can have up to 10 attributes": LocalStack takes 11.
            Divergence {
                step: "batch successful",
                model: json!(["fine", "ten-attributes"]),
                stack: json!(["eleven-attributes", "fine", "ten-attributes"]),
                aws: MESSAGE_METADATA,
            },
            Divergence {
                step: "batch failed eleven-attributes",
                model: json!({"Id": "eleven-attributes", "Code": "InvalidParameterValue", "SenderFault": true}),
                stack: json!("<not reached>"),
                aws: MESSAGE_METADATA,
            },
            entry(
                "batch failed bad-attribute",
                "InvalidParameterValue",
                "InvalidParameterValueException",
                true,
            ),
            // Invalid characters are the sender's fault; LocalStack says not.
            entry(
                "batch failed bad-body",
                "InvalidMessageContents",
                "InvalidMessageContents",
                false,
            ),
            entry(
                "batch failed bad-body-fffe",
                "InvalidMessageContents",
                "InvalidMessageContents",
                false,
            ),
            entry(
                "batch failed body-and-attribute-too-big",
                "InvalidParameterValue",
                "InvalidParameterValueException",
                true,
            ),
            entry(
                "batch failed body-too-big",
                "InvalidParameterValue",
                "InvalidParameterValueException",
                true,
            ),
        ],
    );
}

#[test]
fn dynamodb_transactions() {
    conform("dynamodb transactions", dynamodb::transactions, &[]);
}

#[test]
fn dynamodb_client_request_tokens() {
    // "A client request token is valid for 10 minutes after the first
    // request that uses it is completed. … If you submit a request with
    // the same client token but a change in other parameters within the
    // 10-minute idempotency window, DynamoDB returns an
    // IdempotentParameterMismatch exception." moto ignores the token.
    conform(
        "dynamodb tokens",
        dynamodb::tokens,
        &[
            Divergence {
                step: "c after the replay",
                model: json!({"n": {"N": "1"}, "pk": {"S": "c"}}),
                stack: json!({"n": {"N": "2"}, "pk": {"S": "c"}}),
                aws: TRANSACT_WRITE,
            },
            Divergence {
                step: "another request with the same token",
                model: json!({"error": "IdempotentParameterMismatchException",
                    "message": "The request uses the same client token as a previous, but non-identical request."}),
                stack: json!("ok"),
                aws: TRANSACT_WRITE,
            },
            Divergence {
                step: "other after it",
                model: json!(null),
                stack: json!({"n": {"N": "1"}, "pk": {"S": "other"}}),
                aws: TRANSACT_WRITE,
            },
        ],
    );
}

#[test]
fn dynamodb_items_conditions_updates() {
    conform(
        "dynamodb items",
        dynamodb::items,
        &[
            // "An operand in the update expression has an incorrect data
            // type" is one of a transaction's ValidationError cancellation
            // reasons; moto answers a plain ValidationException.
            Divergence {
                step: "ADD to a string",
                model: json!({"cancelled": [{"Code": "ValidationError", "Item": null}]}),
                stack: json!({"error": "ValidationException",
                    "message": "An operand in the update expression has an incorrect data type"}),
                aws: TRANSACT_WRITE_FAILURES,
            },
            // No AWS page states it, but "Value provided in
            // ExpressionAttributeValues unused in expressions" is DynamoDB's
            // own refusal, which moto raises for an unused name in a
            // transaction (the step before, where the two agree) but not
            // for an unused value in PutItem.
            Divergence {
                step: "PutItem with an unused ExpressionAttributeValues entry",
                model: json!({"error": "ValidationException",
                    "message": "Value provided in ExpressionAttributeValues unused in expressions: keys: {:unused}"}),
                stack: json!("ok"),
                aws: "undocumented",
            },
            Divergence {
                step: "u and p after them",
                model: json!([{"n": {"N": "5"}, "pk": {"S": "u"}, "s": {"S": "x"}, "t": {"N": "3"}}, null]),
                stack: json!([{"n": {"N": "5"}, "pk": {"S": "u"}, "s": {"S": "x"}, "t": {"N": "3"}},
                    {"pk": {"S": "p"}}]),
                aws: "undocumented",
            },
        ],
    );
}

#[test]
fn dynamodb_key_schema_and_item_size() {
    conform(
        "dynamodb limits",
        dynamodb::limits,
        &[
            // The cancellation reason codes AWS documents are None,
            // ConditionalCheckFailed, ItemCollectionSizeLimitExceeded,
            // TransactionConflict, ProvisionedThroughputExceeded,
            // ThrottlingError and ValidationError; moto's "KeyError" is
            // none of them. The model answers as PutItem does.
            Divergence {
                step: "a transaction Put without the key",
                model: json!({"error": "ValidationException",
                    "message": "One or more parameter values were invalid: Missing the key pk in the item"}),
                stack: json!({"cancelled": [{"Code": "KeyError", "Item": null}]}),
                aws: TRANSACT_WRITE,
            },
            // TransactionCanceledException: "An item size becomes too large
            // (bigger than 400 KB) … because of changes made by the
            // transaction" cancels it (reason ValidationError, "Item size
            // to update has exceeded the maximum allowed size"); moto
            // answers a plain ValidationException. Whether AWS refuses a
            // 401 KB Put before the transaction starts is not documented.
            Divergence {
                step: "a transaction Put of 401 KB",
                model: json!({"cancelled": [{"Code": "ValidationError", "Item": null}]}),
                stack: json!({"error": "ValidationException",
                    "message": "Item size has exceeded the maximum allowed size"}),
                aws: TRANSACT_WRITE,
            },
            Divergence {
                step: "a transaction Update growing an item past 400 KB",
                model: json!({"cancelled": [{"Code": "None", "Item": null},
                    {"Code": "ValidationError", "Item": null}]}),
                stack: json!({"error": "ValidationException",
                    "message": "Item size to update has exceeded the maximum allowed size"}),
                aws: TRANSACT_WRITE,
            },
        ],
    );
}
