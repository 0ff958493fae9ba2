//! The network between the real SDK clients and the models: an
//! `HttpConnector` (the SDK's own extension point) that reads the operation
//! from `X-Amz-Target` (SQS and DynamoDB both speak AWS JSON 1.0), lets the
//! faults decide what happens to the request, and answers from the world.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_smithy_runtime_api::client::http::{
    HttpConnector, HttpConnectorFuture, SharedHttpClient, SharedHttpConnector, http_client_fn,
};
use aws_smithy_runtime_api::client::orchestrator::{HttpRequest, HttpResponse};
use aws_smithy_runtime_api::client::result::ConnectorError;
use aws_smithy_runtime_api::http::StatusCode;
use aws_smithy_types::body::SdkBody;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::World;
use super::faults::Fate;

/// What a model answers.
#[derive(Debug, Clone)]
pub enum Reply {
    Ok(Value),
    Error {
        status: u16,
        /// `__type`, e.g. `com.amazonaws.sqs#QueueDoesNotExist`.
        kind: String,
        message: String,
        /// More fields of the error body (`CancellationReasons`).
        extra: Value,
    },
}

impl Reply {
    fn into_http(self) -> HttpResponse {
        let (status, body) = match self {
            Reply::Ok(v) => (200, v),
            Reply::Error {
                status,
                kind,
                message,
                extra,
            } => {
                let mut body = json!({"__type": kind, "message": message, "Message": message});
                if let Some(more) = extra.as_object() {
                    for (k, v) in more {
                        body[k] = v.clone();
                    }
                }
                (status, body)
            }
        };
        let mut response = HttpResponse::new(
            StatusCode::try_from(status).expect("status"),
            SdkBody::from(body.to_string()),
        );
        response
            .headers_mut()
            .insert("content-type", "application/x-amz-json-1.0");
        response
    }
}

#[derive(Clone)]
pub struct Net {
    pub world: Arc<Mutex<World>>,
}

impl std::fmt::Debug for Net {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Net")
    }
}

impl Net {
    pub fn http(&self) -> SharedHttpClient {
        let net = self.clone();
        http_client_fn(move |_, _| SharedHttpConnector::new(net.clone()))
    }
}

thread_local! {
    /// Wall time this thread spent in the models (parsing requests, drawing
    /// faults, applying, answering): the speed benchmark's measure. Not
    /// part of any run's outcome.
    static IN_MODELS: std::cell::Cell<Duration> = const { std::cell::Cell::new(Duration::ZERO) };
}

/// Wall time this thread has spent in the models so far.
pub fn time_in_models() -> Duration {
    IN_MODELS.get()
}

/// Runs `f`, counting its wall time as the models'.
fn in_models<T>(f: impl FnOnce() -> T) -> T {
    let started = std::time::Instant::now();
    let out = f();
    IN_MODELS.set(IN_MODELS.get() + started.elapsed());
    out
}

impl HttpConnector for Net {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        in_models(|| self.answer(request))
    }
}

impl Net {
    fn answer(&self, request: HttpRequest) -> HttpConnectorFuture {
        let target = request
            .headers()
            .get("x-amz-target")
            .unwrap_or_default()
            .to_owned();
        let (service, op) = target.split_once('.').unwrap_or(("", ""));
        let service = if service.starts_with("DynamoDB") {
            "dynamodb"
        } else {
            "sqs"
        };
        let op = op.to_owned();
        let body: Value = request
            .body()
            .bytes()
            .and_then(|b| serde_json::from_slice(b).ok())
            .unwrap_or(Value::Null);
        let world = Arc::clone(&self.world);
        HttpConnectorFuture::new(async move {
            let fate = in_models(|| {
                world
                    .lock()
                    .expect("world")
                    .faults
                    .request(service, &op, &body)
            });
            if !fate.before.is_zero() {
                tokio::time::sleep(fate.before).await;
            }
            match fate.fate {
                Fate::LostBefore => {
                    world
                        .lock()
                        .expect("world")
                        .trace(format!("net: {op} lost before it arrived"));
                    return Err(ConnectorError::io("simulated: connection reset".into()));
                }
                Fate::Throttled => {
                    let code = if service == "dynamodb" {
                        "com.amazonaws.dynamodb.v20120810#ThrottlingException"
                    } else {
                        "com.amazonaws.sqs#RequestThrottled"
                    };
                    world
                        .lock()
                        .expect("world")
                        .trace(format!("net: {op} throttled"));
                    return Ok(Reply::Error {
                        status: 400,
                        kind: code.into(),
                        message: "Rate exceeded".into(),
                        extra: json!({}),
                    }
                    .into_http());
                }
                Fate::Delivered | Fate::LostAfter => {}
            }
            // Long polling: wait for a message up to WaitTimeSeconds
            // (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-short-and-long-polling.html>).
            let wait = Duration::from_secs(body["WaitTimeSeconds"].as_u64().unwrap_or(0));
            let until = Instant::now() + wait;
            let reply = loop {
                let reply = in_models(|| world.lock().expect("world").apply(service, &op, &body));
                let empty = op == "ReceiveMessage"
                    && matches!(&reply, Reply::Ok(v) if v["Messages"].as_array().is_none_or(Vec::is_empty));
                if !empty || Instant::now() >= until {
                    break reply;
                }
                tokio::time::sleep(Duration::from_secs(1).min(until - Instant::now())).await;
            };
            // A transaction is in progress on its items until DynamoDB
            // answers: the model holds the items for TRANSACTION_HOLD after
            // a commit, so the answer comes when the hold ends, and a client
            // that waits for it never conflicts with its own transaction
            // (tests/sim_conformance.rs found sequential transactions
            // cancelled with TransactionConflict without this).
            if op == "TransactWriteItems" && matches!(reply, Reply::Ok(_)) {
                tokio::time::sleep(super::dynamodb::TRANSACTION_HOLD).await;
            }
            if !fate.after.is_zero() {
                tokio::time::sleep(fate.after).await;
            }
            if matches!(fate.fate, Fate::LostAfter) {
                world
                    .lock()
                    .expect("world")
                    .trace(format!("net: {op} applied, answer lost"));
                return Err(ConnectorError::io(
                    "simulated: connection reset after the request was applied".into(),
                ));
            }
            Ok(in_models(|| reply.into_http()))
        })
    }
}

/// The SDK's clock (its retry token bucket refills by it): the simulated
/// wall clock, so that how loaded the machine is cannot change a run.
#[derive(Debug)]
struct SimulatedTime;

impl aws_smithy_async::time::TimeSource for SimulatedTime {
    fn now(&self) -> std::time::SystemTime {
        idemq::testing::clock::now()
    }
}

/// SDK clients as production builds them (standard retries: 3 attempts, the
/// retry token bucket; the SDK's tokio sleep on the paused clock), over the
/// simulated network. One difference: the retry backoff is the SDK's
/// static exponential one (1 s, 2 s, …) instead of its jitter, which draws
/// from a generator a test cannot seed reliably (runs of one seed differed
/// by it when other tests ran at the same time). And no credentials: with
/// none the SDK falls back to its no-auth scheme (`allow_no_auth`) and
/// skips SigV4 signing, which no model checks and which took an eighth of
/// a run's wall time in the debug build. A fresh
/// retry partition per run: the SDK keeps each partition's retry token
/// bucket in a process-wide map, so a run that reused a name would start
/// from the bucket another run left.
pub fn clients(net: &Net, seed: u64) -> (aws_sdk_sqs::Client, aws_sdk_dynamodb::Client) {
    clients_over(net.http(), seed)
}

/// [`clients`] over any HTTP client (the speed benchmark's instant one).
pub fn clients_over(
    http: SharedHttpClient,
    seed: u64,
) -> (aws_sdk_sqs::Client, aws_sdk_dynamodb::Client) {
    static RUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let run = format!(
        "{seed}-{}",
        RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    use aws_sdk_sqs::config::{
        BehaviorVersion, Region, StalledStreamProtectionConfig,
        retry::{RetryConfig, RetryPartition},
    };
    let sqs = aws_sdk_sqs::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .allow_no_auth()
        .stalled_stream_protection(StalledStreamProtectionConfig::disabled())
        .retry_config(RetryConfig::standard().with_use_static_exponential_base(true))
        .retry_partition(RetryPartition::new(format!("sim-{run}-sqs")))
        .time_source(SimulatedTime)
        .http_client(http.clone())
        .build();
    let ddb = aws_sdk_dynamodb::Config::builder()
        .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
        .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
        .allow_no_auth()
        .stalled_stream_protection(
            aws_sdk_dynamodb::config::StalledStreamProtectionConfig::disabled(),
        )
        .retry_config(
            aws_sdk_dynamodb::config::retry::RetryConfig::standard()
                .with_use_static_exponential_base(true),
        )
        .retry_partition(aws_sdk_dynamodb::config::retry::RetryPartition::new(
            format!("sim-{run}-ddb"),
        ))
        .time_source(SimulatedTime)
        .http_client(http)
        .build();
    (
        aws_sdk_sqs::Client::from_conf(sqs),
        aws_sdk_dynamodb::Client::from_conf(ddb),
    )
}
