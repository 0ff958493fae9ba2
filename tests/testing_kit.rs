//! The test kit (`idemq::testing`, feature `testing`) on the ledger
//! example: real SQS event fixtures through the Lambda batch service,
//! against the in-memory DynamoDB and SQS. No AWS, no emulator.

use std::collections::HashSet;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use idemq::store::dynamodb::Key;
use idemq::store::dynamodb::{Effect, Item, Write, WriteKind};
use idemq::testing::{KitConfig, TestKit, job_meta, write_to, writes};
use idemq::{Handler, JobError, JobMeta, handler_fn};

#[path = "../examples/ledger.rs"]
mod ledger;

use ledger::{Ledger, Transfer};

const TABLE: &str = "ledger";
const FIXTURE: &str = include_str!("fixtures/sqs_ledger.json");

// The fixture's records, in order: t-1 (alice +25), t-2 (bob +10), t-1
// again (a redelivery under another MessageId), t-3 (amount -5: permanent),
// t-4 (account "outage": transient), t-5 (a truncated body: undecodable),
// and carol +3 sent without `idemq-job-id`.
const T1: &str = "6a1f0c2e-0001-4b7e-9d41-1c0a5e7d2f01";
const OUTAGE: &str = "6a1f0c2e-0005-4b7e-9d41-1c0a5e7d2f05";
/// Sent without `idemq-job-id`: its job id is its MessageId.
const NO_JOB_ID: &str = "6a1f0c2e-0007-4b7e-9d41-1c0a5e7d2f07";

fn ledger() -> Ledger {
    Ledger {
        table: TABLE.into(),
        fail_accounts: HashSet::from(["outage".to_string()]),
    }
}

fn s(item: &Item, name: &str) -> Option<String> {
    item.get(name).and_then(|v| v.as_s().ok()).cloned()
}

fn balance<H: idemq::Handler>(kit: &TestKit<H>, account: &str) -> Option<String> {
    kit.item(&Key::string("pk", format!("account#{account}")))
        .and_then(|i| i.get("balance").and_then(|v| v.as_n().ok()).cloned())
}

/// An event of `(message id, body, idemq-job-id, receive count)` records
/// on the fixture's queue.
fn event(records: &[(&str, &str, Option<&str>, u32)]) -> String {
    let records: Vec<serde_json::Value> = records
        .iter()
        .map(|(message_id, body, job_id, receives)| {
            let mut attrs = serde_json::Map::new();
            if let Some(j) = job_id {
                attrs.insert(
                    "idemq-job-id".into(),
                    serde_json::json!({"stringValue": j, "dataType": "String"}),
                );
            }
            serde_json::json!({
                "messageId": message_id,
                "receiptHandle": format!("rh-{message_id}"),
                "body": body,
                "attributes": {"ApproximateReceiveCount": receives.to_string(), "SentTimestamp": "1796212800000"},
                "messageAttributes": attrs,
                "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-1:000000000000:ledger-jobs",
                "awsRegion": "us-east-1"
            })
        })
        .collect();
    serde_json::json!({ "Records": records }).to_string()
}

/// Where each failure happened, as its record and dead letter keep it: a
/// handler's error and a handler's panic name the ledger's `handle` first,
/// with its file and line, and fold idemq's, tokio's and std's frames; a
/// body that does not decode (idemq's own refusal) has no backtrace.
#[tokio::test]
async fn a_handlers_error_and_panic_record_where_they_happened() {
    let mut ledger = ledger();
    ledger.fail_accounts.insert("panic:dave".into());
    let kit = TestKit::new(ledger, TABLE);
    let run = kit
        .run_json(&event(&[
            (
                "m-1",
                r#"{"transfer_id":"t-1","account":"outage","amount":1}"#,
                Some("t-1"),
                1,
            ),
            (
                "m-2",
                r#"{"transfer_id":"t-2","account":"dave","amount":1}"#,
                Some("t-2"),
                1,
            ),
            (
                "m-3",
                r#"{"transfer_id":"t-3","account":"erin","amount":0}"#,
                Some("t-3"),
                1,
            ),
            ("m-4", r#"{"transfer_id":"t-4","#, Some("t-4"), 1),
        ]))
        .await
        .unwrap();
    assert_eq!(run.failed_ids(), vec!["m-1", "m-2"]);
    let backtrace = |job| s(&kit.failure_record(job).unwrap(), "backtrace");
    for (job, kind) in [("t-1", "transient"), ("t-2", "panic"), ("t-3", "permanent")] {
        let record = kit.failure_record(job).unwrap();
        assert_eq!(s(&record, "kind").as_deref(), Some(kind));
        let bt = backtrace(job).unwrap_or_else(|| panic!("{job}: no backtrace"));
        // The innermost frame is the ledger's handler, where the error was
        // made or the panic raised (a debug build has line tables).
        let first_at = bt.lines().nth(1).unwrap();
        assert!(
            first_at.starts_with("    at ") && first_at.contains("examples/ledger.rs:"),
            "{job}: the user's frame first:\n{bt}"
        );
        assert!(
            bt.ends_with("frames of idemq, the runtime, dependencies and std folded"),
            "{job}:\n{bt}"
        );
        assert!(
            !bt.contains("/src/batch.rs") && !bt.contains("/tokio-") && !bt.contains("/rustc/"),
            "{job}: folded:\n{bt}"
        );
        assert!(bt.len() <= idemq::failure::MAX_RECORD_BACKTRACE);
    }
    assert_eq!(
        backtrace("t-4"),
        None,
        "an undecodable body is not the handler's"
    );
    // idemq's own dead letter carries the first frames.
    let letter = run
        .dead_letters
        .iter()
        .find(|m| m.attribute("idemq-job-id") == Some("t-3"))
        .unwrap();
    let attribute = letter
        .attribute("idemq-backtrace")
        .expect("idemq-backtrace");
    let record = backtrace("t-3").unwrap();
    let first_frame: Vec<&str> = record.lines().take(2).collect();
    assert!(
        attribute.starts_with(&first_frame.join("\n")),
        "{attribute}"
    );
}

#[tokio::test]
async fn the_fixture_commits_dedups_dead_letters_and_retries() {
    let kit = TestKit::new(ledger(), TABLE);
    let run = kit.run_json(FIXTURE).await.unwrap();

    // Only the transient failure stays on the queue, for a retry.
    assert_eq!(run.failed_ids(), vec![OUTAGE]);
    assert_eq!(run.visibility_changes.len(), 1);
    let retry = &run.visibility_changes[0];
    assert_eq!(retry.message_id, OUTAGE);
    assert!(
        retry.queue_url.ends_with("/000000000000/ledger-jobs"),
        "{}",
        retry.queue_url
    );
    // Full jitter over the backoff's ceiling for a second receive, in
    // whole seconds rounded up.
    let ceiling = KitConfig::new(TABLE).batch.backoff.ceiling(2);
    assert!(
        retry.timeout <= ceiling + Duration::from_secs(1),
        "{:?}",
        retry.timeout
    );

    // The negative amount (permanent) and the undecodable body are
    // dead-lettered at once, with their job id and the error.
    let mut dead: Vec<(&str, &str)> = run
        .dead_letters
        .iter()
        .map(|m| (m.attribute("idemq-job-id").unwrap(), m.queue_url.as_str()))
        .collect();
    dead.sort();
    assert_eq!(dead.len(), 2);
    assert_eq!((dead[0].0, dead[1].0), ("t-3", "t-5"));
    assert!(dead.iter().all(|(_, q)| q.ends_with("/ledger-jobs-dlq")));
    let negative = run
        .dead_letters
        .iter()
        .find(|m| m.attribute("idemq-job-id") == Some("t-3"))
        .unwrap();
    assert_eq!(
        negative.body,
        r#"{"transfer_id":"t-3","account":"alice","amount":-5}"#
    );
    assert!(
        negative
            .attribute("idemq-error")
            .unwrap()
            .contains("not positive")
    );

    // The effects: t-1 once, although delivered twice; t-2; the job
    // without an id attribute under its MessageId.
    assert_eq!(balance(&kit, "alice").as_deref(), Some("25"));
    assert_eq!(balance(&kit, "bob").as_deref(), Some("10"));
    assert_eq!(balance(&kit, "carol").as_deref(), Some("3"));
    assert_eq!(balance(&kit, "outage"), None);
    let entry = kit.item(&Key::string("pk", "entry#t-1")).unwrap();
    assert_eq!(s(&entry, "account").as_deref(), Some("alice"));
    for committed in ["t-1", "t-2", NO_JOB_ID] {
        let marker = kit
            .marker(committed)
            .unwrap_or_else(|| panic!("no marker for {committed}"));
        // The ledger's entry is the job's marker (Effect::marked_by).
        assert_eq!(s(&marker, "job_id").as_deref(), Some(committed));
        assert!(s(&marker, "payload_hash").is_some());
        assert!(s(&marker, "pk").unwrap().starts_with("entry#"));
    }
    for failed in ["t-3", "t-4", "t-5"] {
        assert!(kit.marker(failed).is_none(), "{failed} committed");
        let record = kit
            .failure_record(failed)
            .unwrap_or_else(|| panic!("no record for {failed}"));
        assert!(s(&record, "kind").is_some());
    }
    assert_eq!(
        s(&kit.failure_record("t-4").unwrap(), "kind").as_deref(),
        Some("transient")
    );
    assert_eq!(
        s(&kit.failure_record("t-5").unwrap(), "kind").as_deref(),
        Some("permanent")
    );
    // Nothing else was written: 3 accounts, 3 entries (the markers), 3
    // failure records.
    assert_eq!(kit.items().len(), 9, "{:#?}", kit.items());
}

#[tokio::test]
async fn a_redelivered_batch_is_acknowledged_as_duplicates_and_credits_nothing() {
    let kit = TestKit::new(ledger(), TABLE);
    kit.run_json(FIXTURE).await.unwrap();
    let marker_before = kit.marker("t-1").unwrap();
    let items_before = kit.items().len();

    let again = kit.run_json(FIXTURE).await.unwrap();
    assert_eq!(
        again.failed_ids(),
        vec![OUTAGE],
        "duplicates are acknowledged"
    );
    assert_eq!(
        balance(&kit, "alice").as_deref(),
        Some("25"),
        "t-1 credited once"
    );
    assert_eq!(balance(&kit, "bob").as_deref(), Some("10"));
    assert_eq!(balance(&kit, "carol").as_deref(), Some("3"));
    assert_eq!(
        kit.marker("t-1").unwrap(),
        marker_before,
        "the marker is not rewritten"
    );
    assert_eq!(kit.items().len(), items_before);
    // Permanent failures have no marker: they are dead-lettered again.
    assert_eq!(again.dead_letters.len(), 2);
    assert_eq!(kit.sqs().sent_messages().len(), 4);
}

#[tokio::test]
async fn a_changed_payload_under_a_committed_job_id_is_a_conflict_sent_to_the_dlq() {
    let kit = TestKit::new(ledger(), TABLE);
    kit.run_json(FIXTURE).await.unwrap();
    let changed = event(&[(
        "conflict-1",
        r#"{"transfer_id":"t-1","account":"alice","amount":99}"#,
        Some("t-1"),
        1,
    )]);
    let run = kit.run_json(&changed).await.unwrap();
    assert!(run.failed_ids().is_empty());
    assert_eq!(run.dead_letters.len(), 1);
    let error = run.dead_letters[0].attribute("idemq-error").unwrap();
    assert!(error.contains("hash"), "{error}");
    assert_eq!(
        balance(&kit, "alice").as_deref(),
        Some("25"),
        "never applied"
    );
}

#[tokio::test]
async fn a_transient_failure_on_its_last_receive_is_left_to_the_queues_redrive() {
    let kit = TestKit::new(ledger(), TABLE);
    let last = event(&[(
        "last-try",
        r#"{"transfer_id":"t-9","account":"outage","amount":1}"#,
        Some("t-9"),
        6,
    )]);
    let run = kit.run_json(&last).await.unwrap();
    // Reported failed: SQS's redrive (maxReceiveCount 6) moves it with
    // the MessageId it has; idemq sends nothing itself.
    assert_eq!(run.failed_ids(), vec!["last-try"]);
    assert!(run.dead_letters.is_empty());
    assert_eq!(
        kit.failure_record("t-9").unwrap().get("attempt"),
        Some(&AttributeValue::N("6".into()))
    );
}

#[tokio::test]
async fn an_effects_own_failed_condition_is_rejected_and_dead_lettered() {
    // A withdrawal that must not overdraw: SET with minus, guarded by a
    // comparison, through the real transaction and its cancellation.
    let withdraw = handler_fn(|t: Transfer, _meta: JobMeta| async move {
        let amount = AttributeValue::N(t.amount.to_string());
        Ok::<_, JobError>(
            Effect::new().with(
                Write::update(
                    TABLE,
                    Key::string("pk", format!("account#{}", t.account)),
                    "SET balance = balance - :a",
                )
                .condition("attribute_exists(pk) AND balance >= :a")
                .value(":a", amount),
            ),
        )
    });
    let kit = TestKit::new(withdraw, TABLE);
    kit.dynamodb()
        .put_item(
            TABLE,
            Item::from([
                ("pk".to_string(), AttributeValue::S("account#alice".into())),
                ("balance".to_string(), AttributeValue::N("10".into())),
            ]),
        )
        .unwrap();
    let run = kit
        .run_json(&event(&[
            (
                "w-1",
                r#"{"transfer_id":"w-1","account":"alice","amount":4}"#,
                Some("w-1"),
                1,
            ),
            (
                "w-2",
                r#"{"transfer_id":"w-2","account":"alice","amount":40}"#,
                Some("w-2"),
                1,
            ),
        ]))
        .await
        .unwrap();
    assert!(run.failed_ids().is_empty());
    assert_eq!(balance(&kit, "alice").as_deref(), Some("6"));
    assert!(kit.marker("w-1").is_some());
    assert!(
        kit.marker("w-2").is_none(),
        "a cancelled transaction writes no marker"
    );
    assert_eq!(run.dead_letters.len(), 1);
    assert_eq!(run.dead_letters[0].attribute("idemq-job-id"), Some("w-2"));
    assert_eq!(
        s(&kit.failure_record("w-2").unwrap(), "kind").as_deref(),
        Some("rejected")
    );
}

#[tokio::test]
async fn an_expression_the_store_does_not_model_fails_the_job_and_says_so() {
    let sized = handler_fn(|_: serde_json::Value, meta: JobMeta| async move {
        Ok::<_, JobError>(
            Effect::new().with(
                Write::update(TABLE, Key::string("pk", meta.job_id.as_str()), "SET n = :n")
                    .condition("size(n) < :n")
                    .value(":n", AttributeValue::N("3".into())),
            ),
        )
    });
    let kit = TestKit::new(sized, TABLE);
    let run = kit
        .run_json(&event(&[("m-1", "{}", Some("j-1"), 1)]))
        .await
        .unwrap();
    // Not committed, and not silently: the record names the function.
    assert!(kit.marker("j-1").is_none());
    let record = kit.failure_record("j-1").unwrap();
    let error = s(&record, "error").unwrap();
    assert!(
        error.contains("size") && error.contains("not modelled"),
        "{error}"
    );
    assert_eq!(run.failed_ids().len() + run.dead_letters.len(), 1);
}

#[tokio::test]
async fn a_record_without_a_message_id_fails_the_whole_invocation() {
    let kit = TestKit::new(ledger(), TABLE);
    let bad = FIXTURE.replacen(
        &format!("\"messageId\": \"{T1}\""),
        "\"messageId\": \"\"",
        1,
    );
    assert_ne!(bad, FIXTURE);
    assert!(kit.run_json(&bad).await.is_err());
    assert!(kit.run_json("{\"Records\": 7}").await.is_err());
    assert!(kit.items().is_empty());
}

#[tokio::test]
async fn a_handler_called_directly_with_job_meta_returns_writes_to_read_back() {
    let transfer: Transfer =
        serde_json::from_str(r#"{"transfer_id":"t-1","account":"alice","amount":25}"#).unwrap();
    let effect = ledger().handle(transfer, job_meta("t-1")).await.unwrap();
    assert!(effect.uses_marker());
    assert_eq!(writes(&effect).len(), 2);

    let credit = write_to(&effect, TABLE, &Key::string("pk", "account#alice")).unwrap();
    assert!(matches!(credit.kind(), WriteKind::Update { .. }));
    assert_eq!(credit.update_expression(), Some("ADD balance :amount"));
    assert_eq!(
        credit.value(":amount"),
        Some(&AttributeValue::N("25".into()))
    );
    assert_eq!(credit.condition(), None);
    assert!(credit.names().is_empty());

    let entry = write_to(&effect, TABLE, &Key::string("pk", "entry#t-1")).unwrap();
    let item = entry.item().unwrap();
    assert_eq!(s(&item, "pk").as_deref(), Some("entry#t-1"));
    assert_eq!(s(&item, "account").as_deref(), Some("alice"));
    assert_eq!(entry.attributes().unwrap().len(), 2);

    let transfer: Transfer =
        serde_json::from_str(r#"{"transfer_id":"t-2","account":"outage","amount":1}"#).unwrap();
    let mut meta = job_meta("t-2");
    meta.attempt = 3;
    let err = ledger().handle(transfer, meta).await.unwrap_err();
    assert!(!err.is_permanent(), "an outage is retried");
}

/// README.md's "Unit-testing a handler" example, as it is there (only the
/// fixture's path differs): the README's copy sits under `#[cfg(test)]`,
/// which doc tests do not compile, so this one keeps it honest.
#[tokio::test]
async fn each_transfer_is_credited_once() {
    let outage = HashSet::from(["outage".to_string()]);
    let ledger = Ledger {
        table: "ledger".into(),
        fail_accounts: outage,
    };
    let kit = TestKit::new(ledger, "ledger");
    // t-1 twice (a redelivery), t-2, t-3 (amount -5), t-4 (account
    // "outage"), t-5 (a truncated body), one without idemq-job-id.
    let event = include_str!("fixtures/sqs_ledger.json");
    let run = kit.run_json(event).await.unwrap();

    // Only the outage is retried: reported failed, its visibility set
    // to the backoff.
    assert_eq!(run.failed_ids(), ["6a1f0c2e-0005-4b7e-9d41-1c0a5e7d2f05"]);
    assert_eq!(run.visibility_changes.len(), 1);
    // The negative amount and the truncated body are dead-lettered now.
    let mut dead: Vec<&str> = run
        .dead_letters
        .iter()
        .filter_map(|m| m.attribute("idemq-job-id"))
        .collect();
    dead.sort();
    assert_eq!(dead, ["t-3", "t-5"]);
    // Alice is credited once, and the whole batch again changes nothing.
    let alice = Key::string("pk", "account#alice");
    let balance = |kit: &TestKit<Ledger>| kit.item(&alice).unwrap()["balance"].clone();
    assert_eq!(balance(&kit), AttributeValue::N("25".into()));
    kit.run_json(event).await.unwrap();
    assert_eq!(balance(&kit), AttributeValue::N("25".into()));
}

#[tokio::test]
async fn a_fifo_group_stops_at_its_first_failure_and_dead_letters_keep_their_group() {
    let kit = TestKit::new(ledger(), TABLE);
    let record = |id: &str, group: &str, transfer: &str, account: &str, amount: i64| {
        serde_json::json!({
            "messageId": id,
            "receiptHandle": format!("rh-{id}"),
            "body": serde_json::json!({"transfer_id": transfer, "account": account, "amount": amount}).to_string(),
            "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "1796212800000",
                           "MessageGroupId": group, "SequenceNumber": "1", "MessageDeduplicationId": id},
            "messageAttributes": {"idemq-job-id": {"stringValue": transfer, "dataType": "String"}},
            "eventSource": "aws:sqs",
            "eventSourceARN": "arn:aws:sqs:us-east-1:000000000000:ledger-jobs.fifo",
            "awsRegion": "us-east-1"
        })
    };
    let event = serde_json::json!({"Records": [
        record("a1", "a", "f-1", "alice", 1),
        record("a2", "a", "f-2", "outage", 1),
        record("a3", "a", "f-3", "alice", 2),
        record("b1", "b", "f-4", "bob", -1),
        record("b2", "b", "f-5", "bob", 5),
    ]});
    let run = kit.run_json(&event.to_string()).await.unwrap();
    // Group a stops at f-2: f-3 is handed back untried (visibility 0).
    assert_eq!(run.failed_ids(), vec!["a2", "a3"]);
    let changes: Vec<(&str, Duration)> = run
        .visibility_changes
        .iter()
        .map(|c| (c.message_id.as_str(), c.timeout))
        .collect();
    assert_eq!(changes.len(), 2);
    assert!(changes.contains(&("a3", Duration::ZERO)), "{changes:?}");
    assert!(kit.marker("f-3").is_none());
    assert_eq!(balance(&kit, "alice").as_deref(), Some("1"));
    // Group b: the permanent failure is dead-lettered (it leaves the
    // queue), so the group goes on; the DLQ copy keeps its group.
    assert_eq!(run.dead_letters.len(), 1);
    assert_eq!(run.dead_letters[0].group_id.as_deref(), Some("b"));
    assert!(
        run.dead_letters[0]
            .queue_url
            .ends_with("/ledger-jobs-dlq.fifo")
    );
    assert_eq!(balance(&kit, "bob").as_deref(), Some("5"));
}

/// What a failure costs with and without its backtrace: run it twice,
/// `IDEMQ_BACKTRACE=on` and `=off` (read once per process), and compare
/// the printed microseconds per failed job (batches of 10 ledger jobs that
/// all fail, a transient error each, through the whole batch path: the
/// capture, its rendering and the failure record's write in memory).
/// `cargo test --features testing --test testing_kit -- --ignored
/// --nocapture failure_cost`
#[tokio::test]
#[ignore = "a measurement: prints numbers, asserts none"]
async fn failure_cost() {
    let kit = TestKit::new(ledger(), TABLE);
    let batch = |n: usize| {
        let bodies: Vec<(String, String)> = (0..10)
            .map(|i| {
                let id = format!("t-{n}-{i}");
                let body = format!(r#"{{"transfer_id":"{id}","account":"outage","amount":1}}"#);
                (id, body)
            })
            .collect();
        let records: Vec<(&str, &str, Option<&str>, u32)> = bodies
            .iter()
            .map(|(id, body)| (id.as_str(), body.as_str(), Some(id.as_str()), 1))
            .collect();
        event(&records)
    };
    // The first failure of a process loads the binary's debug info.
    let first = std::time::Instant::now();
    kit.run_json(&batch(0)).await.unwrap();
    let first = first.elapsed();
    let batches = 200;
    let events: Vec<String> = (1..=batches).map(batch).collect();
    let started = std::time::Instant::now();
    for e in &events {
        kit.run_json(e).await.unwrap();
    }
    let each = started.elapsed() / (batches as u32 * 10);
    println!(
        "IDEMQ_BACKTRACE={}: first batch {:.1} ms; then {:.1} µs per failed job",
        std::env::var("IDEMQ_BACKTRACE").unwrap_or_else(|_| "on (unset)".into()),
        first.as_secs_f64() * 1e3,
        each.as_secs_f64() * 1e6
    );
}
