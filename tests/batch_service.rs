//! `idemq::lambda::BatchService`, the SQS batch handler as a tower service
//! for a `main` of one's own: built with `BatchService::new` from
//! an `SdkConfig`, driven through `tower::Service` with the SQS event fixture
//! `tests/fixtures/sqs_standard_mixed.json`, against SQS and DynamoDB faked
//! in this process (one HTTP connector; no network, no emulator). The fake
//! DynamoDB keeps the markers, so the fixture's duplicate job meets the
//! first copy's marker as it would on AWS.
//!
//! One test in this file: `BatchService::new` reads `IDEMQ_*` from the
//! environment, which this test sets for its own process.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use aws_smithy_runtime_api::client::http::{
    HttpConnector, HttpConnectorFuture, SharedHttpClient, SharedHttpConnector, http_client_fn,
};
use aws_smithy_runtime_api::client::orchestrator::{HttpRequest, HttpResponse};
use aws_smithy_runtime_api::http::StatusCode;
use aws_smithy_types::body::SdkBody;
use idemq::lambda::BatchService;
use idemq::store::dynamodb::Effect;
use idemq::store::dynamodb::{Key, Write};
use idemq::{Handler, JobError, JobMeta};
use lambda_runtime::tower::{Service, ServiceExt};
use lambda_runtime::{Context, LambdaEvent};
use serde_json::{Value, json};

const MIXED: &str = include_str!("fixtures/sqs_standard_mixed.json");
const QUEUE_URL: &str = "https://sqs.us-east-1.amazonaws.com/000000000000/idemq-lambda-mixed";
const DLQ_ARN: &str = "arn:aws:sqs:us-east-1:000000000000:idemq-lambda-mixed-dlq";
const DLQ_URL: &str = "https://sqs.us-east-1.amazonaws.com/000000000000/idemq-lambda-mixed-dlq";
const TABLE: &str = "batch-service";

/// SQS and DynamoDB in one fake connector (both speak AWS JSON 1.0: an
/// operation is named by its `X-Amz-Target`). Records every request; keeps
/// committed markers by key.
#[derive(Clone, Default)]
struct Fake {
    calls: Arc<Mutex<Vec<(String, Value)>>>,
    markers: Arc<Mutex<HashMap<String, Value>>>,
}

impl std::fmt::Debug for Fake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Fake")
    }
}

impl Fake {
    fn http(&self) -> SharedHttpClient {
        let fake = self.clone();
        http_client_fn(move |_, _| SharedHttpConnector::new(fake.clone()))
    }

    fn calls(&self, op: &str) -> Vec<Value> {
        let calls = self.calls.lock().unwrap();
        calls
            .iter()
            .filter(|(o, _)| o == op)
            .map(|(_, r)| r.clone())
            .collect()
    }

    /// The answer to one request: (status, body).
    fn answer(&self, op: &str, request: &Value) -> (u16, Value) {
        match op {
            "GetQueueUrl" => match request["QueueName"].as_str() {
                Some("idemq-lambda-mixed-dlq") => (200, json!({"QueueUrl": DLQ_URL})),
                _ => (200, json!({"QueueUrl": QUEUE_URL})),
            },
            "GetQueueAttributes" => {
                let redrive = json!({"deadLetterTargetArn": DLQ_ARN, "maxReceiveCount": 6});
                let arn = if request["QueueUrl"] == DLQ_URL {
                    DLQ_ARN.to_owned()
                } else {
                    "arn:aws:sqs:us-east-1:000000000000:idemq-lambda-mixed".to_owned()
                };
                (
                    200,
                    json!({"Attributes": {
                        "QueueArn": arn,
                        "VisibilityTimeout": "30",
                        "MessageRetentionPeriod": "345600",
                        "MaximumMessageSize": "262144",
                        "RedrivePolicy": redrive.to_string(),
                    }}),
                )
            }
            "SendMessage" => (200, json!({"MessageId": "dlq-copy"})),
            "ChangeMessageVisibilityBatch" => {
                let ok: Vec<Value> = request["Entries"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|e| json!({"Id": e["Id"]}))
                    .collect();
                (200, json!({"Successful": ok, "Failed": []}))
            }
            "TransactWriteItems" => {
                // Item 0 is the marker Put (attribute_not_exists(pk)).
                let marker = &request["TransactItems"][0]["Put"]["Item"];
                let key = marker["pk"]["S"].as_str().unwrap_or_default().to_owned();
                let mut markers = self.markers.lock().unwrap();
                if let Some(stored) = markers.get(&key) {
                    // As DynamoDB answers a failed marker condition with
                    // ReturnValuesOnConditionCheckFailure=ALL_OLD:
                    // https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html
                    let others = request["TransactItems"].as_array().map_or(0, Vec::len) - 1;
                    let mut reasons =
                        vec![json!({"Code": "ConditionalCheckFailed", "Item": stored})];
                    reasons.extend((0..others).map(|_| json!({"Code": "None"})));
                    return (
                        400,
                        json!({
                            "__type": "com.amazonaws.dynamodb.v20120810#TransactionCanceledException",
                            "Message": "Transaction cancelled",
                            "CancellationReasons": reasons,
                        }),
                    );
                }
                markers.insert(key, marker.clone());
                (200, json!({}))
            }
            _ => (200, json!({})), // PutItem (failure records)
        }
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
        let (status, answer) = self.answer(&op, &body);
        self.calls.lock().unwrap().push((op, body));
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

/// The probe's job (tests/support/lambda_probe.rs), decoded from the body.
#[derive(serde::Deserialize)]
struct ProbeJob {
    id: String,
    action: String,
}

#[derive(Debug, thiserror::Error)]
#[error("probe job asked for a transient failure")]
struct Asked(#[source] std::io::Error);

struct Probe;

impl Handler for Probe {
    type Job = ProbeJob;
    type Effect = Effect;

    async fn handle(&self, job: ProbeJob, _meta: JobMeta) -> Result<Effect, JobError> {
        match job.action.as_str() {
            // `?` on any error: transient.
            "transient" => Err(Asked(std::io::Error::other("connection reset")))?,
            "permanent" => return Err(JobError::permanent("probe job asked for it")),
            _ => {}
        }
        Ok(Effect::new().with(
            Write::update(
                TABLE,
                Key::string("pk", format!("probe#{}", job.id)),
                "ADD n :one",
            )
            .value(
                ":one",
                aws_sdk_dynamodb::types::AttributeValue::N("1".into()),
            ),
        ))
    }
}

fn sdk_config(fake: &Fake) -> aws_config::SdkConfig {
    use aws_config::retry::RetryConfig;
    use aws_config::stalled_stream_protection::StalledStreamProtectionConfig;
    use aws_config::{BehaviorVersion, Region};
    use aws_sdk_sqs::config::{Credentials, SharedCredentialsProvider};
    aws_config::SdkConfig::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(SharedCredentialsProvider::new(Credentials::new(
            "AKID", "secret", None, None, "test",
        )))
        .stalled_stream_protection(StalledStreamProtectionConfig::disabled())
        .retry_config(RetryConfig::disabled())
        .http_client(fake.http())
        .build()
}

/// The fixture, sent a second ago (its own timestamps only grow older, and
/// a message near the end of its retention is dead-lettered, not retried).
fn event() -> LambdaEvent<SqsEvent> {
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let mut raw: Value = serde_json::from_str(MIXED).unwrap();
    for record in raw["Records"].as_array_mut().unwrap() {
        record["attributes"]["SentTimestamp"] = json!((now_ms - 1000).to_string());
    }
    let mut context = Context::default();
    context.deadline = now_ms + 30_000;
    LambdaEvent::new(serde_json::from_value(raw).unwrap(), context)
}

/// What `lambda_runtime::run` (and `run_concurrent`, and tower's `Buffer`)
/// need of a service.
fn assert_runtime_service<S>(_: &S)
where
    S: Service<LambdaEvent<SqsEvent>, Response = SqsBatchResponse> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<lambda_runtime::Diagnostic> + std::fmt::Debug,
{
}

#[tokio::test]
async fn batch_service_answers_the_fixture_with_the_partial_batch_response() {
    // SAFETY: the only test in this process, set before any thread reads it.
    unsafe {
        std::env::set_var("IDEMQ_TABLE", TABLE);
        std::env::remove_var("IDEMQ_MARKER_TTL");
        std::env::remove_var("IDEMQ_JOB_ID_POINTER");
    }
    let fake = Fake::default();
    let service = BatchService::new(Probe, &sdk_config(&fake))
        .await
        .expect("service");
    assert_runtime_service(&service);

    // A layer of the user's own around it, as `lambda_runtime::run` would
    // be given: counts the invocations it passes on.
    let seen = Arc::new(Mutex::new(0));
    let counted = Arc::clone(&seen);
    let mut layered = lambda_runtime::tower::ServiceBuilder::new()
        .map_request(move |e: LambdaEvent<SqsEvent>| {
            *counted.lock().unwrap() += 1;
            e
        })
        .service(service.clone());
    let response = layered
        .ready()
        .await
        .unwrap()
        .call(event())
        .await
        .expect("batch");
    assert_eq!(*seen.lock().unwrap(), 1);

    // Only the transient job stays on the queue; the permanent and the
    // undecodable ones went to the DLQ (and are acknowledged), the
    // duplicate met its first copy's marker.
    let failed: Vec<&str> = response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.as_str())
        .collect();
    assert_eq!(failed, ["237cb11f-5d10-4cf2-9930-263938b370a1"]);

    let transactions = fake.calls("TransactWriteItems");
    assert_eq!(transactions.len(), 3, "ok and both copies of mixed-dup");
    let mut markers: Vec<String> = fake.markers.lock().unwrap().keys().cloned().collect();
    markers.sort();
    assert_eq!(
        markers,
        [
            "idemq#ns#idemq-lambda-mixed#job#mixed-dup",
            "idemq#ns#idemq-lambda-mixed#job#mixed-ok"
        ]
    );

    let dead: Vec<Value> = fake.calls("SendMessage");
    assert_eq!(dead.len(), 2, "permanent and undecodable: {dead:?}");
    assert!(dead.iter().all(|r| r["QueueUrl"] == DLQ_URL), "{dead:?}");

    // The transient job's backoff goes through SQS, with its receipt handle.
    let visibility = fake.calls("ChangeMessageVisibilityBatch");
    let handles: Vec<&str> = visibility
        .iter()
        .flat_map(|r| r["Entries"].as_array().unwrap())
        .map(|e| e["ReceiptHandle"].as_str().unwrap())
        .collect();
    assert_eq!(handles.len(), 1);
    assert!(
        handles[0].starts_with("AQEBtXafoPFIP5WpDZ3y"),
        "{handles:?}"
    );

    // A second invocation with the same event (Lambda retrying a batch):
    // every committed job is now a duplicate, the queue facts come from the
    // clone's shared cache (no second GetQueueUrl).
    let mut again = service.clone();
    let response = again.call(event()).await.expect("batch");
    assert_eq!(response.batch_item_failures.len(), 1);
    assert_eq!(fake.calls("GetQueueUrl").len(), 2, "source + DLQ, once");
    assert_eq!(fake.markers.lock().unwrap().len(), 2);
}
