//! The sending half: every job enters the queue with a stable id.
//!
//! Effectively-once starts at the producer. A producer that retries after a
//! timeout sends the job twice; only if both copies carry the same
//! `idemq-job-id` can a consumer tell them apart. [`Producer`] sets it, and
//! on FIFO queues also the group and a deduplication id derived from the
//! job id, so SQS itself drops a copy sent within its 5-minute window.

use std::collections::HashMap;

use aws_sdk_sqs::error::DisplayErrorContext;
use aws_sdk_sqs::types::{MessageAttributeValue, QueueAttributeName, SendMessageBatchRequestEntry};
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::job::{IDEMQ_ATTRIBUTE_PREFIX, InvalidJobId, JOB_ID_ATTRIBUTE, JobId};

mod batches;
#[cfg(test)]
mod tests;

pub(crate) use batches::{EntryAnswer, send_batch_with_retries, send_in_batches};

/// SQS's default and largest message size (1 MiB since August 2025).
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 1024 * 1024;
/// Entries in one `SendMessageBatch`.
pub(crate) const MAX_BATCH_ENTRIES: usize = 10;
/// Message attributes SQS accepts on one message
/// (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-message-metadata.html>:
/// "Each message can have up to 10 attributes").
pub const MAX_ATTRIBUTES: usize = 10;
/// SQS's limit on `MessageDeduplicationId`.
pub(crate) const MAX_DEDUP_ID: usize = 128;
/// Error codes with which SQS refuses a message itself (its contents, its
/// size, its attributes): no retry of the same message can pass. SQS marks
/// batch entries refused so `SenderFault`, but not every emulator does
/// (LocalStack 2026.3 reports `InvalidMessageContents` with
/// `SenderFault: false`), so the code decides. `DeadLetters::send` uses the
/// same list to fall back to the bare message.
pub(crate) const INVALID_MESSAGE_CODES: [&str; 6] = [
    "InvalidMessageContents",
    "InvalidParameterValue",
    "InvalidAttributeName",
    "InvalidAttributeValue",
    "MessageTooLong",
    "InvalidBatchEntryId",
];

/// One job to send: its id, its body and, for FIFO queues, its group.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    /// The job id, sent as the `idemq-job-id` attribute.
    pub id: String,
    /// The body (JSON for [`Job::new`]).
    pub body: String,
    /// `MessageGroupId`: required on a FIFO queue.
    pub group_id: Option<String>,
    /// FIFO only; defaults to [`deduplication_id`] of the job id.
    pub deduplication_id: Option<String>,
    /// More attributes, sent as they are (`idemq-job-id` is added unless
    /// [`Job::as_received`]).
    pub attributes: HashMap<String, MessageAttributeValue>,
    /// Whether `idemq-job-id` is set from `id`.
    pub set_id_attribute: bool,
}

impl Job {
    /// A job whose body is `payload` as JSON.
    pub fn new<T: Serialize + ?Sized>(
        id: impl Into<String>,
        payload: &T,
    ) -> Result<Self, SendError> {
        let id = id.into();
        let body = serde_json::to_string(payload).map_err(|e| SendError::Serialize {
            job_id: id.clone(),
            reason: e.to_string(),
        })?;
        Ok(Self::raw(id, body))
    }

    /// A job whose body is sent byte for byte.
    pub fn raw(id: impl Into<String>, body: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            body: body.into(),
            group_id: None,
            deduplication_id: None,
            attributes: HashMap::new(),
            set_id_attribute: true,
        }
    }

    /// A message to send again as it was received (a redrive or an
    /// import): its body, FIFO group and deduplication id kept, and its
    /// producer's attributes kept as they are. Every `idemq-*` attribute it
    /// carried (a stale job id, the context of an earlier death) is dropped
    /// and `idemq-job-id` is set to `id`, which must be the id the consumer
    /// resolved for it: SQS gives a message moved back from a DLQ a new
    /// MessageId, so a job identified only by its MessageId would otherwise
    /// be a new job after the replay
    /// (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-configure-dead-letter-queue-redrive.html>).
    pub fn as_received(
        id: impl Into<String>,
        body: impl Into<String>,
        mut attributes: HashMap<String, MessageAttributeValue>,
        group_id: Option<String>,
        deduplication_id: Option<String>,
    ) -> Self {
        attributes.retain(|name, _| !name.starts_with(IDEMQ_ATTRIBUTE_PREFIX));
        Self {
            id: id.into(),
            body: body.into(),
            group_id,
            deduplication_id,
            attributes,
            set_id_attribute: true,
        }
    }

    /// The job carries `at` as its first-enqueued time
    /// ([`FIRST_ENQUEUED_ATTRIBUTE`](crate::job::FIRST_ENQUEUED_ATTRIBUTE)):
    /// for a copy of a job whose first copy was sent at `at`, so that its
    /// consumer weighs the job's real age, not this copy's, against its
    /// markers' lifetime. A job's first send needs none (its
    /// `SentTimestamp` says it). The attribute counts towards SQS's
    /// [`MAX_ATTRIBUTES`] and size limit.
    pub fn first_enqueued(mut self, at: std::time::SystemTime) -> Self {
        self.attributes.insert(
            crate::job::FIRST_ENQUEUED_ATTRIBUTE.to_owned(),
            crate::job::first_enqueued_value(at),
        );
        self
    }

    /// Whether [`Job::first_enqueued`] fits SQS's [`MAX_ATTRIBUTES`] beside
    /// the job's other attributes and `idemq-job-id`. A copy of a job with
    /// nine attributes of its own cannot carry it.
    pub fn first_enqueued_fits(&self) -> bool {
        let mut names: Vec<&String> = self.attributes.keys().collect();
        let first = crate::job::FIRST_ENQUEUED_ATTRIBUTE.to_owned();
        if !self.attributes.contains_key(&first) {
            names.push(&first);
        }
        attributes_with_job_id(names) <= MAX_ATTRIBUTES
    }

    /// The job in FIFO message group `group`.
    pub fn in_group(mut self, group: impl Into<String>) -> Self {
        self.group_id = Some(group.into());
        self
    }

    /// The bytes SQS counts against its size limit: body plus each
    /// attribute's name, type and value.
    pub fn size(&self) -> usize {
        let own_id_attr = self
            .attributes
            .get(JOB_ID_ATTRIBUTE)
            .map_or(0, |v| JOB_ID_ATTRIBUTE.len() + attribute_size(v));
        let id_attr = if self.set_id_attribute {
            JOB_ID_ATTRIBUTE.len() + "String".len() + self.id.len()
        } else {
            own_id_attr
        };
        message_size(&self.body, &self.attributes) - own_id_attr + id_attr
    }
}

/// The bytes SQS counts against a queue's `MaximumMessageSize`: the body
/// plus each attribute's name, data type and value ("All components of a
/// message attribute are included in the [...] message size restriction",
/// <https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-message-metadata.html>).
pub(crate) fn message_size(
    body: &str,
    attributes: &HashMap<String, MessageAttributeValue>,
) -> usize {
    body.len()
        + attributes
            .iter()
            .map(|(k, v)| k.len() + attribute_size(v))
            .sum::<usize>()
}

fn attribute_size(v: &MessageAttributeValue) -> usize {
    v.data_type().len()
        + v.string_value().map_or(0, str::len)
        + v.binary_value().map_or(0, |b| b.as_ref().len())
}

/// The message attribute budget, computed here and nowhere else: how many
/// attributes a message whose attributes are named `names` uses once idemq
/// sends it with `idemq-job-id` set (a first send, a redrive, an import, a
/// dead letter). The producer refuses a job over [`MAX_ATTRIBUTES`]; idemq's
/// own dead letters give their context only the slots this count leaves
/// ([`spare_attribute_slots`]), so every dead letter idemq makes can be sent
/// again: a redrive drops the context and sets `idemq-job-id`, which lands
/// on this same count.
pub(crate) fn attributes_with_job_id<'a>(names: impl IntoIterator<Item = &'a String>) -> usize {
    names
        .into_iter()
        .filter(|n| n.as_str() != JOB_ID_ATTRIBUTE)
        .count()
        + 1
}

/// The attribute slots left under [`MAX_ATTRIBUTES`] once the message's own
/// attributes and `idemq-job-id` are counted ([`attributes_with_job_id`]);
/// 0 when none are, or when the message is already over.
pub(crate) fn spare_attribute_slots<'a>(names: impl IntoIterator<Item = &'a String>) -> usize {
    MAX_ATTRIBUTES.saturating_sub(attributes_with_job_id(names))
}

/// A job that was not sent, and why. Every variant names the job.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// The job id is invalid.
    #[error("job {job_id:?}: invalid job id: {source}")]
    InvalidJobId {
        /// The job's id as given.
        job_id: String,
        /// Why it is invalid.
        source: InvalidJobId,
    },
    /// The payload does not serialise to JSON.
    #[error("job {job_id:?}: payload does not serialise: {reason}")]
    Serialize {
        /// The job's id.
        job_id: String,
        /// serde_json's error.
        reason: String,
    },
    /// The message is over the queue's `MaximumMessageSize`.
    #[error("job {job_id:?}: message is {bytes} bytes; the queue takes at most {limit}")]
    TooLarge {
        /// The job's id.
        job_id: String,
        /// Its size as SQS counts it.
        bytes: usize,
        /// The queue's limit.
        limit: usize,
    },
    /// More than SQS's [`MAX_ATTRIBUTES`] message attributes.
    #[error(
        "job {job_id:?}: {count} message attributes; SQS takes at most {MAX_ATTRIBUTES} (idemq-job-id included)"
    )]
    TooManyAttributes {
        /// The job's id.
        job_id: String,
        /// Attributes with `idemq-job-id`.
        count: usize,
    },
    /// The queue is FIFO and the job has no message group.
    #[error("job {job_id:?}: the queue is FIFO and the job has no message group")]
    MissingGroup {
        /// The job's id.
        job_id: String,
    },
    /// SQS refused the message itself: sending it again cannot pass.
    #[error("job {job_id:?}: refused by SQS: {code}: {message}")]
    Rejected {
        /// The job's id.
        job_id: String,
        /// SQS's error code.
        code: String,
        /// SQS's message.
        message: String,
    },
    /// Still failing after every retry.
    #[error("job {job_id:?}: not sent after {attempts} tries: {last_error}")]
    GaveUp {
        /// The job's id.
        job_id: String,
        /// Tries made.
        attempts: u32,
        /// The last error.
        last_error: String,
    },
    /// The queue's attributes could not be read.
    #[error("queue {queue_url}: {reason}")]
    Queue {
        /// The queue's URL.
        queue_url: String,
        /// The SQS error.
        reason: String,
    },
}

/// The FIFO deduplication id for a job id: the id itself when SQS accepts
/// it as one (at most 128 characters of ASCII letters, digits and
/// punctuation), else its SHA-256 in hex. Deterministic, so a re-sent job
/// gets the same one.
///
/// ```
/// use idemq::producer::deduplication_id;
/// assert_eq!(deduplication_id("order-7"), "order-7");
/// assert_eq!(deduplication_id(&"x".repeat(200)).len(), 64);
/// ```
pub fn deduplication_id(job_id: &str) -> String {
    let fits = job_id.len() <= MAX_DEDUP_ID && job_id.bytes().all(|b| b.is_ascii_graphic());
    if fits {
        job_id.to_owned()
    } else {
        hex::encode(Sha256::digest(job_id.as_bytes()))
    }
}

/// Sends jobs to one queue. Reads the queue's type and size limit once.
#[derive(Debug, Clone)]
pub struct Producer {
    sqs: aws_sdk_sqs::Client,
    queue_url: String,
    fifo: bool,
    max_message_bytes: usize,
}

impl Producer {
    /// Reads `FifoQueue` and `MaximumMessageSize` of the queue.
    pub async fn new(
        sdk: &aws_config::SdkConfig,
        queue_url: impl Into<String>,
    ) -> Result<Self, SendError> {
        Self::with_client(aws_sdk_sqs::Client::new(sdk), queue_url).await
    }

    /// [`Producer::new`] with a client built elsewhere.
    pub async fn with_client(
        sqs: aws_sdk_sqs::Client,
        queue_url: impl Into<String>,
    ) -> Result<Self, SendError> {
        let queue_url = queue_url.into();
        let attrs = crate::queue::attributes(
            &sqs,
            &queue_url,
            &[
                QueueAttributeName::FifoQueue,
                QueueAttributeName::MaximumMessageSize,
            ],
        )
        .await
        .map_err(|e| SendError::Queue {
            queue_url: queue_url.clone(),
            reason: e.to_string(),
        })?;
        let get = |name| attrs.get(&name);
        Ok(Self {
            fifo: get(QueueAttributeName::FifoQueue).is_some_and(|v| v == "true"),
            max_message_bytes: get(QueueAttributeName::MaximumMessageSize)
                .and_then(|v| v.parse().ok())
                .unwrap_or(DEFAULT_MAX_MESSAGE_BYTES),
            sqs,
            queue_url,
        })
    }

    /// Whether the queue is FIFO.
    pub fn is_fifo(&self) -> bool {
        self.fifo
    }

    /// The queue's URL.
    pub fn queue_url(&self) -> &str {
        &self.queue_url
    }

    /// Sends one job to a standard queue (a FIFO queue needs a group: use
    /// [`Producer::send_job`] with [`Job::in_group`]). Returns its message id.
    pub async fn send<T: Serialize + ?Sized>(
        &self,
        job_id: &str,
        payload: &T,
    ) -> Result<String, SendError> {
        self.send_job(Job::new(job_id, payload)?).await
    }

    /// Sends one job. Returns its message id.
    pub async fn send_job(&self, job: Job) -> Result<String, SendError> {
        self.send_batch(vec![job]).await.remove(0).1
    }

    /// Sends jobs in `SendMessageBatch` calls (at most 10 entries and the
    /// queue's size limit per call), retrying only the entries that failed
    /// for a reason that can pass, with backoff. Returns one result per job,
    /// in input order: its message id, or why it was not sent. A job that
    /// cannot be sent is refused before any request.
    pub async fn send_batch(&self, jobs: Vec<Job>) -> Vec<(String, Result<String, SendError>)> {
        let results = send_in_batches(
            &jobs,
            |j| self.check(j),
            self.max_message_bytes,
            self.fifo,
            |batch| self.send_with_retries(&jobs, batch),
        )
        .await;
        jobs.into_iter().map(|j| j.id).zip(results).collect()
    }

    /// Everything SQS would refuse that can be known before sending.
    fn check(&self, job: &Job) -> Result<(), SendError> {
        let job_id = || job.id.clone();
        JobId::new(job.id.as_str()).map_err(|source| SendError::InvalidJobId {
            job_id: job_id(),
            source,
        })?;
        let count = if job.set_id_attribute {
            attributes_with_job_id(job.attributes.keys())
        } else {
            job.attributes.len()
        };
        if count > MAX_ATTRIBUTES {
            return Err(SendError::TooManyAttributes {
                job_id: job_id(),
                count,
            });
        }
        if job.size() > self.max_message_bytes {
            return Err(SendError::TooLarge {
                job_id: job_id(),
                bytes: job.size(),
                limit: self.max_message_bytes,
            });
        }
        if self.fifo && job.group_id.is_none() {
            return Err(SendError::MissingGroup { job_id: job_id() });
        }
        Ok(())
    }

    fn entry(&self, i: usize, job: &Job) -> Result<SendMessageBatchRequestEntry, String> {
        let mut attributes = job.attributes.clone();
        if job.set_id_attribute {
            let id_attr = MessageAttributeValue::builder()
                .data_type("String")
                .string_value(&job.id)
                .build()
                .map_err(|e| e.to_string())?;
            attributes.insert(JOB_ID_ATTRIBUTE.to_owned(), id_attr);
        }
        let mut e = SendMessageBatchRequestEntry::builder()
            .id(i.to_string())
            .message_body(&job.body)
            .set_message_attributes(Some(attributes))
            .set_message_group_id(job.group_id.clone());
        if self.fifo {
            let dedup = job
                .deduplication_id
                .clone()
                .unwrap_or_else(|| deduplication_id(&job.id));
            e = e.message_deduplication_id(dedup);
        }
        e.build().map_err(|e| e.to_string())
    }

    async fn send_with_retries(
        &self,
        jobs: &[Job],
        batch: Vec<usize>,
    ) -> Vec<(usize, Result<String, SendError>)> {
        let call = |entries| async move {
            let out = self
                .sqs
                .send_message_batch()
                .queue_url(&self.queue_url)
                .set_entries(Some(entries))
                .send()
                .await
                .map_err(|e| DisplayErrorContext(e).to_string())?;
            let sent = out.successful().iter().map(|ok| EntryAnswer::Sent {
                id: ok.id().to_owned(),
                message_id: ok.message_id().to_owned(),
            });
            let failed = out.failed().iter().map(|f| EntryAnswer::Failed {
                id: f.id().to_owned(),
                code: f.code().to_owned(),
                message: f.message().unwrap_or("").to_owned(),
                refused: f.sender_fault() || INVALID_MESSAGE_CODES.contains(&f.code()),
            });
            Ok(sent.chain(failed).collect())
        };
        // SendMessageBatch promises a result for every entry, in
        // `Successful` or `Failed`
        // (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SendMessageBatch.html>).
        send_batch_with_retries(
            "SendMessageBatch",
            jobs,
            batch,
            |i, j| self.entry(i, j),
            call,
        )
        .await
    }
}
