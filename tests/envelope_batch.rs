//! The batch processor with `IDEMQ_ENVELOPE` set, against mocked SQS and
//! DynamoDB: what the dedup marker of an enveloped job holds, whatever the
//! envelope around it. Three SNS deliveries of one job, each a different
//! notification (new `MessageId`, `Timestamp` and `Signature` on every
//! publish:
//! <https://docs.aws.amazon.com/sns/latest/dg/sns-large-payload-raw-message-delivery.html>),
//! must write three markers with the same key and the same payload hash, or
//! the second would be a conflict.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsOutput;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_smithy_mocks::{MockResponseInterceptor, Rule, RuleMode, create_mock_http_client, mock};
use idemq::batch::Verdict;
use idemq::batch::{Message, Processor};
use idemq::config::BatchConfig;
use idemq::config::TableLayout;
use idemq::envelope::Envelope;
use idemq::job::{JobIdResolver, PayloadHash};
use idemq::queue::QueueInfo;
use idemq::store::dynamodb::{Committer, Effect, Key, Write};
use idemq::{JobMeta, handler_fn};
use tokio::time::Instant;

fn ddb(rule: &Rule) -> aws_sdk_dynamodb::Client {
    let interceptor = MockResponseInterceptor::new()
        .rule_mode(RuleMode::MatchAny)
        .with_rule(rule);
    aws_sdk_dynamodb::Client::from_conf(
        aws_sdk_dynamodb::Config::builder()
            .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
            .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
            .credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
                "test", "test", None, None, "mock",
            ))
            .http_client(create_mock_http_client())
            .interceptor(interceptor)
            .build(),
    )
}

/// Never called: every job here commits.
fn sqs() -> aws_sdk_sqs::Client {
    aws_sdk_sqs::Client::from_conf(
        aws_sdk_sqs::Config::builder()
            .behavior_version(aws_sdk_sqs::config::BehaviorVersion::latest())
            .region(aws_sdk_sqs::config::Region::new("us-east-1"))
            .build(),
    )
}

fn queue() -> QueueInfo {
    QueueInfo {
        url: "https://sqs.us-east-1.amazonaws.com/000000000000/env".into(),
        name: "env".into(),
        fifo: false,
        dlq_url: Some("https://sqs.us-east-1.amazonaws.com/000000000000/env-dlq".into()),
        max_receive_count: Some(6),
        visibility_timeout: Duration::from_secs(30),
        retention: Duration::from_secs(4 * 24 * 3600),
    }
}

fn message(id: &str, body: String) -> Message {
    Message {
        message_id: id.into(),
        receipt_handle: format!("rh-{id}"),
        body,
        attributes: Default::default(),
        receive_count: 1,
        group_id: None,
        received_at: Instant::now(),
        sent_at: Some(SystemTime::now()),
    }
}

/// An SNS notification of `message`, as one publish delivers it.
fn notification(sns_id: &str, timestamp: &str, signature: &str, message: &str) -> String {
    serde_json::json!({
        "Type": "Notification",
        "MessageId": sns_id,
        "TopicArn": "arn:aws:sns:us-east-1:000000000000:transfers",
        "Message": message,
        "Timestamp": timestamp,
        "SignatureVersion": "1",
        "Signature": signature,
        "SigningCertURL": "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-x.pem",
        "UnsubscribeURL": "https://sns.us-east-1.amazonaws.com/?Action=Unsubscribe",
        "MessageAttributes": {"idemq-job-id": {"Type": "String", "Value": "t-1"}}
    })
    .to_string()
}

/// Runs `messages` through a processor with `resolver`; returns each
/// marker's (key, payload hash) and the jobs the handler received.
async fn run(
    resolver: JobIdResolver,
    messages: &[Message],
) -> (Vec<(String, String)>, Vec<serde_json::Value>, Vec<Verdict>) {
    let markers = Arc::new(Mutex::new(Vec::new()));
    let log = markers.clone();
    let commit = mock!(aws_sdk_dynamodb::Client::transact_write_items)
        .match_requests(move |req| {
            let marker = req.transact_items()[0].put().unwrap().item();
            let s = |k: &str| marker[k].as_s().unwrap().clone();
            log.lock().unwrap().push((s("pk"), s("payload_hash")));
            true
        })
        .then_output(|| TransactWriteItemsOutput::builder().build());
    let ddb = ddb(&commit);
    let layout = TableLayout::new("jobs");
    let ttl = Duration::from_secs(21 * 24 * 3600);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let jobs = seen.clone();
    let handler = handler_fn(move |job: serde_json::Value, _meta: JobMeta| {
        jobs.lock().unwrap().push(job);
        async {
            Ok(Effect::new().with(Write::put(
                "jobs",
                Key::string("pk", "account#a"),
                [("n".to_string(), AttributeValue::N("1".into()))].into(),
            )))
        }
    });
    let processor = Processor::new(
        handler,
        std::sync::Arc::new(idemq::store::dynamodb::DynamoDb::new(
            Committer::new(ddb.clone(), layout.clone(), ttl),
            idemq::store::dynamodb::FailureTable::new(ddb, layout, ttl),
        )),
        sqs(),
        resolver,
        BatchConfig::default(),
    );
    let report = processor
        .process(&queue(), messages, Instant::now() + Duration::from_secs(60))
        .await;
    let verdicts = report.verdicts.into_iter().map(|(_, v)| v).collect();
    let markers = markers.lock().unwrap().clone();
    let jobs = seen.lock().unwrap().clone();
    (markers, jobs, verdicts)
}

#[tokio::test]
async fn three_sns_deliveries_of_one_job_write_one_key_and_one_hash() {
    let inner = r#"{"transfer_id":"t-1","account":"a","amount":5}"#;
    let messages = [
        message(
            "sqs-1",
            notification("sns-1", "2026-12-03T09:35:05.087Z", "c2ln", inner),
        ),
        message(
            "sqs-2",
            notification("sns-2", "2026-12-03T09:35:06.001Z", "b3Ro", inner),
        ),
        message(
            "sqs-3",
            notification("sns-3", "2026-12-03T09:40:00.000Z", "ZXI=", inner),
        ),
    ];
    let (markers, jobs, verdicts) =
        run(JobIdResolver::new().with_envelope(Envelope::Sns), &messages).await;
    assert!(
        verdicts.iter().all(|v| *v == Verdict::Succeeded),
        "{verdicts:?}"
    );
    let want = (
        "idemq#ns#env#job#t-1".to_string(),
        PayloadHash::of(inner.as_bytes()).to_string(),
    );
    assert_eq!(markers, vec![want.clone(), want.clone(), want]);
    let job: serde_json::Value = serde_json::from_str(inner).unwrap();
    assert_eq!(
        jobs,
        vec![job.clone(), job.clone(), job],
        "the handler gets the Message"
    );

    // Without the envelope: three bodies, three hashes, three ids (a
    // table would have applied the job three times, or, with a body
    // pointer, called the second copy a conflict).
    let (markers, _, _) = run(JobIdResolver::new(), &messages).await;
    let keys: std::collections::HashSet<_> = markers.iter().collect();
    assert_eq!(keys.len(), 3, "{markers:?}");
}

#[tokio::test]
async fn two_eventbridge_events_of_one_detail_write_one_key_and_one_hash() {
    let event = |id: &str, detail: &str| {
        format!(
            r#"{{"version":"0","id":"{id}","detail-type":"transfer","source":"app","account":"000000000000",
            "time":"2026-12-03T09:35:05Z","region":"us-east-1","resources":[],"detail":{detail}}}"#
        )
    };
    let messages = [
        message("sqs-1", event("e-1", r#"{"transfer_id":"t-2","amount":7}"#)),
        message(
            "sqs-2",
            event("e-2", r#"{ "amount" : 7, "transfer_id" : "t-2" }"#),
        ),
    ];
    let resolver = JobIdResolver::new()
        .with_envelope(Envelope::EventBridge)
        .with_body_pointer("/transfer_id");
    let (markers, jobs, _) = run(resolver, &messages).await;
    let canonical = r#"{"amount":7,"transfer_id":"t-2"}"#;
    let want = (
        "idemq#ns#env#job#t-2".to_string(),
        PayloadHash::of(canonical.as_bytes()).to_string(),
    );
    assert_eq!(markers, vec![want.clone(), want]);
    assert_eq!(
        jobs[0],
        serde_json::json!({"transfer_id": "t-2", "amount": 7})
    );
}
