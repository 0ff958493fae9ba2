//! The batch handler as a local worker on the local stack: the ledger
//! example's handler, real SQS redrive, real DynamoDB transactions.

mod common;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use tokio::time::Instant;

use aws_sdk_sqs::types::{MessageSystemAttributeName, SendMessageBatchRequestEntry};
use common::{attribute, drain, init_queue, number, sdk, string_attribute};
use idemq::backoff::Backoff;
use idemq::config::BatchConfig;
use idemq::config::{DEFAULT_MARKER_TTL, TableLayout};
use idemq::worker::{WorkerArgs, run_with};

/// Sends (job id, body) pairs, 10 per call.
async fn send(sqs: &aws_sdk_sqs::Client, url: &str, jobs: &[(Option<String>, String)]) {
    for chunk in jobs.chunks(10) {
        let entries = chunk
            .iter()
            .enumerate()
            .map(|(i, (id, body))| {
                let mut e = SendMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .message_body(body);
                if let Some(id) = id {
                    e = e.message_attributes("idemq-job-id", string_attribute(id));
                }
                e.build().unwrap()
            })
            .collect::<Vec<_>>();
        let out = sqs
            .send_message_batch()
            .queue_url(url)
            .set_entries(Some(entries))
            .send()
            .await
            .unwrap();
        assert!(out.failed().is_empty(), "{:?}", out.failed());
    }
}

fn worker_args(queue_url: &str, table: &str) -> WorkerArgs {
    let mut args = WorkerArgs::new(queue_url.to_owned());
    args.table = Some(table.to_owned());
    args.concurrency = Some(8);
    args.exit_when_idle = Some(6);
    args
}

/// 500 transfers, 20% sent twice, one account in outage, 10 malformed jobs:
/// every balance exact; outage jobs in the DLQ after maxReceiveCount
/// receives with failure records; malformed jobs in the DLQ after one
/// receive with their context attributes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_hundred_ledger_jobs_with_duplicates_outage_and_malformed() {
    const MAX_RECEIVES: u32 = 4;
    let sdk = sdk().await;
    let res = init_queue(&sdk, "ledger", false, MAX_RECEIVES, 10).await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let ddb = aws_sdk_dynamodb::Client::new(&sdk);

    let mut jobs = Vec::new();
    let mut expected: HashMap<String, i64> = HashMap::new();
    let mut outage = HashSet::new();
    for i in 0..500 {
        let account = format!("acct-{}", i % 10);
        let id = format!("t-{i}");
        let amount = i64::from(i % 97 + 1);
        let body = format!(r#"{{"transfer_id":"{id}","account":"{account}","amount":{amount}}}"#);
        if account == "acct-9" {
            outage.insert(id.clone());
        } else {
            *expected.entry(account).or_default() += amount;
        }
        jobs.push((Some(id.clone()), body.clone()));
        if i % 5 == 0 {
            jobs.push((Some(id), body)); // a producer retry: same id, same body
        }
    }
    let malformed: Vec<(Option<String>, String)> = (0..5)
        .map(|i| {
            (
                Some(format!("bad-amount-{i}")),
                format!(r#"{{"transfer_id":"b{i}","account":"acct-0","amount":0}}"#),
            )
        })
        .chain((0..5).map(|i| {
            (
                Some(format!("no-account-{i}")),
                format!(r#"{{"transfer_id":"n{i}","amount":5}}"#),
            )
        }))
        .collect();
    jobs.extend(malformed.iter().cloned());
    assert_eq!(jobs.len(), 610);
    send(&sqs, &res.queue_url, &jobs).await;

    let ledger = common::ledger::Ledger {
        table: res.table_name.clone(),
        fail_accounts: HashSet::from(["acct-9".to_string()]),
    };
    let batch = BatchConfig::default().with_backoff(
        Backoff::new()
            .with_base(Duration::from_secs(1))
            .with_cap(Duration::from_secs(2)),
    );
    let started = Instant::now();
    let totals = run_with(ledger, worker_args(&res.queue_url, &res.table_name), batch)
        .await
        .expect("worker");
    eprintln!("worker took {:?}: {}", started.elapsed(), totals.summary());

    for (account, sum) in &expected {
        let got = number(
            &ddb,
            &res.table_name,
            &format!("account#{account}"),
            "balance",
        )
        .await;
        assert_eq!(got, Some(*sum), "{account}");
    }
    assert_eq!(
        number(&ddb, &res.table_name, "account#acct-9", "balance").await,
        None
    );
    assert_eq!(totals.succeeded, 450, "{}", totals.summary());
    assert_eq!(totals.duplicate, 100, "{}", totals.summary());

    // Outage jobs (50): redriven by SQS after MAX_RECEIVES receives.
    // Malformed (10): dead-lettered by idemq at once.
    let dead = drain(&sqs, &res.dlq_url).await;
    let job_id = |m: &aws_sdk_sqs::types::Message| attribute(m, "idemq-job-id").to_owned();
    let dead_ids: HashSet<String> = dead.iter().map(job_id).collect();
    assert_eq!(dead.len(), 50 + 10, "50 outage jobs + 10 malformed");
    assert!(outage.iter().all(|id| dead_ids.contains(id)));
    let dl = idemq::dlq::records::Records::new(std::sync::Arc::new(
        idemq::store::dynamodb::FailureTable::new(
            ddb.clone(),
            TableLayout::new(&res.table_name),
            DEFAULT_MARKER_TTL,
        ),
    ))
    .with_source_queues(&[&res.queue_url]);
    for id in &outage {
        let rec = dl
            .read(Some(id), "")
            .await
            .unwrap()
            .expect("failure record");
        assert_eq!(rec.attempt, MAX_RECEIVES, "{id}");
        assert!(
            rec.failure.error.contains("outage for account acct-9"),
            "{}",
            rec.failure.error
        );
        assert!(!rec.source_queue.is_empty());
        assert_eq!(rec.idemq_version, idemq::failure::IDEMQ_VERSION, "{id}");
        // Where: the ledger's handler made the error, its frame first.
        let bt = rec.failure.backtrace.as_deref().unwrap_or_default();
        let first_at = bt.lines().nth(1).unwrap_or_default();
        assert!(
            first_at.starts_with("    at ") && first_at.contains("examples/ledger.rs:"),
            "{id}: {bt}"
        );
    }
    for m in dead.iter().filter(|m| !outage.contains(&job_id(m))) {
        let a = m.message_attributes().unwrap();
        let get = |k: &str| a.get(k).and_then(|v| v.string_value()).unwrap_or_default();
        assert_eq!(get("idemq-attempts"), "1", "{}", job_id(m));
        assert!(!get("idemq-failed-at").is_empty());
        assert!(!get("idemq-source-queue").is_empty());
        let err = get("idemq-error");
        assert!(
            err.contains("not positive") || err.contains("does not decode"),
            "{err}"
        );
        // The handler's refusal says where; idemq's refusal to decode has
        // no backtrace.
        assert_eq!(
            get("idemq-backtrace").contains("examples/ledger.rs:"),
            err.contains("not positive"),
            "{}",
            get("idemq-backtrace")
        );
        let rec = dl
            .read(Some(&job_id(m)), "")
            .await
            .unwrap()
            .expect("failure record");
        assert_eq!(rec.attempt, 1);
    }
    assert!(
        drain(&sqs, &res.queue_url).await.is_empty(),
        "source queue empty"
    );
}

/// A transient failure's new visibility is set through
/// ChangeMessageVisibilityBatch and observed on the queue: the message is
/// invisible at first, then comes back with its receive count raised, and
/// it is named in the partial batch response.
#[tokio::test]
async fn transient_failure_sets_visibility_observed_on_the_queue() {
    use idemq::batch::{Message, Processor};
    use idemq::job::JobIdResolver;
    use idemq::queue::QueueInfo;
    use idemq::store::dynamodb::Committer;
    use idemq::{JobError, JobMeta, handler_fn};

    let sdk = sdk().await;
    let res = init_queue(&sdk, "ledger", false, 6, 10).await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let ddb = aws_sdk_dynamodb::Client::new(&sdk);
    let layout = TableLayout::new(&res.table_name);
    let handler = handler_fn(|_: serde_json::Value, _: JobMeta| async {
        Err(JobError::retry_after(
            "payment API said 429",
            Duration::from_secs(4),
        ))
    });
    let processor = Processor::new(
        handler,
        std::sync::Arc::new(idemq::store::dynamodb::DynamoDb::new(
            Committer::new(ddb.clone(), layout.clone(), DEFAULT_MARKER_TTL),
            idemq::store::dynamodb::FailureTable::new(ddb, layout, DEFAULT_MARKER_TTL),
        )),
        sqs.clone(),
        JobIdResolver::new(),
        BatchConfig::default(),
    );
    let queue = QueueInfo::discover(&sqs, &res.queue_url).await.unwrap();
    assert_eq!(queue.max_receive_count, Some(6));
    assert_eq!(queue.dlq_url.as_deref(), Some(res.dlq_url.as_str()));
    send(&sqs, &res.queue_url, &[(Some("v-1".into()), "{}".into())]).await;

    let receive = |wait: i32| {
        let sqs = sqs.clone();
        let url = res.queue_url.clone();
        async move {
            sqs.receive_message()
                .queue_url(url)
                .wait_time_seconds(wait)
                .message_attribute_names("All")
                .message_system_attribute_names(MessageSystemAttributeName::All)
                .send()
                .await
                .unwrap()
                .messages()
                .iter()
                .filter_map(|m| Message::from_sdk(m, Instant::now()))
                .collect::<Vec<_>>()
        }
    };
    let first = receive(5).await;
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].receive_count, 1);
    let report = processor
        .process(&queue, &first, Instant::now() + Duration::from_secs(30))
        .await;
    assert_eq!(report.failed, vec![first[0].message_id.clone()]);
    assert!(report.done.is_empty());
    assert_eq!(report.metrics.retried, 1);

    // The queue's own visibility timeout is 10 s; the handler asked for 4 s.
    let changed_at = Instant::now();
    assert!(
        receive(1).await.is_empty(),
        "invisible right after the change"
    );
    let again = receive(9).await;
    assert_eq!(
        again.len(),
        1,
        "visible again before the queue's 10 s timeout"
    );
    assert!(changed_at.elapsed() < Duration::from_secs(9));
    assert_eq!(again[0].message_id, first[0].message_id);
    assert_eq!(again[0].receive_count, 2);
}

/// A writer that keeps what a log subscriber writes.
#[derive(Clone, Default)]
struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

/// SQS deletes a message when its queue's retention runs out, in flight or
/// not, and never dead-letters it then (DeleteMessage: "If you leave a
/// message in the queue for longer than the queue's configured retention
/// period, Amazon SQS automatically deletes the message",
/// <https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_DeleteMessage.html>).
/// On a queue with SQS's shortest retention (60 s), the host warns at
/// start-up that maxReceiveCount retries cannot fit, and a job whose
/// handler asks to be retried in 2 minutes goes to the DLQ at once, its
/// `idemq-error` saying why, instead of being left to vanish.
#[tokio::test]
async fn a_retry_past_retention_is_dead_lettered_now_with_the_reason() {
    use aws_sdk_sqs::types::QueueAttributeName;
    use idemq::Host;
    use idemq::batch::Message;
    use idemq::config::IdempotencyConfig;
    use idemq::{JobError, JobMeta, handler_fn};

    let sdk = sdk().await;
    let res = init_queue(&sdk, "retention", false, 6, 10).await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let ddb = aws_sdk_dynamodb::Client::new(&sdk);
    sqs.set_queue_attributes()
        .queue_url(&res.queue_url)
        .attributes(QueueAttributeName::MessageRetentionPeriod, "60")
        .send()
        .await
        .unwrap();
    let handler = handler_fn(|_: serde_json::Value, _: JobMeta| async {
        Err(JobError::retry_after(
            "payment API said 429",
            Duration::from_secs(120),
        ))
    });
    let host = Host::from_clients(
        handler,
        sqs.clone(),
        ddb,
        TableLayout::new(&res.table_name),
        IdempotencyConfig::default(),
        BatchConfig::default(),
    );

    let log = Captured::default();
    let writer = log.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let queue = {
        let _log = tracing::subscriber::set_default(subscriber);
        host.discover(&res.queue_url).await.unwrap()
    };
    assert_eq!(queue.retention, Duration::from_secs(60));
    let text = log.text();
    for want in [
        "WARN",
        "maxReceiveCount 6 receives",
        "visibility timeout 10s",
        "(186 s)", // 6 x 10 s + (2+4+8+16+32+64) s
        "retention of 1m (60 s)",
    ] {
        assert!(
            text.contains(want),
            "{want:?} not in the start-up log: {text}"
        );
    }

    send(&sqs, &res.queue_url, &[(Some("r-1".into()), "{}".into())]).await;
    let out = sqs
        .receive_message()
        .queue_url(&res.queue_url)
        .wait_time_seconds(5)
        .message_attribute_names("All")
        .message_system_attribute_names(MessageSystemAttributeName::All)
        .send()
        .await
        .unwrap();
    let messages: Vec<Message> = out
        .messages()
        .iter()
        .filter_map(|m| Message::from_sdk(m, Instant::now()))
        .collect();
    assert_eq!(messages.len(), 1);
    assert!(messages[0].sent_at.is_some(), "SentTimestamp was received");
    let report = host
        .processor()
        .process(&queue, &messages, Instant::now() + Duration::from_secs(10))
        .await;
    assert!(report.failed.is_empty(), "retried: {:?}", report.failed);
    assert_eq!(report.done, [messages[0].receipt_handle.clone()]);
    assert_eq!(report.metrics.dead_lettered, 1);

    let dead = drain(&sqs, &res.dlq_url).await;
    assert_eq!(dead.len(), 1);
    assert_eq!(attribute(&dead[0], "idemq-job-id"), "r-1");
    let error = attribute(&dead[0], "idemq-error");
    for want in [
        "retrying would outlive the queue's retention",
        "2m (120 s) from now",
        "retention of 1m (60 s)",
        "safety margin of 5m 10s (310 s)",
        "payment API said 429",
    ] {
        assert!(error.contains(want), "{want:?} not in {error:?}");
    }
}

/// `serve_until`: a stop requested while a batch is in hand lets the batch
/// finish and be acknowledged, then the worker leaves without receiving
/// again (what SIGTERM does through `serve`).
#[tokio::test]
async fn a_stop_during_a_batch_finishes_and_acknowledges_it() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    use idemq::Host;
    use idemq::config::IdempotencyConfig;
    use idemq::worker::serve_until;
    use idemq::{JobMeta, handler_fn};

    let sdk = sdk().await;
    let res = init_queue(&sdk, "stop", false, 6, 30).await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let ddb = aws_sdk_dynamodb::Client::new(&sdk);
    let jobs: Vec<(Option<String>, String)> = (0..3)
        .map(|i| (Some(format!("stop-{i}")), "{}".to_owned()))
        .collect();
    send(&sqs, &res.queue_url, &jobs).await;

    // The first job to run asks the worker to stop, then takes 500 ms.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let ran = Arc::new(AtomicU64::new(0));
    let handler = {
        let ran = Arc::clone(&ran);
        handler_fn(move |_: serde_json::Value, _: JobMeta| {
            ran.fetch_add(1, Ordering::SeqCst);
            stop_tx.send_replace(true);
            async {
                tokio::time::sleep(Duration::from_millis(500)).await;
                Ok(idemq::store::dynamodb::Effect::new())
            }
        })
    };
    let host = Host::from_clients(
        handler,
        sqs.clone(),
        ddb,
        TableLayout::new(&res.table_name),
        IdempotencyConfig::default(),
        BatchConfig::default(),
    );
    let mut stop_rx = stop_rx;
    let stop = async move {
        let _ = stop_rx.wait_for(|stop| *stop).await;
    };
    // One message per receive, and no idle exit: only the stop ends it,
    // after the first batch.
    let mut args = WorkerArgs::new(res.queue_url.clone());
    args.batch_size = 1;
    let totals = tokio::time::timeout(Duration::from_secs(60), serve_until(&host, &args, stop))
        .await
        .expect("the worker stopped")
        .expect("worker");

    assert_eq!(totals.succeeded, 1, "the batch in hand was not finished");
    assert_eq!(ran.load(Ordering::SeqCst), 1, "a job ran after the stop");
    let attributes = sqs
        .get_queue_attributes()
        .queue_url(&res.queue_url)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages)
        .attribute_names(
            aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessagesNotVisible,
        )
        .send()
        .await
        .unwrap();
    let count = |name| {
        attributes
            .attributes()
            .and_then(|a| a.get(&name))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let left = count(aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages)
        + count(aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessagesNotVisible);
    assert_eq!(left, 2, "the finished job acknowledged, the others left");
}

/// When [`StopOn`] fires the worker's stop.
#[derive(Debug, Clone, Copy)]
enum StopWhen {
    /// A `ReceiveMessage` request is on its way to SQS: the stop lands
    /// while SQS answers, the answer still to arrive.
    Sent,
    /// A `ReceiveMessage` answer holding messages has been read, before
    /// the worker sees it.
    Answered,
}

/// Fires a worker's stop at a point of a `ReceiveMessage` call.
#[derive(Debug)]
struct StopOn(StopWhen, tokio::sync::watch::Sender<bool>);

impl aws_sdk_sqs::config::Intercept for StopOn {
    fn name(&self) -> &'static str {
        "StopOn"
    }

    fn read_before_transmit(
        &self,
        context: &aws_sdk_sqs::config::interceptors::BeforeTransmitInterceptorContextRef<'_>,
        _: &aws_sdk_sqs::config::RuntimeComponents,
        _: &mut aws_sdk_sqs::config::ConfigBag,
    ) -> Result<(), aws_sdk_sqs::error::BoxError> {
        // The JSON protocol names the operation in X-Amz-Target.
        let receive = context
            .request()
            .headers()
            .get("x-amz-target")
            .is_some_and(|t| t.ends_with(".ReceiveMessage"));
        if matches!(self.0, StopWhen::Sent) && receive {
            self.1.send_replace(true);
        }
        Ok(())
    }

    fn read_after_deserialization(
        &self,
        context: &aws_sdk_sqs::config::interceptors::AfterDeserializationInterceptorContextRef<'_>,
        _: &aws_sdk_sqs::config::RuntimeComponents,
        _: &mut aws_sdk_sqs::config::ConfigBag,
    ) -> Result<(), aws_sdk_sqs::error::BoxError> {
        let answered = context
            .output_or_error()
            .ok()
            .and_then(|out| {
                out.downcast_ref::<aws_sdk_sqs::operation::receive_message::ReceiveMessageOutput>()
            })
            .is_some_and(|out| !out.messages().is_empty());
        if matches!(self.0, StopWhen::Answered) && answered {
            self.1.send_replace(true);
        }
        Ok(())
    }
}

/// A stop that fires once a receive has been answered: the messages it
/// took are handed back (visibility 0), not run and not left invisible for
/// the queue's 30 s visibility timeout: a receive right after gets them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_while_a_receive_is_answered_hands_its_messages_back() {
    stop_during_a_receive_hands_its_messages_back(StopWhen::Answered).await;
}

/// The same with the stop firing while the receive is on its way: SQS
/// answers (taking the messages) after the stop; the worker takes that
/// answer and hands them back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_while_a_receive_is_on_its_way_hands_its_messages_back() {
    stop_during_a_receive_hands_its_messages_back(StopWhen::Sent).await;
}

async fn stop_during_a_receive_hands_its_messages_back(when: StopWhen) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    use idemq::Host;
    use idemq::config::IdempotencyConfig;
    use idemq::worker::serve_until;
    use idemq::{JobMeta, handler_fn};

    let sdk = sdk().await;
    let res = init_queue(&sdk, "handback", false, 6, 30).await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let ddb = aws_sdk_dynamodb::Client::new(&sdk);
    let jobs: Vec<(Option<String>, String)> = (0..3)
        .map(|i| (Some(format!("back-{i}")), "{}".to_owned()))
        .collect();
    send(&sqs, &res.queue_url, &jobs).await;

    let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
    let watched = aws_sdk_sqs::Client::from_conf(
        aws_sdk_sqs::config::Builder::from(&sdk)
            .interceptor(StopOn(when, stop_tx))
            .build(),
    );
    let ran = Arc::new(AtomicU64::new(0));
    let handler = {
        let ran = Arc::clone(&ran);
        handler_fn(move |_: serde_json::Value, _: JobMeta| {
            ran.fetch_add(1, Ordering::SeqCst);
            async { Ok(idemq::store::dynamodb::Effect::new()) }
        })
    };
    let host = Host::from_clients(
        handler,
        watched,
        ddb,
        TableLayout::new(&res.table_name),
        IdempotencyConfig::default(),
        BatchConfig::default(),
    );
    let stop = async move {
        let _ = stop_rx.wait_for(|stop| *stop).await;
    };
    let args = WorkerArgs::new(res.queue_url.clone());
    let totals = tokio::time::timeout(Duration::from_secs(60), serve_until(&host, &args, stop))
        .await
        .expect("the worker stopped")
        .expect("worker");
    let stopped = Instant::now();
    assert_eq!(
        ran.load(Ordering::SeqCst),
        0,
        "a job started after the stop"
    );
    assert_eq!(totals.succeeded, 0, "{}", totals.summary());

    // Well before the 30 s visibility timeout, all three are back.
    let mut back = HashSet::new();
    while back.len() < 3 && stopped.elapsed() < Duration::from_secs(10) {
        let out = sqs
            .receive_message()
            .queue_url(&res.queue_url)
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .message_attribute_names("All")
            .send()
            .await
            .unwrap();
        back.extend(
            out.messages()
                .iter()
                .map(|m| attribute(m, "idemq-job-id").to_owned()),
        );
    }
    assert_eq!(
        back.len(),
        3,
        "received again within {:?} of the stop: {back:?}",
        stopped.elapsed()
    );
    assert!(stopped.elapsed() < Duration::from_secs(10));
}
