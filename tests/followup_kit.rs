//! Follow-up jobs (`Effect::then_send`, src/followup/) through the real
//! Lambda batch service against the in-memory DynamoDB and SQS of
//! `idemq::testing`: sent only when the job commits, re-sent from the
//! marker by a redelivery, and a failed send keeps the job on the queue.

#[path = "common/event.rs"]
mod event;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use idemq::followup::{FOLLOW_UPS_ATTRIBUTE, FollowUp};
use idemq::store::dynamodb::Key;
use idemq::store::dynamodb::{Effect, Item, Write};
use idemq::testing::{QueueSpec, TestKit};
use idemq::{JobMeta, handler_fn};

#[path = "../examples/ledger.rs"]
mod ledger;

const TABLE: &str = "ledger";
const QUEUE: &str = "ledger-jobs";

fn ledger() -> ledger::Ledger {
    ledger::Ledger {
        table: TABLE.into(),
        fail_accounts: HashSet::new(),
    }
}

/// One record on `QUEUE`: `(message id, body, idemq-job-id, receive count)`.
fn event(records: &[(&str, &str, &str, u32)]) -> String {
    let records: Vec<_> = records
        .iter()
        .map(|&(message_id, body, job_id, receives)| (message_id, body, Some(job_id), receives))
        .collect();
    event::sqs_event(QUEUE, &records)
}

fn balance<H: idemq::Handler>(kit: &TestKit<H>, account: &str) -> Option<String> {
    kit.item(&Key::string("pk", format!("account#{account}")))
        .and_then(|i| i.get("balance").and_then(|v| v.as_n().ok()).cloned())
}

/// The ledger contract: a transfer with `then_credit` commits, and the
/// follow-up transfer `<id>/then` goes to the same queue with its own job
/// id, stored in the transfer's marker (its ledger entry) first.
#[tokio::test]
async fn a_committed_transfer_sends_its_follow_up_with_its_own_job_id() {
    let kit = TestKit::new(ledger(), TABLE);
    let body = r#"{"transfer_id":"t-1","account":"alice","amount":7,"then_credit":"bob"}"#;
    let run = kit
        .run_json(&event(&[("m-1", body, "t-1", 1)]))
        .await
        .unwrap();
    assert!(run.failed_ids().is_empty());
    assert_eq!(balance(&kit, "alice").as_deref(), Some("7"));
    let sent = event::sent_to(&kit, QUEUE);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].attribute("idemq-job-id"), Some("t-1/then"));
    let next: serde_json::Value = serde_json::from_str(&sent[0].body).unwrap();
    assert_eq!(
        next,
        serde_json::json!({"transfer_id": "t-1/then", "account": "bob", "amount": 7})
    );
    let marker = kit.item(&Key::string("pk", "entry#t-1")).unwrap();
    assert!(marker.contains_key(FOLLOW_UPS_ATTRIBUTE), "{marker:?}");

    // The follow-up itself, delivered: bob credited; it has no follow-up.
    let run = kit
        .run_json(&event(&[("m-2", &sent[0].body, "t-1/then", 1)]))
        .await
        .unwrap();
    assert!(run.failed_ids().is_empty());
    assert_eq!(balance(&kit, "bob").as_deref(), Some("7"));
    assert_eq!(event::sent_to(&kit, QUEUE).len(), 1);
}

/// A job whose commit does not happen sends nothing: a rejection (the
/// entry belongs to another job), a conflict (same job id, another
/// payload), and an effect refused before any I/O.
#[tokio::test]
async fn rejected_conflicting_or_invalid_jobs_send_no_follow_up() {
    let kit = TestKit::new(ledger(), TABLE);
    let first = r#"{"transfer_id":"t-1","account":"alice","amount":5,"then_credit":"bob"}"#;
    kit.run_json(&event(&[("m-1", first, "t-1", 1)]))
        .await
        .unwrap();
    assert_eq!(event::sent_to(&kit, QUEUE).len(), 1);

    // Conflict: t-1 again with another amount.
    let conflict = r#"{"transfer_id":"t-1","account":"alice","amount":6,"then_credit":"carol"}"#;
    // Rejected: another job (t-9) writing t-1's entry, which is t-1's marker.
    let rejected = r#"{"transfer_id":"t-1","account":"dave","amount":5,"then_credit":"erin"}"#;
    let run = kit
        .run_json(&event(&[
            ("m-2", conflict, "t-1", 1),
            ("m-3", rejected, "t-9", 1),
        ]))
        .await
        .unwrap();
    // Both dead-lettered at once (acknowledged), neither sent a follow-up.
    assert!(run.failed_ids().is_empty());
    let dlq: Vec<&str> = run
        .dead_letters
        .iter()
        .filter(|m| m.queue_url.ends_with("-dlq"))
        .filter_map(|m| m.attribute("idemq-job-id"))
        .collect();
    assert_eq!(dlq.len(), 2, "{:?}", run.dead_letters);
    assert_eq!(
        event::sent_to(&kit, QUEUE).len(),
        1,
        "no follow-up from either"
    );
    assert_eq!(balance(&kit, "alice").as_deref(), Some("5"));
    assert_eq!(balance(&kit, "dave"), None);

    // A follow-up over SQS's size is refused before the commit: nothing
    // written, nothing sent, dead-lettered as permanent.
    let kit2 = TestKit::new(
        handler_fn(|_: serde_json::Value, meta: JobMeta| async move {
            let big = FollowUp::raw(meta.queue_url, "big/then", "x".repeat(300 * 1024));
            Ok(Effect::new().then_send(big))
        }),
        TABLE,
    );
    let run = kit2
        .run_json(&event(&[("m-1", "{}", "big", 1)]))
        .await
        .unwrap();
    assert!(run.failed_ids().is_empty());
    assert_eq!(run.dead_letters.len(), 1);
    assert!(
        run.dead_letters[0]
            .attribute("idemq-error")
            .unwrap()
            .contains("follow-up 0 is"),
        "{:?}",
        run.dead_letters[0].attribute("idemq-error")
    );
    assert!(kit2.marker("big").is_none());
    assert!(event::sent_to(&kit2, QUEUE).is_empty());
}

/// The follow-up's queue is missing at first: the job commits, the send
/// fails, and the job is reported failed (not acknowledged). The
/// redelivery finds the marker and sends the follow-up *the marker
/// stores* (the handler now returns another one), then is acknowledged as
/// a duplicate; the effect was applied once.
#[tokio::test]
async fn a_failed_send_keeps_the_job_and_the_redelivery_resends_from_the_marker() {
    let runs = Arc::new(AtomicU32::new(0));
    let counter = Arc::clone(&runs);
    let kit = TestKit::new(
        handler_fn(move |_: serde_json::Value, meta: JobMeta| {
            let n = counter.fetch_add(1, Ordering::SeqCst);
            async move {
                let next_url = meta.queue_url.replace(QUEUE, "next");
                let credit =
                    Write::update(TABLE, Key::string("pk", "account#a"), "ADD balance :one").value(
                        ":one",
                        aws_sdk_dynamodb::types::AttributeValue::N("1".into()),
                    );
                // A handler that is not deterministic: each run would send
                // another body.
                let follow = FollowUp::raw(next_url, "j-1/next", format!("{{\"run\":{n}}}"))
                    .string_attribute("tenant", "acme");
                Ok(Effect::new().with(credit).then_send(follow))
            }
        }),
        TABLE,
    );
    let run = kit
        .run_json(&event(&[("m-1", "{}", "j-1", 1)]))
        .await
        .unwrap();
    assert_eq!(run.failed_ids(), vec!["m-1"], "not acknowledged");
    assert_eq!(balance(&kit, "a").as_deref(), Some("1"), "committed");
    let marker: Item = kit.marker("j-1").expect("the marker is committed");
    assert!(marker.contains_key(FOLLOW_UPS_ATTRIBUTE));
    let record = kit.failure_record("j-1").expect("the failure is recorded");
    let error = record["error"].as_s().unwrap();
    assert!(error.contains("follow-up not sent"), "{error}");

    kit.sqs().create_queue(QueueSpec::new("next"));
    let run = kit
        .run_json(&event(&[("m-1", "{}", "j-1", 2)]))
        .await
        .unwrap();
    assert!(run.failed_ids().is_empty(), "acknowledged as a duplicate");
    assert_eq!(balance(&kit, "a").as_deref(), Some("1"), "applied once");
    let sent = event::sent_to(&kit, "next");
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].body, r#"{"run":0}"#, "the marker's, not this run's");
    assert_eq!(sent[0].attribute("idemq-job-id"), Some("j-1/next"));
    assert_eq!(sent[0].attribute("tenant"), Some("acme"));
    // Settled by the marker before the handler: it did not run again.
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    // Every later redelivery re-sends it again (at least once; its
    // consumer deduplicates by job id).
    kit.run_json(&event(&[("m-1", "{}", "j-1", 3)]))
        .await
        .unwrap();
    assert_eq!(event::sent_to(&kit, "next").len(), 2);
    assert_eq!(balance(&kit, "a").as_deref(), Some("1"));
}

#[path = "../examples/followup_chain.rs"]
mod chain;

/// examples/followup_chain.rs: a charge commits and sends its receipt job;
/// the receipt, delivered twice, is recorded once; a second charge of the
/// same order (a redelivery) re-sends the receipt, which stays recorded once.
#[tokio::test]
async fn the_follow_up_chain_example_charges_then_records_the_receipt_once() {
    let kit = TestKit::new(
        chain::Orders {
            table: TABLE.into(),
        },
        TABLE,
    );
    let charge = r#"{"step":"charge","order_id":"o-1","amount":25}"#;
    let run = kit
        .run_json(&event(&[("m-1", charge, "o-1", 1)]))
        .await
        .unwrap();
    assert!(run.failed_ids().is_empty());
    let order = kit.item(&Key::string("pk", "order#o-1")).unwrap();
    assert_eq!(order["status"].as_s().unwrap(), "charged");
    let sent = event::sent_to(&kit, QUEUE);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].attribute("idemq-job-id"), Some("o-1/receipt"));

    let receipt = sent[0].body.clone();
    let run = kit
        .run_json(&event(&[
            ("m-2", &receipt, "o-1/receipt", 1),
            ("m-3", &receipt, "o-1/receipt", 1),
        ]))
        .await
        .unwrap();
    assert!(run.failed_ids().is_empty());
    let stored = kit.item(&Key::string("pk", "receipt#o-1")).unwrap();
    assert_eq!(stored["amount"].as_n().unwrap(), "25");
    assert_eq!(
        event::sent_to(&kit, QUEUE).len(),
        1,
        "a receipt starts nothing"
    );

    // The charge redelivered: a duplicate that sends its receipt again.
    kit.run_json(&event(&[("m-1", charge, "o-1", 2)]))
        .await
        .unwrap();
    assert_eq!(event::sent_to(&kit, QUEUE).len(), 2);
    let receipts = kit
        .items()
        .into_iter()
        .filter(|i| i["pk"].as_s().unwrap().starts_with("receipt#"))
        .count();
    assert_eq!(receipts, 1);
}
