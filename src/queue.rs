//! What idemq reads of a source queue: its DLQ and `maxReceiveCount` (from
//! `RedrivePolicy`), its visibility timeout and retention. Read once, at
//! cold start.

use std::collections::HashMap;
use std::time::Duration;

// Instants and sleeps come from tokio's clock, the one clock a test (or a
// simulation) can pause and advance.
use tokio::time::Instant;

use aws_sdk_sqs::error::DisplayErrorContext;
use aws_sdk_sqs::types::{ChangeMessageVisibilityBatchRequestEntry, QueueAttributeName};
use futures_util::{StreamExt, stream};

/// A queue that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    /// `QueueDoesNotExist` (the URL or ARN asked for).
    #[error("queue {0} does not exist")]
    NotFound(String),
    /// A string that is not an SQS queue ARN.
    #[error("{0:?} is not an SQS queue ARN")]
    NotAnArn(String),
    /// Any other SQS error, with its context.
    #[error("SQS: {0}")]
    Sqs(String),
}

/// SQS's `MessageRetentionPeriod` when a queue is created without one: 4
/// days
/// (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_CreateQueue.html>).
pub(crate) const DEFAULT_RETENTION: Duration = Duration::from_secs(4 * 24 * 3600);

/// Some of a queue's attributes (`GetQueueAttributes`; `All` for every
/// one).
pub(crate) async fn attributes(
    sqs: &aws_sdk_sqs::Client,
    url: &str,
    names: &[QueueAttributeName],
) -> Result<HashMap<QueueAttributeName, String>, QueueError> {
    let out = sqs
        .get_queue_attributes()
        .queue_url(url)
        .set_attribute_names(Some(names.to_vec()))
        .send()
        .await
        .map_err(|e| match e.as_service_error() {
            Some(se) if se.is_queue_does_not_exist() => QueueError::NotFound(url.to_owned()),
            _ => QueueError::Sqs(DisplayErrorContext(e).to_string()),
        })?;
    Ok(out.attributes().cloned().unwrap_or_default())
}

/// A queue's ARN: what a redrive policy and SQS's move tasks name a queue
/// by (the operator library's `idemq init` and `Peek::arn`).
#[cfg(feature = "ops")]
pub(crate) async fn arn(sqs: &aws_sdk_sqs::Client, url: &str) -> Result<String, QueueError> {
    attributes(sqs, url, &[QueueAttributeName::QueueArn])
        .await?
        .remove(&QueueAttributeName::QueueArn)
        .ok_or_else(|| QueueError::Sqs(format!("queue {url} has no QueueArn")))
}

/// A queue's `MessageRetentionPeriod` (for a DLQ, whose `RedrivePolicy`
/// [`QueueInfo::discover`] does not read).
pub(crate) async fn retention(
    sqs: &aws_sdk_sqs::Client,
    url: &str,
) -> Result<Duration, QueueError> {
    let secs = attributes(sqs, url, &[QueueAttributeName::MessageRetentionPeriod])
        .await?
        .get(&QueueAttributeName::MessageRetentionPeriod)
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_RETENTION.as_secs());
    Ok(Duration::from_secs(secs))
}

/// Where a queue's dead letters go, read once at cold start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueInfo {
    /// The queue URL.
    pub url: String,
    /// The queue name (the last part of its ARN).
    pub name: String,
    /// Whether it is a FIFO queue.
    pub fifo: bool,
    /// The DLQ's URL, from `RedrivePolicy.deadLetterTargetArn`.
    pub dlq_url: Option<String>,
    /// `RedrivePolicy.maxReceiveCount`.
    pub max_receive_count: Option<u32>,
    /// `VisibilityTimeout`.
    pub visibility_timeout: Duration,
    /// `MessageRetentionPeriod`.
    pub retention: Duration,
}

impl QueueInfo {
    /// Whether a message received `receive_count` times is on its last
    /// allowed receive: the next one past `maxReceiveCount` is where SQS's
    /// redrive moves it to the DLQ
    /// (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-dead-letter-queues.html>).
    /// Never, for a queue without a redrive policy.
    pub fn is_last_receive(&self, receive_count: u32) -> bool {
        self.max_receive_count
            .is_some_and(|max| receive_count >= max)
    }

    /// Reads the queue's `RedrivePolicy` and finds its DLQ.
    pub async fn discover(sqs: &aws_sdk_sqs::Client, url: &str) -> Result<Self, QueueError> {
        let attrs = attributes(sqs, url, &[QueueAttributeName::All]).await?;
        let arn = attrs
            .get(&QueueAttributeName::QueueArn)
            .cloned()
            .unwrap_or_default();
        let name = arn
            .rsplit(':')
            .next()
            .filter(|n| !n.is_empty())
            .map_or_else(
                || url.rsplit('/').next().unwrap_or(url).to_owned(),
                str::to_owned,
            );
        let fifo = attrs
            .get(&QueueAttributeName::FifoQueue)
            .is_some_and(|v| v == "true");
        let secs = |name: QueueAttributeName, default: u64| {
            Duration::from_secs(
                attrs
                    .get(&name)
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(default),
            )
        };
        // SQS's defaults, should an emulator leave them out.
        let visibility_timeout = secs(QueueAttributeName::VisibilityTimeout, 30);
        let retention = secs(
            QueueAttributeName::MessageRetentionPeriod,
            DEFAULT_RETENTION.as_secs(),
        );
        let redrive = attrs
            .get(&QueueAttributeName::RedrivePolicy)
            .and_then(|p| serde_json::from_str::<serde_json::Value>(p).ok());
        let (mut dlq_url, mut max_receive_count) = (None, None);
        if let Some(policy) = redrive {
            max_receive_count = match &policy["maxReceiveCount"] {
                serde_json::Value::String(s) => s.parse().ok(),
                v => v.as_u64().and_then(|n| u32::try_from(n).ok()),
            };
            if let Some(target) = policy["deadLetterTargetArn"].as_str() {
                dlq_url = Some(url_of_arn(sqs, target).await?);
            }
        }
        Ok(Self {
            url: url.to_owned(),
            name,
            fifo,
            dlq_url,
            max_receive_count,
            visibility_timeout,
            retention,
        })
    }
}

/// The URL of the queue with this ARN (`arn:aws:sqs:region:account:name`).
pub(crate) async fn url_of_arn(sqs: &aws_sdk_sqs::Client, arn: &str) -> Result<String, QueueError> {
    let mut parts = arn.split(':');
    let (account, name) = (parts.nth(4), parts.next());
    let (Some(account), Some(name)) = (account, name) else {
        return Err(QueueError::NotAnArn(arn.to_owned()));
    };
    let out = sqs
        .get_queue_url()
        .queue_name(name)
        .queue_owner_aws_account_id(account)
        .send()
        .await
        .map_err(|e| match e.as_service_error() {
            Some(se) if se.is_queue_does_not_exist() => QueueError::NotFound(arn.to_owned()),
            _ => QueueError::Sqs(format!("queue {arn}: {}", DisplayErrorContext(e))),
        })?;
    Ok(out.queue_url().unwrap_or_default().to_owned())
}

/// `DeleteMessageBatch`, 10 a call. Returns the indexes (into `handles`)
/// whose delete failed, a whole failed call counting for all its entries.
#[cfg(any(feature = "ops", feature = "worker"))]
pub(crate) async fn delete_messages(
    sqs: &aws_sdk_sqs::Client,
    url: &str,
    handles: &[&str],
) -> Vec<usize> {
    let mut failed = Vec::new();
    for (c, chunk) in handles.chunks(10).enumerate() {
        let entries: Vec<_> = chunk
            .iter()
            .enumerate()
            .filter_map(|(i, h)| {
                aws_sdk_sqs::types::DeleteMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .receipt_handle(*h)
                    .build()
                    .ok()
            })
            .collect();
        let sent = sqs
            .delete_message_batch()
            .queue_url(url)
            .set_entries(Some(entries))
            .send()
            .await;
        match sent {
            Ok(out) => {
                for f in out.failed() {
                    tracing::warn!(
                        code = f.code(),
                        "delete failed: {}",
                        f.message().unwrap_or("")
                    );
                    failed.extend(f.id().parse::<usize>().ok().map(|i| c * 10 + i));
                }
            }
            Err(e) => {
                tracing::warn!("DeleteMessageBatch failed: {}", DisplayErrorContext(e));
                failed.extend((0..chunk.len()).map(|i| c * 10 + i));
            }
        }
    }
    failed
}

/// The longest any one SQS or DynamoDB call after a batch's handlers may
/// take (a DLQ send, a failure record, a visibility change), whatever time
/// the batch has left: a hung connection must not hold the batch.
pub(crate) const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// Visibility calls in flight at once.
const VISIBILITY_CALLS_AT_ONCE: usize = 16;

/// `ChangeMessageVisibilityBatch`, 10 a call, for entries of (message id,
/// receipt handle, new timeout). A message no longer in flight (its handle
/// expired, or it was received again) is logged and skipped: SQS makes it
/// visible on its own.
#[cfg(any(feature = "ops", feature = "worker"))]
pub(crate) async fn change_visibility(
    sqs: &aws_sdk_sqs::Client,
    url: &str,
    entries: &[(&str, &str, Duration)],
) {
    // No bound on the whole, only on each call.
    let by = Instant::now() + Duration::from_secs(24 * 3600);
    change_visibility_by(sqs, url, entries, by).await;
}

/// [`change_visibility`] with calls made side by side, each bounded by
/// [`CALL_TIMEOUT`] and none running past `by`. Returns how many entries
/// were not changed because their call was cut short or never made (SQS
/// makes those visible when their current timeout ends).
pub(crate) async fn change_visibility_by(
    sqs: &aws_sdk_sqs::Client,
    url: &str,
    entries: &[(&str, &str, Duration)],
    by: Instant,
) -> usize {
    let calls = entries.chunks(10).map(|chunk| async move {
        let batch: Vec<_> = chunk
            .iter()
            .enumerate()
            .filter_map(|(i, (_, handle, timeout))| {
                ChangeMessageVisibilityBatchRequestEntry::builder()
                    .id(i.to_string())
                    .receipt_handle(*handle)
                    .visibility_timeout(i32::try_from(timeout.as_secs()).unwrap_or(i32::MAX))
                    .build()
                    .ok()
            })
            .collect();
        let send = sqs
            .change_message_visibility_batch()
            .queue_url(url)
            .set_entries(Some(batch))
            .send();
        let now = Instant::now();
        let until = by.min(now + CALL_TIMEOUT);
        if until <= now {
            return chunk.len();
        }
        let Ok(sent) = tokio::time::timeout_at(until, send).await else {
            return chunk.len();
        };
        match sent {
            Ok(out) => {
                for f in out.failed() {
                    let entry = f.id().parse::<usize>().ok().and_then(|i| chunk.get(i));
                    tracing::warn!(
                        message_id = entry.map(|(id, _, _)| *id),
                        code = f.code(),
                        "visibility not changed: {}",
                        f.message().unwrap_or("")
                    );
                }
            }
            Err(e) => tracing::warn!(
                "ChangeMessageVisibilityBatch failed: {}",
                DisplayErrorContext(e)
            ),
        }
        0
    });
    // Collected before the stream: a closure held across its awaits trips
    // rustc's higher-ranked lifetime check ("implementation of `FnOnce` is
    // not general enough") once a caller needs this future to be Send
    // (lambda::BatchService).
    let calls: Vec<_> = calls.collect();
    stream::iter(calls)
        .buffer_unordered(VISIBILITY_CALLS_AT_ONCE)
        .fold(0, |n, missed| async move { n + missed })
        .await
}
