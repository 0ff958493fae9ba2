//! What a dead letter is: the message as received ([`DeadMessage`]) and
//! why it died ([`Context`]), read from its attributes and its failure
//! record. Apart from the reader, which only receives and releases them.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_sdk_sqs::types::{MessageAttributeValue, MessageSystemAttributeName as Sys};
use serde::Serialize;

use crate::dead_letter::{
    ATTR_ATTEMPTS, ATTR_BACKTRACE, ATTR_DEPLOY, ATTR_ERROR, ATTR_FAILED_AT, ATTR_SOURCE_QUEUE,
    parse_deploy,
};
use crate::failure::FailureRecord;
use crate::job::{InvalidJobId, JOB_ID_ATTRIBUTE, JobIdResolver, JobIdSource};

/// A message in a DLQ, as received.
#[derive(Debug, Clone, PartialEq)]
pub struct DeadMessage {
    /// Its `MessageId` in the DLQ.
    pub message_id: String,
    /// The receipt handle of the receive that returned it.
    pub receipt_handle: String,
    /// The body, as sent.
    pub body: String,
    /// Its message attributes.
    pub attributes: HashMap<String, MessageAttributeValue>,
    /// Its system attributes (`SentTimestamp`, `MessageGroupId`,
    /// `DeadLetterQueueSourceArn`, …).
    pub system: HashMap<Sys, String>,
}

impl DeadMessage {
    /// A received message, or `None` if SQS left out its id or handle.
    pub fn from_sdk(m: &aws_sdk_sqs::types::Message) -> Option<Self> {
        Some(Self {
            message_id: m.message_id()?.to_owned(),
            receipt_handle: m.receipt_handle()?.to_owned(),
            body: m.body().unwrap_or_default().to_owned(),
            attributes: m.message_attributes().cloned().unwrap_or_default(),
            system: m.attributes().cloned().unwrap_or_default(),
        })
    }

    fn attr(&self, name: &str) -> Option<&str> {
        self.attributes.get(name)?.string_value()
    }

    /// The `idemq-job-id` attribute, if any.
    pub fn job_id(&self) -> Option<&str> {
        self.attr(JOB_ID_ATTRIBUTE)
    }

    /// The `idemq-source-queue` attribute idemq's own dead-lettering sets.
    /// Any sender can set it too: trust it only where SQS confirms it.
    pub fn source_queue_attribute(&self) -> Option<&str> {
        self.attr(ATTR_SOURCE_QUEUE)
    }

    /// `MessageGroupId` (FIFO).
    pub fn group_id(&self) -> Option<&str> {
        self.system.get(&Sys::MessageGroupId).map(String::as_str)
    }

    /// `MessageDeduplicationId` (FIFO).
    pub fn deduplication_id(&self) -> Option<&str> {
        self.system
            .get(&Sys::MessageDeduplicationId)
            .map(String::as_str)
    }

    /// The queue SQS's redrive moved it from (not set on messages idemq
    /// dead-lettered itself: those carry `idemq-source-queue`).
    pub fn source_arn(&self) -> Option<&str> {
        self.system
            .get(&Sys::DeadLetterQueueSourceArn)
            .map(String::as_str)
    }

    /// Its `SentTimestamp`: when idemq sent it to the DLQ; for a message
    /// SQS's redrive moved there, when it was first sent to its *standard*
    /// source queue (a FIFO DLQ resets it)
    /// (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/setting-up-dead-letter-queue-retention.html>:
    /// "When a message is moved to a dead-letter queue, the enqueue
    /// timestamp is unchanged").
    pub fn sent_at(&self) -> Option<SystemTime> {
        let ms: u64 = self.system.get(&Sys::SentTimestamp)?.parse().ok()?;
        Some(UNIX_EPOCH + Duration::from_millis(ms))
    }

    /// The `idemq-first-enqueued` attribute: when the job's first copy was
    /// enqueued, carried by every copy idemq makes (its own dead letters, a
    /// redrive, an import). `None` if absent or not epoch milliseconds.
    pub fn first_enqueued_attribute(&self) -> Option<SystemTime> {
        self.attr(crate::job::FIRST_ENQUEUED_ATTRIBUTE)
            .and_then(crate::batch::epoch_ms)
    }

    /// When the letter's job was first enqueued, at the latest: its
    /// `idemq-first-enqueued`, else its `SentTimestamp`, less
    /// `unstamped_shift` unless SQS's redrive moved it into a *standard*
    /// DLQ (`fifo_dlq` false and `DeadLetterQueueSourceArn` set). Only
    /// there does `SentTimestamp` keep the job's first enqueue: "For
    /// standard queues, [...] When a message is moved to a dead-letter
    /// queue, the enqueue timestamp is unchanged", while "For FIFO queues,
    /// the enqueue timestamp resets when the message is moved to a
    /// dead-letter queue"
    /// (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/setting-up-dead-letter-queue-retention.html>);
    /// and a letter that idemq sent without the attribute (before it
    /// carried one, or with no slot left for it) was sent when it died. In
    /// both cases the job sat at most its source queue's retention on that
    /// queue first: `unstamped_shift` is that retention, so the age is
    /// never understated.
    pub fn first_enqueued(&self, fifo_dlq: bool, unstamped_shift: Duration) -> Option<SystemTime> {
        if let Some(at) = self.first_enqueued_attribute() {
            return Some(at);
        }
        let sent = self.sent_at()?;
        if !fifo_dlq && self.source_arn().is_some() {
            return Some(sent);
        }
        Some(sent.checked_sub(unstamped_shift).unwrap_or(UNIX_EPOCH))
    }

    /// Its `ApproximateFirstReceiveTimestamp`: when some reader first
    /// received it, by SQS's clock; so no later than SQS's "now" at any
    /// receive that returned it.
    pub fn first_received_at(&self) -> Option<SystemTime> {
        let ms: u64 = self
            .system
            .get(&Sys::ApproximateFirstReceiveTimestamp)?
            .parse()
            .ok()?;
        Some(UNIX_EPOCH + Duration::from_millis(ms))
    }

    /// The job id the consumer resolved for this message, and where it
    /// came from: the `idemq-job-id` attribute, else the body pointer, else
    /// the MessageId. For a message SQS's own redrive moved here, the
    /// MessageId is the one the consumer saw: SQS moves the message itself
    /// to the DLQ (its enqueue timestamp unchanged,
    /// <https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/setting-up-dead-letter-queue-retention.html>;
    /// on FIFO its deduplication id becomes "the original message's ID"),
    /// and only a move *back* mints a new MessageId
    /// (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-configure-dead-letter-queue-redrive.html>).
    /// `tests/dlq_cli.rs` measures it on the local stack.
    pub fn resolve(&self, resolver: &JobIdResolver) -> Result<(String, JobIdSource), InvalidJobId> {
        // The resolver warns when the pointer finds nothing, a warning for
        // the consumer: the CLI stamps the MessageId on every copy it sends,
        // so the warning would be wrong here, and once per message.
        tracing::subscriber::with_default(tracing::subscriber::NoSubscriber::default(), || {
            resolver.resolve(self.job_id(), &self.body, &self.message_id)
        })
        .map(|(id, from)| (id.as_str().to_owned(), from))
    }

    /// The key its failure record is stored under, as the consumer wrote it:
    /// `(resolved job id, message id)`, or `(None, message id)` when no
    /// valid job id resolves.
    pub fn record_key(&self, resolver: &JobIdResolver) -> (Option<String>, String) {
        (
            self.resolve(resolver).ok().map(|(id, _)| id),
            self.message_id.clone(),
        )
    }
}

/// Why a dead letter died, from its failure record and its own attributes
/// (the record wins: it has the whole chain).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Context {
    /// The job id, when one could be resolved.
    pub job_id: Option<String>,
    /// The DLQ `MessageId`.
    pub message_id: String,
    /// Attempts made, from the failure record or `idemq-attempts`.
    pub attempts: Option<u32>,
    /// The outermost error of the last attempt.
    pub last_error: Option<String>,
    /// The rest of its `source()` chain, outermost first.
    pub error_chain: Vec<String>,
    /// When the last attempt failed (without a record or attribute: the
    /// message's [`DeadMessage::sent_at`]).
    #[serde(serialize_with = "ser_time")]
    pub failed_at: Option<SystemTime>,
    /// The source queue's name.
    pub source_queue: Option<String>,
    /// Which deploy failed it ([`crate::failure::deploy`]), from the
    /// failure record or `idemq-deploy`.
    pub deploy: Option<String>,
    /// The idemq version of the consumer that failed it.
    pub idemq_version: Option<String>,
    /// Where it failed (a handler's error or panic): the user's frames
    /// first, from the failure record or `idemq-backtrace`.
    pub backtrace: Option<String>,
    /// The body's size in bytes (never the body itself).
    pub payload_bytes: usize,
    /// Whether the consumer's failure record of this letter was found
    /// (else the context is only what the letter's attributes carry).
    pub failure_record: bool,
}

fn ser_time<S: serde::Serializer>(t: &Option<SystemTime>, s: S) -> Result<S::Ok, S::Error> {
    match t {
        Some(t) => s.serialize_str(&humantime::format_rfc3339_millis(*t).to_string()),
        None => s.serialize_none(),
    }
}

impl Context {
    /// `job_id`: the id the consumer resolved (see [`DeadMessage::resolve`]).
    pub fn of(msg: &DeadMessage, job_id: Option<&str>, record: Option<&FailureRecord>) -> Self {
        let source_from_arn = msg
            .source_arn()
            .and_then(|a| a.rsplit(':').next())
            .map(str::to_owned);
        Self {
            job_id: job_id
                .or(msg.job_id())
                .map(str::to_owned)
                .or_else(|| record.and_then(|r| r.job_id.clone())),
            message_id: msg.message_id.clone(),
            attempts: record
                .map(|r| r.attempt)
                .or_else(|| msg.attr(ATTR_ATTEMPTS).and_then(|a| a.parse().ok())),
            last_error: record
                .map(|r| r.failure.error.clone())
                .or_else(|| msg.attr(ATTR_ERROR).map(str::to_owned)),
            error_chain: record.map(|r| r.failure.chain.clone()).unwrap_or_default(),
            failed_at: record
                .map(|r| r.failed_at)
                .or_else(|| {
                    msg.attr(ATTR_FAILED_AT)
                        .and_then(|t| humantime::parse_rfc3339(t).ok())
                })
                .or_else(|| msg.sent_at()),
            // The consumer's record, then SQS's own DeadLetterQueueSourceArn,
            // and only then the attribute, which any sender can write.
            source_queue: record
                .map(|r| r.source_queue.clone())
                .filter(|q| !q.is_empty())
                .or(source_from_arn)
                .or_else(|| msg.attr(ATTR_SOURCE_QUEUE).map(str::to_owned)),
            deploy: record
                .map(|r| r.deploy.clone())
                .or_else(|| msg.attr(ATTR_DEPLOY).map(|a| parse_deploy(a).0))
                .filter(|d| !d.is_empty()),
            idemq_version: record
                .map(|r| r.idemq_version.clone())
                .or_else(|| msg.attr(ATTR_DEPLOY).map(|a| parse_deploy(a).1))
                .filter(|v| !v.is_empty()),
            backtrace: record
                .map(|r| r.failure.backtrace.clone())
                .unwrap_or_else(|| msg.attr(ATTR_BACKTRACE).map(str::to_owned))
                .filter(|b| !b.is_empty()),
            payload_bytes: msg.body.len(),
            failure_record: record.is_some(),
        }
    }

    /// Which deploy failed it, on one line: `7 (idemq 0.1.0)`, `-` where
    /// neither is known.
    pub fn deploy_line(&self) -> String {
        match (self.deploy.as_deref(), self.idemq_version.as_deref()) {
            (None, None) => "-".to_owned(),
            (Some(d), None) => d.to_owned(),
            (d, Some(v)) => format!("{} (idemq {v})", d.unwrap_or("-")),
        }
    }

    /// Which deploy failed it, as `idemq dlq stats` counts letters by
    /// deploy: `7, idemq 0.1.0` (the `idemq-deploy` attribute's form),
    /// `(unknown)` where neither is known.
    pub fn deploy_label(&self) -> String {
        let value = crate::dead_letter::deploy_value(
            self.deploy.as_deref().unwrap_or(""),
            self.idemq_version.as_deref().unwrap_or(""),
        );
        if value.is_empty() {
            "(unknown)".into()
        } else {
            value
        }
    }

    /// The error and its chain on one line.
    pub fn error_line(&self) -> String {
        let mut parts: Vec<&str> = self.last_error.iter().map(String::as_str).collect();
        parts.extend(self.error_chain.iter().map(String::as_str));
        parts.join(": ").replace(['\n', '\r'], " ")
    }
}
