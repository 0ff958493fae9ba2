//! The AWS Lambda host: an SQS event source mapping with
//! `ReportBatchItemFailures` invokes the function with a batch; the answer
//! is the partial batch response (`batchItemFailures`).
//!
//! Clients are built once per execution environment and borrowed by every
//! invocation; a queue's DLQ and maxReceiveCount are read on its first batch.
//!
//! [`BatchService`] is that batch handler as a `tower::Service`, for a team
//! that owns its `main`: it runs under `lambda_runtime::run`, behind any
//! layers of your own. It installs no subscriber, and leaves your panic
//! hook in charge: the processor only puts a hook in front of it that
//! notes where a panic happened for the job's failure record, then calls
//! yours ([`Processor::new`](crate::batch::Processor::new)).
//! [`idemq::run`](crate::run) is the same service with idemq's defaults.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

// Instants and sleeps come from tokio's clock, the one clock a test (or a
// simulation) can pause and advance.
use tokio::time::Instant;

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
use aws_sdk_sqs::primitives::Blob;
use aws_sdk_sqs::types::MessageAttributeValue;
use lambda_runtime::LambdaEvent;
use lambda_runtime::tower::Service;
use tokio::sync::Mutex;

use crate::batch::Message;
use crate::config::BatchConfig;
use crate::handler::Handler;
use crate::host::OpenStore;
use crate::host::{Host, HostError};
use crate::queue::{QueueInfo, url_of_arn};

/// Lambda's longest `MaximumBatchingWindowInSeconds` for SQS.
const MAX_BATCHING_WINDOW: Duration = Duration::from_secs(300);

/// The SQS batch handler of a Lambda function as a
/// `tower::Service<LambdaEvent<SqsEvent>>` answering the partial batch
/// response (`batchItemFailures`), for `lambda_runtime::run` in a `main` of
/// your own, behind your own layers:
///
/// ```no_run
/// use idemq::{handler_fn, JobMeta};
///
/// #[tokio::main]
/// async fn main() -> Result<(), lambda_runtime::Error> {
///     // Your subscriber and panic hook, set before the service is built.
///     let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
///     let handler = handler_fn(|_job: serde_json::Value, _meta: JobMeta| async {
///         Ok(idemq::store::dynamodb::Effect::new())
///     });
///     let service = idemq::lambda::BatchService::new(handler, &sdk).await?;
///     // Add layers with tower's ServiceBuilder here if you like.
///     lambda_runtime::run(service).await
/// }
/// ```
///
/// The event source mapping must use `FunctionResponseTypes:
/// [ReportBatchItemFailures]`. An `Err` from the service (a record without
/// a message id, a queue that cannot be described) fails the whole
/// invocation, and Lambda retries the whole batch; the dedup markers make
/// that safe. Cloning is cheap: clones share the clients and the queue cache.
pub struct BatchService<H: Handler> {
    inner: Arc<Inner<H>>,
}

struct Inner<H: Handler> {
    host: Host<H>,
    /// Queue facts (DLQ, maxReceiveCount, retention) by source ARN, read on
    /// a queue's first batch.
    queues: Mutex<HashMap<String, Arc<QueueInfo>>>,
}

impl<H: Handler> Clone for BatchService<H> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<H: Handler> std::fmt::Debug for BatchService<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchService").finish_non_exhaustive()
    }
}

impl<H: Handler> BatchService<H>
where
    H::Effect: OpenStore,
{
    /// Builds the SQS and DynamoDB clients from `sdk_config` and reads
    /// idemq's settings from the environment (`IDEMQ_TABLE` and the other
    /// `IDEMQ_*` variables, as [`crate::run`] does).
    pub async fn new(handler: H, sdk_config: &aws_config::SdkConfig) -> Result<Self, HostError> {
        let host = Host::from_sdk_config(handler, sdk_config, None, BatchConfig::from_env()?)?;
        Ok(Self::from_host(host))
    }
}

impl<H: Handler> BatchService<H> {
    /// A service over a host built elsewhere ([`Host::from_clients`]: your
    /// own clients and settings, no environment read).
    pub fn from_host(host: Host<H>) -> Self {
        Self {
            inner: Arc::new(Inner {
                host,
                queues: Mutex::default(),
            }),
        }
    }
}

impl<H: Handler> Service<LambdaEvent<SqsEvent>> for BatchService<H> {
    type Response = SqsBatchResponse;
    type Error = HostError;
    type Future = Pin<Box<dyn Future<Output = Result<SqsBatchResponse, HostError>> + Send>>;

    /// Always ready: jobs of one batch are bounded by `IDEMQ_CONCURRENCY`,
    /// and Lambda sends one batch at a time.
    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), HostError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, event: LambdaEvent<SqsEvent>) -> Self::Future {
        let inner = Arc::clone(&self.inner);
        Box::pin(async move { handle(&inner.host, &inner.queues, event).await })
    }
}

async fn handle<H: Handler>(
    host: &Host<H>,
    queues: &Mutex<HashMap<String, Arc<QueueInfo>>>,
    event: LambdaEvent<SqsEvent>,
) -> Result<SqsBatchResponse, HostError> {
    let deadline = deadline_from_epoch_ms(event.context.deadline);
    // The event source mapping received these messages before invoking us,
    // up to its longest batching window (5 min) earlier: count that as time
    // already in flight, so the 12-hour visibility clamp stays conservative.
    let received_at = Instant::now()
        .checked_sub(MAX_BATCHING_WINDOW)
        .unwrap_or_else(Instant::now);
    // One event source mapping reads one queue, but group by source anyway.
    let mut by_queue: Vec<(String, Vec<Message>)> = Vec::new();
    for record in &event.payload.records {
        let arn = record.event_source_arn.clone().unwrap_or_default();
        let msg = from_event(record, received_at)?;
        match by_queue.iter_mut().find(|(a, _)| *a == arn) {
            Some((_, v)) => v.push(msg),
            None => by_queue.push((arn, vec![msg])),
        }
    }
    let mut response = SqsBatchResponse::default();
    for (arn, messages) in by_queue {
        let queue = queue_info(host, queues, &arn).await?;
        let report = host.processor.process(&queue, &messages, deadline).await;
        for line in report.metrics.to_emf_lines(&queue.name, SystemTime::now()) {
            println!("{line}");
        }
        for id in report.failed {
            let mut failure = BatchItemFailure::default();
            failure.item_identifier = id;
            response.batch_item_failures.push(failure);
        }
    }
    Ok(response)
}

async fn queue_info<H: Handler>(
    host: &Host<H>,
    queues: &Mutex<HashMap<String, Arc<QueueInfo>>>,
    arn: &str,
) -> Result<Arc<QueueInfo>, HostError> {
    let mut cache = queues.lock().await;
    if let Some(q) = cache.get(arn) {
        return Ok(Arc::clone(q));
    }
    let url = url_of_arn(&host.sqs, arn).await?;
    let info = Arc::new(host.discover(&url).await?);
    cache.insert(arn.to_owned(), Arc::clone(&info));
    Ok(info)
}

/// Deadlines below this many milliseconds are not times (they would be on
/// the first day of 1970): `cargo lambda watch` 1.9.2, the Lambda emulator
/// users run locally, sends the constant `Lambda-Runtime-Deadline-Ms:
/// 600000` with every invocation instead of start + timeout. Read as the
/// duration it stands for (10 minutes from now); taken for a time, it
/// would leave every job of every batch unstarted.
const NOT_A_TIME_MS: u64 = 24 * 60 * 60 * 1000;

/// The invocation's deadline (epoch milliseconds) as an `Instant`.
fn deadline_from_epoch_ms(deadline_ms: u64) -> Instant {
    if deadline_ms < NOT_A_TIME_MS {
        static SAID: std::sync::Once = std::sync::Once::new();
        SAID.call_once(|| {
            tracing::warn!(
                deadline_ms,
                "the invocation deadline is not a time (a local Lambda emulator's constant?): \
                 read as {deadline_ms} ms from now"
            )
        });
        return Instant::now() + Duration::from_millis(deadline_ms);
    }
    let now_ms = crate::clock::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64;
    if deadline_ms <= now_ms {
        // Every job would be handed back untried: say so, loudly.
        tracing::error!(
            deadline_ms,
            now_ms,
            "the invocation deadline has already passed: no job of this batch will start"
        );
    }
    Instant::now() + Duration::from_millis(deadline_ms.saturating_sub(now_ms))
}

/// A record of the event as a host-independent message. A record without
/// a message id cannot be named in `batchItemFailures`, so the whole
/// invocation fails instead and Lambda retries the batch (the markers make
/// that safe).
pub fn from_event(record: &SqsMessage, received_at: Instant) -> Result<Message, HostError> {
    let message_id = record
        .message_id
        .clone()
        .filter(|id| !id.is_empty())
        .ok_or("an SQS record has no messageId: failing the whole batch")?;
    let mut attributes = HashMap::new();
    for (name, a) in &record.message_attributes {
        let mut v = MessageAttributeValue::builder()
            .data_type(a.data_type.clone().unwrap_or_else(|| "String".into()))
            .set_string_value(a.string_value.clone());
        if let Some(b) = &a.binary_value {
            v = v.binary_value(Blob::new(b.0.clone()));
        }
        attributes.insert(name.clone(), v.build()?);
    }
    let sys = |k: &str| record.attributes.get(k).cloned();
    Ok(Message {
        message_id,
        receipt_handle: record.receipt_handle.clone().unwrap_or_default(),
        body: record.body.clone().unwrap_or_default(),
        attributes,
        receive_count: sys("ApproximateReceiveCount")
            .and_then(|n| n.parse().ok())
            .unwrap_or(1),
        group_id: sys("MessageGroupId"),
        received_at,
        // Lambda's SQS events carry it in `attributes`, as epoch ms.
        sent_at: sys("SentTimestamp")
            .as_deref()
            .and_then(crate::batch::epoch_ms),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn left(deadline: Instant) -> Duration {
        deadline.saturating_duration_since(Instant::now())
    }

    #[tokio::test(start_paused = true)]
    async fn a_deadline_is_a_time_unless_it_is_an_emulator_s_constant() {
        let now_ms = crate::clock::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        // Lambda's: start + timeout, in epoch milliseconds.
        // (The wall clock may tick between the two readings.)
        let left_ms = left(deadline_from_epoch_ms(now_ms + 30_000)).as_millis();
        assert!((29_900..=30_000).contains(&left_ms), "{left_ms} ms left");
        // A time gone: no time left, so no job starts.
        assert_eq!(left(deadline_from_epoch_ms(now_ms - 1)), Duration::ZERO);
        // cargo lambda watch's constant: ten minutes from now, not 1970.
        assert_eq!(
            left(deadline_from_epoch_ms(600_000)),
            Duration::from_secs(600)
        );
    }
}
