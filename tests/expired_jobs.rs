//! A job older than its markers can remember is never run: the consumer
//! dead-letters it at once (kind `expired`), and every dead letter idemq
//! sends carries its job's first-enqueued time, so a later replay is
//! judged by the job's age, not the copy's. Through the Lambda batch
//! service against the in-memory DynamoDB and SQS (`idemq::testing`).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_sdk_dynamodb::types::AttributeValue;
use idemq::store::dynamodb::Effect;
use idemq::testing::TestKit;
use idemq::{Handler, JobError, JobMeta, handler_fn};

const TABLE: &str = "jobs-table";
const DAY: Duration = Duration::from_secs(86_400);

/// A handler that counts its runs: each stands for a side effect outside
/// DynamoDB (a card charge) that must not happen twice.
fn counting(
    runs: Arc<AtomicUsize>,
) -> impl Handler<Job = serde_json::Value, Effect = idemq::store::dynamodb::Effect> {
    handler_fn(move |_job: serde_json::Value, _meta: JobMeta| {
        let runs = Arc::clone(&runs);
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok::<_, JobError>(Effect::new())
        }
    })
}

fn ms(t: SystemTime) -> String {
    t.duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis()
        .to_string()
}

/// An event of `(message id, job id, idemq-first-enqueued, body)` records;
/// the kit sets each `SentTimestamp` to now (a copy just sent).
fn event(records: &[(&str, &str, Option<SystemTime>, &str)]) -> String {
    let records: Vec<serde_json::Value> = records
        .iter()
        .map(|(message_id, job_id, first, body)| {
            let mut attrs = serde_json::Map::new();
            attrs.insert(
                "idemq-job-id".into(),
                serde_json::json!({"stringValue": job_id, "dataType": "String"}),
            );
            if let Some(first) = first {
                attrs.insert(
                    "idemq-first-enqueued".into(),
                    serde_json::json!({"stringValue": ms(*first), "dataType": "String"}),
                );
            }
            serde_json::json!({
                "messageId": message_id,
                "receiptHandle": format!("rh-{message_id}"),
                "body": body,
                "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "1796212800000"},
                "messageAttributes": attrs,
                "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-1:000000000000:charges",
                "awsRegion": "us-east-1"
            })
        })
        .collect();
    serde_json::json!({ "Records": records }).to_string()
}

/// A copy (a redrive, an import, idemq's own dead letter redriven) whose
/// job was first enqueued 22 days ago, under the default 21-day marker
/// TTL: its marker may be gone, so it is not run, on this receive or any
/// other, and goes to the DLQ with the reason and its first-enqueued time.
/// A copy of a 2-day-old job beside it runs.
#[tokio::test]
async fn a_job_older_than_its_markers_is_dead_lettered_and_never_run() {
    let runs = Arc::new(AtomicUsize::new(0));
    let kit = TestKit::new(counting(Arc::clone(&runs)), TABLE);
    let now = SystemTime::now();
    let old = now - 22 * DAY;
    let batch = event(&[
        ("copy-old", "charge-1", Some(old), r#"{"amount":5}"#),
        (
            "copy-new",
            "charge-2",
            Some(now - 2 * DAY),
            r#"{"amount":7}"#,
        ),
    ]);
    let run = kit.run_json(&batch).await.unwrap();
    assert!(run.failed_ids().is_empty(), "{:?}", run.failed_ids());
    assert_eq!(runs.load(Ordering::SeqCst), 1, "only the 2-day-old job ran");
    assert!(kit.marker("charge-2").is_some());
    assert!(kit.marker("charge-1").is_none(), "never committed");

    assert_eq!(run.dead_letters.len(), 1);
    let letter = &run.dead_letters[0];
    assert_eq!(letter.attribute("idemq-job-id"), Some("charge-1"));
    assert_eq!(
        letter.attribute("idemq-first-enqueued"),
        Some(ms(old).as_str()),
        "the letter keeps the job's age, not its own"
    );
    let error = letter.attribute("idemq-error").unwrap();
    for needle in [
        "first enqueued at",
        "IDEMQ_MARKER_TTL",
        "--allow-expired-markers",
    ] {
        assert!(error.contains(needle), "{needle}: {error}");
    }
    let record = kit.failure_record("charge-1").unwrap();
    assert_eq!(
        record.get("kind"),
        Some(&AttributeValue::S("expired".into()))
    );

    // Delivered again (the DLQ send lost, say): still not run.
    let again = event(&[("copy-old-2", "charge-1", Some(old), r#"{"amount":5}"#)]);
    let run = kit.run_json(&again).await.unwrap();
    assert_eq!(run.dead_letters.len(), 1);
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "the handler never ran for it"
    );
}

/// Every dead letter idemq sends itself carries `idemq-first-enqueued`:
/// the received copy's own, or, on a job's first copy, its
/// `SentTimestamp`. The letter's own `SentTimestamp` is the time of the
/// dead-lettering, so without it a redrive would take an old job for a
/// new one.
#[tokio::test]
async fn a_dead_letter_carries_its_job_s_first_enqueued_time() {
    let runs = Arc::new(AtomicUsize::new(0));
    let kit = TestKit::new(counting(runs), TABLE);
    let first = SystemTime::now() - 3 * DAY;
    // Undecodable bodies: dead-lettered at once.
    let batch = event(&[
        ("copy", "job-1", Some(first), "{not json"),
        ("original", "job-2", None, "{not json"),
    ]);
    let before = SystemTime::now();
    let run = kit.run_json(&batch).await.unwrap();
    assert_eq!(run.dead_letters.len(), 2);
    let of = |job: &str| {
        run.dead_letters
            .iter()
            .find(|l| l.attribute("idemq-job-id") == Some(job))
            .and_then(|l| l.attribute("idemq-first-enqueued"))
            .map(|v| UNIX_EPOCH + Duration::from_millis(v.parse().unwrap()))
    };
    assert_eq!(
        of("job-1"),
        Some(UNIX_EPOCH + Duration::from_millis(ms(first).parse().unwrap()))
    );
    // The kit stamped the original's SentTimestamp as it ran the batch.
    let sent = of("job-2").expect("the first copy's SentTimestamp");
    assert!(
        sent + Duration::from_secs(1) >= before && sent <= SystemTime::now(),
        "{sent:?}"
    );
}

/// A marker TTL shorter than the queues keep a job's copies is an error at
/// start-up, not a warning: a consumer running so would dead-letter, as
/// expired, jobs SQS still delivers in their first pass. The kit's queues
/// keep 4 days (source) and 14 days (DLQ); with a replay day that needs
/// 19 days of markers.
#[tokio::test]
async fn a_marker_ttl_shorter_than_the_retentions_refuses_to_start() {
    let runs = Arc::new(AtomicUsize::new(0));
    let mut config = idemq::testing::KitConfig::new(TABLE);
    config.idempotency.marker_ttl = 10 * DAY;
    let kit = TestKit::with_config(counting(Arc::clone(&runs)), config);
    let batch = event(&[("m", "job-1", None, "{}")]);
    let err = kit.run_json(&batch).await.unwrap_err().to_string();
    for needle in [
        "refusing to start",
        "IDEMQ_MARKER_TTL",
        "marker TTL 10days",
        "source retention 4days",
        "DLQ retention 14days",
        "at least 19days",
    ] {
        assert!(err.contains(needle), "{needle}: {err}");
    }
    assert_eq!(runs.load(Ordering::SeqCst), 0);

    let mut config = idemq::testing::KitConfig::new(TABLE);
    config.idempotency.marker_ttl = 19 * DAY;
    let kit = TestKit::with_config(counting(Arc::clone(&runs)), config);
    kit.run_json(&batch).await.expect("19 days is enough");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}
