//! Follow-up jobs at the SDK level: the order of the calls the batch
//! processor makes. SQS and DynamoDB are one fake HTTP connector in this
//! process (both speak AWS JSON 1.0, so an operation is named by its
//! `X-Amz-Target`), which logs every call in order and answers the commit
//! as each test says.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_sqs::types::{MessageAttributeValue, MessageSystemAttributeName};
use aws_smithy_runtime_api::client::http::{
    HttpConnector, HttpConnectorFuture, SharedHttpClient, SharedHttpConnector, http_client_fn,
};
use aws_smithy_runtime_api::client::orchestrator::{HttpRequest, HttpResponse};
use aws_smithy_runtime_api::http::StatusCode;
use aws_smithy_types::body::SdkBody;
use idemq::batch::Verdict;
use idemq::batch::{Message, Processor};
use idemq::config::TableLayout;
use idemq::config::{BatchConfig, DEFAULT_MARKER_TTL};
use idemq::failure::FailureKind;
use idemq::followup::{FOLLOW_UPS_ATTRIBUTE, FollowUp};
use idemq::job::JobIdResolver;
use idemq::queue::QueueInfo;
use idemq::store::dynamodb::{Committer, Effect, Key, Write};
use idemq::{JobMeta, handler_fn};
use serde_json::{Value, json};
use tokio::time::Instant;

const QUEUE_URL: &str = "https://sqs.us-east-1.amazonaws.com/000000000000/jobs";
const NEXT_URL: &str = "https://sqs.us-east-1.amazonaws.com/000000000000/next";

/// How the fake answers `TransactWriteItems`.
#[derive(Clone, Copy)]
enum Commit {
    Ok,
    /// Cancelled: the effect write's own condition failed (index 1, after
    /// the marker).
    EffectConditionFailed,
    /// Throttled: transient.
    Throttled,
}

#[derive(Clone)]
struct Fake {
    calls: Arc<Mutex<Vec<(String, Value)>>>,
    commit: Commit,
}

impl std::fmt::Debug for Fake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Fake")
    }
}

impl Fake {
    fn new(commit: Commit) -> Self {
        Self {
            calls: Arc::default(),
            commit,
        }
    }

    fn http(&self) -> SharedHttpClient {
        let fake = self.clone();
        http_client_fn(move |_, _| SharedHttpConnector::new(fake.clone()))
    }

    fn sqs(&self) -> aws_sdk_sqs::Client {
        use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region, retry::RetryConfig};
        let conf = aws_sdk_sqs::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .credentials_provider(Credentials::new("AKID", "secret", None, None, "test"))
            .retry_config(RetryConfig::disabled())
            .http_client(self.http())
            .build();
        aws_sdk_sqs::Client::from_conf(conf)
    }

    fn ddb(&self) -> aws_sdk_dynamodb::Client {
        use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region, retry::RetryConfig};
        let conf = aws_sdk_dynamodb::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .credentials_provider(Credentials::new("AKID", "secret", None, None, "test"))
            .retry_config(RetryConfig::disabled())
            .http_client(self.http())
            .build();
        aws_sdk_dynamodb::Client::from_conf(conf)
    }

    fn ops(&self) -> Vec<String> {
        let calls = self.calls.lock().unwrap();
        calls.iter().map(|(op, _)| op.clone()).collect()
    }

    fn request(&self, op: &str) -> Option<Value> {
        let calls = self.calls.lock().unwrap();
        calls.iter().find(|(o, _)| o == op).map(|(_, r)| r.clone())
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
        self.calls.lock().unwrap().push((op.clone(), body.clone()));
        let (status, answer) = match op.as_str() {
            "TransactWriteItems" => match self.commit {
                Commit::Ok => (200, json!({})),
                Commit::EffectConditionFailed => (
                    400,
                    json!({
                        "__type": "com.amazonaws.dynamodb.v20120810#TransactionCanceledException",
                        "message": "Transaction cancelled",
                        "CancellationReasons": [
                            {"Code": "None"},
                            {"Code": "ConditionalCheckFailed", "Message": "The conditional request failed"}
                        ]
                    }),
                ),
                Commit::Throttled => (
                    400,
                    json!({
                        "__type": "com.amazonaws.dynamodb.v20120810#ThrottlingException",
                        "message": "Rate exceeded"
                    }),
                ),
            },
            "GetQueueAttributes" => (
                200,
                json!({"Attributes": {"FifoQueue": "false", "MaximumMessageSize": "262144"}}),
            ),
            "SendMessageBatch" => {
                let ok: Vec<Value> = body["Entries"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|e| json!({"Id": e["Id"], "MessageId": "sent", "MD5OfMessageBody": ""}))
                    .collect();
                (200, json!({"Successful": ok, "Failed": []}))
            }
            "SendMessage" => (200, json!({"MessageId": "dlq"})),
            "ChangeMessageVisibilityBatch" => (200, json!({"Successful": [], "Failed": []})),
            _ => (200, json!({})), // PutItem (failure records)
        };
        HttpConnectorFuture::new(async move {
            let mut response = HttpResponse::new(
                StatusCode::try_from(status).unwrap(),
                SdkBody::from(answer.to_string()),
            );
            response
                .headers_mut()
                .insert("content-type", "application/x-amz-json-1.0");
            Ok(response)
        })
    }
}

fn message() -> Message {
    let sent_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let sdk = aws_sdk_sqs::types::Message::builder()
        .message_id("m-1")
        .receipt_handle("rh-1")
        .body("{}")
        .message_attributes(
            "idemq-job-id",
            MessageAttributeValue::builder()
                .data_type("String")
                .string_value("order-7")
                .build()
                .unwrap(),
        )
        .attributes(MessageSystemAttributeName::ApproximateReceiveCount, "1")
        .attributes(
            MessageSystemAttributeName::SentTimestamp,
            sent_ms.to_string(),
        )
        .build();
    Message::from_sdk(&sdk, Instant::now()).unwrap()
}

/// One job of the handler below (an account credit, a follow-up to
/// `next`) through the processor; its verdict and the calls made.
async fn run(commit: Commit) -> (Verdict, Fake) {
    let fake = Fake::new(commit);
    let handler = handler_fn(|_: Value, meta: JobMeta| async move {
        let credit = Write::update("jobs", Key::string("pk", "account#a"), "ADD balance :n")
            .value(":n", AttributeValue::N("1".into()))
            .condition("attribute_not_exists(frozen)");
        let receipt = FollowUp::raw(NEXT_URL, format!("{}/receipt", meta.job_id), "{}");
        Ok(Effect::new().with(credit).then_send(receipt))
    });
    let layout = TableLayout::new("jobs");
    let processor = Processor::new(
        handler,
        std::sync::Arc::new(idemq::store::dynamodb::DynamoDb::new(
            Committer::new(fake.ddb(), layout.clone(), DEFAULT_MARKER_TTL),
            idemq::store::dynamodb::FailureTable::new(fake.ddb(), layout, DEFAULT_MARKER_TTL),
        )),
        fake.sqs(),
        JobIdResolver::new(),
        BatchConfig::default(),
    );
    let queue = QueueInfo {
        url: QUEUE_URL.into(),
        name: "jobs".into(),
        fifo: false,
        dlq_url: Some(format!("{QUEUE_URL}-dlq")),
        max_receive_count: Some(6),
        visibility_timeout: Duration::from_secs(30),
        retention: Duration::from_secs(4 * 24 * 3600),
    };
    let report = processor
        .process(
            &queue,
            &[message()],
            Instant::now() + Duration::from_secs(60),
        )
        .await;
    let verdict = report.verdicts.into_iter().next().unwrap().1;
    (verdict, fake)
}

/// Committed: the follow-up is in the marker of the transaction, and its
/// send comes after the transaction, with its own job id.
#[tokio::test]
async fn the_follow_up_is_stored_with_the_commit_and_sent_after_it() {
    let (verdict, fake) = run(Commit::Ok).await;
    assert_eq!(verdict, Verdict::Succeeded);
    let ops = fake.ops();
    let commit = ops.iter().position(|o| o == "TransactWriteItems").unwrap();
    let send = ops.iter().position(|o| o == "SendMessageBatch").unwrap();
    assert!(commit < send, "sent before the commit: {ops:?}");
    let tx = fake.request("TransactWriteItems").unwrap();
    let marker = &tx["TransactItems"][0]["Put"]["Item"];
    assert_eq!(
        marker[FOLLOW_UPS_ATTRIBUTE]["L"][0]["M"]["job_id"]["S"], "order-7/receipt",
        "{tx}"
    );
    let sent = fake.request("SendMessageBatch").unwrap();
    assert_eq!(sent["QueueUrl"], NEXT_URL);
    assert_eq!(
        sent["Entries"][0]["MessageAttributes"]["idemq-job-id"]["StringValue"],
        "order-7/receipt"
    );
}

/// Not committed, nothing sent: a rejection (dead-lettered) and a
/// throttled transaction (retried) make no SQS send but the DLQ's.
#[tokio::test]
async fn a_job_that_does_not_commit_sends_no_follow_up() {
    let (verdict, fake) = run(Commit::EffectConditionFailed).await;
    assert!(
        matches!(&verdict, Verdict::DeadLetter { failure } if failure.kind == FailureKind::Rejected),
        "{verdict:?}"
    );
    assert!(
        !fake.ops().contains(&"SendMessageBatch".to_owned()),
        "{:?}",
        fake.ops()
    );

    let (verdict, fake) = run(Commit::Throttled).await;
    assert!(matches!(verdict, Verdict::Retry { .. }), "{verdict:?}");
    assert!(
        !fake.ops().contains(&"SendMessageBatch".to_owned()),
        "{:?}",
        fake.ops()
    );
}
