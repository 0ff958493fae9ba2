//! idemq's own dead letters at the edges SQS enforces, on the local stack:
//! characters SQS refuses, a DLQ smaller than the message plus its
//! context, ten-attribute messages that die and are redriven again and
//! again, jobs identified only by their MessageId, error chains longer
//! than a DynamoDB item.
//!
//! LocalStack 2026.3 enforces what these tests need (measured): a String
//! attribute value with a character outside SQS's set, or an empty one, is
//! refused with `InvalidParameterValue`, and so is a message whose body and
//! attributes exceed the queue's `MaximumMessageSize`. (It does not refuse
//! an 11th attribute: that budget is checked by pure and SDK-level tests.)

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use aws_sdk_sqs::types::{MessageAttributeValue, QueueAttributeName};
use common::{drain, idemq, init_queue, sdk, string_attribute};
use idemq::backoff::Backoff;
use idemq::config::BatchConfig;
use idemq::config::TableLayout;
use idemq::dead_letter::{ATTR_ATTEMPTS, ATTR_ERROR, ATTR_FAILED_AT, ATTR_SOURCE_QUEUE};
use idemq::failure::MAX_RECORD_BACKTRACE;
use idemq::failure::{Failure, FailureKind};
use idemq::failure::{FailureRecord, MAX_RECORD_CHAIN, MAX_RECORD_ERROR};
use idemq::init::InitReport;
use idemq::producer::{Job, Producer};
use idemq::store::dynamodb::Effect;
use idemq::worker::{WorkerArgs, run_with};
use idemq::{JobError, JobMeta, handler_fn};

type Calls = Arc<Mutex<HashMap<String, u32>>>;

/// Runs a worker whose handler fails every job permanently with `error`,
/// counting the runs of each job id, until the queue is idle.
async fn die_permanently(res: &InitReport, error: &'static str, calls: &Calls) {
    let calls = calls.clone();
    let handler = handler_fn(move |_job: serde_json::Value, meta: JobMeta| {
        *calls
            .lock()
            .unwrap()
            .entry(meta.job_id.to_string())
            .or_default() += 1;
        async move { Err::<Effect, _>(JobError::permanent(error)) }
    });
    let mut args = WorkerArgs::new(res.queue_url.clone());
    args.table = Some(res.table_name.clone());
    args.concurrency = Some(4);
    args.exit_when_idle = Some(3);
    let batch = BatchConfig::default().with_backoff(
        Backoff::new()
            .with_base(Duration::from_millis(500))
            .with_cap(Duration::from_secs(1)),
    );
    run_with(handler, args, batch).await.expect("worker");
}

/// Records of the consumer of `queue` (its namespace), as `idemq dlq`
/// reads them.
fn dead_letters(
    sdk: &aws_config::SdkConfig,
    table: &str,
    queue: &str,
) -> idemq::dlq::records::Records {
    idemq::dlq::records::Records::new(std::sync::Arc::new(
        idemq::store::dynamodb::FailureTable::new(
            aws_sdk_dynamodb::Client::new(sdk),
            TableLayout::new(table),
            Duration::from_secs(3600),
        ),
    ))
    .with_source_queues(&[queue])
}

/// Every message of a queue with its attributes, received once and made
/// visible again (nothing consumed).
async fn peek(
    sqs: &aws_sdk_sqs::Client,
    url: &str,
    expected: usize,
) -> HashMap<String, HashMap<String, MessageAttributeValue>> {
    let mut seen = HashMap::new();
    let mut handles = Vec::new();
    for _ in 0..20 {
        if seen.len() >= expected {
            break;
        }
        let out = sqs
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .visibility_timeout(30)
            .wait_time_seconds(1)
            .message_attribute_names("All")
            .send()
            .await
            .unwrap();
        for m in out.messages() {
            let attrs = m.message_attributes().cloned().unwrap_or_default();
            let id = attrs
                .get("idemq-job-id")
                .and_then(|v| v.string_value())
                .unwrap_or("(none)")
                .to_owned();
            seen.insert(id, attrs);
            handles.push(m.receipt_handle().unwrap().to_owned());
        }
    }
    for h in handles {
        sqs.change_message_visibility()
            .queue_url(url)
            .receipt_handle(h)
            .visibility_timeout(0)
            .send()
            .await
            .unwrap();
    }
    assert_eq!(seen.len(), expected, "{:?}", seen.keys());
    seen
}

fn value<'a>(attrs: &'a HashMap<String, MessageAttributeValue>, name: &str) -> &'a str {
    attrs
        .get(name)
        .and_then(|v| v.string_value())
        .unwrap_or_default()
}

/// A permanent failure whose dead letter SQS would refuse as idemq used to
/// build it: an error text with a control character (refused in an
/// attribute value), and a body that fits the DLQ's MaximumMessageSize only
/// without the context. Each is dead-lettered on its first receive (its
/// handler runs once, not once per receive until SQS's redrive), the first
/// with its context made SQS-safe, the second bare; a job identified by its
/// MessageId carries that id as `idemq-job-id` in the DLQ.
/// <https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SendMessage.html>
/// (allowed characters; attribute values have the body's restrictions:
/// <https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-message-metadata.html>,
/// which also counts attributes in the message size).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_context_does_not_loop_and_message_id_jobs_keep_their_id() {
    let sdk = sdk().await;
    let res = init_queue(&sdk, "dledge", false, 3, 10).await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    sqs.set_queue_attributes()
        .queue_url(&res.dlq_url)
        .attributes(QueueAttributeName::MaximumMessageSize, "1024")
        .send()
        .await
        .unwrap();

    // A MessageId job: no idemq-job-id, no pointer.
    let sent = sqs
        .send_message()
        .queue_url(&res.queue_url)
        .message_body(r#"{"n":1}"#)
        .send()
        .await
        .unwrap();
    let message_id = sent.message_id().unwrap().to_owned();
    // Fits the 1 KiB DLQ with its job id, not with its context.
    let big = format!(r#"{{"pad":"{}"}}"#, "x".repeat(900));
    sqs.send_message()
        .queue_url(&res.queue_url)
        .message_body(&big)
        .message_attributes("idemq-job-id", string_attribute("big-1"))
        .send()
        .await
        .unwrap();

    let calls: Calls = Arc::default();
    die_permanently(&res, "amount \u{1}\u{FFFF} is not positive", &calls).await;

    let calls = calls.lock().unwrap().clone();
    assert_eq!(
        calls,
        HashMap::from([(message_id.clone(), 1), ("big-1".to_string(), 1)]),
        "each handler ran once: the dead letter was accepted at the first try"
    );
    let dead = peek(&sqs, &res.dlq_url, 2).await;

    let small = &dead[&message_id];
    let error = value(small, ATTR_ERROR);
    assert!(
        error.starts_with("amount \u{FFFD}\u{FFFD} is not positive"),
        "{error:?}"
    );
    assert_eq!(value(small, ATTR_ATTEMPTS), "1");
    assert!(!value(small, ATTR_FAILED_AT).is_empty());
    assert_eq!(
        value(small, ATTR_SOURCE_QUEUE),
        res.queue_url.rsplit('/').next().unwrap()
    );

    let mut bare: Vec<&String> = dead["big-1"].keys().collect();
    bare.sort();
    assert_eq!(
        bare,
        vec!["idemq-first-enqueued", "idemq-job-id"],
        "context left out to fit 1 KiB; the job's first enqueue kept"
    );
    // The failure record keeps what the attributes could not carry.
    let rec = dead_letters(&sdk, &res.table_name, &res.queue_url)
        .read(Some("big-1"), "")
        .await
        .unwrap()
        .expect("failure record");
    assert_eq!(rec.failure.error, "amount \u{1}\u{FFFF} is not positive");
    assert!(
        drain(&sqs, &res.queue_url).await.is_empty(),
        "source queue empty"
    );
}

/// A job identified only by its MessageId (no `idemq-job-id`, no body
/// pointer) that idemq dead-letters itself: the DLQ copy is a new message
/// with a new MessageId, so it carries `idemq-job-id` = the original
/// MessageId, and after a redrive the consumer sees the same job (one
/// failure record, the handler's `job_id` unchanged). A message whose id is
/// invalid (over 512 bytes) has no id to stamp: its copy keeps the
/// attribute its producer sent and its record stays keyed by its source
/// MessageId.
/// <https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-configure-dead-letter-queue-redrive.html>
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_id_job_keeps_its_identity_through_idemqs_dead_letter() {
    let sdk = sdk().await;
    let res = init_queue(&sdk, "dlmid", false, 3, 10).await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let message_id = sqs
        .send_message()
        .queue_url(&res.queue_url)
        .message_body(r#"{"n":1}"#)
        .send()
        .await
        .unwrap()
        .message_id()
        .unwrap()
        .to_owned();
    let too_long = "i".repeat(600);
    let invalid_message_id = sqs
        .send_message()
        .queue_url(&res.queue_url)
        .message_body(r#"{"n":2}"#)
        .message_attributes("idemq-job-id", string_attribute(&too_long))
        .send()
        .await
        .unwrap()
        .message_id()
        .unwrap()
        .to_owned();
    let calls: Calls = Arc::default();
    die_permanently(&res, "schema error", &calls).await;
    let dead = peek(&sqs, &res.dlq_url, 2).await;
    assert_eq!(value(&dead[&message_id], "idemq-job-id"), message_id);
    assert!(!value(&dead[&too_long], ATTR_ERROR).is_empty());
    let dl = dead_letters(&sdk, &res.table_name, &res.queue_url);
    let rec = dl
        .read(None, &invalid_message_id)
        .await
        .unwrap()
        .expect("record of the invalid id, by its source MessageId");
    assert!(rec.failure.error.contains("512"), "{}", rec.failure.error);

    // Redriven (to the only source queue), it dies again as the same job.
    let out = idemq(&[
        "dlq",
        "redrive",
        "--dlq-url",
        &res.dlq_url,
        "--table",
        &res.table_name,
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("moved 1,"),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    die_permanently(&res, "schema error", &calls).await;
    assert_eq!(
        calls.lock().unwrap().get(&message_id),
        Some(&2),
        "the redriven copy is the same job: {:?}",
        calls.lock().unwrap()
    );
    let rec = dl
        .read(Some(&message_id), "")
        .await
        .unwrap()
        .expect("record");
    assert_eq!(rec.job_id.as_deref(), Some(message_id.as_str()));
}

fn with_attributes(id: &str, n: usize) -> Job {
    let mut job = Job::raw(id, r#"{"n":1}"#);
    for i in 0..n {
        job.attributes
            .insert(format!("p{i}"), string_attribute(&format!("v{i}")));
    }
    job
}

fn redrive(res: &InitReport) {
    let out = idemq(&[
        "dlq",
        "redrive",
        "--dlq-url",
        &res.dlq_url,
        "--table",
        &res.table_name,
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("moved 2, skipped 0, failed 0"), "{stdout}");
}

/// Messages with 9 and 7 producer attributes (the most a job can have is
/// 9, idemq-job-id being the 10th) die, are redriven, die again and are
/// redriven again: every redrive exits 0, the context of each death
/// replaces the one before, and context attributes only take the slots the
/// producer's attributes leave (error first), so no dead letter has more
/// than 10 attributes.
/// <https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-message-metadata.html>
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_attribute_dead_letters_die_and_are_redriven_twice() {
    let sdk = sdk().await;
    let res = init_queue(&sdk, "dlten", false, 3, 10).await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let producer = Producer::new(&sdk, &res.queue_url).await.unwrap();
    for (id, r) in producer
        .send_batch(vec![
            with_attributes("nine", 9),
            with_attributes("seven", 7),
        ])
        .await
    {
        r.unwrap_or_else(|e| panic!("{id}: {e}"));
    }
    let dl = dead_letters(&sdk, &res.table_name, &res.queue_url);
    let calls: Calls = Arc::default();
    let mut last_failed_at = SystemTime::UNIX_EPOCH;
    let mut last_attribute = String::new();
    let mut first_enqueued = String::new();
    for death in 1..=2u32 {
        let before = SystemTime::now();
        die_permanently(&res, "schema error", &calls).await;
        let dead = peek(&sqs, &res.dlq_url, 2).await;

        let nine = &dead["nine"];
        assert_eq!(nine.len(), 10, "{:?}", nine.keys());
        assert!(
            nine.keys()
                .all(|k| k.starts_with('p') || k == "idemq-job-id")
        );
        let seven = &dead["seven"];
        let mut context: Vec<&str> = seven
            .keys()
            .map(String::as_str)
            .filter(|k| k.starts_with("idemq-") && *k != "idemq-job-id")
            .collect();
        context.sort();
        assert_eq!(
            context,
            vec![ATTR_ERROR, "idemq-first-enqueued"],
            "the job's first enqueue first, then the error"
        );
        assert_eq!(seven.len(), 10);
        // The same on every death: the first send's, carried through the
        // redrive, not the redriven copy's SentTimestamp.
        let first = value(seven, "idemq-first-enqueued").to_owned();
        if death == 1 {
            first_enqueued = first;
        } else {
            assert_eq!(first, first_enqueued, "death {death}");
        }
        assert_eq!(value(seven, ATTR_ERROR), "schema error");

        for id in ["nine", "seven"] {
            let rec = dl.read(Some(id), "").await.unwrap().expect("record");
            assert!(rec.failed_at >= before, "{id}: death {death}'s record");
            assert!(rec.failed_at > last_failed_at);
            assert_eq!(rec.failure.error, "schema error");
            // The test's own peek at the redriven copy counted as a receive.
            assert_eq!(rec.attempt, death);
        }
        let seven_at = dl.read(Some("seven"), "").await.unwrap().unwrap().failed_at;
        last_failed_at = seven_at;
        // No slot left for the attempts: the record (above) has this
        // death's.
        assert_eq!(value(seven, ATTR_ATTEMPTS), "");
        last_attribute = value(seven, ATTR_ERROR).to_owned();

        redrive(&res);
        // The redriven copies carry the producer's attributes, the job id
        // and (where a slot is left) its first enqueue, nothing stale.
        let back = peek(&sqs, &res.queue_url, 2).await;
        assert_eq!(back["nine"].len(), 10);
        assert_eq!(back["seven"].len(), 9, "{:?}", back["seven"].keys());
        assert_eq!(
            value(&back["seven"], "idemq-first-enqueued"),
            first_enqueued
        );
        assert!(!back["seven"].contains_key(ATTR_ERROR));
    }
    assert_eq!(last_attribute, "schema error");
    let calls = calls.lock().unwrap().clone();
    assert_eq!(
        calls,
        HashMap::from([("nine".to_string(), 2), ("seven".to_string(), 2)]),
        "one run per death"
    );
    assert_eq!(drain(&sqs, &res.queue_url).await.len(), 2);
}

/// An error chain far over DynamoDB's 400 KB item limit
/// (<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Constraints.html#limits-items>)
/// is stored capped, with the root cause and a marker, instead of making
/// the PutItem fail and the context disappear; so is a backtrace.
#[tokio::test]
async fn a_failure_record_with_a_huge_error_chain_is_stored_capped() {
    let sdk = sdk().await;
    let layout = common::fresh_table(&sdk).await;
    let dl = dead_letters(&sdk, &layout.table_name, "q");
    let mut chain: Vec<String> = (0..60)
        .map(|i| format!("layer {i}: {}", "z".repeat(10_000)))
        .collect();
    chain.push("root cause: disk full".into());
    let rec = FailureRecord {
        job_id: Some("huge-1".into()),
        message_id: "m-1".into(),
        attempt: 2,
        failure: Failure {
            kind: FailureKind::Transient,
            error: "e".repeat(500_000),
            chain,
            // Made by hand past its cap: the store caps it again.
            backtrace: Some("app::deep\n    at ./src/deep.rs:1:1\n".repeat(20_000)),
        },
        failed_at: SystemTime::now(),
        source_queue: "q".into(),
        payload_hash: "h".into(),
        deploy: String::new(),
        idemq_version: String::new(),
    };
    dl.record(&rec).await.expect("the capped record fits");
    let back = dl.read(Some("huge-1"), "").await.unwrap().expect("stored");
    assert!(back.failure.error.len() <= MAX_RECORD_ERROR + 32);
    assert!(back.failure.error.ends_with("[cut: 500000 bytes]"));
    let total: usize = back.failure.chain.iter().map(|e| e.len() + 1).sum();
    assert!(total <= MAX_RECORD_CHAIN, "{total}");
    assert_eq!(back.failure.chain.last().unwrap(), "root cause: disk full");
    let bt = back.failure.backtrace.as_deref().expect("kept");
    assert!(bt.len() <= MAX_RECORD_BACKTRACE + 32, "{}", bt.len());
    assert!(bt.starts_with("app::deep\n    at ./src/deep.rs:1:1\n"));
    assert!(back.failure.chain[0].starts_with("layer 0: "));
    assert!(
        back.failure
            .chain
            .iter()
            .any(|e| e.contains("more causes left out")),
        "{:?}",
        back.failure
            .chain
            .iter()
            .map(|e| e.len())
            .collect::<Vec<_>>()
    );
}
