//! The marker look-up before the handler (src/store/dynamodb/commit/look_up.rs), through
//! the real Lambda batch service against the in-memory DynamoDB and SQS of
//! `idemq::testing`: a job already committed is settled without running
//! its handler again (its external effects are not repeated, whatever the
//! age of the copy), its stored follow-ups are still re-sent, another
//! payload under its id is a conflict; with the look-up off the handler
//! runs again and the commit alone dedups the effect.

#[path = "common/event.rs"]
mod event;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use aws_sdk_dynamodb::types::AttributeValue;
use idemq::followup::FollowUp;
use idemq::store::dynamodb::Key;
use idemq::store::dynamodb::{Effect, Write};
use idemq::testing::{KitConfig, TestKit};
use idemq::{JobMeta, LookUp, handler_fn};

const TABLE: &str = "idemq";
const QUEUE: &str = "charges";

/// One record on `QUEUE`: `(message id, body, idemq-job-id, receive count)`.
fn event(message_id: &str, body: &str, job_id: &str, receives: u32) -> String {
    event::sqs_event(QUEUE, &[(message_id, body, Some(job_id), receives)])
}

/// A handler with an external effect (counted in `charges`, standing in
/// for a card charge), a DynamoDB effect and a follow-up.
fn charging_kit(read_marker_first: bool) -> (TestKit<impl idemq::Handler>, Arc<AtomicU32>) {
    charging_kit_declaring(read_marker_first, LookUp::BeforeHandler)
}

/// [`charging_kit`], its handler declaring `look_up`.
fn charging_kit_declaring(
    read_marker_first: bool,
    look_up: LookUp,
) -> (TestKit<impl idemq::Handler>, Arc<AtomicU32>) {
    let charges = Arc::new(AtomicU32::new(0));
    let counter = Arc::clone(&charges);
    let handler = handler_fn(move |_: serde_json::Value, meta: JobMeta| {
        counter.fetch_add(1, Ordering::SeqCst);
        async move {
            let receipt = FollowUp::raw(
                meta.queue_url.clone(),
                format!("{}/receipt", meta.job_id),
                "{}",
            );
            let count = Write::update(TABLE, Key::string("pk", "charged"), "ADD n :one")
                .value(":one", AttributeValue::N("1".into()));
            Ok(Effect::new().with(count).then_send(receipt))
        }
    })
    .with_look_up(look_up);
    let mut config = KitConfig::new(TABLE);
    config.idempotency.read_marker_first = read_marker_first;
    (TestKit::with_config(handler, config), charges)
}

fn charged<H: idemq::Handler>(kit: &TestKit<H>) -> Option<String> {
    kit.item(&Key::string("pk", "charged"))
        .and_then(|i| i.get("n").and_then(|v| v.as_n().ok()).cloned())
}

fn receipts<H: idemq::Handler>(kit: &TestKit<H>) -> usize {
    kit.sqs()
        .sent_messages()
        .iter()
        .filter(|m| m.attribute("idemq-job-id") == Some("c-1/receipt"))
        .count()
}

#[tokio::test]
async fn a_redelivered_job_does_not_run_its_handler_and_still_resends_its_follow_ups() {
    let (kit, charges) = charging_kit(true);
    let run = kit.run_json(&event("m-1", "{}", "c-1", 1)).await.unwrap();
    assert!(run.failed_ids().is_empty());
    assert_eq!(charges.load(Ordering::SeqCst), 1);
    assert_eq!(receipts(&kit), 1);

    // The same job again, days later through a redrive (a new message id):
    // settled by the marker before the handler, acknowledged, and its
    // stored follow-up re-sent.
    let run = kit.run_json(&event("m-2", "{}", "c-1", 1)).await.unwrap();
    assert!(run.failed_ids().is_empty(), "{:?}", run.response);
    assert_eq!(charges.load(Ordering::SeqCst), 1, "the handler ran again");
    assert_eq!(charged(&kit).as_deref(), Some("1"));
    assert_eq!(receipts(&kit), 2, "the stored follow-up is re-sent");
}

#[tokio::test]
async fn another_payload_under_a_committed_id_is_a_conflict_without_running_the_handler() {
    let (kit, charges) = charging_kit(true);
    kit.run_json(&event("m-1", "{}", "c-1", 1)).await.unwrap();
    let run = kit
        .run_json(&event("m-2", r#"{"amount":2}"#, "c-1", 1))
        .await
        .unwrap();
    assert!(run.failed_ids().is_empty(), "dead-lettered at once");
    assert_eq!(run.dead_letters.len(), 1, "{:?}", run.dead_letters);
    assert_eq!(charges.load(Ordering::SeqCst), 1);
    assert_eq!(receipts(&kit), 1, "a conflict sends no follow-up");
}

/// With the look-up off, the commit alone dedups: the handler runs again
/// (its external effect is repeated), the DynamoDB effect is not.
#[tokio::test]
async fn without_the_look_up_the_handler_runs_again_and_the_commit_dedups() {
    let (kit, charges) = charging_kit(false);
    kit.run_json(&event("m-1", "{}", "c-1", 1)).await.unwrap();
    let run = kit.run_json(&event("m-2", "{}", "c-1", 1)).await.unwrap();
    assert!(run.failed_ids().is_empty());
    assert_eq!(charges.load(Ordering::SeqCst), 2);
    assert_eq!(charged(&kit).as_deref(), Some("1"));
    assert_eq!(receipts(&kit), 2);
}

/// A handler that declares the look-up buys it nothing is not read for,
/// although the deployment reads markers first: its redelivery runs it
/// again (what it declared is safe for it) and the commit alone dedups.
/// The same handler declaring nothing is read for and not run again.
#[tokio::test]
async fn a_handler_that_needs_no_look_up_is_not_read_for() {
    for (look_up, ran) in [(LookUp::NotNeeded, 2), (LookUp::BeforeHandler, 1)] {
        let (kit, charges) = charging_kit_declaring(true, look_up);
        kit.run_json(&event("m-1", "{}", "c-1", 1)).await.unwrap();
        let run = kit.run_json(&event("m-2", "{}", "c-1", 1)).await.unwrap();
        assert!(
            run.failed_ids().is_empty(),
            "{look_up:?}: {:?}",
            run.response
        );
        assert_eq!(charges.load(Ordering::SeqCst), ran, "{look_up:?}");
        assert_eq!(charged(&kit).as_deref(), Some("1"), "{look_up:?}");
        assert_eq!(receipts(&kit), 2, "{look_up:?}: the follow-up is re-sent");
    }
}

/// A marker an earlier version wrote (no namespace, this queue) makes the
/// job a duplicate before its handler runs, with the look-up of this
/// version's marker on or off; with legacy reading off it does not.
#[tokio::test]
async fn a_legacy_marker_is_found_before_the_handler() {
    for (read_first, legacy, ran) in [
        (true, idemq::config::LegacyMarkers::Read, 0),
        (false, idemq::config::LegacyMarkers::Read, 0),
        (true, idemq::config::LegacyMarkers::Off, 1),
    ] {
        let charges = Arc::new(AtomicU32::new(0));
        let counter = Arc::clone(&charges);
        let handler = handler_fn(move |_: serde_json::Value, _: JobMeta| {
            counter.fetch_add(1, Ordering::SeqCst);
            async { Ok(Effect::new()) }
        });
        let mut config = KitConfig::new(TABLE);
        config.idempotency.read_marker_first = read_first;
        config.idempotency.legacy_markers = legacy;
        let kit = TestKit::with_config(handler, config);
        let hash = idemq::job::PayloadHash::of(b"{}").to_string();
        kit.dynamodb()
            .put_item(
                TABLE,
                [
                    ("pk", AttributeValue::S("idemq#job#c-1".into())),
                    ("job_id", AttributeValue::S("c-1".into())),
                    ("payload_hash", AttributeValue::S(hash)),
                    ("queue", AttributeValue::S(QUEUE.into())),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect(),
            )
            .unwrap();
        let run = kit.run_json(&event("m-1", "{}", "c-1", 1)).await.unwrap();
        assert!(run.failed_ids().is_empty());
        assert_eq!(
            charges.load(Ordering::SeqCst),
            ran,
            "read first {read_first}, legacy {legacy:?}"
        );
    }
}
