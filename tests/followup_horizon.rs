//! A duplicate re-sends the follow-ups its marker stores only while the
//! marker's commit is within the follow-up horizon (the marker TTL less the
//! replay window, src/followup/), and a re-sent follow-up carries the
//! parent's commit time as `idemq-first-enqueued`: through the real Lambda
//! batch service against the in-memory DynamoDB and SQS of
//! `idemq::testing`, with the ledger, whose fused marker (its entry) never
//! expires.

use std::collections::HashSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_sdk_dynamodb::types::AttributeValue;
use idemq::store::dynamodb::Key;
use idemq::testing::{SentMessage, TestKit};

#[path = "common/event.rs"]
mod event;
#[path = "../examples/ledger.rs"]
mod ledger;

const TABLE: &str = "ledger";
const QUEUE: &str = "ledger-jobs";
const DAY: Duration = Duration::from_secs(24 * 3600);
const TRANSFER: &str = r#"{"transfer_id":"t-1","account":"alice","amount":7,"then_credit":"bob"}"#;

fn kit() -> TestKit<ledger::Ledger> {
    TestKit::new(
        ledger::Ledger {
            table: TABLE.into(),
            fail_accounts: HashSet::new(),
        },
        TABLE,
    )
}

/// The transfer `t-1` on `QUEUE` as message `message_id`.
fn event(message_id: &str, receives: u32) -> String {
    event::sqs_event(QUEUE, &[(message_id, TRANSFER, Some("t-1"), receives)])
}

/// Follow-ups sent to `QUEUE` so far.
fn follow_ups(kit: &TestKit<ledger::Ledger>) -> Vec<SentMessage> {
    event::sent_to(kit, QUEUE)
}

/// Commits `t-1` (its follow-up `t-1/then` sent once, with no
/// first-enqueued time: its own `SentTimestamp` is its first enqueue), then
/// makes its fused marker look committed at `committed_at` (`None`: as an
/// earlier version wrote it, without a commit time).
async fn committed(committed_at: Option<SystemTime>) -> TestKit<ledger::Ledger> {
    let kit = kit();
    let run = kit.run_json(&event("m-1", 1)).await.unwrap();
    assert!(run.failed_ids().is_empty());
    let sent = follow_ups(&kit);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].attribute("idemq-job-id"), Some("t-1/then"));
    assert_eq!(sent[0].attribute("idemq-first-enqueued"), None);
    let key = Key::string("pk", "entry#t-1");
    let mut entry = kit.item(&key).expect("the fused marker");
    match committed_at {
        Some(at) => entry.insert(
            "committed_at".into(),
            AttributeValue::S(humantime::format_rfc3339_millis(at).to_string()),
        ),
        None => entry.remove("committed_at"),
    };
    kit.dynamodb().put_item(TABLE, entry).unwrap();
    kit
}

/// A producer re-sends `t-1` 30 days after it ran: the entry (never
/// expiring) makes it a duplicate, and its follow-up, whose own marker has
/// expired by then, is not sent again.
#[tokio::test]
async fn a_duplicate_of_a_30_day_old_fused_marker_does_not_resend() {
    let kit = committed(Some(SystemTime::now() - 30 * DAY)).await;
    let run = kit.run_json(&event("m-2", 1)).await.unwrap();
    assert!(run.failed_ids().is_empty(), "acknowledged as a duplicate");
    assert!(run.dead_letters.is_empty(), "{:?}", run.dead_letters);
    assert_eq!(
        follow_ups(&kit).len(),
        1,
        "not re-sent: {:?}",
        follow_ups(&kit)
    );
}

/// Within the horizon (21 days less 1), a redelivery re-sends the stored
/// follow-up, carrying the parent's commit as its first-enqueued time, to
/// the millisecond.
#[tokio::test]
async fn a_duplicate_within_the_horizon_resends_with_the_commit_time() {
    let at = UNIX_EPOCH
        + Duration::from_millis(
            (SystemTime::now() - 19 * DAY)
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_millis() as u64,
        );
    let kit = committed(Some(at)).await;
    let run = kit.run_json(&event("m-1", 2)).await.unwrap();
    assert!(run.failed_ids().is_empty());
    let sent = follow_ups(&kit);
    assert_eq!(sent.len(), 2, "re-sent: {sent:?}");
    assert_eq!(sent[1].attribute("idemq-job-id"), Some("t-1/then"));
    assert_eq!(sent[1].body, sent[0].body);
    let ms = at
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis()
        .to_string();
    assert_eq!(sent[1].attribute("idemq-first-enqueued"), Some(ms.as_str()));
}

/// A fused marker written before markers stored their commit time: its
/// age is unknown, so its follow-up is not re-sent (logged and counted).
#[tokio::test]
async fn a_duplicate_of_an_undated_fused_marker_does_not_resend() {
    let kit = committed(None).await;
    let run = kit.run_json(&event("m-1", 2)).await.unwrap();
    assert!(run.failed_ids().is_empty());
    assert_eq!(follow_ups(&kit).len(), 1, "{:?}", follow_ups(&kit));
}

/// The fused marker the commit writes carries its commit time, so the
/// rule holds for every marker idemq writes from now on.
#[tokio::test]
async fn the_fused_marker_stores_its_commit_time() {
    let before = SystemTime::now() - Duration::from_millis(1);
    let kit = kit();
    kit.run_json(&event("m-1", 1)).await.unwrap();
    let entry = kit.item(&Key::string("pk", "entry#t-1")).unwrap();
    let stored = entry
        .get("committed_at")
        .and_then(|v| v.as_s().ok())
        .expect("committed_at");
    let at = humantime::parse_rfc3339(stored).unwrap();
    assert!(at >= before && at <= SystemTime::now(), "{stored}");
}
