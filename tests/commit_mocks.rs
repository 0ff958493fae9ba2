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
use idemq::effect::Item;
use idemq::{
    CommitError, CommitOutcome, Committer, Effect, JobId, JobRef, Key, PayloadHash, TableLayout,
    Write,
};

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
        ("pk".to_string(), AttributeValue::S("idemq#job#j-1".into())),
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
                && marker.item()["pk"] == AttributeValue::S("idemq#job#j-1".into())
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
async fn contention_and_throttling_reasons_are_transient() {
    for code in [
        "TransactionConflict",
        "ThrottlingError",
        "ProvisionedThroughputExceeded",
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

#[tokio::test]
async fn missing_table_is_a_permanent_error_naming_it() {
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
        matches!(err, CommitError::TableNotFound(ref t) if t == TABLE),
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
    let onto_marker = Effect::new().with(Write::delete(TABLE, Key::string("pk", "idemq#job#j-1")));
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

/// Issue 11 item 9: a table whose key is not the one idemq writes (the table
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
