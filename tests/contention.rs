//! Optimistic concurrency at the SDK level, through the
//! test kit (`idemq::testing`): the real Lambda batch service against the
//! in-memory DynamoDB and SQS. A "rival" commits between the handler's read
//! and idemq's commit, so the commit loses the race exactly when the test
//! says; `examples/optimistic_concurrency.rs` is the handler.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};

use aws_sdk_dynamodb::types::AttributeValue;
use idemq::config::BatchConfig;
use idemq::store::dynamodb::{Effect, Item, Key, Write};
use idemq::testing::{KitConfig, TestKit};
use idemq::{Handler, JobError, JobMeta, handler_fn};

#[path = "../examples/optimistic_concurrency.rs"]
mod optimistic_concurrency;

use optimistic_concurrency::{Adjust, Inventory};

const TABLE: &str = "shop";

/// The example's handler, plus a rival job that commits an adjustment of
/// +1 to the same stock item after the handler has read it, `rivals`
/// times; `runs` counts the handler's runs.
#[derive(Clone, Default)]
struct Racing {
    inventory: Arc<OnceLock<Inventory>>,
    rivals: Arc<AtomicU32>,
    runs: Arc<AtomicU32>,
}

impl Handler for Racing {
    type Job = Adjust;
    type Effect = idemq::store::dynamodb::Effect;

    async fn handle(&self, job: Adjust, meta: JobMeta) -> Result<Effect, JobError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        let inventory = self.inventory.get().expect("inventory set after the kit");
        let sku = job.sku.clone();
        let effect = inventory.handle(job, meta).await?;
        let rival = self
            .rivals
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if rival {
            inventory
                .dynamodb
                .update_item()
                .table_name(TABLE)
                .key("pk", AttributeValue::S(format!("stock#{sku}")))
                .update_expression("ADD stock :one, version :one")
                .expression_attribute_values(":one", AttributeValue::N("1".into()))
                .send()
                .await
                .expect("the rival's write");
        }
        Ok(effect)
    }
}

fn racing_kit(config: KitConfig) -> (TestKit<Racing>, Racing) {
    let racing = Racing::default();
    let kit = TestKit::with_config(racing.clone(), config);
    let inventory = Inventory {
        table: TABLE.into(),
        dynamodb: kit.dynamodb_client().clone(),
    };
    assert!(racing.inventory.set(inventory).is_ok());
    (kit, racing)
}

/// An event of one record per `(message id, body, job id, receive count)`.
fn event(records: &[(&str, String, &str, u32)]) -> String {
    let records: Vec<serde_json::Value> = records
        .iter()
        .map(|(message_id, body, job_id, receives)| {
            serde_json::json!({
                "messageId": message_id,
                "receiptHandle": format!("rh-{message_id}-{receives}"),
                "body": body,
                "attributes": {"ApproximateReceiveCount": receives.to_string(), "SentTimestamp": "1796212800000"},
                "messageAttributes": {"idemq-job-id": {"stringValue": job_id, "dataType": "String"}},
                "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-1:000000000000:shop-jobs",
                "awsRegion": "us-east-1"
            })
        })
        .collect();
    serde_json::json!({ "Records": records }).to_string()
}

fn adjust(order: &str, delta: i64) -> String {
    serde_json::json!({"order_id": order, "sku": "widget", "delta": delta}).to_string()
}

fn number(item: &Item, name: &str) -> i64 {
    item[name].as_n().unwrap().parse().unwrap()
}

/// `(stock, version)` of the widget.
fn stock<H: idemq::Handler>(kit: &TestKit<H>) -> (i64, i64) {
    let item = kit.item(&Key::string("pk", "stock#widget")).unwrap();
    (number(&item, "stock"), number(&item, "version"))
}

/// Seeds 10 widgets (version 1) with a first order.
async fn seed(kit: &TestKit<Racing>) {
    let run = kit
        .run_json(&event(&[("m-0", adjust("o-0", 10), "o-0", 1)]))
        .await
        .unwrap();
    assert!(run.failed_ids().is_empty() && run.dead_letters.is_empty());
    assert_eq!(stock(kit), (10, 1));
}

#[tokio::test]
async fn a_lost_race_runs_the_job_again_in_the_same_invocation_and_commits() {
    let (kit, racing) = racing_kit(KitConfig::new(TABLE));
    seed(&kit).await;
    racing.runs.store(0, Ordering::SeqCst);
    racing.rivals.store(2, Ordering::SeqCst);

    let run = kit
        .run_json(&event(&[("m-1", adjust("o-1", -3), "o-1", 1)]))
        .await
        .unwrap();
    // Lost twice (the rival moved the version after each read), won on
    // the third run: acknowledged, never dead-lettered, never handed back.
    assert_eq!(racing.runs.load(Ordering::SeqCst), 3);
    assert!(run.failed_ids().is_empty(), "{:?}", run.failed_ids());
    assert!(run.dead_letters.is_empty());
    assert!(run.visibility_changes.is_empty());
    // 10 + 2 (rivals) - 3, each commit one version.
    assert_eq!(stock(&kit), (9, 4));
    assert!(kit.item(&Key::string("pk", "order#o-1")).is_some());
    assert!(
        kit.failure_record("o-1").is_none(),
        "a won race is no failure"
    );
}

#[tokio::test]
async fn after_the_bound_a_lost_race_backs_off_like_a_transient_failure() {
    let mut config = KitConfig::new(TABLE);
    config.batch = BatchConfig::default().with_contention_retries(2);
    let (kit, racing) = racing_kit(config);
    seed(&kit).await;
    racing.runs.store(0, Ordering::SeqCst);
    racing.rivals.store(100, Ordering::SeqCst);

    let run = kit
        .run_json(&event(&[("m-1", adjust("o-1", -3), "o-1", 1)]))
        .await
        .unwrap();
    // One run and two re-runs, all lost: handed back to SQS with backoff,
    // not dead-lettered, nothing of the job committed (no marker).
    assert_eq!(racing.runs.load(Ordering::SeqCst), 3);
    assert_eq!(run.failed_ids(), vec!["m-1"]);
    assert!(run.dead_letters.is_empty());
    assert_eq!(run.visibility_changes.len(), 1);
    let ceiling = BatchConfig::default().backoff.ceiling(1);
    assert!(run.visibility_changes[0].timeout <= ceiling + std::time::Duration::from_secs(1));
    assert!(kit.item(&Key::string("pk", "order#o-1")).is_none());
    assert_eq!(stock(&kit), (13, 4), "only the three rivals' writes");
    let record = kit.failure_record("o-1").expect("a failure record");
    assert_eq!(record["kind"].as_s().unwrap(), "contended");

    // The next delivery, uncontended, commits once.
    racing.rivals.store(0, Ordering::SeqCst);
    let run = kit
        .run_json(&event(&[("m-1", adjust("o-1", -3), "o-1", 2)]))
        .await
        .unwrap();
    assert!(run.failed_ids().is_empty() && run.dead_letters.is_empty());
    assert_eq!(stock(&kit), (10, 5));
}

#[tokio::test]
async fn duplicates_and_business_rejections_are_unchanged() {
    let (kit, racing) = racing_kit(KitConfig::new(TABLE));
    seed(&kit).await;
    // A redelivered order is a duplicate even if the stock moved since
    // (the marker's failed condition wins over the optimistic write's).
    racing.rivals.store(1, Ordering::SeqCst);
    let run = kit
        .run_json(&event(&[("m-0b", adjust("o-0", 10), "o-0", 1)]))
        .await
        .unwrap();
    assert!(run.failed_ids().is_empty() && run.dead_letters.is_empty());
    assert_eq!(stock(&kit), (11, 2), "the rival's +1 only");
    // More than is in stock: the handler's permanent error, DLQ now.
    let run = kit
        .run_json(&event(&[("m-2", adjust("o-2", -50), "o-2", 1)]))
        .await
        .unwrap();
    assert_eq!(run.dead_letters.len(), 1);
    assert!(run.failed_ids().is_empty());
}

/// The same failed condition, once on an unmarked write (the business
/// rule says no: DLQ at once) and once on a write marked optimistic
/// (a lost race: re-run, then backoff).
#[tokio::test]
async fn only_a_write_marked_optimistic_turns_a_failed_condition_into_a_retry() {
    for optimistic in [false, true] {
        let runs = Arc::new(AtomicU32::new(0));
        let counted = Arc::clone(&runs);
        let handler = handler_fn(move |_job: serde_json::Value, _meta: JobMeta| {
            counted.fetch_add(1, Ordering::SeqCst);
            async move {
                // The item is at version 5: this write's condition always fails.
                let write = Write::update(TABLE, Key::string("pk", "stock#widget"), "SET v = :n")
                    .condition("version = :read")
                    .value(":n", AttributeValue::N("1".into()))
                    .value(":read", AttributeValue::N("4".into()));
                let write = if optimistic {
                    write.optimistic()
                } else {
                    write
                };
                Ok::<_, JobError>(Effect::new().with(write))
            }
        });
        let mut config = KitConfig::new(TABLE);
        config.batch = BatchConfig::default().with_contention_retries(1);
        let kit = TestKit::with_config(handler, config);
        kit.dynamodb()
            .put_item(
                TABLE,
                Item::from([
                    ("pk".to_string(), AttributeValue::S("stock#widget".into())),
                    ("version".to_string(), AttributeValue::N("5".into())),
                ]),
            )
            .unwrap();
        let run = kit
            .run_json(&event(&[("m-1", "{}".into(), "j-1", 1)]))
            .await
            .unwrap();
        let kind = kit.failure_record("j-1").unwrap()["kind"]
            .as_s()
            .unwrap()
            .clone();
        if optimistic {
            assert_eq!(runs.load(Ordering::SeqCst), 2, "run, then one re-run");
            assert_eq!(run.failed_ids(), vec!["m-1"]);
            assert!(run.dead_letters.is_empty());
            assert_eq!(kind, "contended");
        } else {
            assert_eq!(runs.load(Ordering::SeqCst), 1, "never re-run");
            assert!(run.failed_ids().is_empty());
            assert_eq!(run.dead_letters.len(), 1);
            assert_eq!(kind, "rejected");
        }
    }
}
