//! The dedup transaction's unit tests: how cancellation reasons are read
//! and what both marker forms store. Their own file, so the code files read
//! without them.

use std::time::{Duration, UNIX_EPOCH};

use aws_sdk_dynamodb::types::{AttributeValue, CancellationReason};

use super::cancellation::{CONFLICT_CODE, THROTTLING_CODES};
use super::*;
use crate::job::PayloadHash;
use crate::store::dynamodb::effect::Write;

fn reason(code: &str) -> CancellationReason {
    CancellationReason::builder()
        .code(code)
        .message(format!("{code} happened"))
        .build()
}

#[test]
fn marker_condition_failure_means_the_job_exists_whatever_else_failed() {
    let item = Item::from([("pk".to_string(), AttributeValue::S("x".into()))]);
    let marker = CancellationReason::builder()
        .code("ConditionalCheckFailed")
        .set_item(Some(item.clone()))
        .build();
    let reasons = [marker, reason("TransactionConflict")];
    assert_eq!(
        classify_cancellation(&reasons, Plan::SEPARATE),
        Cancellation::MarkerExists(Some(&item))
    );
    let without_item = [reason("ConditionalCheckFailed"), reason("None")];
    assert_eq!(
        classify_cancellation(&without_item, Plan::SEPARATE),
        Cancellation::MarkerExists(None)
    );
}

#[test]
fn effect_condition_failure_is_a_rejection_with_the_effect_index() {
    let reasons = [
        reason("None"),
        reason("None"),
        reason("ConditionalCheckFailed"),
    ];
    assert_eq!(
        classify_cancellation(&reasons, Plan::SEPARATE),
        Cancellation::Outcome(CommitOutcome::Rejected {
            index: 1,
            reason: "ConditionalCheckFailed happened".into()
        })
    );
    // Without a marker, reason i is effect write i; index 0 is not the marker.
    let reasons = [reason("ConditionalCheckFailed"), reason("None")];
    assert!(matches!(
        classify_cancellation(&reasons, Plan::NONE),
        Cancellation::Outcome(CommitOutcome::Rejected { index: 0, .. })
    ));
}

/// A fused marker's reason is at its own index, and every index is the
/// effect write's own (no separate marker to skip).
#[test]
fn a_fused_marker_is_read_at_its_index_and_effect_indexes_are_unshifted() {
    let item = Item::from([("pk".to_string(), AttributeValue::S("entry#1".into()))]);
    let marker = CancellationReason::builder()
        .code("ConditionalCheckFailed")
        .set_item(Some(item.clone()))
        .build();
    let reasons = [reason("None"), marker, reason("None")];
    assert_eq!(
        classify_cancellation(&reasons, Plan::fused(1)),
        Cancellation::MarkerExists(Some(&item))
    );
    let reasons = [
        reason("None"),
        reason("None"),
        reason("ConditionalCheckFailed"),
    ];
    assert!(matches!(
        classify_cancellation(&reasons, Plan::fused(1)),
        Cancellation::Outcome(CommitOutcome::Rejected { index: 2, .. })
    ));
    match classify_cancellation(&[reason("ValidationError")], Plan::fused(0)) {
        Cancellation::Invalid(why) => assert!(why.starts_with("effect write 0"), "{why}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn throttling_is_transient_and_wins_over_a_conflict_and_a_rejection() {
    for code in THROTTLING_CODES {
        let reasons = [
            reason("None"),
            reason("ConditionalCheckFailed"),
            reason(CONFLICT_CODE),
            reason(code),
        ];
        match classify_cancellation(&reasons, Plan::SEPARATE) {
            Cancellation::Outcome(CommitOutcome::Transient { reason }) => {
                assert!(reason.contains(code), "{reason}")
            }
            other => panic!("{code}: {other:?}"),
        }
    }
}

/// A concurrent transaction on one of the items applied nothing of
/// this one: a lost race (re-run), winning over an effect condition,
/// which the re-run may find true.
#[test]
fn a_transaction_conflict_is_a_collision_naming_the_item() {
    let reasons = [
        reason("None"),
        reason("ConditionalCheckFailed"),
        reason(CONFLICT_CODE),
    ];
    match classify_cancellation(&reasons, Plan::SEPARATE) {
        Cancellation::Outcome(CommitOutcome::Collided { reason }) => {
            assert!(
                reason.contains("TransactionConflict on effect write 1"),
                "{reason}"
            )
        }
        other => panic!("{other:?}"),
    }
    match classify_cancellation(&[reason(CONFLICT_CODE), reason("None")], Plan::SEPARATE) {
        Cancellation::Outcome(CommitOutcome::Collided { reason }) => {
            assert!(reason.contains("on the marker"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn validation_errors_are_permanent_and_name_the_write() {
    let reasons = [
        reason("None"),
        reason("TransactionConflict"),
        reason("ValidationError"),
    ];
    match classify_cancellation(&reasons, Plan::SEPARATE) {
        Cancellation::Invalid(why) => {
            assert!(why.starts_with("effect write 1: ValidationError"), "{why}")
        }
        other => panic!("{other:?}"),
    }
    match classify_cancellation(&[reason("ValidationError")], Plan::SEPARATE) {
        Cancellation::Invalid(why) => assert!(why.starts_with("the marker"), "{why}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn key_schema_messages_are_recognised_with_their_attribute() {
    assert_eq!(
        key_schema_attribute("The provided key element does not match the schema"),
        Some(None)
    );
    assert_eq!(
        key_schema_attribute(
            "One or more parameter values were invalid: Missing the key id in the item"
        ),
        Some(Some("id"))
    );
    assert_eq!(
        key_schema_attribute(
            "One or more parameter values were invalid: Type mismatch for key pk expected: S actual: N"
        ),
        Some(Some("pk"))
    );
    assert_eq!(key_schema_attribute("Invalid UpdateExpression: x"), None);
    // In a cancellation, a key-schema ValidationError is its own case.
    let reasons = [
        reason("None"),
        CancellationReason::builder()
            .code("ValidationError")
            .message("The provided key element does not match the schema")
            .build(),
    ];
    assert!(matches!(
        classify_cancellation(&reasons, Plan::SEPARATE),
        Cancellation::KeySchema { index: 1, .. }
    ));
}

#[test]
fn unknown_or_missing_reasons_are_transient() {
    for reasons in [vec![], vec![reason("None")], vec![reason("SomethingNew")]] {
        assert!(matches!(
            classify_cancellation(&reasons, Plan::SEPARATE),
            Cancellation::Outcome(CommitOutcome::Transient { .. })
        ));
    }
}

/// Both marker forms store their commit time in the layout's
/// `committed_at`, and read back as the time it was, to the
/// millisecond; a fused marker an earlier version wrote has none.
#[test]
fn markers_of_both_forms_carry_their_commit_time() {
    let client = Client::from_conf(
        aws_sdk_dynamodb::Config::builder()
            .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
            .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
            .build(),
    );
    let committer = Committer::new(
        client,
        TableLayout::new("t"),
        crate::config::DEFAULT_MARKER_TTL,
    );
    let id = JobId::new("order-7").unwrap();
    let hash = PayloadHash::of(b"{}");
    let job = JobRef {
        id: &id,
        payload_hash: &hash,
        queue: "orders",
    };
    let now = UNIX_EPOCH + Duration::from_millis(1_800_000_000_123);
    let entry = Write::put(
        "t",
        crate::store::dynamodb::effect::Key::string("pk", "entry#order-7"),
        Item::from([("amount".to_owned(), AttributeValue::N("5".into()))]),
    );
    let effect = Effect::new().marked_by(entry.clone());
    let fused = committer.fused_put(job, &entry, &effect, now).unwrap().item;
    assert_eq!(
        fused.get("committed_at"),
        Some(&AttributeValue::S("2027-01-15T08:00:00.123Z".into()))
    );
    let separate = committer.marker_put(job, now, &Effect::new()).unwrap();
    let separate = separate.put().unwrap().item().clone();
    for item in [&fused, &separate] {
        let m = committer.parse_marker(item).expect("a marker");
        assert_eq!(m.job_id, "order-7");
        assert_eq!(m.committed_at, Some(now), "{item:?}");
    }
    let mut earlier = fused.clone();
    earlier.remove("committed_at");
    assert_eq!(committer.parse_marker(&earlier).unwrap().committed_at, None);
}
