//! The batch processor at the edges the local emulators cannot show: slow
//! SQS and DynamoDB near a Lambda deadline, and retries that would outlive
//! the queue's retention. SQS and DynamoDB are a fake HTTP connector in
//! this process (no network), which answers each operation after a delay
//! chosen per request and records what was asked and what was answered.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

use aws_sdk_sqs::types::{MessageAttributeValue, MessageSystemAttributeName};
use aws_smithy_runtime_api::client::http::{
    HttpConnector, HttpConnectorFuture, SharedHttpClient, SharedHttpConnector, http_client_fn,
};
use aws_smithy_runtime_api::client::orchestrator::{HttpRequest, HttpResponse};
use aws_smithy_runtime_api::http::StatusCode;
use aws_smithy_types::body::SdkBody;
use idemq::batch::Verdict;
use idemq::batch::{Budget, Message, Processor};
use idemq::config::BatchConfig;
use idemq::config::DEFAULT_MARKER_TTL;
use idemq::config::TableLayout;
use idemq::failure::FailureKind;
use idemq::job::JobIdResolver;
use idemq::queue::QueueInfo;
use idemq::store::dynamodb::{Committer, Effect};
use idemq::{JobError, JobMeta, handler_fn};
use serde_json::{Value, json};

const DAY: Duration = Duration::from_secs(24 * 3600);
const DLQ_URL: &str = "https://sqs.us-east-1.amazonaws.com/000000000000/edges-dlq";

/// One request the fake received.
#[derive(Debug, Clone)]
struct Call {
    /// The operation, from `X-Amz-Target` (`SendMessage`, `PutItem`, …).
    op: String,
    request: Value,
    /// Whether the fake answered it (false: the caller gave up first).
    answered: bool,
}

type Delay = dyn Fn(&str, &Value) -> Duration + Send + Sync;

/// SQS and DynamoDB in one fake connector: both speak AWS JSON 1.0, so an
/// operation is named by its `X-Amz-Target` header.
#[derive(Clone)]
struct Fake {
    calls: Arc<Mutex<Vec<Call>>>,
    delay: Arc<Delay>,
}

impl std::fmt::Debug for Fake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Fake")
    }
}

impl Fake {
    fn new(delay: impl Fn(&str, &Value) -> Duration + Send + Sync + 'static) -> Self {
        Self {
            calls: Arc::default(),
            delay: Arc::new(delay),
        }
    }

    fn http(&self) -> SharedHttpClient {
        let fake = self.clone();
        http_client_fn(move |_, _| SharedHttpConnector::new(fake.clone()))
    }

    fn sqs(&self) -> aws_sdk_sqs::Client {
        use aws_sdk_sqs::config::{
            BehaviorVersion, Credentials, Region, StalledStreamProtectionConfig, retry::RetryConfig,
        };
        let conf = aws_sdk_sqs::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .credentials_provider(Credentials::new("AKID", "secret", None, None, "test"))
            .stalled_stream_protection(StalledStreamProtectionConfig::disabled())
            .retry_config(RetryConfig::disabled())
            .http_client(self.http())
            .build();
        aws_sdk_sqs::Client::from_conf(conf)
    }

    fn ddb(&self) -> aws_sdk_dynamodb::Client {
        use aws_sdk_dynamodb::config::{
            BehaviorVersion, Credentials, Region, StalledStreamProtectionConfig, retry::RetryConfig,
        };
        let conf = aws_sdk_dynamodb::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .credentials_provider(Credentials::new("AKID", "secret", None, None, "test"))
            .stalled_stream_protection(StalledStreamProtectionConfig::disabled())
            .retry_config(RetryConfig::disabled())
            .http_client(self.http())
            .build();
        aws_sdk_dynamodb::Client::from_conf(conf)
    }

    fn calls(&self, op: &str) -> Vec<Call> {
        let calls = self.calls.lock().unwrap();
        calls.iter().filter(|c| c.op == op).cloned().collect()
    }
}

impl HttpConnector for Fake {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let target = request
            .headers()
            .get("x-amz-target")
            .unwrap_or_default()
            .to_owned();
        let op = target.rsplit('.').next().unwrap_or_default().to_owned();
        let body: Value = request
            .body()
            .bytes()
            .and_then(|b| serde_json::from_slice(b).ok())
            .unwrap_or(Value::Null);
        let delay = (self.delay)(&op, &body);
        let index = {
            let mut calls = self.calls.lock().unwrap();
            calls.push(Call {
                op: op.clone(),
                request: body,
                answered: false,
            });
            calls.len() - 1
        };
        let calls = Arc::clone(&self.calls);
        HttpConnectorFuture::new(async move {
            tokio::time::sleep(delay).await;
            calls.lock().unwrap()[index].answered = true;
            let answer = match op.as_str() {
                "SendMessage" => json!({"MessageId": format!("dlq-{index}")}),
                "ChangeMessageVisibilityBatch" => json!({"Successful": [], "Failed": []}),
                "GetQueueAttributes" => json!({"Attributes": {"MaximumMessageSize": "262144"}}),
                _ => json!({}), // PutItem, TransactWriteItems
            };
            let mut response = HttpResponse::new(
                StatusCode::try_from(200u16).unwrap(),
                SdkBody::from(answer.to_string()),
            );
            response
                .headers_mut()
                .insert("content-type", "application/x-amz-json-1.0");
            Ok(response)
        })
    }
}

fn queue_info(retention: Duration) -> QueueInfo {
    QueueInfo {
        url: "https://sqs.us-east-1.amazonaws.com/000000000000/edges".into(),
        name: "edges".into(),
        fifo: false,
        dlq_url: Some(DLQ_URL.into()),
        max_receive_count: Some(6),
        visibility_timeout: Duration::from_secs(30),
        retention,
    }
}

/// A message as SQS's ReceiveMessage returns it: job id attribute, receive
/// count 1, sent `age` ago.
fn message(n: usize, body: &Value, age: Duration) -> Message {
    message_received(n, body, age, 1)
}

/// [`message`] on its `receive_count`th receive.
fn message_received(n: usize, body: &Value, age: Duration, receive_count: u32) -> Message {
    let sent_ms = (SystemTime::now() - age)
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let sdk = aws_sdk_sqs::types::Message::builder()
        .message_id(format!("m{n:02}"))
        .receipt_handle(format!("rh-{n:02}"))
        .body(body.to_string())
        .message_attributes(
            "idemq-job-id",
            MessageAttributeValue::builder()
                .data_type("String")
                .string_value(format!("job-{n:02}"))
                .build()
                .unwrap(),
        )
        .attributes(
            MessageSystemAttributeName::ApproximateReceiveCount,
            receive_count.to_string(),
        )
        .attributes(
            MessageSystemAttributeName::SentTimestamp,
            sent_ms.to_string(),
        )
        .build();
    Message::from_sdk(&sdk, Instant::now()).expect("message")
}

/// The `n` of a probe body, from a DLQ send's request.
fn sent_n(call: &Call) -> usize {
    let body: Value =
        serde_json::from_str(call.request["MessageBody"].as_str().expect("MessageBody"))
            .expect("body JSON");
    body["n"].as_u64().expect("n") as usize
}

/// The `n` of the job a transaction commits (`job-NN` in its marker).
fn committed_n(call: &Call) -> usize {
    let text = call.request.to_string();
    let at = text.find("job-").expect("a job id in the transaction") + 4;
    text[at..at + 2].parse().expect("two digits")
}

fn processor(fake: &Fake, config: BatchConfig) -> Processor<impl idemq::Handler<Job = Value>> {
    let handler = handler_fn(|job: Value, _: JobMeta| async move {
        match job["kind"].as_str().unwrap_or_default() {
            "ok" => Ok(Effect::new()),
            "transient" => Err(JobError::transient("probe: downstream unavailable")),
            "retry-12h" => Err(JobError::retry_after(
                "probe: rate limited",
                Duration::from_secs(12 * 3600),
            )),
            "permanent-fast" | "permanent-slow" => {
                Err(JobError::permanent("probe: invalid amount"))
            }
            "sleep" => {
                tokio::time::sleep(Duration::from_secs(60)).await;
                Ok(Effect::new())
            }
            other => panic!("unknown kind {other}"),
        }
    });
    let layout = TableLayout::new("edges");
    Processor::new(
        handler,
        std::sync::Arc::new(idemq::store::dynamodb::DynamoDb::new(
            Committer::new(fake.ddb(), layout.clone(), DEFAULT_MARKER_TTL),
            idemq::store::dynamodb::FailureTable::new(fake.ddb(), layout, DEFAULT_MARKER_TTL),
        )),
        fake.sqs(),
        JobIdResolver::new(),
        config,
    )
}

/// Lambda fails the *whole* batch when the function outlives its timeout
/// ("If your function throws an exception, the entire batch is considered a
/// complete failure",
/// <https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-errorhandling.html>),
/// so the partial batch response must be back before the deadline whatever
/// SQS and DynamoDB do.
///
/// 100 messages, 3 s to the deadline, 2 s margin, 10 at once; DynamoDB
/// commits in 50 ms but writes failure records in 30 s; the DLQ takes 20 ms
/// for some sends and 30 s for others; visibility changes take 30 s; some
/// handlers sleep a minute. `process` must return before the deadline and
/// report exactly the messages not done with: not a committed job, not a
/// permanent failure whose DLQ send was answered (it would be dead-lettered
/// again), but every permanent failure whose send was not.
///
/// Time is tokio's paused clock: every delay above is virtual, so the run is
/// the same on an idle laptop and on a loaded CI machine, and takes
/// milliseconds.
#[tokio::test(start_paused = true)]
async fn a_slow_batch_of_100_answers_before_the_deadline_with_exactly_its_failures() {
    let slow = Duration::from_secs(30);
    let fake = Fake::new(move |op, req| match op {
        "TransactWriteItems" => Duration::from_millis(50),
        // The DLQ's size limit, read once before its first send.
        "GetQueueAttributes" => Duration::from_millis(20),
        "SendMessage" => {
            let body = req["MessageBody"].as_str().unwrap_or_default();
            if body.contains("permanent-fast") {
                Duration::from_millis(20)
            } else {
                slow
            }
        }
        _ => slow, // PutItem (failure records), ChangeMessageVisibilityBatch
    });
    let kinds = [
        "ok",
        "transient",
        "permanent-fast",
        "permanent-slow",
        "sleep",
    ];
    let messages: Vec<Message> = (0..100)
        .map(|n| {
            let body = json!({"n": n, "kind": kinds[n % kinds.len()]});
            message(n, &body, Duration::from_secs(60))
        })
        .collect();
    let config = BatchConfig::default()
        .with_concurrency(10)
        .with_deadline_margin(Duration::from_secs(2));
    let p = processor(&fake, config);
    let started = Instant::now();
    let deadline = started + Duration::from_secs(3);
    let budget = Budget::new(deadline, config.deadline_margin);

    // Bounded here too, so that a processor that overruns fails the test
    // instead of hanging it.
    let report = tokio::time::timeout(
        Duration::from_secs(6),
        p.process(&queue_info(4 * DAY), &messages, deadline),
    )
    .await
    .expect("process returned within 6 s");
    let returned = Instant::now();
    assert!(
        returned < deadline,
        "process returned {:?} after the deadline",
        returned - deadline
    );
    assert!(
        returned <= budget.respond_by + Duration::from_millis(200),
        "process returned {:?} after its budget",
        returned - budget.respond_by
    );

    // What SQS and DynamoDB saw decides what must be reported.
    let committed: BTreeSet<usize> = fake
        .calls("TransactWriteItems")
        .iter()
        .filter(|c| c.answered)
        .map(committed_n)
        .collect();
    let sends = fake.calls("SendMessage");
    let sent: Vec<usize> = sends.iter().map(sent_n).collect();
    let dead_lettered: BTreeSet<usize> = sends.iter().filter(|c| c.answered).map(sent_n).collect();
    let unanswered_sends: BTreeSet<usize> =
        sends.iter().filter(|c| !c.answered).map(sent_n).collect();
    let expected: Vec<String> = (0..100)
        .filter(|n| !committed.contains(n) && !dead_lettered.contains(n))
        .map(|n| format!("m{n:02}"))
        .collect();
    eprintln!(
        "returned {:?} before the deadline; committed {}, dead-lettered {}, DLQ sends cut {}, \
         reported failed {}",
        deadline - returned,
        committed.len(),
        dead_lettered.len(),
        unanswered_sends.len(),
        report.failed.len()
    );
    assert_eq!(report.failed, expected);

    // Nothing dead-lettered twice, and a send not answered is reported.
    assert_eq!(
        sent.iter().collect::<BTreeSet<_>>().len(),
        sent.len(),
        "a message sent to the DLQ twice: {sent:?}"
    );
    for n in &unanswered_sends {
        assert!(report.failed.contains(&format!("m{n:02}")), "m{n:02}");
    }
    // The case is not vacuous: each kind of outcome happened.
    assert!(!committed.is_empty(), "no job committed");
    assert!(!dead_lettered.is_empty(), "no DLQ send answered");
    assert!(!unanswered_sends.is_empty(), "no DLQ send cut short");
    let verdicts: HashMap<&str, &Verdict> = report
        .verdicts
        .iter()
        .map(|(id, v)| (id.as_str(), v))
        .collect();
    let timed_out = verdicts.values().any(
        |v| matches!(v, Verdict::Retry { failure, .. } if failure.kind == FailureKind::Timeout),
    );
    assert!(timed_out, "no job abandoned at the deadline");
    assert!(
        verdicts
            .values()
            .any(|v| matches!(v, Verdict::NotAttempted { .. })),
        "every job started"
    );
    // Failure records are optional: slow ones are dropped, not waited for.
    assert!(fake.calls("PutItem").iter().all(|c| !c.answered));
    // Visibility changes go out side by side: every call was made, though
    // none was answered, instead of the first one holding the rest.
    let visibility = fake.calls("ChangeMessageVisibilityBatch");
    assert_eq!(visibility.len(), report.failed.len().div_ceil(10));
    let handles: usize = visibility
        .iter()
        .map(|c| c.request["Entries"].as_array().map_or(0, Vec::len))
        .sum();
    assert_eq!(handles, report.failed.len());
}

/// SQS deletes a message when the queue's retention runs out, in flight or
/// not, and never dead-letters it then (DeleteMessage: "If you leave a
/// message in the queue for longer than the queue's configured retention
/// period, Amazon SQS automatically deletes the message",
/// <https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_DeleteMessage.html>).
/// A retry whose next attempt could come after that is dead-lettered now,
/// with an error that gives the numbers; a young one is retried.
///
/// Retention 4 days, visibility 30 s (margin 5 min 30 s): a message 4 days
/// less 3 min old whose backoff can reach 2 s, and one 3 days 13 h old whose
/// handler asks for 12 h, go to the DLQ; one 1 min old that asks for 12 h
/// is retried.
#[tokio::test]
async fn a_retry_that_would_outlive_retention_is_dead_lettered_now() {
    let fake = Fake::new(|_, _| Duration::from_millis(5));
    let messages = [
        message(
            0,
            &json!({"n": 0, "kind": "transient"}),
            4 * DAY - Duration::from_secs(180),
        ),
        message(
            1,
            &json!({"n": 1, "kind": "retry-12h"}),
            3 * DAY + Duration::from_secs(13 * 3600),
        ),
        message(
            2,
            &json!({"n": 2, "kind": "retry-12h"}),
            Duration::from_secs(60),
        ),
    ];
    let p = processor(&fake, BatchConfig::default());
    let report = p
        .process(
            &queue_info(4 * DAY),
            &messages,
            Instant::now() + Duration::from_secs(30),
        )
        .await;

    assert_eq!(report.failed, ["m02"], "only the young message is retried");
    assert_eq!(report.done, ["rh-00", "rh-01"]);
    assert_eq!(report.metrics.dead_lettered, 2);
    assert_eq!(report.metrics.retried, 1);

    let sends = fake.calls("SendMessage");
    assert_eq!(sends.len(), 2, "{sends:?}");
    for call in &sends {
        assert_eq!(call.request["QueueUrl"], DLQ_URL);
        let error = call.request["MessageAttributes"]["idemq-error"]["StringValue"]
            .as_str()
            .expect("idemq-error");
        let (age, delay, cause) = match sent_n(call) {
            0 => (
                "3days 23h 57m old (345420 s)",
                "2s (2 s)",
                "downstream unavailable",
            ),
            // 12 h less SQS's 12-hour in-flight room (5 s and the time
            // since the receive), in whole seconds.
            1 => (
                "3days 13h old (306000 s)",
                "11h 59m 54s (43194 s)",
                "rate limited",
            ),
            other => panic!("m{other:02} was dead-lettered"),
        };
        for want in [
            "retrying would outlive the queue's retention",
            age,
            delay,
            "retention of 4days (345600 s)",
            "safety margin of 5m 30s (330 s)",
            "dead-letters it now",
            cause,
        ] {
            assert!(error.contains(want), "{want:?} not in {error:?}");
        }
    }
    // The young one's retry: its visibility set to 12 h (less SQS's
    // in-flight room); the others' not touched.
    let visibility = fake.calls("ChangeMessageVisibilityBatch");
    assert_eq!(visibility.len(), 1);
    let entries = visibility[0].request["Entries"].as_array().unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0]["ReceiptHandle"], "rh-02");
    assert!(entries[0]["VisibilityTimeout"].as_i64().unwrap() >= 43_190);
    // Each failure has its record, and the dead letters' say why.
    let records = fake.calls("PutItem");
    assert_eq!(records.len(), 3);
    let outlived = records
        .iter()
        .filter(|c| {
            c.request["Item"]["error"]["S"]
                .as_str()
                .is_some_and(|e| e.contains("outlive the queue's retention"))
        })
        .count();
    assert_eq!(outlived, 2);
}

/// On its last allowed receive (`maxReceiveCount` 6 here) a failed job is
/// left to SQS's redrive, which moves it as it is: its failure record is
/// the context `idemq dlq` shows. When that record cannot be written
/// (DynamoDB far slower than the deadline, as in a throttling burst), idemq
/// dead-letters the message itself with its context in the letter; a job
/// with receives left, or whose record was written, stays with SQS.
/// (Found by the simulation: seed 74's job lost both receives and both
/// records to a throttling burst and reached the DLQ with no context.)
#[tokio::test(start_paused = true)]
async fn a_last_receive_whose_record_is_not_written_is_dead_lettered_with_its_context() {
    let transient = |n: usize, receive_count| {
        message_received(
            n,
            &json!({"n": n, "kind": "transient"}),
            Duration::from_secs(60),
            receive_count,
        )
    };
    let deadline = || Instant::now() + Duration::from_secs(10);

    // Failure records take a minute: none is written before the deadline.
    let slow_records = Fake::new(|op, _| {
        if op == "PutItem" {
            Duration::from_secs(60)
        } else {
            Duration::from_millis(5)
        }
    });
    let p = processor(&slow_records, BatchConfig::default());
    let messages = [transient(0, 6), transient(1, 5)];
    let report = p.process(&queue_info(4 * DAY), &messages, deadline()).await;
    assert_eq!(
        report.failed,
        ["m01"],
        "the one with receives left is retried"
    );
    assert_eq!(
        report.done,
        ["rh-00"],
        "the last receive is dead-lettered by idemq"
    );
    assert_eq!(report.metrics.dead_lettered, 1);
    let sends = slow_records.calls("SendMessage");
    assert_eq!(sends.len(), 1, "{sends:?}");
    assert_eq!(sent_n(&sends[0]), 0);
    assert_eq!(sends[0].request["QueueUrl"], DLQ_URL);
    let error = sends[0].request["MessageAttributes"]["idemq-error"]["StringValue"]
        .as_str()
        .expect("idemq-error");
    assert!(error.contains("downstream unavailable"), "{error:?}");

    // Records written: the last receive stays on the queue for SQS's
    // redrive, whose letter the record explains.
    let fast = Fake::new(|_, _| Duration::from_millis(5));
    let p = processor(&fast, BatchConfig::default());
    let messages = [transient(0, 6)];
    let report = p.process(&queue_info(4 * DAY), &messages, deadline()).await;
    assert_eq!(report.failed, ["m00"]);
    assert!(report.done.is_empty());
    assert!(fast.calls("SendMessage").is_empty());
    assert_eq!(fast.calls("PutItem").len(), 1, "its failure record");
}

/// A FIFO message behind a failed one of its group is handed back untried;
/// on its last allowed receive SQS's redrive then moves it to the DLQ
/// without it ever having run. Its failure record says so, so its dead
/// letter has context. (Found by the simulation: FIFO seed 11, a job
/// dead-lettered with neither `idemq-error` nor a record.)
#[tokio::test(start_paused = true)]
async fn a_fifo_message_handed_back_untried_on_its_last_receive_gets_a_failure_record() {
    let fifo = |n: usize, kind: &str, receive_count: u32| {
        let mut m = message_received(
            n,
            &json!({"n": n, "kind": kind}),
            Duration::from_secs(60),
            receive_count,
        );
        m.group_id = Some("g1".into());
        m
    };
    let fake = Fake::new(|_, _| Duration::from_millis(5));
    let p = processor(&fake, BatchConfig::default());
    let mut queue = queue_info(4 * DAY);
    queue.fifo = true;
    // The first fails (receives left); the second, on its last receive,
    // is not attempted; the third, with receives left, is not either.
    let messages = [fifo(0, "transient", 2), fifo(1, "ok", 6), fifo(2, "ok", 3)];
    let report = p
        .process(&queue, &messages, Instant::now() + Duration::from_secs(10))
        .await;
    assert_eq!(report.failed, ["m00", "m01", "m02"]);
    assert!(
        fake.calls("TransactWriteItems").is_empty(),
        "nothing ran after the failure"
    );
    let records: Vec<String> = fake
        .calls("PutItem")
        .iter()
        .map(|c| c.request["Item"].to_string())
        .collect();
    assert_eq!(
        records.len(),
        2,
        "the failure's and the untried last receive's: {records:?}"
    );
    let untried = records
        .iter()
        .find(|r| r.contains("job-01"))
        .expect("a record for job-01");
    assert!(
        untried.contains("not attempted on its last allowed receive"),
        "{untried}"
    );
    assert!(
        !records.iter().any(|r| r.contains("job-02")),
        "job-02 has receives left"
    );
}
