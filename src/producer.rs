//! The sending half: every job enters the queue with a stable id.
//!
//! Effectively-once starts at the producer. A producer that retries after a
//! timeout sends the job twice; only if both copies carry the same
//! `idemq-job-id` can a consumer tell them apart. [`Producer`] sets it, and
//! on FIFO queues also the group and a deduplication id derived from the
//! job id, so SQS itself drops a copy sent within its 5-minute window.

use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::time::Duration;

use aws_sdk_sqs::error::DisplayErrorContext;
use aws_sdk_sqs::types::{MessageAttributeValue, QueueAttributeName, SendMessageBatchRequestEntry};
use futures_util::{StreamExt, stream};
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::backoff::Backoff;
use crate::job::{IDEMQ_ATTRIBUTE_PREFIX, InvalidJobId, JOB_ID_ATTRIBUTE, JobId};

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
/// Tries of one entry before it is reported failed.
const MAX_ATTEMPTS: u32 = 6;
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
/// Batches in flight at once on a standard queue or topic (FIFO: one, for
/// order).
const CONCURRENCY: usize = 4;
const RETRY_BACKOFF: Backoff = Backoff::new()
    .with_base(Duration::from_millis(100))
    .with_cap(Duration::from_secs(5));

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

/// What both producers (SQS's [`Producer`] and SNS's `TopicProducer`) do
/// with a list of jobs: refuse before any request what `check` refuses,
/// pack the rest into calls of at most 10 entries and `max_bytes`, send
/// those calls with `send` (which retries its own failed entries), one
/// call at a time for FIFO (order within a group holds only then), and
/// answer one result per job, in input order.
pub(crate) async fn send_in_batches<Fut>(
    jobs: &[Job],
    check: impl Fn(&Job) -> Result<(), SendError>,
    max_bytes: usize,
    fifo: bool,
    send: impl Fn(Vec<usize>) -> Fut,
) -> Vec<Result<String, SendError>>
where
    Fut: std::future::Future<Output = Vec<(usize, Result<String, SendError>)>>,
{
    let mut results: Vec<Option<Result<String, SendError>>> =
        jobs.iter().map(|j| check(j).err().map(Err)).collect();
    let valid: Vec<usize> = (0..jobs.len()).filter(|&i| results[i].is_none()).collect();
    let sizes: Vec<usize> = valid.iter().map(|&i| jobs[i].size()).collect();
    let batches: Vec<Vec<usize>> = pack(&sizes, max_bytes)
        .into_iter()
        .map(|r| valid[r].to_vec())
        .collect();
    let concurrency = if fifo { 1 } else { CONCURRENCY };
    let sent: Vec<Vec<(usize, Result<String, SendError>)>> = stream::iter(batches)
        .map(send)
        .buffered(concurrency)
        .collect()
        .await;
    for (i, r) in sent.into_iter().flatten() {
        results[i] = Some(r);
    }
    jobs.iter()
        .zip(results)
        .map(|(j, r)| {
            // `send` answers every index it is given; should that ever
            // break, the job is reported, never a panic.
            r.unwrap_or_else(|| {
                Err(SendError::GaveUp {
                    job_id: j.id.clone(),
                    attempts: 0,
                    last_error: "no result recorded for this job".into(),
                })
            })
        })
        .collect()
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

/// Splits entries of the given sizes, in order, into batches of at most
/// `MAX_BATCH_ENTRIES` and at most `max_bytes` in all.
pub(crate) fn pack(sizes: &[usize], max_bytes: usize) -> Vec<Range<usize>> {
    let mut batches = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, &size) in sizes.iter().enumerate() {
        if i > start && (i - start == MAX_BATCH_ENTRIES || bytes + size > max_bytes) {
            batches.push(start..i);
            (start, bytes) = (i, 0);
        }
        bytes += size;
    }
    if start < sizes.len() {
        batches.push(start..sizes.len());
    }
    batches
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

/// What one batch call (`SendMessageBatch`, SNS's `PublishBatch`) answered
/// for one of its entries.
pub(crate) enum EntryAnswer {
    /// Sent, with the id the service gave the message.
    Sent { id: String, message_id: String },
    /// Not sent. `refused`: the service refused the entry itself (its
    /// contents, size or attributes), so a retry cannot pass.
    Failed {
        id: String,
        code: String,
        message: String,
        refused: bool,
    },
}

/// Sends the jobs at `batch` (indexes into `jobs`, which are also the
/// entries' ids) with `call`, up to `MAX_ATTEMPTS` times with backoff,
/// retrying only what can pass: a whole call that failed (throttling,
/// network: nothing is known to be sent), an entry that failed on the
/// service's side, and an entry the answer leaves out of both lists (not
/// known to be sent: retried, since a second copy is what job ids are
/// for). Each entry is answered once, by the first result naming it; an id
/// that names no pending entry is ignored. One result per index of
/// `batch`: the message id, or why the job was not sent.
pub(crate) async fn send_batch_with_retries<E, Fut>(
    op: &str,
    jobs: &[Job],
    batch: Vec<usize>,
    entry: impl Fn(usize, &Job) -> Result<E, String>,
    call: impl Fn(Vec<E>) -> Fut,
) -> Vec<(usize, Result<String, SendError>)>
where
    Fut: Future<Output = Result<Vec<EntryAnswer>, String>>,
{
    let mut done = Vec::with_capacity(batch.len());
    let mut pending = batch;
    let mut last_error = String::new();
    for attempt in 1..=MAX_ATTEMPTS {
        if attempt > 1 {
            // The clock's jitter source: seeded in the simulation, so a run
            // replays exactly (it drifted by milliseconds here). The delay
            // is drawn before the await: the generator is not Send.
            let delay = crate::clock::with_jitter(|r| RETRY_BACKOFF.delay(attempt - 1, r));
            tokio::time::sleep(delay).await;
        }
        let entries: Result<Vec<E>, String> = pending.iter().map(|&i| entry(i, &jobs[i])).collect();
        let answers = match entries {
            Ok(entries) => call(entries).await,
            Err(e) => {
                last_error = e;
                break;
            }
        };
        let answers = match answers {
            Ok(answers) => answers,
            Err(e) => {
                last_error = e;
                continue;
            }
        };
        let mut unanswered: HashSet<usize> = pending.iter().copied().collect();
        let mut answer = |id: &str| id.parse::<usize>().ok().filter(|i| unanswered.remove(i));
        let mut retry = Vec::new();
        for a in answers {
            match a {
                EntryAnswer::Sent { id, message_id } => {
                    if let Some(i) = answer(&id) {
                        done.push((i, Ok(message_id)));
                    }
                }
                EntryAnswer::Failed {
                    id,
                    code,
                    message,
                    refused,
                } => {
                    let Some(i) = answer(&id) else {
                        continue;
                    };
                    if refused {
                        let job_id = jobs[i].id.clone();
                        done.push((
                            i,
                            Err(SendError::Rejected {
                                job_id,
                                code,
                                message,
                            }),
                        ));
                    } else {
                        // Retried alone: on a FIFO queue it then lands after
                        // the later messages of its group that did go
                        // through. Rare (service-side faults), and the
                        // alternative, holding back the rest of the group,
                        // cannot undo what was sent.
                        last_error = format!("{code}: {message}");
                        retry.push(i);
                    }
                }
            }
        }
        if !unanswered.is_empty() {
            let mut missing: Vec<usize> = unanswered.into_iter().collect();
            missing.sort_unstable();
            last_error = format!(
                "{op} left {} entries out of both Successful and Failed",
                missing.len()
            );
            retry.extend(missing);
            retry.sort_unstable();
        }
        pending = retry;
        if pending.is_empty() {
            return done;
        }
    }
    done.extend(pending.into_iter().map(|i| {
        let err = SendError::GaveUp {
            job_id: jobs[i].id.clone(),
            attempts: MAX_ATTEMPTS,
            last_error: last_error.clone(),
        };
        (i, Err(err))
    }));
    done
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_job_id_attribute_is_counted_once() {
        let names = ["a".to_string(), "idemq-job-id".to_string()];
        assert_eq!(attributes_with_job_id(&names), 2);
        assert_eq!(spare_attribute_slots(&names), 8);
        let none: [String; 0] = [];
        assert_eq!(attributes_with_job_id(&none), 1);
        let full: Vec<String> = (0..10).map(|i| format!("a{i}")).collect();
        assert_eq!(
            spare_attribute_slots(&full),
            0,
            "already over: no slot left"
        );
    }

    #[test]
    fn packing_respects_ten_entries_and_the_size_limit() {
        assert_eq!(pack(&[1; 25], 1000), vec![0..10, 10..20, 20..25]);
        assert_eq!(pack(&[400, 400, 400, 100], 1000), vec![0..2, 2..4]);
        assert_eq!(pack(&[1000, 1, 1000], 1000), vec![0..1, 1..2, 2..3]);
        assert_eq!(pack(&[], 1000), Vec::<Range<usize>>::new());
        // An entry alone over the limit still gets a batch (check() refuses
        // such jobs before packing; pack never loops or drops one).
        assert_eq!(pack(&[2000], 1000), vec![0..1]);
        let sizes: Vec<usize> = (0..97).map(|i| (i * 37) % 300 + 1).collect();
        let batches = pack(&sizes, 1000);
        assert_eq!(batches.iter().map(|r| r.len()).sum::<usize>(), 97);
        for r in &batches {
            assert!(r.len() <= 10 && sizes[r.clone()].iter().sum::<usize>() <= 1000);
        }
    }

    #[test]
    fn fifo_deduplication_ids_fit_and_are_stable() {
        assert_eq!(deduplication_id("a-1"), "a-1");
        let long = "j".repeat(129);
        let h = deduplication_id(&long);
        assert_eq!(h.len(), 64);
        assert_eq!(h, deduplication_id(&long));
        assert_ne!(h, deduplication_id(&"j".repeat(130)));
        assert_eq!(deduplication_id(&"j".repeat(128)), "j".repeat(128));
        // Non-ASCII and spaces are not accepted by SQS in dedup ids: hashed.
        assert_eq!(deduplication_id("café").len(), 64);
        assert_eq!(deduplication_id("a b").len(), 64);
    }

    fn producer(fifo: bool, max: usize) -> Producer {
        let conf = aws_sdk_sqs::Config::builder()
            .behavior_version(aws_sdk_sqs::config::BehaviorVersion::latest())
            .region(aws_sdk_sqs::config::Region::new("us-east-1"))
            .build();
        Producer {
            sqs: aws_sdk_sqs::Client::from_conf(conf),
            queue_url: "q".into(),
            fifo,
            max_message_bytes: max,
        }
    }

    #[test]
    fn refusals_name_the_job_and_the_limit() {
        let p = producer(false, 100);
        let err = p.check(&Job::raw("big-1", "x".repeat(100))).unwrap_err();
        assert!(matches!(&err, SendError::TooLarge { limit: 100, .. }));
        assert!(
            err.to_string().contains("\"big-1\"") && err.to_string().contains("at most 100"),
            "{err}"
        );

        let err = p.check(&Job::raw("", "{}")).unwrap_err();
        assert!(err.to_string().contains("job id is empty"), "{err}");

        let mut job = Job::raw("many", "{}");
        for i in 0..10 {
            let v = MessageAttributeValue::builder()
                .data_type("String")
                .string_value("v")
                .build()
                .unwrap();
            job.attributes.insert(format!("a{i}"), v);
        }
        let err = p.check(&job).unwrap_err();
        assert_eq!(
            err,
            SendError::TooManyAttributes {
                job_id: "many".into(),
                count: 11
            }
        );

        let err = producer(true, 1000)
            .check(&Job::raw("f-1", "{}"))
            .unwrap_err();
        assert!(err.to_string().contains("no message group"), "{err}");
        assert!(
            producer(true, 1000)
                .check(&Job::raw("f-1", "{}").in_group("g"))
                .is_ok()
        );
    }

    #[test]
    fn size_counts_body_and_attributes() {
        let job = Job::raw("id", "12345");
        assert_eq!(job.size(), 5 + JOB_ID_ATTRIBUTE.len() + "String".len() + 2);
    }
}
