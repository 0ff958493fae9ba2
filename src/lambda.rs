//! The AWS Lambda host: an SQS event source mapping with
//! `ReportBatchItemFailures` invokes the function with a batch; the answer
//! is the partial batch response (`batchItemFailures`).
//!
//! Clients are built once per execution environment and borrowed by every
//! invocation; a queue's DLQ and maxReceiveCount are read on its first batch.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

// Instants and sleeps come from tokio's clock, the one clock a test (or a
// simulation) can pause and advance.
use tokio::time::Instant;

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
use aws_sdk_sqs::primitives::Blob;
use aws_sdk_sqs::types::MessageAttributeValue;
use lambda_runtime::{LambdaEvent, service_fn};
use tokio::sync::Mutex;

use crate::batch::{BatchConfig, Message};
use crate::handler::Handler;
use crate::host::{Host, HostError};
use crate::queue::{QueueInfo, url_of_arn};

/// Lambda's longest `MaximumBatchingWindowInSeconds` for SQS.
const MAX_BATCHING_WINDOW: Duration = Duration::from_secs(300);

/// Runs `handler` under the Lambda runtime until the environment ends.
pub async fn run<H: Handler>(handler: H) -> Result<(), HostError> {
    let host = Arc::new(Host::build(handler, None, BatchConfig::from_env()?).await?);
    let queues: Arc<Mutex<HashMap<String, Arc<QueueInfo>>>> = Arc::default();
    lambda_runtime::run(service_fn(move |event: LambdaEvent<SqsEvent>| {
        let (host, queues) = (Arc::clone(&host), Arc::clone(&queues));
        async move { handle(&host, &queues, event).await }
    }))
    .await
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

/// The invocation's deadline (epoch milliseconds) as an `Instant`.
fn deadline_from_epoch_ms(deadline_ms: u64) -> Instant {
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
