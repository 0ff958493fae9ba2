//! The dedup transaction against error shapes the emulators cannot produce,
//! with `aws-smithy-mocks` standing in for DynamoDB.

use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::operation::get_item::GetItemOutput;
use aws_sdk_dynamodb::operation::transact_write_items::{
    TransactWriteItemsError, TransactWriteItemsOutput,
};
use aws_sdk_dynamodb::types::error::{
    ProvisionedThroughputExceededException, ResourceNotFoundException, TransactionCanceledException,
};
use aws_sdk_dynamodb::types::{
    AttributeValue, CancellationReason, ReturnValuesOnConditionCheckFailure,
};
use aws_smithy_mocks::{Rule, RuleMode, mock, mock_client};
use idemq::config::TableLayout;
use idemq::job::{JobId, PayloadHash};
use idemq::store::dynamodb::Item;
use idemq::store::dynamodb::{Committer, Effect, Key, Write};
use idemq::store::{CommitError, CommitOutcome, JobRef};

const TABLE: &str = "idemq-test";

fn client(rules: &[&Rule]) -> Client {
    mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, rules, |c| c
        .retry_config(RetryConfig::disabled()))
}

fn committer(client: Client) -> Committer {
    Committer::new(client, TableLayout::new(TABLE), Duration::from_secs(3600))
}

fn counter_effect() -> Effect {
    Effect::new().with(
        Write::update("counters", Key::string("pk", "c#1"), "ADD n :one")
            .value(":one", AttributeValue::N("1".into())),
    )
}

fn marker_item(hash: &str) -> Item {
    Item::from([
        (
            "pk".to_string(),
            AttributeValue::S("idemq#ns#q#job#j-1".into()),
        ),
        ("job_id".to_string(), AttributeValue::S("j-1".into())),
        ("payload_hash".to_string(), AttributeValue::S(hash.into())),
        (
            "expires_at".to_string(),
            AttributeValue::N("1900000000".into()),
        ),
    ])
}

fn cancelled(reasons: Vec<CancellationReason>) -> TransactWriteItemsError {
    TransactWriteItemsError::TransactionCanceledException(
        TransactionCanceledException::builder()
            .set_cancellation_reasons(Some(reasons))
            .message("Transaction cancelled")
            .build(),
    )
}

fn reason(code: &str) -> CancellationReason {
    CancellationReason::builder().code(code).build()
}

async fn commit(c: &Committer, body: &[u8]) -> Result<CommitOutcome, CommitError> {
    let id = JobId::new("j-1").unwrap();
    let hash = PayloadHash::of(body);
    let job = JobRef {
        id: &id,
        payload_hash: &hash,
        queue: "q",
    };
    c.commit(job, &counter_effect()).await
}

#[tokio::test]
async fn committed_request_is_marker_first_then_the_effect() {
    let rule = mock!(Client::transact_write_items)
        .match_requests(|req| {
            let items = req.transact_items();
            let Some(marker) = items.first().and_then(|i| i.put()) else {
                return false;
            };
            items.len() == 2
                && marker.table_name() == TABLE
                && marker.condition_expression() == Some("attribute_not_exists(#pk)")
                && marker.return_values_on_condition_check_failure()
                    == Some(&ReturnValuesOnConditionCheckFailure::AllOld)
                && marker.item()["pk"] == AttributeValue::S("idemq#ns#q#job#j-1".into())
                && marker.item()["payload_hash"]
                    == AttributeValue::S(PayloadHash::of(b"body").to_string())
                && marker.item().contains_key("expires_at")
                && items[1]
                    .update()
                    .is_some_and(|u| u.update_expression() == "ADD n :one")
                && req.client_request_token().is_some_and(|t| t.len() <= 36)
        })
        .then_output(|| TransactWriteItemsOutput::builder().build());
    let c = committer(client(&[&rule]));
    assert_eq!(commit(&c, b"body").await.unwrap(), CommitOutcome::Committed);
    assert_eq!(rule.num_calls(), 1);
}

#[tokio::test]
async fn existing_marker_with_same_hash_is_a_duplicate_and_other_hash_a_conflict() {
    let same = PayloadHash::of(b"body").to_string();
    let rule = mock!(Client::transact_write_items).then_error(move || {
        cancelled(vec![
            CancellationReason::builder()
                .code("ConditionalCheckFailed")
                .set_item(Some(marker_item(&same)))
                .build(),
            reason("None"),
        ])
    });
    let get = mock!(Client::get_item).then_output(|| GetItemOutput::builder().build());
    let c = committer(client(&[&rule, &get]));
    assert_eq!(commit(&c, b"body").await.unwrap(), CommitOutcome::Duplicate);
    assert_eq!(
        commit(&c, b"other body").await.unwrap(),
        CommitOutcome::Conflict {
            stored_hash: PayloadHash::of(b"body")
        }
    );
    // ALL_OLD returned the marker: no second read was needed.
    assert_eq!(get.num_calls(), 0);
}

/// moto ignores ClientRequestToken: an SDK retry of a transaction that did
/// commit comes back as the marker's ConditionalCheckFailed, and moto does
/// not return the old item. The marker is read, carries our own hash, and
/// the commit is a duplicate, not a failure.
#[tokio::test]
async fn retried_committed_transaction_without_returned_item_is_read_and_is_a_duplicate() {
    let rule = mock!(Client::transact_write_items)
        .then_error(|| cancelled(vec![reason("ConditionalCheckFailed"), reason("None")]));
    let mine = PayloadHash::of(b"body").to_string();
    let get = mock!(Client::get_item)
        .match_requests(|req| {
            req.consistent_read() == Some(true) && req.table_name() == Some(TABLE)
        })
        .then_output(move || {
            GetItemOutput::builder()
                .set_item(Some(marker_item(&mine)))
                .build()
        });
    let c = committer(client(&[&rule, &get]));
    assert_eq!(commit(&c, b"body").await.unwrap(), CommitOutcome::Duplicate);
    assert_eq!(get.num_calls(), 1);
}

#[tokio::test]
async fn throttling_reasons_are_transient() {
    for code in [
        "ThrottlingError",
        "ProvisionedThroughputExceeded",
        "RequestLimitExceeded",
    ] {
        let rule = mock!(Client::transact_write_items)
            .then_error(move || cancelled(vec![reason("None"), reason(code)]));
        let c = committer(client(&[&rule]));
        match commit(&c, b"body").await.unwrap() {
            CommitOutcome::Transient { reason } => assert!(reason.contains(code), "{reason}"),
            other => panic!("{code}: {other:?}"),
        }
    }
}

/// "Transaction conflict handling"
/// (<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis.html#transaction-conflict-handling>):
/// a transaction whose item another request is writing at that moment is
/// cancelled with `TransactionConflict` at that item's index
/// (<https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_CancellationReason.html>),
/// and nothing of it is applied: a lost race, not a transient failure.
#[tokio::test]
async fn a_transaction_conflict_is_a_lost_race_naming_the_item() {
    let rule = mock!(Client::transact_write_items).then_error(|| {
        cancelled(vec![
            reason("None"),
            CancellationReason::builder()
                .code("TransactionConflict")
                .message("Transaction is ongoing for the item")
                .build(),
        ])
    });
    let c = committer(client(&[&rule]));
    match commit(&c, b"body").await.unwrap() {
        CommitOutcome::Collided { reason } => assert!(
            reason.contains("TransactionConflict on effect write 0")
                && reason.contains("Transaction is ongoing for the item"),
            "{reason}"
        ),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn effect_condition_failure_is_rejected_with_its_index() {
    let rule = mock!(Client::transact_write_items).then_error(|| {
        cancelled(vec![
            reason("None"),
            CancellationReason::builder()
                .code("ConditionalCheckFailed")
                .message("The conditional request failed")
                .build(),
        ])
    });
    let c = committer(client(&[&rule]));
    assert_eq!(
        commit(&c, b"body").await.unwrap(),
        CommitOutcome::Rejected {
            index: 0,
            reason: "The conditional request failed".into()
        }
    );
}

#[tokio::test]
async fn validation_error_reason_is_a_permanent_error() {
    let rule = mock!(Client::transact_write_items).then_error(|| {
        cancelled(vec![
            reason("None"),
            CancellationReason::builder()
                .code("ValidationError")
                .message("Invalid UpdateExpression")
                .build(),
        ])
    });
    let c = committer(client(&[&rule]));
    let err = commit(&c, b"body").await.unwrap_err();
    assert!(
        matches!(err, CommitError::Invalid(ref m) if m.contains("effect write 0") && m.contains("Invalid UpdateExpression")),
        "{err}"
    );
}

#[tokio::test]
async fn throttling_and_server_errors_outside_cancellation_are_transient() {
    let throttled = mock!(Client::transact_write_items).then_error(|| {
        TransactWriteItemsError::ProvisionedThroughputExceededException(
            ProvisionedThroughputExceededException::builder()
                .message("slow down")
                .build(),
        )
    });
    let c = committer(client(&[&throttled]));
    assert!(matches!(
        commit(&c, b"body").await.unwrap(),
        CommitOutcome::Transient { .. }
    ));

    let unavailable = mock!(Client::transact_write_items)
        .sequence()
        .http_status(503, None)
        .build();
    let c = committer(client(&[&unavailable]));
    assert!(matches!(
        commit(&c, b"body").await.unwrap(),
        CommitOutcome::Transient { .. }
    ));
}

/// Inside a transaction DynamoDB does not say which table is missing:
/// every table the commit writes is named.
#[tokio::test]
async fn missing_table_is_a_deployment_error_naming_the_tables_written() {
    let rule = mock!(Client::transact_write_items).then_error(|| {
        TransactWriteItemsError::ResourceNotFoundException(
            ResourceNotFoundException::builder()
                .message("no table")
                .build(),
        )
    });
    let c = committer(client(&[&rule]));
    let err = commit(&c, b"body").await.unwrap_err();
    assert!(
        matches!(err, CommitError::TableNotFound(ref t) if t == &format!("{TABLE} or counters")),
        "{err}"
    );
}

#[tokio::test]
async fn invalid_effect_is_refused_before_any_request() {
    let rule = mock!(Client::transact_write_items)
        .then_output(|| TransactWriteItemsOutput::builder().build());
    let c = committer(client(&[&rule]));
    let id = JobId::new("j-1").unwrap();
    let hash = PayloadHash::of(b"x");
    let job = JobRef {
        id: &id,
        payload_hash: &hash,
        queue: "q",
    };
    let onto_marker = Effect::new().with(Write::delete(
        TABLE,
        Key::string("pk", "idemq#ns#q#job#j-1"),
    ));
    let err = c.commit(job, &onto_marker).await.unwrap_err();
    assert!(matches!(err, CommitError::Effect(_)), "{err}");
    assert_eq!(rule.num_calls(), 0);
}

/// A `ValidationException` that DynamoDB raises before the transaction runs.
fn validation(message: &'static str) -> TransactWriteItemsError {
    TransactWriteItemsError::generic(
        aws_smithy_types::error::ErrorMetadata::builder()
            .code("ValidationException")
            .message(message)
            .build(),
    )
}

/// Everything the commit logged, as text.
fn capture_logs() -> (
    std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    tracing::subscriber::DefaultGuard,
) {
    use std::sync::{Arc, Mutex};
    #[derive(Clone)]
    struct Buf(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().write(b)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buf = Arc::new(Mutex::new(Vec::new()));
    let writer = Buf(buf.clone());
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    (buf, tracing::subscriber::set_default(subscriber))
}

/// A table whose key is not the one idemq writes (the table
/// keyed `id`, the consumer writing `pk`) is a deploy problem: a deploy or
/// `IDEMQ_ATTR_PK` fixes it, so the job waits with backoff instead of being
/// dead-lettered as permanent. DynamoDB's messages for it: "One or more
/// parameter values were invalid: Missing the key id in the item" for a Put
/// (https://github.com/aws/aws-sdk-js/issues/4057) and "The provided key
/// element does not match the schema" for a key
/// (https://repost.aws/knowledge-center/dynamodb-provided-key-element-error);
/// inside a transaction a wrong-typed key comes back as a cancellation
/// reason `ValidationError` with that message
/// (https://github.com/paritysuite/dynamodb-conformance/pull/60).
#[tokio::test]
async fn key_schema_mismatch_is_transient_and_logged_naming_table_and_key() {
    let (logs, _guard) = capture_logs();
    let missing = mock!(Client::transact_write_items).then_error(|| {
        validation("One or more parameter values were invalid: Missing the key id in the item")
    });
    let c = committer(client(&[&missing]));
    match commit(&c, b"body").await {
        // DynamoDB did not say which item: both tables whose keys lack `id`.
        Ok(CommitOutcome::Transient { reason }) => assert_eq!(
            reason,
            "key schema mismatch in table idemq-test or counters (key attribute \"id\"): \
             One or more parameter values were invalid: Missing the key id in the item; \
             retried until the table or IDEMQ_ATTR_PK is fixed"
        ),
        other => panic!("{other:?}"),
    }
    let logged = String::from_utf8(logs.lock().unwrap().clone()).unwrap();
    assert!(logged.contains("ERROR"), "{logged}");
    assert!(logged.contains(TABLE) && logged.contains("id"), "{logged}");

    // The same as a cancellation reason of effect write 0 (table counters).
    let schema = mock!(Client::transact_write_items).then_error(|| {
        cancelled(vec![
            reason("None"),
            CancellationReason::builder()
                .code("ValidationError")
                .message("The provided key element does not match the schema")
                .build(),
        ])
    });
    let c = committer(client(&[&schema]));
    match commit(&c, b"body").await {
        Ok(CommitOutcome::Transient { reason }) => {
            assert!(reason.contains("counters"), "{reason}");
            assert!(reason.contains("\"pk\""), "{reason}");
        }
        other => panic!("{other:?}"),
    }

    // Top level, no attribute named: the marker's table and key.
    let top = mock!(Client::transact_write_items)
        .then_error(|| validation("The provided key element does not match the schema"));
    let c = committer(client(&[&top]));
    match commit(&c, b"body").await {
        Ok(CommitOutcome::Transient { reason }) => {
            assert!(
                reason.contains(TABLE) && reason.contains("\"pk\""),
                "{reason}"
            )
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn other_validation_exceptions_stay_permanent() {
    let rule = mock!(Client::transact_write_items).then_error(|| {
        validation("Invalid UpdateExpression: Syntax error; token: \"+\", near: \"n +\"")
    });
    let c = committer(client(&[&rule]));
    let err = commit(&c, b"body").await.unwrap_err();
    assert!(
        matches!(err, CommitError::Invalid(ref m) if m.contains("Invalid UpdateExpression")),
        "{err}"
    );
}

// ---------------------------------------------------------------------------
// The fused marker (Effect::marked_by) and the single-write path.
// ---------------------------------------------------------------------------

use aws_sdk_dynamodb::operation::put_item::{PutItemError, PutItemOutput};
use aws_sdk_dynamodb::operation::update_item::UpdateItemOutput;
use aws_sdk_dynamodb::types::error::{
    ConditionalCheckFailedException, TransactionConflictException,
};

const BANK: &str = "bank";

fn entry_put(id: &str) -> Write {
    Write::put(
        BANK,
        Key::string("pk", format!("entry#{id}")),
        Item::from([("amount".to_string(), AttributeValue::N("25".into()))]),
    )
}

/// The ledger's shape: credit the account, and the entry is the marker.
fn ledger_effect() -> Effect {
    Effect::new()
        .with(
            Write::update(BANK, Key::string("pk", "account#a"), "ADD balance :n")
                .value(":n", AttributeValue::N("25".into())),
        )
        .marked_by(entry_put("j-1"))
}

/// A one-item job: the entry alone, which is its marker.
fn entry_effect() -> Effect {
    Effect::new().marked_by(entry_put("j-1"))
}

/// The entry as stored by job `job` with payload `body`.
fn stored_entry(job: Option<&str>, body: &[u8]) -> Item {
    let mut item = Item::from([
        ("pk".to_string(), AttributeValue::S("entry#j-1".into())),
        ("amount".to_string(), AttributeValue::N("25".into())),
    ]);
    if let Some(job) = job {
        item.insert("job_id".into(), AttributeValue::S(job.into()));
        item.insert(
            "payload_hash".into(),
            AttributeValue::S(PayloadHash::of(body).to_string()),
        );
    }
    item
}

async fn commit_effect(
    c: &Committer,
    body: &[u8],
    effect: &Effect,
) -> Result<CommitOutcome, CommitError> {
    let id = JobId::new("j-1").unwrap();
    let hash = PayloadHash::of(body);
    let job = JobRef {
        id: &id,
        payload_hash: &hash,
        queue: "q",
    };
    c.commit(job, effect).await
}

/// Whether `item` is the entry carrying job j-1's id and `body`'s hash, with
/// no TTL (it is the user's data) and idemq's condition on its key.
fn is_fused_entry(
    item: &std::collections::HashMap<String, AttributeValue>,
    condition: Option<&str>,
    names: Option<&std::collections::HashMap<String, String>>,
    body: &[u8],
) -> bool {
    item.get("pk") == Some(&AttributeValue::S("entry#j-1".into()))
        && item.get("job_id") == Some(&AttributeValue::S("j-1".into()))
        && item.get("payload_hash") == Some(&AttributeValue::S(PayloadHash::of(body).to_string()))
        && item.get("amount") == Some(&AttributeValue::N("25".into()))
        && !item.contains_key("expires_at")
        && condition == Some("attribute_not_exists(#idemq_key)")
        && names.is_some_and(|n| n.get("#idemq_key").map(String::as_str) == Some("pk"))
}

#[tokio::test]
async fn fused_marker_is_the_entry_in_a_two_item_transaction_without_a_marker_item() {
    let rule = mock!(Client::transact_write_items)
        .match_requests(|req| {
            let items = req.transact_items();
            items.len() == 2
                && items[0]
                    .update()
                    .is_some_and(|u| u.update_expression() == "ADD balance :n")
                && items[1].put().is_some_and(|p| {
                    is_fused_entry(
                        p.item(),
                        p.condition_expression(),
                        p.expression_attribute_names(),
                        b"body",
                    ) && p.return_values_on_condition_check_failure()
                        == Some(&ReturnValuesOnConditionCheckFailure::AllOld)
                })
                && !items
                    .iter()
                    .any(|i| i.put().is_some_and(|p| p.table_name() == TABLE))
        })
        .then_output(|| TransactWriteItemsOutput::builder().build());
    let c = committer(client(&[&rule]));
    assert_eq!(
        commit_effect(&c, b"body", &ledger_effect()).await.unwrap(),
        CommitOutcome::Committed
    );
    assert_eq!(rule.num_calls(), 1);
}

/// The fused marker's cancellation reason is at its own index (1 here), and
/// the item it returns decides: this job with this payload is a duplicate,
/// with another payload a conflict, anything else a rejection of that write.
#[tokio::test]
async fn fused_marker_in_a_transaction_duplicate_conflict_and_foreign_item() {
    let get = mock!(Client::get_item).then_output(|| GetItemOutput::builder().build());
    for (stored, body, expected) in [
        (
            stored_entry(Some("j-1"), b"body"),
            &b"body"[..],
            CommitOutcome::Duplicate,
        ),
        (
            stored_entry(Some("j-1"), b"body"),
            b"other",
            CommitOutcome::Conflict {
                stored_hash: PayloadHash::of(b"body"),
            },
        ),
    ] {
        let rule = mock!(Client::transact_write_items).then_error(move || {
            cancelled(vec![
                reason("None"),
                CancellationReason::builder()
                    .code("ConditionalCheckFailed")
                    .set_item(Some(stored.clone()))
                    .build(),
            ])
        });
        let c = committer(client(&[&rule, &get]));
        assert_eq!(
            commit_effect(&c, body, &ledger_effect()).await.unwrap(),
            expected
        );
    }
    for stored in [
        stored_entry(None, b"body"),
        stored_entry(Some("j-2"), b"body"),
    ] {
        let rule = mock!(Client::transact_write_items).then_error(move || {
            cancelled(vec![
                reason("None"),
                CancellationReason::builder()
                    .code("ConditionalCheckFailed")
                    .set_item(Some(stored.clone()))
                    .build(),
            ])
        });
        let c = committer(client(&[&rule, &get]));
        match commit_effect(&c, b"body", &ledger_effect()).await.unwrap() {
            CommitOutcome::Rejected { index: 1, reason } => {
                assert!(reason.contains("exists"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(get.num_calls(), 0, "ALL_OLD returned the item");
}

/// An effect write's own condition (index 0, the credit) is the business
/// outcome; contention is a lost race; an emulator that returns no item has
/// the fused item read back from its own table and key.
#[tokio::test]
async fn fused_marker_in_a_transaction_rejected_transient_and_read_back() {
    let rejected = mock!(Client::transact_write_items).then_error(|| {
        cancelled(vec![
            CancellationReason::builder()
                .code("ConditionalCheckFailed")
                .message("The conditional request failed")
                .build(),
            reason("None"),
        ])
    });
    let c = committer(client(&[&rejected]));
    assert!(matches!(
        commit_effect(&c, b"body", &ledger_effect()).await.unwrap(),
        CommitOutcome::Rejected { index: 0, .. }
    ));

    let conflict = mock!(Client::transact_write_items)
        .then_error(|| cancelled(vec![reason("TransactionConflict"), reason("None")]));
    let c = committer(client(&[&conflict]));
    assert!(matches!(
        commit_effect(&c, b"body", &ledger_effect()).await.unwrap(),
        CommitOutcome::Collided { .. }
    ));

    let bare = mock!(Client::transact_write_items)
        .then_error(|| cancelled(vec![reason("None"), reason("ConditionalCheckFailed")]));
    let get = mock!(Client::get_item)
        .match_requests(|req| {
            req.consistent_read() == Some(true)
                && req.table_name() == Some(BANK)
                && req.key().and_then(|k| k.get("pk"))
                    == Some(&AttributeValue::S("entry#j-1".into()))
        })
        .then_output(|| {
            GetItemOutput::builder()
                .set_item(Some(stored_entry(Some("j-1"), b"body")))
                .build()
        });
    let c = committer(client(&[&bare, &get]));
    assert_eq!(
        commit_effect(&c, b"body", &ledger_effect()).await.unwrap(),
        CommitOutcome::Duplicate
    );
    assert_eq!(get.num_calls(), 1);
}

fn condition_failed(item: Option<Item>) -> PutItemError {
    PutItemError::ConditionalCheckFailedException(
        ConditionalCheckFailedException::builder()
            .message("The conditional request failed")
            .set_item(item)
            .build(),
    )
}

/// A one-item job is one conditional PutItem (1 write unit a KB), not a
/// transaction (2): the item with the job id and hash, idemq's condition
/// on its key, ALL_OLD so that a failed condition returns the item.
#[tokio::test]
async fn fused_marker_alone_is_one_conditional_put_item_not_a_transaction() {
    let tx = mock!(Client::transact_write_items)
        .then_output(|| TransactWriteItemsOutput::builder().build());
    let put = mock!(Client::put_item)
        .match_requests(|req| {
            req.table_name() == Some(BANK)
                && req.item().is_some_and(|item| {
                    is_fused_entry(
                        item,
                        req.condition_expression(),
                        req.expression_attribute_names(),
                        b"body",
                    )
                })
                && req.return_values_on_condition_check_failure()
                    == Some(&ReturnValuesOnConditionCheckFailure::AllOld)
        })
        .then_output(|| PutItemOutput::builder().build());
    let c = committer(client(&[&tx, &put]));
    assert_eq!(
        commit_effect(&c, b"body", &entry_effect()).await.unwrap(),
        CommitOutcome::Committed
    );
    assert_eq!((put.num_calls(), tx.num_calls()), (1, 0));
}

#[tokio::test]
async fn single_put_condition_failure_is_duplicate_conflict_or_rejected_by_the_item() {
    let get = mock!(Client::get_item).then_output(|| GetItemOutput::builder().build());
    let cases = [
        (
            Some(stored_entry(Some("j-1"), b"body")),
            &b"body"[..],
            "duplicate",
        ),
        (
            Some(stored_entry(Some("j-1"), b"body")),
            b"other",
            "conflict",
        ),
        (Some(stored_entry(None, b"body")), b"body", "rejected"),
        (
            Some(stored_entry(Some("j-2"), b"body")),
            b"body",
            "rejected",
        ),
    ];
    for (stored, body, expected) in cases {
        let put = mock!(Client::put_item).then_error(move || condition_failed(stored.clone()));
        let c = committer(client(&[&put, &get]));
        let outcome = commit_effect(&c, body, &entry_effect()).await.unwrap();
        let got = match outcome {
            CommitOutcome::Duplicate => "duplicate",
            CommitOutcome::Conflict { ref stored_hash } => {
                assert_eq!(*stored_hash, PayloadHash::of(b"body"));
                "conflict"
            }
            CommitOutcome::Rejected { index: 0, .. } => "rejected",
            _ => "other",
        };
        assert_eq!(got, expected, "{outcome:?}");
    }
    assert_eq!(get.num_calls(), 0, "ALL_OLD returned the item");
}

/// An emulator that does not return the item with a failed PutItem
/// condition: the item is read back, consistently, and decides.
#[tokio::test]
async fn single_put_condition_failure_without_the_item_reads_it_back() {
    let put = mock!(Client::put_item).then_error(|| condition_failed(None));
    let get = mock!(Client::get_item)
        .match_requests(|req| req.consistent_read() == Some(true) && req.table_name() == Some(BANK))
        .then_output(|| {
            GetItemOutput::builder()
                .set_item(Some(stored_entry(Some("j-1"), b"body")))
                .build()
        });
    let c = committer(client(&[&put, &get]));
    assert_eq!(
        commit_effect(&c, b"other", &entry_effect()).await.unwrap(),
        CommitOutcome::Conflict {
            stored_hash: PayloadHash::of(b"body")
        }
    );
    assert_eq!(get.num_calls(), 1);
}

#[tokio::test]
async fn single_put_throttling_and_server_errors_are_transient_a_conflict_a_lost_race() {
    let put = mock!(Client::put_item).then_error(|| {
        PutItemError::ProvisionedThroughputExceededException(
            ProvisionedThroughputExceededException::builder()
                .message("slow down")
                .build(),
        )
    });
    let c = committer(client(&[&put]));
    assert!(matches!(
        commit_effect(&c, b"body", &entry_effect()).await.unwrap(),
        CommitOutcome::Transient { .. }
    ));
    // The item is in another request's transaction: nothing written, run
    // again like a transaction's TransactionConflict.
    let put = mock!(Client::put_item).then_error(|| {
        PutItemError::TransactionConflictException(
            TransactionConflictException::builder()
                .message("in a transaction")
                .build(),
        )
    });
    let c = committer(client(&[&put]));
    match commit_effect(&c, b"body", &entry_effect()).await.unwrap() {
        CommitOutcome::Collided { reason } => assert!(
            reason.contains("TransactionConflictException") && reason.contains("in a transaction"),
            "{reason}"
        ),
        other => panic!("{other:?}"),
    }
    let unavailable = mock!(Client::put_item)
        .sequence()
        .http_status(503, None)
        .build();
    let c = committer(client(&[&unavailable]));
    assert!(matches!(
        commit_effect(&c, b"body", &entry_effect()).await.unwrap(),
        CommitOutcome::Transient { .. }
    ));
}

#[tokio::test]
async fn single_put_missing_table_denied_permission_and_key_schema_name_the_effects_table() {
    let missing = mock!(Client::put_item).then_error(|| {
        PutItemError::ResourceNotFoundException(
            ResourceNotFoundException::builder()
                .message("no table")
                .build(),
        )
    });
    let c = committer(client(&[&missing]));
    let err = commit_effect(&c, b"body", &entry_effect())
        .await
        .unwrap_err();
    assert!(
        matches!(err, CommitError::TableNotFound(ref t) if t == BANK),
        "{err}"
    );
    // A single write needs its own action on its own table, nothing else.
    let denied = mock!(Client::put_item).then_error(|| {
        PutItemError::generic(
            aws_smithy_types::error::ErrorMetadata::builder()
                .code("AccessDeniedException")
                .message("not authorized to perform: dynamodb:PutItem")
                .build(),
        )
    });
    let c = committer(client(&[&denied]));
    match commit_effect(&c, b"body", &entry_effect()).await {
        Err(CommitError::AccessDenied { needs, message }) => {
            assert_eq!(needs, format!("dynamodb:PutItem on table {BANK}"));
            assert_eq!(message, "not authorized to perform: dynamodb:PutItem");
        }
        other => panic!("{other:?}"),
    }
    let schema = mock!(Client::put_item).then_error(|| {
        PutItemError::generic(
            aws_smithy_types::error::ErrorMetadata::builder()
                .code("ValidationException")
                .message(
                    "One or more parameter values were invalid: Missing the key id in the item",
                )
                .build(),
        )
    });
    let c = committer(client(&[&schema]));
    match commit_effect(&c, b"body", &entry_effect()).await.unwrap() {
        CommitOutcome::Transient { reason } => {
            assert!(
                reason.contains("table bank") && reason.contains("\"id\""),
                "{reason}"
            )
        }
        other => panic!("{other:?}"),
    }
}

/// One unconditional write without a marker is one UpdateItem; with a
/// condition it stays a transaction, whose ClientRequestToken makes an SDK
/// retry of an applied request succeed instead of failing its condition.
#[tokio::test]
async fn upsert_without_marker_is_one_standard_write_a_conditional_one_a_transaction() {
    let tx = mock!(Client::transact_write_items)
        .then_output(|| TransactWriteItemsOutput::builder().build());
    let update = mock!(Client::update_item)
        .match_requests(|req| {
            req.table_name() == Some("counters")
                && req.update_expression() == Some("ADD n :one")
                && req.condition_expression().is_none()
        })
        .then_output(|| UpdateItemOutput::builder().build());
    let c = committer(client(&[&tx, &update]));
    let upsert = counter_effect().without_marker();
    assert_eq!(
        commit_effect(&c, b"body", &upsert).await.unwrap(),
        CommitOutcome::Committed
    );
    assert_eq!((update.num_calls(), tx.num_calls()), (1, 0));

    let guarded = Effect::new()
        .with(
            Write::update("counters", Key::string("pk", "c#1"), "ADD n :one")
                .value(":one", AttributeValue::N("1".into()))
                .condition("attribute_exists(pk)"),
        )
        .without_marker();
    assert_eq!(
        commit_effect(&c, b"body", &guarded).await.unwrap(),
        CommitOutcome::Committed
    );
    assert_eq!((update.num_calls(), tx.num_calls()), (1, 1));
}

// ---------------------------------------------------------------------------
// Through the batch processor: what SQS is asked to do with the message.
// ---------------------------------------------------------------------------

mod through_the_batch {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::{Arc, Mutex};

    use aws_sdk_dynamodb::operation::put_item::PutItemOutput;
    use aws_sdk_sqs::operation::change_message_visibility_batch::ChangeMessageVisibilityBatchOutput;
    use aws_sdk_sqs::types::{MessageAttributeValue, MessageSystemAttributeName};
    use idemq::batch::Verdict;
    use idemq::batch::{BatchReport, Message, Processor};
    use idemq::config::BatchConfig;
    use idemq::failure::FailureKind;

    use idemq::config::TableLayout;
    use idemq::job::JobIdResolver;
    use idemq::queue::QueueInfo;
    use idemq::{JobMeta, handler_fn};
    use tokio::time::Instant;

    /// The SDK's `test-util` feature is on for DynamoDB only, so SQS's
    /// mock client is built by hand.
    fn sqs(rules: &[&Rule]) -> aws_sdk_sqs::Client {
        use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region, retry::RetryConfig};
        let mut interceptor =
            aws_smithy_mocks::MockResponseInterceptor::new().rule_mode(RuleMode::MatchAny);
        for rule in rules {
            interceptor = interceptor.with_rule(rule);
        }
        let conf = aws_sdk_sqs::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .credentials_provider(Credentials::new("test", "test", None, None, "mock"))
            .retry_config(RetryConfig::disabled())
            .http_client(aws_smithy_mocks::create_mock_http_client())
            .interceptor(interceptor)
            .build();
        aws_sdk_sqs::Client::from_conf(conf)
    }

    /// `ChangeMessageVisibilityBatch`, every entry accepted.
    fn visibility_rule() -> Rule {
        mock!(aws_sdk_sqs::Client::change_message_visibility_batch).then_output(|| {
            ChangeMessageVisibilityBatchOutput::builder()
                .set_successful(Some(Vec::new()))
                .set_failed(Some(Vec::new()))
                .build()
                .unwrap()
        })
    }

    fn queue() -> QueueInfo {
        QueueInfo {
            url: "https://sqs.us-east-1.amazonaws.com/000000000000/races".into(),
            name: "races".into(),
            fifo: false,
            dlq_url: Some("https://sqs.us-east-1.amazonaws.com/000000000000/races-dlq".into()),
            max_receive_count: Some(6),
            visibility_timeout: Duration::from_secs(30),
            retention: Duration::from_secs(4 * 24 * 3600),
        }
    }

    /// Job `j-1` on its first receive.
    fn message() -> Message {
        let sdk = aws_sdk_sqs::types::Message::builder()
            .message_id("m-1")
            .receipt_handle("rh-1")
            .body(r#"{"n":1}"#)
            .message_attributes(
                "idemq-job-id",
                MessageAttributeValue::builder()
                    .data_type("String")
                    .string_value("j-1")
                    .build()
                    .unwrap(),
            )
            .attributes(MessageSystemAttributeName::ApproximateReceiveCount, "1")
            .attributes(
                MessageSystemAttributeName::SentTimestamp,
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_millis()
                    .to_string(),
            )
            .build();
        Message::from_sdk(&sdk, Instant::now()).expect("message")
    }

    /// Runs one message through a processor whose handler returns
    /// [`counter_effect`]; returns the report and the handler's runs.
    async fn process(ddb: Client, sqs: aws_sdk_sqs::Client) -> (BatchReport, u32) {
        let runs = Arc::new(AtomicU32::new(0));
        let counted = runs.clone();
        let handler = handler_fn(move |_: serde_json::Value, _: JobMeta| {
            counted.fetch_add(1, Ordering::SeqCst);
            async { Ok(counter_effect()) }
        });
        let layout = TableLayout::new(TABLE);
        let ttl = Duration::from_secs(3600);
        let processor = Processor::new(
            handler,
            std::sync::Arc::new(idemq::store::dynamodb::DynamoDb::new(
                Committer::new(ddb.clone(), layout.clone(), ttl),
                idemq::store::dynamodb::FailureTable::new(ddb, layout, ttl),
            )),
            sqs,
            JobIdResolver::new(),
            BatchConfig::default(),
        );
        let report = processor
            .process(
                &queue(),
                &[message()],
                Instant::now() + Duration::from_secs(30),
            )
            .await;
        (report, runs.load(Ordering::SeqCst))
    }

    fn conflict() -> TransactWriteItemsError {
        cancelled(vec![
            reason("None"),
            CancellationReason::builder()
                .code("TransactionConflict")
                .message("Transaction is ongoing for the item")
                .build(),
        ])
    }

    /// A lost race does not spend a receive (README, docs/reliability.md):
    /// a transaction cancelled with `TransactionConflict` applied nothing
    /// (<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis.html#transaction-conflict-handling>),
    /// so the job runs again in the same invocation and commits there: no
    /// `ChangeMessageVisibility`, no failure record, acknowledged on the
    /// receive it came with. The local emulator serialises requests and
    /// never cancels one this way, so DynamoDB is a mock here.
    #[tokio::test(start_paused = true)]
    async fn a_transaction_conflict_then_a_commit_spends_one_receive() {
        let transact = mock!(Client::transact_write_items)
            .sequence()
            .error(conflict)
            .output(|| TransactWriteItemsOutput::builder().build())
            .build();
        let record = mock!(Client::put_item).then_output(|| PutItemOutput::builder().build());
        let visibility = visibility_rule();
        let (report, runs) = process(client(&[&transact, &record]), sqs(&[&visibility])).await;
        assert_eq!(report.verdicts[0].1, Verdict::Succeeded, "{report:?}");
        assert_eq!((transact.num_calls(), runs), (2, 2), "run again at once");
        assert_eq!(visibility.num_calls(), 0, "no backoff, no receive spent");
        assert_eq!(record.num_calls(), 0, "no failure record");
        assert!(report.failed.is_empty() && report.done == ["rh-1"]);
        assert_eq!(report.metrics.contended, 1, "the lost race is counted");
    }

    /// Past the re-run bound ([`BatchConfig::contention_retries`], 3 by
    /// default) a conflict that keeps coming backs off as before, recorded
    /// as `contended`.
    #[tokio::test(start_paused = true)]
    async fn conflicts_beyond_the_bound_back_off() {
        let transact = mock!(Client::transact_write_items).then_error(conflict);
        let record = mock!(Client::put_item).then_output(|| PutItemOutput::builder().build());
        let visibility = visibility_rule();
        let (report, runs) = process(client(&[&transact, &record]), sqs(&[&visibility])).await;
        match &report.verdicts[0].1 {
            Verdict::Retry { failure, .. } => {
                assert_eq!(failure.kind, FailureKind::Contended);
                assert!(failure.error.contains("TransactionConflict"), "{failure:?}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!((transact.num_calls(), runs), (4, 4), "1 run + 3 re-runs");
        assert_eq!(visibility.num_calls(), 1, "backed off");
        assert_eq!(report.failed, ["m-1"]);
    }

    /// A role without `dynamodb:UpdateItem` on the effect's table: DynamoDB
    /// answers `AccessDeniedException`
    /// (<https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/CommonErrors.html>),
    /// for every job, until a deploy grants it. The job is retried (nothing
    /// lost), but as a deployment error: its failure record says so and
    /// names each permission and table the commit needs, the batch counts
    /// it in `JobsMisconfigured` (the alarm's metric), and it is logged as
    /// an error.
    #[tokio::test(start_paused = true)]
    async fn access_denied_is_a_deployment_error_with_its_metric_and_record() {
        let denied = "User: arn:aws:sts::000000000000:assumed-role/consumer/fn is not \
                      authorized to perform: dynamodb:UpdateItem on resource: \
                      arn:aws:dynamodb:us-east-1:000000000000:table/counters";
        let transact = mock!(Client::transact_write_items).then_error(move || {
            TransactWriteItemsError::generic(
                aws_smithy_types::error::ErrorMetadata::builder()
                    .code("AccessDeniedException")
                    .message(denied)
                    .build(),
            )
        });
        let records = Arc::new(Mutex::new(Vec::new()));
        let seen = records.clone();
        let record = mock!(Client::put_item)
            .match_requests(move |req| {
                seen.lock()
                    .unwrap()
                    .push(req.item().cloned().unwrap_or_default());
                true
            })
            .then_output(|| PutItemOutput::builder().build());
        let visibility = visibility_rule();
        let (logs, _guard) = capture_logs();
        let (report, runs) = process(client(&[&transact, &record]), sqs(&[&visibility])).await;
        let failure = match &report.verdicts[0].1 {
            Verdict::Retry { failure, .. } => failure.clone(),
            other => panic!("{other:?}"),
        };
        assert_eq!(failure.kind, FailureKind::Deployment);
        assert_eq!(runs, 1, "not re-run: nothing a re-run could change");
        assert_eq!(visibility.num_calls(), 1, "retried with backoff");
        assert_eq!(report.metrics.misconfigured, 1);
        let emf = report.metrics.to_emf_lines("races", std::time::UNIX_EPOCH);
        let line: serde_json::Value = serde_json::from_str(&emf[0]).unwrap();
        assert_eq!(line["JobsMisconfigured"], 1);

        let records = records.lock().unwrap();
        assert_eq!(records.len(), 1);
        let text = |k: &str| records[0][k].as_s().unwrap().clone();
        assert_eq!(text("kind"), "deployment");
        let error = text("error");
        for needed in [
            "dynamodb:PutItem on table idemq-test",
            "dynamodb:UpdateItem on table counters",
            "not authorized to perform: dynamodb:UpdateItem",
        ] {
            assert!(error.contains(needed), "{needed} not in {error}");
        }
        let logs = String::from_utf8(logs.lock().unwrap().clone()).unwrap();
        assert!(
            logs.lines().any(|l| l.contains("ERROR")
                && l.contains("lacks a permission")
                && l.contains("dynamodb:UpdateItem on table counters")),
            "{logs}"
        );
    }
}

/// The batch's look-up is one `BatchGetItem`; the keys DynamoDB leaves in
/// `UnprocessedKeys` (throttling, or the 16 MB answer limit) are asked for
/// again, and only those.
#[tokio::test]
async fn the_look_up_asks_again_for_unprocessed_keys_and_only_those() {
    use aws_sdk_dynamodb::operation::batch_get_item::BatchGetItemOutput;
    use aws_sdk_dynamodb::types::KeysAndAttributes;
    use idemq::store::LookedUp;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    let hash = PayloadHash::of(b"body");
    let stored_hash = hash.to_string();
    let calls = Arc::new(AtomicUsize::new(0));
    let asked = Arc::new(std::sync::Mutex::new(Vec::<usize>::new()));
    let (c, a) = (calls.clone(), asked.clone());
    let rule = mock!(Client::batch_get_item).then_compute_output(move |req| {
        let keys = req.request_items().unwrap()[TABLE].keys().to_vec();
        a.lock().unwrap().push(keys.len());
        if c.fetch_add(1, Ordering::SeqCst) == 0 {
            // The first answer: nothing read, every key unprocessed.
            let again = KeysAndAttributes::builder()
                .set_keys(Some(keys))
                .consistent_read(true)
                .build()
                .unwrap();
            return BatchGetItemOutput::builder()
                .unprocessed_keys(TABLE, again)
                .build();
        }
        // The second: each of job j-1's keys holds its marker.
        let items = keys
            .iter()
            .map(|key| {
                let mut item = marker_item(&stored_hash);
                item.insert("pk".into(), key["pk"].clone());
                item
            })
            .collect();
        BatchGetItemOutput::builder()
            .responses(TABLE, items)
            .build()
    });
    let c = committer(client(&[&rule])).with_marker_first(true);
    let id = JobId::new("j-1").unwrap();
    let job = JobRef {
        id: &id,
        payload_hash: &hash,
        queue: "q",
    };
    let found = c.look_up(&[job]).await;
    assert_eq!(found.len(), 1);
    match &found[0] {
        Ok(LookedUp::Settled(settled)) => assert_eq!(settled.outcome, CommitOutcome::Duplicate),
        other => panic!("expected the stored marker as a duplicate, got {other:?}"),
    }
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    // The second request carried exactly the keys the first left unread.
    let asked = asked.lock().unwrap().clone();
    assert_eq!(asked[0], asked[1], "{asked:?}");
}

/// Keys still unprocessed after the look-up's tries fail their own job as
/// transient (retried with backoff), not the batch, and no handler runs
/// on a marker that was never read.
#[tokio::test(start_paused = true)]
async fn keys_left_unprocessed_are_a_transient_failure_of_their_job() {
    use aws_sdk_dynamodb::operation::batch_get_item::BatchGetItemOutput;
    use aws_sdk_dynamodb::types::KeysAndAttributes;

    let rule = mock!(Client::batch_get_item).then_compute_output(|req| {
        let keys = req.request_items().unwrap()[TABLE].keys().to_vec();
        let again = KeysAndAttributes::builder()
            .set_keys(Some(keys))
            .build()
            .unwrap();
        BatchGetItemOutput::builder()
            .unprocessed_keys(TABLE, again)
            .build()
    });
    let c = committer(client(&[&rule])).with_marker_first(true);
    let hash = PayloadHash::of(b"body");
    let (one, two) = (JobId::new("j-1").unwrap(), JobId::new("j-2").unwrap());
    let jobs = [&one, &two].map(|id| JobRef {
        id,
        payload_hash: &hash,
        queue: "q",
    });
    let found = c.look_up(&jobs).await;
    assert_eq!(found.len(), 2);
    for f in &found {
        match f {
            Ok(idemq::store::LookedUp::Settled(s)) => assert!(
                matches!(&s.outcome, CommitOutcome::Transient { reason } if reason.contains("unprocessed")),
                "{:?}",
                s.outcome
            ),
            other => panic!("expected a transient failure, got {other:?}"),
        }
    }
    assert!(rule.num_calls() > 1, "asked again before giving up");
}
