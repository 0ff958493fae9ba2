//! Consumer namespaces: two consumers sharing one idemq table (an SNS topic
//! or an EventBridge rule fanning out to two queues) each apply every job
//! once; markers and failure records written before namespaces are still
//! found. Through the test kit: the Lambda batch service against the
//! in-memory DynamoDB and SQS.

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_sdk_dynamodb::types::AttributeValue;
use idemq::config::{LegacyMarkers, TableLayout};
use idemq::job::PayloadHash;
use idemq::store::dynamodb::Key;
use idemq::store::dynamodb::{Effect, Item, Write};
use idemq::testing::{KitConfig, TestKit};
use idemq::{JobError, JobMeta, handler_fn};

const TABLE: &str = "shared";

/// Counts each application in the shared table, per consumer (the queue
/// the job came from) and job: `applied#<queue>#<job>`, attribute `n`.
fn counting_kit(legacy: LegacyMarkers) -> TestKit<impl idemq::Handler> {
    let handler = handler_fn(|job: serde_json::Value, meta: JobMeta| async move {
        if job["bad"] == true {
            return Err(JobError::permanent("a bad job"));
        }
        Ok(Effect::new().with(
            Write::update(
                TABLE,
                Key::string("pk", format!("applied#{}#{}", meta.queue, meta.job_id)),
                "ADD n :one",
            )
            .value(":one", AttributeValue::N("1".into())),
        ))
    });
    let mut config = KitConfig::new(TABLE);
    config.idempotency.job_id = config.idempotency.job_id.with_body_pointer("/id");
    config.idempotency.legacy_markers = legacy;
    TestKit::with_config(handler, config)
}

fn applied<H: idemq::Handler>(kit: &TestKit<H>, queue: &str, job: &str) -> u64 {
    kit.item(&Key::string("pk", format!("applied#{queue}#{job}")))
        .and_then(|i| i.get("n").and_then(|v| v.as_n().ok()).cloned())
        .map_or(0, |n| n.parse().unwrap())
}

/// One record from `queue`, as SNS fans one publication out: each queue's
/// copy has its own MessageId, the same body.
fn event(queue: &str, message_id: &str, body: &str) -> String {
    common::event::sqs_event(queue, &[(message_id, body, None, 1)])
}

#[tokio::test]
async fn two_consumers_on_one_table_each_apply_a_fanned_out_job_once() {
    let kit = counting_kit(LegacyMarkers::Read);
    let body = r#"{"id": "order-7", "amount": 5}"#;
    // The topic delivers to both queues; then SQS redelivers each copy.
    for (queue, message_id) in [
        ("billing", "b-1"),
        ("emails", "e-1"),
        ("billing", "b-1"),
        ("emails", "e-1"),
        ("emails", "e-2"),
    ] {
        let run = kit.run_json(&event(queue, message_id, body)).await.unwrap();
        assert!(run.failed_ids().is_empty(), "{queue} {message_id}");
        assert!(run.dead_letters.is_empty(), "{queue} {message_id}");
    }
    assert_eq!(
        applied(&kit, "billing", "order-7"),
        1,
        "billing applied it once"
    );
    assert_eq!(
        applied(&kit, "emails", "order-7"),
        1,
        "emails applied it once"
    );
    assert!(kit.marker_in("billing", "order-7").is_some());
    assert!(kit.marker_in("emails", "order-7").is_some());

    // Different payloads under one id on two consumers are two jobs, not
    // a conflict.
    let run = kit
        .run_json(&event(
            "billing",
            "b-9",
            r#"{"id": "order-9", "amount": 1}"#,
        ))
        .await
        .unwrap();
    assert!(run.dead_letters.is_empty());
    let run = kit
        .run_json(&event("emails", "e-9", r#"{"id": "order-9", "amount": 2}"#))
        .await
        .unwrap();
    assert!(run.dead_letters.is_empty(), "no conflict across consumers");
    assert_eq!(applied(&kit, "emails", "order-9"), 1);
}

#[tokio::test]
async fn one_namespace_for_two_queues_dedups_across_them() {
    let handler = handler_fn(|_: serde_json::Value, meta: JobMeta| async move {
        Ok(Effect::new().with(
            Write::update(
                TABLE,
                Key::string("pk", format!("applied#{}", meta.job_id)),
                "ADD n :one",
            )
            .value(":one", AttributeValue::N("1".into())),
        ))
    });
    let mut config = KitConfig::new(TABLE);
    config.layout = config.layout.with_namespace("orders").unwrap();
    config.idempotency.job_id = config.idempotency.job_id.with_body_pointer("/id");
    let kit = TestKit::with_config(handler, config);
    let body = r#"{"id": "order-7"}"#;
    for (queue, message_id) in [("orders-a", "a-1"), ("orders-b", "b-1")] {
        kit.run_json(&event(queue, message_id, body)).await.unwrap();
    }
    let n = kit
        .item(&Key::string("pk", "applied#order-7"))
        .and_then(|i| i.get("n").cloned());
    assert_eq!(n, Some(AttributeValue::N("1".into())));
    assert!(kit.marker_in("orders", "order-7").is_some());
}

#[tokio::test]
async fn downstream_keys_differ_between_consumers() {
    let mut billing = idemq::testing::job_meta("order-7");
    billing.namespace = "billing".into();
    let mut emails = billing.clone();
    emails.namespace = "emails".into();
    assert_ne!(
        billing.downstream_key("notify"),
        emails.downstream_key("notify")
    );
    assert_eq!(
        billing.downstream_key("notify"),
        billing.clone().downstream_key("notify")
    );
}

/// A marker as an earlier version wrote it: `idemq#job#<id>`, naming the
/// queue it was committed from.
fn legacy_marker(layout: &TableLayout, job: &str, body: &str, queue: &str) -> Item {
    let expires = (SystemTime::now() + Duration::from_secs(86_400))
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let s = |v: &str| AttributeValue::S(v.to_owned());
    Item::from([
        (
            layout.partition_key.clone(),
            s(&layout.legacy_marker_key(job)),
        ),
        (layout.job_id.clone(), s(job)),
        (
            layout.payload_hash.clone(),
            s(&PayloadHash::of(body.as_bytes()).to_string()),
        ),
        (layout.committed_at.clone(), s("2026-12-01T00:00:00.000Z")),
        (layout.queue.clone(), s(queue)),
        (
            layout.expires_at.clone(),
            AttributeValue::N(expires.to_string()),
        ),
    ])
}

#[tokio::test]
async fn a_marker_an_earlier_version_wrote_is_still_a_duplicate() {
    let body = r#"{"id": "t-1"}"#;
    let other = r#"{"id": "t-2"}"#;
    let kit = counting_kit(LegacyMarkers::Read);
    let layout = TableLayout::new(TABLE);
    {
        let mut db = kit.dynamodb();
        db.put_item(TABLE, legacy_marker(&layout, "t-1", body, "billing"))
            .unwrap();
        // Another consumer's legacy marker: not this one's duplicate.
        db.put_item(TABLE, legacy_marker(&layout, "t-2", other, "emails"))
            .unwrap();
    }
    let run = kit.run_json(&event("billing", "m-1", body)).await.unwrap();
    assert!(run.failed_ids().is_empty() && run.dead_letters.is_empty());
    assert_eq!(
        applied(&kit, "billing", "t-1"),
        0,
        "committed before the upgrade"
    );
    assert!(
        kit.marker_in("billing", "t-1").is_none(),
        "nothing committed"
    );

    let run = kit.run_json(&event("billing", "m-2", other)).await.unwrap();
    assert!(run.dead_letters.is_empty());
    assert_eq!(
        applied(&kit, "billing", "t-2"),
        1,
        "emails' marker is not billing's"
    );

    // The same id with another payload is a conflict, as before.
    let run = kit
        .run_json(&event("billing", "m-3", r#"{"id": "t-1", "x": 1}"#))
        .await
        .unwrap();
    assert_eq!(run.dead_letters.len(), 1, "a conflict is dead-lettered");
}

#[tokio::test]
async fn legacy_markers_off_reads_no_legacy_key() {
    // What the default guards against: without the read, a job committed
    // by the earlier version is applied again.
    let body = r#"{"id": "t-1"}"#;
    let kit = counting_kit(LegacyMarkers::Off);
    kit.dynamodb()
        .put_item(
            TABLE,
            legacy_marker(&TableLayout::new(TABLE), "t-1", body, "billing"),
        )
        .unwrap();
    kit.run_json(&event("billing", "m-1", body)).await.unwrap();
    assert_eq!(applied(&kit, "billing", "t-1"), 1);
}

#[tokio::test]
async fn failure_records_of_both_key_forms_are_found() {
    let kit = counting_kit(LegacyMarkers::Read);
    // A new record: a permanent failure on the billing queue.
    let run = kit
        .run_json(&event("billing", "m-new", r#"{"id": "new", "bad": true}"#))
        .await
        .unwrap();
    assert_eq!(run.dead_letters.len(), 1);
    let layout = TableLayout::new(TABLE);
    // An old record, as an earlier version wrote it.
    kit.dynamodb()
        .put_item(
            TABLE,
            Item::from([
                (
                    "pk".to_owned(),
                    AttributeValue::S(layout.legacy_failure_key(Some("old"), "m-old")),
                ),
                ("job_id".into(), AttributeValue::S("old".into())),
                ("message_id".into(), AttributeValue::S("m-old".into())),
                ("attempt".into(), AttributeValue::N("6".into())),
                ("kind".into(), AttributeValue::S("transient".into())),
                ("error".into(), AttributeValue::S("timed out".into())),
                ("source_queue".into(), AttributeValue::S("billing".into())),
            ]),
        )
        .unwrap();
    let records = idemq::dlq::records::Records::new(std::sync::Arc::new(
        idemq::store::dynamodb::FailureTable::new(
            kit.dynamodb_client().clone(),
            layout,
            Duration::from_secs(86_400),
        ),
    ))
    .with_source_queues(&["https://sqs.us-east-1.amazonaws.com/000000000000/billing"]);
    let wanted = [
        (Some("new".to_owned()), "m-new".to_owned()),
        (Some("old".to_owned()), "m-old".to_owned()),
    ];
    let found = records.read_many(&wanted).await.unwrap();
    assert_eq!(found.len(), 2, "{found:?}");
    assert_eq!(found[&wanted[0]].failure.kind.as_str(), "permanent");
    assert_eq!(found[&wanted[1]].attempt, 6);
    let one = records.read(Some("old"), "m-old").await.unwrap();
    assert_eq!(one.map(|r| r.message_id), Some("m-old".into()));
}
