//! SNS → SQS and EventBridge → SQS envelopes on the local stack
//! (LocalStack's `sns` and `events`; DynamoDB from moto).
//!
//! SNS without raw message delivery wraps every publish in a notification
//! whose `MessageId`, `Timestamp` and `Signature` are new each time
//! (<https://docs.aws.amazon.com/sns/latest/dg/sns-large-payload-raw-message-delivery.html>);
//! an EventBridge rule's SQS target receives the whole event, with its own
//! `id` and `time`
//! (<https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-events-structure.html>).
//! Without `IDEMQ_ENVELOPE` such a body hashes differently on every
//! publish (a producer's retry would be a conflict) and does not decode as
//! the job at all.

mod common;

#[path = "../examples/sns_fanout.rs"]
#[allow(dead_code)]
mod sns_fanout;

use std::time::Duration;

use common::{dlq_total, init_queue, ledger, number, quick_backoff, sdk, unique};
use idemq::Host;
use idemq::config::{IdempotencyConfig, TableLayout};
use idemq::envelope::Envelope;
use idemq::init::InitReport;
use idemq::job::JobIdResolver;
use idemq::metrics::BatchMetrics;
use idemq::producer::Job;
use idemq::topic::TopicProducer;

/// Runs `handler` as the local worker on `res`'s queue, jobs in `envelope`
/// (and ids at `pointer` in the inner message), until idle for 3 s.
async fn work<H: idemq::Handler<Effect = idemq::store::dynamodb::Effect>>(
    handler: H,
    res: &InitReport,
    resolver: JobIdResolver,
) -> BatchMetrics {
    let sdk = sdk().await;
    let mut behaviour = IdempotencyConfig::default();
    behaviour.job_id = resolver;
    let second = Duration::from_secs(1);
    let batch = idemq::config::BatchConfig::default().with_backoff(quick_backoff(second, second));
    let host = Host::from_clients(
        handler,
        aws_sdk_sqs::Client::new(&sdk),
        aws_sdk_dynamodb::Client::new(&sdk),
        TableLayout::new(res.table_name.clone()),
        behaviour,
        batch,
    );
    let mut args = idemq::worker::WorkerArgs::new(res.queue_url.clone());
    args.batch_size = 10;
    args.exit_when_idle = Some(3);
    idemq::worker::serve(&host, &args).await.expect("worker")
}

fn ledger_on(res: &InitReport, down: &[&str]) -> ledger::Ledger {
    ledger::Ledger {
        table: res.table_name.clone(),
        fail_accounts: down.iter().map(|a| a.to_string()).collect(),
    }
}

fn sns_resolver() -> JobIdResolver {
    JobIdResolver::new().with_envelope(Envelope::Sns)
}

/// A fresh topic with `res`'s queue subscribed (raw message delivery off),
/// through the example's own `subscribe`.
async fn topic_for(sdk: &aws_config::SdkConfig, res: &InitReport) -> TopicProducer {
    let sns = aws_sdk_sns::Client::new(sdk);
    let arn = sns
        .create_topic()
        .name(unique("env-topic"))
        .send()
        .await
        .expect("create_topic")
        .topic_arn()
        .unwrap()
        .to_owned();
    let sub = sns_fanout::subscribe(&sns, &aws_sdk_sqs::Client::new(sdk), &arn, &res.queue_url)
        .await
        .expect("subscribe");
    let attrs = sns
        .get_subscription_attributes()
        .subscription_arn(sub)
        .send()
        .await
        .unwrap();
    assert_eq!(
        attrs
            .attributes()
            .unwrap()
            .get("RawMessageDelivery")
            .map(String::as_str),
        Some("false"),
        "the envelope is what these tests are about"
    );
    TopicProducer::new(sdk, arn)
}

/// A transfer as the ledger takes it.
fn transfer(id: &str, account: &str, amount: i64) -> serde_json::Value {
    serde_json::json!({"transfer_id": id, "account": account, "amount": amount})
}

/// What LocalStack delivers, against the documented shapes: an SNS
/// notification in the body (the publish's attributes inside it, none on
/// the SQS message), and the whole EventBridge event. Differences from AWS
/// seen on LocalStack 2026.3: the SNS body is laid out with `", "` and
/// `": "` separators and `Subject` after `UnsubscribeURL`, the URLs are
/// plain http to the emulator, the signature is LocalStack's own; none of
/// it is read by idemq.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn localstack_delivers_the_documented_envelopes() {
    let sdk = sdk().await;
    let res = init_queue(&sdk, "env-shape", false, 3, 5).await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let topic = topic_for(&sdk, &res).await;
    let sns_id = topic
        .send("shape-1", &transfer("shape-1", "a", 1))
        .await
        .unwrap();
    let source = unique("idemq.test");
    let event_id = put_rule_and_event(&sdk, &res, &source, &[transfer("shape-2", "a", 2)])
        .await
        .remove(0);

    let messages = common::drain(&sqs, &res.queue_url).await;
    assert_eq!(messages.len(), 2);
    let bodies: Vec<serde_json::Value> = messages
        .iter()
        .map(|m| serde_json::from_str(m.body().unwrap()).unwrap())
        .collect();
    for m in &messages {
        assert!(
            m.message_attributes().is_none_or(|a| a.is_empty()),
            "no SQS message attributes with raw delivery off: {m:?}"
        );
    }
    let sns = bodies.iter().find(|b| b["Type"] == "Notification").unwrap();
    assert_eq!(sns["MessageId"], sns_id.as_str());
    assert_eq!(sns["MessageAttributes"]["idemq-job-id"]["Type"], "String");
    assert_eq!(sns["MessageAttributes"]["idemq-job-id"]["Value"], "shape-1");
    for key in [
        "TopicArn",
        "Timestamp",
        "SignatureVersion",
        "Signature",
        "SigningCertURL",
        "UnsubscribeURL",
    ] {
        assert!(sns.get(key).is_some(), "{key} in {sns}");
    }
    let message: serde_json::Value =
        serde_json::from_str(sns["Message"].as_str().unwrap()).unwrap();
    assert_eq!(
        message,
        transfer("shape-1", "a", 1),
        "Message is the publish, as a string"
    );

    let event = bodies.iter().find(|b| b.get("detail").is_some()).unwrap();
    assert_eq!(event["id"], event_id.as_str());
    assert_eq!(event["source"], source.as_str());
    assert_eq!(
        event["detail"],
        transfer("shape-2", "a", 2),
        "detail is an object"
    );
    for key in [
        "version",
        "detail-type",
        "account",
        "time",
        "region",
        "resources",
    ] {
        assert!(event.get(key).is_some(), "{key} in {event}");
    }
}

/// The ledger transfer published three times with one `idemq-job-id`: SNS
/// gives each publish a new MessageId (so a new body), and the account is
/// credited once, two duplicates, no conflict, nothing dead-lettered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sns_transfer_published_three_times_is_credited_once() {
    let sdk = sdk().await;
    let res = init_queue(&sdk, "env-sns", false, 3, 5).await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let ddb = aws_sdk_dynamodb::Client::new(&sdk);
    let topic = topic_for(&sdk, &res).await;
    let mut sns_ids = Vec::new();
    for _ in 0..3 {
        sns_ids.push(
            topic
                .send("sns-t-1", &transfer("sns-t-1", "alice", 25))
                .await
                .unwrap(),
        );
    }
    sns_ids.sort();
    sns_ids.dedup();
    assert_eq!(sns_ids.len(), 3, "three publishes, three SNS messages");

    let m = work(ledger_on(&res, &[]), &res, sns_resolver()).await;
    assert_eq!(
        (m.succeeded, m.duplicate, m.conflict, m.dead_lettered),
        (1, 2, 0, 0),
        "{}",
        m.summary()
    );
    assert_eq!(
        number(&ddb, &res.table_name, "account#alice", "balance").await,
        Some(25)
    );
    assert_eq!(dlq_total(&sqs, &res.dlq_url).await, 0);
}

/// Creates a bus, a rule on it matching `source` that targets `res`'s
/// queue, and puts one event per detail. Returns the event ids.
async fn put_rule_and_event(
    sdk: &aws_config::SdkConfig,
    res: &InitReport,
    source: &str,
    details: &[serde_json::Value],
) -> Vec<String> {
    use aws_sdk_eventbridge::types::{PutEventsRequestEntry, Target};
    let events = aws_sdk_eventbridge::Client::new(sdk);
    let sqs = aws_sdk_sqs::Client::new(sdk);
    let bus = unique("env-bus");
    events
        .create_event_bus()
        .name(&bus)
        .send()
        .await
        .expect("bus");
    let rule = unique("env-rule");
    events
        .put_rule()
        .name(&rule)
        .event_bus_name(&bus)
        .event_pattern(serde_json::json!({"source": [source]}).to_string())
        .send()
        .await
        .expect("put_rule");
    let queue_arn = sqs
        .get_queue_attributes()
        .queue_url(&res.queue_url)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::QueueArn)
        .send()
        .await
        .unwrap()
        .attributes()
        .unwrap()[&aws_sdk_sqs::types::QueueAttributeName::QueueArn]
        .clone();
    let out = events
        .put_targets()
        .rule(&rule)
        .event_bus_name(&bus)
        .targets(
            Target::builder()
                .id("queue")
                .arn(queue_arn)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .expect("put_targets");
    assert_eq!(out.failed_entry_count(), 0);
    let mut ids = Vec::new();
    for detail in details {
        let out = events
            .put_events()
            .entries(
                PutEventsRequestEntry::builder()
                    .event_bus_name(&bus)
                    .source(source)
                    .detail_type("transfer")
                    .detail(detail.to_string())
                    .build(),
            )
            .send()
            .await
            .expect("put_events");
        assert_eq!(out.failed_entry_count(), 0);
        ids.push(out.entries()[0].event_id().unwrap().to_owned());
    }
    ids
}

/// A rule targeting the queue delivers the same transfer twice (two
/// PutEvents, two event ids); the pointer applies to `detail` and the
/// handler gets `detail`: credited once, one duplicate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eventbridge_rule_target_is_credited_once() {
    let sdk = sdk().await;
    let res = init_queue(&sdk, "env-eb", false, 3, 5).await;
    let ddb = aws_sdk_dynamodb::Client::new(&sdk);
    let t = transfer("eb-t-1", "bob", 40);
    let ids = put_rule_and_event(&sdk, &res, &unique("idemq.test"), &[t.clone(), t]).await;
    assert_ne!(ids[0], ids[1], "EventBridge mints an id per event");

    let resolver = JobIdResolver::new()
        .with_envelope(Envelope::EventBridge)
        .with_body_pointer("/transfer_id");
    let m = work(ledger_on(&res, &[]), &res, resolver).await;
    assert_eq!(
        (m.succeeded, m.duplicate, m.conflict, m.dead_lettered),
        (1, 1, 0, 0),
        "{}",
        m.summary()
    );
    assert_eq!(
        number(&ddb, &res.table_name, "account#bob", "balance").await,
        Some(40)
    );
}

/// Runs the `idemq` binary with `IDEMQ_ENVELOPE=sns`.
fn idemq_sns(args: &[&str]) -> (bool, String, String) {
    let out = std::process::Command::new(common::idemq_bin())
        .args(args)
        .env("IDEMQ_ENVELOPE", "sns")
        .output()
        .expect("run idemq");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Enveloped dead letters: one redriven by SQS after an outage (its id is
/// only inside the envelope: SQS's redrive adds no attribute) and one body
/// that is no SNS notification (dead-lettered at once, its error naming
/// the missing field and no payload byte). `idemq dlq list` and `show`
/// find each one's context under the id the consumer resolved; `redrive`
/// sends the transfer back and it is credited once, and a later re-publish
/// of it is a duplicate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enveloped_dead_letters_are_shown_and_redriven() {
    let sdk = sdk().await;
    let res = init_queue(&sdk, "env-dlq", false, 2, 5).await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let ddb = aws_sdk_dynamodb::Client::new(&sdk);
    let topic = topic_for(&sdk, &res).await;
    topic
        .send("dlq-t-1", &transfer("dlq-t-1", "carol", 7))
        .await
        .unwrap();
    let secret = "4111-1111-1111-1111";
    let producer = idemq::producer::Producer::new(&sdk, &res.queue_url)
        .await
        .unwrap();
    producer
        .send_job(Job::raw("raw-1", format!(r#"{{"card":"{secret}"}}"#)))
        .await
        .unwrap();

    let m = work(ledger_on(&res, &["carol"]), &res, sns_resolver()).await;
    assert_eq!(m.succeeded, 0, "{}", m.summary());
    assert_eq!(dlq_total(&sqs, &res.dlq_url).await, 2);

    let (ok, stdout, stderr) = idemq_sns(&[
        "dlq",
        "list",
        "--json",
        "--dlq-url",
        &res.dlq_url,
        "--table",
        &res.table_name,
    ]);
    assert!(ok, "{stderr}");
    let rows: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 2, "{stdout}");
    let enveloped = rows
        .iter()
        .find(|r| r["job_id"] == "dlq-t-1")
        .expect("{stdout}");
    assert_eq!(
        enveloped["last_error"],
        "downstream outage for account carol"
    );
    assert_eq!(enveloped["attempts"], 2, "{enveloped}");
    let raw = rows
        .iter()
        .find(|r| r["job_id"] == "raw-1")
        .expect("{stdout}");
    let error = raw["last_error"].as_str().unwrap();
    assert!(
        error.starts_with("SNS envelope: no `Type` field"),
        "{error}"
    );
    assert!(error.contains("raw message delivery"), "{error}");
    assert!(!stdout.contains(secret), "payload bytes in the listing");

    let (ok, stdout, stderr) = idemq_sns(&[
        "dlq",
        "show",
        "dlq-t-1",
        "--dlq-url",
        &res.dlq_url,
        "--table",
        &res.table_name,
    ]);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("job id:        dlq-t-1"), "{stdout}");
    assert!(
        stdout.contains("last error:    downstream outage for account carol"),
        "{stdout}"
    );

    let (ok, stdout, stderr) = idemq_sns(&[
        "dlq",
        "redrive",
        "--job-id",
        "dlq-t-1",
        "--dlq-url",
        &res.dlq_url,
        "--table",
        &res.table_name,
    ]);
    assert!(ok, "{stdout}{stderr}");
    assert!(stdout.contains("moved 1,"), "{stdout}");
    // The outage is over; the same job is also published again.
    topic
        .send("dlq-t-1", &transfer("dlq-t-1", "carol", 7))
        .await
        .unwrap();
    let m = work(ledger_on(&res, &[]), &res, sns_resolver()).await;
    assert_eq!(
        (m.succeeded, m.duplicate, m.conflict),
        (1, 1, 0),
        "{}",
        m.summary()
    );
    assert_eq!(
        number(&ddb, &res.table_name, "account#carol", "balance").await,
        Some(7)
    );
    assert_eq!(
        dlq_total(&sqs, &res.dlq_url).await,
        1,
        "only the body that is no envelope"
    );
}

/// The example: one topic, two subscribed queues, the same order published
/// three times: each consumer credits the points once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sns_fanout_example_credits_each_subscribed_queue_once() {
    use sns_fanout::{LoyaltyPoints, OrderPlaced, publish, subscribe};
    let sdk = sdk().await;
    let sns = aws_sdk_sns::Client::new(&sdk);
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let ddb = aws_sdk_dynamodb::Client::new(&sdk);
    let arn = sns
        .create_topic()
        .name(unique("fanout"))
        .send()
        .await
        .unwrap()
        .topic_arn()
        .unwrap()
        .to_owned();
    let queues = [
        init_queue(&sdk, "fanout-a", false, 3, 5).await,
        init_queue(&sdk, "fanout-b", false, 3, 5).await,
    ];
    for q in &queues {
        subscribe(&sns, &sqs, &arn, &q.queue_url).await.unwrap();
    }
    let topic = TopicProducer::new(&sdk, arn);
    let order = OrderPlaced {
        order_id: "order-7".into(),
        customer: "dana".into(),
        points: 12,
    };
    for _ in 0..3 {
        publish(&topic, &order).await.unwrap();
    }
    for q in &queues {
        let handler = LoyaltyPoints {
            table: q.table_name.clone(),
        };
        let m = work(handler, q, sns_resolver()).await;
        assert_eq!(
            (m.succeeded, m.duplicate, m.conflict),
            (1, 2, 0),
            "{}",
            m.summary()
        );
        assert_eq!(
            number(&ddb, &q.table_name, "customer#dana", "points").await,
            Some(12)
        );
    }
}

/// `idemq send --topic-arn`: the same line twice in the input (a re-run)
/// is published twice with one `idemq-job-id`: credited once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idemq_send_publishes_to_a_topic_with_the_job_id() {
    let sdk = sdk().await;
    let res = init_queue(&sdk, "env-send", false, 3, 5).await;
    let ddb = aws_sdk_dynamodb::Client::new(&sdk);
    let topic = topic_for(&sdk, &res).await;
    let line = transfer("send-t-1", "erin", 9).to_string();
    let file = std::env::temp_dir().join(format!("{}.jsonl", unique("env-send")));
    std::fs::write(&file, format!("{line}\n{line}\n")).unwrap();
    let out = std::process::Command::new(common::idemq_bin())
        .args([
            "send",
            "--topic-arn",
            topic.topic_arn(),
            "--job-id-pointer",
            "/transfer_id",
        ])
        .arg(&file)
        .env_remove("IDEMQ_QUEUE_URL")
        .output()
        .expect("run idemq");
    let _ = std::fs::remove_file(&file);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("sent 2, failed 0"), "{stdout}");

    let m = work(ledger_on(&res, &[]), &res, sns_resolver()).await;
    assert_eq!(
        (m.succeeded, m.duplicate, m.conflict),
        (1, 1, 0),
        "{}",
        m.summary()
    );
    assert_eq!(
        number(&ddb, &res.table_name, "account#erin", "balance").await,
        Some(9)
    );
}
